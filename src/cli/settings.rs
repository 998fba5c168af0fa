//! Arguments and environment resolved into the values the library takes.
//!
//! The library never reads the clock or the environment; this module does, once per command,
//! and hands the results on as plain values. Variables read here:
//!
//! - `SOURCE_DATE_EPOCH`: commit time in seconds (else the clock), for reproducible commits;
//! - `ACTION_LEDGER_COMMITTER_NAME`, `ACTION_LEDGER_COMMITTER_EMAIL`: commit identity
//!   (default `action-ledger <action-ledger@invalid>`, a fixed non-personal identity);
//! - `CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT`: `seal --output` when the flag is absent;
//! - `ACTION_LEDGER_NOW`: the clock of the finality records and of `serve`
//!   (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`);
//! - `ACTION_LEDGER_AGENT_ID`, `ACTION_LEDGER_PRINCIPAL`: the binding's agent and principal
//!   when `--agent` / `--principal` are absent;
//! - `ACTION_LEDGER_REMOTE_TIMEOUT`: the time limit in seconds of each `git` run against
//!   `--remote` (default [`DEFAULT_REMOTE_TIMEOUT_SECS`]; `0`: no limit);
//! - `CLAWSWEEPER_CRABFLEET_*` and `SSL_CERT_FILE`: live projection ([`LiveDrain`]), and
//!   `ACTION_LEDGER_CRABFLEET_FLUSH_TIMEOUT_MS` ([`FLUSH_TIMEOUT_VAR`]): the drain deadline of
//!   `seal` and of `publish`'s spool input.
//!
//! - `GITHUB_REPOSITORY`, `GITHUB_SHA`, `GITHUB_WORKFLOW_REF` / `GITHUB_WORKFLOW`,
//!   `GITHUB_JOB`, `GITHUB_RUN_ID`, `GITHUB_RUN_ATTEMPT`: the producer run `publish` expects
//!   ([`expected_producer`]) for each field whose `--expected-FIELD` flag is absent.
//!
//! `record` reads the writer's own variables (`CLAWSWEEPER_ACTION_LEDGER_*`, `GITHUB_*`)
//! through the map it is given; `serve` reads its keys and cron secret in `cmd::serve`.
//!
//! Fresh ids (attempt ids, action ids) come from the kernel's random generator through
//! `rustix`, so that a failure to get randomness is an error (exit 2) rather than a panic;
//! the `uuid` and `hex` crates format them.

use std::path::PathBuf;

use crate::canonical::{self, Value};
use crate::finality;
use crate::store::remote::Target;
use crate::store::{Signature, Store};
use crate::time::Timestamp;

use super::Env;
use super::args::{Binding, ExpectedArgs, StateRepo};
use super::output::Failure;

/// The system clock (the epoch itself when the clock is before it).
pub(super) fn system_now() -> Timestamp {
    Timestamp::from_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    )
}

/// Commit identity: `ACTION_LEDGER_COMMITTER_NAME` / `_EMAIL` or a fixed non-personal identity;
/// time from `SOURCE_DATE_EPOCH` or the clock.
pub(super) fn signature(env: &Env) -> Result<Signature, Failure> {
    let time_seconds = match env.get("SOURCE_DATE_EPOCH") {
        Some(s) => s.trim().parse::<i64>().map_err(|_| {
            Failure::input(format!(
                "SOURCE_DATE_EPOCH must be an integer number of seconds: {s}"
            ))
        })?,
        None => system_now().epoch_seconds(),
    };
    Ok(Signature {
        name: env
            .get("ACTION_LEDGER_COMMITTER_NAME")
            .cloned()
            .unwrap_or_else(|| "action-ledger".into()),
        email: env
            .get("ACTION_LEDGER_COMMITTER_EMAIL")
            .cloned()
            .unwrap_or_else(|| "action-ledger@invalid".into()),
        time_seconds,
    })
}

/// The time limit of each `git ls-remote`, `fetch` and `push` against `--remote` when
/// `ACTION_LEDGER_REMOTE_TIMEOUT` is unset: long enough for a large push on a slow link, short
/// enough that a stalled server does not hold a CI job until the job's own limit.
pub(super) const DEFAULT_REMOTE_TIMEOUT_SECS: u64 = 600;

