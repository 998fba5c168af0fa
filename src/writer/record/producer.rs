//! What the job's environment says: whether recording is enabled, the producer resolved once
//! with its parts and their limits ([`resolve_producer`]), the fields of a producer run, and
//! the partition date.

use crate::canonical::Value;
use crate::event;
use crate::identity::{self, Digest};
use crate::privacy;
use crate::time::Timestamp;

use super::{Environment, Error};

/// `workflowActionEventsEnabled`: `CLAWSWEEPER_ACTION_LEDGER_DISABLED=1` wins, else
/// `CLAWSWEEPER_ACTION_LEDGER_FORCE=1` enables.
pub fn enabled(env: &Environment) -> bool {
    if env
        .get("CLAWSWEEPER_ACTION_LEDGER_DISABLED")
        .map(String::as_str)
        == Some("1")
    {
        return false;
    }
    env.get("CLAWSWEEPER_ACTION_LEDGER_FORCE")
        .map(String::as_str)
        == Some("1")
}

/// `machineIdentifier(value, max)`: runs outside `[A-Za-z0-9_.:/@+-]` become `-`,
/// dashes trimmed; kept as is when unchanged and short enough, else a prefix of `max − 13`
/// characters plus `-` and 12 hex of sha256 of the trimmed source.
pub fn machine_identifier(value: &str, max: usize) -> Result<String, Error> {
    let source = privacy::js_trim(value);
    let readable = identity::replace_runs(
        source,
        |c| c.is_ascii_alphanumeric() || "_.:/@+-".contains(c),
        "-",
    );
    let readable = readable.trim_matches('-');
    if readable.is_empty() {
        return Err(Error::IdentifierRequired);
    }
    if readable == source && readable.len() <= max {
        return Ok(readable.to_owned());
    }
    let prefix_len = max - 13;
    let prefix = readable[..readable.len().min(prefix_len)].trim_end_matches('-');
    let prefix = if prefix.is_empty() { "id" } else { prefix };
    Ok(format!("{prefix}-{}", Digest::of(source).prefix(12)))
}

fn required_env(env: &Environment, name: &'static str) -> Result<String, Error> {
    let v = privacy::js_trim(env.get(name).map(String::as_str).unwrap_or(""));
    if v.is_empty() {
        return Err(Error::EnvRequired(name));
    }
    Ok(v.to_owned())
}

/// Longest workflow part of a producer (`GITHUB_WORKFLOW_REF`'s file name, else
/// `GITHUB_WORKFLOW`), as a machine identifier.
pub const WORKFLOW_PART_MAX: usize = 128;
/// Longest component part (the input's `component`) of a producer's component.
pub const COMPONENT_PART_MAX: usize = 120;
/// Longest step part (`GITHUB_ACTION`) of a producer's component.
pub const STEP_PART_MAX: usize = 64;
/// Longest invocation part (`CLAWSWEEPER_ACTION_LEDGER_INVOCATION`) of a producer's component.
pub const INVOCATION_PART_MAX: usize = 64;

/// One machine-identifier part of a producer: where it comes from and what it became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerPart {
    /// The variable it comes from, or `component` (the input's field).
    pub name: &'static str,
    /// The value as given.
    pub source: String,
    /// [`machine_identifier`] of `source` within the part's limit.
    pub identifier: String,
}

/// A producer resolved once from the environment and an input's component
/// ([`resolve_producer`]): the producer the event is built with, and the four parts its
/// workflow and component are made of, which the strict profile checks one by one
/// ([`check_privacy`](super::check_privacy)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedProducer {
    /// The producer, as the event will persist it.
    pub producer: event::Producer,
    /// The workflow, component, step and invocation parts, in that order.
    pub parts: [ProducerPart; 4],
}

/// The producer of an event with `component`, resolved from `env` (the reference's
/// `workflowActionProducer`); its errors come in the reference's order.
pub fn resolve_producer(component: &str, env: &Environment) -> Result<ResolvedProducer, Error> {
    let repository = required_env(env, "GITHUB_REPOSITORY")?.to_lowercase();
    if identity::normalize_repository(&repository).ok().as_deref() != Some(repository.as_str()) {
        return Err(Error::EnvRepository(repository));
    }
    let part = |name: &'static str, source: &str, max: usize| -> Result<ProducerPart, Error> {
        Ok(ProducerPart {
            name,
            source: source.to_owned(),
            identifier: machine_identifier(source, max)?,
        })
    };
    let workflow = part("GITHUB_WORKFLOW", &workflow_source(env)?, WORKFLOW_PART_MAX)?;
    let step = part("GITHUB_ACTION", step_source(env), STEP_PART_MAX)?;
    let invocation = part(
        "CLAWSWEEPER_ACTION_LEDGER_INVOCATION",
        invocation_source(env),
        INVOCATION_PART_MAX,
    )?;
    let sha = required_env(env, "GITHUB_SHA")?;
    let job = required_env(env, "GITHUB_JOB")?;
    let run_id = required_env(env, "GITHUB_RUN_ID")?;
    let attempt = privacy::js_number(&required_env(env, "GITHUB_RUN_ATTEMPT")?);
    let run_attempt = Value::Number(attempt)
        .as_safe_integer()
        .filter(|n| *n >= 1)
        .ok_or(Error::EnvNotPositive("GITHUB_RUN_ATTEMPT"))?;
    let component = part("component", component, COMPONENT_PART_MAX)?;
    Ok(ResolvedProducer {
        producer: event::Producer {
            component: format!(
                "{}.{}.{}",
                component.identifier, step.identifier, invocation.identifier
            ),
            job,
            repository,
            run_attempt,
            run_id,
            sha,
            workflow: workflow.identifier.clone(),
        },
        parts: [workflow, component, step, invocation],
    })
}

