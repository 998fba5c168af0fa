//! The typed reading of a stored line: the v1 record read by serde straight from the line's
//! bytes into borrowed structs whose fields follow the record, checked field by field, written
//! back canonically into a reused buffer and compared with the line. No tree is built.
//!
//! This path only ever accepts. A stored record is valid exactly when rebuilding it through the
//! normalizers gives its own bytes again ([`super::validate`]), so a line is accepted here when
//! every field already is in its normalized form and passes its rule, the structs write back to
//! the line's bytes, and the event id and semantic digest are the ones derived. Anything else
//! (an unknown or repeated field, a wrong type, a rule that fails, a byte out of canonical form)
//! is handed to the full validation, which finds the reference's first failing rule and its
//! message. The byte comparison is what makes the structs safe to trust: a field misread, a
//! duplicate key kept, a `null` read as absent, all write back to other bytes.
//!
//! Limits: accepted lines are within [`canonical::within_limits_by_length`], and the structs
//! bound what they hold (64 evidence entries, 64 dropped fields, 50 allowlisted attribute keys
//! of at most 64 values each, depth 3), far inside the depth and value limits.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::canonical::{self, JsNumber, Value};
use crate::identity::{self, Digest, is_hex64};
use crate::privacy;

use super::{AttributeKind, Event, SCHEMA, SUBJECT_KINDS, attribute_kind};

/// The members cut from a record to give its semantic value (those `assemble` adds).
const OUTSIDE_SEMANTIC: &[&str] = &[
    "event_id",
    "event_key",
    "occurred_at",
    "occurred_at_source",
    "recorded_at",
    "schema",
    "schema_version",
    "semantic_sha256",
];

/// The event of `text` when the typed path accepts it, `None` when the full validation must
/// decide (it may still accept: a line this path does not know how to prove, such as one past
/// the length guard).
pub(super) fn read(text: &str) -> Option<Event> {
    if !canonical::within_limits_by_length(text.len()) {
        return None;
    }
    let line: Line<'_> = serde_json::from_str(text).ok()?;
    if !line.is_stored_form() {
        return None;
    }
    BUFFERS.with(|buffers| {
        let (written, semantic) = &mut *buffers.borrow_mut();
        written.clear();
        if !line.write(written) || written.as_str() != text {
            return None;
        }
        let event_id = identity::event_id(&line.subject.repository.0, &line.event_key.0).ok()?;
        if event_id.as_str() != line.event_id.0 {
            return None;
        }
        semantic.clear();
        semantic.push_str("{\"occurrence\":{");
        let source = line.occurred_at_source.0 == "source";
        if source {
            semantic.push_str("\"occurred_at\":");
            canonical::write_string(semantic, &line.occurred_at.0);
            semantic.push_str(",\"occurred_at_source\":\"source\"},\"semantic\":");
        } else {
            semantic.push_str("\"occurred_at_source\":\"generated\"},\"semantic\":");
        }
        canonical::write_canonical_text_without(semantic, text, OUTSIDE_SEMANTIC);
        semantic.push('}');
        let semantic_sha256 = Digest::of(semantic.as_bytes());
        if semantic_sha256.as_str() != line.semantic_sha256.0 {
            return None;
        }
        Some(Event {
            json: super::EventText::from(text),
            event_id,
            parent_event_id: line
                .parent_event_id
                .as_ref()
                .map(|p| Digest::parse(&p.0).expect("the stored form of a parent id is a digest")),
            semantic_sha256,
            source_occurred_at: source.then(|| line.occurred_at.0.clone().into_owned()),
            producer: line.producer.shared(),
            subject_repository: line.subject.repository.0.clone().into_owned(),
            event_type: line.event_type.0.clone().into_owned(),
        })
    })
}

thread_local! {
    /// The written-back line and the semantic digest's input, reused across lines.
    static BUFFERS: RefCell<(String, String)> = const { RefCell::new((String::new(), String::new())) };
    /// The producers of the lines this thread read, by their canonical text
    /// ([`Producer::shared`]).
    static PRODUCERS: RefCell<HashMap<String, Arc<super::Producer>>> = RefCell::new(HashMap::new());
}

/// The producers that one thread remembers ([`Producer::shared`]); past this it starts over.
const PRODUCERS_KEPT: usize = 1024;

