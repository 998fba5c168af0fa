//! Interruption recovery: before sealing a job that timed out, was cancelled or
//! failed, write one terminal event for every recoverable start whose lifecycle never closed.
//!
//! Recoverable starts are `review.batch`, `review.item`, `review.retry`, `apply.batch` and
//! `apply.action` events with status `started`. A lifecycle is the start's operation, attempt,
//! event type and subject identity. The terminal event (`event_key` scope
//! `workflow.interrupted`) says whether a mutation may have happened (`mutation`,
//! `completion_reason` `mutation_outcome_unknown` / `dispatch_outcome_unknown`), names the most
//! specific parent (an open uncertain-mutation receipt, the last unknown-outcome mutation, the
//! last lifecycle mutation of an `apply.action`, the last mutation outcome, else the start), and
//! takes the first free `phase_seq` after start and parent (batch-level starts reserve
//! 1,000,000). The rules mirror the reference runtime so that both produce the same bytes.
//!
//! Every event goes through the same write path as `record` (seal check, partition marker from
//! the producer's existing marker, create-only file), so running recovery twice writes nothing
//! new: a closed lifecycle is skipped.

use std::cmp::Ordering;
use std::path::Path;

use crate::canonical::{self, Value};
use crate::event::{self, Event};
use crate::identity::{self, Digest};
use crate::time::Timestamp;
use crate::writer::lock;
use crate::writer::record;
use crate::writer::spool::{self, Spool};

/// Why interrupted lifecycles are closed (`--reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The job ran out of time (`--reason timeout`).
    Timeout,
    /// The run was cancelled (`--reason cancelled`).
    Cancelled,
    /// An earlier step of the workflow failed (`--reason workflow_failed`).
    WorkflowFailed,
}

impl Reason {
    /// The reason code written into the terminal events.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Timeout => "timeout",
            Reason::Cancelled => "cancelled",
            Reason::WorkflowFailed => "workflow_failed",
        }
    }

    /// Parses `timeout`, `cancelled` or `workflow_failed`.
    pub fn parse(s: &str) -> Option<Reason> {
        match s {
            "timeout" => Some(Reason::Timeout),
            "cancelled" => Some(Reason::Cancelled),
            "workflow_failed" => Some(Reason::WorkflowFailed),
            _ => None,
        }
    }
}

/// Why recovery failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Listing or reading the spool failed.
    #[error(transparent)]
    Spool(#[from] spool::Error),
    /// Writing a terminal event through the `record` path failed (seal, marker, conflict).
    #[error(transparent)]
    Record(#[from] record::Error),
    /// A spooled event, or the terminal event built from it, failed event validation.
    #[error(transparent)]
    Event(#[from] event::Error),
    /// An identity derivation for the terminal event failed (event key, repository).
    #[error(transparent)]
    Identity(#[from] identity::Error),
    /// The producer lock could not be taken or released.
    #[error(transparent)]
    Lock(#[from] lock::Error),
    /// The producer (digest carried) has spooled starts but no partition marker, so the
    /// terminal events have no partition date; the spool was not written by `record`, or was
    /// damaged.
    #[error("action event partition marker is missing for producer {0}")]
    MissingMarker(Digest),
    /// No free `phase_seq` below 2^53 - 1 remains after the start and its parent.
    #[error("action event phase sequence exhausted during interruption recovery")]
    PhaseSeqExhausted,
}

impl Error {
    /// True when recovery refused because of what the spool holds (a conflicting terminal
    /// event, a sealed producer: [`record::Error::is_conflict`]); exit 1 in the CLI.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Error::Record(r) if r.is_conflict())
    }
}

/// A spool event with its record's tree: recovery reads many fields of the few events of one
/// producer, so the tree is parsed once per event here.
#[derive(Clone)]
struct Recorded {
    event: Event,
    value: Value,
}

impl Recorded {
    fn new(event: Event) -> Recorded {
        Recorded {
            value: event.record(),
            event,
        }
    }
}

impl std::ops::Deref for Recorded {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.event
    }
}

fn str_at<'a>(e: &'a Recorded, path: &[&str]) -> Option<&'a str> {
    let mut v = &e.value;
    for k in path {
        v = v.get(k)?;
    }
    v.as_str()
}

