//! `hooks install`: the pre-receive hook and the receive settings of a bare state repository.
//!
//! The installed hook runs `verify --range` on every pushed ref, reading the pushed objects
//! from git's quarantine, so the server refuses deletions, rewrites and invalid additions
//! whoever pushes them; the refs under `refs/ledger/` (pending publications and refusal
//! marks) it hands to `hooks admit` ([`admit`]), which judges them with the whole push in
//! view. The hook and the config are replaced through fsynced temporary files.
//!
//! The hook names no build path: a `cargo clean`, a moved checkout or an upgrade must not break
//! every push, nor leave an old binary checking new data. At each push it looks for its binary
//! in order ($ACTION_LEDGER_BIN, `git config actionLedger.bin`, `action-ledger` on PATH) and
//! asks it `--version`; the hook carries `min_version`, written here as this binary's version,
//! and refuses every push (naming what to install) when no binary is found or the one found is
//! older. `--bin` records the binary in the repository's config; without it, this command
//! reports which binary the hook would run from here, and warns when there is none.
//!
//! A repository with a work tree is refused unless `--allow-non-bare`: git refuses pushes to a
//! non-bare repository's checked-out branch, so such a "server" is almost always a mistake.
//! Every check runs before anything is written.

use std::path::{Path, PathBuf};

use crate::store::Store;

use crate::cli::Env;
use crate::cli::args::InstallArgs;
use crate::cli::output::{Failure, Printer};

/// The hook shipped in `hooks/pre-receive`.
const PRE_RECEIVE: &str = include_str!("../../../hooks/pre-receive");

/// The git config key the hook reads when $ACTION_LEDGER_BIN is not set.
const BIN_KEY: &str = "actionLedger.bin";

/// The hook as installed: the shipped script with `min_version` set to this binary's version.
///
/// # Panics
/// When the shipped script lost its one `min_version=` line (a unit test guards it).
pub(in crate::cli) fn hook_script() -> String {
    let line = PRE_RECEIVE
        .lines()
        .find(|l| l.starts_with("min_version="))
        .expect("hooks/pre-receive has a min_version= line");
    PRE_RECEIVE.replacen(
        line,
        &format!("min_version={}", env!("CARGO_PKG_VERSION")),
        1,
    )
}

/// Runs `hooks install`.
pub(in crate::cli) fn install(
    out: &mut Printer,
    env: &Env,
    args: &InstallArgs,
) -> Result<(), Failure> {
    let repo = &args.repo;
    let bin = args.bin.as_deref().map(checked_bin).transpose()?;
    if !args.allow_non_bare {
        refuse_work_tree(repo)?;
    }
    let store = Store::open_or_init_bare(repo, &args.ref_name)
        .map_err(|e| Failure::input(format!("cannot open {}: {e}", repo.display())))?;
    let hooks = store.git_dir().join("hooks");
    let path = hooks.join("pre-receive");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&hooks)?;
        crate::durable::replace_file(&path, hook_script().as_bytes(), Some(0o755))
    };
    write().map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
    store
        .set_config_bools(&[
            // The hook refuses every deletion itself, except that of a pending publication
            // once landed or refused, which git's blanket rule would refuse too.
            ("receive.denyDeletes", false),
            ("receive.denyNonFastForwards", true),
            ("receive.fsckObjects", true),
        ])
        .map_err(|e| Failure::input(format!("cannot configure {}: {e}", repo.display())))?;
    let configured = match &bin {
        Some(bin) => {
            set_config_value(store.git_dir(), BIN_KEY, bin)?;
            Some(bin.clone())
        }
        None => config_value(store.git_dir(), BIN_KEY),
    };
    out.note(&format!(
        "installed {} (requires action-ledger {} or newer) and set \
         receive.denyNonFastForwards, receive.fsckObjects; receive.denyDeletes is off: the \
         hook refuses every deletion but that of a pending publication landed or refused",
        path.display(),
        env!("CARGO_PKG_VERSION")
    ));
    out.note(&match (&bin, &configured) {
        (Some(b), _) => {
            format!("set {BIN_KEY} = {b}: the hook runs it unless $ACTION_LEDGER_BIN is set")
        }
        (None, Some(b)) => format!(
            "kept {BIN_KEY} = {b} (already set): the hook runs it unless $ACTION_LEDGER_BIN is set"
        ),
        (None, None) => match on_path(env) {
            Some(found) => format!(
                "{BIN_KEY} is not set: the hook runs $ACTION_LEDGER_BIN, else action-ledger on \
                 the server's PATH (here: {})",
                found.display()
            ),
            None => format!(
                "warning: {BIN_KEY} is not set and action-ledger is not on this PATH: the hook \
                 refuses every push until the server has it on PATH, $ACTION_LEDGER_BIN names \
                 it, or `hooks install --bin PATH` sets {BIN_KEY}"
            ),
        },
    });
    Ok(())
}

/// `--bin`: made absolute, and it must be an executable regular file; its text is what the
/// hook reads back from the config, so it must be UTF-8 on one line.
fn checked_bin(bin: &Path) -> Result<String, Failure> {
    let absolute = if bin.is_absolute() {
        bin.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| Failure::input(format!("--bin {}: {e}", bin.display())))?
            .join(bin)
    };
    let refuse = |why: &str| Failure::input(format!("--bin {}: {why}", absolute.display()));
    let meta = std::fs::metadata(&absolute).map_err(|e| refuse(&e.to_string()))?;
    if !meta.is_file() || !is_executable(&meta) {
        return Err(refuse(
            "not an executable file (name the installed action-ledger binary)",
        ));
    }
    match absolute.to_str() {
        Some(s) if !s.contains(['\n', '\r']) => Ok(s.to_owned()),
        _ => Err(refuse("the path must be UTF-8 on one line")),
    }
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    true
}

