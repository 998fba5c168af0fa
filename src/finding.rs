//! Findings: the rules a ledger revision can break ([`Rule`]), one broken rule at one path
//! ([`Finding`]), and the outcome of a verification ([`Report`]).
//!
//! These types sit low in the crate so that every part that checks something (verification,
//! compaction's manifest checks, execution finality's record checks) reports in one vocabulary
//! without depending on the verifier.

use std::fmt;

/// The rule a finding breaks. `code()` is the stable name used in `--json` output.
///
/// Where the rules come from: the shard, set, binding and event rules are what the reference's
/// importer writes and reads back (its shard reader, its import of a shard set, its binding
/// files); a revision that breaks one would not be reproduced by the reference, or would be
/// read differently by it. The layout, compaction, tree and entry-mode rules are this
/// project's formats and git's own object rules (`git fsck` ids are named where they apply).
/// The push rules (`modified`, `deleted`, `not-descendant`, `deletion-unproven`,
/// `manifest-not-superset`) are the ledger's immutability. The finality rules check the
/// records of [`crate::finality`] against the operations that write them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A path under `ledger/v1/` that is neither a shard nor a binding.
    UnknownPath,
    /// A layout record this version does not write.
    LayoutRecordInvalid,
    /// A binding at a path of the other layout than the repository's.
    LayoutMixed,
    /// A shard that cannot be read as canonical event lines (bytes, JSON, fields, digests).
    ShardInvalid,
    /// An event that breaks the privacy rules (see [`crate::privacy`]).
    Privacy,
    /// An event that passes the reference's privacy rules but holds a value of a family of the
    /// strict profile ([`crate::privacy::strict::RULES`]): a credential or private host that must be
    /// treated as exposed. Not reported under the `reference` profile.
    PrivacyStrict,
    /// A shard whose events are not in canonical causal order.
    ShardOrder,
    /// A shard whose path does not reproduce its identity.
    ShardPath,
    /// Numbered parts missing, repeated or inconsistent.
    PartsIncomplete,
    /// Parts that the deterministic packing would not produce.
    PartsNotDeterministic,
    /// A shard set without its reservation (`import-bindings/shard-sets/…`), which the
    /// publisher writes before anything else of the set.
    ReservationMissing,
    /// A reservation that is not a canonical shard-set reservation for its identity.
    ReservationInvalid,
    /// A valid reservation that does not list exactly the set's parts and replay digests.
    ReservationMismatch,
    /// A reservation without its shards.
    ReservationOrphan,
    /// A set without completion marker: readers treat it as incomplete (invisible).
    CompletionMissing,
    /// A completion marker that is not the canonical marker for its set.
    CompletionInvalid,
    /// A completion marker without its reserved set.
    CompletionOrphan,
    /// A set without the producer-run binding that ties its producer run to one partition
    /// date.
    ProducerRunMissing,
    /// A producer-run binding that disagrees with the set (another partition date, bad bytes).
    ProducerRunMismatch,
    /// A producer-run binding whose set is not in the ledger.
    ProducerRunOrphan,
    /// An event without its identity binding (`import-bindings/events/…`, keyed by event
    /// id), which records its semantic digest and parent edge.
    EventBindingMissing,
    /// An event binding with another semantic digest or parent edge, or malformed.
    EventBindingMismatch,
    /// An event binding whose event is in no shard.
    EventBindingOrphan,
    /// An event id that appears in more than one shard, or twice in one: the reference
    /// imports each event exactly once.
    DuplicateEvent,
    /// Parent edges (`parent_event_id`) that close a cycle, across the whole ledger: no
    /// causal order exists.
    CausalCycle,
    /// A push that modifies an existing path.
    Modified,
    /// A push that deletes an existing path.
    Deleted,
    /// A push whose new commit does not descend from the old one.
    NotDescendant,
    /// A path under `finality/v1/` that is not an action record at the path its id gives.
    FinalityUnknownPath,
    /// A finality record that is not canonical, has the wrong fields, or names another action.
    FinalityRecordInvalid,
    /// A claim or outcome without its `action.json`.
    FinalityActionMissing,
    /// A claim that does not match its action's binding, or that the action never allowed.
    FinalityClaimMismatch,
    /// An outcome whose status or lifecycle the operations cannot produce from the action.
    FinalityLifecycleMismatch,
    /// An outcome naming an attempt that does not hold the action's claim.
    FinalityAttemptMismatch,
    /// A finality layout record (`finality/v1/layout.json`) this version does not write.
    FinalityLayoutRecordInvalid,
    /// A finality record at the path another layout gives it: a repository never mixes
    /// layouts (`maintain` migrates an older repository in one commit).
    FinalityLayoutMixed,
    /// A push that changes the finality layout other than by a migration: to a layout other
    /// than the default (`hex2x2`), or while adding a record (a migration moves records and
    /// adds none, so that the range rules, such as no claim after an outcome, cannot be
    /// skipped by riding on one).
    FinalityLayoutChange,
    /// An action the sweep may reconcile (no outcome, a lifecycle the sweep closes) without
    /// its pending-index entry (`hex2x2` and `nibble` layouts).
    FinalityPendingMissing,
    /// A pending-index entry whose action does not exist, has an outcome, or is in a lifecycle
    /// the sweep leaves alone.
    FinalityPendingExtra,
    /// A pending-index entry whose time is not its action's `created_at`.
    FinalityPendingTime,
    /// `action.json`'s `details` (the goal, risk, systems, … of the full action record) break a
    /// field's rule: an unknown field, a wrong type, a text or array over its limit, a number
    /// out of its range (`finality::details`).
    FinalityDetailInvalid,
    /// `action.json` stores an act not bound to its `act_content_hash`: the stored act does not
    /// hash to it, an act is stored without a hash, or a redacted act shows no redaction.
    FinalityActUnbound,
    /// An entry under `ledger/v1/` or `finality/v1/` (or one of those directories itself, or
    /// `ledger` or `finality`) that is neither a plain file of mode `100644` nor a directory: a
    /// symbolic link (`120000`), an executable file (`100755`), a submodule (`160000`) or
    /// another mode. The publisher writes only `100644` blobs; a clone would check such an
    /// entry out as a link, an executable or an empty directory, not as the bytes verified.
    EntryMode,
    /// A tree under `ledger/v1/` or `finality/v1/` that holds the same name twice with the same
    /// kind of entry (`git fsck`: `duplicateEntries`). Git resolves such a name to one of the
    /// entries, so a clone and `git show` see different bytes than a listing.
    TreeDuplicateEntry,
    /// A tree under `ledger/v1/` or `finality/v1/` that holds one name both as a file and as a
    /// directory (`git fsck`: `duplicateEntries`); a checkout can hold only one of them.
    TreeFileDirectoryConflict,
    /// A tree under `ledger/v1/` or `finality/v1/` whose entries are not in git's order (names
    /// by bytes, a directory's name compared as if it ended in `/`; `git fsck`:
    /// `treeNotSorted`). Lookups that rely on the order miss entries.
    TreeUnsorted,
    /// A tree under `ledger/v1/` or `finality/v1/` with an entry name git refuses: empty, `.`,
    /// `..`, `.git` in any case, or one containing `/` (`git fsck`: `emptyName`, `hasDot`,
    /// `hasDotdot`, `hasDotgit`, `fullPathname`). A checkout cannot hold it, or would write
    /// outside the directory.
    TreeBadName,
    /// A tree under `ledger/v1/` or `finality/v1/` whose bytes are not git's encoding of its
    /// entries, such as a zero-padded mode (`git fsck`: `zeroPaddedFilemode`).
    TreeNotCanonical,
    /// A `manifest.json` under `ledger/v1/segments/` that is not a valid canonical manifest.
    ManifestInvalid,
    /// A segment file whose sha256, size or line count differs from its manifest entry.
    SegmentDigestMismatch,
    /// A manifest entry whose sha256, replay digest or event count its segment lines do not
    /// reproduce.
    ManifestEntryMismatch,
    /// A segment (or a line range) that a manifest lists and that is not there.
    CompactedMissing,
    /// A segment file no manifest lists, or a hot shard file that a manifest also lists.
    CompactedExtra,
    /// A push that deletes a shard whose exact bytes the new manifest does not prove.
    DeletionUnproven,
    /// A push that replaces a manifest by one that drops or changes what the old one proved.
    ManifestNotSuperset,
    /// A **warning**, not a finding: two sibling names under `ledger/v1/` or `finality/v1/`
    /// that are equal after Unicode default case folding and NFC normalization (`Review` and
    /// `review`, `Straße` and `STRASSE`, a composed and a decomposed `É`). A case-insensitive
    /// file system (macOS, Windows) checks out only one of them. The bytes stay as published.
    CaseCollision,
}

