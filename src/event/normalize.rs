//! The field normalizers shared by creation and validation (the reference's
//! `actionEventSemanticValue`): every field of the record goes through one of them, in the
//! reference's order, so that the first failing rule, and its message, is the reference's.

use std::collections::{BTreeMap, BTreeSet};

use crate::canonical::{self, Value};
use crate::identity;
use crate::privacy;

use super::*;

//
// Both paths feed a snake_case record-shaped object through the same normalizers, in the
// reference's order, so that the first failing rule (and its message) is the reference's.

pub(super) struct Ctx<'a> {
    pub(super) source: &'a str,
}

impl Ctx<'_> {
    pub(super) fn field(&self, error: impl Into<FieldError>) -> Error {
        Error::Field {
            origin: self.source.to_owned(),
            error: error.into(),
        }
    }
}

pub(super) fn str_of<'v>(obj: &'v Value, key: &str) -> &'v str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

fn text(ctx: &Ctx, obj: &Value, key: &str, label: &str, max: usize) -> Result<Value, Error> {
    privacy::machine_text(str_of(obj, key), label, max)
        .map(Value::String)
        .map_err(|e| ctx.field(e))
}

/// Required machine text (at most 256 characters) stored under its own key.
fn put_text(
    ctx: &Ctx,
    out: &mut BTreeMap<String, Value>,
    obj: &Value,
    key: &str,
    label: &str,
) -> Result<(), Error> {
    out.insert(key.into(), text(ctx, obj, key, label, 256)?);
    Ok(())
}

/// Optional machine text included only when truthy (a stored `""` is therefore dropped, and the
/// final canonical comparison refuses it).
fn opt_text(
    ctx: &Ctx,
    out: &mut BTreeMap<String, Value>,
    obj: &Value,
    key: &str,
    label: &str,
) -> Result<(), Error> {
    if let Some(v) = obj.get(key).filter(|v| v.is_truthy()) {
        let s = v.as_str().ok_or_else(|| {
            ctx.field(privacy::Error::NotMachineText {
                label: label.into(),
            })
        })?;
        out.insert(
            key.into(),
            Value::String(privacy::machine_text(s, label, 256).map_err(|e| ctx.field(e))?),
        );
    }
    Ok(())
}

fn sha(ctx: &Ctx, obj: &Value, key: &str, label: &str) -> Result<Value, Error> {
    identity::required_sha256(str_of(obj, key), label)
        .map(|d| Value::String(d.as_str().to_owned()))
        .map_err(|e| ctx.field(e))
}

fn positive(ctx: &Ctx, v: Option<&Value>, label: &str) -> Result<Value, Error> {
    identity::positive_integer(v.unwrap_or(&Value::Null), label)
        .map(Value::from)
        .map_err(|e| ctx.field(e))
}

fn boolean(ctx: &Ctx, v: Option<&Value>, label: &str) -> Result<Value, Error> {
    v.and_then(Value::as_bool).map(Value::Bool).ok_or_else(|| {
        ctx.field(FieldError::NotBoolean {
            label: label.into(),
        })
    })
}

fn repository(ctx: &Ctx, obj: &Value) -> Result<String, Error> {
    identity::normalize_repository(str_of(obj, "repository")).map_err(|e| ctx.field(e))
}

fn producer(ctx: &Ctx, p: &Value, repository: String) -> Result<Value, Error> {
    let sha = text(ctx, p, "sha", "action event producer sha", 256)?;
    let workflow = text(ctx, p, "workflow", "action event producer workflow", 128)?;
    let job = text(ctx, p, "job", "action event producer job", 128)?;
    let run_id = text(ctx, p, "run_id", "action event producer run id", 256)?;
    let run_attempt = positive(
        ctx,
        p.get("run_attempt"),
        "action event producer run attempt",
    )?;
    let component = text(ctx, p, "component", "action event producer component", 256)?;
    Ok(Value::object([
        ("component", component),
        ("job", job),
        ("repository", Value::String(repository)),
        ("run_attempt", run_attempt),
        ("run_id", run_id),
        ("sha", sha),
        ("workflow", workflow),
    ]))
}

