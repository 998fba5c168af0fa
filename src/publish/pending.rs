//! A job's way from a built publication to its fate on a remote, through incoming refs (the
//! design is in [`super::combine`]): [`park`] it (one push, which lands it directly when the
//! ledger ref did not move), then [`await_fate`]: read its fate, and while it is pending run
//! [`land_round`] (land every pending publication with one atomic push), within a time budget.
//!
//! The local repository only caches objects: the remote ledger tip under
//! `refs/action-ledger/remote`, the pending publications under `refs/action-ledger/incoming/*`
//! (pruned as they go), refusal marks under `refs/action-ledger/refused/<key>`.
//!
//! Every tip built on or read as landed is checked against the tip this cache last confirmed
//! on the remote ([`remote::check_not_rewritten`], as the landing loop [`crate::store::land()`]
//! does), and a landed one recorded. Not yet here: the CLI.

use std::time::{Duration, Instant};

use super::combine::{self, Combined, INCOMING_PREFIX, Incoming, Verdict};
use crate::store::remote::{self, RefOutcome, RefUpdate};
use crate::store::{self, CommitId, Store};

const CACHE_LEDGER: &str = "refs/action-ledger/remote";
const CACHE_INCOMING: &str = "refs/action-ledger/incoming/";
const CACHE_REFUSED: &str = "refs/action-ledger/refused/";

/// How many reads in a row may find a publication gone from the incoming refs but neither in
/// the ledger nor refused before it counts as withdrawn: a server whose refs are files applies
/// an atomic push ref by ref, so a reader may see the incoming ref deleted before the ledger
/// ref moves.
pub const GONE_READS: u32 = 3;

/// Why a job could not learn its publication's fate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Combining failed (the local repository could not be read or written).
    #[error(transparent)]
    Combine(#[from] combine::Error),
    /// The local repository could not be read or written.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// Talking to the remote failed (`git ls-remote`, `fetch` or `push`).
    #[error(transparent)]
    Remote(#[from] remote::Error),
    /// The remote ledger ref no longer descends from the tip this cache last confirmed there
    /// ([`remote::check_not_rewritten`]): nothing was combined or pushed.
    #[error(transparent)]
    Rewritten(remote::Rewritten),
    /// The remote refused the push (its pre-receive hook's lines): for [`park`], the job's own
    /// publication breaks the ledger rules.
    #[error("the remote refused the publication:\n{0}")]
    Refused(String),
    /// The incoming ref is gone, and the ledger does not hold the publication and no refused
    /// mark names it: someone removed it outside the protocol. Publish again.
    #[error(
        "publication {key} was withdrawn from {INCOMING_PREFIX} without landing or a refusal mark; publish again"
    )]
    Withdrawn {
        /// The publication's key.
        key: String,
    },
    /// The budget ran out with the publication still pending: it is not acknowledged, and the
    /// next publisher or `maintain` lands or refuses it.
    #[error(
        "publication {key} is still pending at {INCOMING_PREFIX}{key} after {}s, with {writers} pending publication(s) seen at the last read; it will be landed or refused by the next publisher or by `maintain --remote`; run publish again (with a longer --wait) to wait for it",
        waited.as_secs()
    )]
    StillPending {
        /// The publication's key.
        key: String,
        /// How long the job waited.
        waited: Duration,
        /// Pending publications (other jobs' included) at the last read.
        writers: usize,
    },
}

impl Error {
    /// Whether this is a refusal (exit 1 in the CLI: the remote refused, its ledger was
    /// rewritten, or the publication is still pending past the wait) rather than an error.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::Refused(_) | Error::Rewritten(_) | Error::StillPending { .. }
        )
    }
}

/// The remote a job lands on.
#[derive(Clone, Copy, Debug)]
pub struct Remote<'a> {
    /// What `git` accepts as a remote: a URL or a path.
    pub url: &'a str,
    /// The ledger ref on the remote.
    pub ledger_ref: &'a str,
    /// The time limit of each `git` run.
    pub timeout: Option<Duration>,
}