/// `ACTION_LEDGER_REMOTE_TIMEOUT` (whole seconds; `0`: no limit), else
/// [`DEFAULT_REMOTE_TIMEOUT_SECS`].
pub(super) fn remote_timeout(env: &Env) -> Result<Option<std::time::Duration>, Failure> {
    let secs = match env
        .get("ACTION_LEDGER_REMOTE_TIMEOUT")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
    {
        None => DEFAULT_REMOTE_TIMEOUT_SECS,
        Some(s) => s.parse::<u64>().map_err(|_| {
            Failure::input(format!(
                "ACTION_LEDGER_REMOTE_TIMEOUT must be a whole number of seconds (0: no limit), got {s}"
            ))
        })?,
    };
    Ok((secs > 0).then(|| std::time::Duration::from_secs(secs)))
}

/// A remote given as a local path is made absolute: git runs in the cache repository.
pub(super) fn absolute_url(url: &str) -> String {
    let looks_local = !(url.contains("://") || (url.contains('@') && url.contains(':')));
    match std::path::Path::new(url) {
        p if looks_local && p.is_relative() => std::env::current_dir()
            .map(|d| d.join(p).to_string_lossy().into_owned())
            .unwrap_or_else(|_| url.to_owned()),
        _ => url.to_owned(),
    }
}

/// The clock of the finality records: `ACTION_LEDGER_NOW` (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`) when
/// set, else the system clock.
pub(super) fn finality_now(env: &Env) -> Result<Timestamp, Failure> {
    match env.get("ACTION_LEDGER_NOW").filter(|s| !s.is_empty()) {
        None => Ok(system_now()),
        Some(s) => finality::parse_time(s)
            .or_else(|| {
                (s.len() == 20 && s.ends_with('Z'))
                    .then(|| crate::event::timestamp_epoch_seconds(s))
                    .flatten()
                    .map(|secs| Timestamp::from_millis(secs * 1000))
            })
            .ok_or_else(|| {
                Failure::input(format!(
                    "ACTION_LEDGER_NOW must be YYYY-MM-DDTHH:MM:SS[.mmm]Z, got {s}"
                ))
            }),
    }
}

/// The finality write options: commit identity from the environment, the ref from `--ref`,
/// the target from `--remote` / `--remote-ref`.
pub(super) fn finality_options(env: &Env, state: &StateRepo) -> Result<finality::Options, Failure> {
    let mut options = finality::Options::new(signature(env)?);
    options.ref_name = state.ref_name.clone();
    options.target = state_target(env, state)?;
    Ok(options)
}

/// Where a state command reads and writes: the local ref of `--ref`, or `--remote`'s ref
/// (`--remote-ref`, default the value of `--ref`).
/// (`--remote-ref`, default the value of `--ref`), each `git` run bounded by
/// [`remote_timeout()`].
pub(super) fn state_target(env: &Env, state: &StateRepo) -> Result<Target, Failure> {
    Ok(match &state.remote {
        Some(url) => Target::Remote {
            url: absolute_url(url),
            ref_name: state
                .remote_ref
                .clone()
                .unwrap_or_else(|| state.ref_name.clone()),
            timeout: remote_timeout(env)?,
        },
        None => Target::Local,
    })
}

/// Opens the existing state repository of `--repo` (exit 2 when it cannot be opened); with
/// `--remote` it is only a cache of objects, created bare when absent. With
/// `--accept-rewritten-remote`, the remote's tip as it is now becomes the confirmed one
/// ([`store::remote::accept_rewritten`](crate::store::remote::accept_rewritten)).
pub(super) fn open_state(env: &Env, state: &StateRepo) -> Result<Store, Failure> {
    let opened = if state.remote.is_some() {
        Store::open_or_init_bare(&state.repo, &state.ref_name)
    } else {
        Store::open(&state.repo)
    };
    let store = opened.map_err(|e| {
        Failure::input(format!(
            "cannot open state repository {}: {e}",
            state.repo.display()
        ))
    })?;
    accept_if_asked(env, state, &store)?;
    Ok(store)
}

