//! The Git-native store: reads commits and trees, writes objects, moves refs.
//!
//! The state repository is an ordinary Git repository, bare or not. This module never touches a
//! work tree or an index and never runs `git`: it writes blobs, edits trees (only the trees on
//! changed paths are rewritten), writes commits, and moves one ref with a compare-and-swap.
//!
//! # The only write path: prepare, then one commit point
//!
//! 1. **Prepare** — [`Store::write_commit`] validates every path against the base tree and against
//!    each other (no file where a directory is needed and vice versa, no existing path with
//!    different bytes) *before* writing anything, then writes the blobs, the edited trees and one
//!    commit whose single parent is the base: up to 16 objects as loose files, more as one pack
//!    with its index ([`crate::store::pack`]). Every file is written, fsynced, renamed into place and
//!    its directory fsynced before it returns ([`crate::durable`]). No ref moves.
//! 2. **Commit point** — [`Store::update_ref`] moves the ref from the tip the commit was built on
//!    to the new commit through a `gix-ref` transaction with
//!    `PreviousValue::MustExistAndMatch(old)` (or `MustNotExist` for the first commit). The
//!    expected value is checked while the ref's `.lock` file is held. The lock, which holds the
//!    new value, is fsynced, then renamed over the ref, so the swap is atomic; then the ref's
//!    directories are fsynced, and only then does the call return (and the caller acknowledge).
//!
//! A lost race is [`Error::RefMoved`] (carrying the expected and the actual value); a lock held
//! by another writer is [`Error::RefLocked`]. The caller (publish) re-reads the tip, re-validates
//! and rebuilds on [`Error::RefMoved`], and backs off on [`Error::RefLocked`]. Locks are waited
//! for at most [`REF_LOCK_TIMEOUT`].
//!
//! # What remains on disk after a crash
//!
//! - **Before the ref update** (during or after `write_commit`): the ref still names the old tip.
//!   Any blobs, trees and commit already written are unreachable objects; they are harmless,
//!   invisible to readers, and `git gc` prunes them. Rebuilding writes identical objects again.
//!   A temporary pack or object file may remain; the next pack written removes those whose
//!   writer is gone.
//! - **During the ref update**: at most a stale `<ref>.lock` file remains; the ref itself is either
//!   the old value or the new one (rename is atomic). A left-over lock makes later updates fail
//!   with [`Error::RefLocked`] until it is provably stale (its owner noted itself and is dead,
//!   and nobody holds its `flock`); then the next writer removes it and goes on. A lock left by
//!   git, or by a writer killed before it noted itself, is removed by hand.
//! - **After the ref update returned**: the new tip is durable and complete: every object it
//!   reaches, the ref file and the rename were on disk before the call returned.
//!
//! Besides Git objects and refs, `gix` is also used by [`crate::store::pack`] (ids and zlib) and the `git`
//! program by [`crate::store::remote`] (fetch and push, which gix cannot do here).
//!
//! # Reads
//!
//! [`Snapshot`] is a read view of one commit's tree. It decodes each tree once and caches it by
//! object id, so repeated lookups in a directory with thousands of entries cost one hash-map
//! probe per path component.

pub mod pack;
pub mod remote;
pub mod transact;

pub use transact::{Landed, Policy, Step, TransactError, backoff, transact};

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use gix::ObjectId;
use gix::bstr::{BStr, ByteSlice};

use crate::durable;
use crate::store::pack::PackBuilder;
use gix::objs::tree::EntryKind;
use gix::refs::transaction::{PreviousValue, RefEdit};
use gix::refs::{FullName, Target};

/// How long [`Store::update_ref`] waits for a ref lock held by another writer before it returns
/// [`Error::RefLocked`]. Git's own default (`core.filesRefLockTimeout`) is the same 100 ms.
pub const REF_LOCK_TIMEOUT: Duration = Duration::from_millis(100);

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the store. Each variant names the path, ref or object that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing a revision can name matches (see [`Store::resolve`]).
    #[error(
        "unknown revision {rev} ({reason}): give what `git rev-parse` accepts, such as a commit id (full or abbreviated), HEAD, a branch, tag or remote-tracking name (origin/main), optionally with ~N or ^N"
    )]
    UnknownRevision {
        /// The revision as given.
        rev: String,
        /// What the rev-spec parser said.
        reason: String,
    },
    /// The revision names a ledger ref that does not exist yet: nothing was published to it.
    #[error("there is no ledger at {ref_name} yet: nothing has been published to it")]
    NoLedger {
        /// The revision as given.
        rev: String,
        /// The full name of the ref that does not exist.
        ref_name: String,
    },
    /// The repository at `path` could not be opened.
    #[error(
        "could not open git repository at {path}: check that it exists and is a git repository"
    )]
    Open {
        /// The path given to [`Store::open`].
        path: PathBuf,
        /// The underlying Git error.
        #[source]
        source: BoxError,
    },
    /// A bare repository could not be created at `path`.
    #[error(
        "could not create a bare git repository at {path}: check that the parent directory is writable"
    )]
    Init {
        /// The path given to [`Store::open_or_init_bare`].
        path: PathBuf,
        /// The underlying Git error.
        #[source]
        source: BoxError,
    },
    /// A ref name is not a valid full ref name under `refs/`.
    #[error("invalid ref name {ref_name:?}: use a full name such as refs/heads/main")]
    InvalidRefName {
        /// The rejected name.
        ref_name: String,
    },
    /// A string is not a 40-hex object id.
    #[error("invalid commit id {input:?}: expected 40 lowercase hex digits")]
    InvalidCommitId {
        /// The rejected input.
        input: String,
    },
    /// A path is not a valid '/'-separated repository path.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The rejected path (lossy UTF-8 for names read from a tree).
        path: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The commit signature cannot be written in a form `git fsck --strict` accepts.
    #[error("invalid commit signature: {reason}")]
    InvalidSignature {
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The commit message cannot be written in a form `git fsck --strict` accepts.
    #[error("invalid commit message: {reason}")]
    InvalidMessage {
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The ref did not hold the expected value when its lock was taken: another writer won.
    #[error(
        "ref {ref_name} moved: expected {}, found {}; re-read the tip, rebuild the commit and retry",
        display_opt(.expected),
        display_opt(.actual)
    )]
    RefMoved {
        /// The ref that was to be updated.
        ref_name: String,
        /// The value the caller built on (`None`: the ref was expected not to exist).
        expected: Option<CommitId>,
        /// The value found under the lock (`None`: the ref does not exist).
        actual: Option<CommitId>,
    },
    /// Another writer holds `<ref>.lock` (or the `packed-refs.lock`), and it could not be shown
    /// to be stale ([`Store::update_ref`] reclaims a lock whose owner is provably gone).
    #[error(
        "ref {ref_name} is locked by another writer ({}): retry later; if no action-ledger or git process writes to this repository (check with `fuser {}` or `ps`), remove that file",
        lock.display(), lock.display()
    )]
    RefLocked {
        /// The ref that was to be updated.
        ref_name: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The ref is symbolic; the store only reads and writes direct refs.
    #[error("ref {ref_name} is symbolic (points to {target}): use the ref it points to")]
    SymbolicRef {
        /// The symbolic ref.
        ref_name: String,
        /// The ref it points to.
        target: String,
    },
    /// An object that must exist is missing from the object database.
    #[error(
        "object {id} is missing from the repository: fetch it or check the repository with git fsck"
    )]
    MissingObject {
        /// Hex id of the missing object.
        id: String,
    },
    /// An object expected to be a commit is of another kind.
    #[error("object {id} is not a commit: pass a commit id")]
    NotACommit {
        /// Hex id of the object.
        id: String,
    },
    /// A blob is larger than the caller's limit; it was not decompressed.
    #[error("{path} is larger than {max} bytes: refusing to read it")]
    TooLarge {
        /// The path of the blob.
        path: String,
        /// The limit that was exceeded.
        max: u64,
    },
    /// A file was expected at `path`, but a directory (tree) or a submodule is there.
    #[error("{path} is a directory or submodule, not a file")]
    NotAFile {
        /// The path looked up.
        path: String,
    },
    /// A directory was expected at `path`, but a file is there.
    #[error("{path} is a file, not a directory")]
    NotADirectory {
        /// The path looked up.
        path: String,
    },
    /// Writing `path` needs `file` to be a directory, but it is a file (in the base tree or in
    /// the same batch).
    #[error(
        "cannot write {path}: {file} is a file, not a directory; choose a path that does not pass through a file"
    )]
    FileInTheWay {
        /// The path to be written.
        path: String,
        /// The existing (or co-written) file on its way.
        file: String,
    },
    /// Writing a file at `path` would replace a directory.
    #[error(
        "cannot write {path}: it is a directory in the base tree; files never replace directories"
    )]
    DirectoryInTheWay {
        /// The path to be written.
        path: String,
    },
    /// A tree on the way to a path to be written is not well-formed; building on it would write
    /// another malformed tree.
    #[error(
        "the tree at {} is malformed: {defect}; refusing to build on it (run `action-ledger verify` and `git fsck` on the repository, and repair the tip first)",
        if path.is_empty() { "the root" } else { path.as_str() }
    )]
    MalformedTree {
        /// The tree's path from the root ("" for the root tree).
        path: String,
        /// What is wrong with it.
        defect: TreeDefect,
    },
    /// `path` already exists in the base tree with different bytes; files are create-only.
    #[error("{path} already exists with different bytes: published files are never rewritten")]
    Conflict {
        /// The path to be written.
        path: String,
    },
    /// The same path appears twice in one batch with different bytes.
    #[error("{path} is listed twice with different bytes: pass each path once")]
    DuplicatePath {
        /// The repeated path.
        path: String,
    },
    /// Flushing a written file or directory to disk failed; the operation did not complete.
    #[error("could not flush {path} to disk: check the file system")]
    Sync {
        /// The file or directory that could not be fsynced.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the pack of a commit failed (nothing was published).
    #[error(transparent)]
    Pack(Box<crate::store::pack::Error>),
    /// Any other Git failure while doing `action` on `subject`.
    #[error("git failed to {action} {subject} ({source}): check the repository with git fsck")]
    Git {
        /// What was being done, e.g. "read tree".
        action: &'static str,
        /// The object, ref or path concerned.
        subject: String,
        /// The underlying Git error.
        #[source]
        source: BoxError,
    },
}

fn display_opt(id: &Option<CommitId>) -> String {
    match id {
        Some(id) => id.to_hex(),
        None => "none".to_owned(),
    }
}

fn base_name(base: &Option<CommitId>) -> String {
    match base {
        Some(id) => format!("base commit {id}"),
        None => "an empty base".to_owned(),
    }
}

fn git_err(action: &'static str, subject: impl fmt::Display) -> impl FnOnce(gix::Error) -> Error {
    let subject = subject.to_string();
    move |err| Error::Git {
        action,
        subject,
        source: Box::new(err),
    }
}

/// A commit object id (40-hex SHA-1). `Display` is the lowercase hex form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommitId(ObjectId);

impl CommitId {
    /// The 40 lowercase hex digits of the id.
    pub fn to_hex(&self) -> String {
        self.0.to_hex().to_string()
    }

    /// Parse 40 lowercase hex digits.
    ///
    /// # Errors
    /// [`Error::InvalidCommitId`] for any other input. This only parses; it does not check that
    /// the object exists or is a commit.
    pub fn from_hex(s: &str) -> Result<Self, Error> {
        let invalid = || Error::InvalidCommitId {
            input: s.to_owned(),
        };
        if s.len() != 40 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(invalid());
        }
        ObjectId::from_hex(s.as_bytes())
            .map(CommitId)
            .map_err(|_| invalid())
    }
}

/// The Git object id of a file's content (40-hex SHA-1 over `blob <length>\0<bytes>`, what
/// `git hash-object` prints). Two files hold the same bytes exactly when their ids are equal, so
/// verification compares a stored file with the bytes it should hold without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(ObjectId);

impl BlobId {
    /// The id a blob holding `bytes` has in a SHA-1 repository.
    ///
    /// # Errors
    /// [`Error::Git`] only if SHA-1 collision detection flags `bytes` (a crafted collision).
    pub fn of(bytes: &[u8]) -> Result<BlobId, Error> {
        gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
            .map(BlobId)
            .map_err(git_err("hash blob", "expected file content"))
    }

    /// The 20 raw bytes of the id.
    pub fn bytes(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out.copy_from_slice(self.0.as_slice());
        out
    }