/// What [`park`] achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parked {
    /// The ledger ref had not moved: the publication landed directly (its incoming ref, left
    /// behind, is deleted by the next lander as already landed).
    Landed(CommitId),
    /// The publication is pending at its incoming ref (created now, or already there with the
    /// same key, hence the same added files).
    Pending,
}

/// A publication's fate as the remote shows it ([`fate`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The ledger (at this tip) holds every file it adds.
    Landed(CommitId),
    /// A refused mark names it; the reason is the mark's message.
    Refused(String),
    /// Its incoming ref is there and the ledger does not hold it yet.
    Pending,
    /// Neither pending, landed nor refused (see [`GONE_READS`]).
    Gone,
}

/// Parks `incoming` (built on `built_on`, the remote tip it was planned on) with ONE push, not
/// atomic: its commit to the ledger ref with a lease on `built_on`, and to its incoming ref
/// (which must not exist). Alone, the ledger part lands; under contention the incoming part
/// makes it pending.
///
/// # Errors
/// [`Error::Refused`] when the server refuses it (the hook refuses every ref of a push),
/// [`Error::Remote`].
pub fn park(
    store: &Store,
    remote: Remote<'_>,
    incoming: &Incoming,
    built_on: Option<CommitId>,
) -> Result<Parked, Error> {
    let out = remote::push_many(
        store.git_dir(),
        remote.url,
        &[
            RefUpdate {
                ref_name: remote.ledger_ref.to_owned(),
                new: Some(incoming.commit),
                expected: built_on,
            },
            RefUpdate {
                ref_name: combine::incoming_ref(&incoming.key),
                new: Some(incoming.commit),
                expected: None,
            },
        ],
        false,
        remote.timeout,
    )?;
    if let Some(RefOutcome::Refused(why)) = out.iter().find(|o| matches!(o, RefOutcome::Refused(_)))
    {
        return Err(Error::Refused(why.clone()));
    }
    Ok(match out[0] {
        RefOutcome::Done => {
            remote::record_confirmed(store, remote.url, remote.ledger_ref, incoming.commit);
            Parked::Landed(incoming.commit)
        }
        _ => Parked::Pending,
    })
}

/// [`remote::check_not_rewritten`] for the ledger ref of `remote`.
fn not_rewritten(store: &Store, remote: Remote<'_>, tip: Option<CommitId>) -> Result<(), Error> {
    remote::check_not_rewritten(store, remote.url, remote.ledger_ref, tip).map_err(|e| match e {
        remote::RewriteCheckError::Store(e) => Error::Store(e),
        remote::RewriteCheckError::Rewritten(r) => Error::Rewritten(r),
    })
}

/// What one [`land_round`] did.
#[derive(Clone, Debug)]
pub enum Round {
    /// Nothing was pending, or nothing could be decided: no push.
    Idle,
    /// One atomic push landed the combined commit (if any), deleted the incoming refs of the
    /// publications landed or already landed, and created the refused marks.
    Landed(Combined),
    /// The push lost a lease (another lander was first): read again.
    Moved,
}

/// What one `git ls-remote` shows: the ledger tip, every pending publication (sorted by key),
/// and, when asked for one key, its refused mark.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// The ledger ref's commit (`None`: it does not exist).
    pub tip: Option<CommitId>,
    /// Every `refs/ledger/incoming/<key>`, sorted by key.
    pub pending: Vec<Incoming>,
    /// The refused mark of the key asked for, if there is one.
    pub mark: Option<CommitId>,
}

/// Lists the ledger ref, every pending publication and, for `own` (a key), its refused mark,
/// with ONE `git ls-remote`.
///
/// # Errors
/// [`Error::Remote`].
pub fn list(store: &Store, remote: Remote<'_>, own: Option<&str>) -> Result<Listing, Error> {
    let pattern = format!("{INCOMING_PREFIX}*");
    let mark_ref = own.map(combine::refused_ref);
    let mut patterns = vec![remote.ledger_ref, &pattern];
    patterns.extend(mark_ref.as_deref());
    let listed = remote::list_refs(store.git_dir(), remote.url, &patterns, remote.timeout)?;
    let mut listing = Listing::default();
    for (name, commit) in listed {
        if name == remote.ledger_ref {
            listing.tip = Some(commit);
        } else if Some(&name) == mark_ref.as_ref() {
            listing.mark = Some(commit);
        } else if let Some(key) = name.strip_prefix(INCOMING_PREFIX) {
            listing.pending.push(Incoming {
                key: key.to_owned(),
                commit,
            });
        }
    }
    listing.pending.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(listing)
}

