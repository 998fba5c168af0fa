//! The durable write discipline for every file this crate creates inside a Git repository.
//!
//! A file becomes visible under its final name only once its bytes are on disk, and a ref names
//! only objects that are already on disk. The order, for each file, is git's own (`core.fsync`):
//!
//! 1. write the bytes to a temporary file in the destination directory;
//! 2. fsync that file;
//! 3. rename it to its final name;
//! 4. fsync the directory, so that the rename itself survives a power loss;
//! 5. only then go on to the next step that depends on it (the ref update, the acknowledgement).
//!
//! Who follows it:
//! - loose objects (store): each object file is written and fsynced, then renamed into its
//!   fan-out directory; the fan-out directories (and `objects/` when one was created) are fsynced
//!   before the commit is returned;
//! - packs and their indices (pack): both fsynced, renamed pack first and index last, then the
//!   pack directory is fsynced;
//! - ref updates (store): gix's ref transaction writes the new value into `<ref>.lock` during
//!   `prepare` but does not fsync it, so the store fsyncs the lock file between `prepare` and
//!   `commit` (the rename), then fsyncs the ref's directories before it reports success;
//! - `hooks install` and the store's config edits: the hook and `config` are replaced through a
//!   temporary file ([`replace_file`]);
//! - a new repository (store): built in a staging directory whose every file (`HEAD`, `config`,
//!   …) and directory is fsynced before the staging directory is renamed to its final name, and
//!   the parent directory fsynced after.
//!
//! Temporary files carry the writer's PID and process incarnation in their names
//! ([`temp_name`]), so that debris left by a killed writer can be told from a live writer's work
//! and removed by the next one ([`remove_stale_temp_files`]).
//!
//! Directories can only be fsynced on Unix; elsewhere [`sync_dir`] does nothing.
//!
//! # Why the spool stages differently
//!
//! The spool's create-only writes ([`crate::writer::files`]) stage as
//! `<name>.<pid>.<uuid-v4>.tmp` (and claim as `.reclaim`), not as [`temp_name`]s. The two are
//! kept apart on purpose: a spool's staging name must end in `.tmp` and start with its final
//! name (spool readers skip it by suffix, and it is cleared handle-relative under the producer
//! locks), while a name in a Git repository must start with [`TEMP_PREFIX`] so that it is told
//! from git's own `tmp_*` files. And released versions left both kinds on disk, so one cleaner
//! would still have to parse both old formats: merging them would add a third, not remove one.
//!
//! # Why not `tempfile`'s `persist` or `atomicwrites`
//!
//! Both write a temporary file and rename it, which covers steps 1 and 3. Neither fsyncs the
//! destination directory after the rename (step 4; without it the new name can vanish on power
//! loss although the bytes were synced), and their temporary names are random, so a file left by
//! a killed writer cannot be told from a live writer's work and is never cleaned up. The store
//! also needs the same discipline for files that gix or git create (the ref lock, a staged
//! repository), which no file-writing crate covers. The helpers here are a few lines each over
//! `std::fs` and `rustix`.

use std::io::Write;
use std::path::Path;

/// Prefix of every temporary file this crate creates in a repository.
pub const TEMP_PREFIX: &str = "tmp_al_";

/// A temporary file name for `what` (for example `pack` or `obj`), unique within this process:
/// `tmp_al_<pid>_<incarnation prefix>_<counter>_<what>`. The incarnation prefix (12 hex digits
/// of [`crate::process::process_incarnation`]) tells a reused PID from the original writer.
pub fn temp_name(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{TEMP_PREFIX}{}_{}_{n}_{what}",
        std::process::id(),
        own_incarnation_prefix()
    )
}

fn own_incarnation_prefix() -> &'static str {
    static OWN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWN.get_or_init(|| incarnation_prefix(std::process::id()).unwrap_or_else(|| "0".repeat(12)))
}

fn incarnation_prefix(pid: u32) -> Option<String> {
    crate::process::process_incarnation(pid).map(|d| d.as_str()[..12].to_owned())
}

