//! `hooks install` (no build path in the hook, the binary found at push time, bare
//! repositories only) and `hooks admit` (the ledger namespace of a push).

use super::*;

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
