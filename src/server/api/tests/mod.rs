//! The HTTP contract, end to end through the router: status codes, bodies, headers and the
//! records the writes leave, with a driven clock. By subject:
//!
//! - `http`: the API keys, unknown routes and methods, malformed, oversized and stalled bodies,
//!   a half-sent request at a stop;
//! - `guard`: `POST /api/guard` (decisions, recording, the folded claim), idempotency keys and
//!   replays;
//! - `actions`: `POST /api/actions`, acts the hash cannot take, the full action record;
//! - `claims`: claims, outcome reports and the legacy close (`PATCH /api/actions/{id}`);
//! - `approvals`: operator approvals, their expiry and denials;
//! - `sweep`: the cron sweep, the timer, skewed clocks and the sweep's sightings;
//! - `remote`: the state repository shared with the CLI, a remote unreachable or rewritten;
//! - `reload`: reloading the keys and the policy, and the streams of revoked keys;
//! - `observe`: `GET /metrics` and the access log;
//! - `lists`: the listings and what they refuse;
//! - `stream`: `GET /api/stream`;
//! - `cancel` and `containment`: DashClaw's cancel and containment routes.
//!
//! This module holds the harness they share (a [`Server`] with its clock, the requests, the
//! bodies) and the helpers more than one of them uses.
#![cfg(test)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, header};

use super::*;
use crate::canonical::{self, Value};
use crate::finality;
use crate::finality::batch::Target;
use crate::server::policy::Policy;
use crate::server::writer::Handle;
use crate::store::{self, Store};
use crate::time::Timestamp;
use std::sync::atomic::{AtomicI64, Ordering};
use tower::ServiceExt as _;

mod actions;
mod approvals;
mod cancel;
mod claims;
mod containment;
mod guard;
mod http;
mod lists;
mod observe;
mod reload;
mod remote;
mod stream;
mod sweep;

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

/// The tip of the server's ledger ref.
fn tip_of(s: &Server) -> Option<store::CommitId> {
    Store::open(&s.repo)
        .unwrap()
        .tip("refs/heads/main")
        .unwrap()
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
