//! Validating a whole batch before the repository is read, in the reference importer's order
//! (the first failure is returned, with the reference's message).
//!
//! Per file, in path order:
//! 1. the path is a shard path; at most 2 MiB, 16 MiB in all; at most 2,048 lines (the number of
//!    `\n`, plus one when the content does not end with one); the content ends with `\n`;
//! 2. every line is a canonical event; at most 1,024 events per file, 262,144 in all;
//! 3. non-empty, no event id twice, one producer, bytes equal to the causal-order serialization,
//!    and the path recomputed from the first event's identity and the partition date equals the
//!    file's path.
//!
//! Then for the whole batch:
//! 4. no event id twice across files, then an acyclic causal union;
//! 5. one producer run, one partition date;
//! 6. per full identity, either exactly one unnumbered file or a complete, numbered set
//!    (`-part-NNNNNN-of-NNNNNN`, indices 1..count) that re-packs to exactly the same paths and
//!    bytes;
//! 7. last, when asked, the expected producer provenance of each shard in path order
//!    (`repository`, `sha`, `workflow`, `job`, `run_id`, `run_attempt`; the component is not
//!    checked). A batch that also has a fault of steps 4 to 6 reports that fault, as the
//!    reference does.
//!
//! Shards packed from a sealed spool were validated when the spool was read, in causal order and
//! deterministically packed; the checks that would re-derive that from their bytes are skipped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::limits;
use super::source::{Source, SourceFile};
use super::*;
use crate::canonical::{self};
use crate::event::{self, Event};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::shard::{self, Shard};
use crate::privacy::strict::Finding;

/// A batch that passed the source-side checks ([`validate_batch`]).
#[derive(Debug)]
pub struct Batch {
    /// Shards in path order.
    pub shards: Vec<Shard>,
    /// Normalized identity of each shard (parallel to `shards`).
    pub identities: Vec<ShardIdentity>,
    /// The first strict-profile finding of each event that has one, by event id, found while
    /// the lines were parsed (the record trees are not kept); [`check_privacy`] reports from
    /// it. Empty when no event has one.
    ///
    /// [`check_privacy`]: crate::publish::check_privacy
    pub strict: HashMap<Digest, Finding>,
}

/// Validates a whole batch before the repository is consulted, in the order of the module docs;
/// the first failure is returned with the reference importer's message.
pub fn validate_batch(
    files: &[SourceFile],
    expected: Option<&ExpectedProducer>,
) -> Result<Batch, Error> {
    let pending = files
        .iter()
        .map(|f| Pending {
            path: f.path.clone(),
            content: Arc::from(f.content.as_str()),
            parsed: None,
        })
        .collect();
    validate_pending(pending, HashMap::new(), expected)
}

/// A source file, with its events when they come from a sealed spool (validated when the spool
/// was read, in causal order, deterministically packed): the checks that would re-derive those
/// from the bytes are skipped for them.
struct Pending {
    path: String,
    content: Arc<str>,
    parsed: Option<Vec<Event>>,
}

/// [`validate_batch`] for any source.
pub(super) fn validate_source(
    source: Source,
    expected: Option<&ExpectedProducer>,
) -> Result<Batch, Error> {
    match source {
        Source::Files(files) => validate_pending(
            files
                .into_iter()
                .map(|f| Pending {
                    path: f.path,
                    content: Arc::from(f.content),
                    parsed: None,
                })
                .collect(),
            HashMap::new(),
            expected,
        ),
        Source::Sealed(shards, strict) => validate_pending(
            shards
                .into_iter()
                .map(|s| Pending {
                    path: s.path,
                    content: s.content,
                    parsed: Some(s.events),
                })
                .collect(),
            strict,
            expected,
        ),
    }
}

