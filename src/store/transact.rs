//! The one write loop every writer shares: build a commit on the ref's tip, land it with one
//! compare-and-swap, and when another writer moved the ref first, build again on the new tip.
//!
//! Publication, compaction and the execution finality operations all write this way. Each
//! supplies a *build* step that reads the tip it is given and either settles without writing
//! (a replay, nothing to fold, an outcome already recorded) or returns a commit whose single
//! parent is that tip ([`Store::write_commit`]). [`transact()`] then moves the ref from that tip
//! to the commit ([`Store::update_ref_waiting`]):
//!
//! - **Landed**: the commit is the new tip; the caller may acknowledge.
//! - **Moved** ([`Error::RefMoved`]): another writer won the race. The build step runs again on
//!   the new tip after a jittered exponential [`backoff`], up to [`Policy::max_attempts`]
//!   builds in all; then [`TransactError::Contention`]. The commit built for the lost race is
//!   left unreachable (harmless; `git gc` prunes it).
//! - **Locked** ([`Error::RefLocked`]): another writer holds the ref's lock. That writer is
//!   finishing an update within milliseconds, so the same update is retried for
//!   [`Policy::lock_wait`] ([`HELD_LOCK_BUDGET`] by default) before
//!   [`TransactError::RefLocked`] names the lock file. A lock left by a dead writer is reclaimed
//!   by [`Store::update_ref`] itself, never by age.
//!
//! Remote writes (fetch, build, push with a lease) follow the same shape over `git push`; see
//! [`crate::store::remote`].

use std::path::PathBuf;
use std::time::Duration;

use super::{CommitId, Error, Store};

/// How long a writer keeps retrying one ref update while another writer holds the ref's lock,
/// before it gives up with [`TransactError::RefLocked`]. (Each single attempt waits at most
/// [`super::REF_LOCK_TIMEOUT`] for the lock itself.)
pub const HELD_LOCK_BUDGET: Duration = Duration::from_secs(5);

/// The ledger ref a writer moves when its options name none.
pub const DEFAULT_REF: &str = "refs/heads/main";

/// Builds a writer runs in all when its options give no budget: every lost race costs one.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 64;

/// Which ref a [`transact()`] moves, and how hard it tries.
#[derive(Clone, Copy, Debug)]
pub struct Policy<'a> {
    /// The full ref name, e.g. `refs/heads/main`.
    pub ref_name: &'a str,
    /// Builds allowed in all (at least 1): a lost race costs one build.
    pub max_attempts: u32,
    /// How long a held lock is waited out per build ([`HELD_LOCK_BUDGET`] by default).
    pub lock_wait: Duration,
    /// Whether [`remote::transact`](crate::store::remote::transact()) rolls the packs up after
    /// a landed commit, before it returns. A long-running writer that must answer first
    /// (`serve`'s batch writer) sets `false` and rolls them up on a thread of its own.
    pub roll_up: bool,
}

/// What a build step decided on the tip it was given.
#[derive(Debug)]
pub enum Step<T> {
    /// Nothing to write on this tip: [`transact()`] returns `T` and the ref does not move.
    Settled(T),
    /// A commit built on the tip, not yet reachable: [`transact()`] lands it, then returns `T`.
    Commit {
        /// The new commit; its single parent is the tip the step was given.
        commit: CommitId,
        /// The reflog message of the ref update (one line).
        reflog: String,
        /// What the caller gets back once the commit has landed.
        value: T,
    },
}

/// The result of a [`transact()`].
#[derive(Debug)]
pub struct Landed<T> {
    /// What the last build step returned.
    pub value: T,
    /// The commit that landed, or `None` when the last step settled without writing.
    pub commit: Option<CommitId>,
    /// Builds run, including the last one.
    pub attempts: u32,
}

/// Why a [`transact()`] did not land.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransactError<E> {
    /// The build step failed; nothing was landed by this call.
    #[error(transparent)]
    Build(E),
    /// Every one of `attempts` builds lost the race to another writer: retry later, or raise
    /// the attempt budget.
    #[error("{ref_name} kept moving: gave up after {attempts} attempts")]
    Contention {
        /// The ref that kept moving.
        ref_name: String,
        /// Builds run.
        attempts: u32,
    },
    /// Another writer held the ref's lock for longer than [`Policy::lock_wait`]. If no writer
    /// is running, the named lock file is stale and may be removed.
    #[error("{ref_name} is locked by another writer ({})", lock.display())]
    RefLocked {
        /// The ref.
        ref_name: String,
        /// The lock file, `<git dir>/<ref>.lock`.
        lock: PathBuf,
    },
    /// Reading the tip or moving the ref failed.
    #[error(transparent)]
    Store(Error),
}

/// Runs `build` on the tip of `policy.ref_name` and lands the commit it returns with one
/// compare-and-swap, rebuilding on the new tip when another writer moved the ref (see the
/// module docs). `build` gets the tip (`None` when the ref does not exist yet) and the attempt
/// number, starting at 1.
///
/// # Errors
/// [`TransactError::Build`] from `build`; [`TransactError::Contention`] after
/// `policy.max_attempts` lost races; [`TransactError::RefLocked`] when the lock stays held;
/// [`TransactError::Store`] when the tip cannot be read or the ref cannot be written.
pub fn transact<T, E>(
    store: &Store,
    policy: &Policy<'_>,
    mut build: impl FnMut(Option<CommitId>, u32) -> Result<Step<T>, E>,
) -> Result<Landed<T>, TransactError<E>> {
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let tip = store.tip(policy.ref_name).map_err(TransactError::Store)?;
        let (commit, reflog, value) = match build(tip, attempts).map_err(TransactError::Build)? {
            Step::Settled(value) => {
                return Ok(Landed {
                    value,
                    commit: None,
                    attempts,
                });
            }
            Step::Commit {
                commit,
                reflog,
                value,
            } => (commit, reflog, value),
        };
        match store.update_ref_waiting(policy.ref_name, tip, commit, &reflog, policy.lock_wait) {
            Ok(()) => {
                return Ok(Landed {
                    value,
                    commit: Some(commit),
                    attempts,
                });
            }
            Err(Error::RefMoved { .. }) if attempts < policy.max_attempts => backoff(attempts),
            Err(Error::RefMoved { .. }) => {
                return Err(TransactError::Contention {
                    ref_name: policy.ref_name.to_owned(),
                    attempts,
                });
            }
            Err(Error::RefLocked { .. }) => {
                return Err(TransactError::RefLocked {
                    ref_name: policy.ref_name.to_owned(),
                    lock: store.git_dir().join(format!("{}.lock", policy.ref_name)),
                });
            }
            Err(e) => return Err(TransactError::Store(e)),
        }
    }
}

/// Sleeps before the next attempt after a lost race: 2^`attempt` ms, capped at 256 ms, plus up
/// to the same again at random ([`jittered_sleep`]).
pub fn backoff(attempt: u32) {
    jittered_sleep(1u64 << attempt.min(8));
}

/// Sleeps `base_ms` plus a random share of `base_ms`, so that contending writers that started
/// together do not retry together. Remote writers use a larger base than [`backoff`]'s (a
/// round trip costs tens of milliseconds).
pub fn jittered_sleep(base_ms: u64) {
    let base = base_ms.max(1);
    let mut random = [0u8; 8];
    let jitter = match rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty()) {
        Ok(8) => u64::from_le_bytes(random) % base,
        _ => u64::from(std::process::id()) % base,
    };
    std::thread::sleep(Duration::from_millis(base + jitter));
}
