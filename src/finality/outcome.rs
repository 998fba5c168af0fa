//! Writing an action's one outcome: a caller's report ([`report_outcome`]) or the implicit
//! outcome of a legacy close ([`close`]). Both add `outcome.json` only while the outcome is
//! pending on the tip they planned on, so of any number of reports, closes and sweeps exactly
//! one outcome lands, and the losers are told the status that won.

use super::batch::{self, run};
use super::details::{self, Details};
use super::error::Error;
use super::ids::{ActionId, AttemptId};
use super::records::{MAX_PROGRESS_BYTES, MAX_TEXT_UNITS, Outcome};
use super::redaction::{Security, clean_text, clean_value, keys_confidential};
use super::state::{OutcomeView, State};
use super::status::{Lifecycle, OutcomeStatus, Source};
use super::write::{Options, Written};
use crate::canonical::{self, Value};
use crate::store::Store;
use crate::time::Timestamp;

/// A caller's outcome report (`POST …/outcome`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutcomeReport {
    /// `completed`, `partial` or `failed`.
    pub status: String,
    /// Free text; redacted and truncated to [`MAX_TEXT_UNITS`].
    pub summary: Option<String>,
    /// Required for `failed`; redacted and truncated to [`MAX_TEXT_UNITS`].
    pub error_message: Option<String>,
    /// Required (an object) for `partial`; at most [`MAX_PROGRESS_BYTES`] of JSON.
    pub progress: Option<Value>,
    /// The claiming attempt, when the reporter holds it; checked against `claim.json`.
    pub attempt_id: Option<String>,
}

/// What a legacy close sends beyond its status (DashClaw's outcome fields on `PATCH
/// /api/actions/:id`), all kept in the one `outcome.json` of the close.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CloseReport {
    /// `output_summary`; redacted and truncated to [`MAX_TEXT_UNITS`].
    pub summary: Option<String>,
    /// `error_message`; redacted and truncated to [`MAX_TEXT_UNITS`].
    pub error_message: Option<String>,
    /// `timestamp_end`, the closer's own end time; kept beside the server's `outcome_at`.
    pub timestamp_end: Option<Timestamp>,
    /// The report fields ([`REPORT_FIELDS`](super::details::REPORT_FIELDS): tokens, cost,
    /// model, duration, side effects, artifacts), as read by
    /// [`Details::report_from_request`]; checked and redacted when the close is prepared.
    pub report: Option<Details>,
}

impl CloseReport {
    /// A close that sends only a summary (the CLI's `action close --summary`).
    pub fn summary(summary: Option<&str>) -> CloseReport {
        CloseReport {
            summary: summary.map(str::to_owned),
            ..CloseReport::default()
        }
    }
}

/// Who settles an action (reports its outcome or closes it). Only the action's own principal,
/// the one that created it and so the only one that can claim it, or an operator may: another
/// principal is refused as for an unknown id ([`Error::NotFound`]), so the refusal does not
/// reveal whether the action exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settler {
    /// An authenticated principal (a key of `serve`, `--principal` of the CLI): it settles only
    /// the actions it created.
    Principal(String),
    /// An operator (an operator key of `serve`, `--operator` of the CLI): it settles any action.
    Operator,
}

impl Settler {
    /// Whether this settler may report the outcome of, or close, `action`.
    pub fn may_settle(&self, action: &super::Action) -> bool {
        match self {
            Settler::Operator => true,
            // Trimmed as a claim's principal is, so whoever could claim may settle.
            Settler::Principal(p) => crate::privacy::js_trim(p) == action.created_by,
        }
    }
}

/// What [`report_outcome`] and [`close`] landed.
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    /// The stored record.
    pub outcome: Outcome,
    /// The outcome as `GET` shows it.
    pub view: OutcomeView,
    /// What redaction found.
    pub security: Security,
}

fn non_empty(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.trim().is_empty())
}

/// A report checked and cleaned for storage ([`prepare_report`]).
pub(super) struct PreparedReport {
    pub(super) status: OutcomeStatus,
    pub(super) summary: Option<String>,
    pub(super) error_message: Option<String>,
    pub(super) progress: Option<Value>,
    pub(super) attempt_id: Option<AttemptId>,
    pub(super) security: Security,
}

