//! The command line: the one place that reads the process's world (arguments, environment,
//! clock, standard streams) and turns it into calls of the library.
//!
//! - [`args`](self): the clap types, one variant per command; per-flag detail is in `--help`.
//! - `settings`: environment variables and the clock resolved into values (commit identity,
//!   the finality clock, `--now`, fresh ids); the library never reads them itself.
//! - `output`: the printer (data on stdout, notes and diagnostics on stderr, `-q` silences
//!   notes), the `ExitStatus` every command ends with and the `Failure` that carries it, and
//!   the `--json` line helpers.
//! - `cmd`: one file per command (`record`, `seal`, `publish`, `verify`, `hooks`, `compact`,
//!   `log`, `project`, `action`, `sweep`, `run`, `serve`, `completions`, `man`).
//!
//! Exit codes: 0 success; 1 the command ran and refused (a conflict with what the ledger holds,
//! a strict-privacy refusal, findings of `verify`, a refused finality operation); 2 usage,
//! input or I/O error. `run` adds 3 (not claimed, the command was not run) and 4 (the command
//! completed but its outcome could not be recorded), and otherwise exits with the command's
//! code. On a refusal or an error nothing is published: the ledger ref is unchanged.
//!
//! By default each command prints a short human summary (one line per publication, per sealed
//! spool, per event of `log`) on stdout and diagnostics on stderr. With `--json`, data is JSON
//! Lines, each record with a `type` and a format version `v`: the contract is in the `output`
//! module's docs. A closed stdout pipe ends the output quietly; any other failed write of data
//! is reported and exits 2.

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
/// and returns 2. The in-process runner of the CLI's tests.
#[cfg(test)]
pub fn run(
    args: impl IntoIterator<Item = String>,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    run_with(args, env, stdin, stdout, stderr, output::ProgressMode::Off)
}

/// Runs the CLI on the process's own standard streams (the binary's entry point): as `run`,
/// and with progress on stderr for long commands: a bar when stderr is a terminal, else a
/// plain line at most every few seconds (none with `-q`).
pub fn run_process(args: impl IntoIterator<Item = String>, env: &Env) -> i32 {
    use std::io::IsTerminal;
    let progress = if std::io::stderr().is_terminal() {
        output::ProgressMode::Bar
    } else {
        output::ProgressMode::Plain
    };
    // stderr is not held locked: the progress bar draws on it too.
    run_with(
        args,
        env,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr(),
        progress,
    )
}

fn run_with(
    args: impl IntoIterator<Item = String>,
    env: &Env,
    stdin: &mut dyn std::io::Read,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    progress: output::ProgressMode,
) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let text = e.render().to_string();
            // `--help` and `--version` come here too, on stdout and successful.
            let status = if e.use_stderr() {
                let _ = write!(stderr, "{text}");
                output::ExitStatus::Error
            } else {
                let _ = write!(stdout, "{text}");
                output::ExitStatus::Success
            };
            return status.code();
        }
    };
    let mut out = Printer::new(stdout, stderr, cli.quiet);
    out.progress = progress;
    let result = dispatch(&mut out, env, stdin, cli.command);
    out.finish(result).code()
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
            paths,
            interrupt_open_attempts,
            reason,
            privacy,
            spools,
        } => {
            let output = output.or_else(|| settings::seal_output_root(env));
            let interrupt = interrupt_open_attempts
                .then(|| crate::writer::interrupt::Reason::parse(&reason))
                .flatten();
            let shape = match (json, paths) {
                (true, _) => cmd::seal::Shape::Json,
                (false, true) => cmd::seal::Shape::Paths,
                (false, false) => cmd::seal::Shape::Summary,
            };
            cmd::seal::run(out, env, output, shape, interrupt, privacy.profile, &spools)
        }
        Command::Maintain {
            repo,
            ref_name,
            remote: Some(url),
            remote_ref,
            json,
            ..
        } => cmd::maintain::land_pending(
            out,
            env,
            &repo,
            &settings::absolute_url(&url),
            remote_ref.as_deref().unwrap_or(&ref_name),
            json,
        ),
        Command::Maintain {
            repo,
            ref_name,
            all,
            json,
            ..
        } => cmd::maintain::run(out, env, &repo, &ref_name, all, json),
        Command::Verify {
            repo,
            ref_name,
            rev,
            range,
            json,
            privacy,
        } => cmd::verify::run(
            out,
            env,
            &repo,
            &cmd::verify::Read::of(&ref_name, rev.as_deref()),
            range.as_deref(),
            json,
            privacy.profile,
        ),
        Command::Hooks {
            command: HooksCommand::Install(args),
        } => cmd::hooks::install(out, env, &args),
        Command::Hooks {
            command: HooksCommand::Admit(args),
        } => cmd::hooks::admit(out, env, stdin, &args.repo, args.privacy.profile),
        Command::Publish {
            repo,
            ref_name,
            layout,
            remote,
            remote_ref,
            wait,
            direct,
            max_attempts,
            json,
            manifest,
            privacy,
            expected,
            sources,
            accept_rewritten_remote,
        } => {
            let expected_producer = settings::expected_producer(env, &expected)?;
            let target = match remote {
                Some(url) => crate::publish::Target::Remote {
                    url: settings::absolute_url(&url),
                    ref_name: remote_ref.unwrap_or_else(|| ref_name.clone()),
                    timeout: settings::remote_timeout(env)?,
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
                    pending_wait: (!direct).then(|| std::time::Duration::from_secs(wait)),
                    shape: match (json, manifest) {
                        (true, _) => cmd::publish::Shape::Json,
                        (false, true) => cmd::publish::Shape::Manifest,
                        (false, false) => cmd::publish::Shape::Summary,
                    },
                    profile: privacy.profile,
                    sources: &sources,
                    accept_rewritten_remote,
                    expected: expected_producer,
                    expected_event_paths: (!expected.expected_event_paths.is_empty())
                        .then_some(expected.expected_event_paths),
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
        } => {
            // Its records go to stderr (stdout is the command's): nothing else of ours there.
            out.records_on_stderr = json;
            cmd::run::run(
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
            )
        }
        Command::Completions { shell } => cmd::completions::run(out, &shell),
        Command::Man => cmd::man::run(out),
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
            ref_name,
            rev,
            json,
            order,
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
        .and_then(|filter| {
            let order = if order == "time" {
                crate::log::Order::Time
            } else {
                crate::log::Order::Canonical
            };
            let read = cmd::verify::Read::of(&ref_name, rev.as_deref());
            cmd::log::run(out, &repo, &read, json, order, &filter)
        }),
        Command::Project(args) => cmd::project::run(out, env, &args),
    }
}
