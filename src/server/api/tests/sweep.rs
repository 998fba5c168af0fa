//! The outcome sweep: the cron route and its secret, the timer, a stop, skewed clocks, sightings.

use super::*;

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