    /// The id from its 20 raw bytes.
    pub fn from_bytes(bytes: &[u8; 20]) -> BlobId {
        BlobId(ObjectId::from_bytes_or_panic(bytes))
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The Git mode of a tree entry as the tree records it: `100644` a file, `100755` an
/// executable file, `120000` a symbolic link (its blob holds the target), `160000` a submodule
/// (a commit link), `40000` a directory. `Display` prints six octal digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mode(u16);

impl Mode {
    /// `100644`, the mode of every file the publisher writes.
    pub const FILE: Mode = Mode(0o100644);

    /// The raw mode bits.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// A directory (tree).
    pub fn is_dir(self) -> bool {
        self.0 & 0o170000 == 0o040000
    }

    /// A plain file, mode exactly `100644`.
    pub fn is_regular_file(self) -> bool {
        self == Mode::FILE
    }

    /// What an entry of this mode is, in words ("a symbolic link", …).
    pub fn describe(self) -> &'static str {
        match self.0 & 0o170000 {
            0o040000 => "a directory",
            0o120000 => "a symbolic link",
            0o160000 => "a submodule (commit link)",
            0o100000 if self.0 == 0o100644 => "a file",
            0o100000 if self.0 & 0o100 != 0 => "an executable file",
            0o100000 => "a file with a non-standard mode",
            _ => "an entry of an unknown kind",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06o}", self.0)
    }
}

/// A path with the mode of its entry ([`Store::diff_with_modes`]).
pub type ModedPath = (String, Mode);

/// One entry of a tree walk ([`Snapshot::for_each_entry`]).
#[derive(Clone, Copy, Debug)]
pub struct Walked<'p> {
    /// The full '/'-separated path.
    pub path: &'p str,
    /// The entry's name: the last component of `path`.
    pub name: &'p str,
    /// Its mode.
    pub mode: Mode,
    /// The content id of a file or symbolic link (its blob); `None` for a directory or a
    /// submodule.
    pub blob: Option<BlobId>,
}

/// The identity and time written as both author and committer of a commit, with UTC offset
/// `+0000`. The caller injects the time (clock or `SOURCE_DATE_EPOCH`); the store never reads it.
///
/// `name` must be non-empty; `name` and `email` must not contain `<`, `>`, newlines or NUL, nor
/// start or end with whitespace; `email` may be empty. `time_seconds` must not be negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Author and committer name.
    pub name: String,
    /// Author and committer e-mail (written between `<` and `>`).
    pub email: String,
    /// Seconds since the Unix epoch.
    pub time_seconds: i64,
}

impl Signature {
    fn validate(&self) -> Result<(), Error> {
        let bad = |s: &str| s.contains(['<', '>', '\n', '\0']) || s.trim() != s;
        if self.name.is_empty() {
            return Err(Error::InvalidSignature {
                reason: "the name is empty; set a name",
            });
        }
        if bad(&self.name) {
            return Err(Error::InvalidSignature {
                reason: "the name contains '<', '>', a newline, NUL, or surrounding whitespace",
            });
        }
        if bad(&self.email) {
            return Err(Error::InvalidSignature {
                reason: "the email contains '<', '>', a newline, NUL, or surrounding whitespace",
            });
        }
        if self.time_seconds < 0 {
            return Err(Error::InvalidSignature {
                reason: "the time is before 1970; pass seconds since the unix epoch",
            });
        }
        Ok(())
    }
}

/// An open state repository (design.md §3). Holds one `gix` repository handle; open it once and
/// reuse it for all reads and writes of a run.
pub struct Store {
    repo: gix::Repository,
    /// A private object directory added by [`Store::with_object_dirs`], removed on drop.
    overlay: Option<PathBuf>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("git_dir", &self.repo.git_dir())
            .finish()
    }
}

impl Store {
    /// Open an existing repository (bare, or the work tree / `.git` directory of a non-bare one)
    /// at `path`.
    ///
    /// Only the repository's own configuration is read — no global or system config and no `GIT_*`
    /// environment variables — so results do not depend on the machine.
    ///
    /// # Errors
    /// [`Error::Open`] if `path` is not a Git repository.
    pub fn open(path: &Path) -> Result<Store, Error> {
        gix::open_opts(path, open_options())
            .map(|repo| Store {
                repo,
                overlay: None,
            })
            .map_err(|err| Error::Open {
                path: path.to_owned(),
                source: Box::new(err),
            })
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

    /// A read view of the tree of `commit`; `None` gives a view of the empty tree.
    ///
    /// # Errors
    /// [`Error::MissingObject`] or [`Error::NotACommit`] for a bad `commit`, [`Error::Git`] if it
    /// cannot be decoded.
    pub fn snapshot(&self, commit: Option<CommitId>) -> Result<Snapshot<'_>, Error> {
        let root = match commit {
            None => None,
            Some(id) => Some(self.commit_tree(id)?),
        };
        Ok(Snapshot {
            store: self,
            commit,
            root,
            trees: RefCell::new(HashMap::new()),
            pinned: RefCell::new(HashMap::new()),
        })
    }

    /// Prepare a publication: write a blob for each of `files` (a '/'-separated path and its
    /// bytes), edit the tree of `base` (only trees on changed paths are rewritten), and write a
    /// commit with `message` whose single parent is `base` (no parent when `None`), with `sig` as
    /// author and committer. Returns the new commit id. **No ref moves**; call
    /// [`Store::update_ref`] to publish it.
    ///
    /// Paths are upserted, but the store is create-only: a path that exists in `base` with the
    /// same bytes is left as it is; with different bytes it is an error. All the validation errors
    /// below are found before the first object is written. Written objects are fsynced before
    /// returning.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] (empty, absolute, `.`/`..`/`.git` components, …),
    /// [`Error::DuplicatePath`], [`Error::FileInTheWay`], [`Error::DirectoryInTheWay`],
    /// [`Error::Conflict`], [`Error::InvalidSignature`], [`Error::InvalidMessage`], errors of
    /// [`Store::snapshot`] for `base`, [`Error::Git`] if writing fails, [`Error::Sync`].
    pub fn write_commit(
        &self,
        base: Option<CommitId>,
        files: &[(String, Vec<u8>)],
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        self.write_commit_with(base, files, &[], false, message, sig)
    }

    /// Like [`Store::write_commit`], but may also replace existing files (`replace`) and remove
    /// the files in `removals`. For compaction, which replaces hot shards by segments, and for
    /// tests that plant defects; publishing never replaces.
    ///
    /// # Errors
    /// As [`Store::write_commit`]; a removal of a path that is not a file is [`Error::NotAFile`].
    pub fn write_commit_with(
        &self,
        base: Option<CommitId>,
        files: &[(String, Vec<u8>)],
        removals: &[String],
        replace: bool,
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        sig.validate()?;
        if message.contains('\0') {
            return Err(Error::InvalidMessage {
                reason: "it contains a NUL byte",
            });
        }
        let hash_kind = self.repo.object_hash();

        // Prepare: validate the whole batch against itself and the base before writing anything.
        let mut batch: BTreeMap<&str, (&[u8], ObjectId)> = BTreeMap::new();
        for (path, bytes) in files {
            validate_write_path(path)?;
            let id = gix::objs::compute_hash(hash_kind, gix::objs::Kind::Blob, bytes)
                .map_err(git_err("hash blob for", path))?;
            if let Some((_, existing)) = batch.insert(path, (bytes, id))
                && existing != id
            {
                return Err(Error::DuplicatePath { path: path.clone() });
            }
        }
        for path in batch.keys() {
            for (idx, _) in path.match_indices('/') {
                let ancestor = &path[..idx];
                if batch.contains_key(ancestor) {
                    return Err(Error::FileInTheWay {
                        path: (*path).to_owned(),
                        file: ancestor.to_owned(),
                    });
                }
            }
        }
        let base_view = self.snapshot(base)?;
        let mut new_files = Vec::new();
        for (path, (bytes, id)) in &batch {
            match base_view.lookup_for_write(path)? {
                None => new_files.push((*path, *bytes, *id)),
                Some(entry) if entry.kind == EntryKind::Tree => {
                    return Err(Error::DirectoryInTheWay {
                        path: (*path).to_owned(),
                    });
                }
                Some(entry) if is_file(entry.kind) && entry.id == *id => {}
                Some(entry) if is_file(entry.kind) && replace => {
                    new_files.push((*path, *bytes, *id));
                }
                Some(entry) if is_file(entry.kind) => {
                    return Err(Error::Conflict {
                        path: (*path).to_owned(),
                    });
                }
                Some(_) => {
                    return Err(Error::NotAFile {
                        path: (*path).to_owned(),
                    });
                }
            }
        }

        for path in removals {
            match base_view.lookup_for_write(path)? {
                Some(entry) if is_file(entry.kind) => {}
                _ => {
                    return Err(Error::NotAFile { path: path.clone() });
                }
            }
        }

        // Write: blobs, the trees on changed paths, the commit. Few objects stay loose (each
        // fsynced); more go into one pack with its index (pack.rs), which is faster and far
        // smaller from a handful of objects on.
        let mut dirs: Vec<&str> = new_files
            .iter()
            .map(|(path, _, _)| *path)
            .chain(removals.iter().map(String::as_str))
            .map(|path| path.rsplit_once('/').map_or("", |(dir, _)| dir))
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        let mut sink = if new_files.len() + dirs.len() + 2 > LOOSE_MAX {
            Sink::Pack(Box::new(PackBuilder::new(hash_kind)))
        } else {
            Sink::Loose(Vec::new())
        };
        let root = match base_view.root {
            Some(id) => self
                .repo
                .find_tree(id)
                .map_err(git_err("load tree of", base_name(&base)))?
                .decode()
                .map_err(git_err("decode tree of", base_name(&base)))?
                .into(),
            None => gix::objs::Tree::empty(),
        };
        let mut editor = gix::objs::tree::Editor::new(root, &self.repo.objects, hash_kind);
        for (path, bytes, _) in &new_files {
            let id = self.put(&mut sink, gix::objs::Kind::Blob, bytes, path)?;
            editor
                .upsert(path.split('/'), EntryKind::Blob, id)
                .map_err(git_err("add to tree", path))?;
        }
        for path in removals {
            editor
                .remove(path.split('/'))
                .map_err(git_err("remove from tree", path))?;
        }
        let mut buf = Vec::new();
        let tree = editor.write(|tree| {
            buf.clear();
            gix::objs::WriteTo::write_to(tree, &mut buf).map_err(|e| Error::Git {
                action: "serialize tree for commit on",
                subject: base_name(&base),
                source: Box::new(e),
            })?;
            self.put(&mut sink, gix::objs::Kind::Tree, &buf, "a tree")
        })?;
        let time = format!("{} +0000", sig.time_seconds);
        let person = format!("{} <{}> {time}", sig.name, sig.email);
        let tree_hex = tree.to_hex().to_string();
        let parent_hex = base.map(|b| b.0.to_hex().to_string());
        let commit_ref = gix::objs::CommitRef {
            tree: BStr::new(&tree_hex),
            parents: parent_hex.iter().map(|p| BStr::new(p.as_str())).collect(),
            author: BStr::new(&person),
            committer: BStr::new(&person),
            encoding: None,
            message: BStr::new(message),
            extra_headers: Vec::new(),
        };
        buf.clear();
        gix::objs::WriteTo::write_to(&commit_ref, &mut buf).map_err(|e| Error::Git {
            action: "serialize commit on",
            subject: base_name(&base),
            source: Box::new(e),
        })?;
        let commit = self.put(&mut sink, gix::objs::Kind::Commit, &buf, "the commit")?;
        match sink {
            Sink::Loose(pending) => self.write_loose_objects(&pending)?,
            Sink::Pack(pack) => {
                pack.finish(&self.objects_dir().join("pack"))
                    .map_err(|e| Error::Pack(Box::new(e)))?;
            }
        }
        Ok(CommitId(commit))
    }

