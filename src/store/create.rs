//! Opening and creating the state repository, and its configuration edits.
//!
//! A new repository is bare and is built beside its final name (`.<name>.init-<pid>-<nanos>`):
//! `HEAD` is pointed at the ledger ref (so that `git clone` checks the ledger out), every file
//! and directory of it is fsynced, and only then is it renamed into place; the parent directory
//! (and each parent directory created on the way) is fsynced too. `rename(2)` replaces an empty
//! directory and fails on a non-empty one, so of several concurrent creators exactly one wins and
//! the others open the winner's repository. A crash leaves either no repository or a complete one
//! (plus, at worst, a staging directory that nothing reads).

use std::path::{Path, PathBuf};

use gix::refs::transaction::{PreviousValue, RefEdit};
use gix::refs::{FullName, Target};

use super::error::git_err;
use super::refs::full_name;
use crate::durable;
use crate::store::*;

impl Store {
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
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let staging = parent.join(format!(
            ".{file_name}.init-{}-{nanos:08x}",
            std::process::id()
        ));
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

    /// Sets boolean keys such as `receive.denyDeletes` to `true` in the repository's own config
    /// file (section `[receive]`), keeping everything else.
    ///
    /// # Errors
    /// [`Error::Open`] when the config cannot be read or written.
    pub fn set_config_true(&self, keys: &[&str]) -> Result<(), Error> {
        let path = self.repo.common_dir().join("config");
        let io_err = |e: Box<dyn std::error::Error + Send + Sync>| Error::Open {
            path: path.clone(),
            source: e,
        };
        let mut file =
            gix::config::File::from_path_no_includes(path.clone(), gix::config::Source::Local)
                .map_err(|e| io_err(Box::new(e)))?;
        for key in keys {
            file.set_raw_value(*key, "true")
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
