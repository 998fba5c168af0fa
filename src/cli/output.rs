//! The printer, the exit status and the failure that carries it, and the helpers that render
//! `--json` lines.
//!
//! Data (what a script consumes) goes to stdout, one line at a time, flushed as it is written;
//! notes (human summaries) go to stderr and `-q` silences them; diagnostics that must be seen
//! (findings, refusals, errors) go to stderr whatever `-q` says. A failed write of data is
//! remembered, stops further data, and is reported once at the end, except a closed pipe
//! (`action-ledger log | head`), which is not an error.
//!
//! # The `--json` contract (format version 1)
//!
//! This is the one place the machine-readable output is defined; `--help` of each command lists
//! the members of its records.
//!
//! - With `--json`, stdout carries JSON Lines only: one object a line, in canonical JSON (sorted
//!   keys, no insignificant whitespace), flushed line by line. Human summaries, progress and
//!   diagnostics go to stderr (`run --json` is the exception: stdout is its command's, so its
//!   records go to stderr, and then stderr carries nothing else of ours: no notes, and a final
//!   error is an `error` record, not an `error: …` line).
//! - Every record has `type`, naming its shape, and `v`, the format version ([`VERSION`], 1).
//!   Types: `seal`; `publication`; `finding`, `warning`, `summary` (`verify`); `month`,
//!   `refusal`, `compaction` (`compact`); `action`, `claim`, `outcome`, `swept`, `sweep_lost`,
//!   `sweep`, `run`; `listening` (`serve`); `refusal` (a refused finality step); `error` (the
//!   final error of `run --json` on stderr, and on stdout of an `action` command under `--json`
//!   that failed before it could answer, e.g. an unreadable repository: [`error_record`]).
//! - Members are only ever added within a version; a consumer ignores members it does not know.
//!   Renaming or removing a member, or changing its meaning, takes a new `v`.
//! - `log --json` is not a record stream: it prints the stored event lines byte for byte
//!   (identical before and after a compaction); their own `schema_version` versions them.
//! - `publish --manifest` and `seal --paths` print the reference's own output instead (the
//!   import manifest, `{"paths":[...]}`), unversioned, for tools built on the reference.

use std::io::Write;

use crate::canonical::{self, Value};
use crate::store;

/// Where a command writes: data to stdout, notes and diagnostics to stderr.
pub(super) struct Printer<'a> {
    pub(super) stdout: &'a mut dyn Write,
    pub(super) stderr: &'a mut dyn Write,
    /// `-q`: notes are not printed (errors and diagnostics still are).
    pub(super) quiet: bool,
    /// The first failed write of data; reported at the end (a closed pipe is not an error).
    pub(super) broken: Option<std::io::Error>,
    /// `run --json`: stderr carries records only, so notes are dropped and the final error is
    /// an `error` record.
    pub(super) records_on_stderr: bool,
    /// How progress is shown (set by the process entry point; off in-process).
    pub(super) progress: ProgressMode,
    /// Lines of data written so far (whether a command already answered on stdout).
    pub(super) lines: usize,
}

impl<'a> Printer<'a> {
    pub(super) fn new(
        stdout: &'a mut dyn Write,
        stderr: &'a mut dyn Write,
        quiet: bool,
    ) -> Printer<'a> {
        Printer {
            stdout,
            stderr,
            quiet,
            broken: None,
            records_on_stderr: false,
            progress: ProgressMode::Off,
            lines: 0,
        }
    }

    /// One line of readable text on stdout, built from stored values: control characters and
    /// bidirectional overrides are escaped ([`terminal_safe`]), so a value cannot move the
    /// cursor, recolour the terminal or forge a line.
    pub(super) fn text(&mut self, line: &str) {
        self.data(&terminal_safe(line));
    }

    /// One line of data on stdout.
    pub(super) fn data(&mut self, line: &str) {
        self.lines += 1;
        if self.broken.is_none()
            && let Err(e) = writeln!(self.stdout, "{line}").and_then(|()| self.stdout.flush())
        {
            self.broken = Some(e);
        }
    }

    /// Bytes of a child's standard output, passed through unchanged.
    pub(super) fn raw(&mut self, bytes: &[u8]) {
        if self.broken.is_none()
            && let Err(e) = self
                .stdout
                .write_all(bytes)
                .and_then(|()| self.stdout.flush())
        {
            self.broken = Some(e);
        }
    }

    /// One line of summary on stderr, unless `-q`; a remote's credentials in it are redacted
    /// ([`redact`](store::remote::redact)).
    pub(super) fn note(&mut self, line: &str) {
        if !self.quiet && !self.records_on_stderr {
            let _ = writeln!(self.stderr, "{}", store::remote::redact(line));
        }
    }

    /// The exit status of a command's result: its failure's message goes to stderr as
    /// `error: …`, a remote's credentials in it redacted ([`redact`](store::remote::redact));
    /// a data write that failed (other than a closed pipe) makes it at least
    /// [`ExitStatus::Error`].
    pub(super) fn finish(mut self, result: Result<(), Failure>) -> ExitStatus {
        let status = match result {
            Ok(()) => ExitStatus::Success,
            Err(Failure { status, message }) => {
                let message = store::remote::redact(&message);
                if self.records_on_stderr && !message.is_empty() {
                    let record = error_record(&Failure::new(status, message.as_str()));
                    let _ = writeln!(self.stderr, "{}", line(&record));
                } else if !message.is_empty() && !self.records_on_stderr {
                    let _ = writeln!(self.stderr, "error: {message}");
                }
                status
            }
        };
        match self.broken.take() {
            Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                let _ = writeln!(self.stderr, "error: cannot write output: {e}");
                status.at_least_error()
            }
            _ => status,
        }
    }
}