/// A string of the line: borrowed when its JSON text holds no escape, owned otherwise.
#[derive(Debug)]
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    #[serde(borrow)]
    action: Action<'a>,
    #[serde(borrow)]
    attempt_id: Text<'a>,
    #[serde(borrow)]
    attributes: Option<Attributes<'a>>,
    #[serde(borrow)]
    event_id: Text<'a>,
    #[serde(borrow)]
    event_key: Text<'a>,
    #[serde(borrow)]
    event_type: Text<'a>,
    #[serde(borrow)]
    evidence: Option<Vec<Evidence<'a>>>,
    #[serde(borrow)]
    idempotency_key_sha256: Text<'a>,
    #[serde(borrow)]
    learning: Option<Learning<'a>>,
    #[serde(borrow)]
    occurred_at: Text<'a>,
    #[serde(borrow)]
    occurred_at_source: Text<'a>,
    #[serde(borrow)]
    operation_id: Text<'a>,
    #[serde(borrow)]
    parent_event_id: Option<Text<'a>>,
    phase_seq: JsNumber,
    #[serde(borrow)]
    privacy: Privacy<'a>,
    #[serde(borrow)]
    producer: Producer<'a>,
    #[serde(borrow)]
    recorded_at: Text<'a>,
    #[serde(borrow)]
    schema: Text<'a>,
    schema_version: JsNumber,
    #[serde(borrow)]
    semantic_sha256: Text<'a>,
    #[serde(borrow)]
    subject: Subject<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Action<'a> {
    mutation: bool,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    reason_code: Option<Text<'a>>,
    retryable: bool,
    #[serde(borrow)]
    status: Text<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Evidence<'a> {
    #[serde(borrow)]
    kind: Text<'a>,
    #[serde(borrow)]
    report_path: Option<Text<'a>>,
    #[serde(borrow)]
    run_url: Option<Text<'a>>,
    #[serde(borrow)]
    sha256: Option<Text<'a>>,
    #[serde(borrow)]
    snapshot_id: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Learning<'a> {
    #[serde(borrow)]
    category: Text<'a>,
    confidence: Option<JsNumber>,
    #[serde(borrow)]
    rule_id: Option<Text<'a>>,
    #[serde(borrow)]
    signal: Text<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Privacy<'a> {
    #[serde(borrow)]
    classification: Text<'a>,
    #[serde(borrow)]
    fields_dropped: Vec<Text<'a>>,
    #[serde(borrow)]
    redaction_version: Text<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Producer<'a> {
    #[serde(borrow)]
    component: Text<'a>,
    #[serde(borrow)]
    job: Text<'a>,
    #[serde(borrow)]
    repository: Text<'a>,
    run_attempt: JsNumber,
    #[serde(borrow)]
    run_id: Text<'a>,
    #[serde(borrow)]
    sha: Text<'a>,
    #[serde(borrow)]
    workflow: Text<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Subject<'a> {
    #[serde(borrow)]
    cluster_id: Option<Text<'a>>,
    #[serde(borrow)]
    kind: Text<'a>,
    number: Option<JsNumber>,
    #[serde(borrow)]
    record_path: Option<Text<'a>>,
    #[serde(borrow)]
    repository: Text<'a>,
    #[serde(borrow)]
    source_revision: Option<Text<'a>>,
    #[serde(borrow)]
    subject_id: Option<Text<'a>>,
}

/// `attributes`: its members in the line's order, repeated keys kept (the order check then
/// refuses them), so that nothing read is lost before the comparison.
struct Attributes<'a>(Vec<(Text<'a>, Attribute<'a>)>);

/// An attribute's value: one scalar, or an array of them.
enum Attribute<'a> {
    One(Scalar<'a>),
    Many(Vec<Scalar<'a>>),
}

/// A string, number or boolean.
enum Scalar<'a> {
    Text(Text<'a>),
    Number(f64),
    Bool(bool),
}

impl<'de: 'a, 'a> Deserialize<'de> for Attributes<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Attributes<'a>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Attributes<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attributes<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<Text<'de>>()? {
                    members.push((key, map.next_value::<Attribute<'de>>()?));
                }
                Ok(Attributes(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// Reads a scalar, or (with `many`) also an array of scalars.
struct ScalarVisitor {
    many: bool,
}

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Attribute<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, number or boolean")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Bool(b)))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Number(n as f64)))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Number(n as f64)))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Number(n)))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Text(Text(Cow::Borrowed(s)))))
    }
    fn visit_str<E>(self, s: &str) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Text(Text(Cow::Owned(s.to_owned())))))
    }
    fn visit_string<E>(self, s: String) -> Result<Attribute<'de>, E> {
        Ok(Attribute::One(Scalar::Text(Text(Cow::Owned(s)))))
    }
    // `serde_json`'s number beyond 64-bit integers; any other object is refused.
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Attribute<'de>, A::Error> {
        let n = JsNumber::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Attribute::One(Scalar::Number(n.0)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Attribute<'de>, A::Error> {
        if !self.many {
            return Err(de::Error::custom("an array inside an attribute array"));
        }
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<OneScalar<'de>>()? {
            items.push(item.0);
        }
        Ok(Attribute::Many(items))
    }
}

/// An element of an attribute array: a scalar, never an array.
struct OneScalar<'a>(Scalar<'a>);

impl<'de> Deserialize<'de> for OneScalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OneScalar<'de>, D::Error> {
        match d.deserialize_any(ScalarVisitor { many: false })? {
            Attribute::One(s) => Ok(OneScalar(s)),
            Attribute::Many(_) => Err(de::Error::custom("an array inside an attribute array")),
        }
    }
}

impl<'de> Deserialize<'de> for Attribute<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Attribute<'de>, D::Error> {
        d.deserialize_any(ScalarVisitor { many: true })
    }
}

// The stored-form checks: each holds exactly when the field's normalizer
// (`super::normalize`) accepts it and gives it back unchanged.

/// Machine text of at most `max` UTF-16 units, stored normalized.
fn machine(t: &Text<'_>, max: usize) -> bool {
    privacy::is_stored_machine_text(&t.0, max)
}

/// An optional machine text: absent, or present, non-empty (an empty one is dropped by the
/// normalizer, so it cannot be stored) and stored normalized.
fn opt_machine(t: &Option<Text<'_>>) -> bool {
    t.as_ref().is_none_or(|t| machine(t, 256))
}

/// A safe integer of 1 or more (`requiredPositiveInteger`).
fn positive(n: JsNumber) -> bool {
    Value::Number(n.0).as_safe_integer().is_some_and(|n| n >= 1)
}

/// A finite number in 0..=1.
fn unit_interval(n: f64) -> bool {
    n.is_finite() && (0.0..=1.0).contains(&n)
}

/// A timestamp stored trimmed (`requiredTimestamp`).
fn timestamp(t: &Text<'_>) -> bool {
    privacy::js_trim(&t.0).len() == t.0.len() && crate::time::is_timestamp(&t.0)
}

