//! `POST /api/actions/{id}/approve`: operators only, approval expiry, denials' reasoning.

use super::*;

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
