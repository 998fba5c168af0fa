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

/// The event reader on arbitrary lines: never panics, an accepted line is its own stored
/// bytes and reads back to the same identity, and its replay JSON equals the tree's.
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
    // The replay JSON is cut from the line; cutting the parsed tree gives the same bytes.
    let skip: &[&str] = if event.source_occurred_at.is_none() {
        &["recorded_at", "occurred_at"]
    } else {
        &["recorded_at"]
    };
    let mut by_tree = String::new();
    al::canonical::write_canonical_without(&mut by_tree, &event.record(), skip);
    assert_eq!(event.replay_json(), by_tree, "replay JSON cut from the line");
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
        keys,
        insecure_no_auth: false,
        policy: al::server::policy::Policy::parse(SERVE_POLICY, "fuzz").expect("policy"),
        reload: None,
        cron_secret: Some("cron-secret".into()),
        timeout_minutes: 15,
        approval_expiry: al::finality::ApprovalExpiry::default(),
        sweep_every: None,
        max_batch: 64,
        batch_linger: Duration::from_millis(1),
        client_timeout: Duration::from_secs(5),
        max_streams: al::server::api::stream::DEFAULT_MAX_STREAMS as usize,
        webhooks: None,
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

/// Where an entry of the `verify` target's tree is put: a real ledger or finality directory
/// (so that most inputs reach the checks of known paths), the root, or an unknown kind.
const VERIFY_PREFIXES: [&str; 8] = [
    "",
    "ledger/v1/events/2026/03/01/",
    "ledger/v1/import-bindings/",
    "ledger/v1/segments/2026/03/",
    "finality/v1/actions/",
    "ledger/v1/",
    "finality/v1/",
    "ledger/v1/shards/",
];
/// The entry modes a generated file gets: mostly regular files, then the other modes a Git
/// tree can hold (`100664` is the legacy group-writable mode old trees still carry).
const VERIFY_MODES: [&[u8]; 8] = [
    b"100644", b"100644", b"100644", b"100644", b"100755", b"120000", b"160000", b"100664",
];

/// A directory of the generated tree, its entries in insertion order.
#[derive(Default)]
struct GenDir {
    entries: Vec<(Vec<u8>, GenNode)>,
    /// Written in reverse of Git's order (a malformed tree).
    reversed: bool,
}

enum GenNode {
    File(&'static [u8], Vec<u8>),
    Dir(GenDir),
}

impl GenDir {
    fn insert(&mut self, dirs: &[&[u8]], name: Vec<u8>, mode: &'static [u8], content: Vec<u8>) {
        let Some((first, rest)) = dirs.split_first() else {
            // A second file of one name is dropped; a file beside a directory of its name is
            // kept, so that a tree can name one entry twice.
            let taken = self
                .entries
                .iter()
                .any(|(n, node)| *n == name && matches!(node, GenNode::File(..)));
            if !taken {
                self.entries.push((name, GenNode::File(mode, content)));
            }
            return;
        };
        let at = match self
            .entries
            .iter()
            .position(|(n, node)| n.as_slice() == *first && matches!(node, GenNode::Dir(_)))
        {
            Some(at) => at,
            None => {
                self.entries.push((first.to_vec(), GenNode::Dir(GenDir::default())));
                self.entries.len() - 1
            }
        };
        if let GenNode::Dir(d) = &mut self.entries[at].1 {
            d.insert(rest, name, mode, content);
        }
    }

    fn mark_reversed(&mut self, dirs: &[&[u8]]) {
        let Some((first, rest)) = dirs.split_first() else {
            self.reversed = true;
            return;
        };
        for (n, node) in &mut self.entries {
            if n.as_slice() == *first
                && let GenNode::Dir(d) = node
            {
                d.mark_reversed(rest);
            }
        }
    }
}

/// A raw Git object: the generated trees are written byte for byte, malformed ones included.
struct RawObject(gix::objs::Kind, Vec<u8>);

impl gix::objs::WriteTo for RawObject {
    fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&self.1)
    }
    fn kind(&self) -> gix::objs::Kind {
        self.0
    }
    fn size(&self) -> u64 {
        self.1.len() as u64
    }
}

/// Writes `dir` and everything below it; returns the tree's id.
fn write_gen_tree(repo: &gix::Repository, dir: &GenDir) -> gix::ObjectId {
    let mut rows: Vec<(Vec<u8>, &[u8], gix::ObjectId)> = Vec::new();
    for (name, node) in &dir.entries {
        let (mode, id): (&[u8], gix::ObjectId) = match node {
            GenNode::Dir(d) => (b"40000", write_gen_tree(repo, d)),
            // A submodule names a commit that is not in the repository, as in any superproject.
            GenNode::File(mode, content) if *mode == b"160000" => (
                mode,
                gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Commit, content)
                    .expect("hash"),
            ),
            GenNode::File(mode, content) => (
                mode,
                repo.write_blob(content).expect("write blob").detach(),
            ),
        };
        // Git orders a directory as if its name ended in '/'.
        let mut key = name.clone();
        if matches!(node, GenNode::Dir(_)) {
            key.push(b'/');
        }
        rows.push((key, mode, id));
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    if dir.reversed {
        rows.reverse();
    }
    let mut bytes = Vec::new();
    for (key, mode, id) in &rows {
        let name = key.strip_suffix(b"/").filter(|_| *mode == b"40000").unwrap_or(key);
        bytes.extend_from_slice(mode);
        bytes.push(b' ');
        bytes.extend_from_slice(name);
        bytes.push(0);
        bytes.extend_from_slice(id.as_bytes());
    }
    repo.write_object(RawObject(gix::objs::Kind::Tree, bytes))
        .expect("write tree")
        .detach()
}

