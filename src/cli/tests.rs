use super::*;
use crate::store::{Signature, Store};
use crate::tests::fixture_spool;
use crate::writer::files;
use std::path::Path;

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

#[test]
fn seal_then_publish_then_replay() {
    let tmp = &temp_root();
    fixture_spool(&tmp.join("spool"));
    insta::assert_snapshot!(
        "publish_unsealed",
        run_cli(
            tmp,
            &["publish", "--repo", "[TMP]/state.git", "[TMP]/spool"]
        )
    );
    insta::assert_snapshot!(
        "seal",
        run_cli(tmp, &["seal", "--output", "[TMP]/out", "[TMP]/spool"])
    );
    insta::assert_snapshot!(
        "seal_again_json",
        run_cli(tmp, &["seal", "--json", "[TMP]/spool"])
    );
    insta::assert_snapshot!(
        "publish",
        run_cli(
            tmp,
            &["publish", "--repo", "[TMP]/state.git", "[TMP]/spool"]
        )
    );
    insta::assert_snapshot!(
        "publish_replay_json",
        run_cli(
            tmp,
            &[
                "publish",
                "--json",
                "--repo",
                "[TMP]/state.git",
                "[TMP]/out"
            ]
        )
    );
    // The repository is fanout (the default for a new one): another layout is refused and
    // changes nothing; naming its own layout is fine.
    insta::assert_snapshot!(
        "publish_layout_mismatch",
        run_cli(
            tmp,
            &[
                "publish",
                "--layout",
                "reference",
                "--repo",
                "[TMP]/state.git",
                "[TMP]/spool"
            ]
        )
    );
    insta::assert_snapshot!(
        "publish_layout_same",
        run_cli(
            tmp,
            &[
                "publish",
                "--layout",
                "fanout",
                "--repo",
                "[TMP]/state.git",
                "[TMP]/spool"
            ]
        )
    );
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

/// Runs the CLI in-process with the writer environment of a CI job and `stdin`; the output
/// is filtered as in [`run_cli`].
fn run_writer(tmp: &Path, stdin: &str, args: &[&str]) -> String {
    let env = writer_env();
    run_in(tmp, &env, stdin, args)
}

/// A value the reference accepts and the strict profile refuses: a (synthetic) Slack
/// incoming-webhook URL in `subject.subjectId`.
const WEBHOOK_EVENT: &str = r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":7},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":7,"subjectId":"https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX"},"retryable":true,"mutation":false}"#;

/// The strict profile end to end: record and seal refuse and write nothing; with
/// `--privacy reference` the event is recorded and sealed; publish refuses it (exit 1, ref
/// unchanged) unless given `--privacy reference`; verify then reports it as a
/// `privacy-strict` finding, and not under `--privacy reference`.
#[test]
fn strict_privacy_refusals_and_findings() {
    let tmp = &temp_root();
    std::fs::create_dir_all(tmp.join("spool")).unwrap();
    fixture_spool(&tmp.join("clean"));
    let code = |text: &str| text.lines().next().unwrap().to_owned();
    assert_eq!(
        code(&run_cli(tmp, &["seal", "[TMP]/clean"])),
        "exit: 0",
        "the clean fixture seals"
    );
    assert_eq!(
        code(&run_cli(
            tmp,
            &["publish", "--repo", "[TMP]/state.git", "[TMP]/clean"]
        )),
        "exit: 0"
    );
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap();

    insta::assert_snapshot!(
        "record_strict_refused",
        run_writer(tmp, WEBHOOK_EVENT, &["record", "--spool", "[TMP]/spool"])
    );
    assert_eq!(std::fs::read_dir(tmp.join("spool")).unwrap().count(), 0);
    let recorded = run_writer(
        tmp,
        WEBHOOK_EVENT,
        &["record", "--privacy", "reference", "--spool", "[TMP]/spool"],
    );
    assert_eq!(code(&recorded), "exit: 0", "{recorded}");

    insta::assert_snapshot!(
        "seal_strict_refused",
        run_cli(tmp, &["seal", "[TMP]/spool"])
    );
    assert!(
        !walkdir::WalkDir::new(tmp.join("spool"))
            .into_iter()
            .any(|e| e
                .unwrap()
                .path()
                .to_string_lossy()
                .contains("_finalizations/")),
        "a refused seal wrote a seal record"
    );
    let sealed = run_cli(tmp, &["seal", "--privacy", "reference", "[TMP]/spool"]);
    assert_eq!(code(&sealed), "exit: 0", "{sealed}");

    insta::assert_snapshot!(
        "publish_strict_refused",
        run_cli(
            tmp,
            &["publish", "--repo", "[TMP]/state.git", "[TMP]/spool"]
        )
    );
    assert_eq!(store.tip("refs/heads/main").unwrap(), tip, "the ref moved");
    let published = run_cli(
        tmp,
        &[
            "publish",
            "--privacy",
            "reference",
            "--repo",
            "[TMP]/state.git",
            "[TMP]/spool",
        ],
    );
    assert_eq!(code(&published), "exit: 0", "{published}");

    insta::assert_snapshot!(
        "verify_strict_finding",
        run_cli(tmp, &["verify", "--repo", "[TMP]/state.git"])
    );
    insta::assert_snapshot!(
        "verify_strict_finding_json",
        run_cli(
            tmp,
            &["-q", "verify", "--json", "--repo", "[TMP]/state.git"]
        )
    );
    let range = format!("{}..refs/heads/main", tip.unwrap().to_hex());
    let pushed = run_cli(
        tmp,
        &["verify", "--repo", "[TMP]/state.git", "--range", &range],
    );
    assert_eq!(code(&pushed), "exit: 1", "{pushed}");
    assert!(pushed.contains(": privacy-strict: event "), "{pushed}");
    insta::assert_snapshot!(
        "verify_reference_clean",
        run_cli(
            tmp,
            &[
                "verify",
                "--privacy",
                "reference",
                "--repo",
                "[TMP]/state.git"
            ]
        )
    );
    insta::assert_snapshot!(
        "usage_bad_privacy",
        run_cli(tmp, &["verify", "--privacy", "lenient"])
    );
}

/// Two producers that differ only in case (`Review`, `review`) give sibling directories
/// that a case-insensitive file system folds into one: `verify` reports the pair as a
/// warning (type "warning" in JSON) and still exits 0, for the revision and for the push
/// that brings the second one.
#[test]
fn verify_warns_of_names_that_differ_only_in_case() {
    let tmp = &temp_root();
    let event = |component: &str| {
        format!(
            r#"{{"phase":"review.item","status":"started","component":"{component}","identity":{{"item":7}},"subject":{{"repository":"openclaw/openclaw","kind":"issue","number":7}},"retryable":true,"mutation":false}}"#
        )
    };
    let code = |text: &str| text.lines().next().unwrap().to_owned();
    for (spool, component) in [("upper", "Review"), ("lower", "review")] {
        std::fs::create_dir_all(tmp.join(spool)).unwrap();
        let spool = format!("[TMP]/{spool}");
        let out = run_writer(tmp, &event(component), &["record", "--spool", &spool]);
        assert_eq!(code(&out), "exit: 0", "{out}");
        let out = run_cli(tmp, &["seal", &spool]);
        assert_eq!(code(&out), "exit: 0", "{out}");
    }
    let repo = ["--repo", "[TMP]/state.git"];
    let out = run_cli(tmp, &["publish", repo[0], repo[1], "[TMP]/upper"]);
    assert_eq!(code(&out), "exit: 0", "{out}");
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let first = store.tip("refs/heads/main").unwrap().unwrap();
    let out = run_cli(tmp, &["verify", repo[0], repo[1]]);
    assert_eq!(code(&out), "exit: 0", "{out}");
    assert!(!out.contains("warning"), "{out}");
    let out = run_cli(tmp, &["publish", repo[0], repo[1], "[TMP]/lower"]);
    assert_eq!(code(&out), "exit: 0", "{out}");
    insta::assert_snapshot!(
        "verify_case_collision",
        run_cli(tmp, &["verify", repo[0], repo[1]])
    );
    insta::assert_snapshot!(
        "verify_case_collision_json",
        run_cli(tmp, &["-q", "verify", "--json", repo[0], repo[1]])
    );
    let range = format!("{}..main", first.to_hex());
    insta::assert_snapshot!(
        "verify_case_collision_range",
        run_cli(tmp, &["verify", repo[0], repo[1], "--range", &range])
    );
}

/// `action create FLAGS… --id ID --guard-decision DECISION`: the words every test that needs
/// an action starts from, before any further flags and the `--` of a command.
fn action_create<'a>(flags: &[&'a str], id: &'a str, decision: &'a str) -> Vec<&'a str> {
    let mut args = vec!["action", "create"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--id", id, "--guard-decision", decision]);
    args
}

/// `action create --repo REPO --id ID --guard-decision DECISION -- COMMAND…` at `T0`: the
/// action a `run` test then runs.
fn create_command(tmp: &Path, repo: &str, id: &str, decision: &str, command: &[&str]) -> String {
    let mut args = action_create(&["--repo", repo], id, decision);
    args.push("--");
    args.extend_from_slice(command);
    run_finality(tmp, T0, &args)
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

#[test]
fn action_commands() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let create = |id: &str, extra: &[&str]| {
        let mut args = vec!["action", "create", "--repo", repo, "--id", id];
        args.extend_from_slice(extra);
        run_finality(tmp, T0, &args)
    };
    insta::assert_snapshot!(
        "action_create",
        create(
            "act_deploy",
            &["--guard-decision", "gd_42", "--", "./deploy.sh", "prod"]
        )
    );
    insta::assert_snapshot!(
        "action_create_json_blocked",
        create(
            "act_blocked",
            &["--json", "--guard-decision", "gd_43", "--verdict", "block"]
        )
    );
    insta::assert_snapshot!(
        "action_create_exists",
        create("act_deploy", &["--guard-decision", "gd_other"])
    );
    let claim = |attempt: &str, extra: &[&str]| {
        let mut args = vec![
            "action",
            "claim",
            "--repo",
            repo,
            "act_deploy",
            "--attempt",
            attempt,
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "./deploy.sh", "prod"]);
        run_finality(tmp, T0, &args)
    };
    insta::assert_snapshot!(
        "action_claim_other_act",
        run_finality(
            tmp,
            T0,
            &[
                "action",
                "claim",
                "--json",
                "--repo",
                repo,
                "act_deploy",
                "--attempt",
                "attempt-0000000000",
                "--",
                "./deploy.sh",
                "staging"
            ]
        )
    );
    insta::assert_snapshot!(
        "action_claim_json",
        claim("attempt-0000000001", &["--json"])
    );
    insta::assert_snapshot!("action_claim_conflict", claim("attempt-0000000002", &[]));
    insta::assert_snapshot!("action_claim_invalid_attempt", claim("short", &["--json"]));
    insta::assert_snapshot!(
        "action_claim_no_repo",
        run_finality(
            tmp,
            T0,
            &[
                "action",
                "claim",
                "--repo",
                "[TMP]/none.git",
                "act_deploy",
                "--attempt",
                "attempt-0000000003"
            ]
        )
    );
    insta::assert_snapshot!(
        "action_outcome_json",
        run_finality(
            tmp,
            T1,
            &[
                "action",
                "outcome",
                "--json",
                "--repo",
                repo,
                "act_deploy",
                "completed",
                "--attempt",
                "attempt-0000000001",
                "--summary",
                "deployed v2 with token=oc_live_fixture"
            ]
        )
    );
    insta::assert_snapshot!(
        "action_outcome_already_set_json",
        run_finality(
            tmp,
            T1,
            &[
                "action",
                "outcome",
                "--json",
                "--repo",
                repo,
                "act_deploy",
                "failed",
                "--error",
                "late"
            ]
        )
    );
    insta::assert_snapshot!(
        "action_outcome_lost_confirmation",
        run_finality(
            tmp,
            T1,
            &[
                "action",
                "outcome",
                "--repo",
                repo,
                "act_deploy",
                "lost_confirmation"
            ]
        )
    );
    insta::assert_snapshot!(
        "action_outcome_blocked",
        run_finality(
            tmp,
            T1,
            &[
                "action",
                "outcome",
                "--repo",
                repo,
                "act_blocked",
                "completed"
            ]
        )
    );
    insta::assert_snapshot!(
        "action_show",
        run_finality(
            tmp,
            LATER,
            &["action", "show", "--repo", repo, "act_deploy"]
        )
    );
    insta::assert_snapshot!(
        "action_show_json",
        run_finality(
            tmp,
            LATER,
            &["action", "show", "--json", "--repo", repo, "act_deploy"]
        )
    );
    insta::assert_snapshot!(
        "action_show_missing",
        run_finality(
            tmp,
            LATER,
            &["action", "show", "--repo", repo, "act_nothing"]
        )
    );
    create("act_legacy", &["--guard-decision", "gd_44"]);
    insta::assert_snapshot!(
        "action_close_cancelled",
        run_finality(
            tmp,
            T1,
            &[
                "action",
                "close",
                "--repo",
                repo,
                "act_legacy",
                "cancelled",
                "--summary",
                "operator stopped it"
            ]
        )
    );
    create("act_stale", &["--guard-decision", "gd_45"]);
    create(
        "act_waiting",
        &["--guard-decision", "gd_46", "--verdict", "require_approval"],
    );
    insta::assert_snapshot!(
        "sweep_json",
        run_finality(tmp, LATER, &["sweep", "--json", "--repo", repo])
    );
    insta::assert_snapshot!(
        "sweep_again",
        run_finality(
            tmp,
            LATER,
            &["sweep", "--repo", repo, "--timeout-minutes", "30"]
        )
    );
    insta::assert_snapshot!(
        "sweep_bad_timeout",
        run_finality(
            tmp,
            LATER,
            &["sweep", "--repo", repo, "--timeout-minutes", "0"]
        )
    );
    insta::assert_snapshot!(
        "verify_finality_clean",
        run_finality(tmp, LATER, &["verify", "--repo", repo])
    );
}

#[test]
fn run_wraps_a_command() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let script = "echo to-stdout; echo to-stderr >&2";
    let ok = ["sh", "-c", script];
    create_command(tmp, repo, "act_ok", "gd_1", &ok);
    let run_args = |id: &'static str, attempt: &'static str, json: bool, cmd: &[&'static str]| {
        let mut a = vec!["run", "--repo", repo, "--action", id, "--attempt", attempt];
        if json {
            a.push("--json");
        }
        a.push("--");
        a.extend_from_slice(cmd);
        a
    };
    insta::assert_snapshot!(
        "run_completed",
        run_finality(
            tmp,
            T1,
            &run_args("act_ok", "attempt-0000000001", false, &ok)
        )
    );
    // A second run is refused before the command starts: the marker is never written.
    let marker = ["sh", "-c", "touch [TMP]/ran-again"];
    insta::assert_snapshot!(
        "run_refused",
        run_finality(
            tmp,
            T1,
            &run_args("act_ok", "attempt-0000000002", false, &marker)
        )
    );
    assert!(!tmp.join("ran-again").exists());
    let fail = ["sh", "-c", "echo partial-output; exit 7"];
    create_command(tmp, repo, "act_fail", "gd_2", &fail);
    insta::assert_snapshot!(
        "run_failed_json",
        run_finality(
            tmp,
            T1,
            &run_args("act_fail", "attempt-0000000003", true, &fail)
        )
    );
    let missing = ["[TMP]/no-such-program"];
    create_command(tmp, repo, "act_missing", "gd_3", &missing);
    insta::assert_snapshot!(
        "run_not_found",
        run_finality(
            tmp,
            T1,
            &run_args("act_missing", "attempt-0000000004", false, &missing)
        )
    );
    // The command completes but takes the repository's objects with it: exit 4, reconcile.
    let broken = "[TMP]/broken.git";
    let sabotage = ["mv", "[TMP]/broken.git/objects", "[TMP]/objects.gone"];
    create_command(tmp, broken, "act_lost", "gd_4", &sabotage);
    let mut args = vec![
        "run",
        "--repo",
        broken,
        "--action",
        "act_lost",
        "--attempt",
        "attempt-0000000005",
        "--",
    ];
    args.extend_from_slice(&sabotage);
    insta::assert_snapshot!("run_unconfirmed", run_finality(tmp, T1, &args));
    insta::assert_snapshot!(
        "run_verify_clean",
        run_finality(tmp, T1, &["verify", "--repo", repo])
    );
}

