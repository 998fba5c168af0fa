//! `POST /api/actions/{id}/cancel`: deliberately close an action that was allowed but never
//! executed, as DashClaw's server answers it.
//!
//! Body `{"reason": string}`, required: 400 `reason is required` when missing, `null` or blank
//! (only whitespace or invisible characters such as U+200B, [`finality::is_blank`]), 400
//! `reason must be a string` for another type. The reason keeps at most
//! [`MAX_CANCEL_REASON_UNITS`](batch::MAX_CANCEL_REASON_UNITS) characters. Only
//! an action that is `running`, without an outcome and never claimed is cancellable
//! ([`batch::cancel`]): it becomes `cancelled`, one-shot, through the same create-only
//! `outcome.json` as every close, its summary `Deliberately not executed: <reason>` (redacted).
//! The answer is 200 `{ok: true, action_id, status: "cancelled", security}`. Refusals: 404
//! `Action not found` for an unknown id and for another principal's action (as the outcome
//! routes answer it here; DashClaw answers that one 403); 409 `NOT_CANCELLABLE` with
//! `current_status`, `outcome_status` and `execution_claimed` for an action already claimed,
//! settled, pending approval or cancelled. Who may cancel: the action's principal or an
//! operator key ([`finality::Settler`]). A landed cancel is told to `GET /api/stream`'s
//! subscribers as `action.updated`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::actions::security_value;
use super::extract::{ActionPath, Caller, JsonObject};
use super::reads::{action_view, decision_of};
use super::respond::{error_with, reply_or};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::{self, ActionId};
use crate::server::writer::{Answer, Event};
use crate::time::Timestamp;

/// DashClaw's message of a refused cancel.
const NOT_CANCELLABLE: &str = "Action is no longer cancellable: it has already executed, been claimed, or reached a terminal state";

pub(super) async fn cancel(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    caller: Caller,
    JsonObject(body, _): JsonObject,
) -> Response {
    let reason = match body.get("reason") {
        None | Some(Value::Null) => return error_with(400, "reason is required", []),
        Some(Value::String(r)) if finality::is_blank(r) => {
            return error_with(400, "reason is required", []);
        }
        Some(Value::String(r)) => r.trim().to_owned(),
        Some(_) => return error_with(400, "reason must be a string", []),
    };
    let critical = finality::mask_secrets(&reason).1;
    let by = caller.settler();
    let action_id = id.clone();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let not_found = || finality::Error::NotFound {
                action_id: action_id.clone(),
            };
            let aid = ActionId::parse(&action_id).ok_or_else(not_found)?;
            let state = ov
                .state(&aid)?
                .filter(|s| by.may_settle(&s.action))
                .ok_or_else(not_found)?;
            if !batch::cancellable(&state) {
                let outcome_status = state
                    .outcome
                    .as_ref()
                    .map_or("pending", |o| o.status.as_str());
                return Ok(Answer::new(
                    409,
                    Value::object([
                        ("error", Value::str(NOT_CANCELLABLE)),
                        ("code", Value::str("NOT_CANCELLABLE")),
                        ("current_status", Value::str(state.lifecycle().as_str())),
                        ("outcome_status", Value::str(outcome_status)),
                        ("execution_claimed", Value::Bool(state.claim.is_some())),
                    ]),
                ));
            }
            let reported = batch::cancel(ov, &action_id, &reason, &by, now)?;
            // Subscribers of `GET /api/stream` hear the cancel once it lands, as a decision.
            let event = ov.state(&aid)?.map(|cancelled| {
                let row = action_view(&cancelled, decision_of(ov, &cancelled).as_ref());
                Event::updated(&cancelled, row)
            });
            let answer = Answer::new(
                200,
                Value::object([
                    ("ok", Value::Bool(true)),
                    ("action_id", Value::str(action_id.as_str())),
                    ("status", Value::str("cancelled")),
                    ("security", security_value(&reported.security, critical)),
                ]),
            );
            Ok(match event {
                Some(event) => answer.with_event(event),
                None => answer,
            })
        },
    );
    let reply = app.writer.submit(op).await;
    if reply.as_ref().is_ok_and(|a| a.status == 200) {
        app.forget(&id);
    }
    reply_or(reply, |_| None)
}
