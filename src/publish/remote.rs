//! Landing a publication in a remote state repository through the shared remote write loop
//! ([`crate::store::remote::transact()`]): each attempt reads the remote tip (`git ls-remote`),
//! fetches it, plans and builds the commit locally on it, and pushes with
//! `git push --atomic --force-with-lease=<ref>:<tip>`. A push rejected because the remote moved
//! backs off and builds again, up to `Options::max_attempts`; a refusal by the server's
//! pre-receive hook is final and reported with the hook's lines ([`Error::RemoteRefused`]).

use super::land::{Built, build_on, landed};
use super::privacy_check::check_privacy;
use super::validate::Batch;
use super::*;
use crate::store::remote::{self, WriteError};
use crate::store::{self, Store};

/// Publishes one validated batch to a remote state repository: read the remote tip, fetch it,
/// plan and build the commit locally on it, push with a lease on that tip; when the remote
/// moved, fetch and rebuild, within `options.max_attempts`. A refusal by the server (its
/// pre-receive hook) is final. The batch must first pass `options.privacy`
/// ([`check_privacy`]); nothing is fetched or pushed if not.
pub fn publish_batch_remote(
    store: &Store,
    batch: &Batch,
    options: &Options,
    url: &str,
    remote_ref: &str,
) -> Result<Publication, Error> {
    check_privacy(batch, options.privacy)?;
    let target = remote::Target::Remote {
        url: url.to_owned(),
        ref_name: remote_ref.to_owned(),
    };
    let policy = store::Policy {
        ref_name: &options.ref_name,
        max_attempts: options.max_attempts,
        lock_wait: store::transact::HELD_LOCK_BUDGET,
    };
    let out = remote::transact(store, &target, &policy, |tip, attempts| {
        Ok(match build_on(store, batch, tip, options, attempts)? {
            Built::Unchanged(publication) => store::Step::Settled(Ok(publication)),
            Built::Commit(plan, commit) => store::Step::Commit {
                commit,
                reflog: "action-ledger publish".to_owned(),
                value: Err(plan),
            },
        })
    })
    .map_err(|e| match e {
        WriteError::Build(e) => e,
        WriteError::Contention { ref_name, attempts } => Error::Contention { ref_name, attempts },
        WriteError::RefLocked { ref_name, lock } => Error::RefLocked { ref_name, lock },
        WriteError::Store(e) => e.into(),
        WriteError::Transport(e) => Error::Remote(e),
        WriteError::Refused(why) => Error::RemoteRefused(why),
    })?;
    Ok(match (out.value, out.commit) {
        (Ok(publication), _) => publication,
        (Err(plan), Some(commit)) => landed(plan, commit, out.attempts),
        (Err(_), None) => unreachable!("a built commit either lands or fails"),
    })
}
