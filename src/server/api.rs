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
            settings.batch_linger,
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

/// The `{id}` of an action route. A segment that is not even UTF-8 becomes the empty id, which
/// no action has: the route then answers as for any unknown id (404, or 409 for a claim), in
/// JSON, instead of axum's plain-text rejection.
pub struct ActionPath(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ActionPath {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<ActionPath, Self::Rejection> {
        let id = axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|p| p.0)
            .unwrap_or_default();
        Ok(ActionPath(id))
    }
}

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
    /// One open repository per blocking thread (gix handles are not shared across threads),
    /// with the number of reads it served.
    static STORE: RefCell<Option<(PathBuf, Store, u32)>> = const { RefCell::new(None) };
}

/// Reads before a thread opens its repository again: an open repository has room for the pack
/// indices that were on disk when it was opened (and then some), and the writer keeps adding
/// packs.
const READS_PER_OPEN: u32 = 4096;

fn with_store<T>(path: &Path, f: impl FnOnce(&Store) -> T) -> Result<T, store::Error> {
    STORE.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot
            .as_ref()
            .is_none_or(|(p, _, reads)| p != path || *reads >= READS_PER_OPEN)
        {
            *slot = Some((path.to_owned(), Store::open(path)?, 0));
        }
        let (_, store, reads) = slot.as_mut().expect("opened above");
        *reads += 1;
        Ok(f(store))
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
    ActionPath(id): ActionPath,
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
    ActionPath(id): ActionPath,
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

/// 16 random bytes in hex, for decision and action ids (they must be unique, not secret). Should
/// the kernel's generator fail, a hash of the injected clock and a process-wide counter stands in.
fn random_hex(clock: &dyn super::Clock) -> String {
    let mut buf = [0u8; 16];
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let d = auth::sha256(format!("{}:{n}", clock.now_ms()).as_bytes());
                buf.copy_from_slice(&d[..16]);
                filled = buf.len();
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

fn target_action_id(intent: &Intent, principal: &str, clock: &dyn super::Clock) -> ActionId {
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
    let action_id =
        record.then(|| target_action_id(&intent, &principal, app.settings.clock.as_ref()));
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
    let action_id = target_action_id(&intent, &principal, app.settings.clock.as_ref());
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

/// The claim is a new policy checkpoint, not a cached receipt: the current policy is evaluated
/// again for the action's recorded type and agent and the claim's act. It still permits the
/// claim when it says `allow` or `warn`; `allow_contained` for the same containment;
/// `require_approval` (or `allow_contained` for an action that was not contained) only with an
/// operator approval that still grants; never `block`. An action without a decision record (made
/// by the CLI, with an opaque decision) has nothing to evaluate again.
fn policy_still_permits(
    policy: &super::policy::Policy,
    ov: &Overlay<'_>,
    action_id: &str,
    request: &ClaimRequest,
    now: i64,
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

async fn patch_action(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
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
        let policy = app.settings.policy.clone();
        let op = Box::new(
            move |ov: &mut Overlay<'_>, now: i64| -> Result<Answer, finality::Error> {
                if !policy_still_permits(&policy, ov, &action_id, &request, now) {
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
    ActionPath(id): ActionPath,
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

async fn approve(
    State(app): State<Arc<App>>,
    ActionPath(id): ActionPath,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::policy::Policy;
    use std::sync::atomic::{AtomicI64, Ordering};
    use tower::ServiceExt as _;

    const T0: i64 = 1_772_366_400_000; // 2026-03-01T12:00:00Z
    const BOT: &str = "k-bot";
    const OPS: &str = "k-ops";
    const OTHER: &str = "k-other";
    const POLICY: &str = r#"{"default":"allow","rules":[
        {"id":"deploys","action_type":"deploy","verdict":"require_approval","reason":"deploys need an operator"},
        {"id":"no-sql","act_kind":"sql","verdict":"block","reason":"no SQL"},
        {"id":"sandbox","act_kind":"file","verdict":"allow_contained","containment_ref":"sandbox/main"},
        {"id":"risky","action_type":"risky","verdict":"warn","reason":"be careful"}]}"#;

    struct Server {
        _tmp: tempfile::TempDir,
        repo: PathBuf,
        router: Router,
        clock: Arc<AtomicI64>,
        handle: Option<Handle>,
        app: Option<Arc<App>>,
        sweeper: Option<tokio::task::JoinHandle<()>>,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            if let Some(s) = self.sweeper.take() {
                s.abort();
            }
            self.app.take();
            self.router = Router::new();
            if let Some(h) = self.handle.take() {
                h.join();
            }
        }
    }

    fn settings(
        repo: &Path,
        clock: Arc<AtomicI64>,
        cron: Option<&str>,
        target: Target,
    ) -> Settings {
        let mut keys = auth::Keys::new();
        keys.add_clear(BOT, "bot", false).unwrap();
        keys.add_clear(OPS, "ops", true).unwrap();
        keys.add_clear(OTHER, "other", false).unwrap();
        let mut options = finality::Options::new(store::Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: T0 / 1000,
        });
        options.max_attempts = 3;
        options.lock_wait = std::time::Duration::from_millis(200);
        Settings {
            repo: repo.to_owned(),
            options,
            target,
            keys,
            insecure_no_auth: false,
            policy: Policy::parse(POLICY, "test").unwrap(),
            cron_secret: cron.map(str::to_owned),
            timeout_minutes: 15,
            sweep_every: None,
            max_batch: 64,
            batch_linger: std::time::Duration::from_millis(1),
            client_timeout: std::time::Duration::from_secs(5),
            clock: Arc::new(move || clock.load(Ordering::SeqCst)),
            log: Arc::new(|_| {}),
        }
    }

    fn server_with(cron: Option<&str>, target: impl FnOnce(&Path) -> Target) -> Server {
        server_custom(cron, target, |_| {})
    }

    fn server_custom(
        cron: Option<&str>,
        target: impl FnOnce(&Path) -> Target,
        adjust: impl FnOnce(&mut Settings),
    ) -> Server {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("state.git");
        let clock = Arc::new(AtomicI64::new(T0));
        let target = target(tmp.path());
        let mut settings = settings(&repo, clock.clone(), cron, target);
        adjust(&mut settings);
        let (app, handle) = App::start(settings).unwrap();
        let sweeper = spawn_sweeper(&app);
        Server {
            sweeper,
            router: router(app.clone()),
            _tmp: tmp,
            repo,
            clock,
            handle: Some(handle),
            app: Some(app),
        }
    }

    fn server() -> Server {
        server_with(Some("cron-secret"), |_| Target::Local)
    }

    struct Got {
        status: u16,
        body: Value,
        headers: HeaderMap,
    }

    impl Got {
        fn str(&self, key: &str) -> &str {
            self.body
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
        }
    }

    async fn call_raw(
        s: &Server,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Got {
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = s
            .router
            .clone()
            .oneshot(req.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        assert_eq!(
            headers
                .get(header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap()),
            Some("application/json"),
            "{method} {uri}: every answer is JSON"
        );
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let body = canonical::parse(std::str::from_utf8(&bytes).unwrap()).unwrap();
        Got {
            status,
            body,
            headers,
        }
    }

    async fn call(s: &Server, method: &str, uri: &str, key: &str, body: &str) -> Got {
        call_raw(
            s,
            method,
            uri,
            &[("x-api-key", key)],
            body.as_bytes().to_vec(),
        )
        .await
    }

    const ACT: &str = r#"{"kind":"shell","command":"make deploy token=abc123"}"#;

    fn guard_body(action_type: &str, act: &str, extra: &str) -> String {
        format!(
            r#"{{"action_type":"{action_type}","agent_id":"agent-1","act":{act},"client_capabilities":["custom","execution_claims"]{extra}}}"#
        )
    }

    async fn recorded(s: &Server, action_type: &str, act: &str, extra: &str) -> String {
        let g = call(
            s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body(action_type, act, extra),
        )
        .await;
        assert_eq!(g.status, 200, "{:?}", g.body);
        assert_eq!(g.body.get("recorded"), Some(&Value::Bool(true)));
        g.str("action_id").to_owned()
    }

    fn claim_body(attempt: &str, act: &str) -> String {
        format!(
            r#"{{"claim_execution":true,"attempt_id":"{attempt}","agent_id":"agent-1","act":{act}}}"#
        )
    }

    const A1: &str = "attempt-00000000000001";
    const A2: &str = "attempt-00000000000002";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn authentication_routes_and_bad_bodies() {
        let s = server();
        assert_eq!(
            call_raw(&s, "GET", "/healthz", &[], vec![]).await.status,
            200
        );
        for key in ["", "k-wrong", "k-bot "] {
            let g = call(&s, "POST", "/api/guard", key, "{}").await;
            assert_eq!((g.status, g.str("error")), (401, "Unauthorized"), "{key:?}");
        }
        let g = call_raw(&s, "GET", "/api/actions/act_x", &[], vec![]).await;
        assert_eq!(g.status, 401);
        assert_eq!(call(&s, "GET", "/api/nothing", BOT, "").await.status, 404);
        assert_eq!(
            call(&s, "DELETE", "/api/actions/act_x", BOT, "")
                .await
                .status,
            405
        );
        for bad in ["{", "{\"a\":1,\"a\":2}", "", "\u{0}", "[1,]"] {
            let g = call(&s, "POST", "/api/guard", BOT, bad).await;
            assert_eq!(
                (g.status, g.str("error")),
                (400, "Invalid JSON body"),
                "{bad:?}"
            );
        }
        for not_object in ["null", "[]", "7", "\"x\""] {
            for (m, uri) in [
                ("POST", "/api/guard"),
                ("PATCH", "/api/actions/act_x"),
                ("POST", "/api/actions/act_x/outcome"),
            ] {
                let g = call(&s, m, uri, BOT, not_object).await;
                assert_eq!(
                    (g.status, g.str("error")),
                    (400, "Validation failed"),
                    "{m} {uri} {not_object}"
                );
            }
        }
        let big = format!(
            r#"{{"action_type":"x","pad":"{}"}}"#,
            "a".repeat(MAX_BODY_BYTES)
        );
        let g = call(&s, "POST", "/api/guard", BOT, &big).await;
        assert_eq!(g.status, 413);
        // Without a declared length (a stream), the limit still holds.
        let mut req = axum::http::Request::builder()
            .method("POST")
            .uri("/api/guard")
            .header("x-api-key", BOT);
        req = req.header(header::TRANSFER_ENCODING, "chunked");
        let stream = futures_stream(big.into_bytes());
        let resp = s
            .router
            .clone()
            .oneshot(req.body(stream).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), 413);
        let g = call(&s, "POST", "/api/guard", BOT, r#"{"agent_id":"a"}"#).await;
        assert_eq!(g.status, 400);
        let g = call(
            &s,
            "POST",
            "/api/guard",
            BOT,
            r#"{"action_type":"two words"}"#,
        )
        .await;
        assert_eq!(g.status, 400);
        let g = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            r#"{"action_type":"x"}"#,
        )
        .await;
        assert_eq!(g.status, 400, "recording needs an agent");
    }

    fn futures_stream(bytes: Vec<u8>) -> Body {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
            bytes.chunks(4096).map(|c| Ok(c.to_vec())).collect();
        Body::from_stream(tokio_stream_iter(chunks))
    }

    fn tokio_stream_iter(
        items: Vec<Result<Vec<u8>, std::io::Error>>,
    ) -> impl futures_core_stream::Stream<Item = Result<Vec<u8>, std::io::Error>> {
        futures_core_stream::Iter(items.into_iter())
    }

    mod futures_core_stream {
        pub use futures_core::Stream;
        use std::pin::Pin;
        use std::task::{Context, Poll};
        pub struct Iter<I>(pub I);
        impl<I: Iterator + Unpin> Stream for Iter<I> {
            type Item = I::Item;
            fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<I::Item>> {
                Poll::Ready(self.0.next())
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn guard_records_decides_replays_and_folds_claims() {
        let s = server();
        // Without record: a decision only, recorded under its own id.
        let g = call(&s, "POST", "/api/guard", BOT, &guard_body("risky", ACT, "")).await;
        assert_eq!((g.status, g.str("decision")), (200, "warn"));
        assert_eq!(
            g.body.get("execution_claim_required"),
            Some(&Value::Bool(true))
        );
        assert_eq!(g.body.get("claim_protocol"), Some(&Value::from(1)));
        assert_eq!(g.body.get("recorded"), None);
        assert_eq!(
            g.body.get("action_id"),
            None,
            "no decision id posing as an action id"
        );
        let decision_id = g.str("decision_id").to_owned();
        let store = Store::open(&s.repo).unwrap();
        let tip = store.tip("refs/heads/main").unwrap();
        let snap = store.snapshot(tip).unwrap();
        let path = crate::finality::decision::path(&DecisionId::parse(&decision_id).unwrap());
        assert!(snap.exists(&path).unwrap());

        // Verdicts from the policy; a blocked or approval-bound action is born so.
        for (ty, act, verdict, status) in [
            ("deploy", ACT, "require_approval", "pending_approval"),
            (
                "query",
                r#"{"kind":"sql","statement":"drop table x"}"#,
                "block",
                "blocked",
            ),
            (
                "write",
                r#"{"kind":"file","path":"a"}"#,
                "require_approval",
                "pending_approval",
            ),
            ("build", ACT, "allow", "running"),
        ] {
            let g = call(
                &s,
                "POST",
                "/api/guard?record=true",
                BOT,
                &guard_body(ty, act, ""),
            )
            .await;
            assert_eq!(
                (g.status, g.str("decision"), g.str("action_status")),
                (200, verdict, status),
                "{ty}"
            );
        }
        // allow_contained for a client that declares it.
        let g = call(&s, "POST", "/api/guard?record=true", BOT,
            r#"{"action_type":"write","agent_id":"agent-1","act":{"kind":"file"},"client_capabilities":["execution_claims","allow_contained"]}"#).await;
        assert_eq!(g.str("decision"), "allow_contained");
        assert_eq!(
            g.body
                .get("containment")
                .and_then(|c| c.get("basis"))
                .and_then(Value::as_str),
            Some("sandbox/main")
        );

        // Idempotent replay: the original action, with the advertisement, never a second one.
        let extra = r#","idempotency_key":"key-1""#;
        let first = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body("deploy", ACT, extra),
        )
        .await;
        let again = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body("build", ACT, extra),
        )
        .await;
        assert_eq!(first.str("action_id"), again.str("action_id"));
        assert_eq!(
            again.body.get("idempotent_replay"),
            Some(&Value::Bool(true))
        );
        assert_eq!(
            again.str("decision"),
            "require_approval",
            "the original decision"
        );
        assert_eq!(
            again.body.get("execution_claim_required"),
            Some(&Value::Bool(true))
        );
        assert_eq!(again.body.get("claim_protocol"), Some(&Value::from(1)));
        // The same key from another principal is another action.
        let other = call(
            &s,
            "POST",
            "/api/guard?record=true",
            OTHER,
            &guard_body("deploy", ACT, extra),
        )
        .await;
        assert_ne!(other.str("action_id"), first.str("action_id"));

        // Folded claim: granted once; a replay's folded claim is a lost race.
        let fold =
            format!(r#","idempotency_key":"key-2","claim_execution":true,"attempt_id":"{A1}""#);
        let g = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body("build", ACT, &fold),
        )
        .await;
        assert_eq!(
            (g.body.get("claimed"), g.str("attempt_id")),
            (Some(&Value::Bool(true)), A1)
        );
        let g = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body("build", ACT, &fold.replace(A1, A2)),
        )
        .await;
        assert_eq!(g.body.get("claimed"), Some(&Value::Bool(false)));
        assert_eq!(g.str("claim_error"), "EXECUTION_CLAIM_CONFLICT");
        // Not claim-aware (no capability): refused as unavailable with a reason.
        let g = call(&s, "POST", "/api/guard?record=true", BOT,
            &format!(r#"{{"action_type":"build","agent_id":"agent-1","act":{ACT},"claim_execution":true,"attempt_id":"{A1}"}}"#)).await;
        assert_eq!(
            (g.str("claim_error"), g.str("claim_reason")),
            ("EXECUTION_CLAIM_UNAVAILABLE", "no_candidate")
        );
        // require_approval is never folded.
        let g = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body("deploy", ACT, &fold.replace("key-2", "key-3")),
        )
        .await;
        assert_eq!(g.body.get("claimed"), None);
        let report =
            crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
                .unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn create_answers_201_202_403_and_replays() {
        let s = server();
        let body = |ty: &str, act: &str| {
            format!(
                r#"{{"action_type":"{ty}","declared_goal":"g","agent_id":"agent-1","act":{act},"idempotency_key":"{ty}","client_capabilities":["execution_claims"]}}"#
            )
        };
        let g = call(&s, "POST", "/api/actions", BOT, &body("build", ACT)).await;
        assert_eq!(g.status, 201);
        let id = g.str("action_id").to_owned();
        assert_eq!(
            g.body
                .get("action")
                .and_then(|a| a.get("status"))
                .and_then(Value::as_str),
            Some("running")
        );
        let g = call(&s, "POST", "/api/actions", BOT, &body("build", ACT)).await;
        assert_eq!((g.status, g.str("action_id")), (200, id.as_str()));
        assert_eq!(g.body.get("idempotent_replay"), Some(&Value::Bool(true)));
        assert_eq!(
            call(&s, "POST", "/api/actions", BOT, &body("deploy", ACT))
                .await
                .status,
            202
        );
        let g = call(
            &s,
            "POST",
            "/api/actions",
            BOT,
            &body("query", r#"{"kind":"sql"}"#),
        )
        .await;
        assert_eq!(
            (g.status, g.str("error")),
            (403, "Action blocked by policy")
        );
        assert_eq!(
            g.body
                .get("decision")
                .and_then(|d| d.get("decision"))
                .and_then(Value::as_str),
            Some("block")
        );
        // An explicit id; taken by another principal: 409; no agent: 400.
        let g = call(
            &s,
            "POST",
            "/api/actions",
            BOT,
            r#"{"action_type":"x","agent_id":"a","action_id":"act_mine"}"#,
        )
        .await;
        assert_eq!((g.status, g.str("action_id")), (201, "act_mine"));
        let g = call(
            &s,
            "POST",
            "/api/actions",
            OTHER,
            r#"{"action_type":"x","agent_id":"a","action_id":"act_mine"}"#,
        )
        .await;
        assert_eq!(g.status, 409);
        assert_eq!(
            call(&s, "POST", "/api/actions", BOT, r#"{"action_type":"x"}"#)
                .await
                .status,
            400
        );
        assert_eq!(
            call(
                &s,
                "POST",
                "/api/actions",
                BOT,
                r#"{"action_type":"x","agent_id":"a","status":"unknown"}"#
            )
            .await
            .status,
            400
        );
        // Reads.
        let g = call(&s, "GET", &format!("/api/actions/{id}"), OTHER, "").await;
        assert_eq!(g.status, 200);
        assert_eq!(
            g.body
                .get("action")
                .and_then(|a| a.get("action_type"))
                .and_then(Value::as_str),
            Some("build")
        );
        for missing in ["act_missing", "bad%20id", "%FF", "a%2Fb"] {
            assert_eq!(
                call(&s, "GET", &format!("/api/actions/{missing}"), BOT, "")
                    .await
                    .status,
                404
            );
            assert_eq!(
                call(
                    &s,
                    "GET",
                    &format!("/api/actions/{missing}/outcome"),
                    BOT,
                    ""
                )
                .await
                .status,
                404
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_outcomes_and_the_legacy_close() {
        let s = server();
        let id = recorded(&s, "build", ACT, "").await;
        let uri = format!("/api/actions/{id}");
        // Body rules.
        for (body, status, code) in [
            (
                r#"{"claim_execution":true,"attempt_id":"short","agent_id":"agent-1"}"#.to_owned(),
                400,
                "INVALID_EXECUTION_CLAIM",
            ),
            (
                format!(r#"{{"claim_execution":"yes","attempt_id":"{A1}","agent_id":"agent-1"}}"#),
                400,
                "INVALID_EXECUTION_CLAIM",
            ),
            (
                format!(
                    r#"{{"claim_execution":true,"attempt_id":"{A1}","agent_id":"agent-1","status":"x"}}"#
                ),
                400,
                "INVALID_EXECUTION_CLAIM",
            ),
            (
                format!(r#"{{"claim_execution":true,"attempt_id":"{A1}"}}"#),
                403,
                "AGENT_IDENTITY_REQUIRED",
            ),
            (
                format!(r#"{{"claim_execution":true,"attempt_id":"{A1}","agent_id":"  "}}"#),
                403,
                "AGENT_IDENTITY_REQUIRED",
            ),
        ] {
            let g = call(&s, "PATCH", &uri, BOT, &body).await;
            assert_eq!((g.status, g.str("code")), (status, code), "{body}");
        }
        // Ineligible: another act, agent, principal, a missing action: one answer for all.
        let other_act = r#"{"kind":"shell","command":"rm -rf /"}"#;
        for (u, key, body) in [
            (uri.clone(), BOT, claim_body(A1, other_act)),
            (
                uri.clone(),
                BOT,
                claim_body(A1, ACT).replace("agent-1", "agent-2"),
            ),
            (uri.clone(), OTHER, claim_body(A1, ACT)),
            (
                "/api/actions/act_missing".to_owned(),
                BOT,
                claim_body(A1, ACT),
            ),
            ("/api/actions/%FF".to_owned(), BOT, claim_body(A1, ACT)),
        ] {
            let g = call(&s, "PATCH", &u, key, &body).await;
            assert_eq!(
                (g.status, g.str("code")),
                (409, "EXECUTION_CLAIM_CONFLICT"),
                "{u} {body}"
            );
        }
        // The claim: echoed, not cached; a second is refused, the same attempt id too.
        let g = call(&s, "PATCH", &uri, BOT, &claim_body(A1, ACT)).await;
        assert_eq!(
            (g.status, g.str("action_id"), g.str("attempt_id")),
            (200, id.as_str(), A1)
        );
        assert_eq!(g.body.get("claimed"), Some(&Value::Bool(true)));
        assert_eq!(g.headers.get(header::CACHE_CONTROL).unwrap(), "no-store");
        for attempt in [A1, A2] {
            let g = call(&s, "PATCH", &uri, BOT, &claim_body(attempt, ACT)).await;
            assert_eq!((g.status, g.str("action_id")), (409, id.as_str()));
        }
        // Outcome input rules.
        let out = format!("{uri}/outcome");
        for (body, status) in [
            (r#"{"status":"banana"}"#, 400),
            (r#"{"status":"lost_confirmation"}"#, 400),
            (r#"{"status":"failed"}"#, 400),
            (r#"{"status":"partial"}"#, 400),
            (r#"{"status":"completed","summary":7}"#, 400),
        ] {
            let g = call(&s, "POST", &out, BOT, body).await;
            assert_eq!(g.status, status, "{body}");
        }
        let big = format!(
            r#"{{"status":"partial","progress":{{"s":"{}"}}}}"#,
            "x".repeat(10_000)
        );
        assert_eq!(call(&s, "POST", &out, BOT, &big).await.status, 400);
        assert_eq!(
            call(
                &s,
                "POST",
                "/api/actions/act_missing/outcome",
                BOT,
                r#"{"status":"completed"}"#
            )
            .await
            .status,
            404
        );
        s.clock.fetch_add(1234, Ordering::SeqCst);
        let g = call(&s, "POST", &out, BOT, r#"{"status":"partial","progress":{"step":2},"summary":"half done; key sk-abcdefghijklmnop"}"#).await;
        assert_eq!(g.status, 200, "{:?}", g.body);
        let o = g.body.get("outcome").unwrap();
        assert_eq!(o.get("elapsed_ms"), Some(&Value::from(1234)));
        assert_eq!(
            o.get("summary").and_then(Value::as_str),
            Some("half done; key [REDACTED]")
        );
        let sec = g.body.get("security").unwrap();
        assert_eq!(
            (sec.get("clean"), sec.get("critical_count")),
            (Some(&Value::Bool(false)), Some(&Value::from(1)))
        );
        let g = call(&s, "POST", &out, BOT, r#"{"status":"completed"}"#).await;
        assert_eq!(
            (g.status, g.str("error"), g.str("current_status")),
            (409, "outcome already set", "partial")
        );
        let g = call(&s, "GET", &out, BOT, "").await;
        assert_eq!((g.status, g.str("status")), (200, "partial"));
        for k in [
            "action_id",
            "status",
            "outcome_at",
            "summary",
            "error_message",
            "progress",
            "elapsed_ms",
        ] {
            assert!(g.body.get(k).is_some(), "{k}");
        }
        // Legacy close: only while running.
        let id2 = recorded(&s, "build", ACT, "").await;
        let g = call(
            &s,
            "PATCH",
            &format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"cancelled","output_summary":"stop"}"#,
        )
        .await;
        assert_eq!(g.status, 200);
        assert_eq!(
            g.body
                .get("action")
                .and_then(|a| a.get("outcome_status"))
                .and_then(Value::as_str),
            Some("failed")
        );
        let g = call(
            &s,
            "PATCH",
            &format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
        assert_eq!((g.status, g.str("status")), (409, "cancelled"));
        let g = call(
            &s,
            "POST",
            &format!("/api/actions/{id2}/outcome"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
        assert_eq!((g.status, g.str("current_status")), (409, "failed"));
        assert_eq!(
            call(
                &s,
                "PATCH",
                "/api/actions/act_missing",
                BOT,
                r#"{"status":"completed"}"#
            )
            .await
            .status,
            404
        );
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("/api/actions/{id2}"),
                BOT,
                r#"{"status":"running"}"#
            )
            .await
            .status,
            400
        );
        // Lifecycle gate: pending approval refuses outcomes.
        let id3 = recorded(&s, "deploy", ACT, "").await;
        let g = call(
            &s,
            "POST",
            &format!("/api/actions/{id3}/outcome"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
        assert_eq!(
            (g.status, g.str("current_status")),
            (409, "pending_approval")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn approvals_by_operators_only() {
        let s = server();
        let id = recorded(&s, "deploy", ACT, "").await;
        let uri = format!("/api/actions/{id}");
        assert_eq!(
            call(&s, "PATCH", &uri, BOT, &claim_body(A1, ACT))
                .await
                .status,
            409,
            "not yet approved"
        );
        let g = call(
            &s,
            "POST",
            &format!("{uri}/approve"),
            BOT,
            r#"{"decision":"approve"}"#,
        )
        .await;
        assert_eq!((g.status, g.str("code")), (403, "OPERATOR_REQUIRED"));
        assert_eq!(
            call(
                &s,
                "POST",
                &format!("{uri}/approve"),
                OPS,
                r#"{"decision":"maybe"}"#
            )
            .await
            .status,
            400
        );
        assert_eq!(
            call(
                &s,
                "POST",
                "/api/actions/act_missing/approve",
                OPS,
                r#"{"decision":"allow"}"#
            )
            .await
            .status,
            404
        );
        let g = call(
            &s,
            "POST",
            &format!("{uri}/approve"),
            OPS,
            r#"{"decision":"allow"}"#,
        )
        .await;
        assert_eq!(g.status, 200);
        let a = g.body.get("action").unwrap();
        assert_eq!(a.get("approved_by").and_then(Value::as_str), Some("ops"));
        assert_eq!(a.get("status").and_then(Value::as_str), Some("running"));
        let g = call(
            &s,
            "POST",
            &format!("{uri}/approve"),
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
        assert_eq!((g.status, g.str("status")), (409, "running"));
        // The grant lasts 15 minutes and is used once.
        s.clock.fetch_add(15 * 60_000 + 1, Ordering::SeqCst);
        assert_eq!(
            call(&s, "PATCH", &uri, BOT, &claim_body(A1, ACT))
                .await
                .status,
            409,
            "grant expired"
        );
        let id2 = recorded(&s, "deploy", ACT, "").await;
        let uri2 = format!("/api/actions/{id2}");
        assert_eq!(
            call(
                &s,
                "POST",
                &format!("{uri2}/approve"),
                OPS,
                r#"{"decision":"approve"}"#
            )
            .await
            .status,
            200
        );
        s.clock.fetch_add(15 * 60_000, Ordering::SeqCst);
        let g = call(&s, "PATCH", &uri2, BOT, &claim_body(A1, ACT)).await;
        assert_eq!(g.status, 200);
        assert_eq!(
            call(&s, "PATCH", &uri2, BOT, &claim_body(A2, ACT))
                .await
                .status,
            409
        );
        let g = call(&s, "GET", &uri2, BOT, "").await;
        let a = g.body.get("action").unwrap();
        assert_eq!(
            a.get("approval_grant_used_at"),
            a.get("execution_claimed_at")
        );
        assert_eq!(
            call(
                &s,
                "POST",
                &format!("{uri2}/outcome"),
                BOT,
                r#"{"status":"completed"}"#
            )
            .await
            .status,
            200
        );
        // `action show` reads what the server wrote, the approval included.
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let args = ["action-ledger", "action", "show", "--repo"].map(str::to_owned);
        let argv = args
            .into_iter()
            .chain([s.repo.display().to_string(), id2.clone()]);
        let env = crate::cli::Env::from([(
            "ACTION_LEDGER_NOW".to_owned(),
            "2026-03-01T13:00:00Z".to_owned(),
        )]);
        let code = crate::cli::run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
        assert!(
            text.contains("approval:     approve by ops at 2026-03-01T12:15:00.001Z"),
            "{text}"
        );
        assert!(text.contains("lifecycle:    completed"), "{text}");
        // A denial cancels.
        let id3 = recorded(&s, "deploy", ACT, "").await;
        let g = call(
            &s,
            "POST",
            &format!("/api/actions/{id3}/approve"),
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
        let a = g.body.get("action").unwrap();
        assert_eq!(a.get("status").and_then(Value::as_str), Some("cancelled"));
        assert_eq!(a.get("approved_by"), Some(&Value::Null));
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("/api/actions/{id3}"),
                BOT,
                &claim_body(A1, ACT)
            )
            .await
            .status,
            409
        );
        let store = Store::open(&s.repo).unwrap();
        let report =
            crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
                .unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }

    async fn status(s: &Server, id: &str) -> (String, String) {
        let g = call(s, "GET", &format!("/api/actions/{id}"), BOT, "").await;
        let a = g.body.get("action").unwrap();
        let f = |k: &str| a.get(k).and_then(Value::as_str).unwrap().to_owned();
        (f("status"), f("outcome_status"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cron_sweep_needs_the_secret() {
        let unset = server_with(None, |_| Target::Local);
        let g = call_raw(
            &unset,
            "GET",
            "/api/cron/outcome-sweep",
            &[("authorization", "Bearer x")],
            vec![],
        )
        .await;
        assert_eq!(g.status, 503);
        let s = server();
        for auth in [
            "",
            "Bearer wrong",
            "cron-secret",
            "Bearer cron-secretx",
            "Bearer ",
        ] {
            let g = call_raw(
                &s,
                "GET",
                "/api/cron/outcome-sweep",
                &[("authorization", auth)],
                vec![],
            )
            .await;
            assert_eq!(g.status, 401, "{auth:?}");
        }
        let running = recorded(&s, "build", ACT, "").await;
        let approval = recorded(&s, "deploy", ACT, "").await;
        let fresh_at = s.clock.fetch_add(10 * 60_000, Ordering::SeqCst);
        let fresh = recorded(&s, "build", ACT, "").await;
        s.clock.store(fresh_at + 16 * 60_000, Ordering::SeqCst);
        let ok = [("authorization", "Bearer cron-secret")];
        let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
        assert_eq!(
            (g.status, g.body.get("rows_swept")),
            (200, Some(&Value::from(2)))
        );
        assert_eq!(g.body.get("ok"), Some(&Value::Bool(true)));
        assert_eq!(
            status(&s, &running).await,
            ("unknown".into(), "lost_confirmation".into())
        );
        assert_eq!(
            status(&s, &approval).await,
            ("pending_approval".into(), "lost_confirmation".into())
        );
        assert_eq!(
            status(&s, &fresh).await,
            ("running".into(), "pending".into())
        );
        let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
        assert_eq!(g.body.get("rows_swept"), Some(&Value::from(0)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_claims_have_one_winner_and_share_commits() {
        let s = server();
        let id = recorded(&s, "build", ACT, "").await;
        let store = Store::open(&s.repo).unwrap();
        let before = store.tip("refs/heads/main").unwrap().unwrap();
        let uri = format!("/api/actions/{id}");
        let mut tasks = Vec::new();
        for i in 0..32 {
            let router = s.router.clone();
            let body = claim_body(&format!("attempt-{i:016}"), ACT);
            let uri = uri.clone();
            tasks.push(tokio::spawn(async move {
                let req = axum::http::Request::builder()
                    .method("PATCH")
                    .uri(uri)
                    .header("x-api-key", BOT)
                    .body(Body::from(body))
                    .unwrap();
                router.oneshot(req).await.unwrap().status().as_u16()
            }));
        }
        let mut codes = Vec::new();
        for t in tasks {
            codes.push(t.await.unwrap());
        }
        assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
        assert_eq!(codes.iter().filter(|c| **c == 409).count(), 31, "{codes:?}");
        // Many creations at once: fewer commits than creations, each creation landed.
        let mut tasks = Vec::new();
        for i in 0..24 {
            let router = s.router.clone();
            let body = guard_body("build", ACT, &format!(r#","idempotency_key":"many-{i}""#));
            tasks.push(tokio::spawn(async move {
                let req = axum::http::Request::builder()
                    .method("POST")
                    .uri("/api/guard?record=true")
                    .header("x-api-key", BOT)
                    .body(Body::from(body))
                    .unwrap();
                router.oneshot(req).await.unwrap().status().as_u16()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        let tip = store.tip("refs/heads/main").unwrap().unwrap();
        let mut commits = 0;
        let mut c = tip;
        while c != before {
            commits += 1;
            c = store.parents(c).unwrap()[0];
        }
        assert!(commits <= 25, "{commits} commits");
        let report = crate::verify::verify_revision(&store, tip).unwrap();
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_cli_and_the_server_see_each_other() {
        let s = server();
        let id = recorded(&s, "build", ACT, "").await;
        let store = Store::open(&s.repo).unwrap();
        let options = finality::Options::new(store::Signature {
            name: "cli".into(),
            email: "cli@invalid".into(),
            time_seconds: T0 / 1000,
        });
        // The CLI claims what the server created...
        let request = ClaimRequest {
            attempt_id: A1.into(),
            agent_id: Some("agent-1".into()),
            principal: Some("bot".into()),
            act: Some(canonical::parse(ACT).unwrap()),
            verified: false,
        };
        finality::claim(&store, &options, &id, &request, T0).unwrap();
        // ...and the server refuses a second claim and shows the CLI's.
        assert_eq!(
            call(
                &s,
                "PATCH",
                &format!("/api/actions/{id}"),
                BOT,
                &claim_body(A2, ACT)
            )
            .await
            .status,
            409
        );
        let g = call(&s, "GET", &format!("/api/actions/{id}"), BOT, "").await;
        assert_eq!(
            g.body
                .get("action")
                .and_then(|a| a.get("execution_attempt_id"))
                .and_then(Value::as_str),
            Some(A1)
        );
        // The server reports; the CLI reads it.
        assert_eq!(
            call(
                &s,
                "POST",
                &format!("/api/actions/{id}/outcome"),
                BOT,
                r#"{"status":"completed"}"#
            )
            .await
            .status,
            200
        );
        let st = finality::show(&store, "refs/heads/main", &id).unwrap();
        assert_eq!(
            st.outcome.unwrap().status,
            finality::OutcomeStatus::Completed
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unreachable_remote_is_unavailable_never_a_conflict() {
        let s = server_with(None, |dir| Target::Remote {
            url: dir.join("no-such-remote.git").display().to_string(),
            ref_name: "refs/heads/main".into(),
        });
        let g = call(&s, "PATCH", "/api/actions/act_x", BOT, &claim_body(A1, ACT)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (503, "EXECUTION_CLAIM_UNAVAILABLE")
        );
        let g = call(
            &s,
            "POST",
            "/api/guard?record=true",
            BOT,
            &guard_body("build", ACT, ""),
        )
        .await;
        assert_eq!(g.status, 503);
        assert_eq!(
            call(&s, "GET", "/api/actions/act_x", BOT, "").await.status,
            503
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_body_times_out() {
        let s = server_custom(
            None,
            |_| Target::Local,
            |st| {
                st.client_timeout = std::time::Duration::from_millis(100);
            },
        );
        // The first bytes arrive, then nothing: 408, and nothing is written.
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(br#"{"action_type":"#.to_vec())];
        let stalled = futures_core_stream::Iter(chunks.into_iter());
        let req = axum::http::Request::builder()
            .method("POST")
            .uri("/api/guard?record=true")
            .header("x-api-key", BOT)
            .body(Body::from_stream(Pending(Some(stalled))))
            .unwrap();
        let resp = s.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 408);
        let store = Store::open(&s.repo).unwrap();
        assert_eq!(store.tip("refs/heads/main").unwrap(), None);
    }

    /// A stream that yields its inner stream's first item, then never another.
    struct Pending<S>(Option<S>);

    impl<S: futures_core::Stream + Unpin> futures_core::Stream for Pending<S> {
        type Item = S::Item;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<S::Item>> {
            match self.0.as_mut() {
                Some(inner) => {
                    let first = std::pin::Pin::new(inner).poll_next(cx);
                    self.0 = None;
                    first
                }
                None => std::task::Poll::Pending,
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_timer_sweeps_and_logs() {
        let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let log = lines.clone();
        let s = server_custom(
            None,
            |_| Target::Local,
            move |st| {
                st.sweep_every = Some(std::time::Duration::from_millis(20));
                st.log = Arc::new(move |l: &str| log.lock().unwrap().push(l.to_owned()));
            },
        );
        let id = recorded(&s, "build", ACT, "").await;
        s.clock.fetch_add(16 * 60_000, Ordering::SeqCst);
        let mut swept = false;
        for _ in 0..500 {
            if status(&s, &id).await.1 == "lost_confirmation" {
                swept = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(swept, "the timer never swept");
        let lines = lines.lock().unwrap().clone();
        assert!(
            lines.iter().any(|l| l.contains("1 stale outcome(s)")),
            "{lines:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_is_checked_against_the_current_policy() {
        let a = server();
        let allowed = recorded(&a, "build", ACT, "").await;
        let approved = recorded(&a, "deploy", ACT, "").await;
        let uri = format!("/api/actions/{approved}/approve");
        assert_eq!(
            call(&a, "POST", &uri, OPS, r#"{"decision":"approve"}"#)
                .await
                .status,
            200
        );
        let still = recorded(&a, "build", ACT, "").await;
        // A second server on the same repository whose policy now blocks builds and sends
        // deploys to approval: the allowed build can no longer be claimed there; the approved
        // deploy can (its approval is the authority); the first server still grants builds.
        let repo = a.repo.clone();
        let b = server_custom(
            None,
            |_| Target::Local,
            move |st| {
                st.repo = repo;
                st.policy = Policy::parse(
                r#"{"rules":[{"action_type":"build","verdict":"block"},{"action_type":"deploy","verdict":"require_approval"}]}"#,
                "tightened",
            )
            .unwrap();
            },
        );
        let g = call(
            &b,
            "PATCH",
            &format!("/api/actions/{allowed}"),
            BOT,
            &claim_body(A1, ACT),
        )
        .await;
        assert_eq!((g.status, g.str("code")), (409, "EXECUTION_CLAIM_CONFLICT"));
        let g = call(
            &b,
            "PATCH",
            &format!("/api/actions/{approved}"),
            BOT,
            &claim_body(A1, ACT),
        )
        .await;
        assert_eq!(g.status, 200);
        let g = call(
            &a,
            "PATCH",
            &format!("/api/actions/{still}"),
            BOT,
            &claim_body(A1, ACT),
        )
        .await;
        assert_eq!(g.status, 200);
    }
}
