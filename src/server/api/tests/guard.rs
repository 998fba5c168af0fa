//! `POST /api/guard`: decisions, recording, folded claims, idempotency keys and replays.

use super::*;
use crate::finality::decision::DecisionId;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_records_decides_replays_and_folds_claims() {
    let s = server();
    // Without record: a decision only, recorded under its own id.
    let g = s
        .post("/api/guard", BOT, &guard_body("risky", ACT, ""))
        .await;
    assert_eq!((g.status, g.str("decision")), (200, "warn"));
    assert_eq!(
        g.body.get("execution_claim_required"),
        Some(&Value::Bool(true))
    );
    assert_eq!(g.body.get("claim_protocol"), Some(&Value::from(1)));
    assert_eq!(g.body.get("recorded"), None);
    assert_eq!(
        g.body.get("action_id"),
        None,
        "no decision id posing as an action id"
    );
    let decision_id = g.str("decision_id").to_owned();
    let store = Store::open(&s.repo).unwrap();
    let tip = store.tip("refs/heads/main").unwrap();
    let snap = store.snapshot(tip).unwrap();
    let layout = crate::finality::layout::detect(&snap).unwrap().layout;
    let path = layout.decision_path(&DecisionId::parse(&decision_id).unwrap());
    assert!(snap.exists(&path).unwrap());

    // Verdicts from the policy; a blocked or approval-bound action is born so.
    for (ty, act, verdict, status) in [
        ("deploy", ACT, "require_approval", "pending_approval"),
        (
            "query",
            r#"{"kind":"sql","statement":"drop table x"}"#,
            "block",
            "blocked",
        ),
        (
            "write",
            r#"{"kind":"file","path":"a"}"#,
            "require_approval",
            "pending_approval",
        ),
        ("build", ACT, "allow", "running"),
    ] {
        let g = s.guard(BOT, ty, act, "").await;
        assert_eq!(
            (g.status, g.str("decision"), g.str("action_status")),
            (200, verdict, status),
            "{ty}"
        );
    }
    // allow_contained for a client that declares it.
    let g = s.post("/api/guard?record=true", BOT, r#"{"action_type":"write","agent_id":"agent-1","act":{"kind":"file"},"client_capabilities":["execution_claims","allow_contained"]}"#).await;
    assert_eq!(g.str("decision"), "allow_contained");
    assert_eq!(g.str_at("containment", "basis"), Some("sandbox/main"));

    // Idempotent replay: the original action, with the advertisement, never a second one.
    let extra = r#","idempotency_key":"key-1""#;
    let first = s.guard(BOT, "deploy", ACT, extra).await;
    let again = s.guard(BOT, "deploy", ACT, extra).await;
    assert_eq!(first.str("action_id"), again.str("action_id"));
    assert_eq!(
        again.body.get("idempotent_replay"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        (again.str("decision"), again.str("decision_id")),
        ("require_approval", first.str("decision_id")),
        "the original decision"
    );
    assert_eq!(
        again.body.get("execution_claim_required"),
        Some(&Value::Bool(true))
    );
    assert_eq!(again.body.get("claim_protocol"), Some(&Value::from(1)));
    // The same key from another principal is another action.
    let other = s.guard(OTHER, "deploy", ACT, extra).await;
    assert_ne!(other.str("action_id"), first.str("action_id"));

    // Folded claim: granted once; a replay's folded claim is a lost race.
    let fold = format!(r#","idempotency_key":"key-2","claim_execution":true,"attempt_id":"{A1}""#);
    let g = s.guard(BOT, "build", ACT, &fold).await;
    assert_eq!(
        (g.body.get("claimed"), g.str("attempt_id")),
        (Some(&Value::Bool(true)), A1)
    );
    let granted_at = g.str("claimed_at").to_owned();
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            &guard_body("build", ACT, &fold.replace(A1, A2)),
        )
        .await;
    assert_eq!(g.body.get("claimed"), Some(&Value::Bool(false)));
    assert_eq!(g.str("claim_error"), "EXECUTION_CLAIM_CONFLICT");
    // The replay of the granting request reports its claim, and writes nothing.
    let tip = store.tip("refs/heads/main").unwrap();
    s.clock.fetch_add(5_000, Ordering::SeqCst);
    let g = s.guard(BOT, "build", ACT, &fold).await;
    assert_eq!(
        (
            g.body.get("claimed"),
            g.str("attempt_id"),
            g.body.get("idempotent_replay")
        ),
        (Some(&Value::Bool(true)), A1, Some(&Value::Bool(true)))
    );
    assert_eq!(g.str("claimed_at"), granted_at);
    assert_eq!(
        store.tip("refs/heads/main").unwrap(),
        tip,
        "nothing written"
    );
    // Not claim-aware (no capability): refused as unavailable with a reason.
    let g = s.post("/api/guard?record=true", BOT, &format!(r#"{{"action_type":"build","agent_id":"agent-1","act":{ACT},"claim_execution":true,"attempt_id":"{A1}"}}"#)).await;
    assert_eq!(
        (g.str("claim_error"), g.str("claim_reason")),
        ("EXECUTION_CLAIM_UNAVAILABLE", "no_candidate")
    );
    // require_approval is never folded.
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            &guard_body("deploy", ACT, &fold.replace("key-2", "key-3")),
        )
        .await;
    assert_eq!(g.body.get("claimed"), None);
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// A creation body under `key`, its fields replaced or added by `fields` (a JSON fragment).
fn keyed(key: &str, fields: &str) -> String {
    let mut body = canonical::parse(&format!(
        r#"{{"action_type":"list-files","declared_goal":"g","agent_id":"agent-1","act":{{"kind":"shell","command":"ls /tmp"}},"client_capabilities":["execution_claims"],"idempotency_key":"{key}"}}"#
    ))
    .unwrap();
    let extra = canonical::parse(&format!("{{{fields}}}")).unwrap();
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        for (k, v) in e.into_map() {
            b.push(k, v);
        }
    }
    canonical::to_canonical_unchecked(&body)
}

/// Asserts a 422 `IDEMPOTENCY_KEY_REUSED` that names `field` and answers no action, no decision
/// and no id.
fn assert_key_reused(g: &Got, field: &str, what: &str) {
    assert_eq!(
        (g.status, g.str("code")),
        (422, "IDEMPOTENCY_KEY_REUSED"),
        "{what}: {:?}",
        g.body
    );
    let details = canonical::to_canonical_unchecked(g.body.get("details").unwrap());
    assert!(details.contains(field), "{what}: {details}");
    for leaked in ["action", "action_id", "decision", "decision_id", "recorded"] {
        assert_eq!(g.body.get(leaked), None, "{what}: {leaked} answered");
    }
}

/// Issue 43, item 2: an idempotency key reused for a request with another binding (type, act,
/// no act, agent, protocol, allow_contained, status) is refused with 422
/// `IDEMPOTENCY_KEY_REUSED` on both routes that take a key, never answered with the stored
/// action or its guard verdict, and writes nothing; the same key from another principal is
/// another action; an explicit `action_id` with another binding is 409 `ACTION_EXISTS`, as in
/// the CLI; the same request again is a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_binds_the_request_it_was_first_used_for() {
    let s = server();
    let first = s.post("/api/actions", BOT, keyed("order-42", "")).await;
    assert_eq!(first.status, 201, "{:?}", first.body);
    let tip = tip_of(&s);
    let differing = [
        ("action_type", r#""action_type":"delete-data""#),
        (
            "act",
            r#""act":{"kind":"shell","command":"rm -rf /srv/data"}"#,
        ),
        ("act", r#""act":null"#),
        (
            "act",
            r#""act":{"kind":"sql","command":"DROP TABLE users"}"#,
        ),
        ("agent_id", r#""agent_id":"agent-2""#),
        ("execution_claims", r#""client_capabilities":[]"#),
        ("status", r#""status":"pending""#),
    ];
    for (field, change) in differing {
        let g = s.post("/api/actions", BOT, keyed("order-42", change)).await;
        assert_key_reused(&g, field, change);
        if field == "status" {
            continue; // the guard takes no status
        }
        // The guard with record=true shares the key's action: the same refusal, no verdict.
        let g = s
            .post("/api/guard?record=true", BOT, keyed("order-42", change))
            .await;
        assert_key_reused(&g, field, change);
    }
    assert_eq!(tip_of(&s), tip, "nothing written");
    // Fields the ledger does not keep are not compared; the same request is a replay.
    let again = s
        .post(
            "/api/actions",
            BOT,
            keyed("order-42", r#""declared_goal":"other""#),
        )
        .await;
    assert_eq!(
        (
            again.status,
            again.str("action_id"),
            again.body.get("idempotent_replay")
        ),
        (201, first.str("action_id"), Some(&Value::Bool(true)))
    );
    assert_eq!(tip_of(&s), tip, "a replay writes nothing");
    // The key is the principal's: another principal's use of it is another action.
    let other = s.post("/api/actions", OTHER, keyed("order-42", "")).await;
    assert_eq!(other.status, 201);
    assert_ne!(other.str("action_id"), first.str("action_id"));
    // That principal, naming the first action by id: 409 ACTION_EXISTS.
    let g = s
        .post(
            "/api/actions",
            OTHER,
            keyed("x", &format!(r#""action_id":"{}""#, first.str("action_id"))),
        )
        .await;
    assert_eq!((g.status, g.str("code")), (409, "ACTION_EXISTS"));

    // An explicit id is bound the same way, refused as the CLI refuses it.
    let explicit =
        |fields: &str| keyed("unused", &format!(r#""action_id":"act_explicit"{fields}"#));
    assert_eq!(s.post("/api/actions", BOT, explicit("")).await.status, 201);
    let tip = tip_of(&s);
    for change in [
        r#","action_type":"delete-data""#,
        r#","act":{"kind":"shell","command":"rm -rf /srv/data"}"#,
        r#","agent_id":"agent-2""#,
    ] {
        let g = s.post("/api/actions", BOT, explicit(change)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (409, "ACTION_EXISTS"),
            "{change}"
        );
        assert_eq!(g.body.get("action"), None);
    }
    assert_eq!(tip_of(&s), tip, "nothing written");
    let g = s.post("/api/actions", BOT, explicit("")).await;
    assert_eq!(
        (g.status, g.body.get("idempotent_replay")),
        (201, Some(&Value::Bool(true)))
    );

    // Under a policy that blocks SQL, a key first used for an allowed guard never lends its
    // verdict to a DROP TABLE.
    let allowed = s
        .post("/api/guard?record=true", BOT, keyed("order-43", ""))
        .await;
    assert_eq!(allowed.str("decision"), "allow");
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            keyed(
                "order-43",
                r#""act":{"kind":"sql","command":"DROP TABLE users"}"#,
            ),
        )
        .await;
    assert_key_reused(&g, "act", "DROP TABLE through the guard");
    // A contained action is never replayed to a client that cannot hold one.
    let contained = r#""action_type":"write","act":{"kind":"file"},"client_capabilities":["execution_claims","allow_contained"]"#;
    let g = s
        .post("/api/guard?record=true", BOT, keyed("order-44", contained))
        .await;
    assert_eq!(g.str("decision"), "allow_contained");
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            keyed("order-44", &contained.replace(r#","allow_contained""#, "")),
        )
        .await;
    assert_key_reused(&g, "allow_contained", "contained without the capability");
    let g = s
        .post("/api/guard?record=true", BOT, keyed("order-44", contained))
        .await;
    assert_eq!(
        (g.str("decision"), g.body.get("idempotent_replay")),
        ("allow_contained", Some(&Value::Bool(true)))
    );
}

/// Issue 43, item 3: a replay answers what the first request answered, status, code and body
/// shape (plus `idempotent_replay`): 403 for a blocked creation, 202 for one awaiting approval,
/// 201 for a running one, the guard's recorded block as a block; even after the policy changed.
/// A request refused before anything was written (400 in validation, 400 for an act that cannot
/// be stored, 503 with the store down) left nothing under its key: the retry creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_answers_what_the_first_request_answered() {
    let s = server();
    let sql = r#""act":{"kind":"sql","command":"DROP TABLE prod"}"#;
    for (key, fields, status) in [
        ("k-c", sql.to_owned(), 403),
        ("k-a", r#""action_type":"deploy""#.to_owned(), 202),
        ("k-r", String::new(), 201),
    ] {
        let first = s.post("/api/actions", BOT, keyed(key, &fields)).await;
        assert_eq!(first.status, status, "{key}: {:?}", first.body);
        let tip = tip_of(&s);
        s.clock.fetch_add(60_000, Ordering::SeqCst);
        let again = s.post("/api/actions", BOT, keyed(key, &fields)).await;
        assert_eq!(again.status, status, "{key}");
        assert_eq!(
            again.body.get("idempotent_replay"),
            Some(&Value::Bool(true))
        );
        let mut expected = keys_of(&first);
        expected.push("idempotent_replay".into());
        expected.sort();
        assert_eq!(keys_of(&again), expected, "{key}: the same shape");
        for k in ["error", "action_id"] {
            assert_eq!(again.body.get(k), first.body.get(k), "{key}: {k}");
        }
        assert_eq!(
            again.body.get("decision"),
            first.body.get("decision"),
            "{key}"
        );
        assert_eq!(
            again.str_at("action", "created_at"),
            first.str_at("action", "created_at"),
            "{key}"
        );
        assert_eq!(tip_of(&s), tip, "{key}: a replay writes nothing");
    }
    // The guard's recorded block, replayed: still a block.
    let first = s
        .post("/api/guard?record=true", BOT, keyed("k-g", sql))
        .await;
    assert_eq!((first.status, first.str("decision")), (200, "block"));
    let again = s
        .post("/api/guard?record=true", BOT, keyed("k-g", sql))
        .await;
    assert_eq!(
        (
            again.status,
            again.str("decision"),
            again.str("decision_id")
        ),
        (200, "block", first.str("decision_id"))
    );
    assert_eq!(again.str("action_status"), "blocked");

    // Refusals that wrote nothing leave the key free.
    for (key, bad) in [
        ("k-v1", r#""status":"unknown""#),
        ("k-v2", r#""client_capabilities":"execution_claims""#),
        ("k-v3", r#""act":{"kind":"shell","n":1e400}"#),
    ] {
        let tip = tip_of(&s);
        let g = s.post("/api/actions", BOT, keyed(key, bad)).await;
        assert_eq!(g.status, 400, "{key}: {:?}", g.body);
        assert_eq!(tip_of(&s), tip, "{key}: nothing written");
        let g = s.post("/api/actions", BOT, keyed(key, "")).await;
        assert_eq!(
            (g.status, g.body.get("idempotent_replay")),
            (201, None),
            "{key}"
        );
    }
}

/// Issue 43, item 3: a creation that failed with 503 (the remote store down) stored nothing;
/// once the store is back, the retry under the same key creates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_creation_that_failed_unavailable_may_create_on_retry() {
    let s = server_with(None, |dir| Target::Remote {
        url: dir.join("remote.git").display().to_string(),
        ref_name: "refs/heads/main".into(),
        timeout: None,
    });
    for route in ["/api/actions", "/api/guard?record=true"] {
        let key = format!("k5-{route}");
        let g = s.post(route, BOT, keyed(&key, "")).await;
        assert_eq!(g.status, 503, "{route}: {:?}", g.body);
    }
    Store::open_or_init_bare(&s._tmp.path().join("remote.git"), "refs/heads/main").unwrap();
    for route in ["/api/actions", "/api/guard?record=true"] {
        let key = format!("k5-{route}");
        let g = s.post(route, BOT, keyed(&key, "")).await;
        assert!(
            matches!(g.status, 200 | 201) && g.body.get("idempotent_replay").is_none(),
            "{route}: {} {:?}",
            g.status,
            g.body
        );
    }
}
