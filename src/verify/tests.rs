//! End-to-end tests of verification: whole revisions and push ranges over real repositories.

use super::*;
use crate::canonical::{self, Value};
use crate::publish::{self, Options};
use std::path::Path;

fn sig() -> store::Signature {
    store::Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_773_100_800,
    }
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Shard files of a finalize vector case, written below `root`.
fn vector_shards(root: &Path, case: &str) {
    let case = crate::tests::conformance_case("shards.json", case);
    crate::tests::write_vector_files(root, &case["expected"]["output_files"]);
}

/// The clean base: day1 job 001 (four sets) and a two-part set of 1,500 events.
struct Base {
    _dir: tempfile::TempDir,
    layout: Layout,
    store: Store,
    commit: CommitId,
    files: BTreeMap<String, String>,
}

fn base(layout: Layout) -> Base {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
    let mut options = Options::new(sig());
    options.layout = Some(layout);
    let day1 = crate::tests::day1_job("001");
    publish::publish(&store, &day1, &options).unwrap();
    let two = dir.path().join("two-part");
    vector_shards(&two, "events_1500_two_parts");
    let p = publish::publish(&store, &two, &options).unwrap();
    let commit = p.commit.unwrap();
    let snap = store.snapshot(Some(commit)).unwrap();
    let files = snap
        .list_files("")
        .unwrap()
        .into_iter()
        .map(|path| {
            let bytes = snap.read(&path, u64::MAX).unwrap().unwrap();
            (path, String::from_utf8(bytes).unwrap())
        })
        .collect();
    drop(snap);
    Base {
        _dir: dir,
        layout,
        store,
        commit,
        files,
    }
}

#[derive(Default)]
struct Edits {
    put: Vec<(String, String)>,
    remove: Vec<String>,
}

impl Base {
    fn shards(&self) -> Vec<&String> {
        self.files
            .keys()
            .filter(|p| shard::parse_path(p).is_some())
            .collect()
    }
    /// The first single-part shard (a day1 set).
    fn single(&self) -> &String {
        self.shards()
            .into_iter()
            .find(|p| p.ends_with("-of-000001.jsonl"))
            .unwrap()
    }
    fn part(&self, i: u32) -> &String {
        let suffix = format!("-part-{i:06}-of-000002.jsonl");
        self.shards()
            .into_iter()
            .find(|p| p.ends_with(&suffix))
            .unwrap()
    }
    fn lines(&self, path: &str) -> Vec<String> {
        self.files[path].lines().map(str::to_owned).collect()
    }
    fn event(&self, path: &str, line: usize) -> Event {
        Event::parse_line(&self.lines(path)[line], "test").unwrap()
    }
    fn identity(&self, path: &str) -> ShardIdentity {
        let (date, _) = shard::parse_path(path).unwrap();
        self.event(path, 0)
            .shard_identity(&date)
            .normalized()
            .unwrap()
    }
    fn binding_path(&self, kind: Kind, path: &str) -> String {
        let id = self.identity(path);
        match kind {
            Kind::ShardSet => binding::shard_set(self.layout, &id, &[]).0,
            Kind::Completion => binding::completion(self.layout, &id, "").0,
            Kind::ProducerRun => binding::producer_run(self.layout, &id).0,
            Kind::Event => binding::event(self.layout, &self.event(path, 0)).0,
        }
    }
    fn replace_in(&self, path: &str, from: &str, to: &str) -> Edits {
        let text = &self.files[path];
        assert!(text.contains(from), "{from} not in {path}");
        Edits {
            put: vec![(path.to_owned(), text.replacen(from, to, 1))],
            ..Edits::default()
        }
    }
    fn set_lines(&self, path: &str, lines: &[String]) -> Edits {
        Edits {
            put: vec![(path.to_owned(), format!("{}\n", lines.join("\n")))],
            ..Edits::default()
        }
    }
    fn remove(&self, path: String) -> Edits {
        Edits {
            remove: vec![path],
            ..Edits::default()
        }
    }
    fn add(&self, path: &str, text: &str) -> Edits {
        Edits {
            put: vec![(path.to_owned(), text.to_owned())],
            ..Edits::default()
        }
    }
    /// The file at `path` with the 64 hex digits of its digest field `field` all zero: a
    /// well-formed record whose digest no longer matches.
    fn zero_digest(&self, path: &str, field: &str) -> Edits {
        let text = &self.files[path];
        let key = format!("\"{field}\":\"");
        let at = text.find(&key).unwrap() + key.len();
        let forged = format!("{}{}{}", &text[..at], "0".repeat(64), &text[at + 64..]);
        self.add(path, &forged)
    }
}