impl Line<'_> {
    /// Every field in its stored, normalized form and passing its rule; the byte comparison,
    /// the event id and the semantic digest are checked after.
    fn is_stored_form(&self) -> bool {
        let hex = |t: &Text<'_>| is_hex64(&t.0);
        self.schema.0 == SCHEMA
            && self.schema_version.0 == 1.0
            && hex(&self.operation_id)
            && hex(&self.attempt_id)
            && hex(&self.idempotency_key_sha256)
            && self
                .parent_event_id
                .as_ref()
                .is_none_or(|p| hex(p) && p.0 != self.event_id.0)
            && positive(self.phase_seq)
            && machine(&self.event_type, 256)
            && self.producer.is_stored_form()
            && self.subject.is_stored_form()
            && self.action.is_stored_form()
            && self.learning.as_ref().is_none_or(Learning::is_stored_form)
            && self.evidence.as_ref().is_none_or(|list| {
                !list.is_empty() && list.len() <= 64 && list.iter().all(Evidence::is_stored_form)
            })
            && self
                .attributes
                .as_ref()
                .is_none_or(Attributes::is_stored_form)
            && self.privacy.is_stored_form()
            && timestamp(&self.occurred_at)
            && matches!(&*self.occurred_at_source.0, "source" | "generated")
            && timestamp(&self.recorded_at)
            && privacy::js_trim(&self.event_key.0).len() == self.event_key.0.len()
    }

    /// Writes the record canonically; `false` when a number has no canonical text. Keys are
    /// written in their byte order (the order of the fields).
    fn write(&self, out: &mut String) -> bool {
        let mut o = Object::open(out);
        o.key("action");
        self.action.write(o.out);
        o.text("attempt_id", &self.attempt_id);
        if let Some(a) = &self.attributes {
            o.key("attributes");
            if !a.write(o.out) {
                return false;
            }
        }
        o.text("event_id", &self.event_id);
        o.text("event_key", &self.event_key);
        o.text("event_type", &self.event_type);
        if let Some(list) = &self.evidence {
            o.key("evidence");
            if !write_evidence(o.out, list) {
                return false;
            }
        }
        o.text("idempotency_key_sha256", &self.idempotency_key_sha256);
        if let Some(l) = &self.learning {
            o.key("learning");
            if !l.write(o.out) {
                return false;
            }
        }
        o.text("occurred_at", &self.occurred_at);
        o.text("occurred_at_source", &self.occurred_at_source);
        o.text("operation_id", &self.operation_id);
        match &self.parent_event_id {
            Some(p) => o.text("parent_event_id", p),
            None => {
                o.key("parent_event_id");
                o.out.push_str("null");
            }
        }
        if !o.number("phase_seq", self.phase_seq.0) {
            return false;
        }
        o.key("privacy");
        self.privacy.write(o.out);
        o.key("producer");
        if !self.producer.write(o.out) {
            return false;
        }
        o.text("recorded_at", &self.recorded_at);
        o.text("schema", &self.schema);
        if !o.number("schema_version", self.schema_version.0) {
            return false;
        }
        o.text("semantic_sha256", &self.semantic_sha256);
        o.key("subject");
        if !self.subject.write(o.out) {
            return false;
        }
        o.close();
        true
    }
}

impl Producer<'_> {
    fn is_stored_form(&self) -> bool {
        identity::is_stored_repository(&self.repository.0)
            && machine(&self.sha, 256)
            && machine(&self.workflow, 128)
            && machine(&self.job, 128)
            && machine(&self.run_id, 256)
            && positive(self.run_attempt)
            && machine(&self.component, 256)
    }

    fn write(&self, out: &mut String) -> bool {
        let mut o = Object::open(out);
        o.text("component", &self.component);
        o.text("job", &self.job);
        o.text("repository", &self.repository);
        if !o.number("run_attempt", self.run_attempt.0) {
            return false;
        }
        o.text("run_id", &self.run_id);
        o.text("sha", &self.sha);
        o.text("workflow", &self.workflow);
        o.close();
        true
    }

    /// The producer as an [`Event`] keeps it, shared with the events of the same producer that
    /// this thread read before (at most [`PRODUCERS_KEPT`] producers are remembered): a copy per
    /// event costs memory in proportion to the events, and a spool's events come from a few
    /// producers, in no order that groups them.
    fn shared(&self) -> Arc<super::Producer> {
        PRODUCERS.with(|known| {
            let mut known = known.borrow_mut();
            let mut key = String::new();
            if !self.write(&mut key) {
                return Arc::new(self.value());
            }
            if let Some(value) = known.get(&key) {
                return Arc::clone(value);
            }
            if known.len() >= PRODUCERS_KEPT {
                known.clear();
            }
            let fresh = Arc::new(self.value());
            known.insert(key, Arc::clone(&fresh));
            fresh
        })
    }

    /// The owned producer; `run_attempt` is a positive safe integer ([`Self::is_stored_form`]).
    fn value(&self) -> super::Producer {
        let s = |t: &Text<'_>| t.0.clone().into_owned();
        super::Producer {
            component: s(&self.component),
            job: s(&self.job),
            repository: s(&self.repository),
            run_attempt: self.run_attempt.0 as i64,
            run_id: s(&self.run_id),
            sha: s(&self.sha),
            workflow: s(&self.workflow),
        }
    }
}

impl Subject<'_> {
    fn is_stored_form(&self) -> bool {
        identity::is_stored_repository(&self.repository.0)
            && SUBJECT_KINDS.contains(&&*self.kind.0)
            && self.number.is_none_or(positive)
            && opt_machine(&self.subject_id)
            && opt_machine(&self.cluster_id)
            && opt_machine(&self.source_revision)
            && self
                .record_path
                .as_ref()
                .is_none_or(|p| privacy::is_stored_relative_data_path(&p.0))
    }

    fn write(&self, out: &mut String) -> bool {
        let mut o = Object::open(out);
        o.opt_text("cluster_id", &self.cluster_id);
        o.text("kind", &self.kind);
        if let Some(n) = self.number
            && !o.number("number", n.0)
        {
            return false;
        }
        o.opt_text("record_path", &self.record_path);
        o.text("repository", &self.repository);
        o.opt_text("source_revision", &self.source_revision);
        o.opt_text("subject_id", &self.subject_id);
        o.close();
        true
    }
}

