//! Recording events into a spool: the reference's writer APIs.
//!
//! Two input shapes, both JSON objects with the reference's camelCase names:
//! - the phase API (`recordWorkflowPhaseEvent`): `phase`, `status`, `reasonCode?`, `retryable`,
//!   `mutation`, `identity`, `component`, `subject`, and optionally `operation`,
//!   `operationIdentity`, `attemptIdentity`, `parentEventId`, `phaseSeq`, `idempotencyIdentity`,
//!   `learning`, `evidence`, `attributes`, `privacy`, `occurredAt`. Phase, status and reason code
//!   must be in the reference's vocabularies;
//! - the generic action API (`recordWorkflowActionEvent`): `scope`, `identity`, `type`,
//!   `component`, `subject`, `action{name,status,reasonCode?,retryable,mutation}` and the same
//!   optional fields.
//!
//! Derivations (the reference runtime): operation = `operation` or the scope's first dot segment;
//! `operation_id = actionOperationId(subject.repository, operation, operationIdentity ?? subject)`;
//! `attempt_id = actionAttemptId(operation_id, attemptIdentity ?? {repository, workflow, runId,
//! runAttempt})` of the producer; `event_key = actionEventKey(scope, {attemptId, phaseSeq,
//! producer: {job, component}, identity})`; idempotency = `idempotencyIdentity ?? {operationId,
//! scope, identity}` (a mutation must give one explicitly). The producer comes from the GitHub
//! Actions environment, the partition date from
//! `CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE` or `GITHUB_RUN_STARTED_AT`.
//!
//! Writing: the seal check (a sealed producer accepts only exact replays), the
//! create-only partition marker, then the create-only event file; an existing file must be
//! replay-equal (then the existing event is returned) or the write is a conflict. Nothing is
//! written unless the event is valid and the partition date is known, and, under the default
//! strict privacy profile ([`Options::privacy`]), free of the strict-only rules
//! ([`check_privacy`]), which run after every check of the reference.
//!
//! # Check order
//!
//! A call is checked in the reference's order and the first failure is returned, with the
//! reference's message under both profiles (the strict profile's own rules come last):
//!
//! 1. recording enabled, else nothing happens (`Ok(None)`);
//! 2. for the phase API, the phase, the status and the reason code against their vocabularies,
//!    then the identity is present;
//! 3. the event is built ([`build_action_event`]):
//!    1. a mutation names its `idempotencyIdentity`;
//!    2. the producer from the environment ([`resolve_producer`]): the repository, the
//!       workflow, step and invocation as machine identifiers, the sha, job and run id, the run
//!       attempt, the component as a machine identifier; the parts are joined, and are not
//!       scanned on their own (the reference does not);
//!    3. the identity derivations (the order in [`crate::identity`]): the operation id (subject
//!       repository, operation scope, operation identity), the attempt id, the event key (its
//!       scope, then the key identity), the idempotency key;
//!    4. the event's own field rules, in the order of [`event::create`], where the composed
//!       producer component is machine text like the producer's other fields;
//! 4. the partition date;
//! 5. the spool: the seal, the partition marker (it must hold the same date), an existing event
//!    file (replay-equal, else a conflict);
//! 6. the strict profile's own rules ([`check_privacy`]; none under
//!    [`Profile::Reference`]): a refusal names a strict-only rule id;
//! 7. under the producer's lock, step 5 again and the writes: the seal, the partition marker
//!    (created when missing), then the create-only event file (an existing one must be
//!    replay-equal).
//!
//! Under the reference profile steps 5 and 6 are skipped (step 7 makes the same checks);
//! under strict, step 5 reads only, without the lock, so a strict refusal writes nothing.
//!
//! Layout: `vocabulary` (the phase API's vocabularies), `producer` (what the job's environment
//! says: the producer, the partition date), `build` (the event, and the strict pass over it),
//! `write` (into the spool under the producer's lock); this module holds the entry points.

mod build;
mod producer;
mod vocabulary;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::canonical::Value;
use crate::event::{self, Event};
use crate::identity::{self, Digest};
use crate::privacy::{self, Profile};
use crate::time::Timestamp;
use crate::writer::files::{self, Root};
use crate::writer::lock;
use crate::writer::spool;

use build::build;
use write::check_spool;

pub use build::{build_action_event, check_privacy, phase_action_input};
pub use producer::{
    COMPONENT_PART_MAX, INVOCATION_PART_MAX, ProducerPart, ResolvedProducer, RunField,
    STEP_PART_MAX, WORKFLOW_PART_MAX, enabled, machine_identifier, partition_date,
    resolve_producer, run_field_from_env,
};
pub use vocabulary::{PHASE_TYPES, REASON_CODES, STATUSES};
pub use write::{Outcome, write_event, write_event_locked};

/// The environment variables a writer consults (captured by the caller).
pub type Environment = BTreeMap<String, String>;