    /// The commit point: move `ref_name` from `expected` to `new` as a compare-and-swap.
    ///
    /// `expected = Some(old)` requires the ref to hold `old` (`PreviousValue::MustExistAndMatch`);
    /// `None` requires it not to exist (`PreviousValue::MustNotExist`). The check happens while
    /// the ref's lock is held, and the lock is waited for at most [`REF_LOCK_TIMEOUT`]. If the ref already
    /// holds `new`, the call succeeds without change. `log_message` goes to the reflog (newlines are
    /// replaced by spaces), written as the committer of `new`, when the repository keeps reflogs.
    /// The ref file is fsynced before returning.
    ///
    /// # Errors
    /// - [`Error::RefMoved`] with the actual value when the ref does not hold `expected`; the ref
    ///   is unchanged.
    /// - [`Error::RefLocked`] when another writer holds the ref's (or `packed-refs`') lock and
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
        let name = full_name(ref_name)?;
        let new_commit = self.find_commit(new)?;
        let committer = new_commit
            .committer()
            .map_err(git_err("read committer of", new))?;
        let previous = match expected {
            Some(old) => PreviousValue::MustExistAndMatch(Target::Object(old.0)),
            None => PreviousValue::MustNotExist,
        };
        let message = log_message.replace(['\n', '\r'], " ");
        let edit = RefEdit::update(name, Target::Object(new.0), previous, message);
        let lock_fail = gix::lock::acquire::Fail::AfterDurationWithBackoff(REF_LOCK_TIMEOUT);
        let mut reclaimed = false;
        let prepared = loop {
            match self
                .repo
                .refs
                .transaction()
                .prepare(Some(edit.clone()), lock_fail, lock_fail)
            {
                Ok(prepared) => break prepared,
                Err(err) => match self.classify_prepare_error(err, ref_name, expected) {
                    Error::RefLocked { .. }
                        if !reclaimed && self.reclaim_stale_ref_lock(ref_name) =>
                    {
                        reclaimed = true;
                    }
                    other => return Err(other),
                },
            }
        };
        // gix wrote the new value into `<ref>.lock` during prepare without fsyncing it; make it
        // durable before the rename makes it the ref (crate::durable). The lock is also flocked
        // while we hold it, which is how a later writer proves a left-over lock stale. A swap to
        // the value the ref already holds writes no lock: nothing to sync.
        let lock = self.ref_lock_path(ref_name);
        let held = match hold_lock_file(&lock) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            other => other.map(Some),
        };
        let held = match held {
            Ok(held) => held,
            Err(source) => {
                drop(prepared); // rolls the lock back
                return Err(Error::Sync { path: lock, source });
            }
        };
        let owner = self.lock_owner_path(ref_name);
        if let Some(file) = &held {
            // Advisory: lets a later writer prove this lock stale if we die holding it.
            let _ = write_lock_owner(&owner, file);
        }
        let committed = prepared
            .commit(Some(committer))
            .map_err(git_err("update ref", ref_name));
        if held.is_some() {
            let _ = std::fs::remove_file(&owner);
        }
        committed?;
        self.sync_ref_dirs(ref_name)
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

    /// Turn a failed `prepare` into a typed error: a moved ref, a held lock, or anything else.
    fn classify_prepare_error(
        &self,
        err: gix::Error,
        ref_name: &str,
        expected: Option<CommitId>,
    ) -> Error {
        use gix::refs::file::transaction::prepare::{MustNotExist, ReferenceOutOfDate};
        let moved = |actual: &Target| match actual {
            Target::Object(id) => Error::RefMoved {
                ref_name: ref_name.to_owned(),
                expected,
                actual: Some(CommitId(*id)),
            },
            Target::Symbolic(target) => Error::SymbolicRef {
                ref_name: ref_name.to_owned(),
                target: target.as_bstr().to_string(),
            },
        };
        for cause in err.iter_errors() {
            if let Some(out_of_date) = cause.downcast_ref::<ReferenceOutOfDate>() {
                return moved(&out_of_date.actual);
            }
            if let Some(exists) = cause.downcast_ref::<MustNotExist>() {
                return moved(&exists.actual);
            }
            // gix-lock reports a lock file that exists as `AlreadyExists`, after the bounded wait.
            if cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::AlreadyExists)
            {
                return Error::RefLocked {
                    ref_name: ref_name.to_owned(),
                    lock: self.ref_lock_path(ref_name),
                };
            }
        }
        // `MustExistAndMatch` on an absent ref is reported as "not found", without a type.
        if expected.is_some() && err.is_not_found() && matches!(self.tip(ref_name), Ok(None)) {
            return Error::RefMoved {
                ref_name: ref_name.to_owned(),
                expected,
                actual: None,
            };
        }
        git_err("prepare update of ref", ref_name)(err)
    }

    fn find_commit(&self, id: CommitId) -> Result<gix::Commit<'_>, Error> {
        let object = self
            .repo
            .try_find_object(id.0)
            .map_err(git_err("read object", id))?
            .ok_or_else(|| Error::MissingObject { id: id.to_hex() })?;
        if object.kind != gix::objs::Kind::Commit {
            return Err(Error::NotACommit { id: id.to_hex() });
        }
        Ok(object.into_commit())
    }

    fn commit_tree(&self, id: CommitId) -> Result<ObjectId, Error> {
        let commit = self.find_commit(id)?;
        commit
            .tree_id()
            .map(gix::Id::detach)
            .map_err(git_err("read tree of commit", id))
    }

    fn objects_dir(&self) -> PathBuf {
        self.repo.common_dir().join("objects")
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

/// Publications writing at most this many objects stay loose (fsynced one by one); larger ones
/// are written as one pack. A pack costs two files and a directory sync whatever its size; loose
/// objects one file and sync each, and every pack adds an index that lookups consult, so the
/// handful of objects of a claim or outcome commit stay loose.
const LOOSE_MAX: usize = 16;

/// Where the objects of one commit go.
enum Sink {
    /// Objects not yet in the repository, written loose at the end ([`Store::write_loose_objects`]).
    Loose(Vec<(ObjectId, gix::objs::Kind, Vec<u8>)>),
    /// Collected into one pack, written at the end.
    Pack(Box<PackBuilder>),
}

impl Store {
    /// Stores one object in `sink`; returns its id. `what` names it in errors.
    fn put(
        &self,
        sink: &mut Sink,
        kind: gix::objs::Kind,
        bytes: &[u8],
        what: &str,
    ) -> Result<ObjectId, Error> {
        match sink {
            Sink::Pack(pack) => pack.add(kind, bytes).map_err(|e| Error::Pack(Box::new(e))),
            Sink::Loose(pending) => {
                let id = gix::objs::compute_hash(self.repo.object_hash(), kind, bytes)
                    .map_err(git_err("hash object for", what))?;
                if !self.repo.objects.exists_without_refresh(&id)
                    && !pending.iter().any(|(p, _, _)| *p == id)
                {
                    pending.push((id, kind, bytes.to_vec()));
                }
                Ok(id)
            }
        }
    }

    /// Writes `objects` as loose object files following [`crate::durable`]: each is written to a
    /// temporary file in its fan-out directory and fsynced, then renamed into place; then the
    /// fan-out directories (and `objects/` when a fan-out directory was created) are fsynced.
    fn write_loose_objects(
        &self,
        objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
    ) -> Result<(), Error> {
        let root = self.objects_dir();
        let mut dirs = Vec::new();
        let mut created_dir = false;
        for (id, kind, bytes) in objects {
            let hex = id.to_hex().to_string();
            let dir = root.join(&hex[..2]);
            let io = |source: std::io::Error| Error::Sync {
                path: dir.clone(),
                source,
            };
            match std::fs::create_dir(&dir) {
                Ok(()) => created_dir = true,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(e)),
            }
            let data = crate::store::pack::loose_object(*kind, bytes)
                .map_err(|e| Error::Pack(Box::new(e)))?;
            let tmp = dir.join(durable::temp_name("obj"));
            let result = durable::write_synced(&tmp, &[&data])
                .and_then(|()| std::fs::rename(&tmp, dir.join(&hex[2..])));
            if let Err(e) = result {
                let _ = std::fs::remove_file(&tmp);
                return Err(io(e));
            }
            dirs.push(dir);
        }
        dirs.sort_unstable();
        dirs.dedup();
        for dir in &dirs {
            sync_dir(dir)?;
        }
        if created_dir {
            sync_dir(&root)?;
        }
        Ok(())
    }
}

/// How every repository is opened: only its own configuration, and room for the indices of many
/// packs. Each publication adds a pack, and a long-lived handle re-scans `objects/pack` whenever
/// another publisher's objects are missing; gix holds every index it ever loaded in a fixed set
/// of slots (32 by default), so a busy repository would exhaust them. 8,192 slots cost well under
/// a MiB; past that many packs, `git gc` (which only repacks, safe beside publishers) is due.
fn open_options() -> gix::open::Options {
    gix::open::Options::isolated().object_store_slots(
        gix::odb::store::init::Slots::AsNeededByDiskState {
            multiplier: 2.0,
            minimum: 8192,
        },
    )
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

fn sync_dir(path: &Path) -> Result<(), Error> {
    durable::sync_dir(path).map_err(|source| Error::Sync {
        path: path.to_owned(),
        source,
    })
}

fn full_name(ref_name: &str) -> Result<FullName, Error> {
    let invalid = || Error::InvalidRefName {
        ref_name: ref_name.to_owned(),
    };
    if !ref_name.starts_with("refs/") {
        return Err(invalid());
    }
    FullName::try_from(ref_name).map_err(|_| invalid())
}

fn is_file(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::Blob | EntryKind::BlobExecutable | EntryKind::Link
    )
}

/// Structural checks for any path: '/'-separated, relative, no empty components.
fn validate_path(path: &str) -> Result<(), Error> {
    let invalid = |reason| Error::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    if path.is_empty() {
        return Err(invalid(
            "it is empty; pass a path such as ledger/v1/file.json",
        ));
    }
    if path.starts_with('/') || path.ends_with('/') || path.contains("//") {
        return Err(invalid(
            "it has a leading, trailing or doubled '/'; pass a relative path such as a/b.json",
        ));
    }
    if path.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    Ok(())
}

/// Checks for paths that will be written: structure, plus names Git refuses in trees.
fn validate_write_path(path: &str) -> Result<(), Error> {
    validate_path(path)?;
    for component in path.split('/') {
        if component == "." || component == ".." {
            return Err(Error::InvalidPath {
                path: path.to_owned(),
                reason: "it has a '.' or '..' component; pass a normalized path",
            });
        }
        if component.eq_ignore_ascii_case(".git") {
            return Err(Error::InvalidPath {
                path: path.to_owned(),
                reason: "it has a '.git' component, which git refuses to check out",
            });
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    kind: EntryKind,
    /// The raw mode (`kind` is derived from it).
    mode: Mode,
    id: ObjectId,
}

/// One decoded tree: entries by file name, and the first way in which it is not well-formed.
/// Reads look through a defect (a duplicate name resolves to one of its entries, as git's own
/// lookups do); writes refuse to build on it ([`Error::MalformedTree`]).
#[derive(Default)]
struct Dir {
    entries: HashMap<Vec<u8>, Entry>,
    /// Duplicate names or order; the same wherever the tree appears.
    defect: Option<TreeDefect>,
    /// The first entry that is neither a tree nor a `100644` file: a defect only below a ledger
    /// root, and a tree object may appear at several paths.
    odd_mode: Option<TreeDefect>,
}

impl Dir {
    /// The first defect of this tree when it stands at `tree_path`.
    fn defect_at(&self, tree_path: &str) -> Option<&TreeDefect> {
        self.defect.as_ref().or(self
            .odd_mode
            .as_ref()
            .filter(|_| under_ledger_root(tree_path)))
    }
}

impl std::ops::Deref for Dir {
    type Target = HashMap<Vec<u8>, Entry>;
    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

/// How a tree object breaks the rules that git's own trees follow, or the ledger's rule on entry
/// kinds. Git writes every tree sorted by name (a tree's name compared as if it ended in `/`),
/// with each name once; `git fsck` reports the first two as `treeNotSorted` and
/// `duplicateEntries`. Below `ledger/v1/` and `finality/v1/` every entry is a tree or a regular
/// file (mode `100644`): a symbolic link, an executable or a submodule link there is a defect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeDefect {
    /// The same name twice with the same kind of entry.
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// The same name both as a file and as a directory.
    FileDirectoryConflict {
        /// The name used for both.
        name: String,
    },
    /// `name` sorts before the entry in front of it.
    Unsorted {
        /// The first entry out of order.
        name: String,
    },
    /// A name git refuses in a tree (`git fsck`: `emptyName`, `hasDot`, `hasDotdot`,
    /// `hasDotgit`, `fullPathname`): empty, `.`, `..`, `.git` in any case, or containing `/`.
    BadName {
        /// The name, lossily decoded.
        name: String,
    },
    /// Bytes that are not the canonical encoding of the entries they hold, such as a mode with
    /// a leading zero (`040000`; `git fsck`: `zeroPaddedFilemode`). Git writes each tree in
    /// exactly one way, so such a tree was made by another tool and hashes differently from
    /// the same entries written by git.
    NotCanonical {
        /// The first entry whose encoding differs.
        name: String,
    },
    /// An entry that is neither a tree nor a `100644` file below a ledger root.
    Mode {
        /// The entry's name.
        name: String,
        /// Its mode in octal, as git prints it (`120000`, `100755`, `160000`).
        mode: String,
    },
}

impl TreeDefect {
    /// The stable rule name `verify` reports this defect under.
    pub fn rule_name(&self) -> &'static str {
        match self {
            TreeDefect::DuplicateName { .. } => "tree-duplicate-entry",
            TreeDefect::FileDirectoryConflict { .. } => "tree-file-directory-conflict",
            TreeDefect::Unsorted { .. } => "tree-unsorted",
            TreeDefect::BadName { .. } => "tree-bad-name",
            TreeDefect::NotCanonical { .. } => "tree-not-canonical",
            TreeDefect::Mode { .. } => "entry-mode",
        }
    }
}

impl fmt::Display for TreeDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeDefect::DuplicateName { name } => write!(f, "the entry {name:?} appears twice"),
            TreeDefect::FileDirectoryConflict { name } => {
                write!(f, "{name:?} is both a file and a directory")
            }
            TreeDefect::Unsorted { name } => {
                write!(f, "the entry {name:?} is out of git's sort order")
            }
            TreeDefect::BadName { name } => {
                write!(f, "the entry name {name:?} is not allowed in a git tree")
            }
            TreeDefect::NotCanonical { name } => write!(
                f,
                "the entry {name:?} is not encoded as git encodes it (for example a zero-padded mode)"
            ),
            TreeDefect::Mode { name, mode } => write!(
                f,
                "the entry {name:?} has mode {mode}; only regular files (100644) and trees are allowed"
            ),
        }
    }
}