/// With `--accept-rewritten-remote`, the remote's tip as it is now becomes the confirmed one in
/// `store` ([`accept_rewritten`]); without it, nothing.
pub(super) fn accept_if_asked(env: &Env, state: &StateRepo, store: &Store) -> Result<(), Failure> {
    if state.accept_rewritten_remote {
        accept_rewritten(store, &state_target(env, state)?, &state.ref_name)?;
    }
    Ok(())
}

/// Accepts the remote ref of `target` as it is now (`--accept-rewritten-remote`); exit 2 when
/// the remote cannot be read or the record written.
pub(super) fn accept_rewritten(
    store: &Store,
    target: &Target,
    local_ref: &str,
) -> Result<(), Failure> {
    crate::store::remote::accept_rewritten(store, target, local_ref)
        .map(|_| ())
        .map_err(|e| {
            Failure::input(format!(
                "cannot accept the tip of {}: {e}",
                target.describe(local_ref)
            ))
        })
}

/// Where each field of the expected producer came from: its flag, or the variable it was read
/// from (to name it in a refusal).
pub(super) type ExpectedFrom = [String; 6];

/// The flag of an expected producer field (`--expected-run-id`).
pub(super) fn expected_flag(field: crate::writer::record::RunField) -> String {
    format!("--expected-{}", field.name().replace('_', "-"))
}

/// The producer `publish` expects of every shard, when any provenance flag is given: each
/// field from its `--expected-FIELD` flag, else derived from the `GITHUB_*` variables as
/// `record` derives the current job's producer; with where each came from. A field with
/// neither is an error naming both (exit 2). `None` without any provenance flag.
pub(super) fn expected_producer(
    env: &Env,
    args: &ExpectedArgs,
) -> Result<Option<(crate::publish::ExpectedProducer, ExpectedFrom)>, Failure> {
    use crate::writer::record::{RunField, run_field_from_env};
    let given = |field: RunField| -> Option<String> {
        match field {
            RunField::Repository => args.expected_repository.clone(),
            RunField::Sha => args.expected_sha.clone(),
            RunField::Workflow => args.expected_workflow.clone(),
            RunField::Job => args.expected_job.clone(),
            RunField::RunId => args.expected_run_id.clone(),
            RunField::RunAttempt => args.expected_run_attempt.map(|n| n.to_string()),
        }
    };
    if !args.expected_producer && RunField::ALL.iter().all(|f| given(*f).is_none()) {
        return Ok(None);
    }
    let mut values: [String; 6] = Default::default();
    let mut from: ExpectedFrom = Default::default();
    for (i, field) in RunField::ALL.into_iter().enumerate() {
        let flag = expected_flag(field);
        (values[i], from[i]) = match given(field) {
            Some(v) => (v, flag),
            None => {
                let v = run_field_from_env(field, env).map_err(|e| {
                    Failure::input(format!(
                        "{flag} is not given and cannot be taken from the environment: {e}"
                    ))
                })?;
                let variable = match field {
                    RunField::Workflow
                        if env
                            .get("GITHUB_WORKFLOW_REF")
                            .is_some_and(|s| !s.trim().is_empty()) =>
                    {
                        "GITHUB_WORKFLOW_REF"
                    }
                    other => other.variable(),
                };
                (v, format!("${variable} (no {flag})"))
            }
        };
    }
    let [repository, sha, workflow, job, run_id, run_attempt] = values;
    let expected = crate::publish::ExpectedProducer {
        repository,
        sha,
        workflow,
        job,
        run_id,
        run_attempt: run_attempt.parse().expect("an integer, checked above"),
    };
    Ok(Some((expected, from)))
}

/// `act_` and 32 random hex digits: a fresh action id.
pub(super) fn new_action_id() -> Result<String, Failure> {
    Ok(format!(
        "act_{}",
        crate::random::hex16().map_err(Failure::input)?
    ))
}

/// A fresh UUID v4 in its hyphenated lowercase form (a valid attempt id).
pub(super) fn uuid_v4() -> Result<String, Failure> {
    crate::random::uuid_v4().map_err(Failure::input)
}

