//! The listing routes: `GET /api/actions` (the SDK's `get_actions` and
//! `get_pending_approvals`), `GET /api/actions/stats` and `GET /api/guard` (the SDK's
//! `get_guard_decisions`), on [`crate::finality::list`], which gives the filters, the order and
//! what a page costs.
//!
//! Every authenticated caller may list, as every caller may read an action by id. A query
//! parameter that breaks its rule (a `limit` above the maximum, a parameter given twice
//! included) is a 400 `Validation failed` naming it; nothing else of the
//! query is checked (unknown parameters are ignored, as the reference does). Beside the
//! reference's keys each answer carries `limit`, `offset`, `has_more` (whether more may follow
//! the page) and `order` (`created_at_desc` from the pending index, `id_hash` for a walk);
//! `total` and `stats` are `null` when a walk stopped before the end.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::App;
use super::extract::Caller;
use super::reads::{action_view, opt, read};
use super::respond::{error_with, json, validation, with_internal};
use crate::canonical::Value;
use crate::finality::decision::Decision;
use crate::finality::list::{self, ActionQuery, ActionStats, DecisionQuery, ListError, Path};
use crate::finality::{self, Lifecycle};

/// The query string's pairs, decoded.
fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn borrowed(pairs: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// 400 for a bad parameter, 503 when the ledger could not be read.
fn refused(e: &ListError) -> Response {
    match e {
        ListError::BadParam { .. } => validation(vec![e.to_string()]),
        ListError::Read(e) => unreadable(e),
    }
}

fn unreadable(e: &finality::Error) -> Response {
    with_internal(
        error_with(
            503,
            "The ledger could not be read. Retry later.",
            [("code", Value::str(e.code()))],
        ),
        &e.to_string(),
    )
}

fn count(n: Option<u64>) -> Value {
    n.map_or(Value::Null, |n| Value::from(n as i64))
}

/// The reference's `stats` object: counts by lifecycle; its risk and cost figures are `null`
/// (this ledger keeps neither).
fn stats_fields(s: &ActionStats) -> Vec<(&'static str, Value)> {
    let n = |l: Lifecycle| Value::from(s.count(l) as i64);
    vec![
        ("total", Value::from(s.total as i64)),
        ("completed", n(Lifecycle::Completed)),
        ("failed", n(Lifecycle::Failed)),
        ("running", n(Lifecycle::Running)),
        ("blocked", n(Lifecycle::Blocked)),
        ("pending", n(Lifecycle::Pending)),
        ("pending_approval", n(Lifecycle::PendingApproval)),
        ("cancelled", n(Lifecycle::Cancelled)),
        ("unknown", n(Lifecycle::Unknown)),
        ("high_risk", Value::Null),
        ("avg_risk", Value::Null),
        ("total_cost", Value::Null),
    ]
}

fn order(path: Path) -> Value {
    Value::str(match path {
        Path::PendingIndex => "created_at_desc",
        Path::Walk => "id_hash",
    })
}

/// `GET /api/actions`: `{actions, total, stats, lastUpdated, limit, offset, has_more, order}`,
/// each action as `GET /api/actions/{id}` shows it.
pub(super) async fn list_actions(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    _caller: Caller,
) -> Response {
    let pairs = pairs(query.as_deref());
    let q = match ActionQuery::parse(borrowed(&pairs)) {
        Ok(q) => q,
        Err(e) => return refused(&e),
    };
    let (limit, offset) = (q.limit, q.offset);
    let r = read(&app, move |ov, now| {
        Ok(list::list_actions(ov, &q).map(|page| {
            let actions = page
                .actions
                .iter()
                .map(|l| action_view(&l.state, l.decision.as_ref()))
                .collect();
            Value::object([
                ("actions", Value::Array(actions)),
                ("total", count(page.total)),
                (
                    "stats",
                    page.stats
                        .as_ref()
                        .map_or(Value::Null, |s| Value::object(stats_fields(s))),
                ),
                ("lastUpdated", Value::str(finality::format_time(now))),
                ("limit", Value::from(limit as i64)),
                ("offset", Value::from(offset as i64)),
                ("has_more", Value::Bool(page.more)),
                ("order", order(page.path)),
            ])
        }))
    })
    .await;
    match r {
        Ok(Ok(v)) => json(200, v),
        Ok(Err(e)) => refused(&e),
        Err(e) => unreadable(&e),
    }
}

/// `GET /api/actions/stats`: the counts of every action matching the filters (the reference
/// counts the last 24 hours; this ledger counts all, `window: "all"`), with the reference's
/// `approval` (pending approvals), `change_percent` and `confidence` (`null`: not kept here)
/// and `lastUpdated`. Its cost is the history ([`list::action_stats`]).
pub(super) async fn action_stats(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    _caller: Caller,
) -> Response {
    let pairs = pairs(query.as_deref());
    let q = match ActionQuery::parse(borrowed(&pairs)) {
        Ok(q) => q,
        Err(e) => return refused(&e),
    };
    let r = read(&app, move |ov, now| {
        Ok(list::action_stats(ov, &q).map(|(stats, _)| {
            let mut fields = stats_fields(&stats);
            fields.extend([
                (
                    "approval",
                    Value::from(stats.count(Lifecycle::PendingApproval) as i64),
                ),
                ("change_percent", Value::Null),
                ("confidence", Value::Null),
                ("window", Value::str("all")),
                ("lastUpdated", Value::str(finality::format_time(now))),
            ]);
            Value::object(fields)
        }))
    })
    .await;
    match r {
        Ok(Ok(v)) => json(200, v),
        Ok(Err(e)) => refused(&e),
        Err(e) => unreadable(&e),
    }
}

/// A decision as `GET /api/guard` lists it: the reference's row keys that exist here.
fn decision_row(d: &Decision) -> Value {
    Value::object([
        ("id", Value::str(d.decision_id.as_str())),
        ("decision_id", Value::str(d.decision_id.as_str())),
        ("agent_id", opt(d.agent_id.clone())),
        ("agent_name", Value::Null),
        ("verification_status", Value::str("unverified")),
        ("action_type", opt(d.action_type.clone())),
        ("risk_score", Value::Null),
        ("decision", Value::str(d.verdict.as_str())),
        ("reason", opt(d.reason.clone())),
        (
            "reasons",
            Value::Array(d.reason.iter().map(|r| Value::str(r.as_str())).collect()),
        ),
        (
            "matched_policies",
            Value::Array(d.rule.iter().map(|r| Value::str(r.as_str())).collect()),
        ),
        ("act_hash", opt(d.act_content_hash.clone())),
        ("containment_ref", opt(d.containment_ref.clone())),
        (
            "created_at",
            Value::str(finality::format_time(d.decided_at)),
        ),
    ])
}

/// `GET /api/guard`: `{decisions, total, stats, limit, offset, has_more, order}`; `stats` (the
/// reference's counts of the last 24 hours) is `null`: this ledger keeps no windowed count.
pub(super) async fn list_decisions(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    _caller: Caller,
) -> Response {
    let pairs = pairs(query.as_deref());
    let q = match DecisionQuery::parse(borrowed(&pairs)) {
        Ok(q) => q,
        Err(e) => return refused(&e),
    };
    let (limit, offset) = (q.limit, q.offset);
    let r = read(&app, move |ov, _| {
        Ok(list::list_decisions(ov, &q).map(|page| {
            Value::object([
                (
                    "decisions",
                    Value::Array(page.decisions.iter().map(decision_row).collect()),
                ),
                ("total", count(page.total)),
                ("stats", Value::Null),
                ("limit", Value::from(limit as i64)),
                ("offset", Value::from(offset as i64)),
                ("has_more", Value::Bool(page.more)),
                ("order", order(Path::Walk)),
            ])
        }))
    })
    .await;
    match r {
        Ok(Ok(v)) => json(200, v),
        Ok(Err(e)) => refused(&e),
        Err(e) => unreadable(&e),
    }
}