/// Whether the tree at `path` (relative to the root, no trailing slash) lies at or below a ledger
/// root, where only trees and `100644` files may appear.
fn under_ledger_root(path: &str) -> bool {
    ["ledger/v1", "finality/v1"]
        .iter()
        .any(|root| path == *root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
}

/// The first defect of a decoded tree at `path` ([`TreeDefect`]), `None` when it is well-formed.
pub fn tree_defect(entries: &[gix::objs::tree::EntryRef<'_>], path: &str) -> Option<TreeDefect> {
    let name_of = |e: &gix::objs::tree::EntryRef<'_>| e.filename.to_str_lossy().into_owned();
    for e in entries {
        let name = e.filename.as_bytes();
        if name.is_empty()
            || name == b"."
            || name == b".."
            || name.eq_ignore_ascii_case(b".git")
            || name.contains(&b'/')
        {
            return Some(TreeDefect::BadName { name: name_of(e) });
        }
    }
    let mut kinds: HashMap<&[u8], bool> = HashMap::with_capacity(entries.len());
    for e in entries {
        if let Some(was_tree) = kinds.insert(e.filename.as_bytes(), e.mode.is_tree()) {
            return Some(if was_tree == e.mode.is_tree() {
                TreeDefect::DuplicateName { name: name_of(e) }
            } else {
                TreeDefect::FileDirectoryConflict { name: name_of(e) }
            });
        }
    }
    // Git's order: byte order of the names, a tree's name compared as if it ended in '/'.
    let key = |e: &gix::objs::tree::EntryRef<'_>| {
        let mut k = e.filename.as_bytes().to_vec();
        if e.mode.is_tree() {
            k.push(b'/');
        }
        k
    };
    for pair in entries.windows(2) {
        if key(&pair[0]) >= key(&pair[1]) {
            return Some(TreeDefect::Unsorted {
                name: name_of(&pair[1]),
            });
        }
    }
    if under_ledger_root(path) {
        return odd_mode(entries);
    }
    None
}

/// The first defect of the tree whose raw bytes are `raw` and entries `entries`: those of
/// [`tree_defect`] (no mode rule), or else bytes that are not git's encoding of the entries.
fn raw_tree_defect(raw: &[u8], entries: &[gix::objs::tree::EntryRef<'_>]) -> Option<TreeDefect> {
    if let Some(defect) = tree_defect(entries, "") {
        return Some(defect);
    }
    // Git's encoding: the mode in octal without leading zeros, a space, the name, NUL, the id.
    let mut at = 0;
    for e in entries {
        let mut expected = format!("{:o} ", e.mode.value()).into_bytes();
        expected.extend_from_slice(e.filename.as_bytes());
        expected.push(0);
        expected.extend_from_slice(e.oid.as_bytes());
        if raw.get(at..at + expected.len()) != Some(expected.as_slice()) {
            return Some(TreeDefect::NotCanonical {
                name: e.filename.to_str_lossy().into_owned(),
            });
        }
        at += expected.len();
    }
    (at != raw.len()).then(|| TreeDefect::NotCanonical {
        name: String::new(),
    })
}

/// The first entry that is neither a tree nor a file of mode exactly `100644` (git also reads
/// the obsolete `100664` as a file; the ledger's rule, like `verify`'s, does not), as a
/// [`TreeDefect::Mode`].
fn odd_mode(entries: &[gix::objs::tree::EntryRef<'_>]) -> Option<TreeDefect> {
    entries
        .iter()
        .find(|e| !e.mode.is_tree() && e.mode.value() != 0o100644)
        .map(|e| TreeDefect::Mode {
            name: e.filename.to_str_lossy().into_owned(),
            mode: format!("{:06o}", e.mode.value()),
        })
}

/// Decoded trees a [`Snapshot`] keeps at most below [`PINNED_DEPTH`] (each a few KiB in a
/// fanout ledger).
const MAX_CACHED_TREES: usize = 4096;
/// Trees at depths 0..6 (root, `ledger`, `v1`, `import-bindings`, a binding kind, its first
/// fan-out level) are kept for the snapshot's life; deeper ones in the bounded cache.
const PINNED_DEPTH: usize = 6;

/// A read view of the tree of one commit (or the empty tree), from [`Store::snapshot`].
///
/// Paths are '/'-separated and relative, like `ledger/v1/a.json`. Decoded trees are cached by
/// object id for the lifetime of the snapshot, so use one snapshot per tip and drop it afterwards.
pub struct Snapshot<'a> {
    store: &'a Store,
    commit: Option<CommitId>,
    root: Option<ObjectId>,
    trees: RefCell<HashMap<ObjectId, Rc<Dir>>>,
    /// Trees near the root (depth < [`PINNED_DEPTH`]), never evicted: every lookup passes them.
    pinned: RefCell<HashMap<ObjectId, Rc<Dir>>>,
}

impl fmt::Debug for Snapshot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("commit", &self.commit)
            .finish_non_exhaustive()
    }
}

impl<'a> Snapshot<'a> {
    /// The store this view reads.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The commit this view reads, or `None` for the empty tree.
    pub fn commit(&self) -> Option<CommitId> {
        self.commit
    }