/// Re-derives `semantic_sha256` of a tampered record the way a forger would, so that the
/// validator gets as far as the field rules.
fn resign(v: &mut Value) {
    let Value::Object(m) = v else { panic!() };
    let mut semantic = m.clone();
    for k in [
        "schema",
        "schema_version",
        "event_id",
        "event_key",
        "semantic_sha256",
        "occurred_at",
        "occurred_at_source",
        "recorded_at",
    ] {
        semantic.remove(k);
    }
    let occurrence = if m.get("occurred_at_source").and_then(Value::as_str) == Some("source") {
        Value::object([
            ("occurred_at", m["occurred_at"].clone()),
            ("occurred_at_source", Value::str("source")),
        ])
    } else {
        Value::object([("occurred_at_source", Value::str("generated"))])
    };
    let digest = Digest::of(canonical::to_canonical_unchecked(&Value::object([
        ("occurrence", occurrence),
        ("semantic", Value::Object(semantic)),
    ])));
    m.insert("semantic_sha256".into(), Value::str(digest.as_str()));
}

fn forge_line(b: &Base, path: &str, edit: impl Fn(&mut BTreeMap<String, Value>)) -> Edits {
    let mut lines = b.lines(path);
    let mut v = canonical::parse(&lines[0]).unwrap();
    if let Value::Object(m) = &mut v {
        edit(m);
    }
    resign(&mut v);
    lines[0] = canonical::to_canonical_unchecked(&v);
    b.set_lines(path, &lines)
}

/// All bindings of `shards` as the publisher writes them.
fn with_bindings(layout: Layout, shards: &[Shard], id: &ShardIdentity, skip_run: bool) -> Edits {
    let mut put: Vec<(String, String)> = shards
        .iter()
        .map(|s| (s.path.clone(), s.content.to_string()))
        .collect();
    let refs: Vec<&Shard> = shards.iter().collect();
    let (rp, rt) = binding::shard_set(layout, id, &refs);
    put.push(binding::completion(layout, id, &rt));
    put.push((rp, rt));
    if !skip_run {
        put.push(binding::producer_run(layout, id));
    }
    for s in shards {
        for e in &s.events {
            put.push(binding::event(layout, e));
        }
    }
    Edits {
        put,
        ..Edits::default()
    }
}