impl Action<'_> {
    fn is_stored_form(&self) -> bool {
        machine(&self.name, 256) && machine(&self.status, 256) && opt_machine(&self.reason_code)
    }

    fn write(&self, out: &mut String) {
        let mut o = Object::open(out);
        o.boolean("mutation", self.mutation);
        o.text("name", &self.name);
        o.opt_text("reason_code", &self.reason_code);
        o.boolean("retryable", self.retryable);
        o.text("status", &self.status);
        o.close();
    }
}

impl Learning<'_> {
    fn is_stored_form(&self) -> bool {
        self.confidence.is_none_or(|c| unit_interval(c.0))
            && machine(&self.category, 256)
            && machine(&self.signal, 256)
            && opt_machine(&self.rule_id)
    }

    fn write(&self, out: &mut String) -> bool {
        let mut o = Object::open(out);
        o.text("category", &self.category);
        if let Some(c) = self.confidence
            && !o.number("confidence", c.0)
        {
            return false;
        }
        o.opt_text("rule_id", &self.rule_id);
        o.text("signal", &self.signal);
        o.close();
        true
    }
}

impl Evidence<'_> {
    fn is_stored_form(&self) -> bool {
        self.sha256.as_ref().is_none_or(|s| is_hex64(&s.0))
            && machine(&self.kind, 256)
            && self
                .report_path
                .as_ref()
                .is_none_or(|p| privacy::is_stored_relative_data_path(&p.0))
            && self
                .run_url
                .as_ref()
                .is_none_or(|u| privacy::public_run_url(&u.0, "").is_ok_and(|href| href == u.0))
            && self.snapshot_id.as_ref().is_none_or(|s| machine(s, 256))
    }

    fn write(&self, out: &mut String) {
        let mut o = Object::open(out);
        o.text("kind", &self.kind);
        o.opt_text("report_path", &self.report_path);
        o.opt_text("run_url", &self.run_url);
        o.opt_text("sha256", &self.sha256);
        o.opt_text("snapshot_id", &self.snapshot_id);
        o.close();
    }
}

/// Writes the evidence list; `false` unless its entries are in the normalizer's order (sorted
/// by their canonical bytes, equal entries kept).
fn write_evidence(out: &mut String, list: &[Evidence<'_>]) -> bool {
    out.push('[');
    let mut previous = out.len()..out.len();
    for (i, e) in list.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let start = out.len();
        e.write(out);
        if i > 0 && out[previous.clone()] > out[start..] {
            return false;
        }
        previous = start..out.len();
    }
    out.push(']');
    true
}

impl Attributes<'_> {
    fn is_stored_form(&self) -> bool {
        // Strictly increasing keys: sorted, none repeated.
        self.0.windows(2).all(|w| w[0].0.0 < w[1].0.0)
            && self.0.iter().all(|(key, value)| {
                let Some(kind) = attribute_kind(&key.0) else {
                    return false;
                };
                let scalar = |s: &Scalar<'_>| match (kind, s) {
                    (AttributeKind::PositiveInteger, Scalar::Number(n)) => positive(JsNumber(*n)),
                    (AttributeKind::NonNegativeInteger, Scalar::Number(n)) => {
                        Value::Number(*n).as_safe_integer().is_some_and(|n| n >= 0)
                    }
                    (AttributeKind::Boolean, Scalar::Bool(_)) => true,
                    (AttributeKind::UnitInterval, Scalar::Number(n)) => unit_interval(*n),
                    (AttributeKind::MachineText, Scalar::Text(t)) => machine(t, 256),
                    _ => false,
                };
                // Allowlisted keys are machine text already.
                match value {
                    Attribute::One(s) => scalar(s),
                    Attribute::Many(items) => items.len() <= 64 && items.iter().all(scalar),
                }
            })
    }

    fn write(&self, out: &mut String) -> bool {
        out.push('{');
        for (i, (key, value)) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            canonical::write_string(out, &key.0);
            out.push(':');
            let ok = match value {
                Attribute::One(s) => write_scalar(out, s),
                Attribute::Many(items) => {
                    out.push('[');
                    for (j, s) in items.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        if !write_scalar(out, s) {
                            return false;
                        }
                    }
                    out.push(']');
                    true
                }
            };
            if !ok {
                return false;
            }
        }
        out.push('}');
        true
    }
}

fn write_scalar(out: &mut String, s: &Scalar<'_>) -> bool {
    match s {
        Scalar::Text(t) => {
            canonical::write_string(out, &t.0);
            true
        }
        Scalar::Number(n) => canonical::write_number_checked(out, *n),
        Scalar::Bool(b) => {
            out.push_str(if *b { "true" } else { "false" });
            true
        }
    }
}

impl Privacy<'_> {
    fn is_stored_form(&self) -> bool {
        matches!(&*self.classification.0, "public" | "internal")
            && self.fields_dropped.len() <= 64
            && machine(&self.redaction_version, 256)
            // A set: sorted, none repeated.
            && self.fields_dropped.windows(2).all(|w| w[0].0 < w[1].0)
            && self.fields_dropped.iter().all(|f| machine(f, 256))
    }

    fn write(&self, out: &mut String) {
        let mut o = Object::open(out);
        o.text("classification", &self.classification);
        o.key("fields_dropped");
        o.out.push('[');
        for (i, f) in self.fields_dropped.iter().enumerate() {
            if i > 0 {
                o.out.push(',');
            }
            canonical::write_string(o.out, &f.0);
        }
        o.out.push(']');
        o.text("redaction_version", &self.redaction_version);
        o.close();
    }
}

