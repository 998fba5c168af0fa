//! The current state of an action, read from its record files at one snapshot, and the outcome
//! view the CLI and `GET …/outcome` show (with `elapsed_ms` and any clock skew between the
//! machines that wrote the steps).

use std::fmt;

use super::approval::{self, Approval};
use super::containment::{Containment, parse_containment};
use super::error::Error;
use super::ids::ActionId;
use super::paths::RecordKind;
use super::records::RecordError;
use super::records::{
    Action, Claim, MAX_RECORD_BYTES, Outcome, format_time, opt_str, parse_action, parse_claim,
    parse_outcome,
};
use super::status::{Lifecycle, OutcomeStatus};
use crate::canonical::Value;
use crate::identity::Digest;
use crate::store::remote::Target;
use crate::store::{self, Snapshot, Store};
use crate::time::Timestamp;

/// The state of one action: its binding and, when present, its claim and outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// `action.json`.
    pub action: Action,
    /// `sha256` of the `action.json` bytes.
    pub action_sha256: Digest,
    /// `claim.json`, if claimed.
    pub claim: Option<Claim>,
    /// `outcome.json`, if the outcome is no longer pending.
    pub outcome: Option<Outcome>,
    /// `approval.json`, if an operator decided.
    pub approval: Option<Approval>,
    /// `containment.json`, if an operator promoted or discarded the contained action.
    pub containment: Option<Containment>,
}

impl State {
    /// The current lifecycle: the outcome's when there is one, else the approval's, else the
    /// initial one.
    pub fn lifecycle(&self) -> Lifecycle {
        match (&self.outcome, &self.approval) {
            (Some(o), _) => o.lifecycle,
            (None, Some(a)) => a.lifecycle,
            (None, None) => self.action.lifecycle,
        }
    }

    /// The current outcome status (`pending` without `outcome.json`).
    pub fn outcome_status(&self) -> OutcomeStatus {
        self.outcome
            .as_ref()
            .map_or(OutcomeStatus::Pending, |o| o.status)
    }

    /// The outcome as `GET …/outcome` returns it, `elapsed_ms` measured from
    /// `created_at` to `outcome_at`, or to `now` while pending, never below 0; where the
    /// clocks disagreed, [`OutcomeView::clock_skew`] says so ([`Timing`]).
    pub fn view(&self, now: Timestamp) -> OutcomeView {
        let o = self.outcome.as_ref();
        let timing = Timing::new(
            self.action.created_at,
            self.claim.as_ref().map(|c| c.claimed_at),
            o.map_or(Stamp::Now(now), |o| Stamp::Outcome(o.outcome_at)),
        );
        OutcomeView {
            action_id: self.action.action_id.clone(),
            status: self.outcome_status(),
            outcome_at: o.map(|o| o.outcome_at),
            summary: o.and_then(|o| o.summary.clone()),
            error_message: o.and_then(|o| o.error_message.clone()),
            progress: o.and_then(|o| o.progress.clone()),
            elapsed_ms: timing.elapsed_ms,
            clock_skew: timing.skew,
        }
    }
}

/// The end of an action's elapsed time: its outcome's time, or the reader's clock while the
/// outcome is pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// `outcome_at`.
    Outcome(Timestamp),
    /// The reader's clock.
    Now(Timestamp),
}

/// Clocks that disagreed: a step of an action carries a time earlier than that of a step
/// written before it (creation, claim, outcome are written in that order, possibly by
/// different machines), so durations between them are not what they say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockSkew {
    /// The step whose time is too early: `claimed_at`, `outcome_at` or `now` (the reader's
    /// clock while the outcome is pending).
    pub time: &'static str,
    /// The step written before it that it precedes: `created_at` or `claimed_at`.
    pub precedes: &'static str,
    /// By how much, in milliseconds (always > 0).
    pub ms: i64,
}

impl ClockSkew {
    /// `{"ms":…,"precedes":…,"time":…}`.
    pub fn to_value(&self) -> Value {
        Value::object([
            ("time", Value::str(self.time)),
            ("precedes", Value::str(self.precedes)),
            ("ms", Value::from(self.ms)),
        ])
    }
}

impl fmt::Display for ClockSkew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} ms before {}: the clocks that wrote them disagree",
            self.time, self.ms, self.precedes
        )
    }
}

/// `elapsed_ms` of an action and the clock skew its times show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// From `created_at` to the end, clamped to 0 (a negative duration is a skew, not a time).
    pub elapsed_ms: i64,
    /// The largest disagreement between the steps' times, if any.
    pub skew: Option<ClockSkew>,
}

