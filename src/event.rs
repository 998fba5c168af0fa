//! The event record (ledger-core §1): read-side validation, semantic digest, replay JSON, timestamp
//! rules and the canonical causal order of a set of events.
//!
//! Validation follows the reference's order (§1.14): type gate, self-parent, semantic rebuild
//! through the field normalizers, event id, occurrence, semantic digest, `recorded_at`, and finally
//! byte equality of the rebuilt record with the input (which refuses unknown keys, non-canonical
//! presence of optional fields, unsorted arrays and un-normalized text in one check).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use crate::canonical::{self, Value};
use crate::identity::{self, Digest};
use crate::privacy;
pub use crate::time::{Timestamp, compare_timestamps, timestamp_epoch_seconds};

/// `ACTION_EVENT_SCHEMA`.
pub const SCHEMA: &str = "clawsweeper.state-ledger-event.v1";

/// Subject kinds accepted by the validator (§1.10, enforced).
pub const SUBJECT_KINDS: &[&str] = &[
    "issue",
    "pull_request",
    "cluster",
    "command",
    "workflow",
    "repository",
    "notification",
    "commit",
    "queue_item",
    "deployment",
    "publication",
];

/// The value contract of an allowlisted attribute key (§1.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttributeKind {
    PositiveInteger,
    NonNegativeInteger,
    Boolean,
    UnitInterval,
    MachineText,
}

/// `ACTION_EVENT_ATTRIBUTE_KEYS` with their contracts (§1.8), sorted by key.
pub const ATTRIBUTE_KEYS: &[(&str, AttributeKind)] = {
    use AttributeKind::*;
    &[
        ("action_count", NonNegativeInteger),
        ("attempt", PositiveInteger),
        ("batch_index", NonNegativeInteger),
        ("batch_size", PositiveInteger),
        ("cache_mode", MachineText),
        ("cached", Boolean),
        ("candidate_count", NonNegativeInteger),
        ("closed_count", NonNegativeInteger),
        ("comment_count", NonNegativeInteger),
        ("completion_reason", MachineText),
        ("cost_usd_micros", NonNegativeInteger),
        ("coverage_complete", Boolean),
        ("coverage_ratio", UnitInterval),
        ("delivery_kind", MachineText),
        ("dispatch_kind", MachineText),
        ("duration_ms", NonNegativeInteger),
        ("failed_count", NonNegativeInteger),
        ("final_attempt", Boolean),
        ("finding_count", NonNegativeInteger),
        ("input_tokens", NonNegativeInteger),
        ("item_count", NonNegativeInteger),
        ("lease_duration_ms", NonNegativeInteger),
        ("log_count", NonNegativeInteger),
        ("log_kind", MachineText),
        ("model", MachineText),
        ("output_tokens", NonNegativeInteger),
        ("partial", Boolean),
        ("phase", MachineText),
        ("processed_count", NonNegativeInteger),
        ("publication_kind", MachineText),
        ("published_count", NonNegativeInteger),
        ("query_version", MachineText),
        ("queue_depth", NonNegativeInteger),
        ("queue_kind", MachineText),
        ("reasoning_effort", MachineText),
        ("result_count", NonNegativeInteger),
        ("retry_count", NonNegativeInteger),
        ("retry_delay_ms", NonNegativeInteger),
        ("review_mode", MachineText),
        ("shard_count", PositiveInteger),
        ("shard_index", NonNegativeInteger),
        ("skipped_count", NonNegativeInteger),
        ("state", MachineText),
        ("status_kind", MachineText),
        ("validation_count", NonNegativeInteger),
        ("validation_kind", MachineText),
        ("wait_duration_ms", NonNegativeInteger),
        ("warning_count", NonNegativeInteger),
        ("work_kind", MachineText),
        ("workflow_phase", MachineText),
    ]
};

/// The contract of an attribute key, `None` when the key is not allowlisted.
pub fn attribute_kind(key: &str) -> Option<AttributeKind> {
    ATTRIBUTE_KEYS
        .binary_search_by(|(k, _)| (*k).cmp(key))
        .ok()
        .map(|i| ATTRIBUTE_KEYS[i].1)
}

