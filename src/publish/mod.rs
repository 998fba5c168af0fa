//! The publisher: the reference's shard import (runtime §8) written directly as Git objects.
//!
//! A publication takes one source (a sealed spool or a finalized shard root), validates the whole
//! batch before looking at the repository (§8.3), then validates it against the tip of the ledger
//! ref (§8.4: history, bindings, payloads) and writes every new file (payload shards, producer-run
//! / event / shard-set reservations and completion markers) into ONE commit whose parent is that
//! tip, landed by ONE compare-and-swap of the ref (design.md §3).
//!
//! Guarantees:
//! - Nothing is written to the ref unless the whole batch is valid against the tip it builds on;
//!   a refusal leaves the ref unchanged (at most unreachable objects remain).
//! - Reservations, payloads and completion markers land in the same commit, so readers never see
//!   a reserved-but-incomplete set written by us.
//! - Existing paths keep their bytes: identical → unchanged; replay-equivalent shard → unchanged
//!   (first writer wins); anything else → conflict, nothing written.
//! - A moved ref (another publisher landed first) is re-read and the publication re-validated and
//!   rebuilt on the new tip, within `Options::max_attempts`.
//! - A publication that adds nothing makes no commit and reports `unchanged`; a source without
//!   events (a job that recorded nothing) makes no commit and reports `empty`.
//! - Under the default privacy profile (`strict`), a batch with an event that the strict rules
//!   refuse is refused before the repository is read ([`Error::StrictPrivacy`]).

mod land;
pub mod limits;
mod plan;
mod privacy_check;
mod remote;
mod replay;
mod source;
#[cfg(test)]
mod test_support;
mod validate;

pub use land::publish_batch;
pub use privacy_check::check_privacy;
pub use remote::publish_batch_remote;
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
use crate::store::{self, CommitId, Signature, Store};
use crate::writer::files::{self};
use crate::writer::seal;
use crate::writer::spool::{self};

use replay::sealed_replay;
use source::read_source_shards;
use validate::validate_source;

/// Why a publication was refused or could not be made. Texts follow the reference (runtime §12).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Shard(#[from] shard::Error),
    #[error(transparent)]
    Event(#[from] event::Error),
    #[error(transparent)]
    Seal(#[from] seal::Error),
    #[error(transparent)]
    Spool(#[from] spool::Error),
    #[error(transparent)]
    File(#[from] files::Error),
    #[error(transparent)]
    Store(#[from] store::Error),
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
    #[error("action event shard manifest is empty")]
    ManifestEmpty,
    #[error("action event shard manifest exceeds 256 event paths")]
    ManifestTooLong,
    #[error("action event shard manifest paths must be sorted and unique")]
    ManifestOrder,
    #[error("invalid action event shard manifest path: {0}")]
    ManifestPath(String),
    #[error("action event shard manifest source root is missing")]
    ManifestRootMissing,
    #[error("action event shard manifest path is missing: {0}")]
    ManifestFileMissing(String),
    #[error("action event shard import exceeds 512 directory limit")]
    TooManyDirectories,
    #[error("directory exceeds 512 entry limit: {0}")]
    TooManyEntries(String),
    #[error("action event shard import exceeds maximum depth 6: {0}")]
    TooDeep(String),
    #[error("action event shard import exceeds 256 file limit")]
    TooManyFiles,
    #[error("refusing symbolic link in action event shard import: {0}")]
    Symlink(String),
    #[error("refusing unsafe action event shard import entry: {0}")]
    UnsafeEntry(String),
    #[error("invalid action event shard path: {0}")]
    InvalidPath(String),
    #[error("action event shard file exceeds 2097152 byte limit: {0}")]
    FileTooLarge(String),
    #[error("action event shard import exceeds 16777216 total byte limit")]
    TotalBytes,
    #[error("action event shard exceeds 2048 line limit: {0}")]
    TooManyLines(String),
    #[error("action event shard exceeds 1024 event limit: {0}")]
    TooManyFileEvents(String),
    #[error("action event shard import exceeds 262144 total event limit")]
    TotalEvents,
    #[error("action event shard is empty or has an invalid path: {0}")]
    EmptyShard(String),
    #[error("action event shard contains duplicate events: {0}")]
    DuplicateInFile(String),
    #[error("action event shard mixes producer identities: {0}")]
    MixedProducers(String),
    #[error("action event shard content is not canonical: {0}")]
    NotCanonical(String),
    #[error("action event shard path does not match canonical identity: {actual} != {expected}")]
    PathMismatch { actual: String, expected: String },
    #[error("action event shard batch contains duplicate event: {0}")]
    DuplicateInBatch(Digest),
    #[error("action event shard batch splits one producer run across partition dates")]
    SplitRun,
    #[error("action event shard batch contains repeated unnumbered producer shards")]
    RepeatedUnnumbered,
    #[error("action event shard batch mixes numbered and unnumbered producer shards")]
    MixedNumbering,
    #[error("action event shard batch is incomplete")]
    Incomplete,
    #[error("action event shard batch is not deterministically packed")]
    NotDeterministic,
    #[error(
        "action event shard producer provenance mismatch for {field}: expected {expected}, got {actual}"
    )]
    Provenance {
        field: &'static str,
        expected: String,
        actual: String,
    },
    #[error("action event shard import event identity conflict: {0}")]
    IdentityConflict(Digest),
    #[error("action event shard import contains a causal cycle: {0}")]
    HistoryCycle(Digest),
    #[error("action event shard import exceeds 262144 causal binding limit")]
    BindingLimit,
    #[error("invalid action event shard import event identity binding: {0}")]
    InvalidEventBinding(Digest),
    #[error("{label} conflict: {path}")]
    BindingConflict { label: &'static str, path: String },
    #[error("action event shard import conflict: {0}")]
    PayloadConflict(String),
    #[error("action event shard import exceeds 263168 publish path limit")]
    PathLimit,
    #[error(
        "action event shard {}: event {event_id}: {finding}, which the strict privacy profile refuses; the set was not published: keep the value out of the event (revoke or rotate it if it is a credential), or publish with --privacy reference",
        shown_path(path)
    )]
    StrictPrivacy {
        /// The shard (path under the source root) that holds the event. The message withholds
        /// it when the path itself holds a refused value (a producer field is part of it).
        path: String,
        event_id: Digest,
        finding: privacy::strict::Finding,
    },
    #[error("ref {ref_name} kept moving: gave up after {attempts} attempts; retry the publication")]
    Contention { ref_name: String, attempts: u32 },
    #[error(transparent)]
    Remote(#[from] crate::store::remote::Error),
    #[error("the remote refused the publication:\n{0}")]
    RemoteRefused(String),
    #[error(
        "the ref lock {} is held and was not released within about 5 s; if no publisher is running, remove it (ref {ref_name})",
        lock.display()
    )]
    RefLocked {
        ref_name: String,
        lock: std::path::PathBuf,
    },
}

