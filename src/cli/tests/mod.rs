//! The command line's in-process tests, by subject:
//!
//! - `ledger`: writing and reading the ledger (`record`, `seal`, `publish` with its privacy
//!   profiles, empty roots and `--expected-*` flags, `verify`, `log`, `compact`, `project`,
//!   the ledger ref and `--range`);
//! - `finality`: the finality commands on a local state repository (`action …`, `run`,
//!   `maintain`, an action present twice, killed writers' debris);
//! - `hooks`: `hooks install` and `hooks admit`;
//! - `remote`: `--remote` on the commands that write the state repository.
//!
//! This module holds the helpers they share (a temporary root, the in-process runners and
//! their environments, the day1 fixture jobs) and the tests of usage errors, completions and
//! the man page, and `serve`'s start-up refusals. Snapshots are in `snapshots/`, named after
//! the module path.

use super::*;
use crate::store::Signature;
use crate::tests::fixture_spool;
use crate::writer::files;
use std::path::Path;

mod finality;
mod hooks;
mod ledger;
mod remote;

/// A temporary directory by its absolute path (links resolved, the form the CLI prints and
/// `[TMP]` stands for), removed when dropped.
struct TempRoot {
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for TempRoot {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

fn temp_root() -> TempRoot {
    let dir = tempfile::tempdir().unwrap();
    TempRoot {
        path: files::absolute_root(dir.path()).unwrap(),
        _dir: dir,
    }
}

/// Runs the CLI in-process with `env` and `stdin`, `[TMP]` in `args` standing for `tmp`;
/// returns exit code, stdout and stderr as one text with the temporary directory and commit
/// ids filtered.
fn run_in(tmp: &Path, env: &Env, stdin: &str, args: &[&str]) -> String {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("action-ledger".to_owned()).chain(
        args.iter()
            .map(|a| a.replace("[TMP]", &tmp.display().to_string())),
    );
    let code = run(argv, env, &mut stdin.as_bytes(), &mut out, &mut err);
    let text = format!(
        "exit: {code}\n--- stdout\n{}--- stderr\n{}",
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap()
    );
    let text = text.replace(&tmp.display().to_string(), "[TMP]");
    let re = regex::Regex::new(r"\b[0-9a-f]{40}\b").unwrap();
    re.replace_all(&text, "[COMMIT]").into_owned()
}

/// Runs the CLI in-process; returns exit code, stdout and stderr as one text with the
/// temporary directory and commit ids filtered.
fn run_cli(tmp: &Path, args: &[&str]) -> String {
    let env = Env::from([("SOURCE_DATE_EPOCH".to_owned(), "1768480496".to_owned())]);
    run_in(tmp, &env, "", args)
}

/// The writer environment of a CI job (fixed clock, forced recording, one partition date,
/// the `GITHUB_*` producer variables); shared with the boundary tests.
pub(crate) fn writer_env() -> Env {
    [
        ("SOURCE_DATE_EPOCH", "1768480496"),
        ("CLAWSWEEPER_ACTION_LEDGER_FORCE", "1"),
        ("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE", "2026-01-15"),
        ("GITHUB_REPOSITORY", "openclaw/clawsweeper"),
        ("GITHUB_WORKFLOW", "ClawSweeper Review"),
        ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
        ("GITHUB_JOB", "review"),
        ("GITHUB_RUN_ID", "2234567890"),
        ("GITHUB_RUN_ATTEMPT", "1"),
        ("GITHUB_ACTION", "run-review"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// `action create FLAGS… --id ID --guard-decision DECISION`: the words every test that needs
/// an action starts from, before any further flags and the `--` of a command.
fn action_create<'a>(flags: &[&'a str], id: &'a str, decision: &'a str) -> Vec<&'a str> {
    let mut args = vec!["action", "create"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--id", id, "--guard-decision", decision]);
    args
}

/// Runs the CLI in-process with the finality clock and identity in the environment; the
/// output is filtered as in [`run_cli`].
fn run_finality(tmp: &Path, now: &str, args: &[&str]) -> String {
    let env = Env::from([
        ("SOURCE_DATE_EPOCH".to_owned(), "1772366400".to_owned()),
        ("ACTION_LEDGER_NOW".to_owned(), now.to_owned()),
        ("ACTION_LEDGER_AGENT_ID".to_owned(), "deploy-bot".to_owned()),
        ("ACTION_LEDGER_PRINCIPAL".to_owned(), "ci-key-7".to_owned()),
    ]);
    run_in(tmp, &env, "", args)
}

const T0: &str = "2026-03-01T12:00:00.000Z";
const T1: &str = "2026-03-01T12:00:01.500Z";
const LATER: &str = "2026-03-01T13:00:00.000Z";

/// Copies day1 job 008 (two shards, 63 events) below `root`.
fn fixture_job(root: &Path) {
    copy_day1_job(
        "008-openclaw-clawsweeper-repair-worker-r13550308979-a1",
        root,
    );
}

/// Copies the shard root of the day1 job `job` into `root` (merging with what is there).
fn copy_day1_job(job: &str, root: &Path) {
    let job = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/corpus/day1/shards")
        .join(job);
    for e in walkdir::WalkDir::new(&job) {
        let e = e.unwrap();
        let to = root.join(e.path().strip_prefix(&job).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&to).unwrap();
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// A test signature.
fn tester() -> Signature {
    Signature {
        name: "tester".into(),
        email: "tester@invalid".into(),
        time_seconds: 1_768_480_496,
    }
}

#[test]
fn refusals_and_usage_errors() {
    let tmp = &temp_root();
    fixture_spool(&tmp.join("spool"));
    let event = walkdir::WalkDir::new(tmp.join("spool"))
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .find(|p| p.extension().is_some_and(|x| x == "json") && !p.to_string_lossy().contains("/_"))
        .unwrap();
    let text = std::fs::read_to_string(&event).unwrap();
    std::fs::write(&event, text.replacen("{\"action\":{", "{\"action\": {", 1)).unwrap();
    insta::assert_snapshot!("seal_non_canonical", run_cli(tmp, &["seal", "[TMP]/spool"]));
    insta::assert_snapshot!(
        "publish_missing_source",
        run_cli(
            tmp,
            &["publish", "--repo", "[TMP]/state.git", "[TMP]/nowhere"]
        )
    );
    insta::assert_snapshot!("usage_no_sources", run_cli(tmp, &["publish"]));
    insta::assert_snapshot!(
        "usage_bad_layout",
        run_cli(tmp, &["publish", "--layout", "flat", "x"])
    );
}

#[test]
fn serve_refuses_to_start_on_bad_settings() {
    let tmp = &temp_root();
    let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    std::fs::write(tmp.join("keys"), format!("bot {digest}\n")).unwrap();
    std::fs::write(tmp.join("bad-keys"), format!("bot {digest} admin\n")).unwrap();
    std::fs::write(
        tmp.join("bad-policy.json"),
        r#"{"rules":[{"verdict":"maybe"}]}"#,
    )
    .unwrap();
    let serve = |env: &[(&str, &str)], args: &[&str]| {
        let env: Env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let argv = ["action-ledger", "serve", "--repo", "[TMP]/state.git"]
            .iter()
            .chain(args)
            .map(|a| a.replace("[TMP]", &tmp.display().to_string()));
        let code = run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
        let text = format!(
            "$ serve {}\nexit: {code}\n{}{}",
            args.join(" "),
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap()
        );
        text.replace(&tmp.display().to_string(), "[TMP]")
    };
    let key = [("ACTION_LEDGER_API_KEY", "k1")];
    let cases = [
        serve(&[], &["--listen", "127.0.0.1:0"]),
        serve(&[], &["--listen", "0.0.0.0:0", "--insecure-no-auth"]),
        serve(&[], &["--api-keys", "[TMP]/keys", "--insecure-no-auth"]),
        serve(&[], &["--api-keys", "[TMP]/bad-keys"]),
        serve(&[], &["--api-keys", "[TMP]/missing-keys"]),
        serve(&key, &[]),
        serve(
            &[],
            &[
                "--api-keys",
                "[TMP]/keys",
                "--policy",
                "[TMP]/bad-policy.json",
            ],
        ),
        serve(&[], &["--api-keys", "[TMP]/keys", "--listen", "nowhere"]),
        serve(&[], &["--api-keys", "[TMP]/keys", "--timeout-minutes", "0"]),
        serve(
            &[],
            &["--remote-ref", "refs/heads/x", "--api-keys", "[TMP]/keys"],
        ),
    ];
    insta::assert_snapshot!("serve_refusals", cases.join("\n"));
    assert!(
        !tmp.join("state.git").exists(),
        "nothing is created on a refusal"
    );
}

/// `completions` for each shell and `man`, generated from the clap definitions.
#[test]
fn completions_and_man_page() {
    let tmp = &temp_root();
    let head = |text: String, n: usize| text.lines().take(n).collect::<Vec<_>>().join("\n");
    insta::assert_snapshot!(
        "completions_bash_head",
        head(run_cli(tmp, &["completions", "bash"]), 14)
    );
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let out = run_cli(tmp, &["completions", shell]);
        assert!(out.starts_with("exit: 0\n--- stdout\n"), "{shell}: {out}");
        for word in ["action-ledger", "publish", "completions", "--remote"] {
            assert!(out.contains(word), "{shell} completion lacks {word}");
        }
    }
    let bad = run_cli(tmp, &["completions", "tcsh"]);
    assert!(bad.starts_with("exit: 2"), "{bad}");
    insta::assert_snapshot!("man_header", head(run_cli(tmp, &["man"]), 12));
    let man = run_cli(tmp, &["man"]);
    for word in [".SH SUBCOMMANDS", "publish", "verify", "Exit codes"] {
        assert!(man.contains(word), "the man page lacks {word}");
    }
}
