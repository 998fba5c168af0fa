//! The one landing loop every writer shares: build a commit on the tip of the target's ref,
//! land it with one compare-and-swap, and when another writer moved the ref first, build again
//! on the new tip.
//!
//! Publication, compaction, the finality operations of the CLI and the group commits of `serve`
//! all write this way. Each supplies a *build* step that reads the tip it is given and either
//! settles without writing (a replay, nothing to fold, an outcome already recorded) or returns
//! a commit whose single parent is that tip ([`Store::write_commit`]). [`land()`] then moves the
//! ref from that tip to the commit, on the [`Target`] of its [`LandOptions`]:
//!
//! - **Local**: the tip is the local ref's, and the commit point is
//!   [`Store::update_ref_waiting`], a compare-and-swap of the ref file.
//! - **Remote**: each attempt reads the remote tip (`git ls-remote`), fetches it when its
//!   objects are not cached yet, checks that it does not rewrite the tip this cache last
//!   confirmed there ([`remote::check_not_rewritten`]), and the commit point is a push with a
//!   lease on that tip ([`remote::push`]). The local repository only caches objects.
//!
//! What can happen at the commit point:
//!
//! - **Landed**: the commit is the new tip; the caller may acknowledge.
//! - **Moved** (a local [`Error::RefMoved`], a remote's rejected lease): another writer won the
//!   race. The build step runs again on the new tip after a jittered exponential backoff (from
//!   2 ms locally; from 25 ms on a remote, where a push round trip with the server's hook costs
//!   far more than a local ref update), up to [`LandOptions::max_attempts`] builds in all; then
//!   [`LandError::Contention`]. The commit built for the lost race is left unreachable
//!   (harmless; `git gc` prunes it). A remote's own ref lock shows as a rejected lease, i.e. a
//!   moved ref.
//! - **Locked** (a local [`Error::RefLocked`]): another writer holds the ref's lock. That writer
//!   is finishing an update within milliseconds, so the same update is retried for
//!   [`LandOptions::lock_wait`] ([`HELD_LOCK_BUDGET`] by default) before
//!   [`LandError::RefLocked`] names the lock file. A lock left by a dead writer is reclaimed by
//!   [`Store::update_ref`] itself, never by age.
//! - **Refused** (a remote's pre-receive hook or `receive.*` rules): final,
//!   [`LandError::Refused`] with the hook's lines; building again would be refused again.
//!
//! A push whose connection broke may have landed or not; the remote holds either the old tip or
//! the whole commit, and running the writer again converges (a replayed publication is
//! unchanged).
//!
//! # Errors
//!
//! [`LandError<E>`] is the one error of the loop, generic over the build step's error `E`. Each
//! writer's own error has one `From<LandError<Self>>` that keeps its build errors as they are and
//! gives the loop's failures their wording (`publish`, `compact`, `finality`; one
//! implementation for the three, `impl_from_land_error!`), so a writer lands with `land(..)?`.
//!
//! # Roll-up after a commit
//!
//! Each landed commit adds a pack (or loose objects); unless they are rolled up, a busy
//! repository collects thousands. Whether the packs are rolled up after a landed commit is one
//! decision, [`LandOptions::roll_up`], and it has one owner per writer:
//!
//! - [`RollUp::AfterCommit`] (the default, every command-line writer): [`land()`] rolls up
//!   ([`Store::roll_up_after_commit`]) before it returns, so that the packs stay logarithmic in
//!   the number of commits. The commit has landed whatever happens there.
//! - [`RollUp::Caller`]: [`land()`] does not, and the caller does when it is ready. `serve`'s
//!   writer (`src/server/writer.rs`) answers its batch first and rolls up on a thread of its own, so
//!   that no answer waits for a roll-up; it sets this on the options it lands with.
//!   [`crate::publish`] lands with it too and applies its own options' decision itself once it
//!   has dropped the batch, so that the roll-up's memory does not come on top of the batch's.

use std::path::PathBuf;
use std::time::Duration;

use super::remote::{self, PushOutcome, Rewritten, Target};
use super::{CommitId, Error, Signature, Store};

/// How long a writer keeps retrying one ref update while another writer holds the ref's lock,
/// before it gives up with [`LandError::RefLocked`]. (Each single attempt waits at most
/// [`super::REF_LOCK_TIMEOUT`] for the lock itself.)
pub const HELD_LOCK_BUDGET: Duration = Duration::from_secs(5);

