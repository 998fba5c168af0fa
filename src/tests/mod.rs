//! Cross-module tests: the conformance vectors under `testdata/`, the repositories of earlier
//! releases (`compat`), the canonical limits end to end, property tests (`prop_*`),
//! model-based tests (`model_*`) and the replay of the fuzzers' regression inputs
//! (`fuzz_regressions`).

pub(crate) mod boundary;
pub(crate) mod compat;
pub(crate) mod conformance;
pub(crate) mod crabfleet;
pub(crate) mod fuzz_regressions;
pub(crate) mod live_delivery;
pub(crate) mod model_finality;
pub(crate) mod model_ledger;
pub(crate) mod prop_identity;
pub(crate) mod prop_privacy;
pub(crate) mod prop_shard;
pub(crate) mod prop_support;

/// The test harness's name of test `test` in the module whose `module_path!()` is `module`
/// (the crate name dropped), for a test that launches another test of this binary with
/// `--ignored --exact`.
pub(crate) fn name_of(module: &str, test: &str) -> String {
    let (_crate, path) = module
        .split_once("::")
        .expect("a test module is inside the crate");
    format!("{path}::{test}")
}

/// Every file below `root`, by its `/`-separated path relative to `root`, with its bytes: a
/// snapshot of a spool or an output directory to compare before and after an operation.
pub(crate) fn files_under(root: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e.path().strip_prefix(root).unwrap();
            let rel = rel
                .to_string_lossy()
                .replace(std::path::MAIN_SEPARATOR, "/");
            (rel, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// Copies the files under `src` that `keep` accepts (by relative path and bytes) to the same
/// relative paths under `dst`.
pub(crate) fn copy_files(
    src: &std::path::Path,
    dst: &std::path::Path,
    keep: impl Fn(&str, &[u8]) -> bool,
) {
    for (rel, bytes) in files_under(src) {
        if keep(&rel, &bytes) {
            let p = dst.join(&rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        }
    }
}

/// The shard root of the day1 job whose directory name starts with `prefix` (`"001"`, …).
pub(crate) fn day1_job(prefix: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1/shards");
    let name = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with(prefix))
        .unwrap();
    dir.join(name)
}

/// A new bare repository `s.git` in a temporary directory (kept while the directory lives),
/// its HEAD `refs/heads/main`.
pub(crate) fn scratch_store() -> (tempfile::TempDir, crate::store::Store) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        crate::store::Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main")
            .unwrap();
    (dir, store)
}

/// Case `id` of the reference's vector file `testdata/conformance/<file>`.
pub(crate) fn conformance_case(file: &str, id: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/conformance")
        .join(file);
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = doc["cases"].as_array_mut().unwrap();
    let at = cases.iter().position(|c| c["id"] == id).unwrap();
    cases.swap_remove(at)
}

/// Writes a vector's list of `{"path", "bytes"}` files below `root`.
pub(crate) fn write_vector_files(root: &std::path::Path, files: &serde_json::Value) {
    for f in files.as_array().unwrap() {
        let p = root.join(f["path"].as_str().unwrap());
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, f["bytes"].as_str().unwrap()).unwrap();
    }
}

/// Writes the spool of the reference vector `single_event` of `testdata/conformance/shards.json`
/// (one `review.item` event and its partition marker; not sealed) below `root`.
pub(crate) fn fixture_spool(root: &std::path::Path) {
    static CASE: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    let case = CASE.get_or_init(|| conformance_case("shards.json", "single_event"));
    write_vector_files(root, &case["expected"]["spool_files_before"]);
}