fn mutate(b: &Base, name: &str) -> Edits {
    let fake = "f".repeat(64);
    match name {
        "tamper_shard_byte" => b.replace_in(b.single(), "\"retryable\":", "\"retryable\": "),
        "non_canonical_line" => b.replace_in(b.single(), "{\"action\":{", "{\"action\": {"),
        "empty_shard" => b.add(b.single(), ""),
        "events_out_of_order" => {
            let mut l = b.lines(b.single());
            let last = l.len() - 1;
            l.swap(0, last);
            b.set_lines(b.single(), &l)
        }
        "duplicate_line" => {
            let mut l = b.lines(b.single());
            let first = l[0].clone();
            l.insert(1, first);
            b.set_lines(b.single(), &l)
        }
        "secret_in_attribute" => forge_line(b, b.single(), |m| {
            let mut attrs = match m.get("attributes") {
                Some(Value::Object(a)) => a.clone(),
                _ => Default::default(),
            };
            attrs.insert("model".into(), Value::str("alice@example.com"));
            m.insert("attributes".into(), Value::Object(attrs));
        }),
        "private_host_in_subject" => forge_line(b, b.single(), |m| {
            if let Some(Value::Object(s)) = m.get_mut("subject") {
                s.insert("subject_id".into(), Value::str("10.1.2.3"));
            }
        }),
        "shard_wrong_path" => {
            let from = b.single().clone();
            let to = from.replacen("/13550107154-", "/13550107155-", 1);
            assert_ne!(from, to);
            Edits {
                put: vec![(to, b.files[&from].clone())],
                remove: vec![from],
            }
        }
        "missing_part" => b.remove(b.part(2).clone()),
        "part_count_changed" => {
            let from = b.part(2).clone();
            Edits {
                put: vec![(
                    from.replace("-of-000002", "-of-000003"),
                    b.files[&from].clone(),
                )],
                remove: vec![from],
            }
        }
        "repacked_parts" => {
            let (p1, p2) = (b.part(1).clone(), b.part(2).clone());
            let mut l1 = b.lines(&p1);
            let mut l2 = b.lines(&p2);
            l2.insert(0, l1.pop().unwrap());
            let mut e = b.set_lines(&p1, &l1);
            e.put.extend(b.set_lines(&p2, &l2).put);
            e
        }
        "missing_reservation" => b.remove(b.binding_path(Kind::ShardSet, b.single())),
        "reservation_wrong_digest" => {
            b.zero_digest(&b.binding_path(Kind::ShardSet, b.single()), "replay_sha256")
        }
        "reservation_non_canonical" => {
            let path = b.binding_path(Kind::ShardSet, b.single());
            b.replace_in(&path, "{\"producer\":", "{ \"producer\":")
        }
        "missing_completion" => b.remove(b.binding_path(Kind::Completion, b.single())),
        "forged_completion" => b.zero_digest(
            &b.binding_path(Kind::Completion, b.single()),
            "reservation_sha256",
        ),
        "completion_non_canonical" => {
            let path = b.binding_path(Kind::Completion, b.single());
            b.replace_in(&path, "{\"producer\":", "{\"producer\" :")
        }
        "missing_producer_run" => b.remove(b.binding_path(Kind::ProducerRun, b.single())),
        "producer_run_other_date" => {
            let path = b.binding_path(Kind::ProducerRun, b.single());
            b.replace_in(
                &path,
                "\"partition_date\":\"2026-03-10\"",
                "\"partition_date\":\"2026-03-11\"",
            )
        }
        "missing_event_binding" => b.remove(b.binding_path(Kind::Event, b.single())),
        "event_binding_other_semantic" => {
            let path = b.binding_path(Kind::Event, b.single());
            let text = &b.files[&path];
            let at = text.find("\"semantic_sha256\":\"").unwrap() + 19;
            b.add(
                &path,
                &format!("{}{}{}", &text[..at], "0".repeat(64), &text[at + 64..]),
            )
        }
        "event_binding_other_parent" => {
            let path = b.binding_path(Kind::Event, b.single());
            let text = b.files[&path].clone();
            let forged = if text.contains("\"parent_event_id\":null") {
                text.replace(
                    "\"parent_event_id\":null",
                    &format!("\"parent_event_id\":\"{fake}\""),
                )
            } else {
                let at = text.find("\"parent_event_id\":\"").unwrap() + 19;
                format!("{}{}{}", &text[..at], fake, &text[at + 64..])
            };
            b.add(&path, &forged)
        }
        "event_binding_malformed" => b.add(&b.binding_path(Kind::Event, b.single()), "{}\n"),
        "orphan_event_binding" => {
            let d = Digest::parse(&fake).unwrap();
            b.add(
                &Kind::Event.path(b.layout, &d),
                &format!("{{\"event_id\":\"{fake}\",\"parent_event_id\":null,\"schema\":\"{}\",\"schema_version\":1,\"semantic_sha256\":\"{fake}\"}}\n", binding::EVENT_SCHEMA),
            )
        }
        "orphan_reservation" => b.add(
            &Kind::ShardSet.path(b.layout, &Digest::parse(&fake).unwrap()),
            "{}\n",
        ),
        "orphan_completion" => b.add(
            &Kind::Completion.path(b.layout, &Digest::parse(&fake).unwrap()),
            "{}\n",
        ),
        "orphan_producer_run" => b.add(
            &Kind::ProducerRun.path(b.layout, &Digest::parse(&fake).unwrap()),
            "{}\n",
        ),
        "unknown_file" => b.add("ledger/v1/notes.txt", "hello\n"),
        "unknown_binding_kind" => b.add(&format!("{}/other/{fake}.json", binding::ROOT), "{}\n"),
        "duplicate_event_across_sets" => {
            let mut id = b.identity(b.single());
            id.partition_date = "2026-03-11".into();
            let shards = shard::pack(&id, vec![b.event(b.single(), 0)]).unwrap();
            with_bindings(b.layout, &shards, &id, true)
        }
        "cross_set_causal_cycle" => {
            let case = crate::tests::conformance_case("import.json", "cycle_within_batch");
            let files = case["source_trees"]["cycle_both"].as_array().unwrap();
            let mut edits = Edits::default();
            for f in files {
                let path = f["path"].as_str().unwrap();
                let events = shard::parse_content(f["bytes"].as_str().unwrap(), path).unwrap();
                let (date, _) = shard::parse_path(path).unwrap();
                let id = events[0].shard_identity(&date).normalized().unwrap();
                let s = shard::pack(&id, events).unwrap();
                assert_eq!(s[0].path, path);
                edits
                    .put
                    .extend(with_bindings(b.layout, &s, &id, false).put);
            }
            edits
        }
        "binding_in_other_layout" => {
            let from = b.binding_path(Kind::Event, b.single());
            let (kind, digest, _) = binding::classify(&from).unwrap();
            let other = match b.layout {
                Layout::Reference => Layout::Fanout,
                Layout::Fanout => Layout::Reference,
            };
            Edits {
                put: vec![(kind.path(other, &digest), b.files[&from].clone())],
                remove: vec![from],
            }
        }
        "layout_record_damaged" => b.add(layout::RECORD_PATH, "{\"layout\":\"fanout\"}\n"),
        other => panic!("unknown mutation {other} in testdata/verify/cases.json"),
    }
}