/// `strict` holds the findings of the events already parsed (`parsed`); those of the files
/// parsed here are added to it.
fn validate_pending(
    files: Vec<Pending>,
    mut strict: HashMap<Digest, Finding>,
    expected: Option<&ExpectedProducer>,
) -> Result<Batch, Error> {
    let mut total_bytes = 0usize;
    let mut total_events = 0usize;
    let trusted = files.iter().all(|p| p.parsed.is_some());
    let mut shards = Vec::with_capacity(files.len());
    let mut identities = Vec::with_capacity(files.len());
    for f in files {
        let Some((date, part)) = shard::parse_path(&f.path) else {
            return Err(Error::InvalidPath(f.path.clone()));
        };
        if f.content.len() > limits::MAX_FILE_BYTES {
            return Err(Error::FileTooLarge(f.path.clone()));
        }
        total_bytes += f.content.len();
        if total_bytes > limits::MAX_TOTAL_BYTES {
            return Err(Error::TotalBytes);
        }
        let lines = f.content.bytes().filter(|&b| b == b'\n').count()
            + usize::from(!f.content.ends_with('\n'));
        if lines > limits::MAX_FILE_LINES {
            return Err(Error::TooManyLines(f.path.clone()));
        }
        if !f.content.ends_with('\n') {
            return Err(shard::Error::NoFinalNewline(f.path.clone()).into());
        }
        let from_bytes = f.parsed.is_none();
        let events = match f.parsed {
            Some(events) => events,
            None => {
                let scanned =
                    shard::parse_content_with(&f.content, &f.path, privacy::strict::first_in_line)?;
                let mut events = Vec::with_capacity(scanned.len());
                for (e, finding) in scanned {
                    if let Some(finding) = finding {
                        strict.insert(e.event_id.clone(), finding);
                    }
                    events.push(e);
                }
                events
            }
        };
        if events.len() > limits::MAX_FILE_EVENTS {
            return Err(Error::TooManyFileEvents(f.path.clone()));
        }
        total_events += events.len();
        if total_events > limits::MAX_TOTAL_EVENTS {
            return Err(Error::TotalEvents);
        }
        if events.is_empty() {
            return Err(Error::EmptyShard(f.path.clone()));
        }
        let mut ids = HashSet::with_capacity(events.len());
        if !events.iter().all(|e| ids.insert(&e.event_id)) {
            return Err(Error::DuplicateInFile(f.path.clone()));
        }
        if events.iter().any(|e| e.producer() != events[0].producer()) {
            return Err(Error::MixedProducers(f.path.clone()));
        }
        if from_bytes && shard::content(&event::sort_causally(events.clone())?) != *f.content {
            return Err(Error::NotCanonical(f.path.clone()));
        }
        let identity = events[0]
            .shard_identity(&date)
            .normalized()
            .map_err(shard::Error::from)?;
        let expected_path = shard::relative_path(&identity, part)?;
        if expected_path != f.path {
            return Err(Error::PathMismatch {
                actual: f.path.clone(),
                expected: expected_path,
            });
        }
        identities.push(identity);
        shards.push(Shard::new(f.path, events, f.content));
    }

    // Batch level: unique ids and an acyclic union.
    let mut seen = HashSet::new();
    for e in shards.iter().flat_map(|s| &s.events) {
        if !seen.insert(&e.event_id) {
            return Err(Error::DuplicateInBatch(e.event_id.clone()));
        }
    }
    let union: Vec<&Event> = shards.iter().flat_map(|s| &s.events).collect();
    event::causal_order_of(&union)?;

    // One producer run, one partition date.
    let mut run_dates: HashMap<String, &str> = HashMap::new();
    for id in &identities {
        let run = canonical::to_canonical_unchecked(&id.run_value());
        if *run_dates.entry(run).or_insert(&id.partition_date) != id.partition_date {
            return Err(Error::SplitRun);
        }
    }

    // Complete, deterministically packed shard sets.
    let mut groups: BTreeMap<&ShardIdentity, Vec<usize>> = BTreeMap::new();
    for (i, id) in identities.iter().enumerate() {
        groups.entry(id).or_default().push(i);
    }
    for (id, members) in groups.iter().filter(|_| !trusted) {
        let parts: Vec<Option<shard::Part>> = members
            .iter()
            .map(|&i| shard::parse_path(&shards[i].path).and_then(|(_, p)| p))
            .collect();
        let numbered = parts.iter().filter(|p| p.is_some()).count();
        if numbered == 0 {
            if members.len() != 1 {
                return Err(Error::RepeatedUnnumbered);
            }
            continue;
        }
        if numbered != members.len() {
            return Err(Error::MixedNumbering);
        }
        let mut parts: Vec<(u32, u32, usize)> = parts
            .iter()
            .zip(members)
            .map(|(p, &i)| {
                let (idx, count) = p.expect("numbered");
                (idx, count, i)
            })
            .collect();
        parts.sort();
        let count = parts[0].1;
        let complete = parts.iter().all(|p| p.1 == count)
            && parts.len() == count as usize
            && parts.iter().enumerate().all(|(k, p)| p.0 == k as u32 + 1);
        if !complete {
            return Err(Error::Incomplete);
        }
        let events: Vec<Event> = parts
            .iter()
            .flat_map(|&(_, _, i)| shards[i].events.iter().cloned())
            .collect();
        let repacked = shard::pack(id, event::sort_causally(events)?)?;
        let same = repacked.len() == parts.len()
            && repacked
                .iter()
                .zip(&parts)
                .all(|(r, &(_, _, i))| r.path == shards[i].path && r.content == shards[i].content);
        if !same {
            return Err(Error::NotDeterministic);
        }
    }

    // Last, as the reference does: a batch fault is reported before a provenance mismatch.
    if let Some(x) = expected {
        for (identity, shard) in identities.iter().zip(&shards) {
            check_provenance(identity, x, &shard.path)?;
        }
    }
    Ok(Batch {
        shards,
        identities,
        strict,
    })
}

