//! `POST /api/guard` and `POST /api/actions`: the guard decision (always recorded as a decision
//! record), the creation of the action it authorises, idempotent replays, and the claim folded
//! into a recorded guard call.
//!
//! An action's id is the client's `action_id`, or derived from the principal and the
//! `idempotency_key` ([`idempotent_action_id`]), or random. A replay of a creation under the
//! same id by the same principal answers the existing action with `idempotent_replay: true`
//! and writes nothing; another principal's id is a 409.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::App;
use super::extract::{Caller, JsonObject};
use super::reads::{action_view, decision_of, opt};
use super::respond::{reply_or, validation};
use crate::canonical::Value;
use crate::finality::batch::{self, Overlay};
use crate::finality::decision::{Decision, DecisionId};
use crate::finality::{
    self, ActionId, ClaimRequest, Lifecycle, NewAction, State as ActionState, Verdict,
};
use crate::server::writer::Answer;
use crate::server::{Clock, auth};
use crate::time::Timestamp;

/// What a guard or create request asks about.
#[derive(Clone, Debug)]
struct Intent {
    action_type: String,
    agent_id: Option<String>,
    act: Option<Value>,
    capabilities: Vec<String>,
    idempotency_key: Option<String>,
    action_id: Option<ActionId>,
    status: Option<Lifecycle>,
}

fn machine(v: &str, field: &str, details: &mut Vec<String>) -> Option<String> {
    match crate::privacy::machine_text(v, field, finality::MAX_ID_UNITS) {
        Ok(t) if t == v => Some(t),
        Ok(_) => {
            details.push(format!("{field} must not have surrounding whitespace"));
            None
        }
        Err(e) => {
            details.push(e.to_string());
            None
        }
    }
}

/// The intent of a guard or create body (`text` is the body's text, for the act's number rule).
/// An act the act hash cannot hash one to one ([`finality::check_act`],
/// [`finality::check_act_text`]) is a field rule broken, here for the guard as for the
/// creation: a decision about an act must name the act it was about.
fn parse_intent(body: &Value, text: &str, create: bool) -> Result<Intent, Vec<String>> {
    let mut details = Vec::new();
    let map = body.as_object().expect("checked by object_body");
    if let Some(act) = map.get("act").filter(|a| !matches!(a, Value::Null))
        && let Err(e) =
            finality::check_act(act).and_then(|()| finality::check_act_text(text, "/act"))
    {
        details.push(e.to_string());
    }
    let action_type = match map.get("action_type") {
        Some(Value::String(s)) => machine(s, "action_type", &mut details),
        _ => {
            details.push("action_type is required (a string)".into());
            None
        }
    };
    let agent_id = match map.get("agent_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => machine(s, "agent_id", &mut details),
        Some(_) => {
            details.push("agent_id must be a string".into());
            None
        }
    };
    let capabilities = match map.get("client_capabilities") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(|i| matches!(i, Value::String(_))) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        Some(_) => {
            details.push("client_capabilities must be an array of strings".into());
            Vec::new()
        }
    };
    let idempotency_key = match map.get("idempotency_key") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && crate::privacy::utf16_len(s) <= 256 => {
            Some(s.clone())
        }
        Some(_) => {
            details.push("idempotency_key must be a string of 1 to 256 characters".into());
            None
        }
    };
    let mut action_id = None;
    let mut status = None;
    if create {
        match map.get("action_id") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => match ActionId::parse(s) {
                Some(id) => action_id = Some(id),
                None => details.push("action_id must match ^[A-Za-z0-9_-]{1,128}$".into()),
            },
            Some(_) => details.push("action_id must be a string".into()),
        }
        match map.get("status") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                match Lifecycle::parse(s).filter(|l| l.is_client_settable()) {
                    Some(l) => status = Some(l),
                    None => details.push(format!("status {s:?} is not a client-settable status")),
                }
            }
            Some(_) => details.push("status must be a string".into()),
        }
        if agent_id.is_none() && !map.contains_key("agent_id") {
            details.push("agent_id is required".into());
        }
    }
    match (details.is_empty(), action_type) {
        (true, Some(action_type)) => Ok(Intent {
            action_type,
            agent_id,
            act: map
                .get("act")
                .cloned()
                .filter(|a| !matches!(a, Value::Null)),
            capabilities,
            idempotency_key,
            action_id,
            status,
        }),
        _ => Err(details),
    }
}

