//! Backward compatibility: every repository an earlier release wrote must still import, verify
//! clean and read the same.
//!
//! Each directory of `testdata/compat/` is a frozen fixture written by
//! `scripts/make-compat-fixture.sh` with one release (its `README.md` says which): the state
//! repository as a `git fast-import` stream (`repo.fi`), the ids its refs must get (`refs.txt`),
//! and what that release printed for `log --json` (`log.jsonl`) and for `action show --json` of
//! each action (`actions.jsonl`, with the clock pinned at [`SHOW_AT`]). This build must give the
//! same refs, a clean `verify`, and the same bytes, both as written and after `maintain` has
//! migrated it to the current finality layout. A fixture is never regenerated: when one
//! stops passing, the change broke a format that users' repositories hold.

use crate::cli::{Env, run};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The clock the fixtures' `action show` ran with (`elapsed_ms` of a pending outcome).
const SHOW_AT: &str = "2026-03-11T00:00:00Z";

fn fixtures() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/compat");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn git(repo: &Path, args: &[&str], stdin: Option<&Path>) -> String {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(repo).args(args);
    if let Some(file) = stdin {
        cmd.stdin(Stdio::from(std::fs::File::open(file).unwrap()));
    }
    let out = cmd.output().expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs the CLI in-process; returns its exit code, stdout and stderr.
fn cli(env: &Env, args: &[&str]) -> (i32, String, String) {
    let argv = std::iter::once("action-ledger")
        .chain(args.iter().copied())
        .map(str::to_owned);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(argv, env, &mut std::io::empty(), &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The first line where two texts differ, for a failure message that fits on a screen.
fn first_difference(got: &str, want: &str) -> String {
    let line = got
        .lines()
        .zip(want.lines())
        .position(|(g, w)| g != w)
        .unwrap_or(got.lines().count().min(want.lines().count()));
    format!(
        "line {}: got {:.300}\n          want {:.300}",
        line + 1,
        got.lines().nth(line).unwrap_or("<end>"),
        want.lines().nth(line).unwrap_or("<end>")
    )
}

#[test]
fn earlier_releases_repositories_verify_and_read_the_same() {
    let fixtures = fixtures();
    assert!(
        !fixtures.is_empty(),
        "no fixture under testdata/compat: the test would prove nothing"
    );
    for dir in fixtures {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let read = |file: &str| {
            std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{name}/{file}: {e}"))
        };
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("state.git");
        let repo_arg = repo.to_str().unwrap();
        Command::new("git")
            .args([
                "init",
                "--bare",
                "--quiet",
                "--initial-branch=main",
                repo_arg,
            ])
            .status()
            .unwrap();
        git(
            &repo,
            &["fast-import", "--quiet"],
            Some(&dir.join("repo.fi")),
        );
        assert_eq!(
            git(
                &repo,
                &["for-each-ref", "--format=%(objectname) %(refname)"],
                None
            ),
            read("refs.txt"),
            "{name}: the imported refs differ from refs.txt"
        );

        // Read as written, then again after `maintain` moved the finality records to the
        // current layout: the migration changes where records live, never what they say.
        for stage in ["as written", "after maintain"] {
            if stage == "after maintain" {
                let (code, out, err) =
                    cli(&Env::new(), &["maintain", "--repo", repo_arg, "--json"]);
                assert_eq!(code, 0, "{name}: maintain failed: {err}");
                let done: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(done["layout"], "hex2x2", "{name}: {out}");
                let (_, again, _) = cli(&Env::new(), &["maintain", "--repo", repo_arg, "--json"]);
                let again: serde_json::Value = serde_json::from_str(&again).unwrap();
                assert_eq!(
                    again["migrated"], false,
                    "{name}: a second maintain migrated again"
                );
            }
            let env = Env::new();
            let (code, out, err) = cli(&env, &["verify", "--repo", repo_arg]);
            assert_eq!(code, 0, "{name} {stage}: verify is not clean:\n{out}{err}");

            let (code, log, err) = cli(&env, &["-q", "log", "--repo", repo_arg, "--json"]);
            assert_eq!(code, 0, "{name} {stage}: log failed: {err}");
            let want = read("log.jsonl");
            assert!(
                log == want,
                "{name} {stage}: log --json differs from log.jsonl at {}",
                first_difference(&log, &want)
            );

            let env = Env::from([("ACTION_LEDGER_NOW".to_owned(), SHOW_AT.to_owned())]);
            let want = read("actions.jsonl");
            assert!(!want.is_empty(), "{name}: actions.jsonl is empty");
            for line in want.lines() {
                let shown: serde_json::Value = serde_json::from_str(line).unwrap();
                let id = shown["action"]["action_id"].as_str().unwrap();
                let (code, out, err) = cli(
                    &env,
                    &["-q", "action", "show", "--repo", repo_arg, "--json", id],
                );
                assert_eq!(code, 0, "{name} {stage}: action show {id} failed: {err}");
                assert_eq!(
                    out.trim_end(),
                    line,
                    "{name} {stage}: action show {id} differs"
                );
            }
        }
    }
}