    /// The bytes of the file at `path`, or `None` if nothing is there (also when a component on
    /// the way is a file). The size is checked from the object header before the blob is
    /// decompressed.
    ///
    /// # Errors
    /// [`Error::TooLarge`] if the blob is larger than `max_bytes`, [`Error::NotAFile`] if `path`
    /// is a directory or submodule, [`Error::InvalidPath`], [`Error::MissingObject`],
    /// [`Error::Git`].
    pub fn read(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, Error> {
        let Some(entry) = self.file_entry(path)? else {
            return Ok(None);
        };
        self.read_entry(entry.id, path, max_bytes).map(Some)
    }

    fn read_entry(&self, id: ObjectId, path: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
        let repo = &self.store.repo;
        let header = repo
            .try_find_header(id)
            .map_err(git_err("read object header of", path))?
            .ok_or_else(|| Error::MissingObject {
                id: id.to_hex().to_string(),
            })?;
        if header.size() > max_bytes {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                max: max_bytes,
            });
        }
        let mut blob = repo.find_blob(id).map_err(git_err("read blob of", path))?;
        // The header and the object come from the same immutable object; check anyway.
        if blob.data.len() as u64 > max_bytes {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                max: max_bytes,
            });
        }
        Ok(blob.take_data())
    }

    /// Whether a file exists at `path`.
    ///
    /// # Errors
    /// [`Error::NotAFile`] if a directory or submodule is at `path` (a layout the caller did not
    /// expect), [`Error::InvalidPath`], [`Error::Git`].
    pub fn exists(&self, path: &str) -> Result<bool, Error> {
        Ok(self.file_entry(path)?.is_some())
    }

    /// Whether a directory (tree) exists at `path`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn is_dir(&self, path: &str) -> Result<bool, Error> {
        validate_path(path)?;
        Ok(self
            .lookup(path)?
            .is_some_and(|entry| entry.kind == EntryKind::Tree))
    }

    /// Calls `visit` with every file path under the directory `prefix` (recursively), in no
    /// particular order, holding only the trees on the current path and the pending siblings:
    /// memory stays bounded by the tree shape, not by the number of files. Same errors and
    /// rules as [`Snapshot::list_files`].
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_file(&self, prefix: &str, mut visit: impl FnMut(&str)) -> Result<(), Error> {
        self.for_each_file_id(prefix, |path, _| visit(path))
    }

    /// [`Snapshot::for_each_file`] that also gives each file's [`BlobId`], so that a caller can
    /// compare contents with expected bytes ([`BlobId::of`]) without reading a single blob.
    /// Files are blobs of any file mode and symbolic links ([`Snapshot::for_each_entry`] tells
    /// them apart).
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_file_id(
        &self,
        prefix: &str,
        mut visit: impl FnMut(&str, BlobId),
    ) -> Result<(), Error> {
        self.for_each_entry(prefix, |entry| {
            if let (false, Some(id)) = (entry.mode.is_dir(), entry.blob) {
                visit(entry.path, id);
            }
        })
    }

    /// Calls `visit` with every entry under the directory `prefix` (recursively): directories,
    /// files, symbolic links and submodules, each with its mode. The entries of one directory
    /// are visited one after another, before or after those of any other directory; the
    /// directories come in no particular order. Holds only the trees on the current path and
    /// the pending siblings: memory stays bounded by the tree shape, not by the number of
    /// files. Every tree is decoded once and not cached; every 128 trees the mapped pack pages
    /// are released ([`Store::release_mapped_packs`]).
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_entry(
        &self,
        prefix: &str,
        visit: impl FnMut(&Walked<'_>),
    ) -> Result<(), Error> {
        self.for_each_entry_checked(prefix, visit, |_, _| {})
    }

    /// [`Snapshot::for_each_entry`] that also calls `malformed` with the path and the defect of
    /// every tree it decodes (the one at `prefix` included) that breaks git's rules on trees:
    /// duplicate names, a name both file and directory, entries out of order ([`TreeDefect`];
    /// entry modes are left to the caller, which sees every entry's mode).
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_entry_checked(
        &self,
        prefix: &str,
        mut visit: impl FnMut(&Walked<'_>),
        mut malformed: impl FnMut(&str, TreeDefect),
    ) -> Result<(), Error> {
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        let start = if prefix.is_empty() {
            match self.root {
                Some(root) => root,
                None => return Ok(()),
            }
        } else {
            validate_path(prefix)?;
            match self.lookup(prefix)? {
                None => return Ok(()),
                Some(entry) if entry.kind == EntryKind::Tree => entry.id,
                Some(_) => {
                    return Err(Error::NotADirectory {
                        path: prefix.to_owned(),
                    });
                }
            }
        };
        let repo = &self.store.repo;
        let mut pending = vec![(prefix.to_owned(), start)];
        let mut full = String::new();
        let mut decoded_trees = 0usize;
        while let Some((dir_path, id)) = pending.pop() {
            decoded_trees += 1;
            if decoded_trees.is_multiple_of(128) {
                // A walk of a large tree reads trees from every pack: keep resident memory
                // bounded by what the walk holds, not by the packs it passed through.
                self.store.release_mapped_packs();
            }
            let tree = repo
                .find_tree(id)
                .map_err(git_err("read tree on the way to", &dir_path))?;
            let decoded = tree
                .decode()
                .map_err(git_err("decode tree on the way to", &dir_path))?;
            if let Some(defect) = raw_tree_defect(&tree.data, &decoded.entries) {
                malformed(&dir_path, defect);
            }
            for entry in &decoded.entries {
                let name = std::str::from_utf8(entry.filename).map_err(|_| Error::InvalidPath {
                    path: format!("{dir_path}/{}", entry.filename.as_bstr()),
                    reason: "a file name in the tree is not valid UTF-8",
                })?;
                full.clear();
                if !dir_path.is_empty() {
                    full.push_str(&dir_path);
                    full.push('/');
                }
                full.push_str(name);
                let kind = entry.mode.kind();
                if kind == EntryKind::Tree {
                    pending.push((full.clone(), entry.oid.to_owned()));
                }
                visit(&Walked {
                    path: &full,
                    name,
                    mode: Mode(entry.mode.value()),
                    blob: is_file(kind).then(|| BlobId(entry.oid.to_owned())),
                });
            }
        }
        Ok(())
    }

    /// The names of the entries of the directory `path` (`""` for the root), unsorted; empty
    /// when nothing or no directory is there. Names that are not UTF-8 are read lossily.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn entry_names(&self, path: &str) -> Result<Vec<String>, Error> {
        let id = if path.is_empty() {
            self.root
        } else {
            validate_path(path)?;
            self.lookup(path)?
                .filter(|e| e.kind == EntryKind::Tree)
                .map(|e| e.id)
        };
        let Some(id) = id else {
            return Ok(Vec::new());
        };
        let depth = if path.is_empty() {
            0
        } else {
            path.split('/').count()
        };
        let dir = self.cached_tree(id, path, depth)?;
        Ok(dir.keys().map(|k| k.to_str_lossy().into_owned()).collect())
    }

    /// How the tree at `path` (`""` for the root) breaks git's rules on trees (duplicate names,
    /// a name both file and directory, entries out of order; not entry modes), `None` when it
    /// is well-formed or no tree is there.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn tree_defect_at(&self, path: &str) -> Result<Option<TreeDefect>, Error> {
        let id = if path.is_empty() {
            self.root
        } else {
            validate_path(path)?;
            self.lookup(path)?
                .filter(|e| e.kind == EntryKind::Tree)
                .map(|e| e.id)
        };
        let Some(id) = id else {
            return Ok(None);
        };
        let depth = if path.is_empty() {
            0
        } else {
            path.split('/').count()
        };
        Ok(self.cached_tree(id, path, depth)?.defect.clone())
    }

    /// The mode of the entry at `path`, `None` if nothing is there (also when a component on
    /// the way is not a directory). Reads trees only.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn mode(&self, path: &str) -> Result<Option<Mode>, Error> {
        validate_path(path)?;
        Ok(self.lookup(path)?.map(|entry| entry.mode))
    }

    /// The [`BlobId`] of the file at `path`, or `None` if nothing is there (also when a
    /// component on the way is a file). Reads trees only, never the blob.
    ///
    /// # Errors
    /// [`Error::NotAFile`] if a directory or submodule is at `path`, [`Error::InvalidPath`],
    /// [`Error::Git`].
    pub fn file_id(&self, path: &str) -> Result<Option<BlobId>, Error> {
        Ok(self.file_entry(path)?.map(|entry| BlobId(entry.id)))
    }

    /// The bytes of the blob `id` (found in this snapshot at `path`, which errors name). The
    /// size is checked from the object header before the blob is decompressed.
    ///
    /// # Errors
    /// [`Error::TooLarge`] if the blob is larger than `max_bytes`, [`Error::MissingObject`],
    /// [`Error::Git`].
    pub fn read_blob(&self, id: BlobId, path: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
        self.read_entry(id.0, path, max_bytes)
    }

    /// All file paths under the directory `prefix` (recursively), as full '/'-separated paths,
    /// sorted by byte order. `""` lists the whole tree; a trailing '/' on `prefix` is ignored.
    /// Empty if `prefix` does not exist. Submodule entries are not files and are skipped.
    ///
    /// # Errors
    /// [`Error::NotADirectory`] if `prefix` is a file, [`Error::InvalidPath`] for a bad prefix or a
    /// file name that is not UTF-8, [`Error::Git`].
    pub fn list_files(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        self.for_each_file(prefix, |path| out.push(path.to_owned()))?;
        out.sort_unstable();
        Ok(out)
    }

    /// [`Snapshot::list_files`] for a writer that will edit what it lists (compaction): every
    /// tree under `prefix` must be well-formed, and below the ledger roots hold only trees and
    /// `100644` files, as [`Store::write_commit_with`] requires of the trees it edits.
    ///
    /// # Errors
    /// [`Error::MalformedTree`] naming the first malformed tree met; as [`Snapshot::list_files`].
    pub fn list_files_for_write(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        let mut odd: Option<(String, TreeDefect)> = None;
        let mut malformed: Option<(String, TreeDefect)> = None;
        self.for_each_entry_checked(
            prefix,
            |entry| {
                if entry.mode.is_dir() {
                    return;
                }
                if !entry.mode.is_regular_file() && under_ledger_root(entry.path) {
                    let dir = entry.path.rsplit_once('/').map_or("", |(d, _)| d);
                    odd.get_or_insert_with(|| {
                        (
                            dir.to_owned(),
                            TreeDefect::Mode {
                                name: entry.name.to_owned(),
                                mode: format!("{:06o}", entry.mode.0),
                            },
                        )
                    });
                }
                if entry.blob.is_some() {
                    out.push(entry.path.to_owned());
                }
            },
            |path, defect| {
                malformed.get_or_insert_with(|| (path.to_owned(), defect));
            },
        )?;
        let first = malformed.or(odd);
        if let Some((path, defect)) = first {
            return Err(Error::MalformedTree { path, defect });
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The entry at `path` if it is a file; `None` if absent.
    fn file_entry(&self, path: &str) -> Result<Option<Entry>, Error> {
        validate_path(path)?;
        match self.lookup(path)? {
            None => Ok(None),
            Some(entry) if is_file(entry.kind) => Ok(Some(entry)),
            Some(_) => Err(Error::NotAFile {
                path: path.to_owned(),
            }),
        }
    }

    /// The entry at `path`; `None` if absent or if a component on the way is not a tree.
    fn lookup(&self, path: &str) -> Result<Option<Entry>, Error> {
        let Some(mut tree) = self.root else {
            return Ok(None);
        };
        let mut components = path.split('/').enumerate().peekable();
        while let Some((depth, name)) = components.next() {
            let dir = self.cached_tree(tree, path, depth)?;
            let Some(entry) = dir.get(name.as_bytes()).copied() else {
                return Ok(None);
            };
            if components.peek().is_none() {
                return Ok(Some(entry));
            }
            if entry.kind != EntryKind::Tree {
                return Ok(None);
            }
            tree = entry.id;
        }
        Ok(None)
    }

    /// Like [`Self::lookup`], but a file on the way to `path` is an error, as writing `path`
    /// would have to replace it by a directory.
    fn lookup_for_write(&self, path: &str) -> Result<Option<Entry>, Error> {
        let Some(mut tree) = self.root else {
            return Ok(None);
        };
        let mut walked = 0;
        let mut components = path.split('/').enumerate().peekable();
        while let Some((depth, name)) = components.next() {
            let dir = self.cached_tree(tree, path, depth)?;
            // `walked` is the length of this tree's own path (with a trailing '/' past the root).
            let tree_path = path[..walked].trim_end_matches('/');
            if let Some(defect) = dir.defect_at(tree_path) {
                return Err(Error::MalformedTree {
                    path: tree_path.to_owned(),
                    defect: defect.clone(),
                });
            }
            walked += name.len();
            let Some(entry) = dir.get(name.as_bytes()).copied() else {
                return Ok(None);
            };
            if components.peek().is_none() {
                return Ok(Some(entry));
            }
            if entry.kind != EntryKind::Tree {
                return Err(Error::FileInTheWay {
                    path: path.to_owned(),
                    file: path[..walked].to_owned(),
                });
            }
            tree = entry.id;
            walked += 1;
        }
        Ok(None)
    }

    fn cached_tree(&self, id: ObjectId, path: &str, depth: usize) -> Result<Rc<Dir>, Error> {
        let cache = if depth < PINNED_DEPTH {
            &self.pinned
        } else {
            &self.trees
        };
        if let Some(dir) = cache.borrow().get(&id) {
            return Ok(Rc::clone(dir));
        }
        let dir = Rc::new(self.decode_tree(id, path)?);
        if depth < PINNED_DEPTH {
            self.pinned.borrow_mut().insert(id, Rc::clone(&dir));
            return Ok(dir);
        }
        // Bounded: a walk over a whole fanout ledger touches every leaf tree (65,536 of them
        // for a million bindings); holding them all would cost hundreds of MiB. Starting over
        // costs only re-decoding the few trees on the next paths.
        if self.trees.borrow().len() >= MAX_CACHED_TREES {
            self.trees.borrow_mut().clear();
        }
        self.trees.borrow_mut().insert(id, Rc::clone(&dir));
        Ok(dir)
    }

    /// Decodes the tree `id` found on the way to `path`, noting its first [`TreeDefect`].
    fn decode_tree(&self, id: ObjectId, path: &str) -> Result<Dir, Error> {
        let tree = self
            .store
            .repo
            .find_tree(id)
            .map_err(git_err("read tree on the way to", path))?;
        let decoded = tree
            .decode()
            .map_err(git_err("decode tree on the way to", path))?;
        Ok(Dir {
            defect: raw_tree_defect(&tree.data, &decoded.entries),
            odd_mode: odd_mode(&decoded.entries),
            entries: decoded
                .entries
                .iter()
                .map(|e| {
                    (
                        e.filename.to_vec(),
                        Entry {
                            kind: e.mode.kind(),
                            mode: Mode(e.mode.value()),
                            id: e.oid.to_owned(),
                        },
                    )
                })
                .collect(),
        })
    }
}

/// What happened to one file path between two trees ([`Store::diff`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Added(String),
    Modified(String),
    Deleted(String),
}

impl Change {
    /// The path the change is about.
    pub fn path(&self) -> &str {
        match self {
            Change::Added(p) | Change::Modified(p) | Change::Deleted(p) => p,
        }
    }
}

impl Store {
    /// Resolves a revision to a commit with gix's rev-spec parser, which reads what
    /// `git rev-parse` reads: full or abbreviated commit ids, `HEAD`, full ref names, short
    /// branch, tag and remote-tracking names (`main`, `v1`, `origin/main`), ancestry (`~N`,
    /// `^N`) and peeling (`^{commit}`); an annotated tag is peeled to its commit.
    ///
    /// # Errors
    /// [`Error::NoLedger`] when `rev` names a ref that does not exist yet (an unborn `HEAD`,
    /// or a full ref name, or the short name of the ref an unborn `HEAD` points at),
    /// [`Error::UnknownRevision`] when nothing else matches, [`Error::NotACommit`] when it
    /// names another kind of object, [`Error::Git`].
    pub fn resolve(&self, rev: &str) -> Result<CommitId, Error> {
        let id = match self.repo.rev_parse_single(rev) {
            Ok(id) => id,
            Err(e) => {
                if let Some(ref_name) = self.unborn_ref(rev)? {
                    return Err(Error::NoLedger {
                        rev: rev.to_owned(),
                        ref_name,
                    });
                }
                // The deepest cause that is a sentence says most ("Reference \"x\" could not
                // be found", "… ancestor number 5 is out of range").
                let mut reason = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    let text = c.to_string();
                    if text.contains(' ') {
                        reason = text;
                    }
                    cause = c.source();
                }
                return Err(Error::UnknownRevision {
                    rev: rev.to_owned(),
                    reason,
                });
            }
        };
        let object = id.object().map_err(git_err("read object", rev))?;
        let commit = object.peel_to_commit().map_err(|_| Error::NotACommit {
            id: id.detach().to_hex().to_string(),
        })?;
        Ok(CommitId(commit.id))
    }

    /// The full name of the ref that `rev` names (before any `~`, `^` or `@{`) when that ref
    /// does not exist: `HEAD` or `@` while `HEAD` is unborn, a full `refs/...` name, or the
    /// short name of the ref an unborn `HEAD` points at.
    fn unborn_ref(&self, rev: &str) -> Result<Option<String>, Error> {
        let base = &rev[..rev.find(['~', '^', ':']).unwrap_or(rev.len())];
        let base = base.split("@{").next().unwrap_or(base);
        let exists = |name: &str| -> Result<bool, Error> {
            Ok(self
                .repo
                .try_find_reference(name)
                .map_err(git_err("read ref", name))?
                .is_some())
        };
        let head = self
            .repo
            .head_name()
            .map_err(git_err("read ref", "HEAD"))?
            .map(|n| n.as_bstr().to_string());
        let unborn_head = match &head {
            Some(target) => !exists(target)?,
            None => false,
        };
        Ok(match (base, head) {
            ("HEAD" | "@" | "", Some(target)) if unborn_head => Some(target),
            (name, _) if name.starts_with("refs/") && !exists(name)? => Some(name.to_owned()),
            (name, Some(target)) if unborn_head && target.rsplit('/').next() == Some(name) => {
                Some(target)
            }
            _ => None,
        })
    }

    /// The parents of a commit, in order.
    ///
    /// # Errors
    /// [`Error::MissingObject`], [`Error::NotACommit`], [`Error::Git`].
    pub fn parents(&self, id: CommitId) -> Result<Vec<CommitId>, Error> {
        let object = self
            .repo
            .try_find_object(id.0)
            .map_err(git_err("read commit", &id.to_hex()))?
            .ok_or_else(|| Error::MissingObject { id: id.to_hex() })?;
        let commit = object
            .try_into_commit()
            .map_err(|_| Error::NotACommit { id: id.to_hex() })?;
        Ok(commit.parent_ids().map(|p| CommitId(p.detach())).collect())
    }

    /// Whether `ancestor` is `descendant` or one of its ancestors (walks all parents).
    ///
    /// # Errors
    /// As [`Store::parents`].
    pub fn is_ancestor(&self, ancestor: CommitId, descendant: CommitId) -> Result<bool, Error> {
        let mut seen = std::collections::HashSet::new();
        let mut queue = std::collections::VecDeque::from([descendant]);
        while let Some(id) = queue.pop_front() {
            if id == ancestor {
                return Ok(true);
            }
            if seen.insert(id) {
                queue.extend(self.parents(id)?);
            }
        }
        Ok(false)
    }

    /// File-level changes from the tree of `old` (`None` = empty) to the tree of `new`, below
    /// `prefix` (`""` = everything). Only subtrees whose ids differ are read, so the cost follows
    /// the size of the change, not of the repository. Sorted by path.
    ///
    /// # Errors
    /// [`Error::Git`] when a tree cannot be read.
    pub fn diff(
        &self,
        old: Option<CommitId>,
        new: CommitId,
        prefix: &str,
    ) -> Result<Vec<Change>, Error> {
        Ok(self.diff_with_modes(old, new, prefix)?.changes)
    }

    /// [`Store::diff`], and every entry below `prefix` that is new or changed in `new` (content
    /// or mode) and is neither a directory nor a plain `100644` file: symbolic links,
    /// executable files, submodules (which [`Change`] does not list, as they are not files),
    /// with their modes, sorted by path.
    ///
    /// # Errors
    /// As [`Store::diff`].
    pub fn diff_with_modes(
        &self,
        old: Option<CommitId>,
        new: CommitId,
        prefix: &str,
    ) -> Result<TreeDiff, Error> {
        let old_snap = self.snapshot(old)?;
        let new_snap = self.snapshot(Some(new))?;
        let locate = |snap: &Snapshot<'_>| -> Result<Option<ObjectId>, Error> {
            if prefix.is_empty() {
                return Ok(snap.root);
            }
            Ok(match snap.lookup(prefix)? {
                Some(e) if e.kind == EntryKind::Tree => Some(e.id),
                _ => None,
            })
        };
        let mut out = Vec::new();
        let mut irregular = Vec::new();
        let mut malformed = Vec::new();
        diff_trees(
            &new_snap,
            locate(&old_snap)?,
            locate(&new_snap)?,
            prefix,
            &mut Diffed {
                changes: &mut out,
                irregular: &mut irregular,
                malformed: &mut malformed,
            },
        )?;
        out.sort_by(|a, b| a.path().cmp(b.path()));
        irregular.sort_by(|a, b| a.0.cmp(&b.0));
        malformed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(TreeDiff {
            changes: out,
            irregular,
            malformed,
        })
    }
}