impl PreparedReport {
    /// The outcome this report records on `state` (the action `id`) at `now`, with the rules
    /// both the direct report and the server's group commit apply.
    ///
    /// # Errors
    /// [`Error::OutcomeAlreadySet`], [`Error::LifecycleConflict`], [`Error::AttemptMismatch`].
    pub(super) fn outcome_on(
        &self,
        state: &State,
        id: &ActionId,
        now: Timestamp,
    ) -> Result<Outcome, Error> {
        if let Some(o) = &state.outcome {
            return Err(Error::OutcomeAlreadySet {
                action_id: id.clone(),
                current_status: o.status,
            });
        }
        let lifecycle = state.lifecycle();
        if lifecycle.refuses_outcome() {
            return Err(Error::LifecycleConflict {
                action_id: id.clone(),
                lifecycle,
            });
        }
        if let Some(attempt) = &self.attempt_id
            && state.claim.as_ref().map(|c| &c.attempt_id) != Some(attempt)
        {
            return Err(Error::AttemptMismatch {
                action_id: id.clone(),
                attempt_id: attempt.clone(),
            });
        }
        Ok(Outcome {
            action_id: id.clone(),
            status: self.status,
            outcome_at: now,
            summary: self.summary.clone(),
            error_message: self.error_message.clone(),
            progress: self.progress.clone(),
            attempt_id: self.attempt_id.clone(),
            lifecycle: lifecycle.closed_by(self.status),
            source: Source::Outcome,
            timestamp_end: None,
            report: None,
        })
    }
}

/// The input rules of a caller's report (see [`report_outcome`]), checked before anything is
/// read, and its texts redacted and truncated.
pub(super) fn prepare_report(report: &OutcomeReport) -> Result<PreparedReport, Error> {
    let status = match OutcomeStatus::parse(&report.status) {
        Some(s @ (OutcomeStatus::Completed | OutcomeStatus::Partial | OutcomeStatus::Failed)) => s,
        _ => {
            return Err(Error::InvalidStatus {
                status: report.status.clone(),
            });
        }
    };
    let invalid = |reason: &str| Error::InvalidOutcome {
        reason: reason.to_owned(),
    };
    if status == OutcomeStatus::Failed && !non_empty(&report.error_message) {
        return Err(invalid("failed requires an error_message"));
    }
    match &report.progress {
        None if status == OutcomeStatus::Partial => {
            return Err(invalid("partial requires a progress object"));
        }
        Some(p) => check_progress(p)?,
        None => {}
    }
    let attempt_id = match &report.attempt_id {
        None => None,
        Some(a) => Some(
            AttemptId::parse(a)
                .ok_or_else(|| invalid("attempt_id must match ^[A-Za-z0-9_-]{16,128}$"))?,
        ),
    };
    let mut security = Security::default();
    let summary = report
        .summary
        .as_deref()
        .map(|s| clean_text(s, MAX_TEXT_UNITS, &mut security));
    let error_message = report
        .error_message
        .as_deref()
        .map(|s| clean_text(s, MAX_TEXT_UNITS, &mut security));
    let progress = report
        .progress
        .as_ref()
        .map(|p| clean_value(p, &mut security));
    Ok(PreparedReport {
        status,
        summary,
        error_message,
        progress,
        attempt_id,
        security,
    })
}

/// Reports the outcome of an action: one commit adding `outcome.json`,
/// landed only while the outcome is pending on the tip it was built on, closing an open
/// lifecycle by the closure table. Only the action's principal or an operator may report
/// ([`Settler`]); a report that names an attempt id must name the claim's.
///
/// # Errors
/// Input, before anything is read: [`Error::InvalidStatus`] (anything but `completed`,
/// `partial`, `failed`), [`Error::InvalidOutcome`] (`failed` without `error_message`, `partial`
/// without an object `progress`, a `progress` that is not an object, holds a lossy number,
/// nests deeper than 64 levels, holds more than 10,000 values or is over
/// [`MAX_PROGRESS_BYTES`] — each named as such, with its path where it has one — confidential
/// progress keys, a malformed attempt id). Refusals:
/// [`Error::NotFound`] (also when `by` may not settle the action, before any other refusal),
/// [`Error::OutcomeAlreadySet`] with the current status (also for the loser
/// of a race with another report or the sweep), [`Error::LifecycleConflict`] for a `blocked`,
/// `pending_approval`, `cancelled` or `failed` lifecycle, [`Error::AttemptMismatch`]. Write
/// path: [`Error::Contention`], [`Error::RefLocked`], [`Error::Store`], [`Error::Corrupt`].
pub fn report_outcome(
    store: &Store,
    options: &Options,
    action_id: &str,
    report: &OutcomeReport,
    by: &Settler,
    now: Timestamp,
) -> Result<Written<Reported>, Error> {
    // The report is refused before the tip is read.
    prepare_report(report)?;
    run(store, options, now, |ov, now| {
        batch::report(ov, action_id, report, by, now)
    })
}