fn subject(ctx: &Ctx, s: &Value, repository: String) -> Result<Value, Error> {
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
    if !SUBJECT_KINDS.contains(&kind) {
        let shown = match s.get("kind") {
            Some(Value::String(k)) => k.clone(),
            Some(other) => other.to_string(),
            None => "undefined".to_owned(),
        };
        return Err(ctx.field(FieldError::SubjectKind(shown)));
    }
    let mut out = BTreeMap::new();
    out.insert("repository".into(), Value::String(repository));
    out.insert("kind".into(), Value::str(kind));
    if let Some(n) = s.get("number") {
        out.insert(
            "number".into(),
            positive(ctx, Some(n), "action event subject number")?,
        );
    }
    opt_text(ctx, &mut out, s, "subject_id", "action event subject id")?;
    opt_text(
        ctx,
        &mut out,
        s,
        "cluster_id",
        "action event subject cluster id",
    )?;
    opt_text(
        ctx,
        &mut out,
        s,
        "source_revision",
        "action event subject source revision",
    )?;
    if let Some(v) = s.get("record_path").filter(|v| v.is_truthy()) {
        let label = "action event subject record path";
        let p = privacy::relative_data_path(v.as_str().unwrap_or(""), label)
            .map_err(|e| ctx.field(e))?;
        out.insert("record_path".into(), Value::String(p));
    }
    Ok(Value::Object(out.into()))
}

fn action(ctx: &Ctx, a: &Value) -> Result<Value, Error> {
    let mut out = BTreeMap::new();
    put_text(ctx, &mut out, a, "name", "action event action name")?;
    put_text(ctx, &mut out, a, "status", "action event action status")?;
    opt_text(
        ctx,
        &mut out,
        a,
        "reason_code",
        "action event action reason code",
    )?;
    out.insert(
        "retryable".into(),
        boolean(ctx, a.get("retryable"), "action event action retryable")?,
    );
    out.insert(
        "mutation".into(),
        boolean(ctx, a.get("mutation"), "action event action mutation")?,
    );
    Ok(Value::Object(out.into()))
}

fn learning(ctx: &Ctx, l: &Value) -> Result<Value, Error> {
    // The reference checks the confidence before any text field.
    let confidence = match l.get("confidence") {
        None => None,
        Some(c) => match c.as_f64() {
            Some(x) if x.is_finite() && (0.0..=1.0).contains(&x) => Some(Value::Number(x)),
            _ => {
                return Err(ctx.field(FieldError::NotUnitInterval {
                    label: "action event learning confidence".into(),
                }));
            }
        },
    };
    let mut out = BTreeMap::new();
    put_text(
        ctx,
        &mut out,
        l,
        "category",
        "action event learning category",
    )?;
    put_text(ctx, &mut out, l, "signal", "action event learning signal")?;
    opt_text(ctx, &mut out, l, "rule_id", "action event learning rule id")?;
    if let Some(c) = confidence {
        out.insert("confidence".into(), c);
    }
    Ok(Value::Object(out.into()))
}

fn evidence(ctx: &Ctx, list: &[Value]) -> Result<Option<Value>, Error> {
    if list.is_empty() {
        return Ok(None);
    }
    if list.len() > 64 {
        return Err(ctx.field(FieldError::EvidenceTooMany));
    }
    let mut entries = Vec::with_capacity(list.len());
    for e in list {
        let mut out = BTreeMap::new();
        if let Some(v) = e.get("sha256") {
            let d =
                identity::required_sha256(v.as_str().unwrap_or(""), "action event evidence sha256")
                    .map_err(|e| ctx.field(e))?;
            out.insert("sha256".into(), Value::str(d.as_str()));
        }
        put_text(ctx, &mut out, e, "kind", "action event evidence kind")?;
        if let Some(v) = e.get("report_path") {
            let p = privacy::relative_data_path(
                v.as_str().unwrap_or(""),
                "action event evidence report path",
            )
            .map_err(|e| ctx.field(e))?;
            out.insert("report_path".into(), Value::String(p));
        }
        if let Some(v) = e.get("run_url") {
            let u =
                privacy::public_run_url(v.as_str().unwrap_or(""), "action event evidence run URL")
                    .map_err(|e| ctx.field(e))?;
            out.insert("run_url".into(), Value::String(u));
        }
        if let Some(v) = e.get("snapshot_id") {
            let s = privacy::machine_text(
                v.as_str().unwrap_or(""),
                "action event evidence snapshot id",
                256,
            )
            .map_err(|e| ctx.field(e))?;
            out.insert("snapshot_id".into(), Value::String(s));
        }
        let entry = Value::Object(out.into());
        let key = canonical::to_canonical(&entry).map_err(|e| ctx.field(e))?;
        entries.push((key, entry));
    }
    // Sorted by canonical bytes; duplicates are kept (a stable sort keeps input order).
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some(Value::Array(
        entries.into_iter().map(|(_, v)| v).collect(),
    )))
}

