//! `sweep`: every pending outcome older than the timeout becomes `lost_confirmation`, in one
//! commit.
//!
//! The timeout is measured from the action's creation, as in the reference. The sweep never
//! grants authority to run again: "reconcile; never presume the effect did not happen".

use crate::canonical::Value;
use crate::finality;

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
    let written = finality::sweep(&store, &options, f64::from(timeout_minutes), now)
        .map_err(|e| finality_failure(out, json, "sweep", "", &e))?;
    let r = &written.value;
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
            ("lost", Value::from(r.lost.len() as i64)),
            ("skipped", Value::from(r.skipped.len() as i64)),
            ("timeout_minutes", Value::from(i64::from(r.timeout_minutes))),
            ("commit", commit_value(written.commit)),
        ])));
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
