//! The commit point: reading a ref ([`Store::tip`]) and moving it with a compare-and-swap
//! ([`Store::update_ref`]), fsynced, with the ref-lock ownership notes that let a later writer
//! prove a dead writer's left-over lock stale (see the store's module docs).
//!
//! Only full ref names under `refs/` are accepted; symbolic refs are neither read nor written.
//! Loose and packed refs are both read; an update writes the loose ref under `<ref>.lock`, the
//! one lock git's `update-ref` takes for it (`packed-refs` is read, never locked or rewritten).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gix::refs::{FullName, Target};

use super::error::git_err;
use super::sync_dir;
use crate::durable;
use crate::store::*;

/// How long [`Store::update_ref`] waits for a ref lock held by another writer before it returns
/// [`Error::RefLocked`]. Git's own default (`core.filesRefLockTimeout`) is the same 100 ms.
pub const REF_LOCK_TIMEOUT: Duration = Duration::from_millis(100);

impl Store {
    /// The current value of `ref_name` (a full name such as `refs/heads/main`), or `None` if the
    /// ref does not exist. Loose and packed refs are both read.
    ///
    /// # Errors
    /// [`Error::InvalidRefName`], [`Error::SymbolicRef`], or [`Error::Git`] if the ref cannot be
    /// read.
    pub fn tip(&self, ref_name: &str) -> Result<Option<CommitId>, Error> {
        let name = full_name(ref_name)?;
        let found = self
            .repo
            .refs
            .try_find(name.as_ref())
            .map_err(git_err("read ref", ref_name))?;
        match found.map(|r| r.target) {
            None => Ok(None),
            Some(Target::Object(id)) => Ok(Some(CommitId(id))),
            Some(Target::Symbolic(target)) => Err(Error::SymbolicRef {
                ref_name: ref_name.to_owned(),
                target: target.as_bstr().to_string(),
            }),
        }
    }