/// The rules a `progress` value must keep, each refusal naming its own: a JSON object, whose
/// canonical JSON (the canonical module's rules: no lossy number, depth 64, 10,000 values) is
/// at most [`MAX_PROGRESS_BYTES`], and whose keys hold no confidential identifier.
fn check_progress(p: &Value) -> Result<(), Error> {
    let invalid = |reason: String| Err(Error::InvalidOutcome { reason });
    if !matches!(p, Value::Object(_)) {
        return invalid("progress must be a JSON object".into());
    }
    let text = match canonical::to_canonical(p) {
        Ok(text) => text,
        Err(canonical::Error::LossyNumber { path }) => {
            return invalid(format!(
                "progress {path} is a lossy number (not finite, -0, or an integer beyond \
                 ±(2^53−1)), which canonical JSON cannot write exactly: send it as a string"
            ));
        }
        Err(canonical::Error::DepthLimit { path }) => {
            return invalid(format!(
                "progress {path} is nested deeper than {} levels",
                canonical::MAX_DEPTH
            ));
        }
        Err(canonical::Error::NodeLimit { path }) => {
            return invalid(format!(
                "progress holds more than {} values (at {path})",
                canonical::MAX_NODES
            ));
        }
        Err(canonical::Error::SizeLimit { .. }) => {
            return invalid(format!(
                "progress exceeds {MAX_PROGRESS_BYTES} bytes of JSON"
            ));
        }
        Err(e) => return invalid(format!("progress is not canonical JSON: {e}")),
    };
    if text.len() > MAX_PROGRESS_BYTES {
        return invalid(format!(
            "progress exceeds {MAX_PROGRESS_BYTES} bytes of JSON ({} bytes)",
            text.len()
        ));
    }
    if keys_confidential(p) {
        return invalid("progress keys contain a confidential identifier".into());
    }
    Ok(())
}

/// A legacy close checked and cleaned for storage ([`prepare_close`]).
pub(super) struct PreparedClose {
    pub(super) lifecycle: Lifecycle,
    pub(super) outcome_status: OutcomeStatus,
    pub(super) id: ActionId,
    pub(super) summary: Option<String>,
    /// The sent `error_message`, redacted and truncated as the summary is.
    pub(super) error_message: Option<String>,
    pub(super) timestamp_end: Option<Timestamp>,
    /// The report as stored (checked, redacted); `None` when no field was sent.
    pub(super) report: Option<Details>,
    pub(super) security: Security,
}

impl PreparedClose {
    /// The legacy close's outcome on `state` at `now`, with the rules both the direct close
    /// and the server's group commit apply.
    ///
    /// # Errors
    /// [`Error::TerminalState`] with the current lifecycle unless the action is running
    /// without an outcome.
    pub(super) fn outcome_on(&self, state: &State, now: Timestamp) -> Result<Outcome, Error> {
        if state.lifecycle() != Lifecycle::Running || state.outcome.is_some() {
            return Err(Error::TerminalState {
                action_id: self.id.clone(),
                lifecycle: state.lifecycle(),
            });
        }
        Ok(Outcome {
            action_id: self.id.clone(),
            status: self.outcome_status,
            outcome_at: now,
            summary: self.summary.clone(),
            error_message: self.error_message.clone(),
            progress: None,
            attempt_id: None,
            lifecycle: self.lifecycle,
            source: Source::LegacyClose,
            timestamp_end: self.timestamp_end,
            report: self.report.clone(),
        })
    }
}

/// The commit-message line of an outcome record (a report's or a legacy close's).
pub(super) fn outcome_line(outcome: &Outcome) -> String {
    match outcome.source {
        Source::LegacyClose => format!(
            "close {} {} (outcome {})",
            outcome.action_id, outcome.lifecycle, outcome.status
        ),
        _ => format!("outcome {} {}", outcome.action_id, outcome.status),
    }
}