/// 16 random bytes in hex, for decision and action ids (they must be unique, not secret). Should
/// the kernel's generator fail, a hash of the injected clock and a process-wide counter stands in.
fn random_hex(clock: &dyn Clock) -> String {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let d = auth::sha256(format!("{}:{n}", clock.now().millis()).as_bytes());
                buf.copy_from_slice(&d[..16]);
                filled = buf.len();
            }
        }
    }
    hex::encode(buf)
}

/// The action id an idempotency key stands for: the same key from the same principal always
/// names the same action, so a replay finds the original.
pub fn idempotent_action_id(principal: &str, key: &str) -> ActionId {
    let d = auth::sha256(format!("action-ledger idempotency\n{principal}\n{key}").as_bytes());
    ActionId::parse(&format!("act_{}", hex::encode(&d[..16]))).expect("hex is a valid id")
}

/// The policy decision for an intent (its time is set when it is planned).
fn decide(app: &App, intent: &Intent, principal: &str) -> Decision {
    let kind = intent
        .act
        .as_ref()
        .and_then(|a| a.get("kind"))
        .and_then(Value::as_str);
    let mut e =
        app.settings
            .policy
            .evaluate(Some(&intent.action_type), kind, intent.agent_id.as_deref());
    // A client that does not declare it cannot hold a contained action: negotiated down.
    if e.verdict == Verdict::AllowContained
        && !intent.capabilities.iter().any(|c| c == "allow_contained")
    {
        e.verdict = Verdict::RequireApproval;
        e.containment_ref = None;
        e.reason = Some(
            "allow_contained negotiated down to require_approval: the client did not declare allow_contained"
                .into(),
        );
    }
    Decision {
        decision_id: DecisionId::parse(&format!("gd_{}", random_hex(app.settings.clock.as_ref())))
            .expect("a valid id"),
        verdict: e.verdict,
        rule: e.rule,
        reason: e.reason,
        action_type: Some(intent.action_type.clone()),
        agent_id: intent.agent_id.clone(),
        principal: principal.to_owned(),
        act_content_hash: finality::act_content_hash(
            intent.act.as_ref().map(finality::scrub_act).as_ref(),
        ),
        containment_ref: e.containment_ref,
        decided_at: Timestamp::from_millis(0),
    }
}

fn decision_value(d: &Decision) -> Vec<(&'static str, Value)> {
    let reasons = d.reason.iter().map(|r| Value::str(r.as_str())).collect();
    let warnings = if d.verdict == Verdict::Warn {
        d.reason.iter().map(|r| Value::str(r.as_str())).collect()
    } else {
        Vec::new()
    };
    let mut v = vec![
        ("decision", Value::str(d.verdict.as_str())),
        ("decision_id", Value::str(d.decision_id.as_str())),
        ("reason", opt(d.reason.clone())),
        ("reasons", Value::Array(reasons)),
        ("warnings", Value::Array(warnings)),
        (
            "matched_policies",
            Value::Array(d.rule.iter().map(|r| Value::str(r.as_str())).collect()),
        ),
        ("signals", Value::Array(Vec::new())),
        ("risk_score", Value::Null),
        ("agent_id", opt(d.agent_id.clone())),
        ("verification_status", Value::str("unverified")),
        ("execution_claim_required", Value::Bool(true)),
        ("claim_protocol", Value::from(1)),
    ];
    if let Some(r) = &d.containment_ref {
        v.push((
            "containment",
            Value::object([
                ("status", Value::str("contained")),
                ("basis", Value::str(r.as_str())),
            ]),
        ));
    }
    v
}

/// A replayed action's decision: its record when there is one, else what the action says.
fn replayed_decision(ov: &Overlay<'_>, state: &ActionState) -> Decision {
    decision_of(ov, state).unwrap_or_else(|| Decision {
        decision_id: state
            .action
            .guard_decision_id
            .as_deref()
            .and_then(DecisionId::parse)
            .unwrap_or_else(|| state.action.action_id.clone()),
        verdict: state.action.guard_verdict,
        rule: None,
        reason: None,
        action_type: None,
        agent_id: Some(state.action.agent_id.clone()),
        principal: state.action.created_by.clone(),
        act_content_hash: state.action.act_content_hash.clone(),
        containment_ref: state.action.containment_ref.clone(),
        decided_at: state.action.created_at,
    })
}

