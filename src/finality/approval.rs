//! `approval.json`: an operator's one decision on an action that was born `pending_approval`
//! (a `require_approval` verdict).
//!
//! The reference keeps `approved_by`, `approved_at` and `approval_grant_used_at` as mutable
//! columns of the action row. Here the decision is one more create-only file of the action
//! directory, and the grant is consumed by the claim itself: `claim.json` exists at most once,
//! so an approval authorises at most one attempt. An approval moves the lifecycle from
//! `pending_approval` to `running`; a denial to `failed` (`cancelled` in records written before
//! denials followed the reference, still read as they are), with the operator's reasoning as
//! its message. A claim on an approved action must come within [`GRANT_WINDOW_MS`] of the
//! approval (the reference's 15 minutes).
//!
//! # Expiry
//!
//! An approval nobody gave in time is worthless: the requesting client stopped waiting. The
//! creator may say how long it waits (`approval_wait_seconds`, kept on `action.json`), else the
//! sweeper's default applies ([`ApprovalExpiry`], the reference's 300 s); after that wait plus a
//! retry grace (the reference's 15 minutes, [`APPROVAL_RETRY_GRACE_SECONDS`]) the sweep writes
//! the action's `approval.json` itself, decision `expire`, lifecycle `expired`
//! ([`APPROVAL_EXPIRED_ERROR`]). Expiry and an operator's decision are the same create-only file,
//! so an approval racing the expiry has exactly one winner. The wait is timed as the sweep times
//! outcomes: on the sweeper's clock, from when it first saw the action ([`mod@super::sweep`]).

use std::fmt;

use std::ops::RangeInclusive;

use super::ids::{ActionId, MAX_ID_UNITS};
use super::records::{Action, RecordError};
use super::records::{Fields, SCHEMA_VERSION, format_time, record_bytes, record_value};
use super::status::Lifecycle;
use crate::canonical::Value;
use crate::time::Timestamp;

/// `schema` of `approval.json`.
pub const APPROVAL_SCHEMA: &str = "action-ledger.finality-approval";

/// How long an approval authorises a claim: 15 minutes, in milliseconds.
pub const GRANT_WINDOW_MS: i64 = 15 * 60_000;

/// The wait a creator may ask for, in seconds (the reference's bounds).
pub const APPROVAL_WAIT_SECONDS: RangeInclusive<u32> = 5..=86_400;
/// The wait when the creator names none (the reference's, the SDK's `wait_for_approval`).
pub const DEFAULT_APPROVAL_WAIT_SECONDS: u32 = 300;
/// Added to every wait before an approval expires: an agent retrying after its wait ended
/// still finds the decision (the reference's 15 minutes).
pub const APPROVAL_RETRY_GRACE_SECONDS: u32 = 15 * 60;
/// The message of an expired approval (the reference's).
pub const APPROVAL_EXPIRED_ERROR: &str =
    "Approval expired: the requesting client stopped waiting before a decision was made";
/// The message of a denial without reasoning (the reference's).
pub const DENIED_ERROR: &str = "Denied by human operator";
/// `decided_by` of an expiry.
pub const EXPIRY_DECIDER: &str = "system:expiry";

/// The `approval_wait_seconds` of a creation request: rounded and clamped to
/// [`APPROVAL_WAIT_SECONDS`]; `None` (the default applies) when it is not a finite number.
pub fn approval_wait_seconds(raw: f64) -> Option<u32> {
    raw.is_finite().then(|| {
        raw.round().clamp(
            f64::from(*APPROVAL_WAIT_SECONDS.start()),
            f64::from(*APPROVAL_WAIT_SECONDS.end()),
        ) as u32
    })
}

/// When the sweep expires approvals nobody gave: the wait of an action that names none, and
/// the grace added to every wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApprovalExpiry {
    /// Seconds an action that names no wait waits ([`DEFAULT_APPROVAL_WAIT_SECONDS`]).
    pub default_wait_seconds: u32,
    /// Seconds added to every wait ([`APPROVAL_RETRY_GRACE_SECONDS`]).
    pub grace_seconds: u32,
}

