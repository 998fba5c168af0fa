//! Cross-module tests: the conformance vectors under `testdata/`, the canonical limits end to
//! end, property tests (`prop_*`), model-based tests (`model_*`) and the replay of the fuzzers'
//! regression inputs (`fuzz_regressions`).

pub(crate) mod boundary;
pub(crate) mod conformance;
pub(crate) mod fuzz_regressions;
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

/// Writes the spool of the reference vector `single_event` of `testdata/conformance/shards.json`
/// (one `review.item` event and its partition marker; not sealed) below `root`.
pub(crate) fn fixture_spool(root: &std::path::Path) {
    static FILES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    let files = FILES.get_or_init(|| {
        let vectors = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/conformance/shards.json");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(vectors).unwrap()).unwrap();
        let case = doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "single_event")
            .unwrap();
        case["expected"]["spool_files_before"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let text = |k: &str| f[k].as_str().unwrap().to_owned();
                (text("path"), text("bytes"))
            })
            .collect()
    });
    for (rel, bytes) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// Starts the `#[ignore]`d test `test` of module `module` (its `module_path!()`) as a child
/// process of this test binary, with `env = dir` and its stdout piped: the second process of a
/// two-process race. The child reads `dir` from `env` and prints its results on stdout.
pub(crate) fn spawn_child(
    module: &str,
    test: &str,
    env: &str,
    dir: &std::path::Path,
) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", &name_of(module, test)])
        .arg("--nocapture")
        .args(["--test-threads", "1"])
        .env(env, dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap()
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
