//! The publisher: the reference's shard import, written directly as Git objects.
//!
//! A publication takes one source (a sealed spool or a finalized shard root), validates the whole
//! batch before looking at the repository, then validates it against the tip of the ledger ref
//! (history, bindings, payloads) and writes every new file (payload shards, producer-run / event
//! / shard-set reservations and completion markers) into ONE commit whose parent is that tip,
//! landed by ONE compare-and-swap of the ref.
//!
//! # What is checked, in order
//!
//! 1. **Source** ([`read_source`]): the expected path list or the traversal limits, no links.
//! 2. **Batch** ([`validate_batch`]). Nothing is read from the repository before this passes.
//!    1. per file, in path order: the path is a shard path; at most 2 MiB, 16 MiB in all; at
//!       most 2,048 lines; a final newline;
//!    2. per file: every line a canonical event; at most 1,024 events per file, 262,144 in all;
//!    3. per file: non-empty, no event id twice, one producer, the causal-order bytes, and the
//!       path recomputed from the identity and partition date;
//!    4. the whole batch: no event id in two files, then an acyclic causal union;
//!    5. one partition date per producer run;
//!    6. per identity, one unnumbered file or a complete numbered set that re-packs to the same
//!       paths and bytes;
//!    7. last, the expected producer ([`Options::expected_producer`]) of each shard: a batch
//!       with a fault of 4 to 6 reports that fault, not a provenance mismatch.
//! 3. **Against the tip** (planning): event identity and causal history, binding files,
//!    payloads (identical or replay-equivalent). Repeated on each new tip after a lost race.
//! 4. **Privacy** ([`check_privacy`]): the profile's rules beyond the reference's, after every
//!    check of the reference, so that a batch the reference refuses is refused for the
//!    reference's reason under either profile, and a strict refusal names a strict-only rule.
//! 5. **The commit**: the store refuses a path conflict or a malformed tree on the way.
//!
//! The first failure is returned; error texts follow the reference importer's.
//!
//! # The publication commit
//!
//! One commit, single parent the tip it was planned on, author and committer the signature of
//! [`Options::land`], message:
//!
//! ```text
//! ledger: <repository> <workflow> run <run id>/<attempt> job <job>[ and <n> other job run(s)]: <shards> shard(s), <events> event(s), <files added> new file(s)
//!
//! Ledger-Manifest-Sha256: <sha256 hex of the manifest's JSON (Manifest::to_json)>
//! ```
//!
//! The trailer lets anyone check a commit against the manifest the publisher printed.
//!
//! # Guarantees
//!
//! - Nothing is written to the ref unless the whole batch is valid against the tip it builds on;
//!   a refusal leaves the ref unchanged (at most unreachable objects remain).
//! - Reservations, payloads and completion markers land in the same commit, so readers never see
//!   a reserved-but-incomplete set written by us.
//! - Existing paths keep their bytes: identical → unchanged; replay-equivalent shard → unchanged
//!   (first writer wins); anything else → conflict, nothing written.
//! - A moved ref (another publisher landed first) is re-read and the publication re-validated and
//!   rebuilt on the new tip, within the attempts of [`Options::land`] ([`publish_batch`]); to a
//!   remote, the same through fetch and push with a lease.
//! - A publication that adds nothing makes no commit and reports `unchanged`; a source without
//!   events (a job that recorded nothing) makes no commit and reports `empty`. A sealed spool
//!   already published whole is answered without validating its events (the replay fast path).
//! - Under the default privacy profile (`strict`), a batch with an event that the strict rules
//!   refuse is refused once every check of the reference has passed, before anything is
//!   written ([`Error::StrictPrivacy`]).
//!
//! # Memory: bounded by one source
//!
//! A run over many sources holds one source at a time: everything of a publication is dropped
//! before the next source is read, and the pages of mapped pack files it touched
//! ([`Store::release_mapped_packs`]) and the free heap ([`store::release_free_heap`]) are
//! released after each source; the free heap also once the batch is validated, before the
//! write. The `publish` command also keeps large buffers out of the heap arenas
//! ([`store::map_large_allocations`]). Within one publication the budget is:
//!
//! - the source and its validated batch: at most 16 MiB of shard bytes ([`limits`]), each
//!   event as its canonical line and a few fields (its record's tree lives only while the line
//!   is parsed and scanned: about five times the line's bytes, too much to hold for a whole
//!   batch; the producer's tree is shared by the events of one producer), and the
//!   files the plan adds (one small binding file per event; the shards' bytes are borrowed
//!   from the batch, not copied);
//! - the pack being written: up to 8 MiB of objects waiting to be compressed and at most
//!   [`store::pack::SPILL_BYTES`] (4 MiB and one entry) of compressed entries in memory; the
//!   rest is in the pack's temporary file;
//! - the tip's trees, read by point lookups on the paths the batch touches (never a listing of
//!   the repository): near-root trees for the publication's life, deeper ones in a cache of at
//!   most 16 MiB that starts over when full, one snapshot for the plan and the write
//!   ([`Store::write_commit_on`]: the write's lookups and its rewritten trees start from the
//!   plan's decoded trees); writing the new trees holds new entries of one path at a time;
//! - mapped pack and index pages: at most [`store::MAPPED_BUDGET`] (24 MiB) of file-backed
//!   resident memory, checked every 32 object reads by the snapshot
//!   ([`Store::bound_mapped_packs`]);
//! - after landing, and after the batch and the plan are dropped (a source's publication
//!   rolls up on its own, not on top of them: [`publish_batch`], whose caller holds the
//!   batch, cannot), the pack roll-up (the store's consolidation): one object at a time, plus
//!   about 72 bytes per object rolled up, at most 262,144 objects.
//!
//! Pack indices are mapped by gix when a lookup first needs them, and consolidation keeps
//! them few; their touched pages are released with the packs'.
//!
//! # Where things are
//!
//! `source.rs` (reading sources), `limits.rs`, `validate.rs` (batch checks), `privacy_check.rs`,
//! `plan.rs` (checks against a tip, the commit message), `land.rs` (landing a batch: through
//! the store's landing loop, [`crate::store::land()`], or as a pending publication),
//! `replay.rs` (the unchanged-replay fast path), `combine.rs` (many pending publications
//! landed as one commit: the design of issue 51). The `git` transport is the store's
//! ([`crate::store::remote`]).