/// The fields of a producer run, as they are named in a shard's identity and in the
/// provenance a publisher expects ([`crate::publish::ExpectedProducer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunField {
    /// `repository`, from `GITHUB_REPOSITORY` (lowercased).
    Repository,
    /// `sha`, from `GITHUB_SHA`.
    Sha,
    /// `workflow`, from the file name of `GITHUB_WORKFLOW_REF`, else `GITHUB_WORKFLOW`, as a
    /// machine identifier.
    Workflow,
    /// `job`, from `GITHUB_JOB`.
    Job,
    /// `run_id`, from `GITHUB_RUN_ID`.
    RunId,
    /// `run_attempt`, from `GITHUB_RUN_ATTEMPT` (a safe integer ≥ 1).
    RunAttempt,
}

impl RunField {
    /// The six fields, in the order the provenance check compares them.
    pub const ALL: [RunField; 6] = [
        RunField::Repository,
        RunField::Sha,
        RunField::Workflow,
        RunField::Job,
        RunField::RunId,
        RunField::RunAttempt,
    ];

    /// The field's name in a provenance mismatch (`run_id`, ...).
    pub fn name(self) -> &'static str {
        match self {
            RunField::Repository => "repository",
            RunField::Sha => "sha",
            RunField::Workflow => "workflow",
            RunField::Job => "job",
            RunField::RunId => "run_id",
            RunField::RunAttempt => "run_attempt",
        }
    }

    /// The variable the field is read from (`GITHUB_WORKFLOW_REF` is tried before this one for
    /// the workflow).
    pub fn variable(self) -> &'static str {
        match self {
            RunField::Repository => "GITHUB_REPOSITORY",
            RunField::Sha => "GITHUB_SHA",
            RunField::Workflow => "GITHUB_WORKFLOW",
            RunField::Job => "GITHUB_JOB",
            RunField::RunId => "GITHUB_RUN_ID",
            RunField::RunAttempt => "GITHUB_RUN_ATTEMPT",
        }
    }
}

/// One field of the producer run that [`resolve_producer`] derives from `env`, resolved on its
/// own (the run attempt as its decimal text): what the current job's events carry, for a
/// publisher that checks a shard's provenance against it.
pub fn run_field_from_env(field: RunField, env: &Environment) -> Result<String, Error> {
    match field {
        RunField::Repository => {
            let repository = required_env(env, "GITHUB_REPOSITORY")?.to_lowercase();
            if identity::normalize_repository(&repository).ok().as_deref()
                != Some(repository.as_str())
            {
                return Err(Error::EnvRepository(repository));
            }
            Ok(repository)
        }
        RunField::Workflow => machine_identifier(&workflow_source(env)?, WORKFLOW_PART_MAX),
        RunField::RunAttempt => {
            let attempt = privacy::js_number(&required_env(env, "GITHUB_RUN_ATTEMPT")?);
            Value::Number(attempt)
                .as_safe_integer()
                .filter(|n| *n >= 1)
                .map(|n| n.to_string())
                .ok_or(Error::EnvNotPositive("GITHUB_RUN_ATTEMPT"))
        }
        other => required_env(env, other.variable()),
    }
}

/// Where each machine-identifier part of a producer comes from, with its length limit: the
/// workflow (the file name of `GITHUB_WORKFLOW_REF`, else `GITHUB_WORKFLOW`), the step
/// (`GITHUB_ACTION`, default `process`) and the invocation
/// (`CLAWSWEEPER_ACTION_LEDGER_INVOCATION`, default `default`).
fn workflow_source(env: &Environment) -> Result<String, Error> {
    let workflow_ref = privacy::js_trim(
        env.get("GITHUB_WORKFLOW_REF")
            .map(String::as_str)
            .unwrap_or(""),
    );
    if workflow_ref.is_empty() {
        return required_env(env, "GITHUB_WORKFLOW");
    }
    let path = workflow_ref
        .rfind("@refs/")
        .map_or(workflow_ref, |at| &workflow_ref[..at]);
    Ok(path
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_owned())
}

fn step_source(env: &Environment) -> &str {
    env.get("GITHUB_ACTION").map_or("process", String::as_str)
}

fn invocation_source(env: &Environment) -> &str {
    env.get("CLAWSWEEPER_ACTION_LEDGER_INVOCATION")
        .map_or("default", String::as_str)
}

pub(super) fn partition_calendar_date(value: &str, label: &str) -> Result<String, Error> {
    identity::calendar_date(value, label)
        .ok()
        .filter(|d| d == value)
        .ok_or_else(|| Error::NotCalendarDate(label.to_owned()))
}

/// `workflowPartitionDate`: the configured date, else the UTC date of
/// `GITHUB_RUN_STARTED_AT`, else an error.
pub fn partition_date(env: &Environment) -> Result<String, Error> {
    let configured = privacy::js_trim(
        env.get("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE")
            .map(String::as_str)
            .unwrap_or(""),
    );
    if !configured.is_empty() {
        return partition_calendar_date(configured, "CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE");
    }
    let started = privacy::js_trim(
        env.get("GITHUB_RUN_STARTED_AT")
            .map(String::as_str)
            .unwrap_or(""),
    );
    if started.is_empty() {
        return Err(Error::NoPartition);
    }
    // The reference's pattern is the ledger timestamp shape with an unbounded year-0 check
    // done separately; both reject the same strings here.
    let started = Timestamp::from_iso(started).ok_or(Error::RunStartedAt)?;
    let date = started
        .utc_date()
        .map(|d| d.to_string())
        .unwrap_or_default();
    partition_calendar_date(&date, "GITHUB_RUN_STARTED_AT UTC partition date")
}
