//! Two-pass finalization (ledger-runtime §7.2 steps 1b, 2 and 3), for `seal` and for the
//! publisher's spool input.
//!
//! Pass 1 seals and shards every producer except those whose events are all
//! `projection.failed`; then the outbox is drained under one deadline (its failures become
//! `projection.failed` events); pass 2 seals and shards every producer. Re-sealing an unchanged
//! producer is a no-op, so the result equals the reference's for the same spool and delivery
//! results. With nothing to drain and no projection-failure-only producer, it is one ordinary
//! [`seal::seal`], exactly as without live projection.

use std::time::Duration;

use crate::time::Timestamp;
use crate::writer::files::Root;
use crate::writer::seal::{self, SealReport};
use crate::writer::spool::Spool;

use super::config::{MAX_TIMEOUT_MS, Verdict};
use super::deliver::{self, DrainReport, Projector};
use super::outbox::{self, State};

/// The drain deadline when the caller gives none, in milliseconds.
pub const DEFAULT_FLUSH_TIMEOUT_MS: u64 = 10_000;

/// Why a finalization failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Sealing (either pass) failed.
    #[error(transparent)]
    Seal(#[from] seal::Error),
    /// The flush deadline option is not an integer in 1..=60000 (reported after pass 1, as in
    /// the reference).
    #[error("CrabFleet projection flush timeout must be an integer between 1 and 60000")]
    FlushTimeout,
    /// Reading the outbox or recording a failure failed.
    #[error(transparent)]
    Live(#[from] super::Error),
}

/// What to drain with: the configuration, the projector, the deadline, the pid claiming
/// requests and the wall clock for failures' `recorded_at`.
pub struct Drain<'a> {
    /// The configuration verdict at finalization time.
    pub verdict: &'a Verdict,
    /// The projector (none: no request can be posted; pending ones record failures).
    pub projector: Option<&'a Projector>,
    /// The drain deadline in milliseconds as given (checked after pass 1: an integer in
    /// 1..=60000); `None` is [`DEFAULT_FLUSH_TIMEOUT_MS`].
    pub flush_timeout_ms: Option<f64>,
    /// The process claiming requests.
    pub pid: u32,
    /// The wall clock at failure time.
    pub wall: &'a dyn Fn() -> Timestamp,
}

/// Whether the outbox at `root` holds a request not yet settled.
pub fn has_unsettled(root: &Root) -> Result<bool, super::Error> {
    for e in outbox::entries(root)? {
        if outbox::state(root, &e)? != State::Done {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What pass 1 does with the producers that do not hold only `projection.failed` events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass1 {
    /// `seal`: seal them and write their shards.
    Seal,
    /// The publisher's spool input: they must already be sealed; nothing is written.
    RequireSealed,
}

/// Finalizes `spool` in two passes around the drain (module docs), as `seal` does; returns the
/// combined seal report (pass 2's shard paths, which include pass 1's) and the drain's report.
/// With nothing to drain it is one [`seal::seal`].
pub fn finalize(
    spool: &Spool,
    output: Option<&Root>,
    now: Timestamp,
    options: &seal::Options,
    drain: &Drain<'_>,
) -> Result<(SealReport, DrainReport), Error> {
    two_pass(spool, output, now, options, drain, Pass1::Seal)
}

/// Two-pass finalization of the publisher's spool input (`publish SPOOL`), the same
/// procedure as [`finalize`] except for pass 1: the spool must already be sealed (by `seal`)
/// except for the producers holding only `projection.failed` events, so pass 1 checks the
/// seals and writes nothing ([`seal::Error::Unsealed`] or [`seal::Error::LateEvents`]
/// otherwise, as publishing an unsealed spool); then the outbox is drained under the deadline
/// and pass 2 seals the failure producers, so the publication carries every failure. No
/// shard file is written (the publisher packs the shards from the sealed spool).
pub fn finalize_sealed(
    spool: &Spool,
    now: Timestamp,
    options: &seal::Options,
    drain: &Drain<'_>,
) -> Result<(SealReport, DrainReport), Error> {
    two_pass(spool, None, now, options, drain, Pass1::RequireSealed)
}

/// The one implementation behind [`finalize`] and [`finalize_sealed`].
fn two_pass(
    spool: &Spool,
    output: Option<&Root>,
    now: Timestamp,
    options: &seal::Options,
    drain: &Drain<'_>,
    mode: Pass1,
) -> Result<(SealReport, DrainReport), Error> {
    let timeout_ok = drain
        .flush_timeout_ms
        .is_none_or(|t| t.fract() == 0.0 && (1.0..=MAX_TIMEOUT_MS as f64).contains(&t));
    if mode == Pass1::Seal && timeout_ok && !has_unsettled(spool.handle())? {
        return Ok((
            seal::seal(spool, output, now, options)?,
            DrainReport::default(),
        ));
    }
    let pass1_options = seal::Options {
        skip_projection_failure_only: true,
        ..options.clone()
    };
    let pass1 = match mode {
        Pass1::Seal => seal::seal(spool, output, now, &pass1_options)?,
        Pass1::RequireSealed => {
            seal::sealed_runs_selected(spool, &pass1_options)?;
            SealReport::default()
        }
    };
    if !timeout_ok {
        return Err(Error::FlushTimeout);
    }
    let deadline = Duration::from_millis(
        drain
            .flush_timeout_ms
            .map_or(DEFAULT_FLUSH_TIMEOUT_MS, |t| t as u64),
    );
    let drained = deliver::drain(
        drain.projector,
        spool.handle(),
        drain.verdict,
        deadline,
        drain.pid,
        drain.wall,
    )?;
    let mut report = seal::seal(spool, output, now, options)?;
    // Pass 2 found pass 1's seals and shards in place: count them once, as written.
    report.already_sealed -= pass1.sealed.min(report.already_sealed);
    report.sealed += pass1.sealed;
    report.shards_created += pass1.shards_created;
    Ok((report, drained))
}