pub mod admit;
pub mod combine;
mod land;
pub mod limits;
pub mod pending;
mod plan;
mod privacy_check;
mod replay;
mod source;
mod test_support;
mod validate;

pub use land::publish_batch;
pub use privacy_check::check_privacy;
pub use source::{SOURCE_LABEL, SourceFile, read_source};
pub use validate::{Batch, validate_batch};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::canonical::{self, Value};
use crate::event::{self};
use crate::identity::Digest;
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self};
use crate::privacy::{self, Profile};
use crate::store::{self, CommitId, LandOptions, Signature, Store};
use crate::writer::files::{self};
use crate::writer::seal;
use crate::writer::spool::{self};

use replay::sealed_replay;
use source::read_source_shards;
use validate::validate_source;

/// Why a publication was refused or could not be made. Texts follow the reference importer's error catalogue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A shard could not be parsed or packed (its own message names the shard).
    #[error(transparent)]
    Shard(#[from] shard::Error),
    /// An event is invalid, or the batch's causal order cannot be established.
    #[error(transparent)]
    Event(#[from] event::Error),
    /// A spool's seal record could not be read or is invalid.
    #[error(transparent)]
    Seal(#[from] seal::Error),
    /// The spool could not be read.
    #[error(transparent)]
    Spool(#[from] spool::Error),
    /// A source file or directory could not be read safely.
    #[error(transparent)]
    File(#[from] files::Error),
    /// The state repository could not be read or written.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The requested layout does not match the ledger's, or its record is invalid.
    #[error(transparent)]
    Layout(#[from] layout::Error),
    /// A compacted month of the tip cannot be read (invalid manifest, altered segment).
    #[error(transparent)]
    Compacted(#[from] crate::view::Error),
    /// The source root does not exist.
    #[error("publication source does not exist: {0}")]
    MissingSource(PathBuf),
    /// The source root is not a directory.
    #[error("publication source is not a directory: {0}")]
    SourceNotADirectory(PathBuf),
    /// The expected path list is empty.
    #[error("action event shard manifest is empty")]
    ManifestEmpty,
    /// The expected path list holds more than 256 paths.
    #[error("action event shard manifest exceeds 256 event paths")]
    ManifestTooLong,
    /// The expected path list is not sorted and unique.
    #[error("action event shard manifest paths must be sorted and unique")]
    ManifestOrder,
    /// An expected path is not a shard path.
    #[error("invalid action event shard manifest path: {0}")]
    ManifestPath(String),
    /// The source root of an expected path list does not exist.
    #[error("action event shard manifest source root is missing")]
    ManifestRootMissing,
    /// A file on the expected path list does not exist.
    #[error("action event shard manifest path is missing: {0}")]
    ManifestFileMissing(String),
    /// A sealed spool's shards are not exactly the expected path list: `missing` are listed
    /// and not in the spool, `extra` are in the spool and not listed (both sorted).
    #[error(
        "action event shard manifest shard set mismatch: missing=[{}] extra=[{}]",
        missing.join(", "),
        extra.join(", ")
    )]
    ManifestMismatch {
        /// Listed paths the spool does not hold.
        missing: Vec<String>,
        /// Paths of the spool's shards that are not listed.
        extra: Vec<String>,
    },
    /// The traversal met more than 512 directories.
    #[error("action event shard import exceeds 512 directory limit")]
    TooManyDirectories,
    /// A directory holds more than 512 entries.
    #[error("directory exceeds 512 entry limit: {0}")]
    TooManyEntries(String),
    /// An entry lies deeper than 6 levels below `ledger/v1/events` (or a directory at level 6).
    #[error("action event shard import exceeds maximum depth 6: {0}")]
    TooDeep(String),
    /// The traversal met more than 256 files.
    #[error("action event shard import exceeds 256 file limit")]
    TooManyFiles,
    /// A symbolic link below the source root.
    #[error("refusing symbolic link in action event shard import: {0}")]
    Symlink(String),
    /// An entry that is neither a file, a directory nor a link (a socket, a device, ...).
    #[error("refusing unsafe action event shard import entry: {0}")]
    UnsafeEntry(String),
    /// A file path is not a shard path.
    #[error("invalid action event shard path: {0}")]
    InvalidPath(String),
    /// A shard file is larger than 2 MiB.
    #[error("action event shard file exceeds 2097152 byte limit: {0}")]
    FileTooLarge(String),
    /// The batch holds more than 16 MiB.
    #[error("action event shard import exceeds 16777216 total byte limit")]
    TotalBytes,
    /// A shard file has more than 2,048 lines.
    #[error("action event shard exceeds 2048 line limit: {0}")]
    TooManyLines(String),
    /// A shard file holds more than 1,024 events.
    #[error("action event shard exceeds 1024 event limit: {0}")]
    TooManyFileEvents(String),
    /// The batch holds more than 262,144 events.
    #[error("action event shard import exceeds 262144 total event limit")]
    TotalEvents,
    /// A shard file holds no event.
    #[error("action event shard is empty or has an invalid path: {0}")]
    EmptyShard(String),
    /// A shard file holds one event id twice.
    #[error("action event shard contains duplicate events: {0}")]
    DuplicateInFile(String),
    /// A shard file holds events of more than one producer.
    #[error("action event shard mixes producer identities: {0}")]
    MixedProducers(String),
    /// A shard file's bytes are not the causal-order serialization of its events.
    #[error("action event shard content is not canonical: {0}")]
    NotCanonical(String),
    /// A shard's path is not the one its identity and partition date give.
    #[error("action event shard path does not match canonical identity: {actual} != {expected}")]
    PathMismatch {
        /// The file's path.
        actual: String,
        /// The path its identity gives.
        expected: String,
    },
    /// One event id in two files of the batch.
    #[error("action event shard batch contains duplicate event: {0}")]
    DuplicateInBatch(Digest),
    /// One producer run under two partition dates.
    #[error("action event shard batch splits one producer run across partition dates")]
    SplitRun,
    /// An identity with more than one unnumbered shard.
    #[error("action event shard batch contains repeated unnumbered producer shards")]
    RepeatedUnnumbered,
    /// An identity with both numbered and unnumbered shards.
    #[error("action event shard batch mixes numbered and unnumbered producer shards")]
    MixedNumbering,
    /// A numbered shard set with a part missing or counts that disagree.
    #[error("action event shard batch is incomplete")]
    Incomplete,
    /// A numbered shard set that does not re-pack to the same paths and bytes.
    #[error("action event shard batch is not deterministically packed")]
    NotDeterministic,
    /// A shard's producer differs from the expected provenance in `field` (the message is the
    /// reference's, which does not name the shard; `path` does).
    #[error(
        "action event shard producer provenance mismatch for {field}: expected {expected}, got {actual}"
    )]
    Provenance {
        /// The shard (path under the source root) whose producer differs.
        path: String,
        /// The provenance field that differs.
        field: &'static str,
        /// The expected value.
        expected: String,
        /// The shard's value.
        actual: String,
    },
    /// An event id already bound to another semantic digest or parent.
    #[error("action event shard import event identity conflict: {0}")]
    IdentityConflict(Digest),
    /// The incoming events and the ledger's bindings form a causal cycle.
    #[error("action event shard import contains a causal cycle: {0}")]
    HistoryCycle(Digest),
    /// Planning would read more than 262,144 event bindings.
    #[error("action event shard import exceeds 262144 causal binding limit")]
    BindingLimit,
    /// An event identity binding in the ledger is malformed.
    #[error("invalid action event shard import event identity binding: {0}")]
    InvalidEventBinding(Digest),
    /// A binding file exists with other bytes; `label` names its kind.
    #[error("{label} conflict: {path}")]
    BindingConflict {
        /// The binding's label (the reference's wording).
        label: &'static str,
        /// The binding file's path.
        path: String,
    },
    /// A shard path exists with bytes that are neither identical nor replay-equivalent.
    #[error("action event shard import conflict: {0}")]
    PayloadConflict(String),
    /// The publication would list more than 263,168 paths.
    #[error("action event shard import exceeds 263168 publish path limit")]
    PathLimit,
    /// An event the strict privacy profile refuses.
    #[error(
        "action event shard {}: event {event_id}: {finding}, which the strict privacy profile refuses; the set was not published: keep the value out of the event (revoke or rotate it if it is a credential), or publish with --privacy reference",
        shown_path(path)
    )]
    StrictPrivacy {
        /// The shard (path under the source root) that holds the event. The message withholds
        /// it when the path itself holds a refused value (a producer field is part of it).
        path: String,
        /// The refused event.
        event_id: Digest,
        /// The field, family and rule (never the value).
        finding: privacy::strict::Finding,
    },
    /// Another writer kept moving the ref for `max_attempts` builds.
    #[error("ref {ref_name} kept moving: gave up after {attempts} attempts; retry the publication")]
    Contention {
        /// The ref (or `<url> <ref>` for a remote).
        ref_name: String,
        /// Builds made.
        attempts: u32,
    },
    /// Talking to the remote failed (`git ls-remote`, `fetch` or `push`).
    #[error(transparent)]
    Remote(#[from] crate::store::remote::Error),
    /// The remote refused the push (its pre-receive hook's lines).
    #[error("the remote refused the publication:\n{0}")]
    RemoteRefused(String),
    /// The remote ref's history was rewritten since this cache last confirmed it: nothing was
    /// published.
    #[error(transparent)]
    RemoteRewritten(crate::store::remote::Rewritten),
    /// Landing through a pending publication failed, or the wait ran out with it still
    /// pending ([`pending::Error::StillPending`]: the next publisher or `maintain` lands or
    /// refuses it; publish again to wait for it).
    #[error(transparent)]
    Pending(pending::Error),
    /// The publication was refused when the pending publications were landed together: it
    /// conflicts with what landed first, or breaks a rule the combined commit is verified by.
    /// Its refusal mark stays at `refs/ledger/refused/<key>`.
    #[error("publication {key} was refused when pending publications were landed: {reason}")]
    Refused {
        /// The publication's key.
        key: String,
        /// Why (the refusal mark's message).
        reason: String,
    },
    /// The ref lock stayed held for the whole lock budget.
    #[error(
        "the ref lock {} is held and was not released within about 5 s; if no publisher is running, remove it (ref {ref_name})",
        lock.display()
    )]
    RefLocked {
        /// The ref.
        ref_name: String,
        /// The lock file.
        lock: std::path::PathBuf,
    },
}

