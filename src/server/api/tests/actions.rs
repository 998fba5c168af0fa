//! `POST /api/actions`: creation answers, acts refused as unhashable, the full action record.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_answers_201_202_403_and_replays() {
    let s = server();
    let body = |ty: &str, act: &str| {
        format!(
            r#"{{"action_type":"{ty}","declared_goal":"g","agent_id":"agent-1","act":{act},"idempotency_key":"{ty}","client_capabilities":["execution_claims"]}}"#
        )
    };
    let g = s.post("/api/actions", BOT, &body("build", ACT)).await;
    assert_eq!(g.status, 201);
    let id = g.str("action_id").to_owned();
    assert_eq!(g.str_at("action", "status"), Some("running"));
    let g = s.post("/api/actions", BOT, &body("build", ACT)).await;
    assert_eq!((g.status, g.str("action_id")), (201, id.as_str()));
    assert_eq!(g.body.get("idempotent_replay"), Some(&Value::Bool(true)));
    assert_eq!(
        s.post("/api/actions", BOT, &body("deploy", ACT))
            .await
            .status,
        202
    );
    let g = s
        .post("/api/actions", BOT, &body("query", r#"{"kind":"sql"}"#))
        .await;
    assert_eq!(
        (g.status, g.str("error")),
        (403, "Action blocked by policy")
    );
    assert_eq!(g.str_at("decision", "decision"), Some("block"));
    // An explicit id; taken by another principal: 409; no agent: 400.
    let g = s
        .post(
            "/api/actions",
            BOT,
            r#"{"action_type":"x","agent_id":"a","action_id":"act_mine"}"#,
        )
        .await;
    assert_eq!((g.status, g.str("action_id")), (201, "act_mine"));
    let g = s
        .post(
            "/api/actions",
            OTHER,
            r#"{"action_type":"x","agent_id":"a","action_id":"act_mine"}"#,
        )
        .await;
    assert_eq!(g.status, 409);
    assert_eq!(
        s.post("/api/actions", BOT, r#"{"action_type":"x"}"#)
            .await
            .status,
        400
    );
    assert_eq!(
        s.post(
            "/api/actions",
            BOT,
            r#"{"action_type":"x","agent_id":"a","status":"unknown"}"#
        )
        .await
        .status,
        400
    );
    // Reads.
    let g = s.get(format!("/api/actions/{id}"), OTHER).await;
    assert_eq!(g.status, 200);
    assert_eq!(g.str_at("action", "action_type"), Some("build"));
    for missing in ["act_missing", "bad%20id", "%FF", "a%2Fb"] {
        assert_eq!(
            s.get(format!("/api/actions/{missing}"), BOT).await.status,
            404
        );
        assert_eq!(
            s.get(format!("/api/actions/{missing}/outcome"), BOT)
                .await
                .status,
            404
        );
    }
}

/// Acts the act hash cannot take one to one, as `(act, path named)`: keys equal after NFC
/// normalisation (at the root and nested), a key or string not in NFC, numbers written with
/// more digits than a double holds (underflow, rounding to 1, rounding to 0.1), overflow, and
/// acts that are not objects.
const UNHASHABLE: [(&str, &str); 11] = [
    (
        r#"{"kind":"shell","command":"ls","\u00e9":1,"e\u0301":2}"#,
        "$ has two keys equal after Unicode NFC normalisation",
    ),
    (
        r#"{"kind":"sql","statement":"DROP TABLE users","q":{"a":[{"\u212b":1,"\u00c5":2}]}}"#,
        "$.q.a[0] has two keys equal",
    ),
    (
        r#"{"kind":"shell","command":"rm cafe\u0301"}"#,
        "at $.command is not in Unicode normalisation form C",
    ),
    (
        r#"{"kind":"shell","args":{"e\u0301":1}}"#,
        "at $.args is not in Unicode normalisation form C",
    ),
    (
        r#"{"kind":"shell","n":1e-400}"#,
        "$.n is written with more digits",
    ),
    (
        r#"{"kind":"shell","n":1.00000000000000000001}"#,
        "$.n is written with more digits",
    ),
    (
        r#"{"kind":"shell","x":[0.10000000000000001]}"#,
        "$.x[0] is written with more digits",
    ),
    (r#"{"kind":"shell","n":1e400}"#, "$.n is a lossy number"),
    (r#"{"kind":"shell","n":-1e-400}"#, "$.n is a lossy number"),
    (r#""ls""#, "$ must be a JSON object"),
    ("[1,2]", "$ must be a JSON object"),
];

/// Every act the hash cannot take one to one is refused by `POST /api/actions` and by the guard
/// (recorded or not) as a bad request naming its path, and nothing is written: no action is
/// ever created with `act_content_hash: null` for an act it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhashable_acts_are_refused_at_creation() {
    let s = server();
    for (act, path) in UNHASHABLE {
        let body = guard_body("build", act, "");
        for (uri, what) in [
            ("/api/actions", "create"),
            ("/api/guard?record=true", "recorded guard"),
            ("/api/guard", "guard"),
        ] {
            let g = s.post(uri, BOT, &body).await;
            let details = g.body.get("details").map(canonical::to_canonical_unchecked);
            assert_eq!(
                (g.status, g.str("error")),
                (400, "Validation failed"),
                "{what} {act}: {:?}",
                g.body
            );
            assert!(
                details.as_deref().is_some_and(|d| d.contains(path)),
                "{what} {act}: {details:?}"
            );
        }
    }
    let tip = Store::open(&s.repo)
        .unwrap()
        .tip("refs/heads/main")
        .unwrap();
    assert_eq!(tip, None, "nothing was recorded");
    // The same acts written exactly are created, with a hash.
    let g = s
        .post(
            "/api/actions",
            BOT,
            guard_body(
                "build",
                r#"{"kind":"shell","n":0,"x":[0.1],"\u00e9":1}"#,
                "",
            ),
        )
        .await;
    assert_eq!(g.status, 201, "{:?}", g.body);
    assert!(
        g.str_at("action", "act_content_hash")
            .is_some_and(|h| h.starts_with("sha256:")),
        "{:?}",
        g.body
    );
}

/// The full action record (issue 45): both creating routes keep the goal, risk, systems,
/// reversible, reasoning, idempotency key, assumptions and the act, redacted, and answer them
/// in DashClaw's row (`GET /api/actions/{id}`, the listing); bad details are refused with 400
/// naming the field and the rule, and nothing is written.
#[tokio::test]
async fn the_full_action_record_is_kept_redacted_and_answered() {
    let s = server();
    let extra = r#","declared_goal":"rotate the deploy key; old one was password=hunter22","risk_score":72,"systems_touched":["github","vault"],"reversible":false,"reasoning":"the key leaked in a log","idempotency_key":"idem-full-1","assumptions":["nobody deploys meanwhile"],"confidence":90"#;
    for (body, want) in [
        (r#""risk_score":101"#, "risk_score must be <= 100"),
        (r#""risk_score":"high""#, "risk_score must be an integer"),
        (r#""reversible":"no""#, "reversible must be a boolean"),
        (
            r#""systems_touched":"github""#,
            "systems_touched must be an array",
        ),
        (
            r#""systems_touched":[1]"#,
            "systems_touched[0] must be a string",
        ),
        (r#""declared_goal":7"#, "declared_goal must be a string"),
    ] {
        for uri in ["/api/actions", "/api/guard?record=true", "/api/guard"] {
            let g = s
                .post(uri, BOT, guard_body("build", ACT, &format!(",{body}")))
                .await;
            assert_eq!(
                (g.status, g.str("error")),
                (400, "Validation failed"),
                "{uri} {body}"
            );
            let details = canonical::to_canonical_unchecked(g.body.get("details").unwrap());
            assert!(details.contains(want), "{uri} {body}: {details}");
        }
    }
    let long_goal = format!(r#","declared_goal":"{}""#, "g".repeat(2001));
    let g = s
        .post("/api/actions", BOT, guard_body("build", ACT, &long_goal))
        .await;
    assert_eq!(g.status, 400);
    assert!(
        canonical::to_canonical_unchecked(&g.body)
            .contains("declared_goal exceeds max length of 2000")
    );
    let store = Store::open(&s.repo).unwrap();
    assert_eq!(
        store.tip("refs/heads/main").unwrap(),
        None,
        "nothing written"
    );

    let created = s
        .post("/api/actions", BOT, guard_body("deploy", ACT, extra))
        .await;
    assert_eq!(created.status, 202, "{:?}", created.body);
    let security = created.body.get("security").unwrap();
    assert_eq!(
        security.get("clean"),
        Some(&Value::Bool(false)),
        "{security}"
    );
    let id = created.str("action_id").to_owned();
    let got = s.get(format!("/api/actions/{id}"), OPS).await;
    assert_eq!(got.status, 200);
    let row = got.body.get("action").unwrap();
    let field = |k: &str| {
        row.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("{k} missing: {row}"))
    };
    assert_eq!(
        field("declared_goal"),
        Value::str("rotate the deploy key; old one was password=[REDACTED]")
    );
    assert_eq!(field("risk_score"), Value::from(72));
    assert_eq!(
        field("systems_touched"),
        Value::Array(vec![Value::str("github"), Value::str("vault")])
    );
    assert_eq!(field("reversible"), Value::Bool(false));
    assert_eq!(field("reasoning"), Value::str("the key leaked in a log"));
    assert_eq!(field("idempotency_key"), Value::str("idem-full-1"));
    assert_eq!(field("confidence"), Value::from(90));
    assert_eq!(
        field("tokens_in"),
        Value::Null,
        "not given, no default invented"
    );
    assert_eq!(field("side_effects"), Value::Array(vec![]));
    assert_eq!(
        field("act"),
        canonical::parse(r#"{"kind":"shell","command":"make deploy token=[REDACTED]"}"#).unwrap()
    );
    assert_eq!(field("act_redacted"), Value::Bool(false));
    assert_eq!(
        finality::act_content_hash(Some(&field("act"))),
        row.get("act_content_hash")
            .and_then(Value::as_str)
            .map(str::to_owned),
        "the stored act is the hashed one"
    );
    let text = canonical::to_canonical_unchecked(&got.body);
    assert!(
        !text.contains("hunter22") && !text.contains("abc123"),
        "{text}"
    );
    let assumptions = got
        .body
        .get("assumptions")
        .and_then(Value::as_array)
        .unwrap();
    assert_eq!(assumptions.len(), 1);
    assert_eq!(
        assumptions[0].get("assumption"),
        Some(&Value::str("nobody deploys meanwhile"))
    );
    // The listing answers the same row.
    let list = s.get("/api/actions?status=pending_approval", OPS).await;
    let rows = list.body.get("actions").and_then(Value::as_array).unwrap();
    let listed = rows
        .iter()
        .find(|r| r.get("action_id").and_then(Value::as_str) == Some(id.as_str()))
        .unwrap();
    assert_eq!(listed, row);
    // A replay under the same key answers the stored details, whatever it says now.
    let replay = s
        .post(
            "/api/actions",
            BOT,
            guard_body(
                "deploy",
                ACT,
                &extra.replace("\"risk_score\":72", "\"risk_score\":10"),
            ),
        )
        .await;
    assert_eq!(
        replay.body.get("idempotent_replay"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        replay.body.get("action").and_then(|a| a.get("risk_score")),
        Some(&Value::from(72))
    );
    // The recorded guard keeps them too (the SDK's run_governed records through it).
    let g = s
        .post(
            "/api/guard?record=true",
            BOT,
            guard_body(
                "build",
                ACT,
                r#","declared_goal":"build it","risk_score":5,"systems_touched":["ci"]"#,
            ),
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let id = g.str("action_id").to_owned();
    let row = s.get(format!("/api/actions/{id}"), BOT).await;
    assert_eq!(row.str_at("action", "declared_goal"), Some("build it"));
    assert_eq!(
        row.body.get("action").and_then(|a| a.get("risk_score")),
        Some(&Value::from(5))
    );
    // The listing filters by the details' risk and swarm (refused before: no data).
    let ids = |g: &Got| -> Vec<String> {
        g.body
            .get("actions")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .filter_map(|a| {
                a.get("action_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    };
    let risky = s.get("/api/actions?risk_min=70", OPS).await;
    assert_eq!(risky.status, 200);
    assert_eq!(ids(&risky), [created.str("action_id").to_owned()]);
    assert_eq!(ids(&s.get("/api/actions?risk_min=5", OPS).await).len(), 2);
    assert_eq!(s.get("/api/actions?risk_min=101", OPS).await.status, 400);
    assert_eq!(
        ids(&s.get("/api/actions?swarm_id=none", OPS).await),
        Vec::<String>::new()
    );
    let tip = store.tip("refs/heads/main").unwrap();
    assert_eq!(
        finality::verify(&store.snapshot(tip).unwrap()).unwrap(),
        vec![],
        "verify is clean"
    );
}