impl Default for ApprovalExpiry {
    fn default() -> ApprovalExpiry {
        ApprovalExpiry {
            default_wait_seconds: DEFAULT_APPROVAL_WAIT_SECONDS,
            grace_seconds: APPROVAL_RETRY_GRACE_SECONDS,
        }
    }
}

impl ApprovalExpiry {
    /// How long `action` may wait for an operator, in milliseconds: its wait (or the default)
    /// plus the grace.
    pub fn window_ms(&self, action: &Action) -> i64 {
        let wait = action
            .approval_wait_seconds
            .unwrap_or(self.default_wait_seconds);
        (i64::from(wait) + i64::from(self.grace_seconds)) * 1000
    }

    /// The shortest window any action can have, in milliseconds: the sweep reads the records of
    /// an action waiting this long, to see whether its own window has passed.
    pub fn shortest_window_ms(&self) -> i64 {
        let wait = self
            .default_wait_seconds
            .min(*APPROVAL_WAIT_SECONDS.start());
        (i64::from(wait) + i64::from(self.grace_seconds)) * 1000
    }
}

string_enum! {
    /// The decision `approval.json` records.
    ApprovalDecision {
        /// The action may be claimed (once, within [`GRANT_WINDOW_MS`]).
        Approve = "approve",
        /// The action failed; it can never be claimed.
        Deny = "deny",
        /// Nobody decided in time (written by the sweep only); it can never be claimed.
        Expire = "expire",
    }
}

impl ApprovalDecision {
    /// The lifecycle the decision moves a `pending_approval` action to (a denial's in records
    /// written now; older denials recorded `cancelled`).
    pub fn lifecycle(self) -> Lifecycle {
        match self {
            ApprovalDecision::Approve => Lifecycle::Running,
            ApprovalDecision::Deny => Lifecycle::Failed,
            ApprovalDecision::Expire => Lifecycle::Expired,
        }
    }

    /// Whether `lifecycle` is one a record of this decision may hold.
    fn accepts(self, lifecycle: Lifecycle) -> bool {
        lifecycle == self.lifecycle()
            || (self == ApprovalDecision::Deny && lifecycle == Lifecycle::Cancelled)
    }
}

/// `approval.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    /// The action.
    pub action_id: ActionId,
    /// Approve or deny.
    pub decision: ApprovalDecision,
    /// The operator principal (machine text, at most [`MAX_ID_UNITS`]).
    pub decided_by: String,
    /// Decision time.
    pub decided_at: Timestamp,
    /// The lifecycle it moved the action to ([`ApprovalDecision::lifecycle`]; `cancelled` for
    /// an older denial).
    pub lifecycle: Lifecycle,
    /// The operator's reasoning, redacted and truncated ([`clean_text`](super::clean_text));
    /// the key is written only when set.
    pub reasoning: Option<String>,
}

impl Approval {
    /// Whether this approval still authorises a claim at `now`: approved, and no more than
    /// [`GRANT_WINDOW_MS`] ago (a clock behind the approval counts as within the window).
    pub fn grants_at(&self, now: Timestamp) -> bool {
        self.decision == ApprovalDecision::Approve
            && now.millis_since(self.decided_at) <= GRANT_WINDOW_MS
    }