/// `path`, unless the strict rules flag the path itself: shard paths are made of producer
/// fields, and a refusal must not print the value it refuses.
fn shown_path(path: &str) -> &str {
    match privacy::strict::scan_text(path) {
        None => path,
        Some(_) => "(path withheld: it holds the refused value)",
    }
}

/// The provenance a caller expects of every shard (runtime §8.3 step 7; `component` is not
/// checked).
#[derive(Clone, Debug, Default)]
pub struct ExpectedProducer {
    pub repository: String,
    pub sha: String,
    pub workflow: String,
    pub job: String,
    pub run_id: String,
    pub run_attempt: i64,
}

/// Knobs of a publication; required inputs are parameters of [`publish`].
#[derive(Clone, Debug)]
pub struct Options {
    /// Full ref name of the ledger (default `refs/heads/main`).
    pub ref_name: String,
    /// Author and committer of the publication commit.
    pub signature: Signature,
    /// Attempts when the ref moves under us (default 64).
    pub max_attempts: u32,
    /// Optional provenance check.
    pub expected_producer: Option<ExpectedProducer>,
    /// Optional exact list of shard paths to import (a lane manifest's `event_paths`); only
    /// meaningful for shard-root sources.
    pub expected_event_paths: Option<Vec<String>>,
    /// Layout to publish in (design.md §4). `None`: the existing ledger's, `fanout` for a new
    /// one; `Some` must match an existing ledger's layout.
    pub layout: Option<Layout>,
    /// The privacy profile (default [`Profile::Strict`]): under strict, a batch with an event
    /// that [`privacy::strict::RULES`] refuses is not published ([`Error::StrictPrivacy`]).
    pub privacy: Profile,
}

impl Options {
    /// Defaults with the given signature.
    pub fn new(signature: Signature) -> Options {
        Options {
            ref_name: "refs/heads/main".into(),
            signature,
            max_attempts: 64,
            expected_producer: None,
            expected_event_paths: None,
            layout: None,
            privacy: Profile::default(),
        }
    }
}

/// The publication manifest (runtime §8.7): payload counts and every path of the batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Payload shards newly written.
    pub created: usize,
    /// Payload shards already present (identical or replay-equivalent).
    pub unchanged: usize,
    pub event_paths: Vec<String>,
    pub reservation_paths: Vec<String>,
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
    pub manifest: Manifest,
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
/// through `git` (the local repository then only holds objects).
#[derive(Clone, Debug)]
pub enum Target {
    Local,
    Remote { url: String, ref_name: String },
}

/// Reads, validates and publishes one source (see [`read_source`]) into `store`.
pub fn publish(store: &Store, source: &Path, options: &Options) -> Result<Publication, Error> {
    publish_to(store, source, options, &Target::Local)
}

/// Reads, validates and publishes one source to `target`. A source without events publishes
/// nothing and makes no commit ([`Status::Empty`]).
pub fn publish_to(
    store: &Store,
    source: &Path,
    options: &Options,
    target: &Target,
) -> Result<Publication, Error> {
    if matches!(target, Target::Local)
        && options.expected_producer.is_none()
        && options.expected_event_paths.is_none()
    {
        let tip = store.tip(&options.ref_name)?;
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
    if batch.shards.is_empty() {
        // Nothing to publish: the ref (a remote's is not asked for) stays where it is.
        return Ok(Publication {
            manifest: Manifest::default(),
            status: Status::Empty,
            commit: match target {
                Target::Local => store.tip(&options.ref_name)?,
                Target::Remote { .. } => None,
            },
            attempts: 0,
            files_written: 0,
        });
    }
    match target {
        Target::Local => publish_batch(store, &batch, options),
        Target::Remote { url, ref_name } => {
            publish_batch_remote(store, &batch, options, url, ref_name)
        }
    }
}