/// Refuses an existing repository that has a work tree. A path that is absent, empty or not a
/// repository is left to `Store::open_or_init_bare` (created bare, or an open error).
fn refuse_work_tree(repo: &Path) -> Result<(), Failure> {
    if !Store::has_work_tree(repo) {
        return Ok(());
    }
    Err(Failure::input(format!(
        "{} is not a bare repository (it has a work tree): git refuses pushes to its checked-out \
         branch, so the hook would guard nothing; install into a bare repository (`git clone \
         --bare`), or pass --allow-non-bare; nothing was written",
        repo.display()
    )))
}

/// The repository's own config file (not the global or system one).
fn config_path(git_dir: &Path) -> PathBuf {
    git_dir.join("config")
}

/// The value of `key` in the repository's own config, if set and not empty.
fn config_value(git_dir: &Path, key: &str) -> Option<String> {
    let file =
        gix::config::File::from_path_no_includes(config_path(git_dir), gix::config::Source::Local)
            .ok()?;
    let value = file.string(key)?.to_string();
    (!value.is_empty()).then_some(value)
}

/// Sets `key` to `value` in the repository's own config, keeping everything else; the file
/// is replaced durably. (`Store::set_config_bools` does the same for boolean keys.)
fn set_config_value(git_dir: &Path, key: &str, value: &str) -> Result<(), Failure> {
    let path = config_path(git_dir);
    let fail = |e: &dyn std::fmt::Display| {
        Failure::input(format!("cannot set {key} in {}: {e}", path.display()))
    };
    let mut file =
        gix::config::File::from_path_no_includes(path.clone(), gix::config::Source::Local)
            .map_err(|e| fail(&e))?;
    file.set_raw_value(key, value).map_err(|e| fail(&e))?;
    let mut bytes = Vec::new();
    file.write_to(&mut bytes).map_err(|e| fail(&e))?;
    crate::durable::replace_file(&path, &bytes, None).map_err(|e| fail(&e))
}

/// `action-ledger` on the PATH of `env` (what the hook finds when the server has this PATH).
fn on_path(env: &Env) -> Option<PathBuf> {
    let path = env.get("PATH")?;
    std::env::split_paths(path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join("action-ledger"))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && is_executable(&m)))
}

/// Runs `hooks admit`: reads a pre-receive hook's input from `stdin` and judges the refs under
/// `refs/ledger/` ([`crate::publish::admit`]); each refusal is printed on stderr as
/// `action-ledger: refusing REF: WHY`. Exit 1 when any is refused, 2 when the input or the
/// repository cannot be read.
pub(in crate::cli) fn admit(
    out: &mut Printer,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    repo: &Path,
    profile: crate::privacy::Profile,
) -> Result<(), Failure> {
    use crate::publish::admit::{self, PushedRef};
    use crate::store::CommitId;
    let mut input = String::new();
    stdin.read_to_string(&mut input).map_err(|e| {
        Failure::input(format!("hooks admit: cannot read the push from stdin: {e}"))
    })?;
    let side = |id: &str, line: &str| -> Result<Option<CommitId>, Failure> {
        if id.bytes().all(|b| b == b'0') && (id.len() == 40 || id.len() == 64) {
            return Ok(None);
        }
        CommitId::from_hex(id).map(Some).map_err(|_| {
            Failure::input(format!(
                "hooks admit: stdin line {line:?}: {id} is not an object id (want `<old> <new> <ref>`)"
            ))
        })
    };
    let mut push = Vec::new();
    for line in input.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.split_whitespace();
        let (Some(old), Some(new), Some(name), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Failure::input(format!(
                "hooks admit: stdin line {line:?} is not `<old> <new> <ref>`"
            )));
        };
        push.push(PushedRef {
            name: name.to_owned(),
            old: side(old, line)?,
            new: side(new, line)?,
        });
    }
    let unreadable = |e: &dyn std::fmt::Display| {
        Failure::input(format!("hooks admit: cannot read {}: {e}", repo.display()))
    };
    let store = super::verify::open_with_quarantine(env, repo).map_err(|e| unreadable(&e))?;
    let verdicts = admit::admit(&store, &push, profile).map_err(|e| unreadable(&e))?;
    let refused = verdicts.iter().filter(|(_, why)| why.is_some()).count();
    for (name, why) in &verdicts {
        if let Some(why) = why {
            let _ = writeln!(out.stderr, "action-ledger: refusing {name}: {why}");
        }
    }
    if refused == 0 {
        Ok(())
    } else {
        Err(Failure::refused(format!(
            "{refused} ref(s) under {} refused",
            admit::NAMESPACE
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_installed_hook_carries_this_version_and_no_path() {
        let script = hook_script();
        assert_eq!(
            script.matches("\nmin_version=").count(),
            1,
            "one min_version line"
        );
        assert!(script.contains(&format!("\nmin_version={}\n", env!("CARGO_PKG_VERSION"))));
        let exe = std::env::current_exe().expect("test binary path");
        let dir = exe.parent().expect("a directory").to_string_lossy();
        assert!(
            !script.contains(dir.as_ref()),
            "the hook names no build path"
        );
        // Only min_version differs from the shipped script.
        let changed: Vec<_> = PRE_RECEIVE
            .lines()
            .zip(script.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert!(changed.len() <= 1 && changed.iter().all(|(a, _)| a.starts_with("min_version=")));
    }
}
