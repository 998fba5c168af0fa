//! `run`: the governed helper. It claims an action for one attempt, runs the command after
//! `--` with stdin inherited and its stdout and stderr passed through, and reports `completed`
//! or `failed` bound to that attempt.
//!
//! Exit codes: the command's own (128+S for a signal); 3 when no claim was granted (the command
//! is not run); 4 when the command completed but its outcome could not be recorded (the message
//! says to reconcile with `action show`, never to rerun); 127 or 126 when the command cannot be
//! started. `run`'s own report goes to stderr, since stdout is the command's. An interrupted
//! `run` leaves the outcome pending until `sweep` marks it `lost_confirmation`.

use crate::canonical::Value;
use crate::finality;
use crate::store::Store;

use crate::cli::Env;
use crate::cli::args::{Binding, StateRepo};
use crate::cli::cmd::action::{print_claim, reported_value};
use crate::cli::output::{ExitStatus, Failure, Printer, line};
use crate::cli::settings::{finality_now, finality_options, open_state, system_now, uuid_v4};

/// The resolved flags of one `run`.
pub(in crate::cli) struct Request<'a> {
    /// `--repo` and `--ref`.
    pub(in crate::cli) state: &'a StateRepo,
    /// Who claims, and the act (`--act`, else the shell act of the command).
    pub(in crate::cli) binding: &'a Binding,
    /// `--action`.
    pub(in crate::cli) action_id: &'a str,
    /// `--attempt` (default: a fresh UUID v4).
    pub(in crate::cli) attempt: Option<String>,
    /// `--json`: JSON Lines on stderr.
    pub(in crate::cli) json: bool,
    /// The command after `--` and its arguments.
    pub(in crate::cli) command: &'a [String],
}

/// The governed helper: claim, run, report. Exit 3 when no claim was granted (the command is
/// not run); else the command's own code, or 4 when it completed but its outcome could not be
/// recorded.
pub(in crate::cli) fn run(out: &mut Printer, env: &Env, request: &Request) -> Result<(), Failure> {
    let claimed = claim(out, env, request)?;
    let status = run_child(out, request.command);
    let settled = settle(out, env, request, &claimed, status);
    if request.json {
        let v = Value::object([
            ("type", Value::str("run")),
            ("action_id", Value::str(request.action_id)),
            ("attempt_id", Value::str(claimed.attempt_id())),
            ("exit_code", Value::from(i64::from(settled.status.code()))),
            ("outcome", Value::str(settled.outcome)),
            ("recorded", Value::Bool(settled.recorded)),
        ]);
        let _ = writeln!(out.stderr, "{}", line(&v));
    }
    match settled.status {
        ExitStatus::Success => Ok(()),
        status => Err(Failure::new(status, settled.message)),
    }
}

/// A granted claim, with what reporting its outcome needs.
struct Claimed {
    store: Store,
    options: finality::Options,
    claim: finality::Written<finality::Claim>,
}

impl Claimed {
    fn attempt_id(&self) -> &str {
        self.claim.value.attempt_id.as_str()
    }
}

/// How a `run` ended: its exit status, the outcome reported, whether it was recorded, and the
/// failure message (empty on success).
struct Settled {
    status: ExitStatus,
    outcome: &'static str,
    recorded: bool,
    message: String,
}

/// Step 1: claims the action for the attempt; a refusal or an unavailable repository is exit 3
/// and the command is not run.
fn claim(out: &mut Printer, env: &Env, request: &Request) -> Result<Claimed, Failure> {
    let Request {
        state,
        binding,
        action_id,
        json,
        command,
        ..
    } = *request;
    let attempt = match &request.attempt {
        Some(a) => a.clone(),
        None => uuid_v4()?,
    };
    let claim_request = finality::ClaimRequest {
        attempt_id: attempt.clone(),
        agent_id: binding.agent(env),
        principal: binding.principal(env),
        act: binding.act(command)?,
        verified: binding.verified,
    };
    let now = finality_now(env)?;
    let options = finality_options(env, state)?;
    let claimed = match open_state(env, state) {
        Ok(store) => {
            finality::claim(&store, &options, action_id, &claim_request, now).map(|w| (store, w))
        }
        Err(f) => Err(finality::Error::ClaimUnavailable {
            action_id: action_id.to_owned(),
            reason: f.message,
        }),
    };
    match claimed {
        Ok((store, claim)) => {
            print_claim(out, json, true, action_id, &attempt, Ok(&claim));
            Ok(Claimed {
                store,
                options,
                claim,
            })
        }
        Err(e) => {
            print_claim(out, json, true, action_id, &attempt, Err(&e));
            Err(Failure::new(
                ExitStatus::NotClaimed,
                format!("{e} ({}); the command was not run", e.code()),
            ))
        }
    }
}

