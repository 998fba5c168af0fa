//! Reloading the keys and the policy: swapped together, bad files kept out, revoked streams ended.

use super::*;

/// A keys file line for `key` (clear, as a client sends it).
fn key_line(principal: &str, key: &str, operator: bool) -> String {
    format!(
        "{principal} {}{}\n",
        hex::encode(auth::sha256(key.as_bytes())),
        if operator { " operator" } else { "" }
    )
}

/// A server whose reload source reads `keys` and `policy.json` in its own directory, as the CLI's
/// does, and whose diagnostic log lines are kept.
struct Reloading {
    s: Server,
    keys_file: PathBuf,
    policy_file: PathBuf,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

fn reloading_server() -> Reloading {
    let dir = tempfile::tempdir().unwrap();
    let (keys_file, policy_file) = (dir.path().join("keys"), dir.path().join("policy.json"));
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true),
    )
    .unwrap();
    std::fs::write(&policy_file, POLICY).unwrap();
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (kf, pf, logged) = (keys_file.clone(), policy_file.clone(), lines.clone());
    let s = server_custom(
        Some("cron-secret"),
        |_| Target::Local,
        move |settings| {
            settings.reload = Some(Arc::new(move || {
                let keys = auth::Keys::load(&kf).map_err(|e| e.to_string())?;
                let policy = Policy::load(&pf).map_err(|e| e.to_string())?;
                Ok(crate::server::Access { keys, policy })
            }));
            // The diagnostics, not the access lines.
            settings.log = Arc::new(move |line: &str| {
                if !line.starts_with('{') {
                    logged.lock().unwrap().push(line.to_owned());
                }
            });
        },
    );
    Reloading {
        s,
        keys_file,
        policy_file,
        lines,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_swaps_the_keys_and_the_policy_together() {
    const NEW: &str = "k-new-key-material";
    let Reloading {
        s,
        keys_file,
        policy_file,
        lines,
        _dir,
    } = reloading_server();
    let app = s.app.clone().unwrap();
    assert_eq!(s.get("/api/actions/act_x", NEW).await.status, 401);
    let g = s.post("/api/guard", BOT, guard_body("x", ACT, "")).await;
    assert_eq!((g.status, g.str("decision")), (200, "allow"));
    let before = app.access();

    // A new key, a removed key, a new policy: all in force after one reload.
    std::fs::write(
        &keys_file,
        key_line("newbie", NEW, false) + &key_line("ops", OPS, true),
    )
    .unwrap();
    std::fs::write(
        &policy_file,
        r#"{"default":"block","rules":[{"id":"ok","action_type":"ok","verdict":"allow"}]}"#,
    )
    .unwrap();
    app.reload().unwrap();
    assert_eq!(s.get("/api/actions/act_x", NEW).await.status, 404);
    assert_eq!(s.get("/api/actions/act_x", BOT).await.status, 401);
    let g = s.post("/api/guard", NEW, guard_body("x", ACT, "")).await;
    assert_eq!((g.status, g.str("decision")), (200, "block"));
    // What a request took before the reload is unchanged: it finishes with that version.
    assert!(before.keys.authenticate(BOT.as_bytes()).is_some());
    assert_eq!(before.policy, Policy::parse(POLICY, "test").unwrap());
    assert_eq!(
        lines.lock().unwrap().as_slice(),
        ["reloaded: 2 API key(s), 1 policy rule(s)"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_keys_or_policy_file_keeps_the_old_ones_and_says_why() {
    const NEW: &str = "k-new-key-material";
    let Reloading {
        s,
        keys_file,
        policy_file,
        lines,
        _dir,
    } = reloading_server();
    let app = s.app.clone().unwrap();
    let in_force = || app.access();
    let original = in_force();

    // A bad keys file (with a good new policy): neither changes.
    std::fs::write(
        &keys_file,
        key_line("newbie", NEW, false)
            + &format!("pasted {} {NEW}\n", hex::encode(auth::sha256(b"x"))),
    )
    .unwrap();
    std::fs::write(&policy_file, r#"{"default":"block"}"#).unwrap();
    let e = app.reload().unwrap_err();
    assert!(matches!(e, crate::server::ReloadError::Source(_)), "{e}");
    // A good keys file with a bad policy: neither changes either.
    std::fs::write(&keys_file, key_line("newbie", NEW, false)).unwrap();
    std::fs::write(&policy_file, r#"{"default":"maybe"}"#).unwrap();
    app.reload().unwrap_err();
    // No key left: refused, everyone would be locked out.
    std::fs::write(&keys_file, "# nobody\n").unwrap();
    std::fs::write(&policy_file, POLICY).unwrap();
    let e = app.reload().unwrap_err();
    assert!(matches!(e, crate::server::ReloadError::NoKeys), "{e}");
    // A missing file.
    std::fs::remove_file(&keys_file).unwrap();
    app.reload().unwrap_err();

    assert!(Arc::ptr_eq(&original, &in_force()));
    assert_eq!(s.get("/api/actions/act_x", BOT).await.status, 404);
    assert_eq!(s.get("/api/actions/act_x", NEW).await.status, 401);
    let g = s
        .post("/api/guard", BOT, guard_body("deploy", ACT, ""))
        .await;
    assert_eq!(g.str("decision"), "require_approval", "{:?}", g.body);

    let lines = lines.lock().unwrap().clone();
    let keys_name = keys_file.display().to_string();
    let policy_name = policy_file.display().to_string();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    for line in &lines {
        assert!(
            line.starts_with("reload refused, the previous keys and policy stay in force: "),
            "{line}"
        );
        // Never the key material, even when it was pasted in clear.
        assert!(!line.contains(NEW), "{line}");
    }
    assert!(
        lines[0].contains(&format!("{keys_name}:2: the third column")),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(&policy_name) && lines[1].contains("default"),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].contains("no API key would be left"),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].contains(&format!("cannot read the API keys file {keys_name}")),
        "{}",
        lines[3]
    );
}

/// A reload applies to open streams: a stream whose key the reload removed, or whose key lost
/// its `operator` mark, ends before the next event; one whose key is unchanged goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_ends_the_streams_of_revoked_keys() {
    const OPS2: &str = "k-second-operator";
    let Reloading {
        s, keys_file, _dir, ..
    } = reloading_server();
    let app = s.app.clone().unwrap();
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true) + &key_line("ops2", OPS2, true),
    )
    .unwrap();
    app.reload().unwrap();
    let (_, kept) = subscribe(&s, OPS).await;
    let (_, revoked) = subscribe(&s, OPS2).await;
    let (mut kept, mut revoked) = (kept.unwrap(), revoked.unwrap());
    let first = recorded(&s, "build", ACT, "").await;
    for sub in [&mut kept, &mut revoked] {
        assert_eq!(
            field(&sub.expect().await.1, "action_id"),
            Some(first.as_str())
        );
    }
    // `ops2` removed.
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true),
    )
    .unwrap();
    app.reload().unwrap();
    let second = recorded(&s, "build", ACT, "").await;
    assert_eq!(
        field(&kept.expect().await.1, "action_id"),
        Some(second.as_str())
    );
    assert_eq!(revoked.next(std::time::Duration::from_secs(5)).await, None);
    // `ops2` back as an operator, then without the mark: the stream it opened as an operator
    // ends instead of showing another principal's action.
    let both = key_line("bot", BOT, false) + &key_line("ops", OPS, true);
    std::fs::write(&keys_file, both + &key_line("ops2", OPS2, true)).unwrap();
    app.reload().unwrap();
    let (_, demoted) = subscribe(&s, OPS2).await;
    let mut demoted = demoted.unwrap();
    std::fs::write(
        &keys_file,
        key_line("bot", BOT, false) + &key_line("ops", OPS, true) + &key_line("ops2", OPS2, false),
    )
    .unwrap();
    app.reload().unwrap();
    recorded(&s, "build", ACT, "").await;
    assert_eq!(demoted.next(std::time::Duration::from_secs(5)).await, None);
}
