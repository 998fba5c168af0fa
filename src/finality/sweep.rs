//! The stale-outcome sweep: an action whose outcome is still pending long after its creation
//! gets outcome `lost_confirmation`, in one commit for all of them. Its outcome file is written
//! under the same create-only rule as a report, so a report and the sweep race to exactly one
//! winner.
//!
//! What it reads depends on the layout: in `nibble` only the pending index's hours that can
//! hold an entry older than the cutoff, then those actions ([`super::pending`]), so a sweep of a
//! million closed actions reads a few small trees; in `flat`, every action directory.

use std::collections::BTreeSet;

use super::batch::{self, run};
use super::error::Error;
use super::ids::ActionId;
use super::records::Outcome;
use super::status::{Lifecycle, OutcomeStatus, Source};
use super::write::{Options, Written};
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
    /// Candidates whose outcome another writer set first, with the status that won.
    pub lost: Vec<(ActionId, OutcomeStatus)>,
    /// Action directories skipped because a record is invalid (`verify` reports them).
    pub skipped: Vec<String>,
}

/// Actions created before this instant may be swept at `now` (`minutes` as [`timeout_minutes`]
/// gives them).
pub(super) fn cutoff(minutes: u32, now: Timestamp) -> Timestamp {
    now.saturating_sub_millis(i64::from(minutes) * 60_000)
}

/// The sweep's rule: outcome pending, created before `cutoff`, in a lifecycle the sweep may
/// close (not `completed`, `failed`, `cancelled` or `blocked`).
pub(super) fn is_stale(state: &super::State, cutoff: Timestamp) -> bool {
    state.outcome.is_none()
        && state.action.created_at < cutoff
        && !state.lifecycle().is_sweep_excluded()
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
    }
}

/// The stale-outcome sweep: in ONE commit, every action whose outcome is pending, whose
/// `created_at` is more than `timeout_minutes` before `now`, and whose lifecycle is not
/// `completed`, `failed`, `cancelled` or `blocked` gets outcome `lost_confirmation`
/// ([`SWEEP_SUMMARY`]); an open lifecycle becomes `unknown` (with [`SWEEP_ERROR`]), any other
/// (`pending_approval`) is left as it is. It writes through the same create-only rule as a
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
) -> Result<Written<SweepReport>, Error> {
    // The actions this sweep staged on an earlier tip: one decided since lost its race.
    let mut seen: BTreeSet<ActionId> = BTreeSet::new();
    run(store, options, now, |ov, now| {
        let mut lost = Vec::new();
        for id in &seen {
            if let Ok(Some(state)) = ov.state(id)
                && let Some(o) = &state.outcome
            {
                lost.push((id.clone(), o.status));
            }
        }
        let mut report = batch::sweep(ov, timeout, now)?;
        seen.extend(report.swept.iter().map(|s| s.action_id.clone()));
        report.lost = lost;
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
                    sweep(&s, &opts, 15.0, later).map(|w| w.value)
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
}
