//! Guard decision records: every policy decision of `serve` is written once, under its own id,
//! at
//!
//! ```text
//! finality/v1/decisions/<fan-out of sha256(decision_id)>/<decision_id>.json
//! ```
//!
//! (the fan-out is the layout's, [`Layout::decision_path`](super::layout::Layout::decision_path))
//!
//! and the action created from it names that id as its `guard_decision_id` (the reference's
//! `guard_decisions` table, of which only what a claim and an audit need is kept: the verdict,
//! the matched rule, who asked, for which act). The record is create-only like every finality
//! record. An action whose decision record exists must agree with it (verdict, agent,
//! principal, act hash, containment ref); an action created by the CLI names an opaque decision
//! id that has no record.

use std::collections::BTreeSet;

use super::ids::{ActionId, MAX_ID_UNITS};
use super::records::RecordError;
use super::records::{
    Action, Fields, MAX_TEXT_UNITS, SCHEMA_VERSION, format_time, opt_str, record_bytes,
    record_value,
};
use super::redaction::{Security, clean_text};
use super::status::Verdict;
use crate::canonical::Value;
use crate::time::Timestamp;

pub use super::layout::DECISIONS;

/// `schema` of a decision record.
pub const DECISION_SCHEMA: &str = "action-ledger.finality-decision";

/// A decision id: the same shape as an action id (`^[A-Za-z0-9_-]{1,128}$`).
pub type DecisionId = ActionId;

/// One guard decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Its id (`guard_decision_id` of the action created from it).
    pub decision_id: DecisionId,
    /// The verdict.
    pub verdict: Verdict,
    /// The id of the policy rule that matched; `None` for the policy's default.
    pub rule: Option<String>,
    /// The rule's reason (redacted, at most 4000 characters).
    pub reason: Option<String>,
    /// The action type asked about (machine text).
    pub action_type: Option<String>,
    /// The agent that asked (machine text).
    pub agent_id: Option<String>,
    /// The authenticated principal that asked.
    pub principal: String,
    /// `act_content_hash` of the scrubbed act asked about.
    pub act_content_hash: Option<String>,
    /// For `allow_contained`, the containment ref the rule gives.
    pub containment_ref: Option<String>,
    /// Decision time.
    pub decided_at: Timestamp,
}

impl Decision {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        Value::object([
            ("schema", Value::str(DECISION_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("decision_id", Value::str(self.decision_id.as_str())),
            ("decision", Value::str(self.verdict.as_str())),
            ("rule", opt_str(&self.rule)),
            ("reason", opt_str(&self.reason)),
            ("action_type", opt_str(&self.action_type)),
            ("agent_id", opt_str(&self.agent_id)),
            ("principal", Value::str(self.principal.as_str())),
            ("act_content_hash", opt_str(&self.act_content_hash)),
            ("containment_ref", opt_str(&self.containment_ref)),
            ("decided_at", Value::str(format_time(self.decided_at))),
        ])
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

/// Parses a decision record; `id` is the id its path names.
///
/// # Errors
/// The first rule broken ([`RecordError`]).
pub fn parse(bytes: &[u8], id: &DecisionId) -> Result<Decision, RecordError> {
    let value = record_value(bytes)?;
    let f = Fields::new(
        &value,
        DECISION_SCHEMA,
        &[
            "act_content_hash",
            "action_type",
            "agent_id",
            "containment_ref",
            "decided_at",
            "decision",
            "decision_id",
            "principal",
            "reason",
            "rule",
        ],
    )?;
    let decision_id = f.own_id("decision_id", id, "path's")?;
    let reason = f.opt_text("reason")?;
    let verdict = f.parsed("decision", Verdict::parse)?;
    let containment_ref = f.id_text("containment_ref")?;
    if (verdict == Verdict::AllowContained) != containment_ref.is_some() {
        return Err(RecordError::ContainmentRef);
    }
    let principal = f.id("principal")?;
    debug_assert!(principal.len() <= MAX_ID_UNITS);
    Ok(Decision {
        decision_id,
        verdict,
        rule: f.id_text("rule")?,
        reason: reason.map(str::to_owned),
        action_type: f.id_text("action_type")?,
        agent_id: f.id_text("agent_id")?,
        principal,
        act_content_hash: f.opt_str("act_content_hash")?.map(str::to_owned),
        containment_ref,
        decided_at: f.time("decided_at")?,
    })
}

/// What of an action's binding disagrees with the decision it names; empty when it agrees.
pub fn disagreements(action: &Action, d: &Decision) -> Vec<&'static str> {
    let mut out = Vec::new();
    if action.guard_verdict != d.verdict {
        out.push("guard_verdict is not the decision's");
    }
    if d.agent_id.as_deref() != Some(action.agent_id.as_str()) {
        out.push("agent_id is not the decision's");
    }
    if d.principal != action.created_by {
        out.push("created_by is not the decision's principal");
    }
    if d.act_content_hash != action.act_content_hash {
        out.push("act_content_hash is not the decision's");
    }
    if d.containment_ref != action.containment_ref {
        out.push("containment_ref is not the decision's");
    }
    out
}

/// Privacy and text checks `verify` applies to a parsed decision beyond its shape: the id
/// fields hold no confidential identifier and the reason is already redacted.
pub fn privacy_problems(d: &Decision) -> BTreeSet<&'static str> {
    let mut out = BTreeSet::new();
    let ids = [
        &d.rule,
        &d.action_type,
        &d.agent_id,
        &Some(d.principal.clone()),
        &d.containment_ref,
    ];
    if ids
        .into_iter()
        .flatten()
        .any(|v| crate::privacy::contains_confidential_identifier(v))
    {
        out.insert("an id field contains a confidential identifier");
    }
    if let Some(r) = &d.reason {
        let mut security = Security::default();
        if clean_text(r, MAX_TEXT_UNITS, &mut security) != *r {
            out.insert("the reason holds an unredacted secret or confidential identifier");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision() -> Decision {
        Decision {
            decision_id: DecisionId::parse("gd_0123456789abcdef").unwrap(),
            verdict: Verdict::AllowContained,
            rule: Some("sandboxed-files".into()),
            reason: Some("file writes run in the sandbox".into()),
            action_type: Some("file_write".into()),
            agent_id: Some("agent-1".into()),
            principal: "ci-bot".into(),
            act_content_hash: None,
            containment_ref: Some("sandbox/main".into()),
            decided_at: Timestamp::from_millis(1_772_366_400_000),
        }
    }

    #[test]
    fn round_trip() {
        let d = decision();
        assert_eq!(parse(&d.to_bytes(), &d.decision_id).unwrap(), d);
        let other = DecisionId::parse("gd_other").unwrap();
        assert!(parse(&d.to_bytes(), &other).is_err());
        // allow_contained without a containment ref, and a ref on another verdict.
        let mut bad = d.clone();
        bad.containment_ref = None;
        assert!(parse(&bad.to_bytes(), &d.decision_id).is_err());
        bad.verdict = Verdict::Allow;
        bad.containment_ref = Some("sandbox/main".into());
        assert!(parse(&bad.to_bytes(), &d.decision_id).is_err());
        assert!(privacy_problems(&d).is_empty());
        let mut leaky = d;
        leaky.reason = Some("token=abcdef123456".into());
        assert_eq!(privacy_problems(&leaky).len(), 1);
    }
}
