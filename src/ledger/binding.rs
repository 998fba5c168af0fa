//! Import bindings: the reservations and completion markers that make a published
//! shard set visible, with their exact paths and bytes.
//!
//! ```text
//! ledger/v1/import-bindings/producer-runs/<sha256(run identity)>.json      reservation
//! ledger/v1/import-bindings/events/<event_id>.json                          reservation
//! ledger/v1/import-bindings/shard-sets/<sha256(shard identity)>.json        reservation
//! ledger/v1/import-bindings/completed-shard-sets/<same digest>.json         completion marker
//! ```
//! That is the `reference` layout; the `fanout` layout puts each file two hex-prefix levels deeper
//! (`.../<h[0:2]>/<h[2:4]>/<digest>.json`, see [`crate::ledger::layout`]). Every file is canonical JSON
//! plus `\n`, create-only, never rewritten. The publisher writes them; `verify` recomputes them
//! and compares bytes.

use crate::canonical::{self, Value};
use crate::event::Event;
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::layout::Layout;
use crate::ledger::shard::Shard;

/// Directory of all binding files (both layouts).
pub const ROOT: &str = "ledger/v1/import-bindings";
/// Schema of producer-run bindings.
pub const PRODUCER_RUN_SCHEMA: &str = "clawsweeper.action-ledger-import-producer-run";
/// Schema of event identity bindings.
pub const EVENT_SCHEMA: &str = "clawsweeper.action-ledger-import-event";
/// Schema of shard-set reservations.
pub const SHARD_SET_SCHEMA: &str = "clawsweeper.action-ledger-import-shard-set";
/// Schema of shard-set completion markers.
pub const COMPLETION_SCHEMA: &str = "clawsweeper.action-ledger-import-shard-set-completion";
/// Largest binding file the readers accept.
pub const MAX_BYTES: u64 = 1024 * 1024;

/// The four kinds of binding file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `producer-runs/`: reserves one producer run (repository, sha, component, workflow, job,
    /// run, attempt) for one partition date, so a run cannot publish under two dates.
    ProducerRun,
    /// `events/`: binds an event id to its semantic digest and parent, so one event id can
    /// never mean two different events across shard sets.
    Event,
    /// `shard-sets/`: the reservation listing every shard path of a set with its replay digest.
    ShardSet,
    /// `completed-shard-sets/`: written last, carrying the sha256 of the reservation bytes;
    /// only a completed set counts as published.
    Completion,
}

impl Kind {
    /// The directory of this kind's files below [`ROOT`].
    pub fn dir(self) -> &'static str {
        match self {
            Kind::ProducerRun => "producer-runs",
            Kind::Event => "events",
            Kind::ShardSet => "shard-sets",
            Kind::Completion => "completed-shard-sets",
        }
    }

    /// The label the reference uses in conflict messages.
    pub fn label(self) -> &'static str {
        match self {
            Kind::ProducerRun => "action event shard import producer partition binding",
            Kind::Event => "action event shard import event identity binding",
            Kind::ShardSet => "action event shard import producer shard-set binding",
            Kind::Completion => "action event shard import producer shard-set completion binding",
        }
    }

    /// The path of the binding named by `digest` in `layout`.
    pub fn path(self, layout: Layout, digest: &Digest) -> String {
        layout.binding_path(&format!("{ROOT}/{}", self.dir()), digest)
    }
}

/// The kind, digest and layout of a binding path, `None` for anything else.
pub fn classify(path: &str) -> Option<(Kind, Digest, Layout)> {
    let rest = path.strip_prefix(ROOT)?.strip_prefix('/')?;
    let (dir, file) = rest.split_once('/')?;
    let kind = [
        Kind::ProducerRun,
        Kind::Event,
        Kind::ShardSet,
        Kind::Completion,
    ]
    .into_iter()
    .find(|k| k.dir() == dir)?;
    let (digest, layout) = Layout::parse_binding_file(file)?;
    Some((kind, digest, layout))
}

fn file_text(v: &Value) -> String {
    format!("{}\n", canonical::to_canonical_unchecked(v))
}

/// Producer-run binding: `{partition_date, producer: <run identity>, schema, schema_version}`.
pub fn producer_run(layout: Layout, id: &ShardIdentity) -> (String, String) {
    let text = file_text(&Value::object([
        ("partition_date", Value::str(&id.partition_date)),
        ("producer", id.run_value()),
        ("schema", Value::str(PRODUCER_RUN_SCHEMA)),
        ("schema_version", Value::from(1)),
    ]));
    (Kind::ProducerRun.path(layout, &id.run_digest()), text)
}

/// Event identity binding: `{event_id, parent_event_id, schema, schema_version,
/// semantic_sha256}`.
pub fn event(layout: Layout, e: &Event) -> (String, String) {
    let text = file_text(&Value::object([
        ("event_id", Value::str(e.event_id.as_str())),
        (
            "parent_event_id",
            e.parent_event_id
                .as_ref()
                .map_or(Value::Null, |p| Value::str(p.as_str())),
        ),
        ("schema", Value::str(EVENT_SCHEMA)),
        ("schema_version", Value::from(1)),
        ("semantic_sha256", Value::str(e.semantic_sha256.as_str())),
    ]));
    (Kind::Event.path(layout, &e.event_id), text)
}