fn new_action(intent: &Intent, d: &Decision, id: ActionId, principal: &str) -> NewAction {
    NewAction {
        action_id: id,
        agent_id: intent.agent_id.clone().unwrap_or_default(),
        principal: principal.to_owned(),
        act: intent.act.clone(),
        guard_decision_id: Some(d.decision_id.as_str().to_owned()),
        verdict: d.verdict,
        client_capabilities: intent.capabilities.clone(),
        identity_verified: false,
        containment_ref: d.containment_ref.clone(),
        lifecycle: intent.status.filter(|_| d.verdict.is_permissive()),
    }
}

/// Stages the guard's `decision`, stamped `now`; answers the record as staged.
fn record_decision(
    ov: &mut Overlay<'_>,
    decision: &Decision,
    now: Timestamp,
) -> Result<Decision, finality::Error> {
    let mut d = decision.clone();
    d.decided_at = now;
    batch::decide(ov, &d)?;
    Ok(d)
}

/// Stages the guard's `decision` (as [`record_decision`]) and the new action `action_id` it
/// governs; answers both as staged.
fn record_action(
    ov: &mut Overlay<'_>,
    decision: &Decision,
    intent: &Intent,
    action_id: &ActionId,
    principal: &str,
    now: Timestamp,
) -> Result<(Decision, ActionState), finality::Error> {
    let d = record_decision(ov, decision, now)?;
    let created = batch::create(
        ov,
        &new_action(intent, &d, action_id.clone(), principal),
        now,
    )?;
    Ok((d, created.state))
}

fn target_action_id(intent: &Intent, principal: &str, clock: &dyn Clock) -> ActionId {
    intent
        .action_id
        .clone()
        .or_else(|| {
            intent
                .idempotency_key
                .as_deref()
                .map(|k| idempotent_action_id(principal, k))
        })
        .unwrap_or_else(|| {
            ActionId::parse(&format!("act_{}", random_hex(clock))).expect("a valid id")
        })
}

/// A folded claim asked for in a guard body.
struct Fold {
    attempt_id: String,
}

fn fold_of(body: &Value) -> Option<Fold> {
    let map = body.as_object()?;
    if map.get("claim_execution") != Some(&Value::Bool(true)) {
        return None;
    }
    Some(Fold {
        attempt_id: map.get("attempt_id")?.as_str()?.to_owned(),
    })
}

