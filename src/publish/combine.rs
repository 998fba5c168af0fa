//! Combining pending publications: many jobs, one commit, one compare-and-swap (issue 51).
//!
//! A compare-and-swap of one ref lands one publication per round trip, so N jobs publishing at
//! once take N rounds and every loser fetches, rebuilds and pushes again. Here each job first
//! parks its publication on a ref of its own (that push never contends), and then any job
//! lands EVERY pending publication onto the ledger ref with one commit and one compare-and-swap.
//! Whoever wins lands everybody's; a loser usually finds its own already landed.
//!
//! This module owns the rules and the pure core ([`combine`]): from a ledger tip and a set of
//! pending publication commits, the one combined commit and a verdict per publication. The
//! refs are read and moved by the caller through the store ([`crate::store::remote`]).
//!
//! # Why incoming refs, and not a `serve` endpoint that group-commits
//!
//! `serve` already group-commits the finality operations (one writer thread, one commit per
//! batch). A publication endpoint there would give the same throughput, but every CI job would
//! then depend on one long-running service holding write access to the state repository: one
//! more thing to run, authenticate and keep available, and a single point of failure for every
//! publication. Incoming refs need nothing but the Git host and the pre-receive hook the ledger
//! already requires; every job is a lander, so no job waits on another being alive. The two
//! compose: `serve` (or `maintain`) can run the same [`combine`] over the incoming refs.
//! Backoff alone cannot meet the goal: one compare-and-swap per publication is the bottleneck.
//!
//! # Refs
//!
//! - `refs/ledger/incoming/<key>` ([`INCOMING_PREFIX`]): a pending publication. Created once,
//!   never updated; deleted only by the push that lands it (or finds it landed) or refuses it.
//! - `refs/ledger/refused/<key>` ([`REFUSED_PREFIX`]): the durable mark of a refusal
//!   ([`refusal_mark`]), created by the push that deletes the incoming ref.
//!
//! `<key>` ([`publication_key`]) is the sha256 (64 lowercase hex) of the lines
//! `<path>\t<blob id>\n` of every file the publication commit adds over its parent, sorted by
//! path. It names the content, so it is self-certifying (the hook recomputes it) and
//! idempotent: a job re-run with the same publication finds its ref already there and waits
//! for that one's fate. Git refs, not notes: a notes ref is one ref, contended again.
//!
//! # What an incoming publication is
//!
//! The commit `publish` builds today ([`super::publish_batch`]'s commit): single parent the
//! ledger tip it was planned on (no parent when the ledger did not exist), tree = that tip plus
//! the publication's added files, all under `ledger/v1/`. Chosen over a commit of only the
//! added files because:
//! - the hook validates it exactly as a ledger push (`verify --range parent..commit`), against
//!   the ledger it was planned on (layout, bindings, history); a tree of only the added files
//!   has no ledger to be checked against;
//! - it costs no more to push (the tip's objects are on the server already);
//! - a job alone lands it as it is (a fast-forward: the same commit, message and trailer as a
//!   direct publication), so one job alone is no slower;
//! - its added files are `diff(parent, commit)`, cheap (only changed subtrees are read).
//!
//! # Combining ([`combine`])
//!
//! 1. The set is sorted by key (then commit): the order of arrival never matters.
//! 2. Each publication is checked on its own: its name is its key; one parent (or none),
//!    which is the tip or one of its last [`MAX_BASE_DEPTH`] commits; only added files, each a
//!    plain `100644` file under `ledger/v1/`; at most [`limits::MAX_PUBLISH_PATHS`] + 1 files of at most
//!    [`limits::MAX_FILE_BYTES`] each. Otherwise it is refused.
//! 3. Each added path is applied onto the tip plus the publications accepted before it: the
//!    same bytes (same blob id; for a shard, replay-equivalent bytes, the publisher's
//!    create-only rule) = already there; other bytes, or a file or directory in the way =
//!    conflict, and that publication alone is refused, none of its files taken. A publication
//!    with nothing new is already landed. Past [`Options::max_publications`] or
//!    [`Options::max_bytes`] the rest are deferred to the next round (the first always fits).
//! 4. One commit on the tip with the accepted files (or, for one publication built on the tip
//!    itself, its own commit), which must pass [`verify::verify_range`]`(tip, commit)` under
//!    [`Options::privacy`] (strict by default: what the hook runs).
//! 5. If it does not (a cross-publication fault that path checks cannot see: a duplicate event
//!    or a causal cycle against the newer tip), the accepted publications are stacked one by
//!    one in key order, each verified as a range on the previous; one that fails is refused
//!    with its findings. The survivors are rebuilt as one commit and verified again; should
//!    that still fail, only the first survivor lands and the others are deferred.
//!
//! A refusal is thus deterministic in (tip, set) and never fails the others.
//!
//! # The remote round ([`super::pending`], per job)
//!
//! 1. Build the publication on the remote tip as today, then ONE push, not atomic
//!    ([`super::pending::park`]): `<commit>:refs/ledger/incoming/<key>` with
//!    `--force-with-lease=<incoming>:` (must not exist) and `<commit>:<ledger ref>` with a
//!    lease on the tip it was built on. Alone, the ledger part lands (a direct publication, as
//!    before: no extra round trip); the incoming ref is then already landed and the next
//!    lander deletes it. Under contention the ledger part loses its lease and the incoming
//!    part is pending (an incoming ref already there has the same key, so the same files). A
//!    hook refusal refuses both: the conflict is the job's own, reported at once.
//! 2. Each round ([`super::pending::await_fate`]) starts with ONE `git ls-remote` of the
//!    ledger ref, `refs/ledger/incoming/*` and the job's own refused mark. Fate: a refused
//!    mark → refused (the mark's message is the reason); the fetched tip holds every file it
//!    adds ([`is_landed`]) → landed; its incoming ref there → pending; none of these → read
//!    again (a server whose refs are files applies an atomic push ref by ref, so a reader may
//!    see the incoming ref gone before the ledger moved), withdrawn after
//!    [`super::pending::GONE_READS`] such reads. While pending: fetch the tip and every
//!    pending commit not cached (one fetch), [`combine`], and ONE `git push --atomic` that
//!    moves the ledger ref with a lease on the tip, deletes each landed or already-landed
//!    incoming ref with a lease on its commit, and creates each refused mark (lease: must not
//!    exist; a key refused before keeps its first mark) while deleting its incoming ref. All
//!    of it or none. The remote tip must descend from the one this cache last confirmed, as
//!    for every remote writer.
//! 3. Deference, to keep pushes near one per job: only the job whose key is the first pending
//!    one lands at once; the others list again after their backoff, usually to find
//!    themselves landed. It is an optimisation, never a dependency: once the same key has
//!    stayed first for [`super::pending::patience`] of the job's own position (that job may
//!    be dead: the second job takes over after [`super::pending::PATIENCE`] and a little more
//!    per pending publication, each later one a [`super::pending::PATIENCE_STEP`] after the
//!    one before), the job combines.
//! 4. Bounded wait: rounds back off (25 ms doubling to 1.6 s, longer with many pending: [`super::pending::poll_delay_ms`], jittered) within the caller's
//!    budget. Past it the job ends unacknowledged ([`super::pending::Error::StillPending`])
//!    with its publication still pending (named by its ref), which the next publisher or
//!    `maintain` lands or refuses.
//!
//! The combined commit's message names each landed publication
//! (`Ledger-Publication: <key> <commit>`) and keeps its `Ledger-Manifest-Sha256` trailer.
//!
//! # Crash safety
//!
//! The atomic push is the commit point. A job or lander killed at any moment leaves each
//! publication in one of three states: landed (its files in the ledger; its incoming ref
//! possibly left after a direct landing, deleted by the next lander), refused (incoming ref
//! gone, mark present), or pending (incoming ref present) for the next publisher or
//! `maintain --remote`. A job acknowledges only once landed; nothing acknowledged is lost.
//!
//! # verify, log and the hook
//!
//! - `verify` checks the ledger ref only: pending publications are not ledger data, and a
//!   fresh clone (which fetches `refs/heads/*`) does not hold them, so it verifies clean
//!   whatever is pending.
//! - `log` reads the ledger ref only; pending events are not shown until landed.
//! - The hook: the ledger ref as now (`verify --range`); an incoming ref may only be created
//!   (never updated), with a commit whose key is its name, whose parent is the ledger tip or
//!   an ancestor within [`MAX_BASE_DEPTH`], and which passes `verify --range parent..commit`
//!   (a ledger push's checks); it may be deleted only when the ledger ref (as this push leaves
//!   it) holds every file it adds ([`is_landed`]), or when its refused mark exists (created in
//!   the same push, or before for the same key). A refused
//!   mark may only be created, as a commit whose single parent is the deleted incoming commit
//!   and whose tree is that commit's tree. Every other deletion is refused as now, so
//!   `hooks install` must stop setting `receive.denyDeletes` (the hook takes over that rule).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use super::limits;
use crate::identity::Digest;
use crate::ledger::shard;
use crate::privacy::Profile;
use crate::store::{self, BlobId, Change, CommitId, Signature, Snapshot, Store};
use crate::verify;

