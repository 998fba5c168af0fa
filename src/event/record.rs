//! The validated event ([`Event`]): its canonical line and the fields that ordering, identity,
//! sharding and bindings need (not the record's tree), reading one shard line (with an
//! inspection of the line once it is proven valid), and the replay digest of a set.

use std::sync::Arc;

use crate::canonical::{self, Value};
use crate::identity::{self, Digest};

use super::*;

/// A validated event: its canonical line plus the fields that ordering, identity, binding and
/// sharding need. The record's tree is not kept (it would take several times the line's bytes):
/// readers that inspect the record do so on its line ([`Event::parse_line_with`],
/// [`Event::parse_lines_with`]), or parse the line into a tree ([`Event::record`]). Construct with
/// [`Event::parse_line`] or [`validate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Its canonical JSON (no newline): the shard line and spool file body. Once the event is in
    /// a [`Shard`](crate::ledger::shard::Shard), a range of the shard's bytes
    /// ([`share_lines`](super::share_lines)).
    pub json: EventText,
    /// `event_id`: sha256 of the normalized repository and the event key.
    pub event_id: Digest,
    /// `parent_event_id`, the causal parent, when the event has one.
    pub parent_event_id: Option<Digest>,
    /// `semantic_sha256`: sha256 of the canonical semantic value.
    pub semantic_sha256: Digest,
    /// `Some(occurred_at)` when `occurred_at_source == "source"`.
    pub source_occurred_at: Option<String>,
    /// The producer, shared by the events of one producer that one thread read.
    pub(super) producer: Arc<Producer>,
    /// `subject.repository` (normalized).
    pub(super) subject_repository: String,
    /// `event_type`.
    pub(super) event_type: String,
}

impl Event {
    /// Canonical-parse one line: strict scan, validation, byte equality.
    pub fn parse_line(text: &str, source: &str) -> Result<Event, Error> {
        Event::parse_line_with(text, source, |_| ()).map(|(e, ())| e)
    }

    /// [`Event::parse_line`], then `inspect` of the line (a privacy scan such as
    /// [`crate::privacy::strict::first_in_line`], a filter), on the same thread; `inspect` runs
    /// only on a valid event, whose line is canonical.
    ///
    /// A stored line is first read as typed, borrowed structs and proven canonical by writing
    /// them back (no tree is built); a line that way cannot prove goes through the full
    /// validation, which decides and names the reference's first failing rule.
    pub fn parse_line_with<T>(
        text: &str,
        source: &str,
        inspect: impl FnOnce(&str) -> T,
    ) -> Result<(Event, T), Error> {
        if let Some(event) = super::line::read(text) {
            let seen = inspect(text);
            return Ok((event, seen));
        }
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
        let event = validate_text(&value, source, Some(text))?;
        drop(value);
        let seen = inspect(text);
        Ok((event, seen))
    }

    /// [`Event::parse_line`] over many `(line, source)` pairs, results in input order. Lines are
    /// independent, so large inputs are split across the machine's cores (rayon, which also
    /// nests inside a caller that is itself spread across shards); small ones stay on one
    /// thread.
    pub fn parse_lines<'a, I>(lines: I) -> Vec<Result<Event, Error>>
    where
        I: IntoIterator<Item = (&'a str, String)>,
    {
        Event::parse_lines_with(lines, |_| ())
            .into_iter()
            .map(|r| r.map(|(e, ())| e))
            .collect()
    }

    /// [`Event::parse_lines`] with [`Event::parse_line_with`]'s `inspect` run on each valid
    /// line, on the thread that parsed it.
    pub fn parse_lines_with<'a, I, T, F>(lines: I, inspect: F) -> Vec<Result<(Event, T), Error>>
    where
        I: IntoIterator<Item = (&'a str, String)>,
        T: Send,
        F: Fn(&str) -> T + Sync,
    {
        use rayon::prelude::*;
        let items: Vec<(&str, String)> = lines.into_iter().collect();
        // Below 64 lines a split costs more than it saves.
        items
            .par_iter()
            .with_min_len(64)
            .map(|(line, source)| Event::parse_line_with(line, source, &inspect))
            .collect()
    }

    /// The record's tree, parsed again from [`Event::json`]: for the few readers that need more
    /// than the kept fields after parsing.
    ///
    /// # Panics
    /// When `json` was changed after validation into text that is not JSON.
    pub fn record(&self) -> Value {
        canonical::parse(&self.json).expect("an event's line is canonical JSON it was read from")
    }

    /// `subject.repository` (normalized).
    pub fn subject_repository(&self) -> &str {
        &self.subject_repository
    }

    /// `event_type`.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// The producer (the persisted object is [`Producer::to_value`]).
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// The shard identity this event belongs to on `partition_date`.
    pub fn shard_identity(&self, partition_date: &str) -> identity::ShardIdentity {
        let p = &*self.producer;
        identity::ShardIdentity {
            repository: p.repository.clone(),
            sha: p.sha.clone(),
            producer: p.component.clone(),
            workflow: p.workflow.clone(),
            job: p.job.clone(),
            run_id: p.run_id.clone(),
            run_attempt: p.run_attempt,
            partition_date: partition_date.to_owned(),
        }
    }

    /// `actionEventReplayJson`: the record without `recorded_at`, and without
    /// `occurred_at` for generated occurrences.
    pub fn replay_json(&self) -> String {
        let mut out = String::with_capacity(self.json.len());
        self.write_replay_json(&mut out);
        out
    }

    /// Appends [`Event::replay_json`] to `out`, cut from the canonical line.
    fn write_replay_json(&self, out: &mut String) {
        let skip: &[&str] = if self.source_occurred_at.is_none() {
            &["recorded_at", "occurred_at"]
        } else {
            &["recorded_at"]
        };
        canonical::write_canonical_text_without(out, &self.json, skip);
    }
}

/// Replay digest of a list: sha256 of the replay JSON lines, each ending in `\n`.
pub fn replay_digest<'a>(events: impl IntoIterator<Item = &'a Event>) -> Digest {
    let mut text = String::new();
    for e in events {
        e.write_replay_json(&mut text);
        text.push('\n');
    }
    Digest::of(text)
}