fn status(e: &Recorded) -> &str {
    str_at(e, &["action", "status"]).unwrap_or("")
}

fn completion_reason(e: &Recorded) -> Option<&str> {
    str_at(e, &["attributes", "completion_reason"])
}

fn phase_seq(e: &Recorded) -> i64 {
    e.value
        .get("phase_seq")
        .and_then(Value::as_safe_integer)
        .unwrap_or(0)
}

fn is_mutation(e: &Recorded) -> bool {
    e.value
        .get("action")
        .and_then(|a| a.get("mutation"))
        .and_then(Value::as_bool)
        == Some(true)
}

fn is_recoverable_start(e: &Recorded) -> bool {
    matches!(
        e.event_type(),
        "review.batch" | "review.item" | "review.retry" | "apply.batch" | "apply.action"
    ) && status(e) == "started"
}

fn is_uncertain_mutation_start(e: &Recorded) -> bool {
    status(e) == "started"
        && matches!(
            completion_reason(e),
            Some("mutation_attempted" | "dispatch_attempted")
        )
}

fn is_mutation_outcome(e: &Recorded) -> bool {
    matches!(
        completion_reason(e),
        Some("mutation_accepted" | "mutation_rejected" | "mutation_outcome_unknown")
    )
}

/// Batch-level starts aggregate their children's mutations.
fn aggregates(e: &Recorded) -> bool {
    matches!(e.event_type(), "review.batch" | "apply.batch")
        || (e.event_type() == "review.retry" && str_at(e, &["subject", "kind"]) == Some("workflow"))
}

fn priority(e: &Recorded) -> u8 {
    if is_uncertain_mutation_start(e) {
        0
    } else if aggregates(e) {
        2
    } else {
        1
    }
}

fn same_attempt(a: &Recorded, b: &Recorded) -> bool {
    a.value.get("operation_id") == b.value.get("operation_id")
        && a.value.get("attempt_id") == b.value.get("attempt_id")
}

/// `{repository, kind, subjectId?, number?, clusterId?}` of the event's subject.
fn subject_identity(e: &Recorded) -> Value {
    let s = e.value.get("subject").cloned().unwrap_or(Value::Null);
    let mut out = std::collections::BTreeMap::new();
    for (from, to) in [
        ("repository", "repository"),
        ("kind", "kind"),
        ("subject_id", "subjectId"),
        ("number", "number"),
        ("cluster_id", "clusterId"),
    ] {
        if let Some(v) = s.get(from) {
            out.insert(to.to_owned(), v.clone());
        }
    }
    Value::Object(out.into())
}

fn lifecycle_key(e: &Recorded) -> String {
    canonical::to_canonical_unchecked(&Value::object([
        ("operationId", operation_id(e)),
        (
            "attemptId",
            e.value.get("attempt_id").cloned().unwrap_or(Value::Null),
        ),
        ("eventType", Value::str(e.event_type())),
        ("subject", subject_identity(e)),
    ]))
}

fn idempotency(e: &Recorded) -> &str {
    str_at(e, &["idempotency_key_sha256"]).unwrap_or("")
}

/// Whether `event` closes the lifecycle opened by `start`.
fn closes(start: &Recorded, event: &Recorded) -> bool {
    if phase_seq(event) <= phase_seq(start) || status(event) == "started" {
        return false;
    }
    if is_uncertain_mutation_start(start) {
        return event.parent_event_id.as_ref() == Some(&start.event_id)
            && idempotency(event) == idempotency(start);
    }
    if matches!(start.event_type(), "apply.action" | "review.item")
        && is_mutation_outcome(event)
        && idempotency(event) != idempotency(start)
    {
        return false;
    }
    !(event.event_type() == "apply.action"
        && status(event) == "executed"
        && !is_uncertain_mutation_start(start))
}

/// The event's `operation_id`, `null` when it has none.
fn operation_id(e: &Recorded) -> Value {
    e.value.get("operation_id").cloned().unwrap_or(Value::Null)
}