/// Why an event was not recorded; texts are the reference's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The phase API's `phase` is not in [`PHASE_TYPES`].
    #[error("unknown action event phase type: {0}")]
    UnknownPhase(String),
    /// `status` is not in [`STATUSES`].
    #[error("unknown action event status: {0}")]
    UnknownStatus(String),
    /// `reasonCode` is not in [`REASON_CODES`].
    #[error("unknown action event reason code: {0}")]
    UnknownReason(String),
    /// `mutation` is true but no `idempotencyIdentity` was given: a mutation must name what
    /// makes two attempts the same side effect, so it cannot fall back to the derived one.
    #[error("mutation action events require an explicit idempotencyIdentity")]
    MutationWithoutIdempotency,
    /// A GitHub Actions variable (named) that the producer identity needs is unset or blank.
    #[error("{0} is required for action event telemetry")]
    EnvRequired(&'static str),
    /// The named variable (`GITHUB_RUN_ATTEMPT`) is not a safe integer ≥ 1.
    #[error("{0} must be a positive integer")]
    EnvNotPositive(&'static str),
    /// `GITHUB_REPOSITORY` is not an `owner/name` repository.
    #[error("invalid GITHUB_REPOSITORY for action event telemetry: {0}")]
    EnvRepository(String),
    /// A producer identifier ([`machine_identifier`]) has no allowed character left.
    #[error("workflow action identifier is required")]
    IdentifierRequired,
    /// A partition date (the variable or the marker named) is not exactly a `YYYY-MM-DD`
    /// calendar date.
    #[error("{0} must be YYYY-MM-DD")]
    NotCalendarDate(String),
    /// `GITHUB_RUN_STARTED_AT`, used for the partition date, is not an ISO date-time.
    #[error("GITHUB_RUN_STARTED_AT must be an ISO date-time timestamp")]
    RunStartedAt,
    /// Neither `CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE` nor `GITHUB_RUN_STARTED_AT` is set,
    /// so the partition date is unknown and nothing is written.
    #[error(
        "action event partitioning requires CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE or GITHUB_RUN_STARTED_AT"
    )]
    NoPartition,
    /// The producer's partition marker holds another date than this event's; one producer
    /// run belongs to one partition date (a refusal: exit 1).
    #[error("action event partition marker conflict: {recorded} != {expected}")]
    MarkerConflict {
        /// The date in the existing marker.
        recorded: String,
        /// The date this event would be partitioned under.
        expected: String,
    },
    /// The producer is sealed and this event is not an exact replay of a sealed one; start a
    /// new invocation to record more (a refusal: exit 1).
    #[error(
        "action event producer is already finalized; use a new CLAWSWEEPER_ACTION_LEDGER_INVOCATION"
    )]
    AlreadyFinalized,
    /// The producer's seal file exists but is not a valid seal for it; inspect and remove it.
    #[error("invalid action event producer finalization: {0}")]
    InvalidSeal(PathBuf),
    /// An event file with the same id exists and is not replay-equal to the candidate: the
    /// event key was reused for a different event (a refusal: exit 1).
    #[error("action event conflict at {path}: {existing} != {candidate}")]
    Conflict {
        /// The existing event file.
        path: PathBuf,
        /// The semantic digest of the existing event (of the empty string when the file
        /// cannot be read back as an event).
        existing: Digest,
        /// The semantic digest of the new event.
        candidate: Digest,
    },
    /// The input has no `identity` (the JSON path carried); the reference fails the same way
    /// when hashing `undefined`.
    #[error("action event data contains a non-JSON value at {0}")]
    MissingIdentity(&'static str),
    /// An input field has the wrong JSON type.
    #[error("{field} must be {what}")]
    InputShape {
        /// The input's field name.
        field: &'static str,
        /// The expected type, e.g. `a string`.
        what: &'static str,
    },
    /// The strict privacy profile found a value of one of its families in the event; nothing
    /// was written.
    #[error(
        "action event {0}, which the strict privacy profile refuses: keep the value out of the event (revoke or rotate it if it is a credential), or record with --privacy reference"
    )]
    StrictPrivacy(privacy::strict::Finding),
    /// The built event failed event validation (field rules, limits).
    #[error(transparent)]
    Event(#[from] event::Error),
    /// An identity derivation failed (repository, scope, event key, run attempt).
    #[error(transparent)]
    Identity(#[from] identity::Error),
    /// Reading or writing the spool failed at the file layer.
    #[error(transparent)]
    File(#[from] files::Error),
    /// The producer lock could not be taken or released.
    #[error(transparent)]
    Lock(#[from] lock::Error),
}

impl Error {
    /// True for refusals that depend on what the spool already holds (exit 1 in the CLI).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            Error::MarkerConflict { .. } | Error::AlreadyFinalized | Error::Conflict { .. }
        )
    }

    /// True when the command ran and refused (exit 1 in the CLI): a conflict
    /// ([`Error::is_conflict`]) or a strict-privacy refusal; anything else is an input or I/O
    /// error.
    pub fn is_refusal(&self) -> bool {
        self.is_conflict() || matches!(self, Error::StrictPrivacy(_))
    }
}

/// Knobs of [`record_phase`] and [`record_action`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// The privacy profile (default [`Profile::Strict`]). Under strict, an event that the
    /// reference accepts but [`privacy::strict::RULES`] refuses is [`Error::StrictPrivacy`] and
    /// nothing is written; [`Profile::Reference`] records exactly what the reference records.
    pub privacy: Profile,
}

/// `recordWorkflowPhaseEvent`: validates phase, status and reason code against the
/// vocabularies, then records through [`record_action`] with scope = type = action name = phase
/// and key identity `{phase, status, reasonCode?, identity}`. `Ok(None)` when disabled.
pub fn record_phase(
    root: &Path,
    input: &Value,
    env: &Environment,
    now: Timestamp,
    options: &Options,
) -> Result<Option<Event>, Error> {
    record_phase_outcome(root, input, env, now, options).map(|r| r.map(|(e, _)| e))
}

/// [`record_phase`], also saying whether the event was written now or already recorded.
///
/// # Errors
/// As [`record_phase`].
pub fn record_phase_outcome(
    root: &Path,
    input: &Value,
    env: &Environment,
    now: Timestamp,
    options: &Options,
) -> Result<Option<(Event, Outcome)>, Error> {
    record_phase_outcome_with(root, input, env, now, options, &mut |_, _| {})
}

