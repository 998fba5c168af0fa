//! [`Error`], the store's one error type: each variant names the path, ref or object that
//! failed and says what to do.

use std::fmt;
use std::path::PathBuf;

use crate::store::*;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the store. Each variant names the path, ref or object that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    #[error(
        "could not flush {path} to disk ({source}): {}",
        crate::durable::io_advice(source)
    )]
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
    #[error(
        "git failed to {action} {subject} ({}): check the repository with git fsck",
        causes(source.as_ref())
    )]
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

/// An error and its causes, outermost first: gix wraps the I/O error (a full disk) that names
/// the real cause several levels down.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        next = cause.source();
    }
    text
}

fn display_opt(id: &Option<CommitId>) -> String {
    match id {
        Some(id) => id.to_hex(),
        None => "none".to_owned(),
    }
}

pub(super) fn base_name(base: &Option<CommitId>) -> String {
    match base {
        Some(id) => format!("base commit {id}"),
        None => "an empty base".to_owned(),
    }
}

pub(super) fn git_err(
    action: &'static str,
    subject: impl fmt::Display,
) -> impl FnOnce(gix::Error) -> Error {
    let subject = subject.to_string();
    move |err| Error::Git {
        action,
        subject,
        source: Box::new(err),
    }
}
