//! `POST /api/actions/{id}/approve`: an operator's one decision (`approve`, also `allow`, or
//! `deny`, with an optional `reasoning` kept redacted in `approval.json`) on an action born
//! `pending_approval`. A denial fails the action, its `error_message` the reasoning (the
//! reference's). 403 `OPERATOR_REQUIRED` for a key without the `operator` mark; 410
//! `APPROVAL_EXPIRED` when the sweep expired it (the reference's answer); 409 when the action is
//! not pending approval.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::actions::security_value;
use super::extract::{ActionPath, JsonObject, Operator};
use super::reads::{action_view, decision_of};
use super::respond::{error_with, reply_or, validation};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::{self, ApprovalDecision, Lifecycle, Security};
use crate::server::writer::{Answer, Event, Reply};
use crate::time::Timestamp;

/// The reference's answer to a decision on an expired approval.
const APPROVAL_EXPIRED: &str = "Approval expired: the requesting agent stopped waiting for this decision, so approving it can no longer release anything. If the action is still wanted, have the agent retry it — a fresh approval request will be created.";

pub(super) async fn approve(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    Operator(caller): Operator,
    JsonObject(body, _): JsonObject,
) -> Response {
    let decision = match body.get("decision").and_then(Value::as_str) {
        Some("approve" | "allow") => ApprovalDecision::Approve,
        Some("deny") => ApprovalDecision::Deny,
        _ => {
            return validation(vec![
                "decision must be \"approve\" (or \"allow\") or \"deny\"".into(),
            ]);
        }
    };
    let reasoning = match body.get("reasoning") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(_) => return validation(vec!["reasoning must be a string".into()]),
    };
    let reply = submit_decision(&app, &id, decision, &caller.principal, reasoning).await;
    reply_or(reply, refusal)
}

/// Submits operator `operator`'s `decision` on action `id`, with its optional `reasoning`
/// (trimmed, kept redacted; a blank one, whitespace or invisible characters only
/// ([`finality::is_blank`]), is none, as a cancel's reason is), to the writer: the one path
/// of this route and of the dashboard's approve and deny buttons. The answer is this route's
/// 200 body.
pub(crate) async fn submit_decision(
    app: &Arc<App>,
    id: &str,
    decision: ApprovalDecision,
    operator: &str,
    reasoning: Option<String>,
) -> Reply {
    let reasoning = reasoning
        .filter(|r| !finality::is_blank(r))
        .map(|r| r.trim().to_owned());
    let critical = reasoning
        .as_deref()
        .map_or(0, |r| finality::mask_secrets(r).1);
    let operator = operator.to_owned();
    let action_id = id.to_owned();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let mut security = Security::default();
            let state = batch::approve(
                ov,
                &action_id,
                decision,
                &operator,
                reasoning.as_deref(),
                &mut security,
                now,
            )?;
            let row = action_view(&state, decision_of(ov, &state).as_ref());
            Ok(Answer::new(
                200,
                Value::object([
                    ("success", Value::Bool(true)),
                    ("action", row.clone()),
                    ("security", security_value(&security, critical)),
                ]),
            )
            .with_event(Event::updated(&state, row)))
        },
    );
    app.writer.submit(op).await
}

/// The answers to a decision on an action that is no longer pending approval: 410 when the
/// sweep expired it, 409 otherwise; other refusals are answered as every route answers them.
pub(crate) fn refusal(e: &finality::Error) -> Option<Response> {
    match e {
        finality::Error::TerminalState {
            lifecycle: Lifecycle::Expired,
            ..
        } => Some(error_with(
            410,
            APPROVAL_EXPIRED,
            [("code", Value::str("APPROVAL_EXPIRED"))],
        )),
        finality::Error::TerminalState { lifecycle, .. } => Some(error_with(
            409,
            "Action is not pending approval",
            [("status", Value::str(lifecycle.as_str()))],
        )),
        finality::Error::OutcomeAlreadySet { current_status, .. } => Some(error_with(
            409,
            "Action is not pending approval: its outcome is already set",
            [("current_status", Value::str(current_status.as_str()))],
        )),
        _ => None,
    }
}
