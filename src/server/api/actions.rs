//! `POST /api/guard` and `POST /api/actions`: the guard decision (always recorded as a decision
//! record), the creation of the action it authorises, idempotent replays, and the claim folded
//! into a recorded guard call.
//!
//! An action's id is the client's `action_id`, or derived from the principal and the
//! `idempotency_key` ([`idempotent_action_id`]), or random.
//!
//! # The idempotency rule
//!
//! The two routes that create (`POST /api/actions`, and `POST /api/guard?record=true`) take an
//! `idempotency_key`; they share one id space, so a key names one action whichever route used it
//! first. A request under a taken id is compared with what the ledger stored for the first one
//! (its *binding*): the `action_type` (in the guard decision record), the `agent_id`, the
//! principal, the act's hash, `execution_claims` among the capabilities (the protocol),
//! `allow_contained` among them when the stored action is contained, and the initial `status`.
//!
//! - **Same binding**: a replay. Nothing is written and nothing is decided again; the answer is
//!   the first request's status and body shape, from the stored decision (its verdict even if
//!   the policy changed since), with `idempotent_replay: true`: `POST /api/actions` answers 201,
//!   202 or 403 (`error: "Action blocked by policy"`) as the first did, the guard 200 with the
//!   stored decision. A folded claim is not replayed as a new claim: if the action's claim holds
//!   the same `attempt_id`, the replay reports that claim (`claimed: true`, its `claimed_at`,
//!   no write); any other attempt id is a new claim and loses to the existing one.
//! - **Another binding under the same key**: 422 `IDEMPOTENCY_KEY_REUSED`, with `details` naming
//!   the fields that differ; nothing is written, no decision is answered. 422 is what the IETF
//!   `Idempotency-Key` draft prescribes for a key reused with another payload (it keeps 409 for
//!   a request still in flight, which the serialised writer never has), and it keeps the case
//!   apart from 409 `ACTION_EXISTS`.
//! - **Another binding under an explicit `action_id`**, or an id taken by another principal:
//!   409 `ACTION_EXISTS`, as `action create --id` refuses it.
//!
//! The details of the full action record (`declared_goal`, `risk_score`, `systems_touched`,
//! `reasoning`, …; [`finality::details`]) are stored but not compared, nor are other
//! capabilities: a replay answers the action as the first request stored it, as the
//! reference's idempotency short-circuit returns its existing row. A request refused before
//! anything is written (400 validation, 401, 5xx when the store is unavailable) stored nothing,
//! so a retry under the same key is a first request and may create.
//!
//! # The full action record
//!
//! Both creating routes keep the body's detail fields and the act in `action.json`
//! ([`finality::details`] gives the fields, their rules and the redaction): a field that breaks
//! its rule (a wrong type, a text or array over the reference's limit, a number out of range)
//! is refused with 400 `Validation failed` and `details` naming the field and the rule in the
//! reference's words (`risk_score must be <= 100`), and nothing is written; the plain guard
//! checks the same rules. The answer's `security` block counts what the redaction replaced.
//! `GET /api/actions/{id}` and the listing answer the fields in the action row, and `GET
//! /api/actions/{id}` the assumptions as the reference's assumption rows beside it.

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
use crate::server::auth;
use crate::server::writer::{Answer, Event};
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
    /// `approval_wait_seconds`, rounded and clamped as the reference does.
    approval_wait: Option<u32>,
    /// The reference's descriptive fields of the body (goal, risk, systems, …), checked
    /// against their rules; stored, with the act, when the intent creates an action.
    details: finality::Details,
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
    let mut problems = Vec::new();
    let map = body.as_object().expect("checked by object_body");
    if let Some(act) = map.get("act").filter(|a| !matches!(a, Value::Null))
        && let Err(e) =
            finality::check_act(act).and_then(|()| finality::check_act_text(text, "/act"))
    {
        problems.push(e.to_string());
    }
    let action_type = match map.get("action_type") {
        Some(Value::String(s)) => machine(s, "action_type", &mut problems),
        _ => {
            problems.push("action_type is required (a string)".into());
            None
        }
    };
    let agent_id = match map.get("agent_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => machine(s, "agent_id", &mut problems),
        Some(_) => {
            problems.push("agent_id must be a string".into());
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
            problems.push("client_capabilities must be an array of strings".into());
            Vec::new()
        }
    };
    let idempotency_key = match map.get("idempotency_key") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && crate::privacy::utf16_len(s) <= 256 => {
            Some(s.clone())
        }
        Some(_) => {
            problems.push("idempotency_key must be a string of 1 to 256 characters".into());
            None
        }
    };
    let approval_wait = match map.get("approval_wait_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(n) => finality::approval::approval_wait_seconds(n),
            None => {
                problems.push("approval_wait_seconds must be a number (seconds)".into());
                None
            }
        },
    };
    let details = match finality::Details::from_request(map) {
        Ok(d) => d,
        Err(errors) => {
            problems.extend(errors.iter().map(ToString::to_string));
            finality::Details::default()
        }
    };
    let mut action_id = None;
    let mut status = None;
    if create {
        match map.get("action_id") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => match ActionId::parse(s) {
                Some(id) => action_id = Some(id),
                None => problems.push("action_id must match ^[A-Za-z0-9_-]{1,128}$".into()),
            },
            Some(_) => problems.push("action_id must be a string".into()),
        }
        match map.get("status") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                match Lifecycle::parse(s).filter(|l| l.is_client_settable()) {
                    Some(l) => status = Some(l),
                    None => problems.push(format!("status {s:?} is not a client-settable status")),
                }
            }
            Some(_) => problems.push("status must be a string".into()),
        }
        if agent_id.is_none() && !map.contains_key("agent_id") {
            problems.push("agent_id is required".into());
        }
    }
    match (problems.is_empty(), action_type) {
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
            approval_wait,
            details,
        }),
        _ => Err(problems),
    }
}

