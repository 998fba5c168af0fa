//! Creating an action: one commit adding its `action.json`, idempotent for a retry with the
//! same binding.

use super::act::{act_content_hash, check_act, scrub_act};
use super::batch::{self, run};
use super::details::Details;
use super::error::Error;
use super::ids::{ActionId, MAX_ID_UNITS};
use super::records::{Action, EXECUTION_CLAIMS, MAX_RECORD_BYTES};
use super::redaction::Security;
use super::status::{Lifecycle, Verdict};
use super::write::{Options, Written};
use crate::canonical::Value;
use crate::privacy;
use crate::store::Store;
use crate::time::Timestamp;

/// The input of [`create_action`].
#[derive(Clone, Debug, PartialEq)]
pub struct NewAction {
    /// The id of the new action.
    pub action_id: ActionId,
    /// The agent that will claim it (machine text, at most [`MAX_ID_UNITS`]).
    pub agent_id: String,
    /// The creating principal (machine text, at most [`MAX_ID_UNITS`]).
    pub principal: String,
    /// The act; it is scrubbed and hashed ([`act_content_hash`]), and stored (redacted) only
    /// with [`details`](Self::details).
    pub act: Option<Value>,
    /// The authorising guard decision.
    pub guard_decision_id: Option<String>,
    /// Its verdict.
    pub verdict: Verdict,
    /// The creator's capabilities; with `execution_claims` the action is protocol 1.
    pub client_capabilities: Vec<String>,
    /// Whether the creator's identity was verified.
    pub identity_verified: bool,
    /// The containment ref of a contained action.
    pub containment_ref: Option<String>,
    /// An explicit client-settable initial lifecycle; default from the verdict.
    pub lifecycle: Option<Lifecycle>,
    /// How long the creator waits for an operator's approval, in seconds (5 to 86400,
    /// [`approval_wait_seconds`](super::approval::approval_wait_seconds)); `None`: the
    /// sweeper's default.
    pub approval_wait_seconds: Option<u32>,
    /// What the creator said about the action (goal, risk, systems, …; [`Details`]): with
    /// `Some`, the record keeps them and the act, redacted ([`Details::stored`]); `None`
    /// writes the record without them, as before they existed.
    pub details: Option<Details>,
}

pub(super) fn id_field(value: &str, field: &'static str) -> Result<String, Error> {
    privacy::machine_text(value, field, MAX_ID_UNITS).map_err(|e| Error::InvalidInput {
        field,
        reason: e.to_string(),
    })
}

impl NewAction {
    /// The `action.json` this input creates at `now`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an id field that is not privacy-safe machine text, a
    /// server-only initial lifecycle, or an act with a lossy number ([`check_act`]).
    pub fn to_action(&self, now: Timestamp) -> Result<Action, Error> {
        if let Some(act) = &self.act {
            check_act(act)?;
        }
        let lifecycle = self
            .lifecycle
            .unwrap_or_else(|| self.verdict.initial_lifecycle());
        if !lifecycle.is_client_settable() {
            return Err(Error::InvalidInput {
                field: "lifecycle",
                reason: format!("{lifecycle} is set by the server only"),
            });
        }
        if let Some(wait) = self.approval_wait_seconds
            && !super::approval::APPROVAL_WAIT_SECONDS.contains(&wait)
        {
            return Err(Error::InvalidInput {
                field: "approval_wait_seconds",
                reason: format!("{wait} is not an integer of 5 to 86400 (seconds)"),
            });
        }
        let opt = |v: &Option<String>, field| v.as_deref().map(|s| id_field(s, field)).transpose();
        let details = self
            .details
            .as_ref()
            .map(|d| d.stored(self.act.as_ref(), &mut Security::default()))
            .transpose()
            .map_err(|e| Error::InvalidInput {
                field: if e.field == "act" { "act" } else { "details" },
                reason: e.to_string(),
            })?;
        let action = Action {
            action_id: self.action_id.clone(),
            agent_id: id_field(&self.agent_id, "agent_id")?,
            created_by: id_field(&self.principal, "principal")?,
            act_content_hash: act_content_hash(self.act.as_ref().map(scrub_act).as_ref()),
            guard_decision_id: opt(&self.guard_decision_id, "guard_decision_id")?,
            guard_verdict: self.verdict,
            containment_ref: opt(&self.containment_ref, "containment_ref")?,
            identity_verified: self.identity_verified,
            execution_protocol: self
                .client_capabilities
                .iter()
                .any(|c| c == EXECUTION_CLAIMS)
                .then_some(1),
            lifecycle,
            created_at: now,
            approval_wait_seconds: self.approval_wait_seconds,
            details,
        };
        let size = action.to_bytes().len();
        if size as u64 > MAX_RECORD_BYTES {
            return Err(Error::InvalidInput {
                field: "details",
                reason: format!(
                    "the action record would be {size} bytes, over the {MAX_RECORD_BYTES} a \
                     record may have: shorten the details"
                ),
            });
        }
        Ok(action)
    }
}