/// The ledger ref a writer moves when its options name none.
pub const DEFAULT_REF: &str = "refs/heads/main";

/// Builds a writer runs in all when its options give no budget: every lost race costs one.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 64;

/// Whether the packs are rolled up after a landed commit, and by whom (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RollUp {
    /// [`land()`] rolls the packs up after a commit landed, before it returns.
    #[default]
    AfterCommit,
    /// [`land()`] does not; the caller owns the roll-up and runs it when it is ready: `serve`'s
    /// roll-up thread, or `publish` once it has dropped its batch ([`RollUp::after_commit`]
    /// on its own options).
    Caller,
}

impl RollUp {
    /// After a commit landed in `store`: rolls the packs up when this decision gives the roll-up
    /// to the writer ([`RollUp::AfterCommit`]), else leaves it to the caller. [`land()`] calls it;
    /// a writer that landed with [`RollUp::Caller`] to roll up later calls it on its own options.
    pub fn after_commit(self, store: &Store) {
        if self == RollUp::AfterCommit {
            store.roll_up_after_commit();
        }
    }
}

/// The options block of every writer: where and as whom it lands, how hard it tries, and who
/// rolls the packs up. `publish`, `compact` and `finality` options carry one.
#[derive(Clone, Debug)]
pub struct LandOptions {
    /// Full name of the ledger ref (default [`DEFAULT_REF`]); the ref moved on a
    /// [`Target::Local`], and the one a remote's tip is described by otherwise.
    pub ref_name: String,
    /// Author and committer of the commits the writer builds.
    pub signature: Signature,
    /// Builds allowed in all, at least 1 (default [`DEFAULT_MAX_ATTEMPTS`]): a lost race costs
    /// one.
    pub max_attempts: u32,
    /// How long a held local ref lock is waited out per build (default [`HELD_LOCK_BUDGET`]).
    pub lock_wait: Duration,
    /// Where the commits land (default [`Target::Local`], the ref [`LandOptions::ref_name`]);
    /// with a remote, the local repository only caches objects and every read is of the
    /// remote's tip.
    pub target: Target,
    /// Who rolls the packs up after a landed commit (default [`RollUp::AfterCommit`]).
    pub roll_up: RollUp,
}

impl LandOptions {
    /// The defaults, with the given signature.
    pub fn new(signature: Signature) -> LandOptions {
        LandOptions {
            ref_name: DEFAULT_REF.into(),
            signature,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            lock_wait: HELD_LOCK_BUDGET,
            target: Target::Local,
            roll_up: RollUp::AfterCommit,
        }
    }
}

/// What a build step decided on the tip it was given.
#[derive(Debug)]
pub enum Step<T> {
    /// Nothing to write on this tip: [`land()`] returns `T` and the ref does not move.
    Settled(T),
    /// A commit built on the tip, not yet reachable: [`land()`] lands it, then returns `T`.
    Commit {
        /// The new commit; its single parent is the tip the step was given.
        commit: CommitId,
        /// The reflog message of a local ref update (one line).
        reflog: String,
        /// What the caller gets back once the commit has landed.
        value: T,
    },
}

/// The result of a [`land()`].
#[derive(Debug)]
pub struct Landed<T> {
    /// What the last build step returned.
    pub value: T,
    /// The commit that landed, or `None` when the last step settled without writing.
    pub commit: Option<CommitId>,
    /// Builds run, including the last one.
    pub attempts: u32,
}

