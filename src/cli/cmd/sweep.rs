//! `sweep`: every pending outcome older than the timeout becomes `lost_confirmation`, in one
//! commit.
//!
//! The timeout is measured on this machine's clock from when a sweep here first saw the action
//! pending, or from its creation when `action create` here created it
//! ([`finality::sweep`](mod@finality::sweep)): the sightings are kept in the repository's git
//! directory, one file per target, shared with `serve` ([`finality::observations`]), never in
//! the ledger. Losing the file delays sweeps by one timeout. The sweep never grants authority to
//! run again: "reconcile; never presume the effect did not happen". In the same commit, an
//! action still awaiting an operator past its approval window (its `approval_wait_seconds`, else
//! 300 s, plus 15 minutes, on the same clock) becomes `expired`; it is never swept to
//! `lost_confirmation`.

use std::path::PathBuf;

use crate::canonical::Value;
use crate::finality::{self, Observations, observations};
use crate::store::Store;
use crate::store::remote::Target;

use crate::cli::Env;
use crate::cli::args::StateRepo;
use crate::cli::cmd::action::finality_failure;
use crate::cli::output::{Failure, Printer, commit_value, line};
use crate::cli::settings::{finality_now, finality_options, open_state};

/// Runs `sweep`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    state: &StateRepo,
    timeout_minutes: u32,
    json: bool,
) -> Result<(), Failure> {
    let now = finality_now(env)?;
    let options = finality_options(env, state)?;
    let store = open_state(env, state)?;
    let path = observations_path(&store, &state.ref_name, &options.target);
    let mut observations = load_observations(out, &path);
    let swept = finality::sweep(
        &store,
        &options,
        f64::from(timeout_minutes),
        now,
        &mut observations,
    );
    // The sightings of a failed sweep are still true: keep them.
    save_observations(out, &path, &observations);
    let written = swept.map_err(|e| finality_failure(out, json, "sweep", "", &e))?;
    let r = &written.value;
    for n in &r.clock_skew {
        if json {
            let Value::Object(mut m) = n.to_value() else {
                unreachable!("an object")
            };
            m.insert("type".into(), Value::str("clock_skew"));
            out.data(&line(&Value::Object(m)));
        }
        out.note(&format!("clock skew: {n}"));
    }
    for s in &r.swept {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("swept")),
                ("action_id", Value::str(s.action_id.as_str())),
                ("agent_id", Value::str(s.agent_id.as_str())),
                (
                    "created_at",
                    Value::str(finality::format_time(s.created_at)),
                ),
                (
                    "outcome_at",
                    Value::str(finality::format_time(s.outcome_at)),
                ),
                ("status", Value::str("lost_confirmation")),
                ("lifecycle", Value::str(s.lifecycle.as_str())),
            ])));
        } else {
            out.data(&format!(
                "{} lost_confirmation {}",
                s.action_id, s.lifecycle
            ));
        }
    }
    for id in &r.expired {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("expired")),
                ("action_id", Value::str(id.as_str())),
                ("lifecycle", Value::str("expired")),
            ])));
        } else {
            out.data(&format!("{id} expired (nobody approved it in time)"));
        }
    }
    for (id, status) in &r.lost {
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("sweep_lost")),
                ("action_id", Value::str(id.as_str())),
                ("current_status", Value::str(status.as_str())),
            ])));
        }
        out.note(&format!(
            "{id}: another writer set the outcome first (current status {status})"
        ));
    }
    for dir in &r.skipped {
        out.note(&format!(
            "{dir}: skipped, its records are not valid (run verify)"
        ));
    }
    if json {
        out.data(&line(&Value::object([
            ("type", Value::str("sweep")),
            ("swept", Value::from(r.swept.len() as i64)),
            ("expired", Value::from(r.expired.len() as i64)),
            ("lost", Value::from(r.lost.len() as i64)),
            ("skipped", Value::from(r.skipped.len() as i64)),
            ("waiting", Value::from(r.waiting as i64)),
            ("clock_skew", Value::from(r.clock_skew.len() as i64)),
            ("timeout_minutes", Value::from(i64::from(r.timeout_minutes))),
            ("commit", commit_value(written.commit)),
        ])));
    }
    if r.waiting > 0 {
        out.note(&format!(
            "{} pending outcome(s) not yet {} minute(s) old on this clock since first seen here",
            r.waiting, r.timeout_minutes
        ));
    }
    out.note(&format!(
        "swept {} pending outcome(s) older than {} minute(s) to lost_confirmation{}",
        r.swept.len(),
        r.timeout_minutes,
        written
            .commit
            .map_or(String::new(), |c| match &options.target {
                finality::batch::Target::Local => format!(" at {c}"),
                remote => format!(" at {c} ({})", remote.describe(&state.ref_name)),
            })
    ));
    Ok(())
}

/// Where this repository keeps its sightings for `target`.
fn observations_path(store: &Store, ref_name: &str, target: &Target) -> PathBuf {
    observations::file_path(store.git_dir(), ref_name, target)
}

/// The sightings at `path`; none, with a note, when they cannot be read (sweeps are then
/// delayed by one timeout, never brought forward).
fn load_observations(out: &mut Printer, path: &std::path::Path) -> Observations {
    observations::load(path).unwrap_or_else(|e| {
        out.note(&format!("sweep observations ignored: {e}"));
        Observations::new()
    })
}

/// Writes the sightings to `path`; a failure is a note, since a lost sighting only delays a
/// sweep.
fn save_observations(out: &mut Printer, path: &std::path::Path, observations: &Observations) {
    if let Err(e) = observations::save(path, observations) {
        out.note(&format!(
            "sweep observations not saved ({}: {}): the next sweep here waits one more timeout",
            e.kind(),
            crate::durable::io_advice(&e)
        ));
    }
}

/// Records that `action create` here created (or found) action `id` at `now` on this machine's
/// clock, so that a sweep here times it from its creation.
pub(in crate::cli) fn witness(
    out: &mut Printer,
    store: &Store,
    ref_name: &str,
    target: &Target,
    id: &finality::ActionId,
    now: crate::time::Timestamp,
) {
    let path = observations_path(store, ref_name, target);
    let mut observations = load_observations(out, &path);
    observations.witness(id.clone(), now);
    save_observations(out, &path, &observations);
}