/// How the process exits, named by what happened rather than by a number chosen at each call
/// site; [`ExitStatus::code`] is the one place the numbers are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ExitStatus {
    /// 0: the command did what it was asked.
    Success,
    /// 1: the command ran and refused (a conflict with what the ledger holds, a strict-privacy
    /// refusal, findings of `verify`, a refused finality operation).
    Refused,
    /// 2: a usage, input or I/O error.
    Error,
    /// 3 (`run`): no claim was granted, so the command was not run.
    NotClaimed,
    /// 4 (`run`): the command completed but its outcome could not be recorded.
    Unrecorded,
    /// `run`: the command's own code (128+S for a signal, 127 or 126 when it cannot start).
    Child(i32),
}

impl ExitStatus {
    /// [`ExitStatus::Refused`] for an error its library classifies as a refusal (each error
    /// type's own `is_refusal`), else [`ExitStatus::Error`].
    pub(super) fn of_error(is_refusal: bool) -> ExitStatus {
        if is_refusal {
            ExitStatus::Refused
        } else {
            ExitStatus::Error
        }
    }

    /// The process's exit code.
    pub(super) fn code(self) -> i32 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Refused => 1,
            ExitStatus::Error => 2,
            ExitStatus::NotClaimed => 3,
            ExitStatus::Unrecorded => 4,
            ExitStatus::Child(code) => code,
        }
    }

    /// This status, or [`ExitStatus::Error`] when its code is lower (a failed write of data
    /// outranks success and refusal, not `run`'s own codes).
    fn at_least_error(self) -> ExitStatus {
        if self.code() < ExitStatus::Error.code() {
            ExitStatus::Error
        } else {
            self
        }
    }
}

/// Why a command stopped: its exit status and the message printed as `error: …` (none when
/// empty).
pub(super) struct Failure {
    pub(super) status: ExitStatus,
    pub(super) message: String,
}