/// Step 3: reports the outcome the command's end implies, bound to the claiming attempt.
fn settle(
    out: &mut Printer,
    env: &Env,
    request: &Request,
    claimed: &Claimed,
    status: std::io::Result<std::process::ExitStatus>,
) -> Settled {
    let action_id = request.action_id;
    let attempt_text = claimed.attempt_id();
    let outcome =
        |status: &str, summary: Option<String>, error: Option<String>| finality::OutcomeReport {
            status: status.into(),
            summary,
            error_message: error,
            attempt_id: Some(attempt_text.to_owned()),
            ..finality::OutcomeReport::default()
        };
    let report_failed = |out: &mut Printer, what: &str| {
        let failed = outcome("failed", None, Some(what.to_owned()));
        report(out, env, request, claimed, failed)
    };
    match status {
        Ok(st) if st.success() => {
            let result = report(
                out,
                env,
                request,
                claimed,
                outcome(
                    "completed",
                    Some("command exited with status 0".into()),
                    None,
                ),
            );
            match result {
                Ok(_) => {
                    out.note(&format!(
                        "{action_id}: command completed; outcome completed recorded"
                    ));
                    settled(ExitStatus::Success, "completed", true, String::new())
                }
                // Never a failed outcome: the command did run to completion.
                Err(e) => settled(
                    ExitStatus::Unrecorded,
                    "completed",
                    false,
                    format!(
                        "the command completed, but its outcome could not be recorded: {e} ({}); reconcile action {action_id} (attempt {attempt_text}) before doing anything else, and never rerun it blindly",
                        e.code(),
                    ),
                ),
            }
        }
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            let (code, what) = match (st.code(), st.signal()) {
                (Some(c), _) => (c, format!("command exited with status {c}")),
                (None, Some(s)) => (128 + s, format!("command killed by signal {s}")),
                (None, None) => (1, "command ended without a status".to_owned()),
            };
            let code = ExitStatus::Child(code);
            let result = report_failed(out, &what);
            match result {
                Ok(_) => {
                    out.note(&format!("{action_id}: {what}; outcome failed recorded"));
                    settled(code, "failed", true, String::new())
                }
                // The command's failure is what the caller hears about; the report's is attached.
                Err(e) => settled(
                    code,
                    "failed",
                    false,
                    format!(
                        "{action_id}: {what}, and the failed outcome could not be recorded: {e} ({}); reconcile action {action_id} (attempt {attempt_text})",
                        e.code()
                    ),
                ),
            }
        }
        Err(spawn) => {
            let what = format!("could not start {}: {spawn}", request.command[0]);
            let result = report_failed(out, &what);
            // The shell's codes: not found, or found but not runnable.
            let code = ExitStatus::Child(if spawn.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
            match result {
                Ok(_) => settled(code, "failed", true, what),
                Err(e) => settled(
                    code,
                    "failed",
                    false,
                    format!(
                        "{what}, and the failed outcome could not be recorded: {e} ({}); reconcile action {action_id} (attempt {attempt_text})",
                        e.code()
                    ),
                ),
            }
        }
    }
}

fn settled(status: ExitStatus, outcome: &'static str, recorded: bool, message: String) -> Settled {
    Settled {
        status,
        outcome,
        recorded,
        message,
    }
}

/// Records one outcome at the finality clock's now; with `--json` prints its `outcome` or
/// `refusal` object on stderr, else notes a clock skew.
fn report(
    out: &mut Printer,
    env: &Env,
    request: &Request,
    claimed: &Claimed,
    report: finality::OutcomeReport,
) -> Result<finality::Written<finality::Reported>, finality::Error> {
    let now = finality_now(env).unwrap_or_else(|_| system_now());
    let result = finality::report_outcome(
        &claimed.store,
        &claimed.options,
        request.action_id,
        &report,
        // The claim was granted to this principal, so it is the action's own.
        &finality::Settler::Principal(request.binding.principal(env).unwrap_or_default()),
        now,
    );
    if request.json {
        let v = match &result {
            Ok(w) => reported_value(w),
            Err(e) => Value::object([
                ("type", Value::str("refusal")),
                ("command", Value::str("outcome")),
                ("action_id", Value::str(request.action_id)),
                ("code", Value::str(e.code())),
                (
                    "error",
                    Value::str(crate::store::remote::redact(&e.to_string())),
                ),
            ]),
        };
        let _ = writeln!(out.stderr, "{}", line(&v));
    } else if let Ok(w) = &result
        && let Some(skew) = &w.value.view.clock_skew
    {
        out.note(&format!("clock skew: {skew}; elapsed_ms is never negative"));
    }
    result
}

/// Runs `command` with stdin inherited, passing its stdout and stderr through as they come.
fn run_child(out: &mut Printer, command: &[String]) -> std::io::Result<std::process::ExitStatus> {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (tx, rx) = std::sync::mpsc::channel::<(bool, Vec<u8>)>();
    fn pump(mut r: impl Read, is_err: bool, tx: std::sync::mpsc::Sender<(bool, Vec<u8>)>) {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 || tx.send((is_err, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    }
    let mut pumps = Vec::new();
    if let Some(o) = child.stdout.take() {
        let tx = tx.clone();
        pumps.push(std::thread::spawn(move || pump(o, false, tx)));
    }
    if let Some(e) = child.stderr.take() {
        let tx = tx.clone();
        pumps.push(std::thread::spawn(move || pump(e, true, tx)));
    }
    drop(tx);
    for (is_err, chunk) in rx {
        if is_err {
            let _ = out
                .stderr
                .write_all(&chunk)
                .and_then(|()| out.stderr.flush());
        } else {
            out.raw(&chunk);
        }
    }
    for p in pumps {
        let _ = p.join();
    }
    child.wait()
}