/// The namespace of pending publications: `refs/ledger/incoming/<key>`.
pub const INCOMING_PREFIX: &str = "refs/ledger/incoming/";

/// The namespace of refusal marks: `refs/ledger/refused/<key>`.
pub const REFUSED_PREFIX: &str = "refs/ledger/refused/";

/// How far back from the ledger tip a publication's parent may lie (commits walked). Beyond
/// it the publication is refused: it was built on something this ledger no longer has near
/// its tip, and it should be planned again.
pub const MAX_BASE_DEPTH: usize = 4096;

/// The longest refusal reason kept (bytes); a longer one is cut at a character boundary.
pub const MAX_REASON_BYTES: usize = 4096;

/// Why combining could not run at all (a refusal of one publication is a [`Verdict`], not an
/// error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository could not be read or written (a pending commit not fetched shows here
    /// as a missing object).
    #[error(transparent)]
    Store(#[from] store::Error),
    /// Verification could not read the repository.
    #[error(transparent)]
    Verify(#[from] verify::Error),
}

/// One pending publication: its key (the name under [`INCOMING_PREFIX`]) and its commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// The key, as [`publication_key`] computes it for an honest ref.
    pub key: String,
    /// The publication commit the incoming ref names.
    pub commit: CommitId,
}

/// What [`combine`] decided for one publication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its new files are in the combined commit (`files` of them: a file another publication
    /// earlier in key order also adds counts for that one).
    Landed {
        /// Files this publication brings.
        files: usize,
    },
    /// Every file it adds is already on the tip (or comes, with the same bytes, from a
    /// publication earlier in key order): its incoming ref may go.
    AlreadyLanded,
    /// It conflicts with the ledger or breaks a rule: refused on its own, with the reason (at
    /// most [`MAX_REASON_BYTES`]).
    Refused(String),
    /// Not decided this round (over a budget, or set aside by the last-resort fallback): it
    /// stays pending.
    Deferred,
}

/// Knobs of [`combine`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Author and committer of a combined commit.
    pub signature: Signature,
    /// The profile the combined commit is verified under (default strict, as the hook).
    pub privacy: Profile,
    /// Publications landed by one commit at most (default 128); the rest are deferred.
    pub max_publications: usize,
    /// Bytes of new files in one commit at most (default 64 MiB); the first accepted
    /// publication is taken whatever its size (at most 16 MiB by the publisher's limits).
    pub max_bytes: u64,
}

impl Options {
    /// Defaults with the given signature.
    pub fn new(signature: Signature) -> Options {
        Options {
            signature,
            privacy: Profile::default(),
            max_publications: 128,
            max_bytes: 64 << 20,
        }
    }
}

