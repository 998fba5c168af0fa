//! Compaction (our own format; the reference leaves compaction open): after a retention window, each month's hot shards fold into
//! digest-verified monthly segments ([`crate::ledger::segment`]) and the shard files are removed in the
//! same commit. History is never rewritten: the compaction commit is an ordinary child of the
//! tip, so every earlier commit (and every original shard blob) stays reachable.
//!
//! # What a compaction does
//!
//! For each month that ends at or before `now − retention_days` (a month is eligible when its
//! last instant is older than the window), every hot shard under `ledger/v1/events/YYYY/MM/` is
//! read and checked to be exactly reproducible from its lines ([`segment::Foldable`]); those that
//! are not are **refused** (left hot, reported with the reason). The rest are packed, in path
//! order, into new segment files numbered after the month's existing ones, and `manifest.json`
//! is written (generation 1) or replaced by a superset (generation + 1, the late-fold rule of
//! [`crate::ledger::segment`]). Bindings, reservations and completion markers are not touched: they keep
//! naming the original shard paths, which readers resolve through [`crate::view`].
//!
//! # The only write path: prepare, then one commit point
//!
//! 1. **Prepare**: plan against the tip (everything is read and checked, every new manifest
//!    entry is cut back out of its segment and compared with the original bytes), then write the
//!    segment blobs, the manifest, the edited trees (shard files removed) and one commit whose
//!    parent is the tip. No ref moves.
//! 2. **Commit point**: the same landing loop as `publish` ([`crate::store::land()`]: a
//!    compare-and-swap of the local ref, or a leased push to the target of [`Options::land`]).
//!    When another writer moved the ref, the compaction is re-planned on the new tip (a
//!    publication that landed meanwhile is simply folded too, or stays hot if its month is not
//!    eligible) and retried with jittered backoff, within the attempts of [`Options::land`].
//!    The packs are rolled up after each landed commit as [`Options::land`] says (by default,
//!    by the loop).
//!
//! If the process dies before the commit point the ref is unchanged (unreachable objects at
//! most); after it, the compaction is complete. Running it again changes nothing (no commit).
//! One commit folds at most [`Options::max_commit_bytes`] of shard bytes; a larger backlog is
//! folded by further commits of the same run (each a late fold of the previous one).
//!
//! # Proving a compaction (verify)
//!
//! [`check_revision`] checks every month's manifest against the segment bytes (sha256 of each
//! segment and of each cut-out shard, replay digest, event count) and that nothing under a
//! compacted month is missing or extra. [`check_range`] is the push rule: a shard file may be
//! deleted only when the new tree's manifest has an entry with the sha256 of the deleted bytes
//! that its segment reproduces; a replaced manifest must extend the old one
//! ([`segment::Manifest::extends`]). Findings are [`Problem`]s; `verify` maps them to its rules.

mod check;
mod plan;
pub(crate) mod test_support;

pub use check::{Checked, Problem, ProblemKind, RangeChanges, check_range, check_revision};
pub use plan::{MonthFold, Plan, Refusal, plan, plan_observed};

use std::path::PathBuf;

use crate::ledger::segment::{self, Month};
use crate::store::{self, CommitId, LandOptions, Signature, Store};
use crate::view::{self};

/// Retention window used when none is given: 90 days.
pub const DEFAULT_RETENTION_DAYS: u32 = 90;

/// Shard bytes folded by one commit when none is given: 256 MiB.
pub const DEFAULT_MAX_COMMIT_BYTES: u64 = 256 * 1024 * 1024;