    /// The commit point: move `ref_name` from `expected` to `new` as a compare-and-swap.
    ///
    /// `expected = Some(old)` requires the ref to hold `old`; `None` requires it not to exist.
    /// The update takes exactly the lock git's `update-ref` takes for it: `<ref>.lock` beside the
    /// loose ref, waited for at most [`REF_LOCK_TIMEOUT`], and never `packed-refs.lock` (a
    /// ref that is only packed is read from `packed-refs` and written loose, as git does; git's
    /// `pack-refs` holding `packed-refs.lock` meanwhile blocks nothing). The value is checked
    /// while the lock is held. If the ref holds `new` and `expected` is `new`, the call succeeds
    /// without change.
    /// `log_message` goes to the reflog (newlines are replaced by spaces), written as the
    /// committer of `new`, when the repository keeps reflogs (`core.logAllRefUpdates`, or a
    /// reflog that exists). The lock file is fsynced before it is renamed into the ref, and the
    /// ref's directories after.
    ///
    /// # Errors
    /// - [`Error::RefMoved`] with the actual value when the ref does not hold `expected`; the ref
    ///   is unchanged.
    /// - [`Error::RefLocked`], naming the lock file, when another writer holds `<ref>.lock` and
    ///   it is not provably stale (a stale one is removed and the update tried once more).
    /// - [`Error::InvalidRefName`], [`Error::MissingObject`]/[`Error::NotACommit`] when `new` is
    ///   not a commit in the repository, [`Error::SymbolicRef`], [`Error::Git`], [`Error::Sync`].
    pub fn update_ref(
        &self,
        ref_name: &str,
        expected: Option<CommitId>,
        new: CommitId,
        log_message: &str,
    ) -> Result<(), Error> {
        full_name(ref_name)?;
        let new_commit = self.find_commit(new)?;
        let committer = new_commit
            .committer()
            .map_err(git_err("read committer of", new))?;
        let base = self.repo.common_dir().to_owned();
        let ref_path = base.join(ref_name);
        let lock_path = self.ref_lock_path(ref_name);
        let lock_fail = gix::lock::acquire::Fail::AfterDurationWithBackoff(REF_LOCK_TIMEOUT);
        let mut reclaimed = false;
        let mut lock = loop {
            match gix::lock::File::acquire_to_update_resource(
                &ref_path,
                lock_fail,
                Some(base.clone()),
                0,
            ) {
                Ok(lock) => break lock,
                Err(err) => {
                    let held = err.iter_errors().any(|cause| {
                        cause
                            .downcast_ref::<std::io::Error>()
                            .is_some_and(|io| io.kind() == std::io::ErrorKind::AlreadyExists)
                    });
                    if !held {
                        return Err(git_err("lock ref", ref_name)(err));
                    }
                    if !reclaimed && self.reclaim_stale_ref_lock(ref_name) {
                        reclaimed = true;
                        continue;
                    }
                    return Err(Error::RefLocked {
                        ref_name: ref_name.to_owned(),
                        lock: lock_path,
                    });
                }
            }
        };
        // Read while the lock is held: loose first, then packed-refs (read, not locked).
        let actual = self.tip(ref_name)?;
        if actual != expected {
            return Err(Error::RefMoved {
                ref_name: ref_name.to_owned(),
                expected,
                actual,
            });
        }
        if actual == Some(new) {
            return Ok(()); // nothing to write; dropping the lock removes it
        }
        let sync_error = |source| Error::Sync {
            path: lock_path.clone(),
            source,
        };
        {
            use std::io::Write as _;
            lock.write_all(format!("{}\n", new.to_hex()).as_bytes())
                .map_err(sync_error)?;
        }
        // Make the value durable before the rename makes it the ref (crate::durable). The lock
        // is also flocked while we hold it, which is how a later writer proves a left-over lock
        // stale.
        let held = hold_lock_file(&lock_path).map_err(sync_error)?;
        let owner = self.lock_owner_path(ref_name);
        // Advisory: lets a later writer prove this lock stale if we die holding it.
        let _ = write_lock_owner(&owner, &held);
        let message = log_message.replace(['\n', '\r'], " ");
        let logged = self.append_reflog(ref_name, actual, new, committer, &message);
        let committed = logged.and_then(|()| {
            lock.commit().map(|_| ()).map_err(|e| Error::Sync {
                path: lock_path.clone(),
                source: e.error,
            })
        });
        let _ = std::fs::remove_file(&owner);
        drop(held);
        committed?;
        self.sync_ref_dirs(ref_name)
    }

    /// Deletes `ref_name` (loose and packed, with its reflog) when it exists; an absent ref is
    /// left absent. For the crate's own bookkeeping refs (never a ledger ref, which is only
    /// ever moved forward by compare-and-swap).
    ///
    /// # Errors
    /// [`Error::InvalidRefName`], [`Error::Git`] when git's ref transaction fails.
    pub fn delete_ref(&self, ref_name: &str) -> Result<(), Error> {
        use gix::refs::transaction::{Change, PreviousValue, RefEdit, RefLog};
        let name = full_name(ref_name)?;
        if self.tip(ref_name)?.is_none() {
            return Ok(());
        }
        self.repo
            .edit_reference(RefEdit {
                change: Change::Delete {
                    expected: PreviousValue::Any,
                    log: RefLog::AndReference,
                },
                name,
                deref: false,
            })
            .map_err(|e| git_err("delete", ref_name)(e))?;
        Ok(())
    }