/// The events that `keep` selects, in phase sequence order (ties by event id).
fn in_seq_order<'a>(
    events: impl IntoIterator<Item = &'a Recorded>,
    keep: impl Fn(&Recorded) -> bool,
) -> Vec<&'a Recorded> {
    let mut kept: Vec<&Recorded> = events.into_iter().filter(|e| keep(e)).collect();
    kept.sort_by(by_seq_then_id);
    kept
}

fn by_seq_then_id(a: &&Recorded, b: &&Recorded) -> Ordering {
    phase_seq(a)
        .cmp(&phase_seq(b))
        .then_with(|| a.event_id.cmp(&b.event_id))
}

fn interrupted_phase_seq(
    current: &[Recorded],
    start: &Recorded,
    parent: &Digest,
) -> Result<i64, Error> {
    let parent_seq = current
        .iter()
        .find(|e| &e.event_id == parent)
        .map_or(phase_seq(start), phase_seq);
    let reserved = if aggregates(start) { 1_000_000 } else { 0 };
    let mut seq = reserved.max(phase_seq(start) + 1).max(parent_seq + 1);
    let occupied: std::collections::HashSet<i64> = current
        .iter()
        .filter(|e| same_attempt(e, start))
        .map(phase_seq)
        .collect();
    while occupied.contains(&seq) {
        if seq as f64 >= canonical::MAX_SAFE_INTEGER {
            return Err(Error::PhaseSeqExhausted);
        }
        seq += 1;
    }
    Ok(seq)
}

/// The reference's writer-input form of a stored producer / subject / evidence / privacy.
fn camel(v: Option<&Value>, names: &[(&str, &str)]) -> Value {
    let v = v.cloned().unwrap_or(Value::Null);
    Value::Object(
        names
            .iter()
            .filter_map(|(from, to)| v.get(from).map(|x| ((*to).to_owned(), x.clone())))
            .collect(),
    )
}