/// Shard-set reservation listing every part (sorted by path) with its replay digest.
pub fn shard_set(layout: Layout, id: &ShardIdentity, shards: &[&Shard]) -> (String, String) {
    let parts: Vec<(&str, Digest)> = shards
        .iter()
        .map(|s| (s.path.as_str(), s.replay_sha256()))
        .collect();
    shard_set_of(layout, id, &parts)
}

/// [`shard_set`] from each part's path and replay digest, for callers that computed the digests
/// already (verification does, on worker threads).
pub fn shard_set_of(
    layout: Layout,
    id: &ShardIdentity,
    parts: &[(&str, Digest)],
) -> (String, String) {
    let mut listed: Vec<&(&str, Digest)> = parts.iter().collect();
    listed.sort_by(|a, b| a.0.cmp(b.0));
    let entries = listed
        .iter()
        .map(|(path, digest)| {
            Value::object([
                ("path", Value::str(*path)),
                ("replay_sha256", Value::str(digest.as_str())),
            ])
        })
        .collect();
    let text = file_text(&Value::object([
        ("producer", id.to_value()),
        ("schema", Value::str(SHARD_SET_SCHEMA)),
        ("schema_version", Value::from(1)),
        ("shards", Value::Array(entries)),
    ]));
    (Kind::ShardSet.path(layout, &id.digest()), text)
}

/// The completion marker of the shard set `id`: its path in `layout` and its bytes, which
/// carry `reservation_sha256`, the sha256 of `reservation` (the exact shard-set reservation
/// bytes from [`shard_set`]).
pub fn completion(layout: Layout, id: &ShardIdentity, reservation: &str) -> (String, String) {
    let text = file_text(&Value::object([
        ("producer", id.to_value()),
        (
            "reservation_sha256",
            Value::str(Digest::of(reservation).as_str()),
        ),
        ("schema", Value::str(COMPLETION_SCHEMA)),
        ("schema_version", Value::from(1)),
    ]));
    (Kind::Completion.path(layout, &id.digest()), text)
}

/// A durable event binding, strictly parsed: `(semantic digest, parent)`;
/// `None` when it is not exactly a canonical binding for `id`.
pub fn parse_event(text: &str, id: &Digest) -> Option<(Digest, Option<Digest>)> {
    let v = canonical::parse_canonical(text.strip_suffix('\n')?).ok()?;
    let str_field = |k: &str| v.get(k).and_then(Value::as_str);
    let semantic = str_field("semantic_sha256").and_then(Digest::parse)?;
    let parent = match v.get("parent_event_id")? {
        Value::Null => None,
        Value::String(p) => Some(Digest::parse(p)?),
        _ => return None,
    };
    let ok = v.as_object()?.len() == 5
        && str_field("schema") == Some(EVENT_SCHEMA)
        && v.get("schema_version").and_then(Value::as_f64) == Some(1.0)
        && str_field("event_id") == Some(id.as_str());
    ok.then_some((semantic, parent))
}

/// A shard-set reservation's listed parts `(path, replay digest)`, when the file is a canonical
/// reservation for `id`; `None` otherwise.
pub fn parse_shard_set(text: &str, id: &ShardIdentity) -> Option<Vec<(String, Digest)>> {
    let v = canonical::parse_canonical(text.strip_suffix('\n')?).ok()?;
    if v.as_object()?.len() != 4
        || v.get("schema").and_then(Value::as_str) != Some(SHARD_SET_SCHEMA)
        || v.get("schema_version").and_then(Value::as_f64) != Some(1.0)
        || v.get("producer") != Some(&id.to_value())
    {
        return None;
    }
    let mut out = Vec::new();
    for entry in v.get("shards")?.as_array()? {
        if entry.as_object()?.len() != 2 {
            return None;
        }
        let path = entry.get("path")?.as_str()?.to_owned();
        let digest = Digest::parse(entry.get("replay_sha256")?.as_str()?)?;
        if !path.starts_with("ledger/v1/events/") || !path.ends_with(".jsonl") {
            return None;
        }
        out.push((path, digest));
    }
    let mut paths: Vec<&String> = out.iter().map(|(p, _)| p).collect();
    paths.sort();
    paths.dedup();
    (!out.is_empty() && paths.len() == out.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_paths() {
        let d = "a".repeat(64);
        assert_eq!(
            classify(&format!("{ROOT}/events/{d}.json")),
            Some((Kind::Event, Digest::parse(&d).unwrap(), Layout::Reference))
        );
        assert_eq!(
            classify(&format!("{ROOT}/shard-sets/aa/aa/{d}.json")),
            Some((Kind::ShardSet, Digest::parse(&d).unwrap(), Layout::Fanout))
        );
        assert_eq!(classify(&format!("{ROOT}/shard-sets/ab/aa/{d}.json")), None);
        assert_eq!(
            classify(&format!("{ROOT}/completed-shard-sets/{d}.json")).map(|c| c.0),
            Some(Kind::Completion)
        );
        assert_eq!(classify(&format!("{ROOT}/events/{d}.txt")), None);
        assert_eq!(classify(&format!("{ROOT}/other/{d}.json")), None);
        assert_eq!(classify(&format!("{ROOT}/events/ABC.json")), None);
        assert_eq!(classify(&format!("{ROOT}/events/x/{d}.json")), None);
    }
}
