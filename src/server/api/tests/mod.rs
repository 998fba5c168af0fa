//! The HTTP contract, end to end through the router: status codes, bodies, headers and the
//! records the writes leave, with a driven clock.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, header};

use super::*;
use crate::canonical::{self, Value};
use crate::finality::batch::Target;
use crate::finality::decision::DecisionId;
use crate::finality::{self, ClaimRequest};
use crate::server::MAX_BODY_BYTES;
use crate::server::policy::Policy;
use crate::server::writer::Handle;
use crate::store::{self, Store};
use crate::time::Timestamp;
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

fn settings(repo: &Path, clock: Arc<AtomicI64>, cron: Option<&str>, target: Target) -> Settings {
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
    options.target = target;
    Settings {
        repo: repo.to_owned(),
        options,
        keys,
        insecure_no_auth: false,
        policy: Policy::parse(POLICY, "test").unwrap(),
        reload: None,
        cron_secret: cron.map(str::to_owned),
        timeout_minutes: 15,
        approval_expiry: crate::finality::ApprovalExpiry::default(),
        sweep_every: None,
        max_batch: 64,
        batch_linger: std::time::Duration::from_millis(1),
        client_timeout: std::time::Duration::from_secs(5),
        max_streams: crate::server::api::stream::DEFAULT_MAX_STREAMS as usize,
        webhooks: None,
        clock: Arc::new(move || Timestamp::from_millis(clock.load(Ordering::SeqCst))),
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
    /// The string at `outer.inner` of the body, if there is one.
    fn str_at(&self, outer: &str, inner: &str) -> Option<&str> {
        self.body
            .get(outer)
            .and_then(|o| o.get(inner))
            .and_then(Value::as_str)
    }

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

/// One-line requests for the common methods, so each test reads as the exchange it checks.
impl Server {
    async fn get(&self, uri: impl AsRef<str>, key: &str) -> Got {
        call(self, "GET", uri.as_ref(), key, "").await
    }

    async fn post(&self, uri: impl AsRef<str>, key: &str, body: impl AsRef<str>) -> Got {
        call(self, "POST", uri.as_ref(), key, body.as_ref()).await
    }

    /// `POST /api/guard?record=true` with [`guard_body`].
    async fn guard(&self, key: &str, action_type: &str, act: &str, extra: &str) -> Got {
        self.post(
            "/api/guard?record=true",
            key,
            guard_body(action_type, act, extra),
        )
        .await
    }

    async fn patch(&self, uri: impl AsRef<str>, key: &str, body: impl AsRef<str>) -> Got {
        call(self, "PATCH", uri.as_ref(), key, body.as_ref()).await
    }
}

const ACT: &str = r#"{"kind":"shell","command":"make deploy token=abc123"}"#;

fn guard_body(action_type: &str, act: &str, extra: &str) -> String {
    format!(
        r#"{{"action_type":"{action_type}","agent_id":"agent-1","act":{act},"client_capabilities":["custom","execution_claims"]{extra}}}"#
    )
}

async fn recorded(s: &Server, action_type: &str, act: &str, extra: &str) -> String {
    let g = s.guard(BOT, action_type, act, extra).await;
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
        let g = s.post("/api/guard", key, "{}").await;
        assert_eq!((g.status, g.str("error")), (401, "Unauthorized"), "{key:?}");
    }
    let g = call_raw(&s, "GET", "/api/actions/act_x", &[], vec![]).await;
    assert_eq!(g.status, 401);
    assert_eq!(s.get("/api/nothing", BOT).await.status, 404);
    assert_eq!(
        call(&s, "DELETE", "/api/actions/act_x", BOT, "")
            .await
            .status,
        405
    );
    for bad in ["{", "{\"a\":1,\"a\":2}", "", "\u{0}", "[1,]"] {
        let g = s.post("/api/guard", BOT, bad).await;
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
    let g = s.post("/api/guard", BOT, &big).await;
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
    let g = s.post("/api/guard", BOT, r#"{"agent_id":"a"}"#).await;
    assert_eq!(g.status, 400);
    let g = s
        .post("/api/guard", BOT, r#"{"action_type":"two words"}"#)
        .await;
    assert_eq!(g.status, 400);
    let g = s
        .post("/api/guard?record=true", BOT, r#"{"action_type":"x"}"#)
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
    let g = s
        .post("/api/guard", BOT, &guard_body("risky", ACT, ""))
        .await;
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
    let layout = crate::finality::layout::detect(&snap).unwrap().layout;
    let path = layout.decision_path(&DecisionId::parse(&decision_id).unwrap());
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
        let g = s.guard(BOT, ty, act, "").await;
        assert_eq!(
            (g.status, g.str("decision"), g.str("action_status")),
            (200, verdict, status),
            "{ty}"
        );
    }
    // allow_contained for a client that declares it.
    let g = s.post("/api/guard?record=true", BOT, r#"{"action_type":"write","agent_id":"agent-1","act":{"kind":"file"},"client_capabilities":["execution_claims","allow_contained"]}"#).await;
    assert_eq!(g.str("decision"), "allow_contained");
    assert_eq!(g.str_at("containment", "basis"), Some("sandbox/main"));

    // Idempotent replay: the original action, with the advertisement, never a second one.
    let extra = r#","idempotency_key":"key-1""#;
    let first = s.guard(BOT, "deploy", ACT, extra).await;
    let again = s.guard(BOT, "deploy", ACT, extra).await;
    assert_eq!(first.str("action_id"), again.str("action_id"));
    assert_eq!(
        again.body.get("idempotent_replay"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        (again.str("decision"), again.str("decision_id")),
        ("require_approval", first.str("decision_id")),
        "the original decision"
    );
    assert_eq!(
        again.body.get("execution_claim_required"),
        Some(&Value::Bool(true))
    );
    assert_eq!(again.body.get("claim_protocol"), Some(&Value::from(1)));
    // The same key from another principal is another action.
    let other = s.guard(OTHER, "deploy", ACT, extra).await;
    assert_ne!(other.str("action_id"), first.str("action_id"));

    // Folded claim: granted once; a replay's folded claim is a lost race.
    let fold = format!(r#","idempotency_key":"key-2","claim_execution":true,"attempt_id":"{A1}""#);
    let g = s.guard(BOT, "build", ACT, &fold).await;
    assert_eq!(
        (g.body.get("claimed"), g.str("attempt_id")),
        (Some(&Value::Bool(true)), A1)
    );
    let granted_at = g.str("claimed_at").to_owned();
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            &guard_body("build", ACT, &fold.replace(A1, A2)),
        )
        .await;
    assert_eq!(g.body.get("claimed"), Some(&Value::Bool(false)));
    assert_eq!(g.str("claim_error"), "EXECUTION_CLAIM_CONFLICT");
    // The replay of the granting request reports its claim, and writes nothing.
    let tip = store.tip("refs/heads/main").unwrap();
    s.clock.fetch_add(5_000, Ordering::SeqCst);
    let g = s.guard(BOT, "build", ACT, &fold).await;
    assert_eq!(
        (
            g.body.get("claimed"),
            g.str("attempt_id"),
            g.body.get("idempotent_replay")
        ),
        (Some(&Value::Bool(true)), A1, Some(&Value::Bool(true)))
    );
    assert_eq!(g.str("claimed_at"), granted_at);
    assert_eq!(
        store.tip("refs/heads/main").unwrap(),
        tip,
        "nothing written"
    );
    // Not claim-aware (no capability): refused as unavailable with a reason.
    let g = s.post("/api/guard?record=true", BOT, &format!(r#"{{"action_type":"build","agent_id":"agent-1","act":{ACT},"claim_execution":true,"attempt_id":"{A1}"}}"#)).await;
    assert_eq!(
        (g.str("claim_error"), g.str("claim_reason")),
        ("EXECUTION_CLAIM_UNAVAILABLE", "no_candidate")
    );
    // require_approval is never folded.
    let g = s
        .post(
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

/// The tip of the server's ledger ref.
fn tip_of(s: &Server) -> Option<store::CommitId> {
    Store::open(&s.repo)
        .unwrap()
        .tip("refs/heads/main")
        .unwrap()
}

/// A creation body under `key`, its fields replaced or added by `fields` (a JSON fragment).
fn keyed(key: &str, fields: &str) -> String {
    let mut body = canonical::parse(&format!(
        r#"{{"action_type":"list-files","declared_goal":"g","agent_id":"agent-1","act":{{"kind":"shell","command":"ls /tmp"}},"client_capabilities":["execution_claims"],"idempotency_key":"{key}"}}"#
    ))
    .unwrap();
    let extra = canonical::parse(&format!("{{{fields}}}")).unwrap();
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        for (k, v) in e.into_map() {
            b.push(k, v);
        }
    }
    canonical::to_canonical_unchecked(&body)
}

/// Asserts a 422 `IDEMPOTENCY_KEY_REUSED` that names `field` and answers no action, no decision
/// and no id.
fn assert_key_reused(g: &Got, field: &str, what: &str) {
    assert_eq!(
        (g.status, g.str("code")),
        (422, "IDEMPOTENCY_KEY_REUSED"),
        "{what}: {:?}",
        g.body
    );
    let details = canonical::to_canonical_unchecked(g.body.get("details").unwrap());
    assert!(details.contains(field), "{what}: {details}");
    for leaked in ["action", "action_id", "decision", "decision_id", "recorded"] {
        assert_eq!(g.body.get(leaked), None, "{what}: {leaked} answered");
    }
}

/// Issue 43, item 2: an idempotency key reused for a request with another binding (type, act,
/// no act, agent, protocol, allow_contained, status) is refused with 422
/// `IDEMPOTENCY_KEY_REUSED` on both routes that take a key, never answered with the stored
/// action or its guard verdict, and writes nothing; the same key from another principal is
/// another action; an explicit `action_id` with another binding is 409 `ACTION_EXISTS`, as in
/// the CLI; the same request again is a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_binds_the_request_it_was_first_used_for() {
    let s = server();
    let first = s.post("/api/actions", BOT, keyed("order-42", "")).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let tip = tip_of(&s);
    let differing = [
        ("action_type", r#""action_type":"delete-data""#),
        (
            "act",
            r#""act":{"kind":"shell","command":"rm -rf /srv/data"}"#,
        ),
        ("act", r#""act":null"#),
        (
            "act",
            r#""act":{"kind":"sql","command":"DROP TABLE users"}"#,
        ),
        ("agent_id", r#""agent_id":"agent-2""#),
        ("execution_claims", r#""client_capabilities":[]"#),
        ("status", r#""status":"pending""#),
    ];
    for (field, change) in differing {
        let g = s.post("/api/actions", BOT, keyed("order-42", change)).await;
        assert_key_reused(&g, field, change);
        if field == "status" {
            continue; // the guard takes no status
        }
        // The guard with record=true shares the key's action: the same refusal, no verdict.
        let g = s
            .post("/api/guard?record=true", BOT, keyed("order-42", change))
            .await;
        assert_key_reused(&g, field, change);
    }
    assert_eq!(tip_of(&s), tip, "nothing written");
    // Fields the ledger does not keep are not compared; the same request is a replay.
    let again = s
        .post(
            "/api/actions",
            BOT,
            keyed("order-42", r#""declared_goal":"other""#),
        )
        .await;
    assert_eq!(
        (
            again.status,
            again.str("action_id"),
            again.body.get("idempotent_replay")
        ),
        (201, first.str("action_id"), Some(&Value::Bool(true)))
    );
    assert_eq!(tip_of(&s), tip, "a replay writes nothing");
    // The key is the principal's: another principal's use of it is another action.
    let other = s.post("/api/actions", OTHER, keyed("order-42", "")).await;
    assert_eq!(other.status, 201);
    assert_ne!(other.str("action_id"), first.str("action_id"));
    // That principal, naming the first action by id: 409 ACTION_EXISTS.
    let g = s
        .post(
            "/api/actions",
            OTHER,
            keyed("x", &format!(r#""action_id":"{}""#, first.str("action_id"))),
        )
        .await;
    assert_eq!((g.status, g.str("code")), (409, "ACTION_EXISTS"));

    // An explicit id is bound the same way, refused as the CLI refuses it.
    let explicit =
        |fields: &str| keyed("unused", &format!(r#""action_id":"act_explicit"{fields}"#));
    assert_eq!(s.post("/api/actions", BOT, explicit("")).await.status, 201);
    let tip = tip_of(&s);
    for change in [
        r#","action_type":"delete-data""#,
        r#","act":{"kind":"shell","command":"rm -rf /srv/data"}"#,
        r#","agent_id":"agent-2""#,
    ] {
        let g = s.post("/api/actions", BOT, explicit(change)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (409, "ACTION_EXISTS"),
            "{change}"
        );
        assert_eq!(g.body.get("action"), None);
    }
    assert_eq!(tip_of(&s), tip, "nothing written");
    let g = s.post("/api/actions", BOT, explicit("")).await;
    assert_eq!(
        (g.status, g.body.get("idempotent_replay")),
        (201, Some(&Value::Bool(true)))
    );

    // Under a policy that blocks SQL, a key first used for an allowed guard never lends its
    // verdict to a DROP TABLE.
    let allowed = s
        .post("/api/guard?record=true", BOT, keyed("order-43", ""))
        .await;
    assert_eq!(allowed.str("decision"), "allow");
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            keyed(
                "order-43",
                r#""act":{"kind":"sql","command":"DROP TABLE users"}"#,
            ),
        )
        .await;
    assert_key_reused(&g, "act", "DROP TABLE through the guard");
    // A contained action is never replayed to a client that cannot hold one.
    let contained = r#""action_type":"write","act":{"kind":"file"},"client_capabilities":["execution_claims","allow_contained"]"#;
    let g = s
        .post("/api/guard?record=true", BOT, keyed("order-44", contained))
        .await;
    assert_eq!(g.str("decision"), "allow_contained");
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            keyed("order-44", &contained.replace(r#","allow_contained""#, "")),
        )
        .await;
    assert_key_reused(&g, "allow_contained", "contained without the capability");
    let g = s
        .post("/api/guard?record=true", BOT, keyed("order-44", contained))
        .await;
    assert_eq!(
        (g.str("decision"), g.body.get("idempotent_replay")),
        ("allow_contained", Some(&Value::Bool(true)))
    );
}

/// The keys of a body's top-level object.
fn keys_of(g: &Got) -> Vec<String> {
    g.body
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.to_string())
        .collect()
}

/// Issue 43, item 3: a replay answers what the first request answered, status, code and body
/// shape (plus `idempotent_replay`): 403 for a blocked creation, 202 for one awaiting approval,
/// 201 for a running one, the guard's recorded block as a block; even after the policy changed.
/// A request refused before anything was written (400 in validation, 400 for an act that cannot
/// be stored, 503 with the store down) left nothing under its key: the retry creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_answers_what_the_first_request_answered() {
    let s = server();
    let sql = r#""act":{"kind":"sql","command":"DROP TABLE prod"}"#;
    for (key, fields, status) in [
        ("k-c", sql.to_owned(), 403),
        ("k-a", r#""action_type":"deploy""#.to_owned(), 202),
        ("k-r", String::new(), 201),
    ] {
        let first = s.post("/api/actions", BOT, keyed(key, &fields)).await;
        assert_eq!(first.status, status, "{key}: {:?}", first.body);
        let tip = tip_of(&s);
        s.clock.fetch_add(60_000, Ordering::SeqCst);
        let again = s.post("/api/actions", BOT, keyed(key, &fields)).await;
        assert_eq!(again.status, status, "{key}");
        assert_eq!(
            again.body.get("idempotent_replay"),
            Some(&Value::Bool(true))
        );
        let mut expected = keys_of(&first);
        expected.push("idempotent_replay".into());
        expected.sort();
        assert_eq!(keys_of(&again), expected, "{key}: the same shape");
        for k in ["error", "action_id"] {
            assert_eq!(again.body.get(k), first.body.get(k), "{key}: {k}");
        }
        assert_eq!(
            again.body.get("decision"),
            first.body.get("decision"),
            "{key}"
        );
        assert_eq!(
            again.str_at("action", "created_at"),
            first.str_at("action", "created_at"),
            "{key}"
        );
        assert_eq!(tip_of(&s), tip, "{key}: a replay writes nothing");
    }
    // The guard's recorded block, replayed: still a block.
    let first = s
        .post("/api/guard?record=true", BOT, keyed("k-g", sql))
        .await;
    assert_eq!((first.status, first.str("decision")), (200, "block"));
    let again = s
        .post("/api/guard?record=true", BOT, keyed("k-g", sql))
        .await;
    assert_eq!(
        (
            again.status,
            again.str("decision"),
            again.str("decision_id")
        ),
        (200, "block", first.str("decision_id"))
    );
    assert_eq!(again.str("action_status"), "blocked");

    // Refusals that wrote nothing leave the key free.
    for (key, bad) in [
        ("k-v1", r#""status":"unknown""#),
        ("k-v2", r#""client_capabilities":"execution_claims""#),
        ("k-v3", r#""act":{"kind":"shell","n":1e400}"#),
    ] {
        let tip = tip_of(&s);
        let g = s.post("/api/actions", BOT, keyed(key, bad)).await;
        assert_eq!(g.status, 400, "{key}: {:?}", g.body);
        assert_eq!(tip_of(&s), tip, "{key}: nothing written");
        let g = s.post("/api/actions", BOT, keyed(key, "")).await;
        assert_eq!(
            (g.status, g.body.get("idempotent_replay")),
            (201, None),
            "{key}"
        );
    }
}

/// Issue 43, item 3: a creation that failed with 503 (the remote store down) stored nothing;
/// once the store is back, the retry under the same key creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_that_failed_unavailable_may_create_on_retry() {
    let s = server_with(None, |dir| Target::Remote {
        url: dir.join("remote.git").display().to_string(),
        ref_name: "refs/heads/main".into(),
        timeout: None,
    });
    for route in ["/api/actions", "/api/guard?record=true"] {
        let key = format!("k5-{route}");
        let g = s.post(route, BOT, keyed(&key, "")).await;
        assert_eq!(g.status, 503, "{route}: {:?}", g.body);
    }
    Store::open_or_init_bare(&s._tmp.path().join("remote.git"), "refs/heads/main").unwrap();
    for route in ["/api/actions", "/api/guard?record=true"] {
        let key = format!("k5-{route}");
        let g = s.post(route, BOT, keyed(&key, "")).await;
        assert!(
            matches!(g.status, 200 | 201) && g.body.get("idempotent_replay").is_none(),
            "{route}: {} {:?}",
            g.status,
            g.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_answers_201_202_403_and_replays() {
    let s = server();
    let body = |ty: &str, act: &str| {
        format!(
            r#"{{"action_type":"{ty}","declared_goal":"g","agent_id":"agent-1","act":{act},"idempotency_key":"{ty}","client_capabilities":["execution_claims"]}}"#
        )
    };
    let g = s.post("/api/actions", BOT, &body("build", ACT)).await;
    assert_eq!(g.status, 201);
    let id = g.str("action_id").to_owned();
    assert_eq!(g.str_at("action", "status"), Some("running"));
    let g = s.post("/api/actions", BOT, &body("build", ACT)).await;
    assert_eq!((g.status, g.str("action_id")), (201, id.as_str()));
    assert_eq!(g.body.get("idempotent_replay"), Some(&Value::Bool(true)));
    assert_eq!(
        s.post("/api/actions", BOT, &body("deploy", ACT))
            .await
            .status,
        202
    );
    let g = s
        .post("/api/actions", BOT, &body("query", r#"{"kind":"sql"}"#))
        .await;
    assert_eq!(
        (g.status, g.str("error")),
        (403, "Action blocked by policy")
    );
    assert_eq!(g.str_at("decision", "decision"), Some("block"));
    // An explicit id; taken by another principal: 409; no agent: 400.
    let g = s
        .post(
            "/api/actions",
            BOT,
            r#"{"action_type":"x","agent_id":"a","action_id":"act_mine"}"#,
        )
        .await;
    assert_eq!((g.status, g.str("action_id")), (201, "act_mine"));
    let g = s
        .post(
            "/api/actions",
            OTHER,
            r#"{"action_type":"x","agent_id":"a","action_id":"act_mine"}"#,
        )
        .await;
    assert_eq!(g.status, 409);
    assert_eq!(
        s.post("/api/actions", BOT, r#"{"action_type":"x"}"#)
            .await
            .status,
        400
    );
    assert_eq!(
        s.post(
            "/api/actions",
            BOT,
            r#"{"action_type":"x","agent_id":"a","status":"unknown"}"#
        )
        .await
        .status,
        400
    );
    // Reads.
    let g = s.get(format!("/api/actions/{id}"), OTHER).await;
    assert_eq!(g.status, 200);
    assert_eq!(g.str_at("action", "action_type"), Some("build"));
    for missing in ["act_missing", "bad%20id", "%FF", "a%2Fb"] {
        assert_eq!(
            s.get(format!("/api/actions/{missing}"), BOT).await.status,
            404
        );
        assert_eq!(
            s.get(format!("/api/actions/{missing}/outcome"), BOT)
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
        let g = s.patch(&uri, BOT, &body).await;
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
        let g = s.patch(&u, key, &body).await;
        assert_eq!(
            (g.status, g.str("code")),
            (409, "EXECUTION_CLAIM_CONFLICT"),
            "{u} {body}"
        );
    }
    // The claim: echoed, not cached; a second is refused, the same attempt id too.
    let g = s.patch(&uri, BOT, &claim_body(A1, ACT)).await;
    assert_eq!(
        (g.status, g.str("action_id"), g.str("attempt_id")),
        (200, id.as_str(), A1)
    );
    assert_eq!(g.body.get("claimed"), Some(&Value::Bool(true)));
    assert_eq!(g.headers.get(header::CACHE_CONTROL).unwrap(), "no-store");
    for attempt in [A1, A2] {
        let g = s.patch(&uri, BOT, &claim_body(attempt, ACT)).await;
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
        let g = s.post(&out, BOT, body).await;
        assert_eq!(g.status, status, "{body}");
    }
    let big = format!(
        r#"{{"status":"partial","progress":{{"s":"{}"}}}}"#,
        "x".repeat(10_000)
    );
    assert_eq!(s.post(&out, BOT, &big).await.status, 400);
    assert_eq!(
        s.post(
            "/api/actions/act_missing/outcome",
            BOT,
            r#"{"status":"completed"}"#
        )
        .await
        .status,
        404
    );
    s.clock.fetch_add(1234, Ordering::SeqCst);
    let g = s.post(&out, BOT, r#"{"status":"partial","progress":{"step":2},"summary":"half done; key sk-abcdefghijklmnop"}"#).await;
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
    let g = s.post(&out, BOT, r#"{"status":"completed"}"#).await;
    assert_eq!(
        (g.status, g.str("error"), g.str("current_status")),
        (409, "outcome already set", "partial")
    );
    let g = s.get(&out, BOT).await;
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
    let g = s
        .patch(
            format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"cancelled","output_summary":"stop"}"#,
        )
        .await;
    assert_eq!(g.status, 200);
    assert_eq!(g.str_at("action", "outcome_status"), Some("failed"));
    let g = s
        .patch(
            format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!((g.status, g.str("status")), (409, "cancelled"));
    let g = s
        .post(
            format!("/api/actions/{id2}/outcome"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!((g.status, g.str("current_status")), (409, "failed"));
    assert_eq!(
        s.patch("/api/actions/act_missing", BOT, r#"{"status":"completed"}"#)
            .await
            .status,
        404
    );
    assert_eq!(
        s.patch(
            format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"running"}"#
        )
        .await
        .status,
        400
    );
    // Lifecycle gate: pending approval refuses outcomes.
    let id3 = recorded(&s, "deploy", ACT, "").await;
    let g = s
        .post(
            format!("/api/actions/{id3}/outcome"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!(
        (g.status, g.str("current_status")),
        (409, "pending_approval")
    );
}

/// A claim whose act holds a number canonical JSON cannot write exactly shares its hash with
/// another act (`1e400` and `null`, `-0` and `0`) or cannot be written at all (2^53+1), so it is refused as a bad
/// request before anything is read, as the CLI's claim refuses it: it must never claim the
/// action created for that other act.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_with_a_lossy_act_is_a_bad_request() {
    let s = server();
    for (created, lossy) in [
        (
            r#"{"kind":"shell","n":null}"#,
            r#"{"kind":"shell","n":1e400}"#,
        ),
        (
            r#"{"kind":"shell","n":null}"#,
            r#"{"kind":"shell","n":-1e400}"#,
        ),
        (r#"{"kind":"shell","n":0}"#, r#"{"kind":"shell","n":-0}"#),
        (
            r#"{"kind":"shell","n":1}"#,
            r#"{"kind":"shell","n":9007199254740993}"#,
        ),
        (
            r#"{"kind":"shell","deep":[{"a":[null]}]}"#,
            r#"{"kind":"shell","deep":[{"a":[1e999]}]}"#,
        ),
    ] {
        let id = recorded(&s, "build", created, "").await;
        let uri = format!("/api/actions/{id}");
        let g = s.patch(&uri, BOT, claim_body(A1, lossy)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (400, "INVALID_EXECUTION_CLAIM"),
            "{lossy}: {:?}",
            g.body
        );
        assert!(g.str("reason").contains("lossy number"), "{:?}", g.body);
        let g = s.patch(&uri, BOT, claim_body(A1, created)).await;
        assert_eq!(
            (g.status, g.body.get("claimed")),
            (200, Some(&Value::Bool(true))),
            "{created}: nothing was granted to the lossy claim"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_by_operators_only() {
    let s = server();
    let id = recorded(&s, "deploy", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    assert_eq!(
        s.patch(&uri, BOT, &claim_body(A1, ACT)).await.status,
        409,
        "not yet approved"
    );
    let g = s
        .post(format!("{uri}/approve"), BOT, r#"{"decision":"approve"}"#)
        .await;
    assert_eq!((g.status, g.str("code")), (403, "OPERATOR_REQUIRED"));
    assert_eq!(
        s.post(format!("{uri}/approve"), OPS, r#"{"decision":"maybe"}"#)
            .await
            .status,
        400
    );
    assert_eq!(
        s.post(
            "/api/actions/act_missing/approve",
            OPS,
            r#"{"decision":"allow"}"#
        )
        .await
        .status,
        404
    );
    let g = s
        .post(format!("{uri}/approve"), OPS, r#"{"decision":"allow"}"#)
        .await;
    assert_eq!(g.status, 200);
    let a = g.body.get("action").unwrap();
    assert_eq!(a.get("approved_by").and_then(Value::as_str), Some("ops"));
    assert_eq!(a.get("status").and_then(Value::as_str), Some("running"));
    let g = s
        .post(format!("{uri}/approve"), OPS, r#"{"decision":"deny"}"#)
        .await;
    assert_eq!((g.status, g.str("status")), (409, "running"));
    // The grant lasts 15 minutes and is used once.
    s.clock.fetch_add(15 * 60_000 + 1, Ordering::SeqCst);
    assert_eq!(
        s.patch(&uri, BOT, &claim_body(A1, ACT)).await.status,
        409,
        "grant expired"
    );
    let id2 = recorded(&s, "deploy", ACT, "").await;
    let uri2 = format!("/api/actions/{id2}");
    assert_eq!(
        s.post(format!("{uri2}/approve"), OPS, r#"{"decision":"approve"}"#)
            .await
            .status,
        200
    );
    s.clock.fetch_add(15 * 60_000, Ordering::SeqCst);
    let g = s.patch(&uri2, BOT, &claim_body(A1, ACT)).await;
    assert_eq!(g.status, 200);
    assert_eq!(s.patch(&uri2, BOT, &claim_body(A2, ACT)).await.status, 409);
    let g = s.get(&uri2, BOT).await;
    let a = g.body.get("action").unwrap();
    assert_eq!(
        a.get("approval_grant_used_at"),
        a.get("execution_claimed_at")
    );
    assert_eq!(
        s.post(format!("{uri2}/outcome"), BOT, r#"{"status":"completed"}"#)
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
    // A denial fails the action (the reference's), its message the default one.
    let id3 = recorded(&s, "deploy", ACT, "").await;
    let g = s
        .post(
            format!("/api/actions/{id3}/approve"),
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
    let a = g.body.get("action").unwrap();
    assert_eq!(a.get("status").and_then(Value::as_str), Some("failed"));
    assert_eq!(
        a.get("error_message").and_then(Value::as_str),
        Some("Denied by human operator")
    );
    assert_eq!(a.get("approved_by"), Some(&Value::Null));
    assert_eq!(
        s.patch(format!("/api/actions/{id3}"), BOT, &claim_body(A1, ACT))
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
    let g = s.get(format!("/api/actions/{id}"), BOT).await;
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
        (200, Some(&Value::from(1)))
    );
    assert_eq!(g.body.get("ok"), Some(&Value::Bool(true)));
    assert_eq!(
        status(&s, &running).await,
        ("unknown".into(), "lost_confirmation".into())
    );
    // Awaiting an operator: nothing ran, so its outcome is never swept (it expires instead).
    assert_eq!(
        status(&s, &approval).await,
        ("pending_approval".into(), "pending".into())
    );
    assert_eq!(
        status(&s, &fresh).await,
        ("running".into(), "pending".into())
    );
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
    assert_eq!(g.body.get("rows_swept"), Some(&Value::from(0)));
}

/// A stopping server abandons a sweep's scan (a scan of a large repository takes minutes, and
/// a stop waits for what holds the app): the sweep fails, naming the stop, and nothing is swept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_abandons_the_sweep_and_sweeps_nothing() {
    let s = server();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(recorded(&s, "build", ACT, "").await);
    }
    s.clock.fetch_add(16 * 60_000, Ordering::SeqCst);
    let store = Store::open(&s.repo).unwrap();
    let before = store.tip("refs/heads/main").unwrap();
    s.app.as_ref().unwrap().stop();
    let ok = [("authorization", "Bearer cron-secret")];
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
    // The cron endpoint answers every failure with 500 "Sweep failed", as the reference does;
    // the client is told to retry later, the server's log says why.
    assert_eq!(g.status, 500, "{:?}", g.body);
    assert_eq!(g.str("code"), "LEDGER_UNAVAILABLE", "{:?}", g.body);
    assert!(g.str("reason").contains("retry later"), "{:?}", g.body);
    assert_eq!(store.tip("refs/heads/main").unwrap(), before);
    for id in &ids {
        assert_eq!(status(&s, id).await, ("running".into(), "pending".into()));
    }
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
    finality::claim(&store, &options, &id, &request, Timestamp::from_millis(T0)).unwrap();
    // ...and the server refuses a second claim and shows the CLI's.
    assert_eq!(
        s.patch(format!("/api/actions/{id}"), BOT, &claim_body(A2, ACT))
            .await
            .status,
        409
    );
    let g = s.get(format!("/api/actions/{id}"), BOT).await;
    assert_eq!(g.str_at("action", "execution_attempt_id"), Some(A1));
    // The server reports; the CLI reads it.
    assert_eq!(
        s.post(
            format!("/api/actions/{id}/outcome"),
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
        timeout: None,
    });
    let g = s
        .patch("/api/actions/act_x", BOT, &claim_body(A1, ACT))
        .await;
    assert_eq!(
        (g.status, g.str("code")),
        (503, "EXECUTION_CLAIM_UNAVAILABLE")
    );
    let g = s.guard(BOT, "build", ACT, "").await;
    assert_eq!(g.status, 503);
    assert_eq!(s.get("/api/actions/act_x", BOT).await.status, 503);
}

/// A remote whose history was rewritten under a running server (a force push of an unrelated
/// commit) is not built on: every write answers 503 "retry later" without the commits or the
/// remote's path, and the server's log names both commits; the remote keeps the rewritten tip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_remote_is_not_built_on_by_serve() {
    let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let lines = log.clone();
    let remote_dir: Arc<std::sync::Mutex<Option<std::path::PathBuf>>> = Arc::default();
    let seen = remote_dir.clone();
    let s = server_custom(
        None,
        |dir| {
            let remote = dir.join("remote.git");
            Store::open_or_init_bare(&remote, "refs/heads/main").unwrap();
            *seen.lock().unwrap() = Some(remote.clone());
            Target::Remote {
                url: remote.display().to_string(),
                ref_name: "refs/heads/main".into(),
                timeout: Some(std::time::Duration::from_secs(30)),
            }
        },
        move |st| {
            st.log = Arc::new(move |l: &str| lines.lock().unwrap().push(l.to_owned()));
        },
    );
    let remote = remote_dir.lock().unwrap().clone().unwrap();
    let created = s.guard(BOT, "build", ACT, "").await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let store = Store::open(&remote).unwrap();
    let confirmed = store.tip("refs/heads/main").unwrap().unwrap();
    let unrelated = store
        .write_commit(
            None,
            &[("other".to_owned(), b"x\n".to_vec())],
            "force-pushed\n",
            &crate::store::Signature {
                name: "someone".into(),
                email: "someone@invalid".into(),
                time_seconds: 1_700_000_000,
            },
        )
        .unwrap();
    store
        .update_ref("refs/heads/main", Some(confirmed), unrelated, "force")
        .unwrap();
    let answers = [
        s.guard(BOT, "build", ACT, "").await,
        s.post("/api/actions", BOT, guard_body("deploy", ACT, ""))
            .await,
    ];
    for g in answers {
        let text = crate::canonical::to_canonical_unchecked(&g.body);
        assert_eq!(g.status, 503, "{text}");
        assert_eq!(g.str("code"), "LEDGER_UNAVAILABLE", "{text}");
        for hidden in [confirmed.to_string(), unrelated.to_string()] {
            assert!(!text.contains(&hidden), "{text}");
        }
        assert!(!text.contains(&remote.display().to_string()), "{text}");
    }
    assert_eq!(store.tip("refs/heads/main").unwrap(), Some(unrelated));
    let logged = log.lock().unwrap().join("\n");
    assert!(
        logged.contains("was rewritten")
            && logged.contains(&confirmed.to_string())
            && logged.contains(&unrelated.to_string()),
        "{logged}"
    );
}

/// A remote that is down (a path that is no repository, an https URL with a token that cannot
/// be reached) is described to clients as an unavailable store to retry later, on every route
/// that reads or writes it (reads, creation, guard with record, claim, close, outcome, cron
/// sweep): never its URL or path, its credential, or git's lines, and never as invalid input.
/// Those go to the server's log, redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_remote_is_described_without_the_servers_internals() {
    for remote in [
        "PATH/no-such-remote.git",
        "https://x-access-token:ghs_SECRET43@127.0.0.1:9/o/r.git",
    ] {
        let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let lines = log.clone();
        let s = server_custom(
            Some("cron-secret"),
            |dir| Target::Remote {
                url: remote.replace("PATH", &dir.display().to_string()),
                ref_name: "refs/heads/main".into(),
                timeout: Some(std::time::Duration::from_secs(10)),
            },
            move |st| {
                st.log = Arc::new(move |l: &str| lines.lock().unwrap().push(l.to_owned()));
            },
        );
        let cron = [("authorization", "Bearer cron-secret")];
        let answers = [
            s.get("/api/actions/act_x", BOT).await,
            s.get("/api/actions/act_x/outcome", BOT).await,
            s.post("/api/actions", BOT, guard_body("build", ACT, ""))
                .await,
            s.guard(BOT, "build", ACT, "").await,
            s.patch("/api/actions/act_x", BOT, claim_body(A1, ACT))
                .await,
            s.patch("/api/actions/act_x", BOT, r#"{"status":"cancelled"}"#)
                .await,
            s.post(
                "/api/actions/act_x/outcome",
                BOT,
                r#"{"status":"completed"}"#,
            )
            .await,
            call_raw(&s, "GET", "/api/cron/outcome-sweep", &cron, vec![]).await,
            s.get("/healthz", BOT).await,
        ];
        for g in answers {
            let text = crate::canonical::to_canonical_unchecked(&g.body);
            assert!(
                g.status == 503 || (g.status == 500 && text.contains("Sweep failed")),
                "{remote}: {} {text}",
                g.status
            );
            for leak in [
                "SECRET43",
                "no-such-remote",
                "127.0.0.1",
                "x-access-token",
                "ls-remote",
                "fatal",
                "git ",
                "/tmp",
                "invalid remote",
                "INVALID_INPUT",
            ] {
                assert!(!text.contains(leak), "{remote}: {leak} in {text}");
            }
            assert!(text.contains("retry later"), "{remote}: {text}");
        }
        let logged = log.lock().unwrap().join("\n");
        assert!(
            logged.contains("ls-remote"),
            "{remote}: the log says why: {logged}"
        );
        assert!(!logged.contains("SECRET43"), "{logged}");
    }
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
    // The sweeper logs after its sweep has landed, so the status can be visible before the line.
    let logged = || {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("1 stale outcome(s)"))
    };
    for _ in 0..500 {
        if logged() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(logged(), "{:?}", lines.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_checked_against_the_current_policy() {
    let a = server();
    let allowed = recorded(&a, "build", ACT, "").await;
    let approved = recorded(&a, "deploy", ACT, "").await;
    let uri = format!("/api/actions/{approved}/approve");
    assert_eq!(
        a.post(&uri, OPS, r#"{"decision":"approve"}"#).await.status,
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
    let g = b
        .patch(format!("/api/actions/{allowed}"), BOT, &claim_body(A1, ACT))
        .await;
    assert_eq!((g.status, g.str("code")), (409, "EXECUTION_CLAIM_CONFLICT"));
    let g = b
        .patch(
            format!("/api/actions/{approved}"),
            BOT,
            &claim_body(A1, ACT),
        )
        .await;
    assert_eq!(g.status, 200);
    let g = a
        .patch(format!("/api/actions/{still}"), BOT, &claim_body(A1, ACT))
        .await;
    assert_eq!(g.status, 200);
}

/// Issue 43 item 1, through `serve`: three servers share one remote, B's clock 2 h ahead of
/// A's, C's 2 h behind. No cron sweep closes a claim made seconds ago on another server: B and
/// A only see the fresh claims (A's and C's), C says A's records are from its future
/// (`clock_skew`, and in its log) and acts on nothing, and both real outcome reports land. An
/// action left pending is swept by B once the timeout has passed on B's clock since B first saw
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_with_skewed_clocks_never_sweep_a_fresh_claim() {
    let shared = tempfile::tempdir().unwrap();
    let remote = shared.path().join("remote.git");
    Store::open_or_init_bare(&remote, "refs/heads/main").unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let on = |offset_min: i64, log: Option<Arc<std::sync::Mutex<Vec<String>>>>| {
        let url = remote.display().to_string();
        let s = server_custom(
            Some("cron-secret"),
            move |_| Target::Remote {
                url,
                ref_name: "refs/heads/main".into(),
                timeout: Some(std::time::Duration::from_secs(10)),
            },
            move |st| {
                if let Some(lines) = log {
                    st.log = Arc::new(move |l: &str| lines.lock().unwrap().push(l.to_owned()));
                }
            },
        );
        s.clock.store(T0 + offset_min * 60_000, Ordering::SeqCst);
        s
    };
    let (a, b, c) = (on(0, None), on(120, None), on(-120, Some(log.clone())));
    async fn sweep(s: &Server) -> Got {
        let cron = [("authorization", "Bearer cron-secret")];
        call_raw(s, "GET", "/api/cron/outcome-sweep", &cron, vec![]).await
    }
    async fn claimed(s: &Server) -> String {
        let id = recorded(s, "build", ACT, "").await;
        let g = s
            .patch(format!("/api/actions/{id}"), BOT, claim_body(A1, ACT))
            .await;
        assert_eq!(g.status, 200, "{:?}", g.body);
        id
    }
    let a_fresh = claimed(&a).await;
    let a_left = claimed(&a).await;
    let c_fresh = claimed(&c).await;
    let swept = |g: &Got| g.body.get("rows_swept").and_then(Value::as_f64);
    let waiting = |g: &Got| g.body.get("waiting").and_then(Value::as_f64);
    let skew = |g: &Got| match g.body.get("clock_skew") {
        Some(Value::Array(v)) => v
            .iter()
            .map(|n| {
                (
                    n.get("action_id")
                        .and_then(Value::as_str)
                        .unwrap()
                        .to_owned(),
                    n.get("time").and_then(Value::as_str).unwrap().to_owned(),
                )
            })
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    // B, ahead of everyone: three pending claims, all seconds old on their writers' clocks.
    let g = sweep(&b).await;
    assert_eq!(
        (g.status, swept(&g), waiting(&g)),
        (200, Some(0.0), Some(3.0))
    );
    assert_eq!(skew(&g), []);
    // A, ahead of C: C's claim is not stale for it either.
    let g = sweep(&a).await;
    assert_eq!((swept(&g), waiting(&g)), (Some(0.0), Some(3.0)));
    // C, behind A: A's two actions are from its future; said, in the answer and the log.
    let g = sweep(&c).await;
    assert_eq!((swept(&g), waiting(&g)), (Some(0.0), Some(3.0)));
    let mut named = skew(&g);
    named.sort();
    // First sightings are read: the claims' times are named too.
    let mut want = vec![
        (a_fresh.clone(), "claimed_at".to_owned()),
        (a_fresh.clone(), "created_at".to_owned()),
        (a_left.clone(), "claimed_at".to_owned()),
        (a_left.clone(), "created_at".to_owned()),
    ];
    want.sort();
    assert_eq!(named, want);
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("clock skew") && l.contains(&a_fresh)),
        "{:?}",
        log.lock().unwrap()
    );
    // Both real reports land.
    let done = format!(r#"{{"status":"completed","attempt_id":"{A1}"}}"#);
    for (s, id) in [(&a, &a_fresh), (&c, &c_fresh)] {
        let g = s
            .post(format!("/api/actions/{id}/outcome"), BOT, &done)
            .await;
        assert_eq!(g.status, 200, "{id}: {:?}", g.body);
    }
    // Exactly the timeout later on B's clock: not yet; one millisecond more: a_left is swept.
    b.clock.fetch_add(15 * 60_000, Ordering::SeqCst);
    let g = sweep(&b).await;
    assert_eq!((swept(&g), waiting(&g)), (Some(0.0), Some(1.0)));
    b.clock.fetch_add(1, Ordering::SeqCst);
    let g = sweep(&b).await;
    assert_eq!(swept(&g), Some(1.0));
    assert_eq!(
        g.body.get("swept"),
        Some(&Value::Array(vec![Value::str(a_left.as_str())]))
    );
    assert_eq!(
        status(&a, &a_left).await,
        ("unknown".into(), "lost_confirmation".into())
    );
}

/// Acts the act hash cannot take one to one, as `(act, path named)`: keys equal after NFC
/// normalisation (at the root and nested), a key or string not in NFC, numbers written with
/// more digits than a double holds (underflow, rounding to 1, rounding to 0.1), overflow, and
/// acts that are not objects.
const UNHASHABLE: [(&str, &str); 11] = [
    (
        r#"{"kind":"shell","command":"ls","\u00e9":1,"e\u0301":2}"#,
        "$ has two keys equal after Unicode NFC normalisation",
    ),
    (
        r#"{"kind":"sql","statement":"DROP TABLE users","q":{"a":[{"\u212b":1,"\u00c5":2}]}}"#,
        "$.q.a[0] has two keys equal",
    ),
    (
        r#"{"kind":"shell","command":"rm cafe\u0301"}"#,
        "at $.command is not in Unicode normalisation form C",
    ),
    (
        r#"{"kind":"shell","args":{"e\u0301":1}}"#,
        "at $.args is not in Unicode normalisation form C",
    ),
    (
        r#"{"kind":"shell","n":1e-400}"#,
        "$.n is written with more digits",
    ),
    (
        r#"{"kind":"shell","n":1.00000000000000000001}"#,
        "$.n is written with more digits",
    ),
    (
        r#"{"kind":"shell","x":[0.10000000000000001]}"#,
        "$.x[0] is written with more digits",
    ),
    (r#"{"kind":"shell","n":1e400}"#, "$.n is a lossy number"),
    (r#"{"kind":"shell","n":-1e-400}"#, "$.n is a lossy number"),
    (r#""ls""#, "$ must be a JSON object"),
    ("[1,2]", "$ must be a JSON object"),
];

/// Every act the hash cannot take one to one is refused by `POST /api/actions` and by the guard
/// (recorded or not) as a bad request naming its path, and nothing is written: no action is
/// ever created with `act_content_hash: null` for an act it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhashable_acts_are_refused_at_creation() {
    let s = server();
    for (act, path) in UNHASHABLE {
        let body = guard_body("build", act, "");
        for (uri, what) in [
            ("/api/actions", "create"),
            ("/api/guard?record=true", "recorded guard"),
            ("/api/guard", "guard"),
        ] {
            let g = s.post(uri, BOT, &body).await;
            let details = g.body.get("details").map(canonical::to_canonical_unchecked);
            assert_eq!(
                (g.status, g.str("error")),
                (400, "Validation failed"),
                "{what} {act}: {:?}",
                g.body
            );
            assert!(
                details.as_deref().is_some_and(|d| d.contains(path)),
                "{what} {act}: {details:?}"
            );
        }
    }
    let tip = Store::open(&s.repo)
        .unwrap()
        .tip("refs/heads/main")
        .unwrap();
    assert_eq!(tip, None, "nothing was recorded");
    // The same acts written exactly are created, with a hash.
    let g = s
        .post(
            "/api/actions",
            BOT,
            guard_body(
                "build",
                r#"{"kind":"shell","n":0,"x":[0.1],"\u00e9":1}"#,
                "",
            ),
        )
        .await;
    assert_eq!(g.status, 201, "{:?}", g.body);
    assert!(
        g.str_at("action", "act_content_hash")
            .is_some_and(|h| h.starts_with("sha256:")),
        "{:?}",
        g.body
    );
}

/// A claim must present the act the action was created for: no act, `null`, an act whose
/// numbers round to the created one's, or one with NFC-equal keys is refused (409 or 400,
/// never granted); the created act, its numbers written differently but exactly, is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_must_present_the_created_act() {
    let s = server();
    let id = recorded(&s, "build", r#"{"kind":"shell","command":"ls","n":0}"#, "").await;
    let uri = format!("/api/actions/{id}");
    let no_act = format!(r#"{{"claim_execution":true,"attempt_id":"{A1}","agent_id":"agent-1"}}"#);
    assert_eq!(s.patch(&uri, BOT, &no_act).await.status, 409, "no act");
    assert_eq!(
        s.patch(&uri, BOT, claim_body(A1, "null")).await.status,
        409,
        "null act"
    );
    for act in [
        r#"{"kind":"shell","command":"ls","n":1e-400}"#,
        r#"{"kind":"shell","command":"ls","n":0,"\u00e9":1,"e\u0301":2}"#,
        r#"{"kind":"shell","command":"ls","n":-1e-400}"#,
        r#""ls""#,
    ] {
        let g = s.patch(&uri, BOT, claim_body(A1, act)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (400, "INVALID_EXECUTION_CLAIM"),
            "{act}: {:?}",
            g.body
        );
        assert!(
            g.str("reason").starts_with("invalid act: $"),
            "{:?}",
            g.body
        );
    }
    let g = s
        .patch(
            &uri,
            BOT,
            claim_body(A1, r#"{"kind":"shell","command":"ls","n":0.0e5}"#),
        )
        .await;
    assert_eq!(
        (g.status, g.body.get("claimed")),
        (200, Some(&Value::Bool(true))),
        "{:?}",
        g.body
    );
}

/// Only the claimant's principal (the action's creator) or an operator key settles an action:
/// another key's outcome report and legacy close answer exactly as for an unknown id (404),
/// so they reveal nothing; the owner's report then lands, and an operator may report or
/// close any action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_claimant_or_an_operator_settles_an_action() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    assert_eq!(s.patch(&uri, BOT, claim_body(A1, ACT)).await.status, 200);
    let failed = r#"{"status":"failed","error_message":"boom"}"#;
    let cancel = r#"{"status":"cancelled"}"#;
    for missing in ["/api/actions/act_missing", "/api/actions/not%2Fan%2Fid"] {
        let theirs = s.post(format!("{uri}/outcome"), OTHER, failed).await;
        let unknown = s.post(format!("{missing}/outcome"), OTHER, failed).await;
        assert_eq!(
            (theirs.status, &theirs.body),
            (404, &unknown.body),
            "outcome"
        );
        let theirs = s.patch(&uri, OTHER, cancel).await;
        let unknown = s.patch(missing, OTHER, cancel).await;
        assert_eq!((theirs.status, &theirs.body), (404, &unknown.body), "close");
    }
    // An invalid report is refused the same way, before the action is looked at.
    let bad = r#"{"status":"failed"}"#;
    assert_eq!(
        s.post(format!("{uri}/outcome"), OTHER, bad).await.body,
        s.post("/api/actions/act_missing/outcome", OTHER, bad)
            .await
            .body
    );
    let g = s.get(format!("{uri}/outcome"), BOT).await;
    assert_eq!(
        g.str("status"),
        "pending",
        "nothing was settled: {:?}",
        g.body
    );
    let g = s
        .post(format!("{uri}/outcome"), BOT, r#"{"status":"completed"}"#)
        .await;
    assert_eq!(g.status, 200, "the owner's report lands: {:?}", g.body);
    // An operator key settles another principal's actions: a report, a close.
    for (what, settle) in [("report", true), ("close", false)] {
        let id = recorded(&s, "build", ACT, "").await;
        let uri = format!("/api/actions/{id}");
        assert_eq!(s.patch(&uri, BOT, claim_body(A2, ACT)).await.status, 200);
        let g = if settle {
            s.post(format!("{uri}/outcome"), OPS, failed).await
        } else {
            s.patch(&uri, OPS, cancel).await
        };
        assert_eq!(g.status, 200, "{what}: {:?}", g.body);
    }
    // An unclaimed action is its creator's too.
    let id = recorded(&s, "build", ACT, "").await;
    let g = s.patch(format!("/api/actions/{id}"), OTHER, cancel).await;
    assert_eq!(g.status, 404, "{:?}", g.body);
    let g = s.patch(format!("/api/actions/{id}"), BOT, cancel).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
}

/// Issue 43 item 1, the sightings' life: `serve` keeps them in the repository's sightings file
/// (the one the CLI's `sweep` uses), so a restart does not delay a sweep by one timeout; a
/// settled action is forgotten; a sighting another process wrote between two sweeps is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_sightings_outlive_a_restart_and_are_shared() {
    let shared = tempfile::tempdir().unwrap();
    let repo = shared.path().join("state.git");
    let on = |at: i64| {
        let repo = repo.clone();
        let s = server_custom(
            Some("cron-secret"),
            |_| Target::Local,
            move |st| {
                st.repo = repo;
            },
        );
        s.clock.store(at, Ordering::SeqCst);
        s
    };
    async fn sweep(s: &Server) -> Got {
        let cron = [("authorization", "Bearer cron-secret")];
        call_raw(s, "GET", "/api/cron/outcome-sweep", &cron, vec![]).await
    }
    let stop = |s: Server| {
        s.app.as_ref().unwrap().save_sightings();
        drop(s);
    };
    let file = crate::finality::observations::file_path(&repo, "refs/heads/main", &Target::Local);
    let minute = 60_000;
    let a = on(T0);
    let left = recorded(&a, "build", ACT, "").await;
    let settled = recorded(&a, "build", r#"{"kind":"shell","command":"make"}"#, "").await;
    let g = a
        .patch(
            format!("/api/actions/{settled}"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    stop(a);
    let seen = crate::finality::observations::load(&file).unwrap();
    let id = |s: &str| finality::ActionId::parse(s).unwrap();
    assert_eq!(
        seen.first_seen(&id(&left)),
        Some(Timestamp::from_millis(T0))
    );
    assert_eq!(seen.len(), 1, "the settled action is forgotten");

    // Restarted 16 minutes later: the creation was remembered, so the sweep closes it now.
    let b = on(T0 + 16 * minute);
    let g = sweep(&b).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(
        g.body.get("swept"),
        Some(&Value::Array(vec![Value::str(left.as_str())]))
    );

    // Another server on the repository creates an action and stops; b has never seen it, but
    // its next sweep reads the other's sighting and closes it once a timeout has passed.
    let c = on(T0 + 17 * minute);
    let other = recorded(&c, "build", r#"{"kind":"shell","command":"ls"}"#, "").await;
    stop(c);
    b.clock.store(T0 + 33 * minute, Ordering::SeqCst);
    let g = sweep(&b).await;
    assert_eq!(
        g.body.get("swept"),
        Some(&Value::Array(vec![Value::str(other.as_str())])),
        "{:?}",
        g.body
    );
}

/// A keys file line for `key` (clear, as a client sends it).
fn key_line(principal: &str, key: &str, operator: bool) -> String {
    format!(
        "{principal} {}{}\n",
        hex::encode(auth::sha256(key.as_bytes())),
        if operator { " operator" } else { "" }
    )
}

/// A server whose reload source reads `keys` and `policy.json` in its own directory, as the CLI's
/// does, and whose diagnostic log lines are kept.
struct Reloading {
    s: Server,
    keys_file: PathBuf,
    policy_file: PathBuf,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

fn reloading_server() -> Reloading {
    let dir = tempfile::tempdir().unwrap();
    let (keys_file, policy_file) = (dir.path().join("keys"), dir.path().join("policy.json"));
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true),
    )
    .unwrap();
    std::fs::write(&policy_file, POLICY).unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (kf, pf, logged) = (keys_file.clone(), policy_file.clone(), lines.clone());
    let s = server_custom(
        Some("cron-secret"),
        |_| Target::Local,
        move |settings| {
            settings.reload = Some(Arc::new(move || {
                let keys = auth::Keys::load(&kf).map_err(|e| e.to_string())?;
                let policy = Policy::load(&pf).map_err(|e| e.to_string())?;
                Ok(crate::server::Access { keys, policy })
            }));
            // The diagnostics, not the access lines.
            settings.log = Arc::new(move |line: &str| {
                if !line.starts_with('{') {
                    logged.lock().unwrap().push(line.to_owned());
                }
            });
        },
    );
    Reloading {
        s,
        keys_file,
        policy_file,
        lines,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_keys_and_the_policy_together() {
    const NEW: &str = "k-new-key-material";
    let Reloading {
        s,
        keys_file,
        policy_file,
        lines,
        _dir,
    } = reloading_server();
    let app = s.app.clone().unwrap();
    assert_eq!(s.get("/api/actions/act_x", NEW).await.status, 401);
    let g = s.post("/api/guard", BOT, guard_body("x", ACT, "")).await;
    assert_eq!((g.status, g.str("decision")), (200, "allow"));
    let before = app.access();

    // A new key, a removed key, a new policy: all in force after one reload.
    std::fs::write(
        &keys_file,
        key_line("newbie", NEW, false) + &key_line("ops", OPS, true),
    )
    .unwrap();
    std::fs::write(
        &policy_file,
        r#"{"default":"block","rules":[{"id":"ok","action_type":"ok","verdict":"allow"}]}"#,
    )
    .unwrap();
    app.reload().unwrap();
    assert_eq!(s.get("/api/actions/act_x", NEW).await.status, 404);
    assert_eq!(s.get("/api/actions/act_x", BOT).await.status, 401);
    let g = s.post("/api/guard", NEW, guard_body("x", ACT, "")).await;
    assert_eq!((g.status, g.str("decision")), (200, "block"));
    // What a request took before the reload is unchanged: it finishes with that version.
    assert!(before.keys.authenticate(BOT.as_bytes()).is_some());
    assert_eq!(before.policy, Policy::parse(POLICY, "test").unwrap());
    assert_eq!(
        lines.lock().unwrap().as_slice(),
        ["reloaded: 2 API key(s), 1 policy rule(s)"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_keys_or_policy_file_keeps_the_old_ones_and_says_why() {
    const NEW: &str = "k-new-key-material";
    let Reloading {
        s,
        keys_file,
        policy_file,
        lines,
        _dir,
    } = reloading_server();
    let app = s.app.clone().unwrap();
    let in_force = || app.access();
    let original = in_force();

    // A bad keys file (with a good new policy): neither changes.
    std::fs::write(
        &keys_file,
        key_line("newbie", NEW, false)
            + &format!("pasted {} {NEW}\n", hex::encode(auth::sha256(b"x"))),
    )
    .unwrap();
    std::fs::write(&policy_file, r#"{"default":"block"}"#).unwrap();
    let e = app.reload().unwrap_err();
    assert!(matches!(e, crate::server::ReloadError::Source(_)), "{e}");
    // A good keys file with a bad policy: neither changes either.
    std::fs::write(&keys_file, key_line("newbie", NEW, false)).unwrap();
    std::fs::write(&policy_file, r#"{"default":"maybe"}"#).unwrap();
    app.reload().unwrap_err();
    // No key left: refused, everyone would be locked out.
    std::fs::write(&keys_file, "# nobody\n").unwrap();
    std::fs::write(&policy_file, POLICY).unwrap();
    let e = app.reload().unwrap_err();
    assert!(matches!(e, crate::server::ReloadError::NoKeys), "{e}");
    // A missing file.
    std::fs::remove_file(&keys_file).unwrap();
    app.reload().unwrap_err();

    assert!(Arc::ptr_eq(&original, &in_force()));
    assert_eq!(s.get("/api/actions/act_x", BOT).await.status, 404);
    assert_eq!(s.get("/api/actions/act_x", NEW).await.status, 401);
    let g = s
        .post("/api/guard", BOT, guard_body("deploy", ACT, ""))
        .await;
    assert_eq!(g.str("decision"), "require_approval", "{:?}", g.body);

    let lines = lines.lock().unwrap().clone();
    let keys_name = keys_file.display().to_string();
    let policy_name = policy_file.display().to_string();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for line in &lines {
        assert!(
            line.starts_with("reload refused, the previous keys and policy stay in force: "),
            "{line}"
        );
        // Never the key material, even when it was pasted in clear.
        assert!(!line.contains(NEW), "{line}");
    }
    assert!(
        lines[0].contains(&format!("{keys_name}:2: the third column")),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(&policy_name) && lines[1].contains("default"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("no API key would be left"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].contains(&format!("cannot read the API keys file {keys_name}")),
        "{}",
        lines[3]
    );
}

/// `GET /metrics`: status, content type and text.
async fn metrics_of(s: &Server) -> (u16, String, String) {
    let resp = s
        .router
        .clone()
        .oneshot(
            axum::http::Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let content_type = resp.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        content_type,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_template_and_show_no_action_id() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    assert_eq!(s.get(format!("/api/actions/{id}"), BOT).await.status, 200);
    assert_eq!(
        s.get(format!("/api/actions/{id}/outcome"), BOT)
            .await
            .status,
        200
    );
    assert_eq!(s.get("/api/actions/act_nope", BOT).await.status, 404);
    assert_eq!(
        s.get("/api/no/such/route?token=abc123", BOT).await.status,
        404
    );
    assert_eq!(s.get("/api/actions/act_x", "k-wrong").await.status, 401);
    let cron = [("authorization", "Bearer cron-secret")];
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &cron, vec![]).await;
    assert_eq!(g.status, 200, "{:?}", g.body);

    // Scraped without a key, like /healthz.
    let (status, content_type, text) = metrics_of(&s).await;
    assert_eq!(status, 200);
    assert_eq!(content_type, crate::server::metrics::CONTENT_TYPE);
    for want in [
        r#"action_ledger_http_requests_total{method="POST",route="/api/guard",status="200"} 1"#,
        r#"action_ledger_http_requests_total{method="GET",route="/api/actions/{id}",status="200"} 1"#,
        r#"action_ledger_http_requests_total{method="GET",route="/api/actions/{id}",status="404"} 1"#,
        r#"action_ledger_http_requests_total{method="GET",route="/api/actions/{id}",status="401"} 1"#,
        r#"action_ledger_http_requests_total{method="GET",route="/api/actions/{id}/outcome",status="200"} 1"#,
        r#"action_ledger_http_requests_total{method="GET",route="unmatched",status="404"} 1"#,
        r#"action_ledger_http_requests_total{method="GET",route="/api/cron/outcome-sweep",status="200"} 1"#,
        r#"action_ledger_http_request_duration_seconds_count{method="GET",route="/api/actions/{id}"} 3"#,
        "# TYPE action_ledger_writer_batch_operations histogram",
        "# TYPE action_ledger_writer_commit_duration_seconds histogram",
        "action_ledger_writer_queue_depth 0",
        "# TYPE action_ledger_pack_rollup_duration_seconds histogram",
        r#"action_ledger_sweep_runs_total{result="ok"} 1"#,
        "action_ledger_sweep_actions_swept_total 0",
        r#"action_ledger_reloads_total{result="ok"} 0"#,
        "# EOF",
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    // The guard's and the sweep's batches landed commits.
    let landed = text
        .lines()
        .find_map(|l| l.strip_prefix("action_ledger_writer_commit_duration_seconds_count "))
        .unwrap();
    assert!(landed.parse::<u64>().unwrap() >= 1, "{text}");
    for hidden in [
        id.as_str(),
        "act_nope",
        "act_x",
        "no/such",
        "token",
        "abc123",
        BOT,
        "bot",
    ] {
        assert!(!text.contains(hidden), "{hidden}\n{text}");
    }
    // The scrape itself is counted by the next one.
    let (_, _, text) = metrics_of(&s).await;
    assert!(
        text.contains(
            r#"action_ledger_http_requests_total{method="GET",route="/metrics",status="200"} 1"#
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_logs_one_access_line_without_secrets() {
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let logged = lines.clone();
    let s = server_custom(
        Some("cron-secret"),
        |_| Target::Local,
        move |st| {
            st.log = Arc::new(move |l: &str| logged.lock().unwrap().push(l.to_owned()));
        },
    );
    let g = call_raw(
        &s,
        "POST",
        "/api/guard?record=true",
        &[("x-api-key", BOT), ("x-request-id", "req-42.a:b_c")],
        guard_body("build", ACT, "").into_bytes(),
    )
    .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let id = g.str("action_id").to_owned();
    let uri = format!("/api/actions/{id}?api_key={OTHER}&token=abc123");
    let g = call_raw(
        &s,
        "GET",
        &uri,
        &[("x-api-key", OPS), ("x-request-id", "has space")],
        vec![],
    )
    .await;
    assert_eq!(g.status, 200);
    assert_eq!(
        s.get(format!("/api/actions/{id}"), "k-wrong").await.status,
        401
    );
    assert_eq!(s.get("/no/such/path", BOT).await.status, 404);
    let cron = [("authorization", "Bearer cron-secret")];
    assert_eq!(
        call_raw(&s, "GET", "/api/cron/outcome-sweep", &cron, vec![])
            .await
            .status,
        200
    );

    let lines = lines.lock().unwrap().clone();
    let access: Vec<Value> = lines
        .iter()
        .filter_map(|l| canonical::parse(l).ok())
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("access"))
        .collect();
    assert_eq!(access.len(), 5, "{lines:#?}");
    let field = |v: &Value, k: &str| v.get(k).map(canonical::to_canonical_unchecked);
    let summary: Vec<_> = access
        .iter()
        .map(|v| {
            (
                field(v, "method").unwrap(),
                field(v, "route").unwrap(),
                field(v, "status").unwrap(),
                field(v, "principal"),
                field(v, "request_id"),
            )
        })
        .collect();
    let s_ = |t: &str| t.to_owned();
    assert_eq!(
        summary,
        [
            (
                s_("\"POST\""),
                s_("\"/api/guard\""),
                s_("200"),
                Some(s_("\"bot\"")),
                Some(s_("\"req-42.a:b_c\""))
            ),
            (
                s_("\"GET\""),
                s_("\"/api/actions/{id}\""),
                s_("200"),
                Some(s_("\"ops\"")),
                None
            ),
            (
                s_("\"GET\""),
                s_("\"/api/actions/{id}\""),
                s_("401"),
                None,
                None
            ),
            (s_("\"GET\""), s_("\"unmatched\""), s_("404"), None, None),
            (
                s_("\"GET\""),
                s_("\"/api/cron/outcome-sweep\""),
                s_("200"),
                None,
                None
            ),
        ]
    );
    for v in &access {
        assert!(v.get("duration_ms").and_then(Value::as_f64).unwrap() >= 0.0);
        assert_eq!(
            field(v, "time").as_deref(),
            Some("\"2026-03-01T12:00:00.000Z\"")
        );
        assert_eq!(field(v, "v").as_deref(), Some("1"));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        for k in keys {
            assert!(
                [
                    "type",
                    "v",
                    "method",
                    "route",
                    "status",
                    "duration_ms",
                    "time",
                    "principal",
                    "request_id"
                ]
                .contains(&k.as_str()),
                "{k}"
            );
        }
    }
    for line in &lines {
        for secret in [
            BOT,
            OPS,
            OTHER,
            "k-wrong",
            "cron-secret",
            "abc123",
            "token",
            id.as_str(),
            "make deploy",
        ] {
            assert!(!line.contains(secret), "{secret}: {line}");
        }
    }
}

#[tokio::test]
async fn listings_filter_page_and_refuse_bad_parameters() {
    let s = server();
    let waiting = recorded(&s, "deploy", ACT, "").await;
    let running = recorded(&s, "read", ACT, "").await;
    let blocked = recorded(&s, "read", r#"{"kind":"sql","query":"select 1"}"#, "").await;
    assert_eq!(
        call_raw(&s, "GET", "/api/actions", &[], vec![])
            .await
            .status,
        401
    );
    let rows = |g: &Got| -> Vec<String> {
        g.body
            .get("actions")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .map(|a| {
                a.get("action_id")
                    .and_then(Value::as_str)
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    let num = |g: &Got, k: &str| g.body.get(k).and_then(Value::as_safe_integer);
    let stat = |g: &Got, k: &str| {
        g.body
            .get("stats")
            .and_then(|s| s.get(k))
            .and_then(Value::as_safe_integer)
    };

    // What get_pending_approvals sends: from the pending index, exact totals.
    let g = s
        .get(
            "/api/actions?status=pending_approval&limit=20&offset=0",
            BOT,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(rows(&g), std::slice::from_ref(&waiting));
    assert_eq!(
        (num(&g, "total"), g.str("order")),
        (Some(1), "created_at_desc")
    );
    assert_eq!(stat(&g, "pending_approval"), Some(1));
    assert_eq!(g.str("lastUpdated"), "2026-03-01T12:00:00.000Z");
    // Each row is what GET /api/actions/{id} shows.
    let one = s.get(format!("/api/actions/{waiting}"), BOT).await;
    assert_eq!(
        g.body.get("actions").and_then(Value::as_array).unwrap()[0],
        *one.body.get("action").unwrap()
    );

    // Everything: a walk to the end, with totals and stats.
    let g = s.get("/api/actions", BOT).await;
    let mut all = rows(&g);
    all.sort_unstable();
    let mut want = vec![waiting.clone(), running.clone(), blocked.clone()];
    want.sort_unstable();
    assert_eq!(all, want);
    assert_eq!((num(&g, "total"), g.str("order")), (Some(3), "id_hash"));
    assert_eq!(stat(&g, "blocked"), Some(1));
    assert_eq!(stat(&g, "running"), Some(1));
    assert_eq!(g.body.get("has_more"), Some(&Value::Bool(false)));
    let g = s.get("/api/actions?action_type=deploy", BOT).await;
    assert_eq!(rows(&g), std::slice::from_ref(&waiting));
    let g = s.get("/api/actions?agent_id=agent-2", BOT).await;
    assert_eq!((rows(&g).len(), num(&g, "total")), (0, Some(0)));
    let g = s.get("/api/actions?status=blocked", BOT).await;
    assert_eq!(rows(&g), std::slice::from_ref(&blocked));
    // A page that stopped early knows no total.
    let g = s.get("/api/actions?limit=1", BOT).await;
    assert_eq!(rows(&g).len(), 1);
    assert_eq!(g.body.get("total"), Some(&Value::Null));
    assert_eq!(g.body.get("stats"), Some(&Value::Null));
    assert_eq!(g.body.get("has_more"), Some(&Value::Bool(true)));

    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=ten", "limit"),
        ("offset=-1", "offset"),
        ("status=done", "status"),
        ("days=7", "days"),
    ] {
        for route in ["/api/actions", "/api/actions/stats"] {
            let g = s.get(format!("{route}?{query}"), BOT).await;
            assert_eq!(
                (g.status, g.str("error")),
                (400, "Validation failed"),
                "{route}?{query}"
            );
            let details = g.body.get("details").and_then(Value::as_array).unwrap();
            assert!(
                details[0].as_str().unwrap().contains(param),
                "{route}?{query}: {details:?}"
            );
        }
    }

    let g = s.get("/api/actions/stats?agent_id=agent-1", BOT).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(num(&g, "total"), Some(3));
    assert_eq!(num(&g, "approval"), Some(1));
    assert_eq!(g.str("window"), "all");

    // Guard decisions: the three recorded and one plain guard call.
    let g = s
        .post("/api/guard", BOT, guard_body("risky", ACT, ""))
        .await;
    assert_eq!(g.status, 200);
    let g = s
        .get("/api/guard?agent_id=agent-1&limit=20&offset=0", BOT)
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(num(&g, "total"), Some(4));
    let g = s.get("/api/guard?decision=require_approval", BOT).await;
    let d = &g.body.get("decisions").and_then(Value::as_array).unwrap()[0];
    assert_eq!(d.get("action_type").and_then(Value::as_str), Some("deploy"));
    assert_eq!(
        d.get("matched_policies"),
        Some(&Value::Array(vec![Value::str("deploys")]))
    );
    assert_eq!(
        d.get("reasons"),
        Some(&Value::Array(vec![Value::str("deploys need an operator")]))
    );
    assert_eq!(num(&g, "total"), Some(1));
    let g = s.get("/api/guard?limit=2", BOT).await;
    assert_eq!(
        (
            g.body
                .get("decisions")
                .and_then(Value::as_array)
                .unwrap()
                .len(),
            g.body.get("has_more")
        ),
        (2, Some(&Value::Bool(true)))
    );
    let g = s.get("/api/guard?decision=maybe", BOT).await;
    assert_eq!((g.status, g.str("error")), (400, "Validation failed"));

    // Approved, the action leaves the pending approvals.
    let g = s
        .post(
            format!("/api/actions/{waiting}/approve"),
            OPS,
            r#"{"decision":"allow"}"#,
        )
        .await;
    assert_eq!(g.status, 200);
    let g = s.get("/api/actions?status=pending_approval", BOT).await;
    assert_eq!(num(&g, "total"), Some(0));
    let g = s.get("/api/actions?status=running", BOT).await;
    let mut got = rows(&g);
    got.sort_unstable();
    let mut want = vec![waiting, running];
    want.sort_unstable();
    assert_eq!(got, want);
}

/// An action may be named `stats`: `GET /api/actions/stats` is the stats route, but the action
/// is claimed, reported, read back (its outcome, the listing) and approved as any other.
#[tokio::test]
async fn an_action_named_stats_keeps_its_routes() {
    let s = server();
    let body = r#"{"action_id":"stats","action_type":"build","agent_id":"agent-1","act":ACT,"client_capabilities":["execution_claims"]}"#
        .replace("ACT", ACT);
    let g = s.post("/api/actions", BOT, &body).await;
    assert_eq!(g.status, 201, "{:?}", g.body);
    let g = s
        .patch("/api/actions/stats", BOT, claim_body(A1, ACT))
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let g = s
        .post(
            "/api/actions/stats/outcome",
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let g = s.get("/api/actions/stats/outcome", BOT).await;
    assert_eq!((g.status, g.str("status")), (200, "completed"));
    let g = s.get("/api/actions?status=completed", BOT).await;
    let listed = g.body.get("actions").and_then(Value::as_array).unwrap();
    assert_eq!(
        listed[0].get("action_id").and_then(Value::as_str),
        Some("stats")
    );
    let g = s.get("/api/actions/stats", BOT).await;
    assert_eq!(
        g.body.get("completed").and_then(Value::as_safe_integer),
        Some(1)
    );
}

/// Approval expiry: `approval_wait_seconds` is kept on the action (rounded and clamped), the
/// cron sweep expires an approval nobody gave once the wait plus the 15-minute grace passed on
/// the server's clock, and a decision after that is refused 410 `APPROVAL_EXPIRED`. A denial
/// keeps the operator's reasoning, redacted, as the action's `error_message`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_expire_and_denials_keep_their_reasoning() {
    let s = server();
    let short = recorded(&s, "deploy", ACT, r#","approval_wait_seconds":1.4"#).await;
    let default = recorded(&s, "deploy", ACT, "").await;
    let g = s.get(format!("/api/actions/{short}"), BOT).await;
    let a = g.body.get("action").unwrap();
    assert_eq!(
        a.get("approval_expires_in_seconds"),
        Some(&Value::from(5)),
        "clamped to 5"
    );
    let g = s
        .guard(BOT, "deploy", ACT, r#","approval_wait_seconds":"soon""#)
        .await;
    assert_eq!(g.status, 400);
    assert!(format!("{:?}", g.body).contains("approval_wait_seconds"));
    let ok = [("authorization", "Bearer cron-secret")];
    // 5 s + 15 min later: the short one expires, the default one (300 s) waits.
    s.clock.fetch_add(905_001, Ordering::SeqCst);
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(
        g.body.get("expired"),
        Some(&Value::Array(vec![Value::str(short.as_str())]))
    );
    assert_eq!(g.body.get("rows_swept"), Some(&Value::from(0)));
    let g = s.get(format!("/api/actions/{short}"), BOT).await;
    let a = g.body.get("action").unwrap();
    assert_eq!(a.get("status").and_then(Value::as_str), Some("expired"));
    assert_eq!(
        a.get("error_message").and_then(Value::as_str),
        Some(crate::finality::approval::APPROVAL_EXPIRED_ERROR)
    );
    for decision in ["allow", "deny"] {
        let g = s
            .post(
                format!("/api/actions/{short}/approve"),
                OPS,
                format!(r#"{{"decision":"{decision}"}}"#),
            )
            .await;
        assert_eq!((g.status, g.str("code")), (410, "APPROVAL_EXPIRED"));
        assert!(g.str("error").starts_with("Approval expired"));
    }
    // The default one is still open: the operator denies it, with reasoning.
    let g = s
        .post(
            format!("/api/actions/{default}/approve"),
            OPS,
            r#"{"decision":"deny","reasoning":"not on a Friday; ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(g.body.get("success"), Some(&Value::Bool(true)));
    let a = g.body.get("action").unwrap();
    assert_eq!(a.get("status").and_then(Value::as_str), Some("failed"));
    let message = a.get("error_message").and_then(Value::as_str).unwrap();
    assert!(message.starts_with("not on a Friday"), "{message}");
    assert!(!message.contains("ghp_aaaa"), "{message}");
    assert_eq!(
        a.get("approval_reasoning").and_then(Value::as_str),
        Some(message)
    );
    let sec = g.body.get("security").unwrap();
    assert_eq!(sec.get("clean"), Some(&Value::Bool(false)));
    // Later sweeps leave both alone; the ledger verifies.
    s.clock.fetch_add(3_600_000, Ordering::SeqCst);
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
    assert_eq!(g.body.get("expired"), Some(&Value::Array(vec![])));
    assert_eq!(g.body.get("rows_swept"), Some(&Value::from(0)));
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// A subscriber of `GET /api/stream`: the body's frames, parsed into events as they arrive.
struct Subscriber {
    body: axum::body::BodyDataStream,
    buffer: String,
    /// The `id:` of the last event returned that had one.
    last_id: Option<String>,
}

impl Subscriber {
    /// The next event (`event:` name and parsed `data:`) within `wait`, comments skipped;
    /// `None` when nothing came or the stream ended.
    async fn next(&mut self, wait: std::time::Duration) -> Option<(String, Value)> {
        use futures_util::StreamExt as _;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = None;
                let mut data = String::new();
                let mut id = None;
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_owned());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    } else if let Some(i) = line.strip_prefix("id: ") {
                        id = Some(i.to_owned());
                    }
                }
                match name {
                    Some(n) => {
                        if id.is_some() {
                            self.last_id = id;
                        }
                        return Some((n, canonical::parse(&data).unwrap()));
                    }
                    None => continue, // a comment (the heartbeat)
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??
                .unwrap();
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Whether the stream stays quiet for a moment (no event for it).
    async fn quiet(&mut self) -> bool {
        self.next(std::time::Duration::from_millis(300))
            .await
            .is_none()
    }

    /// The next event, which must come within 5 s.
    async fn expect(&mut self) -> (String, Value) {
        self.next(std::time::Duration::from_secs(5))
            .await
            .expect("an event")
    }

    /// The next event's name and its action's id (which it must have).
    async fn expect_action(&mut self) -> (String, String) {
        let (name, data) = self.expect().await;
        let id = field(&data, "action_id")
            .expect("an action's event")
            .to_owned();
        (name, id)
    }
}

/// `GET /api/stream` with `key`: the status, and the subscriber when it is 200 (its
/// `connected` event read).
async fn subscribe(s: &Server, key: &str) -> (u16, Option<Subscriber>) {
    let (status, sub) = subscribe_after(s, key, None, "").await;
    (status, sub.map(|(sub, _)| sub))
}

/// [`subscribe`] with a `Last-Event-ID` header and a query; also returns `connected`'s data.
async fn subscribe_after(
    s: &Server,
    key: &str,
    last_event_id: Option<&str>,
    query: &str,
) -> (u16, Option<(Subscriber, Value)>) {
    let mut req = axum::http::Request::builder()
        .uri(format!("/api/stream{query}"))
        .header("x-api-key", key)
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let req = req.body(Body::empty()).unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let status = resp.status().as_u16();
    if status != 200 {
        return (status, None);
    }
    assert_eq!(
        resp.headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap()),
        Some("text/event-stream")
    );
    let mut sub = Subscriber {
        body: resp.into_body().into_data_stream(),
        buffer: String::new(),
        last_id: None,
    };
    let (name, data) = sub.expect().await;
    assert_eq!(name, "connected");
    assert_eq!(data.get("status").and_then(Value::as_str), Some("ok"));
    (status, Some((sub, data)))
}

fn field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The stream tells each landed change of an approval in DashClaw's names and row shape: the
/// creation pending approval, the approval (`approved_by`), the denial (`failed`, the reasoning
/// as `error_message`) and the sweep's expiry (`expired`). The creator and the operators see
/// them; another principal does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_tells_approvals_denials_and_expiries() {
    let s = server();
    let (_, bot) = subscribe(&s, BOT).await;
    let (_, ops) = subscribe(&s, OPS).await;
    let (_, other) = subscribe(&s, OTHER).await;
    let (mut bot, mut ops, mut other) = (bot.unwrap(), ops.unwrap(), other.unwrap());

    let approved = recorded(&s, "deploy", ACT, "").await;
    for sub in [&mut bot, &mut ops] {
        let (name, data) = sub.expect().await;
        assert_eq!(name, "action.created");
        assert_eq!(field(&data, "action_id"), Some(approved.as_str()));
        assert_eq!(field(&data, "status"), Some("pending_approval"));
    }
    let g = s
        .post(
            format!("/api/actions/{approved}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    for sub in [&mut bot, &mut ops] {
        let (name, data) = sub.expect().await;
        assert_eq!(name, "action.updated");
        assert_eq!(field(&data, "action_id"), Some(approved.as_str()));
        assert_eq!(field(&data, "approved_by"), Some("ops"));
        // The row is the one `GET /api/actions/{id}` answers.
        let got = s.get(format!("/api/actions/{approved}"), BOT).await;
        assert_eq!(Some(&data), got.body.get("action"));
    }

    let denied = recorded(&s, "deploy", ACT, "").await;
    assert_eq!(bot.expect().await.0, "action.created");
    let g = s
        .post(
            format!("/api/actions/{denied}/approve"),
            OPS,
            r#"{"decision":"deny","reasoning":"not today"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let (name, data) = bot.expect().await;
    assert_eq!(name, "action.updated");
    assert_eq!(field(&data, "action_id"), Some(denied.as_str()));
    assert_eq!(field(&data, "status"), Some("failed"));
    assert_eq!(field(&data, "error_message"), Some("not today"));
    assert_eq!(field(&data, "approved_by"), None);

    let expiring = recorded(&s, "deploy", ACT, r#","approval_wait_seconds":5"#).await;
    assert_eq!(bot.expect().await.0, "action.created");
    s.clock.fetch_add(905_001, Ordering::SeqCst);
    let ok = [("authorization", "Bearer cron-secret")];
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
    assert_eq!(
        g.body.get("expired"),
        Some(&Value::Array(vec![Value::str(expiring.as_str())]))
    );
    // The sweep may also close the approved action nobody claimed: each change is told.
    let expired_seen = |events: &[(String, Value)]| {
        events.iter().any(|(name, data)| {
            name == "action.updated"
                && field(data, "action_id") == Some(expiring.as_str())
                && field(data, "status") == Some("expired")
        })
    };
    let mut told = Vec::new();
    while let Some(e) = bot.next(std::time::Duration::from_millis(500)).await {
        told.push(e);
    }
    assert!(expired_seen(&told), "{told:?}");

    // The operator saw all of it; the other principal none of it.
    let mut seen = Vec::new();
    while let Some(e) = ops.next(std::time::Duration::from_millis(500)).await {
        seen.push(e);
    }
    assert!(expired_seen(&seen), "{seen:?}");
    assert_eq!(seen.len(), 3 + told.len(), "created, updated, created, …");
    assert!(
        other.quiet().await,
        "another principal's actions are not shown"
    );
}

/// A write that is refused lands nothing and tells nothing: a second decision on a decided
/// action (409), a decision on an unknown action (404), a replayed creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_emits_nothing() {
    let s = server();
    let id = recorded(&s, "deploy", ACT, r#","idempotency_key":"once""#).await;
    let g = s
        .post(
            format!("/api/actions/{id}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(g.status, 200);
    let (_, sub) = subscribe(&s, OPS).await;
    let mut sub = sub.unwrap();
    let g = s
        .post(
            format!("/api/actions/{id}/approve"),
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
    assert_eq!(g.status, 409, "{:?}", g.body);
    let g = s
        .post(
            "/api/actions/act_nothere/approve",
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
    assert_eq!(g.status, 404, "{:?}", g.body);
    assert!(sub.quiet().await, "a refused write emits nothing");
}

/// The stream takes the API keys (401 without one), at most `max_streams` subscribers (503
/// past it, a slot freed when one leaves), and ends when the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_is_authenticated_bounded_and_ends_at_shutdown() {
    let s = server_custom(
        Some("cron-secret"),
        |_| Target::Local,
        |st| st.max_streams = 2,
    );
    let g = call_raw(&s, "GET", "/api/stream", &[], vec![]).await;
    assert_eq!((g.status, g.str("error")), (401, "Unauthorized"));
    let g = call(&s, "GET", "/api/stream", "k-wrong", "").await;
    assert_eq!(g.status, 401);
    let (a, first) = subscribe(&s, BOT).await;
    let (b, second) = subscribe(&s, OPS).await;
    assert_eq!((a, b), (200, 200));
    let g = call(&s, "GET", "/api/stream", BOT, "").await;
    assert_eq!(g.status, 503, "{:?}", g.body);
    assert_eq!(
        g.headers
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap()),
        Some(stream::RETRY_AFTER_SECONDS)
    );
    drop(first);
    let (c, third) = subscribe(&s, BOT).await;
    assert_eq!(c, 200, "a closed stream frees its slot");
    s.app.as_ref().unwrap().stop();
    for mut sub in [second.unwrap(), third.unwrap()] {
        let started = std::time::Instant::now();
        assert_eq!(sub.next(std::time::Duration::from_secs(10)).await, None);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "the stream ends when the server stops, not at a timeout"
        );
    }
}

/// A client that reconnects with the last cursor it read (`Last-Event-ID`, or DashClaw's
/// `?lastEventId=`) gets what it missed, in its scope, then the live events: each once. A
/// cursor the server cannot place replays what it keeps and says why in `replayError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_gets_what_it_missed_once() {
    let s = server();
    let (_, ops) = subscribe(&s, OPS).await;
    let mut ops = ops.unwrap();
    // `connected` carries the place the stream starts from.
    let at_connect = ops.last_id.clone().expect("connected has an id");
    let first = recorded(&s, "deploy", ACT, "").await;
    assert_eq!(ops.expect().await.0, "action.created");
    let cursor = ops.last_id.clone().expect("an action's event has an id");
    assert_ne!(cursor, at_connect);
    drop(ops);
    // Missed while disconnected: an approval of the first, a creation by another principal.
    let g = s
        .post(
            format!("/api/actions/{first}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let g = s.guard(OTHER, "build", ACT, "").await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let other = g.str("action_id").to_owned();
    let (_, back) = subscribe_after(&s, OPS, Some(&cursor), "").await;
    let (mut back, connected) = back.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(2)));
    assert_eq!(field(&connected, "lastEventId"), Some(cursor.as_str()));
    assert_eq!(connected.get("replayError"), Some(&Value::Null));
    assert_eq!(
        back.expect_action().await,
        ("action.updated".to_owned(), first.clone())
    );
    assert_eq!(
        back.expect_action().await,
        ("action.created".to_owned(), other.clone())
    );
    // Then live, with nothing replayed twice.
    let third = recorded(&s, "build", ACT, "").await;
    let (_, data) = back.expect().await;
    assert_eq!(field(&data, "action_id"), Some(third.as_str()));
    assert!(back.quiet().await);

    // The creator's key, by the query parameter: only its own actions are replayed.
    let query = format!("?lastEventId={cursor}");
    let (_, bot) = subscribe_after(&s, BOT, None, &query).await;
    let (mut bot, connected) = bot.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(2)));
    for want in [&first, &third] {
        assert_eq!(
            field(&bot.expect().await.1, "action_id"),
            Some(want.as_str())
        );
    }
    assert!(bot.quiet().await);

    // A client that read nothing after `connected` misses nothing when it comes back with its
    // id.
    let (_, early) = subscribe_after(&s, OPS, Some(&at_connect), "").await;
    let (_, connected) = early.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(4)));
    assert_eq!(connected.get("replayError"), Some(&Value::Null));

    // A cursor of another run (or none of the server's): all that is kept, and why.
    let (_, stale) = subscribe_after(&s, OPS, Some("0123abcd-7"), "").await;
    let (_, connected) = stale.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(4)));
    assert!(
        field(&connected, "replayError").is_some_and(|e| e.contains("unknown cursor")),
        "{connected:?}"
    );
}

/// A subscriber that falls more than the channel's capacity behind is told (`stream.lagged`,
/// with how many it missed) and disconnected; the writer never waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_subscriber_is_told_and_dropped() {
    let s = server();
    let (_, sub) = subscribe(&s, OPS).await;
    let mut sub = sub.unwrap();
    let app = s.app.as_ref().unwrap();
    for i in 0..stream::CHANNEL + 10 {
        let event = stream::Event {
            name: "action.updated",
            created_by: "bot".into(),
            data: Value::object([("n", Value::from(i as i64))]),
        };
        app.events.send(event); // never blocks
    }
    let (name, data) = sub.expect().await;
    assert_eq!(name, "stream.lagged");
    assert_eq!(data.get("missed"), Some(&Value::from(10)));
    let started = std::time::Instant::now();
    assert_eq!(sub.next(std::time::Duration::from_secs(10)).await, None);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "then it ends"
    );
}

/// Issue 45: a legacy close keeps the `error_message` it is sent (redacted as every stored
/// text is), and the GET reads it back; the columns DashClaw's server acts on but a close here
/// does not record are a 400 that changes nothing, never a silent 200.
#[tokio::test]
async fn a_legacy_close_keeps_its_error_message_and_refuses_unrecorded_columns() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    for body in [
        r#"{"status":"failed","containment_status":"promoted"}"#,
        r#"{"status":"failed","executed_despite":true}"#,
        r#"{"status":"failed","error_message":7}"#,
    ] {
        let g = s.patch(&uri, BOT, body).await;
        assert_eq!(g.status, 400, "{body}: {:?}", g.body);
    }
    let g = s.get(&uri, BOT).await;
    assert_eq!(
        g.str_at("action", "status"),
        Some("running"),
        "{:?}",
        g.body
    );
    let g = s
        .patch(
            &uri,
            BOT,
            r#"{"status":"failed","error_message":"kaput; ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let message = g.str_at("action", "error_message").unwrap().to_owned();
    assert!(message.starts_with("kaput"), "{message}");
    assert!(!message.contains("ghp_aaaa"), "{message}");
    let g = s.get(&uri, BOT).await;
    assert_eq!(g.str_at("action", "error_message"), Some(message.as_str()));
    assert_eq!(g.str_at("action", "status"), Some("failed"));
    // Still one-shot.
    let g = s
        .patch(&uri, BOT, r#"{"status":"failed","error_message":"again"}"#)
        .await;
    assert_eq!((g.status, g.str("status")), (409, "failed"));
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// Issue 45: a legacy close keeps everything DashClaw's `PATCH` keeps: the `timestamp_end` it
/// is sent (to the millisecond, in UTC) beside the server's `outcome_at`, and the tokens, cost,
/// model, duration, side effects and artifacts, which read back on the row over the creator's
/// values, redacted. Each bad field is a 400 naming the field and the rule; outcome fields
/// without a status, and a PATCH with no outcome field at all, are 400 too; none writes.
#[tokio::test]
async fn a_legacy_close_keeps_its_end_time_tokens_cost_and_model() {
    let s = server();
    let detail = |g: &Got| -> String {
        let d = g.body.get("details").and_then(|d| d.as_array());
        let d = d.into_iter().flatten().filter_map(Value::as_str);
        d.collect::<Vec<_>>().join("; ")
    };
    let id = recorded(&s, "build", ACT, r#","model":"m-create","tokens_in":1"#).await;
    let uri = format!("/api/actions/{id}");
    let g = s.get(&uri, BOT).await;
    assert_eq!(
        g.str_at("action", "model"),
        Some("m-create"),
        "{:?}",
        g.body
    );
    let tip = tip_of(&s);
    for (body, want) in [
        (
            r#"{"status":"completed","tokens_in":-1}"#,
            "tokens_in must be >= 0",
        ),
        (
            r#"{"status":"completed","tokens_out":1.5}"#,
            "tokens_out must be an integer",
        ),
        (
            r#"{"status":"completed","cost_estimate":"3"}"#,
            "cost_estimate must be a number",
        ),
        (
            r#"{"status":"completed","duration_ms":-5}"#,
            "duration_ms must be >= 0",
        ),
        (
            r#"{"status":"completed","side_effects":[1]}"#,
            "side_effects[0] must be a string",
        ),
        (
            r#"{"status":"completed","model":false}"#,
            "model must be a string",
        ),
        (
            r#"{"tokens_in":5,"timestamp_end":"2026-03-01T12:00:00Z"}"#,
            "timestamp_end, tokens_in can only be recorded with status",
        ),
        (
            r#"{"output_summary":"done"}"#,
            "output_summary can only be recorded with status",
        ),
        (
            r#"{}"#,
            "At least one outcome field is required: status, output_summary",
        ),
        (
            r#"{"status":null,"unknown":1}"#,
            "At least one outcome field is required",
        ),
    ] {
        let g = s.patch(&uri, BOT, body).await;
        assert_eq!(g.status, 400, "{body}: {:?}", g.body);
        let d = detail(&g);
        assert!(d.contains(want), "{body}: {d}");
    }
    assert_eq!(tip_of(&s), tip, "a refused PATCH writes nothing");
    let g = s
        .patch(
            &uri,
            BOT,
            r#"{"status":"completed","output_summary":"shipped","timestamp_end":"2026-03-01T13:00:00.123456+01:00","tokens_in":1200,"tokens_out":340,"cost_estimate":0.0425,"model":"m-close","duration_ms":5321,"side_effects":["cache flushed"],"artifacts_created":["s3://bucket/key?token=ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    for g in [g, s.get(&uri, BOT).await] {
        let a = g.body.get("action").expect("action");
        let num = |k: &str| a.get(k).and_then(Value::as_f64);
        assert_eq!(
            g.str_at("action", "timestamp_end"),
            Some("2026-03-01T12:00:00.123Z")
        );
        assert_ne!(
            g.str_at("action", "outcome_at"),
            Some("2026-03-01T12:00:00.123Z")
        );
        assert_eq!(
            g.str_at("action", "model"),
            Some("m-close"),
            "the close's wins"
        );
        assert_eq!(num("tokens_in"), Some(1200.0));
        assert_eq!(num("tokens_out"), Some(340.0));
        assert_eq!(num("cost_estimate"), Some(0.0425));
        assert_eq!(num("duration_ms"), Some(5321.0));
        assert_eq!(g.str_at("action", "outcome_summary"), Some("shipped"));
        let artifacts = format!("{:?}", a.get("artifacts_created"));
        assert!(
            artifacts.contains("[REDACTED]") && !artifacts.contains("ghp_aaaa"),
            "{artifacts}"
        );
        assert!(format!("{:?}", a.get("side_effects")).contains("cache flushed"));
    }
    // The close is one-shot: a second one with other tokens is 409 and changes nothing.
    let g = s
        .patch(&uri, BOT, r#"{"status":"completed","tokens_in":9}"#)
        .await;
    assert_eq!((g.status, g.str("status")), (409, "completed"));
    let g = s.get(&uri, BOT).await;
    assert_eq!(
        g.body
            .get("action")
            .and_then(|a| a.get("tokens_in"))
            .and_then(Value::as_f64),
        Some(1200.0)
    );
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// Issue 45: `POST /api/actions/{id}/cancel` as DashClaw's server answers it: a reason is
/// required, another principal gets 404, the principal or an operator cancels an action that
/// was never claimed, once; a claimed action and a second cancel are 409 `NOT_CANCELLABLE`;
/// a cancelled action refuses claims and outcomes and reads back `cancelled`.
#[tokio::test]
async fn cancel_answers_as_dashclaw() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    let g = s.post(format!("{uri}/cancel"), BOT, r#"{}"#).await;
    assert_eq!((g.status, g.str("error")), (400, "reason is required"));
    let g = s
        .post(format!("{uri}/cancel"), BOT, r#"{"reason":"   "}"#)
        .await;
    assert_eq!(g.status, 400);
    for invisible in [
        r#""\u200b""#,
        r#""\ufeff \u2060\u200d""#,
        r#""\u00ad\u3164""#,
    ] {
        let g = s
            .post(
                format!("{uri}/cancel"),
                BOT,
                format!(r#"{{"reason":{invisible}}}"#),
            )
            .await;
        assert_eq!(
            (g.status, g.str("error")),
            (400, "reason is required"),
            "{invisible}"
        );
    }
    for typed in ["5", "true", r#"["x"]"#, r#"{"a":1}"#] {
        let g = s
            .post(
                format!("{uri}/cancel"),
                BOT,
                format!(r#"{{"reason":{typed}}}"#),
            )
            .await;
        assert_eq!(
            (g.status, g.str("error")),
            (400, "reason must be a string"),
            "{typed}"
        );
    }
    let g = s
        .post(format!("{uri}/cancel"), OTHER, r#"{"reason":"mine now"}"#)
        .await;
    assert_eq!(g.status, 404, "{:?}", g.body);
    let g = s
        .post("/api/actions/act_missing/cancel", BOT, r#"{"reason":"x"}"#)
        .await;
    assert_eq!(g.status, 404);
    let g = s
        .post(format!("{uri}/cancel"), BOT, r#"{"reason":"not needed"}"#)
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(g.body.get("ok"), Some(&Value::Bool(true)));
    assert_eq!(g.str("action_id"), id);
    assert_eq!(g.str("status"), "cancelled");
    assert!(g.body.get("security").is_some());
    let g = s
        .post(format!("{uri}/cancel"), OPS, r#"{"reason":"again"}"#)
        .await;
    assert_eq!(g.status, 409, "{:?}", g.body);
    assert_eq!(g.str("code"), "NOT_CANCELLABLE");
    assert_eq!(g.str("current_status"), "cancelled");
    assert_eq!(g.body.get("execution_claimed"), Some(&Value::Bool(false)));
    let g = s.get(&uri, BOT).await;
    assert_eq!(g.str_at("action", "status"), Some("cancelled"));
    assert_eq!(s.patch(&uri, BOT, &claim_body(A1, ACT)).await.status, 409);
    let g = s
        .post(format!("{uri}/outcome"), BOT, r#"{"status":"completed"}"#)
        .await;
    assert_eq!(g.status, 409);
    // An operator cancels another principal's action; a claimed action is not cancellable.
    let id2 = recorded(&s, "build", ACT, "").await;
    let g = s
        .post(
            format!("/api/actions/{id2}/cancel"),
            OPS,
            r#"{"reason":"ops"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let id3 = recorded(&s, "build", ACT, "").await;
    let uri3 = format!("/api/actions/{id3}");
    assert_eq!(s.patch(&uri3, BOT, &claim_body(A1, ACT)).await.status, 200);
    let g = s
        .post(format!("{uri3}/cancel"), BOT, r#"{"reason":"late"}"#)
        .await;
    assert_eq!(g.status, 409);
    assert_eq!(g.str("code"), "NOT_CANCELLABLE");
    assert_eq!(g.str("current_status"), "running");
    assert_eq!(g.str("outcome_status"), "pending");
    assert_eq!(g.body.get("execution_claimed"), Some(&Value::Bool(true)));
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// A landed cancel is told on the stream as `action.updated` with the cancelled row; a refused
/// cancel (409, 404) tells nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_tells_a_cancel_once() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let (_, sub) = subscribe(&s, BOT).await;
    let mut sub = sub.unwrap();
    let uri = format!("/api/actions/{id}/cancel");
    let g = s.post(&uri, BOT, r#"{"reason":"not needed"}"#).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let (name, data) = sub.expect().await;
    assert_eq!(name, "action.updated");
    assert_eq!(field(&data, "action_id"), Some(id.as_str()));
    assert_eq!(field(&data, "status"), Some("cancelled"));
    let got = s.get(format!("/api/actions/{id}"), BOT).await;
    assert_eq!(Some(&data), got.body.get("action"));
    assert_eq!(s.post(&uri, BOT, r#"{"reason":"again"}"#).await.status, 409);
    let g = s
        .post("/api/actions/act_missing/cancel", BOT, r#"{"reason":"x"}"#)
        .await;
    assert_eq!(g.status, 404);
    assert!(sub.quiet().await, "a refused cancel emits nothing");
}

/// A reload applies to open streams: a stream whose key the reload removed, or whose key lost
/// its `operator` mark, ends before the next event; one whose key is unchanged goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_ends_the_streams_of_revoked_keys() {
    const OPS2: &str = "k-second-operator";
    let Reloading {
        s, keys_file, _dir, ..
    } = reloading_server();
    let app = s.app.clone().unwrap();
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true) + &key_line("ops2", OPS2, true),
    )
    .unwrap();
    app.reload().unwrap();
    let (_, kept) = subscribe(&s, OPS).await;
    let (_, revoked) = subscribe(&s, OPS2).await;
    let (mut kept, mut revoked) = (kept.unwrap(), revoked.unwrap());
    let first = recorded(&s, "build", ACT, "").await;
    for sub in [&mut kept, &mut revoked] {
        assert_eq!(
            field(&sub.expect().await.1, "action_id"),
            Some(first.as_str())
        );
    }
    // `ops2` removed.
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true),
    )
    .unwrap();
    app.reload().unwrap();
    let second = recorded(&s, "build", ACT, "").await;
    assert_eq!(
        field(&kept.expect().await.1, "action_id"),
        Some(second.as_str())
    );
    assert_eq!(revoked.next(std::time::Duration::from_secs(5)).await, None);
    // `ops2` back as an operator, then without the mark: the stream it opened as an operator
    // ends instead of showing another principal's action.
    let both = key_line("bot", BOT, false) + &key_line("ops", OPS, true);
    std::fs::write(&keys_file, both + &key_line("ops2", OPS2, true)).unwrap();
    app.reload().unwrap();
    let (_, demoted) = subscribe(&s, OPS2).await;
    let mut demoted = demoted.unwrap();
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true) + &key_line("ops2", OPS2, false),
    )
    .unwrap();
    app.reload().unwrap();
    recorded(&s, "build", ACT, "").await;
    assert_eq!(demoted.next(std::time::Duration::from_secs(5)).await, None);
}

/// A contained action created through the guard by `key`, claimed and completed by it: one
/// awaiting promotion. Its id.
async fn awaiting_promotion(s: &Server, key: &str) -> String {
    const FILE: &str = r#"{"kind":"file","path":"src/lib.rs"}"#;
    let body = format!(
        r#"{{"action_type":"write","agent_id":"agent-1","act":{FILE},"client_capabilities":["execution_claims","allow_contained"]}}"#
    );
    let g = s.post("/api/guard?record=true", key, body).await;
    assert_eq!(g.str("decision"), "allow_contained", "{:?}", g.body);
    let id = g.str("action_id").to_owned();
    let uri = format!("/api/actions/{id}");
    assert_eq!(
        s.get(&uri, key)
            .await
            .str_at("action", "containment_status"),
        Some("contained")
    );
    assert_eq!(s.patch(&uri, key, claim_body(A1, FILE)).await.status, 200);
    let g = s
        .post(format!("{uri}/outcome"), key, r#"{"status":"completed"}"#)
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    id
}

/// `POST /api/actions/{id}/containment` answers every refusal as DashClaw does, in its order;
/// a promotion answers `{action, promotion_action_id}` and creates a running, operator-approved
/// grant claimable with the merge act; a discard answers `{action}`; the stream hears both;
/// two operators racing have one winner; `verify` accepts what was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containment_answers_as_dashclaw() {
    let s = server();
    const FILE: &str = r#"{"kind":"file","path":"src/lib.rs"}"#;
    let body = format!(
        r#"{{"action_type":"write","agent_id":"agent-1","act":{FILE},"client_capabilities":["execution_claims","allow_contained"]}}"#
    );
    let early = s.post("/api/guard?record=true", BOT, body).await;
    let early = early.str("action_id").to_owned();
    let post = |id: &str, key: &'static str, body: &'static str| {
        let uri = format!("/api/actions/{id}/containment");
        let s = &s;
        async move { s.post(uri, key, body).await }
    };
    let g = post(&early, BOT, r#"{"verdict":"promote"}"#).await;
    assert_eq!(
        (g.status, g.str("code")),
        (403, "OPERATOR_REQUIRED"),
        "{:?}",
        g.body
    );
    for bad in [r#"{}"#, r#"{"verdict":"merge"}"#, r#"{"verdict":5}"#] {
        let g = post(&early, OPS, bad).await;
        assert_eq!(
            (g.status, g.str("error")),
            (400, "Invalid verdict. Must be promote or discard."),
            "{bad}"
        );
    }
    let g = post(&early, OPS, r#"{"verdict":"promote","reasoning":5}"#).await;
    assert_eq!(g.status, 400, "{:?}", g.body);
    assert_eq!(
        post("act_missing", OPS, r#"{"verdict":"discard"}"#)
            .await
            .status,
        404
    );
    let g = post(&early, OPS, r#"{"verdict":"promote"}"#).await;
    assert_eq!((g.status, g.str("code")), (409, "CONTAINMENT_NOT_AWAITING"));
    assert_eq!(g.str("containment_status"), "contained");
    // An allowed action is not contained at all.
    let plain = recorded(&s, "build", ACT, "").await;
    let g = post(&plain, OPS, r#"{"verdict":"discard"}"#).await;
    assert_eq!((g.status, g.str("code")), (409, "CONTAINMENT_NOT_AWAITING"));
    assert_eq!(g.body.get("containment_status"), Some(&Value::Null));

    let id = awaiting_promotion(&s, BOT).await;
    let uri = format!("/api/actions/{id}");
    assert_eq!(
        s.get(&uri, BOT)
            .await
            .str_at("action", "containment_status"),
        Some("awaiting_promotion")
    );
    let (_, sub) = subscribe(&s, OPS).await;
    let mut sub = sub.unwrap();
    let g = post(
        &id,
        OPS,
        r#"{"verdict":"promote","reasoning":"diff reviewed"}"#,
    )
    .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(g.str_at("action", "action_id"), Some(id.as_str()));
    assert_eq!(g.str_at("action", "containment_status"), Some("promoted"));
    let grant = g.str("promotion_action_id").to_owned();
    assert_eq!(
        grant,
        finality::containment::promotion_action_id(&finality::ActionId::parse(&id).unwrap())
            .as_str()
    );
    assert_eq!(
        sub.expect_action().await,
        ("action.updated".to_owned(), id.clone())
    );
    assert_eq!(
        sub.expect_action().await,
        ("action.created".to_owned(), grant.clone())
    );
    let g = s.get(format!("/api/actions/{grant}"), BOT).await;
    assert_eq!(g.str_at("action", "status"), Some("running"));
    assert_eq!(
        g.str_at("action", "action_type"),
        Some("containment_promote")
    );
    assert_eq!(g.str_at("action", "approved_by"), Some("ops"));
    let merge = r#"{"kind":"shell","command":"git merge --no-ff sandbox/main"}"#;
    let g = s
        .patch(format!("/api/actions/{grant}"), BOT, claim_body(A2, merge))
        .await;
    assert_eq!(
        g.status, 200,
        "the grant is claimed with the merge act: {:?}",
        g.body
    );
    let g = post(&id, OPS, r#"{"verdict":"discard"}"#).await;
    assert_eq!((g.status, g.str("code")), (409, "CONTAINMENT_NOT_AWAITING"));
    assert_eq!(g.str("containment_status"), "promoted");

    // Separation of duties: the operator that created the action may not resolve it.
    let own = awaiting_promotion(&s, OPS).await;
    let g = post(&own, OPS, r#"{"verdict":"discard"}"#).await;
    assert_eq!((g.status, g.str("code")), (403, "SELF_APPROVAL_FORBIDDEN"));

    let dropped = awaiting_promotion(&s, BOT).await;
    let g = post(&dropped, OPS, r#"{"verdict":"discard"}"#).await;
    assert_eq!((g.status, keys_of(&g)), (200, vec!["action".to_owned()]));
    assert_eq!(g.str_at("action", "containment_status"), Some("discarded"));

    // Two verdicts at once: one winner, the other told the winner's status.
    let raced = awaiting_promotion(&s, BOT).await;
    let (a, b) = tokio::join!(
        post(&raced, OPS, r#"{"verdict":"discard"}"#),
        post(&raced, OPS, r#"{"verdict":"promote"}"#)
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{:?} {:?}", a.body, b.body);
    let (won, lost) = if a.status == 200 { (a, b) } else { (b, a) };
    assert_eq!(
        lost.str("containment_status"),
        won.str_at("action", "containment_status").unwrap()
    );
    if won.str_at("action", "containment_status") == Some("discarded") {
        assert_eq!(won.body.get("promotion_action_id"), None);
    }
    // The listing filters by containment status (the SDK's `list_contained`).
    let listed = |g: &Got| -> Vec<String> {
        g.body
            .get("actions")
            .and_then(|a| a.as_array())
            .unwrap()
            .iter()
            .filter_map(|a| {
                a.get("action_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    };
    let g = s.get("/api/actions?containment_status=promoted", OPS).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert!(
        listed(&g).contains(&id) && !listed(&g).contains(&dropped),
        "{:?}",
        g.body
    );
    let g = s
        .get("/api/actions?containment_status=awaiting_promotion", OPS)
        .await;
    assert_eq!(listed(&g), vec![own.clone()]);
    let g = s.get("/api/actions?containment_status=merged", OPS).await;
    assert_eq!(g.status, 400);
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// A connection that sent half a request head does not hold a stop for the client timeout
/// (30 s here): the stop closes it at once, while a complete request is answered in full
/// (found by a fresh-eyes test: SIGTERM waited for the header timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_request_does_not_hold_the_stop() {
    use std::io::{Read as _, Write as _};
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("state.git");
    let mut st = settings(&repo, Arc::new(AtomicI64::new(T0)), None, Target::Local);
    st.client_timeout = std::time::Duration::from_secs(30);
    let started = crate::server::start(st).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::server::serve(started, listener, async {
        let _ = stopped.await;
    }));
    let wait = Some(std::time::Duration::from_secs(10));
    let mut full = std::net::TcpStream::connect(addr).unwrap();
    full.set_read_timeout(wait).unwrap();
    full.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut got = [0u8; 12];
    full.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"HTTP/1.1 200");
    let mut half = std::net::TcpStream::connect(addr).unwrap();
    half.set_read_timeout(wait).unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let began = std::time::Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(20), server)
        .await
        .expect("the server stopped")
        .unwrap()
        .unwrap();
    assert!(
        began.elapsed() < std::time::Duration::from_secs(5),
        "the stop waited {:?}",
        began.elapsed()
    );
    let mut rest = Vec::new();
    assert_eq!(half.read_to_end(&mut rest).unwrap(), 0, "closed unanswered");
}

/// What the listing and the legacy close used to take silently is refused, naming the
/// parameter or field and its rule, and changes nothing: a `limit` above the maximum (it was
/// lowered), a parameter given twice (the last one won), a malformed `timestamp_end` (it was
/// ignored). The SDK's own `timestamp_end` (microseconds) is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_closes_refuse_what_they_used_to_ignore() {
    let s = server();
    let detail = |g: &Got| -> String {
        g.body
            .get("details")
            .and_then(|d| d.as_array())
            .and_then(|d| d.first())
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    for (uri, name, rule) in [
        ("/api/actions?limit=201", "limit", "from 1 to 200"),
        ("/api/guard?limit=1001", "limit", "from 1 to 1000"),
        (
            "/api/actions?status=running&status=completed",
            "status",
            "more than once",
        ),
        (
            "/api/actions?limit=5&offset=0&limit=6",
            "limit",
            "more than once",
        ),
        (
            "/api/guard?decision=allow&decision=block",
            "decision",
            "more than once",
        ),
    ] {
        let g = s.get(uri, BOT).await;
        assert_eq!(g.status, 400, "{uri}: {:?}", g.body);
        let d = detail(&g);
        assert!(d.contains(name) && d.contains(rule), "{uri}: {d}");
    }
    assert_eq!(s.get("/api/actions?limit=200", BOT).await.status, 200);
    assert_eq!(s.get("/api/guard?limit=1000", BOT).await.status, 200);

    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    let tip = tip_of(&s);
    for bad in [
        r#""yesterday""#,
        "5",
        r#""2026-03-01 12:00:00""#,
        r#""2026-02-30T12:00:00Z""#,
    ] {
        let g = s
            .patch(
                &uri,
                BOT,
                format!(r#"{{"status":"completed","timestamp_end":{bad}}}"#),
            )
            .await;
        assert_eq!(g.status, 400, "{bad}: {:?}", g.body);
        let d = detail(&g);
        assert!(d.contains("timestamp_end") && d.contains("ISO 8601"), "{d}");
    }
    assert_eq!(tip_of(&s), tip, "a refused close writes nothing");
    assert_eq!(
        s.get(&uri, BOT).await.str_at("action", "status"),
        Some("running")
    );
    let g = s
        .patch(
            &uri,
            BOT,
            r#"{"status":"completed","timestamp_end":"2026-03-01T12:00:00.123456Z"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    assert_eq!(g.str_at("action", "status"), Some("completed"));
}

/// The full action record (issue 45): both creating routes keep the goal, risk, systems,
/// reversible, reasoning, idempotency key, assumptions and the act, redacted, and answer them
/// in DashClaw's row (`GET /api/actions/{id}`, the listing); bad details are refused with 400
/// naming the field and the rule, and nothing is written.
#[tokio::test]
async fn the_full_action_record_is_kept_redacted_and_answered() {
    let s = server();
    let extra = r#","declared_goal":"rotate the deploy key; old one was password=hunter22","risk_score":72,"systems_touched":["github","vault"],"reversible":false,"reasoning":"the key leaked in a log","idempotency_key":"idem-full-1","assumptions":["nobody deploys meanwhile"],"confidence":90"#;
    for (body, want) in [
        (r#""risk_score":101"#, "risk_score must be <= 100"),
        (r#""risk_score":"high""#, "risk_score must be an integer"),
        (r#""reversible":"no""#, "reversible must be a boolean"),
        (
            r#""systems_touched":"github""#,
            "systems_touched must be an array",
        ),
        (
            r#""systems_touched":[1]"#,
            "systems_touched[0] must be a string",
        ),
        (r#""declared_goal":7"#, "declared_goal must be a string"),
    ] {
        for uri in ["/api/actions", "/api/guard?record=true", "/api/guard"] {
            let g = s
                .post(uri, BOT, guard_body("build", ACT, &format!(",{body}")))
                .await;
            assert_eq!(
                (g.status, g.str("error")),
                (400, "Validation failed"),
                "{uri} {body}"
            );
            let details = canonical::to_canonical_unchecked(g.body.get("details").unwrap());
            assert!(details.contains(want), "{uri} {body}: {details}");
        }
    }
    let long_goal = format!(r#","declared_goal":"{}""#, "g".repeat(2001));
    let g = s
        .post("/api/actions", BOT, guard_body("build", ACT, &long_goal))
        .await;
    assert_eq!(g.status, 400);
    assert!(
        canonical::to_canonical_unchecked(&g.body)
            .contains("declared_goal exceeds max length of 2000")
    );
    let store = Store::open(&s.repo).unwrap();
    assert_eq!(
        store.tip("refs/heads/main").unwrap(),
        None,
        "nothing written"
    );

    let created = s
        .post("/api/actions", BOT, guard_body("deploy", ACT, extra))
        .await;
    assert_eq!(created.status, 202, "{:?}", created.body);
    let security = created.body.get("security").unwrap();
    assert_eq!(
        security.get("clean"),
        Some(&Value::Bool(false)),
        "{security}"
    );
    let id = created.str("action_id").to_owned();
    let got = s.get(format!("/api/actions/{id}"), OPS).await;
    assert_eq!(got.status, 200);
    let row = got.body.get("action").unwrap();
    let field = |k: &str| {
        row.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: {row}"))
    };
    assert_eq!(
        field("declared_goal"),
        Value::str("rotate the deploy key; old one was password=[REDACTED]")
    );
    assert_eq!(field("risk_score"), Value::from(72));
    assert_eq!(
        field("systems_touched"),
        Value::Array(vec![Value::str("github"), Value::str("vault")])
    );
    assert_eq!(field("reversible"), Value::Bool(false));
    assert_eq!(field("reasoning"), Value::str("the key leaked in a log"));
    assert_eq!(field("idempotency_key"), Value::str("idem-full-1"));
    assert_eq!(field("confidence"), Value::from(90));
    assert_eq!(
        field("tokens_in"),
        Value::Null,
        "not given, no default invented"
    );
    assert_eq!(field("side_effects"), Value::Array(vec![]));
    assert_eq!(
        field("act"),
        canonical::parse(r#"{"kind":"shell","command":"make deploy token=[REDACTED]"}"#).unwrap()
    );
    assert_eq!(field("act_redacted"), Value::Bool(false));
    assert_eq!(
        finality::act_content_hash(Some(&field("act"))),
        row.get("act_content_hash")
            .and_then(Value::as_str)
            .map(str::to_owned),
        "the stored act is the hashed one"
    );
    let text = canonical::to_canonical_unchecked(&got.body);
    assert!(
        !text.contains("hunter22") && !text.contains("abc123"),
        "{text}"
    );
    let assumptions = got
        .body
        .get("assumptions")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(assumptions.len(), 1);
    assert_eq!(
        assumptions[0].get("assumption"),
        Some(&Value::str("nobody deploys meanwhile"))
    );
    // The listing answers the same row.
    let list = s.get("/api/actions?status=pending_approval", OPS).await;
    let rows = list.body.get("actions").and_then(Value::as_array).unwrap();
    let listed = rows
        .iter()
        .find(|r| r.get("action_id").and_then(Value::as_str) == Some(id.as_str()))
        .unwrap();
    assert_eq!(listed, row);
    // A replay under the same key answers the stored details, whatever it says now.
    let replay = s
        .post(
            "/api/actions",
            BOT,
            guard_body(
                "deploy",
                ACT,
                &extra.replace("\"risk_score\":72", "\"risk_score\":10"),
            ),
        )
        .await;
    assert_eq!(
        replay.body.get("idempotent_replay"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        replay.body.get("action").and_then(|a| a.get("risk_score")),
        Some(&Value::from(72))
    );
    // The recorded guard keeps them too (the SDK's run_governed records through it).
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            guard_body(
                "build",
                ACT,
                r#","declared_goal":"build it","risk_score":5,"systems_touched":["ci"]"#,
            ),
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let id = g.str("action_id").to_owned();
    let row = s.get(format!("/api/actions/{id}"), BOT).await;
    assert_eq!(row.str_at("action", "declared_goal"), Some("build it"));
    assert_eq!(
        row.body.get("action").and_then(|a| a.get("risk_score")),
        Some(&Value::from(5))
    );
    // The listing filters by the details' risk and swarm (refused before: no data).
    let ids = |g: &Got| -> Vec<String> {
        g.body
            .get("actions")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .filter_map(|a| {
                a.get("action_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    };
    let risky = s.get("/api/actions?risk_min=70", OPS).await;
    assert_eq!(risky.status, 200);
    assert_eq!(ids(&risky), [created.str("action_id").to_owned()]);
    assert_eq!(ids(&s.get("/api/actions?risk_min=5", OPS).await).len(), 2);
    assert_eq!(s.get("/api/actions?risk_min=101", OPS).await.status, 400);
    assert_eq!(
        ids(&s.get("/api/actions?swarm_id=none", OPS).await),
        Vec::<String>::new()
    );
    let tip = store.tip("refs/heads/main").unwrap();
    assert_eq!(
        finality::verify(&store.snapshot(tip).unwrap()).unwrap(),
        vec![],
        "verify is clean"
    );
}