fn terminal_input(
    current: &[Recorded],
    start: &Recorded,
    reason: Reason,
) -> Result<Option<Value>, Error> {
    let key = lifecycle_key(start);
    let lifecycle: Vec<&Recorded> = current
        .iter()
        .filter(|e| e.event_id != start.event_id && lifecycle_key(e) == key)
        .collect();
    if lifecycle.iter().any(|e| closes(start, e)) {
        return Ok(None);
    }
    let start_subject = canonical::to_canonical_unchecked(&subject_identity(start));
    let uncertain_starts = in_seq_order(current, |e| {
        same_attempt(e, start)
            && (aggregates(start)
                || canonical::to_canonical_unchecked(&subject_identity(e)) == start_subject)
            && is_uncertain_mutation_start(e)
    });
    let mutations = in_seq_order(current, |e| same_attempt(e, start) && is_mutation(e));
    let lifecycle_mutations = in_seq_order(lifecycle.iter().copied(), is_mutation);
    let lifecycle_mutation = lifecycle_mutations.last().copied();
    let lifecycle_outcome = in_seq_order(lifecycle.iter().copied(), is_mutation_outcome)
        .last()
        .copied();
    let open_uncertain: Vec<&Recorded> = uncertain_starts
        .iter()
        .copied()
        .filter(|u| {
            let k = lifecycle_key(u);
            !current
                .iter()
                .any(|c| c.event_id != u.event_id && lifecycle_key(c) == k && closes(u, c))
        })
        .collect();
    let start_uncertain = is_uncertain_mutation_start(start);
    let open_uncertain_mutation = start_uncertain || !open_uncertain.is_empty();
    let relevant = if aggregates(start) {
        &mutations
    } else {
        &lifecycle_mutations
    };
    let unknown_outcome = relevant.iter().copied().rfind(|e| {
        matches!(
            completion_reason(e),
            Some("mutation_outcome_unknown" | "dispatch_outcome_unknown")
        )
    });
    let uncertain = open_uncertain_mutation || unknown_outcome.is_some();
    let mutation_occurred = start_uncertain
        || if aggregates(start) {
            !mutations.is_empty() || open_uncertain_mutation
        } else {
            lifecycle_mutation.is_some() || open_uncertain_mutation
        };
    let open_receipt = if start_uncertain {
        Some(start)
    } else {
        open_uncertain.last().copied()
    };
    let parent = open_receipt
        .or(unknown_outcome)
        .or(if start.event_type() == "apply.action" {
            lifecycle_mutation
        } else {
            None
        })
        .or(lifecycle_outcome)
        .unwrap_or(start)
        .event_id
        .clone();
    let event_key = identity::event_key(
        "workflow.interrupted",
        &Value::object([
            ("startEventId", Value::str(start.event_id.as_str())),
            ("reasonCode", Value::str(reason.code())),
            ("mutationOccurred", Value::Bool(mutation_occurred)),
        ]),
    )?;
    let idempotency_key = if start_uncertain || start.event_type() == "apply.action" {
        idempotency(start).to_owned()
    } else {
        identity::idempotency_key(&Value::object([
            ("operationId", operation_id(start)),
            ("slot", Value::str("interrupted_terminal")),
            ("eventType", Value::str(start.event_type())),
            ("subject", subject_identity(start)),
        ]))?
        .to_string()
    };
    let completion = if uncertain {
        if start.event_type() == "review.retry" {
            "dispatch_outcome_unknown"
        } else {
            "mutation_outcome_unknown"
        }
    } else {
        reason.code()
    };
    let mut attributes = vec![
        ("completion_reason", Value::str(completion)),
        ("failed_count", Value::from(1)),
        ("partial", Value::Bool(true)),
    ];
    if mutation_occurred {
        attributes.push(("action_count", Value::from(1)));
    }
    let mut input = vec![
        ("eventKey", Value::String(event_key)),
        ("operationId", operation_id(start)),
        (
            "attemptId",
            start
                .value
                .get("attempt_id")
                .cloned()
                .unwrap_or(Value::Null),
        ),
        ("parentEventId", Value::str(parent.as_str())),
        (
            "phaseSeq",
            Value::from(interrupted_phase_seq(current, start, &parent)?),
        ),
        ("idempotencyKeySha256", Value::String(idempotency_key)),
        ("type", Value::str(start.event_type())),
        (
            "producer",
            camel(
                start.value.get("producer"),
                &[
                    ("repository", "repository"),
                    ("sha", "sha"),
                    ("workflow", "workflow"),
                    ("job", "job"),
                    ("run_id", "runId"),
                    ("run_attempt", "runAttempt"),
                    ("component", "component"),
                ],
            ),
        ),
        (
            "subject",
            camel(
                start.value.get("subject"),
                &[
                    ("repository", "repository"),
                    ("kind", "kind"),
                    ("subject_id", "subjectId"),
                    ("number", "number"),
                    ("cluster_id", "clusterId"),
                    ("source_revision", "sourceRevision"),
                    ("record_path", "recordPath"),
                ],
            ),
        ),
        (
            "action",
            Value::object([
                ("name", Value::str(start.event_type())),
                (
                    "status",
                    Value::str(if reason == Reason::Cancelled {
                        "cancelled"
                    } else {
                        "failed"
                    }),
                ),
                ("reasonCode", Value::str(reason.code())),
                ("retryable", Value::Bool(!uncertain)),
                ("mutation", Value::Bool(mutation_occurred)),
            ]),
        ),
        ("attributes", Value::object(attributes)),
        (
            "privacy",
            camel(
                start.value.get("privacy"),
                &[
                    ("classification", "classification"),
                    ("redaction_version", "redactionVersion"),
                    ("fields_dropped", "fieldsDropped"),
                ],
            ),
        ),
    ];
    if let Some(Value::Array(list)) = start.value.get("evidence") {
        let names = [
            ("kind", "kind"),
            ("sha256", "sha256"),
            ("report_path", "reportPath"),
            ("run_url", "runUrl"),
            ("snapshot_id", "snapshotId"),
        ];
        input.push((
            "evidence",
            Value::Array(list.iter().map(|e| camel(Some(e), &names)).collect()),
        ));
    }
    Ok(Some(Value::object(input)))
}

/// Writes the terminal events for every open recoverable start in the spool; returns how many
/// were written. `now` is the writer clock for `recorded_at`.
pub fn interrupt_open_attempts(
    root: &Path,
    reason: Reason,
    now: Timestamp,
) -> Result<usize, Error> {
    interrupt_open_attempts_events(root, reason, now).map(|written| written.len())
}