fn attribute_scalar(ctx: &Ctx, key: &str, kind: AttributeKind, v: &Value) -> Result<Value, Error> {
    if !matches!(v, Value::String(_) | Value::Number(_) | Value::Bool(_)) {
        return Err(ctx.field(FieldError::AttributeNotScalar(key.to_owned())));
    }
    let label = format!("action event attribute {key}");
    match kind {
        AttributeKind::PositiveInteger => positive(ctx, Some(v), &label),
        AttributeKind::NonNegativeInteger => match v.as_safe_integer() {
            Some(n) if n >= 0 => Ok(v.clone()),
            _ => Err(ctx.field(FieldError::NotNonNegativeInteger { label })),
        },
        AttributeKind::Boolean => boolean(ctx, Some(v), &label),
        AttributeKind::UnitInterval => match v.as_f64() {
            Some(x) if x.is_finite() && (0.0..=1.0).contains(&x) => Ok(v.clone()),
            _ => Err(ctx.field(FieldError::NotUnitInterval { label })),
        },
        AttributeKind::MachineText => {
            let s = v.as_str().ok_or_else(|| {
                ctx.field(privacy::Error::NotMachineText {
                    label: label.clone(),
                })
            })?;
            privacy::machine_text(s, &label, 256)
                .map(Value::String)
                .map_err(|e| ctx.field(e))
        }
    }
}

fn attributes(ctx: &Ctx, attrs: &BTreeMap<String, Value>) -> Result<Value, Error> {
    let mut out = BTreeMap::new();
    for (raw_key, raw) in attrs {
        let key = privacy::machine_text(raw_key, "action event attribute key", 256)
            .map_err(|e| ctx.field(e))?;
        let kind = attribute_kind(&key)
            .ok_or_else(|| ctx.field(FieldError::AttributeNotAllowlisted(key.clone())))?;
        let values = match raw {
            Value::Array(items) => items.as_slice(),
            single => std::slice::from_ref(single),
        };
        if values.len() > 64 {
            return Err(ctx.field(FieldError::AttributeTooMany(key)));
        }
        let normalized = values
            .iter()
            .map(|v| attribute_scalar(ctx, &key, kind, v))
            .collect::<Result<Vec<_>, _>>()?;
        let value = match raw {
            Value::Array(_) => Value::Array(normalized),
            _ => normalized.into_iter().next().expect("one value"),
        };
        out.insert(key, value);
    }
    Ok(Value::Object(out.into()))
}

fn privacy_block(ctx: &Ctx, p: Option<&Value>) -> Result<Value, Error> {
    let Some(p) = p.filter(|p| !matches!(p, Value::Null)) else {
        // `privacy ?? {internal, v1, []}`.
        return Ok(Value::object([
            ("classification", Value::str("internal")),
            ("fields_dropped", Value::Array(Vec::new())),
            ("redaction_version", Value::str("v1")),
        ]));
    };
    let class = match p.get("classification") {
        Some(Value::String(c)) => c.clone(),
        Some(other) => other.to_string(),
        None => "undefined".to_owned(),
    };
    if class != "public" && class != "internal" {
        return Err(ctx.field(FieldError::Classification(class)));
    }
    let dropped = p
        .get("fields_dropped")
        .and_then(Value::as_array)
        .unwrap_or(&[]);
    if dropped.len() > 64 {
        return Err(ctx.field(FieldError::FieldsDroppedTooMany));
    }
    let redaction = text(
        ctx,
        p,
        "redaction_version",
        "action event privacy redaction version",
        256,
    )?;
    let mut set = BTreeSet::new();
    for d in dropped {
        let s = privacy::machine_text(d.as_str().unwrap_or(""), "field", 256)
            .map_err(|e| ctx.field(e))?;
        set.insert(s);
    }
    Ok(Value::object([
        ("classification", Value::String(class)),
        (
            "fields_dropped",
            Value::Array(set.into_iter().map(Value::String).collect()),
        ),
        ("redaction_version", redaction),
    ]))
}

