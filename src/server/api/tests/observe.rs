//! What every request leaves behind: `GET /metrics` and the access log lines.

use super::*;

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
