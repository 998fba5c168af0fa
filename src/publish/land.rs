//! Landing a publication: build the commit on the target's tip and move the ref through the
//! store's landing loop ([`crate::store::land()`]). Locally that is one compare-and-swap of the
//! ref; a held ref lock is waited out for the lock wait of [`Options::land`]. On a remote, each
//! attempt reads the remote tip (`git ls-remote`), fetches it, builds the commit locally on it
//! and pushes with `git push --atomic --force-with-lease=<ref>:<tip>`; the local repository
//! only caches objects. After a lost race (the ref or the remote moved) the batch is planned
//! again on the new tip (re-validated against it) and rebuilt, with jittered backoff, within
//! the attempts of [`Options::land`]. A refusal by the server's pre-receive hook is final and
//! reported with the hook's lines ([`Error::RemoteRefused`]). A remote publication waits for
//! its pending publication instead when [`Options::pending_wait`] is set ([`land_pending`]).
//!
//! The roll-up after a landed commit is the options' decision ([`Options::land`]'s
//! [`RollUp`]); publish runs it itself ([`roll_up`]), after the batch is dropped, so that the
//! roll-up's memory does not come on top of the batch's and the plan's.

use super::plan::{Plan, commit_message, plan};
use super::privacy_check::check_privacy;
use super::validate::Batch;
use super::*;
use super::{combine, pending};
use crate::store::{self, CommitId, LandOptions, RollUp, Store};

/// Publishes one validated batch to the target of `options.land` (by default the local ref of
/// `store`): one commit on the current tip and one compare-and-swap (or leased push, or pending
/// publication), re-planned on the new tip when another publisher moved the ref, then the
/// roll-up the options ask for. The batch must also pass `options.privacy` ([`check_privacy`],
/// after the checks against the tip); nothing is written or pushed if not.
pub fn publish_batch(
    store: &Store,
    batch: &Batch,
    options: &Options,
) -> Result<Publication, Error> {
    let publication = land_batch(store, batch, options)?;
    roll_up(store, options, &publication);
    Ok(publication)
}

/// Rolls the packs up after `publication` when it landed a commit, as `options.land` says
/// ([`RollUp::after_commit`]).
pub(super) fn roll_up(store: &Store, options: &Options, publication: &Publication) {
    if publication.status == Status::Created {
        options.land.roll_up.after_commit(store);
    }
}

/// [`publish_batch`] without the roll-up, which the caller runs ([`roll_up`]) once it has
/// dropped the batch.
pub(super) fn land_batch(
    store: &Store,
    batch: &Batch,
    options: &Options,
) -> Result<Publication, Error> {
    if let (
        Target::Remote {
            url,
            ref_name,
            timeout,
        },
        Some(wait),
    ) = (&options.land.target, options.pending_wait)
    {
        let remote = pending::Remote {
            url,
            ledger_ref: ref_name,
            timeout: *timeout,
        };
        return land_pending(store, batch, options, remote, wait);
    }
    // The loop lands; the roll-up is this module's, after the batch is dropped.
    let landing = LandOptions {
        roll_up: RollUp::Caller,
        ..options.land.clone()
    };
    let out = store::land(store, &landing, |tip, attempts| {
        Ok(match build_on(store, batch, tip, options, attempts)? {
            Built::Unchanged(publication) => store::Step::Settled(Ok(publication)),
            Built::Commit(plan, commit) => store::Step::Commit {
                commit,
                reflog: "action-ledger publish".to_owned(),
                value: Err(plan),
            },
        })
    })?;
    Ok(match (out.value, out.commit) {
        (Ok(publication), _) => publication,
        (Err(plan), Some(commit)) => landed(plan, commit, out.attempts),
        (Err(_), None) => unreachable!("a built commit either lands or fails"),
    })
}