/// What to do about an I/O error of writing to disk, by its cause: "free space" only when space
/// (`ENOSPC`, or a quota: `EDQUOT`) is the cause; permissions for `EACCES`/`EPERM`/`EROFS`; a path
/// removed meanwhile for `ENOENT`; the file system otherwise.
pub fn io_advice(e: &std::io::Error) -> &'static str {
    use rustix::io::Errno;
    let is = |errno: Errno| e.raw_os_error() == Some(errno.raw_os_error());
    if is(Errno::NOSPC) || is(Errno::DQUOT) {
        "free space on that file system (or raise the quota) and run again"
    } else if is(Errno::ACCESS) || is(Errno::PERM) || is(Errno::ROFS) {
        "check that this user may write there"
    } else if e.kind() == std::io::ErrorKind::NotFound {
        "a path on the way was removed meanwhile; run again, and check what deletes files in the repository"
    } else {
        "check the file system"
    }
}

/// Writes `parts` to the new file `tmp` and fsyncs it. The caller renames it into place and then
/// fsyncs the directory ([`sync_dir`]).
///
/// # Errors
/// Any I/O error of creating, writing or syncing `tmp` (the file may remain; it is debris that
/// [`remove_stale_temp_files`] removes once this process is gone).
pub fn write_synced(tmp: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)?;
    for p in parts {
        f.write_all(p)?;
    }
    f.sync_all()
}

/// Replaces (or creates) the file at `path` with `bytes` following the discipline: a temporary
/// file beside it, written and fsynced (with Unix permission bits `mode` when given), renamed
/// over `path`, then the directory fsynced. Readers see the old or the new file, never a part.
///
/// # Errors
/// Any I/O error; the temporary file is removed on failure.
pub fn replace_file(path: &Path, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    replace_file_with(path, mode, |out| out.write_all(bytes))
}

