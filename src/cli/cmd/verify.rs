//! `verify`: a revision or a push range checked offline; findings on stderr (and stdout with
//! `--json`), exit 1 when there are any.
//!
//! In a pre-receive hook the pushed objects are still in git's quarantine: the object
//! directories named by `GIT_OBJECT_DIRECTORY` and `GIT_ALTERNATE_OBJECT_DIRECTORIES` are added
//! to the repository's own.

use std::path::{Path, PathBuf};

use crate::canonical::Value;
use crate::privacy::Profile;
use crate::store::Store;

use crate::cli::Env;
use crate::cli::output::{Failure, Printer, line};

/// Runs `verify`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    repo: &Path,
    rev: &str,
    range: Option<&str>,
    json: bool,
    profile: Profile,
) -> Result<(), Failure> {
    let options = crate::verify::Options { privacy: profile };
    let unreadable = |e: &dyn std::fmt::Display| Failure {
        code: 2,
        message: format!("cannot verify {}: {e}", repo.display()),
    };
    // In a pre-receive hook the pushed objects are still in git's quarantine directory.
    let mut quarantine: Vec<PathBuf> = Vec::new();
    if let Some(dir) = env.get("GIT_OBJECT_DIRECTORY").filter(|d| !d.is_empty()) {
        quarantine.push(PathBuf::from(dir));
    }
    if let Some(dirs) = env.get("GIT_ALTERNATE_OBJECT_DIRECTORIES") {
        quarantine.extend(dirs.split(':').filter(|d| !d.is_empty()).map(PathBuf::from));
    }
    let store = Store::open(repo)
        .and_then(|s| s.with_object_dirs(&quarantine))
        .map_err(|e| unreadable(&e))?;
    let resolve = |r: &str| store.resolve(r).map_err(|e| unreadable(&e));
    let meter = out.meter();
    let (report, what) = match range {
        Some(range) => {
            let (old, new) = range
                .split_once("..")
                .ok_or_else(|| Failure::input(format!("--range wants OLD..NEW, got {range}")))?;
            let old = if old.bytes().all(|b| b == b'0') {
                None
            } else {
                Some(resolve(old)?)
            };
            let new = resolve(new)?;
            let report = crate::verify::verify_range_observed(&store, old, new, &options, &meter)
                .map_err(|e| unreadable(&e))?;
            (report, format!("push {range}"))
        }
        None => {
            let commit = resolve(rev)?;
            let report = crate::verify::verify_revision_observed(&store, commit, &options, &meter)
                .map_err(|e| unreadable(&e))?;
            (report, format!("{rev} ({})", commit.to_hex()))
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
        Err(Failure {
            code: 1,
            message: format!("{} finding(s)", report.findings.len()),
        })
    }
}