impl Timing {
    /// The timing of an action created at `created_at`, claimed at `claimed_at` (if it was) and
    /// ending at `end`.
    pub fn new(created_at: Timestamp, claimed_at: Option<Timestamp>, end: Stamp) -> Timing {
        let (end_name, end_at) = match end {
            Stamp::Outcome(t) => ("outcome_at", t),
            Stamp::Now(t) => ("now", t),
        };
        let mut steps = vec![("created_at", created_at)];
        steps.extend(claimed_at.map(|t| ("claimed_at", t)));
        steps.push((end_name, end_at));
        let mut skew: Option<ClockSkew> = None;
        for (i, &(precedes, earlier)) in steps.iter().enumerate() {
            for &(time, later) in &steps[i + 1..] {
                let ms = earlier.millis_since(later);
                if ms > 0 && skew.as_ref().is_none_or(|s| ms > s.ms) {
                    skew = Some(ClockSkew { time, precedes, ms });
                }
            }
        }
        Timing {
            elapsed_ms: end_at.millis_since(created_at).max(0),
            skew,
        }
    }
}

/// The outcome of an action as the contract's `GET …/outcome` shapes it.
#[derive(Clone, Debug, PartialEq)]
pub struct OutcomeView {
    /// The action.
    pub action_id: ActionId,
    /// The current outcome status.
    pub status: OutcomeStatus,
    /// `None` while pending.
    pub outcome_at: Option<Timestamp>,
    /// As stored.
    pub summary: Option<String>,
    /// As stored.
    pub error_message: Option<String>,
    /// As stored.
    pub progress: Option<Value>,
    /// Milliseconds from creation to the outcome (or to now while pending); never negative.
    pub elapsed_ms: i64,
    /// Set when the clocks of the steps disagreed (then `elapsed_ms` may have been clamped).
    pub clock_skew: Option<ClockSkew>,
}

impl OutcomeView {
    /// `{action_id,status,outcome_at,summary,error_message,progress,elapsed_ms}`, and
    /// `clock_skew` (`{"ms","precedes","time"}`) only when the clocks disagreed.
    pub fn to_value(&self) -> Value {
        let mut v = Value::object([
            ("action_id", Value::str(self.action_id.as_str())),
            ("status", Value::str(self.status.as_str())),
            (
                "outcome_at",
                self.outcome_at
                    .map_or(Value::Null, |t| Value::str(format_time(t))),
            ),
            ("summary", opt_str(&self.summary)),
            ("error_message", opt_str(&self.error_message)),
            ("progress", self.progress.clone().unwrap_or(Value::Null)),
            ("elapsed_ms", Value::from(self.elapsed_ms)),
        ]);
        if let (Some(skew), Value::Object(m)) = (&self.clock_skew, &mut v) {
            m.insert("clock_skew".into(), skew.to_value());
        }
        v
    }
}

/// Reads the state of `id` from a snapshot, in the snapshot's layout
/// ([`detect`](super::layout::detect)); `None` when there is no `action.json`.
///
/// # Errors
/// [`Error::Layout`] for an unknown layout record, [`Error::Corrupt`] for an invalid record, [`Error::Store`] when the repository cannot be read.
pub fn read_state(snap: &Snapshot<'_>, id: &ActionId) -> Result<Option<State>, Error> {
    let layout = super::layout::detect(snap)?.layout;
    refuse_other_copy(snap, layout, id)?;
    read_state_in(snap, layout, id)
}

/// Refuses to read action `id` when the repository holds an entry for it at another
/// layout's place too (a second copy, which `verify` reports as `finality-layout-mixed`):
/// which copy is the action cannot be told, so neither is picked.
///
/// # Errors
/// [`Error::Corrupt`] naming the other copy's path and this layout's, [`Error::Store`].
pub(super) fn refuse_other_copy(
    snap: &Snapshot<'_>,
    layout: super::Layout,
    id: &ActionId,
) -> Result<(), Error> {
    refuse_copy_elsewhere(snap, layout, ("action", id.as_str()), |l| l.action_dir(id))
}

/// [`refuse_other_copy`] for the guard decision `id`.
///
/// # Errors
/// As [`refuse_other_copy`].
pub(super) fn refuse_other_decision_copy(
    snap: &Snapshot<'_>,
    layout: super::Layout,
    id: &super::decision::DecisionId,
) -> Result<(), Error> {
    refuse_copy_elsewhere(snap, layout, ("decision", id.as_str()), |l| {
        l.decision_path(id)
    })
}