/// Lands `batch` on a remote through a pending publication ([`super::combine`] has the
/// design): build it on the remote tip, [`pending::park`] it (one push, landing it directly
/// when the ledger did not move), then [`pending::await_fate`] within `wait`, landing every
/// pending publication when it is this job's turn. A refusal is reported as the conflict that
/// planning on the new tip finds ([`Error::BindingConflict`], [`Error::PayloadConflict`] and
/// the like), else as [`Error::Refused`] with the mark's reason. A publication withdrawn from
/// the incoming refs by someone else is built and parked again, within the attempts of
/// [`Options::land`]. The tip is read as the landing loop reads it ([`store::land::tip`]:
/// fetched, and checked not to rewrite the tip this cache last confirmed there).
fn land_pending(
    store: &Store,
    batch: &Batch,
    options: &Options,
    remote: pending::Remote<'_>,
    wait: std::time::Duration,
) -> Result<Publication, Error> {
    let start = std::time::Instant::now();
    let mut combining = combine::Options::new(options.land.signature.clone());
    combining.privacy = options.privacy;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let tip = store::land::tip::<Error>(store, &options.land)?;
        let (plan, commit) = match build_on(store, batch, tip, options, attempts)? {
            Built::Unchanged(publication) => return Ok(publication),
            Built::Commit(plan, commit) => (plan, commit),
        };
        let incoming = combine::Incoming {
            key: combine::publication_key(store, commit).map_err(|e| Error::Pending(e.into()))?,
            commit,
        };
        match pending::park(store, remote, &incoming, tip).map_err(from_pending)? {
            pending::Parked::Landed(c) => return Ok(landed(plan, c, attempts)),
            pending::Parked::Pending => {}
        }
        let left = wait.saturating_sub(start.elapsed());
        match pending::await_fate(store, remote, &incoming, &combining, left) {
            Ok(pending::Fate::Landed(at)) => return Ok(landed(plan, at, attempts)),
            Ok(pending::Fate::Refused(reason)) => {
                // Planning on the tip that refused it names the conflict as a direct
                // publication would; a refusal it cannot see is reported with the mark's reason.
                let tip = store::land::tip::<Error>(store, &options.land)?;
                return match build_on(store, batch, tip, options, attempts)? {
                    Built::Unchanged(publication) => Ok(publication),
                    Built::Commit(..) => Err(Error::Refused {
                        key: incoming.key,
                        reason,
                    }),
                };
            }
            Ok(other) => unreachable!("await_fate ends landed or refused, not {other:?}"),
            Err(pending::Error::Withdrawn { .. }) if attempts < options.land.max_attempts => {}
            Err(e) => return Err(from_pending(e)),
        }
    }
}

/// A [`pending::Error`] as the publisher reports it: the transport, rewrite and store errors as
/// a direct publication's; a hook's refusal as [`Error::RemoteRefused`], naming the way out
/// when the hook (or `receive.denyDeletes`) predates pending publications.
fn from_pending(e: pending::Error) -> Error {
    match e {
        pending::Error::Remote(e) => Error::Remote(e),
        pending::Error::Rewritten(r) => Error::RemoteRewritten(r),
        pending::Error::Store(e) => Error::Store(e),
        pending::Error::Refused(why) if why.contains(combine::INCOMING_PREFIX) => {
            Error::RemoteRefused(format!(
                "{why}\n(the remote refuses to delete its pending publications under \
                 {}: its pre-receive hook or receive.denyDeletes predates them; run \
                 `action-ledger hooks install` on the server, or publish with --direct)",
                combine::INCOMING_PREFIX
            ))
        }
        pending::Error::Refused(why) => Error::RemoteRefused(why),
        other => Error::Pending(other),
    }
}

/// What planning a batch on one tip produced.
pub(super) enum Built<'b> {
    /// Everything is already there: no commit.
    Unchanged(Publication),
    /// The plan and its commit on the tip (no ref moved yet).
    Commit(Plan<'b>, CommitId),
}

/// Plans `batch` against `tip`, applies the privacy profile, and, when the batch adds
/// anything, writes its commit on `tip`. The profile's own rules come after every check of the
/// reference (the batch's, then the plan's against the tip), so a batch the reference refuses
/// is refused for the reference's reason under either profile.
pub(super) fn build_on<'b>(
    store: &Store,
    batch: &'b Batch,
    tip: Option<CommitId>,
    options: &Options,
    attempts: u32,
) -> Result<Built<'b>, Error> {
    let snap = store.snapshot(tip)?;
    let plan = plan(batch, &snap, options.layout)?;
    check_privacy(batch, options.privacy)?;
    if plan.additions.is_empty() {
        return Ok(Built::Unchanged(Publication {
            manifest: plan.manifest,
            status: Status::Unchanged,
            commit: tip,
            attempts,
            files_written: 0,
        }));
    }
    let message = commit_message(&plan, batch);
    let commit =
        store.write_commit_on(&snap, &plan.additions, &message, &options.land.signature)?;
    Ok(Built::Commit(plan, commit))
}