/// Why a compaction could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The state repository could not be read or written.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A month's existing manifest or segments cannot be read as valid.
    #[error(transparent)]
    View(#[from] view::Error),
    /// A segment or manifest could not be built.
    #[error(transparent)]
    Segment(#[from] segment::Error),
    /// A segment file that compaction would create is already in the tree, unlisted.
    #[error(
        "{path} already exists but no manifest lists it: run `action-ledger verify` and remove the stray file before compacting"
    )]
    StraySegment {
        /// The segment path.
        path: String,
    },
    /// The ref kept moving.
    #[error(
        "ref {ref_name} kept moving: gave up after {attempts} attempts; run the compaction again"
    )]
    Contention {
        /// The ledger ref.
        ref_name: String,
        /// Attempts made.
        attempts: u32,
    },
    /// Another writer holds the ref lock for too long.
    #[error(
        "the ref lock {} is held and was not released within about 5 s; if no writer is running, remove it (ref {ref_name})",
        lock.display()
    )]
    RefLocked {
        /// The ledger ref.
        ref_name: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The remote state repository could not be read, fetched or pushed to (`--remote`): the
    /// failed step landed nothing.
    #[error(transparent)]
    Remote(#[from] store::remote::Error),
    /// The remote refused the push (its pre-receive hook's lines): final.
    #[error("the remote refused the compaction:\n{0}")]
    RemoteRefused(String),
    /// The remote ref's history was rewritten since this cache last confirmed it: nothing was
    /// compacted.
    #[error(transparent)]
    RemoteRewritten(store::remote::Rewritten),
}

// The landing loop's failures as the variants above (`store::land`).
crate::store::land::impl_from_land_error!(Error);

impl Error {
    /// True when the compaction was refused rather than failed (exit 1 in the CLI): the ref
    /// kept moving or stayed locked, or the remote refused or was rewritten.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::Contention { .. }
                | Error::RefLocked { .. }
                | Error::RemoteRefused(_)
                | Error::RemoteRewritten(_)
        )
    }
}

/// Knobs of a compaction; the clock is an input (`now_seconds`), never read here.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where, as whom and how hard the commits land, and who rolls the packs up ([`LandOptions`]:
    /// by default the local ref `refs/heads/main`, 64 attempts per commit, the roll-up after
    /// each landed commit); with a remote target, each commit is built on the remote's tip and
    /// pushed with a lease on it.
    pub land: LandOptions,
    /// Months that end more than this many days before `now_seconds` are compacted (default 90).
    pub retention_days: u32,
    /// The current time, seconds since the Unix epoch.
    pub now_seconds: i64,
    /// Shard bytes folded by one commit (default 256 MiB); at least one shard is always folded.
    pub max_commit_bytes: u64,
    /// Caps of new segments (default the format's, [`segment::Caps::MAX`]).
    pub segment_caps: segment::Caps,
}

impl Options {
    /// Defaults with the given signature and clock.
    pub fn new(signature: Signature, now_seconds: i64) -> Options {
        Options {
            land: LandOptions::new(signature),
            retention_days: DEFAULT_RETENTION_DAYS,
            now_seconds,
            max_commit_bytes: DEFAULT_MAX_COMMIT_BYTES,
            segment_caps: segment::Caps::MAX,
        }
    }

    /// Whether `month` ends before the retention window: its last instant is at or before
    /// `now − retention_days`.
    pub fn is_eligible(&self, month: Month) -> bool {
        let cutoff = self.now_seconds - i64::from(self.retention_days) * 86_400;
        month.next().start_epoch_seconds() <= cutoff
    }
}

/// Whether a compaction changed the ref.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// At least one commit landed.
    Created,
    /// Nothing to fold: no commit.
    Unchanged,
}

/// The result of [`compact`].
#[derive(Clone, Debug)]
pub struct Compaction {
    /// Whether a commit landed.
    pub status: Status,
    /// Commits that landed, oldest first.
    pub commits: Vec<CommitId>,
    /// The ref's value afterwards.
    pub tip: Option<CommitId>,
    /// Compare-and-swap attempts over all commits (one per commit when nobody interfered).
    pub attempts: u32,
    /// What each landed commit did, per month.
    pub months: Vec<MonthFold>,
    /// Hot shards left hot, with the reason (from the last plan).
    pub refused: Vec<Refusal>,
}

