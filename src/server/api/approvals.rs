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
use crate::server::writer::Answer;
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
    let operator = caller.principal.clone();
    let action_id = id.clone();
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
    reply_or(app.writer.submit(op).await, |e| match e {
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
    })
}
