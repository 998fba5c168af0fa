//! Creating and validating a record. Both rebuild the record from its semantic value through
//! the normalizers, so that a stored record is valid exactly when rebuilding it gives the same
//! bytes.

use std::collections::BTreeMap;

use crate::canonical::{self, Value};
use crate::identity::{self, Digest};
use crate::privacy;

use super::*;

/// Assembles the record from its semantic value and occurrence: the record's tree and its
/// `semantic_sha256`.
fn assemble(
    semantic: Value,
    semantic_json: &str,
    event_id: &Digest,
    event_key: &str,
    occurred_at: &str,
    source_kind: &str,
    recorded_at: String,
) -> (Value, Digest) {
    let occurrence = if source_kind == "source" {
        Value::object([
            ("occurred_at", Value::str(occurred_at)),
            ("occurred_at_source", Value::str("source")),
        ])
    } else {
        Value::object([("occurred_at_source", Value::str("generated"))])
    };
    let semantic_sha = Digest::of(format!(
        "{{\"occurrence\":{},\"semantic\":{}}}",
        canonical::to_canonical_unchecked(&occurrence),
        semantic_json
    ));
    let Value::Object(mut record) = semantic else {
        unreachable!("semantic value is an object")
    };
    record.insert("schema".into(), Value::str(SCHEMA));
    record.insert("schema_version".into(), Value::from(1));
    record.insert("event_id".into(), Value::str(event_id.as_str()));
    record.insert("event_key".into(), Value::str(event_key));
    record.insert("semantic_sha256".into(), Value::str(semantic_sha.as_str()));
    record.insert("occurred_at".into(), Value::str(occurred_at));
    record.insert("occurred_at_source".into(), Value::str(source_kind));
    record.insert("recorded_at".into(), Value::String(recorded_at));
    (Value::Object(record), semantic_sha)
}

/// The [`Event`] of an assembled record: its canonical line and the fields kept beside it; the
/// tree is consumed (its producer object moves into the event).
fn into_event(
    record: Value,
    event_id: Digest,
    parent: Option<Digest>,
    semantic_sha256: Digest,
    source_occurred_at: Option<String>,
) -> Event {
    let json = EventText::from(canonical::to_canonical_unchecked(&record));
    let Value::Object(record) = record else {
        unreachable!("a record is an object")
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
    Event {
        subject_repository: text(record.get("subject").and_then(|s| s.get("repository"))),
        event_type: text(record.get("event_type")),
        producer: std::sync::Arc::new(
            record
                .get("producer")
                .and_then(Producer::from_value)
                .expect("a validated record has a producer"),
        ),
        json,
        event_id,
        parent_event_id: parent,
        semantic_sha256,
        source_occurred_at,
    }
}

fn parent_of(semantic: &Value) -> Option<Digest> {
    semantic
        .get("parent_event_id")
        .and_then(Value::as_str)
        .and_then(Digest::parse)
}

/// Renames the camelCase keys of a writer input (`ActionEventInput`) to the stored snake_case
/// names, keeping only known fields (the reference picks fields by name).
fn snake_record(input: &Value) -> Value {
    fn pick(v: Option<&Value>, names: &[(&str, &str)]) -> Option<Value> {
        let v = v?;
        let Value::Object(m) = v else {
            return Some(v.clone());
        };
        Some(Value::Object(
            names
                .iter()
                .filter_map(|(from, to)| m.get(*from).map(|x| ((*to).to_owned(), x.clone())))
                .collect(),
        ))
    }
    let mut out = BTreeMap::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(k.to_owned(), v);
        }
    };
    put("operation_id", input.get("operationId").cloned());
    put("attempt_id", input.get("attemptId").cloned());
    put("parent_event_id", input.get("parentEventId").cloned());
    put("phase_seq", input.get("phaseSeq").cloned());
    put(
        "idempotency_key_sha256",
        input.get("idempotencyKeySha256").cloned(),
    );
    put("event_type", input.get("type").cloned());
    put(
        "producer",
        pick(
            input.get("producer"),
            &[
                ("repository", "repository"),
                ("sha", "sha"),
                ("workflow", "workflow"),
                ("job", "job"),
                ("runId", "run_id"),
                ("runAttempt", "run_attempt"),
                ("component", "component"),
            ],
        ),
    );
    put(
        "subject",
        pick(
            input.get("subject"),
            &[
                ("repository", "repository"),
                ("kind", "kind"),
                ("subjectId", "subject_id"),
                ("number", "number"),
                ("clusterId", "cluster_id"),
                ("sourceRevision", "source_revision"),
                ("recordPath", "record_path"),
            ],
        ),
    );
    put(
        "action",
        pick(
            input.get("action"),
            &[
                ("name", "name"),
                ("status", "status"),
                ("reasonCode", "reason_code"),
                ("retryable", "retryable"),
                ("mutation", "mutation"),
            ],
        ),
    );
    put(
        "learning",
        pick(
            input.get("learning"),
            &[
                ("category", "category"),
                ("signal", "signal"),
                ("ruleId", "rule_id"),
                ("confidence", "confidence"),
            ],
        ),
    );
    if let Some(Value::Array(list)) = input.get("evidence") {
        let names = [
            ("kind", "kind"),
            ("sha256", "sha256"),
            ("reportPath", "report_path"),
            ("runUrl", "run_url"),
            ("snapshotId", "snapshot_id"),
        ];
        put(
            "evidence",
            Some(Value::Array(
                list.iter().filter_map(|e| pick(Some(e), &names)).collect(),
            )),
        );
    }
    put("attributes", input.get("attributes").cloned());
    put(
        "privacy",
        pick(
            input.get("privacy"),
            &[
                ("classification", "classification"),
                ("redactionVersion", "redaction_version"),
                ("fieldsDropped", "fields_dropped"),
            ],
        ),
    );
    Value::Object(out.into())
}

