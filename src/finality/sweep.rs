//! The stale-outcome sweep: an action whose outcome is still pending long after it was created
//! gets outcome `lost_confirmation`, in one commit for all of them. Its outcome file is written
//! under the same create-only rule as a report, so a report and the sweep race to exactly one
//! winner.
//!
//! # Whose clock decides
//!
//! Writers on different machines share one ref (`serve` instances and CLI runs with the same
//! `--remote`), each stamping its records with its own clock. A sweeper that compared another
//! writer's `created_at` with its own clock would sweep a claim that is seconds old whenever its
//! clock runs ahead of the creator's, and it cannot tell from the records that its clock is the
//! one that is wrong. So staleness is measured on ONE clock, the sweeper's own: the sweep is
//! two-phase. The first sweep that sees an action pending remembers when, on its own clock
//! ([`Observations`]); a later sweep closes the action only once `timeout` minutes have passed on
//! that same clock since then. The first sighting is no earlier than the creation, so the
//! timeout has passed for the creator too, whatever the offset between the two clocks.
//! `created_at` plays no part in the decision.
//!
//! An action this sweeper's own process created is witnessed at creation
//! ([`Observations::witness`]: `serve` for the actions it creates, the CLI's `action create` in
//! the repository's local state), so a single writer whose clock is right keeps the reference's
//! rule: swept by the first sweep more than the timeout after the creation. An action another
//! writer created is swept at the earliest one timeout after this sweeper first saw it: with a
//! periodic sweep, no later than one period plus one timeout after its creation.
//!
//! The assumptions, and what happens beyond them:
//! - **Offsets between writers**: any size is tolerated, ahead or behind. A sweeper that finds a
//!   record time more than [`SKEW_NOTICE_MS`] ahead of its own clock (a `created_at`,
//!   `claimed_at`, `decided_at` or a losing report's `outcome_at`) says so
//!   ([`SweepReport::clock_skew`]: the CLI prints it, `--json` gives it, `serve` logs it and
//!   answers it); it never sweeps because of it. An outcome it writes with a clock behind the
//!   creator's precedes `created_at`; reads of the action then carry `clock_skew`.
//! - **Rates**: the sweeper's clock is assumed to advance at the rate of real time (ordinary
//!   drift is seconds a day, nothing against a timeout of minutes). A forward step of the
//!   sweeper's own clock between two sweeps (a manual set, a VM resumed) counts as elapsed time
//!   and can close an action early by the size of the step; a backward step only delays (a
//!   sighting in the sweeper's future is moved back to its present).
//! - **Lost memory**: the sightings are kept in the repository's git directory
//!   ([`super::observations`]), shared by the CLI and `serve` on that repository, and read again
//!   after a restart. When one is lost anyway (the file removed or unreadable, `serve` killed
//!   before it saved what it created since its last sweep), the next sweep sees the action for
//!   the first time again: the sweep is delayed by at most one timeout, never brought forward.
//!
//! Alternatives weighed: trusting `created_at` plus a tolerated skew bound (wrong beyond the
//! bound, and the bound has to cover the worst clock of any writer); timestamps from the git
//! commits (stamped by the same clocks); a lease renewed by the worker (needs a worker
//! heartbeat the wire contract does not have). Two-phase needs nothing from other writers.
//!
//! What it reads depends on the layout: in `hex2x2` and `nibble` the names of the pending
//! index's entries (one per pending action, [`super::pending`]) and the records of only those whose timeout has
//! passed on the sweeper's clock, so a sweep of a million closed actions reads a few small
//! trees; in `flat`, every action directory.

use std::collections::BTreeSet;

use super::approval::ApprovalExpiry;
use super::batch::{self, run};
use super::error::Error;
use super::ids::ActionId;
use super::observations::Observations;
use super::records::Outcome;
use super::status::{Lifecycle, OutcomeStatus, Source};
use super::write::{Options, Written};
use crate::canonical::Value;
use crate::store::Store;
use crate::time::Timestamp;

