//! `POST /api/actions/{id}/approve`: an operator's one decision (`approve`, also `allow`, or
//! `deny`) on an action born `pending_approval`. 403 `OPERATOR_REQUIRED` for a key without the
//! `operator` mark; 409 when the action is not pending approval.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::extract::{ActionPath, JsonObject, Operator};
use super::reads::{action_view, decision_of};
use super::respond::{error_with, reply_or, validation};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::{self, ApprovalDecision};
use crate::server::writer::{Answer, Reply};
use crate::time::Timestamp;

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
    let reply = submit_decision(&app, &id, decision, &caller.principal).await;
    reply_or(reply, refusal)
}

/// Submits operator `operator`'s `decision` on action `id` to the writer: the one path of this
/// route and of the dashboard's approve and deny buttons. The answer is this route's 200 body.
pub(crate) async fn submit_decision(
    app: &Arc<App>,
    id: &str,
    decision: ApprovalDecision,
    operator: &str,
) -> Reply {
    let operator = operator.to_owned();
    let action_id = id.to_owned();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let state = batch::approve(ov, &action_id, decision, &operator, now)?;
            Ok(Answer::new(
                200,
                Value::object([(
                    "action",
                    action_view(&state, decision_of(ov, &state).as_ref()),
                )]),
            ))
        },
    );
    app.writer.submit(op).await
}

/// The 409s of a decision on an action that is no longer pending approval; other refusals are
/// answered as every route answers them.
pub(crate) fn refusal(e: &finality::Error) -> Option<Response> {
    match e {
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
