// The checks of each fuzz target, shared with the replay of the regression inputs in the crate's
// tests (src/tests/fuzz_regressions.rs). The includer names the crate `al` first
// (`use action_ledger as al;` in a fuzz target, `use crate as al;` in the crate).

/// The strict canonical JSON parser on arbitrary text: never panics, and what it accepts
/// re-encodes to canonical text that parses back to the same value.
pub fn check_canonical(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = al::canonical::parse_input(text);
    let Ok(value) = al::canonical::parse(text) else {
        return;
    };
    // The size limit is the encoder's to enforce; a refusal there is an answer, not a fault.
    let Ok(encoded) = al::canonical::to_canonical(&value) else {
        return;
    };
    let again = al::canonical::parse_canonical(&encoded)
        .unwrap_or_else(|e| panic!("canonical output refused by parse_canonical: {e}"));
    assert_eq!(again, value, "canonical round trip changed the value");
    if al::canonical::parse_canonical(text).is_ok() {
        assert_eq!(encoded, text, "parse_canonical accepted non-canonical text");
    }
}

/// The event reader on arbitrary lines: never panics, and an accepted line is its own
/// stored bytes and reads back to the same identity.
pub fn check_event_line(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(event) = al::event::Event::parse_line(text, "fuzz") else {
        return;
    };
    assert_eq!(event.json, text, "an accepted event line is its stored bytes");
    let again =
        al::event::Event::parse_line(&event.json, "fuzz").expect("an accepted line reads again");
    assert_eq!(again.event_id, event.event_id);
    assert_eq!(again.semantic_sha256, event.semantic_sha256);
    let _ = event.replay_json();
}

/// Shard parsing: the first line is taken as a shard path, the rest as shard content. Never
/// panics; accepted content is exactly the concatenation of its events' lines.
pub fn check_shard(data: &[u8]) {
    use al::ledger::shard;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (path, content) = text.split_once('\n').unwrap_or((text, ""));
    let _ = shard::parse_path(path);
    let _ = shard::bounded_path_segment(path, 64);
    let _ = shard::safe_path_segment(path);
    let Ok(events) = shard::parse_content(content, "fuzz.jsonl") else {
        return;
    };
    assert_eq!(
        shard::content(&events),
        content,
        "accepted shard content is its events' lines"
    );
    let _ = shard::check_file_events(&events, "fuzz.jsonl");
}

fn spool_rel(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let parts: Vec<&str> = text
        .split('/')
        .filter(|c| !c.is_empty() && *c != "." && *c != ".." && !c.contains('\0'))
        .collect();
    (!parts.is_empty() && parts.len() <= 4).then(|| parts.join("/"))
}

/// Spool reading and seal planning over a directory generated from the input: entries
/// separated by 0xFF bytes; an entry's first byte picks its kind (file, directory, symbolic
/// link), the bytes up to the first NUL are its path below the spool directory (`..` and empty
/// components dropped), the rest its content (for a link, its target). Reading and planning
/// answer with events or an error and never panic; every event read sits at the path its
/// identity derives.
pub fn check_spool(data: &[u8]) {
    use al::writer::{seal, spool};
    let tmp = tempfile::tempdir().expect("temporary directory");
    let root = tmp.path().join("root");
    let base = root.join(spool::SPOOL_DIR);
    std::fs::create_dir_all(&base).expect("spool directory");
    for entry in data.split(|&b| b == 0xFF).take(32) {
        let Some((&kind, rest)) = entry.split_first() else {
            continue;
        };
        let (name, content) = match rest.iter().position(|&b| b == 0) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        let Some(rel) = spool_rel(name) else {
            continue;
        };
        let path = base.join(&rel);
        if let Some(parent) = path.parent()
            && std::fs::create_dir_all(parent).is_err()
        {
            continue;
        }
        let _ = match kind % 3 {
            0 => std::fs::write(&path, content),
            1 => std::fs::create_dir_all(&path),
            _ => std::os::unix::fs::symlink(&*String::from_utf8_lossy(content), &path),
        };
    }
    let Ok(spool) = spool::Spool::open(&root) else {
        return;
    };
    if let Ok(events) = spool.read_all() {
        for e in &events {
            let path = spool::event_relative_path(e);
            assert!(
                path.ends_with(&format!("/{}.json", e.event_id.as_str())),
                "event {} read from {path}",
                e.event_id.as_str()
            );
        }
    }
    let _ = spool.event_names();
    if let Ok(runs) = seal::plan(&spool) {
        for run in runs {
            let _ = run.shards();
        }
    }
    let _ = seal::sealed_runs(&spool);
}

/// The keys and policy of the server the `serve` target and its replay run.
pub const SERVE_KEYS: [(&str, &str, bool); 2] = [("k-bot", "bot", false), ("k-ops", "ops", true)];
/// The guard policy of that server.
pub const SERVE_POLICY: &str = r#"{"default":"allow","rules":[
    {"id":"deploys","action_type":"deploy","verdict":"require_approval","reason":"deploys need an operator"},
    {"id":"no-sql","act_kind":"sql","verdict":"block","reason":"no SQL"}]}"#;

/// The settings of the fuzzed server on `repo` (fixed clock).
pub fn serve_settings(repo: std::path::PathBuf) -> al::server::Settings {
    use std::sync::Arc;
    use std::time::Duration;
    const T0: i64 = 1_772_366_400_000;
    let mut keys = al::server::auth::Keys::new();
    for (key, principal, operator) in SERVE_KEYS {
        keys.add_clear(key, principal, operator).expect("key");
    }
    let mut options = al::finality::Options::new(al::store::Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: T0 / 1000,
    });
    options.max_attempts = 3;
    options.lock_wait = Duration::from_millis(200);
    al::server::Settings {
        repo,
        options,
        target: al::finality::batch::Target::Local,
        keys,
        insecure_no_auth: false,
        policy: al::server::policy::Policy::parse(SERVE_POLICY, "fuzz").expect("policy"),
        cron_secret: Some("cron-secret".into()),
        timeout_minutes: 15,
        sweep_every: None,
        max_batch: 64,
        batch_linger: Duration::from_millis(1),
        client_timeout: Duration::from_secs(5),
        clock: Arc::new(|| al::time::Timestamp::from_millis(T0)),
        log: Arc::new(|_| {}),
    }
}

/// What the server sent back on one connection: HTTP/1.x responses only (hyper answers an
/// HTTP/1.0 request in HTTP/1.0), none of them a 500.
pub fn check_serve_answers(response: &[u8]) {
    let mut rest = response;
    while !rest.is_empty() {
        assert!(
            rest.starts_with(b"HTTP/1.1 ") || rest.starts_with(b"HTTP/1.0 "),
            "every answer is an HTTP response: {:?}",
            String::from_utf8_lossy(response)
        );
        assert!(
            !rest[9..].starts_with(b"500"),
            "no request is an internal error: {:?}",
            String::from_utf8_lossy(response)
        );
        let Some(head_end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
            break;
        };
        let head = String::from_utf8_lossy(&rest[..head_end]).to_ascii_lowercase();
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        rest = rest.get(head_end + 4 + len..).unwrap_or(&[]);
    }
}
