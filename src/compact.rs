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
//! 2. **Commit point**: the same compare-and-swap loop as `publish` ([`crate::store::transact()`]). When
//!    another writer moved the ref, the compaction is re-planned on the new tip (a publication
//!    that landed meanwhile is simply folded too, or stays hot if its month is not eligible) and
//!    retried with jittered backoff, within [`Options::max_attempts`].
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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;

use crate::identity::Digest;
use crate::ledger::segment::{self, Foldable, Manifest, Month};
use crate::ledger::shard;
use crate::store::{self, CommitId, Signature, Snapshot, Store};
use crate::view::{self, ManifestState, View};

/// Retention window used when none is given: 90 days.
pub const DEFAULT_RETENTION_DAYS: u32 = 90;
/// Shard bytes folded by one commit when none is given: 256 MiB.
pub const DEFAULT_MAX_COMMIT_BYTES: u64 = 256 * 1024 * 1024;

/// Why a compaction could not be made.
#[derive(Debug, thiserror::Error)]
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
}

/// Knobs of a compaction; the clock is an input (`now_seconds`), never read here.
#[derive(Clone, Debug)]
pub struct Options {
    /// Full ref name of the ledger (default `refs/heads/main`).
    pub ref_name: String,
    /// Author and committer of the compaction commit.
    pub signature: Signature,
    /// Months that end more than this many days before `now_seconds` are compacted (default 90).
    pub retention_days: u32,
    /// The current time, seconds since the Unix epoch.
    pub now_seconds: i64,
    /// Compare-and-swap attempts per commit when the ref moves (default 64).
    pub max_attempts: u32,
    /// Shard bytes folded by one commit (default 256 MiB); at least one shard is always folded.
    pub max_commit_bytes: u64,
    /// Caps of new segments (default the format's, [`segment::Caps::MAX`]).
    pub segment_caps: segment::Caps,
}

impl Options {
    /// Defaults with the given signature and clock.
    pub fn new(signature: Signature, now_seconds: i64) -> Options {
        Options {
            ref_name: "refs/heads/main".into(),
            signature,
            retention_days: DEFAULT_RETENTION_DAYS,
            now_seconds,
            max_attempts: 64,
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

/// What one commit does to one month.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonthFold {
    /// The month folded.
    pub month: Month,
    /// The manifest's generation after the fold (unchanged when only duplicates were removed).
    pub generation: u32,
    /// Hot shards folded into new segments.
    pub shards: usize,
    /// Events in them.
    pub events: u64,
    /// Their bytes.
    pub bytes: u64,
    /// New segment files (full paths).
    pub segments: Vec<String>,
    /// Hot shard files removed (the folded ones, plus hot copies the manifest already proved).
    pub removed: Vec<String>,
    /// sha256 of the new manifest file.
    pub manifest_sha256: Option<Digest>,
}

/// A hot shard that compaction leaves hot, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The shard left hot.
    pub path: String,
    /// Why it cannot be folded.
    pub reason: String,
}

/// Everything one compaction commit would write, computed against one snapshot.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The months folded, in order.
    pub months: Vec<MonthFold>,
    /// The shards left hot, with their reasons.
    pub refused: Vec<Refusal>,
    /// New files: segments and manifests.
    pub files: Vec<(String, Vec<u8>)>,
    /// Hot shard files removed.
    pub removals: Vec<String>,
    /// Eligible shards left for a further commit (over [`Options::max_commit_bytes`]).
    pub remaining: usize,
}

impl Plan {
    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.removals.is_empty()
    }
}