/// Why a [`land()`] did not land. Nothing was landed by the call, except possibly for a
/// [`LandError::Transport`] error of a push ([`remote::Error::may_have_landed`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LandError<E> {
    /// The build step failed.
    #[error(transparent)]
    Build(E),
    /// Every one of `attempts` builds lost the race to another writer: retry later, or raise
    /// the attempt budget.
    #[error("{ref_name} kept moving: gave up after {attempts} attempts")]
    Contention {
        /// The ref that kept moving ([`Target::describe`]: `<url> <ref>` for a remote).
        ref_name: String,
        /// Builds run.
        attempts: u32,
    },
    /// Another local writer held the ref's lock for longer than [`LandOptions::lock_wait`];
    /// if no writer is running, the named lock file is stale and may be removed.
    #[error("{ref_name} is locked by another writer ({})", lock.display())]
    RefLocked {
        /// The ref.
        ref_name: String,
        /// The lock file, `<git dir>/<ref>.lock`.
        lock: PathBuf,
    },
    /// Reading the local tip or writing the local ref failed.
    #[error(transparent)]
    Store(Error),
    /// Talking to the remote failed (`git ls-remote`, `fetch` or `push`).
    #[error(transparent)]
    Transport(remote::Error),
    /// The remote refused the push (its pre-receive hook or its `receive.*` rules); the text is
    /// git's status line and the hook's lines. Final: building again would be refused again.
    #[error("the remote refused the push:\n{0}")]
    Refused(String),
    /// The remote ref no longer descends from the tip this cache last confirmed there: its
    /// history was rewritten. Nothing was built or pushed.
    #[error(transparent)]
    Rewritten(Rewritten),
}

impl<E> From<remote::TipError> for LandError<E> {
    fn from(e: remote::TipError) -> Self {
        match e {
            remote::TipError::Store(e) => LandError::Store(e),
            remote::TipError::Transport(e) => LandError::Transport(e),
        }
    }
}

impl<E> From<remote::RewriteCheckError> for LandError<E> {
    fn from(e: remote::RewriteCheckError) -> Self {
        match e {
            remote::RewriteCheckError::Store(e) => LandError::Store(e),
            remote::RewriteCheckError::Rewritten(r) => LandError::Rewritten(r),
        }
    }
}

/// Implements `From<LandError<E>> for E` for a writer's error `E` (the one conversion of each
/// writer, so that it lands with `land(..)?`): the build step's own errors pass as they are,
/// and the loop's failures become the variants of `E` of the same meaning, which every writer's
/// error names alike and words for its own users: `Contention { ref_name, attempts }`,
/// `RefLocked { ref_name, lock }`, `Store`, `Remote` (the transport), `RemoteRefused` and
/// `RemoteRewritten`. A macro because the conversion is into each writer's own type, which a
/// generic `impl` of this module may not name.
macro_rules! impl_from_land_error {
    ($error:ty) => {
        impl From<$crate::store::LandError<$error>> for $error {
            fn from(e: $crate::store::LandError<$error>) -> Self {
                use $crate::store::LandError;
                match e {
                    LandError::Build(e) => e,
                    LandError::Contention { ref_name, attempts } => {
                        Self::Contention { ref_name, attempts }
                    }
                    LandError::RefLocked { ref_name, lock } => Self::RefLocked { ref_name, lock },
                    LandError::Store(e) => Self::Store(e),
                    LandError::Transport(e) => Self::Remote(e),
                    LandError::Refused(why) => Self::RemoteRefused(why),
                    LandError::Rewritten(r) => Self::RemoteRewritten(r),
                }
            }
        }
    };
}
pub(crate) use impl_from_land_error;

/// Runs `build` on the tip of `options.target` and lands the commit it returns with one
/// compare-and-swap (or leased push), building again on the new tip when another writer moved
/// the ref, then rolls the packs up if `options.roll_up` says so (see the module docs). `build`
/// gets the tip (`None` when the ref does not exist yet) and the attempt number, starting at 1.
///
/// # Errors
/// [`LandError::Build`] from `build`; [`LandError::Contention`] after `options.max_attempts`
/// lost races; [`LandError::RefLocked`] when a local lock stays held; [`LandError::Store`] for
/// the local repository, [`LandError::Transport`] for the remote; [`LandError::Refused`] when
/// the remote's hook refuses the push; [`LandError::Rewritten`] when the remote's history was
/// rewritten under this cache.
pub fn land<T, E>(
    store: &Store,
    options: &LandOptions,
    mut build: impl FnMut(Option<CommitId>, u32) -> Result<Step<T>, E>,
) -> Result<Landed<T>, LandError<E>> {
    let mut attempts = 0u32;
    let landed = loop {
        attempts += 1;
        let tip = tip(store, options)?;
        let (commit, reflog, value) = match build(tip, attempts).map_err(LandError::Build)? {
            Step::Settled(value) => {
                if let Some(tip) = tip {
                    confirm(store, &options.target, tip);
                }
                break Landed {
                    value,
                    commit: None,
                    attempts,
                };
            }
            Step::Commit {
                commit,
                reflog,
                value,
            } => (commit, reflog, value),
        };
        if commit_point(store, options, tip, commit, &reflog)? {
            confirm(store, &options.target, commit);
            break Landed {
                value,
                commit: Some(commit),
                attempts,
            };
        }
        if attempts >= options.max_attempts {
            return Err(LandError::Contention {
                ref_name: options.target.describe(&options.ref_name),
                attempts,
            });
        }
        match options.target {
            Target::Local => jittered_sleep(1u64 << attempts.min(8)),
            Target::Remote { .. } => jittered_sleep(25 << attempts.min(6)),
        }
    };
    if landed.commit.is_some() {
        options.roll_up.after_commit(store);
    }
    Ok(landed)
}

