//! Live projection: each recorded event is also posted to a CrabFleet session, and a failed
//! post becomes a `projection.failed` event in the ledger (ledger-runtime §9, §7.2, §2.3).
//!
//! Named `live` (not "projection") because *projections* elsewhere means folded views of the
//! ledger; this module only delivers events as they are recorded.
//!
//! # Pieces
//!
//! - [`config`]: the `CLAWSWEEPER_CRABFLEET_*` variables, checked in the reference's order.
//! - [`request_body`] / [`message`]: the request the reference posts.
//! - [`failure_event`]: the `projection.failed` event, byte-compatible with the reference.
//! - [`outbox`]: the durable outbox (our `record` is one process per event, the reference's
//!   queue lives in one Node process): its files and their crash rules.
//! - [`deliver`]: the HTTP client (rustls), the bounded queue and the drain under one deadline.
//! - [`finalize`]: two-pass finalization (pass 1 without projection-failure-only producers,
//!   the drain, pass 2).
//!
//! The library never reads the environment or the clock: the caller passes the captured
//! environment, the wall clock for a failure's `recorded_at`, and extra CA certificates as data.
//! The agent token ([`config::Token`]) never reaches an event, a file, an error or a log line.

pub mod config;
pub mod deliver;
pub mod finalize;
pub mod outbox;

use crate::canonical::{self, Value};
use crate::event::{self, Event};
use crate::identity;
use crate::time::Timestamp;
use crate::writer::files::Root;
use crate::writer::{record, spool};

/// The event type and key scope of a failed delivery.
pub const FAILURE_TYPE: &str = "projection.failed";
/// The suffix of the derived producer component (§2.3).
pub const PRODUCER_SUFFIX: &str = ".crabfleet_projection";
/// The `destination` of the failure's key and idempotency identities.
pub const DESTINATION: &str = "crabfleet";
/// `Number.MAX_SAFE_INTEGER`: a source at this `phase_seq` keeps it instead of adding one.
const MAX_SAFE_INTEGER: i64 = 9_007_199_254_740_991;

/// What can go wrong writing a failure event or an outbox file. Holds no secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Building or writing the `projection.failed` event failed.
    #[error("recording projection.failed for {source_event}: {error}")]
    Record {
        /// The source event's id.
        source_event: String,
        /// Why.
        error: record::Error,
    },
    /// The source event's producer has no partition marker in the spool.
    #[error("projection.failed for {0}: the source producer has no partition marker")]
    MissingMarker(String),
    /// Reading the spool failed.
    #[error(transparent)]
    Spool(#[from] spool::Error),
    /// An outbox file could not be read or written.
    #[error(transparent)]
    Files(#[from] crate::writer::files::Error),
    /// An outbox file does not hold what this module writes.
    #[error("malformed outbox file {path}: {what}")]
    Outbox {
        /// The file.
        path: std::path::PathBuf,
        /// The broken rule.
        what: String,
    },
}

/// The request `message`: `<event_type>:<status>:<repository>#<number>`, or
/// `<event_type>:<status>:<repository>:<kind>` when the subject has no number.
pub fn message(event: &Event) -> String {
    let record = event.record();
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "undefined".to_owned(),
        Some(other) => canonical::to_canonical_unchecked(other),
    };
    let subject = record.get("subject");
    let status = text(record.get("action").and_then(|a| a.get("status")));
    let repo = text(subject.and_then(|s| s.get("repository")));
    let head = format!("{}:{status}:{repo}", event.event_type());
    match subject.and_then(|s| s.get("number")) {
        Some(n @ Value::Number(_)) => format!("{head}#{}", canonical::to_canonical_unchecked(n)),
        _ => format!("{head}:{}", text(subject.and_then(|s| s.get("kind")))),
    }
}