// The landing loop's failures as the variants above (`store::land`).
crate::store::land::impl_from_land_error!(Error);

impl Error {
    /// True when the publication ran and refused (exit 1 in the CLI): a conflict with the
    /// ledger, a provenance or shard-set mismatch, strict privacy, the remote's refusal or
    /// rewrite, contention, an unsealed or changed spool, another layout. Anything else is an
    /// input or I/O error.
    pub fn is_refusal(&self) -> bool {
        match self {
            Error::BindingConflict { .. }
            | Error::PayloadConflict(_)
            | Error::IdentityConflict(_)
            | Error::HistoryCycle(_)
            | Error::Provenance { .. }
            | Error::ManifestFileMissing(_)
            | Error::ManifestMismatch { .. }
            | Error::RemoteRefused(_)
            | Error::RemoteRewritten(_)
            | Error::StrictPrivacy { .. }
            | Error::Contention { .. }
            | Error::Refused { .. } => true,
            Error::Pending(e) => e.is_refusal(),
            // Not seal's own classification: a spool that cannot be published as sealed.
            Error::Seal(s) => matches!(
                s,
                seal::Error::LateEvents(_)
                    | seal::Error::Unsealed { .. }
                    | seal::Error::OrphanSeal(_)
            ),
            Error::Layout(l) => matches!(
                l,
                layout::Error::Mismatch { .. } | layout::Error::UnknownRecord
            ),
            _ => false,
        }
    }
}