/// The tip a writer with `options` builds on (`None` when the ref does not exist yet): the
/// local ref's, or the remote's, fetched into `store` and checked not to rewrite the tip this
/// cache last confirmed there ([`remote::check_not_rewritten`]). Each attempt of [`land()`]
/// starts here; a writer that lands by other means (pending publications) reads its tip here
/// too.
///
/// # Errors
/// [`LandError::Store`], [`LandError::Transport`], [`LandError::Rewritten`]; never
/// [`LandError::Build`].
pub fn tip<E>(store: &Store, options: &LandOptions) -> Result<Option<CommitId>, LandError<E>> {
    match &options.target {
        Target::Local => store.tip(&options.ref_name).map_err(LandError::Store),
        remote @ Target::Remote { url, ref_name, .. } => {
            let tip = remote.tip(store, &options.ref_name)?;
            remote::check_not_rewritten(store, url, ref_name, tip)?;
            Ok(tip)
        }
    }
}

/// Moves the target's ref from `tip` to `commit`: `true` when it landed, `false` when another
/// writer moved the ref first.
fn commit_point<E>(
    store: &Store,
    options: &LandOptions,
    tip: Option<CommitId>,
    commit: CommitId,
    reflog: &str,
) -> Result<bool, LandError<E>> {
    let (url, ref_name, timeout) = match &options.target {
        Target::Local => {
            let name = &options.ref_name;
            return match store.update_ref_waiting(name, tip, commit, reflog, options.lock_wait) {
                Ok(()) => Ok(true),
                Err(Error::RefMoved { .. }) => Ok(false),
                Err(Error::RefLocked { .. }) => Err(LandError::RefLocked {
                    ref_name: name.clone(),
                    lock: store.git_dir().join(format!("{name}.lock")),
                }),
                Err(e) => Err(LandError::Store(e)),
            };
        }
        Target::Remote {
            url,
            ref_name,
            timeout,
        } => (url, ref_name, *timeout),
    };
    match remote::push(store.git_dir(), url, ref_name, commit, tip, timeout)
        .map_err(LandError::Transport)?
    {
        PushOutcome::Landed => Ok(true),
        PushOutcome::Moved => Ok(false),
        PushOutcome::Refused(why) => Err(LandError::Refused(why)),
    }
}

/// Remembers `commit` as the tip confirmed on a remote target (built on or landed there).
fn confirm(store: &Store, target: &Target, commit: CommitId) {
    if let Target::Remote { url, ref_name, .. } = target {
        remote::record_confirmed(store, url, ref_name, commit);
    }
}