/// The exact request body: `JSON.stringify({eventKey, type: "clawsweeper.action", message,
/// payload: {version: 1, event}})`. The outer keys keep that order (not canonical); the event is
/// its canonical line.
pub fn request_body(event: &Event) -> String {
    let record = event.record();
    let key = record.get("event_key").cloned().unwrap_or(Value::Null);
    let string = |s: &str| canonical::to_canonical_unchecked(&Value::str(s));
    format!(
        "{{\"eventKey\":{},\"type\":\"clawsweeper.action\",\"message\":{},\"payload\":{{\"version\":1,\"event\":{}}}}}",
        canonical::to_canonical_unchecked(&key),
        string(&message(event)),
        &*event.json,
    )
}

/// `machineIdentifier("<component>.crabfleet_projection", 256)` of a persisted producer.
pub fn derived_component(producer: &crate::event::Producer) -> Result<String, record::Error> {
    record::machine_identifier(&format!("{}{PRODUCER_SUFFIX}", producer.component), 256)
}

/// The `projection.failed` event for `source`, with `recorded_at` = `wall` (the wall clock at
/// failure time) and a generated `occurred_at` pinned to the source's `recorded_at` (§9): key
/// identity `{sourceEventId, destination, producer}`, the source's operation and attempt, parent
/// = the source, `phase_seq` = source + 1 (kept at `MAX_SAFE_INTEGER`), idempotency identity
/// `{sourceEventId, destination}`, the source's subject, and the fixed action, learning,
/// attributes and privacy. Nothing of the failure's cause is recorded (redacted).
pub fn failure_event(source: &Event, wall: Timestamp) -> Result<Event, record::Error> {
    let src = source.record();
    let get = |k: &str| src.get(k).cloned().unwrap_or(Value::Null);
    let persisted = source.producer();
    let component = derived_component(persisted)?;
    let producer = crate::event::Producer {
        component: component.clone(),
        ..persisted.clone()
    }
    .writer_input();
    let source_id = Value::str(source.event_id.as_str());
    let event_key = identity::event_key(
        FAILURE_TYPE,
        &Value::object([
            ("sourceEventId", source_id.clone()),
            ("destination", Value::str(DESTINATION)),
            ("producer", Value::str(&component)),
        ]),
    )?;
    let idempotency = identity::idempotency_key(&Value::object([
        ("sourceEventId", source_id.clone()),
        ("destination", Value::str(DESTINATION)),
    ]))?;
    let seq = get("phase_seq").as_safe_integer().unwrap_or(0);
    let phase_seq = if seq >= MAX_SAFE_INTEGER {
        seq
    } else {
        seq + 1
    };
    let input = Value::object([
        ("eventKey", Value::String(event_key)),
        ("operationId", get("operation_id")),
        ("attemptId", get("attempt_id")),
        ("parentEventId", source_id),
        ("phaseSeq", Value::from(phase_seq)),
        ("idempotencyKeySha256", Value::str(idempotency.as_str())),
        ("type", Value::str(FAILURE_TYPE)),
        ("producer", producer),
        ("subject", camel_subject(&get("subject"))),
        (
            "action",
            Value::object([
                ("name", Value::str("crabfleet_projection")),
                ("status", Value::str("failed")),
                ("reasonCode", Value::str("append_failed")),
                ("retryable", Value::Bool(true)),
                ("mutation", Value::Bool(false)),
            ]),
        ),
        (
            "learning",
            Value::object([
                ("category", Value::str("delivery")),
                ("signal", Value::str("retry_from_durable_ledger")),
                ("ruleId", Value::str("crabfleet_projection_failed")),
                ("confidence", Value::from(1)),
            ]),
        ),
        (
            "attributes",
            Value::object([("phase", Value::str("live_projection"))]),
        ),
        (
            "privacy",
            Value::object([
                ("classification", Value::str("internal")),
                ("redactionVersion", Value::str("v1")),
                (
                    "fieldsDropped",
                    Value::Array(vec![
                        Value::str("error_detail"),
                        Value::str("response_body"),
                        Value::str("token"),
                    ]),
                ),
            ]),
        ),
    ]);
    let recorded_at = get("recorded_at");
    Ok(event::create(
        &input,
        &wall.to_iso_millis(),
        recorded_at.as_str(),
    )?)
}