    /// The action's `error_message` once this decision closed it: the reasoning of a denial
    /// (or [`DENIED_ERROR`]), [`APPROVAL_EXPIRED_ERROR`] for an expiry, none for an approval.
    pub fn error_message(&self) -> Option<&str> {
        match self.decision {
            ApprovalDecision::Approve => None,
            ApprovalDecision::Deny => Some(self.reasoning.as_deref().unwrap_or(DENIED_ERROR)),
            ApprovalDecision::Expire => Some(APPROVAL_EXPIRED_ERROR),
        }
    }

    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        let mut value = Value::object([
            ("schema", Value::str(APPROVAL_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("decision", Value::str(self.decision.as_str())),
            ("decided_by", Value::str(self.decided_by.as_str())),
            ("decided_at", Value::str(format_time(self.decided_at))),
            ("lifecycle", Value::str(self.lifecycle.as_str())),
        ]);
        if let (Some(r), Value::Object(map)) = (&self.reasoning, &mut value) {
            map.insert("reasoning".into(), Value::str(r.as_str()));
        }
        value
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

/// Parses `approval.json` bytes; `id` is the directory's action id.
///
/// # Errors
/// The first rule broken ([`RecordError`]: not canonical, wrong fields, another action, a
/// lifecycle that is not the decision's, an operator that is not machine text).
pub fn parse_approval(bytes: &[u8], id: &ActionId) -> Result<Approval, RecordError> {
    let value = record_value(bytes)?;
    let f = Fields::with_optional(
        &value,
        APPROVAL_SCHEMA,
        &[
            "action_id",
            "decided_at",
            "decided_by",
            "decision",
            "lifecycle",
        ],
        &["reasoning"],
    )?;
    let action_id = f.own_id("action_id", id, "directory's")?;
    let decision = f.parsed("decision", ApprovalDecision::parse)?;
    let lifecycle = f.parsed("lifecycle", Lifecycle::parse)?;
    if !decision.accepts(lifecycle) {
        return Err(RecordError::ApprovalLifecycle {
            lifecycle,
            decision: decision.as_str(),
            expected: decision.lifecycle(),
        });
    }
    let decided_by = f.id("decided_by")?;
    debug_assert!(decided_by.len() <= MAX_ID_UNITS);
    let reasoning = match value.as_object().and_then(|m| m.get("reasoning")) {
        None => None,
        Some(_) => Some(
            f.opt_text("reasoning")?
                .ok_or(RecordError::Null { field: "reasoning" })?
                .to_owned(),
        ),
    };
    Ok(Approval {
        action_id,
        decision,
        decided_by,
        decided_at: f.time("decided_at")?,
        lifecycle,
        reasoning,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(decision: ApprovalDecision) -> Approval {
        Approval {
            action_id: ActionId::parse("act_a").unwrap(),
            decision,
            decided_by: "ops-lead".into(),
            decided_at: Timestamp::from_millis(1_772_366_400_000),
            lifecycle: decision.lifecycle(),
            reasoning: None,
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let id = ActionId::parse("act_a").unwrap();
        for d in [
            ApprovalDecision::Approve,
            ApprovalDecision::Deny,
            ApprovalDecision::Expire,
        ] {
            let a = approval(d);
            assert_eq!(parse_approval(&a.to_bytes(), &id).unwrap(), a);
            let reasoned = Approval {
                reasoning: Some("too risky on a Friday".into()),
                ..a
            };
            assert_eq!(parse_approval(&reasoned.to_bytes(), &id).unwrap(), reasoned);
        }
        // A denial written before denials failed the action keeps reading as it is.
        let older = Approval {
            lifecycle: Lifecycle::Cancelled,
            ..approval(ApprovalDecision::Deny)
        };
        assert_eq!(parse_approval(&older.to_bytes(), &id).unwrap(), older);
        let forged = Approval {
            lifecycle: Lifecycle::Cancelled,
            ..approval(ApprovalDecision::Expire)
        };
        assert!(parse_approval(&forged.to_bytes(), &id).is_err());
        let other = ActionId::parse("act_b").unwrap();
        let bytes = approval(ApprovalDecision::Approve).to_bytes();
        assert!(
            parse_approval(&bytes, &other)
                .unwrap_err()
                .to_string()
                .contains("directory")
        );
        // A lifecycle the decision does not lead to, and a non-canonical file.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let forged = text.replace("\"lifecycle\":\"running\"", "\"lifecycle\":\"completed\"");
        assert!(
            parse_approval(forged.as_bytes(), &id)
                .unwrap_err()
                .to_string()
                .contains("lifecycle")
        );
        let spaced = text.replace(",\"decision\"", ", \"decision\"");
        assert!(parse_approval(spaced.as_bytes(), &id).is_err());
        let bad_operator = text.replace("ops-lead", "ops lead");
        assert!(parse_approval(bad_operator.as_bytes(), &id).is_err());
    }

    #[test]
    fn grant_window() {
        let a = approval(ApprovalDecision::Approve);
        assert!(a.grants_at(a.decided_at));
        assert!(a.grants_at(a.decided_at.saturating_add_millis(GRANT_WINDOW_MS)));
        assert!(!a.grants_at(a.decided_at.saturating_add_millis(GRANT_WINDOW_MS + 1)));
        assert!(!approval(ApprovalDecision::Deny).grants_at(a.decided_at));
    }
}