/// The result of [`combine`].
#[derive(Clone, Debug)]
pub struct Combined {
    /// The commit to land on the tip with one compare-and-swap, verified as a range from the
    /// tip; `None` when nothing is new (every publication already landed, refused or deferred).
    pub commit: Option<CommitId>,
    /// Whether `commit` is the one publication's own commit (built on the tip itself).
    pub fast_forward: bool,
    /// One verdict per distinct publication given (a repeated one is listed once), sorted by
    /// key then commit.
    pub verdicts: Vec<(Incoming, Verdict)>,
    /// Files `commit` adds.
    pub files: usize,
}

/// The full incoming ref of `key`.
pub fn incoming_ref(key: &str) -> String {
    format!("{INCOMING_PREFIX}{key}")
}

/// The full refused-mark ref of `key`.
pub fn refused_ref(key: &str) -> String {
    format!("{REFUSED_PREFIX}{key}")
}

/// The key of the publication `commit` (see the module docs): sha256 hex of
/// `<path>\t<blob id>\n` for every file it adds over its first parent (the empty tree when it
/// has none), sorted by path. Changes other than additions are not part of the key (such a
/// commit is refused anyway).
///
/// # Errors
/// [`Error::Store`] when the commit or its trees cannot be read.
pub fn publication_key(store: &Store, commit: CommitId) -> Result<String, Error> {
    let parent = store.parents(commit)?.first().copied();
    let snap = store.snapshot(Some(commit))?;
    let mut text = String::new();
    for change in store.diff(parent, commit, "")? {
        if let Change::Added(path) = change
            && let Some(id) = snap.file_id(&path)?
        {
            text.push_str(&format!("{path}\t{id}\n"));
        }
    }
    Ok(Digest::of(text).as_str().to_owned())
}

/// The refusal mark of `incoming`: a commit whose single parent is the refused commit and whose
/// tree is its tree (no new tree or blob), message `ledger: refused publication <key>`, a blank
/// line, `reason` (NUL bytes dropped, cut at [`MAX_REASON_BYTES`]), and the trailer
/// `Ledger-Refused: <key> <commit>`. Pushed to [`refused_ref`] by the push that deletes the
/// incoming ref.
///
/// # Errors
/// [`Error::Store`] when the commit cannot be written (an invalid signature included).
pub fn refusal_mark(
    store: &Store,
    incoming: &Incoming,
    reason: &str,
    signature: &Signature,
) -> Result<CommitId, Error> {
    let reason = cut(&reason.replace('\0', ""));
    let message = format!(
        "ledger: refused publication {}\n\n{reason}\n\nLedger-Refused: {} {}\n",
        incoming.key, incoming.key, incoming.commit
    );
    let none: [(String, Vec<u8>); 0] = [];
    Ok(store.write_commit(Some(incoming.commit), &none, &message, signature)?)
}