/// One lander's round on a fresh [`list`]ing: see [`land_listed`].
///
/// # Errors
/// As [`land_listed`].
pub fn land_round(
    store: &Store,
    remote: Remote<'_>,
    options: &combine::Options,
) -> Result<Round, Error> {
    land_listed(store, remote, &list(store, remote, None)?, options)
}

/// One lander's round: fetch what `listing` names that is not cached, [`combine::combine`]
/// the pending publications on its tip, and push it all with ONE `git push --atomic`: the
/// ledger ref with a lease on the tip, each decided incoming ref deleted with a lease on its
/// commit, each refusal mark created (must not exist; a key refused before keeps its first
/// mark).
///
/// # Errors
/// [`Error::Refused`] when the server refuses the combined push (its hook: unexpected, as the
/// commit was verified as the hook verifies), [`Error::Remote`], [`Error::Combine`],
/// [`Error::Store`].
pub fn land_listed(
    store: &Store,
    remote: Remote<'_>,
    listing: &Listing,
    options: &combine::Options,
) -> Result<Round, Error> {
    let git_dir = store.git_dir();
    let tip = listing.tip;
    if listing.pending.is_empty() {
        return Ok(Round::Idle);
    }
    fetch_listed(store, remote, listing)?;
    let cached = |c: CommitId| store.snapshot(Some(c)).is_ok();
    if tip.is_some_and(|t| !cached(t)) {
        return Ok(Round::Moved);
    }
    not_rewritten(store, remote, tip)?;
    // A publication deleted between the listing and the fetch was decided by someone else.
    let pending: Vec<Incoming> = listing
        .pending
        .iter()
        .filter(|p| cached(p.commit))
        .cloned()
        .collect();
    let combined = combine::combine(store, tip, &pending, options)?;
    let refused: Vec<String> = combined
        .verdicts
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Refused(_)))
        .map(|(i, _)| combine::refused_ref(&i.key))
        .collect();
    let marked: Vec<String> = if refused.is_empty() {
        Vec::new()
    } else {
        let names: Vec<&str> = refused.iter().map(String::as_str).collect();
        remote::list_refs(git_dir, remote.url, &names, remote.timeout)?
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    };
    let mut updates = Vec::new();
    if let Some(commit) = combined.commit {
        updates.push(RefUpdate {
            ref_name: remote.ledger_ref.to_owned(),
            new: Some(commit),
            expected: tip,
        });
    }
    for (inc, verdict) in &combined.verdicts {
        let delete = RefUpdate {
            ref_name: combine::incoming_ref(&inc.key),
            new: None,
            expected: Some(inc.commit),
        };
        match verdict {
            Verdict::Landed { .. } | Verdict::AlreadyLanded => updates.push(delete),
            Verdict::Refused(why) => {
                let mark_ref = combine::refused_ref(&inc.key);
                if !marked.contains(&mark_ref) {
                    let mark = combine::refusal_mark(store, inc, why, &options.signature)?;
                    updates.push(RefUpdate {
                        ref_name: mark_ref,
                        new: Some(mark),
                        expected: None,
                    });
                }
                updates.push(delete);
            }
            Verdict::Deferred => {}
        }
    }
    if updates.is_empty() {
        return Ok(Round::Idle);
    }
    let out = remote::push_many(git_dir, remote.url, &updates, true, remote.timeout)?;
    if out.iter().all(|o| *o == RefOutcome::Done) {
        if let Some(landed) = combined.commit.or(tip) {
            remote::record_confirmed(store, remote.url, remote.ledger_ref, landed);
        }
        return Ok(Round::Landed(combined));
    }
    if let Some(RefOutcome::Refused(why)) = out.iter().find(|o| matches!(o, RefOutcome::Refused(_)))
    {
        return Err(Error::Refused(why.clone()));
    }
    Ok(Round::Moved)
}