/// The input rules of a legacy close (see [`close`]), checked before anything is read: the
/// status, then the action id, then the report's fields; the summary and the error message
/// (kept as sent, as DashClaw's server keeps a close's `error_message`) redacted and truncated
/// to [`MAX_TEXT_UNITS`], the report's text redacted as an action's details are.
///
/// # Errors
/// [`Error::InvalidInput`] for a status that is not `completed`, `failed`, `cancelled` or
/// `blocked`, and for a report field that is not one of
/// [`REPORT_FIELDS`](details::REPORT_FIELDS) or breaks its rule; [`Error::NotFound`] for a
/// malformed action id.
pub(super) fn prepare_close(
    action_id: &str,
    status: &str,
    sent: &CloseReport,
) -> Result<PreparedClose, Error> {
    let lifecycle = Lifecycle::parse(status)
        .filter(|l| l.legacy_outcome().is_some())
        .ok_or_else(|| Error::InvalidInput {
            field: "status",
            reason: format!("{status:?} is not completed, failed, cancelled or blocked"),
        })?;
    let outcome_status = lifecycle.legacy_outcome().expect("a close status");
    let id = ActionId::parse(action_id).ok_or_else(|| Error::NotFound {
        action_id: action_id.to_owned(),
    })?;
    let mut security = Security::default();
    let clean = |s: &String, security: &mut Security| clean_text(s, MAX_TEXT_UNITS, security);
    let summary = sent.summary.as_ref().map(|s| clean(s, &mut security));
    let error_message = sent.error_message.as_ref().map(|s| clean(s, &mut security));
    let report = match sent.report.as_ref().filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => {
            if let Some(name) = r.names().find(|n| !details::is_report_field(n)) {
                return Err(Error::InvalidInput {
                    field: "report",
                    reason: format!("{name} is not a field a close reports"),
                });
            }
            let stored = r
                .stored(None, &mut security)
                .map_err(|e| Error::InvalidInput {
                    field: "report",
                    reason: e.to_string(),
                })?;
            Some(stored)
        }
    };
    Ok(PreparedClose {
        lifecycle,
        outcome_status,
        id,
        summary,
        error_message,
        timestamp_end: sent.timestamp_end,
        report,
        security,
    })
}

/// The legacy close (`PATCH /api/actions/:id` with `status`): closes a `running` action
/// to `completed`, `failed`, `cancelled` or `blocked` and, since its outcome is then still
/// pending, sets the implicit outcome (`completed` → `completed`, the others → `failed`) in the
/// same `outcome.json`, with what the closer `sent` ([`CloseReport`]). A report that landed
/// first always wins: the lifecycle is then no longer `running`. Only the action's principal
/// or an operator may close it ([`Settler`]).
///
/// # Errors
/// [`Error::InvalidInput`] for another status or a report field that breaks its rule,
/// [`Error::NotFound`] (also when `by` may not settle the action, before any other refusal), [`Error::TerminalState`] with the current
/// lifecycle when it is not `running`; the write path's errors.
pub fn close(
    store: &Store,
    options: &Options,
    action_id: &str,
    status: &str,
    sent: &CloseReport,
    by: &Settler,
    now: Timestamp,
) -> Result<Written<Reported>, Error> {
    // The close is refused before the tip is read.
    prepare_close(action_id, status, sent)?;
    run(store, options, now, |ov, now| {
        batch::close(ov, action_id, status, sent, by, now)
    })
}

