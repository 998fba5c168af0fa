//! The dashboard through the router: sessions, cookies, CSRF, operators, escaping, and a
//! decision that changes the action exactly as the JSON route does.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, header};
use tower::ServiceExt as _;

use crate::canonical::{self, Value};
use crate::finality;
use crate::server::api::{App, router};
use crate::server::policy::Policy;
use crate::server::{Settings, auth, writer::Handle};
use crate::store;
use crate::time::Timestamp;

const T0: i64 = 1_772_366_400_000; // 2026-03-01T12:00:00Z
const BOT: &str = "k-bot";
const OPS: &str = "k-ops";
const POLICY: &str = r#"{"default":"allow","rules":[
    {"id":"deploys","action_type":"deploy","verdict":"require_approval","reason":"deploys need an operator"}]}"#;
const ACT: &str = r#"{"kind":"shell","command":"make deploy"}"#;
const HOST: &str = "127.0.0.1:8080";

struct Server {
    _tmp: tempfile::TempDir,
    router: Router,
    clock: Arc<AtomicI64>,
    app: Option<Arc<App>>,
    handle: Option<Handle>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.app.take();
        self.router = Router::new();
        if let Some(h) = self.handle.take() {
            h.join();
        }
    }
}

fn server(no_auth: bool) -> Server {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(AtomicI64::new(T0));
    let mut keys = auth::Keys::new();
    if !no_auth {
        keys.add_clear(BOT, "bot", false).unwrap();
        keys.add_clear(OPS, "ops", true).unwrap();
    }
    let c = clock.clone();
    let settings = Settings {
        repo: tmp.path().join("state.git"),
        options: finality::Options::new(store::Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: T0 / 1000,
        }),
        keys,
        insecure_no_auth: no_auth,
        policy: Policy::parse(POLICY, "test").unwrap(),
        reload: None,
        cron_secret: None,
        timeout_minutes: 15,
        approval_expiry: crate::finality::ApprovalExpiry::default(),
        sweep_every: None,
        max_batch: 64,
        batch_linger: std::time::Duration::from_millis(1),
        client_timeout: std::time::Duration::from_secs(5),
        max_streams: crate::server::api::stream::DEFAULT_MAX_STREAMS as usize,
        webhooks: None,
        clock: Arc::new(move || Timestamp::from_millis(c.load(Ordering::SeqCst))),
        log: Arc::new(|_| {}),
    };
    let (app, handle) = App::start(settings).unwrap();
    Server {
        router: router(app.clone()),
        _tmp: tmp,
        clock,
        app: Some(app),
        handle: Some(handle),
    }
}

