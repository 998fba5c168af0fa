//! `compact`: months older than the retention window folded into segments, with a dry run.
//!
//! Shards that cannot be folded stay hot and are reported (exit 1); contention on the ref and a
//! refusal by a remote's hook (`--remote`) are refusals (exit 1) too. Every step that lands is an ordinary commit on the tip.

use crate::canonical::Value;

use crate::cli::Env;
use crate::cli::args::StateRepo;
use crate::cli::output::{Failure, Printer, commit_value, line, path_list};
use crate::cli::settings::{compact_now, open_state, signature, state_target};

/// A compaction error as a failure, refused or not as [`crate::compact::Error::is_refusal`]
/// says.
fn compact_failure(e: crate::compact::Error) -> Failure {
    use crate::compact::Error as E;
    let left = match &e {
        E::Remote(r) if r.may_have_landed() => {
            "the remote holds either its old tip or the failed step's whole commit"
        }
        _ => "the ledger ref was not changed by the failed step",
    };
    Failure::classified(e.is_refusal(), format!("{e}; {left}"))
}

/// The `month` object of `--json`.
fn month_value(m: &crate::compact::MonthFold) -> Value {
    Value::object([
        ("type", Value::str("month")),
        ("month", Value::str(m.month.to_string())),
        ("generation", Value::from(i64::from(m.generation))),
        ("shards", Value::from(m.shards as i64)),
        ("events", Value::from(m.events as i64)),
        ("bytes", Value::from(m.bytes as i64)),
        ("segments", path_list(&m.segments)),
        ("removed", Value::from(m.removed.len() as i64)),
        ("manifest", Value::str(m.month.manifest_path())),
        (
            "manifest_sha256",
            m.manifest_sha256
                .as_ref()
                .map_or(Value::Null, |d| Value::str(d.as_str())),
        ),
    ])
}

/// The human line of one folded month.
fn month_line(m: &crate::compact::MonthFold) -> String {
    let names: Vec<&str> = m
        .segments
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let mut line = format!(
        "{}: folded {} shard(s), {} event(s), {} byte(s) into {} (manifest generation {})",
        m.month,
        m.shards,
        m.events,
        m.bytes,
        if names.is_empty() {
            "no new segment".to_owned()
        } else {
            names.join(", ")
        },
        m.generation
    );
    let proven = m.removed.len() - m.shards;
    if proven > 0 {
        line.push_str(&format!(
            "; removed {proven} hot copy(ies) the manifest already proved"
        ));
    }
    line
}

/// Runs `compact`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    state: &StateRepo,
    retention_days: u32,
    now: Option<&str>,
    dry_run: bool,
    json: bool,
) -> Result<(), Failure> {
    let now_secs = compact_now(now)?.epoch_seconds();
    let mut options = crate::compact::Options::new(signature(env)?, now_secs);
    options.land.ref_name = state.ref_name.clone();
    options.retention_days = retention_days;
    options.land.target = state_target(env, state)?;
    // The ref as people read it: `--ref`, or `<url> <ref>` with --remote.
    let shown_ref = options.land.target.describe(&state.ref_name);
    let store = open_state(env, state)?;
    let (status, months, refused, commits, tip, attempts, remaining) = if dry_run {
        let tip = options
            .land
            .target
            .tip(&store, &state.ref_name)
            .map_err(Failure::input)?;
        let snap = store.snapshot(tip).map_err(Failure::input)?;
        let meter = out.meter();
        let plan =
            crate::compact::plan_observed(&snap, &options, &meter).map_err(compact_failure)?;
        drop(meter);
        (
            "dry-run",
            plan.months,
            plan.refused,
            Vec::new(),
            tip,
            0,
            plan.remaining,
        )
    } else {
        let meter = out.meter();
        let c =
            crate::compact::compact_observed(&store, &options, &meter).map_err(compact_failure)?;
        drop(meter);
        let status = match c.status {
            crate::compact::Status::Created => "created",
            crate::compact::Status::Unchanged => "unchanged",
        };
        (status, c.months, c.refused, c.commits, c.tip, c.attempts, 0)
    };
    for m in &months {
        if json {
            out.data(&line(&month_value(m)));
        } else {
            out.data(&month_line(m));
        }
    }
    for r in &refused {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("refusal")),
                ("path", Value::str(&r.path)),
                ("reason", Value::str(&r.reason)),
            ])));
        }
        let _ = writeln!(out.stderr, "{}: not compacted: {}", r.path, r.reason);
    }
    let removed: usize = months.iter().map(|m| m.removed.len()).sum();
    let segments: usize = months.iter().map(|m| m.segments.len()).sum();
    if json {
        let commit_list: Vec<String> = commits.iter().map(|c| c.to_hex()).collect();
        out.data(&line(&Value::object([
            ("type", Value::str("compaction")),
            ("status", Value::str(status)),
            ("ref", Value::str(&shown_ref)),
            ("commits", path_list(&commit_list)),
            (
                "commit",
                commit_value(
                    tip.filter(|_| status != "dry-run")
                        .or(commits.last().copied()),
                ),
            ),
            ("attempts", Value::from(i64::from(attempts))),
            ("months", Value::from(months.len() as i64)),
            ("removed", Value::from(removed as i64)),
            ("segments", Value::from(segments as i64)),
            ("refused", Value::from(refused.len() as i64)),
            ("remaining", Value::from(remaining as i64)),
        ])));
    }
    let at = tip.map_or("(no commit)".to_owned(), |c| c.to_hex());
    out.note(&match status {
        "dry-run" => format!(
            "dry run at {at}: would remove {removed} shard file(s) and add {segments} segment(s) in {} month(s){}; nothing written",
            months.len(),
            if remaining > 0 {
                format!(", {remaining} more shard(s) in further commits")
            } else {
                String::new()
            }
        ),
        "created" => format!(
            "compacted {} month(s): removed {removed} shard file(s), added {segments} segment(s) in {} commit(s); {} at {at}",
            months.len(),
            commits.len(),
            shown_ref
        ),
        _ => format!("nothing to compact: {shown_ref} unchanged at {at}"),
    });
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Failure::refused(format!(
            "{} shard(s) could not be compacted and stay hot (see above)",
            refused.len()
        )))
    }
}