/// Plans one compaction commit on `snap` (see the module docs). Reads only the hot shards of
/// eligible months and their manifests.
///
/// # Errors
/// [`Error::View`] for an existing manifest that is not valid, [`Error::StraySegment`],
/// [`Error::Segment`], [`Error::Store`].
pub fn plan(snap: &Snapshot<'_>, options: &Options) -> Result<Plan, Error> {
    let view = View::new(snap);
    let mut by_month: BTreeMap<Month, Vec<String>> = BTreeMap::new();
    for path in snap.list_files_for_write(shard::EVENTS_ROOT)? {
        if let Some(month) = Month::of_shard(&path)
            && options.is_eligible(month)
        {
            by_month.entry(month).or_default().push(path);
        }
    }
    let mut plan = Plan::default();
    let mut budget = options.max_commit_bytes;
    let mut folded_any = false;
    for (month, paths) in by_month {
        let existing = view.manifest(month)?;
        let mut foldable: Vec<Foldable> = Vec::new();
        let mut proven: Vec<String> = Vec::new();
        for path in paths {
            if folded_any && budget == 0 {
                // Left for the next commit; not read now.
                plan.remaining += 1;
                continue;
            }
            let refuse = |reason: String| Refusal {
                path: path.clone(),
                reason,
            };
            let bytes = match snap.read(&path, shard::MAX_BYTES as u64) {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(store::Error::TooLarge { max, .. }) => {
                    plan.refused
                        .push(refuse(format!("it is larger than {max} bytes")));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(entry) = existing.as_deref().and_then(|m| m.entry(&path)) {
                if Digest::of(&bytes) == entry.sha256 {
                    proven.push(path);
                } else {
                    plan.refused.push(refuse(
                        "the month's manifest already lists other bytes under this path".into(),
                    ));
                }
                continue;
            }
            let Ok(text) = String::from_utf8(bytes) else {
                plan.refused.push(refuse("it is not UTF-8".into()));
                continue;
            };
            let size = text.len() as u64;
            if folded_any && size > budget {
                plan.remaining += 1;
                continue;
            }
            match Foldable::new(&path, text) {
                Ok(f) => {
                    budget = budget.saturating_sub(size);
                    folded_any = true;
                    foldable.push(f);
                }
                Err(segment::Error::NotFoldable { reason, .. }) => {
                    plan.refused.push(refuse(reason));
                }
                Err(e) => return Err(e.into()),
            }
        }
        if foldable.is_empty() && proven.is_empty() {
            continue;
        }
        let mut fold = MonthFold {
            month,
            generation: existing.as_ref().map_or(0, |m| m.generation),
            shards: foldable.len(),
            events: foldable.iter().map(|f| u64::from(f.events)).sum(),
            bytes: foldable.iter().map(|f| f.content.len() as u64).sum(),
            segments: Vec::new(),
            removed: Vec::new(),
            manifest_sha256: None,
        };
        if !foldable.is_empty() {
            let segment::Folded { manifest, files } =
                segment::fold(month, existing.as_deref(), &foldable, options.segment_caps)?;
            for (path, _) in &files {
                if snap.exists(path)? {
                    return Err(Error::StraySegment { path: path.clone() });
                }
            }
            let text = manifest.to_text();
            if text.len() as u64 > segment::MAX_MANIFEST_BYTES {
                return Err(segment::Error::InvalidManifest {
                    path: month.manifest_path(),
                    reason: format!(
                        "it would be larger than the {}-byte cap readers accept",
                        segment::MAX_MANIFEST_BYTES
                    ),
                }
                .into());
            }
            fold.generation = manifest.generation;
            fold.manifest_sha256 = Some(Digest::of(&text));
            fold.segments = files.iter().map(|(p, _)| p.clone()).collect();
            plan.files.extend(files);
            plan.files.push((month.manifest_path(), text.into_bytes()));
        }
        fold.removed = foldable.into_iter().map(|f| f.path).chain(proven).collect();
        fold.removed.sort();
        plan.removals.extend(fold.removed.iter().cloned());
        plan.months.push(fold);
    }
    Ok(plan)
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
    let snap = store.snapshot(tip)?;
    let plan = plan(&snap, options)?;
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
        &options.signature,
    )?;
    Ok((plan, Some(commit)))
}

/// Compacts the ledger at `options.ref_name`: plan, commit, compare-and-swap; re-planned on a
/// moved ref; repeated while eligible shards remain (see the module docs).
///
/// # Errors
/// As [`build_on`]; [`Error::Contention`] after `max_attempts` lost races for one commit;
/// [`Error::RefLocked`] when the lock stays held.
pub fn compact(store: &Store, options: &Options) -> Result<Compaction, Error> {
    let mut result = Compaction {
        status: Status::Unchanged,
        commits: Vec::new(),
        tip: None,
        attempts: 0,
        months: Vec::new(),
        refused: Vec::new(),
    };
    let policy = store::Policy {
        ref_name: &options.ref_name,
        max_attempts: options.max_attempts,
        lock_wait: store::transact::HELD_LOCK_BUDGET,
    };
    // One month folds per commit; each commit is its own compare-and-swap, and the loop ends
    // when a build finds nothing left to fold.
    loop {
        let out = store::transact(store, &policy, |tip, _| {
            let (plan, commit) = build_on(store, tip, options)?;
            Ok(match commit {
                None => store::Step::Settled((tip, plan)),
                Some(commit) => store::Step::Commit {
                    commit,
                    reflog: "action-ledger compact".to_owned(),
                    value: (tip, plan),
                },
            })
        })
        .map_err(|e| match e {
            store::TransactError::Build(e) => e,
            store::TransactError::Contention { attempts, .. } => Error::Contention {
                ref_name: options.ref_name.clone(),
                attempts,
            },
            store::TransactError::RefLocked { lock, .. } => Error::RefLocked {
                ref_name: options.ref_name.clone(),
                lock,
            },
            store::TransactError::Store(e) => e.into(),
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

// ---------------------------------------------------------------------------------------------
// Proving compactions (used by verify)

/// The kind of a compaction finding; `verify` maps each to a stable rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// `manifest.json` is not a valid canonical manifest.
    ManifestInvalid,
    /// A segment file's sha256, size or line count differs from its manifest entry.
    SegmentDigestMismatch,
    /// A shard entry's sha256, replay digest or event count differs from the bytes its line
    /// range holds.
    EntryMismatch,
    /// A segment the manifest lists is absent, or shorter than an entry's line range.
    CompactedMissing,
    /// A segment file no manifest lists, or a hot shard file the manifest also lists.
    CompactedExtra,
    /// A deleted shard whose bytes the new manifest's entry does not prove.
    DeletionUnproven,
    /// A replaced manifest that drops or changes what the old one proved.
    ManifestNotSuperset,
    /// A shard deleted with no manifest entry at all (an ordinary deletion).
    Deleted,
}

/// One compaction finding at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The path the problem is about.
    pub path: String,
    /// Which rule it breaks.
    pub kind: ProblemKind,
    /// What exactly is wrong.
    pub detail: String,
}

/// The result of checking compacted months.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// Every problem found, in path order.
    pub problems: Vec<Problem>,
    /// Compacted shard paths to verify as shards: for a revision, every path a valid manifest
    /// lists that is not hot; for a range, the listed paths new to the ledger (neither hot nor
    /// compacted before the range).
    pub shards: Vec<String>,
}

/// Checks every compacted month of a revision. `segment_files` are the tree's paths under
/// `ledger/v1/segments/` that [`segment::parse_path`] accepts; `is_hot` tells whether a shard
/// path is a file in the tree.
///
/// # Errors
/// [`store::Error`] when the tree cannot be read.
pub fn check_revision(
    view: &View<'_, '_>,
    segment_files: &[String],
    is_hot: impl Fn(&str) -> bool,
) -> Result<Checked, store::Error> {
    let mut months: BTreeMap<Month, BTreeSet<String>> = BTreeMap::new();
    for path in segment_files {
        if let Some(file) = segment::parse_path(path) {
            months.entry(file.month()).or_default().insert(path.clone());
        }
    }
    let mut out = Checked::default();
    for (month, files) in months {
        if let Some(m) = check_month(view, month, &files, None, &is_hot, &mut out.problems)? {
            out.shards.extend(
                m.shards
                    .iter()
                    .filter(|e| !is_hot(&e.path))
                    .map(|e| e.path.clone()),
            );
        }
    }
    Ok(out)
}

/// What a push range changed that concerns compaction (filled by `verify` from the diff).
#[derive(Clone, Debug, Default)]
pub struct RangeChanges {
    /// Deleted shard files.
    pub deleted_shards: Vec<String>,
    /// Replaced `manifest.json` files.
    pub modified_manifests: Vec<String>,
    /// Added files under `ledger/v1/segments/` that [`segment::parse_path`] accepts.
    pub added: Vec<String>,
}

/// Checks the compaction part of a push from `old` to the tree of `view`: each touched month's
/// new manifest and new segments, the superset rule for a replaced manifest, and that every
/// deleted shard is proven by an entry whose segment reproduces the deleted bytes.
///
/// # Errors
/// [`store::Error`] when a tree cannot be read.
pub fn check_range(
    store: &Store,
    old: Option<CommitId>,
    view: &View<'_, '_>,
    changes: &RangeChanges,
) -> Result<Checked, store::Error> {
    let old_snap = store.snapshot(old)?;
    let old_view = View::new(&old_snap);
    let new_snap = view.snapshot();
    let mut touched: BTreeMap<Month, BTreeSet<String>> = BTreeMap::new();
    for p in &changes.deleted_shards {
        if let Some(m) = Month::of_shard(p) {
            touched.entry(m).or_default();
        }
    }
    let modified: HashSet<&str> = changes
        .modified_manifests
        .iter()
        .map(String::as_str)
        .collect();
    for p in changes.modified_manifests.iter().chain(&changes.added) {
        if let Some(file) = segment::parse_path(p) {
            let files = touched.entry(file.month()).or_default();
            if changes.added.contains(p) {
                files.insert(p.clone());
            }
        }
    }
    let deleted: HashSet<&str> = changes.deleted_shards.iter().map(String::as_str).collect();
    let is_hot = |p: &str| new_snap.exists(p).unwrap_or(false);
    let mut out = Checked::default();
    for (month, files) in touched {
        let manifest_path = month.manifest_path();
        let old_state = old_view.manifest_state(month)?;
        let since = match (&old_state, modified.contains(manifest_path.as_str())) {
            (ManifestState::Valid(old), false) => Some(old.clone()),
            (ManifestState::Valid(old), true) => match view.manifest_state(month)? {
                ManifestState::Valid(new) => match new.extends(old) {
                    Ok(()) => Some(old.clone()),
                    Err(why) => {
                        out.problems.push(Problem {
                            path: manifest_path.clone(),
                            kind: ProblemKind::ManifestNotSuperset,
                            detail: format!("the replaced manifest is not a superset: {why}"),
                        });
                        None
                    }
                },
                // The new manifest's own finding is reported by check_month.
                _ => None,
            },
            (ManifestState::Invalid(_), true) => {
                out.problems.push(Problem {
                    path: manifest_path.clone(),
                    kind: ProblemKind::ManifestNotSuperset,
                    detail: "the replaced manifest was not valid, so nothing proves the replacement keeps what it listed".into(),
                });
                None
            }
            _ => None,
        };
        let new = check_month(
            view,
            month,
            &files,
            since.as_deref(),
            &is_hot,
            &mut out.problems,
        )?;
        let mut proofs = Vec::new();
        for path in changes
            .deleted_shards
            .iter()
            .filter(|p| Month::of_shard(p) == Some(month))
        {
            let entry = new.as_deref().and_then(|m| m.entry(path));
            let Some(entry) = entry else {
                proofs.push(Problem {
                    path: path.clone(),
                    kind: ProblemKind::Deleted,
                    detail: "an existing ledger file was deleted".into(),
                });
                continue;
            };
            let old_bytes = match old_snap.read(path, shard::MAX_BYTES as u64) {
                Ok(b) => b,
                Err(store::Error::TooLarge { .. }) => None,
                Err(e) => return Err(e),
            };
            // Proven: the entry names the deleted bytes, and its segment reproduces them.
            let same_bytes = old_bytes.is_some_and(|b| Digest::of(&b) == entry.sha256);
            let reproduced = view
                .cut(month, entry)?
                .is_some_and(|b| Digest::of(&b) == entry.sha256);
            if !same_bytes || !reproduced {
                proofs.push(Problem {
                    path: path.clone(),
                    kind: ProblemKind::DeletionUnproven,
                    detail: format!(
                        "deleted, but the entry in {manifest_path} does not prove its exact bytes"
                    ),
                });
            }
        }
        out.problems.extend(proofs);
        if let Some(new) = new {
            for e in &new.shards {
                let listed_before =
                    matches!(&old_state, ManifestState::Valid(m) if m.entry(&e.path).is_some());
                if !listed_before
                    && !deleted.contains(e.path.as_str())
                    && !old_snap.exists(&e.path)?
                {
                    out.shards.push(e.path.clone());
                }
            }
        }
    }
    Ok(out)
}

/// Checks one month: its manifest, the segments and entries not already proven by `since` (all
/// when `None`), segment files in `files` that the manifest does not list, and hot shards that
/// are also listed. Returns the manifest when it is valid.
fn check_month(
    view: &View<'_, '_>,
    month: Month,
    files: &BTreeSet<String>,
    since: Option<&Manifest>,
    is_hot: &impl Fn(&str) -> bool,
    problems: &mut Vec<Problem>,
) -> Result<Option<std::rc::Rc<Manifest>>, store::Error> {
    let mut problem = |path: &str, kind, detail: String| {
        problems.push(Problem {
            path: path.to_owned(),
            kind,
            detail,
        })
    };
    let manifest_path = month.manifest_path();
    let m = match view.manifest_state(month)? {
        ManifestState::Valid(m) => m,
        ManifestState::Absent => {
            for f in files {
                problem(
                    f,
                    ProblemKind::CompactedExtra,
                    format!("a segment file without {manifest_path}"),
                );
            }
            return Ok(None);
        }
        ManifestState::Invalid(e) => {
            let detail = match e {
                segment::Error::InvalidManifest { reason, .. } => reason,
                other => other.to_string(),
            };
            problem(&manifest_path, ProblemKind::ManifestInvalid, detail);
            return Ok(None);
        }
    };
    for f in files {
        if let Some(segment::SegmentFile::Segment(_, index)) = segment::parse_path(f)
            && index as usize > m.segments.len()
        {
            problem(
                f,
                ProblemKind::CompactedExtra,
                format!("a segment file that {manifest_path} does not list"),
            );
        }
    }
    let mut broken: HashSet<&str> = HashSet::new();
    for (i, s) in m.segments.iter().enumerate() {
        if since.is_some_and(|old| old.segments.get(i) == Some(s)) {
            continue;
        }
        let path = month.segment_path(&s.name);
        match view.segment(month, &s.name) {
            Ok(None) => {
                problem(
                    &path,
                    ProblemKind::CompactedMissing,
                    format!("listed by {manifest_path} but missing"),
                );
                broken.insert(&s.name);
            }
            Err(store::Error::TooLarge { max, .. }) => {
                problem(
                    &path,
                    ProblemKind::SegmentDigestMismatch,
                    format!("larger than the {max}-byte segment cap"),
                );
                broken.insert(&s.name);
            }
            Err(e) => return Err(e),
            Ok(Some(lines)) => {
                let sha = Digest::of(lines.bytes());
                if sha != s.sha256
                    || lines.bytes().len() as u64 != s.bytes
                    || lines.count() != s.lines as usize
                {
                    problem(
                        &path,
                        ProblemKind::SegmentDigestMismatch,
                        format!(
                            "sha256 {sha}, {} bytes, {} lines; {manifest_path} lists sha256 {}, {} bytes, {} lines",
                            lines.bytes().len(),
                            lines.count(),
                            s.sha256,
                            s.bytes,
                            s.lines
                        ),
                    );
                }
            }
        }
    }
    for e in &m.shards {
        if since.is_some_and(|old| old.entry(&e.path) == Some(e)) {
            continue;
        }
        if is_hot(&e.path) {
            problem(
                &e.path,
                ProblemKind::CompactedExtra,
                format!("a hot shard file that {manifest_path} also lists"),
            );
        }
        if broken.contains(e.segment.as_str()) {
            continue;
        }
        let range = format!(
            "{} lines {}..{}",
            e.segment,
            e.first_line,
            e.first_line + e.lines - 1
        );
        let Some(bytes) = view.cut(month, e)? else {
            problem(
                &e.path,
                ProblemKind::CompactedMissing,
                format!("{range} are not in the segment"),
            );
            continue;
        };
        let sha = Digest::of(&bytes);
        if sha != e.sha256 {
            problem(
                &e.path,
                ProblemKind::EntryMismatch,
                format!(
                    "{range} have sha256 {sha}; {manifest_path} lists {}",
                    e.sha256
                ),
            );
            continue;
        }
        // Lines that are not canonical events are reported by the shard checks.
        if let Some((events, replay)) = replay_of_lines(&bytes)
            && (events != e.events as usize || replay != e.replay_sha256)
        {
            problem(
                &e.path,
                ProblemKind::EntryMismatch,
                format!(
                    "{range} hold {events} events with replay digest {replay}; {manifest_path} lists {} events with {}",
                    e.events, e.replay_sha256
                ),
            );
        }
    }
    Ok(Some(m))
}

/// Event count and replay digest of shard bytes whose lines are canonical JSON, without the full
/// event validation (the shard checks of `verify` do that once): for a valid event, the parsed
/// canonical line is its record, and its replay JSON drops `recorded_at`, and `occurred_at`
/// unless `occurred_at_source` is `"source"` ([`crate::event::Event::replay_json`]). It is only
/// called on bytes whose sha256 the manifest lists; lines that are not canonical events are the
/// shard checks' finding. `None` when a line is not a JSON object or the bytes are not
/// newline-terminated lines.
fn replay_of_lines(bytes: &[u8]) -> Option<(usize, Digest)> {
    use crate::canonical::{self, Value};
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let mut replay = String::with_capacity(text.len());
    let mut count = 0;
    for line in text.split('\n') {
        let Value::Object(mut record) = canonical::parse(line).ok()? else {
            return None;
        };
        record.remove("recorded_at");
        if record.get("occurred_at_source").and_then(Value::as_str) != Some("source") {
            record.remove("occurred_at");
        }
        replay.push_str(&canonical::to_canonical_unchecked(&Value::Object(record)));
        replay.push('\n');
        count += 1;
    }
    Some((count, Digest::of(replay)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{self, Value};
    use crate::publish;
    use crate::verify::{self, Report};
    use std::path::Path;

    const MAIN: &str = "refs/heads/main";
    /// 2026-05-01T00:00:00Z: with a retention of one day, March 2026 is eligible.
    const MAY_FIRST: i64 = 1_777_593_600;

    fn sig() -> Signature {
        Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: 1_773_100_800,
        }
    }

    fn manifest_dir() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    fn job(prefix: &str) -> PathBuf {
        let dir = manifest_dir().join("testdata/corpus/day1/shards");
        let name = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with(prefix))
            .unwrap();
        dir.join(name)
    }

    fn new_store(dir: &Path) -> Store {
        Store::open_or_init_bare(&dir.join("state.git"), MAIN).unwrap()
    }

    fn publish_job(store: &Store, prefix: &str) -> publish::Publication {
        publish::publish(store, &job(prefix), &publish::Options::new(sig())).unwrap()
    }

    /// Small segments, so that two day1 jobs fill several.
    fn options() -> Options {
        let mut o = Options::new(sig(), MAY_FIRST);
        o.retention_days = 1;
        o.segment_caps = segment::Caps {
            bytes: 256 * 1024,
            lines: segment::MAX_SEGMENT_LINES,
        };
        o
    }

    /// The canonical event lines of a revision, as `log --json` prints them.
    fn log_lines(store: &Store, commit: Option<CommitId>) -> Vec<String> {
        let snap = store.snapshot(commit).unwrap();
        let view = View::new(&snap);
        let mut lines = Vec::new();
        crate::log::stream(&view, &crate::log::Filter::default(), &mut |e| {
            lines.push(e.json.to_owned());
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        lines
    }

    /// The same lines straight from the jobs' shard files: every shard in path order.
    fn expected_lines(jobs: &[&str]) -> Vec<String> {
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        for j in jobs {
            let root = job(j);
            for e in walkdir::WalkDir::new(&root) {
                let e = e.unwrap();
                if e.file_type().is_file() {
                    let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy();
                    files.push((rel.into_owned(), e.path().to_owned()));
                }
            }
        }
        files.sort();
        files
            .iter()
            .flat_map(|(_, p)| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn rules(report: &Report) -> BTreeSet<&'static str> {
        report.findings.iter().map(|f| f.rule.code()).collect()
    }

    fn assert_clean(report: &Report) {
        assert!(report.is_clean(), "{:#?}", report.findings);
    }

    /// Day1 jobs 001 and 002 published (P) and compacted (C).
    struct Base {
        _dir: tempfile::TempDir,
        store: Store,
        before: CommitId,
        after: CommitId,
    }

    fn base() -> Base {
        let dir = tempfile::tempdir().unwrap();
        let store = new_store(dir.path());
        publish_job(&store, "001");
        let before = publish_job(&store, "002").commit.unwrap();
        let c = compact(&store, &options()).unwrap();
        assert_eq!(c.status, Status::Created);
        Base {
            _dir: dir,
            after: c.tip.unwrap(),
            store,
            before,
        }
    }

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
    fn eligibility_is_whole_months_before_the_window() {
        let march = Month::of_date("2026-03").unwrap();
        let april_first = march.next().start_epoch_seconds();
        let mut o = Options::new(sig(), april_first);
        o.retention_days = 0;
        assert!(o.is_eligible(march), "ended exactly at now");
        assert!(!o.is_eligible(march.next()));
        o.retention_days = 1;
        assert!(!o.is_eligible(march), "the window reaches into March");
        o.now_seconds += 86_400;
        assert!(o.is_eligible(march));
        let plan = {
            let dir = tempfile::tempdir().unwrap();
            let store = new_store(dir.path());
            publish_job(&store, "008");
            let tip = store.tip(MAIN).unwrap();
            let snap = store.snapshot(tip).unwrap();
            let mut early = options();
            early.now_seconds = april_first;
            plan(&snap, &early).unwrap()
        };
        assert!(
            plan.is_empty(),
            "March is inside a one-day window on April 1"
        );
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

    #[test]
    fn readers_refuse_damaged_segments() {
        let b = base();
        let edits = mutate(&b, "tamper_segment_byte");
        let t = b
            .store
            .write_commit_with(Some(b.after), &edits.0, &edits.1, true, "t\n", &sig())
            .unwrap();
        let snap = b.store.snapshot(Some(t)).unwrap();
        let view = View::new(&snap);
        let err = crate::log::stream(&view, &crate::log::Filter::default(), &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap_err();
        assert!(err.to_string().contains("do not have the sha256"), "{err}");
        drop(snap);
        b.store.update_ref(MAIN, Some(b.after), t, "t").unwrap();
        let err =
            publish::publish(&b.store, &job("001"), &publish::Options::new(sig())).unwrap_err();
        assert!(matches!(err, publish::Error::Compacted(_)), "{err}");
        // Compaction reads manifests, not old segments: with nothing hot it has nothing to do.
        assert_eq!(
            compact(&b.store, &options()).unwrap().status,
            Status::Unchanged
        );
    }

    /// Edits on top of the compaction commit: files to put and paths to remove.
    type Edits = (Vec<(String, Vec<u8>)>, Vec<String>);

    fn mutate(b: &Base, name: &str) -> Edits {
        let snap = b.store.snapshot(Some(b.after)).unwrap();
        let view = View::new(&snap);
        let march = Month::of_date("2026-03").unwrap();
        let m = view.manifest(march).unwrap().unwrap();
        let segment = |i: usize| {
            let path = march.segment_path(&m.segments[i].name);
            let bytes = snap.read(&path, u64::MAX).unwrap().unwrap();
            (path, bytes)
        };
        let with_manifest = |edit: &dyn Fn(&mut Manifest)| {
            let mut forged = (*m).clone();
            edit(&mut forged);
            (march.manifest_path(), forged.to_text().into_bytes())
        };
        let last = m.segments.len() - 1;
        match name {
            "tamper_segment_byte" => {
                let (path, bytes) = segment(0);
                let text = String::from_utf8(bytes).unwrap();
                let text = text.replacen("\"schema_version\":1", "\"schema_version\":2", 1);
                (vec![(path, text.into_bytes())], vec![])
            }
            "forge_entry_sha256" => (
                vec![with_manifest(&|f| {
                    f.shards[0].sha256 = Digest::of("forged")
                })],
                vec![],
            ),
            "forge_entry_replay" => (
                vec![with_manifest(&|f| {
                    f.shards[1].replay_sha256 = Digest::of("forged")
                })],
                vec![],
            ),
            "remove_last_segment" => (vec![], vec![segment(last).0]),
            "add_unlisted_segment" => (
                vec![(
                    march.segment_path(&segment::segment_name(m.segments.len() as u32 + 1)),
                    segment(0).1,
                )],
                vec![],
            ),
            "restore_a_compacted_shard" => {
                let path = m.shards[0].path.clone();
                let bytes = view.read(&path, u64::MAX).unwrap().unwrap();
                (vec![(path, bytes)], vec![])
            }
            "manifest_not_canonical" => {
                let text = m
                    .to_text()
                    .replacen("{\"generation\":", "{ \"generation\":", 1);
                (vec![(march.manifest_path(), text.into_bytes())], vec![])
            }
            "manifest_drops_last_segment" => (
                vec![with_manifest(&|f| {
                    let dropped = f.segments.pop().unwrap().name;
                    f.shards.retain(|e| e.segment != dropped);
                    f.generation += 1;
                })],
                vec![],
            ),
            "stray_file" => (
                vec![(
                    "ledger/v1/segments/2026/03/notes.txt".into(),
                    b"hello\n".to_vec(),
                )],
                vec![],
            ),
            other => panic!("unknown mutation {other} in testdata/compact/cases.json"),
        }
    }

    /// Every broken compaction of testdata/compact/cases.json is reported with exactly its rules,
    /// as a revision, as a forged compaction pushed on the ledger before it, and pushed on top of
    /// a good compaction.
    #[test]
    fn broken_compactions_are_reported_by_rule() {
        let b = base();
        let text =
            std::fs::read_to_string(manifest_dir().join("testdata/compact/cases.json")).unwrap();
        let doc = canonical::parse(&text).unwrap();
        let cases = doc.get("cases").and_then(Value::as_array).unwrap();
        let mut failures = Vec::new();
        for case in cases {
            let id = case.get("id").and_then(Value::as_str).unwrap();
            let (put, remove) = mutate(&b, case.get("mutation").and_then(Value::as_str).unwrap());
            let t = b
                .store
                .write_commit_with(Some(b.after), &put, &remove, true, id, &sig())
                .unwrap();
            let want = |key: &str| -> BTreeSet<&str> {
                case.get(key)
                    .and_then(Value::as_array)
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect()
            };
            let checks = [
                ("expect", verify::verify_revision(&b.store, t).unwrap()),
                (
                    "expect_range",
                    verify::verify_range(&b.store, Some(b.before), t).unwrap(),
                ),
                (
                    "expect_push",
                    verify::verify_range(&b.store, Some(b.after), t).unwrap(),
                ),
            ];
            for (key, report) in checks {
                if rules(&report) != want(key) {
                    failures.push(format!(
                        "{id} {key}: want {:?}, got {:#?}",
                        want(key),
                        report.findings
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn replay_of_lines_matches_the_event_replay_digest() {
        let files = publish::read_source(&job("002"), None).unwrap();
        for f in files {
            let events = shard::parse_content(&f.content, &f.path).unwrap();
            assert_eq!(
                replay_of_lines(f.content.as_bytes()),
                Some((events.len(), crate::event::replay_digest(&events)))
            );
        }
        assert_eq!(replay_of_lines(b"[1]\n"), None);
        assert_eq!(replay_of_lines(b"{\"a\":1}"), None);
    }
}