/// Fetches, with ONE `git fetch`, the ledger tip and every pending publication that `listing`
/// names, unless all of them are cached already: a lander reads them all, and one fetch costs
/// one round of requests where a fetch of the tip and another of the publications cost two.
///
/// # Errors
/// [`Error::Remote`].
fn fetch_listed(store: &Store, remote: Remote<'_>, listing: &Listing) -> Result<(), Error> {
    let cached = |c: CommitId| store.snapshot(Some(c)).is_ok();
    if listing
        .tip
        .into_iter()
        .chain(listing.pending.iter().map(|p| p.commit))
        .all(cached)
    {
        return Ok(());
    }
    let mut specs = vec![format!("+{INCOMING_PREFIX}*:{CACHE_INCOMING}*")];
    if listing.tip.is_some() {
        specs.push(format!("+{}:{CACHE_LEDGER}", remote.ledger_ref));
    }
    remote::fetch_many(store.git_dir(), remote.url, &specs, remote.timeout)?;
    Ok(())
}

/// What [`land_all`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Publications landed by a combined commit.
    pub landed: usize,
    /// Publications found already landed (their incoming refs deleted).
    pub already: usize,
    /// Publications refused (each left a refusal mark).
    pub refused: usize,
    /// Rounds that pushed (a lost lease included).
    pub rounds: u32,
    /// Publications still pending at the end (over the round limit, or deferred).
    pub left: usize,
}

/// Lands or refuses every pending publication of `remote`, round after round, until none is
/// left or `max_rounds` rounds have pushed: what `maintain --remote` runs for publications
/// whose jobs gave up or died. A lost lease (a job landing at the same moment) is read again
/// after a jittered backoff.
///
/// # Errors
/// As [`land_listed`].
pub fn land_all(
    store: &Store,
    remote: Remote<'_>,
    options: &combine::Options,
    max_rounds: u32,
) -> Result<Drained, Error> {
    let mut drained = Drained::default();
    loop {
        let listing = list(store, remote, None)?;
        drained.left = listing.pending.len();
        if listing.pending.is_empty() || drained.rounds >= max_rounds {
            return Ok(drained);
        }
        drained.rounds += 1;
        match land_listed(store, remote, &listing, options)? {
            Round::Idle => return Ok(drained),
            Round::Landed(combined) => {
                for (_, verdict) in &combined.verdicts {
                    match verdict {
                        Verdict::Landed { .. } => drained.landed += 1,
                        Verdict::AlreadyLanded => drained.already += 1,
                        Verdict::Refused(_) => drained.refused += 1,
                        Verdict::Deferred => {}
                    }
                }
            }
            Round::Moved => store::land::jittered_sleep(25 << drained.rounds.min(6)),
        }
    }
}

/// The fate of `incoming` as the remote shows it now: one [`list`], and a fetch of what is
/// not cached.
///
/// # Errors
/// [`Error::Remote`], [`Error::Combine`] or [`Error::Store`] when the commits cannot be read.
pub fn fate(store: &Store, remote: Remote<'_>, incoming: &Incoming) -> Result<Fate, Error> {
    fate_in(
        store,
        remote,
        incoming,
        &list(store, remote, Some(&incoming.key))?,
    )
}

