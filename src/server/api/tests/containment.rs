//! `POST /api/actions/{id}/containment`: refusals, promotion and discard, as DashClaw answers.

use super::*;

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
