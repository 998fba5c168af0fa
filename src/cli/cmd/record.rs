//! `record`: one event into a spool, through the writer's phase or action API.
//!
//! The spool root is `--spool`, else `$CLAWSWEEPER_ACTION_LEDGER_ROOT`, else the current
//! directory. The input's shape picks the API: `phase` for the phase API, `scope` for the
//! generic action API. Exit 1 for a conflict with an already recorded event or a strict
//! privacy refusal, 2 for unreadable or invalid input; either way nothing is recorded.

use std::path::PathBuf;

use crate::canonical;
use crate::privacy::Profile;
use crate::writer::record;

use crate::cli::Env;
use crate::cli::output::{Failure, Printer};
use crate::cli::settings::{self, system_now};

/// Runs `record`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    spool: Option<PathBuf>,
    input: &str,
    profile: Profile,
) -> Result<(), Failure> {
    let root = spool
        .or_else(|| {
            env.get("CLAWSWEEPER_ACTION_LEDGER_ROOT")
                .filter(|s| !s.trim().is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("."));
    let root = crate::writer::files::absolute_root(&root).map_err(Failure::input)?;
    if !root.is_dir() {
        return Err(Failure::input(format!(
            "spool root {} does not exist or is not a directory",
            root.display()
        )));
    }
    let mut text = String::new();
    let source = if input == "-" {
        stdin
            .read_to_string(&mut text)
            .map_err(|e| Failure::input(format!("cannot read stdin: {e}")))?;
        "stdin".to_owned()
    } else {
        text = std::fs::read_to_string(input)
            .map_err(|e| Failure::input(format!("cannot read {input}: {e}")))?;
        input.to_owned()
    };
    let value = canonical::parse_input(text.trim_end())
        .map_err(|e| Failure::input(format!("{source}: {e}")))?;
    let now = system_now();
    let options = record::Options { privacy: profile };
    // Live projection reserves its outbox entry just before the event is written
    // (crate::live::outbox), so a kill between the event and its request leaves a trace.
    let verdict = crate::live::config::verdict(env);
    let mut reserved = None;
    let mut notes = Vec::new();
    let mut before_write = |handle: &crate::writer::files::Root,
                            candidate: &crate::event::Event| {
        match crate::live::before_record(handle, candidate, &verdict, std::process::id()) {
            Ok(entry) => reserved = entry,
            Err(e) => notes.push(format!("live projection: {e}")),
        }
    };
    let result = match (value.get("phase"), value.get("scope")) {
        (Some(_), None) => {
            record::record_phase_outcome_with(&root, &value, env, now, &options, &mut before_write)
        }
        (None, Some(_)) => {
            record::record_action_outcome_with(&root, &value, env, now, &options, &mut before_write)
        }
        _ => {
            return Err(Failure::input(format!(
                "{source}: the input must have either `phase` (phase API) or `scope` (action API)"
            )));
        }
    };
    for note in &notes {
        out.note(note);
    }
    if result.is_err()
        && let Some(entry) = &reserved
        && let Ok(handle) =
            crate::writer::files::Root::open(&root, crate::writer::spool::ROOT_LABEL)
        && let Err(e) = crate::live::outbox::void(&handle, entry)
    {
        out.note(&format!("live projection: {e}"));
    }
    match result {
        Ok(Some((event, outcome))) => {
            out.data(&event.json);
            project(out, env, &root, &event, &verdict, reserved.as_ref());
            out.note(&match outcome {
                record::Outcome::Recorded => format!(
                    "recorded {} {} in {}",
                    event.event_type(),
                    event.event_id,
                    root.display()
                ),
                record::Outcome::Unchanged => format!(
                    "unchanged: {} {} is already recorded in {} (the same event; nothing written)",
                    event.event_type(),
                    event.event_id,
                    root.display()
                ),
            });
            Ok(())
        }
        Ok(None) => {
            out.note("recording is disabled (set CLAWSWEEPER_ACTION_LEDGER_FORCE=1 to enable)");
            Ok(())
        }
        Err(e) => Err(Failure::classified(
            e.is_refusal(),
            format!("{source}: {e}; nothing was recorded"),
        )),
    }
}

/// Live projection of a durable event (crate::live): an invalid configuration records a
/// `projection.failed` event; a valid one queues the request in the outbox and drains the
/// outbox within the per-request timeout. Never fails the command: problems are notes.
fn project(
    out: &mut Printer,
    env: &Env,
    root: &std::path::Path,
    event: &crate::event::Event,
    verdict: &crate::live::config::Verdict,
    reserved: Option<&crate::live::outbox::Entry>,
) {
    if *verdict == crate::live::config::Verdict::Disabled {
        return;
    }
    let Ok(handle) = crate::writer::files::Root::open(root, crate::writer::spool::ROOT_LABEL)
    else {
        out.note("live projection: cannot open the spool root");
        return;
    };
    match crate::live::after_record_reserved(&handle, event, verdict, system_now(), reserved) {
        Ok(crate::live::Queued::Request(_)) => {}
        Ok(crate::live::Queued::ConfigFailure(Ok(()))) => {
            out.note(
                "live CrabFleet projection failed: invalid CrabFleet projection configuration",
            );
            return;
        }
        Ok(other) => {
            out.note(&format!("live projection: {other:?}"));
            return;
        }
        Err(e) => {
            out.note(&format!("live projection: {e}"));
            return;
        }
    }
    let crate::live::config::Verdict::Valid(config) = verdict else {
        return;
    };
    let projector = match settings::crabfleet_projector(env) {
        Ok(p) => p,
        Err(e) => {
            out.note(&format!("live projection: {}", e.message));
            return;
        }
    };
    let budget = std::time::Duration::from_millis(config.timeout_ms);
    match crate::live::deliver::drain(
        Some(&projector),
        &handle,
        verdict,
        budget,
        std::process::id(),
        &system_now,
    ) {
        Ok(report) => {
            for line in &report.log {
                out.note(line);
            }
        }
        Err(e) => out.note(&format!("live projection: {e}")),
    }
}
