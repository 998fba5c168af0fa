//! `seal`: finalize spools (one seal record per producer), optionally writing shard files.
//!
//! Every spool root is opened before anything is written, so a mistyped path seals nothing.
//! With `--interrupt-open-attempts`, open review/apply attempts are first closed with the
//! reference's terminal event.

use std::path::PathBuf;

use crate::canonical::Value;
use crate::privacy::Profile;
use crate::progress::Progress;
use crate::writer::seal;
use crate::writer::spool::Spool;

use crate::cli::output::{Failure, Printer, line, path_list};
use crate::cli::settings::system_now;

/// A seal error as a failure, refused or not as [`seal::Error::is_refusal`] says.
fn seal_failure(e: seal::Error) -> Failure {
    Failure::classified(e.is_refusal(), e.to_string())
}

/// Runs `seal`.
/// What `seal` prints on stdout, one line per spool.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::cli) enum Shape {
    /// The default: `sealed SPOOL: counts` (or `nothing to seal in SPOOL: ...`).
    Summary,
    /// `--paths`: the reference's `{"paths":[...]}`.
    Paths,
    /// `--json`: a `seal` record.
    Json,
}

pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &crate::cli::Env,
    output: Option<PathBuf>,
    shape: Shape,
    interrupt: Option<crate::writer::interrupt::Reason>,
    profile: Profile,
    spools: &[PathBuf],
) -> Result<(), Failure> {
    // Every root is opened before anything is written, so that a mistyped path seals nothing.
    let opened = spools
        .iter()
        .map(|root| Spool::open(root).map_err(|e| seal_failure(e.into())))
        .collect::<Result<Vec<_>, _>>()?;
    // Opened once: every spool's shards go into this directory, whatever its path turns into.
    let output_root = match &output {
        Some(dir) => Some(
            crate::writer::files::Root::open_or_create(dir, seal::OUTPUT_ROOT_LABEL)
                .map_err(Failure::input)?,
        ),
        None => None,
    };
    // Live projection's drain (crate::live::finalize), resolved once for every spool.
    let live = crate::cli::settings::LiveDrain::from_env(env)?;
    let meter = out.meter();
    meter.begin("spools", Some(spools.len() as u64));
    for (root, spool) in spools.iter().zip(opened) {
        if let Some(reason) = interrupt {
            let written =
                crate::writer::interrupt::interrupt_open_attempts(root, reason, system_now())
                    .map_err(|e| {
                        Failure::classified(
                            e.is_refusal(),
                            format!("{}: interruption recovery failed: {e}", root.display()),
                        )
                    })?;
            out.note(&format!(
                "closed {written} open attempt(s) in {} as {}",
                root.display(),
                reason.code()
            ));
        }
        // Two-pass finalization around the live-projection drain (crate::live::finalize);
        // with no outbox request to settle it is the one ordinary seal.
        let (report, drained) = crate::live::finalize::finalize(
            &spool,
            output_root.as_ref(),
            system_now(),
            &seal::Options {
                privacy: profile,
                ..seal::Options::default()
            },
            &live.drain(),
        )
        .map_err(|e| match e {
            crate::live::finalize::Error::Seal(e) => seal_failure(e),
            other => Failure::input(format!("{}: {other}", root.display())),
        })?;
        for line in &drained.log {
            out.note(line);
        }
        meter.advance(1, 0);
        let summary = if report.sealed + report.already_sealed == 0 {
            format!(
                "nothing to seal in {}: no events were recorded; nothing written",
                spool.root().display()
            )
        } else {
            format!(
                "sealed {}: {} producer(s) sealed now, {} already sealed, {} shard(s){}",
                spool.root().display(),
                report.sealed,
                report.already_sealed,
                report.shard_paths.len(),
                match &output {
                    Some(dir) => {
                        format!(", {} written to {}", report.shards_created, dir.display())
                    }
                    None => String::new(),
                }
            )
        };
        meter.suspend(|| match shape {
            Shape::Summary => out.data(&summary),
            Shape::Json => {
                out.data(&line(&Value::object([
                    ("type", Value::str("seal")),
                    ("spool", Value::str(spool.root().display().to_string())),
                    ("sealed", Value::from(report.sealed as i64)),
                    ("already_sealed", Value::from(report.already_sealed as i64)),
                    ("shards_created", Value::from(report.shards_created as i64)),
                    ("paths", path_list(&report.shard_paths)),
                ])));
                out.note(&summary);
            }
            Shape::Paths => {
                out.data(&line(&Value::object([(
                    "paths",
                    path_list(&report.shard_paths),
                )])));
                out.note(&summary);
            }
        });
    }
    meter.end();
    Ok(())
}
