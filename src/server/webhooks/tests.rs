//! The webhooks: the signature against known vectors, the file's refusals, and a server whose
//! events reach receivers on 127.0.0.1 (signed, retried, dead-lettered, drained after a
//! restart), with the sweep's `webhooks_fired`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use tower::ServiceExt as _;

use super::*;
use crate::server::api::{App, router};
use crate::server::{Settings, auth, policy::Policy};

#[test]
fn the_signature_is_hmac_sha256_in_hex() {
    // RFC 4231, test cases 1, 2 and 6 (a key longer than the block).
    assert_eq!(
        sign(&[0x0b; 20], b"Hi There"),
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    );
    assert_eq!(
        sign(b"Jefe", b"what do ya want for nothing?"),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(
        sign(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First"
        ),
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
    );
    // What a receiver computes: Python's hmac.new(secret, body, sha256).hexdigest().
    assert_eq!(
        sign(b"whsec-0123456789abcdef", br#"{"event":"action.created"}"#),
        "0cc28b2d74292bd38ccc16be5fe7af182df5a4da50a2f5a7f82000c0aa671adf"
    );
}

#[test]
fn backoff_doubles_up_to_its_bound() {
    let r = Retry {
        max_attempts: 10,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(700),
    };
    let waits: Vec<u128> = (1..=6).map(|n| r.backoff(n).as_millis()).collect();
    assert_eq!(waits, [100, 200, 400, 700, 700, 700]);
    assert_eq!(r.backoff(200), Duration::from_millis(700));
}

const SECRET: &str = "s3cret-value-never-shown";

fn parse(doc: &str) -> Result<Config, ConfigError> {
    Config::parse(doc, "hooks.json", &|p: &Path| {
        if p == Path::new("ops.secret") {
            Ok(format!("{SECRET}\n"))
        } else {
            Err("No such file or directory (os error 2)".into())
        }
    })
}

#[test]
fn a_good_file_parses_with_its_defaults() {
    let c = parse(
        r#"{"endpoints":[
            {"name":"ops","url":"https://u:p@hooks.example.com/x?t=1","secret_file":"ops.secret","events":["all"]},
            {"name":"audit-2","url":"http://127.0.0.1:9/in","secret":"0123456789abcdef","events":["action.updated"]}],
          "retry":{"max_attempts":3,"initial_backoff_ms":50,"max_backoff_ms":60},"timeout_ms":500}"#,
    )
    .unwrap();
    assert_eq!(c.endpoints.len(), 2);
    assert_eq!(c.endpoints[0].secret.bytes(), SECRET.as_bytes());
    assert!(c.endpoints[0].events.wants("action.created"));
    assert!(!c.endpoints[1].events.wants("action.created"));
    assert!(c.endpoints[1].events.wants("action.updated"));
    assert_eq!(c.retry.max_attempts, 3);
    assert_eq!(c.timeout, Duration::from_millis(500));
    // What a message shows of a URL: no credentials, path or query.
    assert_eq!(
        display_url(&c.endpoints[0].url),
        "https://hooks.example.com"
    );
    assert_eq!(display_url(&c.endpoints[1].url), "http://127.0.0.1:9");
    // Debug shows no secret either.
    assert!(!format!("{c:?}").contains(SECRET));
    let d = parse(r#"{"endpoints":[{"name":"a","url":"http://h/","secret_file":"ops.secret","events":["action.created"]}]}"#).unwrap();
    assert_eq!(d.retry, Retry::default());
    assert_eq!(d.timeout, Duration::from_secs(10));
}

#[test]
fn a_malformed_file_is_refused_naming_the_field_and_rule_never_the_secret() {
    let ep = |fields: &str| {
        let sep = if fields.is_empty() { "" } else { "," };
        format!(
            r#"{{"endpoints":[{{"name":"ops","url":"https://user:pw-in-url@h.example/p","events":["all"]{sep}{fields}}}]}}"#
        )
    };
    let s = format!(r#""secret":"{SECRET}""#);
    let cases: Vec<(String, &str, &str)> = vec![
        (
            format!(r#"{{"endpoints":[{{"secret":"{SECRET}""#),
            "(document)",
            "",
        ),
        ("[]".into(), "(document)", "must be a JSON object"),
        ("{}".into(), "endpoints", "is required"),
        (r#"{"endpoints":[]}"#.into(), "endpoints", "1 to 32"),
        (r#"{"endpoints":[],"x":1}"#.into(), "x", "unknown key"),
        (
            ep(&format!(r#"{s},"color":"red""#)),
            "endpoints[0].color",
            "unknown key",
        ),
        (ep(""), "endpoints[0].secret", "is required"),
        (
            ep(&format!(r#"{s},"secret_file":"ops.secret""#)),
            "endpoints[0].secret",
            "not both",
        ),
        (
            ep(r#""secret":"short""#),
            "endpoints[0].secret",
            "16 to 4096 bytes",
        ),
        (
            ep(r#""secret_file":"missing.secret""#),
            "endpoints[0].secret_file",
            "cannot read missing.secret",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"ops","url":"ftp://user:pw-in-url@h/","events":["all"],{s}}}]}}"#
            ),
            "endpoints[0].url",
            "http or https",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"ops","url":"not a url pw-in-url","events":["all"],{s}}}]}}"#
            ),
            "endpoints[0].url",
            "absolute http or https URL",
        ),
        (
            format!(r#"{{"endpoints":[{{"name":"o p","url":"http://h/","events":["all"],{s}}}]}}"#),
            "endpoints[0].name",
            "1 to 64",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"o","url":"http://h/","events":["action.deleted"],{s}}}]}}"#
            ),
            "endpoints[0].events[0]",
            "all, action.created, action.updated",
        ),
        (
            format!(r#"{{"endpoints":[{{"name":"o","url":"http://h/","events":[],{s}}}]}}"#),
            "endpoints[0].events",
            "at least one",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"o","url":"http://h/","events":["all"],{s}}},{{"name":"o","url":"http://h/","events":["all"],{s}}}]}}"#
            ),
            "endpoints[1].name",
            "used twice",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"o","url":"http://h/","events":["all"],{s}}}],"retry":{{"max_attempts":0}}}}"#
            ),
            "retry.max_attempts",
            "from 1 to 100",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"o","url":"http://h/","events":["all"],{s}}}],"retry":{{"initial_backoff_ms":500,"max_backoff_ms":100}}}}"#
            ),
            "retry.max_backoff_ms",
            "at least initial_backoff_ms",
        ),
        (
            format!(
                r#"{{"endpoints":[{{"name":"o","url":"http://h/","events":["all"],{s}}}],"timeout_ms":5}}"#
            ),
            "timeout_ms",
            "from 100 to 120000",
        ),
    ];
    for (doc, field, rule) in cases {
        let e = parse(&doc).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("webhooks hooks.json: {field}: ")),
            "{field}: {e}"
        );
        assert!(e.contains(rule), "{field}: {e}");
        for secret in [SECRET, "pw-in-url", "user:"] {
            assert!(!e.contains(secret), "{field}: {e}");
        }
    }
    // A file that cannot be read names itself.
    let e = Config::load(Path::new("/nonexistent/hooks.json")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("cannot read the webhooks file /nonexistent/hooks.json: "),
        "{e}"
    );
    // `secret_file` is relative to the webhooks file's directory.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ops.secret"), format!("{SECRET}\n")).unwrap();
    std::fs::write(
        dir.path().join("hooks.json"),
        r#"{"endpoints":[{"name":"ops","url":"http://127.0.0.1:9/","secret_file":"ops.secret","events":["all"]}]}"#,
    )
    .unwrap();
    let c = Config::load(&dir.path().join("hooks.json")).unwrap();
    assert_eq!(c.endpoints[0].secret.bytes(), SECRET.as_bytes());
}

