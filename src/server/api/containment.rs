//! `POST /api/actions/{id}/containment`: an operator's promote or discard of a contained action
//! awaiting promotion, as DashClaw's server answers it (the SDK's `resolve_containment`).
//!
//! Body `{"verdict": "promote" | "discard", "reasoning"?: string}`. When an action awaits
//! promotion, and what a promotion creates, is [`finality::containment`]'s: a contained action
//! (`allow_contained`) whose run completed; the verdict is the create-only `containment.json`
//! ([`batch::resolve_containment`]), so two operators resolving at once have one winner.
//!
//! Answers, in DashClaw's order: 403 `Admin access required for containment resolution` (code
//! `OPERATOR_REQUIRED`) for a key without the `operator` mark; 400 `Invalid verdict. Must be
//! promote or discard.`; 400 `Validation failed` for a `reasoning` that is not a string; 404
//! `Action not found`; 409 `CONTAINMENT_NOT_AWAITING` (with the action's
//! `containment_status`) unless it awaits promotion, also for the loser of a race; 403
//! `SELF_APPROVAL_FORBIDDEN` when the operator's principal created the action (DashClaw exempts
//! its single root credential; here every principal is a key's, so none is exempt, and with
//! `--insecure-no-auth`, where every caller is `anonymous`, only the CLI can resolve); 409
//! `CONTAINMENT_REF_MISSING` for a promotion of an action without a `containment_ref`. A
//! discard answers 200 `{action}`, a promotion 200 `{action, promotion_action_id}`, the action
//! as `GET /api/actions/{id}` reads it. `GET /api/stream` is told `action.updated` for the
//! contained action and `action.created` for a promotion's grant.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::extract::{ActionPath, Caller, JsonObject};
use super::reads::{action_view, decision_of};
use super::respond::{error_with, reply_or, validation};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::{self, ContainmentVerdict, Security};
use crate::server::writer::{Answer, Event};
use crate::time::Timestamp;

/// DashClaw's answer to a verdict that is neither `promote` nor `discard`.
const INVALID_VERDICT: &str = "Invalid verdict. Must be promote or discard.";

/// DashClaw's answer to a creator resolving its own containment.
const SELF_APPROVAL: &str = "The credential that created this action cannot resolve its containment verdict. Resolve from the dashboard, or use a different admin credential.";

pub(super) async fn resolve(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    caller: Caller,
    JsonObject(body, _): JsonObject,
) -> Response {
    if !caller.operator {
        return error_with(
            403,
            "Admin access required for containment resolution",
            [("code", Value::str("OPERATOR_REQUIRED"))],
        );
    }
    let verdict = match body
        .get("verdict")
        .and_then(Value::as_str)
        .and_then(ContainmentVerdict::parse)
    {
        Some(v) => v,
        None => return error_with(400, INVALID_VERDICT, []),
    };
    let reasoning = match body.get("reasoning") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(_) => return validation(vec!["reasoning must be a string".into()]),
    };
    let operator = caller.principal.clone();
    let action_id = id.clone();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let mut security = Security::default();
            let resolved = batch::resolve_containment(
                ov,
                &action_id,
                verdict,
                &operator,
                reasoning.as_deref(),
                &mut security,
                now,
            )?;
            let row = action_view(&resolved.state, decision_of(ov, &resolved.state).as_ref());
            let mut body = vec![("action", row.clone())];
            let mut events = vec![Event::updated(&resolved.state, row)];
            if let Some(grant) = &resolved.promotion {
                body.push((
                    "promotion_action_id",
                    Value::str(grant.action.action_id.as_str()),
                ));
                let grant_row = action_view(grant, decision_of(ov, grant).as_ref());
                events.push(Event::created(grant, grant_row));
            }
            Ok(events
                .into_iter()
                .fold(Answer::new(200, Value::object(body)), Answer::with_event))
        },
    );
    let reply = app.writer.submit(op).await;
    reply_or(reply, refusal)
}

/// The answers of a refused verdict that are this route's own.
fn refusal(e: &finality::Error) -> Option<Response> {
    match e {
        finality::Error::ContainmentNotAwaiting { status, .. } => Some(error_with(
            409,
            "CONTAINMENT_NOT_AWAITING",
            [
                ("code", Value::str("CONTAINMENT_NOT_AWAITING")),
                (
                    "containment_status",
                    status.map_or(Value::Null, |s| Value::str(s.as_str())),
                ),
            ],
        )),
        finality::Error::ContainmentRefMissing { .. } => Some(error_with(
            409,
            "CONTAINMENT_REF_MISSING",
            [("code", Value::str("CONTAINMENT_REF_MISSING"))],
        )),
        finality::Error::SelfApprovalForbidden { .. } => Some(error_with(
            403,
            SELF_APPROVAL,
            [("code", Value::str("SELF_APPROVAL_FORBIDDEN"))],
        )),
        _ => None,
    }
}
