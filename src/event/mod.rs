//! The event record: read-side validation, semantic digest, replay JSON, timestamp
//! rules and the canonical causal order of a set of events.
//!
//! Validation follows the reference's order: type gate, self-parent, semantic rebuild
//! through the field normalizers, event id, occurrence, semantic digest, `recorded_at`, and finally
//! byte equality of the rebuilt record with the input (which refuses unknown keys, non-canonical
//! presence of optional fields, unsorted arrays and un-normalized text in one check).
//!
//! A stored line is read first as typed, borrowed structs (`line`): each field checked in its
//! stored form, the structs written back and compared with the line's bytes, the digests
//! derived; no tree is built. That path only accepts; any line it cannot prove goes through the
//! full validation above, which decides and gives the reference's message.

mod line;
mod normalize;
mod order;
mod producer;
mod record;
mod text;
mod validate;

use crate::canonical;
use crate::identity::{self, Digest};
use crate::privacy;
use normalize::{Ctx, semantic_value, str_of};
use validate::validate_text;

pub use crate::time::{Timestamp, compare_timestamps, timestamp_epoch_seconds};
pub use normalize::{iso_millis, timestamp};
pub use order::{causal_order, causal_order_of, compare_events, sort_causally};
pub use producer::Producer;
pub use record::{Event, replay_digest};
pub use text::{EventText, share_lines};
pub use validate::{create, validate};

/// `ACTION_EVENT_SCHEMA`.
pub const SCHEMA: &str = "clawsweeper.state-ledger-event.v1";

/// Subject kinds accepted by the validator (enforced).
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

/// The value contract of an allowlisted attribute key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttributeKind {
    /// A safe integer (at most 2^53 - 1) of 1 or more.
    PositiveInteger,
    /// A safe integer (at most 2^53 - 1) of 0 or more.
    NonNegativeInteger,
    /// `true` or `false`.
    Boolean,
    /// A finite number from 0 to 1 inclusive (a ratio such as `coverage_ratio`).
    UnitInterval,
    /// A string passing [`privacy::machine_text`] with a 256 UTF-16 unit limit.
    MachineText,
}

/// `ACTION_EVENT_ATTRIBUTE_KEYS` with their contracts, sorted by key.
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