/// 16 random bytes in hex ([`crate::random::hex16`]), for decision and action ids (they
/// must be unique, not secret). Should the kernel's generator fail, the request is answered 503
/// and nothing is recorded: a clock-derived stand-in could repeat across processes.
fn random_hex() -> Result<String, Response> {
    crate::random::hex16().map_err(|e| super::respond::unavailable(&e.to_string()))
}

/// The action id an idempotency key stands for: the same key from the same principal always
/// names the same action, so a replay finds the original.
pub fn idempotent_action_id(principal: &str, key: &str) -> ActionId {
    let d = auth::sha256(format!("action-ledger idempotency\n{principal}\n{key}").as_bytes());
    ActionId::parse(&format!("act_{}", hex::encode(&d[..16]))).expect("hex is a valid id")
}

/// The policy decision for an intent (its time is set when it is planned).
fn decide(intent: &Intent, caller: &Caller) -> Result<Decision, Response> {
    let principal = caller.principal.as_str();
    let kind = intent
        .act
        .as_ref()
        .and_then(|a| a.get("kind"))
        .and_then(Value::as_str);
    let mut e =
        caller
            .access
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
    Ok(Decision {
        decision_id: DecisionId::parse(&format!("gd_{}", random_hex()?)).expect("a valid id"),
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
    })
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

/// How a request under a taken action id stands to the action there (see the module docs).
enum Taken {
    /// The same binding: answer as the first request was answered, from its decision.
    Replay(Decision),
    /// Another binding under the same idempotency key: what differs.
    KeyReused(Vec<String>),
}

/// What of `intent`'s binding differs from the stored `state`, whose decision record is
/// `decision`; empty for a replay.
fn binding_differences(
    state: &ActionState,
    decision: Option<&Decision>,
    intent: &Intent,
) -> Vec<String> {
    let a = &state.action;
    let mut out = Vec::new();
    let mut differs = |field: &str| {
        out.push(format!(
            "{field} differs from the request that first used this id"
        ));
    };
    match decision {
        Some(d) if d.action_type.as_deref() == Some(intent.action_type.as_str()) => {}
        Some(_) => differs("action_type"),
        // Not created through this server: there is no decision to compare the type with.
        None => differs("action_type"),
    }
    if intent.agent_id.as_deref().unwrap_or_default() != a.agent_id {
        differs("agent_id");
    }
    let hash = finality::act_content_hash(intent.act.as_ref().map(finality::scrub_act).as_ref());
    if hash != a.act_content_hash {
        differs("act");
    }
    let declares = |c: &str| intent.capabilities.iter().any(|x| x == c);
    if declares(finality::EXECUTION_CLAIMS) != (a.execution_protocol == Some(1)) {
        differs("client_capabilities (execution_claims)");
    }
    // A client that does not declare allow_contained can never hold a contained action.
    if a.guard_verdict == Verdict::AllowContained && !declares("allow_contained") {
        differs("client_capabilities (allow_contained)");
    }
    let lifecycle = intent
        .status
        .filter(|_| a.guard_verdict.is_permissive())
        .unwrap_or_else(|| a.guard_verdict.initial_lifecycle());
    if lifecycle != a.lifecycle {
        differs("status");
    }
    out
}

/// Compares a request with the action `existing` under its id: a replay, a reused key, or
/// [`finality::Error::ActionExists`] (an explicit id, or another principal's action).
fn taken(
    ov: &Overlay<'_>,
    existing: &ActionState,
    intent: &Intent,
    principal: &str,
) -> Result<Taken, finality::Error> {
    let exists = || finality::Error::ActionExists {
        action_id: existing.action.action_id.clone(),
    };
    if existing.action.created_by != principal {
        return Err(exists());
    }
    let decision = decision_of(ov, existing);
    let differences = binding_differences(existing, decision.as_ref(), intent);
    match decision {
        Some(d) if differences.is_empty() => Ok(Taken::Replay(d)),
        _ if intent.action_id.is_some() || intent.idempotency_key.is_none() => Err(exists()),
        _ => Ok(Taken::KeyReused(differences)),
    }
}

/// 422 `IDEMPOTENCY_KEY_REUSED`: the key was first used for another request.
fn key_reused(differences: Vec<String>) -> Answer {
    Answer::new(
        422,
        Value::object([
            (
                "error",
                Value::str(
                    "This idempotency key was first used for a different request; send a new key for a new request",
                ),
            ),
            ("code", Value::str("IDEMPOTENCY_KEY_REUSED")),
            (
                "details",
                Value::Array(differences.into_iter().map(Value::String).collect()),
            ),
        ]),
    )
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
        // Kept only where it matters: other actions' records keep their bytes.
        approval_wait_seconds: intent
            .approval_wait
            .filter(|_| d.verdict == finality::Verdict::RequireApproval),
        details: Some(intent.details.clone()),
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

fn target_action_id(intent: &Intent, principal: &str) -> Result<ActionId, Response> {
    if let Some(id) = &intent.action_id {
        return Ok(id.clone());
    }
    if let Some(key) = intent.idempotency_key.as_deref() {
        return Ok(idempotent_action_id(principal, key));
    }
    Ok(ActionId::parse(&format!("act_{}", random_hex()?)).expect("a valid id"))
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
    if record
        && let Err(e) = intent
            .details
            .stored(intent.act.as_ref(), &mut finality::Security::default())
    {
        return validation(vec![e.to_string()]);
    }
    let decision = match decide(&intent, &caller) {
        Ok(d) => d,
        Err(unavailable) => return unavailable,
    };
    let fold = fold_of(&body).filter(|_| record);
    let principal = caller.principal.clone();
    let action_id = match record
        .then(|| target_action_id(&intent, &principal))
        .transpose()
    {
        Ok(id) => id,
        Err(unavailable) => return unavailable,
    };
    let witnessed = action_id.clone();
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let mut fields: Vec<(&'static str, Value)>;
            let Some(action_id) = &action_id else {
                let d = record_decision(ov, &decision, now)?;
                return Ok(Answer::new(200, Value::object(decision_value(&d))));
            };
            let mut replayed = false;
            let state = match ov.state(action_id)? {
                Some(existing) => match taken(ov, &existing, &intent, &principal)? {
                    Taken::Replay(d) => {
                        fields = decision_value(&d);
                        fields.push(("idempotent_replay", Value::Bool(true)));
                        replayed = true;
                        existing
                    }
                    Taken::KeyReused(differences) => return Ok(key_reused(differences)),
                },
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
            let mut changed = !replayed;
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
                // A replay whose attempt holds the claim reports it; nothing is granted again.
                let own_claim = state
                    .claim
                    .as_ref()
                    .filter(|c| replayed && c.attempt_id.as_str() == fold.attempt_id);
                let fresh = own_claim.is_none();
                match own_claim.map_or_else(
                    || batch::claim(ov, action_id.as_str(), &request, now),
                    |c| Ok(c.clone()),
                ) {
                    Ok(c) => {
                        changed |= fresh;
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
            let mut answer = Answer::new(200, Value::object(fields));
            // The stream is told of the new action (as it reads after a folded claim), or of a
            // replay's newly granted claim.
            if changed && let Some(now_state) = ov.state(action_id)? {
                let row = action_view(&now_state, decision_of(ov, &now_state).as_ref());
                answer = answer.with_event(if replayed {
                    Event::updated(&now_state, row)
                } else {
                    Event::created(&now_state, row)
                });
            }
            Ok(answer)
        },
    );
    let reply = app.writer.submit(op).await;
    if let (Ok(_), Some(id)) = (&reply, &witnessed) {
        app.witness(id);
    }
    reply_or(reply, |_| None)
}

pub(super) fn security_value(security: &finality::Security, critical: usize) -> Value {
    let Value::Object(mut m) = security.to_value() else {
        unreachable!("an object")
    };
    m.insert("critical_count".into(), Value::from(critical as i64));
    Value::Object(m)
}

/// The answer of a creation, the same for its replays (marked `idempotent_replay`): 403 for a
/// blocked action, 202 for one awaiting approval, 201 otherwise.
fn created_answer(
    d: &Decision,
    state: &ActionState,
    replayed: bool,
    security: &finality::Security,
) -> Answer {
    let action_id = Value::str(state.action.action_id.as_str());
    let mut fields = vec![("action", action_view(state, Some(d)))];
    let status = match d.verdict {
        Verdict::Block => {
            fields.push(("error", Value::str("Action blocked by policy")));
            403
        }
        Verdict::RequireApproval => 202,
        _ => 201,
    };
    fields.push(("action_id", action_id));
    fields.push(("decision", Value::object(decision_value(d))));
    if d.verdict != Verdict::Block {
        fields.push(("security", security_value(security, 0)));
    }
    if replayed {
        fields.push(("idempotent_replay", Value::Bool(true)));
        return Answer::new(status, Value::object(fields));
    }
    let row = fields[0].1.clone();
    Answer::new(status, Value::object(fields)).with_event(Event::created(state, row))
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
    let decision = match decide(&intent, &caller) {
        Ok(d) => d,
        Err(unavailable) => return unavailable,
    };
    let principal = caller.principal.clone();
    let action_id = match target_action_id(&intent, &principal) {
        Ok(id) => id,
        Err(unavailable) => return unavailable,
    };
    let witnessed = action_id.clone();
    // What the redaction of the details and the act found, for the answer's `security` block
    // (the reference's DLP findings); a storing error is the creation's own, answered by it.
    let mut security = finality::Security::default();
    if let Err(e) = intent.details.stored(intent.act.as_ref(), &mut security) {
        return validation(vec![e.to_string()]);
    }
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: Timestamp| -> Result<Answer, finality::Error> {
            let (d, state, replayed) = match ov.state(&action_id)? {
                Some(existing) => match taken(ov, &existing, &intent, &principal)? {
                    Taken::Replay(d) => (d, existing, true),
                    Taken::KeyReused(differences) => return Ok(key_reused(differences)),
                },
                None => {
                    let (d, state) =
                        record_action(ov, &decision, &intent, &action_id, &principal, now)?;
                    (d, state, false)
                }
            };
            Ok(created_answer(&d, &state, replayed, &security))
        },
    );
    let reply = app.writer.submit(op).await;
    if reply.is_ok() {
        app.witness(&witnessed);
    }
    reply_or(reply, |_| None)
}
