//! The read routes (`GET /healthz`, `GET /api/actions/{id}`, `GET /api/actions/{id}/outcome`)
//! and the action view they and the write routes answer with. Reads run on tokio's blocking
//! threads, each with its own open repository, at the tip of the target ref; they never wait for
//! the writer.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use super::App;
use super::extract::{ActionPath, Caller};
use super::respond::{error, error_with, json, unavailable, with_internal};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::decision::{Decision, DecisionId};
use crate::finality::{self, ActionId, ApprovalDecision, State as ActionState};
use crate::store::{self, Store};
use crate::time::Timestamp;

thread_local! {
    /// One open repository per blocking thread (gix handles are not shared across threads),
    /// with the number of reads it served.
    static STORE: RefCell<Option<(PathBuf, Store, u32)>> = const { RefCell::new(None) };
}

/// Reads before a thread opens its repository again: an open repository has room for the pack
/// indices that were on disk when it was opened (and then some), and the writer keeps adding
/// packs. A thread also opens it again when the process's mapped pack pages passed their
/// budget ([`Store::mappings_stale`]).
const READS_PER_OPEN: u32 = 4096;

fn with_store<T>(path: &Path, f: impl FnOnce(&Store) -> T) -> Result<T, store::Error> {
    STORE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(p, store, reads)| {
            p != path || *reads >= READS_PER_OPEN || store.mappings_stale()
        }) {
            *slot = Some((path.to_owned(), Store::open(path)?, 0));
        }
        let (_, store, reads) = slot.as_mut().expect("opened above");
        *reads += 1;
        Ok(f(store))
    })
}

/// Reads at the target's tip on a blocking thread.
pub(crate) async fn read<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&Overlay<'_>, Timestamp) -> Result<T, finality::Error> + Send + 'static,
) -> Result<T, finality::Error> {
    let app = app.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let now = app.settings.clock.now();
        with_store(&app.settings.repo, |store| {
            batch::read_at_target(
                store,
                &app.settings.options,
                &app.settings.options.target,
                |ov| f(ov, now),
            )
        })
    })
    .await;
    match joined {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => Err(finality::Error::Store(e)),
        Err(e) => Err(finality::Error::InvalidInput {
            field: "read",
            reason: e.to_string(),
        }),
    }
}

pub(crate) fn decision_of(ov: &Overlay<'_>, state: &ActionState) -> Option<Decision> {
    let id = DecisionId::parse(state.action.guard_decision_id.as_deref()?)?;
    ov.decision(&id).ok().flatten()
}

pub(super) fn opt(v: Option<String>) -> Value {
    v.map_or(Value::Null, Value::str)
}

fn time(at: Option<Timestamp>) -> Value {
    at.map_or(Value::Null, |t| Value::str(finality::format_time(t)))
}

/// The action as `GET /api/actions/{id}` shows it: the reference's row columns that exist
/// here (lifecycle `status`, outcome, claim, approval), then the detail columns of the full
/// action record ([`finality::details::row_fields`]: goal, risk, systems, reversible,
/// reasoning, …, and the stored act), updated by a legacy close's report (tokens, cost,
/// model, …); `timestamp_end` is the one the closer sent, else the outcome's time.
pub fn action_view(state: &ActionState, decision: Option<&Decision>) -> Value {
    let a = &state.action;
    let o = state.outcome.as_ref();
    let c = state.claim.as_ref();
    let p = state.approval.as_ref();
    let approved = p.filter(|p| p.decision == ApprovalDecision::Approve);
    let denied = p.filter(|p| p.decision == ApprovalDecision::Deny);
    // A denial's reasoning, or the expiry's message, as the reference sets `error_message`.
    let error_message = o
        .and_then(|o| o.error_message.clone())
        .or_else(|| p.and_then(|p| p.error_message().map(str::to_owned)));
    let close_source = o.map(|o| match o.source {
        finality::Source::Outcome => "outcome",
        finality::Source::LegacyClose => "direct",
        finality::Source::Sweep => "sweep",
    });
    let mut fields = vec![
        ("action_id", Value::str(a.action_id.as_str())),
        ("agent_id", Value::str(a.agent_id.as_str())),
        ("created_by", Value::str(a.created_by.as_str())),
        (
            "action_type",
            opt(decision.and_then(|d| d.action_type.clone())),
        ),
        ("status", Value::str(state.lifecycle().as_str())),
        (
            "outcome_status",
            Value::str(state.outcome_status().as_str()),
        ),
        ("outcome_at", time(o.map(|o| o.outcome_at))),
        ("outcome_summary", opt(o.and_then(|o| o.summary.clone()))),
        (
            "outcome_progress",
            o.and_then(|o| o.progress.clone()).unwrap_or(Value::Null),
        ),
        ("error_message", opt(error_message)),
        ("close_source", close_source.map_or(Value::Null, Value::str)),
        ("act_content_hash", opt(a.act_content_hash.clone())),
        ("guard_decision_id", opt(a.guard_decision_id.clone())),
        ("guard_decision", Value::str(a.guard_verdict.as_str())),
        ("containment_ref", opt(a.containment_ref.clone())),
        (
            "containment_status",
            finality::containment::status(state).map_or(Value::Null, |s| Value::str(s.as_str())),
        ),
        ("identity_verified", Value::Bool(a.identity_verified)),
        (
            "execution_protocol",
            a.execution_protocol.map_or(Value::Null, Value::from),
        ),
        ("execution_claimed_at", time(c.map(|c| c.claimed_at))),
        (
            "execution_attempt_id",
            opt(c.map(|c| c.attempt_id.as_str().to_owned())),
        ),
        (
            "execution_guard_decision_id",
            opt(c.map(|c| c.guard_decision_id.clone())),
        ),
        ("approved_by", opt(approved.map(|p| p.decided_by.clone()))),
        ("approved_at", time(approved.map(|p| p.decided_at))),
        ("denied_by", opt(denied.map(|p| p.decided_by.clone()))),
        ("denied_at", time(denied.map(|p| p.decided_at))),
        (
            "approval_reasoning",
            opt(p.and_then(|p| p.reasoning.clone())),
        ),
        (
            "approval_expires_in_seconds",
            a.approval_wait_seconds
                .map_or(Value::Null, |w| Value::from(i64::from(w))),
        ),
        (
            "approval_grant_used_at",
            time(approved.and(c).map(|c| c.claimed_at)),
        ),
        ("created_at", time(Some(a.created_at))),
        ("timestamp_start", time(Some(a.created_at))),
        (
            "timestamp_end",
            time(o.map(|o| o.timestamp_end.unwrap_or(o.outcome_at))),
        ),
    ];
    // A legacy close's report updates the row's columns, as the reference's PATCH does.
    let details = match (a.details.as_ref(), o.and_then(|o| o.report.as_ref())) {
        (d, None) => d.cloned(),
        (None, Some(r)) => Some(r.clone()),
        (Some(d), Some(r)) => Some(d.overlaid(r)),
    };
    fields.extend(finality::details::row_fields(details.as_ref()));
    Value::object(fields)
}