/// The fate of `incoming` in `listing` (made with its key), fetching what is not cached.
///
/// # Errors
/// As [`fate`].
pub fn fate_in(
    store: &Store,
    remote: Remote<'_>,
    incoming: &Incoming,
    listing: &Listing,
) -> Result<Fate, Error> {
    let git_dir = store.git_dir();
    let cached = |c: CommitId| store.snapshot(Some(c)).is_ok();
    if let Some(mark) = listing.mark {
        if !cached(mark) {
            let spec = format!(
                "+{}:{CACHE_REFUSED}{}",
                combine::refused_ref(&incoming.key),
                incoming.key
            );
            remote::fetch_many(git_dir, remote.url, &[spec], remote.timeout)?;
        }
        let message = store.message(mark)?;
        let reason = message
            .split_once("\n\n")
            .map_or(message.as_str(), |(_, body)| body);
        let reason = reason
            .rsplit_once("\n\nLedger-Refused:")
            .map_or(reason, |r| r.0);
        return Ok(Fate::Refused(reason.trim().to_owned()));
    }
    let tip = listing.tip;
    if let Some(t) = tip
        && !cached(t)
    {
        let spec = format!("+{}:{CACHE_LEDGER}", remote.ledger_ref);
        remote::fetch_many(git_dir, remote.url, &[spec], remote.timeout)?;
    }
    if let Some(t) = tip.filter(|t| cached(*t)) {
        not_rewritten(store, remote, Some(t))?;
        if combine::is_landed(store, Some(t), incoming)? {
            remote::record_confirmed(store, remote.url, remote.ledger_ref, t);
            return Ok(Fate::Landed(t));
        }
    }
    Ok(if listing.pending.iter().any(|p| p.key == incoming.key) {
        Fate::Pending
    } else {
        Fate::Gone
    })
}

/// How long the job of the second pending key defers to the job of the first (which lands
/// everybody's at once) while that key stays first, before it combines itself: the first job
/// may have died. About two rounds against a server that answers in 250 ms.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How much longer each further pending key defers than the one before it
/// ([`patience`]): jobs take over one after another, not all at once. Found by jobs
/// publishing at once on a machine with fewer cores than jobs: a first job slowed past
/// [`PATIENCE`] by the others' builds had every other job combine and verify the same
/// commit together, which slowed all of them further.
pub const PATIENCE_STEP: Duration = Duration::from_secs(1);

/// The first job's round grows with what it combines (it fetches every pending commit and
/// verifies them all as one range): the deference grows by this much per pending
/// publication, so that a slow but live first job is not joined by others combining the same
/// set. Found by 256 jobs at once, whose every job but the first took over while the first
/// still verified 128 publications.
pub const PATIENCE_PER_PENDING: Duration = Duration::from_millis(100);

/// How long the job at `position` among `pending` pending keys (0: the first) defers to the
/// first one: not at all for the first; [`PATIENCE`] and [`PATIENCE_PER_PENDING`] per pending
/// publication for the second; one [`PATIENCE_STEP`] more for each after it.
pub fn patience(position: usize, pending: usize) -> Duration {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    match position {
        0 => Duration::ZERO,
        n => PATIENCE
            .saturating_add(PATIENCE_PER_PENDING.saturating_mul(count(pending)))
            .saturating_add(PATIENCE_STEP.saturating_mul(count(n - 1))),
    }
}

/// The longest pause between two reads of a job's fate (before jitter, which adds up to as
/// much again) while at most [`POLL_CAP_MS`] / [`POLL_PER_PENDING_MS`] publications are
/// pending.
pub const POLL_CAP_MS: u64 = 1_600;

/// The pause between reads grows by this much per pending publication past that: every
/// waiting job reads the remote (two requests, each a process on a smart-HTTP server), so
/// the reads of N waiting jobs together stay near one per [`POLL_PER_PENDING_MS`] whatever N
/// is, and do not starve the server that has to take the landing push.
pub const POLL_PER_PENDING_MS: u64 = 50;

/// The pause before read `round` (1, 2, …) with `pending` publications pending: 25 ms
/// doubling, up to [`POLL_CAP_MS`] or [`POLL_PER_PENDING_MS`] per pending publication,
/// whichever is longer.
pub fn poll_delay_ms(round: u32, pending: usize) -> u64 {
    let cap = POLL_CAP_MS.max(POLL_PER_PENDING_MS.saturating_mul(pending as u64));
    (25u64 << round.min(20)).min(cap)
}

