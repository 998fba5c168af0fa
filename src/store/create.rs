//! Opening and creating the state repository, and its configuration edits.
//!
//! A new repository is bare and is built beside its final name
//! (`.<name>.init-<pid>-<incarnation>-<n>`, the creator's PID, the first 12 hex digits of its
//! process incarnation and a counter):
//! `HEAD` is pointed at the ledger ref (so that `git clone` checks the ledger out), every file
//! and directory of it is fsynced, and only then is it renamed into place; the parent directory
//! (and each parent directory created on the way) is fsynced too. `rename(2)` replaces an empty
//! directory and fails on a non-empty one, so of several concurrent creators exactly one wins and
//! the others open the winner's repository. A crash leaves either no repository or a complete one
//! (plus, at worst, a staging directory that nothing reads, which a later run removes:
//! [`remove_stale_staging`]).

use std::path::{Path, PathBuf};

use gix::refs::transaction::{PreviousValue, RefEdit};
use gix::refs::{FullName, Target};

use super::error::git_err;
use super::refs::full_name;
use crate::durable;
use crate::store::*;
use crate::time::Timestamp;

/// The name of a staging directory for the repository named `file_name`, made by this process:
/// `.<file_name>.init-<pid>-<incarnation prefix>-<n>`.
fn staging_name(file_name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        ".{file_name}.init-{}-{}-{}",
        std::process::id(),
        durable::own_incarnation(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// How old (by its modification time) a staging directory whose name carries no process
/// incarnation (`.<name>.init-<pid>-<8 hex digits>`, made before names carried one) must be
/// before [`remove_stale_staging`] removes it although a process with its PID is alive: a
/// creation takes milliseconds, and the PID may have been reused since.
pub const STAGING_GRACE_MILLIS: i64 = 60 * 60 * 1000;

/// Removes the staging directories that creations of the repository at `path` left beside it
/// (`.<name>.init-…`) when they were killed before renaming them into place, and returns their
/// paths. Only those that cannot belong to a live creator are removed: the PID in the name is
/// not alive or is held by another process incarnation; for a name without an incarnation
/// (older versions), the PID is not alive or the directory was last modified at least
/// [`STAGING_GRACE_MILLIS`] before `now` (the caller's clock: the library reads none).
/// Anything else, a symbolic link, or an entry that cannot be read is left alone.
pub fn remove_stale_staging(path: &Path, now: Timestamp) -> Vec<PathBuf> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let Some(file_name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let prefix = format!(".{file_name}.init-");
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if !meta.file_type().is_dir() {
            continue;
        }
        let fields: Vec<&str> = rest.split('-').collect();
        let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
        let stale = match fields.as_slice() {
            [pid, incarnation, n]
                if hex(incarnation, 12) && n.bytes().all(|b| b.is_ascii_digit()) =>
            {
                pid.parse()
                    .is_ok_and(|pid| durable::owner_gone(pid, incarnation))
            }
            [pid, nanos] if hex(nanos, 8) => {
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| Timestamp::from_millis(d.as_millis() as i64));
                pid.parse::<u32>().is_ok_and(|pid| {
                    !crate::process::pid_alive(pid)
                        || modified.is_some_and(|m| now.millis_since(m) >= STAGING_GRACE_MILLIS)
                })
            }
            _ => false,
        };
        if stale && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(entry.path());
        }
    }
    if !removed.is_empty() {
        let _ = durable::sync_dir(&parent);
    }
    removed
}

