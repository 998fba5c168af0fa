//! `verify`: a revision or a push range checked offline; findings on stderr (and stdout with
//! `--json`), exit 1 when there are any.
//!
//! In a pre-receive hook the pushed objects are still in git's quarantine: the object
//! directories named by `GIT_OBJECT_DIRECTORY` and `GIT_ALTERNATE_OBJECT_DIRECTORIES` are added
//! to the repository's own.

use std::path::{Path, PathBuf};

use crate::canonical::Value;
use crate::privacy::Profile;
use crate::store::{self, CommitId, Store};

use crate::cli::Env;
use crate::cli::output::{Failure, Printer, line};

/// Runs `verify`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    repo: &Path,
    read: &Read<'_>,
    range: Option<&str>,
    json: bool,
    profile: Profile,
) -> Result<(), Failure> {
    let options = crate::verify::Options { privacy: profile };
    // A walk over most objects of the repository: fewer, larger releases of mapped pages.
    store::set_mapped_budget(crate::verify::MAPPED_BUDGET);
    let unreadable = |e: &dyn std::fmt::Display| {
        Failure::input(format!("cannot verify {}: {e}", repo.display()))
    };
    let store = open_with_quarantine(env, repo).map_err(|e| unreadable(&e))?;
    let resolve = |r: &str| store.resolve(r).map_err(|e| unreadable(&e));
    let meter = out.meter();
    let (report, what) = match range {
        Some(range) => {
            let (old, new) = split_range(range)?;
            // An empty side read as HEAD is said, so that `..X` is not mistaken for a new ref.
            let read_as = match old {
                Some(old) if format!("{old}..{new}") != range => {
                    format!(" (read as {old}..{new})")
                }
                _ => String::new(),
            };
            let old = match old {
                None => None,
                Some(old) => Some(resolve(old)?),
            };
            let new = resolve(new)?;
            let report = crate::verify::verify_range_observed(&store, old, new, &options, &meter)
                .map_err(|e| unreadable(&e))?;
            (report, format!("push {range}{read_as}"))
        }
        None => {
            let commit = read
                .resolve(&store)
                .map_err(|e| unreadable(&read.explain(&store, &e)))?;
            let report = crate::verify::verify_revision_observed(&store, commit, &options, &meter)
                .map_err(|e| unreadable(&e))?;
            (report, format!("{} ({})", read.name(), commit.to_hex()))
        }
    };
    drop(meter);
    // Warnings print like findings (type "warning" in JSON) and leave the exit code alone.
    let findings = report.findings.iter().map(|f| ("finding", f));
    let warnings = report.warnings.iter().map(|f| ("warning", f));
    for (kind, f) in findings.chain(warnings) {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str(kind)),
                ("path", Value::str(&f.path)),
                ("rule", Value::str(f.rule.code())),
                ("detail", Value::str(&f.detail)),
            ])));
        }
        let _ = writeln!(out.stderr, "{}: {}: {}", f.path, f.rule, f.detail);
    }
    if json {
        out.data(&line(&Value::object([
            ("type", Value::str("summary")),
            ("findings", Value::from(report.findings.len() as i64)),
            ("warnings", Value::from(report.warnings.len() as i64)),
            ("shards", Value::from(report.shards as i64)),
            ("events", Value::from(report.events as i64)),
            ("bindings", Value::from(report.bindings as i64)),
        ])));
    }
    out.note(&format!(
        "verified {what}: {} shard(s), {} event(s), {} binding(s), {} finding(s){}",
        report.shards,
        report.events,
        report.bindings,
        report.findings.len(),
        match report.warnings.len() {
            0 => String::new(),
            n => format!(", {n} warning(s)"),
        }
    ));
    if report.is_clean() {
        Ok(())
    } else {
        Err(Failure::refused(format!(
            "{} finding(s)",
            report.findings.len()
        )))
    }
}