/// [`interrupt_open_attempts`], returning the terminal events written (in writing order), so
/// that live projection can post them as the reference does.
pub fn interrupt_open_attempts_events(
    root: &Path,
    reason: Reason,
    now: Timestamp,
) -> Result<Vec<Event>, Error> {
    let spool = Spool::open(root)?;
    let mut producers: Vec<(String, Value)> = Vec::new();
    for e in spool.read_all()?.into_iter().map(Recorded::new) {
        let key = e.producer().canonical();
        if is_recoverable_start(&e) && !producers.iter().any(|(k, _)| *k == key) {
            producers.push((key, e.producer().to_value()));
        }
    }
    producers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut written = Vec::new();
    for (key, producer) in producers {
        // Under the producer's lock: no writer of this producer runs between
        // reading its events and writing the terminal events.
        let guards = lock::acquire_producers(
            spool.handle(),
            std::slice::from_ref(&producer),
            now,
            &lock::Options::default(),
        )?;
        let mut current: Vec<Recorded> = spool
            .read_all()?
            .into_iter()
            .filter(|e| e.producer().canonical() == key)
            .map(Recorded::new)
            .collect();
        let mut starts: Vec<Recorded> = current
            .iter()
            .filter(|e| is_recoverable_start(e))
            .cloned()
            .collect();
        starts.sort_by(|a, b| {
            priority(a)
                .cmp(&priority(b))
                .then_with(|| by_seq_then_id(&a, &b))
        });
        let digest = spool::producer_digest(&producer);
        for start in &starts {
            let Some(input) = terminal_input(&current, start, reason)? else {
                continue;
            };
            let candidate = event::create(&input, &now.to_iso_millis(), None)?;
            let date = spool
                .partition_date(&digest)?
                .ok_or_else(|| Error::MissingMarker(digest.clone()))?;
            let event = record::write_event_locked(spool.handle(), &candidate, &date)?;
            current.push(Recorded::new(event.clone()));
            written.push(event);
        }
        lock::release_all(guards)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{copy_files, files_under};
    use std::collections::BTreeMap;

    fn corpus(job: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/corpus/day1/spools")
            .join(job)
    }

    /// Job 017 timed out; the reference wrote four `workflow.interrupted` events at
    /// 2026-03-10T14:09:52.118Z. Removing them (and the seals) and recovering again with the same
    /// clock reproduces them byte for byte; a second run writes nothing.
    #[test]
    fn reproduces_reference_interrupted_events() {
        let src = corpus("017-openclaw-clawsweeper-review-r13550726447-a1");
        let dir = tempfile::tempdir().unwrap();
        let is_interrupted = |bytes: &[u8]| {
            String::from_utf8_lossy(bytes).contains("\"event_key\":\"workflow.interrupted:")
        };
        copy_files(&src, dir.path(), |rel, bytes| {
            !rel.contains("_finalizations") && !is_interrupted(bytes)
        });
        let now = 1_773_151_792_118; // 2026-03-10T14:09:52.118Z
        assert_eq!(event::iso_millis(now), "2026-03-10T14:09:52.118Z");
        let interrupt = || {
            let now = crate::time::Timestamp::from_millis(now);
            interrupt_open_attempts(dir.path(), Reason::Timeout, now).unwrap()
        };
        assert_eq!(interrupt(), 4);
        let expected: BTreeMap<_, _> = files_under(&src)
            .into_iter()
            .filter(|(rel, _)| !rel.contains("_finalizations"))
            .collect();
        assert_eq!(files_under(dir.path()), expected);
        assert_eq!(interrupt(), 0);
    }

    /// Job 008 failed with every lifecycle closed: recovery writes nothing.
    #[test]
    fn closed_lifecycles_need_no_terminal_event() {
        let src = corpus("008-openclaw-clawsweeper-repair-worker-r13550308979-a1");
        let dir = tempfile::tempdir().unwrap();
        copy_files(&src, dir.path(), |rel, _| !rel.contains("_finalizations"));
        let before = files_under(dir.path());
        assert_eq!(
            interrupt_open_attempts(
                dir.path(),
                Reason::WorkflowFailed,
                crate::time::Timestamp::from_millis(0)
            )
            .unwrap(),
            0
        );
        assert_eq!(files_under(dir.path()), before);
    }
}
