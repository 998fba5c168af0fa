//! The knobs and the answer of every finality write. The write path itself is the batch
//! planner's ([`batch::run`](super::batch::run) for one operation, [`batch::land`](super::batch::land)
//! for many): plan on the tip, write one commit, land it with one compare-and-swap of the ledger
//! ref, and plan again from scratch on the new tip when another writer moved the ref.

use std::time::Duration;

use crate::store::remote::Target;
use crate::store::{self, CommitId, Signature};

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
