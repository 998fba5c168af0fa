//! Writing and reading the ledger: `record`, `seal` and `publish` (output shapes, privacy
//! profiles, empty roots, failed publications, the `--expected-*` flags), `verify`, `log`,
//! `compact`, `project` views, and which ref and revisions `verify` and `log` read.

use super::*;
use crate::store::Store;

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

// Issue 43 item 12, leftovers: the ledger ref, log against verify, `--range`.
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
        "[TMP]/commands.saved",
    ]);
    let saved_status = project(&["status", "--limit", "2", "--save", "[TMP]/status.saved"]);
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
    let resumed = project(&["status", "--json", "--from", "[TMP]/status.saved"]);
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
    // `--json` with `--save` prints the same document, and saves the same file as `--save`
    // alone: the saved form (`project::saved`), which brought up to date at the same revision
    // prints the document again.
    let saved_full = project(&[
        "status",
        "--json",
        "--limit",
        "2",
        "--save",
        "[TMP]/full.saved",
    ]);
    assert_eq!(stdout(&saved_full), stdout(&full));
    let streamed = project(&["status", "--limit", "2", "--save", "[TMP]/streamed.saved"]);
    assert!(streamed.starts_with("exit: 0"), "{streamed}");
    let file = |name: &str| std::fs::read(tmp.join(name)).unwrap();
    let saved = file("streamed.saved");
    assert!(
        saved == file("full.saved"),
        "--save alone wrote other bytes"
    );
    assert!(saved.starts_with(b"action-ledger.project.saved.v2\n"));
    let again = project(&["status", "--json", "--from", "[TMP]/streamed.saved"]);
    assert_eq!(stdout(&again), stdout(&full));
    assert!(again.contains("(0 new since the checkpoint"), "{again}");
    // A fold that fails leaves the saved file as it was; a file that cannot be written is
    // named.
    let bad = project(&[
        "status",
        "--from",
        "[TMP]/commands.saved",
        "--save",
        "[TMP]/streamed.saved",
    ]);
    assert!(bad.starts_with("exit: 2"), "{bad}");
    assert!(bad.contains("not action-ledger.project.status.v1"), "{bad}");
    assert!(
        file("streamed.saved") == saved,
        "a failed fold changed the saved file"
    );
    // A damaged saved file is refused, naming the file, the field and the rule.
    let mut damaged = saved.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x20;
    std::fs::write(tmp.join("damaged.saved"), damaged).unwrap();
    let refused = project(&["status", "--from", "[TMP]/damaged.saved"]);
    assert!(refused.starts_with("exit: 2"), "{refused}");
    assert!(
        refused.contains(
            "[TMP]/damaged.saved: checksum: the CRC-32 of the body does not match: the file \
             is damaged or cut short: fold the view again without --from"
        ),
        "{refused}"
    );
    let nowhere = project(&["status", "--save", "[TMP]/no/such/dir/v.json"]);
    assert!(nowhere.starts_with("exit: 2"), "{nowhere}");
    assert!(
        nowhere.contains("--save [TMP]/no/such/dir/v.json"),
        "{nowhere}"
    );
    assert!(
        resumed.contains("(196 new since the checkpoint of [TMP]/status.saved)"),
        "{resumed}"
    );
    // A saved view keeps its filter: brought up to date, it is the full fold of that filter.
    let command_full = project(&["commands", "--json", "--subject", "openclaw/openclaw#41379"]);
    let command_resumed = project(&["commands", "--json", "--from", "[TMP]/commands.saved"]);
    assert!(command_full.contains("\"schema\": \"action-ledger.project.commands.v1\""));
    assert_eq!(stdout(&command_resumed), stdout(&command_full));
    // `--compare` reads JSON: the document as `--json` printed it.
    std::fs::write(tmp.join("commands-doc.json"), stdout(&command_full)).unwrap();
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
        "[TMP]/commands-doc.json",
    ]);
    let text = std::fs::read_to_string(tmp.join("commands-doc.json")).unwrap();
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
        project(&["status", "--from", "[TMP]/commands.saved"]),
        project(&["status", "--from", "[TMP]/status.saved", "--limit", "3"]),
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