/// Plans on `tip` and, when the plan changes anything, writes its commit (no ref moves).
///
/// # Errors
/// As [`plan`], and [`Error::Store`] when writing fails.
pub fn build_on(
    store: &Store,
    tip: Option<CommitId>,
    options: &Options,
) -> Result<(Plan, Option<CommitId>), Error> {
    build_on_observed(store, tip, options, &crate::progress::Silent)
}

/// [`build_on`], reporting the plan's shards to `progress` ([`plan_observed`]).
///
/// # Errors
/// As [`build_on`].
pub fn build_on_observed(
    store: &Store,
    tip: Option<CommitId>,
    options: &Options,
    progress: &dyn crate::progress::Progress,
) -> Result<(Plan, Option<CommitId>), Error> {
    let snap = store.snapshot(tip)?;
    let plan = plan_observed(&snap, options, progress)?;
    drop(snap);
    if plan.is_empty() {
        return Ok((plan, None));
    }
    let commit = store.write_commit_with(
        tip,
        &plan.files,
        &plan.removals,
        true,
        &commit_message(&plan),
        &options.land.signature,
    )?;
    Ok((plan, Some(commit)))
}

/// Compacts the ledger at the ref of `options.land`: plan, commit, compare-and-swap; re-planned
/// on a moved ref; repeated while eligible shards remain (see the module docs).
///
/// # Errors
/// As [`build_on`]; [`Error::Contention`] after `max_attempts` lost races for one commit;
/// [`Error::RefLocked`] when the lock stays held.
pub fn compact(store: &Store, options: &Options) -> Result<Compaction, Error> {
    compact_observed(store, options, &crate::progress::Silent)
}

/// [`compact`], reporting each plan's shards to `progress` ([`plan_observed`]): one `"shards"`
/// stage per plan, so a commit of a large backlog, a re-plan on a moved ref and the final plan
/// that finds nothing left each begin their own.
///
/// # Errors
/// As [`compact`].
pub fn compact_observed(
    store: &Store,
    options: &Options,
    progress: &dyn crate::progress::Progress,
) -> Result<Compaction, Error> {
    let mut result = Compaction {
        status: Status::Unchanged,
        commits: Vec::new(),
        tip: None,
        attempts: 0,
        months: Vec::new(),
        refused: Vec::new(),
    };
    // A commit folds what fits in `max_commit_bytes` (every eligible month of a smaller backlog
    // at once) and is its own compare-and-swap; the loop ends when a build finds nothing left
    // to fold.
    loop {
        let out = store::land(store, &options.land, |tip, _| {
            let (plan, commit) = build_on_observed(store, tip, options, progress)?;
            Ok(match commit {
                None => store::Step::Settled((tip, plan)),
                Some(commit) => store::Step::Commit {
                    commit,
                    reflog: "action-ledger compact".to_owned(),
                    value: (tip, plan),
                },
            })
        })?;
        result.attempts += out.attempts;
        let (tip, plan) = out.value;
        match out.commit {
            None => {
                result.tip = tip;
                result.refused = plan.refused;
                return Ok(result);
            }
            Some(commit) => {
                result.status = Status::Created;
                result.commits.push(commit);
                result.months.extend(plan.months);
            }
        }
    }
}