/// A field rule that failed; texts are the reference's (ledger-core §7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error(transparent)]
    Text(#[from] privacy::Error),
    #[error(transparent)]
    Identity(#[from] identity::Error),
    #[error(transparent)]
    Canonical(#[from] canonical::Error),
    #[error("{label} must be a boolean")]
    NotBoolean { label: String },
    #[error("{label} must be a non-negative integer")]
    NotNonNegativeInteger { label: String },
    #[error("{label} must be between 0 and 1")]
    NotUnitInterval { label: String },
    #[error("{label} must be an ISO date-time timestamp")]
    NotTimestamp { label: String },
    #[error("action event attribute {0} must be a scalar")]
    AttributeNotScalar(String),
    #[error("action event attribute is not allowlisted: {0}")]
    AttributeNotAllowlisted(String),
    #[error("action event attribute {0} exceeds 64 values")]
    AttributeTooMany(String),
    #[error("action event evidence exceeds 64 entries")]
    EvidenceTooMany,
    #[error("action event privacy fieldsDropped exceeds 64 entries")]
    FieldsDroppedTooMany,
    #[error("invalid action event privacy classification: {0}")]
    Classification(String),
    #[error("invalid action event subject kind: {0}")]
    SubjectKind(String),
    #[error("action event occurred_at_source must be source or generated")]
    OccurrenceSource,
    #[error("action event cannot reference itself as its parent")]
    SelfParent,
}

/// Why an event record was refused. `source` names the file (and line) it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid action event object: {origin}")]
    NotObject { origin: String },
    #[error("invalid action event schema: {origin}")]
    Schema { origin: String },
    #[error("{error}: {origin}")]
    Field { origin: String, error: FieldError },
    #[error("invalid action event identity: {origin}")]
    Identity { origin: String },
    #[error("invalid action event semantic digest: {origin}")]
    SemanticDigest { origin: String },
    #[error("action event contains unknown or non-canonical fields: {origin}")]
    NonCanonicalFields { origin: String },
    #[error("action event JSON contains a duplicate object key: {origin}")]
    DuplicateKey { origin: String },
    #[error("action event JSON exceeds canonical complexity limits: {origin}")]
    Complexity { origin: String },
    #[error("invalid action event JSON: {origin}")]
    Json { origin: String },
    #[error("action event JSON is not canonical: {origin}")]
    NotCanonical { origin: String },
    #[error("action event shard contains duplicate event: {0}")]
    DuplicateEvent(Digest),
    #[error("action event shard contains a causal cycle")]
    Cycle,
}

/// A validated event: the canonical record plus the fields that ordering, identity and binding
/// need. Construct with [`Event::parse_line`] or [`validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The canonical record.
    pub value: Value,
    /// Its canonical JSON (no newline): the shard line and spool file body.
    pub json: String,
    pub event_id: Digest,
    pub parent_event_id: Option<Digest>,
    pub semantic_sha256: Digest,
    /// `Some(occurred_at)` when `occurred_at_source == "source"`.
    pub source_occurred_at: Option<String>,
}

impl Event {
    /// Canonical-parse one line (ledger-core §2.6): strict scan, validation, byte equality.
    pub fn parse_line(text: &str, source: &str) -> Result<Event, Error> {
        let value = canonical::parse(text).map_err(|e| match e {
            canonical::Error::DuplicateKey { .. } => Error::DuplicateKey {
                origin: source.to_owned(),
            },
            canonical::Error::ComplexityLimit => Error::Complexity {
                origin: source.to_owned(),
            },
            _ => Error::Json {
                origin: source.to_owned(),
            },
        })?;
        validate_text(&value, source, Some(text))
    }