/// `action create`, `action claim` and `run` refuse an act with a lossy number (exit 2),
/// naming its path, before anything is written or run.
#[test]
fn lossy_numbers_in_an_act_are_refused() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let create = |act: &str| {
        let mut args = action_create(&["--repo", repo], "act_n", "gd_1");
        args.extend_from_slice(&["--act", act]);
        run_finality(tmp, T0, &args)
    };
    let refused_create = [
        create(r#"{"kind":"shell","n":1e400}"#),
        create(r#"{"kind":"http","request":{"retries":-1e400}}"#),
    ];
    assert!(!tmp.join("state.git").exists(), "no repository created");
    assert!(create(r#"{"kind":"shell","n":1}"#).starts_with("exit: 0"));
    let claim = run_finality(
        tmp,
        T0,
        &[
            "action",
            "claim",
            "--repo",
            repo,
            "act_n",
            "--attempt",
            "attempt-0000000001",
            "--json",
            "--act",
            r#"{"kind":"shell","n":[1,1e401]}"#,
        ],
    );
    let run = run_finality(
        tmp,
        T0,
        &[
            "run",
            "--repo",
            repo,
            "--action",
            "act_n",
            "--attempt",
            "attempt-0000000002",
            "--act",
            r#"{"kind":"shell","n":-0}"#,
            "--",
            "touch",
            "[TMP]/ran",
        ],
    );
    assert!(!tmp.join("ran").exists(), "the command was not run");
    insta::assert_snapshot!(
        "act_lossy_numbers",
        [refused_create[0].as_str(), &refused_create[1], &claim, &run].join("\n")
    );
    let show = run_finality(tmp, T0, &["action", "show", "--repo", repo, "act_n"]);
    assert!(show.contains("claim:        -\n"), "{show}");
}

/// `action create --act` refuses every act the act hash cannot take one to one (exit 2, naming
/// the path in the act, nothing written): NFC-equal keys at the root and nested, a key or
/// string not in NFC, numbers written with more digits than a double holds (underflow, rounding
/// to 1 and to 0.1). A claim must then present the created act: none or one that rounds to it
/// is refused, the same act with its number written differently but exactly is granted.
#[test]
fn unhashable_acts_are_refused() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let create = |act: &str| {
        let mut args = action_create(&["--repo", repo], "act_u", "gd_1");
        args.extend_from_slice(&["--act", act]);
        run_finality(tmp, T0, &args)
    };
    let mut out: Vec<String> = [
        r#"{"kind":"shell","command":"ls","\u00e9":1,"e\u0301":2}"#,
        r#"{"kind":"sql","statement":"DROP TABLE users","q":{"a":[{"\u212b":1,"\u00c5":2}]}}"#,
        r#"{"kind":"shell","command":"rm cafe\u0301"}"#,
        r#"{"kind":"shell","args":{"e\u0301":1}}"#,
        r#"{"kind":"shell","n":1e-400}"#,
        r#"{"kind":"shell","n":1.00000000000000000001}"#,
        r#"{"kind":"shell","x":[0.10000000000000001]}"#,
    ]
    .into_iter()
    .map(create)
    .collect();
    assert!(out.iter().all(|o| o.starts_with("exit: 2")), "{out:?}");
    assert!(!tmp.join("state.git").exists(), "no repository created");
    assert!(create(r#"{"kind":"shell","command":"ls","n":0}"#).starts_with("exit: 0"));
    let claim = |attempt: &str, act: Option<&str>| {
        let mut args = vec![
            "action",
            "claim",
            "--repo",
            repo,
            "act_u",
            "--attempt",
            attempt,
        ];
        if let Some(act) = act {
            args.extend_from_slice(&["--act", act]);
        }
        run_finality(tmp, T0, &args)
    };
    out.push(claim("attempt-0000000001", None));
    out.push(claim(
        "attempt-0000000001",
        Some(r#"{"kind":"shell","command":"ls","n":1e-400}"#),
    ));
    out.push(claim(
        "attempt-0000000001",
        Some(r#"{"kind":"shell","command":"ls","n":0,"\u00e9":1,"e\u0301":2}"#),
    ));
    let granted = claim(
        "attempt-0000000001",
        Some(r#"{"kind":"shell","command":"ls","n":0.0}"#),
    );
    assert!(granted.starts_with("exit: 0"), "{granted}");
    insta::assert_snapshot!("act_unhashable", out.join("\n"));
}

/// Only the principal that created (and claimed) an action, or `--operator`, settles it:
/// `outcome` and `close` by another `--principal` are NOT_FOUND exactly as for an unknown id;
/// without a principal they are refused as invalid input; the owner's report then lands, and
/// `--operator` reports or closes another principal's action.
#[test]
fn only_the_actions_principal_or_an_operator_settles_it() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let claimed = |id: &str| {
        let args = action_create(&["--repo", repo], id, "gd_1");
        assert!(run_finality(tmp, T0, &args).starts_with("exit: 0"));
        let claim = [
            "action",
            "claim",
            "--repo",
            repo,
            id,
            "--attempt",
            "attempt-0000000001",
        ];
        assert!(run_finality(tmp, T0, &claim).starts_with("exit: 0"));
    };
    claimed("act_bot");
    let settle = |id: &str, extra: &[&str]| {
        let mut args = vec!["action", extra[0], "--repo", repo, id];
        args.extend_from_slice(&extra[1..]);
        run_finality(tmp, T1, &args)
    };
    let outcome = [
        "outcome",
        "--principal",
        "eve",
        "--json",
        "failed",
        "--error",
        "boom",
    ];
    let close = ["close", "--principal", "eve", "--json", "cancelled"];
    let mut out = Vec::new();
    for args in [&outcome[..], &close[..]] {
        let theirs = settle("act_bot", args);
        let unknown = settle("act_nope", args);
        assert_eq!(
            theirs.replace("act_bot", "ID"),
            unknown.replace("act_nope", "ID")
        );
        assert!(theirs.starts_with("exit: 1"), "{theirs}");
        out.push(theirs);
    }
    let env = Env::from([
        ("SOURCE_DATE_EPOCH".to_owned(), "1772366400".to_owned()),
        ("ACTION_LEDGER_NOW".to_owned(), T1.to_owned()),
    ]);
    out.push(run_in(
        tmp,
        &env,
        "",
        &["action", "outcome", "--repo", repo, "act_bot", "completed"],
    ));
    out.push(settle("act_bot", &["outcome", "completed"]));
    claimed("act_ops_report");
    out.push(settle(
        "act_ops_report",
        &["outcome", "--operator", "failed", "--error", "stuck"],
    ));
    claimed("act_ops_close");
    out.push(settle(
        "act_ops_close",
        &["close", "--operator", "cancelled"],
    ));
    insta::assert_snapshot!("action_settle_principals", out.join("\n"));
}

/// `action create --id X` retried later with the same binding exits 0, prints the id and
/// keeps the first creation time without a commit; another binding is `ACTION_EXISTS`.
#[test]
fn action_create_retry_is_idempotent() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let create = |now: &str, extra: &[&str]| {
        let mut args = action_create(&["--repo", repo], "act_retry", "gd_1");
        args.extend_from_slice(&["--containment-ref", "ctr_9", "--verdict", "allow_contained"]);
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "./deploy.sh", "prod"]);
        run_finality(tmp, now, &args)
    };
    let tip = || {
        let store = Store::open(&tmp.join("state.git")).unwrap();
        store.tip("refs/heads/main").unwrap()
    };
    assert!(create(T0, &[]).starts_with("exit: 0"));
    let first = tip();
    insta::assert_snapshot!(
        "action_create_retry",
        [create(T1, &[]), create(LATER, &["--json"])].join("\n")
    );
    assert_eq!(tip(), first, "no commit");
    insta::assert_snapshot!(
        "action_create_retry_other_binding",
        [
            create(T1, &["--agent", "other-bot"]),
            create(T1, &["--json", "--lifecycle", "pending"]),
        ]
        .join("\n")
    );
    assert_eq!(tip(), first, "no commit");
}

/// Issue 43, items 2 and 3 through the CLI, whose idempotency key is `--id`: an id retried
/// with another binding (agent, principal, act, no act, guard decision, verdict, containment
/// ref, lifecycle, identity verification, protocol) is `ACTION_EXISTS` with exit 1 and writes
/// nothing, as `serve` refuses it; a retried blocked creation answers what the first did (exit
/// 0, the same action and lifecycle, `created: false`).
#[test]
fn action_create_id_binds_every_field_and_replays_a_blocked_creation() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let base = [
        "--guard-decision",
        "gd_1",
        "--verdict",
        "allow_contained",
        "--containment-ref",
        "ctr_9",
    ];
    let create = |id: &str, flags: &[&str], command: &[&str]| {
        let mut args = vec!["action", "create", "--repo", repo, "--id", id, "--json"];
        args.extend_from_slice(flags);
        args.push("--");
        args.extend_from_slice(command);
        run_finality(tmp, T1, &args)
    };
    let prod = ["./deploy.sh", "prod"];
    assert!(create("act_bound", &base, &prod).starts_with("exit: 0"));
    let tip = || {
        let store = Store::open(&tmp.join("state.git")).unwrap();
        store.tip("refs/heads/main").unwrap()
    };
    let first = tip();
    let with = |extra: &[&'static str]| {
        let mut flags = base.to_vec();
        flags.extend_from_slice(extra);
        flags
    };
    let differing: [(&str, Vec<&str>, &[&str]); 10] = [
        ("agent", with(&["--agent", "other-bot"]), &prod),
        ("principal", with(&["--principal", "other-key"]), &prod),
        ("act", base.to_vec(), &["rm", "-rf", "/srv/data"]),
        ("no act", base.to_vec(), &[]),
        (
            "guard decision",
            vec![
                "--guard-decision",
                "gd_2",
                "--verdict",
                "allow_contained",
                "--containment-ref",
                "ctr_9",
            ],
            &prod,
        ),
        ("verdict", vec!["--guard-decision", "gd_1"], &prod),
        (
            "containment ref",
            vec![
                "--guard-decision",
                "gd_1",
                "--verdict",
                "allow_contained",
                "--containment-ref",
                "ctr_8",
            ],
            &prod,
        ),
        ("lifecycle", with(&["--lifecycle", "pending"]), &prod),
        ("verified", with(&["--verified"]), &prod),
        ("legacy", with(&["--legacy"]), &prod),
    ];
    for (what, flags, command) in differing {
        let out = create("act_bound", &flags, command);
        assert!(
            out.starts_with("exit: 1") && out.contains(r#""code":"ACTION_EXISTS""#),
            "{what}: {out}"
        );
    }
    assert_eq!(tip(), first, "nothing written");
    assert!(create("act_bound", &base, &prod).contains(r#""created":false"#));

    let blocked = ["--guard-decision", "gd_b", "--verdict", "block"];
    let answer = create("act_blocked", &blocked, &prod);
    let after = tip();
    let again = create("act_blocked", &blocked, &prod);
    // The stored action as printed: `{"action":{…}` up to the claim.
    let action = |out: &str| {
        let start = out.find(r#"{"action":{"#).expect("an action");
        let end = out.find(r#","claim":"#).expect("a claim");
        out[start..end].to_owned()
    };
    assert!(answer.starts_with("exit: 0"), "{answer}");
    assert!(again.starts_with("exit: 0"), "{again}");
    assert!(again.contains(r#""created":false"#) && again.contains(r#""lifecycle":"blocked""#));
    assert_eq!(action(&again), action(&answer), "the first record");
    assert_eq!(tip(), after, "nothing written");
}

/// An outcome recorded by a clock behind the creator's: `elapsed_ms` is 0, not negative, and
/// `action outcome`, `action show` and their `--json` say that the clocks disagreed.
#[test]
fn clock_skew_is_reported_and_elapsed_never_negative() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let (at_1210, at_1200) = ("2026-03-01T12:10:00.000Z", "2026-03-01T12:00:30.000Z");
    for id in ["act_skew", "act_json", "act_ok", "act_run"] {
        let mut args = action_create(&["--repo", repo], id, "gd_1");
        if id == "act_run" {
            args.extend_from_slice(&["--", "true"]);
        }
        assert!(run_finality(tmp, at_1210, &args).starts_with("exit: 0"));
    }
    let claim = [
        "action",
        "claim",
        "--repo",
        repo,
        "act_skew",
        "--attempt",
        "attempt-0000000001",
    ];
    assert!(run_finality(tmp, at_1210, &claim).starts_with("exit: 0"));
    let outcome = |id: &str, json: bool, now: &str| {
        let mut args = vec!["action", "outcome", "--repo", repo, id, "completed"];
        if json {
            args.push("--json");
        }
        run_finality(tmp, now, &args)
    };
    let show = |id: &str, json: bool| {
        let mut args = vec!["action", "show", "--repo", repo, id];
        if json {
            args.push("--json");
        }
        run_finality(tmp, LATER, &args)
    };
    insta::assert_snapshot!(
        "action_clock_skew",
        [
            outcome("act_skew", false, at_1200),
            outcome("act_json", true, at_1200),
            show("act_skew", false),
            show("act_skew", true),
        ]
        .join("\n")
    );
    let run = run_finality(
        tmp,
        at_1200,
        &[
            "run",
            "--repo",
            repo,
            "--action",
            "act_run",
            "--attempt",
            "attempt-0000000002",
            "--",
            "true",
        ],
    );
    assert!(
        run.starts_with("exit: 0")
            && run.contains("clock skew: claimed_at is 570000 ms before created_at"),
        "{run}"
    );
    // Clocks in order: no skew is reported.
    let ok = outcome("act_ok", true, "2026-03-01T12:10:01.000Z");
    assert!(
        ok.contains(r#""elapsed_ms":1000,"#) && !ok.contains("skew"),
        "{ok}"
    );
    let (text, json) = (show("act_ok", false), show("act_ok", true));
    assert!(
        text.contains("elapsed_ms:   1000\n") && !text.contains("skew"),
        "{text}"
    );
    assert!(!json.contains("skew"), "{json}");
}

/// Each refusal of `action outcome --progress` names its own rule: a lossy number (with
/// its path), depth, size, invalid JSON.
#[test]
fn progress_refusals_name_their_rule() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let created = run_finality(tmp, T0, &action_create(&["--repo", repo], "act_p", "gd_1"));
    assert!(created.starts_with("exit: 0"), "{created}");
    let outcome = |extra: &[&str], progress: &str| {
        let mut args = vec!["action", "outcome", "--repo", repo, "act_p", "partial"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--progress", progress]);
        run_finality(tmp, T1, &args)
    };
    let deep = format!("{}1{}", r#"{"d":"#.repeat(65), "}".repeat(65));
    let large = format!(r#"{{"log":"{}"}}"#, "x".repeat(8200));
    insta::assert_snapshot!(
        "action_outcome_progress_refusals",
        [
            outcome(&[], r#"{"a":1e21}"#),
            outcome(&["--json"], r#"{"a":{"b":[1,-1e400]}}"#),
            outcome(&[], r#"{"step":-0}"#),
            outcome(&[], &deep),
            outcome(&[], &large),
            outcome(&[], r#"{"a":}"#),
            outcome(&[], "[1,2]"),
        ]
        .join("\n")
    );
    let show = run_finality(tmp, T1, &["action", "show", "--repo", repo, "act_p"]);
    assert!(show.contains("outcome:      pending\n"), "{show}");
}

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

/// The three day1 jobs that carry attempts of one review operation (`a9a423ed…`): two runs
/// of openclaw/clawsweeper (one a re-run, attempt 2) and one of openclaw/openclaw.
const OPERATION_JOBS: [&str; 3] = [
    "001-openclaw-clawsweeper-review-r13550107154-a1",
    "016-openclaw-openclaw-review-r13550655019-a1",
    "019-openclaw-clawsweeper-review-r13550726447-a2",
];

/// `git` in `repo` (a bare repository), its stdout.
fn git_out(repo: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A publication commit's subject names the producer repository, workflow, run id/attempt
/// and job, with counts; a source holding several job runs names the first and how many
/// more. The trailer stays the manifest's sha256, which the `--json` record lets anyone check.
#[test]
fn publication_subjects_name_the_producer_run() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    for job in OPERATION_JOBS {
        copy_day1_job(job, &tmp.join("three"));
    }
    let published = run_cli(
        tmp,
        &[
            "-q",
            "publish",
            "--json",
            "--repo",
            "[TMP]/state.git",
            "[TMP]/job",
            "[TMP]/three",
        ],
    );
    assert!(published.starts_with("exit: 0"), "{published}");
    let state = tmp.join("state.git");
    insta::assert_snapshot!(
        "publication_subjects",
        git_out(&state, &["log", "--format=%s", "refs/heads/main"])
    );
    // The trailer is the sha256 of the manifest the publisher printed.
    let record: serde_json::Value =
        serde_json::from_str(published.lines().find(|l| l.contains("/three\"")).unwrap()).unwrap();
    // The manifest's JSON is the reference's, spliced into the record verbatim.
    let text = published.lines().find(|l| l.contains("/three\"")).unwrap();
    let start = text.find("\"manifest\":").unwrap() + "\"manifest\":".len();
    let end = text.find(",\"ref\":").unwrap();
    let digest = crate::identity::Digest::of(&text[start..end]);
    let body = git_out(&state, &["log", "-1", "--format=%B", "refs/heads/main"]);
    assert!(
        body.contains(&format!("Ledger-Manifest-Sha256: {digest}")),
        "{body}"
    );
    assert_eq!(record["v"], 1);
    assert_eq!(record["manifest"]["created"], 12);
}

/// `log --operation` follows one operation across jobs and runs: its attempts grouped, in
/// causal then time order (the canonical order would put the later clawsweeper re-run before
/// the openclaw run); `--order time` sorts by occurred_at; the default stays canonical.
#[test]
fn log_follows_an_operation_and_orders_by_time() {
    let tmp = &temp_root();
    let mut args = vec!["-q", "publish", "--repo", "[TMP]/state.git"];
    let roots: Vec<String> = OPERATION_JOBS
        .iter()
        .map(|j| format!("[TMP]/{j}"))
        .collect();
    for job in OPERATION_JOBS {
        copy_day1_job(job, &tmp.join(job));
    }
    args.extend(roots.iter().map(String::as_str));
    let published = run_cli(tmp, &args);
    assert!(published.starts_with("exit: 0"), "{published}");
    let repo = ["--repo", "[TMP]/state.git"];
    insta::assert_snapshot!(
        "log_follow_operation",
        run_cli(
            tmp,
            &[&["log", "--operation", "a9a423ed"][..], &repo].concat()
        )
    );
    insta::assert_snapshot!(
        "log_follow_operation_json",
        run_cli(
            tmp,
            &[
                &["-q", "log", "--json", "--operation", "a9a423ed"][..],
                &repo
            ]
            .concat()
        )
    );
    let times = |order: &str| -> Vec<String> {
        let out = run_cli(tmp, &[&["-q", "log", "--order", order][..], &repo].concat());
        assert!(out.starts_with("exit: 0"), "{out}");
        out.lines()
            .skip(2)
            .take_while(|l| *l != "--- stderr")
            .map(str::to_owned)
            .collect()
    };
    let (canonical, by_time) = (times("canonical"), times("time"));
    let stamp = |l: &String| l[..24].to_owned();
    let mut sorted = canonical.clone();
    sorted.sort_by_key(stamp);
    assert_ne!(
        canonical, sorted,
        "the fixture must not be in time order already"
    );
    assert_eq!(
        by_time.iter().map(stamp).collect::<Vec<_>>(),
        sorted.iter().map(stamp).collect::<Vec<_>>()
    );
    let (mut a, mut b) = (canonical.clone(), by_time.clone());
    a.sort();
    b.sort();
    assert_eq!(a, b, "time order prints the same events");
    assert_eq!(canonical.len(), times("canonical").len());
    let usage = run_cli(tmp, &[&["log", "--order", "random"][..], &repo].concat());
    assert!(usage.starts_with("exit: 2"), "{usage}");
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

/// Publish prints one summary line per source by default; `--manifest` keeps the reference's
/// manifest reachable and `--json` carries it in a versioned record; `seal --paths` keeps the
/// reference's `{"paths":[...]}`.
#[test]
fn publish_and_seal_output_shapes() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    std::fs::create_dir(tmp.join("nothing")).unwrap();
    let summary = run_cli(tmp, &["publish", "--repo", "[TMP]/state.git", "[TMP]/job"]);
    insta::assert_snapshot!("publish_summary", summary);
    let manifest = run_cli(
        tmp,
        &[
            "-q",
            "publish",
            "--manifest",
            "--repo",
            "[TMP]/state.git",
            "[TMP]/job",
        ],
    );
    let json = run_cli(
        tmp,
        &[
            "-q",
            "publish",
            "--json",
            "--repo",
            "[TMP]/state.git",
            "[TMP]/job",
        ],
    );
    let data = |out: &str| out.lines().nth(2).unwrap().to_owned();
    let manifest: serde_json::Value = serde_json::from_str(&data(&manifest)).unwrap();
    let record: serde_json::Value = serde_json::from_str(&data(&json)).unwrap();
    assert_eq!(record["type"], "publication");
    assert_eq!(record["v"], 1);
    assert_eq!(record["status"], "unchanged");
    assert_eq!(record["manifest"], manifest);
    assert_eq!(manifest["unchanged"], 2, "{manifest}");
    let both = run_cli(
        tmp,
        &[
            "publish",
            "--json",
            "--manifest",
            "--repo",
            "[TMP]/state.git",
            "[TMP]/job",
        ],
    );
    assert!(both.starts_with("exit: 2"), "{both}");
    insta::assert_snapshot!(
        "seal_paths_and_summary",
        [
            run_cli(tmp, &["-q", "seal", "--paths", "[TMP]/nothing"]),
            run_cli(tmp, &["seal", "[TMP]/nothing"]),
        ]
        .join("\n")
    );
}

/// `log` on a revision with a shard whose lines end in `\r\n` (committed with plumbing):
/// it exits 2 naming the shard and the rule `verify` reports, and prints no event of it.
#[test]
fn log_refuses_a_shard_that_verify_refuses() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    let published = run_cli(
        tmp,
        &["-q", "publish", "--repo", "[TMP]/state.git", "[TMP]/job"],
    );
    assert!(published.starts_with("exit: 0"), "{published}");
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap().unwrap();
    let snap = store.snapshot(Some(tip)).unwrap();
    let first = snap.list_files(crate::ledger::shard::EVENTS_ROOT).unwrap()[0].clone();
    let text = String::from_utf8(snap.read(&first, u64::MAX).unwrap().unwrap()).unwrap();
    let crlf = text.replace('\n', "\r\n").into_bytes();
    let sig = Signature {
        name: "tester".into(),
        email: "tester@invalid".into(),
        time_seconds: 1_768_480_496,
    };
    let bad = store
        .write_commit_with(Some(tip), &[(first, crlf)], &[], true, "crlf", &sig)
        .unwrap();
    store
        .update_ref("refs/heads/main", Some(tip), bad, "crlf")
        .unwrap();
    insta::assert_snapshot!(
        "log_crlf_shard",
        run_cli(tmp, &["log", "--json", "--repo", "[TMP]/state.git"])
    );
    insta::assert_snapshot!(
        "verify_crlf_shard",
        run_cli(tmp, &["-q", "verify", "--repo", "[TMP]/state.git"])
    );
}

/// Before anything is published the ledger ref does not exist: `log` prints nothing and
/// exits 0, `verify` says so and exits 2, for every way of naming it. `--rev` and `--range`
/// take what `git rev-parse` takes (remote-tracking names, tags, `~N`, abbreviated ids).
#[test]
fn no_ledger_yet_and_revision_forms() {
    let tmp = &temp_root();
    Store::open_or_init_bare(&tmp.join("state.git"), "refs/heads/main").unwrap();
    let repo = ["--repo", "[TMP]/state.git"];
    insta::assert_snapshot!("log_no_ledger", run_cli(tmp, &["log", repo[0], repo[1]]));
    insta::assert_snapshot!(
        "verify_no_ledger",
        run_cli(tmp, &["verify", repo[0], repo[1]])
    );
    let zero = "0".repeat(40);
    for args in [
        vec!["log", "--json", "--rev", "main"],
        vec!["log", "--rev", "HEAD~2"],
        vec!["log", "--rev", "refs/heads/main"],
        vec!["log", "--rev", "@"],
        vec!["verify", "--rev", "main"],
        vec!["verify", "--rev", "HEAD~2"],
        vec!["verify", "--rev", "refs/heads/main"],
        vec!["verify", "--range", &format!("{zero}..HEAD")],
    ] {
        let mut all = args.clone();
        all.extend(repo);
        let out = run_cli(tmp, &all);
        let want = if args[0] == "log" {
            "exit: 0"
        } else {
            "exit: 2"
        };
        assert!(out.starts_with(want), "{args:?}: {out}");
        assert!(
            out.contains("there is no ledger at refs/heads/main yet"),
            "{args:?}: {out}"
        );
        assert!(out.contains("--- stdout\n--- stderr"), "{args:?}: {out}");
    }

    fixture_job(&tmp.join("job"));
    let out = run_cli(tmp, &["-q", "publish", repo[0], repo[1], "[TMP]/job"]);
    assert!(out.starts_with("exit: 0"), "{out}");
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(tmp.join("state.git"))
            .args(args)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    git(&["update-ref", "refs/remotes/origin/main", &tip.to_hex()]);
    git(&["tag", "-a", "v1", "-m", "release", &tip.to_hex()]);
    insta::assert_snapshot!(
        "verify_rev_origin_main",
        run_cli(tmp, &["verify", repo[0], repo[1], "--rev", "origin/main"])
    );
    let short = &tip.to_hex()[..10];
    for rev in ["v1", short, "origin/main~0", "HEAD^{commit}"] {
        let out = run_cli(
            tmp,
            &[
                "log",
                repo[0],
                repo[1],
                "--rev",
                rev,
                "--type",
                "repair.plan",
            ],
        );
        assert!(out.starts_with("exit: 0"), "{rev}: {out}");
        assert!(out.contains("repair.plan"), "{rev}: {out}");
    }
    let range = format!("{zero}..v1");
    let out = run_cli(tmp, &["-q", "verify", repo[0], repo[1], "--range", &range]);
    assert!(out.starts_with("exit: 0"), "{out}");
    insta::assert_snapshot!(
        "verify_unknown_revision",
        run_cli(tmp, &["verify", repo[0], repo[1], "--rev", "origin/nope"])
    );
    insta::assert_snapshot!(
        "log_other_ref_not_yet",
        run_cli(tmp, &["log", repo[0], repo[1], "--rev", "refs/heads/next"])
    );
}

#[test]
fn compact_and_log() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    let repo = ["--repo", "[TMP]/state.git"];
    let with = |cmd: &[&str], rest: &[&str]| -> Vec<String> {
        cmd.iter()
            .chain(&repo)
            .chain(rest)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let cli = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_cli(tmp, &args)
    };
    let published = cli(with(&["-q", "publish"], &["[TMP]/job"]));
    assert!(published.starts_with("exit: 0"), "{published}");
    let log_human = with(&["log"], &["--operation", "c1a023ed15b2"]);
    let log_json = with(
        &["log", "--json"],
        &["--subject", "openclaw/openclaw#41979"],
    );
    let log_all = with(&["-q", "log", "--json"], &[]);
    let (before_human, before_json, before_all) = (
        cli(log_human.clone()),
        cli(log_json.clone()),
        cli(log_all.clone()),
    );
    insta::assert_snapshot!("log_operation", before_human);
    insta::assert_snapshot!("log_subject_json", before_json);
    assert_eq!(before_all.lines().count(), 63 + 3);
    let window = ["--now", "2026-05-01", "--retention-days", "1"];
    insta::assert_snapshot!(
        "compact_inside_window",
        cli(with(
            &["compact"],
            &["--now", "2026-04-15T12:00:00Z", "--retention-days", "30"]
        ))
    );
    insta::assert_snapshot!(
        "compact_dry_run",
        cli(with(&["compact", "--dry-run"], &window))
    );
    insta::assert_snapshot!("compact", cli(with(&["compact"], &window)));
    insta::assert_snapshot!(
        "compact_again_json",
        cli(with(&["compact", "--json"], &window))
    );
    // Readers see the same ledger.
    assert_eq!(cli(log_human), before_human);
    assert_eq!(cli(log_json), before_json);
    assert_eq!(cli(log_all), before_all);
    insta::assert_snapshot!("compact_verify", cli(with(&["verify"], &[])));
    insta::assert_snapshot!(
        "compact_replay",
        cli(with(&["-q", "publish"], &["[TMP]/job"]))
    );
    insta::assert_snapshot!(
        "log_usage_errors",
        [
            cli(with(&["log"], &["--subject", "not a repo"])),
            cli(with(&["log"], &["--operation", "XYZ"])),
            cli(with(&["log"], &["--since", "2026-02-30"])),
            cli(with(&["compact"], &["--now", "yesterday"])),
        ]
        .join("\n")
    );
}

/// Every path below `root` (directories with a trailing `/`), for "nothing was written".
fn listing(root: &Path) -> Vec<String> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .map(|e| e.unwrap())
        .map(|e| {
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if e.file_type().is_dir() {
                format!("{rel}/")
            } else {
                rel
            }
        })
        .collect()
}

/// Roots of jobs that recorded nothing: an empty directory, one with other state under
/// `.clawsweeper-repair`, an empty spool directory, only the reserved directories, only a
/// staging file of an interrupted write.
const EMPTY_ROOTS: [(&str, &[&str]); 5] = [
    ("bare", &[]),
    ("other", &[".clawsweeper-repair/action-ledger-state/"]),
    ("spooldir", &[".clawsweeper-repair/action-events/"]),
    (
        "reserved",
        &[
            ".clawsweeper-repair/action-events/_locks/",
            ".clawsweeper-repair/action-events/_partitions/",
            ".clawsweeper-repair/action-events/_finalizations/",
        ],
    ),
    (
        "staging",
        &[".clawsweeper-repair/action-events/openclaw-openclaw-5dcd5a46c4da/x.json.1.tmp"],
    ),
];

fn empty_roots(tmp: &Path) {
    for (name, entries) in EMPTY_ROOTS {
        let root = tmp.join(name);
        std::fs::create_dir_all(&root).unwrap();
        for e in entries {
            let p = root.join(e);
            if e.ends_with('/') {
                std::fs::create_dir_all(p).unwrap();
            } else {
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, "partial").unwrap();
            }
        }
    }
}

/// A job that recorded nothing (`if: always()` post-job steps): `seal` of such a root exits
/// 0, prints `{"paths":[]}` (zero counts with `--json`) and writes nothing; so does
/// interruption recovery. A root that does not exist stays an error that says so.
#[test]
fn seal_of_a_job_that_recorded_nothing() {
    let tmp = &temp_root();
    empty_roots(tmp);
    let before = listing(tmp);
    let roots: Vec<String> = EMPTY_ROOTS
        .iter()
        .map(|(name, _)| format!("[TMP]/{name}"))
        .collect();
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .map(|a| a.to_string())
            .chain(roots.iter().cloned())
            .collect()
    };
    let cli = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_cli(tmp, &args)
    };
    insta::assert_snapshot!("seal_empty", cli(with(&["seal"])));
    insta::assert_snapshot!("seal_empty_json", cli(with(&["seal", "--json"])));
    insta::assert_snapshot!(
        "seal_empty_interrupted",
        cli(with(&[
            "-q",
            "seal",
            "--interrupt-open-attempts",
            "--reason",
            "cancelled"
        ]))
    );
    assert_eq!(listing(tmp), before, "sealing nothing wrote something");
    let out = cli(with(&["-q", "seal", "--output", "[TMP]/out"]));
    assert!(out.starts_with("exit: 0"), "{out}");
    assert_eq!(listing(&tmp.join("out")), ["/"], "shards of nothing");
    insta::assert_snapshot!(
        "seal_missing_root",
        run_cli(
            tmp,
            &[
                "seal",
                "--output",
                "[TMP]/out2",
                "[TMP]/bare",
                "[TMP]/nowhere"
            ]
        )
    );
    assert!(!tmp.join("out2").exists(), "a refused seal made its output");
    std::fs::write(tmp.join("file"), "x").unwrap();
    insta::assert_snapshot!("seal_file_root", run_cli(tmp, &["seal", "[TMP]/file"]));
}

/// `publish` of roots without events exits 0, makes no commit (not even the layout record
/// of a new ledger), prints an empty manifest and says nothing was published (`status:
/// "empty"`); among other sources, the others are still published. A source that does not
/// exist, or is not a directory, is an error that says so, and then nothing is published.
#[test]
fn publish_of_sources_without_events() {
    let tmp = &temp_root();
    empty_roots(tmp);
    std::fs::create_dir_all(tmp.join("shards/ledger/v1/events")).unwrap();
    fixture_spool(&tmp.join("job"));
    let sealed = run_cli(tmp, &["seal", "[TMP]/job"]);
    assert!(sealed.starts_with("exit: 0"), "{sealed}");
    let mut empties: Vec<String> = EMPTY_ROOTS
        .iter()
        .map(|(name, _)| format!("[TMP]/{name}"))
        .collect();
    empties.push("[TMP]/shards".into());
    let cli = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_cli(tmp, &args)
    };
    let publish = |repo: &str, extra: &[&str], sources: &[String]| {
        let mut args: Vec<String> = ["publish", "--repo", repo]
            .iter()
            .chain(extra)
            .map(|a| a.to_string())
            .collect();
        args.extend(sources.iter().cloned());
        cli(args)
    };
    for layout in ["fanout", "reference"] {
        let repo = format!("[TMP]/{layout}.git");
        let text = publish(&repo, &["--layout", layout], &empties);
        insta::assert_snapshot!(format!("publish_empty_{layout}"), text);
        let store = Store::open(&tmp.join(format!("{layout}.git"))).unwrap();
        assert_eq!(store.tip("refs/heads/main").unwrap(), None, "{layout}");
    }
    insta::assert_snapshot!(
        "publish_empty_json",
        publish("[TMP]/fanout.git", &["-q", "--json"], &empties[..2])
    );
    // Among other sources: the job is published, before and after empty ones.
    let mixed: Vec<String> = [&empties[0], "[TMP]/job", &empties[2]]
        .iter()
        .map(|s| s.to_string())
        .collect();
    insta::assert_snapshot!(
        "publish_empty_among_others",
        publish("[TMP]/mixed.git", &["--json"], &mixed)
    );
    let store = Store::open(&tmp.join("mixed.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap().expect("published");
    // Once the ledger exists, an empty source leaves its tip where it is.
    let again = publish("[TMP]/mixed.git", &["--json"], &empties[..1]);
    assert!(again.contains("\"status\":\"empty\""), "{again}");
    assert!(
        again.contains(&"\"commit\":\"[COMMIT]\"".to_string()),
        "{again}"
    );
    assert_eq!(store.tip("refs/heads/main").unwrap(), Some(tip));
    // Missing or non-directory sources are errors, found before anything is published.
    std::fs::write(tmp.join("file"), "x").unwrap();
    let missing: Vec<String> = ["[TMP]/job", "[TMP]/nowhere"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    insta::assert_snapshot!(
        "publish_missing_among_others",
        publish("[TMP]/typo.git", &[], &missing)
    );
    insta::assert_snapshot!(
        "publish_file_source",
        publish("[TMP]/typo.git", &[], &["[TMP]/file".to_string()])
    );
    assert!(!tmp.join("typo.git").exists(), "a repository was created");
}

/// A failed `publish` leaves no repository that it created behind (missing source, file
/// source, unsealed spool, strict privacy refusal, non-canonical shards, a failing second
/// source after an empty first one), keeps a repository that existed (even an empty one),
/// leaves a directory that was empty as an empty directory, and keeps a repository an
/// earlier source of the same run published into.
#[test]
fn failed_publish_leaves_no_new_repository() {
    let tmp = &temp_root();
    fixture_spool(&tmp.join("unsealed"));
    fixture_spool(&tmp.join("job"));
    let sealed = run_cli(
        tmp,
        &["-q", "seal", "--output", "[TMP]/shards", "[TMP]/job"],
    );
    assert!(sealed.starts_with("exit: 0"), "{sealed}");
    // A shard root whose shard has a non-canonical line.
    let shard = walkdir::WalkDir::new(tmp.join("shards"))
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let bad = tmp
        .join("bad")
        .join(shard.strip_prefix(tmp.join("shards")).unwrap());
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    let text = std::fs::read_to_string(&shard).unwrap();
    std::fs::write(&bad, text.replacen("{\"action\":{", "{\"action\": {", 1)).unwrap();
    // A sealed spool with a value the strict profile refuses.
    std::fs::create_dir_all(tmp.join("webhook")).unwrap();
    for args in [
        &[
            "record",
            "--privacy",
            "reference",
            "--spool",
            "[TMP]/webhook",
        ][..],
        &["seal", "--privacy", "reference", "[TMP]/webhook"],
    ] {
        let out = run_writer(tmp, WEBHOOK_EVENT, args);
        assert!(out.starts_with("exit: 0"), "{out}");
    }
    std::fs::create_dir_all(tmp.join("empty")).unwrap();
    std::fs::write(tmp.join("file"), "x").unwrap();
    let failing: [(&str, &[&str]); 7] = [
        ("missing source", &["[TMP]/nowhere"]),
        ("file source", &["[TMP]/file"]),
        ("unsealed spool", &["[TMP]/unsealed"]),
        ("strict privacy", &["[TMP]/webhook"]),
        ("non-canonical shard", &["[TMP]/bad"]),
        ("empty, then unsealed", &["[TMP]/empty", "[TMP]/unsealed"]),
        ("empty, then missing", &["[TMP]/empty", "[TMP]/nowhere"]),
    ];
    for (what, sources) in failing {
        for repo in ["new.git", "sub/dir/new.git"] {
            let mut args = vec!["publish", "--repo"];
            let repo_arg = format!("[TMP]/{repo}");
            args.push(&repo_arg);
            args.extend(sources);
            let out = run_cli(tmp, &args);
            assert!(!out.starts_with("exit: 0"), "{what}: {out}");
            assert!(!tmp.join(repo).exists(), "{what}: {repo} was left behind");
            assert!(
                !tmp.join("sub").exists(),
                "{what}: its parents were left behind"
            );
        }
        // An existing empty directory stays, empty.
        std::fs::create_dir_all(tmp.join("was-empty.git")).unwrap();
        let mut args = vec!["publish", "--repo", "[TMP]/was-empty.git"];
        args.extend(sources);
        assert!(!run_cli(tmp, &args).starts_with("exit: 0"), "{what}");
        assert_eq!(listing(&tmp.join("was-empty.git")), ["/"], "{what}");
    }
    // After a source that published nothing, the ref was not changed, and the message says so.
    insta::assert_snapshot!(
        "publish_empty_then_unsealed",
        run_cli(
            tmp,
            &[
                "publish",
                "--repo",
                "[TMP]/new.git",
                "[TMP]/empty",
                "[TMP]/unsealed"
            ]
        )
    );
    assert!(!tmp.join("new.git").exists());
    // A repository that existed is kept, with or without a ledger.
    Store::open_or_init_bare(&tmp.join("existing.git"), "refs/heads/main").unwrap();
    let out = run_cli(
        tmp,
        &["publish", "--repo", "[TMP]/existing.git", "[TMP]/unsealed"],
    );
    assert!(out.starts_with("exit: 1"), "{out}");
    assert!(Store::open(&tmp.join("existing.git")).is_ok());
    // A repository an earlier source of this run published into is kept.
    let out = run_cli(
        tmp,
        &[
            "publish",
            "--repo",
            "[TMP]/kept.git",
            "[TMP]/job",
            "[TMP]/unsealed",
        ],
    );
    insta::assert_snapshot!("publish_second_source_fails", out);
    let store = Store::open(&tmp.join("kept.git")).unwrap();
    assert!(store.tip("refs/heads/main").unwrap().is_some());
}

/// A repeated identical `record` says the event is unchanged instead of "recorded": phase
/// and generic inputs, and an exact replay after the producer was sealed; a different event
/// after the seal is refused. Stdout (the event, with the clock's `recorded_at`) is left out.
#[test]
fn repeated_record_says_unchanged() {
    let tmp = &temp_root();
    std::fs::create_dir_all(tmp.join("spool")).unwrap();
    let phase = r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":5},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":5},"retryable":true,"mutation":false}"#;
    let generic = r#"{"scope":"review","identity":"x","type":"review.started","component":"review","subject":{"repository":"openclaw/openclaw","kind":"cluster","clusterId":"c1"},"action":{"name":"review","status":"started","retryable":true,"mutation":false}}"#;
    let other = phase.replace("\"item\":5", "\"item\":6");
    let record = ["record", "--spool", "[TMP]/spool"];
    let without_stdout = |text: String| {
        let (head, rest) = text.split_once("--- stdout\n").unwrap();
        let (_, stderr) = rest.split_once("--- stderr\n").unwrap();
        format!("{head}{stderr}")
    };
    let mut steps = Vec::new();
    for (what, input) in [
        ("phase", phase),
        ("phase again", phase),
        ("generic", generic),
        ("generic again", generic),
    ] {
        steps.push(format!(
            "{what}: {}",
            without_stdout(run_writer(tmp, input, &record))
        ));
    }
    let sealed = run_cli(tmp, &["-q", "seal", "[TMP]/spool"]);
    assert!(sealed.starts_with("exit: 0"), "{sealed}");
    for (what, input) in [
        ("phase after the seal", phase),
        ("another after the seal", &other),
    ] {
        steps.push(format!(
            "{what}: {}",
            without_stdout(run_writer(tmp, input, &record))
        ));
    }
    insta::assert_snapshot!("record_repeated", steps.join("\n"));
}

/// A malformed producer lock (non-canonical, empty, not JSON) refuses `seal` and `record`
/// with the way out: the file may be removed when no writer is running.
#[test]
fn malformed_producer_lock_says_it_may_be_removed() {
    let tmp = &temp_root();
    let phase = r#"{"phase":"review.item","status":"started","component":"review-runner","identity":{"item":5},"subject":{"repository":"openclaw/openclaw","kind":"issue","number":5},"retryable":true,"mutation":false}"#;
    std::fs::create_dir_all(tmp.join("spool")).unwrap();
    let recorded = run_writer(tmp, phase, &["record", "--spool", "[TMP]/spool"]);
    assert!(recorded.starts_with("exit: 0"), "{recorded}");
    // The producer's lock sits beside its partition marker, under the same digest.
    let marker = walkdir::WalkDir::new(tmp.join("spool"))
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .find(|p| p.to_string_lossy().contains("/_partitions/"))
        .unwrap();
    let digest = marker.file_stem().unwrap().to_string_lossy().into_owned();
    let lock = tmp.join(format!(
        "spool/{}/_locks/{digest}.lock",
        crate::writer::spool::SPOOL_DIR
    ));
    let mut outputs = Vec::new();
    for content in ["{\"pid\": 1}\n", "", "not a lock\n"] {
        std::fs::write(&lock, content).unwrap();
        outputs.push(run_cli(tmp, &["seal", "[TMP]/spool"]));
        outputs.push(run_writer(
            tmp,
            phase,
            &["record", "--spool", "[TMP]/spool"],
        ));
    }
    insta::assert_snapshot!("malformed_producer_lock", outputs.join("\n"));
}

// ---- hooks install: no build path in the hook, the binary found at push time, bare only ----

/// Runs `git` in `dir` (test setup only); panics when it fails.
fn hooks_git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

/// Writes an executable shell script standing in for an `action-ledger` binary: it answers
/// `--version` with `action-ledger VERSION`, and for `verify` says NAME ran and exits CODE.
fn fake_ledger_bin(path: &Path, name: &str, version: &str, code: i32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        path,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '{version}'; exit 0; fi\n\
             echo \"{name} ran: $*\" >&2\nexit {code}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Feeds one ref update to the installed pre-receive hook of `repo` with exactly `vars` as
/// its environment (PATH holds only `tools`, where `git` and `cat` are linked, unless `path`
/// adds more); returns its exit code and stderr.
fn run_hook(repo: &Path, tools: &Path, path: Option<&Path>, vars: &[(&str, &str)]) -> String {
    use std::io::Write;
    let search = match path {
        Some(p) => format!("{}:{}", p.display(), tools.display()),
        None => tools.display().to_string(),
    };
    let mut child = std::process::Command::new("/bin/sh")
        .arg(repo.join("hooks/pre-receive"))
        .current_dir(repo)
        .env_clear()
        .env("PATH", search)
        .envs(vars.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let old = "1".repeat(40);
    let new = "2".repeat(40);
    let line = format!("{old} {new} refs/heads/main\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(line.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "exit: {}\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stderr).unwrap()
    )
}

/// `hooks install` writes a hook that names no build path and carries this version as its
/// minimum; at push time the hook runs $ACTION_LEDGER_BIN, else `git config actionLedger.bin`,
/// else `action-ledger` on PATH, and refuses (fail closed, saying what to install) when none
/// is found, when the one found is missing, not action-ledger, or older than the minimum.
#[test]
fn hooks_install_writes_no_build_path_and_the_hook_finds_its_binary() {
    let tmp = &temp_root();
    let installed = run_cli(tmp, &["hooks", "install", "--repo", "[TMP]/server.git"]);
    let server = tmp.join("server.git");
    let hook = std::fs::read_to_string(server.join("hooks/pre-receive")).unwrap();
    let exe = std::env::current_exe().unwrap();
    let build_dir = exe.parent().unwrap().parent().unwrap().to_string_lossy();
    assert!(
        !hook.contains(build_dir.as_ref()),
        "the hook names the build directory {build_dir}"
    );
    let version = env!("CARGO_PKG_VERSION");
    assert!(hook.contains(&format!("\nmin_version={version}\n")));

    // `git` and `cat` only: no action-ledger anywhere on this PATH.
    let tools = tmp.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    for tool in ["git", "cat"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|d| d.join(tool))
            .find(|p| p.is_file())
            .unwrap();
        std::os::unix::fs::symlink(found, tools.join(tool)).unwrap();
    }
    let bin = |name: &str| tmp.join(name).join("action-ledger");
    fake_ledger_bin(
        &bin("on-path"),
        "on-path",
        &format!("action-ledger {version}"),
        0,
    );
    fake_ledger_bin(&bin("configured"), "configured", "action-ledger 99.0.0", 0);
    fake_ledger_bin(
        &bin("from-env"),
        "from-env",
        &format!("action-ledger {version}"),
        0,
    );
    fake_ledger_bin(&bin("older"), "older", "action-ledger 0.0.1", 0);
    fake_ledger_bin(&bin("other-tool"), "other-tool", "other-tool 9.9.9", 0);
    fake_ledger_bin(
        &bin("finds-fault"),
        "finds-fault",
        "action-ledger 99.0.0",
        1,
    );
    let s = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
    let on_path = tmp.join("on-path");
    let mut steps = vec![format!("install:\n{installed}")];
    let mut step = |what: &str, path: Option<&Path>, vars: &[(&str, &str)]| {
        let text =
            run_hook(&server, &tools, path, vars).replace(&tmp.display().to_string(), "[TMP]");
        steps.push(format!("{what}:\n{text}"));
    };
    step("nothing found", None, &[]);
    step("on PATH", Some(&on_path), &[]);
    step(
        "missing $ACTION_LEDGER_BIN (no fallback)",
        Some(&on_path),
        &[("ACTION_LEDGER_BIN", &s(tmp.join("gone/action-ledger")))],
    );
    step(
        "older on $ACTION_LEDGER_BIN",
        Some(&on_path),
        &[("ACTION_LEDGER_BIN", &s(bin("older")))],
    );
    step(
        "not action-ledger",
        None,
        &[("ACTION_LEDGER_BIN", &s(bin("other-tool")))],
    );
    step(
        "a verifier with findings",
        None,
        &[("ACTION_LEDGER_BIN", &s(bin("finds-fault")))],
    );
    hooks_git(
        &server,
        &["config", "actionLedger.bin", &s(bin("configured"))],
    );
    step("git config beats PATH", Some(&on_path), &[]);
    step(
        "$ACTION_LEDGER_BIN beats git config",
        Some(&on_path),
        &[("ACTION_LEDGER_BIN", &s(bin("from-env")))],
    );
    hooks_git(&server, &["config", "actionLedger.bin", &s(bin("older"))]);
    step("older in git config", Some(&on_path), &[]);
    let transcript = steps.join("\n").replace(version, "[VERSION]");
    insta::assert_snapshot!("hooks_install_hook_finds_binary", transcript);
}

/// `--bin` sets `actionLedger.bin` (made absolute) after checking it is an executable file;
/// a bad `--bin` writes nothing; a later install without `--bin` keeps and reports it, and an
/// install without it reports the binary on PATH.
#[test]
fn hooks_install_bin_sets_the_config_and_is_checked_first() {
    let tmp = &temp_root();
    let version = env!("CARGO_PKG_VERSION");
    fake_ledger_bin(
        &tmp.join("bin/action-ledger"),
        "bin",
        "action-ledger 1.0.0",
        0,
    );
    std::fs::write(tmp.join("not-executable"), "").unwrap();
    let install = |bin: &str| {
        run_cli(
            tmp,
            &[
                "hooks",
                "install",
                "--repo",
                "[TMP]/server.git",
                "--bin",
                bin,
            ],
        )
    };
    let mut steps = Vec::new();
    for bad in ["[TMP]/missing", "[TMP]/not-executable", "[TMP]/bin"] {
        steps.push(install(bad));
        assert!(
            !tmp.join("server.git").exists(),
            "a bad --bin {bad} created the repository"
        );
    }
    steps.push(install("[TMP]/bin/action-ledger"));
    let server = tmp.join("server.git");
    assert_eq!(
        hooks_git(&server, &["config", "--get", "actionLedger.bin"]),
        tmp.join("bin/action-ledger").to_string_lossy()
    );
    // The hook refuses deletions itself (all but landed or refused pending publications).
    assert_eq!(
        hooks_git(&server, &["config", "--get", "receive.denyDeletes"]),
        "false"
    );
    assert_eq!(
        hooks_git(&server, &["config", "--get", "receive.denyNonFastForwards"]),
        "true"
    );
    steps.push(run_cli(
        tmp,
        &["hooks", "install", "--repo", "[TMP]/server.git"],
    ));
    // Without the config, the binary on the installer's PATH is reported.
    hooks_git(&server, &["config", "--unset", "actionLedger.bin"]);
    let env = Env::from([(
        "PATH".to_owned(),
        format!(
            "{}:{}",
            tmp.join("nowhere").display(),
            tmp.join("bin").display()
        ),
    )]);
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = ["action-ledger", "hooks", "install", "--repo"]
        .map(String::from)
        .into_iter()
        .chain([server.to_string_lossy().into_owned()]);
    let code = run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
    steps.push(format!(
        "exit: {code}\n--- stderr\n{}",
        String::from_utf8(err).unwrap()
    ));
    let transcript = steps
        .join("\n")
        .replace(&tmp.display().to_string(), "[TMP]")
        .replace(version, "[VERSION]");
    insta::assert_snapshot!("hooks_install_bin", transcript);
}

/// A repository with a work tree is refused, with nothing written, unless --allow-non-bare.
#[test]
fn hooks_install_refuses_a_work_tree_unless_allowed() {
    let tmp = &temp_root();
    std::fs::create_dir_all(tmp.join("work")).unwrap();
    hooks_git(&tmp.join("work"), &["init", "--quiet"]);
    let mut steps = Vec::new();
    for repo in ["[TMP]/work", "[TMP]/work/.git"] {
        steps.push(run_cli(tmp, &["hooks", "install", "--repo", repo]));
        assert!(
            !tmp.join("work/.git/hooks/pre-receive").exists(),
            "{repo}: the hook was written"
        );
        let config = std::fs::read_to_string(tmp.join("work/.git/config")).unwrap();
        assert!(
            !config.contains("denyDeletes"),
            "{repo}: the config was changed"
        );
    }
    steps.push(run_cli(
        tmp,
        &[
            "hooks",
            "install",
            "--repo",
            "[TMP]/work",
            "--allow-non-bare",
        ],
    ));
    assert!(tmp.join("work/.git/hooks/pre-receive").is_file());
    // A bare repository is accepted without the flag.
    hooks_git(tmp, &["init", "--quiet", "--bare", "bare.git"]);
    steps.push(run_cli(
        tmp,
        &["hooks", "install", "--repo", "[TMP]/bare.git"],
    ));
    let transcript = steps
        .join("\n")
        .replace(env!("CARGO_PKG_VERSION"), "[VERSION]");
    insta::assert_snapshot!("hooks_install_work_tree", transcript);
}

// ---------------------------------------------------------------------------------------------
// `--remote` on the commands that write the state repository: `action`, `run`, `sweep` and
// `compact` land on a remote by leased push, each machine with its own `--repo` cache.

/// Runs `git` with a clean configuration; panics when it fails.
fn git_ok(args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// What `reference` names in the bare repository `repo`; a test fails when it names nothing.
fn rev_parse(repo: &Path, reference: &str) -> String {
    git_ok(&["--git-dir", repo.to_str().unwrap(), "rev-parse", reference])
}

/// A bare remote at `path` whose HEAD is refs/heads/main; with `refusal`, its pre-receive hook
/// prints those lines and refuses every push.
fn bare_remote(path: &Path, refusal: Option<&str>) {
    Store::open_or_init_bare(path, "refs/heads/main").unwrap();
    if let Some(lines) = refusal {
        use std::os::unix::fs::PermissionsExt;
        let hook = path.join("hooks/pre-receive");
        std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
        std::fs::write(
            &hook,
            format!("#!/bin/sh\nprintf '%s\\n' '{lines}' >&2\nexit 1\n"),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// `verify` passes on the remote `[TMP]/remote.git` the test wrote through.
fn assert_remote_verifies(tmp: &Path) {
    let verified = run_cli(tmp, &["verify", "--repo", "[TMP]/remote.git"]);
    assert!(verified.starts_with("exit: 0"), "{verified}");
}

/// The record file `kind` of action `id` on the remote's refs/heads/main, if any.
fn remote_record(remote: &Path, id: &str, kind: &str) -> Option<String> {
    let id = crate::finality::ActionId::parse(id).unwrap();
    let store = Store::open(remote).unwrap();
    let tip = store.tip("refs/heads/main").unwrap();
    let snap = store.snapshot(tip).unwrap();
    let layout = crate::finality::layout::detect(&snap).unwrap().layout;
    let path = format!("{}/{kind}.json", layout.action_dir(&id));
    snap.read(&path, u64::MAX)
        .unwrap()
        .map(|b| String::from_utf8(b).unwrap())
}

/// `args` with `extra` inserted before the `--` that starts a command (at the end when there
/// is none), so that flags stay flags.
fn before_command<'a>(args: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let at = args.iter().position(|x| *x == "--").unwrap_or(args.len());
    let mut a = args.to_vec();
    a.splice(at..at, extra.iter().copied());
    a
}

/// Every finality command writes through `--remote` from its own cache repository: each sees
/// the others' records on the remote, the caches' own refs never move, a lost claim is
/// EXECUTION_CLAIM_CONFLICT and `action show --remote` reads the winner back.
#[test]
fn finality_commands_write_through_a_remote() {
    let tmp = &temp_root();
    let remote = tmp.join("remote.git");
    bare_remote(&remote, None);
    let on = |cache: &str, now: &str, args: &[&str]| {
        let repo = format!("[TMP]/{cache}.git");
        let extra = ["--remote", "[TMP]/remote.git", "--repo", repo.as_str()];
        run_finality(tmp, now, &before_command(args, &extra))
    };
    insta::assert_snapshot!(
        "remote_action_create",
        on(
            "creator",
            T0,
            &[
                "action",
                "create",
                "--id",
                "act_r",
                "--guard-decision",
                "gd_r",
                "--",
                "true"
            ]
        )
    );
    assert!(remote_record(&remote, "act_r", "action").is_some());
    insta::assert_snapshot!(
        "remote_action_claim",
        on(
            "machine-a",
            T0,
            &[
                "action",
                "claim",
                "--json",
                "act_r",
                "--attempt",
                "attempt-from-machine-a",
                "--",
                "true"
            ]
        )
    );
    insta::assert_snapshot!(
        "remote_action_claim_lost",
        on(
            "machine-b",
            T0,
            &[
                "action",
                "claim",
                "--json",
                "act_r",
                "--attempt",
                "attempt-from-machine-b",
                "--",
                "true"
            ]
        )
    );
    let show = on("machine-b", T1, &["action", "show", "--json", "act_r"]);
    assert!(
        show.contains(r#""attempt_id":"attempt-from-machine-a""#),
        "{show}"
    );
    insta::assert_snapshot!(
        "remote_action_outcome",
        on(
            "machine-c",
            T1,
            &[
                "action",
                "outcome",
                "act_r",
                "completed",
                "--attempt",
                "attempt-from-machine-a"
            ]
        )
    );
    assert!(
        remote_record(&remote, "act_r", "outcome")
            .unwrap()
            .contains(r#""status":"completed""#)
    );
    // `close` and `run` from yet other caches.
    on("creator", T0, &action_create(&[], "act_c", "gd_c"));
    insta::assert_snapshot!(
        "remote_action_close",
        on("machine-d", T1, &["action", "close", "act_c", "cancelled"])
    );
    let mut args = action_create(&[], "act_run", "gd_run");
    args.extend_from_slice(&["--", "true"]);
    on("creator", T0, &args);
    insta::assert_snapshot!(
        "remote_run",
        on(
            "runner",
            T1,
            &[
                "run",
                "--json",
                "--action",
                "act_run",
                "--attempt",
                "attempt-of-the-runner",
                "--",
                "true"
            ]
        )
    );
    assert!(
        remote_record(&remote, "act_run", "outcome")
            .unwrap()
            .contains("attempt-of-the-runner")
    );
    // A stale action swept from another cache. That cache never saw it: its first sweep only
    // sees it pending (on its own clock), its second, more than the timeout later, sweeps it.
    on("creator", T0, &action_create(&[], "act_stale", "gd_s"));
    let first = on("sweeper", T1, &["sweep", "--json"]);
    assert!(
        first.contains(r#""swept":0"#) && first.contains(r#""waiting":1"#),
        "{first}"
    );
    insta::assert_snapshot!("remote_sweep", on("sweeper", LATER, &["sweep", "--json"]));
    assert!(
        remote_record(&remote, "act_stale", "outcome")
            .unwrap()
            .contains("lost_confirmation")
    );
    // The caches only hold objects: no local ledger ref moved.
    for cache in [
        "creator",
        "machine-a",
        "machine-b",
        "machine-c",
        "machine-d",
        "runner",
        "sweeper",
    ] {
        let store = Store::open(&tmp.join(format!("{cache}.git"))).unwrap();
        assert_eq!(store.tip("refs/heads/main").unwrap(), None, "{cache}");
    }
    // --remote-ref names another ref on the remote; the default ref is untouched there.
    let main = rev_parse(&remote, "refs/heads/main");
    let other = on(
        "creator",
        T0,
        &action_create(&["--remote-ref", "refs/heads/other"], "act_o", "gd_o"),
    );
    assert!(other.starts_with("exit: 0"), "{other}");
    assert_eq!(rev_parse(&remote, "refs/heads/main"), main);
    rev_parse(&remote, "refs/heads/other");
    insta::assert_snapshot!(
        "remote_ref_requires_remote",
        run_finality(
            tmp,
            T0,
            &[
                "sweep",
                "--repo",
                "[TMP]/x.git",
                "--remote-ref",
                "refs/heads/x"
            ]
        )
    );
    assert_remote_verifies(tmp);
}

/// `compact --remote` folds the remote's months from a fresh cache and lands by leased push; a
/// second run from another cache changes nothing.
#[test]
fn compact_through_a_remote() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    bare_remote(&tmp.join("remote.git"), None);
    let published = run_cli(
        tmp,
        &[
            "-q",
            "publish",
            "--remote",
            "[TMP]/remote.git",
            "--repo",
            "[TMP]/p.git",
            "[TMP]/job",
        ],
    );
    assert!(published.starts_with("exit: 0"), "{published}");
    let compact = |cache: &str, extra: &[&str]| {
        let repo = format!("[TMP]/{cache}");
        let mut args = vec![
            "compact",
            "--remote",
            "[TMP]/remote.git",
            "--repo",
            repo.as_str(),
        ];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--now", "2026-05-01", "--retention-days", "1"]);
        run_cli(tmp, &args)
    };
    insta::assert_snapshot!("remote_compact_dry_run", compact("c0.git", &["--dry-run"]));
    insta::assert_snapshot!("remote_compact", compact("c1.git", &[]));
    insta::assert_snapshot!("remote_compact_again_json", compact("c2.git", &["--json"]));
    let segments = git_ok(&[
        "--git-dir",
        tmp.join("remote.git").to_str().unwrap(),
        "ls-tree",
        "-r",
        "--name-only",
        "refs/heads/main",
        "ledger/v1/segments/",
    ]);
    assert!(
        segments.contains("ledger/v1/segments/2026/03/segment-0001.jsonl"),
        "{segments}"
    );
    assert_remote_verifies(tmp);
}

/// A remote whose hook refuses the push: every writing command exits as `publish --remote`
/// does (1, the hook's lines in the message) and nothing lands; an unreachable remote is an
/// error (exit 2), for `run` the not-claimed exit 3.
#[test]
fn remote_refusals_are_reported_like_publish() {
    let tmp = &temp_root();
    let remote = tmp.join("remote.git");
    fixture_job(&tmp.join("job"));
    bare_remote(&remote, None);
    // Written before the hook exists: an action to claim, a stale one to sweep, shards to fold.
    let local = |now: &str, args: &[&str]| {
        run_finality(
            tmp,
            now,
            &before_command(args, &["--repo", "[TMP]/remote.git"]),
        )
    };
    local(T0, &action_create(&[], "act_h", "gd_h"));
    let mut run_args = action_create(&[], "act_hr", "gd_hr");
    run_args.extend_from_slice(&["--", "true"]);
    local(T0, &run_args);
    let published = run_cli(
        tmp,
        &["-q", "publish", "--repo", "[TMP]/remote.git", "[TMP]/job"],
    );
    assert!(published.starts_with("exit: 0"), "{published}");
    bare_remote(&remote, Some("policy: this server takes no pushes today"));
    let before = rev_parse(&remote, "refs/heads/main");
    let via = |remote: &str, now: &str, args: &[&str]| {
        let extra = ["--remote", remote, "--repo", "[TMP]/cache.git"];
        run_finality(tmp, now, &before_command(args, &extra))
    };
    let hooked = "[TMP]/remote.git";
    // Commit ids also inside the JSON strings (after a `\t`, where `\b` does not match).
    let ids = regex::Regex::new(r"[0-9a-f]{40}").unwrap();
    let via = |remote: &str, now: &str, args: &[&str]| {
        ids.replace_all(&via(remote, now, args), "[COMMIT]")
            .into_owned()
    };
    insta::assert_snapshot!(
        "remote_refused",
        [
            via(
                hooked,
                T0,
                &[
                    "action",
                    "create",
                    "--id",
                    "act_new",
                    "--guard-decision",
                    "gd_n"
                ]
            ),
            via(
                hooked,
                T0,
                &[
                    "action",
                    "create",
                    "--json",
                    "--id",
                    "act_new",
                    "--guard-decision",
                    "gd_n"
                ]
            ),
            via(
                hooked,
                T0,
                &[
                    "action",
                    "claim",
                    "--json",
                    "act_h",
                    "--attempt",
                    "attempt-refused-by-hook"
                ]
            ),
            via(
                hooked,
                T0,
                &["action", "outcome", "act_h", "failed", "--error", "boom"]
            ),
            via(hooked, T0, &["action", "close", "act_h", "cancelled"]),
            via(
                hooked,
                T0,
                &[
                    "run",
                    "--action",
                    "act_hr",
                    "--attempt",
                    "attempt-refused-by-hook",
                    "--",
                    "true"
                ]
            ),
            {
                // The hooked cache's first sweep only sees act_h pending (two-phase sweep).
                via(hooked, T0, &["sweep"]);
                via(hooked, LATER, &["sweep"])
            },
            via(
                hooked,
                LATER,
                &["compact", "--now", "2026-05-01", "--retention-days", "1"]
            ),
        ]
        .join("\n")
    );
    assert_eq!(
        rev_parse(&remote, "refs/heads/main"),
        before,
        "a refused push changes nothing on the remote"
    );
    let missing = "[TMP]/no-such-remote.git";
    insta::assert_snapshot!(
        "remote_unreachable",
        [
            via(
                missing,
                T0,
                &[
                    "action",
                    "create",
                    "--id",
                    "act_u",
                    "--guard-decision",
                    "gd_u"
                ]
            ),
            via(
                missing,
                T0,
                &[
                    "action",
                    "claim",
                    "act_h",
                    "--attempt",
                    "attempt-no-remote-00"
                ]
            ),
            via(missing, T0, &["action", "show", "act_h"]),
            via(missing, T0, &["run", "--action", "act_h", "--", "true"]),
            via(missing, LATER, &["sweep"]),
            via(missing, LATER, &["compact"]),
        ]
        .join("\n")
    );
}

#[test]
fn maintain_migrates_a_flat_repository_once() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    create_command(tmp, repo, "act_one", "gd_1", &["true"]);
    create_command(tmp, repo, "act_two", "gd_2", &["true"]);
    let store = crate::store::Store::open(&tmp.join("state.git")).unwrap();
    crate::finality::test_support::flatten(&store);
    let show = || {
        run_finality(
            tmp,
            T0,
            &["action", "show", "--repo", repo, "--json", "act_two"],
        )
    };
    let before = show();
    insta::assert_snapshot!(
        "maintain_migrates",
        run_finality(tmp, T0, &["maintain", "--repo", repo])
    );
    assert_eq!(
        show(),
        before,
        "the migration changed what action show prints"
    );
    insta::assert_snapshot!(
        "maintain_json_after_migration",
        run_finality(tmp, T0, &["maintain", "--repo", repo, "--json"])
    );
    // With --json, a migration names the layout it moved from.
    let nibble = "[TMP]/nibble.git";
    create_command(tmp, nibble, "act_three", "gd_3", &["true"]);
    let store = crate::store::Store::open(&tmp.join("nibble.git")).unwrap();
    crate::finality::test_support::relayout(&store, crate::finality::layout::Layout::Nibble);
    insta::assert_snapshot!(
        "maintain_json_migrating_from_nibble",
        run_finality(tmp, T0, &["maintain", "--repo", nibble, "--json"])
    );
    // A repository whose records do not verify is not migrated; its packs are consolidated
    // all the same (a scheduled maintain keeps it compact while someone repairs it).
    let store =
        crate::store::Store::open_or_init_bare(&tmp.join("bad.git"), "refs/heads/main").unwrap();
    let opts = crate::finality::test_support::options("refs/heads/main");
    let action = crate::finality::test_support::new_action("act_bad");
    let at = crate::finality::test_support::at(T0);
    crate::finality::create_action(&store, &opts, &action, at).unwrap();
    crate::finality::test_support::flatten(&store);
    crate::finality::test_support::plant_unparsable_action(&store, "act_bad");
    let packs = |repo: &str| {
        std::fs::read_dir(tmp.join(repo).join("objects/pack"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "pack"))
                })
                .count()
            })
            .unwrap_or(0)
    };
    // Two more packs, so that there is something to consolidate.
    let sig = crate::finality::test_support::sig();
    for round in 0..2 {
        let tip = store.tip("refs/heads/main").unwrap();
        let files: Vec<(String, Vec<u8>)> = (0..40)
            .map(|i| {
                (
                    format!("other/{round}/{i}.txt"),
                    format!("{round} {i}\n").into_bytes(),
                )
            })
            .collect();
        let more = store.write_commit(tip, &files, "more", &sig).unwrap();
        store
            .update_ref("refs/heads/main", tip, more, "more")
            .unwrap();
    }
    assert!(packs("bad.git") >= 2, "{} pack(s)", packs("bad.git"));
    insta::assert_snapshot!(
        "maintain_refuses_an_unverified_repository",
        run_finality(tmp, T0, &["maintain", "--repo", "[TMP]/bad.git"])
    );
    assert_eq!(packs("bad.git"), 1);
}

/// A ref update takes the locks git's takes: with `packed-refs.lock` present (git's
/// `pack-refs` at work) `publish` and `action create` land at once on a packed ref, as
/// `git update-ref` would (the ref's own lock: `store::refs` tests).
#[test]
fn writers_take_exactly_the_ref_lock_git_takes() {
    let tmp = &temp_root();
    fixture_spool(&tmp.join("one"));
    run_cli(tmp, &["seal", "[TMP]/one"]);
    let create = |id: &str| {
        run_cli(
            tmp,
            &[
                "action",
                "create",
                "--repo",
                "[TMP]/state.git",
                "--id",
                id,
                "--guard-decision",
                "gd_l",
                "--agent",
                "a",
                "--principal",
                "p",
            ],
        )
    };
    std::fs::create_dir_all(tmp.join("state.git")).unwrap();
    let repo = tmp.join("state.git");
    let out = std::process::Command::new("git")
        .args(["init", "-q", "--bare", "--initial-branch=main"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = create("act_first");
    assert!(text.starts_with("exit: 0"), "{text}");
    // The ref packed, and then packed-refs.lock held: neither matters to a loose update.
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&repo)
        .args(["pack-refs", "--all"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!repo.join("refs/heads/main").exists(), "packed");
    std::fs::write(repo.join("packed-refs.lock"), "").unwrap();
    let started = std::time::Instant::now();
    let text = run_cli(tmp, &["publish", "--repo", "[TMP]/state.git", "[TMP]/one"]);
    assert!(text.starts_with("exit: 0"), "{text}");
    let text = create("act_second");
    assert!(text.starts_with("exit: 0"), "{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "no wait for a lock git does not take"
    );
    assert!(
        repo.join("packed-refs.lock").exists(),
        "git's lock is git's"
    );
    std::fs::remove_file(repo.join("packed-refs.lock")).unwrap();
}

/// Every writer through `--remote` (publish, action create/claim/outcome/close, run, sweep,
/// compact) refuses, with exit 1 and both commits named, to build on a remote ref that no
/// longer descends from the tip its cache last confirmed there (here: a force push of an
/// unrelated commit, then a rewind); the remote is left as it is. `--accept-rewritten-remote`
/// builds on it, and the writers after it need no flag.
#[test]
fn a_rewritten_remote_is_refused_by_every_remote_writer() {
    let tmp = &temp_root();
    let remote = tmp.join("remote.git");
    fixture_job(&tmp.join("job"));
    bare_remote(&remote, None);
    let via = |now: &str, args: &[&str]| {
        let extra = ["--remote", "[TMP]/remote.git", "--repo", "[TMP]/cache.git"];
        run_finality(tmp, now, &before_command(args, &extra))
    };
    let published = run_cli(
        tmp,
        &[
            "-q",
            "publish",
            "--remote",
            "[TMP]/remote.git",
            "--repo",
            "[TMP]/cache.git",
            "[TMP]/job",
        ],
    );
    assert!(published.starts_with("exit: 0"), "{published}");
    let mut run_args = action_create(&[], "act_rr", "gd_rr");
    run_args.extend_from_slice(&["--", "true"]);
    for args in [action_create(&[], "act_r", "gd_r"), run_args] {
        let out = via(T0, &args);
        assert!(out.starts_with("exit: 0"), "{out}");
    }
    let git_dir = remote.to_str().unwrap();
    let tree = rev_parse(&remote, "refs/heads/main^{tree}");
    let unrelated = git_ok(&[
        "-c",
        "user.name=someone",
        "-c",
        "user.email=someone@invalid",
        "--git-dir",
        git_dir,
        "commit-tree",
        tree.trim(),
        "-m",
        "force-pushed",
    ]);
    let parent = rev_parse(&remote, "refs/heads/main~1");
    let ids = regex::Regex::new(r"[0-9a-f]{40}").unwrap();
    for (what, new) in [("unrelated", unrelated.trim()), ("rewind", parent.trim())] {
        git_ok(&["--git-dir", git_dir, "update-ref", "refs/heads/main", new]);
        // Commit ids are shown as [COMMIT] (the store's unit test checks both are named).
        let shown = |out: String| ids.replace_all(&out, "[COMMIT]").into_owned();
        let outputs = [
            run_cli(
                tmp,
                &[
                    "publish",
                    "--remote",
                    "[TMP]/remote.git",
                    "--repo",
                    "[TMP]/cache.git",
                    "[TMP]/job",
                ],
            ),
            via(T0, &action_create(&[], "act_new", "gd_n")),
            via(T0, &action_create(&["--json"], "act_new", "gd_n")),
            via(
                T0,
                &[
                    "action",
                    "claim",
                    "act_r",
                    "--attempt",
                    "attempt-rewritten-0",
                ],
            ),
            via(T0, &["action", "close", "act_r", "cancelled"]),
            via(
                T0,
                &["action", "outcome", "act_rr", "failed", "--error", "boom"],
            ),
            via(T0, &["run", "--action", "act_r", "--", "true"]),
            via(LATER, &["sweep"]),
            via(
                LATER,
                &["compact", "--now", "2026-05-01", "--retention-days", "1"],
            ),
        ]
        .map(shown);
        insta::assert_snapshot!(format!("remote_rewritten_{what}"), outputs.join("\n"));
        assert_eq!(
            rev_parse(&remote, "refs/heads/main").trim(),
            new,
            "{what}: a refused writer moved the remote"
        );
    }
    // Accepted once: built on, and the next writer needs no flag.
    let accepted = via(
        T0,
        &action_create(&["--accept-rewritten-remote"], "act_after", "gd_a"),
    );
    assert!(accepted.starts_with("exit: 0"), "{accepted}");
    assert_eq!(
        rev_parse(&remote, "refs/heads/main~1").trim(),
        parent.trim(),
        "the accepted tip is the new commit's parent"
    );
    let next = via(T0, &action_create(&[], "act_next", "gd_x"));
    assert!(next.starts_with("exit: 0"), "{next}");
}

/// Issue 43 item 1: writers sharing one remote with clocks 2 h apart. A sweeper whose clock is
/// ahead never sweeps a claim made seconds ago (its first sweep only sees it, and the real
/// outcome report lands); one whose clock is behind says the records are from its future
/// (`clock_skew`, in `--json` too) and sweeps one timeout after its first sighting on its own
/// clock. The sightings live in each cache's git directory, under a name that holds no URL.
#[test]
fn sweep_times_actions_on_its_own_clock() {
    let tmp = &temp_root();
    let remote = tmp.join("remote.git");
    bare_remote(&remote, None);
    let on = |cache: &str, now: &str, args: &[&str]| {
        let repo = format!("[TMP]/{cache}.git");
        let extra = ["--remote", "[TMP]/remote.git", "--repo", repo.as_str()];
        run_finality(tmp, now, &before_command(args, &extra))
    };
    for id in ["act_fresh", "act_left"] {
        let mut args = action_create(&[], id, "gd_1");
        args.extend_from_slice(&["--", "true"]);
        let out = on("a", T0, &args);
        assert!(out.starts_with("exit: 0"), "{out}");
        let attempt = format!("attempt-a-{id}");
        let out = on(
            "a",
            T0,
            &[
                "action",
                "claim",
                id,
                "--attempt",
                attempt.as_str(),
                "--",
                "true",
            ],
        );
        assert!(out.starts_with("exit: 0"), "{out}");
    }
    const AHEAD: &str = "2026-03-01T14:00:05.000Z";
    const AHEAD_15: &str = "2026-03-01T14:15:05.000Z";
    const BEHIND: &str = "2026-03-01T10:00:00.000Z";
    const BEHIND_16: &str = "2026-03-01T10:16:00.000Z";
    // B, 2 h ahead: sees two pending actions, sweeps nothing, reports no skew (the records are
    // from its past).
    insta::assert_snapshot!(
        "sweep_clock_ahead_first",
        on("b", AHEAD, &["sweep", "--json"])
    );
    // A's real report, seconds after the claim on A's clock: accepted.
    let reported = on(
        "a",
        T1,
        &[
            "action",
            "outcome",
            "act_fresh",
            "completed",
            "--attempt",
            "attempt-a-act_fresh",
        ],
    );
    assert!(reported.starts_with("exit: 0"), "{reported}");
    // C, 2 h behind: the records are from its future; said, and not acted on.
    insta::assert_snapshot!(
        "sweep_clock_behind_first",
        on("c", BEHIND, &["sweep", "--json"])
    );
    // Exactly the timeout after B's first sighting: still not (strictly more is the rule).
    let again = on("b", AHEAD_15, &["sweep", "--json"]);
    assert!(again.contains(r#""swept":0"#), "{again}");
    // C, 16 min later on its own clock: sweeps act_left, and still names the skew.
    insta::assert_snapshot!(
        "sweep_clock_behind_second",
        on("c", BEHIND_16, &["sweep", "--json"])
    );
    assert!(
        remote_record(&remote, "act_left", "outcome")
            .unwrap()
            .contains("lost_confirmation")
    );
    assert!(
        remote_record(&remote, "act_fresh", "outcome")
            .unwrap()
            .contains(r#""status":"completed""#)
    );
    // The sighting files: in each cache's git directory, named by a digest, without the URL.
    for cache in ["b", "c"] {
        let dir = tmp.join(format!("{cache}.git/action-ledger"));
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("sweep-observations-"))
            .collect();
        assert_eq!(names.len(), 1, "{cache}: {names:?}");
        let text = std::fs::read_to_string(dir.join(&names[0])).unwrap();
        assert!(!text.contains("remote.git"), "{text}");
    }
    // A local repository: `action create` here is witnessed, so one sweep after the timeout
    // sweeps (the reference's rule for one writer); removing the sightings delays it.
    let repo = "[TMP]/state.git";
    let out = run_finality(
        tmp,
        T0,
        &action_create(&["--repo", repo], "act_local", "gd_2"),
    );
    assert!(out.starts_with("exit: 0"), "{out}");
    let state_dir = tmp.join("state.git/action-ledger");
    std::fs::remove_dir_all(&state_dir).unwrap();
    let lost = run_finality(tmp, LATER, &["sweep", "--json", "--repo", repo]);
    assert!(
        lost.contains(r#""swept":0"#) && lost.contains(r#""waiting":1"#),
        "{lost}"
    );
    // A file that cannot be read is ignored with a note: sweeps wait, never advance.
    for entry in std::fs::read_dir(&state_dir).unwrap() {
        std::fs::write(entry.unwrap().path(), b"{not json").unwrap();
    }
    insta::assert_snapshot!(
        "sweep_observations_unreadable",
        run_finality(tmp, "2026-03-01T13:16:00.000Z", &["sweep", "--repo", repo])
    );
}

// ---- Issue 43 item 12: leftovers (ledger ref, log vs verify, --range, duplicates, debris).

/// `git --git-dir REPO ARGS` with a fixed identity and no user configuration; its stdout.
fn git_in(repo: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@invalid")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@invalid")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A test signature.
fn tester() -> Signature {
    Signature {
        name: "tester".into(),
        email: "tester@invalid".into(),
        time_seconds: 1_768_480_496,
    }
}

/// The day1 job published to `refs/heads/main` of `[TMP]/state.git`, then a second commit on
/// main that adds only a file outside the ledger; returns the store.
fn published_twice(tmp: &Path) -> Store {
    fixture_job(&tmp.join("job"));
    let out = run_cli(
        tmp,
        &["-q", "publish", "--repo", "[TMP]/state.git", "[TMP]/job"],
    );
    assert!(out.starts_with("exit: 0"), "{out}");
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap().unwrap();
    let next = store
        .write_commit_with(
            Some(tip),
            &[("NOTES".to_owned(), b"not ledger data\n".to_vec())],
            &[],
            true,
            "notes",
            &tester(),
        )
        .unwrap();
    store
        .update_ref("refs/heads/main", Some(tip), next, "notes")
        .unwrap();
    store
}

/// Item 1: without --rev, `verify` and `log` read the ledger ref (`--ref`, default
/// refs/heads/main, the ref `publish --ref` writes), not `HEAD`, even when `HEAD` names another
/// branch; a ledger ref that does not exist is an error naming it and the refs there are.
#[test]
fn verify_and_log_read_the_ledger_ref_not_head() {
    let tmp = &temp_root();
    let store = published_twice(tmp);
    let scratch = store
        .write_commit_with(
            None,
            &[("README".to_owned(), b"scratch\n".to_vec())],
            &[],
            true,
            "scratch",
            &tester(),
        )
        .unwrap();
    store
        .update_ref("refs/heads/scratch", None, scratch, "scratch")
        .unwrap();
    git_in(
        &tmp.join("state.git"),
        &["symbolic-ref", "HEAD", "refs/heads/scratch"],
    );
    let repo = ["--repo", "[TMP]/state.git"];
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(repo);
        run_cli(tmp, &all)
    };
    let outputs = [
        cli(&["verify"]),
        cli(&["log", "--type", "repair.plan"]),
        cli(&["verify", "--ref", "refs/heads/main"]),
        // HEAD still works when asked for by name.
        cli(&["verify", "--rev", "HEAD"]),
        cli(&["verify", "--ref", "refs/heads/ledger"]),
        cli(&["log", "--ref", "refs/heads/ledger"]),
        cli(&["log", "--rev", "refs/heads/next"]),
        cli(&["verify", "--ref", "refs/heads/main", "--rev", "HEAD"]),
    ];
    insta::assert_snapshot!("item12_ledger_ref_not_head", outputs.join("\n"));
    assert!(outputs[0].starts_with("exit: 0"), "{}", outputs[0]);
    assert!(
        outputs[0].contains("verified refs/heads/main") && !outputs[0].contains(" 0 shard(s)"),
        "{}",
        outputs[0]
    );
    assert!(outputs[1].contains("repair.plan"), "{}", outputs[1]);
    for missing in &outputs[4..7] {
        assert!(missing.starts_with("exit: 2"), "{missing}");
        assert!(missing.contains("refs/heads/main"), "{missing}");
    }
    // Before anything is published the log is empty, but a --ref that is no ref name is still
    // an error naming it.
    let fresh = &temp_root();
    Store::open_or_init_bare(&fresh.join("state.git"), "refs/heads/main").unwrap();
    let empty = run_cli(fresh, &["log", "--repo", "[TMP]/state.git"]);
    assert!(empty.starts_with("exit: 0"), "{empty}");
    let bad = run_cli(
        fresh,
        &["log", "--repo", "[TMP]/state.git", "--ref", "main"],
    );
    assert!(bad.starts_with("exit: 2") && bad.contains("main"), "{bad}");
}

/// Item 3: `--range` reads as git reads it: an empty side is HEAD, `~`/`^` and tags resolve
/// as `git rev-parse` resolves them, `A...B` and forms without one `..` are refused with what
/// to write instead, an unknown name is an error naming it.
#[test]
fn verify_range_reads_revisions_as_git_does() {
    let tmp = &temp_root();
    let store = published_twice(tmp);
    let first = store.resolve("main~1").unwrap().to_hex();
    git_in(&tmp.join("state.git"), &["tag", "v1", &first]);
    let zero = "0".repeat(40);
    let members = [
        "..HEAD".to_owned(),
        "HEAD~1..".to_owned(),
        "..main~1".to_owned(),
        "HEAD~1..HEAD".to_owned(),
        "main^..main".to_owned(),
        format!("{zero}..v1"),
        "v1..main".to_owned(),
        "main~1...main".to_owned(),
        "v1..nope".to_owned(),
        "HEAD".to_owned(),
        "v1..main..main".to_owned(),
    ];
    let mut outputs = Vec::new();
    for range in &members {
        let out = run_cli(
            tmp,
            &["verify", "--repo", "[TMP]/state.git", "--range", range],
        );
        outputs.push(format!("=== --range {range}\n{out}"));
    }
    insta::assert_snapshot!("item12_verify_range_members", outputs.join("\n"));
    let code = |i: usize| outputs[i].lines().nth(1).unwrap_or("").to_owned();
    assert_eq!(code(0), "exit: 0", "..HEAD is HEAD..HEAD: nothing pushed");
    assert!(outputs[0].contains(": 0 shard(s)"), "{}", outputs[0]);
    assert_eq!(code(1), "exit: 0");
    assert_eq!(code(2), "exit: 1", "HEAD..main~1 goes backwards");
    assert!(outputs[2].contains("not-descendant"), "{}", outputs[2]);
    assert_eq!(code(5), "exit: 0");
    assert!(!outputs[5].contains(": 0 shard(s)"), "{}", outputs[5]);
    for refused in [7, 8, 9, 10] {
        assert_eq!(code(refused), "exit: 2", "{}", outputs[refused]);
    }
    assert!(
        outputs[7].contains("symmetric difference"),
        "{}",
        outputs[7]
    );
    assert!(outputs[8].contains("nope"), "{}", outputs[8]);
}

/// Item 2: `log` stops (exit 2) at a shard `verify` refuses for its set, here a shard moved to
/// a path its events' identity does not give, naming the shard and verify's rule
/// (`shard-path`); none of its events is printed.
#[test]
fn log_refuses_a_shard_that_verify_refuses_for_its_set() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    let out = run_cli(
        tmp,
        &["-q", "publish", "--repo", "[TMP]/state.git", "[TMP]/job"],
    );
    assert!(out.starts_with("exit: 0"), "{out}");
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap().unwrap();
    let snap = store.snapshot(Some(tip)).unwrap();
    let first = snap.list_files(crate::ledger::shard::EVENTS_ROOT).unwrap()[0].clone();
    let bytes = snap.read(&first, u64::MAX).unwrap().unwrap();
    let moved = first.replace("/2026/03/10/", "/2026/03/09/");
    assert_ne!(moved, first);
    let bad = store
        .write_commit_with(
            Some(tip),
            &[(moved, bytes)],
            std::slice::from_ref(&first),
            true,
            "moved",
            &tester(),
        )
        .unwrap();
    store
        .update_ref("refs/heads/main", Some(tip), bad, "moved")
        .unwrap();
    let log = run_cli(tmp, &["log", "--repo", "[TMP]/state.git"]);
    let verify = run_cli(tmp, &["-q", "verify", "--repo", "[TMP]/state.git"]);
    insta::assert_snapshot!("item12_log_moved_shard", format!("{log}\n{verify}"));
    assert!(log.starts_with("exit: 2"), "{log}");
    assert!(log.contains("shard-path"), "{log}");
    assert!(log.contains("--- stdout\n--- stderr"), "{log}");
    assert!(verify.contains("shard-path"), "{verify}");
}

/// Item 4: an action whose records are also at the other layout's place (two copies of one
/// id) is refused by `action show`, naming both places, rather than one copy picked; so is
/// one whose only copy is at the other layout's place (not reported NOT_FOUND), and a claim
/// on either. `verify` reports the copy (`finality-layout-mixed`).
#[test]
fn action_show_refuses_an_action_present_twice() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let mut args = action_create(&["--repo", repo], "act_twice", "gd_1");
    args.extend_from_slice(&["--", "echo", "hi"]);
    let out = run_finality(tmp, T0, &args);
    assert!(out.starts_with("exit: 0"), "{out}");
    let store = Store::open(&tmp.join("state.git")).unwrap();
    let tip = store.tip("refs/heads/main").unwrap().unwrap();
    let snap = store.snapshot(Some(tip)).unwrap();
    let id = crate::finality::ActionId::parse("act_twice").unwrap();
    let nibble = crate::finality::Layout::DEFAULT.action_dir(&id);
    let flat = crate::finality::Layout::Flat.action_dir(&id);
    let record = snap
        .read(&format!("{nibble}/action.json"), u64::MAX)
        .unwrap()
        .unwrap();
    let copy = (format!("{flat}/action.json"), record);
    let twice = store
        .write_commit_with(
            Some(tip),
            std::slice::from_ref(&copy),
            &[],
            true,
            "copy",
            &tester(),
        )
        .unwrap();
    let moved = store
        .write_commit_with(
            Some(tip),
            std::slice::from_ref(&copy),
            &[format!("{nibble}/action.json")],
            true,
            "moved",
            &tester(),
        )
        .unwrap();
    let mut outputs = Vec::new();
    for (name, commit) in [("twice", twice), ("moved", moved)] {
        let at = store.tip("refs/heads/main").unwrap();
        store
            .update_ref("refs/heads/main", at, commit, name)
            .unwrap();
        let show = run_finality(tmp, T1, &["action", "show", "--repo", repo, "act_twice"]);
        let json = run_finality(
            tmp,
            T1,
            &["action", "show", "--json", "--repo", repo, "act_twice"],
        );
        let claim = run_finality(
            tmp,
            T1,
            &[
                "action",
                "claim",
                "--repo",
                repo,
                "act_twice",
                "--",
                "echo",
                "hi",
            ],
        );
        let verify = run_cli(tmp, &["-q", "verify", "--repo", repo]);
        for out in [&show, &json, &claim] {
            assert!(out.starts_with("exit: 2"), "{name}: {out}");
            assert!(
                out.contains(&flat) && out.contains(&nibble),
                "{name}: {out}"
            );
        }
        assert!(json.contains("\"code\":\"CORRUPT_RECORD\""), "{json}");
        assert!(verify.contains("finality-layout-mixed"), "{name}: {verify}");
        outputs.push(format!("=== {name}\n{show}\n{json}\n{claim}"));
    }
    insta::assert_snapshot!("item12_action_present_twice", outputs.join("\n"));
}

/// Item 5: what killed writers left is removed and named: `publish` removes the staging
/// directory of a first publication killed while creating the repository; `maintain` removes
/// such directories and the temporary files in the repository (`debris_removed` with --json).
/// A live writer's are kept.
#[test]
fn killed_writers_debris_is_removed_and_named() {
    let tmp = &temp_root();
    fixture_job(&tmp.join("job"));
    let dead = 4_194_305; // above the kernel's maximum PID: never alive
    let staging = |n: u32| format!(".state.git.init-{dead}-0123456789ab-{n}");
    std::fs::create_dir_all(tmp.join(staging(0)).join("objects")).unwrap();
    let live = format!(
        ".state.git.init-{}-{}-9",
        std::process::id(),
        crate::durable::own_incarnation()
    );
    std::fs::create_dir_all(tmp.join(&live)).unwrap();
    let publish = run_cli(tmp, &["publish", "--repo", "[TMP]/state.git", "[TMP]/job"]);
    assert!(publish.starts_with("exit: 0"), "{publish}");
    assert!(!tmp.join(staging(0)).exists() && tmp.join(&live).exists());
    // A second killed creation, and a loose object's temporary file of a killed writer.
    std::fs::create_dir_all(tmp.join(staging(1))).unwrap();
    let fanout = tmp.join("state.git/objects/ab");
    std::fs::create_dir_all(&fanout).unwrap();
    let temp = format!("{}{dead}_0123456789ab_0_obj", crate::durable::TEMP_PREFIX);
    std::fs::write(fanout.join(&temp), b"x").unwrap();
    let maintain = run_cli(tmp, &["maintain", "--json", "--repo", "[TMP]/state.git"]);
    assert!(maintain.starts_with("exit: 0"), "{maintain}");
    assert!(!tmp.join(staging(1)).exists() && !fanout.join(&temp).exists());
    assert!(tmp.join(&live).exists(), "a live creator's staging is kept");
    let again = run_cli(tmp, &["maintain", "--repo", "[TMP]/state.git"]);
    insta::assert_snapshot!(
        "item12_debris_removed",
        [publish, maintain, again].join("\n")
    );
}

// --- Issue 51: `publish --expected-producer`, `--expected-FIELD` and `--expected-event-paths`.

/// Records one `review.item` event per component into the spool `spool` under the writer
/// environment with `changes` applied (one producer, so one shard, per component), seals it
/// with `--output spool-out`, and returns the environment and the sealed shard paths.
fn h51_sealed_spool(
    tmp: &Path,
    spool: &str,
    changes: &[(&str, &str)],
    components: &[&str],
) -> (Env, Vec<String>) {
    let mut env = writer_env();
    for (k, v) in changes {
        env.insert((*k).to_owned(), (*v).to_owned());
    }
    std::fs::create_dir_all(tmp.join(spool)).unwrap();
    for (item, component) in (1..).zip(components) {
        let input = format!(
            r#"{{"phase":"review.item","status":"started","component":"{component}","identity":{{"item":{item}}},"subject":{{"repository":"openclaw/openclaw","kind":"issue","number":{item}}},"retryable":true,"mutation":false}}"#
        );
        let out = run_in(
            tmp,
            &env,
            &input,
            &["-q", "record", "--spool", &format!("[TMP]/{spool}")],
        );
        assert!(out.starts_with("exit: 0"), "{out}");
    }
    let sealed = run_in(
        tmp,
        &env,
        "",
        &[
            "-q",
            "seal",
            "--paths",
            "--output",
            &format!("[TMP]/{spool}-out"),
            &format!("[TMP]/{spool}"),
        ],
    );
    assert!(sealed.starts_with("exit: 0"), "{sealed}");
    let json = sealed
        .lines()
        .find(|l| l.starts_with("{\"paths\""))
        .unwrap();
    let paths: serde_json::Value = serde_json::from_str(json).unwrap();
    let paths = paths["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect();
    (env, paths)
}

/// The ledger ref of `state.git` below `tmp` (or `none`).
fn h51_tip(tmp: &Path) -> String {
    Store::open(&tmp.join("state.git"))
        .ok()
        .and_then(|s| s.tip("refs/heads/main").unwrap())
        .map_or("none".into(), |c| c.to_hex())
}

/// `--expected-producer` takes the expected producer run from the job's `GITHUB_*` variables
/// (as `record` derives it) and publishes a spool of that run; a spool another job wrote
/// (another run id, job, workflow, repository, sha or run attempt) is refused naming the shard,
/// the field and where the expected value came from (exit 1, ref unchanged). Each
/// `--expected-FIELD` (and `--expected-producer-job`, the reference's name for the job) replaces
/// one field and turns the check on by itself; a field with neither flag nor variable is an
/// error naming both (exit 2).
#[test]
fn h51_expected_producer_refuses_another_jobs_spool() {
    let tmp = &temp_root();
    let component = ["review-runner"];
    let (env, _) = h51_sealed_spool(tmp, "own", &[], &component);
    let others: [(&str, &[(&str, &str)]); 6] = [
        ("other-run", &[("GITHUB_RUN_ID", "2234567891")]),
        ("other-job", &[("GITHUB_JOB", "lint")]),
        (
            "other-workflow",
            &[("GITHUB_WORKFLOW", "ClawSweeper Repair")],
        ),
        (
            "other-repository",
            &[("GITHUB_REPOSITORY", "openclaw/openclaw")],
        ),
        (
            "other-sha",
            &[("GITHUB_SHA", "fedcba9876543210fedcba9876543210fedcba98")],
        ),
        ("other-attempt", &[("GITHUB_RUN_ATTEMPT", "2")]),
    ];
    for (name, changes) in others {
        h51_sealed_spool(tmp, name, changes, &component);
    }
    let publish = |env: &Env, flags: &[&str], source: &str| {
        let mut args = vec!["publish", "--repo", "[TMP]/state.git"];
        args.extend_from_slice(flags);
        let source = format!("[TMP]/{source}");
        args.push(&source);
        format!(
            "$ publish {} {source}\n{}",
            flags.join(" "),
            run_in(tmp, env, "", &args)
        )
    };
    let mut steps = vec![publish(&env, &["--expected-producer"], "own")];
    assert!(steps[0].contains("exit: 0"), "{}", steps[0]);
    let tip = h51_tip(tmp);
    for (name, _) in others {
        let out = publish(&env, &["--expected-producer"], name);
        assert!(out.contains("exit: 1"), "{out}");
        steps.push(out);
    }
    // The reference's publishing job: the current run's identity, another job named.
    let out = publish(&env, &["--expected-producer-job", "review"], "other-job");
    assert!(out.contains("exit: 1"), "{out}");
    steps.push(out);
    assert_eq!(h51_tip(tmp), tip, "no refusal moved the ref");
    let out = publish(&env, &["--expected-producer-job", "lint"], "other-job");
    assert!(out.contains("exit: 0") && out.contains("created"), "{out}");
    steps.push(out);
    // Every field by flag, without any GITHUB_* variable: the attempt differs.
    let bare = Env::from([("SOURCE_DATE_EPOCH".to_owned(), "1768480496".to_owned())]);
    let workflow = format!(
        "ClawSweeper-Review-{}",
        crate::identity::Digest::of("ClawSweeper Review").prefix(12)
    );
    let all = [
        "--expected-repository",
        "openclaw/clawsweeper",
        "--expected-sha",
        "0123456789abcdef0123456789abcdef01234567",
        "--expected-workflow",
        &workflow,
        "--expected-job",
        "review",
        "--expected-run-id",
        "2234567890",
        "--expected-run-attempt",
    ];
    let mut flags = all.to_vec();
    flags.push("2");
    let out = publish(&bare, &flags, "own");
    assert!(out.contains("exit: 1"), "{out}");
    steps.push(out);
    let mut flags = all.to_vec();
    flags.push("1");
    let out = publish(&bare, &flags, "own");
    assert!(
        out.contains("exit: 0") && out.contains("unchanged"),
        "{out}"
    );
    steps.push(out);
    // A field with neither its flag nor its variable.
    let out = publish(&bare, &["--expected-job", "review"], "own");
    assert!(out.contains("exit: 2"), "{out}");
    steps.push(out);
    insta::assert_snapshot!("h51_expected_producer", steps.join("\n"));
}

/// `--expected-event-paths`: a sealed spool publishes when its shards are exactly the listed
/// paths (repeated flags or commas); one listed that it does not hold (missing) or one it
/// holds that is not listed (extra) is refused naming the paths (exit 1, ref unchanged). From
/// a shard root only the listed files are read: a listed file that is absent is refused, an
/// unlisted one is not published. A list that is not sorted and unique is a usage error
/// naming the flag (exit 2).
#[test]
fn h51_expected_event_paths_must_match_the_source() {
    let tmp = &temp_root();
    let components = ["review-runner", "apply-runner"];
    let (env, own) = h51_sealed_spool(tmp, "own", &[], &components);
    assert_eq!(own.len(), 2, "{own:?}");
    let (_, next) = h51_sealed_spool(tmp, "next", &[("GITHUB_RUN_ID", "2234567891")], &components);
    let publish = |flags: &[String], source: &str| {
        let mut args = vec!["publish", "--repo", "[TMP]/state.git"];
        args.extend(flags.iter().map(String::as_str));
        let source = format!("[TMP]/{source}");
        args.push(&source);
        format!(
            "$ publish {} {source}\n{}",
            flags.join(" "),
            run_in(tmp, &env, "", &args)
        )
    };
    let flag = |paths: &[&String]| {
        vec![
            "--expected-event-paths".to_owned(),
            paths
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ]
    };
    let mut steps = Vec::new();
    let repeated: Vec<String> = own
        .iter()
        .flat_map(|p| ["--expected-event-paths".to_owned(), p.clone()])
        .collect();
    let out = publish(&repeated, "own");
    assert!(out.contains("exit: 0") && out.contains("created"), "{out}");
    steps.push(out);
    let tip = h51_tip(tmp);
    // The spool holds a shard that is not listed (extra).
    let out = publish(&flag(&[&next[0]]), "next");
    assert!(out.contains("exit: 1") && out.contains(&next[1]), "{out}");
    steps.push(out);
    // The list names a shard the spool does not hold (missing): the first run's.
    let mut listed: Vec<&String> = next.iter().chain([&own[0]]).collect();
    listed.sort();
    let out = publish(&flag(&listed), "next");
    assert!(out.contains("exit: 1") && out.contains(&own[0]), "{out}");
    steps.push(out);
    // From the shard root: a listed file that is absent is refused.
    let out = publish(&flag(&listed), "next-out");
    assert!(out.contains("exit: 1"), "{out}");
    steps.push(out);
    // Not sorted: the reference's rule, named with the flag.
    let out = publish(&flag(&[&next[1], &next[0]]), "next");
    assert!(out.contains("exit: 2"), "{out}");
    steps.push(out);
    assert_eq!(h51_tip(tmp), tip, "no refusal moved the ref");
    // From the shard root only the listed file is read and published.
    let out = publish(&flag(&[&next[0]]), "next-out");
    assert!(
        out.contains("exit: 0") && out.contains("1 shard(s) new"),
        "{out}"
    );
    steps.push(out);
    insta::assert_snapshot!("h51_expected_event_paths", steps.join("\n"));
}

/// A provenance refusal under `--json`: no `publication` record for the refused source (the
/// records of sources before it stay on stdout), the `error:` line on stderr naming the shard,
/// the field and the flag, exit 1.
#[test]
fn h51_expected_refusal_under_json() {
    let tmp = &temp_root();
    let component = ["review-runner"];
    let (env, own) = h51_sealed_spool(tmp, "own", &[], &component);
    h51_sealed_spool(tmp, "other", &[("GITHUB_JOB", "lint")], &component);
    let out = run_in(
        tmp,
        &env,
        "",
        &[
            "publish",
            "--json",
            "--expected-producer",
            "--repo",
            "[TMP]/state.git",
            "[TMP]/own",
            "[TMP]/other",
        ],
    );
    assert!(out.starts_with("exit: 1"), "{out}");
    let (stdout, stderr) = out
        .split_once("--- stdout\n")
        .unwrap()
        .1
        .split_once("--- stderr\n")
        .unwrap();
    assert_eq!(stdout.lines().count(), 1, "{out}");
    let record: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (&record["type"], &record["status"]),
        (&"publication".into(), &"created".into())
    );
    assert!(stderr.contains("--expected-producer") || stderr.contains("$GITHUB_JOB"));
    assert!(
        !stderr.contains(&own[0]),
        "the refused shard is the other job's: {stderr}"
    );
    let paths = run_in(
        tmp,
        &env,
        "",
        &[
            "publish",
            "--json",
            "--expected-event-paths",
            &own[0],
            "--repo",
            "[TMP]/state.git",
            "[TMP]/other",
        ],
    );
    assert!(
        paths.starts_with("exit: 1\n--- stdout\n--- stderr\n"),
        "{paths}"
    );
    insta::assert_snapshot!("h51_expected_refusal_json", [out, paths].join("\n"));
}

/// `hooks admit` (what the pre-receive hook runs for refs under `refs/ledger/`): refs outside
/// the namespace are left alone; a forged pending publication and a ref elsewhere in the
/// namespace are refused with their rules (exit 1), while deleting a pending publication the
/// ledger already holds (here its tip's own) is admitted; a line that is not
/// `<old> <new> <ref>` is an input error (exit 2) naming the line.
#[test]
fn hooks_admit_judges_the_ledger_namespace_of_a_push() {
    let tmp = &temp_root();
    copy_day1_job(
        "001-openclaw-clawsweeper-review-r13550107154-a1",
        &tmp.join("a"),
    );
    let repo = tmp.join("state.git");
    run_cli(tmp, &["publish", "--repo", "[TMP]/state.git", "[TMP]/a"]);
    let tip = crate::store::Store::open(&repo)
        .unwrap()
        .tip("refs/heads/main")
        .unwrap()
        .unwrap()
        .to_hex();
    let zero = "0".repeat(40);
    let key = "a".repeat(64);
    let admit = |stdin: &str| {
        run_in(
            tmp,
            &Env::new(),
            stdin,
            &["hooks", "admit", "--repo", "[TMP]/state.git"],
        )
    };
    let outside = admit(&format!("{zero} {tip} refs/heads/other\n"));
    let forged = admit(&format!(
        "{zero} {tip} refs/ledger/incoming/{key}\n{tip} {zero} refs/ledger/incoming/{}\n{zero} {tip} refs/ledger/elsewhere\n",
        "b".repeat(64)
    ));
    let garbled = admit("not a push line\n");
    insta::assert_snapshot!("hooks_admit", format!("{outside}\n{forged}\n{garbled}"));
}

/// `action list`: open statuses from the pending index newest first, closed ones and no filter
/// by a walk, paging that says when more may follow, `--json`'s shape, and bad filters refused
/// (exit 2) naming the flag.
#[test]
fn h45_action_list() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    for (id, now, extra) in [
        ("act_a", T0, &[][..]),
        ("act_b", T1, &["--verdict", "require_approval"][..]),
        ("act_c", LATER, &[][..]),
        ("act_d", LATER, &["--verdict", "block"][..]),
    ] {
        let mut args = action_create(&["--repo", repo], id, "gd_1");
        args.extend_from_slice(extra);
        let out = run_finality(tmp, now, &args);
        assert!(out.starts_with("exit: 0"), "{out}");
    }
    let out = run_finality(
        tmp,
        LATER,
        &["action", "close", "--repo", repo, "act_a", "completed"],
    );
    assert!(out.starts_with("exit: 0"), "{out}");
    let list = |args: &[&str]| {
        let mut all = vec!["action", "list", "--repo", repo];
        all.extend_from_slice(args);
        let out = run_finality(tmp, LATER, &all);
        format!("$ action list {}\n{out}", args.join(" "))
    };
    let steps = [
        list(&["--status", "running"]),
        list(&["--status", "pending_approval", "--json"]),
        list(&["--status", "completed"]),
        list(&[]),
        list(&["--limit", "1"]),
        list(&["--limit", "1", "--offset", "3"]),
        list(&["--agent", "nobody"]),
        list(&["--limit", "0"]),
        list(&["--status", "done"]),
        list(&["--outcome-status", "running"]),
    ];
    assert!(steps[0].contains("act_c") && !steps[0].contains("act_a"));
    assert!(steps[4].contains("more may follow"), "{}", steps[4]);
    for bad in &steps[7..] {
        assert!(bad.contains("exit: 2"), "{bad}");
    }
    assert!(steps[7].contains("--limit"), "{}", steps[7]);
    insta::assert_snapshot!("h45_action_list", steps.join("\n"));
}

/// `project`: a view printed, saved and brought up to date from the saved file (the same
/// bytes as a full fold), the Markdown of the review history, a legacy projection compared
/// (exit 1 naming the path, 0 when equal), and the refusals (exit 2, nothing written).
#[test]
fn project_views_save_resume_and_compare() {
    let tmp = &temp_root();
    let jobs = [
        "001-openclaw-clawsweeper-review-r13550107154-a1",
        "002-openclaw-openclaw-route-command-r13550108354-a1",
        "011-openclaw-clawsweeper-deliver-r13550418202-a1",
    ];
    for job in jobs {
        copy_day1_job(job, &tmp.join(job));
    }
    let publish = |job: &str| {
        let out = run_cli(
            tmp,
            &[
                "-q",
                "publish",
                "--repo",
                "[TMP]/state.git",
                &format!("[TMP]/{job}"),
            ],
        );
        assert!(out.starts_with("exit: 0"), "{out}");
    };
    publish(jobs[0]);
    publish(jobs[1]);
    let repo = ["--repo", "[TMP]/state.git"];
    let project = |args: &[&str]| run_cli(tmp, &[&["project"][..], args, &repo].concat());
    let command = project(&[
        "commands",
        "--subject",
        "openclaw/openclaw#41379",
        "--save",
        "[TMP]/commands.json",
    ]);
    let saved_status = project(&["status", "--limit", "2", "--save", "[TMP]/status.json"]);
    assert!(saved_status.starts_with("exit: 0"), "{saved_status}");
    let markdown = project(&[
        "review-history",
        "--markdown",
        "--limit",
        "3",
        "--subject",
        "openclaw/openclaw#41101",
    ]);
    publish(jobs[2]);
    let lines = project(&[
        "notifications",
        "--limit",
        "2",
        "--subject",
        "openclaw/clawhub",
    ]);
    // Up to date from the saved file: only the third job's events are folded, and the bytes
    // are those of a full fold with the same limit.
    let resumed = project(&["status", "--json", "--from", "[TMP]/status.json"]);
    let full = project(&["status", "--json", "--limit", "2"]);
    let stdout = |s: &str| {
        s.split_once("--- stdout\n")
            .unwrap()
            .1
            .split_once("--- stderr\n")
            .unwrap()
            .0
            .to_owned()
    };
    assert!(resumed.starts_with("exit: 0"), "{resumed}");
    assert_eq!(stdout(&resumed), stdout(&full));
    assert!(
        resumed.contains("(196 new since the checkpoint of [TMP]/status.json)"),
        "{resumed}"
    );
    // A saved view keeps its filter: brought up to date, it is the full fold of that filter.
    let command_full = project(&["commands", "--json", "--subject", "openclaw/openclaw#41379"]);
    let command_resumed = project(&["commands", "--json", "--from", "[TMP]/commands.json"]);
    assert!(command_full.contains("\"schema\": \"action-ledger.project.commands.v1\""));
    assert_eq!(stdout(&command_resumed), stdout(&command_full));
    // The same fold of a remote's tip, through a cache repository.
    let remote = run_cli(
        tmp,
        &[
            "project",
            "status",
            "--json",
            "--limit",
            "2",
            "--remote",
            "[TMP]/state.git",
            "--repo",
            "[TMP]/cache.git",
        ],
    );
    assert!(remote.starts_with("exit: 0"), "{remote}");
    assert_eq!(stdout(&remote), stdout(&full));
    // Compare: the saved commands file still equals the fold (the third job has no command);
    // an edited copy differs at one path.
    let equal = project(&[
        "commands",
        "--subject",
        "openclaw/openclaw#41379",
        "--compare",
        "[TMP]/commands.json",
    ]);
    let text = std::fs::read_to_string(tmp.join("commands.json")).unwrap();
    let edited = text.replacen("\"status\": \"completed\"", "\"status\": \"failed\"", 1);
    assert_ne!(edited, text);
    std::fs::write(tmp.join("legacy.json"), edited).unwrap();
    let differs = project(&[
        "commands",
        "--subject",
        "openclaw/openclaw#41379",
        "--compare",
        "[TMP]/legacy.json",
    ]);
    std::fs::write(tmp.join("bad.json"), "{\"schema\":\"other\"}").unwrap();
    let refusals = [
        project(&["status", "--markdown"]),
        project(&["commands", "--dot"]),
        project(&["status", "--from", "[TMP]/bad.json"]),
        project(&["status", "--from", "[TMP]/commands.json"]),
        project(&["status", "--from", "[TMP]/status.json", "--limit", "3"]),
        project(&["status", "--compare", "[TMP]/missing.json"]),
    ];
    for r in &refusals {
        assert!(r.starts_with("exit: 2"), "{r}");
    }
    insta::assert_snapshot!(
        "project_views",
        [command, markdown, equal, differs, refusals.join("\n")].join("\n")
    );
    insta::assert_snapshot!("project_view_lines", lines);
}

/// Issue 45: `action cancel` cancels an action that was never claimed, once: the owner
/// cancels (text and `--json`), a second cancel and a cancel of a claimed action exit 1
/// NOT_CANCELLABLE, another `--principal` gets NOT_FOUND as for an unknown id, `--operator`
/// cancels another principal's action, and a claim after a cancel is refused.
#[test]
fn action_cancel_is_one_shot() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let created = |id: &str| {
        let args = action_create(&["--repo", repo], id, "gd_1");
        assert!(run_finality(tmp, T0, &args).starts_with("exit: 0"));
    };
    let cancel = |id: &str, extra: &[&str]| {
        let mut args = vec!["action", "cancel", "--repo", repo, id];
        args.extend_from_slice(extra);
        run_finality(tmp, T1, &args)
    };
    let mut out = Vec::new();
    created("act_cancel");
    let theirs = cancel("act_cancel", &["--principal", "eve", "--reason", "mine"]);
    let unknown = cancel("act_nope", &["--principal", "eve", "--reason", "mine"]);
    assert_eq!(
        theirs.replace("act_cancel", "ID"),
        unknown.replace("act_nope", "ID")
    );
    assert!(theirs.starts_with("exit: 1"), "{theirs}");
    out.push(theirs);
    let first = cancel("act_cancel", &["--reason", "not needed"]);
    assert!(first.starts_with("exit: 0"), "{first}");
    out.push(first);
    let again = cancel("act_cancel", &["--json", "--reason", "again"]);
    assert!(again.starts_with("exit: 1"), "{again}");
    out.push(again);
    let claim = [
        "action",
        "claim",
        "--repo",
        repo,
        "act_cancel",
        "--attempt",
        "attempt-0000000001",
    ];
    let refused = run_finality(tmp, T1, &claim);
    assert!(refused.starts_with("exit: 1"), "{refused}");
    out.push(refused);
    created("act_ops");
    let ops = cancel("act_ops", &["--operator", "--json", "--reason", "ops"]);
    assert!(ops.starts_with("exit: 0"), "{ops}");
    out.push(ops);
    created("act_claimed");
    let claim = [
        "action",
        "claim",
        "--repo",
        repo,
        "act_claimed",
        "--attempt",
        "attempt-0000000001",
    ];
    assert!(run_finality(tmp, T0, &claim).starts_with("exit: 0"));
    let late = cancel("act_claimed", &["--reason", "late"]);
    assert!(late.starts_with("exit: 1"), "{late}");
    out.push(late);
    insta::assert_snapshot!("action_cancel", out.join("\n"));
}

/// Stored free text reaches the terminal escaped: a cancel reason with an escape sequence, a
/// carriage return, a bell, a bidirectional override and a newline that forges a line is shown
/// by `action show` as `\u{…}` escapes on its one line (found by trying the product).
#[test]
fn action_show_escapes_what_a_terminal_would_act_on() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let args = action_create(&["--repo", repo], "act_esc", "gd_1");
    assert!(run_finality(tmp, T0, &args).starts_with("exit: 0"));
    let reason = "x\u{1b}[31mRED\u{1b}[0m\nprincipal:    mallory\r\u{7}\u{202e}txt";
    let cancel = [
        "action", "cancel", "--repo", repo, "act_esc", "--reason", reason,
    ];
    assert!(run_finality(tmp, T1, &cancel).starts_with("exit: 0"));
    let shown = run_finality(tmp, T1, &["action", "show", "--repo", repo, "act_esc"]);
    assert!(shown.starts_with("exit: 0"), "{shown}");
    assert!(
        !shown.contains(['\u{1b}', '\r', '\u{7}', '\u{202e}']),
        "{shown:?}"
    );
    assert!(!shown.contains("\nprincipal:    mallory"), "{shown}");
    assert!(
        shown.contains(r"x\u{1b}[31mRED\u{1b}[0m\u{a}principal:    mallory\u{d}\u{7}\u{202e}txt"),
        "{shown}"
    );
}

/// `action containment`: a contained action awaits promotion once its outcome is completed;
/// its creator may not resolve it; an operator promotes it once (the grant is shown running and
/// approved), a second verdict is refused with the status; a discard creates no grant (issue
/// 45).
#[test]
fn action_containment_promotes_or_discards_once() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let contained = |id: &str| {
        let mut args = action_create(&["--repo", repo], id, "gd_1");
        args.extend_from_slice(&[
            "--containment-ref",
            "sandbox/main",
            "--verdict",
            "allow_contained",
        ]);
        assert!(run_finality(tmp, T0, &args).starts_with("exit: 0"));
    };
    let complete = |id: &str| {
        let args = ["action", "outcome", "--repo", repo, id, "completed"];
        let done = run_finality(tmp, T0, &args);
        assert!(done.starts_with("exit: 0"), "{done}");
    };
    let resolve = |id: &str, extra: &[&str]| {
        let mut args = vec!["action", "containment", "--repo", repo, id];
        args.extend_from_slice(extra);
        run_finality(tmp, T1, &args)
    };
    let mut out = Vec::new();
    contained("act_box");
    let early = resolve("act_box", &["promote", "--principal", "ops-lead", "--json"]);
    assert!(early.starts_with("exit: 1"), "{early}");
    out.push(early);
    complete("act_box");
    let own = resolve("act_box", &["promote"]);
    assert!(own.starts_with("exit: 1"), "{own}");
    out.push(own);
    let promoted = resolve(
        "act_box",
        &[
            "promote",
            "--principal",
            "ops-lead",
            "--reasoning",
            "diff reviewed",
        ],
    );
    assert!(promoted.starts_with("exit: 0"), "{promoted}");
    out.push(promoted);
    let again = resolve(
        "act_box",
        &["discard", "--principal", "ops-other", "--json"],
    );
    assert!(again.starts_with("exit: 1"), "{again}");
    out.push(again);
    let shown = run_finality(tmp, T1, &["action", "show", "--repo", repo, "act_box"]);
    assert!(
        shown.contains("containment:  promoted by ops-lead"),
        "{shown}"
    );
    let grant = "promote_".to_owned() + &crate::identity::Digest::of(b"act_box").as_str()[..40];
    let grant_shown = run_finality(tmp, T1, &["action", "show", "--repo", repo, &grant]);
    assert!(
        grant_shown.contains("lifecycle:    running"),
        "{grant_shown}"
    );
    assert!(
        grant_shown.contains("approval:     approve by ops-lead"),
        "{grant_shown}"
    );
    contained("act_drop");
    complete("act_drop");
    let dropped = resolve(
        "act_drop",
        &["discard", "--principal", "ops-lead", "--json"],
    );
    assert!(dropped.starts_with("exit: 0"), "{dropped}");
    out.push(dropped);
    let verified = run_finality(tmp, T1, &["verify", "--repo", repo]);
    assert!(verified.starts_with("exit: 0"), "{verified}");
    insta::assert_snapshot!("action_containment", out.join("\n"));
}

/// Under `--json` every failed `action` command answers one JSON line on stdout: an `error`
/// record for a repository that cannot be opened (it printed nothing), the `refusal` record
/// otherwise, with what the HTTP 409 of a cancel carries (found by a fresh-eyes review).
#[test]
fn action_json_failures_answer_on_stdout() {
    use crate::canonical::Value;
    let tmp = &temp_root();
    let stdout_of = |out: &str| -> Vec<Value> {
        let body = out.split("--- stdout\n").nth(1).unwrap_or_default();
        let body = body.split("--- stderr\n").next().unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| crate::canonical::parse(l).unwrap())
            .collect()
    };
    for args in [
        vec![
            "action",
            "show",
            "--repo",
            "[TMP]/missing.git",
            "act_x",
            "--json",
        ],
        vec![
            "action",
            "cancel",
            "--repo",
            "[TMP]/missing.git",
            "act_x",
            "--reason",
            "r",
            "--json",
        ],
        vec!["action", "list", "--repo", "[TMP]/missing.git", "--json"],
    ] {
        let out = run_finality(tmp, T0, &args);
        assert!(out.starts_with("exit: 2"), "{out}");
        let lines = stdout_of(&out);
        assert_eq!(lines.len(), 1, "{args:?}: {out}");
        assert_eq!(lines[0].get("type").and_then(Value::as_str), Some("error"));
        assert_eq!(
            lines[0].get("code").and_then(Value::as_safe_integer),
            Some(2)
        );
    }
    let repo = "[TMP]/state.git";
    let args = action_create(&["--repo", repo], "act_src", "gd_1");
    assert!(run_finality(tmp, T0, &args).starts_with("exit: 0"));
    let claim = [
        "action",
        "claim",
        "--repo",
        repo,
        "act_src",
        "--attempt",
        "attempt-0000000001",
    ];
    assert!(run_finality(tmp, T0, &claim).starts_with("exit: 0"));
    let cancel = [
        "action", "cancel", "--repo", repo, "act_src", "--reason", "r", "--json",
    ];
    let refused = run_finality(tmp, T1, &cancel);
    assert!(refused.starts_with("exit: 1"), "{refused}");
    let lines = stdout_of(&refused);
    assert_eq!(lines.len(), 1, "{refused}");
    let r = &lines[0];
    assert_eq!(
        r.get("code").and_then(Value::as_str),
        Some("NOT_CANCELLABLE")
    );
    assert_eq!(
        r.get("outcome_status").and_then(Value::as_str),
        Some("pending")
    );
    assert_eq!(r.get("execution_claimed"), Some(&Value::Bool(true)));
}

/// The full action record through the CLI (issue 45): `action create --details` keeps the goal,
/// risk, systems, reversible, reasoning and the act, redacted; `show` (lines and `--json`) and
/// `list --json` answer them; bad details exit 2 naming the field and the rule and write
/// nothing; `verify` is clean.
#[test]
fn action_details_are_kept_redacted_and_shown() {
    use crate::canonical::Value;
    let tmp = &temp_root();
    let stdout_of = |out: &str| -> Vec<Value> {
        let body = out.split("--- stdout\n").nth(1).unwrap_or_default();
        let body = body.split("--- stderr\n").next().unwrap_or_default();
        body.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| crate::canonical::parse(l).unwrap())
            .collect()
    };
    let repo = "[TMP]/state.git";
    let details = r#"{"declared_goal":"rotate the key; old one was password=hunter22","risk_score":70,"systems_touched":["vault","github"],"reversible":false,"reasoning":"it leaked","assumptions":["nobody deploys meanwhile"]}"#;
    for (bad, want) in [
        (
            r#"{"risk_score":101}"#,
            "--details: risk_score must be <= 100",
        ),
        (
            r#"{"systems_touched":[1]}"#,
            "--details: systems_touched[0] must be a string",
        ),
        (
            r#"{"mood":"good"}"#,
            "--details: mood is not a detail field",
        ),
        (r#"[1]"#, "--details must be a JSON object"),
    ] {
        let mut args = action_create(&["--repo", repo, "--details", bad], "act_bad", "gd_1");
        args.extend_from_slice(&["--", "./rotate.sh"]);
        let out = run_finality(tmp, T0, &args);
        assert!(
            out.starts_with("exit: 2") && out.contains(want),
            "{bad}: {out}"
        );
    }
    assert!(
        !tmp.join("state.git").exists() || {
            let store = Store::open(&tmp.join("state.git")).unwrap();
            store.tip("refs/heads/main").unwrap().is_none()
        }
    );
    let mut args = action_create(
        &["--repo", repo, "--details", details, "--json"],
        "act_full",
        "gd_1",
    );
    args.extend_from_slice(&["--", "./rotate.sh", "--token=abcdef123456"]);
    let created = run_finality(tmp, T0, &args);
    assert!(created.starts_with("exit: 0"), "{created}");
    assert!(
        !created.contains("hunter22") && !created.contains("abcdef123456"),
        "{created}"
    );
    insta::assert_snapshot!(
        "action_details_show",
        run_finality(tmp, T1, &["action", "show", "--repo", repo, "act_full"])
    );
    insta::assert_snapshot!(
        "action_details_show_json",
        run_finality(
            tmp,
            T1,
            &["action", "show", "--repo", repo, "act_full", "--json"]
        )
    );
    let listed = run_finality(tmp, T1, &["action", "list", "--repo", repo, "--json"]);
    let lines = stdout_of(&listed);
    let details_of = |v: &Value| v.get("action").and_then(|a| a.get("details")).cloned();
    let shown = stdout_of(&run_finality(
        tmp,
        T1,
        &["action", "show", "--repo", repo, "act_full", "--json"],
    ));
    assert_eq!(
        lines[0]
            .get("actions")
            .and_then(Value::as_array)
            .map(|a| details_of(&a[0])),
        Some(details_of(&shown[0])),
        "{listed}"
    );
    let verified = run_finality(tmp, T1, &["verify", "--repo", repo]);
    assert!(
        verified.starts_with("exit: 0") && verified.contains("0 finding(s)"),
        "{verified}"
    );
}
