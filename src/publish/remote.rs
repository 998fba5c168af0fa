//! Landing a publication in a remote state repository, through the `git` program
//! ([`crate::store::remote`]): each attempt reads the remote tip (`git ls-remote`), fetches it,
//! plans and builds the commit locally on it, and pushes with
//! `git push --atomic --force-with-lease=<ref>:<tip>`. A push rejected because the remote moved
//! backs off (25 ms doubling to 1.6 s, plus jitter: a push round trip with the server's hook
//! costs far more than a local ref update) and tries again, up to `Options::max_attempts`; a
//! refusal by the server's pre-receive hook is final and reported with the hook's lines.
//!
//! # Why not [`crate::store::transact()`]
//!
//! The loop has transact's shape (build on a tip, land, rebuild after a lost race) but none of
//! its states map one to one: the tip is read over the network before every build, not from a
//! local ref; there is no held-lock state (the server's lock shows as a rejected lease, i.e. a
//! moved ref); a refusal is a third, final outcome that transact does not have; and the backoff
//! is on the push's scale. A remote variant of transact would need each of those as a parameter
//! for one caller, so the loop stays here, in a dozen lines.

use super::land::{Built, build_on, landed};
use super::privacy_check::check_privacy;
use super::validate::Batch;
use super::*;
use crate::store::{self, Store};

/// Publishes one validated batch to a remote state repository : read the remote
/// tip, fetch it, plan and build the commit locally on it, push with a lease on that tip; when
/// the remote moved, fetch and rebuild, within `options.max_attempts`. A refusal by the server
/// (its pre-receive hook) is final. The batch must first pass `options.privacy`
/// ([`check_privacy`]); nothing is fetched or pushed if not.
pub fn publish_batch_remote(
    store: &Store,
    batch: &Batch,
    options: &Options,
    url: &str,
    remote_ref: &str,
) -> Result<Publication, Error> {
    use crate::store::remote::{self, PushOutcome};
    check_privacy(batch, options.privacy)?;
    let git_dir = store.git_dir().to_owned();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let tip = remote::remote_tip(&git_dir, url, remote_ref)?;
        if tip.is_some() {
            remote::fetch(&git_dir, url, remote_ref)?;
        }
        let (plan, commit) = match build_on(store, batch, tip, options, attempts)? {
            Built::Unchanged(publication) => return Ok(publication),
            Built::Commit(plan, commit) => (plan, commit),
        };
        match remote::push(&git_dir, url, remote_ref, commit, tip)? {
            PushOutcome::Landed => return Ok(landed(plan, commit, attempts)),
            // A push round trip (with the server's hook) costs far more than a local ref
            // update, so losers back off on that scale: 25 ms doubling to 1.6 s, plus jitter.
            PushOutcome::Moved if attempts < options.max_attempts => {
                store::transact::jittered_sleep(25 << attempts.min(6));
            }
            PushOutcome::Moved => {
                return Err(Error::Contention {
                    ref_name: format!("{url} {remote_ref}"),
                    attempts,
                });
            }
            PushOutcome::Refused(why) => return Err(Error::RemoteRefused(why)),
        }
    }
}
