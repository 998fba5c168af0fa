//! Requests a browser can be made to send: bodies that say they are not JSON, and requests
//! carrying an `Origin` header when no key authenticates the caller. Each is refused before
//! anything is parsed or written, and the same request as a client sends it is served.

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt as _;

use super::api::{App, router};
use super::writer::Handle;
use super::{Settings, auth, policy::Policy};
use crate::finality;
use crate::store;
use crate::time::Timestamp;

const KEY: &str = "k-hostile";
const CREATE: &str = r#"{"action_type":"build","agent_id":"agent-1","act":{"kind":"shell","command":"true"},"client_capabilities":["execution_claims"]}"#;

struct Server {
    _tmp: tempfile::TempDir,
    repo: std::path::PathBuf,
    router: Option<axum::Router>,
    app: Option<Arc<App>>,
    handle: Option<Handle>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.router.take();
        self.app.take();
        if let Some(h) = self.handle.take() {
            h.join();
        }
    }
}

fn server(insecure_no_auth: bool) -> Server {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("state.git");
    let mut keys = auth::Keys::new();
    if !insecure_no_auth {
        keys.add_clear(KEY, "bot", false).unwrap();
    }
    let options = finality::Options::new(store::Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_772_366_400,
    });
    let settings = Settings {
        repo: repo.clone(),
        options,
        keys,
        insecure_no_auth,
        policy: Policy::parse(r#"{"default":"allow","rules":[]}"#, "test").unwrap(),
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
        clock: Arc::new(|| Timestamp::from_millis(1_772_366_400_000)),
        log: Arc::new(|_| {}),
    };
    let (app, handle) = App::start(settings).unwrap();
    Server {
        _tmp: tmp,
        repo,
        router: Some(router(app.clone())),
        app: Some(app),
        handle: Some(handle),
    }
}

impl Server {
    /// POSTs a creation with these headers; the status.
    async fn create(&self, headers: &[(&str, &str)]) -> u16 {
        let mut req = Request::builder().method("POST").uri("/api/actions");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = self
            .router
            .clone()
            .unwrap()
            .oneshot(req.body(Body::from(CREATE)).unwrap())
            .await
            .unwrap();
        resp.status().as_u16()
    }

    /// The actions recorded at the ledger ref (0 before the first write).
    fn actions(&self) -> usize {
        let out = std::process::Command::new("git")
            .args([
                "ls-tree",
                "-r",
                "--name-only",
                "refs/heads/main",
                "finality/v1/actions",
            ])
            .current_dir(&self.repo)
            .output()
            .unwrap();
        if !out.status.success() {
            return 0;
        }
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.ends_with("/action.json"))
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_say_they_are_not_json_get_415_and_write_nothing() {
    let s = server(false);
    for ct in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonp",
        "json",
    ] {
        assert_eq!(
            s.create(&[("x-api-key", KEY), ("content-type", ct)]).await,
            415,
            "{ct}"
        );
    }
    assert_eq!(s.actions(), 0, "a refused body wrote nothing");
    for ct in [
        Some("application/json"),
        Some("Application/JSON; charset=utf-8"),
        Some("application/vnd.api+json"),
        None,
    ] {
        // With a key, an Origin is no reason to refuse: a browser cannot send `x-api-key`
        // cross-origin without a preflight the server never grants.
        let mut headers = vec![("x-api-key", KEY), ("origin", "http://tool.example")];
        headers.extend(ct.map(|ct| ("content-type", ct)));
        assert_eq!(s.create(&headers).await, 201, "{ct:?}");
    }
    assert_eq!(s.actions(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_auth_a_request_from_a_web_page_gets_403() {
    let s = server(true);
    for origin in ["http://evil.example", "null", "http://127.0.0.1:8080"] {
        let json = ("content-type", "application/json");
        assert_eq!(s.create(&[("origin", origin), json]).await, 403, "{origin}");
        assert_eq!(s.create(&[("origin", origin)]).await, 403, "{origin}");
    }
    assert_eq!(s.actions(), 0, "a refused request wrote nothing");
    assert_eq!(s.create(&[("content-type", "application/json")]).await, 201);
    assert_eq!(s.actions(), 1);
}
