//! `POST /api/actions/{id}/cancel`, as DashClaw's server answers it.

use super::*;

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