/// `path`, unless the strict rules flag the path itself: shard paths are made of producer
/// fields, and a refusal must not print the value it refuses.
fn shown_path(path: &str) -> &str {
    match privacy::strict::scan_text(path) {
        None => path,
        Some(_) => "(path withheld: it holds the refused value)",
    }
}

/// The provenance a caller expects of every shard (the reference importer's `expectedProducer`;
/// `component` is not checked).
#[derive(Clone, Debug, Default)]
pub struct ExpectedProducer {
    /// `owner/name` of the producing repository.
    pub repository: String,
    /// The commit the producer ran on.
    pub sha: String,
    /// The workflow name.
    pub workflow: String,
    /// The job name.
    pub job: String,
    /// The run id.
    pub run_id: String,
    /// The run attempt.
    pub run_attempt: i64,
}

/// Knobs of a publication; required inputs are parameters of [`publish`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Where, as whom and how hard the publication lands, and who rolls the packs up
    /// ([`LandOptions`]: by default the local ref `refs/heads/main`, 64 attempts, the roll-up
    /// after a landed commit, run once the batch is dropped). With a remote target the local
    /// repository only holds objects.
    pub land: LandOptions,
    /// Optional provenance check.
    pub expected_producer: Option<ExpectedProducer>,
    /// Optional exact list of shard paths to import (a lane manifest's `event_paths`): from a
    /// shard root only those files are read (one missing is refused, others are not read); a
    /// sealed spool's shards must be exactly these paths ([`Error::ManifestMismatch`]).
    pub expected_event_paths: Option<Vec<String>>,
    /// Layout to publish in ([`Layout`]). `None`: the existing ledger's, `fanout` for a new
    /// one; `Some` must match an existing ledger's layout.
    pub layout: Option<Layout>,
    /// The privacy profile (default [`Profile::Strict`]): under strict, a batch with an event
    /// that [`privacy::strict::RULES`] refuses is not published ([`Error::StrictPrivacy`]).
    pub privacy: Profile,
    /// For a remote target: land through a pending publication ([`combine`], [`pending`]) and
    /// wait at most this long for it to be landed or refused (default
    /// [`DEFAULT_PENDING_WAIT`]); past it, [`Error::Pending`] with
    /// [`pending::Error::StillPending`]. `None` publishes directly: one compare-and-swap of
    /// the ledger ref per attempt (`max_attempts`), for a remote whose hook predates pending
    /// publications. A local target ignores it.
    pub pending_wait: Option<std::time::Duration>,
}

