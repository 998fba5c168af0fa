//! `--remote` on the commands that write the state repository: `action`, `run`, `sweep` and
//! `compact` land on a remote by leased push, each machine with its own `--repo` cache;
//! refusals, the ref lock, a rewritten remote and writers' clocks that disagree.

use super::*;
use crate::store::Store;

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