// ---- a server with webhooks -------------------------------------------------------------

const T0: i64 = 1_772_366_400_000; // 2026-03-01T12:00:00Z
const BOT: &str = "k-bot";
const OPS: &str = "k-ops";

/// One request a receiver got.
#[derive(Clone, Debug)]
struct Got {
    event: String,
    delivery: String,
    signature: String,
    body: String,
}

/// A webhook receiver on 127.0.0.1: records every request and answers 503 to the first
/// `fail_first` of them (all of them when `usize::MAX`).
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Got>>>,
    task: tokio::task::JoinHandle<()>,
}

async fn receiver(fail_first: usize) -> Receiver {
    let got = Arc::new(Mutex::new(Vec::<Got>::new()));
    let seen = Arc::new(AtomicUsize::new(0));
    let (g, s) = (got.clone(), seen.clone());
    let app = axum::Router::new().route(
        "/in",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let (g, s) = (g.clone(), s.clone());
            async move {
                let h = |k: &str| {
                    headers
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                g.lock().unwrap().push(Got {
                    event: h("x-dashclaw-event"),
                    delivery: h("x-dashclaw-delivery"),
                    signature: h("x-dashclaw-signature"),
                    body,
                });
                if s.fetch_add(1, Ordering::SeqCst) < fail_first {
                    axum::http::StatusCode::SERVICE_UNAVAILABLE
                } else {
                    axum::http::StatusCode::NO_CONTENT
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/in", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Receiver { url, got, task }
}

struct Server {
    app: Option<Arc<App>>,
    router: axum::Router,
    handle: Option<crate::server::writer::Handle>,
    deliverer: Option<tokio::task::JoinHandle<()>>,
    logged: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn stop(mut self) -> Vec<String> {
        let app = self.app.take().unwrap();
        app.stop();
        if let Some(d) = self.deliverer.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), d).await;
        }
        drop(app);
        self.router = axum::Router::new();
        let handle = self.handle.take().unwrap();
        tokio::task::spawn_blocking(move || handle.join())
            .await
            .unwrap();
        self.logged.lock().unwrap().clone()
    }

    async fn call(&self, method: &str, uri: &str, key: &str, body: &str) -> (u16, Value) {
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        if key.starts_with("Bearer ") {
            req = req.header("authorization", key);
        } else {
            req = req.header("x-api-key", key);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(Body::from(body.to_owned())).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        (
            status,
            canonical::parse(&text).unwrap_or(Value::str(text.as_str())),
        )
    }

    async fn metrics(&self) -> String {
        match self.call("GET", "/metrics", "", "").await {
            (200, Value::String(text)) => text,
            other => panic!("{other:?}"),
        }
    }
}

fn start(repo: &Path, clock: Arc<AtomicI64>, config: Config) -> Server {
    let mut keys = auth::Keys::new();
    keys.add_clear(BOT, "bot", false).unwrap();
    keys.add_clear(OPS, "ops", true).unwrap();
    let mut options = crate::finality::Options::new(crate::store::Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: T0 / 1000,
    });
    options.max_attempts = 3;
    let logged = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = logged.clone();
    let settings = Settings {
        repo: repo.to_owned(),
        options,
        keys,
        insecure_no_auth: false,
        policy: Policy::parse(
            r#"{"default":"allow","rules":[{"id":"deploys","action_type":"deploy","verdict":"require_approval"}]}"#,
            "test",
        )
        .unwrap(),
        reload: None,
        cron_secret: Some("cron-secret".into()),
        timeout_minutes: 15,
        approval_expiry: crate::finality::ApprovalExpiry::default(),
        sweep_every: None,
        max_batch: 64,
        batch_linger: Duration::from_millis(1),
        client_timeout: Duration::from_secs(5),
        max_streams: 4,
        webhooks: Some(Setup {
            config,
            reload: None,
        }),
        clock: Arc::new(move || Timestamp::from_millis(clock.load(Ordering::SeqCst))),
        log: Arc::new(move |line: &str| log.lock().unwrap().push(line.to_owned())),
    };
    let (app, handle) = App::start(settings).unwrap();
    let deliverer = spawn_deliverer(app.webhooks().unwrap().clone(), app.stopped());
    Server {
        router: router(app.clone()),
        app: Some(app),
        handle: Some(handle),
        deliverer: Some(deliverer),
        logged,
    }
}

fn endpoint(name: &str, url: &str, events: Wants) -> Endpoint {
    Endpoint {
        name: name.into(),
        url: url::Url::parse(url).unwrap(),
        secret: Secret(format!("secret-of-{name}-0123456789").into_bytes()),
        events,
    }
}

fn config(endpoints: Vec<Endpoint>, max_attempts: u32) -> Config {
    Config {
        endpoints,
        retry: Retry {
            max_attempts,
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(50),
        },
        timeout: Duration::from_secs(2),
    }
}

/// Waits until `done` holds (or fails after 10 s).
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn create(goal: &str, action_type: &str) -> String {
    format!(
        r#"{{"action_type":"{action_type}","declared_goal":"{goal}","agent_id":"agent-1","act":{{"kind":"shell","command":"ls"}},"client_capabilities":["execution_claims"]}}"#
    )
}

fn outbox_files(repo: &Path, sub: &str) -> Vec<PathBuf> {
    let base = repo.join("action-ledger");
    let Ok(dirs) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for d in dirs.flatten() {
        if d.file_name().to_string_lossy().starts_with("webhooks-")
            && let Ok(files) = std::fs::read_dir(d.path().join(sub))
        {
            // A create-only write stages its bytes under `*.tmp` in the same directory: only
            // final names count, as the outbox itself counts them.
            out.extend(
                files
                    .flatten()
                    .map(|f| f.path())
                    .filter(|p| p.extension().is_none_or(|e| e != "tmp")),
            );
        }
    }
    out
}

/// Every delivery a receiver got carries DashClaw's headers, a valid signature of its exact
/// body, and the stream's event in DashClaw's envelope.
fn check_signed(got: &[Got], secret: &[u8]) {
    for g in got {
        assert_eq!(g.signature, sign(secret, g.body.as_bytes()), "{g:?}");
        let body = canonical::parse(&g.body).unwrap();
        assert_eq!(
            body.get("event").and_then(Value::as_str),
            Some(g.event.as_str())
        );
        assert_eq!(
            body.get("delivery_id").and_then(Value::as_str),
            Some(g.delivery.as_str())
        );
        assert!(
            g.delivery.starts_with("wd_") && g.delivery.len() == 39,
            "{g:?}"
        );
        assert_eq!(body.get("org_id").and_then(Value::as_str), Some("bot"));
        assert!(
            body.get("action")
                .and_then(|a| a.get("action_id"))
                .is_some()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_reach_the_webhooks_signed_retried_buried_and_drained_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("state.git");
    let clock = Arc::new(AtomicI64::new(T0));
    let all = receiver(0).await;
    // Fails its first two requests: the delivery is retried with the same id and body.
    let flaky = receiver(2).await;
    // Answers nothing: the port is closed.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/in", l.local_addr().unwrap())
    };
    let updates = Wants::Only(["action.updated".to_owned()].into());
    let s = start(
        &repo,
        clock.clone(),
        config(
            vec![
                endpoint("all", &all.url, Wants::All),
                endpoint("flaky", &flaky.url, updates.clone()),
                endpoint("gone", &closed, updates),
            ],
            3,
        ),
    );
    // A creation that needs an approval, then the approval: created, then updated.
    let (status, body) = s
        .call("POST", "/api/actions", BOT, &create("ship it", "deploy"))
        .await;
    assert_eq!(status, 202, "{body:?}");
    let id = body
        .get("action")
        .and_then(|a| a.get("action_id"))
        .and_then(Value::as_str)
        .unwrap()
        .to_owned();
    let (status, _) = s
        .call(
            "POST",
            &format!("/api/actions/{id}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(status, 200);
    until("every delivery settled", || {
        all.got.lock().unwrap().len() == 2
            && flaky.got.lock().unwrap().len() == 3
            && outbox_files(&repo, "dead").len() == 1
    })
    .await;
    let got = all.got.lock().unwrap().clone();
    check_signed(&got, b"secret-of-all-0123456789");
    let events: Vec<&str> = got.iter().map(|g| g.event.as_str()).collect();
    assert_eq!(events, ["action.created", "action.updated"]);
    let goal = canonical::parse(&got[0].body).unwrap();
    assert_eq!(
        goal.get("action")
            .and_then(|a| a.get("action_id"))
            .and_then(Value::as_str),
        Some(id.as_str())
    );
    let retried = flaky.got.lock().unwrap().clone();
    check_signed(&retried, b"secret-of-flaky-0123456789");
    assert!(retried.iter().all(|g| g.delivery == retried[0].delivery
        && g.body == retried[0].body
        && g.event == "action.updated"));
    // The delivery to the closed port was given up after its 3 attempts and kept.
    let dead = outbox_files(&repo, "dead");
    let record = canonical::parse(&std::fs::read_to_string(&dead[0]).unwrap()).unwrap();
    assert_eq!(record.get("attempts").and_then(Value::as_f64), Some(3.0));
    assert_eq!(record.get("endpoint").and_then(Value::as_str), Some("gone"));
    assert_eq!(
        record.get("last_error").and_then(Value::as_str),
        Some("cannot connect")
    );
    until("the outbox emptied", || {
        outbox_files(&repo, "queue").is_empty()
    })
    .await;
    // Counted once the outbox recorded them (just after the files the waits above saw).
    let wants = [
        r#"action_ledger_webhook_deliveries_total{endpoint="all",result="delivered"} 2"#,
        r#"action_ledger_webhook_deliveries_total{endpoint="flaky",result="delivered"} 1"#,
        r#"action_ledger_webhook_deliveries_total{endpoint="flaky",result="failed_attempt"} 2"#,
        r#"action_ledger_webhook_deliveries_total{endpoint="gone",result="failed_attempt"} 2"#,
        r#"action_ledger_webhook_deliveries_total{endpoint="gone",result="dead"} 1"#,
        "action_ledger_webhook_outbox_pending 0",
        "action_ledger_webhook_dead_letters 1",
    ];
    let mut metrics = String::new();
    for _ in 0..500 {
        metrics = s.metrics().await;
        if wants.iter().all(|w| metrics.contains(w)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for want in wants {
        assert!(metrics.contains(want), "{want}\n{metrics}");
    }
    // The sweep reports the deliveries it queued: an action.updated for each action it swept,
    // to each of the three endpoints.
    let (status, body) = s
        .call("POST", "/api/actions", BOT, &create("stale", "build"))
        .await;
    assert_eq!(status, 201, "{body:?}");
    clock.fetch_add(16 * 60 * 1000, Ordering::SeqCst);
    let (status, body) = s
        .call("GET", "/api/cron/outcome-sweep", "Bearer cron-secret", "")
        .await;
    assert_eq!(status, 200, "{body:?}");
    let swept = body.get("swept").and_then(Value::as_array).unwrap().len();
    assert!(swept >= 1, "{body:?}");
    assert_eq!(
        body.get("webhooks_fired").and_then(Value::as_f64),
        Some(3.0 * swept as f64),
        "{body:?}"
    );
    until("the swept actions delivered", || {
        all.got.lock().unwrap().len() == 3 + swept && outbox_files(&repo, "dead").len() == 1 + swept
    })
    .await;
    let logged = s.stop().await;
    // The log names endpoints by name and origin; no secret, no path.
    let text = logged.join("\n");
    assert!(text.contains("to gone (http://127.0.0.1:"), "{text}");
    assert!(!text.contains("secret-of-"), "{text}");
    assert!(!text.contains("/in"), "{text}");

    // While the server is down, nothing; a delivery left in the outbox by a run (here: one
    // whose receiver was down until the stop) is sent after the restart.
    let late = receiver(usize::MAX).await;
    let s = start(
        &repo,
        clock.clone(),
        config(vec![endpoint("late", &late.url, Wants::All)], 100),
    );
    let (status, _) = s
        .call("POST", "/api/actions", BOT, &create("late", "build"))
        .await;
    assert_eq!(status, 201);
    // Its delivery was durable before the answer (and cannot have been settled: every attempt
    // fails).
    assert_eq!(outbox_files(&repo, "queue").len(), 1);
    until("a first attempt", || !late.got.lock().unwrap().is_empty()).await;
    s.stop().await;
    let first = late.got.lock().unwrap()[0].clone();
    late.task.abort();
    assert_eq!(outbox_files(&repo, "queue").len(), 1);
    let back = receiver(0).await;
    let s = start(
        &repo,
        clock.clone(),
        config(vec![endpoint("late", &back.url, Wants::All)], 100),
    );
    until("the left delivery sent after the restart", || {
        back.got.lock().unwrap().len() == 1
    })
    .await;
    let again = back.got.lock().unwrap()[0].clone();
    assert_eq!((again.delivery, again.body), (first.delivery, first.body));
    until("the outbox emptied", || {
        outbox_files(&repo, "queue").is_empty()
    })
    .await;
    let logged = s.stop().await;
    assert!(
        logged
            .iter()
            .any(|l| l.contains("1 delivery(ies) left in the outbox by the last run")),
        "{logged:?}"
    );
    for r in [all, flaky, back] {
        r.task.abort();
    }
}

/// A kill between a batch's staged deliveries and the compare-and-swap of its commit, both
/// ways: at the next start the segment of the commit that landed is sent (under its delivery
/// id, once) and that of a commit planned on the same tip that never landed is removed unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_before_the_compare_and_swap_sends_an_event_if_and_only_if_its_commit_landed() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("state.git");
    let clock = Arc::new(AtomicI64::new(T0));
    // First run: the receiver never answers 2xx, so the creation's delivery stays queued.
    let down = receiver(usize::MAX).await;
    let s = start(
        &repo,
        clock.clone(),
        config(vec![endpoint("ops", &down.url, Wants::All)], 1000),
    );
    let (status, body) = s
        .call("POST", "/api/actions", BOT, &create("landed", "build"))
        .await;
    assert_eq!(status, 201, "{body:?}");
    until("a first attempt", || !down.got.lock().unwrap().is_empty()).await;
    s.stop().await;
    down.task.abort();
    let first = down.got.lock().unwrap()[0].clone();
    let queued = outbox_files(&repo, "queue");
    assert_eq!(queued.len(), 1, "{queued:?}");
    let name = queued[0].file_name().unwrap().to_str().unwrap().to_owned();
    let seq: u64 = name.strip_suffix(".jsonl").unwrap().parse().unwrap();

    // As a kill leaves them: the landed commit's segment still staged, and the segment of a
    // commit written on the same tip whose compare-and-swap never happened.
    let store = crate::store::Store::open(&repo).unwrap();
    let sig = crate::store::Signature {
        name: "t".into(),
        email: "t@invalid".into(),
        time_seconds: T0 / 1000,
    };
    let ref_name = crate::finality::Options::new(sig.clone()).ref_name;
    let tip = store.tip(&ref_name).unwrap().unwrap();
    let lost = store
        .write_commit(
            Some(tip),
            &[("lost".to_owned(), b"x".to_vec())],
            "lost\n",
            &sig,
        )
        .unwrap();
    let queue = queued[0].parent().unwrap();
    std::fs::rename(&queued[0], queue.join(format!("{seq:020}.{tip}.staged"))).unwrap();
    let line = outbox::Line {
        delivery_id: "wd_never-landed".into(),
        endpoint: "ops".into(),
        event: "action.created".into(),
        body: "{}".into(),
    };
    std::fs::write(
        queue.join(format!("{:020}.{lost}.staged", seq + 1)),
        format!("{}\n", serde_json::to_string(&line).unwrap()),
    )
    .unwrap();
    drop(store);

    let up = receiver(0).await;
    let s = start(
        &repo,
        clock.clone(),
        config(vec![endpoint("ops", &up.url, Wants::All)], 1000),
    );
    until("the outbox emptied", || {
        outbox_files(&repo, "queue").is_empty()
    })
    .await;
    let logged = s.stop().await;
    up.task.abort();
    let got = up.got.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (&got[0].delivery, &got[0].body),
        (&first.delivery, &first.body)
    );
    assert!(
        logged
            .iter()
            .any(|l| l.contains("1 staged batch(es) whose commit never landed")),
        "{logged:?}"
    );
}

/// A batch whose landing failed in a way that may have landed its commit (a push cut off, a
/// ref renamed but not synced): its deliveries are neither sent nor removed, but kept until a
/// later landing's history says whether the commit landed.
#[test]
fn deliveries_of_a_commit_that_may_have_landed_wait_for_its_fate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("outbox");
    let logged = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = logged.clone();
    let hooks = Webhooks::start(
        Setup {
            config: config(
                vec![endpoint("ops", "http://127.0.0.1:9/in", Wants::All)],
                3,
            ),
            reload: None,
        },
        &dir,
        &mut |_| Ok(true),
        Arc::new(crate::server::metrics::Metrics::new()),
        Arc::new(move |line: &str| log.lock().unwrap().push(line.to_owned())),
        Arc::new(|| Timestamp::from_millis(T0)),
    )
    .unwrap();
    let event = crate::server::api::stream::Event {
        name: "action.created",
        created_by: "bot".into(),
        data: Value::object([("action_id", Value::str("act_1"))]),
    };
    let names = || {
        let mut n: Vec<String> = std::fs::read_dir(dir.join("queue"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".tmp"))
            .collect();
        n.sort();
        n
    };
    let (won, lost) = (
        crate::store::CommitId::from_hex(&"ab".repeat(20)).unwrap(),
        crate::store::CommitId::from_hex(&"cd".repeat(20)).unwrap(),
    );
    for commit in [won, lost] {
        let mut staging = hooks.staging();
        staging.before_landing(commit, [(0usize, &event)].into_iter());
        assert_eq!(staging.last_commit(), Some(commit));
        assert!(staging.after_landing(None, Some(commit)).is_empty());
    }
    assert_eq!(
        names(),
        [
            format!("{:020}.{won}.staged", 0),
            format!("{:020}.{lost}.staged", 1)
        ]
    );
    // Not known yet: both kept.
    hooks.settle_undecided(&mut |_| Err("the remote cannot be reached".into()));
    assert!(hooks.has_undecided());
    assert_eq!(names().len(), 2);
    // One landed, the other did not.
    hooks.settle_undecided(&mut |c| Ok(c == won));
    assert!(!hooks.has_undecided());
    assert_eq!(names(), [format!("{:020}.jsonl", 0)]);
    // A commit neither landed nor unsettled (a moved ref overtook it): removed at once.
    let mut staging = hooks.staging();
    staging.before_landing(lost, [(0usize, &event)].into_iter());
    assert!(staging.after_landing(None, None).is_empty());
    assert_eq!(names(), [format!("{:020}.jsonl", 0)]);
    assert!(
        logged
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("is not known")),
        "{logged:?}"
    );
}
