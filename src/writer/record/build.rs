//! Building an event without writing it: the phase API's input as the generic one, the event
//! a generic input describes ([`build_action_event`]), and the strict pass over it
//! ([`check_privacy`]).

use std::collections::BTreeMap;

use crate::canonical::Value;
use crate::event::{self, Event};
use crate::identity;
use crate::privacy::{self, Profile};
use crate::time::Timestamp;

use super::producer::{ProducerPart, ResolvedProducer, resolve_producer};
use super::vocabulary::{PHASE_TYPES, REASON_CODES, STATUSES};
use super::{Environment, Error};

/// The strict pass of `profile` over an event built with `producer` ([`build_action_event`]),
/// after every check of the reference passed:
///
/// 1. every string and key of the record against [`privacy::strict::RULES`];
/// 2. each producer part (the workflow, the component, the step, the invocation) on its own,
///    as given and as a machine identifier: the strict table, then the reference's
///    confidential scan ([`privacy::strict::PRODUCER_PART_RULE`]). Joining the parts into
///    `<component>.<step>.<invocation>` can hide a shape from the scan of the composed text
///    (`localhost` becomes `localhost.run-review.default`, `0::` followed by `.run-review`),
///    and cutting a long part to a prefix plus hash can hide a token that is still partly
///    stored.
///
/// [`Error::StrictPrivacy`] names the field path (or the input the part comes from), the family
/// and the rule, a strict-only rule id; [`Profile::Reference`] accepts everything.
pub fn check_privacy(
    event: &Event,
    producer: &ResolvedProducer,
    profile: Profile,
) -> Result<(), Error> {
    if profile == Profile::Reference {
        return Ok(());
    }
    profile
        .check_line(&event.json)
        .map_err(Error::StrictPrivacy)?;
    for ProducerPart {
        name,
        source,
        identifier,
    } in &producer.parts
    {
        let path = format!("producer part {name}");
        // The source too: a long value is cut to a prefix plus a hash, and a cut token is
        // still a leaked one.
        for text in [source, identifier] {
            profile
                .check_text(text, &path)
                .map_err(Error::StrictPrivacy)?;
        }
        if privacy::contains_confidential_identifier(identifier) {
            return Err(Error::StrictPrivacy(privacy::strict::Finding::of(
                path,
                &privacy::strict::PRODUCER_PART_RULE,
            )));
        }
    }
    Ok(())
}

fn string_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "undefined".to_owned(),
    }
}

/// The generic-API input a phase-API input stands for (vocabularies checked first).
pub fn phase_action_input(input: &Value) -> Result<Value, Error> {
    let phase = string_of(input.get("phase"));
    let status = string_of(input.get("status"));
    let reason = input.get("reasonCode").map(|r| string_of(Some(r)));
    if !PHASE_TYPES.contains(&phase.as_str()) {
        return Err(Error::UnknownPhase(phase));
    }
    if !STATUSES.contains(&status.as_str()) {
        return Err(Error::UnknownStatus(status));
    }
    if let Some(r) = &reason
        && !REASON_CODES.contains(&r.as_str())
    {
        return Err(Error::UnknownReason(r.clone()));
    }
    let reason = reason.filter(|r| !r.is_empty());
    let Some(identity) = input.get("identity") else {
        return Err(Error::MissingIdentity("$.identity.identity"));
    };
    let mut key_identity = BTreeMap::from([
        ("phase".to_owned(), Value::str(&phase)),
        ("status".to_owned(), Value::str(&status)),
        ("identity".to_owned(), identity.clone()),
    ]);
    let mut action = BTreeMap::from([
        ("name".to_owned(), Value::str(&phase)),
        ("status".to_owned(), Value::str(&status)),
    ]);
    if let Some(r) = &reason {
        key_identity.insert("reasonCode".into(), Value::str(r));
        action.insert("reasonCode".into(), Value::str(r));
    }
    for k in ["retryable", "mutation"] {
        if let Some(v) = input.get(k) {
            action.insert(k.into(), v.clone());
        }
    }
    let mut generic: BTreeMap<String, Value> = BTreeMap::new();
    generic.insert("scope".into(), Value::str(&phase));
    generic.insert("type".into(), Value::str(&phase));
    generic.insert("identity".into(), Value::Object(key_identity.into()));
    generic.insert("action".into(), Value::Object(action.into()));
    if let Some(op) = input.get("operation").filter(|v| v.is_truthy()) {
        generic.insert("operation".into(), op.clone());
    }
    for k in [
        "operationIdentity",
        "attemptIdentity",
        "parentEventId",
        "phaseSeq",
        "idempotencyIdentity",
        "component",
        "subject",
        "occurredAt",
    ] {
        if let Some(v) = input.get(k) {
            generic.insert(k.into(), v.clone());
        }
    }
    for k in ["learning", "evidence", "attributes", "privacy"] {
        if let Some(v) = input.get(k).filter(|v| v.is_truthy()) {
            generic.insert(k.into(), v.clone());
        }
    }
    Ok(Value::Object(generic.into()))
}