    /// Appends the reflog entry of an update of `ref_name` from `old` to `new` by `committer`, as
    /// git does: when `core.logAllRefUpdates` says so (`always`; `true`, the default of
    /// repositories with a work tree, for `refs/heads/`, `refs/remotes/` and `refs/notes/`) or
    /// the reflog exists already.
    fn append_reflog(
        &self,
        ref_name: &str,
        old: Option<CommitId>,
        new: CommitId,
        committer: gix::actor::SignatureRef<'_>,
        message: &str,
    ) -> Result<(), Error> {
        use gix::refs::store::WriteReflog;
        let create = match self.repo.refs.write_reflog {
            WriteReflog::Disable => return Ok(()),
            WriteReflog::Always => true,
            WriteReflog::Normal => ["refs/heads/", "refs/remotes/", "refs/notes/"]
                .iter()
                .any(|p| ref_name.starts_with(p)),
        };
        let path = self.repo.common_dir().join("logs").join(ref_name);
        let io = |source| Error::Sync {
            path: path.clone(),
            source,
        };
        if create && let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = match std::fs::OpenOptions::new()
            .append(true)
            .create(create)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        let mut line = format!(
            "{} {} ",
            old.map_or_else(|| "0".repeat(new.to_hex().len()), |c| c.to_hex()),
            new.to_hex()
        )
        .into_bytes();
        committer.trim().write_to(&mut line).map_err(io)?;
        if !message.is_empty() {
            line.push(b'\t');
            line.extend_from_slice(message.as_bytes());
        }
        line.push(b'\n');
        std::io::Write::write_all(&mut file, &line).map_err(io)
    }

    /// Where a writer of this crate notes that it owns `<ref>.lock`: `action-ledger/ref-locks/`
    /// in the repository directory, one file per ref (its name hex-encoded).
    fn lock_owner_path(&self, ref_name: &str) -> PathBuf {
        let name: String = ref_name.bytes().map(|b| format!("{b:02x}")).collect();
        self.repo
            .common_dir()
            .join("action-ledger/ref-locks")
            .join(name)
    }

    /// [`Store::update_ref`], retried while another writer holds the ref's lock, for at most
    /// `wait` (polling every 10 ms): a held lock is a writer finishing its update within
    /// milliseconds, not a lost race. Every other outcome is returned at once.
    ///
    /// # Errors
    /// As [`Store::update_ref`]; [`Error::RefLocked`] when the lock is still held after `wait`.
    pub fn update_ref_waiting(
        &self,
        ref_name: &str,
        expected: Option<CommitId>,
        new: CommitId,
        log_message: &str,
        wait: Duration,
    ) -> Result<(), Error> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            match self.update_ref(ref_name, expected, new, log_message) {
                Err(Error::RefLocked { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                result => return result,
            }
        }
    }

    /// The lock file git and gix create beside a loose ref while they update it.
    fn ref_lock_path(&self, ref_name: &str) -> PathBuf {
        self.repo.common_dir().join(format!("{ref_name}.lock"))
    }

    /// Removes `<ref>.lock` when its owner is provably gone; true when the lock is gone (removed
    /// here or by its owner) and the update may be tried again.
    ///
    /// A writer of this crate holds an exclusive `flock` on the lock file from just after gix
    /// creates it until the rename ([`hold_lock_file`]), and notes itself as the owner in
    /// `action-ledger/ref-locks/` (PID, process incarnation, and the lock file's device, inode
    /// and modification time). A lock is stale only when nobody holds its `flock`, its owner
    /// note names this very file, and that process is dead (or its PID now names another
    /// process). A lock without such a note (git's own writers do not `flock` or note anything,
    /// and a writer may die between creating the lock and noting it) is never removed: the
    /// writer refuses and says how to check. The removal happens while holding the `flock`, and
    /// only if the path still names the same file, so two reclaimers cannot remove a fresh lock.
    ///
    /// Limits: `flock` and PIDs are local to one host; on a network file system shared by
    /// several hosts a note from another host is not trusted (its incarnation cannot be
    /// checked here), so such a lock is kept.
    fn reclaim_stale_ref_lock(&self, ref_name: &str) -> bool {
        let path = self.ref_lock_path(ref_name);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
        };
        let Ok(meta) = file.metadata() else {
            return false;
        };
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return false; // a live writer holds it
        }
        let Ok(note) = std::fs::read_to_string(self.lock_owner_path(ref_name)) else {
            return false; // no owner we can check: git's, or ours before it noted itself
        };
        let Some((pid, incarnation, identity)) = parse_lock_owner(&note) else {
            return false;
        };
        if identity != file_identity(&meta) {
            return false; // the note is about an earlier lock file
        }
        let alive = crate::process::pid_alive(pid)
            && crate::process::process_incarnation(pid)
                .is_none_or(|now| now.as_str() == incarnation);
        if alive {
            return false;
        }
        if !same_file(&meta, &path) {
            return true; // replaced meanwhile: try again
        }
        let removed = std::fs::remove_file(&path).is_ok();
        if let Some(dir) = path.parent() {
            let _ = durable::sync_dir(dir);
        }
        removed
    }

    /// fsync the directories of the loose ref file, from its own up to the repository directory,
    /// so that the rename that made it the ref survives a power loss. The file itself was fsynced
    /// as the lock before the rename.
    fn sync_ref_dirs(&self, ref_name: &str) -> Result<(), Error> {
        let base = self.repo.common_dir();
        let file = base.join(ref_name);
        let mut dir = file.parent();
        while let Some(d) = dir {
            sync_dir(d)?;
            if d == base {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }
}

/// Opens the ref lock at `path`, takes its exclusive `flock` (waiting while a reclaimer inspects
/// it) and fsyncs it. The returned file keeps the `flock` until it is dropped.
fn hold_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::File::open(path)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
    file.sync_all()?;
    Ok(file)
}