/// How long a remote publication waits for its pending publication to be landed or refused,
/// by default: long past what a burst of a few hundred jobs needs, short of a CI step's limit.
pub const DEFAULT_PENDING_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

impl Options {
    /// Defaults with the given signature.
    pub fn new(signature: Signature) -> Options {
        Options {
            land: LandOptions::new(signature),
            expected_producer: None,
            expected_event_paths: None,
            layout: None,
            privacy: Profile::default(),
            pending_wait: Some(DEFAULT_PENDING_WAIT),
        }
    }
}

/// The publication manifest (the reference importer's result): payload counts and every path of the batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Payload shards newly written.
    pub created: usize,
    /// Payload shards already present (identical or replay-equivalent).
    pub unchanged: usize,
    /// Every shard path of the batch, sorted, new or not.
    pub event_paths: Vec<String>,
    /// Every reservation binding of the batch (producer-run, event identity, shard-set), sorted.
    pub reservation_paths: Vec<String>,
    /// Every completion marker of the batch, sorted.
    pub completion_paths: Vec<String>,
    /// Sorted, unique union of the three lists.
    pub paths: Vec<String>,
}

impl Manifest {
    /// Sets `paths` to the sorted, unique union of the three path lists.
    fn set_paths(&mut self) {
        let all: BTreeSet<&String> = self
            .event_paths
            .iter()
            .chain(&self.reservation_paths)
            .chain(&self.completion_paths)
            .collect();
        self.paths = all.into_iter().cloned().collect();
    }