pub(super) async fn guard(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    caller: Caller,
    JsonObject(body, text): JsonObject,
) -> Response {
    let record = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .any(|(k, v)| k == "record" && (v == "true" || v == "1"));
    let intent = match parse_intent(&body, &text, false) {
        Ok(i) => i,
        Err(details) => return validation(details),
    };
    if record && intent.agent_id.is_none() {
        return validation(vec!["agent_id is required to record the action".into()]);
    }
    let decision = decide(&app, &intent, &caller.principal);
    let fold = fold_of(&body).filter(|_| record);
    let principal = caller.principal.clone();
    let action_id =
        record.then(|| target_action_id(&intent, &principal, app.settings.clock.as_ref()));
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let mut fields: Vec<(&'static str, Value)>;
            let Some(action_id) = &action_id else {
                let d = record_decision(ov, &decision, now)?;
                return Ok(Answer::new(200, Value::object(decision_value(&d))));
            };
            let state = match ov.state(action_id)? {
                Some(existing) => {
                    if existing.action.created_by != principal {
                        return Err(finality::Error::ActionExists {
                            action_id: action_id.clone(),
                        });
                    }
                    fields = decision_value(&replayed_decision(ov, &existing));
                    fields.push(("idempotent_replay", Value::Bool(true)));
                    existing
                }
                None => {
                    let (d, state) =
                        record_action(ov, &decision, &intent, action_id, &principal, now)?;
                    fields = decision_value(&d);
                    state
                }
            };
            fields.push(("recorded", Value::Bool(true)));
            fields.push(("action_id", Value::str(action_id.as_str())));
            fields.push(("action_status", Value::str(state.lifecycle().as_str())));
            let verdict = state.action.guard_verdict;
            if let Some(fold) = &fold
                && matches!(verdict, Verdict::Allow | Verdict::Warn)
            {
                let request = ClaimRequest {
                    attempt_id: fold.attempt_id.clone(),
                    agent_id: intent.agent_id.clone(),
                    principal: Some(principal.clone()),
                    act: intent.act.clone(),
                    verified: false,
                };
                let reason = batch::claim_refusal(&state, &request, now).map(|r| r.as_str());
                fields.push(("attempt_id", Value::str(fold.attempt_id.as_str())));
                match batch::claim(ov, action_id.as_str(), &request, now) {
                    Ok(c) => {
                        fields.push(("claimed", Value::Bool(true)));
                        fields.push((
                            "claimed_at",
                            Value::str(finality::format_time(c.claimed_at)),
                        ));
                    }
                    Err(
                        finality::Error::InvalidClaim { .. } | finality::Error::InvalidInput { .. },
                    ) => {
                        fields.push(("claimed", Value::Bool(false)));
                        fields.push(("claim_error", Value::str("INVALID_EXECUTION_CLAIM")));
                    }
                    Err(finality::Error::ClaimConflict { .. })
                        if reason == Some("claim_conflict") =>
                    {
                        fields.push(("claimed", Value::Bool(false)));
                        fields.push(("claim_error", Value::str("EXECUTION_CLAIM_CONFLICT")));
                    }
                    Err(_) => {
                        fields.push(("claimed", Value::Bool(false)));
                        fields.push(("claim_error", Value::str("EXECUTION_CLAIM_UNAVAILABLE")));
                        fields.push(("claim_reason", Value::str(reason.unwrap_or("unavailable"))));
                    }
                }
            }
            Ok(Answer::new(200, Value::object(fields)))
        },
    );
    let reply = app.writer.submit(op).await;
    reply_or(reply, |_| None)
}

pub(super) fn security_value(security: &finality::Security, critical: usize) -> Value {
    let Value::Object(mut m) = security.to_value() else {
        unreachable!("an object")
    };
    m.insert("critical_count".into(), Value::from(critical as i64));
    Value::Object(m)
}

pub(super) async fn create(
    State(app): State<Arc<App>>,
    caller: Caller,
    JsonObject(body, text): JsonObject,
) -> Response {
    let intent = match parse_intent(&body, &text, true) {
        Ok(i) => i,
        Err(details) => return validation(details),
    };
    let decision = decide(&app, &intent, &caller.principal);
    let principal = caller.principal.clone();
    let action_id = target_action_id(&intent, &principal, app.settings.clock.as_ref());
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            if let Some(existing) = ov.state(&action_id)? {
                if existing.action.created_by != principal {
                    return Err(finality::Error::ActionExists {
                        action_id: action_id.clone(),
                    });
                }
                let d = replayed_decision(ov, &existing);
                return Ok(Answer::new(
                    200,
                    Value::object([
                        ("action", action_view(&existing, Some(&d))),
                        ("action_id", Value::str(action_id.as_str())),
                        ("idempotent_replay", Value::Bool(true)),
                    ]),
                ));
            }
            let (d, state) = record_action(ov, &decision, &intent, &action_id, &principal, now)?;
            let view = action_view(&state, Some(&d));
            let decision = Value::object(decision_value(&d));
            if d.verdict == Verdict::Block {
                return Ok(Answer::new(
                    403,
                    Value::object([
                        ("error", Value::str("Action blocked by policy")),
                        ("action", view),
                        ("action_id", Value::str(action_id.as_str())),
                        ("decision", decision),
                    ]),
                ));
            }
            let status = if d.verdict == Verdict::RequireApproval {
                202
            } else {
                201
            };
            Ok(Answer::new(
                status,
                Value::object([
                    ("action", view),
                    ("action_id", Value::str(action_id.as_str())),
                    ("decision", decision),
                    (
                        "security",
                        security_value(&finality::Security::default(), 0),
                    ),
                ]),
            ))
        },
    );
    reply_or(app.writer.submit(op).await, |_| None)
}