/// Writes one object's members; keys must come in byte order (checked in debug builds).
struct Object<'o> {
    out: &'o mut String,
    last: &'static str,
    first: bool,
}

impl<'o> Object<'o> {
    fn open(out: &'o mut String) -> Object<'o> {
        out.push('{');
        Object {
            out,
            last: "",
            first: true,
        }
    }

    /// Writes `"key":` (keys are plain ASCII, which needs no escape).
    fn key(&mut self, key: &'static str) {
        debug_assert!(self.first || self.last < key, "{} before {key}", self.last);
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.last = key;
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
    }

    fn text(&mut self, key: &'static str, t: &Text<'_>) {
        self.key(key);
        canonical::write_string(self.out, &t.0);
    }

    fn opt_text(&mut self, key: &'static str, t: &Option<Text<'_>>) {
        if let Some(t) = t {
            self.text(key, t);
        }
    }

    fn boolean(&mut self, key: &'static str, b: bool) {
        self.key(key);
        self.out.push_str(if b { "true" } else { "false" });
    }

    fn number(&mut self, key: &'static str, n: f64) -> bool {
        self.key(key);
        canonical::write_number_checked(self.out, n)
    }

    fn close(self) {
        self.out.push('}');
    }
}

#[cfg(test)]
mod tests {
    //! The typed path against the full validation: on every stored line of the bundled corpus,
    //! and on generated records, each also mutated field by field (then given its right digests,
    //! so that only the field rules decide) and byte by byte. Within the length guard the two
    //! must agree exactly: the typed path accepts a line, with the same event, when and only
    //! when the full validation does.

    use std::collections::BTreeMap;
    use std::path::Path;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::event::{Error, validate::validate_text};

    /// The full validation of a line, without the typed path.
    fn full(text: &str) -> Result<Event, Error> {
        let value = canonical::parse(text).map_err(|_| Error::Json {
            origin: "line".into(),
        })?;
        validate_text(&value, "line", Some(text))
    }