/// [`replace_file`] with the bytes written by `write` as they are produced (buffered), so that
/// a large file need not be held in memory first. When `write` fails, `path` is left as it was.
///
/// # Errors
/// `write`'s error, or any I/O error; the temporary file is removed on failure.
pub fn replace_file_with(
    path: &Path,
    mode: Option<u32>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(temp_name("replace"));
    let result = (|| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
        write(&mut out)?;
        let file = out
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        #[cfg(unix)]
        if let Some(mode) = mode {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        #[cfg(not(unix))]
        let _ = mode;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// fsyncs the file at `path` (data and metadata).
///
/// # Errors
/// Opening or syncing `path`.
pub fn sync_file(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// fsyncs the directory at `path`, making the creation, rename or removal of its entries durable.
/// Does nothing where directories cannot be opened (not Unix).
///
/// # Errors
/// Opening or syncing `path`.
pub fn sync_dir(path: &Path) -> std::io::Result<()> {
    if cfg!(unix) { sync_file(path) } else { Ok(()) }
}

/// fsyncs every file and directory below `root` and `root` itself, children before parents.
/// Used on a freshly initialised repository before it is renamed into place.
///
/// # Errors
/// The first entry that cannot be read or synced.
pub fn sync_tree(root: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            sync_tree(&entry.path())?;
        } else if kind.is_file() {
            sync_file(&entry.path())?;
        }
    }
    sync_dir(root)
}

/// Removes the temporary files in `dir` that a writer of this crate left behind and that no live
/// process owns: names made by [`temp_name`] whose PID is not alive, or names a different process
/// incarnation than the one now holding that PID. Files of live writers, files of other tools
/// (git's own `tmp_pack_*`) and anything unreadable are left alone. Returns the paths removed.
pub fn remove_stale_temp_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((pid, incarnation)) = owner_of(name) else {
            continue;
        };
        if owner_gone(pid, incarnation) && std::fs::remove_file(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    removed
}

/// Whether the writer that named a file with `pid` and the 12-hex-digit `incarnation` prefix
/// ([`temp_name`]) is provably gone: no live process has that PID, or the one that has it is
/// another incarnation (the PID was reused). A live process whose incarnation cannot be read
/// is taken to be the writer.
pub fn owner_gone(pid: u32, incarnation: &str) -> bool {
    !(crate::process::pid_alive(pid)
        && incarnation_prefix(pid).is_none_or(|now| now == incarnation))
}

/// This process's incarnation prefix (12 hex digits), as [`temp_name`] writes it.
pub fn own_incarnation() -> &'static str {
    own_incarnation_prefix()
}

/// `(pid, incarnation prefix)` of a name made by [`temp_name`].
fn owner_of(name: &str) -> Option<(u32, &str)> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let mut fields = rest.splitn(3, '_');
    let pid = fields.next()?.parse().ok()?;
    let incarnation = fields.next()?;
    (incarnation.len() == 12 && incarnation.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some((pid, incarnation))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "free space" is advised only when space is the cause; a path removed meanwhile (git's
    /// maintenance removing an empty fan-out directory) or another failure says something else.
    #[test]
    fn io_advice_says_free_space_only_for_space() {
        use rustix::io::Errno;
        let of = |errno: Errno| io_advice(&std::io::Error::from_raw_os_error(errno.raw_os_error()));
        assert!(of(Errno::NOSPC).contains("free space"));
        assert!(of(Errno::DQUOT).contains("free space"));
        for other in [
            Errno::NOENT,
            Errno::IO,
            Errno::ACCESS,
            Errno::ROFS,
            Errno::NOTDIR,
        ] {
            assert!(!of(other).contains("free space"), "{other:?}");
        }
        assert!(of(Errno::NOENT).contains("removed meanwhile"));
        assert!(of(Errno::ACCESS).contains("may write"));
        let e = crate::store::Error::Sync {
            path: "objects/ab".into(),
            source: std::io::Error::from_raw_os_error(Errno::NOENT.raw_os_error()),
        };
        assert!(!e.to_string().contains("free space"), "{e}");
    }

    #[test]
    fn temp_names_carry_their_owner() {
        let name = temp_name("pack");
        let (pid, inc) = owner_of(&name).expect("own name parses");
        assert_eq!(pid, std::process::id());
        assert_eq!(inc.len(), 12);
        assert_ne!(temp_name("pack"), name, "names are unique within a process");
        assert_eq!(
            owner_of("tmp_pack_XYZ123"),
            None,
            "git's own names are not ours"
        );
        assert_eq!(owner_of("tmp_al_12_nothex000000_1_pack"), None);
    }

    #[test]
    fn only_debris_of_dead_or_reused_owners_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let live = temp_name("pack");
        // A PID that is certainly not alive: above the kernel's maximum.
        let dead = format!("{TEMP_PREFIX}4194305_0123456789ab_0_pack");
        // Our own PID under another incarnation: the PID was reused.
        let reused = format!("{TEMP_PREFIX}{}_0123456789ab_0_idx", std::process::id());
        let foreign = "tmp_pack_abc123".to_owned();
        for name in [&live, &dead, &reused, &foreign] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let mut removed = remove_stale_temp_files(dir.path());
        removed.sort();
        let mut gone = vec![dir.path().join(&dead), dir.path().join(&reused)];
        gone.sort();
        assert_eq!(removed, gone);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut expected = vec![live, foreign];
        expected.sort();
        assert_eq!(left, expected);
    }

    #[test]
    fn synced_writes_refuse_to_overwrite_and_sync_trees() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = dir.path().join("a");
        write_synced(&tmp, &[b"he", b"llo"]).unwrap();
        assert_eq!(std::fs::read(&tmp).unwrap(), b"hello");
        assert!(write_synced(&tmp, &[b"x"]).is_err(), "create-new only");
        std::fs::create_dir_all(dir.path().join("d/e")).unwrap();
        std::fs::write(dir.path().join("d/e/f"), b"f").unwrap();
        sync_tree(dir.path()).unwrap();
    }
}
