//! `POST /api/actions/{id}/outcome`: the one-shot outcome report. 200 `{outcome, security}`;
//! 400 for an invalid status (`details`), a missing `error_message` or `progress`, a progress
//! value over 8 KiB; 404 for an unknown action; 409 with `current_status` when the lifecycle
//! refuses a report or the outcome is already set.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::actions::security_value;
use super::extract::{ActionPath, Caller, JsonObject};
use super::respond::{error, error_with, reply_or, validation};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::{self, OutcomeReport};
use crate::server::writer::Answer;
use crate::time::Timestamp;

fn secrets_in(v: &Value) -> usize {
    match v {
        Value::String(s) => finality::mask_secrets(s).1,
        Value::Array(items) => items.iter().map(secrets_in).sum(),
        Value::Object(m) => m.values().map(secrets_in).sum(),
        _ => 0,
    }
}

pub(super) async fn post_outcome(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    caller: Caller,
    JsonObject(body, _): JsonObject,
) -> Response {
    let map = body.as_object().expect("an object");
    let text = |k: &str| -> Result<Option<String>, Response> {
        match map.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(validation(vec![format!("{k} must be a string")])),
        }
    };
    let report = match (|| {
        Ok::<_, Response>(OutcomeReport {
            status: match map.get("status") {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            },
            summary: text("summary")?,
            error_message: text("error_message")?,
            progress: map
                .get("progress")
                .cloned()
                .filter(|p| !matches!(p, Value::Null)),
            attempt_id: text("attempt_id")?,
        })
    })() {
        Ok(r) => r,
        Err(r) => return r,
    };
    let critical = [&report.summary, &report.error_message]
        .into_iter()
        .flatten()
        .map(|s| finality::mask_secrets(s).1)
        .sum::<usize>()
        + report.progress.as_ref().map_or(0, secrets_in);
    let action_id = id.clone();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let r = batch::report(ov, &action_id, &report, &caller.settler(), now)?;
            Ok(Answer::new(
                200,
                Value::object([
                    ("outcome", r.view.to_value()),
                    ("security", security_value(&r.security, critical)),
                ]),
            ))
        },
    );
    reply_or(app.writer.submit(op).await, |e| {
        use finality::Error as E;
        Some(match e {
            E::InvalidStatus { .. } => error_with(
                400,
                "Invalid status",
                [("details", Value::Array(vec![Value::str(e.to_string())]))],
            ),
            E::InvalidOutcome { reason } => error(400, reason.clone()),
            E::LifecycleConflict { lifecycle, .. } => error_with(
                409,
                format!("Cannot report an outcome for an action in status '{lifecycle}'"),
                [("current_status", Value::str(lifecycle.as_str()))],
            ),
            E::OutcomeAlreadySet { current_status, .. } => error_with(
                409,
                "outcome already set",
                [("current_status", Value::str(current_status.as_str()))],
            ),
            E::AttemptMismatch { .. } => {
                error_with(409, e.to_string(), [("code", Value::str(e.code()))])
            }
            _ => return None,
        })
    })
}