/// `createActionEvent`: builds and validates a record from a writer input object with
/// the reference's camelCase names (`eventKey, operationId, attemptId, parentEventId?, phaseSeq,
/// idempotencyKeySha256, type, producer{…runId, runAttempt, component}, subject{…subjectId,
/// clusterId, sourceRevision, recordPath}, action{…reasonCode}, learning?, evidence?,
/// attributes?, privacy?, occurredAt?`). `recorded_at` must already be the writer clock in
/// `toISOString` form; `generated_occurred_at` pins a generated occurrence (projection
/// failures). Errors name the rule with source `input`. The assembled record must pass the
/// canonical limits (step 6: depth 64, 10,000 values, an estimated 1 MiB), so that no reader
/// refuses later what was written now.
pub fn create(
    input: &Value,
    recorded_at: &str,
    generated_occurred_at: Option<&str>,
) -> Result<Event, Error> {
    let ctx = Ctx { source: "input" };
    let rec = snake_record(input);
    let (semantic, semantic_json) = semantic_value(&ctx, &rec)?;
    let recorded_at =
        timestamp(recorded_at, "action event recorded_at").map_err(|e| ctx.field(e))?;
    let (occurred_at, source_kind) = match input.get("occurredAt") {
        Some(v) => (
            timestamp(v.as_str().unwrap_or(""), "action event occurredAt")
                .map_err(|e| ctx.field(e))?,
            "source",
        ),
        None => match generated_occurred_at {
            Some(g) => (
                timestamp(g, "generated action event occurredAt").map_err(|e| ctx.field(e))?,
                "generated",
            ),
            None => (recorded_at.clone(), "generated"),
        },
    };
    let subject_repo = str_of(semantic.get("subject").expect("subject"), "repository");
    let key_raw = str_of(input, "eventKey");
    let event_id = identity::event_id(subject_repo, key_raw).map_err(|e| ctx.field(e))?;
    let parent = parent_of(&semantic);
    if parent.as_ref() == Some(&event_id) {
        return Err(ctx.field(FieldError::SelfParent));
    }
    let key = identity::required_event_key(key_raw).map_err(|e| ctx.field(e))?;
    let (record, semantic_sha) = assemble(
        semantic,
        &semantic_json,
        &event_id,
        &key,
        &occurred_at,
        source_kind,
        recorded_at,
    );
    // Step 6 canonicalizes the whole record: the fields added to the semantic value can take
    // it past the limits, and every reader applies them to the record.
    canonical::check(&record).map_err(|e| ctx.field(e))?;
    let source_occurred_at = (source_kind == "source").then_some(occurred_at);
    Ok(into_event(
        record,
        event_id,
        parent,
        semantic_sha,
        source_occurred_at,
    ))
}

/// `validateActionEvent`: full read-side validation of a parsed record.
pub fn validate(value: &Value, source: &str) -> Result<Event, Error> {
    validate_text(value, source, None)
}