/// Sleeps `base_ms` plus a random share of `base_ms`, so that contending writers that started
/// together do not retry together. [`land()`] sleeps 2^attempt ms (capped at 256) before a
/// local rebuild and 25·2^attempt ms (capped at 1.6 s) before a remote one; pending
/// publications poll with it ([`crate::publish::pending`]).
pub fn jittered_sleep(base_ms: u64) {
    let base = base_ms.max(1);
    // A jitter need not be unpredictable: without the kernel's generator the process id
    // still spreads processes apart.
    let jitter = match crate::random::bytes::<8>() {
        Ok(random) => u64::from_le_bytes(random) % base,
        Err(_) => u64::from(std::process::id()) % base,
    };
    std::thread::sleep(Duration::from_millis(base + jitter));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{MAIN, files, sig};
    use std::time::Duration;

    /// Landing options on `target` with a small attempt budget.
    fn options(target: &Target) -> LandOptions {
        LandOptions {
            ref_name: MAIN.to_owned(),
            max_attempts: 4,
            lock_wait: Duration::from_secs(1),
            target: target.clone(),
            ..LandOptions::new(sig())
        }
    }

    /// A bare remote and two caches (two machines) that write to it.
    fn setup() -> (tempfile::TempDir, Target, Store, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        Store::open_or_init_bare(&remote, MAIN).unwrap();
        let a = Store::open_or_init_bare(&tmp.path().join("a.git"), MAIN).unwrap();
        let b = Store::open_or_init_bare(&tmp.path().join("b.git"), MAIN).unwrap();
        let target = Target::Remote {
            url: remote.display().to_string(),
            ref_name: MAIN.to_owned(),
            timeout: Some(Duration::from_secs(60)),
        };
        (tmp, target, a, b)
    }

    /// A build step adding `path` on the tip it is given.
    fn adding<'s>(
        store: &'s Store,
        path: &'s str,
    ) -> impl FnMut(Option<CommitId>, u32) -> Result<Step<Option<CommitId>>, Error> + 's {
        move |tip, _| {
            let commit = store.write_commit(tip, &files(&[(path, "x\n")]), "add\n", &sig())?;
            Ok(Step::Commit {
                commit,
                reflog: "add".to_owned(),
                value: tip,
            })
        }
    }

    /// A writer whose tip went stale while it built is told the remote moved, fetches the
    /// other machine's commit and builds again on it; nothing is lost, the history is linear.
    #[test]
    fn a_moved_remote_is_fetched_and_built_on_again() {
        let (tmp, target, a, b) = setup();
        let first = land(&a, &options(&target), adding(&a, "one")).unwrap();
        assert_eq!((first.attempts, first.value), (1, None));
        let mut raced = false;
        let mut inner = adding(&b, "two");
        let second = land(&b, &options(&target), |tip, attempt| {
            if !raced {
                // Machine A lands in between B's read of the tip and B's push.
                raced = true;
                land(&a, &options(&target), adding(&a, "three")).unwrap();
            }
            inner(tip, attempt)
        })
        .unwrap();
        assert_eq!(second.attempts, 2, "one lost race, one rebuild");
        let remote = Store::open(&tmp.path().join("remote.git")).unwrap();
        let tip = remote.tip(MAIN).unwrap().unwrap();
        assert_eq!(Some(tip), second.commit);
        let snap = remote.snapshot(Some(tip)).unwrap();
        for path in ["one", "two", "three"] {
            assert!(snap.exists(path).unwrap(), "{path}");
        }
        assert_eq!(remote.parents(tip).unwrap(), vec![second.value.unwrap()]);
        // The caches' own refs never moved.
        assert_eq!(a.tip(MAIN).unwrap(), None);
        assert_eq!(b.tip(MAIN).unwrap(), None);
    }

    /// Every way a remote ref can stop descending from the tip a cache last confirmed there
    /// (an unrelated history, a rewind to an ancestor, an amended tip, a deleted ref) is refused
    /// before anything is built, naming both commits, and leaves the remote as it was; another
    /// writer's fast-forward is built on as before.
    #[test]
    fn a_rewritten_remote_is_refused_until_accepted() {
        let (tmp, target, a, b) = setup();
        let remote = Store::open(&tmp.path().join("remote.git")).unwrap();
        let one = land(&a, &options(&target), adding(&a, "one"))
            .unwrap()
            .commit
            .unwrap();
        land(&a, &options(&target), adding(&a, "two")).unwrap();
        // Another writer's fast-forward is no rewrite.
        let three = land(&b, &options(&target), adding(&b, "three"))
            .unwrap()
            .commit
            .unwrap();
        let confirmed = land(&a, &options(&target), adding(&a, "four"))
            .unwrap()
            .commit
            .unwrap();
        assert_eq!(remote.parents(confirmed).unwrap(), vec![three]);
        let force = |new: Option<CommitId>| {
            let current = remote.tip(MAIN).unwrap();
            match new {
                Some(n) => remote.update_ref(MAIN, current, n, "force").unwrap(),
                None => remote.delete_ref(MAIN).unwrap(),
            }
        };
        let unrelated = remote
            .write_commit(None, &files(&[("other", "y\n")]), "other\n", &sig())
            .unwrap();
        let amended = remote
            .write_commit(
                Some(three),
                &files(&[("amended", "z\n")]),
                "amended\n",
                &sig(),
            )
            .unwrap();
        for (what, tip) in [
            ("an unrelated history", Some(unrelated)),
            ("a rewind to an ancestor", Some(one)),
            ("an amended tip", Some(amended)),
            ("a deleted ref", None),
        ] {
            force(tip);
            let mut built = false;
            let err = land(&a, &options(&target), |t, n| {
                built = true;
                adding(&a, "five")(t, n)
            })
            .unwrap_err();
            let LandError::Rewritten(r) = &err else {
                panic!("{what}: {err}");
            };
            assert_eq!((r.confirmed, r.tip), (confirmed, tip), "{what}");
            assert!(!built, "{what}: a build ran on a rewritten remote");
            assert_eq!(remote.tip(MAIN).unwrap(), tip, "{what}: the remote moved");
            let shown = err.to_string();
            assert!(shown.contains(&confirmed.to_string()), "{what}: {shown}");
            if let Some(t) = tip {
                assert!(shown.contains(&t.to_string()), "{what}: {shown}");
            }
            assert!(
                shown.contains("--accept-rewritten-remote"),
                "{what}: {shown}"
            );
        }
        // A cache that never confirmed a tip there (b confirmed `three`, an ancestor of
        // nothing now) is refused too; a fresh cache is not.
        assert!(matches!(
            land(&b, &options(&target), adding(&b, "six")),
            Err(LandError::Rewritten(_))
        ));
        let fresh = Store::open_or_init_bare(&tmp.path().join("fresh.git"), MAIN).unwrap();
        force(Some(amended));
        land(&fresh, &options(&target), adding(&fresh, "seven")).unwrap();
        // Accepted: the tip as it is now is confirmed and built on; the next write needs no
        // acceptance.
        assert_eq!(
            remote::accept_rewritten(&a, &target, MAIN).unwrap(),
            remote.tip(MAIN).unwrap()
        );
        let accepted = remote.tip(MAIN).unwrap();
        let landed = land(&a, &options(&target), adding(&a, "eight")).unwrap();
        assert_eq!(landed.value, accepted);
        land(&a, &options(&target), adding(&a, "nine")).unwrap();
        // Accepting a deleted ref clears the record: the next write creates the ref.
        force(None);
        assert_eq!(remote::accept_rewritten(&a, &target, MAIN).unwrap(), None);
        let created = land(&a, &options(&target), adding(&a, "ten")).unwrap();
        assert_eq!(created.value, None);
    }

    /// A refusal by the remote's hook is final (one attempt), carries the hook's lines without
    /// git's padding, and leaves the remote as it was; a build that settles pushes nothing.
    #[test]
    fn a_hook_refusal_is_final_and_a_settled_build_pushes_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let (tmp, target, a, _) = setup();
        land(&a, &options(&target), adding(&a, "one")).unwrap();
        let remote = Store::open(&tmp.path().join("remote.git")).unwrap();
        let before = remote.tip(MAIN).unwrap();
        let hook = tmp.path().join("remote.git/hooks/pre-receive");
        std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
        std::fs::write(
            &hook,
            "#!/bin/sh\necho 'no: closed for maintenance' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut builds = 0;
        let mut inner = adding(&a, "two");
        let refused = land(&a, &options(&target), |tip, n| {
            builds += 1;
            inner(tip, n)
        })
        .unwrap_err();
        match refused {
            LandError::Refused(why) => {
                assert!(why.ends_with("\nno: closed for maintenance"), "{why:?}");
                assert!(why.contains("pre-receive hook declined"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(builds, 1);
        assert_eq!(remote.tip(MAIN).unwrap(), before);
        let settled = land(&a, &options(&target), |tip, _| {
            Ok::<_, Error>(Step::Settled(tip))
        })
        .unwrap();
        assert_eq!((settled.commit, settled.value), (None, before));
        // An unreachable remote is a transport error, never a refusal or contention.
        let missing = Target::Remote {
            url: tmp.path().join("missing.git").display().to_string(),
            ref_name: MAIN.to_owned(),
            timeout: None,
        };
        assert!(matches!(
            land(&a, &options(&missing), adding(&a, "x")),
            Err(LandError::Transport(remote::Error::Failed {
                action: "ls-remote",
                ..
            }))
        ));
    }
}