/// Reads the fate of `incoming` and, while it is pending, lands every pending publication
/// ([`land_listed`]) when its key is the first pending one, or when the first one stayed
/// first for its [`patience`] (by its own position among the pending keys); otherwise it
/// waits for that job's round. Rounds back off ([`poll_delay_ms`], but never shorter than the
/// last read took; jittered) until it is landed or refused or `budget` has passed. One
/// `git ls-remote` per round serves both the fate and the landing; the tip is fetched only
/// when this job lands the pending set or its publication is no longer listed, and a lander
/// fetches the tip and the publications with one `git fetch`.
///
/// # Errors
/// [`Error::StillPending`] past the budget, [`Error::Withdrawn`] after [`GONE_READS`] reads
/// finding it gone, and those of [`fate_in`] and [`land_listed`].
pub fn await_fate(
    store: &Store,
    remote: Remote<'_>,
    incoming: &Incoming,
    options: &combine::Options,
    budget: Duration,
) -> Result<Fate, Error> {
    let start = Instant::now();
    let mut gone = 0;
    let mut round = 0u32;
    // The first pending key and since when it is first.
    let mut first: Option<(String, Instant)> = None;
    loop {
        let read_at = Instant::now();
        let listing = list(store, remote, Some(&incoming.key))?;
        let read = read_at.elapsed();
        let leader = listing.pending.first().map(|p| p.key.clone());
        let waited = match (&first, &leader) {
            (Some((k, since)), Some(l)) if k == l => since.elapsed(),
            _ => {
                first = leader.map(|l| (l, Instant::now()));
                Duration::ZERO
            }
        };
        let own = listing.pending.iter().position(|p| p.key == incoming.key);
        // Whether this job lands the pending set should its publication still be pending.
        let lands = own.is_some_and(|at| at == 0 || waited >= patience(at, listing.pending.len()));
        let fate = if own.is_some() && !lands && listing.mark.is_none() {
            // Listed and not marked, it is pending: a landing deletes its incoming ref in the
            // push that moves the ledger, so the tip need not be fetched to tell (a ref store
            // that applies that push ref by ref shows it landed at the next read).
            Fate::Pending
        } else {
            if lands {
                // The fate's read of the tip and the landing's read of the publications at once.
                fetch_listed(store, remote, &listing)?;
            }
            fate_in(store, remote, incoming, &listing)?
        };
        match fate {
            f @ (Fate::Landed(_) | Fate::Refused(_)) => return Ok(f),
            Fate::Gone => {
                gone += 1;
                if gone >= GONE_READS {
                    return Err(Error::Withdrawn {
                        key: incoming.key.clone(),
                    });
                }
            }
            Fate::Pending => {
                gone = 0;
                if lands
                    && let Round::Landed(combined) = land_listed(store, remote, &listing, options)?
                {
                    // The push that landed the set tells this one's fate without another read.
                    let verdict = combined
                        .verdicts
                        .iter()
                        .find(|(i, _)| i.key == incoming.key);
                    if let (Some((_, Verdict::Landed { .. } | Verdict::AlreadyLanded)), Some(at)) =
                        (verdict, combined.commit.or(listing.tip))
                    {
                        return Ok(Fate::Landed(at));
                    }
                    continue;
                }
            }
        }
        if start.elapsed() >= budget {
            return Err(Error::StillPending {
                key: incoming.key.clone(),
                waited: start.elapsed(),
                writers: listing.pending.len(),
            });
        }
        round += 1;
        // Never read more often than a read takes: a server slowed by the others' reads
        // answers them slower, and this job's reads back off with it.
        let delay = poll_delay_ms(round, listing.pending.len())
            .max(u64::try_from(read.as_millis()).unwrap_or(u64::MAX));
        store::land::jittered_sleep(delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::land::{Built, build_on};

    /// Deference and polling: the first key lands at once, each later one takes over a step
    /// after the one before; the pause between reads doubles to its cap, which grows with the
    /// pending publications so that many waiting jobs read the remote no more often together.
    #[test]
    fn patience_and_polling_scale_with_the_pending_set() {
        assert_eq!(patience(0, 8), Duration::ZERO);
        assert_eq!(patience(1, 0), PATIENCE);
        assert_eq!(patience(1, 10), PATIENCE + PATIENCE_PER_PENDING * 10);
        assert_eq!(patience(3, 0), PATIENCE + PATIENCE_STEP * 2);
        assert!(patience(usize::MAX, usize::MAX) >= patience(1_000, 1_000));
        assert_eq!(poll_delay_ms(1, 1), 50);
        assert_eq!(poll_delay_ms(6, 1), POLL_CAP_MS);
        assert_eq!(poll_delay_ms(30, 32), POLL_CAP_MS);
        assert_eq!(poll_delay_ms(30, 64), 64 * POLL_PER_PENDING_MS);
        assert_eq!(poll_delay_ms(30, 256), 256 * POLL_PER_PENDING_MS);
        assert_eq!(poll_delay_ms(u32::MAX, usize::MAX), 25 << 20);
    }
    use crate::publish::test_support::*;
    use crate::publish::{Batch, publish, read_source, validate_batch};
    use crate::store::remote::Target;

    const MAIN: &str = "refs/heads/main";

    /// A job's machine: a cache, and its publication built on the remote tip it read.
    fn job_on(cache: &Store, url: &str, batch: &Batch) -> (Incoming, Option<CommitId>) {
        let target = Target::Remote {
            url: url.to_owned(),
            ref_name: MAIN.to_owned(),
            timeout: Some(Duration::from_secs(60)),
        };
        let tip = target.tip(cache, MAIN).unwrap();
        let options = crate::publish::Options::new(sig());
        let Built::Commit(_, commit) = build_on(cache, batch, tip, &options, 1).unwrap() else {
            panic!("nothing to publish");
        };
        let key = combine::publication_key(cache, commit).unwrap();
        (Incoming { key, commit }, tip)
    }

    fn batch(job: &str) -> Batch {
        validate_batch(&read_source(&day1(job), None).unwrap(), None).unwrap()
    }

    /// Three jobs build on the same remote tip: the first lands directly, the second and a
    /// conflicting third are parked; one round of the second lands it with one commit, deletes
    /// every decided incoming ref (the first's too, already landed) and marks the third
    /// refused, which the third learns with the reason. The remote verifies clean.
    #[test]
    fn parked_publications_land_together_and_a_conflict_is_marked() {
        let tmp = tempfile::tempdir().unwrap();
        let remote_dir = tmp.path().join("remote.git");
        let remote_store = Store::open_or_init_bare(&remote_dir, MAIN).unwrap();
        publish(
            &remote_store,
            &day1("002"),
            &crate::publish::Options::new(sig()),
        )
        .unwrap();
        let url = remote_dir.display().to_string();
        let remote = Remote {
            url: &url,
            ledger_ref: MAIN,
            timeout: Some(Duration::from_secs(60)),
        };
        let caches: Vec<Store> = ["a", "b", "c"]
            .iter()
            .map(|n| Store::open_or_init_bare(&tmp.path().join(format!("{n}.git")), MAIN).unwrap())
            .collect();
        let (a, a_base) = job_on(&caches[0], &url, &batch("001"));
        let (b, b_base) = job_on(&caches[1], &url, &batch("003"));
        let mut trimmed = read_source(&day1("001"), None).unwrap()[0].clone();
        let lines: Vec<&str> = trimmed.content.lines().collect();
        trimmed.content = format!("{}\n", lines[..lines.len() - 1].join("\n"));
        let (c, c_base) = job_on(&caches[2], &url, &validate_batch(&[trimmed], None).unwrap());

        assert_eq!(
            park(&caches[0], remote, &a, a_base).unwrap(),
            Parked::Landed(a.commit)
        );
        assert_eq!(
            park(&caches[1], remote, &b, b_base).unwrap(),
            Parked::Pending
        );
        assert_eq!(
            park(&caches[2], remote, &c, c_base).unwrap(),
            Parked::Pending
        );

        let options = combine::Options::new(sig());
        let budget = Duration::from_secs(60);
        let fate_b = await_fate(&caches[1], remote, &b, &options, budget).unwrap();
        let Fate::Landed(tip) = fate_b else {
            panic!("{fate_b:?}");
        };
        assert_eq!(
            remote_store.parents(tip).unwrap(),
            vec![a.commit],
            "one commit"
        );
        let fate_c = await_fate(&caches[2], remote, &c, &options, budget).unwrap();
        assert!(
            matches!(&fate_c, Fate::Refused(r) if r.contains("the ledger holds other bytes")),
            "{fate_c:?}"
        );
        assert!(matches!(
            fate(&caches[0], remote, &a).unwrap(),
            Fate::Landed(_)
        ));

        let left = remote::list_refs(
            caches[0].git_dir(),
            &url,
            &["refs/ledger/*"],
            remote.timeout,
        )
        .unwrap();
        assert_eq!(
            left.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            vec![combine::refused_ref(&c.key)],
            "every incoming ref decided and deleted"
        );
        let head = remote_store.tip(MAIN).unwrap().unwrap();
        assert_eq!(head, tip);
        assert!(
            crate::verify::verify_revision(&remote_store, head)
                .unwrap()
                .is_clean()
        );

        // The remote ledger rewritten under a cache that confirmed its tip: that cache neither
        // reads a fate from it nor builds on it.
        let stranger = remote_store
            .write_commit(None, &[("x".to_owned(), b"x\n".to_vec())], "other", &sig())
            .unwrap();
        remote_store
            .update_ref(MAIN, Some(head), stranger, "rewrite")
            .unwrap();
        let e = fate(&caches[1], remote, &b).unwrap_err();
        assert!(matches!(e, Error::Rewritten(_)), "{e}");
    }

    /// Jobs finishing at once, each with its own cache: every publication lands (directly or
    /// through a round), no incoming ref is left, the remote verifies clean.
    #[test]
    fn jobs_publishing_at_once_all_land() {
        let tmp = tempfile::tempdir().unwrap();
        let remote_dir = tmp.path().join("remote.git");
        let remote_store = Store::open_or_init_bare(&remote_dir, MAIN).unwrap();
        let url = remote_dir.display().to_string();
        let jobs = ["001", "002", "003", "004", "005", "006", "007", "008"];
        let barrier = std::sync::Barrier::new(jobs.len());
        let fates: Vec<(Incoming, Fate)> = std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let (tmp, url, barrier) = (&tmp, &url, &barrier);
                    scope.spawn(move || {
                        let cache =
                            Store::open_or_init_bare(&tmp.path().join(format!("{job}.git")), MAIN)
                                .unwrap();
                        let remote = Remote {
                            url,
                            ledger_ref: MAIN,
                            timeout: Some(Duration::from_secs(60)),
                        };
                        let batch = batch(job);
                        barrier.wait();
                        let (inc, base) = job_on(&cache, url, &batch);
                        let fate = match park(&cache, remote, &inc, base).unwrap() {
                            Parked::Landed(c) => Fate::Landed(c),
                            Parked::Pending => await_fate(
                                &cache,
                                remote,
                                &inc,
                                &combine::Options::new(sig()),
                                Duration::from_secs(120),
                            )
                            .unwrap(),
                        };
                        (inc, fate)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let head = remote_store.tip(MAIN).unwrap().unwrap();
        for (inc, fate) in &fates {
            assert!(matches!(fate, Fate::Landed(_)), "{fate:?}");
            assert!(combine::is_landed(&remote_store, Some(head), inc).unwrap());
        }
        // Every incoming ref is decided by the next round; one more round clears the last
        // direct landing's.
        let cache = Store::open_or_init_bare(&tmp.path().join("last.git"), MAIN).unwrap();
        let remote = Remote {
            url: &url,
            ledger_ref: MAIN,
            timeout: Some(Duration::from_secs(60)),
        };
        while let Round::Moved = land_round(&cache, remote, &combine::Options::new(sig())).unwrap()
        {
        }
        let left = remote::list_refs(cache.git_dir(), &url, &["refs/ledger/*"], None).unwrap();
        assert!(left.is_empty(), "{left:?}");
        assert!(
            crate::verify::verify_revision(&remote_store, remote_store.tip(MAIN).unwrap().unwrap())
                .unwrap()
                .is_clean()
        );
    }
}