/// [`validate`] of `value` parsed from `text` when given, which must then also be the event's
/// canonical line. When the rebuilt line equals `text` (and is short enough that the limits
/// cannot refuse it), re-serializing `value` would only give `text` again (canonical text is a
/// fixed point of parse and serialize), so that pass runs only to tell the errors apart.
pub(super) fn validate_text(
    value: &Value,
    source: &str,
    text: Option<&str>,
) -> Result<Event, Error> {
    let ctx = Ctx { source };
    let Value::Object(_) = value else {
        return Err(Error::NotObject {
            origin: source.to_owned(),
        });
    };
    // Type gate.
    let is_str = |k: &str| matches!(value.get(k), Some(Value::String(_)));
    let gate = value.get("schema").and_then(Value::as_str) == Some(SCHEMA)
        && value.get("schema_version").and_then(Value::as_f64) == Some(1.0)
        && [
            "event_id",
            "event_key",
            "operation_id",
            "attempt_id",
            "idempotency_key_sha256",
            "semantic_sha256",
            "occurred_at_source",
        ]
        .iter()
        .all(|k| is_str(k))
        && matches!(
            value.get("parent_event_id"),
            Some(Value::Null | Value::String(_))
        )
        && matches!(value.get("phase_seq"), Some(Value::Number(_)))
        && ["producer", "subject", "action", "privacy"]
            .iter()
            .all(|k| value.get(k).is_some_and(Value::is_truthy));
    if !gate {
        return Err(Error::Schema {
            origin: source.to_owned(),
        });
    }
    let stored_event_id = str_of(value, "event_id");
    if value.get("parent_event_id").and_then(Value::as_str) == Some(stored_event_id) {
        return Err(ctx.field(FieldError::SelfParent));
    }
    let (semantic, semantic_json) = semantic_value(&ctx, value)?;
    let subject_repo = value
        .get("subject")
        .map(|s| str_of(s, "repository"))
        .unwrap_or("");
    let event_key = str_of(value, "event_key");
    let derived = identity::event_id(subject_repo, event_key).map_err(|e| ctx.field(e))?;
    if derived.as_str() != stored_event_id {
        return Err(Error::Identity {
            origin: source.to_owned(),
        });
    }
    let occurred_at = timestamp(str_of(value, "occurred_at"), "action event occurred_at")
        .map_err(|e| ctx.field(e))?;
    let source_kind = str_of(value, "occurred_at_source");
    if source_kind != "source" && source_kind != "generated" {
        return Err(ctx.field(FieldError::OccurrenceSource));
    }
    let recorded_at = privacy::js_trim(str_of(value, "recorded_at")).to_owned();
    let parent = parent_of(&semantic);
    let (record, semantic_sha) = assemble(
        semantic,
        &semantic_json,
        &derived,
        privacy::js_trim(event_key),
        &occurred_at,
        source_kind,
        recorded_at,
    );
    let source_occurred_at = (source_kind == "source").then_some(occurred_at);
    let event = into_event(record, derived, parent, semantic_sha, source_occurred_at);
    if event.semantic_sha256.as_str() != str_of(value, "semantic_sha256") {
        return Err(Error::SemanticDigest {
            origin: source.to_owned(),
        });
    }
    timestamp(str_of(value, "recorded_at"), "action event recorded_at")
        .map_err(|e| ctx.field(e))?;
    if text.is_some_and(|t| t == event.json && canonical::within_limits_by_length(t.len())) {
        return Ok(event);
    }
    // The limits decide on the whole record; past the length guard a canonical line is as
    // valid as a short one, and only a line that differs from its rebuilt record is refused.
    let input_json = canonical::to_canonical(value).map_err(|e| ctx.field(e))?;
    if event.json != input_json {
        return Err(Error::NonCanonicalFields {
            origin: source.to_owned(),
        });
    }
    if text.is_some_and(|t| t != input_json) {
        return Err(Error::NotCanonical {
            origin: source.to_owned(),
        });
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A canonical line is read whatever its length, up to the size estimate's limit (the old
    /// fallback past the length guard called every such line not canonical); one byte past the
    /// limit is refused by the size rule, at creation and at reading.
    #[test]
    fn records_up_to_the_size_limit_are_created_and_read() {
        use crate::tests::boundary::{FILLS, estimate, event_past_limit};
        for fill in FILLS {
            let event = event_past_limit(fill, 0).unwrap();
            assert_eq!(estimate(&event.record()), canonical::MAX_BYTES, "{fill:?}");
            assert!(!canonical::within_limits_by_length(event.json.len()));
            let read = Event::parse_line(&event.json, "line").map_err(|e| e.to_string());
            assert!(read.as_ref() == Ok(&event), "{fill:?}: {:?}", read.err());
            let valid = validate(&event.record(), "value").map_err(|e| e.to_string());
            assert!(valid.as_ref() == Ok(&event), "{fill:?}: {:?}", valid.err());
            // The semantic value is under the limit; the record's added fields take it past.
            let Err(err) = event_past_limit(fill, 1).map(|_| ()) else {
                panic!("{fill:?}: created one byte past the limit");
            };
            let err = err.to_string();
            assert!(
                err.starts_with("action event data exceeds canonical JSON size limit 1048576"),
                "{fill:?}: {err}"
            );
            // One more fraction digit in `recorded_at`, outside the semantic digest.
            let over = event.json.replacen(".000Z\"", ".0000Z\"", 1);
            assert_eq!(over.len(), event.json.len() + 1);
            let Err(err) = Event::parse_line(&over, "line").map(|_| ()) else {
                panic!("{fill:?}: read one byte past the limit");
            };
            let err = err.to_string();
            assert!(
                err.starts_with("action event data exceeds canonical JSON size limit 1048576"),
                "{fill:?}: {err}"
            );
        }
    }
}