/// The sweep's default timeout in minutes.
pub const DEFAULT_TIMEOUT_MINUTES: u32 = 15;
/// Largest sweep timeout in minutes; the smallest is 1.
pub const MAX_TIMEOUT_MINUTES: u32 = 1440;
/// `summary` of a swept outcome.
pub const SWEEP_SUMMARY: &str = "No outcome reported within timeout window";
/// `error_message` of a swept outcome whose lifecycle was open.
pub const SWEEP_ERROR: &str = "reconciled to unknown by the stale-outcome sweep";

/// The sweep timeout of a raw setting: a non-finite or non-positive value is the
/// default 15, fractions are floored, and the result is clamped to 1–1440 minutes.
pub fn timeout_minutes(raw: f64) -> u32 {
    if !raw.is_finite() || raw <= 0.0 {
        return DEFAULT_TIMEOUT_MINUTES;
    }
    (raw.floor() as u32).clamp(1, MAX_TIMEOUT_MINUTES)
}

/// One action the sweep reconciled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    /// The action.
    pub action_id: ActionId,
    /// Its agent.
    pub agent_id: String,
    /// Its creation time.
    pub created_at: Timestamp,
    /// The sweep's outcome time.
    pub outcome_at: Timestamp,
    /// The lifecycle after the sweep (`unknown`, or the untouched one).
    pub lifecycle: Lifecycle,
}

/// What [`sweep`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// The effective timeout in minutes.
    pub timeout_minutes: u32,
    /// Actions whose pending outcome became `lost_confirmation`, by id.
    pub swept: Vec<Swept>,
    /// Actions whose approval nobody gave in time: now `expired`
    /// ([`ApprovalExpiry`]).
    pub expired: Vec<ActionId>,
    /// Candidates whose outcome another writer set first, with the status that won.
    pub lost: Vec<(ActionId, OutcomeStatus)>,
    /// Action directories skipped because a record is invalid (`verify` reports them).
    pub skipped: Vec<String>,
    /// Pending actions whose timeout has not yet passed on the sweeper's clock since it first saw
    /// them (those seen for the first time by this sweep included).
    pub waiting: usize,
    /// Record times well ahead of the sweeper's clock ([`SKEW_NOTICE_MS`]).
    pub clock_skew: Vec<ClockNotice>,
}

/// Record times further than this ahead of the sweeper's clock are reported as clock skew
/// (one minute: below it, ordinary offsets between synchronised hosts would be noise).
pub const SKEW_NOTICE_MS: i64 = 60_000;

/// Whether an action in `state` is one the sweep may close: outcome pending, and a lifecycle
/// that is not `completed`, `failed`, `cancelled` or `blocked` (those with a pending-index entry).
pub(super) fn is_sweepable(state: &super::State) -> bool {
    super::pending::indexed(state)
}

/// The sweep's rule: an action first seen pending at `seen` (the sweeper's clock) has timed out
/// at `now` (the same clock) when more than `minutes` have elapsed since.
pub fn timed_out(seen: Timestamp, now: Timestamp, minutes: u32) -> bool {
    now.millis_since(seen) > i64::from(minutes) * 60_000
}

/// A record time well ahead of the sweeper's clock: a writer's clock is ahead of the sweeper's
/// (or the sweeper's is behind). Reported, never acted on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockNotice {
    /// The action whose record holds the time.
    pub action_id: ActionId,
    /// Which time: `created_at`, `claimed_at`, `decided_at` or `outcome_at`.
    pub time: &'static str,
    /// The time as recorded.
    pub at: Timestamp,
    /// How far it is ahead of the sweeper's clock, in milliseconds.
    pub ahead_ms: i64,
}

impl ClockNotice {
    /// The notice as JSON: `{"action_id","ahead_ms","at","time"}`.
    pub fn to_value(&self) -> Value {
        Value::object([
            ("action_id", Value::str(self.action_id.as_str())),
            ("ahead_ms", Value::from(self.ahead_ms)),
            ("at", Value::str(super::format_time(self.at))),
            ("time", Value::str(self.time)),
        ])
    }
}

impl std::fmt::Display for ClockNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} {} is {} ms ahead of this sweeper's clock: a writer's clock is ahead of this \
             one, or this one is behind (the sweep times actions on its own clock only)",
            self.action_id,
            self.time,
            super::format_time(self.at),
            self.ahead_ms
        )
    }
}