/// Creates an action: one commit adding its `action.json`. Repeating a creation with the same
/// binding (every field but the creation time: agent, principal, act hash, guard decision and
/// verdict, containment ref, identity verification, protocol, lifecycle) is a no-op that
/// returns the first record, its `created_at` included (`commit: None`): a retry after a lost
/// acknowledgement must not need a new id, which would create the duplicate it meant to avoid.
///
/// # Errors
/// [`Error::InvalidInput`], [`Error::ActionExists`] when the id is taken by another binding (or
/// by a record that does not parse), and the write path's [`Error::Contention`],
/// [`Error::RefLocked`], [`Error::Store`].
pub fn create_action(
    store: &Store,
    options: &Options,
    input: &NewAction,
    now: Timestamp,
) -> Result<Written<Action>, Error> {
    // The input is refused before the tip is read, whatever the repository's state.
    input.to_action(now)?;
    run(store, options, now, |ov, now| {
        batch::create(ov, input, now).map(|c| c.state.action)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;

    /// A create retried with the same binding (after a lost acknowledgement, on another clock)
    /// writes nothing and returns the first record; a binding that differs in any one field is
    /// still `ACTION_EXISTS`, and so is an id taken by a record that does not parse.
    #[test]
    fn create_retry_is_idempotent_and_other_bindings_are_refused() {
        let (_dir, store, opts, first) = repo_with_action();
        let tip = store.tip("refs/heads/main").unwrap();
        for later in [
            "2026-03-01T12:00:05.000Z",
            "2026-03-02T08:00:00.000Z",
            "2026-02-28T00:00:00.000Z",
        ] {
            let retry = create_action(&store, &opts, &new_action(ACTION), at(later)).unwrap();
            assert_eq!(retry.commit, None, "{later}");
            assert_eq!(retry.value, first.value, "{later}");
            assert_eq!(retry.value.created_at, at(BASE));
        }
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip);
        let mut n = new_action(ACTION);
        n.act = Some(scrub_act(&Value::object([
            ("kind", Value::str("shell")),
            ("command", Value::str("./deploy.sh prod")),
        ])));
        let retry = create_action(&store, &opts, &n, at("2026-03-01T12:01:00.000Z")).unwrap();
        assert_eq!(
            (retry.commit, retry.value.created_at),
            (None, at(BASE)),
            "same act hash"
        );
        type Change = fn(&mut NewAction);
        let differing: [(&str, Change); 11] = [
            ("agent", |n| n.agent_id = "agent-b".into()),
            ("principal", |n| n.principal = "principal-b".into()),
            ("act", |n| {
                n.act = Some(shell_act(&["./deploy.sh".into(), "staging".into()]))
            }),
            ("no act", |n| n.act = None),
            ("guard decision", |n| {
                n.guard_decision_id = Some("gd_2".into())
            }),
            ("no guard decision", |n| n.guard_decision_id = None),
            ("verdict", |n| n.verdict = Verdict::AllowContained),
            ("containment ref", |n| {
                n.containment_ref = Some("ctr_1".into())
            }),
            ("lifecycle", |n| {
                n.lifecycle = Some(Lifecycle::PendingApproval)
            }),
            ("identity verified", |n| n.identity_verified = true),
            ("legacy", |n| n.client_capabilities.clear()),
        ];
        for (what, change) in differing {
            let mut n = new_action(ACTION);
            change(&mut n);
            let e = create_action(&store, &opts, &n, at(BASE)).unwrap_err();
            assert_eq!(e.code(), "ACTION_EXISTS", "{what}: {e}");
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            tip,
            "nothing written"
        );
        plant_unparsable_action(&store, "act_planted");
        let e = create_action(&store, &opts, &new_action("act_planted"), at(BASE)).unwrap_err();
        assert_eq!(e.code(), "ACTION_EXISTS");
    }
}
