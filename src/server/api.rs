//! The HTTP endpoints: routes, authentication, request parsing, and the mapping of finality
//! results onto the reference's status codes, bodies and refusal codes.
//!
//! | Route | What |
//! |---|---|
//! | `POST /api/guard[?record=true]` | policy decision (recorded); with `record`, the action; a folded claim |
//! | `POST /api/actions` | create an action (201, 202 pending approval, 403 blocked) |
//! | `GET /api/actions/{id}` | the action (`{action:{…}}`) |
//! | `PATCH /api/actions/{id}` | the claim (`claim_execution`), or the legacy close (`status`) |
//! | `GET`/`POST /api/actions/{id}/outcome` | the one-shot outcome |
//! | `POST /api/actions/{id}/approve` | an operator's approval or denial |
//! | `GET /api/cron/outcome-sweep` | the stale-outcome sweep (`Authorization: Bearer` cron secret) |
//! | `GET /healthz` | 200 when the repository is readable |
//!
//! Every answer is JSON, errors included (`{"error": …}`, with `code` where the reference has
//! one).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::auth::{self, Key};
use super::writer::{Answer, Handle, Reply, Writer};
use super::{Error, MAX_BODY_BYTES, Settings};
use crate::canonical::{self, Value};
use crate::finality::batch::{self, BatchError, Overlay};
use crate::finality::decision::{Decision, DecisionId};
use crate::finality::{
    self, ActionId, ApprovalDecision, ClaimRequest, Lifecycle, NewAction, OutcomeReport,
    State as ActionState, Verdict,
};
use crate::store::{self, Store};

/// The shared state of the handlers.
pub struct App {
    /// The settings the server was started with.
    pub settings: Settings,
    writer: Writer,
    cron_digest: Option<[u8; 32]>,
}

/// The principal of an authenticated request.
#[derive(Clone, Debug)]
struct Caller {
    principal: String,
    operator: bool,
}

impl App {
    /// Opens (locally: creates when absent) the repository and starts the writer.
    ///
    /// # Errors
    /// [`Error::Repo`], [`Error::Thread`].
    pub fn start(settings: Settings) -> Result<(Arc<App>, Handle), Error> {
        let repo_err = |source| Error::Repo {
            path: settings.repo.display().to_string(),
            source,
        };
        let head = match &settings.target {
            Target::Local => &settings.options.ref_name,
            Target::Remote { ref_name, .. } => ref_name,
        };
        drop(Store::open_or_init_bare(&settings.repo, head).map_err(repo_err)?);
        let (writer, handle) = Writer::start(
            settings.repo.clone(),
            settings.options.clone(),
            settings.target.clone(),
            settings.clock.clone(),
            settings.max_batch,
        )
        .map_err(Error::Thread)?;
        let cron_digest = settings
            .cron_secret
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| auth::sha256(s.as_bytes()));
        Ok((
            Arc::new(App {
                settings,
                writer,
                cron_digest,
            }),
            handle,
        ))
    }
}

use crate::finality::batch::Target;

/// The router of every endpoint, with JSON 404 and 405 fallbacks.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/guard", post(guard))
        .route("/api/actions", post(create))
        .route("/api/actions/{id}", get(get_action).patch(patch_action))
        .route(
            "/api/actions/{id}/outcome",
            get(get_outcome).post(post_outcome),
        )
        .route("/api/actions/{id}/approve", post(approve))
        .route("/api/cron/outcome-sweep", get(cron_sweep))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(app)
}

/// Starts the timer sweep when configured.
pub fn spawn_sweeper(app: &Arc<App>) -> Option<tokio::task::JoinHandle<()>> {
    let every = app.settings.sweep_every?;
    let app = app.clone();
    Some(tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            interval.tick().await;
            match run_sweep(&app).await {
                Ok(a) => {
                    let n = a
                        .body
                        .get("rows_swept")
                        .and_then(Value::as_f64)
                        .unwrap_or(0.0);
                    if n > 0.0 {
                        (app.settings.log)(&format!(
                            "sweep: {n} stale outcome(s) to lost_confirmation"
                        ));
                    }
                }
                Err(e) => (app.settings.log)(&format!("sweep failed: {e}")),
            }
        }
    }))
}

