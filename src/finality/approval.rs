//! `approval.json`: an operator's one decision on an action that was born `pending_approval`
//! (a `require_approval` verdict).
//!
//! The reference keeps `approved_by`, `approved_at` and `approval_grant_used_at` as mutable
//! columns of the action row. Here the decision is one more create-only file of the action
//! directory, and the grant is consumed by the claim itself: `claim.json` exists at most once,
//! so an approval authorises at most one attempt. An approval moves the lifecycle from
//! `pending_approval` to `running`; a denial to `cancelled`. A claim on an approved action must
//! come within [`GRANT_WINDOW_MS`] of the approval (the reference's 15 minutes).

use std::fmt;

use super::ids::{ActionId, MAX_ID_UNITS};
use super::records::RecordError;
use super::records::{Fields, SCHEMA_VERSION, format_time, record_bytes, record_value};
use super::status::Lifecycle;
use crate::canonical::Value;
use crate::time::Timestamp;

/// `schema` of `approval.json`.
pub const APPROVAL_SCHEMA: &str = "action-ledger.finality-approval";

/// How long an approval authorises a claim: 15 minutes, in milliseconds.
pub const GRANT_WINDOW_MS: i64 = 15 * 60_000;

string_enum! {
    /// The operator's decision.
    ApprovalDecision {
        /// The action may be claimed (once, within [`GRANT_WINDOW_MS`]).
        Approve = "approve",
        /// The action is cancelled; it can never be claimed.
        Deny = "deny",
    }
}

impl ApprovalDecision {
    /// The lifecycle the decision moves a `pending_approval` action to.
    pub fn lifecycle(self) -> Lifecycle {
        match self {
            ApprovalDecision::Approve => Lifecycle::Running,
            ApprovalDecision::Deny => Lifecycle::Cancelled,
        }
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
}

impl Approval {
    /// Whether this approval still authorises a claim at `now`: approved, and no more than
    /// [`GRANT_WINDOW_MS`] ago (a clock behind the approval counts as within the window).
    pub fn grants_at(&self, now: Timestamp) -> bool {
        self.decision == ApprovalDecision::Approve
            && now.millis_since(self.decided_at) <= GRANT_WINDOW_MS
    }

    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        Value::object([
            ("schema", Value::str(APPROVAL_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("decision", Value::str(self.decision.as_str())),
            ("decided_by", Value::str(self.decided_by.as_str())),
            ("decided_at", Value::str(format_time(self.decided_at))),
            ("lifecycle", Value::str(self.decision.lifecycle().as_str())),
        ])
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
    let f = Fields::new(
        &value,
        APPROVAL_SCHEMA,
        &[
            "action_id",
            "decided_at",
            "decided_by",
            "decision",
            "lifecycle",
        ],
    )?;
    let action_id = f.own_id("action_id", id, "directory's")?;
    let decision = f.parsed("decision", ApprovalDecision::parse)?;
    let lifecycle = f.parsed("lifecycle", Lifecycle::parse)?;
    if lifecycle != decision.lifecycle() {
        return Err(RecordError::ApprovalLifecycle {
            lifecycle,
            decision: decision.as_str(),
            expected: decision.lifecycle(),
        });
    }
    let decided_by = f.id("decided_by")?;
    debug_assert!(decided_by.len() <= MAX_ID_UNITS);
    Ok(Approval {
        action_id,
        decision,
        decided_by,
        decided_at: f.time("decided_at")?,
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
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let id = ActionId::parse("act_a").unwrap();
        for d in [ApprovalDecision::Approve, ApprovalDecision::Deny] {
            let a = approval(d);
            assert_eq!(parse_approval(&a.to_bytes(), &id).unwrap(), a);
        }
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
