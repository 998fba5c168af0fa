//! `hooks install`: the pre-receive hook and the receive settings of a bare state repository.
//!
//! The installed hook runs `verify --range` on every pushed ref, reading the pushed objects
//! from git's quarantine, so the server refuses deletions, rewrites and invalid additions
//! whoever pushes them. The hook and the config are replaced through fsynced temporary files.

use std::path::Path;

use crate::store::Store;

use crate::cli::output::{Failure, Printer};

/// The hook shipped in `hooks/pre-receive`.
const PRE_RECEIVE: &str = include_str!("../../../hooks/pre-receive");

/// Runs `hooks install`.
pub(in crate::cli) fn install(
    out: &mut Printer,
    repo: &Path,
    ref_name: &str,
) -> Result<(), Failure> {
    let store = Store::open_or_init_bare(repo, ref_name)
        .map_err(|e| Failure::input(format!("cannot open {}: {e}", repo.display())))?;
    // The installed hook calls this very binary unless ACTION_LEDGER_BIN says otherwise.
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.into_os_string().into_string().ok())
        .map(|p| format!("'{}'", p.replace('\'', "'\\''")))
        .unwrap_or_else(|| "action-ledger".to_owned());
    let script = PRE_RECEIVE.replacen(
        "bin=${ACTION_LEDGER_BIN:-action-ledger}",
        &format!("bin=${{ACTION_LEDGER_BIN:-{exe}}}"),
        1,
    );
    let hooks = store.git_dir().join("hooks");
    let path = hooks.join("pre-receive");
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(&hooks)?;
        crate::durable::replace_file(&path, script.as_bytes(), Some(0o755))
    };
    write().map_err(|e| Failure::input(format!("cannot write {}: {e}", path.display())))?;
    store
        .set_config_true(&[
            "receive.denyDeletes",
            "receive.denyNonFastForwards",
            "receive.fsckObjects",
        ])
        .map_err(|e| Failure::input(format!("cannot configure {}: {e}", repo.display())))?;
    out.note(&format!(
        "installed {} and set receive.denyDeletes, receive.denyNonFastForwards, receive.fsckObjects",
        path.display()
    ));
    Ok(())
}