/// Refuses the record `(noun, id)` when an entry sits at its `place` in a layout other than
/// `layout`: with or without one at this layout's place, the error names the stray path and
/// says what to do.
fn refuse_copy_elsewhere(
    snap: &Snapshot<'_>,
    layout: super::Layout,
    (noun, id): (&str, &str),
    place: impl Fn(super::Layout) -> String,
) -> Result<(), Error> {
    for other_layout in layout.others() {
        let other = place(other_layout);
        if snap.mode(&other)?.is_none() {
            continue;
        }
        let own = place(layout);
        let reason = if snap.mode(&own)?.is_some() {
            format!(
                "a second copy of {noun} {id} at the {} layout's place, beside {own} of the {} \
                 layout this repository uses: neither is read (`action-ledger verify` reports \
                 finality-layout-mixed); remove the copy that is not the {noun}'s",
                other_layout.name(),
                layout.name()
            )
        } else {
            format!(
                "{noun} {id} at the {} layout's place, not at {own} where the {} layout this \
                 repository uses puts it: it is not read (`action-ledger verify` reports \
                 finality-layout-mixed); move it there",
                other_layout.name(),
                layout.name()
            )
        };
        return Err(Error::Corrupt {
            reason,
            path: other,
        });
    }
    Ok(())
}

/// [`read_state`] in a layout the caller has read already.
///
/// # Errors
/// As [`read_state`].
pub fn read_state_in(
    snap: &Snapshot<'_>,
    layout: super::Layout,
    id: &ActionId,
) -> Result<Option<State>, Error> {
    state_from(id, |kind| {
        let path = layout.record_path(id, kind);
        Ok(read_record(snap, &path)?.map(|b| (path, b)))
    })
}

/// The record file at `path` on `snap`; `None` when absent.
///
/// # Errors
/// [`Error::Corrupt`] for an entry that is not a file of at most [`MAX_RECORD_BYTES`],
/// [`Error::Store`] when the repository cannot be read.
pub(super) fn read_record(snap: &Snapshot<'_>, path: &str) -> Result<Option<Vec<u8>>, Error> {
    match snap.read(path, MAX_RECORD_BYTES) {
        Ok(bytes) => Ok(bytes),
        Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => Err(Error::Corrupt {
            path: path.to_owned(),
            reason: format!("not a file of at most {MAX_RECORD_BYTES} bytes"),
        }),
        Err(e) => Err(e.into()),
    }
}