/// The notice for `at` (the record time `time` of action `id`) when it is more than
/// [`SKEW_NOTICE_MS`] ahead of `now`.
pub(super) fn notice(
    id: &ActionId,
    time: &'static str,
    at: Timestamp,
    now: Timestamp,
) -> Option<ClockNotice> {
    let ahead_ms = at.millis_since(now);
    (ahead_ms > SKEW_NOTICE_MS).then(|| ClockNotice {
        action_id: id.clone(),
        time,
        at,
        ahead_ms,
    })
}

/// The notices of every time recorded for the action in `state`.
pub(super) fn notices(state: &super::State, now: Timestamp) -> Vec<ClockNotice> {
    let id = &state.action.action_id;
    [
        Some(("created_at", state.action.created_at)),
        state.claim.as_ref().map(|c| ("claimed_at", c.claimed_at)),
        state
            .approval
            .as_ref()
            .map(|a| ("decided_at", a.decided_at)),
        state.outcome.as_ref().map(|o| ("outcome_at", o.outcome_at)),
    ]
    .into_iter()
    .flatten()
    .filter_map(|(time, at)| notice(id, time, at, now))
    .collect()
}

/// The `lost_confirmation` outcome the sweep writes at `now` for action `id` in `lifecycle`:
/// [`SWEEP_SUMMARY`], and [`SWEEP_ERROR`] when the lifecycle was still open.
pub(super) fn sweep_outcome(id: &ActionId, lifecycle: Lifecycle, now: Timestamp) -> Outcome {
    Outcome {
        action_id: id.clone(),
        status: OutcomeStatus::LostConfirmation,
        outcome_at: now,
        summary: Some(SWEEP_SUMMARY.to_owned()),
        error_message: lifecycle.is_open().then(|| SWEEP_ERROR.to_owned()),
        progress: None,
        attempt_id: None,
        lifecycle: lifecycle.closed_by(OutcomeStatus::LostConfirmation),
        source: Source::Sweep,
        timestamp_end: None,
        report: None,
    }
}

/// The stale-outcome sweep: in ONE commit, every action whose outcome is pending, whose
/// lifecycle is not `completed`, `failed`, `cancelled` or `blocked`, and which this sweeper
/// first saw pending at least `timeout_minutes` ago on its own clock (`observations`, see the
/// module docs) gets outcome `lost_confirmation` ([`SWEEP_SUMMARY`]); an open lifecycle becomes
/// `unknown` (with [`SWEEP_ERROR`]). An action still awaiting an operator is left to the
/// approval expiry ([`sweep_expiring`]; here with its defaults) and never swept. Actions
/// seen for the first time are added to `observations`, those no longer pending are dropped from
/// it; the caller keeps it for the next sweep. It writes through the same create-only rule as a
/// report, so a report and the sweep race to exactly one winner; candidates that a report won
/// are listed in [`SweepReport::lost`]. It never grants execution authority.
///
/// `timeout_minutes` is normalised by [`timeout_minutes`]. Nothing to sweep: no commit.
///
/// # Errors
/// The write path's errors.
pub fn sweep(
    store: &Store,
    options: &Options,
    timeout: f64,
    now: Timestamp,
    observations: &mut Observations,
) -> Result<Written<SweepReport>, Error> {
    sweep_expiring(
        store,
        options,
        timeout,
        &ApprovalExpiry::default(),
        now,
        observations,
    )
}

