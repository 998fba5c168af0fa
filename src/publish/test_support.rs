//! Helpers shared by the publisher's unit tests.

#![cfg(test)]

use std::path::Path;

use crate::store::Signature;

pub(super) fn sig() -> Signature {
    Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_773_100_800,
    }
}

pub(super) use crate::tests::day1_job as day1;

pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8(out.stdout).unwrap()
}

pub(super) fn files_in(
    dir: &Path,
    keep: impl Fn(&str) -> bool,
) -> std::collections::BTreeSet<String> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().strip_prefix(dir).unwrap().display().to_string())
        .filter(|p| keep(p))
        .collect()
}
