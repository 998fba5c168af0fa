//! Model-based test of publish and compaction: random sequences of publications of new sealed
//! spools (one or two producer runs of a few events each, over several producers, runs and
//! days in four months), late publications into compacted months, exact replays of an earlier publication, re-recorded replays (the same
//! events recorded again later, so only `recorded_at` differs), conflicting publications
//! (different content under an existing producer run), and compactions at an advancing clock
//! with a retention window, each run on a real state repository and on a small in-memory model,
//! compared after every step.
//!
//! The model restates the rules from the publish and compact module docs, independently of the
//! code: a producer run, once published, keeps its content (partition date and events); the same
//! content again is `unchanged` with no commit, and replay-equal events (only `recorded_at`
//! differs) keep the first writer's bytes; any other content under that run is a conflict that
//! moves nothing; a month is compacted once its last instant is at or before
//! `now - retention`, one commit per month with hot shards, its manifest's generation counting
//! the folds; a late publication into a compacted month lands hot and is folded by the next
//! compaction; compacting again at the same clock changes nothing.
//!
//! After every step the repository is read back through the library: the ref moved exactly when
//! the model says a commit happens (and the push rule, `verify_range`, accepts the step), `log`
//! yields exactly the model's events as byte-identical canonical lines in canonical order (shard
//! path, then line, each under its producer's partition date), `verify` of the tip finds
//! nothing, and the months holding hot shards, the compacted months and their manifest
//! generations are the model's.
#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::json;

use crate::canonical;
use crate::compact::{
    self,
    test_support::{MAIN, new_store, sig},
};
use crate::ledger::segment::{self, Month};
use crate::ledger::shard;
use crate::publish::{self, Status};
use crate::store::{CommitId, Store};
use crate::time::Timestamp;
use crate::view::View;
use crate::writer::{record, seal, spool::Spool};

/// The producers a sequence publishes as: `(job, run id)` of one workflow in one repository.
const PRODUCERS: [(&str, &str); 12] = [
    ("review", "4101"),
    ("review", "4102"),
    ("repair", "4101"),
    ("repair", "4102"),
    ("triage", "4103"),
    ("review", "4104"),
    ("triage", "4105"),
    ("repair", "4106"),
    ("review", "4107"),
    ("repair", "4107"),
    ("triage", "4108"),
    ("review", "4109"),
];
/// Partition dates: two in January, two in February, one in March, one in April.
const DATES: [&str; 6] = [
    "2026-01-20",
    "2026-01-31",
    "2026-02-01",
    "2026-02-28",
    "2026-03-31",
    "2026-04-10",
];
/// The first instant after each month of [`DATES`] (seconds since the epoch): a month is
/// eligible for compaction once this is at or before `now - retention`.
const MONTH_ENDS: [(&str, i64); 4] = [
    ("2026-01", 1_769_904_000), // 2026-02-01T00:00:00Z
    ("2026-02", 1_772_323_200), // 2026-03-01T00:00:00Z
    ("2026-03", 1_775_001_600), // 2026-04-01T00:00:00Z
    ("2026-04", 1_777_593_600), // 2026-05-01T00:00:00Z
];
/// The clock at the start of a sequence: 2026-02-11T00:00:00Z, the first instant at which
/// January is eligible (one second earlier, it is not).
const START: i64 = 1_770_768_000;
const DAY: i64 = 86_400;
const RETENTION_DAYS: u32 = 10;
const STATUSES: [&str; 2] = ["completed", "failed"];
/// Most events of one producer run (a conflict may add one more).
const MAX_EVENTS: usize = 3;

/// What a producer run holds: its partition date and the events recorded for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Content {
    /// Index into [`DATES`].
    date: usize,
    /// Events `event-0 .. event-<n-1>`.
    events: usize,
    /// Index into [`STATUSES`]: the action status of every event.
    status: usize,
    /// Whether each event names the one before it as its parent.
    chain: bool,
}