impl Store {
    /// Removes the temporary files that writers of this crate left in the repository when
    /// killed (loose objects' `tmp_al_*_obj` in the fan-out directories, packs' in
    /// `objects/pack`, replaced files' in the repository and `hooks`), only those no live
    /// process owns ([`durable::remove_stale_temp_files`]); returns their paths.
    pub fn remove_stale_temp_files(&self) -> Vec<PathBuf> {
        let git_dir = self.git_dir();
        let objects = git_dir.join("objects");
        let mut dirs = vec![
            git_dir.to_owned(),
            git_dir.join("hooks"),
            objects.join("pack"),
        ];
        if let Ok(entries) = std::fs::read_dir(&objects) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let fanout = name
                    .to_str()
                    .is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()));
                if fanout && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                }
            }
        }
        dirs.sort();
        dirs.iter()
            .flat_map(|dir| durable::remove_stale_temp_files(dir))
            .collect()
    }

    /// Whether `path` is an existing repository with a work tree (not bare). Absent, empty or
    /// not a repository: `false`. Reads only the repository's own configuration, and maps no
    /// object: every gix handle of the crate is opened here, in `store`, as
    /// [`Store::release_mapped_packs`]'s safety argument requires.
    pub fn has_work_tree(path: &Path) -> bool {
        gix::open_opts(path, gix::open::Options::isolated()).is_ok_and(|repo| !repo.is_bare())
    }

    /// Open the repository at `path`, or create a bare one when `path` does not exist or is an
    /// empty directory. On creation, `HEAD` is made a symbolic ref to `ref_name` (a full name such
    /// as `refs/heads/main`) so that a fresh `git clone` checks out the ledger ref.
    ///
    /// An existing repository is opened as is; its `HEAD` is not changed.
    ///
    /// # Errors
    /// [`Error::InvalidRefName`], [`Error::Init`], [`Error::Open`], or [`Error::Git`] if `HEAD`
    /// cannot be written.
    pub fn open_or_init_bare(path: &Path, ref_name: &str) -> Result<Store, Error> {
        Store::open_or_create_bare(path, ref_name).map(|(store, _)| store)
    }

    /// [`Store::open_or_init_bare`], also saying whether this call created the repository
    /// (`true`) or opened one that existed or that a concurrent creator made first (`false`).
    ///
    /// # Errors
    /// As [`Store::open_or_init_bare`].
    pub fn open_or_create_bare(path: &Path, ref_name: &str) -> Result<(Store, bool), Error> {
        let name = full_name(ref_name)?;
        let is_empty_dir = match std::fs::read_dir(path) {
            Ok(mut entries) => entries.next().is_none(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => true,
            Err(_) => false,
        };
        if !is_empty_dir {
            return Ok((Store::open(path)?, false));
        }
        // Build the repository beside its final name and rename it into place, so that a
        // concurrent publisher either sees no repository or a complete one, never a half-made one.
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "state.git".to_owned());
        let staging = parent.join(staging_name(&file_name));
        let init = |err: Box<dyn std::error::Error + Send + Sync>| Error::Init {
            path: path.to_owned(),
            source: err,
        };
        // Directories created on the way must be durable too: fsync each new one's parent.
        let mut missing = Vec::new();
        let mut up = Some(parent.as_path());
        while let Some(dir) = up.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            missing.push(dir.to_owned());
            up = dir.parent();
        }
        std::fs::create_dir_all(&parent).map_err(|e| init(Box::new(e)))?;
        for dir in &missing {
            if let Some(above) = dir.parent().filter(|d| !d.as_os_str().is_empty()) {
                durable::sync_dir(above).map_err(|e| init(Box::new(e)))?;
            }
        }
        let created = gix::ThreadSafeRepository::init_opts(
            &staging,
            gix::create::Kind::Bare,
            gix::create::Options::default(),
            gix::open::Options::isolated(),
        )
        .map_err(|e| init(Box::new(e)))?
        .to_thread_local();
        let head: FullName = "HEAD".try_into().map_err(|_| Error::InvalidRefName {
            ref_name: "HEAD".to_owned(),
        })?;
        // Symbolic ref changes carry no object id, so gix writes no reflog and needs no committer.
        let edit = RefEdit::update(head, Target::Symbolic(name), PreviousValue::Any, "");
        created
            .refs
            .transaction()
            .prepare(
                Some(edit),
                gix::lock::acquire::Fail::Immediately,
                gix::lock::acquire::Fail::Immediately,
            )
            .and_then(|tx| tx.commit(None))
            .map_err(git_err("point HEAD at", ref_name))?;
        drop(created);
        // HEAD, config and the directories must be durable before the repository appears under
        // its name (crate::durable).
        durable::sync_tree(&staging).map_err(|e| init(Box::new(e)))?;
        // rename(2) replaces an empty directory and fails on a non-empty one: exactly one
        // concurrent creator wins, the others open the winner's repository.
        let created = std::fs::rename(&staging, path).is_ok();
        if !created {
            let _ = std::fs::remove_dir_all(&staging);
        } else if let Ok(dir) = std::fs::File::open(&parent) {
            let _ = dir.sync_all();
        }
        Ok((Store::open(path)?, created))
    }

    /// Sets boolean keys such as `receive.fsckObjects` in the repository's own config file
    /// (section `[receive]`), keeping everything else.
    ///
    /// # Errors
    /// [`Error::Open`] when the config cannot be read or written.
    pub fn set_config_bools(&self, keys: &[(&str, bool)]) -> Result<(), Error> {
        let path = self.repo.common_dir().join("config");
        let io_err = |e: Box<dyn std::error::Error + Send + Sync>| Error::Open {
            path: path.clone(),
            source: e,
        };
        let mut file =
            gix::config::File::from_path_no_includes(path.clone(), gix::config::Source::Local)
                .map_err(|e| io_err(Box::new(e)))?;
        for (key, value) in keys {
            file.set_raw_value(*key, if *value { "true" } else { "false" })
                .map_err(|e| io_err(Box::new(e)))?;
        }
        let mut out = Vec::new();
        file.write_to(&mut out).map_err(|e| io_err(Box::new(e)))?;
        durable::replace_file(&path, &out, None).map_err(|e| io_err(Box::new(e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    /// Staging directories of killed creations are removed, and only those: a dead PID, a
    /// reused PID (another incarnation), an old-style name whose PID is dead or that is past
    /// the grace period by the caller's clock. A live creator's, a recent old-style one with a
    /// live PID, another repository's, a file and a link are left alone.
    #[test]
    fn only_stale_staging_directories_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("state.git");
        let me = std::process::id();
        let dead = 4_194_305; // above the kernel's maximum PID: never alive
        let names = [
            ("live", staging_name("state.git"), false),
            (
                "dead",
                format!(".state.git.init-{dead}-0123456789ab-0"),
                true,
            ),
            (
                "reused",
                format!(".state.git.init-{me}-0123456789ab-3"),
                true,
            ),
            ("old dead", format!(".state.git.init-{dead}-0badcafe"), true),
            ("old live", format!(".state.git.init-{me}-0badcafe"), false),
            (
                "other repo",
                format!(".other.git.init-{dead}-0badcafe"),
                false,
            ),
            ("not ours", ".state.git.init-x".to_owned(), false),
        ];
        for (_, name, _) in &names {
            std::fs::create_dir_all(tmp.path().join(name).join("objects")).unwrap();
        }
        let file = format!(".state.git.init-{dead}-0123456789ab-1");
        std::fs::write(tmp.path().join(&file), b"x").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(
            tmp.path().join(&names[0].1),
            tmp.path()
                .join(format!(".state.git.init-{dead}-0123456789ab-2")),
        )
        .unwrap();
        let modified = std::fs::metadata(tmp.path().join(&names[4].1))
            .unwrap()
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        // A minute after: the old-style directory of a live PID is recent, and kept.
        let mut removed = remove_stale_staging(&repo, Timestamp::from_millis(modified + 60_000));
        removed.sort();
        let mut expected: Vec<PathBuf> = names
            .iter()
            .filter(|(_, _, stale)| *stale)
            .map(|(_, n, _)| tmp.path().join(n))
            .collect();
        expected.sort();
        assert_eq!(removed, expected);
        for (what, name, stale) in &names {
            assert_eq!(!tmp.path().join(name).exists(), *stale, "{what}");
        }
        assert!(
            tmp.path().join(&file).exists(),
            "a file is not a staging directory"
        );
        // Past the grace period the old-style one goes too; a live creator's stays.
        let later = Timestamp::from_millis(modified + STAGING_GRACE_MILLIS);
        assert_eq!(
            remove_stale_staging(&repo, later),
            vec![tmp.path().join(&names[4].1)]
        );
        assert!(tmp.path().join(&names[0].1).exists());
    }

    /// Temporary files of dead writers are removed from the fan-out directories, the pack
    /// directory and the repository itself; a live writer's and git's own are kept.
    #[test]
    fn stale_temporary_files_are_removed_from_the_repository() {
        let (_tmp, _repo, store) = new_store();
        let git_dir = store.git_dir().to_owned();
        let dead = format!("{}4194305_0123456789ab_0_obj", durable::TEMP_PREFIX);
        let live = durable::temp_name("obj");
        let mut expected = Vec::new();
        for dir in [
            git_dir.join("objects/ab"),
            git_dir.join("objects/pack"),
            git_dir.clone(),
        ] {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(&dead), b"x").unwrap();
            std::fs::write(dir.join(&live), b"x").unwrap();
            std::fs::write(dir.join("tmp_obj_git"), b"x").unwrap();
            expected.push(dir.join(&dead));
        }
        let mut removed = store.remove_stale_temp_files();
        removed.sort();
        expected.sort();
        assert_eq!(removed, expected);
        assert!(git_dir.join("objects/ab").join(&live).exists());
        assert!(git_dir.join("objects/ab/tmp_obj_git").exists());
        assert!(store.remove_stale_temp_files().is_empty());
    }

    #[test]
    fn fresh_clone_checks_out_the_ledger_ref() {
        let (tmp, repo, store) = new_store();
        publish(&store, &[("ledger/v1/a.json", "{\"a\":1}\n")]);
        let work = tmp.path().join("work");
        let repo_arg = repo.to_str().expect("utf-8 temp path");
        let work_arg = work.to_str().expect("utf-8 temp path");
        git(tmp.path(), &["clone", "--quiet", repo_arg, work_arg]);
        assert_eq!(
            std::fs::read(work.join("ledger/v1/a.json")).expect("checked out"),
            b"{\"a\":1}\n"
        );
        assert_eq!(git(&work, &["symbolic-ref", "HEAD"]), MAIN);

        // Opening again keeps HEAD, even with another ref name.
        drop(store);
        let again = Store::open_or_init_bare(&repo, "refs/heads/other").expect("reopen");
        assert!(again.tip(MAIN).expect("tip").is_some());
        assert_eq!(git(&repo, &["symbolic-ref", "HEAD"]), MAIN);
    }
}
