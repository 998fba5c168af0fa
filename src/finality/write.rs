//! The write path shared by the single operations: plan on the tip, write one commit, land it
//! with one compare-and-swap of the ledger ref, and plan again from scratch on the new tip when
//! another writer moved the ref. The loop itself is
//! [`store::remote::transact`](fn@crate::store::remote::transact) (shared with publishing and
//! compaction), on the local ref or, with [`Options::target`] a remote, by leased push; this
//! module maps its outcomes onto [`Error`].

use std::time::Duration;

use super::error::Error;
use crate::store::remote::{self, Target, WriteError};
use crate::store::{self, CommitId, Signature, Snapshot, Store};

/// Knobs of every finality operation; required inputs are parameters.
#[derive(Clone, Debug)]
pub struct Options {
    /// Full name of the ledger ref (default `refs/heads/main`).
    pub ref_name: String,
    /// Author and committer of the commits.
    pub signature: Signature,
    /// Attempts when the ref moves under us (default 64).
    pub max_attempts: u32,
    /// How long a held ref lock is waited for (default 5 s).
    pub lock_wait: Duration,
    /// Where the commits land (default [`Target::Local`], the ref [`Options::ref_name`]); with
    /// a remote, the local repository only caches objects and every read is of the remote's
    /// tip.
    pub target: Target,
}

impl Options {
    /// Defaults with the given signature.
    pub fn new(signature: Signature) -> Options {
        Options {
            ref_name: store::transact::DEFAULT_REF.into(),
            signature,
            max_attempts: store::transact::DEFAULT_MAX_ATTEMPTS,
            lock_wait: store::transact::HELD_LOCK_BUDGET,
            target: Target::Local,
        }
    }
}

/// What an operation landed.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<T> {
    /// The record written (or found, for a replayed creation).
    pub value: T,
    /// The new tip; `None` when nothing had to be written.
    pub commit: Option<CommitId>,
    /// Snapshots planned (1 unless the ref moved).
    pub attempts: u32,
}

/// What a planner decided on one snapshot.
pub(super) enum Plan<T> {
    /// Write these files in one commit on the tip, with this message; answer `value` once it
    /// landed.
    Write {
        files: Vec<(String, Vec<u8>)>,
        message: String,
        value: T,
    },
    /// Nothing to write (a replayed creation, an empty sweep): answer at once.
    Done(T),
}

pub(super) fn transact<T>(
    store: &Store,
    options: &Options,
    mut plan: impl FnMut(&Snapshot<'_>) -> Result<Plan<T>, Error>,
) -> Result<Written<T>, Error> {
    let policy = store::Policy {
        ref_name: &options.ref_name,
        max_attempts: options.max_attempts,
        lock_wait: options.lock_wait,
        roll_up: true,
    };
    let out = remote::transact(store, &options.target, &policy, |tip, _| {
        // The snapshot is dropped before writing: the commit is built on the tip, not on it.
        let planned = plan(&store.snapshot(tip)?)?;
        Ok(match planned {
            Plan::Done(value) => store::Step::Settled(value),
            Plan::Write {
                files,
                message,
                value,
            } => {
                let commit = store.write_commit(tip, &files, &message, &options.signature)?;
                let reflog = message.lines().next().unwrap_or("finality").to_owned();
                store::Step::Commit {
                    commit,
                    reflog,
                    value,
                }
            }
        })
    })
    .map_err(|e| match e {
        WriteError::Build(e) => e,
        WriteError::Contention { ref_name, attempts } => Error::Contention { ref_name, attempts },
        WriteError::RefLocked { .. } => Error::RefLocked {
            ref_name: options.ref_name.clone(),
        },
        WriteError::Store(e) => e.into(),
        WriteError::Transport(e) => e.into(),
        WriteError::Refused(why) => Error::RemoteRefused(why),
    })?;
    Ok(Written {
        value: out.value,
        commit: out.commit,
        attempts: out.attempts,
    })
}