    fn corpus_lines(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                corpus_lines(&path, out);
            } else if path.extension().is_some_and(|e| e == "jsonl") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.extend(text.lines().map(str::to_owned));
            }
        }
    }

    #[test]
    fn every_stored_line_of_the_corpus_is_read_typed() {
        let mut lines = Vec::new();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1/shards");
        corpus_lines(&root, &mut lines);
        assert!(lines.len() > 1_000, "{} lines", lines.len());
        for line in &lines {
            let typed = read(line);
            assert!(typed.is_some(), "not read typed: {line}");
            assert_eq!(typed.as_ref(), full(line).as_ref().ok(), "{line}");
        }
    }

    #[test]
    fn events_of_one_producer_share_its_tree_and_others_do_not() {
        let mut lines = Vec::new();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1/shards");
        corpus_lines(&root, &mut lines);
        let events: Vec<Event> = lines.iter().map(|l| read(l).unwrap()).collect();
        let mut by_text: BTreeMap<String, &Arc<super::super::Producer>> = BTreeMap::new();
        for e in &events {
            let text = e.producer.canonical();
            let first = *by_text.entry(text).or_insert(&e.producer);
            assert!(Arc::ptr_eq(first, &e.producer), "{}", e.json);
            // The shared tree is the one the full validation builds from this line.
            assert_eq!(*e.producer, *full(&e.json).unwrap().producer);
        }
        assert!(by_text.len() > 1, "the corpus has several producers");
        let trees: Vec<&Arc<super::super::Producer>> = by_text.values().copied().collect();
        for (i, a) in trees.iter().enumerate() {
            assert!(trees[i + 1..].iter().all(|b| !Arc::ptr_eq(a, b)));
        }
        // Past the bound the thread starts over: still the same tree, no longer shared.
        PRODUCERS.with(|known| known.borrow_mut().clear());
        let again = read(&events[0].json).unwrap();
        assert!(!Arc::ptr_eq(&again.producer, &events[0].producer));
        assert_eq!(again, events[0]);
    }

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// A writer input (`ActionEventInput`, camelCase) with every optional part chosen.
    fn input() -> impl Strategy<Value = serde_json::Value> {
        let text = "[A-Za-z0-9][A-Za-z0-9_.:+-]{0,10}";
        let evidence = (
            text,
            prop::option::of(Just(HEX)),
            prop::option::of("(\\./)?records/[a-z]{1,4}(/[a-z0-9]{1,3})?"),
            prop::option::of(
                (1u32..99).prop_map(|n| format!("https://github.com/o/r/actions/runs/{n}")),
            ),
            prop::option::of(text),
        )
            .prop_map(|(kind, sha, path, url, snap)| {
                let mut e = json!({ "kind": kind });
                if let Some(s) = sha {
                    e["sha256"] = json!(s);
                }
                if let Some(p) = path {
                    e["reportPath"] = json!(p);
                }
                if let Some(u) = url {
                    e["runUrl"] = json!(u);
                }
                if let Some(s) = snap {
                    e["snapshotId"] = json!(s);
                }
                e
            });
        let attribute = prop_oneof![
            (1u32..5, prop::collection::vec(0u32..1000, 0..3))
                .prop_map(|(n, v)| ("action_count", if n > 2 { json!(v) } else { json!(n) })),
            (1u32..9).prop_map(|n| ("attempt", json!(n))),
            any::<bool>().prop_map(|b| ("cached", json!(b))),
            (0u32..=100).prop_map(|n| ("coverage_ratio", json!(f64::from(n) / 100.0))),
            text.prop_map(|t| ("model", json!(t))),
            prop::collection::vec(text, 1..3).prop_map(|t| ("phase", json!(t))),
        ];
        (
            (
                text,
                prop::option::of(Just(HEX)),
                1u32..40,
                text,
                prop_oneof![Just("openclaw/openclaw"), Just(" OpenClaw/Open.Claw ")],
                prop::sample::select(SUBJECT_KINDS),
                prop::option::of(1u32..9999),
                prop::option::of(text),
            ),
            (
                prop::option::of(text),
                any::<(bool, bool)>(),
                prop::option::of((
                    text,
                    text,
                    prop::option::of(text),
                    prop::option::of(0u32..=4),
                )),
                prop::collection::vec(evidence, 0..4),
                prop::option::of(prop::collection::vec(attribute, 0..4)),
                prop::option::of((any::<bool>(), prop::collection::vec(text, 0..4))),
                prop::option::of(0u32..59),
                prop::option::of("records/[a-z]{1,5}"),
            ),
        )
            .prop_map(
                |(
                    (name, parent, phase, kind_text, repo, kind, number, subject_id),
                    (reason, (retryable, mutation), learning, evidence, attrs, privacy, at, path),
                )| {
                    let mut i = json!({
                        "eventKey": format!("review:{HEX}"),
                        "operationId": HEX,
                        "attemptId": HEX.to_uppercase(),
                        "phaseSeq": phase,
                        "idempotencyKeySha256": HEX,
                        "type": format!("review.{kind_text}"),
                        "producer": {"repository": repo, "sha": "abc", "workflow": "wf", "job": "j",
                            "runId": "12", "runAttempt": 1, "component": "c"},
                        "subject": {"repository": repo, "kind": kind},
                        "action": {"name": name, "status": "completed", "retryable": retryable,
                            "mutation": mutation},
                    });
                    if let Some(p) = parent {
                        i["parentEventId"] = json!(p.replace('0', "1"));
                    }
                    if let Some(n) = number {
                        i["subject"]["number"] = json!(n);
                    }
                    if let Some(s) = subject_id {
                        // The other optional texts of the subject follow the id's choice.
                        i["subject"]["subjectId"] = json!(s);
                        if s.len() % 2 == 0 {
                            i["subject"]["clusterId"] = json!(format!("c-{s}"));
                        } else {
                            i["subject"]["sourceRevision"] = json!(format!("r{s}"));
                        }
                    }
                    if let Some(p) = path {
                        i["subject"]["recordPath"] = json!(p);
                    }
                    if let Some(r) = reason {
                        i["action"]["reasonCode"] = json!(r);
                    }
                    if let Some((category, signal, rule, confidence)) = learning {
                        i["learning"] = json!({"category": category, "signal": signal});
                        if let Some(r) = rule {
                            i["learning"]["ruleId"] = json!(r);
                        }
                        if let Some(c) = confidence {
                            i["learning"]["confidence"] = json!(f64::from(c) / 4.0);
                        }
                    }
                    if !evidence.is_empty() {
                        i["evidence"] = json!(evidence);
                    }
                    if let Some(a) = attrs {
                        i["attributes"] = json!(a.into_iter().collect::<BTreeMap<_, _>>());
                    }
                    if let Some((public, dropped)) = privacy {
                        i["privacy"] = json!({
                            "classification": if public { "public" } else { "internal" },
                            "redactionVersion": "v2",
                            "fieldsDropped": dropped,
                        });
                    }
                    if let Some(s) = at {
                        i["occurredAt"] = json!(format!("2026-01-15T10:00:{s:02}.5Z"));
                    }
                    i
                },
            )
    }

    /// The canonical line of a valid record built from `input`, when the writer accepts it.
    fn created(input: &serde_json::Value) -> Option<String> {
        let value = canonical::parse(&input.to_string()).unwrap();
        super::super::create(&value, "2026-01-15T10:01:00.000Z", None)
            .ok()
            .map(|e| e.json.into())
    }

    /// Values a field may be mutated into: other kinds, values out of their stored form (padded,
    /// upper case, `./`), values of other fields' shapes.
    fn replacement() -> impl Strategy<Value = Value> {
        let texts = [
            "",
            " x",
            "X",
            "a",
            "a b",
            "records/x",
            "./records/x",
            "records/tmp/x",
            "public",
            "internal",
            "source",
            "generated",
            "2026-01-15T10:00:00Z",
            " 2026-01-15T10:00:00Z",
            "openclaw/openclaw",
            "OpenClaw/openclaw",
            "issue",
            "nope",
            SCHEMA,
            "https://github.com/o/r/actions/runs/1",
            "HTTPS://github.com/o/r/actions/runs/1",
            "https://github.com/o/r/actions/runs/1/",
            HEX,
            "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789",
            "action_count",
            "review:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ghp_0123456789abcdefghijABCDEFGHIJ012345",
            " review:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ];
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop::sample::select(vec![
                0.0,
                1.0,
                2.0,
                0.5,
                -1.0,
                1.5,
                9_007_199_254_740_991.0,
                1e21
            ])
            .prop_map(Value::Number),
            prop::sample::select(texts.to_vec()).prop_map(Value::str),
            Just(Value::Array(Vec::new())),
            Just(Value::Object(Default::default())),
            prop::sample::select(texts.to_vec())
                .prop_map(|t| Value::Array(vec![Value::str(t), Value::str(t)])),
            prop::sample::select(texts.to_vec())
                .prop_map(|t| Value::object([("kind", Value::str(t))])),
        ]
    }

    /// Every path (a member key or an array index per step) of the tree's values, the root's
    /// excluded.
    fn paths(v: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    at.push(Step::Key(k.clone()));
                    out.push(at.clone());
                    paths(x, at, out);
                    at.pop();
                }
            }
            Value::Array(items) => {
                for (i, x) in items.iter().enumerate() {
                    at.push(Step::Index(i));
                    out.push(at.clone());
                    paths(x, at, out);
                    at.pop();
                }
            }
            _ => {}
        }
    }

    #[derive(Clone, Debug)]
    enum Step {
        Key(String),
        Index(usize),
    }

    /// The parent container of `path` and its last step.
    fn parent<'v>(v: &'v mut Value, path: &[Step]) -> &'v mut Value {
        let mut v = v;
        for step in &path[..path.len() - 1] {
            v = match (step, v) {
                (Step::Key(k), Value::Object(m)) => m.get_mut(k).unwrap(),
                (Step::Index(i), Value::Array(a)) => &mut a[*i],
                _ => unreachable!("a path of the tree"),
            };
        }
        v
    }

    /// What a mutation does at its path.
    #[derive(Clone, Debug)]
    enum Edit {
        /// The value changed within its kind ([`variant`]).
        Vary(usize),
        /// The value replaced by one of another shape.
        Replace(Value),
        Remove,
        AddMember(&'static str, Value),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            6 => any::<usize>().prop_map(Edit::Vary),
            2 => replacement().prop_map(Edit::Replace),
            1 => Just(Edit::Remove),
            1 => (prop::sample::select(vec!["extra", "kind", "sha256", "name", "zzz"]), replacement())
                .prop_map(|(k, v)| Edit::AddMember(k, v)),
        ]
    }

    /// The `k`-th variant of `v` of its own kind: a string padded, upper-cased, emptied, given a
    /// `./` or a trailing `/`, a control or a space; a number zero, negative, fractional, unsafe;
    /// an array emptied, repeated, reversed or grown past 64; an object emptied.
    fn variant(v: &Value, k: usize) -> Value {
        match v {
            Value::String(s) => {
                let all = [
                    String::new(),
                    format!(" {s}"),
                    format!("{s}\u{a0}"),
                    s.to_uppercase(),
                    format!("./{s}"),
                    format!("{s}/"),
                    format!("{s}\u{1}"),
                    format!("{s} x"),
                    format!("{s}{s}"),
                    s.repeat(300),
                    format!("{s}{}", "a".repeat(200)),
                    format!("{s}.tmp/x@y"),
                ];
                Value::String(all[k % all.len()].clone())
            }
            Value::Number(n) => {
                let all = [
                    0.0,
                    -1.0,
                    n + 0.5,
                    1e21,
                    9_007_199_254_740_992.0,
                    n * 2.0,
                    1.5,
                    0.25,
                ];
                Value::Number(all[k % all.len()])
            }
            Value::Bool(b) => [Value::Bool(!b), Value::Null, Value::str("true")][k % 3].clone(),
            Value::Null => [Value::str("x"), Value::str(HEX), Value::Bool(false)][k % 3].clone(),
            Value::Array(items) => {
                let first = items.first().cloned().unwrap_or(Value::Null);
                let all = [
                    Vec::new(),
                    items.iter().chain(items).cloned().collect(),
                    items.iter().rev().cloned().collect(),
                    items.iter().skip(1).cloned().collect(),
                    vec![first.clone(); 65],
                    (0..65)
                        .map(|i| match &first {
                            Value::String(s) => Value::String(format!("{s}{i:02}")),
                            other => other.clone(),
                        })
                        .collect(),
                ];
                Value::Array(all[k % all.len()].clone())
            }
            Value::Object(m) => {
                let all = [
                    BTreeMap::new(),
                    m.iter()
                        .skip(1)
                        .map(|(a, b)| (a.clone(), b.clone()))
                        .collect(),
                ];
                Value::Object(all[k % all.len()].clone().into())
            }
        }
    }

    /// `record` with its event id and semantic digest derived again, where they can be (and,
    /// with `self_parent`, the event id as its own parent): a mutated record then fails only on
    /// the rule its mutation breaks.
    fn resealed(mut record: Value, self_parent: bool) -> String {
        let Value::Object(m) = &mut record else {
            return canonical::to_canonical_unchecked(&record);
        };
        let s = |m: &BTreeMap<String, Value>, k: &str| {
            m.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
        };
        let repo = m
            .get("subject")
            .and_then(|s| s.get("repository"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Ok(id) = identity::event_id(&repo, &s(m, "event_key")) {
            m.insert("event_id".into(), Value::str(id.as_str()));
            if self_parent {
                m.insert("parent_event_id".into(), Value::str(id.as_str()));
            }
        }
        let occurrence = if s(m, "occurred_at_source") == "source" {
            format!(
                "{{\"occurred_at\":{},\"occurred_at_source\":\"source\"}}",
                canonical::to_canonical_unchecked(m.get("occurred_at").unwrap_or(&Value::Null))
            )
        } else {
            "{\"occurred_at_source\":\"generated\"}".to_owned()
        };
        let mut semantic = String::new();
        canonical::write_canonical_without(&mut semantic, &record, OUTSIDE_SEMANTIC);
        let digest = Digest::of(format!(
            "{{\"occurrence\":{occurrence},\"semantic\":{semantic}}}"
        ));
        let Value::Object(m) = &mut record else {
            unreachable!()
        };
        m.insert("semantic_sha256".into(), Value::str(digest.as_str()));
        canonical::to_canonical_unchecked(&record)
    }

    /// Byte-level changes that keep the text JSON but leave its canonical form, or repeat a
    /// member.
    fn respell(line: &str, how: usize, at: usize) -> Option<String> {
        let b = line.as_bytes();
        let pick = |pred: &dyn Fn(usize) -> bool| {
            let hits: Vec<usize> = (0..b.len()).filter(|&i| pred(i)).collect();
            (!hits.is_empty()).then(|| hits[at % hits.len()])
        };
        match how % 5 {
            // Whitespace after a separator.
            0 => pick(&|i| b[i] == b',' || b[i] == b':')
                .map(|i| format!("{} {}", &line[..=i], &line[i + 1..])),
            // A letter inside a string as a `\u` escape (the same string, another spelling).
            1 => pick(&|i| b[i].is_ascii_lowercase() && i > 0 && b[i - 1] != b'\\')
                .map(|i| format!("{}\\u{:04x}{}", &line[..i], b[i], &line[i + 1..])),
            // An integer written as a fraction or with an exponent.
            2 => pick(&|i| {
                b[i].is_ascii_digit()
                    && i + 1 < b.len()
                    && matches!(b[i + 1], b',' | b'}' | b']')
                    && b[i - 1] == b':'
            })
            .map(|i| {
                format!(
                    "{}{}{}",
                    &line[..=i],
                    if at.is_multiple_of(2) { ".0" } else { "e0" },
                    &line[i + 1..]
                )
            }),
            // The first member of an object repeated.
            3 => pick(&|i| b[i] == b'{' && b.get(i + 1) == Some(&b'"')).and_then(|i| {
                let body = &line[i + 1..];
                let end = body.find(",\"")?;
                let member = &body[..end];
                // Only a scalar member, so that the cut is a whole member.
                (!member.contains(['{', '[', '}', ']']))
                    .then(|| format!("{}{member},{}", &line[..=i], body))
            }),
            // The line padded or cut.
            _ => Some(if at.is_multiple_of(2) {
                format!("{line} ")
            } else {
                line[..line.len() - 1].to_owned()
            }),
        }
    }

    /// `other` (a respelling of the canonical `line`) with the semantic digest that its own
    /// text gives, so that the respelling is judged by the other rules.
    fn resealed_text(line: &str, other: &str) -> String {
        let record = canonical::parse(line).unwrap();
        let old = record
            .get("semantic_sha256")
            .and_then(Value::as_str)
            .unwrap();
        let occurrence = match record.get("occurred_at_source").and_then(Value::as_str) {
            Some("source") => format!(
                "{{\"occurred_at\":{},\"occurred_at_source\":\"source\"}}",
                canonical::to_canonical_unchecked(record.get("occurred_at").unwrap())
            ),
            _ => "{\"occurred_at_source\":\"generated\"}".to_owned(),
        };
        let mut semantic = String::new();
        canonical::write_canonical_text_without(&mut semantic, other, OUTSIDE_SEMANTIC);
        let digest = Digest::of(format!(
            "{{\"occurrence\":{occurrence},\"semantic\":{semantic}}}"
        ));
        other.replace(old, digest.as_str())
    }

    fn agree(line: &str) -> Result<(), TestCaseError> {
        let typed = read(line);
        let full = full(line).ok();
        prop_assert_eq!(typed.as_ref(), full.as_ref(), "{}", line);
        Ok(())
    }

    proptest! {
        #![proptest_config(crate::tests::prop_support::config(256))]

        #[test]
        fn generated_records_are_read_typed(input in input()) {
            let Some(line) = created(&input) else {
                return Err(TestCaseError::reject("the writer refused the input"));
            };
            prop_assert!(read(&line).is_some(), "{}", line);
            agree(&line)?;
        }

        #[test]
        fn mutated_fields_are_judged_as_the_full_validation_judges_them(
            input in input(),
            pick in any::<prop::sample::Index>(),
            edits in prop::collection::vec(edit(), 1..3),
            self_parent in prop::bool::weighted(0.05),
        ) {
            let Some(line) = created(&input) else {
                return Err(TestCaseError::reject("the writer refused the input"));
            };
            let mut record = canonical::parse(&line).unwrap();
            for edit in edits {
                let mut all = Vec::new();
                paths(&record, &mut Vec::new(), &mut all);
                let path = &all[pick.index(all.len())];
                let container = parent(&mut record, path);
                match (path.last().unwrap(), container, edit) {
                    (Step::Key(k), Value::Object(m), Edit::Vary(n)) => {
                        let v = variant(&m[k], n);
                        m.insert(k.clone(), v);
                    }
                    (Step::Index(i), Value::Array(a), Edit::Vary(n)) => a[*i] = variant(&a[*i], n),
                    (Step::Key(k), Value::Object(m), Edit::Replace(v)) => {
                        m.insert(k.clone(), v);
                    }
                    (Step::Key(k), Value::Object(m), Edit::Remove) => {
                        m.remove(k);
                    }
                    (Step::Key(_), Value::Object(m), Edit::AddMember(k, v)) => {
                        m.insert(k.to_owned(), v);
                    }
                    (Step::Index(i), Value::Array(a), Edit::Replace(v)) => a[*i] = v,
                    (Step::Index(i), Value::Array(a), Edit::Remove) => {
                        a.remove(*i);
                    }
                    (Step::Index(i), Value::Array(a), Edit::AddMember(_, v)) => a.insert(*i, v),
                    _ => unreachable!("a path of the tree"),
                }
            }
            agree(&resealed(record, self_parent))?;
        }

        #[test]
        fn respelled_lines_go_to_the_full_validation(
            input in input(),
            how in 0usize..5,
            at in any::<usize>(),
        ) {
            let Some(line) = created(&input) else {
                return Err(TestCaseError::reject("the writer refused the input"));
            };
            if let Some(other) = respell(&line, how, at) {
                // Whitespace, padding and cuts break the shape that the digest's cut reads.
                let other = if matches!(how, 1..=3) { resealed_text(&line, &other) } else { other };
                prop_assert!(read(&other).is_none(), "{}", other);
                agree(&other)?;
            }
        }
    }
}