/// [`record_phase_outcome`], calling `before_write` with the opened spool root and the checked
/// candidate just before it is written (live projection reserves its outbox entry there, so a
/// kill between the event and its request leaves a trace, [`crate::live::outbox`]).
///
/// # Errors
/// As [`record_phase`].
pub fn record_phase_outcome_with(
    root: &Path,
    input: &Value,
    env: &Environment,
    now: Timestamp,
    options: &Options,
    before_write: &mut dyn FnMut(&Root, &Event),
) -> Result<Option<(Event, Outcome)>, Error> {
    match phase_action_input(input) {
        // The reference hashes `identity: undefined` only when recording is enabled.
        Err(Error::MissingIdentity(_)) if !enabled(env) => Ok(None),
        generic => record_action_outcome_with(root, &generic?, env, now, options, before_write),
    }
}

/// `recordWorkflowActionEvent`: builds the event, resolves the partition date, then writes
/// (seal check, partition marker, create-only event file), applying the privacy profile
/// ([`check_privacy`]) after every check of the reference and before anything is written.
/// Returns the persisted event (the existing one on an exact replay), or `Ok(None)` when
/// recording is disabled.
pub fn record_action(
    root: &Path,
    input: &Value,
    env: &Environment,
    now: Timestamp,
    options: &Options,
) -> Result<Option<Event>, Error> {
    record_action_outcome(root, input, env, now, options).map(|r| r.map(|(e, _)| e))
}

/// [`record_action`], also saying whether the event was written now or already recorded.
///
/// The checks come in the order of the module docs (# Check order).
///
/// # Errors
/// As [`record_action`].
pub fn record_action_outcome(
    root: &Path,
    input: &Value,
    env: &Environment,
    now: Timestamp,
    options: &Options,
) -> Result<Option<(Event, Outcome)>, Error> {
    record_action_outcome_with(root, input, env, now, options, &mut |_, _| {})
}