/// Device, inode and modification time (ns) of a file, as the owner note records them.
fn file_identity(meta: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        format!(
            "{}:{}:{}.{:09}",
            meta.dev(),
            meta.ino(),
            meta.mtime(),
            meta.mtime_nsec()
        )
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        String::new()
    }
}

/// Notes this process as the owner of the held ref lock `file` in `owner`:
/// `<pid> <incarnation> <identity>\n`.
fn write_lock_owner(owner: &Path, file: &std::fs::File) -> std::io::Result<()> {
    let incarnation = crate::process::process_incarnation(std::process::id())
        .ok_or_else(|| std::io::Error::other("no process incarnation"))?;
    if let Some(dir) = owner.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let note = format!(
        "{} {} {}\n",
        std::process::id(),
        incarnation.as_str(),
        file_identity(&file.metadata()?)
    );
    std::fs::write(owner, note)
}

/// `(pid, incarnation, identity)` of an owner note.
fn parse_lock_owner(note: &str) -> Option<(u32, &str, &str)> {
    let mut fields = note.trim_end().splitn(3, ' ');
    let pid = fields.next()?.parse().ok()?;
    Some((pid, fields.next()?, fields.next()?))
}

/// Whether `path` still names the file whose metadata is `meta` (same device and inode).
fn same_file(meta: &std::fs::Metadata, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).is_ok_and(|now| now.dev() == meta.dev() && now.ino() == meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = (meta, path);
        false
    }
}