/// The event a generic-API input describes, without writing it (derivations in the module
/// docs). `recorded_at` is `now` in `toISOString` form.
pub fn build_action_event(
    input: &Value,
    env: &Environment,
    now: Timestamp,
) -> Result<Event, Error> {
    build(input, env, now).map(|(event, _)| event)
}

/// [`build_action_event`], with the producer it resolved.
pub(super) fn build(
    input: &Value,
    env: &Environment,
    now: Timestamp,
) -> Result<(Event, ResolvedProducer), Error> {
    let text_field = |k: &'static str| -> Result<&str, Error> {
        input
            .get(k)
            .and_then(Value::as_str)
            .ok_or(Error::InputShape {
                field: k,
                what: "a string",
            })
    };
    let action = input.get("action").ok_or(Error::InputShape {
        field: "action",
        what: "an object",
    })?;
    if action.get("mutation").is_some_and(Value::is_truthy)
        && input.get("idempotencyIdentity").is_none()
    {
        return Err(Error::MutationWithoutIdempotency);
    }
    let resolved = resolve_producer(text_field("component")?, env)?;
    let producer = resolved.producer.writer_input();
    let scope = text_field("scope")?;
    let operation = match input.get("operation") {
        Some(v) if !matches!(v, Value::Null) => v.as_str().ok_or(Error::InputShape {
            field: "operation",
            what: "a string",
        })?,
        _ => scope.split('.').next().unwrap_or(scope),
    };
    let subject = input.get("subject").ok_or(Error::InputShape {
        field: "subject",
        what: "an object",
    })?;
    let subject_repo = subject
        .get("repository")
        .and_then(Value::as_str)
        .unwrap_or("");
    let present = |k: &str| input.get(k).filter(|v| !matches!(v, Value::Null));
    let operation_id = identity::operation_id(
        subject_repo,
        operation,
        present("operationIdentity").unwrap_or(subject),
    )?;
    let default_attempt = Value::object([
        (
            "repository",
            producer.get("repository").cloned().unwrap_or(Value::Null),
        ),
        (
            "workflow",
            producer.get("workflow").cloned().unwrap_or(Value::Null),
        ),
        (
            "runId",
            producer.get("runId").cloned().unwrap_or(Value::Null),
        ),
        (
            "runAttempt",
            producer.get("runAttempt").cloned().unwrap_or(Value::Null),
        ),
    ]);
    let attempt_id = identity::attempt_id(
        operation_id.as_str(),
        present("attemptIdentity").unwrap_or(&default_attempt),
    )?;
    let phase_seq = present("phaseSeq").cloned().unwrap_or(Value::from(1));
    let Some(user_identity) = input.get("identity") else {
        return Err(Error::MissingIdentity("$.identity"));
    };
    let event_key = identity::event_key(
        scope,
        &Value::object([
            ("attemptId", Value::str(attempt_id.as_str())),
            ("phaseSeq", phase_seq.clone()),
            (
                "producer",
                Value::object([
                    ("job", producer.get("job").cloned().unwrap_or(Value::Null)),
                    (
                        "component",
                        producer.get("component").cloned().unwrap_or(Value::Null),
                    ),
                ]),
            ),
            ("identity", user_identity.clone()),
        ]),
    )?;
    let default_idempotency = Value::object([
        ("operationId", Value::str(operation_id.as_str())),
        ("scope", Value::str(scope)),
        ("identity", user_identity.clone()),
    ]);
    let idempotency =
        identity::idempotency_key(present("idempotencyIdentity").unwrap_or(&default_idempotency))?;
    let mut writer = BTreeMap::from([
        ("eventKey".to_owned(), Value::String(event_key)),
        ("operationId".to_owned(), Value::str(operation_id.as_str())),
        ("attemptId".to_owned(), Value::str(attempt_id.as_str())),
        (
            "parentEventId".to_owned(),
            present("parentEventId").cloned().unwrap_or(Value::Null),
        ),
        ("phaseSeq".to_owned(), phase_seq),
        (
            "idempotencyKeySha256".to_owned(),
            Value::str(idempotency.as_str()),
        ),
        (
            "type".to_owned(),
            input.get("type").cloned().unwrap_or(Value::Null),
        ),
        ("producer".to_owned(), producer),
        ("subject".to_owned(), subject.clone()),
        ("action".to_owned(), action.clone()),
    ]);
    for k in ["learning", "evidence", "attributes", "privacy"] {
        if let Some(v) = input.get(k).filter(|v| v.is_truthy()) {
            writer.insert(k.into(), v.clone());
        }
    }
    if let Some(v) = input.get("occurredAt") {
        writer.insert("occurredAt".into(), v.clone());
    }
    let event = event::create(&Value::Object(writer.into()), &now.to_iso_millis(), None)?;
    Ok((event, resolved))
}