/// Whether the ledger at `tip` holds every file `incoming` adds over its parent: the same
/// bytes, or for a shard replay-equivalent ones (the rule by which [`combine`] calls a
/// publication already landed). What a job checks to learn that its publication landed, and
/// what the hook checks before it lets an incoming ref be deleted without a refused mark. A
/// commit that changes or deletes a file is never landed.
///
/// # Errors
/// [`Error::Store`] when a commit, tree or blob cannot be read.
pub fn is_landed(store: &Store, tip: Option<CommitId>, incoming: &Incoming) -> Result<bool, Error> {
    let parent = store.parents(incoming.commit)?.first().copied();
    let base = store.snapshot(tip)?;
    let own = store.snapshot(Some(incoming.commit))?;
    let none = Stack::default();
    for change in store.diff(parent, incoming.commit, "")? {
        let Change::Added(path) = change else {
            return Ok(false);
        };
        let Some(id) = own.file_id(&path)? else {
            return Ok(false);
        };
        if !matches!(none.place(&base, &own, &path, id)?, Place::Present) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Combines the pending publications `incoming` onto `tip` (`None`: the ledger does not exist
/// yet): one commit holding every new file of every publication that does not conflict,
/// verified as a range from `tip`, and a verdict for each (see the module docs for the rules
/// and their order). Nothing moves a ref. Every pending commit must be in `store`.
///
/// # Errors
/// [`Error::Store`] when an object cannot be read or written, [`Error::Verify`] when
/// verification cannot read the repository. A publication's own fault is a
/// [`Verdict::Refused`], never an error.
pub fn combine(
    store: &Store,
    tip: Option<CommitId>,
    incoming: &[Incoming],
    options: &Options,
) -> Result<Combined, Error> {
    let mut sorted = incoming.to_vec();
    sorted.sort_by(|a, b| (&a.key, a.commit.to_hex()).cmp(&(&b.key, b.commit.to_hex())));
    sorted.dedup();
    let history = recent_history(store, tip)?;
    let mut verdicts: Vec<Verdict> = vec![Verdict::Deferred; sorted.len()];
    // Each publication that passed its own checks: its index and added files.
    let mut candidates: Vec<(usize, Vec<(String, BlobId)>)> = Vec::new();
    for (i, inc) in sorted.iter().enumerate() {
        match additions(store, inc, tip, &history)? {
            Ok(files) => candidates.push((i, files)),
            Err(reason) => verdicts[i] = Verdict::Refused(cut(&reason)),
        }
    }

    // Fast path: everything stacked on the tip at once, verified once.
    let tip_snap = store.snapshot(tip)?;
    let mut stack = Stack::default();
    // The publications decided this round (the rest are over a budget).
    let mut considered: Vec<usize> = Vec::new();
    for (i, files) in &candidates {
        let i = *i;
        let over = stack.owners.len() >= options.max_publications
            || (!stack.owners.is_empty() && stack.bytes >= options.max_bytes);
        if over {
            continue;
        }
        considered.push(i);
        verdicts[i] = stack.push(&tip_snap, &sorted[i], i, files)?;
    }
    if stack.files.is_empty() {
        return Ok(Combined {
            commit: None,
            fast_forward: false,
            verdicts: sorted.into_iter().zip(verdicts).collect(),
            files: 0,
        });
    }
    let (commit, fast_forward) = stack.commit(store, &tip_snap, &sorted, &candidates, options)?;
    drop(tip_snap);
    if verify_clean(store, tip, commit, options)?.is_none() {
        return Ok(Combined {
            commit: Some(commit),
            fast_forward,
            files: stack.files.len(),
            verdicts: sorted.into_iter().zip(verdicts).collect(),
        });
    }

    // Fallback: one by one in key order, each verified on the ones kept before it. Every
    // publication decided above is decided again: one already landed or refused only through
    // a peer's files must not keep that verdict if the peer is refused now.
    let mut base = tip;
    let mut chain: Vec<(usize, CommitId)> = Vec::new();
    for (i, files) in candidates.iter().filter(|(i, _)| considered.contains(i)) {
        let i = *i;
        let snap = store.snapshot(base)?;
        let mut one = Stack::default();
        verdicts[i] = one.push(&snap, &sorted[i], i, files)?;
        if one.files.is_empty() {
            continue;
        }
        let (c, _) = one.commit(store, &snap, &sorted, &candidates, options)?;
        drop(snap);
        match verify_clean(store, base, c, options)? {
            None => {
                base = Some(c);
                chain.push((i, c));
            }
            Some(reason) => verdicts[i] = Verdict::Refused(reason),
        }
    }
    if chain.is_empty() {
        return Ok(Combined {
            commit: None,
            fast_forward: false,
            verdicts: sorted.into_iter().zip(verdicts).collect(),
            files: 0,
        });
    }
    // The survivors as one commit on the tip.
    let tip_snap = store.snapshot(tip)?;
    let mut kept = Stack::default();
    for (i, files) in candidates
        .iter()
        .filter(|(i, _)| chain.iter().any(|(k, _)| k == i))
    {
        verdicts[*i] = kept.push(&tip_snap, &sorted[*i], *i, files)?;
    }
    let (commit, fast_forward) = kept.commit(store, &tip_snap, &sorted, &candidates, options)?;
    drop(tip_snap);
    if verify_clean(store, tip, commit, options)?.is_none() {
        return Ok(Combined {
            commit: Some(commit),
            fast_forward,
            files: kept.files.len(),
            verdicts: sorted.into_iter().zip(verdicts).collect(),
        });
    }
    // Last resort: the first survivor alone (verified on the tip above); every other verdict
    // of this round may rest on files that do not land now, so they all wait.
    let (first, first_commit) = chain[0];
    let files = match &verdicts[first] {
        Verdict::Landed { files } => *files,
        _ => 0,
    };
    for &i in considered.iter().filter(|&&i| i != first) {
        verdicts[i] = Verdict::Deferred;
    }
    Ok(Combined {
        commit: Some(first_commit),
        fast_forward: false,
        files,
        verdicts: sorted.into_iter().zip(verdicts).collect(),
    })
}

/// The tip and its ancestors, at most [`MAX_BASE_DEPTH`] commits, breadth first.
fn recent_history(store: &Store, tip: Option<CommitId>) -> Result<HashSet<CommitId>, Error> {
    let mut seen = HashSet::new();
    let mut queue: VecDeque<CommitId> = tip.into_iter().collect();
    while let Some(c) = queue.pop_front() {
        if seen.len() >= MAX_BASE_DEPTH {
            break;
        }
        if seen.insert(c) {
            queue.extend(store.parents(c)?);
        }
    }
    Ok(seen)
}

/// The files `inc` adds over its parent, or why it is refused on its own (rule 2).
pub(super) fn additions(
    store: &Store,
    inc: &Incoming,
    tip: Option<CommitId>,
    history: &HashSet<CommitId>,
) -> Result<Result<Vec<(String, BlobId)>, String>, Error> {
    let parents = store.parents(inc.commit)?;
    let parent = match parents.as_slice() {
        [] => None,
        [p] => Some(*p),
        many => {
            return Ok(Err(format!(
                "a publication has one parent; {} has {}",
                inc.commit,
                many.len()
            )));
        }
    };
    if let Some(p) = parent
        && !history.contains(&p)
    {
        let tip = tip.map_or_else(|| "no ledger".to_owned(), |t| t.to_hex());
        return Ok(Err(format!(
            "built on {p}, which is not the ledger tip ({tip}) or one of its last \
             {MAX_BASE_DEPTH} commits: publish again"
        )));
    }
    let diff = store.diff_with_modes(parent, inc.commit, "")?;
    if let Some((path, mode)) = diff.irregular.first() {
        return Ok(Err(format!(
            "{path}: a {} is not ledger data",
            mode.describe()
        )));
    }
    if let Some((path, defect)) = diff.malformed.first() {
        return Ok(Err(format!(
            "{path}: malformed tree ({})",
            defect.rule_name()
        )));
    }
    if diff.changes.len() > limits::MAX_PUBLISH_PATHS + 1 {
        return Ok(Err(format!(
            "adds {} files, more than a publication may ({})",
            diff.changes.len(),
            limits::MAX_PUBLISH_PATHS + 1
        )));
    }
    let snap = store.snapshot(Some(inc.commit))?;
    let mut files = Vec::with_capacity(diff.changes.len());
    for change in diff.changes {
        let path = match change {
            Change::Added(p) if p.starts_with("ledger/v1/") => p,
            Change::Added(p) => return Ok(Err(format!("{p}: added outside ledger/v1/"))),
            Change::Modified(p) => return Ok(Err(format!("{p}: an existing file is changed"))),
            Change::Deleted(p) => return Ok(Err(format!("{p}: an existing file is deleted"))),
        };
        let Some(id) = snap.file_id(&path)? else {
            return Ok(Err(format!("{path}: not a file")));
        };
        files.push((path, id));
    }
    if key_of(&files) != inc.key {
        return Ok(Err(format!(
            "its name {} is not the key of what it adds ({})",
            inc.key,
            key_of(&files)
        )));
    }
    Ok(Ok(files))
}

/// [`publication_key`] of the added files (sorted by path, as [`Store::diff`] lists them).
fn key_of(files: &[(String, BlobId)]) -> String {
    let mut text = String::new();
    for (path, id) in files {
        text.push_str(&format!("{path}\t{id}\n"));
    }
    Digest::of(text).as_str().to_owned()
}

/// Publications stacked on one base snapshot: the new files (path → id, bytes, owner).
#[derive(Default)]
struct Stack {
    files: BTreeMap<String, (BlobId, Arc<[u8]>, usize)>,
    /// Indices of the publications that brought files, in key order.
    owners: Vec<usize>,
    bytes: u64,
}

impl Stack {
    /// Rule 3 for one publication: its verdict, and its new files taken when it lands.
    fn push(
        &mut self,
        base: &Snapshot<'_>,
        inc: &Incoming,
        index: usize,
        files: &[(String, BlobId)],
    ) -> Result<Verdict, Error> {
        let store = base.store();
        let own = store.snapshot(Some(inc.commit))?;
        let mut new: Vec<(String, BlobId, Arc<[u8]>)> = Vec::new();
        for (path, id) in files {
            match self.place(base, &own, path, *id)? {
                Place::Present => {}
                Place::New => {
                    let bytes = match own.read(path, limits::MAX_FILE_BYTES as u64) {
                        Ok(Some(b)) => b,
                        Ok(None) => return Ok(Verdict::Refused(format!("{path}: not a file"))),
                        Err(store::Error::TooLarge { max, .. }) => {
                            return Ok(Verdict::Refused(format!(
                                "{path}: larger than {max} bytes"
                            )));
                        }
                        Err(e) => return Err(e.into()),
                    };
                    new.push((path.clone(), *id, bytes.into()));
                }
                Place::Conflict(reason) => return Ok(Verdict::Refused(cut(&reason))),
            }
        }
        if new.is_empty() {
            return Ok(Verdict::AlreadyLanded);
        }
        let count = new.len();
        for (path, id, bytes) in new {
            self.bytes += bytes.len() as u64;
            self.files.insert(path, (id, bytes, index));
        }
        self.owners.push(index);
        Ok(Verdict::Landed { files: count })
    }

    /// Where `path` (blob `id`, read from `own` when needed) stands on the base plus the stack.
    fn place(
        &self,
        base: &Snapshot<'_>,
        own: &Snapshot<'_>,
        path: &str,
        id: BlobId,
    ) -> Result<Place, Error> {
        if let Some((other, _, _)) = self.files.get(path) {
            return Ok(if *other == id {
                Place::Present
            } else {
                Place::Conflict(format!(
                    "{path}: another pending publication adds it with other bytes"
                ))
            });
        }
        // A file of the stack where a directory is needed, or the other way round.
        let below = format!("{path}/");
        if self
            .files
            .range(below.clone()..)
            .next()
            .is_some_and(|(p, _)| p.starts_with(&below))
        {
            return Ok(Place::Conflict(format!(
                "{path}: a pending publication has a directory there"
            )));
        }
        for (at, _) in path.match_indices('/') {
            let dir = &path[..at];
            if self.files.contains_key(dir) {
                return Ok(Place::Conflict(format!(
                    "{path}: a pending publication has a file at {dir}"
                )));
            }
            match base.file_id(dir) {
                Ok(Some(_)) => {
                    return Ok(Place::Conflict(format!(
                        "{path}: the ledger has a file at {dir}"
                    )));
                }
                Ok(None) => break,
                Err(store::Error::NotAFile { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match base.file_id(path) {
            Ok(None) => Ok(Place::New),
            Ok(Some(existing)) if existing == id => Ok(Place::Present),
            Ok(Some(existing)) => {
                if shard::parse_path(path).is_some()
                    && replay_equivalent(base, own, path, existing, id)?
                {
                    Ok(Place::Present)
                } else {
                    Ok(Place::Conflict(format!(
                        "{path}: the ledger holds other bytes there"
                    )))
                }
            }
            Err(store::Error::NotAFile { .. }) => Ok(Place::Conflict(format!(
                "{path}: the ledger has a directory there"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// The commit of the stack on `base`: the one publication's own commit when it alone
    /// brings files, is built on `base` itself and brings all it adds; else a new commit.
    fn commit(
        &self,
        store: &Store,
        base: &Snapshot<'_>,
        sorted: &[Incoming],
        candidates: &[(usize, Vec<(String, BlobId)>)],
        options: &Options,
    ) -> Result<(CommitId, bool), Error> {
        if let [only] = self.owners.as_slice() {
            let inc = &sorted[*only];
            let all = candidates
                .iter()
                .find(|(i, _)| i == only)
                .is_some_and(|(_, f)| f.len() == self.files.len());
            if all && store.parents(inc.commit)?.first().copied() == base.commit() {
                return Ok((inc.commit, true));
            }
        }
        let files: Vec<(String, Arc<[u8]>)> = self
            .files
            .iter()
            .map(|(p, (_, bytes, _))| (p.clone(), bytes.clone()))
            .collect();
        let landed: Vec<&Incoming> = self.owners.iter().map(|i| &sorted[*i]).collect();
        let message = combined_message(store, &landed, files.len())?;
        Ok((
            store.write_commit_on(base, &files, &message, &options.signature)?,
            false,
        ))
    }
}

/// Where one added path stands ([`Stack::place`]).
enum Place {
    Present,
    New,
    Conflict(String),
}

/// Whether the shard at `path` in `base` (blob `existing`) and in `own` (blob `id`) hold
/// replay-equivalent events ([`shard::existing_is_equivalent`]); anything unreadable is not.
fn replay_equivalent(
    base: &Snapshot<'_>,
    own: &Snapshot<'_>,
    path: &str,
    existing: BlobId,
    id: BlobId,
) -> Result<bool, Error> {
    let max = limits::MAX_FILE_BYTES as u64;
    let read = |snap: &Snapshot<'_>, blob| match snap.read_blob(blob, path, max) {
        Ok(b) => Ok(String::from_utf8(b).ok()),
        Err(store::Error::TooLarge { .. }) => Ok(None),
        Err(e) => Err(Error::from(e)),
    };
    let (Some(existing), Some(candidate)) = (read(base, existing)?, read(own, id)?) else {
        return Ok(false);
    };
    let Ok(events) = shard::parse_content(&candidate, path) else {
        return Ok(false);
    };
    let candidate = shard::Shard::new(path.to_owned(), events, Arc::from(candidate));
    Ok(shard::existing_is_equivalent(&existing, &candidate).unwrap_or(false))
}

/// `None` when `old..new` verifies clean under the options' profile, else the findings as a
/// reason.
fn verify_clean(
    store: &Store,
    old: Option<CommitId>,
    new: CommitId,
    options: &Options,
) -> Result<Option<String>, Error> {
    let report = verify::verify_range_with(
        store,
        old,
        new,
        &verify::Options {
            privacy: options.privacy,
        },
    )?;
    if report.is_clean() {
        return Ok(None);
    }
    let lines: Vec<String> = report
        .findings
        .iter()
        .map(|f| format!("{} {}: {}", f.rule, f.path, f.detail))
        .collect();
    Ok(Some(cut(&lines.join("\n"))))
}

/// A combined commit's message: a subject with the counts, then per landed publication, in
/// key order, `Ledger-Publication: <key> <commit>` and the `Ledger-Manifest-Sha256` trailer of
/// its own commit (the manifest digest the job printed stays checkable once the incoming
/// commit is gone).
fn combined_message(store: &Store, landed: &[&Incoming], files: usize) -> Result<String, Error> {
    let mut message = format!(
        "ledger: {} pending publication(s) combined: {files} new file(s)\n\n",
        landed.len()
    );
    for inc in landed {
        message.push_str(&format!("Ledger-Publication: {} {}\n", inc.key, inc.commit));
        for line in store.message(inc.commit)?.lines() {
            if line.starts_with("Ledger-Manifest-Sha256: ") {
                message.push_str(line);
                message.push('\n');
            }
        }
    }
    Ok(message)
}

/// `text` cut to at most [`MAX_REASON_BYTES`] at a character boundary.
fn cut(text: &str) -> String {
    if text.len() <= MAX_REASON_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_REASON_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::land::{Built, build_on};
    use crate::publish::test_support::*;
    use crate::publish::{Batch, publish, read_source, validate_batch};

    const MAIN: &str = "refs/heads/main";

    fn batch_of(job: &str) -> Batch {
        let files = read_source(&day1(job), None).unwrap();
        validate_batch(&files, None).unwrap()
    }

    /// The publication commit of `batch` planned on `tip`, as a job parks it (no ref moves).
    fn parked(store: &Store, batch: &Batch, tip: Option<CommitId>) -> Incoming {
        let options = crate::publish::Options::new(sig());
        match build_on(store, batch, tip, &options, 1).unwrap() {
            Built::Commit(_, commit) => Incoming {
                key: publication_key(store, commit).unwrap(),
                commit,
            },
            Built::Unchanged(_) => panic!("nothing to publish"),
        }
    }

    fn job(store: &Store, name: &str, tip: Option<CommitId>) -> Incoming {
        parked(store, &batch_of(name), tip)
    }

    /// The day's job `name` with its last event dropped: the same producer run with another
    /// shard set, which conflicts with `name` itself.
    fn trimmed(store: &Store, name: &str, tip: Option<CommitId>) -> Incoming {
        let mut f = read_source(&day1(name), None).unwrap()[0].clone();
        let lines: Vec<&str> = f.content.lines().collect();
        f.content = format!("{}\n", lines[..lines.len() - 1].join("\n"));
        parked(store, &validate_batch(&[f], None).unwrap(), tip)
    }

    fn landed(store: &Store, tip: Option<CommitId>, combined: &Combined) -> CommitId {
        let commit = combined.commit.expect("a commit to land");
        store.update_ref(MAIN, tip, commit, "test").unwrap();
        commit
    }

    fn verdict<'c>(combined: &'c Combined, inc: &Incoming) -> &'c Verdict {
        &combined
            .verdicts
            .iter()
            .find(|(i, _)| i == inc)
            .expect("a verdict for every publication")
            .1
    }

    fn holds_all(store: &Store, commit: CommitId, inc: &Incoming) -> bool {
        let parent = store.parents(inc.commit).unwrap().first().copied();
        let snap = store.snapshot(Some(commit)).unwrap();
        let own = store.snapshot(Some(inc.commit)).unwrap();
        store
            .diff(parent, inc.commit, "")
            .unwrap()
            .iter()
            .all(|c| snap.file_id(c.path()).unwrap() == own.file_id(c.path()).unwrap())
    }

    fn ledger_with(store: &Store, jobs: &[&str]) -> CommitId {
        let options = crate::publish::Options::new(sig());
        for j in jobs {
            publish(store, &day1(j), &options).unwrap();
        }
        store.tip(MAIN).unwrap().unwrap()
    }

    #[test]
    fn two_disjoint_publications_combine_into_one_commit_that_verifies_clean() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let (a, b) = (job(&store, "002", Some(tip)), job(&store, "003", Some(tip)));
        let combined = combine(
            &store,
            Some(tip),
            &[a.clone(), b.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        assert!(!combined.fast_forward);
        for inc in [&a, &b] {
            assert!(matches!(verdict(&combined, inc), Verdict::Landed { .. }));
        }
        let commit = landed(&store, Some(tip), &combined);
        assert_eq!(
            store.parents(commit).unwrap(),
            vec![tip],
            "one commit on the tip"
        );
        assert!(holds_all(&store, commit, &a) && holds_all(&store, commit, &b));
        assert!(
            verify::verify_range(&store, Some(tip), commit)
                .unwrap()
                .is_clean()
        );
        assert!(verify::verify_revision(&store, commit).unwrap().is_clean());
        let message = store.message(commit).unwrap();
        for inc in [&a, &b] {
            assert!(message.contains(&format!("Ledger-Publication: {} {}\n", inc.key, inc.commit)));
        }
        assert_eq!(
            message.matches("\nLedger-Manifest-Sha256: ").count(),
            2,
            "{message}"
        );
    }

    #[test]
    fn publications_onto_a_ledger_that_does_not_exist_yet_combine() {
        let (_dir, store) = crate::tests::scratch_store();
        let (a, b) = (job(&store, "001", None), job(&store, "002", None));
        let combined =
            combine(&store, None, &[a.clone(), b.clone()], &Options::new(sig())).unwrap();
        let commit = landed(&store, None, &combined);
        assert!(store.parents(commit).unwrap().is_empty());
        assert!(holds_all(&store, commit, &a) && holds_all(&store, commit, &b));
        assert!(verify::verify_revision(&store, commit).unwrap().is_clean());
    }

    #[test]
    fn one_publication_on_the_tip_lands_as_it_is() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let a = job(&store, "002", Some(tip));
        let combined = combine(
            &store,
            Some(tip),
            std::slice::from_ref(&a),
            &Options::new(sig()),
        )
        .unwrap();
        assert!(combined.fast_forward);
        assert_eq!(combined.commit, Some(a.commit));
    }

    #[test]
    fn a_replayed_publication_is_already_landed() {
        let (_dir, store) = crate::tests::scratch_store();
        let t0 = ledger_with(&store, &["001"]);
        let a = job(&store, "002", Some(t0));
        let first = combine(
            &store,
            Some(t0),
            std::slice::from_ref(&a),
            &Options::new(sig()),
        )
        .unwrap();
        let t1 = landed(&store, Some(t0), &first);
        // The same incoming ref again, and the same job parked again on the older tip.
        let again = job(&store, "002", Some(t0));
        assert_eq!(
            again, a,
            "the same publication on the same tip is the same commit"
        );
        let b = job(&store, "002", None);
        assert_ne!(b.key, a.key, "it adds the layout record too");
        let combined = combine(
            &store,
            Some(t1),
            &[a.clone(), b.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        assert_eq!(combined.commit, None);
        assert_eq!(verdict(&combined, &a), &Verdict::AlreadyLanded);
        assert_eq!(verdict(&combined, &b), &Verdict::AlreadyLanded);
    }

    #[test]
    fn a_conflicting_publication_is_refused_while_the_others_land() {
        let (_dir, store) = crate::tests::scratch_store();
        let t0 = ledger_with(&store, &["002"]);
        let a = job(&store, "001", Some(t0));
        let t1 = landed(
            &store,
            Some(t0),
            &combine(
                &store,
                Some(t0),
                std::slice::from_ref(&a),
                &Options::new(sig()),
            )
            .unwrap(),
        );
        // Conflicts with the ledger.
        let bad = trimmed(&store, "001", Some(t0));
        let (b, c) = (job(&store, "003", Some(t0)), job(&store, "004", Some(t1)));
        let combined = combine(
            &store,
            Some(t1),
            &[bad.clone(), b.clone(), c.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        let Verdict::Refused(reason) = verdict(&combined, &bad) else {
            panic!("{:?}", combined.verdicts);
        };
        assert!(reason.contains("the ledger holds other bytes"), "{reason}");
        let commit = landed(&store, Some(t1), &combined);
        assert!(holds_all(&store, commit, &b) && holds_all(&store, commit, &c));
        assert!(verify::verify_revision(&store, commit).unwrap().is_clean());

        // Conflicting with each other: the first in key order lands, the other is refused.
        let (x, y) = (
            job(&store, "005", Some(commit)),
            trimmed(&store, "005", Some(commit)),
        );
        let combined = combine(
            &store,
            Some(commit),
            &[y.clone(), x.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        let (first, second) = if x.key < y.key { (&x, &y) } else { (&y, &x) };
        assert!(matches!(verdict(&combined, first), Verdict::Landed { .. }));
        assert!(
            matches!(verdict(&combined, second), Verdict::Refused(r) if r.contains("another pending publication"))
        );
        let end = landed(&store, Some(commit), &combined);
        assert!(verify::verify_revision(&store, end).unwrap().is_clean());
    }

    #[test]
    fn the_same_set_gives_the_same_commit_whatever_the_order() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let set = [
            job(&store, "002", Some(tip)),
            job(&store, "003", Some(tip)),
            job(&store, "004", Some(tip)),
            trimmed(&store, "003", Some(tip)),
        ];
        let options = Options::new(sig());
        let one = combine(&store, Some(tip), &set, &options).unwrap();
        let mut reversed = set.to_vec();
        reversed.reverse();
        let two = combine(&store, Some(tip), &reversed, &options).unwrap();
        let three = combine(
            &store,
            Some(tip),
            &[
                set[2].clone(),
                set[0].clone(),
                set[3].clone(),
                set[1].clone(),
            ],
            &options,
        )
        .unwrap();
        assert!(one.commit.is_some());
        assert_eq!(one.commit, two.commit);
        assert_eq!(one.commit, three.commit);
        assert_eq!(one.verdicts, two.verdicts);
        assert_eq!(one.verdicts, three.verdicts);
        assert_eq!(
            one.verdicts
                .iter()
                .filter(|(_, v)| matches!(v, Verdict::Refused(_)))
                .count(),
            1
        );
    }

    #[test]
    fn a_publication_built_on_an_older_tip_combines_onto_the_newer_one() {
        let (_dir, store) = crate::tests::scratch_store();
        let t0 = ledger_with(&store, &["001"]);
        let old = job(&store, "002", Some(t0));
        let t1 = ledger_with(&store, &["003"]);
        assert_ne!(t0, t1);
        let combined = combine(
            &store,
            Some(t1),
            std::slice::from_ref(&old),
            &Options::new(sig()),
        )
        .unwrap();
        assert!(!combined.fast_forward);
        let commit = landed(&store, Some(t1), &combined);
        assert_eq!(store.parents(commit).unwrap(), vec![t1]);
        assert!(holds_all(&store, commit, &old));
        assert!(
            verify::verify_range(&store, Some(t1), commit)
                .unwrap()
                .is_clean()
        );
    }

    #[test]
    fn a_publication_not_built_on_the_ledger_is_refused() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let stranger = store
            .write_commit(
                None,
                &[("notes/x".to_owned(), b"x".to_vec())],
                "other",
                &sig(),
            )
            .unwrap();
        let a = job(&store, "002", Some(stranger));
        let b = job(&store, "003", Some(tip));
        let combined = combine(
            &store,
            Some(tip),
            &[a.clone(), b.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        assert!(matches!(verdict(&combined, &a), Verdict::Refused(r) if r.contains("built on")));
        assert!(combined.fast_forward, "b alone, built on the tip");
        assert_eq!(combined.commit, Some(b.commit));
    }

    /// A publication whose fault only verification sees (here an unknown ledger path) is
    /// refused with the findings, and the others still land in one verified commit.
    #[test]
    fn a_publication_that_fails_verification_is_isolated() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let junk_commit = store
            .write_commit(
                Some(tip),
                &[("ledger/v1/junk.txt".to_owned(), b"x\n".to_vec())],
                "junk",
                &sig(),
            )
            .unwrap();
        let junk = Incoming {
            key: publication_key(&store, junk_commit).unwrap(),
            commit: junk_commit,
        };
        let (a, b) = (job(&store, "002", Some(tip)), job(&store, "003", Some(tip)));
        let combined = combine(
            &store,
            Some(tip),
            &[a.clone(), junk.clone(), b.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        assert!(
            matches!(verdict(&combined, &junk), Verdict::Refused(r) if r.contains("junk.txt")),
            "{:?}",
            combined.verdicts
        );
        let commit = landed(&store, Some(tip), &combined);
        assert_eq!(store.parents(commit).unwrap(), vec![tip]);
        assert!(holds_all(&store, commit, &a) && holds_all(&store, commit, &b));
        assert!(!holds_all(&store, commit, &junk));
        assert!(
            verify::verify_range(&store, Some(tip), commit)
                .unwrap()
                .is_clean()
        );
    }

    /// A publication whose files all come, with the same bytes, from a peer earlier in key
    /// order is already landed only if that peer lands: when verification refuses the peer,
    /// the publication brings its files itself.
    #[test]
    fn a_publication_is_not_already_landed_through_a_peer_that_is_refused() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let honest = job(&store, "002", Some(tip));
        let own = store.snapshot(Some(honest.commit)).unwrap();
        let files: Vec<(String, Vec<u8>)> = store
            .diff(Some(tip), honest.commit, "")
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.path().to_owned(),
                    own.read(c.path(), 1 << 22).unwrap().unwrap(),
                )
            })
            .collect();
        // The same files and a junk file, under a key that sorts before the honest one.
        let peer = (0..64)
            .map(|n| {
                let mut f = files.clone();
                f.push((format!("ledger/v1/junk-{n}.txt"), b"x\n".to_vec()));
                let commit = store.write_commit(Some(tip), &f, "peer", &sig()).unwrap();
                Incoming {
                    key: publication_key(&store, commit).unwrap(),
                    commit,
                }
            })
            .find(|p| p.key < honest.key)
            .expect("a key that sorts first");
        let combined = combine(
            &store,
            Some(tip),
            &[honest.clone(), peer.clone()],
            &Options::new(sig()),
        )
        .unwrap();
        assert!(matches!(verdict(&combined, &peer), Verdict::Refused(_)));
        assert!(
            matches!(verdict(&combined, &honest), Verdict::Landed { .. }),
            "{:?}",
            combined.verdicts
        );
        let commit = landed(&store, Some(tip), &combined);
        assert!(holds_all(&store, commit, &honest));
        assert!(is_landed(&store, Some(commit), &honest).unwrap());
        assert!(!is_landed(&store, Some(commit), &peer).unwrap());
        assert!(!is_landed(&store, Some(tip), &honest).unwrap());
    }

    #[test]
    fn a_publication_under_another_name_is_refused() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let (a, b) = (job(&store, "002", Some(tip)), job(&store, "003", Some(tip)));
        let squatter = Incoming {
            key: b.key.clone(),
            commit: a.commit,
        };
        let combined = combine(
            &store,
            Some(tip),
            std::slice::from_ref(&squatter),
            &Options::new(sig()),
        )
        .unwrap();
        assert!(
            matches!(verdict(&combined, &squatter), Verdict::Refused(r) if r.contains("is not the key")),
            "{:?}",
            combined.verdicts
        );
        assert_eq!(combined.commit, None);
    }

    #[test]
    fn over_the_budget_the_rest_is_deferred() {
        let (_dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let set = [job(&store, "002", Some(tip)), job(&store, "003", Some(tip))];
        let mut options = Options::new(sig());
        options.max_publications = 1;
        let combined = combine(&store, Some(tip), &set, &options).unwrap();
        let deferred = combined
            .verdicts
            .iter()
            .filter(|(_, v)| *v == Verdict::Deferred)
            .count();
        assert_eq!(deferred, 1);
        assert!(combined.fast_forward);
    }

    #[test]
    fn a_refusal_mark_is_a_commit_on_the_refused_one_with_its_tree() {
        let (dir, store) = crate::tests::scratch_store();
        let tip = ledger_with(&store, &["001"]);
        let a = job(&store, "002", Some(tip));
        let mark = refusal_mark(&store, &a, "conflict\0 here", &sig()).unwrap();
        assert_eq!(store.parents(mark).unwrap(), vec![a.commit]);
        assert!(store.diff(Some(a.commit), mark, "").unwrap().is_empty());
        let repo = dir.path().join("s.git");
        let body = git(&repo, &["log", "-1", "--format=%B", &mark.to_hex()]);
        assert!(body.starts_with(&format!("ledger: refused publication {}", a.key)));
        assert!(body.contains("conflict here"));
        assert_eq!(
            incoming_ref(&a.key),
            format!("refs/ledger/incoming/{}", a.key)
        );
        assert_eq!(
            refused_ref(&a.key),
            format!("refs/ledger/refused/{}", a.key)
        );
    }
}
