//! The finality commands on a local state repository: `action …` (create, claim, outcome,
//! cancel, containment, details, show, list), `run`, `maintain`, refused acts and principals,
//! clock skew, an action present twice and the debris of killed writers.

use super::*;
use crate::store::Store;

/// `action create --repo REPO --id ID --guard-decision DECISION -- COMMAND…` at `T0`: the
/// action a `run` test then runs.
fn create_command(tmp: &Path, repo: &str, id: &str, decision: &str, command: &[&str]) -> String {
    let mut args = action_create(&["--repo", repo], id, decision);
    args.push("--");
    args.extend_from_slice(command);
    run_finality(tmp, T0, &args)
}

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

/// `action close` keeps what it is sent beyond its status: `--error-message`,
/// `--timestamp-end` (to the millisecond, UTC) and `--report` (tokens, cost, model, …,
/// redacted), which `action show` prints; a bad time, a report field a close does not report,
/// a field that breaks its rule and a report that is not an object each exit 2 and write
/// nothing (issue 45).
#[test]
fn action_close_keeps_its_error_end_time_and_report() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    let args = action_create(&["--repo", repo], "act_close", "gd_1");
    assert!(run_finality(tmp, T0, &args).starts_with("exit: 0"));
    let close = |extra: &[&str]| {
        let mut args = vec!["action", "close", "--repo", repo, "act_close", "--operator"];
        args.extend_from_slice(extra);
        args.push("failed");
        // The command line is echoed without the secret the report sends.
        let shown = extra.join(" ").replace("ghp_", "[SECRET]");
        format!("$ action close {shown}\n{}", run_finality(tmp, T1, &args))
    };
    let mut out = Vec::new();
    for bad in [
        &["--timestamp-end", "yesterday"][..],
        &["--report", r#"{"declared_goal":"x"}"#],
        &["--report", r#"{"tokens_in":-1,"cost_estimate":"3"}"#],
        &["--report", "[1]"],
        &["--report", "{"],
    ] {
        let got = close(bad);
        assert!(got.contains("exit: 2"), "{got}");
        out.push(got);
    }
    let shown = |json: bool| {
        let mut args = vec!["action", "show", "--repo", repo, "act_close"];
        if json {
            args.push("--json");
        }
        run_finality(tmp, T1, &args)
    };
    assert!(shown(true).contains(r#""outcome":{"#) && !shown(true).contains(r#""close""#));
    out.push(close(&[
        "--error-message",
        "kaput",
        "--timestamp-end",
        "2026-03-01T13:00:00.123456+01:00",
        "--report",
        r#"{"tokens_in":1200,"cost_estimate":0.5,"model":"m token=ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}"#,
        "--json",
    ]));
    out.push(shown(false));
    out.push(shown(true));
    let all = out.join("\n");
    assert!(!all.contains("ghp_aaaa"), "{all}");
    insta::assert_snapshot!("action_close_report", all);
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

// Issue 43 item 12, leftovers: an action present twice, debris of killed writers.
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

/// `action list --swarm`, `--risk-min` and `--containment-status`: serve's listing filters on
/// the request details and the containment, with the same refusals (exit 2, naming the flag).
#[test]
fn action_list_filters_on_details_and_containment() {
    let tmp = &temp_root();
    let repo = "[TMP]/state.git";
    for (id, details) in [
        ("act_high", Some(r#"{"swarm_id":"sw-1","risk_score":80}"#)),
        ("act_low", Some(r#"{"swarm_id":"sw-2","risk_score":20}"#)),
        ("act_bare", None),
        ("act_boxed", None),
    ] {
        let mut args = action_create(&["--repo", repo], id, "gd_1");
        if let Some(d) = details {
            args.extend_from_slice(&["--details", d]);
        }
        if id == "act_boxed" {
            args.extend_from_slice(&[
                "--verdict",
                "allow_contained",
                "--containment-ref",
                "sandbox-1",
            ]);
        }
        let out = run_finality(tmp, T0, &args);
        assert!(out.starts_with("exit: 0"), "{out}");
    }
    let list = |args: &[&str]| {
        let mut all = vec!["action", "list", "--repo", repo];
        all.extend_from_slice(args);
        let out = run_finality(tmp, T0, &all);
        format!("$ action list {}\n{out}", args.join(" "))
    };
    let steps = [
        list(&["--swarm", "sw-1"]),
        list(&["--risk-min", "50"]),
        list(&["--risk-min", "0", "--json"]),
        list(&["--swarm", "sw-3"]),
        list(&["--containment-status", "contained"]),
        list(&["--risk-min", "101"]),
        list(&["--risk-min", "high"]),
        list(&["--containment-status", "bogus"]),
    ];
    assert!(steps[0].contains("act_high") && !steps[0].contains("act_low"));
    assert!(steps[1].contains("act_high") && !steps[1].contains("act_low"));
    assert!(steps[2].contains("act_low") && !steps[2].contains("act_bare"));
    for bad in &steps[5..] {
        assert!(bad.contains("exit: 2"), "{bad}");
    }
    assert!(steps[4].contains("act_boxed") && !steps[4].contains("act_bare"));
    assert!(steps[5].contains("--risk-min") && steps[7].contains("--containment-status"));
    insta::assert_snapshot!("action_list_filters", steps.join("\n"));
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