impl Store {
    /// Also reads objects from `dirs` (object directories), as `git receive-pack` requires of a
    /// pre-receive hook: pushed objects wait in a quarantine directory until the hook accepts
    /// them. Builds a private object directory whose `info/alternates` names `dirs` and the
    /// repository's own objects, and reads through it. Writes are not expected afterwards.
    ///
    /// # Errors
    /// [`Error::Open`] when the overlay cannot be set up.
    pub fn with_object_dirs(mut self, dirs: &[PathBuf]) -> Result<Store, Error> {
        if dirs.is_empty() {
            return Ok(self);
        }
        let open_err = |e: std::io::Error| Error::Open {
            path: self.repo.git_dir().to_owned(),
            source: Box::new(e),
        };
        let overlay = std::env::temp_dir().join(format!(
            "action-ledger-objects-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0)
        ));
        std::fs::create_dir_all(overlay.join("info")).map_err(open_err)?;
        let own = self.repo.common_dir().join("objects");
        let mut lines = String::new();
        for dir in dirs.iter().chain([&own]) {
            let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            lines.push_str(&abs.to_string_lossy());
            lines.push('\n');
        }
        std::fs::write(overlay.join("info/alternates"), lines).map_err(open_err)?;
        let handle = gix::odb::at(&overlay, self.repo.object_hash()).map_err(open_err)?;
        self.repo.objects = gix::OdbHandle::new(handle, self.repo.object_hash());
        self.overlay = Some(overlay);
        Ok(self)
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

    /// Drops this process's page-table entries for the pack and pack-index files that are
    /// mapped into it (Linux: `madvise(MADV_DONTNEED)` on each read-only mapping of an
    /// `objects/pack/*.pack` or `*.idx` file listed in `/proc/self/maps`). The pages stay in
    /// the page cache and fault back in on the next read, so only resident memory changes: a
    /// walk over most objects of a large repository otherwise keeps every pack page it touched
    /// resident (1.1 GiB of a million-event ledger for `verify`). Does nothing on other
    /// systems or when the map cannot be read; it is an optimization, never needed for
    /// correctness.
    pub fn release_mapped_packs(&self) {
        #[cfg(target_os = "linux")]
        {
            let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
                return;
            };
            for line in maps.lines() {
                let mut fields = line.splitn(6, ' ');
                let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
                    continue;
                };
                let path = fields.nth(3).unwrap_or("").trim_start();
                let is_pack = path.contains("/objects/pack/")
                    && (path.ends_with(".pack") || path.ends_with(".idx"));
                if !is_pack || !perms.starts_with("r-") {
                    continue;
                }
                let Some((start, end)) = range.split_once('-') else {
                    continue;
                };
                let (Ok(start), Ok(end)) = (
                    usize::from_str_radix(start, 16),
                    usize::from_str_radix(end, 16),
                ) else {
                    continue;
                };
                // SAFETY: the range is a whole read-only (`r-`) mapping of a pack file that
                // this process made (gix maps packs and indices with PROT_READ). Its pages can
                // never have been written, so MADV_DONTNEED only unmaps them: the next access
                // faults the same file bytes back in, and every reference into the mapping
                // stays valid and sees unchanged data.
                let _ = unsafe {
                    rustix::mm::madvise(
                        start as *mut std::ffi::c_void,
                        end.saturating_sub(start),
                        rustix::mm::Advice::LinuxDontNeed,
                    )
                };
            }
        }
    }

    /// The repository's git directory (for a bare repository, the repository itself).
    pub fn git_dir(&self) -> &Path {
        self.repo.common_dir()
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(overlay) = self.overlay.take() {
            let _ = std::fs::remove_dir_all(overlay);
        }
    }
}

/// Splits `rev~N` / `rev^` suffixes: (base, number of first-parent steps).
fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// A tree's path and how it is malformed.
pub type MalformedTree = (String, TreeDefect);

/// What [`Store::diff_with_modes`] finds below its prefix.
#[derive(Debug, Default)]
pub struct TreeDiff {
    /// Files added, modified or deleted, sorted by path.
    pub changes: Vec<Change>,
    /// New or changed entries that are neither directories nor `100644` files, sorted by path.
    pub irregular: Vec<ModedPath>,
    /// Trees of the new side that differ from the old side and are malformed, sorted by path.
    pub malformed: Vec<MalformedTree>,
}

/// What [`diff_trees`] collects.
struct Diffed<'a> {
    changes: &'a mut Vec<Change>,
    irregular: &'a mut Vec<ModedPath>,
    /// Trees of the new side that differ from the old side and are malformed.
    malformed: &'a mut Vec<MalformedTree>,
}

