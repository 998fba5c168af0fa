//! The state repository under `serve`: shared with the CLI, a remote unreachable or rewritten.

use super::*;
use crate::finality::ClaimRequest;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_server_see_each_other() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let store = Store::open(&s.repo).unwrap();
    let options = finality::Options::new(store::Signature {
        name: "cli".into(),
        email: "cli@invalid".into(),
        time_seconds: T0 / 1000,
    });
    // The CLI claims what the server created...
    let request = ClaimRequest {
        attempt_id: A1.into(),
        agent_id: Some("agent-1".into()),
        principal: Some("bot".into()),
        act: Some(canonical::parse(ACT).unwrap()),
        verified: false,
    };
    finality::claim(&store, &options, &id, &request, Timestamp::from_millis(T0)).unwrap();
    // ...and the server refuses a second claim and shows the CLI's.
    assert_eq!(
        s.patch(format!("/api/actions/{id}"), BOT, &claim_body(A2, ACT))
            .await
            .status,
        409
    );
    let g = s.get(format!("/api/actions/{id}"), BOT).await;
    assert_eq!(g.str_at("action", "execution_attempt_id"), Some(A1));
    // The server reports; the CLI reads it.
    assert_eq!(
        s.post(
            format!("/api/actions/{id}/outcome"),
            BOT,
            r#"{"status":"completed"}"#
        )
        .await
        .status,
        200
    );
    let st = finality::show(&store, "refs/heads/main", &id).unwrap();
    assert_eq!(
        st.outcome.unwrap().status,
        finality::OutcomeStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_remote_is_unavailable_never_a_conflict() {
    let s = server_with(None, |dir| Target::Remote {
        url: dir.join("no-such-remote.git").display().to_string(),
        ref_name: "refs/heads/main".into(),
        timeout: None,
    });
    let g = s
        .patch("/api/actions/act_x", BOT, &claim_body(A1, ACT))
        .await;
    assert_eq!(
        (g.status, g.str("code")),
        (503, "EXECUTION_CLAIM_UNAVAILABLE")
    );
    let g = s.guard(BOT, "build", ACT, "").await;
    assert_eq!(g.status, 503);
    assert_eq!(s.get("/api/actions/act_x", BOT).await.status, 503);
}

/// A remote whose history was rewritten under a running server (a force push of an unrelated
/// commit) is not built on: every write answers 503 "retry later" without the commits or the
/// remote's path, and the server's log names both commits; the remote keeps the rewritten tip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_remote_is_not_built_on_by_serve() {
    let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let lines = log.clone();
    let remote_dir: Arc<std::sync::Mutex<Option<std::path::PathBuf>>> = Arc::default();
    let seen = remote_dir.clone();
    let s = server_custom(
        None,
        |dir| {
            let remote = dir.join("remote.git");
            Store::open_or_init_bare(&remote, "refs/heads/main").unwrap();
            *seen.lock().unwrap() = Some(remote.clone());
            Target::Remote {
                url: remote.display().to_string(),
                ref_name: "refs/heads/main".into(),
                timeout: Some(std::time::Duration::from_secs(30)),
            }
        },
        move |st| {
            st.log = Arc::new(move |l: &str| lines.lock().unwrap().push(l.to_owned()));
        },
    );
    let remote = remote_dir.lock().unwrap().clone().unwrap();
    let created = s.guard(BOT, "build", ACT, "").await;
    assert_eq!(created.status, 200, "{:?}", created.body);
    let store = Store::open(&remote).unwrap();
    let confirmed = store.tip("refs/heads/main").unwrap().unwrap();
    let unrelated = store
        .write_commit(
            None,
            &[("other".to_owned(), b"x\n".to_vec())],
            "force-pushed\n",
            &crate::store::Signature {
                name: "someone".into(),
                email: "someone@invalid".into(),
                time_seconds: 1_700_000_000,
            },
        )
        .unwrap();
    store
        .update_ref("refs/heads/main", Some(confirmed), unrelated, "force")
        .unwrap();
    let answers = [
        s.guard(BOT, "build", ACT, "").await,
        s.post("/api/actions", BOT, guard_body("deploy", ACT, ""))
            .await,
    ];
    for g in answers {
        let text = crate::canonical::to_canonical_unchecked(&g.body);
        assert_eq!(g.status, 503, "{text}");
        assert_eq!(g.str("code"), "LEDGER_UNAVAILABLE", "{text}");
        for hidden in [confirmed.to_string(), unrelated.to_string()] {
            assert!(!text.contains(&hidden), "{text}");
        }
        assert!(!text.contains(&remote.display().to_string()), "{text}");
    }
    assert_eq!(store.tip("refs/heads/main").unwrap(), Some(unrelated));
    let logged = log.lock().unwrap().join("\n");
    assert!(
        logged.contains("was rewritten")
            && logged.contains(&confirmed.to_string())
            && logged.contains(&unrelated.to_string()),
        "{logged}"
    );
}

/// A remote that is down (a path that is no repository, an https URL with a token that cannot
/// be reached) is described to clients as an unavailable store to retry later, on every route
/// that reads or writes it (reads, creation, guard with record, claim, close, outcome, cron
/// sweep): never its URL or path, its credential, or git's lines, and never as invalid input.
/// Those go to the server's log, redacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_remote_is_described_without_the_servers_internals() {
    for remote in [
        "PATH/no-such-remote.git",
        "https://x-access-token:ghs_SECRET43@127.0.0.1:9/o/r.git",
    ] {
        let log: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let lines = log.clone();
        let s = server_custom(
            Some("cron-secret"),
            |dir| Target::Remote {
                url: remote.replace("PATH", &dir.display().to_string()),
                ref_name: "refs/heads/main".into(),
                timeout: Some(std::time::Duration::from_secs(10)),
            },
            move |st| {
                st.log = Arc::new(move |l: &str| lines.lock().unwrap().push(l.to_owned()));
            },
        );
        let cron = [("authorization", "Bearer cron-secret")];
        let answers = [
            s.get("/api/actions/act_x", BOT).await,
            s.get("/api/actions/act_x/outcome", BOT).await,
            s.post("/api/actions", BOT, guard_body("build", ACT, ""))
                .await,
            s.guard(BOT, "build", ACT, "").await,
            s.patch("/api/actions/act_x", BOT, claim_body(A1, ACT))
                .await,
            s.patch("/api/actions/act_x", BOT, r#"{"status":"cancelled"}"#)
                .await,
            s.post(
                "/api/actions/act_x/outcome",
                BOT,
                r#"{"status":"completed"}"#,
            )
            .await,
            call_raw(&s, "GET", "/api/cron/outcome-sweep", &cron, vec![]).await,
            s.get("/healthz", BOT).await,
        ];
        for g in answers {
            let text = crate::canonical::to_canonical_unchecked(&g.body);
            assert!(
                g.status == 503 || (g.status == 500 && text.contains("Sweep failed")),
                "{remote}: {} {text}",
                g.status
            );
            for leak in [
                "SECRET43",
                "no-such-remote",
                "127.0.0.1",
                "x-access-token",
                "ls-remote",
                "fatal",
                "git ",
                "/tmp",
                "invalid remote",
                "INVALID_INPUT",
            ] {
                assert!(!text.contains(leak), "{remote}: {leak} in {text}");
            }
            assert!(text.contains("retry later"), "{remote}: {text}");
        }
        let logged = log.lock().unwrap().join("\n");
        assert!(
            logged.contains("ls-remote"),
            "{remote}: the log says why: {logged}"
        );
        assert!(!logged.contains("SECRET43"), "{logged}");
    }
}