/// The publication of a commit that landed.
pub(super) fn landed(plan: Plan<'_>, commit: CommitId, attempts: u32) -> Publication {
    Publication {
        files_written: plan.additions.len(),
        manifest: plan.manifest,
        status: Status::Created,
        commit: Some(commit),
        attempts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::test_support::*;

    /// Publishers racing on one ref: every publication lands exactly once, in a linear history,
    /// whatever the interleaving (the losers re-plan on the new tip).
    #[test]
    fn concurrent_publishers_all_land_once() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("s.git");
        Store::open_or_init_bare(&repo, "refs/heads/main").unwrap();
        let jobs = ["001", "002", "003", "004", "005", "006"];
        let barrier = std::sync::Barrier::new(jobs.len());
        let results: Vec<Publication> = std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let (repo, barrier) = (&repo, &barrier);
                    scope.spawn(move || {
                        let store = Store::open(repo).unwrap();
                        let source = day1(job);
                        let files = read_source(&source, None).unwrap();
                        let batch = validate_batch(&files, None).unwrap();
                        barrier.wait();
                        publish_batch(&store, &batch, &Options::new(sig())).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(results.iter().all(|p| p.status == Status::Created));
        let store = Store::open(&repo).unwrap();
        let mut tip = store.tip("refs/heads/main").unwrap();
        let mut commits = 0;
        while let Some(c) = tip {
            commits += 1;
            let parents = store.parents(c).unwrap();
            assert!(parents.len() <= 1, "history is linear");
            tip = parents.first().copied();
        }
        assert_eq!(commits, jobs.len());
        let head = store.tip("refs/heads/main").unwrap().unwrap();
        let snap = store.snapshot(Some(head)).unwrap();
        for p in &results {
            for path in &p.manifest.paths {
                assert!(snap.exists(path).unwrap(), "{path}");
            }
        }
        assert!(
            crate::verify::verify_revision(&store, head)
                .unwrap()
                .is_clean()
        );
    }

    /// Issue 7: a publication into a repository that already holds many bindings writes exactly
    /// the trees on its own paths (no other tree is rewritten) and all its objects as one pack
    /// (no loose object), which Git reads back.
    #[test]
    fn a_publication_writes_one_pack_and_only_the_trees_on_its_paths() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("s.git");
        let store = Store::open_or_init_bare(&repo, "refs/heads/main").unwrap();
        let options = Options::new(sig());
        for job in ["001", "002", "003", "004", "005", "006", "007", "008"] {
            publish(&store, &day1(job), &options).unwrap();
        }
        let objects = repo.join("objects");
        let packs_before = files_in(&objects, |p| p.ends_with(".pack"));
        let loose_before = files_in(&objects, |p| {
            !p.starts_with("pack") && !p.starts_with("info")
        });
        let base = store.tip("refs/heads/main").unwrap().unwrap();
        let p = publish(&store, &day1("009"), &options).unwrap();
        let new = p.commit.unwrap();
        assert_eq!(p.status, Status::Created);

        // One new pack, no new loose object, and Git can read the pack.
        let packs: Vec<String> = files_in(&objects, |p| p.ends_with(".pack"))
            .difference(&packs_before)
            .cloned()
            .collect();
        assert_eq!(packs.len(), 1, "{packs:?}");
        assert_eq!(
            files_in(&objects, |p| !p.starts_with("pack")
                && !p.starts_with("info")),
            loose_before
        );
        let index = objects.join(packs[0].replace(".pack", ".idx"));
        git(&repo, &["verify-pack", index.to_str().unwrap()]);
        git(&repo, &["fsck", "--strict"]);

        // The new trees are exactly the directories on the added paths (and the root).
        let added: Vec<String> = git(
            &repo,
            &["diff", "--name-only", &base.to_hex(), &new.to_hex()],
        )
        .lines()
        .map(str::to_owned)
        .collect();
        assert_eq!(added.len(), p.files_written);
        let mut expected_dirs: std::collections::BTreeSet<String> = [String::new()].into();
        for path in &added {
            let mut dir = path.as_str();
            while let Some((parent, _)) = dir.rsplit_once('/') {
                expected_dirs.insert(parent.to_owned());
                dir = parent;
            }
        }
        let new_objects = git(
            &repo,
            &[
                "rev-list",
                "--objects",
                &new.to_hex(),
                "--not",
                &base.to_hex(),
            ],
        );
        let mut new_trees = std::collections::BTreeSet::new();
        for line in new_objects.lines() {
            let (id, path) = line.split_once(' ').unwrap_or((line, ""));
            let kind = git(&repo, &["cat-file", "-t", id]);
            if kind.trim() == "tree" {
                new_trees.insert(path.to_owned());
            }
        }
        assert_eq!(new_trees, expected_dirs);
        // In the fanout layout no tree on those paths is large.
        let widest = expected_dirs
            .iter()
            .map(|d| {
                let spec = format!("{}:{d}", new.to_hex());
                git(&repo, &["ls-tree", &spec]).lines().count()
            })
            .max()
            .unwrap();
        assert!(widest <= 256, "a rewritten tree has {widest} entries");
    }
}