/// [`sweep`](fn@sweep) with the approval expiry's defaults given: in the same commit, every
/// action still awaiting an operator whose window ([`ApprovalExpiry::window_ms`]) has passed on
/// the sweeper's clock since it first saw it becomes `expired` (its `approval.json`, written
/// under the same create-only rule as an operator's decision, so the two race to one winner).
/// An action awaiting an operator is never swept to `lost_confirmation`: nothing can have run.
///
/// # Errors
/// The write path's errors.
pub fn sweep_expiring(
    store: &Store,
    options: &Options,
    timeout: f64,
    expiry: &ApprovalExpiry,
    now: Timestamp,
    observations: &mut Observations,
) -> Result<Written<SweepReport>, Error> {
    // The actions this sweep staged on an earlier tip: one decided since lost its race.
    let mut seen: BTreeSet<ActionId> = BTreeSet::new();
    run(store, options, now, |ov, now| {
        let mut lost = Vec::new();
        let mut late = Vec::new();
        for id in &seen {
            if let Ok(Some(state)) = ov.state(id)
                && let Some(o) = &state.outcome
            {
                lost.push((id.clone(), o.status));
                late.extend(notice(id, "outcome_at", o.outcome_at, now));
            }
        }
        let mut report = batch::sweep(ov, timeout, expiry, now, observations)?;
        seen.extend(report.swept.iter().map(|s| s.action_id.clone()));
        report.lost = lost;
        report.clock_skew.extend(late);
        Ok(report)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;

    /// A report racing the sweep, in threads: exactly one outcome lands, the losing report is
    /// told the winner's status, the losing sweep lists the action as lost.
    #[test]
    fn report_and_sweep_race_to_one_outcome() {
        let (dir, store) = repo();
        let path = dir.path().join("state.git");
        let opts = options("refs/heads/main");
        let rounds = 12;
        for round in 0..rounds {
            let id = format!("act_race_{round}");
            create_action(&store, &opts, &new_action(&id), at(BASE)).unwrap();
            let barrier = std::sync::Barrier::new(2);
            let later = at(BASE).saturating_add_millis(16 * 60_000);
            let (rep, swp) = std::thread::scope(|scope| {
                let r = scope.spawn(|| {
                    let s = Store::open(&path).unwrap();
                    barrier.wait();
                    let report = OutcomeReport {
                        status: "completed".into(),
                        ..OutcomeReport::default()
                    };
                    report_outcome(&s, &opts, &id, &report, &Settler::Operator, later)
                        .map(|w| w.value.outcome.status)
                });
                let w = scope.spawn(|| {
                    let s = Store::open(&path).unwrap();
                    barrier.wait();
                    sweep(&s, &opts, 15.0, later, &mut witnessed(&id, at(BASE))).map(|w| w.value)
                });
                (r.join().unwrap(), w.join().unwrap())
            });
            let swp = swp.unwrap();
            let st = show(&store, "refs/heads/main", &id).unwrap();
            let swept = swp.swept.iter().any(|s| s.action_id.as_str() == id);
            match rep {
                Ok(status) => {
                    assert_eq!(status, OutcomeStatus::Completed);
                    assert!(!swept);
                    assert_eq!(st.outcome_status(), OutcomeStatus::Completed);
                }
                Err(Error::OutcomeAlreadySet { current_status, .. }) => {
                    assert_eq!(current_status, OutcomeStatus::LostConfirmation);
                    assert!(swept);
                    assert_eq!(st.outcome_status(), OutcomeStatus::LostConfirmation);
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        let snap = store
            .snapshot(store.tip("refs/heads/main").unwrap())
            .unwrap();
        assert_eq!(verify(&snap).unwrap(), Vec::new());
    }

    const MIN: i64 = 60_000;

    fn ids(r: &SweepReport) -> Vec<&str> {
        r.swept.iter().map(|s| s.action_id.as_str()).collect()
    }

    /// Creates and claims `id` on the writer's clock at `t`.
    fn created_and_claimed(store: &Store, opts: &Options, id: &str, t: Timestamp) {
        create_action(store, opts, &new_action(id), t).unwrap();
        claim(store, opts, id, &request("attempt-0000000001"), t).unwrap();
    }

    /// The rule itself: strictly more than the timeout since the sighting, on one clock.
    #[test]
    fn timed_out_is_strictly_after_the_timeout_on_one_clock() {
        let seen = at(BASE);
        assert!(!timed_out(seen, seen, 15));
        assert!(!timed_out(seen, seen.saturating_add_millis(15 * MIN), 15));
        assert!(timed_out(
            seen,
            seen.saturating_add_millis(15 * MIN + 1),
            15
        ));
        // A sighting in the future (the clock stepped back) has not timed out.
        assert!(!timed_out(seen, seen.saturating_sub_millis(60 * MIN), 15));
    }

    /// A sweeper whose clock is 2 h ahead of the creator's: its first sweep only sees the claim,
    /// seconds old; the creator's real report then lands; an action left pending is swept only
    /// once the timeout has passed on the sweeper's clock since it first saw it. Both layouts.
    #[test]
    fn a_sweeper_ahead_never_sweeps_a_fresh_claim() {
        for flat in [false, true] {
            let (_dir, store) = repo();
            let opts = options("refs/heads/main");
            let a_now = at(BASE);
            created_and_claimed(&store, &opts, "act_fresh", a_now);
            created_and_claimed(&store, &opts, "act_left", a_now);
            if flat {
                flatten(&store);
            }
            let b_now = a_now.saturating_add_millis(120 * MIN + 10_000);
            let mut b = Observations::new();
            let r = sweep(&store, &opts, 15.0, b_now, &mut b).unwrap();
            assert!(r.value.swept.is_empty(), "flat {flat}: {:?}", r.value);
            assert_eq!((r.value.waiting, r.commit), (2, None), "flat {flat}");
            // Records from the sweeper's past: no skew it could see.
            assert_eq!(r.value.clock_skew, Vec::new(), "flat {flat}");
            assert_eq!(b.len(), 2);
            // The creator's real report, seconds later on its clock: accepted.
            let done = OutcomeReport {
                status: "completed".into(),
                ..OutcomeReport::default()
            };
            report_outcome(
                &store,
                &opts,
                "act_fresh",
                &done,
                &Settler::Principal("principal-a".into()),
                a_now.saturating_add_millis(5_000),
            )
            .unwrap();
            // Fifteen minutes on the sweeper's clock: not yet (strictly more is the rule).
            let r = sweep(
                &store,
                &opts,
                15.0,
                b_now.saturating_add_millis(15 * MIN),
                &mut b,
            )
            .unwrap();
            assert!(r.value.swept.is_empty(), "flat {flat}");
            assert_eq!(r.value.waiting, 1, "flat {flat}");
            // The closed action is forgotten.
            assert_eq!(b.len(), 1);
            let later = b_now.saturating_add_millis(15 * MIN + 1);
            let r = sweep(&store, &opts, 15.0, later, &mut b).unwrap();
            assert_eq!(ids(&r.value), ["act_left"], "flat {flat}");
            // Forgotten by the next sweep, which finds it closed.
            sweep(&store, &opts, 15.0, later, &mut b).unwrap();
            assert!(b.is_empty(), "flat {flat}");
            let st = show(&store, "refs/heads/main", "act_left").unwrap();
            assert_eq!(st.outcome_status(), OutcomeStatus::LostConfirmation);
        }
    }

    /// A sweeper whose clock is 2 h behind: it says the records are from its future (creation
    /// and claim), never acts on it, and sweeps one timeout after its first sighting on its own
    /// clock; the outcome it writes precedes the creation, and reads of it carry `clock_skew`.
    #[test]
    fn a_sweeper_behind_reports_the_future_and_times_on_its_own_clock() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        created_and_claimed(&store, &opts, "act_late", at(BASE));
        let c_now = at(BASE).saturating_sub_millis(120 * MIN);
        let mut c = Observations::new();
        let r = sweep(&store, &opts, 15.0, c_now, &mut c).unwrap().value;
        assert!(r.swept.is_empty());
        assert_eq!(r.waiting, 1);
        // Read at its first sighting: the creation and the claim are from its future.
        let notice = |time| ClockNotice {
            action_id: ActionId::parse("act_late").unwrap(),
            time,
            at: at(BASE),
            ahead_ms: 120 * MIN,
        };
        assert_eq!(r.clock_skew, [notice("created_at"), notice("claimed_at")]);
        // Seen before and not timed out: unread, the index's creation time is what it sees.
        let r = sweep(
            &store,
            &opts,
            15.0,
            c_now.saturating_add_millis(MIN),
            &mut c,
        )
        .unwrap()
        .value;
        let times: Vec<_> = r.clock_skew.iter().map(|n| (n.time, n.ahead_ms)).collect();
        assert_eq!(times, [("created_at", 119 * MIN)]);
        let c_later = c_now.saturating_add_millis(16 * MIN);
        let r = sweep(&store, &opts, 15.0, c_later, &mut c).unwrap().value;
        assert_eq!(ids(&r), ["act_late"]);
        let times: Vec<_> = r.clock_skew.iter().map(|n| (n.time, n.ahead_ms)).collect();
        assert_eq!(
            times,
            [("created_at", 104 * MIN), ("claimed_at", 104 * MIN)]
        );
        let view = show(&store, "refs/heads/main", "act_late")
            .unwrap()
            .view(c_later);
        let skew = view.clock_skew.expect("the outcome precedes the creation");
        assert_eq!(skew.ms, 104 * MIN);
    }

    /// Equal clocks: an action the sweeper created is timed from its creation (the reference's
    /// rule); one it did not create waits one timeout from its first sighting.
    #[test]
    fn equal_clocks_keep_the_reference_rule_for_witnessed_actions() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        create_action(&store, &opts, &new_action("act_mine"), at(BASE)).unwrap();
        create_action(&store, &opts, &new_action("act_theirs"), at(BASE)).unwrap();
        let mut seen = witnessed("act_mine", at(BASE));
        let t1 = at(BASE).saturating_add_millis(16 * MIN);
        let r = sweep(&store, &opts, 15.0, t1, &mut seen).unwrap().value;
        assert_eq!(ids(&r), ["act_mine"]);
        assert_eq!((r.waiting, r.clock_skew.len()), (1, 0));
        assert_eq!(
            seen.first_seen(&ActionId::parse("act_theirs").unwrap()),
            Some(t1)
        );
        let r = sweep(
            &store,
            &opts,
            15.0,
            t1.saturating_add_millis(15 * MIN + 1),
            &mut seen,
        )
        .unwrap()
        .value;
        assert_eq!(ids(&r), ["act_theirs"]);
    }

    /// Lost sightings (a restart, a removed file) delay the sweep by one timeout and never
    /// advance it; a sighting in the sweeper's future (its clock stepped back) is moved to its
    /// present.
    #[test]
    fn lost_or_future_sightings_only_delay() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        create_action(&store, &opts, &new_action("act_x"), at(BASE)).unwrap();
        let t1 = at(BASE).saturating_add_millis(MIN);
        let mut seen = Observations::new();
        sweep(&store, &opts, 15.0, t1, &mut seen).unwrap();
        // Restarted: the memory is gone.
        let mut seen = Observations::new();
        let t2 = t1.saturating_add_millis(16 * MIN);
        let r = sweep(&store, &opts, 15.0, t2, &mut seen).unwrap().value;
        assert!(r.swept.is_empty());
        // A remembered sighting an hour in the future.
        let id = ActionId::parse("act_x").unwrap();
        let mut seen = witnessed("act_x", t2.saturating_add_millis(60 * MIN));
        let r = sweep(&store, &opts, 15.0, t2, &mut seen).unwrap().value;
        assert!(r.swept.is_empty());
        assert_eq!(seen.first_seen(&id), Some(t2));
        let r = sweep(
            &store,
            &opts,
            15.0,
            t2.saturating_add_millis(15 * MIN + 1),
            &mut seen,
        )
        .unwrap()
        .value;
        assert_eq!(ids(&r), ["act_x"]);
    }

    /// An approval nobody gave: the action's own wait plus the grace, on the sweeper's clock
    /// from its sighting, and it is `expired` (one commit, verified); never `lost_confirmation`
    /// before. An operator's decision and the expiry race to one `approval.json`: after the
    /// expiry, a decision is refused with the lifecycle `expired`; a decision first, and the
    /// sweep leaves the action to the outcome rules. Both layouts.
    #[test]
    fn an_approval_nobody_gave_expires_once() {
        use crate::finality::batch::{self, Overlay};
        for flat in [false, true] {
            let (_dir, store) = repo();
            let opts = options("refs/heads/main");
            let t0 = at(BASE);
            let gated = |id: &str, wait: Option<u32>| {
                let mut a = new_action(id);
                a.verdict = Verdict::RequireApproval;
                a.approval_wait_seconds = wait;
                create_action(&store, &opts, &a, t0).unwrap();
            };
            gated("act_short", Some(60));
            gated("act_default", None);
            gated("act_decided", Some(60));
            if flat {
                flatten(&store);
            }
            let expiry = ApprovalExpiry {
                default_wait_seconds: 120,
                grace_seconds: 30,
            };
            let mut seen = Observations::new();
            for id in ["act_short", "act_default", "act_decided"] {
                seen.witness(ActionId::parse(id).unwrap(), t0);
            }
            // Well past the outcome timeout and short of every window: nothing expires and
            // nothing is swept to lost_confirmation (nothing can have run).
            let mut expiry_long = expiry;
            expiry_long.grace_seconds = 3600;
            let r = sweep_expiring(
                &store,
                &opts,
                1.0,
                &expiry_long,
                t0.saturating_add_millis(20 * MIN),
                &mut seen,
            )
            .unwrap();
            assert_eq!(
                (r.value.swept.len(), r.value.expired.len(), r.commit),
                (0, 0, None)
            );
            // 60 s + 30 s: exactly at the window is not past it.
            let r = sweep_expiring(
                &store,
                &opts,
                15.0,
                &expiry,
                t0.saturating_add_millis(90_000),
                &mut seen,
            )
            .unwrap();
            assert!(r.value.expired.is_empty(), "flat {flat}");
            // The operator decides one in time.
            let mut ops: Vec<batch::Op<'_, State>> = vec![Box::new(|ov: &mut Overlay<'_>, now| {
                batch::approve(
                    ov,
                    "act_decided",
                    ApprovalDecision::Approve,
                    "ops",
                    Some("ok, token=abc123secretvalue"),
                    &mut Security::default(),
                    now,
                )
            })];
            let (res, _) = batch::land(&store, &opts, &mut ops, &mut || {
                t0.saturating_add_millis(80_000)
            });
            res.into_iter().next().unwrap().unwrap();
            let r = sweep_expiring(
                &store,
                &opts,
                15.0,
                &expiry,
                t0.saturating_add_millis(90_001),
                &mut seen,
            )
            .unwrap();
            let names: Vec<&str> = r.value.expired.iter().map(ActionId::as_str).collect();
            assert_eq!(names, ["act_short"], "flat {flat}");
            assert!(r.commit.is_some());
            let st = show(&store, "refs/heads/main", "act_short").unwrap();
            assert_eq!(st.lifecycle(), Lifecycle::Expired);
            assert_eq!(st.outcome_status(), OutcomeStatus::Pending);
            let p = st.approval.as_ref().unwrap();
            assert_eq!(
                p.error_message(),
                Some(crate::finality::approval::APPROVAL_EXPIRED_ERROR)
            );
            // The decision kept its reasoning, redacted.
            let d = show(&store, "refs/heads/main", "act_decided").unwrap();
            let reasoning = d.approval.unwrap().reasoning.unwrap();
            assert!(!reasoning.contains("abc123secretvalue"), "{reasoning}");
            // The default window (120 s + 30 s).
            let r = sweep_expiring(
                &store,
                &opts,
                15.0,
                &expiry,
                t0.saturating_add_millis(150_001),
                &mut seen,
            )
            .unwrap();
            let names: Vec<&str> = r.value.expired.iter().map(ActionId::as_str).collect();
            assert_eq!(names, ["act_default"], "flat {flat}");
            // A decision after the expiry is refused with the lifecycle `expired`.
            let mut ops: Vec<batch::Op<'_, State>> = vec![Box::new(|ov: &mut Overlay<'_>, now| {
                batch::approve(
                    ov,
                    "act_short",
                    ApprovalDecision::Deny,
                    "ops",
                    None,
                    &mut Security::default(),
                    now,
                )
            })];
            let (res, _) = batch::land(&store, &opts, &mut ops, &mut || {
                t0.saturating_add_millis(200_000)
            });
            assert!(matches!(
                res.into_iter().next().unwrap(),
                Err(batch::BatchError::Refused(Error::TerminalState {
                    lifecycle: Lifecycle::Expired,
                    ..
                }))
            ));
            let snap = store
                .snapshot(store.tip("refs/heads/main").unwrap())
                .unwrap();
            assert_eq!(verify(&snap).unwrap(), Vec::new(), "flat {flat}");
        }
    }
}