/// Parses the records of action `id` into its state; `read` yields a record's path and bytes,
/// `None` when absent. Shared by [`read_state`] and the batch overlay, which differ only in
/// where the bytes come from.
///
/// # Errors
/// Those of `read`, and [`Error::Corrupt`] for an invalid record.
pub(super) fn state_from(
    id: &ActionId,
    read: impl Fn(RecordKind) -> Result<Option<(String, Vec<u8>)>, Error>,
) -> Result<Option<State>, Error> {
    let corrupt = |path: String| {
        move |e: RecordError| Error::Corrupt {
            path,
            reason: e.to_string(),
        }
    };
    let Some((path, bytes)) = read(RecordKind::Action)? else {
        return Ok(None);
    };
    let action = parse_action(&bytes, id).map_err(corrupt(path))?;
    let claim = match read(RecordKind::Claim)? {
        Some((path, b)) => Some(parse_claim(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    let outcome = match read(RecordKind::Outcome)? {
        Some((path, b)) => Some(parse_outcome(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    let approval = match read(RecordKind::Approval)? {
        Some((path, b)) => Some(approval::parse_approval(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    let containment = match read(RecordKind::Containment)? {
        Some((path, b)) => Some(parse_containment(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    Ok(Some(State {
        action,
        action_sha256: Digest::of(&bytes),
        claim,
        outcome,
        approval,
        containment,
    }))
}

/// The state of an action at the tip of `ref_name` (`action show`).
///
/// # Errors
/// [`Error::NotFound`], [`Error::Corrupt`], [`Error::Store`].
pub fn show(store: &Store, ref_name: &str, action_id: &str) -> Result<State, Error> {
    show_at(store, &Target::Local, ref_name, action_id)
}

/// The state of an action at the tip of `target` (`action show --remote`): the local ref
/// `ref_name`, or the remote's ref, whose objects are fetched into `store` first.
///
/// # Errors
/// As [`show`], and [`Error::Remote`] when the remote cannot be read.
pub fn show_at(
    store: &Store,
    target: &Target,
    ref_name: &str,
    action_id: &str,
) -> Result<State, Error> {
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let tip = target.tip(store, ref_name)?;
    let snap = store.snapshot(tip)?;
    read_state(&snap, &id)?.ok_or_else(not_found)
}

/// The outcome of an action (`GET …/outcome`) with `elapsed_ms` at `now`.
///
/// # Errors
/// As [`show`].
pub fn get_outcome(
    store: &Store,
    ref_name: &str,
    action_id: &str,
    now: Timestamp,
) -> Result<OutcomeView, Error> {
    show(store, ref_name, action_id).map(|s| s.view(now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical;
    use crate::finality::test_support::*;

    /// `elapsed_ms` is never negative, and every disagreement between the steps' clocks is
    /// reported with the largest skew, whatever the order of the steps' times.
    #[test]
    fn timing_clamps_and_reports_clock_skew() {
        let t = |s: &str| at(&format!("2026-03-01T{s}.000Z"));
        let skew = |time, precedes, ms| Some(ClockSkew { time, precedes, ms });
        let cases = [
            // In order, or equal: no skew.
            (
                t("12:00:00"),
                Some(t("12:00:01")),
                Stamp::Outcome(t("12:00:02")),
                2_000,
                None,
            ),
            (
                t("12:00:00"),
                Some(t("12:00:00")),
                Stamp::Outcome(t("12:00:00")),
                0,
                None,
            ),
            (t("12:00:00"), None, Stamp::Now(t("12:01:00")), 60_000, None),
            // The outcome's clock behind the creator's (created and claimed at 12:10).
            (
                t("12:10:00"),
                Some(t("12:10:00")),
                Stamp::Outcome(t("12:00:30")),
                0,
                skew("outcome_at", "created_at", 570_000),
            ),
            (
                t("12:10:00"),
                None,
                Stamp::Outcome(t("12:00:05")),
                0,
                skew("outcome_at", "created_at", 595_000),
            ),
            // The claimer's clock behind the creator's.
            (
                t("12:10:00"),
                Some(t("12:05:00")),
                Stamp::Outcome(t("12:20:00")),
                600_000,
                skew("claimed_at", "created_at", 300_000),
            ),
            // The outcome after creation but before the claim.
            (
                t("12:00:00"),
                Some(t("12:10:00")),
                Stamp::Outcome(t("12:05:00")),
                300_000,
                skew("outcome_at", "claimed_at", 300_000),
            ),
            // Both wrong: the largest disagreement is reported.
            (
                t("12:10:00"),
                Some(t("12:00:00")),
                Stamp::Outcome(t("12:05:00")),
                0,
                skew("claimed_at", "created_at", 600_000),
            ),
            (
                t("12:10:00"),
                Some(t("12:09:00")),
                Stamp::Outcome(t("12:00:00")),
                0,
                skew("outcome_at", "created_at", 600_000),
            ),
            // A reader whose clock is behind while the outcome is pending.
            (
                t("12:10:00"),
                Some(t("12:10:00")),
                Stamp::Now(t("12:09:59")),
                0,
                skew("now", "created_at", 1_000),
            ),
        ];
        for (created, claimed, end, elapsed, want) in cases {
            let got = Timing::new(created, claimed, end);
            assert_eq!(
                (got.elapsed_ms, got.skew),
                (elapsed, want),
                "{claimed:?} {end:?}"
            );
        }
        let v = OutcomeView {
            action_id: ActionId::parse(ACTION).unwrap(),
            status: OutcomeStatus::Completed,
            outcome_at: Some(t("12:00:30")),
            summary: None,
            error_message: None,
            progress: None,
            elapsed_ms: 0,
            clock_skew: skew("outcome_at", "created_at", 570_000),
        };
        assert_eq!(
            canonical::to_canonical(&v.to_value()).unwrap(),
            r#"{"action_id":"act_case","clock_skew":{"ms":570000,"precedes":"created_at","time":"outcome_at"},"elapsed_ms":0,"error_message":null,"outcome_at":"2026-03-01T12:00:30.000Z","progress":null,"status":"completed","summary":null}"#
        );
        let v = OutcomeView {
            clock_skew: None,
            ..v
        };
        assert_eq!(v.to_value().get("clock_skew"), None);
        assert_eq!(
            skew("outcome_at", "created_at", 570_000)
                .unwrap()
                .to_string(),
            "outcome_at is 570000 ms before created_at: the clocks that wrote them disagree"
        );
    }
}