impl Rule {
    /// Stable kebab-case name.
    pub fn code(self) -> &'static str {
        match self {
            Rule::UnknownPath => "unknown-path",
            Rule::LayoutRecordInvalid => "layout-record-invalid",
            Rule::LayoutMixed => "layout-mixed",
            Rule::ShardInvalid => "shard-invalid",
            Rule::Privacy => "privacy",
            Rule::PrivacyStrict => "privacy-strict",
            Rule::ShardOrder => "shard-order",
            Rule::ShardPath => "shard-path",
            Rule::PartsIncomplete => "parts-incomplete",
            Rule::PartsNotDeterministic => "parts-not-deterministic",
            Rule::ReservationMissing => "reservation-missing",
            Rule::ReservationInvalid => "reservation-invalid",
            Rule::ReservationMismatch => "reservation-mismatch",
            Rule::ReservationOrphan => "reservation-orphan",
            Rule::CompletionMissing => "completion-missing",
            Rule::CompletionInvalid => "completion-invalid",
            Rule::CompletionOrphan => "completion-orphan",
            Rule::ProducerRunMissing => "producer-run-missing",
            Rule::ProducerRunMismatch => "producer-run-mismatch",
            Rule::ProducerRunOrphan => "producer-run-orphan",
            Rule::EventBindingMissing => "event-binding-missing",
            Rule::EventBindingMismatch => "event-binding-mismatch",
            Rule::EventBindingOrphan => "event-binding-orphan",
            Rule::DuplicateEvent => "duplicate-event",
            Rule::CausalCycle => "causal-cycle",
            Rule::Modified => "modified",
            Rule::Deleted => "deleted",
            Rule::NotDescendant => "not-descendant",
            Rule::FinalityUnknownPath => "finality-unknown-path",
            Rule::FinalityRecordInvalid => "finality-record-invalid",
            Rule::FinalityActionMissing => "finality-action-missing",
            Rule::FinalityClaimMismatch => "finality-claim-mismatch",
            Rule::FinalityLifecycleMismatch => "finality-lifecycle-mismatch",
            Rule::FinalityAttemptMismatch => "finality-attempt-mismatch",
            Rule::FinalityLayoutRecordInvalid => "finality-layout-record-invalid",
            Rule::FinalityLayoutMixed => "finality-layout-mixed",
            Rule::FinalityLayoutChange => "finality-layout-change",
            Rule::FinalityPendingMissing => "finality-pending-missing",
            Rule::FinalityPendingExtra => "finality-pending-extra",
            Rule::FinalityPendingTime => "finality-pending-time",
            Rule::FinalityDetailInvalid => "finality-detail-invalid",
            Rule::FinalityActUnbound => "finality-act-unbound",
            Rule::EntryMode => "entry-mode",
            Rule::TreeDuplicateEntry => "tree-duplicate-entry",
            Rule::TreeFileDirectoryConflict => "tree-file-directory-conflict",
            Rule::TreeUnsorted => "tree-unsorted",
            Rule::TreeBadName => "tree-bad-name",
            Rule::TreeNotCanonical => "tree-not-canonical",
            Rule::ManifestInvalid => "manifest-invalid",
            Rule::SegmentDigestMismatch => "segment-digest-mismatch",
            Rule::ManifestEntryMismatch => "manifest-entry-mismatch",
            Rule::CompactedMissing => "compacted-missing",
            Rule::CompactedExtra => "compacted-extra",
            Rule::DeletionUnproven => "deletion-unproven",
            Rule::ManifestNotSuperset => "manifest-not-superset",
            Rule::CaseCollision => "case-collision",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One broken rule at one path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// The repository path the finding is about (a file, a directory or a set's key).
    pub path: String,
    /// The rule broken.
    pub rule: Rule,
    /// What is wrong, in words, naming the values involved (never a secret value).
    pub detail: String,
}

/// The outcome of a verification: findings and warnings, each sorted by path then rule, and
/// what was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every broken rule found.
    pub findings: Vec<Finding>,
    /// What a user should know but the ledger rules allow ([`Rule::CaseCollision`]): they do
    /// not make the report unclean.
    pub warnings: Vec<Finding>,
    /// Shard files read.
    pub shards: usize,
    /// Events read from those shards.
    pub events: usize,
    /// Binding files checked.
    pub bindings: usize,
}

impl Report {
    /// Whether no rule is broken (warnings do not count).
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}