/// [`record_action_outcome`] with a `before_write` hook, as [`record_phase_outcome_with`].
///
/// # Errors
/// As [`record_action`].
pub fn record_action_outcome_with(
    root: &Path,
    input: &Value,
    env: &Environment,
    now: Timestamp,
    options: &Options,
    before_write: &mut dyn FnMut(&Root, &Event),
) -> Result<Option<(Event, Outcome)>, Error> {
    if !enabled(env) {
        return Ok(None);
    }
    let (candidate, producer) = build(input, env, now)?;
    let date = partition_date(env)?;
    let root = Root::open(root, spool::ROOT_LABEL)?;
    if options.privacy != Profile::Reference {
        // The reference's checks of what the spool holds, read-only and before the lock, so
        // that a strict refusal leaves the spool untouched; they run again under the lock.
        check_spool(&root, &candidate, &date)?;
        check_privacy(&candidate, &producer, options.privacy)?;
    }
    before_write(&root, &candidate);
    write_event(&root, &candidate, &date, now).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical;

    fn base_env() -> Environment {
        crate::tests::job_env()
    }

    fn base_input() -> Value {
        canonical::parse(
            r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":1},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":1},"retryable":true,"mutation":false}"#,
        )
        .unwrap()
    }

    fn set(v: &mut Value, path: &[&str], x: Value) {
        let Value::Object(m) = v else {
            panic!("object")
        };
        if path.len() == 1 {
            m.insert(path[0].to_owned(), x);
        } else {
            let child = m
                .entry(path[0].to_owned())
                .or_insert_with(|| Value::Object(Default::default()));
            set(child, &path[1..], x);
        }
    }

    /// Where a value can land in a durable record, and whether it passes through the
    /// reference's identifier hashing (`machineIdentifier`) first.
    enum Place {
        Input(&'static [&'static str], fn(&str) -> Value),
        Generic(&'static [&'static str]),
        Env(&'static str),
        Hashed(Option<&'static str>),
    }

    fn places() -> Vec<(&'static str, Place)> {
        fn s(v: &str) -> Value {
            Value::str(v)
        }
        fn in_records(v: &str) -> Value {
            Value::String(format!("records/{v}"))
        }
        fn arr(v: &str) -> Value {
            Value::Array(vec![Value::str(v)])
        }
        fn learn(k: &str, v: &str) -> Value {
            let mut l = BTreeMap::from([
                ("category".to_owned(), Value::str("c")),
                ("signal".to_owned(), Value::str("s")),
            ]);
            l.insert(k.to_owned(), Value::str(v));
            Value::Object(l.into())
        }
        fn ev(k: &str, v: &str) -> Value {
            Value::Array(vec![Value::object([
                ("kind", Value::str("k")),
                (k, Value::str(v)),
            ])])
        }
        vec![
            (
                "subject.subjectId",
                Place::Input(&["subject", "subjectId"], s),
            ),
            (
                "subject.clusterId",
                Place::Input(&["subject", "clusterId"], s),
            ),
            (
                "subject.sourceRevision",
                Place::Input(&["subject", "sourceRevision"], s),
            ),
            (
                "subject.recordPath",
                Place::Input(&["subject", "recordPath"], s),
            ),
            (
                "subject.recordPath (records/…)",
                Place::Input(&["subject", "recordPath"], in_records),
            ),
            (
                "learning.category",
                Place::Input(&["learning"], |v| learn("category", v)),
            ),
            (
                "learning.signal",
                Place::Input(&["learning"], |v| learn("signal", v)),
            ),
            (
                "learning.ruleId",
                Place::Input(&["learning"], |v| learn("ruleId", v)),
            ),
            (
                "evidence.kind",
                Place::Input(&["evidence"], |v| {
                    Value::Array(vec![Value::object([("kind", Value::str(v))])])
                }),
            ),
            (
                "evidence.snapshotId",
                Place::Input(&["evidence"], |v| ev("snapshotId", v)),
            ),
            (
                "evidence.reportPath",
                Place::Input(&["evidence"], |v| ev("reportPath", v)),
            ),
            (
                "evidence.reportPath (records/…)",
                Place::Input(&["evidence"], |v| ev("reportPath", &format!("records/{v}"))),
            ),
            (
                "evidence.runUrl",
                Place::Input(&["evidence"], |v| ev("runUrl", v)),
            ),
            (
                "attributes.model",
                Place::Input(&["attributes", "model"], s),
            ),
            (
                "attributes.state[]",
                Place::Input(&["attributes", "state"], arr),
            ),
            (
                "privacy.redactionVersion",
                Place::Input(&["privacy"], |v| {
                    Value::object([
                        ("classification", Value::str("internal")),
                        ("redactionVersion", Value::str(v)),
                        ("fieldsDropped", Value::Array(vec![])),
                    ])
                }),
            ),
            (
                "privacy.fieldsDropped[]",
                Place::Input(&["privacy"], |v| {
                    Value::object([
                        ("classification", Value::str("internal")),
                        ("redactionVersion", Value::str("v1")),
                        ("fieldsDropped", arr(v)),
                    ])
                }),
            ),
            ("occurredAt", Place::Input(&["occurredAt"], s)),
            ("operation", Place::Input(&["operation"], s)),
            ("action.name", Place::Generic(&["action", "name"])),
            ("action.status", Place::Generic(&["action", "status"])),
            (
                "action.reasonCode",
                Place::Generic(&["action", "reasonCode"]),
            ),
            ("type", Place::Generic(&["type"])),
            ("scope", Place::Generic(&["scope"])),
            ("GITHUB_JOB", Place::Env("GITHUB_JOB")),
            ("GITHUB_RUN_ID", Place::Env("GITHUB_RUN_ID")),
            ("GITHUB_SHA", Place::Env("GITHUB_SHA")),
            ("component", Place::Hashed(None)),
            ("GITHUB_WORKFLOW", Place::Hashed(Some("GITHUB_WORKFLOW"))),
            ("GITHUB_ACTION", Place::Hashed(Some("GITHUB_ACTION"))),
            (
                "CLAWSWEEPER_ACTION_LEDGER_INVOCATION",
                Place::Hashed(Some("CLAWSWEEPER_ACTION_LEDGER_INVOCATION")),
            ),
        ]
    }

    /// The generic-API input and environment that put `value` at `place`.
    fn inputs(place: &Place, value: &str) -> Result<(Value, Environment), Error> {
        let mut input = base_input();
        let mut env = base_env();
        match place {
            Place::Input(path, make) => set(&mut input, path, make(value)),
            Place::Env(name) | Place::Hashed(Some(name)) => {
                env.insert((*name).to_owned(), value.to_owned());
            }
            Place::Hashed(None) => set(&mut input, &["component"], Value::str(value)),
            Place::Generic(path) => {
                let mut generic = phase_action_input(&input)?;
                set(&mut generic, path, Value::str(value));
                return Ok((generic, env));
            }
        }
        Ok((phase_action_input(&input)?, env))
    }

    /// The event the reference's writer builds with `value` at `place`.
    fn build(place: &Place, value: &str) -> Result<Event, Error> {
        let (input, env) = inputs(place, value)?;
        build_action_event(&input, &env, crate::time::Timestamp::from_millis(0))
    }

    /// [`build`], then the privacy profile as [`record_action`] applies it.
    fn build_with(place: &Place, value: &str, profile: Profile) -> Result<Event, Error> {
        let (input, env) = inputs(place, value)?;
        let (event, producer) = super::build(&input, &env, crate::time::Timestamp::from_millis(0))?;
        check_privacy(&event, &producer, profile)?;
        Ok(event)
    }

    /// The places of [`places`] that hold machine text, with their length limit.
    const MACHINE_TEXT: [(&str, usize); 17] = [
        ("subject.subjectId", 256),
        ("subject.clusterId", 256),
        ("subject.sourceRevision", 256),
        ("learning.category", 256),
        ("learning.signal", 256),
        ("learning.ruleId", 256),
        ("evidence.kind", 256),
        ("evidence.snapshotId", 256),
        ("attributes.model", 256),
        ("attributes.state[]", 256),
        ("privacy.redactionVersion", 256),
        ("privacy.fieldsDropped[]", 256),
        ("action.name", 256),
        ("type", 256),
        ("GITHUB_JOB", 128),
        ("GITHUB_RUN_ID", 256),
        ("GITHUB_SHA", 256),
    ];

    /// Whether `records/<value>` is a relative data path of portable segments (the relative
    /// data path rule), so that the `(records/…)` places can hold it.
    fn path_safe(value: &str) -> bool {
        value.split('/').all(|seg| {
            let b = seg.as_bytes();
            !b.is_empty()
                && b.len() <= 255
                && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"._+@-".contains(c))
                && (b.len() == 1 || !seg.ends_with('.'))
        })
    }

    /// Where the reference must accept a value that passes its rules: machine-text places within
    /// their length limit, the `(records/…)` places when it forms path segments, the places
    /// that turn it into an identifier, and a run URL's owner when it fits there.
    fn reference_holds(name: &str, value: &str) -> bool {
        let machine = MACHINE_TEXT
            .iter()
            .any(|(n, max)| *n == name && value.len() <= *max);
        let owner = value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            && value != "."
            && value != "..";
        machine
            || (name.ends_with("(records/…)") && path_safe(value))
            || (name == "evidence.runUrl (owner)" && owner)
            || matches!(
                name,
                "component"
                    | "GITHUB_WORKFLOW"
                    | "GITHUB_ACTION"
                    | "CLAWSWEEPER_ACTION_LEDGER_INVOCATION"
            )
    }

    /// [`places`] plus a run URL's owner segment, which the reference does not scan at all
    /// (`publicUrl`) but the strict walk does.
    fn strict_places() -> Vec<(&'static str, Place)> {
        let mut all = places();
        all.push((
            "evidence.runUrl (owner)",
            Place::Input(&["evidence"], |v| {
                Value::Array(vec![Value::object([
                    ("kind", Value::str("k")),
                    (
                        "runUrl",
                        Value::String(format!("https://github.com/{v}/r/actions/runs/1")),
                    ),
                ])])
            }),
        ));
        all
    }

    fn corpus(name: &str) -> Vec<(String, String)> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/privacy")
            .join(name);
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let v = canonical::parse(l).unwrap();
                (
                    v.get("family").and_then(Value::as_str).unwrap().to_owned(),
                    v.get("value").and_then(Value::as_str).unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// A value each place accepts, so that a refusal in the corpus tests is about the value.
    fn benign(name: &str) -> &'static str {
        match name {
            "subject.recordPath" => "records/x1",
            "evidence.reportPath" => "results/x1",
            "evidence.runUrl" => "https://github.com/o/r/actions/runs/1",
            "occurredAt" => "2026-01-15T00:00:00Z",
            _ => "x1",
        }
    }

    #[test]
    fn every_place_accepts_a_benign_value() {
        for (name, place) in places() {
            if let Err(e) = build(&place, benign(name)) {
                panic!("{name} refuses a benign value: {e}");
            }
        }
    }

    /// Every secret-shaped or private-host value of testdata/privacy/rejected.jsonl is refused in
    /// every durable text field; where the reference first hashes the value into an identifier,
    /// the value must at least never appear in the record. The parts joined into the producer
    /// component (component, step, invocation) are scanned by the reference only once joined,
    /// where a shape can vanish (`http://127.1.run-review.default`), so there the strict
    /// profile's scan of each part ([`privacy::strict::PRODUCER_PART_RULE`]) must refuse it.
    #[test]
    fn privacy_corpus_is_rejected_everywhere() {
        let rejected = corpus("rejected.jsonl");
        assert!(rejected.len() >= 200, "{}", rejected.len());
        let mut leaks = Vec::new();
        let joined = [
            "component",
            "GITHUB_ACTION",
            "CLAWSWEEPER_ACTION_LEDGER_INVOCATION",
        ];
        for (family, value) in &rejected {
            let escaped = canonical::to_canonical_unchecked(&Value::str(value));
            let escaped = &escaped[1..escaped.len() - 1];
            for (name, place) in places() {
                let built = if joined.contains(&name) {
                    build_with(&place, value, Profile::Strict)
                } else {
                    build(&place, value)
                };
                match (built, &place) {
                    (Err(_), _) => {}
                    (Ok(e), Place::Hashed(_)) if !e.json.contains(escaped) => {}
                    (Ok(_), _) => leaks.push(format!("{family} {value:?} accepted in {name}")),
                }
            }
        }
        crate::tests::assert_none("leaks", &leaks);
    }

    /// Near-misses (public hosts, versions, model names, hex ids, ordinary words) stay accepted in
    /// every machine-text field and, where they form a path segment, in relative paths.
    #[test]
    fn privacy_near_misses_are_accepted() {
        let accepted = corpus("accepted.jsonl");
        let mut refused = Vec::new();
        for (family, value) in &accepted {
            for (name, place) in places() {
                let expect = MACHINE_TEXT.iter().any(|(n, _)| *n == name)
                    || (name.ends_with("(records/…)") && path_safe(value))
                    || (family == "relative-path" && name.starts_with("subject.recordPath"));
                if expect && let Err(e) = build(&place, value) {
                    refused.push(format!("{family} {value:?} refused in {name}: {e}"));
                }
            }
        }
        crate::tests::assert_none("refused", &refused);
    }

    /// testdata/privacy/strict-rejected.jsonl: every value is beyond the reference (its
    /// confidential scan passes it, and the reference records it in every field kind that can
    /// hold it), and the strict profile refuses it in every durable text field kind, naming the
    /// value's family (the operation name, which is only hashed, may keep it if it is not
    /// stored).
    #[test]
    fn strict_corpus_is_refused_everywhere_and_accepted_by_the_reference() {
        let rejected = corpus("strict-rejected.jsonl");
        let families: std::collections::BTreeSet<&str> =
            rejected.iter().map(|(f, _)| f.as_str()).collect();
        assert!(rejected.len() >= 100, "{}", rejected.len());
        assert!(families.len() >= 40, "{families:?}");
        let mut problems = Vec::new();
        for (family, value) in &rejected {
            if privacy::contains_confidential_identifier(value) {
                problems.push(format!(
                    "{family} {value:?} is already refused by the reference (move it to rejected.jsonl)"
                ));
                continue;
            }
            for (name, place) in strict_places() {
                let held = reference_holds(name, value);
                match build_with(&place, value, Profile::Reference) {
                    Err(e) if held => problems.push(format!(
                        "{family} {value:?} refused by the reference in {name}: {e}"
                    )),
                    _ => {}
                }
                match build_with(&place, value, Profile::Strict) {
                    // The operation is only hashed into `operation_id`: not durable text.
                    Ok(e) if name == "operation" && !e.json.contains(value.as_str()) => {}
                    Ok(_) => problems.push(format!("{family} {value:?} accepted in {name}")),
                    Err(Error::StrictPrivacy(f)) if f.family != family => problems.push(format!(
                        "{family} {value:?} in {name} refused as {} ({})",
                        f.family, f.rule
                    )),
                    Err(Error::StrictPrivacy(_)) => {}
                    Err(e) if held => problems.push(format!(
                        "{family} {value:?} in {name} refused for another reason: {e}"
                    )),
                    Err(_) => {}
                }
            }
        }
        crate::tests::assert_none("problems", &problems);
    }

    /// testdata/privacy/near-miss.jsonl: values that are not secrets stay accepted under both
    /// profiles in every field kind that can hold them.
    #[test]
    fn near_misses_are_accepted_by_both_profiles() {
        let near = corpus("near-miss.jsonl");
        assert!(near.len() >= 100, "{}", near.len());
        let mut refused = Vec::new();
        for (family, value) in &near {
            for (name, place) in strict_places() {
                if !reference_holds(name, value) {
                    continue;
                }
                for profile in [Profile::Reference, Profile::Strict] {
                    if let Err(e) = build_with(&place, value, profile) {
                        refused.push(format!(
                            "{family} {value:?} refused in {name} ({profile}): {e}"
                        ));
                    }
                }
            }
        }
        crate::tests::assert_none("refused", &refused);
    }

    #[test]
    fn strict_refusal_names_the_field_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut input = base_input();
        set(
            &mut input,
            &["subject", "subjectId"],
            Value::str("AIzaSyA-1234567890abcdefghijklmnopqrstu"),
        );
        let err = record_phase(
            dir.path(),
            &input,
            &base_env(),
            crate::time::Timestamp::from_millis(NOW),
            &Options::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "action event $.subject.subject_id matches google-api-key (gitleaks:gcp-api-key), which the strict privacy profile refuses: keep the value out of the event (revoke or rotate it if it is a credential), or record with --privacy reference"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let reference = Options {
            privacy: Profile::Reference,
        };
        assert!(
            record_phase(
                dir.path(),
                &input,
                &base_env(),
                crate::time::Timestamp::from_millis(NOW),
                &reference
            )
            .unwrap()
            .is_some()
        );
        // A producer part that only its own scan sees: a long token cut to a prefix and a hash.
        let mut env = base_env();
        let key = format!("v1.0-{}-{}", "0a".repeat(12), "1b".repeat(73));
        env.insert("CLAWSWEEPER_ACTION_LEDGER_INVOCATION".into(), key);
        let err = record_phase(
            dir.path(),
            &base_input(),
            &env,
            crate::time::Timestamp::from_millis(NOW),
            &Options::default(),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with(
                "action event producer part CLAWSWEEPER_ACTION_LEDGER_INVOCATION matches cloudflare-origin-ca-key (gitleaks:cloudflare-origin-ca-key)"
            ),
            "{err}"
        );
    }

    /// Records the generic-API `input` with `env` into a fresh spool under `profile`: the
    /// result, and the number of entries the spool root holds afterwards.
    fn record_in_fresh_spool(
        input: &Value,
        env: &Environment,
        profile: Profile,
    ) -> (Result<Option<Event>, Error>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let result = record_action(
            dir.path(),
            input,
            env,
            crate::time::Timestamp::from_millis(NOW),
            &Options { privacy: profile },
        );
        (result, std::fs::read_dir(dir.path()).unwrap().count())
    }

    /// A producer part that the reference's scan flags only on its own (the reference scans the
    /// composed component, where it no longer matches) is stored by the reference profile and
    /// refused by strict, by its own rule, with nothing written.
    #[test]
    fn producer_parts_the_reference_stores_are_refused_only_by_strict() {
        let with_component = |component: &str| {
            let mut input = base_input();
            set(&mut input, &["component"], Value::str(component));
            phase_action_input(&input).unwrap()
        };
        let base_input = || phase_action_input(&base_input()).unwrap();
        let cases = [
            ("component", with_component("localhost"), base_env()),
            ("component", with_component("x.home."), base_env()),
            ("component", with_component("ci.internal"), base_env()),
            ("component", with_component("build.lan"), base_env()),
            ("GITHUB_ACTION", base_input(), {
                let mut env = base_env();
                env.insert("GITHUB_ACTION".into(), "localhost".into());
                env
            }),
            ("CLAWSWEEPER_ACTION_LEDGER_INVOCATION", base_input(), {
                let mut env = base_env();
                env.insert(
                    "CLAWSWEEPER_ACTION_LEDGER_INVOCATION".into(),
                    "intranet.example".into(),
                );
                env
            }),
        ];
        for (part, input, env) in cases {
            let (stored, _) = record_in_fresh_spool(&input, &env, Profile::Reference);
            let stored = stored
                .unwrap_or_else(|e| panic!("{part} {input} {env:?}: {e}"))
                .unwrap();
            assert!(
                !privacy::contains_confidential_identifier(&stored.producer().component),
                "{part}"
            );
            let (refused, entries) = record_in_fresh_spool(&input, &env, Profile::Strict);
            let Err(Error::StrictPrivacy(finding)) = refused else {
                panic!("{part}: {refused:?}")
            };
            assert_eq!(
                finding.rule,
                privacy::strict::PRODUCER_PART_RULE.id,
                "{part}"
            );
            assert_eq!(finding.path, format!("producer part {part}"));
            assert!(privacy::strict::is_strict_rule_id(finding.rule));
            assert_eq!(entries, 0, "{part}: nothing is written");
        }
    }

    /// Where the reference refuses, both profiles refuse with its message: the composed
    /// component is checked where the reference checks it, so an earlier fault of the reference
    /// (a scope, the producer sha) is the one reported.
    #[test]
    fn refusals_carry_the_references_reason_under_both_profiles() {
        let mut with_c_at_d = base_input();
        set(&mut with_c_at_d, &["component"], Value::str("c@d"));
        let c_at_d = phase_action_input(&with_c_at_d).unwrap();
        let mut sha_env = base_env();
        sha_env.insert("GITHUB_SHA".into(), "x@y".into());
        let mut scope = c_at_d.clone();
        set(&mut scope, &["scope"], Value::str("a/b"));
        let cases: [(&Value, &Environment, &str); 3] = [
            (
                &c_at_d,
                &base_env(),
                "action event producer component contains a confidential identifier",
            ),
            (
                &c_at_d,
                &sha_env,
                "action event producer sha contains a confidential identifier",
            ),
            (
                &scope,
                &base_env(),
                "action event scope must be machine-readable text",
            ),
        ];
        for (input, env, message) in cases {
            for profile in [Profile::Reference, Profile::Strict] {
                let err = record_in_fresh_spool(input, env, profile).0.unwrap_err();
                assert!(
                    err.to_string().starts_with(message),
                    "{profile}: {err} (want {message})"
                );
            }
        }
    }

    /// Strict runs after the spool's checks: a conflicting event is reported as a conflict
    /// under both profiles, even when strict would refuse the new event.
    #[test]
    fn strict_comes_after_the_spools_checks() {
        let dir = tempfile::tempdir().unwrap();
        let reference = Options {
            privacy: Profile::Reference,
        };
        let now = crate::time::Timestamp::from_millis(NOW);
        record_phase(dir.path(), &base_input(), &base_env(), now, &reference)
            .unwrap()
            .unwrap();
        // The learning is not in the event key: the same event id, another event.
        let mut changed = base_input();
        set(
            &mut changed,
            &["learning"],
            Value::object([
                ("category", Value::str("c")),
                (
                    "signal",
                    Value::str("AIzaSyA-1234567890abcdefghijklmnopqrstu"),
                ),
            ]),
        );
        for profile in [Profile::Reference, Profile::Strict] {
            let err = record_phase(
                dir.path(),
                &changed,
                &base_env(),
                now,
                &Options { privacy: profile },
            )
            .unwrap_err();
            assert!(matches!(err, Error::Conflict { .. }), "{profile}: {err}");
        }
    }

    #[test]
    fn machine_identifiers() {
        assert_eq!(
            machine_identifier("review-runner", 120).unwrap(),
            "review-runner"
        );
        assert_eq!(
            machine_identifier("ClawSweeper Review", 128).unwrap(),
            "ClawSweeper-Review-4fcad526aa0c"
        );
        assert!(matches!(
            machine_identifier(" !! ", 64),
            Err(Error::IdentifierRequired)
        ));
        let long = "a".repeat(70);
        let id = machine_identifier(&long, 64).unwrap();
        assert_eq!(id.len(), 64);
        assert!(id.starts_with(&"a".repeat(51)));
    }

    #[test]
    fn partition_dates() {
        let env = |k: &str, v: &str| Environment::from([(k.to_owned(), v.to_owned())]);
        assert_eq!(
            partition_date(&env("GITHUB_RUN_STARTED_AT", "2026-03-10T23:30:00-02:00")).unwrap(),
            "2026-03-11"
        );
        assert_eq!(
            partition_date(&env(
                "CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE",
                " 0099-02-28 "
            ))
            .unwrap(),
            "0099-02-28"
        );
        assert!(matches!(
            partition_date(&env(
                "CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE",
                "2026-2-01"
            )),
            Err(Error::NotCalendarDate(_))
        ));
        assert!(matches!(
            partition_date(&env("GITHUB_RUN_STARTED_AT", "0001-01-01T00:30:00+01:00")),
            Err(Error::NotCalendarDate(_))
        ));
        assert!(matches!(
            partition_date(&env("GITHUB_RUN_STARTED_AT", "2026-03-10T24:00:00Z")),
            Err(Error::RunStartedAt)
        ));
        assert!(matches!(
            partition_date(&Environment::new()),
            Err(Error::NoPartition)
        ));
    }

    const NOW: i64 = 1_768_480_496_000;

    /// The `i`-th distinct phase input (identity `{item: i}`).
    fn item_input(i: i64) -> Value {
        let mut input = base_input();
        set(&mut input, &["identity", "item"], Value::from(i));
        input
    }

    /// Child half of `two_processes_record_the_same_events`, which launches it (ignored in a
    /// normal run; it fails when `ACTION_LEDGER_TEST_RECORD_ROOT` is not set).
    #[test]
    #[ignore = "launched by two_processes_record_the_same_events"]
    fn record_child() {
        let dir = std::env::var("ACTION_LEDGER_TEST_RECORD_ROOT")
            .expect("ACTION_LEDGER_TEST_RECORD_ROOT names the directory to record in");
        let go = Path::new(&dir).join("go");
        while !go.exists() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        for i in 0..20 {
            let e = record_phase(
                Path::new(&dir),
                &item_input(i),
                &base_env(),
                crate::time::Timestamp::from_millis(NOW),
                &Options::default(),
            )
            .unwrap()
            .unwrap();
            println!("RESULT {}", e.event_id);
        }
    }

    /// Two processes record the same 20 events at the same moment (under the producer lock):
    /// both succeed with the same events, and the spool holds exactly one file per event, one
    /// partition marker, no staging file and no lock.
    #[test]
    fn two_processes_record_the_same_events() {
        let dir = tempfile::tempdir().unwrap();
        let outputs = crate::tests::race_two(
            module_path!(),
            "record_child",
            "ACTION_LEDGER_TEST_RECORD_ROOT",
            dir.path(),
        );
        let mut seen = Vec::new();
        for text in outputs {
            let ids: Vec<String> = text
                .split("RESULT ")
                .skip(1)
                .map(|r| r.split_whitespace().next().unwrap().to_owned())
                .collect();
            assert_eq!(ids.len(), 20, "{text}");
            seen.push(ids);
        }
        assert_eq!(seen[0], seen[1]);
        let files: Vec<String> = walkdir::WalkDir::new(dir.path().join(spool::SPOOL_DIR))
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| !e.file_type().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let events = files.iter().filter(|f| f.ends_with(".json")).count();
        assert_eq!(events, 20, "{files:?}");
        assert_eq!(files.len(), 21, "one marker, nothing else: {files:?}");
    }

    /// While events are recorded, a thread keeps swapping the spool root, its repository
    /// directory and its `_partitions` directory with links to look-alike outside directories.
    /// Every record either succeeds or is refused, and no byte lands outside.
    #[test]
    fn swaps_during_record_never_write_outside() {
        use std::os::fd::OwnedFd;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let base = tempfile::tempdir().unwrap();
        let spool_dir = base.path().join("spool");
        let outside = base.path().join("outside");
        // A probe record gives the layout; the outside trees copy it without files.
        std::fs::create_dir_all(base.path().join("probe")).unwrap();
        record_phase(
            &base.path().join("probe"),
            &item_input(0),
            &base_env(),
            crate::time::Timestamp::from_millis(NOW),
            &Options::default(),
        )
        .unwrap();
        for e in walkdir::WalkDir::new(base.path().join("probe")) {
            let e = e.unwrap();
            if e.file_type().is_dir() {
                let rel = e.path().strip_prefix(base.path().join("probe")).unwrap();
                std::fs::create_dir_all(outside.join("spool").join(rel)).unwrap();
                std::fs::create_dir_all(spool_dir.join(rel)).unwrap();
            }
        }
        let repo_dir = spool::repository_dir("openclaw/openclaw");
        let events = spool_dir.join(spool::SPOOL_DIR);
        std::fs::create_dir_all(outside.join("repo")).unwrap();
        std::fs::create_dir_all(outside.join("partitions")).unwrap();
        let open_dir = |p: &Path| -> OwnedFd {
            rustix::fs::open(
                p,
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .unwrap()
        };
        // (parent directory handle, real name, link name)
        let swaps: Vec<(OwnedFd, String, String)> = [
            (
                base.path().to_owned(),
                "spool".to_owned(),
                outside.join("spool"),
            ),
            (events.clone(), repo_dir.clone(), outside.join("repo")),
            (
                events.clone(),
                "_partitions".to_owned(),
                outside.join("partitions"),
            ),
        ]
        .into_iter()
        .map(|(parent, name, target)| {
            let link = format!("{name}-link");
            std::os::unix::fs::symlink(target, parent.join(&link)).unwrap();
            (open_dir(&parent), name, link)
        })
        .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for (dir, name, link) in &swaps {
                        n += u64::from(
                            rustix::fs::renameat_with(
                                dir,
                                name.as_str(),
                                dir,
                                link.as_str(),
                                rustix::fs::RenameFlags::EXCHANGE,
                            )
                            .is_ok(),
                        );
                    }
                    std::thread::yield_now();
                }
                n
            })
        };
        // At least 100 records, and more (bounded) until both outcomes were seen: how the
        // swaps interleave depends on the scheduler and the build's speed.
        let (mut ok, mut refused) = (0, 0);
        for i in 0..5_000 {
            if i >= 100 && ok > 0 && refused > 0 {
                break;
            }
            match record_phase(
                &spool_dir,
                &item_input(i),
                &base_env(),
                crate::time::Timestamp::from_millis(NOW),
                &Options::default(),
            ) {
                Ok(_) => ok += 1,
                Err(e) => {
                    refused += 1;
                    let text = e.to_string();
                    assert!(text.contains("refusing"), "record {i}: {text}");
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        assert!(swapper.join().unwrap() > 0);
        let leaked: Vec<_> = walkdir::WalkDir::new(&outside)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| !e.file_type().is_dir())
            .map(|e| e.into_path())
            .collect();
        assert_eq!(leaked, Vec::<PathBuf>::new());
        assert!(ok > 0 && refused > 0, "ok {ok}, refused {refused}");
    }

    /// A repeated record of the same event writes nothing and says so: phase and generic
    /// inputs, a replay at a later clock (the first `recorded_at` wins), a replay after the
    /// producer was sealed; a new event is recorded.
    #[test]
    fn replays_are_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let env = base_env();
        let o = Options::default();
        let phase = |now| record_phase_outcome(dir.path(), &base_input(), &env, now, &o);
        let (first, outcome) = phase(crate::time::Timestamp::from_millis(NOW))
            .unwrap()
            .unwrap();
        assert_eq!(outcome, Outcome::Recorded);
        let (again, outcome) = phase(crate::time::Timestamp::from_millis(NOW + 60_000))
            .unwrap()
            .unwrap();
        assert_eq!(
            (again.json.as_str(), outcome),
            (first.json.as_str(), Outcome::Unchanged)
        );
        let generic = phase_action_input(&base_input()).unwrap();
        let (via_generic, outcome) = record_action_outcome(
            dir.path(),
            &generic,
            &env,
            crate::time::Timestamp::from_millis(NOW + 1),
            &o,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (via_generic.json, outcome),
            (first.json.clone(), Outcome::Unchanged)
        );
        let mut other = base_input();
        set(&mut other, &["identity", "item"], Value::from(2));
        let (_, outcome) = record_phase_outcome(
            dir.path(),
            &other,
            &env,
            crate::time::Timestamp::from_millis(NOW),
            &o,
        )
        .unwrap()
        .unwrap();
        assert_eq!(outcome, Outcome::Recorded);
        let spool = crate::writer::spool::Spool::open(dir.path()).unwrap();
        crate::writer::seal::seal(
            &spool,
            None,
            crate::time::Timestamp::from_millis(0),
            &crate::writer::seal::Options::default(),
        )
        .unwrap();
        let (_, outcome) = phase(crate::time::Timestamp::from_millis(NOW + 120_000))
            .unwrap()
            .unwrap();
        assert_eq!(
            outcome,
            Outcome::Unchanged,
            "an exact replay after the seal"
        );
    }
}