/// Starts the `#[ignore]`d test `test` of module `module` (its `module_path!()`) as a child
/// process of this test binary, with `env = dir` and its stdout piped: the second process of a
/// two-process race. The child reads `dir` from `env` and prints its results on stdout.
fn spawn_child(module: &str, test: &str, env: &str, dir: &std::path::Path) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", &name_of(module, test)])
        .arg("--nocapture")
        .args(["--test-threads", "1"])
        .env(env, dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs a two-process race: starts the `#[ignore]`d test `test` of `module` twice (as
/// [`spawn_child`] does), lets both go at once by creating `dir/go`, and returns what each
/// printed on stdout once both exited successfully.
pub(crate) fn race_two(module: &str, test: &str, env: &str, dir: &std::path::Path) -> Vec<String> {
    let children = [
        spawn_child(module, test, env, dir),
        spawn_child(module, test, env, dir),
    ];
    std::fs::write(dir.join("go"), "").unwrap();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap()
        })
        .collect()
}

/// The pid of a process that has exited (and been reaped): for tests of what a dead writer
/// left behind. The pid may be reused later; tests use it at once.
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Fails the test with every entry of `found` (one per line, `what` naming them) unless there is
/// none: for tests that sweep a corpus and report all of its failures at once.
#[track_caller]
pub(crate) fn assert_none(what: &str, found: &[String]) {
    assert!(
        found.is_empty(),
        "{} {what}:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The environment of a GitHub Actions job step with recording forced on (the job, run and
/// partition date of the writer tests).
pub(crate) fn job_env() -> crate::writer::record::Environment {
    [
        ("CLAWSWEEPER_ACTION_LEDGER_FORCE", "1"),
        ("GITHUB_REPOSITORY", "openclaw/clawsweeper"),
        ("GITHUB_WORKFLOW", "ClawSweeper Review"),
        ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
        ("GITHUB_JOB", "review"),
        ("GITHUB_RUN_ID", "1234567890"),
        ("GITHUB_RUN_ATTEMPT", "1"),
        ("GITHUB_ACTION", "run-review"),
        ("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE", "2026-01-15"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Records one `review.item` event whose `learning.signal` is `signal` into a spool at `root`
/// and seals it, both under the reference profile (which lets a strict hit through), writing
/// its shards below `root/out` as well; returns the event's id. A source the strict readers
/// must refuse, whether they read the spool or its shards.
pub(crate) fn sealed_spool_with_learning_signal(
    root: &std::path::Path,
    signal: &str,
) -> crate::identity::Digest {
    sealed_spool_with_learning_signals(root, &[signal]).remove(0)
}

/// [`sealed_spool_with_learning_signal`] with one event per signal (item 1, 2, …, in that
/// order), all in one producer run; returns their ids in order.
pub(crate) fn sealed_spool_with_learning_signals(
    root: &std::path::Path,
    signals: &[&str],
) -> Vec<crate::identity::Digest> {
    use crate::canonical::Value;
    use crate::privacy::Profile;
    use crate::writer::{files, record, seal, spool};
    let env = job_env();
    let now = crate::time::Timestamp::from_millis(0);
    let reference = record::Options {
        privacy: Profile::Reference,
    };
    let mut ids = Vec::new();
    for (i, &signal) in signals.iter().enumerate() {
        let mut input = crate::canonical::parse(&format!(
            r#"{{"phase":"review.item","status":"started","component":"review-runner","identity":{{"item":{}}},"subject":{{"repository":"openclaw/openclaw","kind":"issue","number":1}},"retryable":true,"mutation":false}}"#,
            i + 1
        ))
        .unwrap();
        let Value::Object(m) = &mut input else {
            unreachable!()
        };
        m.insert(
            "learning".into(),
            Value::object([
                ("category", Value::str("c")),
                ("signal", Value::str(signal)),
            ]),
        );
        let input = record::phase_action_input(&input).unwrap();
        let event = record::record_action(root, &input, &env, now, &reference)
            .unwrap()
            .unwrap();
        ids.push(event.event_id);
    }
    std::fs::create_dir_all(root.join("out")).unwrap();
    let out = files::Root::open(&root.join("out"), "output").unwrap();
    let options = seal::Options {
        privacy: Profile::Reference,
        ..Default::default()
    };
    seal::seal(
        &spool::Spool::open(root).unwrap(),
        Some(&out),
        now,
        &options,
    )
    .unwrap();
    ids
}