/// Every broken ledger of testdata/verify/cases.json is reported with exactly its rules;
/// the base itself is clean.
#[test]
fn planted_defects_are_reported_by_rule_in_the_reference_layout() {
    planted_defects_are_reported_by_rule(Layout::Reference);
}

#[test]
fn planted_defects_are_reported_by_rule_in_the_fanout_layout() {
    planted_defects_are_reported_by_rule(Layout::Fanout);
}

fn planted_defects_are_reported_by_rule(layout: Layout) {
    let b = base(layout);
    let clean = verify_revision(&b.store, b.commit).unwrap();
    assert!(clean.is_clean(), "base: {:?}", clean.findings);
    assert_eq!(clean.shards, 6);
    let text = std::fs::read_to_string(manifest_dir().join("testdata/verify/cases.json")).unwrap();
    let doc = canonical::parse(&text).unwrap();
    let cases = doc.get("cases").and_then(Value::as_array).unwrap();
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for case in cases {
        let id = case.get("id").and_then(Value::as_str).unwrap();
        let edits = mutate(&b, case.get("mutation").and_then(Value::as_str).unwrap());
        let put: Vec<(String, Vec<u8>)> = edits
            .put
            .into_iter()
            .map(|(p, t)| (p, t.into_bytes()))
            .collect();
        let commit = b
            .store
            .write_commit_with(Some(b.commit), &put, &edits.remove, true, id, &sig())
            .unwrap();
        let report = verify_revision(&b.store, commit).unwrap();
        let got: BTreeSet<&str> = report.findings.iter().map(|f| f.rule.code()).collect();
        let want: BTreeSet<&str> = case
            .get(&format!("expect_{}", layout.name()))
            .or_else(|| case.get("expect"))
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if got != want {
            failures.push(format!("{id}: want {want:?}, got {:#?}", report.findings));
        }
        // A push of the same defect is refused too (unless it only removes a file, which
        // the range check reports as a deletion).
        let range = verify_range(&b.store, Some(b.commit), commit).unwrap();
        if range.is_clean() {
            failures.push(format!("{id}: the push range was accepted"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Commits `bytes` at `path` on top of `base` (create or replace).
fn commit_bytes(b: &Base, base: CommitId, path: &str, bytes: Vec<u8>) -> CommitId {
    b.store
        .write_commit_with(
            Some(base),
            &[(path.to_owned(), bytes)],
            &[],
            true,
            "edit",
            &sig(),
        )
        .unwrap()
}

/// A stored shard over the 2 MiB cap or with bytes that are not UTF-8 is reported under the
/// rule it breaks, in the words `publish` uses for such a source file (not "must end with a
/// newline"), by a whole-revision verify and by a push range; one broken shard is one
/// finding (its bindings are still accounted for).
#[test]
fn shards_over_the_cap_or_not_utf8_name_the_rule_they_break() {
    let b = base(Layout::Fanout);
    let parent = b.store.parents(b.commit).unwrap()[0];
    let path = b.part(1).clone();
    let text = b.files[&path].as_bytes().to_vec();
    let at = b.files[&path].find("\"event_type\":\"").unwrap() + 14;
    let splice = |bad: &[u8]| {
        let mut v = text[..at].to_vec();
        v.extend_from_slice(bad);
        v.extend_from_slice(&text[at..]);
        v
    };
    let padded = |len: usize| {
        let mut v = text.clone();
        v.resize(len, b' ');
        v
    };
    let repeated = {
        let mut v = Vec::new();
        while v.len() <= 3 * shard::MAX_BYTES {
            v.extend_from_slice(&text);
        }
        v
    };
    let not_utf8 = format!("invalid UTF-8 in action event shard file: {path}");
    let too_large = format!("action event shard file exceeds 2097152 byte limit: {path}");
    let members: Vec<(&str, Vec<u8>, &str)> = vec![
        ("a 0xFF byte", splice(b"\xff"), &not_utf8),
        ("a lone continuation byte", splice(b"\x80"), &not_utf8),
        ("a truncated two-byte sequence", splice(b"\xc3"), &not_utf8),
        ("an overlong '/'", splice(b"\xc0\xaf"), &not_utf8),
        ("an encoded surrogate", splice(b"\xed\xa0\x80"), &not_utf8),
        (
            "one byte over the cap",
            padded(shard::MAX_BYTES + 1),
            &too_large,
        ),
        ("its lines repeated past 6 MiB", repeated, &too_large),
    ];
    for (name, bytes, detail) in members {
        let commit = commit_bytes(&b, b.commit, &path, bytes);
        let want = vec![Finding {
            path: path.clone(),
            rule: Rule::ShardInvalid,
            detail: detail.to_owned(),
        }];
        let whole = verify_revision(&b.store, commit).unwrap();
        assert_eq!(whole.findings, want, "{name}: whole revision");
        // The same tree pushed onto the commit before the set was published.
        let range = verify_range(&b.store, Some(parent), commit).unwrap();
        assert_eq!(range.findings, want, "{name}: push range");
    }
    // At exactly the cap the size is not the problem (the padding is).
    let commit = commit_bytes(&b, b.commit, &path, padded(shard::MAX_BYTES));
    let whole = verify_revision(&b.store, commit).unwrap();
    assert_eq!(whole.findings.len(), 1);
    assert_eq!(whole.findings[0].rule, Rule::ShardInvalid);
    assert!(
        !whole.findings[0].detail.contains("byte limit"),
        "{:?}",
        whole.findings
    );
}

/// Runs git with `GIT_INDEX_FILE=index` in the bare repository `git_dir`; returns stdout.
fn git(git_dir: &Path, index: &Path, args: &[&str], stdin: &[u8]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .env("GIT_INDEX_FILE", index)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@invalid")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

/// A commit on `base` (with git plumbing, as a user would make it) in which everything at
/// or below `path` is replaced by one entry of `mode` holding `object`.
fn commit_with_mode(
    store: &Store,
    base: CommitId,
    path: &str,
    mode: &str,
    object: &str,
) -> CommitId {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let g = |args: &[&str], stdin: &[u8]| git(store.git_dir(), &index, args, stdin);
    g(&["read-tree", &base.to_hex()], b"");
    let below: String = g(&["ls-files", "-z", "--", path], b"")
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(|p| format!("0 {}\t{p}\n", "0".repeat(40)))
        .collect();
    g(&["update-index", "--index-info"], below.as_bytes());
    g(
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("{mode},{object},{path}"),
        ],
        b"",
    );
    let tree = g(&["write-tree"], b"");
    let commit = g(
        &["commit-tree", &tree, "-p", &base.to_hex(), "-m", "mode"],
        b"",
    );
    CommitId::from_hex(&commit).unwrap()
}

/// Entries that are not plain `100644` files (symbolic links, executables, submodules) are
/// `entry-mode` findings naming the path and the mode, at a shard, a binding, a finality
/// record and at directory positions, in a whole revision and in a push range; the same
/// bytes in a link or an executable are otherwise accepted (one finding).
#[test]
fn entries_that_are_not_plain_files_are_reported_with_their_mode() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
    let options = Options::new(sig());
    let jobs = manifest_dir().join("testdata/corpus/day1/shards");
    let first = publish::publish(
        &store,
        &jobs.join("001-openclaw-clawsweeper-review-r13550107154-a1"),
        &options,
    )
    .unwrap()
    .commit
    .unwrap();
    publish::publish(
        &store,
        &jobs.join("008-openclaw-clawsweeper-repair-worker-r13550308979-a1"),
        &options,
    )
    .unwrap();
    let action = crate::finality::NewAction {
        action_id: crate::finality::ActionId::parse("act_deploy").unwrap(),
        agent_id: "deploy-bot".into(),
        principal: "ci-key-7".into(),
        act: None,
        guard_decision_id: Some("gd_1".into()),
        verdict: crate::finality::Verdict::parse("allow").unwrap(),
        client_capabilities: vec![crate::finality::EXECUTION_CLAIMS.to_owned()],
        identity_verified: false,
        containment_ref: None,
        lifecycle: None,
        approval_wait_seconds: None,
        details: None,
    };
    let tip = crate::finality::create_action(
        &store,
        &crate::finality::Options::new(sig()),
        &action,
        crate::time::Timestamp::from_millis(1_773_100_800_000),
    )
    .unwrap()
    .commit
    .unwrap();
    assert!(verify_revision(&store, tip).unwrap().is_clean());
    let snap = store.snapshot(Some(tip)).unwrap();
    let all = snap.list_files("").unwrap();
    let added = store.diff(Some(first), tip, "").unwrap();
    let added: Vec<&str> = added.iter().map(Change::path).collect();
    let pick =
        |f: &dyn Fn(&str) -> bool| -> String { added.iter().find(|p| f(p)).unwrap().to_string() };
    let shard_path = pick(&|p| shard::parse_path(p).is_some());
    let binding_path = pick(&|p| binding::classify(p).is_some_and(|(k, _, _)| k == Kind::Event));
    let record = pick(&|p| p.ends_with("/action.json"));
    let producer_dir = shard_path.rsplit_once('/').unwrap().0.to_owned();
    let action_dir = record.rsplit_once('/').unwrap().0.to_owned();
    let fanout_dir = binding_path.rsplit_once('/').unwrap().0.to_owned();
    assert!(all.contains(&shard_path) && all.contains(&binding_path));
    let blob_of = |path: &str| snap.file_id(path).unwrap().unwrap().to_string();
    let link_target = BlobId::of(b"../../elsewhere").unwrap().to_string();
    // The link's blob must exist for git to write the tree.
    let index = dir.path().join("scratch-index");
    let written = git(
        store.git_dir(),
        &index,
        &["hash-object", "-w", "--stdin"],
        b"../../elsewhere",
    );
    assert_eq!(written, link_target);
    let commit_id = tip.to_hex();
    // (position, path, whether its bytes stay those verified)
    let positions: Vec<(&str, &str, bool)> = vec![
        ("shard", &shard_path, true),
        ("event binding", &binding_path, true),
        ("finality record", &record, true),
        ("producer directory", &producer_dir, false),
        ("binding fan-out directory", &fanout_dir, false),
        ("action directory", &action_dir, false),
        ("ledger root", "ledger/v1", false),
        ("ledger directory", "ledger", false),
        ("finality root", "finality/v1", false),
    ];
    for (position, path, same_bytes) in positions {
        for mode in ["120000", "100755", "160000"] {
            let object = match mode {
                "160000" => commit_id.clone(),
                _ if same_bytes => blob_of(path),
                _ => link_target.clone(),
            };
            let name = format!("{position} {path} as {mode}");
            let commit = commit_with_mode(&store, tip, path, mode, &object);
            let wanted = |report: &Report| {
                report.findings.iter().any(|f| {
                    f.path == path
                        && f.rule == Rule::EntryMode
                        && f.detail.contains(&format!("(mode {mode})"))
                })
            };
            let whole = verify_revision(&store, commit).unwrap();
            assert!(wanted(&whole), "{name}: whole {:#?}", whole.findings);
            if same_bytes && mode != "160000" {
                assert_eq!(whole.findings.len(), 1, "{name}: {:#?}", whole.findings);
            }
            // Pushed onto the tip, and as part of the publication that adds the path.
            for old in [tip, first] {
                let range = verify_range(&store, Some(old), commit).unwrap();
                assert!(wanted(&range), "{name}: range {:#?}", range.findings);
                if old == first && same_bytes && mode != "160000" {
                    assert_eq!(range.findings.len(), 1, "{name}: {:#?}", range.findings);
                }
            }
            let new_ref = verify_range(&store, None, commit).unwrap();
            assert!(wanted(&new_ref), "{name}: new ref {:#?}", new_ref.findings);
        }
    }
}

#[test]
fn names_fold_with_full_case_folding_and_nfc() {
    let same = [
        ("Review", "review"),
        ("Straße", "STRASSE"),
        ("straße", "strasse"),
        ("\u{1e9e}", "ss"),
        ("\u{c9}", "E\u{301}"),
        ("\u{e9}", "E\u{301}"),
        ("\u{fb01}le", "FILE"),
        ("\u{17f}tep", "Step"),
        ("\u{212a}elvin", "kelvin"),
        ("\u{212b}", "\u{e5}"),
        ("όσος", "ΌΣΟΣ"),
        ("όσοσ", "όσος"),
    ];
    for (a, b) in same {
        assert_eq!(fold_key(a), fold_key(b), "{a:?} {b:?}");
        assert_eq!(collisions("d/", &[a, b], None).len(), 1, "{a:?} {b:?}");
    }
    let apart = [
        ("review", "reviews"),
        ("Straße", "Strase"),
        ("\u{c9}", "E"),
        ("\u{130}", "i"),
        ("\u{131}", "I"),
        ("a-b", "a_b"),
        ("kelvin", "kelvin."),
    ];
    for (a, b) in apart {
        assert_ne!(fold_key(a), fold_key(b), "{a:?} {b:?}");
        assert!(collisions("d/", &[a, b], None).is_empty(), "{a:?} {b:?}");
    }
    // Three names that fold alike are three pairs; each pair is named once, by the first.
    let three = collisions("d/", &["b", "B", "\u{ff22}"], None);
    assert_eq!(three.len(), 1, "fullwidth B is not B: {three:?}");
    let three = collisions("d/", &["READ", "Read", "read"], None);
    let paths: Vec<&str> = three.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["d/READ", "d/READ", "d/Read"]);
    assert!(three[0].detail.contains("d/Read is the same name"));
}

/// Sibling names that a case-insensitive file system folds into one are reported as
/// warnings (each pair once), which leave the report's findings alone, in a whole revision
/// and in the push that brings them; near misses are not reported.
#[test]
fn case_insensitive_collisions_are_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
    let job = crate::tests::day1_job("001");
    let base = publish::publish(&store, &job, &Options::new(sig()))
        .unwrap()
        .commit
        .unwrap();
    let put = |base: CommitId, names: &[&str]| {
        let files: Vec<(String, Vec<u8>)> = names
            .iter()
            .map(|n| (format!("ledger/v1/notes/{n}"), b"x\n".to_vec()))
            .collect();
        store
            .write_commit_with(Some(base), &files, &[], false, "notes", &sig())
            .unwrap()
    };
    let pairs = [
        ("STRASSE.txt", "Straße.txt"),
        ("E\u{301}.txt", "\u{c9}.txt"),
        ("FILE.txt", "\u{fb01}le.txt"),
        ("kelvin.txt", "\u{212a}elvin.txt"),
        ("Docs/a.txt", "docs/b.txt"),
    ];
    let near = [
        "Strase.txt",
        "E.txt",
        "\u{130}.txt",
        "i.txt",
        "kelvins.txt",
        "doc/c.txt",
    ];
    let mut names: Vec<&str> = pairs.iter().flat_map(|(a, b)| [*a, *b]).collect();
    names.extend(near);
    let commit = put(base, &names);
    let key = |r: &Report| -> BTreeSet<(String, String)> {
        r.warnings
            .iter()
            .map(|w| {
                assert_eq!(w.rule, Rule::CaseCollision);
                let other = w.detail.split(' ').nth(1).unwrap().to_owned();
                (w.path.clone(), other)
            })
            .collect()
    };
    let want: BTreeSet<(String, String)> = pairs
        .iter()
        .map(|(a, b)| {
            let top = |n: &str| format!("ledger/v1/notes/{}", n.split('/').next().unwrap());
            (top(a), top(b))
        })
        .collect();
    let whole = verify_revision(&store, commit).unwrap();
    assert_eq!(key(&whole), want, "{:#?}", whole.warnings);
    assert_eq!(whole.warnings.len(), pairs.len());
    assert!(
        whole.findings.iter().all(|f| f.rule == Rule::UnknownPath),
        "{:#?}",
        whole.findings
    );
    let range = verify_range(&store, Some(base), commit).unwrap();
    assert_eq!(key(&range), want, "{:#?}", range.warnings);
    // Only the pairs a push brings: another near miss adds none, a new twin adds one.
    let later = put(commit, &["Kelvins.txt.bak"]);
    assert!(
        verify_range(&store, Some(commit), later)
            .unwrap()
            .warnings
            .is_empty()
    );
    let twin = put(commit, &["KELVIN.txt"]);
    let report = verify_range(&store, Some(commit), twin).unwrap();
    assert_eq!(report.warnings.len(), 2, "{:#?}", report.warnings);
    assert!(
        report
            .warnings
            .iter()
            .all(|w| w.path.ends_with("/KELVIN.txt")),
        "{:#?}",
        report.warnings
    );
    // The clean base has none.
    let clean = verify_revision(&store, base).unwrap();
    assert!(clean.is_clean() && clean.warnings.is_empty());
}

#[test]
fn range_accepts_a_valid_publication_and_refuses_history_rewrites() {
    let b = base(Layout::Fanout);
    let first = b.store.parents(b.commit).unwrap()[0];
    let report = verify_range(&b.store, Some(first), b.commit).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    let report = verify_range(&b.store, None, b.commit).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    // Rewinding is not a descendant.
    let report = verify_range(&b.store, Some(b.commit), first).unwrap();
    assert_eq!(report.findings[0].rule, Rule::NotDescendant);
    assert_eq!(b.store.resolve("main~1").unwrap(), first);
    assert_eq!(b.store.resolve("HEAD").unwrap(), b.commit);
    assert_eq!(b.store.resolve(&b.commit.to_hex()).unwrap(), b.commit);
    assert!(b.store.resolve("nope").is_err());
}

#[test]
fn progress_counts_every_shard_and_event_checked() {
    use crate::progress::{Recording, Seen};
    let b = base(Layout::Fanout);
    let options = super::Options::default();
    let seen = Recording::default();
    let report = verify_revision_observed(&b.store, b.commit, &options, &seen).unwrap();
    assert!(report.is_clean(), "{:?}", report.findings);
    assert!(report.shards > 1 && report.events > report.shards);
    let calls = seen.seen();
    assert_eq!(calls[0], Seen::Begin("shards", Some(report.shards as u64)));
    assert_eq!(calls.last(), Some(&Seen::End));
    assert_eq!(
        seen.advanced(),
        (report.shards as u64, report.events as u64)
    );
    // The range of the whole history touches every set: the same figures.
    let seen = Recording::default();
    let range = verify_range_observed(&b.store, None, b.commit, &options, &seen).unwrap();
    assert!(range.is_clean(), "{:?}", range.findings);
    assert_eq!((range.shards, range.events), (report.shards, report.events));
    let calls = seen.seen();
    assert_eq!(calls[0], Seen::Begin("shards", Some(range.shards as u64)));
    assert_eq!(calls.last(), Some(&Seen::End));
    assert_eq!(seen.advanced(), (range.shards as u64, range.events as u64));
    // A push of the second publication only: its set, not the first one's.
    let first = b.store.parents(b.commit).unwrap()[0];
    let seen = Recording::default();
    let push = verify_range_observed(&b.store, Some(first), b.commit, &options, &seen).unwrap();
    assert!(push.is_clean(), "{:?}", push.findings);
    assert_eq!(push.shards, 2, "the two-part set");
    assert_eq!(seen.seen()[0], Seen::Begin("shards", Some(2)));
    assert_eq!(seen.advanced(), (2, push.events as u64));
}

/// `log` presents no event of a shard that `verify` refuses for its set or its entry: a shard
/// moved to a path its events' identity does not give (`shard-path`), a set without its
/// completion marker (`completion-missing`), a shard stored as an executable or a link
/// (`entry-mode`). Each is a finding of `verify` and stops the log at that shard with the same
/// rule, none of its events handed out; the untouched ledger logs whole.
#[test]
fn log_refuses_what_verify_refuses_for_a_set_or_an_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
    let options = Options::new(sig());
    let jobs = manifest_dir().join("testdata/corpus/day1/shards");
    let tip = publish::publish(
        &store,
        &jobs.join("008-openclaw-clawsweeper-repair-worker-r13550308979-a1"),
        &options,
    )
    .unwrap()
    .commit
    .unwrap();
    let log_of = |commit: CommitId| {
        let snap = store.snapshot(Some(commit)).unwrap();
        let view = crate::view::View::new(&snap);
        let mut seen: Vec<String> = Vec::new();
        let result = crate::log::stream(&view, &crate::log::Filter::default(), &mut |e| {
            seen.push(e.path.to_owned());
            std::ops::ControlFlow::Continue(())
        });
        (result, seen)
    };
    let (clean, all_seen) = log_of(tip);
    assert_eq!(clean.unwrap().events, 63);
    let snap = store.snapshot(Some(tip)).unwrap();
    let files = snap.list_files("").unwrap();
    let shard_path = files
        .iter()
        .find(|p| shard::parse_path(p).is_some())
        .unwrap()
        .clone();
    let bytes = snap.read(&shard_path, u64::MAX).unwrap().unwrap();
    let completion = files
        .iter()
        .find(|p| binding::classify(p).is_some_and(|(k, _, _)| k == Kind::Completion))
        .unwrap()
        .clone();
    // The shard of the set whose marker is removed: its name carries the set's digest.
    let digest = completion.rsplit('/').next().unwrap()[..12].to_owned();
    let unmarked_path = files
        .iter()
        .find(|p| shard::parse_path(p).is_some() && p.contains(&format!("-{digest}-")))
        .unwrap()
        .clone();
    // The same bytes one day later: a path its events' identity does not give.
    let (date, _) = shard::parse_path(&shard_path).unwrap();
    let moved_path = shard_path.replace(&date.replace('-', "/"), "2026/03/11");
    assert_ne!(moved_path, shard_path);
    let no_files: &[(String, Vec<u8>)] = &[];
    let moved = store
        .write_commit_with(
            Some(tip),
            &[(moved_path.clone(), bytes.clone())],
            std::slice::from_ref(&shard_path),
            true,
            "moved",
            &sig(),
        )
        .unwrap();
    let unmarked = store
        .write_commit_with(
            Some(tip),
            no_files,
            std::slice::from_ref(&completion),
            true,
            "no completion",
            &sig(),
        )
        .unwrap();
    let blob = snap.file_id(&shard_path).unwrap().unwrap().to_string();
    let executable = commit_with_mode(&store, tip, &shard_path, "100755", &blob);
    let linked = commit_with_mode(&store, tip, &shard_path, "120000", &blob);
    for (name, commit, rule, path) in [
        ("moved", moved, Rule::ShardPath, &moved_path),
        (
            "unmarked",
            unmarked,
            Rule::CompletionMissing,
            &unmarked_path,
        ),
        ("executable", executable, Rule::EntryMode, &shard_path),
        ("link", linked, Rule::EntryMode, &shard_path),
    ] {
        let report = verify_revision(&store, commit).unwrap();
        assert!(
            report.findings.iter().any(|f| f.rule == rule),
            "{name}: verify {:#?}",
            report.findings
        );
        let (result, seen) = log_of(commit);
        match result {
            Err(crate::log::Error::Shard {
                path: at,
                rule: got,
                detail,
            }) => {
                assert_eq!((&at, got), (path, rule), "{name}: {detail}");
                assert!(!seen.contains(path), "{name}: events of {path} handed out");
            }
            other => panic!("{name}: log {other:?}"),
        }
    }
    assert!(all_seen.contains(&shard_path));
}