    /// [`Event::parse_line`] over many `(line, source)` pairs, results in input order. Lines are
    /// independent, so large inputs are split across the machine's cores (rayon, which also
    /// nests inside a caller that is itself spread across shards); small ones stay on one
    /// thread.
    pub fn parse_lines<'a, I>(lines: I) -> Vec<Result<Event, Error>>
    where
        I: IntoIterator<Item = (&'a str, String)>,
    {
        use rayon::prelude::*;
        let items: Vec<(&str, String)> = lines.into_iter().collect();
        // Below 64 lines a split costs more than it saves (~60 µs per event).
        items
            .par_iter()
            .with_min_len(64)
            .map(|(line, source)| Event::parse_line(line, source))
            .collect()
    }

    fn get_str(&self, path: &[&str]) -> &str {
        let mut v = &self.value;
        for k in path {
            match v.get(k) {
                Some(x) => v = x,
                None => return "",
            }
        }
        v.as_str().unwrap_or("")
    }

    /// `subject.repository` (normalized).
    pub fn subject_repository(&self) -> &str {
        self.get_str(&["subject", "repository"])
    }

    /// `event_type`.
    pub fn event_type(&self) -> &str {
        self.get_str(&["event_type"])
    }

    /// The persisted producer object (snake_case keys).
    pub fn producer(&self) -> &Value {
        self.value.get("producer").unwrap_or(&Value::Null)
    }

    /// The shard identity this event belongs to on `partition_date` (runtime §2.3).
    pub fn shard_identity(&self, partition_date: &str) -> identity::ShardIdentity {
        let p = |k| self.get_str(&["producer", k]).to_owned();
        identity::ShardIdentity {
            repository: p("repository"),
            sha: p("sha"),
            producer: p("component"),
            workflow: p("workflow"),
            job: p("job"),
            run_id: p("run_id"),
            run_attempt: self
                .producer()
                .get("run_attempt")
                .and_then(Value::as_safe_integer)
                .unwrap_or(0),
            partition_date: partition_date.to_owned(),
        }
    }

    /// `actionEventReplayJson` (§1.12): the record without `recorded_at`, and without
    /// `occurred_at` for generated occurrences.
    pub fn replay_json(&self) -> String {
        let mut out = String::with_capacity(self.json.len());
        self.write_replay_json(&mut out);
        out
    }

    /// Appends [`Event::replay_json`] to `out`.
    fn write_replay_json(&self, out: &mut String) {
        let skip: &[&str] = if self.source_occurred_at.is_none() {
            &["recorded_at", "occurred_at"]
        } else {
            &["recorded_at"]
        };
        canonical::write_canonical_without(out, &self.value, skip);
    }
}

/// Replay digest of a list (runtime §1.1): sha256 of the replay JSON lines, each ending in `\n`.
pub fn replay_digest<'a>(events: impl IntoIterator<Item = &'a Event>) -> Digest {
    let mut text = String::new();
    for e in events {
        e.write_replay_json(&mut text);
        text.push('\n');
    }
    Digest::of(text)
}

// ---------------------------------------------------------------------------------------------
// Normalization shared by creation and validation (`actionEventSemanticValue`, ledger-core §1.11)
//
// Both paths feed a snake_case record-shaped object through the same normalizers, in the
// reference's order, so that the first failing rule (and its message) is the reference's.

struct Ctx<'a> {
    source: &'a str,
}

impl Ctx<'_> {
    fn field(&self, error: impl Into<FieldError>) -> Error {
        Error::Field {
            origin: self.source.to_owned(),
            error: error.into(),
        }
    }
}

fn str_of<'v>(obj: &'v Value, key: &str) -> &'v str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

fn text(ctx: &Ctx, obj: &Value, key: &str, label: &str, max: usize) -> Result<Value, Error> {
    privacy::machine_text(str_of(obj, key), label, max)
        .map(Value::String)
        .map_err(|e| ctx.field(e))
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
    Ok(Value::Object(out))
}

