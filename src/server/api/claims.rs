//! `PATCH /api/actions/{id}`: the claim (`claim_execution`) or the legacy close (`status`).
//!
//! A claim answers 200 `{claimed, action_id, attempt_id, claimed_at}` with `Cache-Control:
//! no-store`; 400 `INVALID_EXECUTION_CLAIM` for a body rule broken; 403
//! `AGENT_IDENTITY_REQUIRED`; 409 `EXECUTION_CLAIM_CONFLICT` for every ineligibility and a
//! lost race, the same whatever the cause; 503 `EXECUTION_CLAIM_UNAVAILABLE` when the claim
//! could not be written (nothing was granted). The current policy is evaluated again at claim
//! time (`policy_still_permits`).

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::actions::security_value;
use super::extract::{ActionPath, Caller, JsonObject};
use super::reads::{action_view, decision_of};
use super::respond::{STORE_UNAVAILABLE, answer, error_with, reply_or, validation, with_internal};
use crate::canonical::Value;
use crate::finality::batch::{self, BatchError, Overlay};
use crate::finality::{self, ActionId, ClaimRequest, Verdict};
use crate::server::policy::Policy;
use crate::server::writer::Answer;
use crate::time::Timestamp;

/// Columns of DashClaw's action row that its server acts on when a `PATCH` sets them, and
/// that a legacy close here does not record: refused with 400, never a silent 200.
const UNRECORDED_CLOSE_FIELDS: [&str; 2] = ["containment_status", "executed_despite"];

/// The reference's outcome fields of a legacy close (`OUTCOME_FIELDS` of its
/// `validateActionOutcome`), named in its refusal of a `PATCH` with none of them.
const OUTCOME_FIELDS: [&str; 11] = [
    "status",
    "output_summary",
    "side_effects",
    "artifacts_created",
    "error_message",
    "timestamp_end",
    "duration_ms",
    "cost_estimate",
    "tokens_in",
    "tokens_out",
    "model",
];

const CLAIM_CONFLICT: &str =
    "Action is not eligible for a new execution attempt. Reconcile its state before retrying.";

fn claim_error(e: &finality::Error, action_id: &str) -> Response {
    use finality::Error as E;
    match e {
        E::InvalidClaim { .. } => error_with(
            400,
            "Invalid execution claim",
            [("code", Value::str("INVALID_EXECUTION_CLAIM"))],
        ),
        // An act that cannot be hashed one to one cannot be compared with the act the action
        // was created for: a body rule, like the attempt id's.
        E::InvalidInput { .. } => error_with(
            400,
            "Invalid execution claim",
            [
                ("code", Value::str("INVALID_EXECUTION_CLAIM")),
                ("reason", Value::str(e.to_string())),
            ],
        ),
        E::AgentIdentityRequired => error_with(
            403,
            "An agent identity is required to claim an execution",
            [("code", Value::str("AGENT_IDENTITY_REQUIRED"))],
        ),
        E::ClaimConflict { .. } => error_with(
            409,
            CLAIM_CONFLICT,
            [
                ("code", Value::str("EXECUTION_CLAIM_CONFLICT")),
                ("action_id", Value::str(action_id)),
            ],
        ),
        other => claim_unavailable(&other.to_string(), action_id),
    }
}

/// 503 `EXECUTION_CLAIM_UNAVAILABLE`: the store failed; `reason` goes to the server's log only.
fn claim_unavailable(reason: &str, action_id: &str) -> Response {
    with_internal(
        error_with(
            503,
            "The execution claim could not be recorded; nothing was granted. Read the action back before retrying with a new attempt id.",
            [
                ("code", Value::str("EXECUTION_CLAIM_UNAVAILABLE")),
                ("action_id", Value::str(action_id)),
                ("reason", Value::str(STORE_UNAVAILABLE)),
            ],
        ),
        reason,
    )
}

/// The claim is a new policy checkpoint, not a cached receipt: the current policy is evaluated
/// again for the action's recorded type and agent and the claim's act. It still permits the
/// claim when it says `allow` or `warn`; `allow_contained` for the same containment;
/// `require_approval` (or `allow_contained` for an action that was not contained) only with an
/// operator approval that still grants; never `block`. An action without a decision record (made
/// by the CLI, with an opaque decision) has nothing to evaluate again.
fn policy_still_permits(
    policy: &Policy,
    ov: &Overlay<'_>,
    action_id: &str,
    request: &ClaimRequest,
    now: Timestamp,
) -> bool {
    let Some(state) = ActionId::parse(action_id).and_then(|id| ov.state(&id).ok().flatten()) else {
        return true; // refused by the claim itself, the same way as any unknown id
    };
    let Some(d) = decision_of(ov, &state) else {
        return true;
    };
    let kind = request
        .act
        .as_ref()
        .and_then(|a| a.get("kind"))
        .and_then(Value::as_str);
    let e = policy.evaluate(
        d.action_type.as_deref(),
        kind,
        Some(state.action.agent_id.as_str()),
    );
    let approved = state.approval.as_ref().is_some_and(|p| p.grants_at(now));
    match e.verdict {
        Verdict::Allow | Verdict::Warn => true,
        Verdict::AllowContained => {
            (state.action.containment_ref.is_some()
                && e.containment_ref == state.action.containment_ref)
                || (state.action.containment_ref.is_none() && approved)
        }
        Verdict::RequireApproval => approved,
        Verdict::Block => false,
    }
}

/// `PATCH /api/actions/stats`: [`patch_action`] of the action whose id is `stats` (its `GET` is
/// the stats route).
pub(super) async fn patch_stats(
    state: State<Arc<App>>,
    caller: Caller,
    body: JsonObject,
) -> Response {
    patch_action(state, ActionPath("stats".into()), caller, body).await
}