impl Content {
    /// What the published bytes depend on: with one event there is no parent to name, so
    /// `chain` makes no difference (the same bytes again are a replay, not a conflict).
    fn bytes_key(&self) -> (usize, usize, usize, bool) {
        (
            self.date,
            self.events,
            self.status,
            self.chain && self.events > 1,
        )
    }
}

/// One producer run of a publication.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// Index into [`PRODUCERS`].
    producer: usize,
    content: Content,
}

/// How a conflicting publication differs from the run it reuses the identity of.
#[derive(Clone, Copy, Debug)]
enum Change {
    ExtraEvent,
    FewerEvents,
    OtherStatus,
    OtherDate,
    OtherParents,
}

#[derive(Clone, Debug)]
enum Step {
    /// A new sealed spool of these runs (distinct producers, published or not).
    Publish(Vec<Run>),
    /// A new sealed spool of runs of unpublished producers (each index picks one), and with
    /// `old`, one published run again as it was.
    New {
        runs: Vec<(prop::sample::Index, Content)>,
        old: Option<prop::sample::Index>,
    },
    /// The spool of an earlier accepted publication, published again as it is.
    Replay(prop::sample::Index),
    /// The runs of an earlier accepted publication recorded again an hour later.
    Rerecord(prop::sample::Index),
    /// A new run of an unpublished producer (the index picks it) into a compacted month (the
    /// content's date picks it among those).
    Late(prop::sample::Index, Content),
    /// A spool with one published run's identity and other content.
    Conflict(prop::sample::Index, Change),
    /// The clock advances, then compaction runs twice.
    Compact { days: i64, minus_second: bool },
}

fn content() -> impl Strategy<Value = Content> {
    (
        0..DATES.len(),
        1..=MAX_EVENTS,
        0..STATUSES.len(),
        prop::bool::ANY,
    )
        .prop_map(|(date, events, status, chain)| Content {
            date,
            events,
            status,
            chain,
        })
}

fn step() -> impl Strategy<Value = Step> {
    let run =
        (0..PRODUCERS.len(), content()).prop_map(|(producer, content)| Run { producer, content });
    prop_oneof![
        5 => (
            prop::collection::vec((any::<prop::sample::Index>(), content()), 1..=2),
            prop::option::weighted(0.3, any::<prop::sample::Index>()),
        )
            .prop_map(|(runs, old)| Step::New { runs, old }),
        2 => prop::collection::vec(run, 1..=2).prop_map(|mut runs| {
            // One spool holds one partition date per producer: a second run of the same
            // producer would be a different spool, not a second run.
            let mut seen = BTreeSet::new();
            runs.retain(|r| seen.insert(r.producer));
            Step::Publish(runs)
        }),
        3 => (any::<prop::sample::Index>(), content()).prop_map(|(pick, c)| Step::Late(pick, c)),
        2 => any::<prop::sample::Index>().prop_map(Step::Replay),
        1 => any::<prop::sample::Index>().prop_map(Step::Rerecord),
        2 => (
            any::<prop::sample::Index>(),
            prop_oneof![
                Just(Change::ExtraEvent),
                Just(Change::FewerEvents),
                Just(Change::OtherStatus),
                Just(Change::OtherDate),
                Just(Change::OtherParents),
            ],
        )
            .prop_map(|(pick, change)| Step::Conflict(pick, change)),
        3 => (
            prop::sample::select(vec![0i64, 3, 10, 17, 31]),
            prop::bool::weighted(0.2),
        )
            .prop_map(|(days, minus_second)| Step::Compact { days, minus_second }),
    ]
}

fn month_of(date: usize) -> &'static str {
    &DATES[date][..7]
}

#[derive(Debug)]
struct Model {
    now: i64,
    /// Every published producer run and its content.
    runs: BTreeMap<usize, Content>,
    /// Every event that must be in the ledger: its canonical line and partition date.
    lines: BTreeMap<String, &'static str>,
    /// Months with hot shard files.
    hot: BTreeSet<&'static str>,
    /// Compacted months and their manifest's generation.
    compacted: BTreeMap<&'static str, u32>,
    /// Spools that were accepted with a commit, with their runs.
    accepted: Vec<(PathBuf, Vec<Run>)>,
    /// Spools written so far (each gets a new directory).
    spools: usize,
}