impl Binding {
    /// `--agent`, else `$ACTION_LEDGER_AGENT_ID`.
    pub(super) fn agent(&self, env: &Env) -> Option<String> {
        self.agent
            .clone()
            .or_else(|| env.get("ACTION_LEDGER_AGENT_ID").cloned())
    }

    /// `--principal`, else `$ACTION_LEDGER_PRINCIPAL`.
    pub(super) fn principal(&self, env: &Env) -> Option<String> {
        self.principal
            .clone()
            .or_else(|| env.get("ACTION_LEDGER_PRINCIPAL").cloned())
    }

    /// `--act` (a JSON object), else the shell act of `command`, else none.
    pub(super) fn act(&self, command: &[String]) -> Result<Option<Value>, Failure> {
        match &self.act {
            Some(text) => {
                let v =
                    canonical::parse(text).map_err(|e| Failure::input(format!("--act: {e}")))?;
                if !matches!(v, Value::Object(_)) {
                    return Err(Failure::input("--act must be a JSON object"));
                }
                if let Err(finality::Error::InvalidInput { reason, .. }) =
                    finality::check_act(&v).and_then(|()| finality::check_act_text(text, ""))
                {
                    return Err(Failure::input(format!("--act: {reason}")));
                }
                Ok(Some(v))
            }
            None if command.is_empty() => Ok(None),
            None => Ok(Some(finality::shell_act(command))),
        }
    }
}

/// The server's clock: the system clock, or one that starts at `ACTION_LEDGER_NOW` and advances
/// with the system clock.
pub(super) fn serve_clock(env: &Env) -> Result<std::sync::Arc<dyn crate::server::Clock>, Failure> {
    let offset_ms = match env.get("ACTION_LEDGER_NOW").filter(|s| !s.is_empty()) {
        None => 0,
        Some(_) => finality_now(env)?.millis_since(system_now()),
    };
    Ok(std::sync::Arc::new(move || {
        system_now().saturating_add_millis(offset_ms)
    }))
}

/// `--now`: `YYYY-MM-DD` (midnight UTC) or a timestamp, cut to the whole second (compaction
/// works in seconds); default the clock.
pub(super) fn compact_now(now: Option<&str>) -> Result<Timestamp, Failure> {
    let Some(s) = now else {
        return Ok(Timestamp::from_millis(system_now().epoch_seconds() * 1000));
    };
    let date = (s.len() == 10)
        .then(|| crate::event::timestamp_epoch_seconds(&format!("{s}T00:00:00Z")))
        .flatten();
    date.or_else(|| crate::event::timestamp_epoch_seconds(s))
        .map(|secs| Timestamp::from_millis(secs * 1000))
        .ok_or_else(|| {
            Failure::input(format!(
                "--now must be YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS[.mmm]Z, got {s}"
            ))
        })
}

/// `$CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT` when set and not blank: `seal`'s default `--output`.
pub(super) fn seal_output_root(env: &Env) -> Option<PathBuf> {
    env.get("CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT")
        .filter(|s| !s.trim().is_empty())
        .map(PathBuf::from)
}

/// The drain deadline of two-pass finalization (`seal`, `publish`'s spool input), in
/// milliseconds: parsed as JavaScript's `Number`, an integer in 1..=60000 (else the
/// finalization fails after pass 1, as the reference's option does); unset or blank: the default
/// ([`crate::live::finalize::DEFAULT_FLUSH_TIMEOUT_MS`]).
pub(super) const FLUSH_TIMEOUT_VAR: &str = "ACTION_LEDGER_CRABFLEET_FLUSH_TIMEOUT_MS";

/// What two-pass finalization drains with, resolved from the environment once per command:
/// the configuration verdict, the client when the configuration is valid, and the deadline.
pub(super) struct LiveDrain {
    verdict: crate::live::config::Verdict,
    projector: Option<crate::live::deliver::Projector>,
    flush_timeout_ms: Option<f64>,
}