pub(super) fn full_name(ref_name: &str) -> Result<FullName, Error> {
    let invalid = || Error::InvalidRefName {
        ref_name: ref_name.to_owned(),
    };
    if !ref_name.starts_with("refs/") {
        return Err(invalid());
    }
    FullName::try_from(ref_name).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    #[test]
    fn stale_expected_value_is_ref_moved_and_leaves_the_ref() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        // Two writers build on c1; the first wins.
        let winner = commit_on(&store, c1, &[("b", "2")], "w\n");
        let loser = commit_on(&store, c1, &[("c", "3")], "l\n");
        store.update_ref(MAIN, Some(c1), winner, "w").expect("win");
        match store.update_ref(MAIN, Some(c1), loser, "l") {
            Err(Error::RefMoved {
                ref_name,
                expected,
                actual,
            }) => {
                assert_eq!(ref_name, MAIN);
                assert_eq!(expected, Some(c1));
                assert_eq!(actual, Some(winner));
            }
            other => panic!("expected RefMoved, got {other:?}"),
        }
        assert_eq!(git(&repo, &["rev-parse", MAIN]), winner.to_hex());

        // MustNotExist on an existing ref.
        match store.update_ref(MAIN, None, loser, "l") {
            Err(Error::RefMoved {
                expected, actual, ..
            }) => assert_eq!((expected, actual), (None, Some(winner))),
            other => panic!("expected RefMoved, got {other:?}"),
        }
        // MustExistAndMatch on an absent ref.
        match store.update_ref("refs/heads/other", Some(c1), loser, "l") {
            Err(Error::RefMoved {
                expected, actual, ..
            }) => assert_eq!((expected, actual), (Some(c1), None)),
            other => panic!("expected RefMoved, got {other:?}"),
        }
        assert_eq!(store.tip("refs/heads/other").expect("tip"), None);
        assert_eq!(git(&repo, &["rev-parse", MAIN]), winner.to_hex());
        // Replaying the winning swap is a no-op success.
        store
            .update_ref(MAIN, Some(c1), winner, "again")
            .expect_err("c1 is no longer the tip");
        store
            .update_ref(MAIN, Some(winner), winner, "same")
            .expect("no-op");
    }

    /// A store whose main ref is at `c1`, a commit `c2` written on it but not landed, and the
    /// path of the main ref's lock file: the start of every lock test.
    fn tip_and_next() -> (
        tempfile::TempDir,
        PathBuf,
        Store,
        CommitId,
        CommitId,
        PathBuf,
    ) {
        let (tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        let c2 = commit_on(&store, c1, &[("b", "2")], "m");
        let lock = repo.join("refs/heads/main.lock");
        (tmp, repo, store, c1, c2, lock)
    }

    #[test]
    fn only_a_ref_lock_whose_noted_owner_is_dead_is_reclaimed() {
        let (_tmp, repo, store, c1, c2, lock) = tip_and_next();
        let owner = store.lock_owner_path(MAIN);
        let note = |pid: u32, incarnation: &str| {
            let meta = std::fs::metadata(&lock).expect("lock");
            std::fs::create_dir_all(owner.parent().unwrap()).unwrap();
            std::fs::write(
                &owner,
                format!("{pid} {incarnation} {}\n", file_identity(&meta)),
            )
            .unwrap();
        };
        let locked = |store: &Store| {
            matches!(
                store.update_ref(MAIN, Some(c1), c2, "m"),
                Err(Error::RefLocked { .. })
            )
        };
        let own = crate::process::process_incarnation(std::process::id()).expect("incarnation");
        // A PID above the kernel's maximum is certainly dead.
        let dead = 4_194_305;
        std::fs::write(&lock, "").expect("lock");
        // No owner note: git's lock, or a writer that died before noting itself. Kept.
        assert!(locked(&store), "an unnoted lock is kept");
        // A note by a live process (this one): kept.
        note(std::process::id(), own.as_str());
        assert!(locked(&store), "a live owner's lock is kept");
        // A note by our PID under another incarnation: the PID was reused, the owner is dead;
        // but a live writer holds the flock: kept.
        note(std::process::id(), &"0".repeat(64));
        let holder = std::fs::File::open(&lock).expect("open");
        rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        assert!(locked(&store), "a flocked lock is kept");
        drop(holder);
        // A dead owner's note about an earlier lock file (another inode or time): kept.
        std::fs::remove_file(&lock).unwrap();
        std::fs::write(&lock, "").expect("lock");
        std::fs::write(
            &owner,
            format!("{dead} {} 1:2:3.000000004\n", "0".repeat(64)),
        )
        .unwrap();
        assert!(locked(&store), "a note about another file proves nothing");
        assert!(lock.exists());
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c1.to_hex());
        // A dead owner's note about this very lock, nobody holding it: reclaimed.
        note(dead, &"0".repeat(64));
        store
            .update_ref(MAIN, Some(c1), c2, "m")
            .expect("a dead owner's lock is reclaimed");
        assert!(!lock.exists());
        assert!(!owner.exists(), "the owner note goes with the update");
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c2.to_hex());
    }

    #[test]
    fn held_lock_is_ref_locked_not_ref_moved() {
        let (_tmp, repo, store, c1, c2, lock) = tip_and_next();
        std::fs::write(&lock, "").expect("lock");
        match store.update_ref(MAIN, Some(c1), c2, "m") {
            Err(err @ Error::RefLocked { .. }) => {
                let message = err.to_string();
                assert!(message.contains(&lock.display().to_string()), "{message}");
                assert!(message.contains("fuser"), "says how to check: {message}");
            }
            other => panic!("expected RefLocked, got {other:?}"),
        }
        assert!(
            lock.exists(),
            "a fresh lock is another writer's and is left alone"
        );
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c1.to_hex());
        std::fs::remove_file(&lock).expect("unlock");
        store
            .update_ref(MAIN, Some(c1), c2, "m")
            .expect("after unlock");
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c2.to_hex());
    }

    #[test]
    fn packed_refs_are_read_and_swapped() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        git(&repo, &["pack-refs", "--all"]);
        assert!(!repo.join("refs/heads/main").exists(), "ref is packed");
        let store = Store::open(&repo).expect("open");
        assert_eq!(store.tip(MAIN).expect("tip"), Some(c1));
        let c2 = publish(&store, &[("b", "2")]);
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c2.to_hex());
        assert_fsck_clean(&repo);
    }

    /// `packed-refs.lock` (git's `pack-refs` at work) blocks no update, as it blocks none of
    /// git's: a loose ref, a ref only in `packed-refs`, a ref created; a stale expected value is
    /// still refused, and the lock is left alone.
    #[test]
    fn packed_refs_lock_blocks_no_update_git_would_make() {
        let (_tmp, repo, store, c1, c2, _lock) = tip_and_next();
        let packed_lock = repo.join("packed-refs.lock");
        std::fs::write(&packed_lock, "").unwrap();
        // A loose ref.
        store
            .update_ref(MAIN, Some(c1), c2, "m")
            .expect("loose ref");
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c2.to_hex());
        // A new ref.
        store
            .update_ref("refs/heads/other", None, c1, "m")
            .expect("new ref");
        // A ref only in packed-refs (packed while no lock was there).
        std::fs::remove_file(&packed_lock).unwrap();
        git(&repo, &["pack-refs", "--all"]);
        assert!(!repo.join("refs/heads/main").exists(), "packed");
        std::fs::write(&packed_lock, "").unwrap();
        let store = Store::open(&repo).unwrap();
        let c3 = commit_on(&store, c2, &[("c", "3")], "m");
        assert!(matches!(
            store.update_ref(MAIN, Some(c1), c3, "m"),
            Err(Error::RefMoved { actual: Some(a), .. }) if a == c2
        ));
        store
            .update_ref(MAIN, Some(c2), c3, "m")
            .expect("packed ref");
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c3.to_hex());
        assert!(packed_lock.exists(), "git's lock is git's");
        std::fs::remove_file(&packed_lock).unwrap();
        assert_fsck_clean(&repo);
    }

    /// The reflog gets git's line when the repository keeps reflogs, and none when it does not.
    #[test]
    fn the_reflog_is_written_as_git_writes_it() {
        let (_tmp, repo, store, c1, c2, _lock) = tip_and_next();
        let log = repo.join("logs/refs/heads/main");
        let before = std::fs::read_to_string(&log).unwrap_or_default();
        git(&repo, &["config", "core.logAllRefUpdates", "always"]);
        let store2 = Store::open(&repo).unwrap();
        store2.update_ref(MAIN, Some(c1), c2, "one\ntwo").unwrap();
        let after = std::fs::read_to_string(&log).unwrap();
        let line = after.strip_prefix(before.as_str()).unwrap();
        assert!(
            line.starts_with(&format!(
                "{} {} action-ledger <ledger@invalid> 1700000000 +0000\t",
                c1.to_hex(),
                c2.to_hex()
            )),
            "{line}"
        );
        assert!(line.ends_with("\tone two\n"), "{line}");
        assert!(git(&repo, &["reflog", "show", MAIN]).contains("one two"));
        drop(store);
    }
}