struct Got {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Server {
    async fn send(&self, method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Got {
        let mut req = axum::http::Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, HOST);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(Body::from(body.to_owned())).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 22)
            .await
            .unwrap();
        Got {
            status,
            headers,
            text: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    /// A JSON API call with a key.
    async fn api(&self, method: &str, uri: &str, key: &str, body: &str) -> Value {
        let g = self.send(method, uri, &[("x-api-key", key)], body).await;
        assert!(g.status < 300, "{method} {uri}: {} {}", g.status, g.text);
        canonical::parse(&g.text).unwrap()
    }

    /// A recorded guard decision's action id.
    async fn action(&self, action_type: &str) -> String {
        let body = format!(
            r#"{{"action_type":"{action_type}","agent_id":"agent-1","act":{ACT},"client_capabilities":["execution_claims"]}}"#
        );
        let v = self.api("POST", "/api/guard?record=true", BOT, &body).await;
        v.get("action_id").unwrap().as_str().unwrap().to_owned()
    }

    /// Logs in with `key`: the session cookie (`name=value`) and the CSRF token of the pages.
    async fn login(&self, key: &str) -> (String, String) {
        let g = self
            .send(
                "POST",
                "/ui/login",
                &[("content-type", "application/x-www-form-urlencoded")],
                &format!("key={key}"),
            )
            .await;
        assert_eq!(g.status, 303, "{}", g.text);
        let set = g.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
        let cookie = set.split(';').next().unwrap().to_owned();
        let page = self.page("/", &cookie).await;
        assert_eq!(page.status, 200, "{}", page.text);
        (cookie, csrf_of(&page.text))
    }

    async fn page(&self, uri: &str, cookie: &str) -> Got {
        self.send("GET", uri, &[("cookie", cookie)], "").await
    }

    async fn form(&self, uri: &str, cookie: &str, body: &str) -> Got {
        self.send(
            "POST",
            uri,
            &[
                ("cookie", cookie),
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", &format!("http://{HOST}")),
            ],
            body,
        )
        .await
    }
}

fn csrf_of(page: &str) -> String {
    let at = page.find(r#"name="csrf" value=""#).expect("a CSRF field");
    let rest = &page[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_logout_and_cookie_flags() {
    let s = server(false);
    // Without a session every page leads to the login form.
    let g = s.send("GET", "/", &[], "").await;
    assert_eq!(
        (
            g.status,
            g.headers.get(header::LOCATION).unwrap().to_str().unwrap()
        ),
        (303, "/ui/login")
    );
    let g = s.send("GET", "/ui/login", &[], "").await;
    assert_eq!(g.status, 200);
    assert!(g.text.contains(r#"name="key""#), "{}", g.text);
    assert_eq!(g.headers.get(header::CACHE_CONTROL).unwrap(), "no-store");
    let csp = g.headers.get(header::CONTENT_SECURITY_POLICY).unwrap();
    assert!(csp.to_str().unwrap().starts_with("default-src 'none'"));
    // A wrong key: 401, no cookie, and the key is not echoed.
    let g = s.send("POST", "/ui/login", &[], "key=not-a-key-zz9").await;
    assert_eq!(g.status, 401);
    assert!(g.headers.get(header::SET_COOKIE).is_none());
    assert!(!g.text.contains("not-a-key-zz9"));
    // A login from another site is refused.
    let g = s
        .send(
            "POST",
            "/ui/login",
            &[("origin", "http://evil.example")],
            &format!("key={OPS}"),
        )
        .await;
    assert_eq!(g.status, 403);
    // The cookie: HttpOnly, SameSite=Strict, the whole site, an expiry; the key is nowhere.
    let g = s
        .send("POST", "/ui/login", &[], &format!("key={OPS}"))
        .await;
    assert_eq!(g.status, 303);
    let set = g.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(set.split("; ").any(|f| f == flag), "{flag} in {set}");
    }
    assert!(!set.contains(OPS));
    let cookie = set.split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("al_session=") && cookie.len() == "al_session=".len() + 64);
    let page = s.page("/", &cookie).await;
    assert_eq!(page.status, 200);
    assert!(
        page.text.contains("signed in as ops (operator)"),
        "{}",
        page.text
    );
    assert!(!page.text.contains(OPS), "no key in a page");
    // Logout needs the token; then the session is gone.
    let csrf = csrf_of(&page.text);
    assert_eq!(
        s.form("/ui/logout", &cookie, "csrf=wrong").await.status,
        403
    );
    let g = s.form("/ui/logout", &cookie, &format!("csrf={csrf}")).await;
    assert_eq!(g.status, 303);
    assert!(
        g.headers
            .get(header::SET_COOKIE)
            .unwrap()
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    assert_eq!(s.page("/", &cookie).await.status, 303, "logged out");
    // A session expires on the server's clock.
    let (cookie, _) = s.login(BOT).await;
    s.clock
        .fetch_add(super::session::SESSION_TTL_MS, Ordering::SeqCst);
    assert_eq!(s.page("/", &cookie).await.status, 303, "expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csrf_refusal_and_approve_through_the_page() {
    let s = server(false);
    let id = s.action("deploy").await;
    let (cookie, csrf) = s.login(OPS).await;
    // The pending tab lists it; its page offers the buttons, then a confirmation step.
    let list = s.page("/?tab=pending_approval", &cookie).await;
    assert!(list.text.contains(&id), "{}", list.text);
    let uri = format!("/ui/actions/{id}");
    let page = s.page(&uri, &cookie).await;
    assert!(page.text.contains(r#"id="approve""#) && page.text.contains(r#"id="deny""#));
    let confirm = s
        .page(&format!("{uri}/confirm?decision=approve"), &cookie)
        .await;
    assert_eq!(confirm.status, 200);
    assert!(
        confirm.text.contains(r#"id="confirm-button""#),
        "{}",
        confirm.text
    );
    // Without the token, with a wrong one, or from another site: refused, nothing written.
    let decide = format!("{uri}/decide");
    for body in [
        "decision=approve".to_owned(),
        "decision=approve&csrf=0000".to_owned(),
    ] {
        assert_eq!(s.form(&decide, &cookie, &body).await.status, 403, "{body}");
    }
    let g = s
        .send(
            "POST",
            &decide,
            &[("cookie", &cookie), ("origin", "http://evil.example")],
            &format!("decision=approve&csrf={csrf}"),
        )
        .await;
    assert_eq!(g.status, 403);
    // `Origin: null` (a sandboxed or privacy-stripped page) is not this site either.
    let g = s
        .send(
            "POST",
            &decide,
            &[("cookie", &cookie), ("origin", "null")],
            &format!("decision=approve&csrf={csrf}"),
        )
        .await;
    assert_eq!(g.status, 403);
    let no_session = s
        .send(
            "POST",
            &decide,
            &[],
            &format!("decision=approve&csrf={csrf}"),
        )
        .await;
    assert_eq!(no_session.status, 401);
    let v = s.api("GET", &format!("/api/actions/{id}"), BOT, "").await;
    assert_eq!(
        v.get("action").unwrap().get("status").unwrap().as_str(),
        Some("pending_approval")
    );
    // The confirmed decision: the JSON route's view of the action changed as its own
    // approval changes it.
    let g = s
        .form(&decide, &cookie, &format!("decision=approve&csrf={csrf}"))
        .await;
    assert_eq!(
        (
            g.status,
            g.headers.get(header::LOCATION).unwrap().to_str().unwrap()
        ),
        (303, uri.as_str())
    );
    let v = s.api("GET", &format!("/api/actions/{id}"), BOT, "").await;
    let a = v.get("action").unwrap();
    assert_eq!(a.get("status").unwrap().as_str(), Some("running"));
    assert_eq!(a.get("approved_by").unwrap().as_str(), Some("ops"));
    assert_eq!(
        a.get("approved_at").unwrap().as_str(),
        Some("2026-03-01T12:00:00.000Z")
    );
    let page = s.page(&uri, &cookie).await;
    assert!(page.text.contains("approve by ops"), "{}", page.text);
    assert!(
        !page.text.contains(r#"id="approve""#),
        "decided: no buttons"
    );
    // A second decision is refused as the JSON route refuses it (409).
    let g = s
        .form(&decide, &cookie, &format!("decision=deny&csrf={csrf}"))
        .await;
    assert_eq!(g.status, 409, "{}", g.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_operator_sees_no_buttons_and_is_refused() {
    let s = server(false);
    let id = s.action("deploy").await;
    let (cookie, csrf) = s.login(BOT).await;
    let uri = format!("/ui/actions/{id}");
    let page = s.page(&uri, &cookie).await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("signed in as bot"));
    assert!(!page.text.contains(r#"id="approve""#), "{}", page.text);
    assert!(!page.text.contains(r#"id="deny""#));
    assert!(!page.text.contains("/decide"));
    let confirm = s
        .page(&format!("{uri}/confirm?decision=approve"), &cookie)
        .await;
    assert_eq!(confirm.status, 403);
    for d in ["approve", "deny"] {
        let g = s
            .form(
                &format!("{uri}/decide"),
                &cookie,
                &format!("decision={d}&csrf={csrf}"),
            )
            .await;
        assert_eq!(g.status, 403, "{d}: {}", g.text);
    }
    let v = s.api("GET", &format!("/api/actions/{id}"), BOT, "").await;
    assert_eq!(
        v.get("action").unwrap().get("status").unwrap().as_str(),
        Some("pending_approval")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_values_are_escaped() {
    let s = server(false);
    let id = s.action("build").await;
    let uri = format!("/api/actions/{id}");
    let attempt = "attempt-00000000000001";
    s.api(
        "PATCH",
        &uri,
        BOT,
        &format!(
            r#"{{"claim_execution":true,"attempt_id":"{attempt}","agent_id":"agent-1","act":{ACT}}}"#
        ),
    )
    .await;
    let summary = r#"<script>alert(\"x\")</script> it's \"quoted\" & done"#;
    s.api(
        "POST",
        &format!("{uri}/outcome"),
        BOT,
        &format!(r#"{{"status":"completed","attempt_id":"{attempt}","summary":"{summary}"}}"#),
    )
    .await;
    s.clock.fetch_add(90_500, Ordering::SeqCst);
    let (cookie, _) = s.login(OPS).await;
    let page = s.page(&format!("/ui/actions/{id}"), &cookie).await;
    assert_eq!(page.status, 200);
    assert!(!page.text.contains("<script>"), "{}", page.text);
    assert!(
        page.text.contains(
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; it's &quot;quoted&quot; &amp; done"
        ),
        "{}",
        page.text
    );
    assert!(page.text.contains(r#"id="outcome-status">completed"#));
    // The agent filter echoes its value escaped, in the field and the tab links.
    let g = s.page("/?tab=all&agent=%22%3E%3Cscript%3Ex", &cookie).await;
    assert_eq!(g.status, 200);
    assert!(!g.text.contains("<script>x"), "{}", g.text);
    assert!(g.text.contains("&quot;&gt;&lt;script&gt;x"));
    // The completed tab lists it; a bad offset is a 400 page.
    let g = s.page("/?tab=completed", &cookie).await;
    assert!(g.text.contains(&id));
    assert_eq!(s.page("/?offset=-1", &cookie).await.status, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_loopback_hosts_only() {
    let s = server(true);
    let g = s.send("POST", "/ui/login", &[], "").await;
    assert_eq!(g.status, 303);
    let cookie = g.headers.get(header::SET_COOKIE).unwrap().to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = s.page("/", &cookie).await;
    assert!(page.text.contains("signed in as anonymous (operator)"));
    // A rebound DNS name reaching the loopback address is refused.
    let mut req = axum::http::Request::builder()
        .uri("/")
        .header(header::HOST, "evil.example:8080")
        .header("cookie", &cookie);
    req = req.method("GET");
    let resp = s
        .router
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let lanes = s.page("/ui/lanes", &cookie).await;
    assert_eq!(lanes.status, 200, "{}", lanes.text);
}

#[test]
fn durations_and_the_chart() {
    use crate::project::status::Operation;
    assert_eq!(super::pages::duration(6_789), "6.789s");
    assert_eq!(super::pages::duration(245_000), "4m 05s");
    assert_eq!(super::pages::duration(3_723_000), "1h 02m 03s");
    let ops = [
        Operation {
            status: "completed".into(),
            duration_ms: Some(1000),
            ..Default::default()
        },
        Operation {
            status: "<failed>".into(),
            duration_ms: Some(4000),
            failures: 1,
            ..Default::default()
        },
    ];
    let runs: Vec<(&str, &Operation)> = vec![("op1", &ops[0]), ("op2\"<", &ops[1])];
    let svg = super::pages::chart(&runs).into_string();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(svg.matches("<rect").count(), 2);
    assert!(
        svg.contains(r#"height="20""#) && svg.contains(r#"height="80""#),
        "{svg}"
    );
    assert!(svg.contains("&lt;failed&gt;") && !svg.contains("<failed>"));
}

/// Publishes one completed review event into the server's repository (as a CI job does).
fn publish_event(s: &Server, item: &str, run: &str, number: u32) {
    use crate::{publish, writer};
    let dir = s._tmp.path().join(format!("job-{item}"));
    std::fs::create_dir_all(&dir).unwrap();
    let env: writer::record::Environment = [
        ("CLAWSWEEPER_ACTION_LEDGER_FORCE", "1"),
        ("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE", "2026-03-01"),
        ("GITHUB_REPOSITORY", "openclaw/clawsweeper"),
        ("GITHUB_WORKFLOW", "ClawSweeper Review"),
        ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
        ("GITHUB_JOB", "review"),
        ("GITHUB_RUN_ID", run),
        ("GITHUB_RUN_ATTEMPT", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let now = Timestamp::from_millis(T0);
    let input = canonical::parse(&format!(
        r#"{{"scope":"review","type":"review.item","component":"example","identity":"{item}",
            "subject":{{"repository":"openclaw/openclaw","kind":"issue","number":{number}}},
            "action":{{"name":"review","status":"completed","retryable":false,"mutation":false}}}}"#
    ))
    .unwrap();
    writer::record::record_action(&dir, &input, &env, now, &Default::default())
        .unwrap()
        .unwrap();
    let spool = writer::spool::Spool::open(&dir).unwrap();
    writer::seal::seal(&spool, None, now, &Default::default()).unwrap();
    let state = store::Store::open(&s._tmp.path().join("state.git")).unwrap();
    let signature = store::Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: T0 / 1000,
    };
    publish::publish(&state, &dir, &publish::Options::new(signature)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lanes_page_folds_the_status_view_and_follows_the_tip() {
    let s = server(false);
    let (cookie, _) = s.login(BOT).await;
    let g = s.page("/ui/lanes", &cookie).await;
    assert_eq!(g.status, 200);
    assert!(g.text.contains(r#"id="empty""#), "{}", g.text);
    publish_event(&s, "item-1", "2234567890", 1);
    let g = s.page("/ui/lanes", &cookie).await;
    assert_eq!(g.status, 200, "{}", g.text);
    assert!(
        g.text.contains("openclaw/clawsweeper:ClawSweeper-Review-"),
        "{}",
        g.text
    );
    assert_eq!(g.text.matches("<rect").count(), 1, "{}", g.text);
    // A newer tip: the kept view is brought up to date with the added shard.
    publish_event(&s, "item-2", "2234567891", 2);
    let g = s.page("/ui/lanes", &cookie).await;
    assert_eq!(g.text.matches("<rect").count(), 2, "{}", g.text);
    assert_eq!(g.text.matches("review.item").count(), 2);
}

/// Issue 45: a cancelled action has a tab of its own, and so has an expired approval; a
/// cancelled action is not listed as failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_actions_have_their_tab() {
    let s = server(false);
    let id = s.action("build").await;
    s.api(
        "POST",
        &format!("/api/actions/{id}/cancel"),
        BOT,
        r#"{"reason":"not needed"}"#,
    )
    .await;
    let (cookie, _) = s.login(OPS).await;
    let g = s.page("/?tab=cancelled", &cookie).await;
    assert_eq!(g.status, 200, "{}", g.text);
    assert!(g.text.contains(&id), "{}", g.text);
    assert!(g.text.contains("Approval expired"), "{}", g.text);
    assert!(!s.page("/?tab=failed", &cookie).await.text.contains(&id));
    assert_eq!(s.page("/?tab=expired", &cookie).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_through_the_page_keeps_its_reasoning_redacted_and_escaped() {
    let s = server(false);
    let (cookie, csrf) = s.login(OPS).await;
    // The confirmation form has the box for both decisions.
    let first = s.action("deploy").await;
    for d in ["approve", "deny"] {
        let confirm = s
            .page(
                &format!("/ui/actions/{first}/confirm?decision={d}"),
                &cookie,
            )
            .await;
        assert!(
            confirm.text.contains(r#"name="reasoning""#),
            "{d}: {}",
            confirm.text
        );
    }
    // A denial with markup and a token in its reasoning: the agent reads it as the error
    // message, redacted; the page shows it redacted and escaped.
    let reasoning = "not <b>today</b> & not with ghp_0123456789abcdefghijABCDEFGHIJ012345";
    let body = format!(
        "decision=deny&csrf={csrf}&reasoning={}",
        reasoning
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect::<String>()
    );
    let g = s
        .form(&format!("/ui/actions/{first}/decide"), &cookie, &body)
        .await;
    assert_eq!(g.status, 303, "{}", g.text);
    let v = s
        .api("GET", &format!("/api/actions/{first}"), BOT, "")
        .await;
    let a = v.get("action").unwrap();
    assert_eq!(a.get("status").unwrap().as_str(), Some("failed"));
    let message = a.get("error_message").unwrap().as_str().unwrap().to_owned();
    assert!(
        message.starts_with("not <b>today</b> & not with "),
        "{message}"
    );
    assert!(!message.contains("ghp_0123"), "{message}");
    let page = s.page(&format!("/ui/actions/{first}"), &cookie).await;
    assert!(
        page.text
            .contains("Reasoning: not &lt;b&gt;today&lt;/b&gt; &amp; not with "),
        "{}",
        page.text
    );
    assert!(!page.text.contains("ghp_0123"), "{}", page.text);
    assert!(!page.text.contains("<b>today"), "{}", page.text);
    // An empty box (or only spaces) is no reasoning: nothing shown, the default message.
    let second = s.action("deploy").await;
    let g = s
        .form(
            &format!("/ui/actions/{second}/decide"),
            &cookie,
            &format!("decision=deny&csrf={csrf}&reasoning=+++"),
        )
        .await;
    assert_eq!(g.status, 303, "{}", g.text);
    let page = s.page(&format!("/ui/actions/{second}"), &cookie).await;
    assert!(page.text.contains("deny by ops"), "{}", page.text);
    assert!(!page.text.contains("approval-reasoning"), "{}", page.text);
    // Nor is one of invisible characters only (a zero-width space between spaces).
    let third = s.action("deploy").await;
    let g = s
        .form(
            &format!("/ui/actions/{third}/decide"),
            &cookie,
            &format!("decision=deny&csrf={csrf}&reasoning=+%E2%80%8B+"),
        )
        .await;
    assert_eq!(g.status, 303, "{}", g.text);
    let page = s.page(&format!("/ui/actions/{third}"), &cookie).await;
    assert!(page.text.contains("deny by ops"), "{}", page.text);
    assert!(!page.text.contains("approval-reasoning"), "{}", page.text);
}

/// The action's page shows what is asked (issue 45): goal, act, risk, systems, reversible and
/// reasoning, redacted and escaped; a missing field is a dash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_action_page_shows_the_request_redacted_and_escaped() {
    let s = server(false);
    let body = r#"{"action_type":"deploy","agent_id":"agent-1","client_capabilities":["execution_claims"],
        "act":{"kind":"shell","command":"curl -H 'Authorization: Bearer sk-abcdefghijklmnop' https://example.org/<b>"},
        "declared_goal":"ship <script>alert(1)</script> & token=hunter22","risk_score":85,
        "systems_touched":["prod-db","<i>cdn</i>"],"reversible":false,
        "reasoning":"customers wait \"now\""}"#;
    let v = s.api("POST", "/api/actions", BOT, body).await;
    let id = v.get("action_id").unwrap().as_str().unwrap().to_owned();
    let (cookie, _) = s.login(OPS).await;
    let page = s.page(&format!("/ui/actions/{id}"), &cookie).await;
    assert_eq!(page.status, 200);
    let t = &page.text;
    assert!(
        !t.contains("<script>") && !t.contains("<i>cdn") && !t.contains("<b>"),
        "{t}"
    );
    assert!(
        !t.contains("hunter22") && !t.contains("sk-abcdefghijklmnop"),
        "{t}"
    );
    for want in [
        r#"id="goal">ship &lt;script&gt;alert(1)&lt;/script&gt; &amp; token=[REDACTED]"#,
        "Bearer [REDACTED]",
        r#"id="risk">85"#,
        "<li>prod-db</li><li>&lt;i&gt;cdn&lt;/i&gt;</li>",
        r#"id="reversible">no"#,
        r#"id="request-reasoning">customers wait &quot;now&quot;"#,
    ] {
        assert!(t.contains(want), "{want} not in {t}");
    }
    // An action created without a goal shows a dash.
    let plain = s.action("build").await;
    let page = s.page(&format!("/ui/actions/{plain}"), &cookie).await;
    assert!(
        page.text.contains(r#"id="goal"><span>—</span>"#),
        "{}",
        page.text
    );
}