/// The assumptions of an action as the reference's assumption rows (`GET /api/actions/{id}`
/// answers them beside the action): one per stored assumption, in the creator's order, with
/// an id derived from the action's and the position (`<action_id>:asm:<i>`), never validated or
/// invalidated (nothing here updates them).
pub fn assumption_rows(state: &ActionState) -> Value {
    let a = &state.action;
    let items = a
        .details
        .as_ref()
        .map(|d| d.list("assumptions"))
        .unwrap_or_default();
    Value::Array(
        items
            .into_iter()
            .enumerate()
            .map(|(i, text)| {
                Value::object([
                    (
                        "assumption_id",
                        Value::str(format!("{}:asm:{i}", a.action_id)),
                    ),
                    ("action_id", Value::str(a.action_id.as_str())),
                    ("agent_id", Value::str(a.agent_id.as_str())),
                    ("assumption", Value::str(text)),
                    ("basis", Value::Null),
                    ("validated", Value::Bool(false)),
                    ("invalidated", Value::Bool(false)),
                    ("invalidated_reason", Value::Null),
                    ("created_at", time(Some(a.created_at))),
                ])
            })
            .collect(),
    )
}

pub(super) async fn healthz(State(app): State<Arc<App>>) -> Response {
    let r = read(&app, |ov, _| Ok(ov.read(crate::finality::ROOT).is_ok())).await;
    match r {
        Ok(_) => json(
            200,
            Value::object([
                ("ok", Value::Bool(true)),
                ("ref", Value::str(app.settings.options.ref_name.as_str())),
            ]),
        ),
        Err(e) => with_internal(
            error_with(
                503,
                "Repository unreadable",
                [("reason", Value::str(super::respond::STORE_UNAVAILABLE))],
            ),
            &e.to_string(),
        ),
    }
}

pub(super) async fn get_action(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    _caller: Caller,
) -> Response {
    answer_action(&app, &id).await
}

pub(super) async fn get_outcome(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
    _caller: Caller,
) -> Response {
    answer_state(&app, &id, |_, s, now| s.view(now).to_value()).await
}

/// `{"action": …}`, the view of action `raw_id` with its decision (`GET /api/actions/:id`, and
/// a `PATCH` without a status); answered as [`answer_state`].
pub(super) async fn answer_action(app: &Arc<App>, raw_id: &str) -> Response {
    answer_state(app, raw_id, |ov, s, _| {
        Value::object([
            ("action", action_view(s, decision_of(ov, s).as_ref())),
            ("assumptions", assumption_rows(s)),
        ])
    })
    .await
}

/// `200` with `body` of the state of action `raw_id` at the target's tip (read at the clock's
/// now); `404` when the id is malformed or names no action; `503` when the ledger cannot be
/// read.
async fn answer_state(
    app: &Arc<App>,
    raw_id: &str,
    body: impl FnOnce(&Overlay<'_>, &ActionState, Timestamp) -> Value + Send + 'static,
) -> Response {
    let Some(id) = ActionId::parse(raw_id) else {
        return error(404, "Action not found");
    };
    match read(app, move |ov, now| {
        Ok(ov.state(&id)?.map(|s| body(ov, &s, now)))
    })
    .await
    {
        Ok(Some(v)) => json(200, v),
        Ok(None) => error(404, "Action not found"),
        Err(e) => unavailable(&e.to_string()),
    }
}
