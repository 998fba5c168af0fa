//! Helpers shared by the store's unit tests: a fresh bare repository, real `git` without user
//! configuration, and one-call publication.

#![cfg(test)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::store::*;

/// The ledger ref the tests publish to.
pub(super) const MAIN: &str = "refs/heads/main";

pub(super) fn sig() -> Signature {
    Signature {
        name: "action-ledger".to_owned(),
        email: "ledger@invalid".to_owned(),
        time_seconds: 1_700_000_000,
    }
}

/// Run real git with no user or system configuration; return trimmed stdout.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
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

/// The files of a commit from `(path, content)` pairs (borrowed or owned text).
pub(super) fn files(list: &[(impl AsRef<str>, impl AsRef<str>)]) -> Vec<(String, Vec<u8>)> {
    list.iter()
        .map(|(p, b)| (p.as_ref().to_owned(), b.as_ref().as_bytes().to_vec()))
        .collect()
}

pub(super) fn new_store() -> (tempfile::TempDir, PathBuf, Store) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = tmp.path().join("state.git");
    let store = Store::open_or_init_bare(&path, MAIN).expect("init");
    (tmp, path, store)
}

/// Write and publish one commit on the current tip.
pub(super) fn publish(store: &Store, list: &[(impl AsRef<str>, impl AsRef<str>)]) -> CommitId {
    let base = store.tip(MAIN).expect("tip");
    let commit = store
        .write_commit(base, &files(list), "publish\n", &sig())
        .expect("write");
    store
        .update_ref(MAIN, base, commit, "publish")
        .expect("update ref");
    commit
}

/// Write a commit of `list` on `parent` without moving any ref: the commit another writer
/// built on the same tip, for tests that race or block the ref update.
pub(super) fn commit_on(
    store: &Store,
    parent: CommitId,
    list: &[(impl AsRef<str>, impl AsRef<str>)],
    message: &str,
) -> CommitId {
    store
        .write_commit(Some(parent), &files(list), message, &sig())
        .expect("write")
}

pub(super) fn assert_fsck_clean(repo: &Path) {
    let out = git_raw(repo, &["fsck", "--strict", "--no-dangling"]);
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "fsck: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
