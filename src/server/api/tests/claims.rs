//! `PATCH /api/actions/{id}` and outcome reports: claims, outcomes and the legacy close.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_outcomes_and_the_legacy_close() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    // Body rules.
    for (body, status, code) in [
        (
            r#"{"claim_execution":true,"attempt_id":"short","agent_id":"agent-1"}"#.to_owned(),
            400,
            "INVALID_EXECUTION_CLAIM",
        ),
        (
            format!(r#"{{"claim_execution":"yes","attempt_id":"{A1}","agent_id":"agent-1"}}"#),
            400,
            "INVALID_EXECUTION_CLAIM",
        ),
        (
            format!(
                r#"{{"claim_execution":true,"attempt_id":"{A1}","agent_id":"agent-1","status":"x"}}"#
            ),
            400,
            "INVALID_EXECUTION_CLAIM",
        ),
        (
            format!(r#"{{"claim_execution":true,"attempt_id":"{A1}"}}"#),
            403,
            "AGENT_IDENTITY_REQUIRED",
        ),
        (
            format!(r#"{{"claim_execution":true,"attempt_id":"{A1}","agent_id":"  "}}"#),
            403,
            "AGENT_IDENTITY_REQUIRED",
        ),
    ] {
        let g = s.patch(&uri, BOT, &body).await;
        assert_eq!((g.status, g.str("code")), (status, code), "{body}");
    }
    // Ineligible: another act, agent, principal, a missing action: one answer for all.
    let other_act = r#"{"kind":"shell","command":"rm -rf /"}"#;
    for (u, key, body) in [
        (uri.clone(), BOT, claim_body(A1, other_act)),
        (
            uri.clone(),
            BOT,
            claim_body(A1, ACT).replace("agent-1", "agent-2"),
        ),
        (uri.clone(), OTHER, claim_body(A1, ACT)),
        (
            "/api/actions/act_missing".to_owned(),
            BOT,
            claim_body(A1, ACT),
        ),
        ("/api/actions/%FF".to_owned(), BOT, claim_body(A1, ACT)),
    ] {
        let g = s.patch(&u, key, &body).await;
        assert_eq!(
            (g.status, g.str("code")),
            (409, "EXECUTION_CLAIM_CONFLICT"),
            "{u} {body}"
        );
    }
    // The claim: echoed, not cached; a second is refused, the same attempt id too.
    let g = s.patch(&uri, BOT, &claim_body(A1, ACT)).await;
    assert_eq!(
        (g.status, g.str("action_id"), g.str("attempt_id")),
        (200, id.as_str(), A1)
    );
    assert_eq!(g.body.get("claimed"), Some(&Value::Bool(true)));
    assert_eq!(g.headers.get(header::CACHE_CONTROL).unwrap(), "no-store");
    for attempt in [A1, A2] {
        let g = s.patch(&uri, BOT, &claim_body(attempt, ACT)).await;
        assert_eq!((g.status, g.str("action_id")), (409, id.as_str()));
    }
    // Outcome input rules.
    let out = format!("{uri}/outcome");
    for (body, status) in [
        (r#"{"status":"banana"}"#, 400),
        (r#"{"status":"lost_confirmation"}"#, 400),
        (r#"{"status":"failed"}"#, 400),
        (r#"{"status":"partial"}"#, 400),
        (r#"{"status":"completed","summary":7}"#, 400),
    ] {
        let g = s.post(&out, BOT, body).await;
        assert_eq!(g.status, status, "{body}");
    }
    let big = format!(
        r#"{{"status":"partial","progress":{{"s":"{}"}}}}"#,
        "x".repeat(10_000)
    );
    assert_eq!(s.post(&out, BOT, &big).await.status, 400);
    assert_eq!(
        s.post(
            "/api/actions/act_missing/outcome",
            BOT,
            r#"{"status":"completed"}"#
        )
        .await
        .status,
        404
    );
    s.clock.fetch_add(1234, Ordering::SeqCst);
    let g = s.post(&out, BOT, r#"{"status":"partial","progress":{"step":2},"summary":"half done; key sk-abcdefghijklmnop"}"#).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let o = g.body.get("outcome").unwrap();
    assert_eq!(o.get("elapsed_ms"), Some(&Value::from(1234)));
    assert_eq!(
        o.get("summary").and_then(Value::as_str),
        Some("half done; key [REDACTED]")
    );
    let sec = g.body.get("security").unwrap();
    assert_eq!(
        (sec.get("clean"), sec.get("critical_count")),
        (Some(&Value::Bool(false)), Some(&Value::from(1)))
    );
    let g = s.post(&out, BOT, r#"{"status":"completed"}"#).await;
    assert_eq!(
        (g.status, g.str("error"), g.str("current_status")),
        (409, "outcome already set", "partial")
    );
    let g = s.get(&out, BOT).await;
    assert_eq!((g.status, g.str("status")), (200, "partial"));
    for k in [
        "action_id",
        "status",
        "outcome_at",
        "summary",
        "error_message",
        "progress",
        "elapsed_ms",
    ] {
        assert!(g.body.get(k).is_some(), "{k}");
    }
    // Legacy close: only while running.
    let id2 = recorded(&s, "build", ACT, "").await;
    let g = s
        .patch(
            format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"cancelled","output_summary":"stop"}"#,
        )
        .await;
    assert_eq!(g.status, 200);
    assert_eq!(g.str_at("action", "outcome_status"), Some("failed"));
    let g = s
        .patch(
            format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!((g.status, g.str("status")), (409, "cancelled"));
    let g = s
        .post(
            format!("/api/actions/{id2}/outcome"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!((g.status, g.str("current_status")), (409, "failed"));
    assert_eq!(
        s.patch("/api/actions/act_missing", BOT, r#"{"status":"completed"}"#)
            .await
            .status,
        404
    );
    assert_eq!(
        s.patch(
            format!("/api/actions/{id2}"),
            BOT,
            r#"{"status":"running"}"#
        )
        .await
        .status,
        400
    );
    // Lifecycle gate: pending approval refuses outcomes.
    let id3 = recorded(&s, "deploy", ACT, "").await;
    let g = s
        .post(
            format!("/api/actions/{id3}/outcome"),
            BOT,
            r#"{"status":"completed"}"#,
        )
        .await;
    assert_eq!(
        (g.status, g.str("current_status")),
        (409, "pending_approval")
    );
}

/// A claim whose act holds a number canonical JSON cannot write exactly shares its hash with
/// another act (`1e400` and `null`, `-0` and `0`) or cannot be written at all (2^53+1), so it is refused as a bad
/// request before anything is read, as the CLI's claim refuses it: it must never claim the
/// action created for that other act.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_with_a_lossy_act_is_a_bad_request() {
    let s = server();
    for (created, lossy) in [
        (
            r#"{"kind":"shell","n":null}"#,
            r#"{"kind":"shell","n":1e400}"#,
        ),
        (
            r#"{"kind":"shell","n":null}"#,
            r#"{"kind":"shell","n":-1e400}"#,
        ),
        (r#"{"kind":"shell","n":0}"#, r#"{"kind":"shell","n":-0}"#),
        (
            r#"{"kind":"shell","n":1}"#,
            r#"{"kind":"shell","n":9007199254740993}"#,
        ),
        (
            r#"{"kind":"shell","deep":[{"a":[null]}]}"#,
            r#"{"kind":"shell","deep":[{"a":[1e999]}]}"#,
        ),
    ] {
        let id = recorded(&s, "build", created, "").await;
        let uri = format!("/api/actions/{id}");
        let g = s.patch(&uri, BOT, claim_body(A1, lossy)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (400, "INVALID_EXECUTION_CLAIM"),
            "{lossy}: {:?}",
            g.body
        );
        assert!(g.str("reason").contains("lossy number"), "{:?}", g.body);
        let g = s.patch(&uri, BOT, claim_body(A1, created)).await;
        assert_eq!(
            (g.status, g.body.get("claimed")),
            (200, Some(&Value::Bool(true))),
            "{created}: nothing was granted to the lossy claim"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_have_one_winner_and_share_commits() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let store = Store::open(&s.repo).unwrap();
    let before = store.tip("refs/heads/main").unwrap().unwrap();
    let uri = format!("/api/actions/{id}");
    let mut tasks = Vec::new();
    for i in 0..32 {
        let router = s.router.clone();
        let body = claim_body(&format!("attempt-{i:016}"), ACT);
        let uri = uri.clone();
        tasks.push(tokio::spawn(async move {
            let req = axum::http::Request::builder()
                .method("PATCH")
                .uri(uri)
                .header("x-api-key", BOT)
                .body(Body::from(body))
                .unwrap();
            router.oneshot(req).await.unwrap().status().as_u16()
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 409).count(), 31, "{codes:?}");
    // Many creations at once: fewer commits than creations, each creation landed.
    let mut tasks = Vec::new();
    for i in 0..24 {
        let router = s.router.clone();
        let body = guard_body("build", ACT, &format!(r#","idempotency_key":"many-{i}""#));
        tasks.push(tokio::spawn(async move {
            let req = axum::http::Request::builder()
                .method("POST")
                .uri("/api/guard?record=true")
                .header("x-api-key", BOT)
                .body(Body::from(body))
                .unwrap();
            router.oneshot(req).await.unwrap().status().as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    let tip = store.tip("refs/heads/main").unwrap().unwrap();
    let mut commits = 0;
    let mut c = tip;
    while c != before {
        commits += 1;
        c = store.parents(c).unwrap()[0];
    }
    assert!(commits <= 25, "{commits} commits");
    let report = crate::verify::verify_revision(&store, tip).unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_checked_against_the_current_policy() {
    let a = server();
    let allowed = recorded(&a, "build", ACT, "").await;
    let approved = recorded(&a, "deploy", ACT, "").await;
    let uri = format!("/api/actions/{approved}/approve");
    assert_eq!(
        a.post(&uri, OPS, r#"{"decision":"approve"}"#).await.status,
        200
    );
    let still = recorded(&a, "build", ACT, "").await;
    // A second server on the same repository whose policy now blocks builds and sends
    // deploys to approval: the allowed build can no longer be claimed there; the approved
    // deploy can (its approval is the authority); the first server still grants builds.
    let repo = a.repo.clone();
    let b = server_custom(
        None,
        |_| Target::Local,
        move |st| {
            st.repo = repo;
            st.policy = Policy::parse(
            r#"{"rules":[{"action_type":"build","verdict":"block"},{"action_type":"deploy","verdict":"require_approval"}]}"#,
            "tightened",
        )
        .unwrap();
        },
    );
    let g = b
        .patch(format!("/api/actions/{allowed}"), BOT, &claim_body(A1, ACT))
        .await;
    assert_eq!((g.status, g.str("code")), (409, "EXECUTION_CLAIM_CONFLICT"));
    let g = b
        .patch(
            format!("/api/actions/{approved}"),
            BOT,
            &claim_body(A1, ACT),
        )
        .await;
    assert_eq!(g.status, 200);
    let g = a
        .patch(format!("/api/actions/{still}"), BOT, &claim_body(A1, ACT))
        .await;
    assert_eq!(g.status, 200);
}

/// A claim must present the act the action was created for: no act, `null`, an act whose
/// numbers round to the created one's, or one with NFC-equal keys is refused (409 or 400,
/// never granted); the created act, its numbers written differently but exactly, is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_must_present_the_created_act() {
    let s = server();
    let id = recorded(&s, "build", r#"{"kind":"shell","command":"ls","n":0}"#, "").await;
    let uri = format!("/api/actions/{id}");
    let no_act = format!(r#"{{"claim_execution":true,"attempt_id":"{A1}","agent_id":"agent-1"}}"#);
    assert_eq!(s.patch(&uri, BOT, &no_act).await.status, 409, "no act");
    assert_eq!(
        s.patch(&uri, BOT, claim_body(A1, "null")).await.status,
        409,
        "null act"
    );
    for act in [
        r#"{"kind":"shell","command":"ls","n":1e-400}"#,
        r#"{"kind":"shell","command":"ls","n":0,"\u00e9":1,"e\u0301":2}"#,
        r#"{"kind":"shell","command":"ls","n":-1e-400}"#,
        r#""ls""#,
    ] {
        let g = s.patch(&uri, BOT, claim_body(A1, act)).await;
        assert_eq!(
            (g.status, g.str("code")),
            (400, "INVALID_EXECUTION_CLAIM"),
            "{act}: {:?}",
            g.body
        );
        assert!(
            g.str("reason").starts_with("invalid act: $"),
            "{:?}",
            g.body
        );
    }
    let g = s
        .patch(
            &uri,
            BOT,
            claim_body(A1, r#"{"kind":"shell","command":"ls","n":0.0e5}"#),
        )
        .await;
    assert_eq!(
        (g.status, g.body.get("claimed")),
        (200, Some(&Value::Bool(true))),
        "{:?}",
        g.body
    );
}

/// Only the claimant's principal (the action's creator) or an operator key settles an action:
/// another key's outcome report and legacy close answer exactly as for an unknown id (404),
/// so they reveal nothing; the owner's report then lands, and an operator may report or
/// close any action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_claimant_or_an_operator_settles_an_action() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    assert_eq!(s.patch(&uri, BOT, claim_body(A1, ACT)).await.status, 200);
    let failed = r#"{"status":"failed","error_message":"boom"}"#;
    let cancel = r#"{"status":"cancelled"}"#;
    for missing in ["/api/actions/act_missing", "/api/actions/not%2Fan%2Fid"] {
        let theirs = s.post(format!("{uri}/outcome"), OTHER, failed).await;
        let unknown = s.post(format!("{missing}/outcome"), OTHER, failed).await;
        assert_eq!(
            (theirs.status, &theirs.body),
            (404, &unknown.body),
            "outcome"
        );
        let theirs = s.patch(&uri, OTHER, cancel).await;
        let unknown = s.patch(missing, OTHER, cancel).await;
        assert_eq!((theirs.status, &theirs.body), (404, &unknown.body), "close");
    }
    // An invalid report is refused the same way, before the action is looked at.
    let bad = r#"{"status":"failed"}"#;
    assert_eq!(
        s.post(format!("{uri}/outcome"), OTHER, bad).await.body,
        s.post("/api/actions/act_missing/outcome", OTHER, bad)
            .await
            .body
    );
    let g = s.get(format!("{uri}/outcome"), BOT).await;
    assert_eq!(
        g.str("status"),
        "pending",
        "nothing was settled: {:?}",
        g.body
    );
    let g = s
        .post(format!("{uri}/outcome"), BOT, r#"{"status":"completed"}"#)
        .await;
    assert_eq!(g.status, 200, "the owner's report lands: {:?}", g.body);
    // An operator key settles another principal's actions: a report, a close.
    for (what, settle) in [("report", true), ("close", false)] {
        let id = recorded(&s, "build", ACT, "").await;
        let uri = format!("/api/actions/{id}");
        assert_eq!(s.patch(&uri, BOT, claim_body(A2, ACT)).await.status, 200);
        let g = if settle {
            s.post(format!("{uri}/outcome"), OPS, failed).await
        } else {
            s.patch(&uri, OPS, cancel).await
        };
        assert_eq!(g.status, 200, "{what}: {:?}", g.body);
    }
    // An unclaimed action is its creator's too.
    let id = recorded(&s, "build", ACT, "").await;
    let g = s.patch(format!("/api/actions/{id}"), OTHER, cancel).await;
    assert_eq!(g.status, 404, "{:?}", g.body);
    let g = s.patch(format!("/api/actions/{id}"), BOT, cancel).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
}

/// Issue 45: a legacy close keeps the `error_message` it is sent (redacted as every stored
/// text is), and the GET reads it back; the columns DashClaw's server acts on but a close here
/// does not record are a 400 that changes nothing, never a silent 200.
#[tokio::test]
async fn a_legacy_close_keeps_its_error_message_and_refuses_unrecorded_columns() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let uri = format!("/api/actions/{id}");
    for body in [
        r#"{"status":"failed","containment_status":"promoted"}"#,
        r#"{"status":"failed","executed_despite":true}"#,
        r#"{"status":"failed","error_message":7}"#,
    ] {
        let g = s.patch(&uri, BOT, body).await;
        assert_eq!(g.status, 400, "{body}: {:?}", g.body);
    }
    let g = s.get(&uri, BOT).await;
    assert_eq!(
        g.str_at("action", "status"),
        Some("running"),
        "{:?}",
        g.body
    );
    let g = s
        .patch(
            &uri,
            BOT,
            r#"{"status":"failed","error_message":"kaput; ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let message = g.str_at("action", "error_message").unwrap().to_owned();
    assert!(message.starts_with("kaput"), "{message}");
    assert!(!message.contains("ghp_aaaa"), "{message}");
    let g = s.get(&uri, BOT).await;
    assert_eq!(g.str_at("action", "error_message"), Some(message.as_str()));
    assert_eq!(g.str_at("action", "status"), Some("failed"));
    // Still one-shot.
    let g = s
        .patch(&uri, BOT, r#"{"status":"failed","error_message":"again"}"#)
        .await;
    assert_eq!((g.status, g.str("status")), (409, "failed"));
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}

/// Issue 45: a legacy close keeps everything DashClaw's `PATCH` keeps: the `timestamp_end` it
/// is sent (to the millisecond, in UTC) beside the server's `outcome_at`, and the tokens, cost,
/// model, duration, side effects and artifacts, which read back on the row over the creator's
/// values, redacted. Each bad field is a 400 naming the field and the rule; outcome fields
/// without a status, and a PATCH with no outcome field at all, are 400 too; none writes.
#[tokio::test]
async fn a_legacy_close_keeps_its_end_time_tokens_cost_and_model() {
    let s = server();
    let detail = |g: &Got| -> String {
        let d = g.body.get("details").and_then(|d| d.as_array());
        let d = d.into_iter().flatten().filter_map(Value::as_str);
        d.collect::<Vec<_>>().join("; ")
    };
    let id = recorded(&s, "build", ACT, r#","model":"m-create","tokens_in":1"#).await;
    let uri = format!("/api/actions/{id}");
    let g = s.get(&uri, BOT).await;
    assert_eq!(
        g.str_at("action", "model"),
        Some("m-create"),
        "{:?}",
        g.body
    );
    let tip = tip_of(&s);
    for (body, want) in [
        (
            r#"{"status":"completed","tokens_in":-1}"#,
            "tokens_in must be >= 0",
        ),
        (
            r#"{"status":"completed","tokens_out":1.5}"#,
            "tokens_out must be an integer",
        ),
        (
            r#"{"status":"completed","cost_estimate":"3"}"#,
            "cost_estimate must be a number",
        ),
        (
            r#"{"status":"completed","duration_ms":-5}"#,
            "duration_ms must be >= 0",
        ),
        (
            r#"{"status":"completed","side_effects":[1]}"#,
            "side_effects[0] must be a string",
        ),
        (
            r#"{"status":"completed","model":false}"#,
            "model must be a string",
        ),
        (
            r#"{"tokens_in":5,"timestamp_end":"2026-03-01T12:00:00Z"}"#,
            "timestamp_end, tokens_in can only be recorded with status",
        ),
        (
            r#"{"output_summary":"done"}"#,
            "output_summary can only be recorded with status",
        ),
        (
            r#"{}"#,
            "At least one outcome field is required: status, output_summary",
        ),
        (
            r#"{"status":null,"unknown":1}"#,
            "At least one outcome field is required",
        ),
    ] {
        let g = s.patch(&uri, BOT, body).await;
        assert_eq!(g.status, 400, "{body}: {:?}", g.body);
        let d = detail(&g);
        assert!(d.contains(want), "{body}: {d}");
    }
    assert_eq!(tip_of(&s), tip, "a refused PATCH writes nothing");
    let g = s
        .patch(
            &uri,
            BOT,
            r#"{"status":"completed","output_summary":"shipped","timestamp_end":"2026-03-01T13:00:00.123456+01:00","tokens_in":1200,"tokens_out":340,"cost_estimate":0.0425,"model":"m-close","duration_ms":5321,"side_effects":["cache flushed"],"artifacts_created":["s3://bucket/key?token=ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    for g in [g, s.get(&uri, BOT).await] {
        let a = g.body.get("action").expect("action");
        let num = |k: &str| a.get(k).and_then(Value::as_f64);
        assert_eq!(
            g.str_at("action", "timestamp_end"),
            Some("2026-03-01T12:00:00.123Z")
        );
        assert_ne!(
            g.str_at("action", "outcome_at"),
            Some("2026-03-01T12:00:00.123Z")
        );
        assert_eq!(
            g.str_at("action", "model"),
            Some("m-close"),
            "the close's wins"
        );
        assert_eq!(num("tokens_in"), Some(1200.0));
        assert_eq!(num("tokens_out"), Some(340.0));
        assert_eq!(num("cost_estimate"), Some(0.0425));
        assert_eq!(num("duration_ms"), Some(5321.0));
        assert_eq!(g.str_at("action", "outcome_summary"), Some("shipped"));
        let artifacts = format!("{:?}", a.get("artifacts_created"));
        assert!(
            artifacts.contains("[REDACTED]") && !artifacts.contains("ghp_aaaa"),
            "{artifacts}"
        );
        assert!(format!("{:?}", a.get("side_effects")).contains("cache flushed"));
    }
    // The close is one-shot: a second one with other tokens is 409 and changes nothing.
    let g = s
        .patch(&uri, BOT, r#"{"status":"completed","tokens_in":9}"#)
        .await;
    assert_eq!((g.status, g.str("status")), (409, "completed"));
    let g = s.get(&uri, BOT).await;
    assert_eq!(
        g.body
            .get("action")
            .and_then(|a| a.get("tokens_in"))
            .and_then(Value::as_f64),
        Some(1200.0)
    );
    let store = Store::open(&s.repo).unwrap();
    let report =
        crate::verify::verify_revision(&store, store.tip("refs/heads/main").unwrap().unwrap())
            .unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
}
