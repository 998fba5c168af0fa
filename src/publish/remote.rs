//! TODO

use super::land::{Built, build_on, landed};
use super::privacy_check::check_privacy;
use super::validate::Batch;
use super::*;
use crate::store::{self, Store};

/// Publishes one validated batch to a remote state repository (design.md §5): read the remote
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