fn action(ctx: &Ctx, a: &Value) -> Result<Value, Error> {
    let mut out = BTreeMap::new();
    out.insert(
        "name".into(),
        text(ctx, a, "name", "action event action name", 256)?,
    );
    out.insert(
        "status".into(),
        text(ctx, a, "status", "action event action status", 256)?,
    );
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
    Ok(Value::Object(out))
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
    out.insert(
        "category".into(),
        text(ctx, l, "category", "action event learning category", 256)?,
    );
    out.insert(
        "signal".into(),
        text(ctx, l, "signal", "action event learning signal", 256)?,
    );
    opt_text(ctx, &mut out, l, "rule_id", "action event learning rule id")?;
    if let Some(c) = confidence {
        out.insert("confidence".into(), c);
    }
    Ok(Value::Object(out))
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
        out.insert(
            "kind".into(),
            text(ctx, e, "kind", "action event evidence kind", 256)?,
        );
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
        let entry = Value::Object(out);
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
    Ok(Value::Object(out))
}

fn privacy_block(ctx: &Ctx, p: Option<&Value>) -> Result<Value, Error> {
    let Some(p) = p.filter(|p| !matches!(p, Value::Null)) else {
        // `privacy ?? {internal, v1, []}` (ledger-core §1.9).
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

/// The semantic value of a snake_case record-shaped object (§1.11), normalized in the
/// reference's order. Returns it with its canonical JSON.
fn semantic_value(ctx: &Ctx, rec: &Value) -> Result<(Value, String), Error> {
    let empty = Value::Object(BTreeMap::new());
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
    sem.insert(
        "event_type".to_owned(),
        text(ctx, rec, "event_type", "action event type", 256)?,
    );
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
    let semantic = Value::Object(sem);
    let json = canonical::to_canonical(&semantic).map_err(|e| ctx.field(e))?;
    Ok((semantic, json))
}

/// `requiredTimestamp` (§4.3): trimmed; `YYYY-MM-DDTHH:MM:SS[.f+](Z|±HH:MM)`, year 0001–9999,
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

/// Assembles the record from its semantic value and occurrence (§1.13 steps 5–6).
#[allow(clippy::too_many_arguments)] // one call site per path; a struct would only rename them
fn assemble(
    semantic: Value,
    semantic_json: &str,
    event_id: Digest,
    event_key: &str,
    occurred_at: String,
    source_kind: &str,
    recorded_at: String,
    parent: Option<Digest>,
) -> Event {
    let occurrence = if source_kind == "source" {
        Value::object([
            ("occurred_at", Value::str(&occurred_at)),
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
    record.insert("occurred_at".into(), Value::str(&occurred_at));
    record.insert("occurred_at_source".into(), Value::str(source_kind));
    record.insert("recorded_at".into(), Value::String(recorded_at));
    let record = Value::Object(record);
    Event {
        json: canonical::to_canonical_unchecked(&record),
        value: record,
        event_id,
        parent_event_id: parent,
        semantic_sha256: semantic_sha,
        source_occurred_at: (source_kind == "source").then_some(occurred_at),
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
    Value::Object(out)
}

/// `createActionEvent` (§1.13): builds and validates a record from a writer input object with
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
    let event = assemble(
        semantic,
        &semantic_json,
        event_id,
        &key,
        occurred_at,
        source_kind,
        recorded_at,
        parent,
    );
    // Step 6 canonicalizes the whole record: the fields added to the semantic value can take
    // it past the limits, and every reader applies them to the record.
    canonical::check(&event.value).map_err(|e| ctx.field(e))?;
    Ok(event)
}

/// `validateActionEvent` (§1.14): full read-side validation of a parsed record.
pub fn validate(value: &Value, source: &str) -> Result<Event, Error> {
    validate_text(value, source, None)
}

/// [`validate`] of `value` parsed from `text` when given, which must then also be the event's
/// canonical line. When the rebuilt line equals `text` (and is short enough that the limits
/// cannot refuse it), re-serializing `value` would only give `text` again (canonical text is a
/// fixed point of parse and serialize), so that pass runs only to tell the errors apart.
fn validate_text(value: &Value, source: &str, text: Option<&str>) -> Result<Event, Error> {
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
    let event = assemble(
        semantic,
        &semantic_json,
        derived,
        privacy::js_trim(event_key),
        occurred_at,
        source_kind,
        recorded_at,
        parent,
    );
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

// ---------------------------------------------------------------------------------------------
// Canonical causal order (§6.2)

/// The tie-break comparator: source-timed events first by instant then id; generated by id.
pub fn compare_events(a: &Event, b: &Event) -> Ordering {
    match (&a.source_occurred_at, &b.source_occurred_at) {
        (Some(x), Some(y)) => compare_timestamps(x, y).then_with(|| a.event_id.cmp(&b.event_id)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.event_id.cmp(&b.event_id),
    }
}

struct Ready<'a>(&'a Event, usize);
impl PartialEq for Ready<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ready<'_> {}
impl PartialOrd for Ready<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ready<'_> {
    // BinaryHeap is a max-heap; reverse for a min-queue.
    fn cmp(&self, other: &Self) -> Ordering {
        compare_events(other.0, self.0)
    }
}

/// `sortActionEventsCausally`: Kahn's algorithm over parent edges inside the set, with the ready
/// set ordered by [`compare_events`]. Returns indices into `events` in canonical order.
pub fn causal_order(events: &[Event]) -> Result<Vec<usize>, Error> {
    causal_order_of(&events.iter().collect::<Vec<_>>())
}

/// [`causal_order`] of events held elsewhere (the union of several shards without copying
/// them); the same errors.
pub fn causal_order_of(events: &[&Event]) -> Result<Vec<usize>, Error> {
    let mut index: HashMap<&Digest, usize> = HashMap::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if index.insert(&e.event_id, i).is_some() {
            return Err(Error::DuplicateEvent(e.event_id.clone()));
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); events.len()];
    let mut indegree = vec![0usize; events.len()];
    for (i, e) in events.iter().enumerate() {
        if let Some(p) = e.parent_event_id.as_ref().and_then(|p| index.get(p)) {
            children[*p].push(i);
            indegree[i] += 1;
        }
    }
    let mut heap: BinaryHeap<Ready> = (0..events.len())
        .filter(|&i| indegree[i] == 0)
        .map(|i| Ready(events[i], i))
        .collect();
    let mut order = Vec::with_capacity(events.len());
    while let Some(Ready(_, i)) = heap.pop() {
        order.push(i);
        for &c in &children[i] {
            indegree[c] -= 1;
            if indegree[c] == 0 {
                heap.push(Ready(events[c], c));
            }
        }
    }
    if order.len() != events.len() {
        return Err(Error::Cycle);
    }
    Ok(order)
}

/// Sorts `events` into canonical causal order.
pub fn sort_causally(events: Vec<Event>) -> Result<Vec<Event>, Error> {
    let order = causal_order(&events)?;
    let mut slots: Vec<Option<Event>> = events.into_iter().map(Some).collect();
    Ok(order
        .into_iter()
        .map(|i| slots[i].take().expect("each index once"))
        .collect())
}

#[cfg(test)]
mod tests {
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

    /// A canonical line is read whatever its length, up to the size estimate's limit (the old
    /// fallback past the length guard called every such line not canonical); one byte past the
    /// limit is refused by the size rule, at creation and at reading.
    #[test]
    fn records_up_to_the_size_limit_are_created_and_read() {
        use crate::tests::boundary::{FILLS, estimate, event_past_limit};
        for fill in FILLS {
            let event = event_past_limit(fill, 0).unwrap();
            assert_eq!(estimate(&event.value), canonical::MAX_BYTES, "{fill:?}");
            assert!(!canonical::within_limits_by_length(event.json.len()));
            let read = Event::parse_line(&event.json, "line").map_err(|e| e.to_string());
            assert!(read.as_ref() == Ok(&event), "{fill:?}: {:?}", read.err());
            let valid = validate(&event.value, "value").map_err(|e| e.to_string());
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

    #[test]
    fn attribute_table_is_sorted_and_complete() {
        assert_eq!(ATTRIBUTE_KEYS.len(), 50);
        assert!(ATTRIBUTE_KEYS.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(
            attribute_kind("coverage_ratio"),
            Some(AttributeKind::UnitInterval)
        );
        assert_eq!(attribute_kind("token_count"), None);
    }
}