/// The persisted (snake_case) subject in the writer-input shape (camelCase keys), so that the
/// failure's subject is the source's, field for field.
fn camel_subject(subject: &Value) -> Value {
    let Value::Object(members) = subject else {
        return subject.clone();
    };
    let camel = |k: &str| {
        let mut out = String::new();
        let mut upper = false;
        for c in k.chars() {
            if c == '_' {
                upper = true;
            } else if upper {
                out.extend(c.to_uppercase());
                upper = false;
            } else {
                out.push(c);
            }
        }
        out
    };
    Value::object(members.iter().map(|(k, v)| (camel(k), v.clone())))
}

/// Writes the `projection.failed` event for `source` into the spool at `root` (under the
/// derived producer's lock; its partition marker takes the source producer's date). A retry
/// of the same failure is a replay (the existing event is kept), not a conflict. `wall` is the
/// wall clock at failure time.
pub fn record_failure(root: &Root, source: &Event, wall: Timestamp) -> Result<Event, Error> {
    let wrap = |error: record::Error| Error::Record {
        source_event: source.event_id.as_str().to_owned(),
        error,
    };
    let candidate = failure_event(source, wall).map_err(wrap)?;
    let digest = spool::producer_digest(&source.producer().to_value());
    let spool = spool::Spool::from_root(root.try_clone()?)?;
    let date = spool
        .partition_date(&digest)?
        .ok_or_else(|| Error::MissingMarker(source.event_id.as_str().to_owned()))?;
    record::write_event(root, &candidate, &date, wall)
        .map(|(e, _)| e)
        .map_err(wrap)
}

/// What live projection did for one recorded event ([`after_record`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Queued {
    /// Projection is off.
    Disabled,
    /// The configuration is invalid: the `projection.failed` event was recorded (or, when that
    /// failed, the reason, for the log).
    ConfigFailure(Result<(), String>),
    /// A request was added to the outbox.
    Request(outbox::Entry),
}

/// Live projection for `event`, once it is durable in the spool at `root`: nothing when
/// projection is off; a `projection.failed` event at once for an invalid configuration (its
/// `recorded_at` from `wall`; a failure to record it is reported, never the job's error); else a
/// request in the outbox, for [`deliver::drain`] to post.
pub fn after_record(
    root: &Root,
    event: &Event,
    verdict: &config::Verdict,
    wall: Timestamp,
) -> Result<Queued, Error> {
    after_record_reserved(root, event, verdict, wall, None)
}

/// The outbox entry to reserve for `candidate` just before it is written
/// ([`outbox::reserve`]; `None` when projection is off), so that a kill between the durable
/// event and its request (or its configuration failure) is settled by the next drain.
pub fn before_record(
    root: &Root,
    candidate: &Event,
    verdict: &config::Verdict,
    pid: u32,
) -> Result<Option<outbox::Entry>, Error> {
    let failure = match verdict {
        config::Verdict::Disabled => return Ok(None),
        config::Verdict::Invalid(_) => true,
        config::Verdict::Valid(_) => false,
    };
    outbox::reserve(root, candidate, pid, failure).map(Some)
}

/// [`after_record`] for an event whose outbox entry was reserved by [`before_record`]: the
/// request is written under that entry, or the configuration failure is recorded and the
/// entry marked failed.
pub fn after_record_reserved(
    root: &Root,
    event: &Event,
    verdict: &config::Verdict,
    wall: Timestamp,
    reserved: Option<&outbox::Entry>,
) -> Result<Queued, Error> {
    match verdict {
        config::Verdict::Disabled => Ok(Queued::Disabled),
        config::Verdict::Invalid(_) => {
            let recorded = record_failure(root, event, wall).map(drop);
            let marked = match (&recorded, reserved) {
                (Ok(()), Some(entry)) => outbox::mark_failed(root, entry),
                _ => Ok(()),
            };
            Ok(Queued::ConfigFailure(
                recorded.and(marked).map_err(|e| e.to_string()),
            ))
        }
        config::Verdict::Valid(_) => match reserved {
            Some(entry) => {
                outbox::fulfil(root, entry, event).map(|()| Queued::Request(entry.clone()))
            }
            None => outbox::enqueue(root, event).map(Queued::Request),
        },
    }
}