fn check_provenance(id: &ShardIdentity, x: &ExpectedProducer, path: &str) -> Result<(), Error> {
    let checks: [(&'static str, String, String); 6] = [
        ("repository", x.repository.clone(), id.repository.clone()),
        ("sha", x.sha.clone(), id.sha.clone()),
        ("workflow", x.workflow.clone(), id.workflow.clone()),
        ("job", x.job.clone(), id.job.clone()),
        ("run_id", x.run_id.clone(), id.run_id.clone()),
        (
            "run_attempt",
            x.run_attempt.to_string(),
            id.run_attempt.to_string(),
        ),
    ];
    for (field, expected, actual) in checks {
        if expected != actual {
            return Err(Error::Provenance {
                path: path.to_owned(),
                field,
                expected,
                actual,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::record;

    /// A `review.item` event (identity `item`) of the writer tests' job, with the environment
    /// changed as given and an optional parent.
    fn event(changes: &[(&str, &str)], item: u32, parent: Option<&Digest>) -> Event {
        let mut env = crate::tests::job_env();
        for (k, v) in changes {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        let parent = parent
            .map(|p| format!(r#","parentEventId":"{p}""#))
            .unwrap_or_default();
        let text = format!(
            r#"{{"phase":"review.item","status":"started","component":"review-runner","identity":{{"item":{item}}},"subject":{{"repository":"openclaw/openclaw","kind":"issue","number":1}},"retryable":true,"mutation":false{parent}}}"#
        );
        let input = record::phase_action_input(&canonical::parse(&text).unwrap()).unwrap();
        record::build_action_event(&input, &env, crate::time::Timestamp::from_millis(0)).unwrap()
    }

    /// The shard file of `events` on `date`; `part` renames it to a numbered part.
    fn file(events: Vec<Event>, date: &str, part: Option<&str>) -> SourceFile {
        let identity = events[0].shard_identity(date).normalized().unwrap();
        let shard = shard::single(&identity, events).unwrap();
        let path = match part {
            Some(suffix) => shard.path.replace(".jsonl", suffix),
            None => shard.path,
        };
        SourceFile {
            path,
            content: shard.content.to_string(),
        }
    }

    /// The provenance of `e`'s producer with the run id off by one.
    fn off_by_one(e: &Event) -> ExpectedProducer {
        let id = e.shard_identity(DATE).normalized().unwrap();
        ExpectedProducer {
            repository: id.repository,
            sha: id.sha,
            workflow: id.workflow,
            job: id.job,
            run_id: (id.run_id.parse::<u64>().unwrap() + 1).to_string(),
            run_attempt: id.run_attempt,
        }
    }

    const DATE: &str = "2026-01-15";

    fn sorted(mut files: Vec<SourceFile>) -> Vec<SourceFile> {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        files
    }

    /// A batch fault is reported before a provenance mismatch, as the reference checks the whole
    /// batch first: an event id in two producers' shards, one run under two partition dates, an
    /// incomplete numbered set and a cycle across files, each with the expected run id off by
    /// one. Alone, the mismatch is reported.
    #[test]
    fn batch_faults_come_before_the_expected_producer() {
        let first = event(&[], 1, None);
        let expected = off_by_one(&first);
        let other_sha = [("GITHUB_SHA", "fedcba9876543210fedcba9876543210fedcba98")];
        let twin = event(&other_sha, 1, None);
        assert_eq!(
            twin.event_id, first.event_id,
            "the sha is not in the event key"
        );
        let duplicate = sorted(vec![
            file(vec![first.clone()], DATE, None),
            file(vec![twin], DATE, None),
        ]);
        let split = sorted(vec![
            file(vec![first.clone()], DATE, None),
            file(vec![event(&[], 2, None)], "2026-01-16", None),
        ]);
        let incomplete = vec![file(
            vec![first.clone()],
            DATE,
            Some("-part-000001-of-000002.jsonl"),
        )];
        let other_job = [("GITHUB_JOB", "publish")];
        let id2 = event(&other_job, 2, None).event_id;
        let one = event(&[], 1, Some(&id2));
        let two = event(&other_job, 2, Some(&one.event_id));
        assert_eq!((&one.event_id, &two.event_id), (&first.event_id, &id2));
        let cycle = sorted(vec![
            file(vec![one], DATE, None),
            file(vec![two], DATE, None),
        ]);
        for (files, message) in [
            (
                duplicate,
                format!(
                    "action event shard batch contains duplicate event: {}",
                    first.event_id
                ),
            ),
            (
                split,
                "action event shard batch splits one producer run across partition dates".into(),
            ),
            (incomplete, "action event shard batch is incomplete".into()),
            (cycle, "action event shard contains a causal cycle".into()),
        ] {
            let err = validate_batch(&files, Some(&expected)).unwrap_err();
            assert_eq!(err.to_string(), message);
        }
        let alone = vec![file(vec![first], DATE, None)];
        assert_eq!(
            validate_batch(&alone, Some(&expected))
                .unwrap_err()
                .to_string(),
            "action event shard producer provenance mismatch for run_id: expected 1234567891, got 1234567890"
        );
    }
}