// ---------------------------------------------------------------------------------------------
// Responses

fn json(status: u16, body: Value) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        canonical::to_canonical_unchecked(&body),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error(status: u16, message: impl Into<String>) -> Response {
    json(status, Value::object([("error", Value::str(message))]))
}

fn error_with(
    status: u16,
    message: impl Into<String>,
    extra: impl IntoIterator<Item = (&'static str, Value)>,
) -> Response {
    let mut v = vec![("error", Value::str(message))];
    v.extend(extra);
    json(status, Value::object(v))
}

fn answer(a: Answer) -> Response {
    let no_store = a.no_store;
    let mut r = json(a.status, a.body);
    if no_store {
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

fn validation(details: Vec<String>) -> Response {
    error_with(
        400,
        "Validation failed",
        [(
            "details",
            Value::Array(details.into_iter().map(Value::str).collect()),
        )],
    )
}

fn unavailable(reason: &str) -> Response {
    error_with(
        503,
        "The ledger could not be written; nothing was recorded. Retry later.",
        [
            ("code", Value::str("LEDGER_UNAVAILABLE")),
            ("reason", Value::str(reason)),
        ],
    )
}

/// The generic mapping of a finality error onto a response (routes override specific cases).
fn finality_error(e: &finality::Error) -> Response {
    use finality::Error as E;
    match e {
        E::InvalidInput { .. } | E::InvalidStatus { .. } | E::InvalidOutcome { .. } => {
            validation(vec![e.to_string()])
        }
        E::NotFound { .. } => error(404, "Action not found"),
        E::ActionExists { .. } => error_with(
            409,
            "This action id is taken by another principal's action",
            [("code", Value::str(e.code()))],
        ),
        e if e.is_refusal() => error_with(409, e.to_string(), [("code", Value::str(e.code()))]),
        other => unavailable(&other.to_string()),
    }
}

fn reply_or(reply: Reply, map: impl FnOnce(&finality::Error) -> Option<Response>) -> Response {
    match reply {
        Ok(a) => answer(a),
        Err(BatchError::Unavailable { reason }) => unavailable(&reason),
        Err(BatchError::Refused(e)) => map(&e).unwrap_or_else(|| finality_error(&e)),
    }
}

async fn not_found() -> Response {
    error(404, "Not found")
}

async fn method_not_allowed() -> Response {
    error(405, "Method not allowed")
}

// ---------------------------------------------------------------------------------------------
// Authentication and bodies

fn authenticate(app: &App, headers: &HeaderMap) -> Result<Caller, Response> {
    if app.settings.insecure_no_auth {
        return Ok(Caller {
            principal: "anonymous".into(),
            operator: true,
        });
    }
    let presented = headers
        .get("x-api-key")
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    match app.settings.keys.authenticate(presented) {
        Some(Key {
            principal,
            operator,
            ..
        }) if !presented.is_empty() => Ok(Caller {
            principal: principal.clone(),
            operator: *operator,
        }),
        _ => Err(error(401, "Unauthorized")),
    }
}

async fn read_json(app: &App, headers: &HeaderMap, body: Body) -> Result<Value, Response> {
    let too_large = || {
        error(
            413,
            format!("Request body too large (limit {MAX_BODY_BYTES} bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let bytes = match tokio::time::timeout(
        app.settings.client_timeout,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Err(_) => return Err(error(408, "Request body timeout")),
        Ok(Err(e)) if e.to_string().contains("length limit") => return Err(too_large()),
        Ok(Err(_)) => return Err(error(400, "Could not read the request body")),
        Ok(Ok(b)) => b,
    };
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| canonical::parse(t).ok())
        .ok_or_else(|| error(400, "Invalid JSON body"))
}

fn object_body(v: &Value) -> Result<(), Response> {
    match v {
        Value::Object(_) => Ok(()),
        _ => Err(validation(vec![
            "request body must be a JSON object".into(),
        ])),
    }
}

// ---------------------------------------------------------------------------------------------
// Reads

thread_local! {
    /// One open repository per blocking thread (gix handles are not shared across threads).
    static STORE: RefCell<Option<(PathBuf, Store)>> = const { RefCell::new(None) };
}

fn with_store<T>(path: &Path, f: impl FnOnce(&Store) -> T) -> Result<T, store::Error> {
    STORE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(p, _)| p != path) {
            *slot = Some((path.to_owned(), Store::open(path)?));
        }
        Ok(f(&slot.as_ref().expect("opened above").1))
    })
}

/// Reads at the target's tip on a blocking thread.
async fn read<T: Send + 'static>(
    app: &Arc<App>,
    f: impl FnOnce(&Overlay<'_>, i64) -> Result<T, finality::Error> + Send + 'static,
) -> Result<T, finality::Error> {
    let app = app.clone();
    let joined = tokio::task::spawn_blocking(move || {
        let now = app.settings.clock.now_ms();
        with_store(&app.settings.repo, |store| {
            batch::read_at_target(store, &app.settings.options, &app.settings.target, |ov| {
                f(ov, now)
            })
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

fn decision_of(ov: &Overlay<'_>, state: &ActionState) -> Option<Decision> {
    let id = DecisionId::parse(state.action.guard_decision_id.as_deref()?)?;
    ov.decision(&id).ok().flatten()
}

fn opt(v: Option<String>) -> Value {
    v.map_or(Value::Null, Value::str)
}

fn time(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |t| Value::str(finality::format_time(t)))
}

/// The action as `GET /api/actions/{id}` shows it: the reference's row columns that exist
/// here (lifecycle `status`, outcome, claim, approval).
pub fn action_view(state: &ActionState, decision: Option<&Decision>) -> Value {
    let a = &state.action;
    let o = state.outcome.as_ref();
    let c = state.claim.as_ref();
    let p = state.approval.as_ref();
    let approved = p.filter(|p| p.decision == ApprovalDecision::Approve);
    let denied = p.filter(|p| p.decision == ApprovalDecision::Deny);
    let error_message = o
        .and_then(|o| o.error_message.clone())
        .or_else(|| denied.map(|d| format!("Operator {} denied the action.", d.decided_by)));
    let close_source = o.map(|o| match o.source {
        finality::Source::Outcome => "outcome",
        finality::Source::LegacyClose => "direct",
        finality::Source::Sweep => "sweep",
    });
    Value::object([
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
        ("outcome_at", time(o.map(|o| o.outcome_at_ms))),
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
            a.containment_ref
                .as_ref()
                .map_or(Value::Null, |_| Value::str("contained")),
        ),
        ("identity_verified", Value::Bool(a.identity_verified)),
        (
            "execution_protocol",
            a.execution_protocol.map_or(Value::Null, Value::from),
        ),
        ("execution_claimed_at", time(c.map(|c| c.claimed_at_ms))),
        (
            "execution_attempt_id",
            opt(c.map(|c| c.attempt_id.as_str().to_owned())),
        ),
        (
            "execution_guard_decision_id",
            opt(c.map(|c| c.guard_decision_id.clone())),
        ),
        ("approved_by", opt(approved.map(|p| p.decided_by.clone()))),
        ("approved_at", time(approved.map(|p| p.decided_at_ms))),
        ("denied_by", opt(denied.map(|p| p.decided_by.clone()))),
        ("denied_at", time(denied.map(|p| p.decided_at_ms))),
        (
            "approval_grant_used_at",
            time(approved.and(c).map(|c| c.claimed_at_ms)),
        ),
        ("created_at", time(Some(a.created_at_ms))),
        ("timestamp_start", time(Some(a.created_at_ms))),
        ("timestamp_end", time(o.map(|o| o.outcome_at_ms))),
    ])
}

async fn healthz(State(app): State<Arc<App>>) -> Response {
    let r = read(&app, |ov, _| Ok(ov.read(crate::finality::ROOT).is_ok())).await;
    match r {
        Ok(_) => json(
            200,
            Value::object([
                ("ok", Value::Bool(true)),
                ("ref", Value::str(app.settings.options.ref_name.as_str())),
            ]),
        ),
        Err(e) => error_with(
            503,
            "Repository unreadable",
            [("reason", Value::str(e.to_string()))],
        ),
    }
}

async fn get_action(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authenticate(&app, &headers) {
        return r;
    }
    let Some(id) = ActionId::parse(&id) else {
        return error(404, "Action not found");
    };
    let r = read(&app, move |ov, _| {
        let state = ov.state(&id)?;
        Ok(state.map(|s| {
            let d = decision_of(ov, &s);
            action_view(&s, d.as_ref())
        }))
    })
    .await;
    match r {
        Ok(Some(v)) => json(200, Value::object([("action", v)])),
        Ok(None) => error(404, "Action not found"),
        Err(e) => unavailable(&e.to_string()),
    }
}

async fn get_outcome(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = authenticate(&app, &headers) {
        return r;
    }
    let Some(id) = ActionId::parse(&id) else {
        return error(404, "Action not found");
    };
    match read(&app, move |ov, now| {
        Ok(ov.state(&id)?.map(|s| s.view(now).to_value()))
    })
    .await
    {
        Ok(Some(v)) => json(200, v),
        Ok(None) => error(404, "Action not found"),
        Err(e) => unavailable(&e.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// Guard and create

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

fn parse_intent(body: &Value, create: bool) -> Result<Intent, Vec<String>> {
    let mut details = Vec::new();
    let map = body.as_object().expect("checked by object_body");
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

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    let mut filled = 0;
    while filled < bytes {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            // No kernel randomness: fall back to a hash of the time and a counter (ids need to
            // be unique, not secret).
            Err(_) => {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let d = auth::sha256(format!("{t}:{n}:{}", std::process::id()).as_bytes());
                buf[filled..].copy_from_slice(&d[..bytes - filled]);
                filled = bytes;
            }
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// The action id an idempotency key stands for: the same key from the same principal always
/// names the same action, so a replay finds the original.
pub fn idempotent_action_id(principal: &str, key: &str) -> ActionId {
    let d = auth::sha256(format!("action-ledger idempotency\n{principal}\n{key}").as_bytes());
    let hex: String = d[..16].iter().map(|b| format!("{b:02x}")).collect();
    ActionId::parse(&format!("act_{hex}")).expect("hex is a valid id")
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
        decision_id: DecisionId::parse(&format!("gd_{}", random_hex(16))).expect("a valid id"),
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
        decided_at_ms: 0,
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
        decided_at_ms: state.action.created_at_ms,
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

fn target_action_id(intent: &Intent, principal: &str) -> ActionId {
    intent
        .action_id
        .clone()
        .or_else(|| {
            intent
                .idempotency_key
                .as_deref()
                .map(|k| idempotent_action_id(principal, k))
        })
        .unwrap_or_else(|| ActionId::parse(&format!("act_{}", random_hex(16))).expect("a valid id"))
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

async fn guard(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let caller = match authenticate(&app, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body = match read_json(&app, &headers, request.into_body()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = object_body(&body) {
        return r;
    }
    let record = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .any(|(k, v)| k == "record" && (v == "true" || v == "1"));
    let intent = match parse_intent(&body, false) {
        Ok(i) => i,
        Err(details) => return validation(details),
    };
    if record && intent.agent_id.is_none() {
        return validation(vec!["agent_id is required to record the action".into()]);
    }
    let decision = decide(&app, &intent, &caller.principal);
    let fold = fold_of(&body).filter(|_| record);
    let principal = caller.principal.clone();
    let action_id = record.then(|| target_action_id(&intent, &principal));
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
            let mut fields: Vec<(&'static str, Value)>;
            let Some(action_id) = &action_id else {
                let mut d = decision.clone();
                d.decided_at_ms = now;
                batch::decide(ov, &d)?;
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
                    let mut d = decision.clone();
                    d.decided_at_ms = now;
                    batch::decide(ov, &d)?;
                    let created = batch::create(
                        ov,
                        &new_action(&intent, &d, action_id.clone(), &principal),
                        now,
                    )?;
                    fields = decision_value(&d);
                    created.state
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
                let reason = batch::claim_refusal(&state, &request, now);
                fields.push(("attempt_id", Value::str(fold.attempt_id.as_str())));
                match batch::claim(ov, action_id.as_str(), &request, now) {
                    Ok(c) => {
                        fields.push(("claimed", Value::Bool(true)));
                        fields.push((
                            "claimed_at",
                            Value::str(finality::format_time(c.claimed_at_ms)),
                        ));
                    }
                    Err(finality::Error::InvalidClaim { .. }) => {
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

fn security_value(security: &finality::Security, critical: usize) -> Value {
    let Value::Object(mut m) = security.to_value() else {
        unreachable!("an object")
    };
    m.insert("critical_count".into(), Value::from(critical as i64));
    Value::Object(m)
}

async fn create(State(app): State<Arc<App>>, headers: HeaderMap, request: Request) -> Response {
    let caller = match authenticate(&app, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body = match read_json(&app, &headers, request.into_body()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = object_body(&body) {
        return r;
    }
    let intent = match parse_intent(&body, true) {
        Ok(i) => i,
        Err(details) => return validation(details),
    };
    let decision = decide(&app, &intent, &caller.principal);
    let principal = caller.principal.clone();
    let action_id = target_action_id(&intent, &principal);
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
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
            let mut d = decision.clone();
            d.decided_at_ms = now;
            batch::decide(ov, &d)?;
            let created = batch::create(
                ov,
                &new_action(&intent, &d, action_id.clone(), &principal),
                now,
            )?;
            let view = action_view(&created.state, Some(&d));
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

// ---------------------------------------------------------------------------------------------
// Claim, close, outcome, approve

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

fn claim_unavailable(reason: &str, action_id: &str) -> Response {
    error_with(
        503,
        "The execution claim could not be recorded; nothing was granted. Read the action back before retrying with a new attempt id.",
        [
            ("code", Value::str("EXECUTION_CLAIM_UNAVAILABLE")),
            ("action_id", Value::str(action_id)),
            ("reason", Value::str(reason)),
        ],
    )
}

async fn patch_action(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let caller = match authenticate(&app, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body = match read_json(&app, &headers, request.into_body()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = object_body(&body) {
        return r;
    }
    let map = body.as_object().expect("an object");
    if map.contains_key("claim_execution") {
        let request = match ClaimRequest::from_body(&body, Some(&caller.principal), false) {
            Ok(r) => r,
            Err(e) => return claim_error(&e, &id),
        };
        let action_id = id.clone();
        let op = Box::new(
            move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
                let c = batch::claim(ov, &action_id, &request, now)?;
                Ok(Answer {
                    status: 200,
                    body: Value::object([
                        ("claimed", Value::Bool(true)),
                        ("action_id", Value::str(c.action_id.as_str())),
                        ("attempt_id", Value::str(c.attempt_id.as_str())),
                        (
                            "claimed_at",
                            Value::str(finality::format_time(c.claimed_at_ms)),
                        ),
                    ]),
                    no_store: true,
                })
            },
        );
        return match app.writer.submit(op).await {
            Ok(a) => answer(a),
            Err(BatchError::Unavailable { reason }) => claim_unavailable(&reason, &id),
            Err(BatchError::Refused(e)) => claim_error(&e, &id),
        };
    }
    // The legacy lifecycle close; other columns of the reference (tokens, cost, model) are not
    // kept here and are ignored.
    let status = match map.get("status") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return validation(vec!["status must be a string".into()]),
    };
    let summary = match map.get("output_summary") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return validation(vec!["output_summary must be a string".into()]),
    };
    let Some(status) = status else {
        let Some(aid) = ActionId::parse(&id) else {
            return error(404, "Action not found");
        };
        return match read(&app, move |ov, _| {
            Ok(ov
                .state(&aid)?
                .map(|s| action_view(&s, decision_of(ov, &s).as_ref())))
        })
        .await
        {
            Ok(Some(v)) => json(200, Value::object([("action", v)])),
            Ok(None) => error(404, "Action not found"),
            Err(e) => unavailable(&e.to_string()),
        };
    };
    let action_id = id.clone();
    let critical = summary
        .as_deref()
        .map_or(0, |s| finality::mask_secrets(s).1);
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
            let reported = batch::close(ov, &action_id, &status, summary.as_deref(), now)?;
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
    reply_or(app.writer.submit(op).await, |e| match e {
        finality::Error::TerminalState { lifecycle, .. } => Some(error_with(
            409,
            "Action is in a terminal state and cannot be modified",
            [("status", Value::str(lifecycle.as_str()))],
        )),
        _ => None,
    })
}

fn secrets_in(v: &Value) -> usize {
    match v {
        Value::String(s) => finality::mask_secrets(s).1,
        Value::Array(items) => items.iter().map(secrets_in).sum(),
        Value::Object(m) => m.values().map(secrets_in).sum(),
        _ => 0,
    }
}

async fn post_outcome(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    if let Err(r) = authenticate(&app, &headers) {
        return r;
    }
    let body = match read_json(&app, &headers, request.into_body()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = object_body(&body) {
        return r;
    }
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
        move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
            let r = batch::report(ov, &action_id, &report, now)?;
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
            E::InvalidOutcome { reason } => error(400, *reason),
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

async fn approve(
    State(app): State<Arc<App>>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Response {
    let caller = match authenticate(&app, &headers) {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !caller.operator {
        return error_with(
            403,
            "Only operators may approve or deny actions (mark the principal `operator` in the keys file)",
            [("code", Value::str("OPERATOR_REQUIRED"))],
        );
    }
    let body = match read_json(&app, &headers, request.into_body()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = object_body(&body) {
        return r;
    }
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
        move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
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

// ---------------------------------------------------------------------------------------------
// Sweep

async fn run_sweep(app: &Arc<App>) -> Reply {
    let minutes = app.settings.timeout_minutes;
    let op = Box::new(
        move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
            let report = batch::sweep(ov, f64::from(minutes), now)?;
            Ok(Answer::new(
                200,
                Value::object([
                    ("ok", Value::Bool(true)),
                    ("orgs_scanned", Value::from(1)),
                    ("rows_swept", Value::from(report.swept.len() as i64)),
                    ("webhooks_fired", Value::from(0)),
                    (
                        "timeout_minutes",
                        Value::from(i64::from(report.timeout_minutes)),
                    ),
                    (
                        "swept",
                        Value::Array(
                            report
                                .swept
                                .iter()
                                .map(|s| Value::str(s.action_id.as_str()))
                                .collect(),
                        ),
                    ),
                    ("skipped", Value::from(report.skipped.len() as i64)),
                ]),
            ))
        },
    );
    app.writer.submit(op).await
}

async fn cron_sweep(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let Some(want) = app.cron_digest else {
        return error(503, "ACTION_LEDGER_CRON_SECRET not configured");
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes)
        .and_then(|v| v.strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if !auth::ct_eq(&auth::sha256(presented), &want) || presented.is_empty() {
        return error(401, "Unauthorized");
    }
    match run_sweep(&app).await {
        Ok(a) => answer(a),
        Err(e) => error_with(500, "Sweep failed", [("reason", Value::str(e.to_string()))]),
    }
}