fn commit_message(plan: &Plan) -> String {
    let shards: usize = plan.months.iter().map(|m| m.shards).sum();
    let segments: usize = plan.months.iter().map(|m| m.segments.len()).sum();
    let months: Vec<String> = plan.months.iter().map(|m| m.month.to_string()).collect();
    let mut msg = format!(
        "ledger: compact {shards} shard(s) of {} into {segments} segment(s)\n\n",
        months.join(", ")
    );
    for m in &plan.months {
        if let Some(sha) = &m.manifest_sha256 {
            msg.push_str(&format!(
                "Ledger-Segment-Manifest: {} {sha}\n",
                m.month.manifest_path()
            ));
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compact::test_support::*;

    use crate::ledger::segment::Month;
    use crate::ledger::shard;
    use crate::publish;
    use crate::store::{self, Snapshot, Store};
    use crate::verify::{self};
    use crate::view::View;

    #[test]
    fn a_compaction_keeps_every_byte_readable_and_verifies() {
        let b = base();
        let (store, before, after) = (&b.store, b.before, b.after);
        assert_eq!(
            store.parents(after).unwrap(),
            vec![before],
            "an ordinary child"
        );
        let old = store.snapshot(Some(before)).unwrap();
        let new = store.snapshot(Some(after)).unwrap();
        let view = View::new(&new);
        let hot_before = old.list_files(shard::EVENTS_ROOT).unwrap();
        assert_eq!(hot_before.len(), 10);
        assert!(new.list_files(shard::EVENTS_ROOT).unwrap().is_empty());
        // Every removed shard's exact bytes come back out of the segments.
        for path in &hot_before {
            let original = old.read(path, u64::MAX).unwrap().unwrap();
            assert_eq!(
                view.read(path, u64::MAX).unwrap().unwrap(),
                original,
                "{path}"
            );
            assert_eq!(
                view.read_unchecked(path, u64::MAX).unwrap().unwrap(),
                original
            );
        }
        assert_eq!(
            view.shard_paths("ledger/v1/events/2026/03").unwrap(),
            hot_before
        );
        assert_eq!(view.shard_paths("").unwrap(), hot_before);
        let one_dir = hot_before[0].rsplit_once('/').unwrap().0;
        assert_eq!(
            view.shard_paths(one_dir).unwrap(),
            old.list_files(one_dir).unwrap()
        );
        let march = Month::of_date("2026-03").unwrap();
        let manifest = view.manifest(march).unwrap().unwrap();
        assert_eq!(manifest.generation, 1);
        assert!(manifest.segments.len() >= 3, "{:?}", manifest.segments);
        // Bindings are untouched; the tree lost the shard files.
        let bindings = |s: &Snapshot<'_>| s.list_files(crate::ledger::binding::ROOT).unwrap();
        assert_eq!(bindings(&old), bindings(&new));
        assert!(new.list_files("").unwrap().len() < old.list_files("").unwrap().len());
        // Readers see the same ledger.
        assert_eq!(
            log_lines(store, Some(before)),
            log_lines(store, Some(after))
        );
        assert_eq!(
            log_lines(store, Some(after)),
            expected_lines(&["001", "002"])
        );
        let v_before = verify::verify_revision(store, before).unwrap();
        let v_after = verify::verify_revision(store, after).unwrap();
        assert_clean(&v_after);
        assert_eq!(v_before, v_after, "same counts, no finding");
        assert_clean(&verify::verify_range(store, Some(before), after).unwrap());
        assert_clean(&verify::verify_range(store, None, after).unwrap());
        // Again: nothing to do, no commit.
        let again = compact(store, &options()).unwrap();
        assert_eq!(again.status, Status::Unchanged);
        assert!(again.commits.is_empty());
        assert_eq!(again.tip, Some(after));
        assert_eq!(store.tip(MAIN).unwrap(), Some(after));
    }

    #[test]
    fn a_late_replay_is_unchanged_and_a_late_set_lands_hot_then_folds() {
        let b = base();
        let store = &b.store;
        // An exact replay of compacted shards: nothing to write.
        let replay = publish_job(store, "001");
        assert_eq!(replay.status, publish::Status::Unchanged);
        assert_eq!(replay.manifest.unchanged, 4);
        assert_eq!(store.tip(MAIN).unwrap(), Some(b.after));
        // A different set under a compacted path is still a conflict.
        let files = publish::read_source(&job("001"), None).unwrap();
        let mut f = files[0].clone();
        let lines: Vec<&str> = f.content.lines().collect();
        f.content = format!("{}\n", lines[..lines.len() - 1].join("\n"));
        let batch = publish::validate_batch(&[f], None).unwrap();
        assert!(publish::publish_batch(store, &batch, &publish::Options::new(sig())).is_err());
        // A new set for the compacted month lands hot beside the segments.
        let late = publish_job(store, "003");
        assert_eq!(late.status, publish::Status::Created);
        let hot_tip = late.commit.unwrap();
        let snap = store.snapshot(Some(hot_tip)).unwrap();
        assert_eq!(snap.list_files(shard::EVENTS_ROOT).unwrap().len(), 4);
        assert!(
            snap.exists("ledger/v1/segments/2026/03/manifest.json")
                .unwrap()
        );
        drop(snap);
        assert_clean(&verify::verify_revision(store, hot_tip).unwrap());
        assert_clean(&verify::verify_range(store, Some(b.after), hot_tip).unwrap());
        let all = expected_lines(&["001", "002", "003"]);
        assert_eq!(log_lines(store, Some(hot_tip)), all);
        // The next compaction folds it in: new segments, manifest generation 2, a superset.
        let c = compact(store, &options()).unwrap();
        assert_eq!(c.status, Status::Created);
        assert_eq!(c.months.len(), 1);
        assert_eq!((c.months[0].generation, c.months[0].shards), (2, 4));
        let folded = c.tip.unwrap();
        let snap = store.snapshot(Some(folded)).unwrap();
        let view = View::new(&snap);
        let march = Month::of_date("2026-03").unwrap();
        let new = view.manifest(march).unwrap().unwrap();
        let old_snap = store.snapshot(Some(b.after)).unwrap();
        let old = View::new(&old_snap).manifest(march).unwrap().unwrap();
        new.extends(&old).unwrap();
        assert_eq!(new.shards.len(), 14);
        assert!(snap.list_files(shard::EVENTS_ROOT).unwrap().is_empty());
        assert_eq!(log_lines(store, Some(folded)), all);
        assert_clean(&verify::verify_revision(store, folded).unwrap());
        assert_clean(&verify::verify_range(store, Some(hot_tip), folded).unwrap());
        assert_clean(&verify::verify_range(store, Some(b.before), folded).unwrap());
    }

    #[test]
    fn progress_counts_the_shards_each_plan_reads_and_the_events_it_folds() {
        use crate::progress::{Recording, Seen};
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        publish_job(&store, "001");
        publish_job(&store, "002");
        let seen = Recording::default();
        let c = compact_observed(&store, &options(), &seen).unwrap();
        assert_eq!(c.status, Status::Created);
        let shards: usize = c.months.iter().map(|m| m.shards).sum();
        let events: u64 = c.months.iter().map(|m| m.events).sum();
        assert_eq!(shards, 10);
        // The plan that folds all ten, then the one that finds nothing left.
        let calls = seen.seen();
        assert_eq!(calls[0], Seen::Begin("shards", Some(10)));
        assert_eq!(calls[11], Seen::End);
        assert_eq!(&calls[12..], [Seen::Begin("shards", Some(0)), Seen::End]);
        assert_eq!(seen.advanced(), (10, events));
        // Verifying the compacted tip counts the compacted shards like hot ones.
        let seen = Recording::default();
        let report =
            verify::verify_revision_observed(&store, c.tip.unwrap(), &Default::default(), &seen)
                .unwrap();
        assert_clean(&report);
        assert_eq!((report.shards, report.events as u64), (10, events));
        assert_eq!(seen.seen()[0], Seen::Begin("shards", Some(10)));
        assert_eq!(seen.advanced(), (10, events));
    }

    /// A backlog folded by several commits: every plan's advances reach the total it began
    /// with (shards left for a later commit count too), and each event is counted once, by the
    /// plan that folds it.
    #[test]
    fn progress_of_a_backlog_over_several_commits_reaches_each_plans_total() {
        use crate::progress::{Recording, Seen};
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        publish_job(&store, "001");
        let mut small = options();
        small.max_commit_bytes = 1;
        let seen = Recording::default();
        let c = compact_observed(&store, &small, &seen).unwrap();
        assert_eq!(c.commits.len(), 4, "one shard a commit");
        let mut stages: Vec<(Option<u64>, u64)> = Vec::new();
        for call in seen.seen() {
            match call {
                Seen::Begin(unit, total) => {
                    assert_eq!(unit, "shards");
                    stages.push((total, 0));
                }
                Seen::Advance(units, _) => stages.last_mut().unwrap().1 += units,
                Seen::End => {}
            }
        }
        let expected: Vec<(Option<u64>, u64)> =
            [4, 3, 2, 1, 0].iter().map(|&n| (Some(n), n)).collect();
        assert_eq!(stages, expected);
        let events: u64 = c.months.iter().map(|m| m.events).sum();
        assert_eq!(seen.advanced().1, events);
    }

    /// The compaction was built on the old tip; a publication landed first. The compaction's
    /// compare-and-swap fails, and the retried compaction folds both.
    #[test]
    fn a_compaction_that_loses_the_race_is_rebuilt_and_nothing_is_lost() {
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        let first = publish_job(&store, "001").commit;
        let (plan, built) = build_on(&store, first, &options()).unwrap();
        assert_eq!(plan.removals.len(), 4);
        let published = publish_job(&store, "002").commit;
        match store.update_ref(MAIN, first, built.unwrap(), "compact") {
            Err(store::Error::RefMoved { actual, .. }) => assert_eq!(actual, published),
            other => panic!("expected a lost race, got {other:?}"),
        }
        let c = compact(&store, &options()).unwrap();
        assert_eq!(c.months[0].shards, 10, "the publication is folded too");
        assert_eq!(
            store.parents(c.tip.unwrap()).unwrap(),
            vec![published.unwrap()]
        );
        assert_eq!(log_lines(&store, c.tip), expected_lines(&["001", "002"]));
        assert_clean(&verify::verify_revision(&store, c.tip.unwrap()).unwrap());
    }

    /// Publishers and a compactor at once: every publication lands (re-planned on a compacted
    /// tip when the compaction won), every compaction lands, no event is lost.
    #[test]
    fn compactions_racing_publications_both_land() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("state.git");
        let store = Store::open_or_init_bare(&repo, MAIN).unwrap();
        publish_job(&store, "001");
        let jobs = ["002", "003", "004", "007"];
        let barrier = std::sync::Barrier::new(jobs.len() + 1);
        std::thread::scope(|scope| {
            let compactor = scope.spawn(|| {
                let store = Store::open(&repo).unwrap();
                barrier.wait();
                (0..4)
                    .map(|_| compact(&store, &options()).unwrap())
                    .filter(|c| c.status == Status::Created)
                    .count()
            });
            let publishers: Vec<_> = jobs
                .iter()
                .map(|j| {
                    let (repo, barrier) = (&repo, &barrier);
                    scope.spawn(move || {
                        let store = Store::open(repo).unwrap();
                        let files = publish::read_source(&job(j), None).unwrap();
                        let batch = publish::validate_batch(&files, None).unwrap();
                        barrier.wait();
                        publish::publish_batch(&store, &batch, &publish::Options::new(sig()))
                            .unwrap()
                    })
                })
                .collect();
            for p in publishers {
                assert_eq!(p.join().unwrap().status, publish::Status::Created);
            }
            assert!(compactor.join().unwrap() >= 1);
        });
        let mut all = vec!["001"];
        all.extend(jobs);
        let tip = store.tip(MAIN).unwrap();
        assert_eq!(log_lines(&store, tip), expected_lines(&all));
        assert_clean(&verify::verify_revision(&store, tip.unwrap()).unwrap());
        let last = compact(&store, &options()).unwrap();
        assert_eq!(log_lines(&store, last.tip), expected_lines(&all));
        assert_clean(&verify::verify_revision(&store, last.tip.unwrap()).unwrap());
        let snap = store.snapshot(last.tip).unwrap();
        assert!(snap.list_files(shard::EVENTS_ROOT).unwrap().is_empty());
    }

    /// Two compactions at once: one commit lands, the other re-plans on it and has nothing to do.
    #[test]
    fn concurrent_compactions_make_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("state.git");
        let store = Store::open_or_init_bare(&repo, MAIN).unwrap();
        let before = publish_job(&store, "008").commit;
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<Compaction> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let (repo, barrier) = (&repo, &barrier);
                    scope.spawn(move || {
                        let store = Store::open(repo).unwrap();
                        barrier.wait();
                        compact(&store, &options()).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let landed: Vec<&Compaction> = results
            .iter()
            .filter(|c| c.status == Status::Created)
            .collect();
        assert_eq!(landed.len(), 1, "{results:?}");
        let tip = store.tip(MAIN).unwrap();
        assert_eq!(store.parents(tip.unwrap()).unwrap(), vec![before.unwrap()]);
        assert!(results.iter().all(|c| c.tip == tip));
        assert_eq!(log_lines(&store, tip), expected_lines(&["008"]));
    }

    #[test]
    fn an_unreproducible_shard_is_refused_and_stays_hot() {
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        let p = publish_job(&store, "008").commit;
        let bad = "ledger/v1/events/2026/03/10/o-r/prod/1-1-job-abcdefabcdef.jsonl";
        let planted = store
            .write_commit_with(
                p,
                &[(bad.to_owned(), b"{\"a\":1}".to_vec())],
                &[],
                false,
                "plant\n",
                &sig(),
            )
            .unwrap();
        store.update_ref(MAIN, p, planted, "plant").unwrap();
        let c = compact(&store, &options()).unwrap();
        assert_eq!(c.status, Status::Created);
        assert_eq!(c.refused.len(), 1);
        assert_eq!(c.refused[0].path, bad);
        assert!(
            c.refused[0].reason.contains("not canonical"),
            "{:?}",
            c.refused
        );
        assert_eq!(c.months[0].shards, 2);
        let snap = store.snapshot(c.tip).unwrap();
        assert_eq!(snap.list_files(shard::EVENTS_ROOT).unwrap(), vec![bad]);
        // Running again refuses it again and changes nothing.
        let again = compact(&store, &options()).unwrap();
        assert_eq!((again.status, again.refused.len()), (Status::Unchanged, 1));
    }

    #[test]
    fn a_large_backlog_folds_in_several_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        publish_job(&store, "001");
        let before = publish_job(&store, "002").commit.unwrap();
        let mut o = options();
        o.max_commit_bytes = 200_000;
        let c = compact(&store, &o).unwrap();
        assert!(c.commits.len() >= 3, "{:?}", c.commits);
        let generations: Vec<u32> = c.months.iter().map(|m| m.generation).collect();
        assert_eq!(
            generations,
            (1..=c.commits.len() as u32).collect::<Vec<_>>()
        );
        assert_eq!(c.months.iter().map(|m| m.shards).sum::<usize>(), 10);
        let tip = c.tip.unwrap();
        assert_eq!(
            log_lines(&store, Some(tip)),
            expected_lines(&["001", "002"])
        );
        assert_clean(&verify::verify_revision(&store, tip).unwrap());
        assert_clean(&verify::verify_range(&store, Some(before), tip).unwrap());
        let mut previous = before;
        for commit in &c.commits {
            assert_clean(&verify::verify_range(&store, Some(previous), *commit).unwrap());
            previous = *commit;
        }
        assert_eq!(compact(&store, &o).unwrap().status, Status::Unchanged);
    }
}
