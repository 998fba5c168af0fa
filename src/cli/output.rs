//! The printer, the exit-code carrying failure, and the helpers that render `--json` lines.
//!
//! Data (what a script consumes) goes to stdout, one line at a time, flushed as it is written;
//! notes (human summaries) go to stderr and `-q` silences them; diagnostics that must be seen
//! (findings, refusals, errors) go to stderr whatever `-q` says. A failed write of data is
//! remembered, stops further data, and is reported once at the end, except a closed pipe
//! (`action-ledger log | head`), which is not an error.
//!
//! Every `--json` line is an object in canonical JSON (sorted keys, no spaces) with a `type`
//! member naming its shape, so that consumers can dispatch on it line by line.

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
        }
    }

    /// One line of data on stdout.
    pub(super) fn data(&mut self, line: &str) {
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

    /// One line of summary on stderr, unless `-q`.
    pub(super) fn note(&mut self, line: &str) {
        if !self.quiet {
            let _ = writeln!(self.stderr, "{line}");
        }
    }

    /// The exit code of a command's result: its failure's message goes to stderr as
    /// `error: …`; a data write that failed (other than a closed pipe) makes it at least 2.
    pub(super) fn finish(mut self, result: Result<(), Failure>) -> i32 {
        let code = match result {
            Ok(()) => 0,
            Err(Failure { code, message }) => {
                if !message.is_empty() {
                    let _ = writeln!(self.stderr, "error: {message}");
                }
                code
            }
        };
        match self.broken.take() {
            Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                let _ = writeln!(self.stderr, "error: cannot write output: {e}");
                code.max(2)
            }
            _ => code,
        }
    }
}

/// Why a command stopped: its exit code (1 refusal, 2 input or I/O; `run` also 3, 4 and the
/// child's code) and the message printed as `error: …` (none when empty).
pub(super) struct Failure {
    pub(super) code: i32,
    pub(super) message: String,
}

impl Failure {
    /// An input, usage or I/O error (exit 2).
    pub(super) fn input(e: impl std::fmt::Display) -> Failure {
        Failure {
            code: 2,
            message: e.to_string(),
        }
    }
}

/// A JSON array of strings (paths, commit ids).
pub(super) fn path_list(paths: &[String]) -> Value {
    Value::Array(paths.iter().map(Value::str).collect())
}

/// One `--json` line: the value in canonical JSON.
pub(super) fn line(v: &Value) -> String {
    canonical::to_canonical_unchecked(v)
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