/// A field rule that failed; texts are the reference's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    /// A text field failed a privacy text rule (required, length, control characters,
    /// confidential identifier, machine text, URL shape).
    #[error(transparent)]
    Text(#[from] privacy::Error),
    /// The repository, scope, event key or a digest failed an identity rule.
    #[error(transparent)]
    Identity(#[from] identity::Error),
    /// The record, or a value inside it, exceeds the canonical JSON limits or holds a number
    /// canonical JSON cannot write.
    #[error(transparent)]
    Canonical(#[from] canonical::Error),
    /// A boolean field or `Boolean` attribute holds another JSON type.
    #[error("{label} must be a boolean")]
    NotBoolean {
        /// The field as the reference names it in the message, e.g. `action event occurred_at`.
        label: String,
    },
    /// A count is negative, fractional or beyond 2^53 - 1.
    #[error("{label} must be a non-negative integer")]
    NotNonNegativeInteger {
        /// The field as the reference names it in the message, e.g. `action event occurred_at`.
        label: String,
    },
    /// A ratio is not a finite number in 0..=1.
    #[error("{label} must be between 0 and 1")]
    NotUnitInterval {
        /// The field as the reference names it in the message, e.g. `action event occurred_at`.
        label: String,
    },
    /// A timestamp (`occurred_at`, `recorded_at`, ...) does not match the reference's ISO
    /// date-time grammar (see [`crate::time`]).
    #[error("{label} must be an ISO date-time timestamp")]
    NotTimestamp {
        /// The field as the reference names it in the message, e.g. `action event occurred_at`.
        label: String,
    },
    /// An attribute value (or an element of its array) is an object, array or null; only
    /// strings, numbers and booleans are allowed.
    #[error("action event attribute {0} must be a scalar")]
    AttributeNotScalar(String),
    /// The attribute key (carried) is not in [`ATTRIBUTE_KEYS`]; free-form keys are refused
    /// so that no unreviewed data reaches the ledger.
    #[error("action event attribute is not allowlisted: {0}")]
    AttributeNotAllowlisted(String),
    /// The named attribute is an array of more than 64 values.
    #[error("action event attribute {0} exceeds 64 values")]
    AttributeTooMany(String),
    /// `evidence` lists more than 64 entries.
    #[error("action event evidence exceeds 64 entries")]
    EvidenceTooMany,
    /// `privacy.fields_dropped` lists more than 64 entries.
    #[error("action event privacy fieldsDropped exceeds 64 entries")]
    FieldsDroppedTooMany,
    /// `privacy.classification` (carried as shown) is neither `public` nor `internal`.
    #[error("invalid action event privacy classification: {0}")]
    Classification(String),
    /// `subject.kind` (carried) is not one of [`SUBJECT_KINDS`].
    #[error("invalid action event subject kind: {0}")]
    SubjectKind(String),
    /// `occurred_at_source` is neither `source` (the time came from the subject) nor
    /// `generated` (the writer stamped it).
    #[error("action event occurred_at_source must be source or generated")]
    OccurrenceSource,
    /// `parent_event_id` equals the event's own `event_id`.
    #[error("action event cannot reference itself as its parent")]
    SelfParent,
}

/// Why an event record was refused. `origin` names the file (and line) it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The JSON value is not an object.
    #[error("invalid action event object: {origin}")]
    NotObject {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// The type gate failed: `schema` is not [`SCHEMA`], `schema_version` is not 1, or a
    /// required field is missing or of the wrong JSON type.
    #[error("invalid action event schema: {origin}")]
    Schema {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// A field failed its rule; `error` says which and why.
    #[error("{error}: {origin}")]
    Field {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
        /// The rule that failed.
        error: FieldError,
    },
    /// `event_id` is not the sha256 derived from the subject repository and `event_key`
    /// ([`identity::event_id`]); the record was edited or built by a different writer.
    #[error("invalid action event identity: {origin}")]
    Identity {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// `semantic_sha256` does not match the canonical semantic value rebuilt from the
    /// record; some semantic field changed after the digest was taken.
    #[error("invalid action event semantic digest: {origin}")]
    SemanticDigest {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// The record rebuilt through the normalizers differs from the input: an unknown key,
    /// an optional field present in a non-canonical way, an unsorted array or text that is
    /// not normalized.
    #[error("action event contains unknown or non-canonical fields: {origin}")]
    NonCanonicalFields {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// The line repeats a key inside one object.
    #[error("action event JSON contains a duplicate object key: {origin}")]
    DuplicateKey {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// The line is deeper than [`canonical::MAX_DEPTH`] or holds more than
    /// [`canonical::MAX_NODES`] values.
    #[error("action event JSON exceeds canonical complexity limits: {origin}")]
    Complexity {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// The line is not valid JSON (grammar, invalid UTF-16 escapes, trailing bytes).
    #[error("invalid action event JSON: {origin}")]
    Json {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// The record is valid but the line is not its canonical serialization (key order,
    /// whitespace, number or string form); the line must be the writer's exact bytes.
    #[error("action event JSON is not canonical: {origin}")]
    NotCanonical {
        /// Where the record came from: the file, and the line when there is one.
        origin: String,
    },
    /// Two events in one set share this `event_id`.
    #[error("action event shard contains duplicate event: {0}")]
    DuplicateEvent(Digest),
    /// The `parent_event_id` links of the set form a cycle, so no causal order exists.
    #[error("action event shard contains a causal cycle")]
    Cycle,
}

#[cfg(test)]
mod tests {
    use super::*;

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
