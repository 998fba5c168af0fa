//! The command line: the one place that reads the process's world (arguments, environment,
//! clock, standard streams) and turns it into calls of the library.
//!
//! - [`args`](self): the clap types, one variant per command; per-flag detail is in `--help`.
//! - `settings`: environment variables and the clock resolved into values (commit identity,
//!   the finality clock, `--now`, fresh ids); the library never reads them itself.
//! - `output`: the printer (data on stdout, notes and diagnostics on stderr, `-q` silences
//!   notes), the exit-code carrying `Failure`, and the `--json` line helpers.
//! - `cmd`: one file per command (`record`, `seal`, `publish`, `verify`, `hooks`, `compact`,
//!   `log`, `action`, `sweep`, `run`, `serve`).
//!
//! Exit codes: 0 success; 1 the command ran and refused (a conflict with what the ledger holds,
//! a strict-privacy refusal, findings of `verify`, a refused finality operation); 2 usage,
//! input or I/O error. `run` adds 3 (not claimed, the command was not run) and 4 (the command
//! completed but its outcome could not be recorded), and otherwise exits with the command's
//! code. On a refusal or an error nothing is published: the ledger ref is unchanged.
//!
//! With `--json`, data is JSON Lines on stdout: one canonical JSON object a line, each with a
//! `type` naming its shape; human summaries stay on stderr either way. A closed stdout pipe
//! ends the output quietly; any other failed write of data is reported and exits 2.

use std::collections::BTreeMap;
use std::io::Write;

use clap::Parser;

mod args;
mod cmd;
mod output;
mod settings;
#[cfg(test)]
pub(crate) mod tests;

use args::{Cli, Command, HooksCommand};
use output::{Failure, Printer};

/// Environment variables the CLI consults, captured once so tests can inject them.
pub type Env = BTreeMap<String, String>;

/// Runs the CLI with explicit arguments, environment and output streams; returns the exit code.
///
/// `args` includes the program name first, as `std::env::args` gives it. Nothing is read from
/// the process environment: `env` is the whole environment the commands see (tests inject it).
/// `--help` and `--version` print on `stdout` and return 0; a usage error prints on `stderr`
/// and returns 2.
pub fn run(
    args: impl IntoIterator<Item = String>,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let text = e.render().to_string();
            if code == 0 {
                let _ = write!(stdout, "{text}");
            } else {
                let _ = write!(stderr, "{text}");
            }
            return code;
        }
    };
    let mut out = Printer::new(stdout, stderr, cli.quiet);
    let result = dispatch(&mut out, env, stdin, cli.command);
    out.finish(result)
}

/// Resolves each command's flags (with the environment where a flag has an environment
/// default) and runs it.
fn dispatch(
    out: &mut Printer,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    command: Command,
) -> Result<(), Failure> {
    match command {
        Command::Record {
            spool,
            input,
            privacy,
        } => cmd::record::run(out, env, stdin, spool, &input, privacy.profile),
        Command::Seal {
            output,
            json,
            interrupt_open_attempts,
            reason,
            privacy,
            spools,
        } => {
            let output = output.or_else(|| settings::seal_output_root(env));
            let interrupt = interrupt_open_attempts
                .then(|| crate::writer::interrupt::Reason::parse(&reason))
                .flatten();
            cmd::seal::run(out, output, json, interrupt, privacy.profile, &spools)
        }
        Command::Maintain { repo, all, json } => cmd::maintain::run(out, &repo, all, json),
        Command::Verify {
            repo,
            rev,
            range,
            json,
            privacy,
        } => cmd::verify::run(
            out,
            env,
            &repo,
            &rev,
            range.as_deref(),
            json,
            privacy.profile,
        ),
        Command::Hooks {
            command: HooksCommand::Install { repo, ref_name },
        } => cmd::hooks::install(out, &repo, &ref_name),
        Command::Publish {
            repo,
            ref_name,
            layout,
            remote,
            remote_ref,
            max_attempts,
            json,
            privacy,
            sources,
        } => {
            let target = match remote {
                Some(url) => crate::publish::Target::Remote {
                    url: settings::absolute_url(&url),
                    ref_name: remote_ref.unwrap_or_else(|| ref_name.clone()),
                },
                None => crate::publish::Target::Local,
            };
            cmd::publish::run(
                out,
                env,
                &cmd::publish::Request {
                    repo: &repo,
                    ref_name: &ref_name,
                    target: &target,
                    layout: layout
                        .as_deref()
                        .and_then(crate::ledger::layout::Layout::from_name),
                    max_attempts,
                    json,
                    profile: privacy.profile,
                    sources: &sources,
                },
            )
        }
        Command::Action { command } => cmd::action::run(out, env, command),
        Command::Sweep {
            state,
            timeout_minutes,
            json,
        } => cmd::sweep::run(out, env, &state, timeout_minutes, json),
        Command::Run {
            state,
            binding,
            action,
            attempt,
            json,
            command,
        } => cmd::run::run(
            out,
            env,
            &cmd::run::Request {
                state: &state,
                binding: &binding,
                action_id: &action,
                attempt,
                json,
                command: &command,
            },
        ),
        Command::Serve(a) => cmd::serve::run(out, env, a),
        Command::Compact {
            state,
            retention_days,
            now,
            dry_run,
            json,
        } => cmd::compact::run(
            out,
            env,
            &state,
            retention_days,
            now.as_deref(),
            dry_run,
            json,
        ),
        Command::Log {
            repo,
            rev,
            json,
            subject,
            operation,
            attempt,
            event_type,
            producer,
            since,
            until,
        } => cmd::log::filter(
            subject, operation, attempt, event_type, producer, since, until,
        )
        .and_then(|filter| cmd::log::run(out, &repo, &rev, json, &filter)),
    }
}
