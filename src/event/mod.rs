//! The event record: read-side validation, semantic digest, replay JSON, timestamp
//! rules and the canonical causal order of a set of events.
//!
//! Validation follows the reference's order: type gate, self-parent, semantic rebuild
//! through the field normalizers, event id, occurrence, semantic digest, `recorded_at`, and finally
//! byte equality of the rebuilt record with the input (which refuses unknown keys, non-canonical
//! presence of optional fields, unsorted arrays and un-normalized text in one check).

mod normalize;
mod order;
mod record;
mod validate;

use crate::canonical;
use crate::identity::{self, Digest};
use crate::privacy;
use normalize::{Ctx, semantic_value, str_of};
use validate::validate_text;

pub use crate::time::{Timestamp, compare_timestamps, timestamp_epoch_seconds};
pub use normalize::{iso_millis, timestamp};
pub use order::{causal_order, causal_order_of, compare_events, sort_causally};
pub use record::{Event, replay_digest};
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
    PositiveInteger,
    NonNegativeInteger,
    Boolean,
    UnitInterval,
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