impl Failure {
    /// A failure with `status` and `message`.
    pub(super) fn new(status: ExitStatus, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    /// An input, usage or I/O error ([`ExitStatus::Error`]).
    pub(super) fn input(e: impl std::fmt::Display) -> Failure {
        Failure::new(ExitStatus::Error, e.to_string())
    }

    /// A refusal ([`ExitStatus::Refused`]).
    pub(super) fn refused(message: impl Into<String>) -> Failure {
        Failure::new(ExitStatus::Refused, message)
    }

    /// A library error's failure: [`ExitStatus::Refused`] when its own classification calls
    /// it a refusal, else [`ExitStatus::Error`].
    pub(super) fn classified(is_refusal: bool, message: impl Into<String>) -> Failure {
        Failure::new(ExitStatus::of_error(is_refusal), message)
    }
}

/// The `error` record of a failure: `code` (the exit code) and `error` (the message, a remote's
/// credentials redacted), as `run --json`'s final error.
pub(super) fn error_record(f: &Failure) -> Value {
    Value::object([
        ("type", Value::str("error")),
        ("code", Value::from(i64::from(f.status.code()))),
        ("error", Value::str(store::remote::redact(&f.message))),
    ])
}

/// A JSON array of strings (paths, commit ids).
pub(super) fn path_list(paths: &[String]) -> Value {
    Value::Array(paths.iter().map(Value::str).collect())
}

/// The format version of `--json` records: the `v` member of each.
pub const VERSION: i64 = 1;

/// One `--json` line: the value in canonical JSON; an object with a `type` member (a record)
/// gets `"v":`[`VERSION`] too.
pub(super) fn line(v: &Value) -> String {
    match v {
        Value::Object(m) if m.contains_key("type") && !m.contains_key("v") => {
            let mut m = m.clone();
            m.insert("v".into(), Value::from(VERSION));
            canonical::to_canonical_unchecked(&Value::Object(m))
        }
        _ => canonical::to_canonical_unchecked(v),
    }
}

/// `v` (an object) with a `type` member and `extra` members added; any other value unchanged.
pub(super) fn with_type(
    kind: &str,
    v: Value,
    extra: impl IntoIterator<Item = (&'static str, Value)>,
) -> Value {
    let Value::Object(mut m) = v else {
        return v;
    };
    m.insert("type".into(), Value::str(kind));
    m.extend(extra.into_iter().map(|(k, v)| (k.to_owned(), v)));
    Value::Object(m)
}

/// A commit id as a JSON string, or `null`.
pub(super) fn commit_value(c: Option<store::CommitId>) -> Value {
    c.map_or(Value::Null, |c| Value::str(c.to_hex()))
}

/// How progress is shown: decided once per process from `-q` and whether stderr is a terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProgressMode {
    /// Nothing (`-q`, in-process runs, or records on stderr).
    Off,
    /// An indicatif bar on stderr (a terminal).
    Bar,
    /// A plain line on stderr at most every [`PLAIN_EVERY`] (a CI log).
    Plain,
}

/// The least time between two plain progress lines.
pub(super) const PLAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The CLI's [`Progress`](crate::progress::Progress) observer: a bar, throttled plain lines or
/// nothing. Both write to the process's stderr directly (it is not held locked by the printer).
pub(super) struct Meter {
    mode: ProgressMode,
    bar: Option<indicatif::ProgressBar>,
    plain: std::sync::Mutex<Plain>,
}

/// The state of the plain lines.
struct Plain {
    unit: &'static str,
    total: Option<u64>,
    done: u64,
    events: u64,
    started: std::time::Instant,
    printed: std::time::Instant,
}

impl Meter {
    pub(super) fn new(mode: ProgressMode) -> Meter {
        let now = std::time::Instant::now();
        Meter {
            mode,
            bar: None,
            plain: std::sync::Mutex::new(Plain {
                unit: "",
                total: None,
                done: 0,
                events: 0,
                started: now,
                printed: now,
            }),
        }
    }

    /// Runs `f` with the bar hidden (for lines printed while it is shown).
    pub(super) fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }
}

/// `n` per second over `elapsed` (0 before any time has passed).
fn rate(n: u64, elapsed: std::time::Duration) -> u64 {
    (u128::from(n) * 1000)
        .checked_div(elapsed.as_millis())
        .map_or(0, |r| u64::try_from(r).unwrap_or(u64::MAX))
}

/// One plain progress line: `progress: 3/24 shards, 1200 event(s), 400 events/s, 3 s` (no
/// event figures while no events were counted).
fn plain_line(p: &Plain, now: std::time::Instant) -> String {
    let elapsed = now.duration_since(p.started);
    let total = p.total.map_or(String::new(), |t| format!("/{t}"));
    let events = match p.events {
        0 => String::new(),
        n => format!(", {n} event(s), {} events/s", rate(n, elapsed)),
    };
    format!(
        "progress: {}{total} {}{events}, {} s",
        p.done,
        p.unit,
        elapsed.as_secs()
    )
}

impl crate::progress::Progress for Meter {
    fn begin(&self, unit: &'static str, total: Option<u64>) {
        if let Ok(mut p) = self.plain.lock() {
            let now = std::time::Instant::now();
            *p = Plain {
                unit,
                total,
                done: 0,
                events: 0,
                started: now,
                printed: now,
            };
        }
        if let Some(bar) = &self.bar {
            // Before the setters below, each of which may draw: their frames count the stage's
            // time, not the time since the bar was made.
            bar.reset_elapsed();
            // A count without a known total is not drawn as `n/0`.
            let template = match total {
                Some(t) => {
                    bar.set_length(t);
                    "{spinner} {pos}/{len} {msg} [{elapsed}]"
                }
                None => "{spinner} {pos} {msg} [{elapsed}]",
            };
            if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_message(unit);
            // Last: resetting draws, and the stage's first frame is to show its own total and
            // unit, not `0/0` or the stage before.
            bar.reset();
        }
    }