pub(super) async fn patch_action(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    caller: Caller,
    JsonObject(body, text): JsonObject,
) -> Response {
    let map = body.as_object().expect("an object");
    if map.contains_key("claim_execution") {
        let request = match ClaimRequest::from_body(&body, Some(&caller.principal), false) {
            Ok(r) => r,
            Err(e) => return claim_error(&e, &id),
        };
        // The act's number text, which the parsed request no longer holds (its other rules are
        // the claim's own).
        if request.act.is_some()
            && let Err(e) = finality::check_act_text(&text, "/act")
        {
            return claim_error(&e, &id);
        }
        let action_id = id.clone();
        let access = caller.access.clone();
        let op = Box::new(
            move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
                if !policy_still_permits(&access.policy, ov, &action_id, &request, now) {
                    return Err(finality::Error::ClaimConflict {
                        action_id: action_id.clone(),
                    });
                }
                let c = batch::claim(ov, &action_id, &request, now)?;
                Ok(Answer {
                    status: 200,
                    body: Value::object([
                        ("claimed", Value::Bool(true)),
                        ("action_id", Value::str(c.action_id.as_str())),
                        ("attempt_id", Value::str(c.attempt_id.as_str())),
                        (
                            "claimed_at",
                            Value::str(finality::format_time(c.claimed_at)),
                        ),
                    ]),
                    no_store: true,
                    events: Vec::new(),
                    webhooks_queued: 0,
                })
            },
        );
        return match app.writer.submit(op).await {
            Ok(a) => answer(a),
            Err(BatchError::Unavailable { reason }) => claim_unavailable(&reason, &id),
            Err(BatchError::Refused(e)) => claim_error(&e, &id),
        };
    }
    // The legacy lifecycle close, DashClaw's `validateActionOutcome`: `status`, then what the
    // close keeps in its one `outcome.json` (`output_summary`, `error_message`, the sent
    // `timestamp_end` and the report's tokens, cost, model, duration, side effects and
    // artifacts). The columns the reference acts on but this ledger does not record
    // (`containment_status`, `executed_despite`) are refused with 400 rather than answered 200
    // with nothing changed.
    if let Some(field) = UNRECORDED_CLOSE_FIELDS
        .iter()
        .find(|f| map.get(**f).is_some_and(|v| !matches!(v, Value::Null)))
    {
        return validation(vec![format!(
            "{field} cannot be set by a PATCH here: it is not recorded by a legacy close"
        )]);
    }
    let mut problems = Vec::new();
    let mut text_field = |key: &str| match map.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problems.push(format!("{key} must be a string"));
            None
        }
    };
    let status = text_field("status");
    let summary = text_field("output_summary");
    let error_message = text_field("error_message");
    // An empty `timestamp_end` is the reference's "now" (the server's `outcome_at`).
    let timestamp_end = match map.get("timestamp_end") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if t.is_empty() => None,
        Some(v) => {
            let at = v.as_str().and_then(Timestamp::from_iso);
            if at.is_none() {
                problems.push(
                    "timestamp_end must be an ISO 8601 time, YYYY-MM-DDTHH:MM:SS[.fraction] then \
                     Z or ±HH:MM"
                        .into(),
                );
            }
            at
        }
    };
    let report = match finality::Details::report_from_request(map) {
        Ok(r) => r,
        Err(errors) => {
            problems.extend(errors.iter().map(ToString::to_string));
            finality::Details::default()
        }
    };
    if !problems.is_empty() {
        return validation(problems);
    }
    let Some(status) = status else {
        let sent: Vec<&str> = [
            ("output_summary", summary.is_some()),
            ("error_message", error_message.is_some()),
            ("timestamp_end", timestamp_end.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, sent)| sent.then_some(k))
        .chain(report.names())
        .collect();
        if sent.is_empty() {
            return validation(vec![format!(
                "At least one outcome field is required: {}",
                OUTCOME_FIELDS.join(", ")
            )]);
        }
        // The reference updates its row in place; here an action's outcome fields are kept
        // in the one record of its close, so they come with the status that closes it.
        return validation(vec![format!(
            "{} can only be recorded with status: a legacy close keeps its outcome fields in \
             the one outcome record it writes; send them in the PATCH that closes the action",
            sent.join(", ")
        )]);
    };
    let sent = finality::CloseReport {
        summary,
        error_message,
        timestamp_end,
        report: (!report.is_empty()).then_some(report),
    };
    let action_id = id.clone();
    let by = caller.settler();
    let critical = [sent.summary.as_deref(), sent.error_message.as_deref()]
        .into_iter()
        .flatten()
        .map(|s| finality::mask_secrets(s).1)
        .sum();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let reported = batch::close(ov, &action_id, &status, &sent, &by, now)?;
            let id = ActionId::parse(&action_id).expect("closed, so valid");
            let state = ov.state(&id)?.expect("closed, so present");
            Ok(Answer::new(
                200,
                Value::object([
                    (
                        "action",
                        action_view(&state, decision_of(ov, &state).as_ref()),
                    ),
                    ("security", security_value(&reported.security, critical)),
                ]),
            ))
        },
    );
    let reply = app.writer.submit(op).await;
    if reply.is_ok() {
        app.forget(&id);
    }
    reply_or(reply, |e| match e {
        finality::Error::TerminalState { lifecycle, .. } => Some(error_with(
            409,
            "Action is in a terminal state and cannot be modified",
            [("status", Value::str(lifecycle.as_str()))],
        )),
        _ => None,
    })
}