    /// The reference's JSON shape and key order:
    /// `{"created","unchanged","eventPaths","reservationPaths","completionPaths","paths"}`.
    pub fn to_json(&self) -> String {
        let list = |v: &[String]| {
            let items: Vec<String> = v
                .iter()
                .map(|p| canonical::to_canonical_unchecked(&Value::str(p)))
                .collect();
            format!("[{}]", items.join(","))
        };
        format!(
            "{{\"created\":{},\"unchanged\":{},\"eventPaths\":{},\"reservationPaths\":{},\"completionPaths\":{},\"paths\":{}}}",
            self.created,
            self.unchanged,
            list(&self.event_paths),
            list(&self.reservation_paths),
            list(&self.completion_paths),
            list(&self.paths)
        )
    }
}

/// Whether a publication changed the ref.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// A new commit landed.
    Created,
    /// Everything was already present; no commit.
    Unchanged,
    /// The source held no events (a job that recorded nothing): nothing was published, no
    /// commit, an empty manifest.
    Empty,
}

/// Result of [`publish`].
#[derive(Clone, Debug)]
pub struct Publication {
    /// What the batch holds (whether new or not).
    pub manifest: Manifest,
    /// Whether a commit landed.
    pub status: Status,
    /// The ref's value after the publication (for an [`Status::Empty`] publication to a
    /// remote, `None`: the remote is not asked).
    pub commit: Option<CommitId>,
    /// Compare-and-swap attempts used (1 when no other publisher interfered; 0 when the source
    /// was empty and nothing was tried).
    pub attempts: u32,
    /// Files added by the commit (0 when unchanged).
    pub files_written: usize,
}

/// Where a publication lands: the local repository's ref, or a remote repository's ref reached
/// through `git` (the local repository then only holds objects); the same target every writer
/// of the state repository takes.
pub use crate::store::remote::Target;

/// Reads, validates and publishes one source (see [`read_source`]) to the target of
/// `options.land` (by default the local ref of `store`). A source without events publishes
/// nothing and makes no commit ([`Status::Empty`]).
pub fn publish(store: &Store, source: &Path, options: &Options) -> Result<Publication, Error> {
    let result = publish_one(store, source, options);
    // Whatever this source touched in the packs is not needed by the next one: a run over many
    // sources costs the memory of its largest source, not of all of them.
    store.release_mapped_packs();
    store::release_free_heap();
    result
}

fn publish_one(store: &Store, source: &Path, options: &Options) -> Result<Publication, Error> {
    let target = &options.land.target;
    if matches!(target, Target::Local)
        && options.expected_producer.is_none()
        && options.expected_event_paths.is_none()
    {
        let tip = store.tip(&options.land.ref_name)?;
        let snap = store.snapshot(tip)?;
        if let Some(manifest) = sealed_replay(source, &snap, options.layout, options.privacy)? {
            return Ok(Publication {
                status: if manifest.event_paths.is_empty() {
                    Status::Empty
                } else {
                    Status::Unchanged
                },
                manifest,
                commit: tip,
                attempts: 1,
                files_written: 0,
            });
        }
    }
    let source = read_source_shards(source, options.expected_event_paths.as_deref())?;
    let batch = validate_source(source, options.expected_producer.as_ref())?;
    // Reading and checking the source on the worker threads left freed memory in their heap
    // arenas; the write, which peaks next, allocates there again.
    store::release_free_heap();
    if batch.shards.is_empty() {
        // Nothing to publish: the ref (a remote's is not asked for) stays where it is.
        return Ok(Publication {
            manifest: Manifest::default(),
            status: Status::Empty,
            commit: match target {
                Target::Local => store.tip(&options.land.ref_name)?,
                Target::Remote { .. } => None,
            },
            attempts: 0,
            files_written: 0,
        });
    }
    let publication = land::land_batch(store, &batch, options)?;
    drop(batch);
    land::roll_up(store, options, &publication);
    Ok(publication)
}