impl Model {
    fn eligible(&self, month: &str) -> bool {
        let end = MONTH_ENDS
            .iter()
            .find(|(m, _)| *m == month)
            .expect("a month of DATES")
            .1;
        end <= self.now - i64::from(RETENTION_DAYS) * DAY
    }
}

/// The environment of the CI job that records `producer`'s events on `date`.
fn env_of(producer: usize, date: usize) -> record::Environment {
    let (job, run_id) = PRODUCERS[producer];
    let mut env = crate::cli::tests::writer_env();
    for (k, v) in [
        ("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE", DATES[date]),
        ("GITHUB_JOB", job),
        ("GITHUB_RUN_ID", run_id),
    ] {
        env.insert(k.to_owned(), v.to_owned());
    }
    env
}

/// Records `runs` into a new spool under `dir` and seals it, `later_ms` after each run's
/// partition date at 10:00; returns the spool root and the canonical line of every event, with
/// its partition date.
fn write_spool(
    dir: &Path,
    model: &mut Model,
    runs: &[Run],
    later_ms: i64,
) -> (PathBuf, Vec<(String, &'static str)>) {
    model.spools += 1;
    let root = dir.join(format!("spool-{:03}", model.spools));
    std::fs::create_dir_all(&root).expect("spool root");
    let mut lines = Vec::new();
    let mut last = Timestamp::from_millis(0);
    for run in runs {
        let c = run.content;
        let env = env_of(run.producer, c.date);
        let at = Timestamp::from_iso(&format!("{}T10:00:00.000Z", DATES[c.date]))
            .expect("a date of DATES");
        let now = Timestamp::from_millis(at.millis() + later_ms);
        last = last.max(now);
        let mut parent: Option<String> = None;
        for i in 0..c.events {
            let mut input = json!({
                "scope": "review",
                "type": "review.item",
                "component": "model",
                "identity": format!("event-{i}"),
                "subject": {"repository": "openclaw/openclaw", "kind": "issue", "number": i + 1},
                "action": {"name": "review", "status": STATUSES[c.status], "retryable": false, "mutation": false},
            });
            if c.chain
                && let Some(p) = &parent
            {
                input["parentEventId"] = json!(p);
            }
            let value = canonical::parse(&input.to_string()).expect("generated input");
            let event =
                record::record_action(&root, &value, &env, now, &record::Options::default())
                    .unwrap_or_else(|e| panic!("recording {run:?} event {i}: {e}"))
                    .expect("recording is enabled");
            parent = Some(event.event_id.as_str().to_owned());
            lines.push((event.json.to_string(), DATES[c.date]));
        }
    }
    let spool = Spool::open(&root).expect("the spool opens");
    seal::seal(&spool, None, last, &seal::Options::default()).expect("the spool seals");
    (root, lines)
}

fn tip(store: &Store) -> Result<Option<CommitId>, TestCaseError> {
    store
        .tip(MAIN)
        .map_err(|e| TestCaseError::fail(format!("reading the tip: {e}")))
}

/// Publishes `source`; checks the answer against `expect` (`None`: a conflict is expected).
fn publish_expecting(
    store: &Store,
    source: &Path,
    expect: Option<Status>,
    step: &Step,
) -> Result<(), TestCaseError> {
    let got = publish::publish(store, source, &publish::Options::new(sig()));
    match (expect, got) {
        (Some(status), Ok(p)) => prop_assert_eq!(p.status, status, "{:?}", step),
        (None, Err(e)) => prop_assert!(
            matches!(
                e,
                publish::Error::BindingConflict { .. }
                    | publish::Error::IdentityConflict(_)
                    | publish::Error::PayloadConflict(_)
            ),
            "a conflicting publication is refused as a conflict, not {e:?} ({step:?})"
        ),
        (Some(status), Err(e)) => {
            return Err(TestCaseError::fail(format!(
                "{step:?}: expected {status:?}, refused: {e}"
            )));
        }
        (None, Ok(p)) => {
            return Err(TestCaseError::fail(format!(
                "{step:?}: expected a conflict, got {:?}",
                p.status
            )));
        }
    }
    Ok(())
}

/// The model's answer to publishing `runs`: `None` for a conflict, else the status, with the
/// runs that are new.
fn expected_publication(model: &Model, runs: &[Run]) -> Option<(Status, Vec<Run>)> {
    let mut new = Vec::new();
    for run in runs {
        match model.runs.get(&run.producer) {
            Some(c) if c.bytes_key() != run.content.bytes_key() => return None,
            Some(_) => {}
            None => new.push(*run),
        }
    }
    let status = if new.is_empty() {
        Status::Unchanged
    } else {
        Status::Created
    };
    Some((status, new))
}

/// Runs `step` on the repository and on the model; fails when their answers differ. Returns
/// whether the model expects the ref to have moved.
fn run_step(
    store: &Store,
    dir: &Path,
    model: &mut Model,
    step: &Step,
) -> Result<bool, TestCaseError> {
    match step {
        Step::Publish(runs) => {
            let (source, lines) = write_spool(dir, model, runs, 0);
            let expect = expected_publication(model, runs);
            publish_expecting(store, &source, expect.as_ref().map(|e| e.0), step)?;
            let Some((status, new)) = expect else {
                return Ok(false);
            };
            let fresh: BTreeSet<usize> = new.iter().map(|r| r.producer).collect();
            let producers = runs.iter().map(|r| (r.producer, r.content.events));
            let mut at = 0;
            for (producer, events) in producers {
                if fresh.contains(&producer) {
                    model.lines.extend(lines[at..at + events].iter().cloned());
                }
                at += events;
            }
            for run in &new {
                model.runs.insert(run.producer, run.content);
                model.hot.insert(month_of(run.content.date));
            }
            if status == Status::Created {
                model.accepted.push((source, runs.clone()));
            }
            Ok(status == Status::Created)
        }
        Step::New { runs: picks, old } => {
            let mut free: Vec<usize> = (0..PRODUCERS.len())
                .filter(|p| !model.runs.contains_key(p))
                .collect();
            let mut runs = Vec::new();
            for (pick, content) in picks {
                if free.is_empty() {
                    break;
                }
                let producer = free.remove(pick.index(free.len()));
                runs.push(Run {
                    producer,
                    content: *content,
                });
            }
            if let Some(pick) = old
                && !model.runs.is_empty()
            {
                let (&producer, &content) = model
                    .runs
                    .iter()
                    .nth(pick.index(model.runs.len()))
                    .expect("an index below the length");
                runs.push(Run { producer, content });
            }
            if runs.is_empty() {
                return Ok(false);
            }
            run_step(store, dir, model, &Step::Publish(runs))
        }
        Step::Late(pick, content) => {
            let free: Vec<usize> = (0..PRODUCERS.len())
                .filter(|p| !model.runs.contains_key(p))
                .collect();
            let late: Vec<usize> = (0..DATES.len())
                .filter(|d| model.compacted.contains_key(month_of(*d)))
                .collect();
            if free.is_empty() || late.is_empty() {
                return Ok(false);
            }
            let run = Run {
                producer: free[pick.index(free.len())],
                content: Content {
                    date: late[content.date % late.len()],
                    ..*content
                },
            };
            run_step(store, dir, model, &Step::Publish(vec![run]))
        }
        Step::Replay(pick) => {
            if model.accepted.is_empty() {
                return Ok(false);
            }
            let source = model.accepted[pick.index(model.accepted.len())].0.clone();
            publish_expecting(store, &source, Some(Status::Unchanged), step)?;
            Ok(false)
        }
        Step::Rerecord(pick) => {
            if model.accepted.is_empty() {
                return Ok(false);
            }
            let runs = model.accepted[pick.index(model.accepted.len())].1.clone();
            // Only `recorded_at` differs, which replay equality ignores: the first writer's
            // bytes stay (the model's lines do not change).
            let (source, _) = write_spool(dir, model, &runs, 3_600_000);
            publish_expecting(store, &source, Some(Status::Unchanged), step)?;
            Ok(false)
        }
        Step::Conflict(pick, change) => {
            if model.runs.is_empty() {
                return Ok(false);
            }
            let (&producer, &old) = model
                .runs
                .iter()
                .nth(pick.index(model.runs.len()))
                .expect("an index below the length");
            let mut content = old;
            match change {
                Change::FewerEvents if old.events > 1 => content.events -= 1,
                Change::OtherStatus => content.status = 1 - old.status,
                Change::OtherDate => content.date = (old.date + 1) % DATES.len(),
                Change::OtherParents if old.events > 1 => content.chain = !old.chain,
                // With one event there is nothing to drop and no parent to change.
                _ => content.events += 1,
            }
            let runs = [Run { producer, content }];
            prop_assert!(
                expected_publication(model, &runs).is_none(),
                "the model sees {:?} as a conflict",
                step
            );
            let (source, _) = write_spool(dir, model, &runs, 0);
            publish_expecting(store, &source, None, step)?;
            Ok(false)
        }
        Step::Compact { days, minus_second } => {
            model.now += days * DAY - i64::from(*minus_second);
            let mut options = compact::Options::new(sig(), model.now);
            options.retention_days = RETENTION_DAYS;
            // Segments of at most four lines, so that a month folds into several.
            options.segment_caps = segment::Caps {
                bytes: segment::MAX_SEGMENT_BYTES,
                lines: 4,
            };
            let folding: Vec<&'static str> = model
                .hot
                .iter()
                .copied()
                .filter(|m| model.eligible(m))
                .collect();
            let got = compact::compact(store, &options)
                .map_err(|e| TestCaseError::fail(format!("{step:?}: compaction failed: {e}")))?;
            let expect = if folding.is_empty() {
                compact::Status::Unchanged
            } else {
                compact::Status::Created
            };
            prop_assert_eq!(got.status, expect, "{:?}", step);
            // The backlog is far below `max_commit_bytes`: every eligible month in one commit.
            prop_assert_eq!(
                got.commits.len(),
                usize::from(!folding.is_empty()),
                "{:?}",
                step
            );
            let folded: Vec<String> = got.months.iter().map(|m| m.month.to_string()).collect();
            prop_assert_eq!(folded, folding.clone(), "the months folded by {:?}", step);
            prop_assert!(got.refused.is_empty(), "{:?}: {:?}", step, got.refused);
            let after = tip(store)?;
            prop_assert_eq!(got.tip, after, "{:?}", step);
            let again = compact::compact(store, &options)
                .map_err(|e| TestCaseError::fail(format!("{step:?}: compaction failed: {e}")))?;
            prop_assert_eq!(
                again.status,
                compact::Status::Unchanged,
                "again: {:?}",
                step
            );
            prop_assert_eq!(
                tip(store)?,
                after,
                "a second compaction moved the ref: {:?}",
                step
            );
            for m in &folding {
                model.hot.remove(m);
                *model.compacted.entry(m).or_default() += 1;
            }
            Ok(!folding.is_empty())
        }
    }
}

/// The repository read back through `log` and `verify` equals the model.
fn compare(store: &Store, model: &Model, after: &Step) -> Result<(), TestCaseError> {
    let Some(commit) = tip(store)? else {
        prop_assert!(model.lines.is_empty(), "no ledger after {:?}", after);
        return Ok(());
    };
    let snap = store.snapshot(Some(commit)).expect("the tip reads");
    let view = View::new(&snap);
    let mut read: Vec<(String, String, usize, String)> = Vec::new();
    crate::log::stream(&view, &crate::log::Filter::default(), &mut |e| {
        read.push((
            e.date.to_owned(),
            e.path.to_owned(),
            e.line,
            e.json.to_owned(),
        ));
        std::ops::ControlFlow::Continue(())
    })
    .map_err(|e| TestCaseError::fail(format!("log after {after:?}: {e}")))?;
    prop_assert!(
        read.windows(2)
            .all(|w| (&w[0].1, w[0].2) < (&w[1].1, w[1].2)),
        "log is not in shard path and line order after {:?}: {:?}",
        after,
        read.iter().map(|r| (&r.1, r.2)).collect::<Vec<_>>()
    );
    let got: BTreeMap<String, String> = read
        .iter()
        .map(|(date, _, _, json)| (json.clone(), date.clone()))
        .collect();
    prop_assert_eq!(
        got.len(),
        read.len(),
        "an event twice in the log after {:?}",
        after
    );
    let want: BTreeMap<String, String> = model
        .lines
        .iter()
        .map(|(json, date)| (json.clone(), (*date).to_owned()))
        .collect();
    prop_assert_eq!(got, want, "log after {:?}", after);

    let report = crate::verify::verify_revision(store, commit)
        .map_err(|e| TestCaseError::fail(format!("verify after {after:?}: {e}")))?;
    prop_assert!(
        report.is_clean(),
        "verify after {:?}: {:#?}",
        after,
        report.findings
    );

    let hot: BTreeSet<String> = snap
        .list_files(shard::EVENTS_ROOT)
        .expect("the events tree lists")
        .iter()
        .filter_map(|p| Month::of_shard(p).map(|m| m.to_string()))
        .collect();
    let want_hot: BTreeSet<String> = model.hot.iter().map(|m| (*m).to_owned()).collect();
    prop_assert_eq!(hot, want_hot, "months with hot shards after {:?}", after);
    let mut compacted = BTreeMap::new();
    for month in view.compacted_months().expect("the segments tree lists") {
        let manifest = view
            .manifest(month)
            .map_err(|e| TestCaseError::fail(format!("manifest of {month}: {e}")))?
            .expect("a compacted month has a manifest");
        compacted.insert(month.to_string(), manifest.generation);
    }
    let want_compacted: BTreeMap<String, u32> = model
        .compacted
        .iter()
        .map(|(m, g)| ((*m).to_owned(), *g))
        .collect();
    prop_assert_eq!(
        compacted,
        want_compacted,
        "compacted months after {:?}",
        after
    );
    Ok(())
}

/// Runs `steps` on a fresh repository and on the model, comparing them after every step.
fn check_sequence(steps: &[Step]) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = new_store(dir.path());
    let mut model = Model {
        now: START,
        runs: BTreeMap::new(),
        lines: BTreeMap::new(),
        hot: BTreeSet::new(),
        compacted: BTreeMap::new(),
        accepted: Vec::new(),
        spools: 0,
    };
    for s in steps {
        let before = tip(&store)?;
        let commits = run_step(&store, dir.path(), &mut model, s)?;
        let after = tip(&store)?;
        prop_assert_eq!(
            before != after,
            commits,
            "the ref moved (or not) on {:?}",
            s
        );
        if let (true, Some(new)) = (commits, after) {
            let range = crate::verify::verify_range(&store, before, new)
                .map_err(|e| TestCaseError::fail(format!("verify_range on {s:?}: {e}")))?;
            prop_assert!(
                range.is_clean(),
                "the push rule refuses {:?}: {:#?}",
                s,
                range.findings
            );
        }
        compare(&store, &model, s)?;
    }
    Ok(())
}

/// A case the random sequences found: a run of one event published again with the other
/// `chain` flag has the same bytes (one event names no parent), so it is a replay, beside a new
/// run, and the publication is `created`, not a conflict.
#[test]
fn one_event_runs_ignore_the_chain_flag() {
    let run = |producer, chain| Run {
        producer,
        content: Content {
            date: 0,
            events: 1,
            status: 0,
            chain,
        },
    };
    for first in [false, true] {
        let steps = [
            Step::Publish(vec![run(0, first)]),
            Step::Publish(vec![run(2, true), run(0, !first)]),
        ];
        check_sequence(&steps).unwrap_or_else(|e| panic!("{e}"));
    }
}

proptest! {
    #![proptest_config(super::prop_support::config(6))]

    #[test]
    fn publish_and_compact_match_their_model(steps in prop::collection::vec(step(), 6..24)) {
        check_sequence(&steps)?;
    }
}