    fn advance(&self, units: u64, events: u64) {
        let Ok(mut p) = self.plain.lock() else {
            return;
        };
        p.done += units;
        p.events += events;
        let now = std::time::Instant::now();
        match self.mode {
            ProgressMode::Off => {}
            ProgressMode::Bar => {
                if let Some(bar) = &self.bar {
                    bar.set_position(p.done);
                    if p.events > 0 {
                        bar.set_message(format!(
                            "{}, {} event(s), {} events/s",
                            p.unit,
                            p.events,
                            rate(p.events, now.duration_since(p.started))
                        ));
                    }
                }
            }
            ProgressMode::Plain => {
                if now.duration_since(p.printed) >= PLAIN_EVERY {
                    p.printed = now;
                    let _ = writeln!(std::io::stderr(), "{}", plain_line(&p, now));
                }
            }
        }
    }

    fn end(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Meter {
    // A command that fails mid-stage never reaches the library's `end`: the bar goes before
    // its error line is printed.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Printer<'_> {
    /// A progress observer for this command: nothing with `-q`, when stderr carries records,
    /// or when the process's stderr was not resolved ([`ProgressMode::Off`]).
    pub(super) fn meter(&self) -> Meter {
        let mode = if self.quiet || self.records_on_stderr {
            ProgressMode::Off
        } else {
            self.progress
        };
        let mut meter = Meter::new(mode);
        if mode == ProgressMode::Bar {
            let bar = indicatif::ProgressBar::with_draw_target(
                None,
                indicatif::ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {pos}/{len} {msg} [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            meter.bar = Some(bar);
        }
        meter
    }
}

/// `text` with every character that a terminal acts on instead of showing written as `\u{…}`:
/// the C0 controls (escape, carriage return, newline, bell, …), DEL, the C1 controls, and the
/// bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069), which
/// reorder what follows them on the line. Text without any is returned as it is.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let acts =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(acts) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if acts(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn text_from_values_cannot_act_on_the_terminal() {
        use super::terminal_safe;
        assert_eq!(terminal_safe("plain text, é 日本"), "plain text, é 日本");
        assert_eq!(
            terminal_safe("x\u{1b}[31mRED\u{1b}[0m\nprincipal:    mallory\r\u{7}"),
            "x\\u{1b}[31mRED\\u{1b}[0m\\u{a}principal:    mallory\\u{d}\\u{7}"
        );
        assert_eq!(
            terminal_safe("\u{1b}]0;title\u{7}"),
            "\\u{1b}]0;title\\u{7}"
        );
        assert_eq!(
            terminal_safe("a\u{202e}b\u{2066}c\u{7f}\u{9b}"),
            "a\\u{202e}b\\u{2066}c\\u{7f}\\u{9b}"
        );
    }

    use super::*;
    use std::time::Duration;

    #[test]
    fn a_failed_write_of_data_raises_success_and_refusal_to_error_and_keeps_run_codes() {
        assert_eq!(ExitStatus::Success.at_least_error(), ExitStatus::Error);
        assert_eq!(ExitStatus::Refused.at_least_error(), ExitStatus::Error);
        assert_eq!(ExitStatus::Child(1).at_least_error(), ExitStatus::Error);
        assert_eq!(
            ExitStatus::NotClaimed.at_least_error(),
            ExitStatus::NotClaimed
        );
        assert_eq!(
            ExitStatus::Child(130).at_least_error(),
            ExitStatus::Child(130)
        );
        assert_eq!(ExitStatus::of_error(true).code(), 1);
        assert_eq!(ExitStatus::of_error(false).code(), 2);
    }

    #[test]
    fn plain_progress_lines_name_units_totals_and_rates() {
        let start = std::time::Instant::now();
        let p = Plain {
            unit: "shards",
            total: Some(40),
            done: 12,
            events: 3000,
            started: start,
            printed: start,
        };
        assert_eq!(
            plain_line(&p, start + Duration::from_secs(6)),
            "progress: 12/40 shards, 3000 event(s), 500 events/s, 6 s"
        );
        let p = Plain { total: None, ..p };
        assert_eq!(
            plain_line(&p, start),
            "progress: 12 shards, 3000 event(s), 0 events/s, 0 s"
        );
        let p = Plain {
            unit: "sources",
            events: 0,
            ..p
        };
        assert_eq!(
            plain_line(&p, start + Duration::from_millis(2500)),
            "progress: 12 sources, 2 s"
        );
    }
}