/// Cancels an action that was allowed but never executed ([`batch::cancel`], as DashClaw's
/// server cancels it): `running`, no outcome, never claimed; it becomes `cancelled`, once.
///
/// # Errors
/// As [`batch::cancel`]; the write path's errors.
pub fn cancel(
    store: &Store,
    options: &Options,
    action_id: &str,
    reason: &str,
    by: &Settler,
    now: Timestamp,
) -> Result<Written<Reported>, Error> {
    run(store, options, now, |ov, now| {
        batch::cancel(ov, action_id, reason, by, now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;

    /// The reason keeps exactly [`batch::MAX_CANCEL_REASON_UNITS`] characters: one that long is
    /// stored whole, one more is cut there (the summary is then 4,000 characters, the most a
    /// record holds); a reason of only invisible characters is blank.
    #[test]
    fn a_cancel_reason_keeps_its_documented_length() {
        let max = batch::MAX_CANCEL_REASON_UNITS;
        assert_eq!(max, 3973);
        for (len, kept) in [(max - 1, max - 1), (max, max), (max + 1, max)] {
            let (_dir, store, opts, _) = repo_with_action();
            let reason = "é".repeat(len);
            let w = cancel(&store, &opts, ACTION, &reason, &Settler::Operator, at(BASE)).unwrap();
            let summary = w.value.outcome.summary.unwrap();
            let stored = summary.strip_prefix(batch::CANCEL_SUMMARY_PREFIX).unwrap();
            assert_eq!(stored.chars().count(), kept, "{len}");
            assert!(crate::privacy::utf16_len(&summary) <= MAX_TEXT_UNITS);
        }
        let (_dir, store, opts, _) = repo_with_action();
        for blank in ["\u{200B}", " \u{FEFF}\t", "\u{2060}\u{00AD}"] {
            assert!(matches!(
                cancel(&store, &opts, ACTION, blank, &Settler::Operator, at(BASE)),
                Err(Error::InvalidInput {
                    field: "reason",
                    ..
                })
            ));
        }
    }

    /// A cancel is one-shot: a second cancel, and every later claim, outcome and close, are
    /// refused; the read shows `cancelled` with the reason in the summary (issue 45).
    #[test]
    fn a_cancel_is_one_shot_and_final() {
        let (_dir, store, opts, _) = repo_with_action();
        let by = Settler::Principal("principal-a".into());
        let other = Settler::Principal("principal-b".into());
        assert!(matches!(
            cancel(&store, &opts, ACTION, "  ", &by, at(BASE)),
            Err(Error::InvalidInput {
                field: "reason",
                ..
            })
        ));
        assert!(matches!(
            cancel(&store, &opts, ACTION, "no", &other, at(BASE)),
            Err(Error::NotFound { .. })
        ));
        let written = cancel(&store, &opts, ACTION, "not needed", &by, at(BASE)).unwrap();
        assert_eq!(written.value.outcome.lifecycle, Lifecycle::Cancelled);
        assert_eq!(
            written.value.outcome.summary.as_deref(),
            Some("Deliberately not executed: not needed")
        );
        assert!(matches!(
            cancel(&store, &opts, ACTION, "again", &Settler::Operator, at(BASE)),
            Err(Error::NotCancellable {
                lifecycle: Lifecycle::Cancelled,
                claimed: false,
                ..
            })
        ));
        assert!(
            crate::finality::claim(&store, &opts, ACTION, &request(ATTEMPT), at(BASE)).is_err()
        );
        let report = OutcomeReport {
            status: "completed".into(),
            summary: None,
            error_message: None,
            progress: None,
            attempt_id: None,
        };
        assert!(matches!(
            report_outcome(&store, &opts, ACTION, &report, &by, at(BASE)),
            Err(Error::OutcomeAlreadySet { .. })
        ));
        assert!(
            close(
                &store,
                &opts,
                ACTION,
                "completed",
                &CloseReport::default(),
                &by,
                at(BASE)
            )
            .is_err()
        );
        let st = crate::finality::show(&store, "refs/heads/main", ACTION).unwrap();
        assert_eq!(st.lifecycle(), Lifecycle::Cancelled);
    }

    /// A claimed action, or one whose outcome is set, is not cancellable (issue 45).
    #[test]
    fn a_claimed_or_settled_action_is_not_cancellable() {
        let (_dir, store, opts, _) = repo_with_action();
        crate::finality::claim(&store, &opts, ACTION, &request(ATTEMPT), at(BASE)).unwrap();
        assert!(matches!(
            cancel(&store, &opts, ACTION, "late", &Settler::Operator, at(BASE)),
            Err(Error::NotCancellable {
                lifecycle: Lifecycle::Running,
                claimed: true,
                ..
            })
        ));
        let report = OutcomeReport {
            status: "completed".into(),
            summary: None,
            error_message: None,
            progress: None,
            attempt_id: None,
        };
        report_outcome(&store, &opts, ACTION, &report, &Settler::Operator, at(BASE)).unwrap();
        assert!(matches!(
            cancel(&store, &opts, ACTION, "late", &Settler::Operator, at(BASE)),
            Err(Error::NotCancellable { .. })
        ));
    }

    /// A legacy close keeps the `error_message` it is sent, redacted, in `outcome.json`, and
    /// stays one-shot: a second close with another message changes nothing (issue 45).
    #[test]
    fn a_legacy_close_keeps_its_error_message_once() {
        let (_dir, store, opts, _) = repo_with_action();
        let close_with = |message: &str| {
            batch::run(&store, &opts, at(BASE), |ov, now| {
                let sent = CloseReport {
                    error_message: Some(message.to_owned()),
                    ..CloseReport::default()
                };
                batch::close(ov, ACTION, "failed", &sent, &Settler::Operator, now)
            })
        };
        let written = close_with("kaput; ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa").unwrap();
        let kept = written.value.outcome.error_message.clone().unwrap();
        assert!(kept.starts_with("kaput"), "{kept}");
        assert!(!kept.contains("ghp_aaaa"), "{kept}");
        assert_eq!(
            written.value.security.findings, 1,
            "{:?}",
            written.value.security
        );
        assert!(matches!(
            close_with("again"),
            Err(Error::TerminalState { .. })
        ));
        let st = crate::finality::show(&store, "refs/heads/main", ACTION).unwrap();
        assert_eq!(
            st.outcome.unwrap().error_message.as_deref(),
            Some(kept.as_str())
        );
    }

    /// The library refuses a report that holds a field a close does not report, or a value
    /// that breaks its rule, before anything is read or written (issue 45).
    #[test]
    fn a_close_report_is_checked_before_anything_is_written() {
        let (_dir, store, opts, _) = repo_with_action();
        let tip = store.tip("refs/heads/main").unwrap();
        for (body, want) in [
            (
                r#"{"declared_goal":"x"}"#,
                "declared_goal is not a field a close reports",
            ),
            (r#"{"tokens_in":20000000}"#, "tokens_in must be <= 10000000"),
        ] {
            let value = crate::canonical::parse(body).unwrap();
            let mut report = Details::default();
            for (k, v) in value.as_object().unwrap() {
                report.set(k, v.clone());
            }
            let sent = CloseReport {
                report: Some(report),
                ..CloseReport::default()
            };
            let e = close_as_operator(&store, &opts, &sent).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidInput { field: "report", reason } if reason.contains(want)),
                "{body}: {e}"
            );
            assert_eq!(store.tip("refs/heads/main").unwrap(), tip, "{body}");
        }
    }

    /// Each refusal of a progress value names its own rule and, where it has one, the path.
    #[test]
    fn progress_refusals_name_their_rule() {
        let (_dir, store, opts, _) = repo_with_action();
        let tip = store.tip("refs/heads/main").unwrap();
        let parse = |t: &str| canonical::parse(t).unwrap();
        let lossy = |path: &str| {
            format!(
                "invalid outcome: progress {path} is a lossy number (not finite, -0, or an \
                 integer beyond ±(2^53−1)), which canonical JSON cannot write exactly: send it \
                 as a string"
            )
        };
        let deep = (0..70).fold(Value::Number(1.0), |v, _| Value::object([("d", v)]));
        let many = Value::object([("a", Value::Array(vec![Value::Null; 10_000]))]);
        let cases = [
            (parse(r#"{"a":1e21}"#), lossy("$.a")),
            (parse(r#"{"a":1e400}"#), lossy("$.a")),
            (parse(r#"{"a":{"b":[1,-1e400]}}"#), lossy("$.a.b[1]")),
            (parse(r#"{"step":-0}"#), lossy("$.step")),
            (parse(r#"{"n":9007199254740992}"#), lossy("$.n")),
            (
                deep,
                format!(
                    "invalid outcome: progress ${} is nested deeper than 64 levels",
                    ".d".repeat(65)
                ),
            ),
            (
                many,
                "invalid outcome: progress holds more than 10000 values (at $.a)".to_owned(),
            ),
            (
                Value::object([("log", Value::str("x".repeat(8200)))]),
                "invalid outcome: progress exceeds 8192 bytes of JSON (8210 bytes)".to_owned(),
            ),
            (
                Value::object([("log", Value::str("x".repeat(2_000_000)))]),
                "invalid outcome: progress exceeds 8192 bytes of JSON".to_owned(),
            ),
            (
                parse("[1]"),
                "invalid outcome: progress must be a JSON object".to_owned(),
            ),
        ];
        for (progress, want) in cases {
            let report = OutcomeReport {
                status: "partial".into(),
                progress: Some(progress),
                ..OutcomeReport::default()
            };
            let e = report_outcome(&store, &opts, ACTION, &report, &Settler::Operator, at(BASE))
                .unwrap_err();
            assert_eq!((e.code(), e.to_string()), ("INVALID_OUTCOME", want));
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            tip,
            "nothing written"
        );
    }
}