impl LiveDrain {
    /// Reads the `CLAWSWEEPER_CRABFLEET_*` variables, `SSL_CERT_FILE` (only for a valid
    /// configuration) and [`FLUSH_TIMEOUT_VAR`].
    pub(super) fn from_env(env: &Env) -> Result<LiveDrain, Failure> {
        let verdict = crate::live::config::verdict(env);
        let projector = match &verdict {
            crate::live::config::Verdict::Valid(_) => Some(crabfleet_projector(env)?),
            _ => None,
        };
        let flush_timeout_ms = env
            .get(FLUSH_TIMEOUT_VAR)
            .filter(|s| !s.trim().is_empty())
            .map(|s| crate::privacy::js_number(s));
        Ok(LiveDrain {
            verdict,
            projector,
            flush_timeout_ms,
        })
    }

    /// The drain's parameters for [`crate::live::finalize`] (this process's pid, the system
    /// clock for failures' `recorded_at`).
    pub(super) fn drain(&self) -> crate::live::finalize::Drain<'_> {
        crate::live::finalize::Drain {
            verdict: &self.verdict,
            projector: self.projector.as_ref(),
            flush_timeout_ms: self.flush_timeout_ms,
            pid: std::process::id(),
            wall: &system_now,
        }
    }
}

/// The live-projection client: trusts the CA certificates of the file `SSL_CERT_FILE` names,
/// when set, beside the bundled web roots.
pub(super) fn crabfleet_projector(env: &Env) -> Result<crate::live::deliver::Projector, Failure> {
    let pem = match env.get("SSL_CERT_FILE").filter(|s| !s.trim().is_empty()) {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| Failure::input(format!("SSL_CERT_FILE {path}: {e}")))?,
        ),
        None => None,
    };
    crate::live::deliver::Projector::new(pem.as_deref())
        .map_err(|e| Failure::input(format!("SSL_CERT_FILE: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_are_valid_ids_of_their_kind() {
        let uuid = regex::Regex::new(
            r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
        )
        .unwrap();
        let action = regex::Regex::new(r"^act_[0-9a-f]{32}$").unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..64 {
            let attempt = uuid_v4().ok().unwrap();
            assert!(uuid.is_match(&attempt), "{attempt}");
            assert!(finality::AttemptId::parse(&attempt).is_some(), "{attempt}");
            let id = new_action_id().ok().unwrap();
            assert!(action.is_match(&id), "{id}");
            assert!(finality::ActionId::parse(&id).is_some(), "{id}");
            assert!(seen.insert(attempt) && seen.insert(id));
        }
    }

    #[test]
    fn clock_settings_are_instants_to_the_millisecond_or_second() {
        let iso = |s: &str| Timestamp::from_iso(s).unwrap();
        let env = |v: &str| Env::from([("ACTION_LEDGER_NOW".into(), v.into())]);
        for (given, instant) in [
            ("2026-03-01T12:00:00.250Z", "2026-03-01T12:00:00.250Z"),
            ("2026-03-01T12:00:00Z", "2026-03-01T12:00:00.000Z"),
        ] {
            assert_eq!(
                finality_now(&env(given)).ok(),
                Some(iso(instant)),
                "{given}"
            );
        }
        for bad in [
            "2026-03-01",
            "2026-03-01T12:00:00.25Z",
            "2026-03-01T12:00:00+00:00",
        ] {
            assert!(finality_now(&env(bad)).is_err(), "{bad}");
        }
        // compact's --now: a date is its midnight UTC; a timestamp is cut to the second.
        assert_eq!(
            compact_now(Some("2026-05-01")).ok(),
            Some(iso("2026-05-01T00:00:00Z"))
        );
        assert_eq!(
            compact_now(Some("2026-04-15T12:00:00.999+02:00")).ok(),
            Some(iso("2026-04-15T10:00:00Z"))
        );
        assert!(compact_now(Some("yesterday")).is_err());
    }

    #[test]
    fn blank_output_root_is_no_output_root() {
        let env = |v: &str| Env::from([("CLAWSWEEPER_ACTION_LEDGER_OUTPUT_ROOT".into(), v.into())]);
        assert_eq!(seal_output_root(&Env::new()), None);
        assert_eq!(seal_output_root(&env("  ")), None);
        assert_eq!(seal_output_root(&env("out")), Some(PathBuf::from("out")));
    }
}
