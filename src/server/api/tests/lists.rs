//! The listings (`GET /api/actions`): filters, pages, refused parameters, an action named `stats`.

use super::*;

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