/// Decodes the `verify` target's input into a tree, commits it into a new bare repository in a
/// temporary directory and returns the directory, the repository and the commit. Entries are
/// separated by 0xFF bytes (at most 64); an entry's first byte picks its directory prefix
/// (bits 0-2, [`VERIFY_PREFIXES`]), its mode (bits 3-5, [`VERIFY_MODES`]), whether its directory
/// is written out of Git's order (bit 6) and whether the rest of the path after its first `/`
/// stays one entry name, slashes and all (bit 7); the bytes up to the first NUL are its path
/// (empty components dropped, `.` and `..` kept as names), the rest its content.
pub fn verify_tree(
    data: &[u8],
) -> (tempfile::TempDir, al::store::Store, al::store::CommitId) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let path = tmp.path().join("state.git");
    let store = al::store::Store::open_or_init_bare(&path, "refs/heads/main").expect("init");
    let repo = gix::open_opts(&path, gix::open::Options::isolated()).expect("open");
    let mut root = GenDir::default();
    let mut reversed: Vec<Vec<Vec<u8>>> = Vec::new();
    for entry in data.split(|&b| b == 0xFF).take(64) {
        let Some((&kind, rest)) = entry.split_first() else {
            continue;
        };
        let (raw, content) = match rest.iter().position(|&b| b == 0) {
            Some(at) => (&rest[..at], &rest[at + 1..]),
            None => (rest, &[][..]),
        };
        let mut full = VERIFY_PREFIXES[usize::from(kind & 7)].as_bytes().to_vec();
        let prefix_parts = full.split(|&b| b == b'/').filter(|c| !c.is_empty()).count();
        full.extend_from_slice(raw);
        let mut parts: Vec<&[u8]> = full.split(|&b| b == b'/').filter(|c| !c.is_empty()).collect();
        if kind & 0x80 != 0 && parts.len() > prefix_parts + 1 {
            // The first part below the prefix stays a directory; everything after it is one name.
            let start = parts[prefix_parts + 1].as_ptr() as usize - full.as_ptr() as usize;
            let tail = &full[start..];
            parts.truncate(prefix_parts + 1);
            parts.push(tail);
        }
        if parts.is_empty() || parts.len() > 12 {
            continue;
        }
        let (name, dirs) = parts.split_last().expect("not empty");
        let mode = VERIFY_MODES[usize::from((kind >> 3) & 7)];
        root.insert(dirs, name.to_vec(), mode, content.to_vec());
        if kind & 0x40 != 0 {
            reversed.push(dirs.iter().map(|d| d.to_vec()).collect());
        }
    }
    for dirs in &reversed {
        let dirs: Vec<&[u8]> = dirs.iter().map(Vec::as_slice).collect();
        root.mark_reversed(&dirs);
    }
    let tree = write_gen_tree(&repo, &root);
    let commit = format!(
        "tree {tree}\nauthor fuzz <fuzz@invalid> 0 +0000\ncommitter fuzz <fuzz@invalid> 0 +0000\n\nfuzz\n"
    );
    let id = repo
        .write_object(RawObject(gix::objs::Kind::Commit, commit.into_bytes()))
        .expect("write commit")
        .detach();
    let commit = al::store::CommitId::from_hex(&id.to_hex().to_string()).expect("a commit id");
    (tmp, store, commit)
}

/// Whether a verification passed: `Some(findings)` for a report, `None` for a typed refusal to
/// read the tree. The one refusal a well-formed repository can get is a name that is not UTF-8
/// ([`al::store::Error::InvalidPath`]): it names the path and fails closed (the hook refuses
/// the push); anything else is a fault.
fn verify_answer(
    answer: Result<al::verify::Report, al::verify::Error>,
    what: &str,
) -> Option<Vec<al::verify::Finding>> {
    match answer {
        Ok(report) => {
            assert_eq!(
                report.is_clean(),
                report.findings.is_empty(),
                "a report is clean exactly when it has no findings"
            );
            Some(report.findings)
        }
        Err(al::verify::Error::Store(al::store::Error::InvalidPath { .. })) => None,
        Err(e) => panic!("{what} of a generated tree failed: {e}"),
    }
}

/// The whole-revision verify (and the push rule for a new ref) over a tree generated from the
/// input ([`verify_tree`]): never panics, and answers with findings, a clean report or a typed
/// refusal of a name it cannot read ([`verify_answer`]); both agree on whether the tree passes.
pub fn check_verify(data: &[u8]) {
    let (_tmp, store, commit) = verify_tree(data);
    let whole = verify_answer(al::verify::verify_revision(&store, commit), "verify");
    let range = verify_answer(
        al::verify::verify_range(&store, None, commit),
        "verify --range",
    );
    // The push of a new ref brings the whole tree: what verify refuses, the hook refuses.
    let passes = |a: &Option<Vec<al::verify::Finding>>| a.as_ref().is_some_and(Vec::is_empty);
    assert_eq!(
        passes(&whole),
        passes(&range),
        "verify and the push rule disagree on a new ref: {whole:#?} vs {range:#?}"
    );
}