fn diff_trees(
    snap: &Snapshot<'_>,
    old: Option<ObjectId>,
    new: Option<ObjectId>,
    path: &str,
    acc: &mut Diffed<'_>,
) -> Result<(), Error> {
    if old == new {
        return Ok(());
    }
    let read = |id: Option<ObjectId>| -> Result<Dir, Error> {
        id.map_or_else(|| Ok(Dir::default()), |id| snap.decode_tree(id, path))
    };
    let (old_dir, new_dir) = (read(old)?, read(new)?);
    if let Some(defect) = &new_dir.defect {
        acc.malformed.push((path.to_owned(), defect.clone()));
    }
    let mut names: Vec<&Vec<u8>> = old_dir.keys().chain(new_dir.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let full = join(path, &name.to_str_lossy());
        let (o, n) = (old_dir.get(name), new_dir.get(name));
        let tree_id = |e: Option<&Entry>| e.filter(|e| e.kind == EntryKind::Tree).map(|e| e.id);
        let file = |e: Option<&Entry>| e.filter(|e| is_file(e.kind)).map(|e| (e.id, e.kind));
        // Trees on either side: recurse (a tree replaced by a file shows as both).
        if tree_id(o).is_some() || tree_id(n).is_some() {
            diff_trees(snap, tree_id(o), tree_id(n), &full, acc)?;
        }
        if let Some(e) = n
            && !e.mode.is_dir()
            && !e.mode.is_regular_file()
            && o.is_none_or(|o| (o.id, o.mode) != (e.id, e.mode))
        {
            acc.irregular.push((full.clone(), e.mode));
        }
        match (file(o), file(n)) {
            (None, Some(_)) => acc.changes.push(Change::Added(full.clone())),
            (Some(_), None) => acc.changes.push(Change::Deleted(full.clone())),
            (Some(a), Some(b)) if a != b => acc.changes.push(Change::Modified(full.clone())),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const MAIN: &str = "refs/heads/main";

    fn sig() -> Signature {
        Signature {
            name: "action-ledger".to_owned(),
            email: "ledger@invalid".to_owned(),
            time_seconds: 1_700_000_000,
        }
    }

    /// Run real git with no user or system configuration; return trimmed stdout.
    #[test]
    fn modes_name_their_kind() {
        let cases = [
            (0o100644, "100644", "a file", true, false),
            (0o100755, "100755", "an executable file", false, false),
            (
                0o100664,
                "100664",
                "a file with a non-standard mode",
                false,
                false,
            ),
            (0o120000, "120000", "a symbolic link", false, false),
            (
                0o160000,
                "160000",
                "a submodule (commit link)",
                false,
                false,
            ),
            (0o040000, "040000", "a directory", false, true),
        ];
        for (bits, text, words, regular, dir) in cases {
            let mode = Mode(bits);
            assert_eq!(mode.to_string(), text);
            assert_eq!(mode.describe(), words);
            assert_eq!(mode.is_regular_file(), regular, "{text}");
            assert_eq!(mode.is_dir(), dir, "{text}");
        }
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = git_raw(dir, args);
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("git prints utf-8 here")
            .trim_end()
            .to_owned()
    }

    fn git_raw(dir: &Path, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env_remove("GIT_DIR")
            .output()
            .expect("git is installed")
    }

    fn files(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        list.iter()
            .map(|(p, b)| ((*p).to_owned(), b.as_bytes().to_vec()))
            .collect()
    }

    fn new_store() -> (tempfile::TempDir, PathBuf, Store) {
        let tmp = tempfile::tempdir().expect("temp dir");
        let path = tmp.path().join("state.git");
        let store = Store::open_or_init_bare(&path, MAIN).expect("init");
        (tmp, path, store)
    }

    /// Write and publish one commit on the current tip.
    fn publish(store: &Store, list: &[(&str, &str)]) -> CommitId {
        let base = store.tip(MAIN).expect("tip");
        let commit = store
            .write_commit(base, &files(list), "publish\n", &sig())
            .expect("write");
        store
            .update_ref(MAIN, base, commit, "publish")
            .expect("update ref");
        commit
    }

    fn assert_fsck_clean(repo: &Path) {
        let out = git_raw(repo, &["fsck", "--strict", "--no-dangling"]);
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "fsck: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn first_commit_with_must_not_exist_then_second_on_top() {
        let (_tmp, repo, store) = new_store();
        assert_eq!(store.tip(MAIN).expect("tip"), None);
        assert_eq!(git(&repo, &["symbolic-ref", "HEAD"]), MAIN);

        let c1 = store
            .write_commit(
                None,
                &files(&[("ledger/v1/layout.json", "{\"layout\":\"fanout\"}\n")]),
                "first\n\nLedger-Digest: abc\n",
                &sig(),
            )
            .expect("write first");
        assert_eq!(
            store.tip(MAIN).expect("tip"),
            None,
            "write_commit moves no ref"
        );
        store
            .update_ref(MAIN, None, c1, "first")
            .expect("create ref");
        assert_eq!(store.tip(MAIN).expect("tip"), Some(c1));
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c1.to_hex());

        let tree1 = git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]);
        assert_eq!(
            git(&repo, &["cat-file", "-p", &c1.to_hex()]),
            format!(
                "tree {tree1}\n\
                 author action-ledger <ledger@invalid> 1700000000 +0000\n\
                 committer action-ledger <ledger@invalid> 1700000000 +0000\n\
                 \n\
                 first\n\
                 \n\
                 Ledger-Digest: abc"
            )
        );

        let c2 = store
            .write_commit(
                Some(c1),
                &files(&[("ledger/v1/events/e1.json", "{\"n\":1}\n")]),
                "second\n",
                &sig(),
            )
            .expect("write second");
        store
            .update_ref(MAIN, Some(c1), c2, "second")
            .expect("move ref");
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c2.to_hex());
        assert_eq!(git(&repo, &["rev-parse", &format!("{c2}^")]), c1.to_hex());
        assert_eq!(git(&repo, &["rev-list", "--count", MAIN]), "2");
        assert_eq!(
            git(&repo, &["ls-tree", "-r", MAIN]),
            format!(
                "100644 blob {}\tledger/v1/events/e1.json\n100644 blob {}\tledger/v1/layout.json",
                git(
                    &repo,
                    &["rev-parse", &format!("{c2}:ledger/v1/events/e1.json")]
                ),
                git(
                    &repo,
                    &["rev-parse", &format!("{c1}:ledger/v1/layout.json")]
                ),
            )
        );
        assert_eq!(
            git(&repo, &["cat-file", "-p", "main:ledger/v1/layout.json"]),
            "{\"layout\":\"fanout\"}"
        );
        assert_fsck_clean(&repo);
    }

    #[test]
    fn nested_paths_and_3000_files_in_one_directory() {
        let (_tmp, repo, store) = new_store();
        let mut batch = vec![("a/b/c.json".to_owned(), b"{\"c\":true}\n".to_vec())];
        for i in 0..3000 {
            batch.push((
                format!("ledger/v1/events/{i:05}.json"),
                format!("{{\"i\":{i}}}\n").into_bytes(),
            ));
        }
        let c1 = store
            .write_commit(None, &batch, "bulk\n", &sig())
            .expect("write");
        store.update_ref(MAIN, None, c1, "bulk").expect("ref");

        let view = store.snapshot(Some(c1)).expect("snapshot");
        assert_eq!(view.commit(), Some(c1));
        assert_eq!(
            view.read("a/b/c.json", 1024).expect("read"),
            Some(b"{\"c\":true}\n".to_vec())
        );
        for i in [0, 1, 1499, 2999] {
            let path = format!("ledger/v1/events/{i:05}.json");
            assert_eq!(
                view.read(&path, 1024).expect("read"),
                Some(format!("{{\"i\":{i}}}\n").into_bytes())
            );
            assert!(view.exists(&path).expect("exists"));
        }
        assert!(!view.exists("ledger/v1/events/03000.json").expect("exists"));

        let events = view.list_files("ledger/v1/events").expect("list");
        let mut expected: Vec<String> = (0..3000)
            .map(|i| format!("ledger/v1/events/{i:05}.json"))
            .collect();
        expected.sort();
        assert_eq!(events, expected);
        let all = view.list_files("").expect("list all");
        assert_eq!(all.len(), 3001);
        assert_eq!(all[0], "a/b/c.json");
        let git_paths = git(&repo, &["ls-tree", "-r", "--name-only", MAIN]);
        assert_eq!(git_paths.lines().collect::<Vec<_>>(), all);
        let modes = git(&repo, &["ls-tree", "-r", MAIN]);
        assert!(modes.lines().all(|l| l.starts_with("100644 blob ")));
        assert_eq!(
            git(
                &repo,
                &["cat-file", "-p", "main:ledger/v1/events/02999.json"]
            ),
            "{\"i\":2999}"
        );

        // One more file in the big directory rewrites only the trees on its path.
        let c2 = publish(&store, &[("ledger/v1/events/03000.json", "{}\n")]);
        let rev = |spec: String| git(&repo, &["rev-parse", &spec]);
        assert_eq!(rev(format!("{c1}:a")), rev(format!("{c2}:a")));
        assert_ne!(
            rev(format!("{c1}:ledger/v1/events")),
            rev(format!("{c2}:ledger/v1/events"))
        );
        assert_eq!(
            store
                .snapshot(Some(c2))
                .expect("snapshot")
                .list_files("ledger/v1/events/")
                .expect("list")
                .len(),
            3001
        );
        assert_fsck_clean(&repo);
    }

    #[test]
    fn list_files_is_sorted_by_full_path_bytes() {
        let (_tmp, _repo, store) = new_store();
        let c = publish(
            &store,
            &[
                ("d/b", "1"),
                ("d/a/z", "2"),
                ("d/a.txt", "3"),
                ("d/a-b/x", "4"),
                ("d/A", "5"),
                ("e", "6"),
            ],
        );
        let view = store.snapshot(Some(c)).expect("snapshot");
        // Git's tree order would put "a.txt" after "a-b" but "a" (as "a/") after "a.txt"; we
        // return plain byte order of the full path.
        assert_eq!(
            view.list_files("d").expect("list"),
            vec!["d/A", "d/a-b/x", "d/a.txt", "d/a/z", "d/b"]
        );
        assert_eq!(
            view.list_files("nope").expect("absent"),
            Vec::<String>::new()
        );
        assert_eq!(view.list_files("d/a").expect("list"), vec!["d/a/z"]);
        assert!(matches!(
            view.list_files("e"),
            Err(Error::NotADirectory { path }) if path == "e"
        ));
        let empty = store.snapshot(None).expect("empty");
        assert_eq!(empty.list_files("").expect("list"), Vec::<String>::new());
        assert_eq!(empty.read("e", 10).expect("read"), None);
    }

    #[test]
    fn read_limits_and_kinds() {
        let (_tmp, _repo, store) = new_store();
        let c = publish(&store, &[("a/b/c.json", "0123456789")]);
        let view = store.snapshot(Some(c)).expect("snapshot");
        assert_eq!(
            view.read("a/b/c.json", 10).expect("at limit"),
            Some(b"0123456789".to_vec())
        );
        match view.read("a/b/c.json", 9) {
            Err(Error::TooLarge { path, max }) => {
                assert_eq!((path.as_str(), max), ("a/b/c.json", 9));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(matches!(view.read("a/b", 100), Err(Error::NotAFile { path }) if path == "a/b"));
        assert!(matches!(view.exists("a"), Err(Error::NotAFile { .. })));
        assert_eq!(view.read("a/b/missing", 100).expect("absent"), None);
        assert!(!view.exists("a/b/c.json/under-a-file").expect("absent"));
        assert!(matches!(
            view.read("a//b", 100),
            Err(Error::InvalidPath { path, .. }) if path == "a//b"
        ));
    }

    #[test]
    fn file_ids_are_git_blob_ids_and_reads_survive_released_pack_pages() {
        let (_tmp, repo, store) = new_store();
        // More than 16 objects: the publication is written as a pack, which gix maps.
        let files: Vec<(String, String)> = (0..40)
            .map(|i| (format!("d{}/f{i}.json", i % 4), format!("content {i}\n")))
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, c)| (p.as_str(), c.as_str()))
            .collect();
        let c = publish(&store, &refs);
        let view = store.snapshot(Some(c)).expect("snapshot");
        let mut seen = Vec::new();
        view.for_each_file_id("", |path, id| seen.push((path.to_owned(), id)))
            .expect("walk");
        seen.sort();
        assert_eq!(seen.len(), files.len());
        for (path, id) in &seen {
            let git_id = git(&repo, &["rev-parse", &format!("{c}:{path}")]);
            assert_eq!(id.to_string(), git_id, "{path}");
            assert_eq!(view.file_id(path).expect("lookup"), Some(*id));
            let bytes = view.read(path, 1 << 20).expect("read").expect("present");
            assert_eq!(BlobId::of(&bytes).expect("hash"), *id);
        }
        assert_eq!(
            BlobId::of(b"hello\n").expect("hash").to_string(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        store.release_mapped_packs();
        for (path, id) in &seen {
            let again = view
                .read_blob(*id, path, 1 << 20)
                .expect("read after release");
            assert_eq!(BlobId::of(&again).expect("hash"), *id);
        }
        assert_eq!(
            view.file_id("d0")
                .err()
                .map(|e| matches!(e, Error::NotAFile { .. })),
            Some(true)
        );
        assert_eq!(view.file_id("d0/missing.json").expect("lookup"), None);
    }

    #[test]
    fn write_rejects_conflicts_and_bad_paths_before_writing() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a/b/c.json", "one"), ("x", "x")]);
        let tree1 = git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]);
        let objects_before = git(&repo, &["count-objects"]);

        let write = |list: &[(&str, &str)]| store.write_commit(Some(c1), &files(list), "m", &sig());
        assert!(matches!(
            write(&[("new.json", "n"), ("a/b/c.json", "two")]),
            Err(Error::Conflict { path }) if path == "a/b/c.json"
        ));
        assert!(matches!(
            write(&[("a/b", "file over dir")]),
            Err(Error::DirectoryInTheWay { path }) if path == "a/b"
        ));
        assert!(matches!(
            write(&[("a/b/c.json/d", "under a file")]),
            Err(Error::FileInTheWay { path, file }) if path == "a/b/c.json/d" && file == "a/b/c.json"
        ));
        assert!(matches!(
            write(&[("n/m", "1"), ("n/m/o", "2")]),
            Err(Error::FileInTheWay { path, file }) if path == "n/m/o" && file == "n/m"
        ));
        assert!(matches!(
            write(&[("d", "1"), ("d", "2")]),
            Err(Error::DuplicatePath { path }) if path == "d"
        ));
        for bad in [
            "",
            "/abs",
            "trailing/",
            "a//b",
            "../up",
            "a/./b",
            ".git/config",
            "a/.GIT/x",
        ] {
            assert!(
                matches!(write(&[(bad, "v")]), Err(Error::InvalidPath { ref path, .. }) if path == bad),
                "{bad:?} must be rejected"
            );
        }
        let bad_sig = Signature {
            name: "a <b>".to_owned(),
            ..sig()
        };
        assert!(matches!(
            store.write_commit(Some(c1), &files(&[("y", "y")]), "m", &bad_sig),
            Err(Error::InvalidSignature { .. })
        ));
        assert_eq!(
            git(&repo, &["count-objects"]),
            objects_before,
            "nothing written"
        );

        // Identical bytes are unchanged: same tree, and a duplicate with equal bytes is fine.
        let c2 = write(&[("a/b/c.json", "one"), ("x", "x"), ("x", "x")]).expect("replay");
        assert_eq!(git(&repo, &["rev-parse", &format!("{c2}^{{tree}}")]), tree1);
        assert_eq!(store.tip(MAIN).expect("tip"), Some(c1));
    }

    #[test]
    fn stale_expected_value_is_ref_moved_and_leaves_the_ref() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        // Two writers build on c1; the first wins.
        let winner = store
            .write_commit(Some(c1), &files(&[("b", "2")]), "w\n", &sig())
            .expect("write");
        let loser = store
            .write_commit(Some(c1), &files(&[("c", "3")]), "l\n", &sig())
            .expect("write");
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

    #[test]
    fn only_a_ref_lock_whose_noted_owner_is_dead_is_reclaimed() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        let c2 = store
            .write_commit(Some(c1), &files(&[("b", "2")]), "m", &sig())
            .expect("write");
        let lock = repo.join("refs/heads/main.lock");
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
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        let c2 = store
            .write_commit(Some(c1), &files(&[("b", "2")]), "m", &sig())
            .expect("write");
        let lock = repo.join("refs/heads/main.lock");
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

    #[test]
    fn reads_a_non_bare_repository_written_by_git() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        git(dir, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::create_dir_all(dir.join("data/v1")).expect("mkdir");
        std::fs::write(dir.join("data/v1/x.json"), "{}\n").expect("write");
        git(dir, &["add", "--chmod=+x", "."]);
        git(
            dir,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "-m",
                "m",
            ],
        );
        let head = git(dir, &["rev-parse", "HEAD"]);
        let store = Store::open(dir).expect("open");
        let tip = store.tip(MAIN).expect("tip").expect("exists");
        assert_eq!(tip.to_hex(), head);
        let view = store.snapshot(Some(tip)).expect("snapshot");
        assert_eq!(
            view.read("data/v1/x.json", 3).expect("read"),
            Some(b"{}\n".to_vec())
        );
        // The reflog of a non-bare repository is written with the commit's committer.
        let c2 = publish(
            &store,
            &[("data/v1/y.json", "[]\n"), ("data/v1/x.json", "{}\n")],
        );
        // Re-publishing identical bytes leaves the existing entry (and its mode) alone; outside the
        // ledger roots an executable is the repository owner's business.
        assert!(
            git(dir, &["ls-tree", MAIN, "data/v1/x.json"]).starts_with("100755 blob "),
            "existing entry kept"
        );
        assert_eq!(
            git(dir, &["reflog", "-1", "--format=%H %gs %gn", MAIN]),
            format!("{c2} publish action-ledger")
        );
    }

    /// `resolve` reads what `git rev-parse` reads (checked against git itself), peels
    /// annotated tags, and tells a ref that does not exist yet from an unknown name.
    #[test]
    fn revisions_resolve_as_git_rev_parse_does() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        let c2 = publish(&store, &[("b", "2")]);
        let c3 = publish(&store, &[("c", "3")]);
        git(
            &repo,
            &["update-ref", "refs/remotes/origin/main", &c2.to_hex()],
        );
        git(&repo, &["tag", "v1", &c1.to_hex()]);
        let env_git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .current_dir(&repo)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@invalid")
                .output()
                .expect("git");
            assert!(out.status.success(), "{out:?}");
        };
        env_git(&["tag", "-a", "v2", "-m", "release", &c3.to_hex()]);
        let hex = c1.to_hex();
        let forms = [
            "HEAD",
            "@",
            "main",
            "heads/main",
            "refs/heads/main",
            "origin/main",
            "remotes/origin/main",
            "refs/remotes/origin/main",
            "origin/main^",
            "v1",
            "tags/v1",
            "v2",
            "v2^{commit}",
            "v2~1",
            "HEAD~2",
            "HEAD^",
            "HEAD^^",
            "HEAD~1^",
            "@~1",
            "main~2",
            "main^1",
            &hex,
            &hex[..7],
            &hex[..12],
        ];
        for form in forms {
            let want = git(
                &repo,
                &["rev-parse", "--verify", &format!("{form}^{{commit}}")],
            );
            let got = store
                .resolve(form)
                .unwrap_or_else(|e| panic!("{form}: {e}"));
            assert_eq!(got.to_hex(), want, "{form}");
        }
        for unknown in ["nope", "HEAD~5", "origin/nope", "v3", "main~x"] {
            assert!(
                matches!(store.resolve(unknown), Err(Error::UnknownRevision { .. })),
                "{unknown}: {:?}",
                store.resolve(unknown)
            );
        }
        let tree = git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]);
        assert!(matches!(
            store.resolve(&tree),
            Err(Error::NotACommit { .. })
        ));
        assert!(matches!(
            store.resolve("refs/heads/other"),
            Err(Error::NoLedger { ref_name, .. }) if ref_name == "refs/heads/other"
        ));

        // Nothing published yet.
        let (_tmp, _repo, empty) = new_store();
        for form in ["HEAD", "@", "HEAD~2", "HEAD^", "main", "refs/heads/main"] {
            assert!(
                matches!(
                    empty.resolve(form),
                    Err(Error::NoLedger { ref_name, .. }) if ref_name == MAIN
                ),
                "{form}: {:?}",
                empty.resolve(form)
            );
        }
        assert!(matches!(
            empty.resolve("refs/heads/other"),
            Err(Error::NoLedger { ref_name, .. }) if ref_name == "refs/heads/other"
        ));
        assert!(matches!(
            empty.resolve("nope"),
            Err(Error::UnknownRevision { .. })
        ));
    }

    #[test]
    fn ids_refs_and_objects_are_validated() {
        let hex = "0123456789abcdef0123456789abcdef01234567";
        let id = CommitId::from_hex(hex).expect("valid");
        assert_eq!(
            (id.to_hex(), id.to_string()),
            (hex.to_owned(), hex.to_owned())
        );
        for bad in [
            "",
            "0123",
            &hex.to_uppercase(),
            &format!("{hex}0"),
            &hex.replace('0', "g"),
        ] {
            assert!(matches!(
                CommitId::from_hex(bad),
                Err(Error::InvalidCommitId { .. })
            ));
        }

        let (_tmp, repo, store) = new_store();
        assert!(matches!(
            store.tip("main"),
            Err(Error::InvalidRefName { .. })
        ));
        assert!(matches!(
            store.tip("refs/heads/a..b"),
            Err(Error::InvalidRefName { .. })
        ));
        assert!(matches!(
            store.snapshot(Some(id)),
            Err(Error::MissingObject { id }) if id == hex
        ));
        let c1 = publish(&store, &[("a", "1")]);
        let tree = CommitId::from_hex(&git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]))
            .expect("hex");
        assert!(matches!(
            store.snapshot(Some(tree)),
            Err(Error::NotACommit { .. })
        ));
        assert!(matches!(
            store.update_ref(MAIN, Some(c1), tree, "m"),
            Err(Error::NotACommit { .. })
        ));
        let not_a_repo = tempfile::tempdir().expect("temp dir");
        std::fs::write(not_a_repo.path().join("file"), "x").expect("write");
        assert!(matches!(
            Store::open(not_a_repo.path()),
            Err(Error::Open { .. })
        ));
        assert!(matches!(
            Store::open_or_init_bare(not_a_repo.path(), MAIN),
            Err(Error::Open { .. })
        ));
    }

    /// Raw tree bytes of `(mode, name, id)` entries, in the order given (git's encoding: octal
    /// mode without leading zeros, a space, the name, NUL, the 20-byte id).
    fn raw_tree(entries: &[(u32, Vec<u8>, ObjectId)]) -> Vec<u8> {
        let mut raw = Vec::new();
        for (mode, name, id) in entries {
            raw.extend_from_slice(format!("{mode:o} ").as_bytes());
            raw.extend_from_slice(name);
            raw.push(0);
            raw.extend_from_slice(id.as_bytes());
        }
        raw
    }

    /// A commit on `base` whose tree at `dir` is replaced by `edit` of its entries; the trees
    /// above it are rebuilt well-formed. Written as raw objects, as any tool can.
    fn plant(
        store: &Store,
        base: CommitId,
        dir: &str,
        edit: impl Fn(&mut Vec<(u32, Vec<u8>, ObjectId)>),
    ) -> CommitId {
        let entries_of = |id: ObjectId| -> Vec<(u32, Vec<u8>, ObjectId)> {
            let tree = store.repo.find_tree(id).expect("tree");
            let decoded = tree.decode().expect("decode");
            decoded
                .entries
                .iter()
                .map(|e| (e.mode.value() as u32, e.filename.to_vec(), e.oid.to_owned()))
                .collect()
        };
        let write = |raw: Vec<u8>| -> ObjectId {
            gix::objs::Write::write_buf(&store.repo.objects, gix::objs::Kind::Tree, &raw)
                .expect("write tree")
        };
        // The chain of tree ids from the root down to `dir`.
        let mut chain = vec![store.commit_tree(base).expect("root")];
        let names: Vec<&str> = if dir.is_empty() {
            vec![]
        } else {
            dir.split('/').collect()
        };
        for name in &names {
            let here = entries_of(*chain.last().expect("tree"));
            let (_, _, id) = here
                .iter()
                .find(|(_, n, _)| n == name.as_bytes())
                .expect("path exists");
            chain.push(*id);
        }
        let mut leaf = entries_of(chain.pop().expect("leaf"));
        edit(&mut leaf);
        let mut id = write(raw_tree(&leaf));
        for name in names.iter().rev() {
            let mut parent = entries_of(chain.pop().expect("parent"));
            for entry in parent.iter_mut() {
                if entry.1 == name.as_bytes() {
                    entry.2 = id;
                }
            }
            id = write(raw_tree(&parent));
        }
        let time = "1700000000 +0000";
        let commit = format!(
            "tree {}\nparent {}\nauthor p <p@invalid> {time}\ncommitter p <p@invalid> {time}\n\nplant\n",
            id.to_hex(),
            base.to_hex()
        );
        let commit = gix::objs::Write::write_buf(
            &store.repo.objects,
            gix::objs::Kind::Commit,
            commit.as_bytes(),
        )
        .expect("commit");
        store
            .update_ref(MAIN, Some(base), CommitId(commit), "plant")
            .expect("plant");
        CommitId(commit)
    }

    #[test]
    fn writes_refuse_to_build_on_malformed_trees_at_any_depth() {
        let leaf = "ledger/v1/events/2026/01/15/openclaw-clawsweeper";
        let action = "finality/v1/actions/ab/act_1";
        let layout = [
            (format!("{leaf}/run-1.jsonl"), "{}\n"),
            (format!("{leaf}/run-2.jsonl"), "{}\n"),
            (format!("{action}/record.json"), "{}"),
            ("README".to_owned(), "x"),
            ("tools/run.sh".to_owned(), "x"),
        ];
        let list: Vec<(&str, &str)> = layout.iter().map(|(p, b)| (p.as_str(), *b)).collect();
        let blob = |store: &Store| {
            gix::objs::Write::write_buf(&store.repo.objects, gix::objs::Kind::Blob, b"x")
                .expect("blob")
        };
        type Edit = fn(&mut Vec<(u32, Vec<u8>, ObjectId)>, ObjectId);
        let kinds: [(&str, Edit, &str); 7] = [
            (
                "duplicate",
                |e, _| e.push(e[0].clone()),
                "tree-duplicate-entry",
            ),
            (
                "file and directory",
                |e, b| {
                    let dir = e
                        .iter()
                        .find(|x| x.0 == 0o40000)
                        .expect("a subtree")
                        .1
                        .clone();
                    e.push((0o100644, dir, b));
                },
                "tree-file-directory-conflict",
            ),
            (
                "unsorted",
                |e, b| {
                    e.push((0o100644, b"zz-extra".to_vec(), b));
                    e.reverse();
                },
                "tree-unsorted",
            ),
            (
                "symbolic link",
                |e, b| e.push((0o120000, b"zz-link".to_vec(), b)),
                "entry-mode",
            ),
            (
                "executable",
                |e, b| e.push((0o100755, b"zz-exec".to_vec(), b)),
                "entry-mode",
            ),
            (
                "submodule link",
                |e, b| e.push((0o160000, b"zz-sub".to_vec(), b)),
                "entry-mode",
            ),
            (
                "duplicate far apart",
                |e, b| {
                    let name = e
                        .iter()
                        .find(|x| x.0 == 0o40000)
                        .expect("a subtree")
                        .1
                        .clone();
                    // "name" as a file sorts before "name-x", the directory after it.
                    let mut other = name.clone();
                    other.extend_from_slice(b"-x");
                    e.push((0o100644, other, b));
                    e.push((0o100644, name, b));
                    e.sort_by(|a, b| {
                        let key = |x: &(u32, Vec<u8>, ObjectId)| {
                            let mut k = x.1.clone();
                            if x.0 == 0o40000 {
                                k.push(b'/');
                            }
                            k
                        };
                        key(a).cmp(&key(b))
                    });
                },
                "tree-file-directory-conflict",
            ),
        ];
        // (tree planted, a path written through it); the unsorted edit needs two entries.
        let places = [
            ("", format!("{leaf}/run-3.jsonl")),
            ("ledger/v1", format!("{leaf}/run-3.jsonl")),
            ("ledger/v1/events/2026/01", format!("{leaf}/run-3.jsonl")),
            ("finality/v1/actions", format!("{action}/claim.json")),
        ];
        for (place, write_path) in &places {
            for (kind, edit, rule) in &kinds {
                let (_tmp, repo, store) = new_store();
                let base = publish(&store, &list);
                let b = blob(&store);
                // Entry-mode defects count only below a ledger root.
                if *rule == "entry-mode" && place.is_empty() {
                    continue;
                }
                let planted = plant(&store, base, place, |e| edit(e, b));
                let err = store
                    .write_commit(Some(planted), &files(&[(write_path, "new")]), "w\n", &sig())
                    .expect_err(&format!("{kind} at {place:?}: refused"));
                match &err {
                    Error::MalformedTree { path, defect } => {
                        assert_eq!(path, place, "{kind}: names the tree");
                        assert_eq!(defect.rule_name(), *rule, "{kind} at {place:?}");
                    }
                    other => panic!("{kind} at {place:?}: expected MalformedTree, got {other:?}"),
                }
                let message = err.to_string();
                assert!(
                    message.contains("verify") && message.contains("git fsck"),
                    "{message}"
                );
                assert_eq!(
                    git(&repo, &["rev-parse", MAIN]),
                    planted.to_hex(),
                    "ref unchanged"
                );
            }
        }
        // Outside the ledger roots, other modes are the repository owner's business.
        let (_tmp, _repo, store) = new_store();
        let base = publish(&store, &list);
        let b = blob(&store);
        let planted = plant(&store, base, "tools", |e| {
            e.push((0o100755, b"run2.sh".to_vec(), b))
        });
        store
            .write_commit(Some(planted), &files(&[("tools/new", "n")]), "w\n", &sig())
            .expect("an executable outside the ledger roots is fine");
    }
}