/// Opens `repo` with the object directories of a push still in git's quarantine
/// (`GIT_OBJECT_DIRECTORY`, `GIT_ALTERNATE_OBJECT_DIRECTORIES`), as a pre-receive hook sees
/// them; outside a hook, just the repository.
///
/// # Errors
/// As [`Store::open`] and [`Store::with_object_dirs`].
pub(in crate::cli) fn open_with_quarantine(env: &Env, repo: &Path) -> Result<Store, store::Error> {
    let mut quarantine: Vec<PathBuf> = Vec::new();
    if let Some(dir) = env.get("GIT_OBJECT_DIRECTORY").filter(|d| !d.is_empty()) {
        quarantine.push(PathBuf::from(dir));
    }
    if let Some(dirs) = env.get("GIT_ALTERNATE_OBJECT_DIRECTORIES") {
        quarantine.extend(dirs.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
    }
    // The private object directory that reads through them goes in the temporary directory.
    let scratch = env
        .get("TMPDIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    Store::open(repo).and_then(|s| s.with_object_dirs(&quarantine, &scratch))
}

/// What `verify` and `log` read when no `--range` is given: the ledger ref of `--ref` by its
/// exact name, or the revision of `--rev`.
pub(in crate::cli) enum Read<'a> {
    /// `--ref` (or its default): the ref `publish --ref` writes.
    Ledger(&'a str),
    /// `--rev`: any revision `git rev-parse` takes.
    Rev(&'a str),
}

impl<'a> Read<'a> {
    /// `--rev` when given, else the ledger ref `--ref`.
    pub(in crate::cli) fn of(ref_name: &'a str, rev: Option<&'a str>) -> Read<'a> {
        rev.map_or(Read::Ledger(ref_name), Read::Rev)
    }

    /// The ref or revision as given.
    pub(in crate::cli) fn name(&self) -> &'a str {
        match self {
            Read::Ledger(name) | Read::Rev(name) => name,
        }
    }

    /// The commit read.
    ///
    /// # Errors
    /// As [`Store::resolve_ledger`] or [`Store::resolve`]; [`Read::explain`] words them.
    pub(in crate::cli) fn resolve(&self, store: &Store) -> Result<CommitId, store::Error> {
        match self {
            Read::Ledger(name) => store.resolve_ledger(name),
            Read::Rev(rev) => store.resolve(rev),
        }
    }

    /// The text of a [`Read::resolve`] error: for a ref that does not exist, it names the ref,
    /// says which flag it came from, and lists a few refs the repository does hold.
    pub(in crate::cli) fn explain(&self, store: &Store, e: &store::Error) -> String {
        let mut message = e.to_string();
        if let store::Error::NoLedger { ref_name, .. } = e {
            if let Read::Ledger(_) = self {
                message.push_str(" (the ledger ref of --ref, which `publish --ref` writes)");
            }
            let others: Vec<String> = store
                .ref_names(6)
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n != ref_name)
                .take(5)
                .collect();
            if !others.is_empty() {
                message.push_str(&format!(
                    "; this repository holds {}: name the ledger with --ref or --rev",
                    others.join(", ")
                ));
            }
        }
        message
    }
}

/// The two sides of `--range OLD..NEW`, as git reads them (gitrevisions(7)): an empty side is
/// `HEAD`; OLD of 40 (or 64) zeros, the id git gives a ref that did not exist, is `None`.
/// `A...B` (git's symmetric difference, which is no push) and anything without `..` are refused
/// with what to write instead.
pub(in crate::cli) fn split_range(range: &str) -> Result<(Option<&str>, &str), Failure> {
    if range.contains("...") {
        return Err(Failure::input(format!(
            "--range {range}: A...B is git's symmetric difference (the commits of either side \
             not in both), not a push; give OLD..NEW, the tip before the push and the tip after \
             (for the commits of B since it forked from A: `$(git merge-base A B)..B`)"
        )));
    }
    let Some((old, new)) = range.split_once("..") else {
        return Err(Failure::input(format!(
            "--range wants OLD..NEW (the tips before and after a push), got {range}"
        )));
    };
    if new.contains("..") {
        return Err(Failure::input(format!(
            "--range wants one OLD..NEW, got {range}"
        )));
    }
    fn side(s: &str) -> &str {
        if s.is_empty() { "HEAD" } else { s }
    }
    let null = (old.len() == 40 || old.len() == 64) && old.bytes().all(|b| b == b'0');
    Ok(((!null).then(|| side(old)), side(new)))
}

#[cfg(test)]
mod tests {
    use super::split_range;

    /// The sides of `--range` as git reads them; the forms that are no push are refused.
    #[test]
    fn ranges_split_as_git_reads_them() {
        let zero = "0".repeat(40);
        fn ok(r: &str) -> (Option<&str>, &str) {
            split_range(r).ok().expect(r)
        }
        assert_eq!(ok("a..b"), (Some("a"), "b"));
        assert_eq!(ok("..b"), (Some("HEAD"), "b"));
        assert_eq!(ok("a.."), (Some("a"), "HEAD"));
        assert_eq!(ok(".."), (Some("HEAD"), "HEAD"));
        assert_eq!(ok("HEAD~1..HEAD"), (Some("HEAD~1"), "HEAD"));
        assert_eq!(ok("a^..b"), (Some("a^"), "b"));
        assert_eq!(ok(&format!("{zero}..b")), (None, "b"));
        assert_eq!(ok(&format!("{}..b", "0".repeat(64))), (None, "b"));
        // Only git's null id is a new ref: a short run of zeros is a revision.
        assert_eq!(ok("0000..b"), (Some("0000"), "b"));
        for bad in ["a...b", "...b", "a...", "a", "", "a..b..c"] {
            let e = split_range(bad).expect_err(bad);
            assert_eq!(e.status, crate::cli::output::ExitStatus::Error, "{bad}");
            assert!(e.message.contains("--range"), "{bad}: {}", e.message);
        }
        assert!(
            split_range("a...b")
                .err()
                .unwrap()
                .message
                .contains("symmetric difference")
        );
    }
}