/// The semantic value of a snake_case record-shaped object, normalized in the
/// reference's order. Returns it with its canonical JSON.
pub(super) fn semantic_value(ctx: &Ctx, rec: &Value) -> Result<(Value, String), Error> {
    let empty = Value::Object(Default::default());
    let producer_v = rec.get("producer").unwrap_or(&empty);
    let subject_v = rec.get("subject").unwrap_or(&empty);
    let producer_repo = repository(ctx, producer_v)?;
    let subject_repo = repository(ctx, subject_v)?;
    let mut sem = BTreeMap::new();
    sem.insert(
        "operation_id".to_owned(),
        sha(ctx, rec, "operation_id", "action event operation id")?,
    );
    sem.insert(
        "attempt_id".to_owned(),
        sha(ctx, rec, "attempt_id", "action event attempt id")?,
    );
    let parent = match rec.get("parent_event_id") {
        None | Some(Value::Null) => Value::Null,
        Some(p) => sha(
            ctx,
            &Value::object([("p", p.clone())]),
            "p",
            "action event parent id",
        )?,
    };
    sem.insert("parent_event_id".to_owned(), parent);
    sem.insert(
        "phase_seq".to_owned(),
        positive(ctx, rec.get("phase_seq"), "action event phase sequence")?,
    );
    sem.insert(
        "idempotency_key_sha256".to_owned(),
        sha(
            ctx,
            rec,
            "idempotency_key_sha256",
            "action event idempotency key",
        )?,
    );
    put_text(ctx, &mut sem, rec, "event_type", "action event type")?;
    sem.insert(
        "producer".to_owned(),
        producer(ctx, producer_v, producer_repo)?,
    );
    sem.insert("subject".to_owned(), subject(ctx, subject_v, subject_repo)?);
    sem.insert(
        "action".to_owned(),
        action(ctx, rec.get("action").unwrap_or(&empty))?,
    );
    if let Some(l) = rec.get("learning").filter(|l| l.is_truthy()) {
        sem.insert("learning".to_owned(), learning(ctx, l)?);
    }
    if let Some(v) = evidence(
        ctx,
        rec.get("evidence").and_then(Value::as_array).unwrap_or(&[]),
    )? {
        sem.insert("evidence".to_owned(), v);
    }
    if let Some(Value::Object(attrs)) = rec.get("attributes") {
        sem.insert("attributes".to_owned(), attributes(ctx, attrs)?);
    }
    sem.insert(
        "privacy".to_owned(),
        privacy_block(ctx, rec.get("privacy"))?,
    );
    let semantic = Value::Object(sem.into());
    let json = canonical::to_canonical(&semantic).map_err(|e| ctx.field(e))?;
    Ok((semantic, json))
}

/// `requiredTimestamp`: trimmed; `YYYY-MM-DDTHH:MM:SS[.f+](Z|±HH:MM)`, year 0001–9999,
/// a real Gregorian date, hour ≤ 23, no leap second, offset hour ≤ 23.
pub fn timestamp(raw: &str, label: &str) -> Result<String, FieldError> {
    let s = privacy::js_trim(raw);
    if crate::time::is_timestamp(s) {
        Ok(s.to_owned())
    } else {
        Err(FieldError::NotTimestamp {
            label: label.to_owned(),
        })
    }
}

/// `Date.prototype.toISOString` of epoch milliseconds ([`Timestamp::to_iso_millis`]): the
/// writer's `recorded_at`.
pub fn iso_millis(epoch_ms: i64) -> String {
    Timestamp::from_millis(epoch_ms).to_iso_millis()
}

#[cfg(test)]
mod tests {
    use std::cmp::Ordering;

    use super::*;

    #[test]
    fn timestamps() {
        for ok in [
            "2026-01-15T12:34:56.789Z",
            "2024-02-29T00:00:00Z",
            "2026-01-15T12:34:56+02:00",
            "0001-01-01T00:00:00.1234567Z",
        ] {
            assert!(timestamp(ok, "t").is_ok(), "{ok}");
        }
        for bad in [
            "2023-02-29T00:00:00Z",
            "2026-01-15T24:00:00Z",
            "2026-01-15T12:34:60Z",
            "2026-01-15t12:34:56Z",
            "2026-01-15T12:34:56.Z",
            "2026-01-15T12:34:56+24:00",
            "0000-01-01T00:00:00Z",
            "2026-01-15T12:34:56",
        ] {
            assert!(timestamp(bad, "t").is_err(), "{bad}");
        }
        assert_eq!(
            compare_timestamps("2026-01-15T12:00:00.5Z", "2026-01-15T14:00:00.50+02:00"),
            Ordering::Equal
        );
        assert_eq!(
            compare_timestamps("2026-01-15T12:00:00.05Z", "2026-01-15T12:00:00.5Z"),
            Ordering::Less
        );
        assert_eq!(
            compare_timestamps("2026-01-15T12:00:01Z", "2026-01-15T12:00:00.999Z"),
            Ordering::Greater
        );
    }
}
