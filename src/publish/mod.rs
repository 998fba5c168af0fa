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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::canonical::{self, Value};
use crate::event::{self, Event};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::binding::{self, Kind};
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self, Shard};
use crate::privacy::{self, Profile};
use crate::store::{self, CommitId, Signature, Snapshot, Store};
use crate::writer::files::{self, EntryKind, Root};
use crate::writer::seal;
use crate::writer::spool::{self, Spool};

/// Import limits (runtime §8.1).
pub mod limits {
    pub const MAX_DEPTH: usize = 6;
    pub const MAX_ENTRIES_PER_DIRECTORY: usize = 512;
    pub const MAX_DIRECTORIES: usize = 512;
    pub const MAX_FILES: usize = 256;
    pub const MAX_FILE_BYTES: usize = 2 * 1024 * 1024;
    pub const MAX_FILE_LINES: usize = 2048;
    pub const MAX_FILE_EVENTS: usize = 1024;
    pub const MAX_TOTAL_BYTES: usize = 16 * 1024 * 1024;
    pub const MAX_TOTAL_EVENTS: usize = 262_144;
    pub const MAX_CAUSAL_BINDINGS: usize = 262_144;
    pub const MAX_PUBLISH_PATHS: usize = 262_144 + 256 * 4;
    pub const MAX_BINDING_BYTES: u64 = 1024 * 1024;
}

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

/// A source file of a batch: shard path and content.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub path: String,
    pub content: String,
}

/// Label of a publication source root in file-layer errors.
pub const SOURCE_LABEL: &str = "action event shard import source";

/// Reads a publication source: a sealed spool root (its shards are derived from the sealed
/// events) or a finalized shard root (files under `ledger/v1/events`, traversed within the
/// import limits, §8.2). The root is opened once ([`Root`]) and every listing and read goes
/// through that handle, so links anywhere below it fail closed. A root with neither holds
/// nothing (the spool of a job that recorded nothing); a root that does not exist is
/// [`Error::MissingSource`], one that is not a directory [`Error::SourceNotADirectory`] (with
/// `expected_paths`, the reference's manifest errors apply instead).
pub fn read_source(
    root: &Path,
    expected_paths: Option<&[String]>,
) -> Result<Vec<SourceFile>, Error> {
    Ok(match read_source_shards(root, expected_paths)? {
        Source::Files(files) => files,
        Source::Sealed(shards) => shards
            .into_iter()
            .map(|s| SourceFile {
                path: s.path,
                content: s.content,
            })
            .collect(),
    })
}

/// What a source holds: files to validate from their bytes, or the shards packed from a sealed
/// spool's events (validated when the spool was read, packed by [`shard::pack`]).
enum Source {
    Files(Vec<SourceFile>),
    Sealed(Vec<Shard>),
}

fn read_source_shards(root: &Path, expected_paths: Option<&[String]>) -> Result<Source, Error> {
    let (handle, absent) = match Root::open(root, SOURCE_LABEL) {
        Ok(h) => (Some(h), None),
        Err(files::Error::Missing { .. }) => (None, Some(Error::MissingSource(root.to_owned()))),
        Err(files::Error::NotDirectory { .. }) => {
            (None, Some(Error::SourceNotADirectory(root.to_owned())))
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(h) = &handle
        && h.entry_kind(spool::SPOOL_DIR)? == Some(EntryKind::Dir)
    {
        let spool = Spool::from_root(h.try_clone()?)?;
        let mut shards = Vec::new();
        for run in seal::sealed_runs(&spool)? {
            shards.extend(run.into_shards()?);
        }
        shards.sort_by(|a, b| a.path.cmp(&b.path));
        // A spool without events beside shard files (a finalize output whose spool directory
        // kept only its lock directories) publishes the shards, never silently nothing.
        if !shards.is_empty() || h.entry_kind(shard::EVENTS_ROOT)? != Some(EntryKind::Dir) {
            return Ok(Source::Sealed(shards));
        }
    }
    if let Some(paths) = expected_paths {
        return read_manifest_files(handle.as_ref(), paths).map(Source::Files);
    }
    let Some(h) = handle else {
        return Err(absent.expect("an unopened root says why"));
    };
    // Neither a spool directory nor shards: the spool of a job that recorded nothing, or a
    // finalize output without shards (§8.2: an empty result).
    if h.entry_kind(shard::EVENTS_ROOT)? != Some(EntryKind::Dir) {
        return Ok(Source::Files(Vec::new()));
    }
    traverse(&h).map(Source::Files)
}

fn read_manifest_files(root: Option<&Root>, paths: &[String]) -> Result<Vec<SourceFile>, Error> {
    if paths.is_empty() {
        return Err(Error::ManifestEmpty);
    }
    if paths.len() > 256 {
        return Err(Error::ManifestTooLong);
    }
    if paths.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::ManifestOrder);
    }
    if let Some(p) = paths.iter().find(|p| shard::parse_path(p).is_none()) {
        return Err(Error::ManifestPath(p.clone()));
    }
    let Some(root) = root else {
        return Err(Error::ManifestRootMissing);
    };
    paths
        .iter()
        .map(|p| {
            let content =
                read_shard_file(root, p)?.ok_or_else(|| Error::ManifestFileMissing(p.clone()))?;
            Ok(SourceFile {
                path: p.clone(),
                content,
            })
        })
        .collect()
}

fn read_shard_file(root: &Root, rel: &str) -> Result<Option<String>, Error> {
    root.read_text(rel, limits::MAX_FILE_BYTES as u64, "action event shard")
        .map_err(|e| match e {
            files::Error::TooLarge { .. } => Error::FileTooLarge(rel.to_owned()),
            other => Error::File(other),
        })
}

fn traverse(root: &Root) -> Result<Vec<SourceFile>, Error> {
    let mut found = Vec::new();
    let mut directories = 0usize;
    let mut file_count = 0usize;
    let mut stack = vec![(shard::EVENTS_ROOT.to_owned(), 0usize)];
    while let Some((rel, depth)) = stack.pop() {
        directories += 1;
        if directories > limits::MAX_DIRECTORIES {
            return Err(Error::TooManyDirectories);
        }
        let entries = match root.list_dir(&rel, limits::MAX_ENTRIES_PER_DIRECTORY) {
            Ok(entries) => entries.unwrap_or_default(),
            Err(files::Error::TooManyEntries { .. }) => return Err(Error::TooManyEntries(rel)),
            Err(e) => return Err(e.into()),
        };
        for (name, kind) in entries {
            let child = format!("{rel}/{name}");
            let child_depth = depth + 1;
            if child_depth > limits::MAX_DEPTH {
                return Err(Error::TooDeep(child));
            }
            match kind {
                EntryKind::Dir if child_depth == limits::MAX_DEPTH => {
                    return Err(Error::TooDeep(child));
                }
                EntryKind::Dir => stack.push((child, child_depth)),
                EntryKind::File => {
                    file_count += 1;
                    if file_count > limits::MAX_FILES {
                        return Err(Error::TooManyFiles);
                    }
                    if name.ends_with(".jsonl") {
                        found.push(child);
                    }
                }
                EntryKind::Other => {
                    return Err(if root.is_symlink(&child)? {
                        Error::Symlink(child)
                    } else {
                        Error::UnsafeEntry(child)
                    });
                }
            }
        }
    }
    found.sort();
    found
        .into_iter()
        .map(|p| {
            let content = read_shard_file(root, &p)?.unwrap_or_default();
            Ok(SourceFile { path: p, content })
        })
        .collect()
}

/// A batch that passed the source-side checks (§8.3).
#[derive(Debug)]
pub struct Batch {
    /// Shards in path order.
    pub shards: Vec<Shard>,
    /// Normalized identity of each shard (parallel to `shards`).
    pub identities: Vec<ShardIdentity>,
}

/// Validates a whole batch before the repository is consulted (runtime §8.3).
pub fn validate_batch(
    files: &[SourceFile],
    expected: Option<&ExpectedProducer>,
) -> Result<Batch, Error> {
    let pending = files
        .iter()
        .map(|f| Pending {
            path: f.path.clone(),
            content: f.content.clone(),
            parsed: None,
        })
        .collect();
    validate_pending(pending, expected)
}

/// A source file, with its events when they come from a sealed spool (validated when the spool
/// was read, in causal order, deterministically packed): the checks that would re-derive those
/// from the bytes are skipped for them.
struct Pending {
    path: String,
    content: String,
    parsed: Option<Vec<Event>>,
}

/// [`validate_batch`] for any source.
fn validate_source(source: Source, expected: Option<&ExpectedProducer>) -> Result<Batch, Error> {
    match source {
        Source::Files(files) => validate_batch(&files, expected),
        Source::Sealed(shards) => validate_pending(
            shards
                .into_iter()
                .map(|s| Pending {
                    path: s.path,
                    content: s.content,
                    parsed: Some(s.events),
                })
                .collect(),
            expected,
        ),
    }
}

fn validate_pending(
    files: Vec<Pending>,
    expected: Option<&ExpectedProducer>,
) -> Result<Batch, Error> {
    let mut total_bytes = 0usize;
    let mut total_events = 0usize;
    let trusted = files.iter().all(|p| p.parsed.is_some());
    let mut shards = Vec::with_capacity(files.len());
    let mut identities = Vec::with_capacity(files.len());
    for f in files {
        let Some((date, part)) = shard::parse_path(&f.path) else {
            return Err(Error::InvalidPath(f.path.clone()));
        };
        if f.content.len() > limits::MAX_FILE_BYTES {
            return Err(Error::FileTooLarge(f.path.clone()));
        }
        total_bytes += f.content.len();
        if total_bytes > limits::MAX_TOTAL_BYTES {
            return Err(Error::TotalBytes);
        }
        let lines = f.content.bytes().filter(|&b| b == b'\n').count()
            + usize::from(!f.content.ends_with('\n'));
        if lines > limits::MAX_FILE_LINES {
            return Err(Error::TooManyLines(f.path.clone()));
        }
        if !f.content.ends_with('\n') {
            return Err(shard::Error::NoFinalNewline(f.path.clone()).into());
        }
        let from_bytes = f.parsed.is_none();
        let events = match f.parsed {
            Some(events) => events,
            None => shard::parse_content(&f.content, &f.path)?,
        };
        if events.len() > limits::MAX_FILE_EVENTS {
            return Err(Error::TooManyFileEvents(f.path.clone()));
        }
        total_events += events.len();
        if total_events > limits::MAX_TOTAL_EVENTS {
            return Err(Error::TotalEvents);
        }
        if events.is_empty() {
            return Err(Error::EmptyShard(f.path.clone()));
        }
        let mut ids = HashSet::with_capacity(events.len());
        if !events.iter().all(|e| ids.insert(&e.event_id)) {
            return Err(Error::DuplicateInFile(f.path.clone()));
        }
        if events.iter().any(|e| e.producer() != events[0].producer()) {
            return Err(Error::MixedProducers(f.path.clone()));
        }
        if from_bytes && shard::content(&event::sort_causally(events.clone())?) != f.content {
            return Err(Error::NotCanonical(f.path.clone()));
        }
        let identity = events[0]
            .shard_identity(&date)
            .normalized()
            .map_err(shard::Error::from)?;
        let expected_path = shard::relative_path(&identity, part)?;
        if expected_path != f.path {
            return Err(Error::PathMismatch {
                actual: f.path.clone(),
                expected: expected_path,
            });
        }
        if let Some(x) = expected {
            check_provenance(&identity, x)?;
        }
        identities.push(identity);
        shards.push(Shard {
            path: f.path,
            events,
            content: f.content,
        });
    }

    // Batch level: unique ids and an acyclic union.
    let mut seen = HashSet::new();
    for e in shards.iter().flat_map(|s| &s.events) {
        if !seen.insert(&e.event_id) {
            return Err(Error::DuplicateInBatch(e.event_id.clone()));
        }
    }
    let union: Vec<&Event> = shards.iter().flat_map(|s| &s.events).collect();
    event::causal_order_of(&union)?;

    // One producer run, one partition date.
    let mut run_dates: HashMap<String, &str> = HashMap::new();
    for id in &identities {
        let run = canonical::to_canonical_unchecked(&id.run_value());
        if *run_dates.entry(run).or_insert(&id.partition_date) != id.partition_date {
            return Err(Error::SplitRun);
        }
    }

    // Complete, deterministically packed shard sets.
    let mut groups: BTreeMap<&ShardIdentity, Vec<usize>> = BTreeMap::new();
    for (i, id) in identities.iter().enumerate() {
        groups.entry(id).or_default().push(i);
    }
    for (id, members) in groups.iter().filter(|_| !trusted) {
        let parts: Vec<Option<shard::Part>> = members
            .iter()
            .map(|&i| shard::parse_path(&shards[i].path).and_then(|(_, p)| p))
            .collect();
        let numbered = parts.iter().filter(|p| p.is_some()).count();
        if numbered == 0 {
            if members.len() != 1 {
                return Err(Error::RepeatedUnnumbered);
            }
            continue;
        }
        if numbered != members.len() {
            return Err(Error::MixedNumbering);
        }
        let mut parts: Vec<(u32, u32, usize)> = parts
            .iter()
            .zip(members)
            .map(|(p, &i)| {
                let (idx, count) = p.expect("numbered");
                (idx, count, i)
            })
            .collect();
        parts.sort();
        let count = parts[0].1;
        let complete = parts.iter().all(|p| p.1 == count)
            && parts.len() == count as usize
            && parts.iter().enumerate().all(|(k, p)| p.0 == k as u32 + 1);
        if !complete {
            return Err(Error::Incomplete);
        }
        let events: Vec<Event> = parts
            .iter()
            .flat_map(|&(_, _, i)| shards[i].events.iter().cloned())
            .collect();
        let repacked = shard::pack(id, event::sort_causally(events)?)?;
        let same = repacked.len() == parts.len()
            && repacked
                .iter()
                .zip(&parts)
                .all(|(r, &(_, _, i))| r.path == shards[i].path && r.content == shards[i].content);
        if !same {
            return Err(Error::NotDeterministic);
        }
    }
    Ok(Batch { shards, identities })
}

/// The first event of `batch` that `profile` refuses beyond the reference's rules (those were
/// checked when the shards were parsed), as [`Error::StrictPrivacy`] naming the shard, the
/// event, the field path, the family and the rule. [`Profile::Reference`] refuses nothing.
pub fn check_privacy(batch: &Batch, profile: Profile) -> Result<(), Error> {
    // Shards are independent: check them on all cores, report the first failing one in order.
    let first_in = |s: &Shard| {
        s.events.iter().find_map(|e| {
            profile
                .check(&e.value)
                .err()
                .map(|f| (e.event_id.clone(), f))
        })
    };
    let shards = &batch.shards;
    let found = crate::parallel::map(shards, 2, first_in);
    match shards
        .iter()
        .zip(found)
        .find_map(|(s, f)| f.map(|f| (s, f)))
    {
        Some((s, (event_id, finding))) => Err(Error::StrictPrivacy {
            path: s.path.clone(),
            event_id,
            finding,
        }),
        None => Ok(()),
    }
}

fn check_provenance(id: &ShardIdentity, x: &ExpectedProducer) -> Result<(), Error> {
    let checks: [(&'static str, String, String); 6] = [
        ("repository", x.repository.clone(), id.repository.clone()),
        ("sha", x.sha.clone(), id.sha.clone()),
        ("workflow", x.workflow.clone(), id.workflow.clone()),
        ("job", x.job.clone(), id.job.clone()),
        ("run_id", x.run_id.clone(), id.run_id.clone()),
        (
            "run_attempt",
            x.run_attempt.to_string(),
            id.run_attempt.to_string(),
        ),
    ];
    for (field, expected, actual) in checks {
        if expected != actual {
            return Err(Error::Provenance {
                field,
                expected,
                actual,
            });
        }
    }
    Ok(())
}

/// Everything a batch would add, computed against one snapshot.
struct Plan {
    manifest: Manifest,
    /// New files (path, bytes), sorted by path.
    additions: Vec<(String, Vec<u8>)>,
}

/// The transaction of runtime §8.4 against `snap`: history, bindings, payloads.
fn plan(batch: &Batch, snap: &Snapshot<'_>, requested: Option<Layout>) -> Result<Plan, Error> {
    let (layout, new_ledger) = layout::for_publication(snap, requested)?;
    let incoming: HashMap<&Digest, &Event> = batch
        .shards
        .iter()
        .flat_map(|s| &s.events)
        .map(|e| (&e.event_id, e))
        .collect();

    // 1. History: identity conflicts, then parent walks through incoming events and bindings.
    let mut durable: HashMap<Digest, Option<(Digest, Option<Digest>)>> = HashMap::new();
    let read_binding = |id: &Digest,
                        durable: &mut HashMap<Digest, Option<(Digest, Option<Digest>)>>|
     -> Result<Option<(Digest, Option<Digest>)>, Error> {
        if let Some(b) = durable.get(id) {
            return Ok(b.clone());
        }
        if durable.len() >= limits::MAX_CAUSAL_BINDINGS {
            return Err(Error::BindingLimit);
        }
        // A point lookup: O(depth) trees read, whatever the size of the ledger.
        let path = Kind::Event.path(layout, id);
        let b = match snap.read(&path, limits::MAX_BINDING_BYTES)? {
            Some(text) => {
                let text =
                    String::from_utf8(text).map_err(|_| Error::InvalidEventBinding(id.clone()))?;
                Some(
                    binding::parse_event(&text, id)
                        .ok_or_else(|| Error::InvalidEventBinding(id.clone()))?,
                )
            }
            None => None,
        };
        durable.insert(id.clone(), b.clone());
        Ok(b)
    };
    let ordered: Vec<&Event> = batch.shards.iter().flat_map(|s| &s.events).collect();
    for e in &ordered {
        if let Some((semantic, _)) = read_binding(&e.event_id, &mut durable)?
            && semantic != e.semantic_sha256
        {
            return Err(Error::IdentityConflict(e.event_id.clone()));
        }
    }
    let mut resolved: HashSet<Digest> = HashSet::new();
    for e in &ordered {
        let mut on_walk: Vec<Digest> = Vec::new();
        let mut walk_set: HashSet<Digest> = HashSet::new();
        let mut current = Some(e.event_id.clone());
        while let Some(id) = current {
            if resolved.contains(&id) {
                break;
            }
            if !walk_set.insert(id.clone()) {
                return Err(Error::HistoryCycle(id));
            }
            on_walk.push(id.clone());
            current = match incoming.get(&id) {
                Some(ev) => ev.parent_event_id.clone(),
                None => read_binding(&id, &mut durable)?.and_then(|(_, p)| p),
            };
        }
        resolved.extend(on_walk);
    }

    // 2. Bindings (runtime §8.5), exactly as `binding` writes them.
    let mut reservations: BTreeMap<String, (String, Kind)> = BTreeMap::new();
    let mut completions: BTreeMap<String, (String, Kind)> = BTreeMap::new();
    let mut sets: BTreeMap<&ShardIdentity, Vec<&Shard>> = BTreeMap::new();
    for (s, id) in batch.shards.iter().zip(&batch.identities) {
        sets.entry(id).or_default().push(s);
        for e in &s.events {
            let (path, text) = binding::event(layout, e);
            reservations.insert(path, (text, Kind::Event));
        }
    }
    for (id, shards) in &sets {
        let (path, text) = binding::producer_run(layout, id);
        reservations.insert(path, (text, Kind::ProducerRun));
        let (res_path, reservation) = binding::shard_set(layout, id, shards);
        let (comp_path, completion) = binding::completion(layout, id, &reservation);
        reservations.insert(res_path, (reservation, Kind::ShardSet));
        completions.insert(comp_path, (completion, Kind::Completion));
    }
    let mut additions: Vec<(String, Vec<u8>)> = Vec::new();
    for (path, (bytes, kind)) in reservations.iter().chain(&completions) {
        // Event bindings read in step 1 are in the tree cache; this is a lookup, not a listing.
        match snap.read(path, limits::MAX_BINDING_BYTES)? {
            Some(cur) if cur == bytes.as_bytes() => {}
            Some(_) => {
                return Err(Error::BindingConflict {
                    label: kind.label(),
                    path: path.clone(),
                });
            }
            None => additions.push((path.clone(), bytes.clone().into_bytes())),
        }
    }

    // 3. Payloads (a compacted shard path is present with its original bytes, design.md §7).
    let view = crate::view::View::new(snap);
    let mut manifest = Manifest::default();
    // Written once, with the first publication of events into a new ledger.
    if let Some(record) = layout
        .record()
        .filter(|_| new_ledger && !batch.shards.is_empty())
    {
        additions.push((layout::RECORD_PATH.to_owned(), record.into_bytes()));
    }
    for s in &batch.shards {
        match view.read(&s.path, limits::MAX_FILE_BYTES as u64)? {
            None => {
                manifest.created += 1;
                additions.push((s.path.clone(), s.content.clone().into_bytes()));
            }
            Some(cur) => {
                let cur =
                    String::from_utf8(cur).map_err(|_| Error::PayloadConflict(s.path.clone()))?;
                let equivalent = shard::existing_is_equivalent(&cur, s)
                    .map_err(|_| Error::PayloadConflict(s.path.clone()))?;
                if !equivalent {
                    return Err(Error::PayloadConflict(s.path.clone()));
                }
                manifest.unchanged += 1;
            }
        }
    }
    additions.sort_by(|a, b| a.0.cmp(&b.0));

    manifest.event_paths = batch.shards.iter().map(|s| s.path.clone()).collect();
    manifest.event_paths.sort();
    manifest.reservation_paths = reservations.into_keys().collect();
    manifest.completion_paths = completions.into_keys().collect();
    manifest.set_paths();
    if manifest.paths.len() > limits::MAX_PUBLISH_PATHS {
        return Err(Error::PathLimit);
    }
    Ok(Plan {
        manifest,
        additions,
    })
}

/// Publishes one validated batch into `store` at `options.ref_name`: one commit on the current
/// tip and one compare-and-swap, re-planned on the new tip when another publisher moved the ref.
/// The batch must first pass `options.privacy` ([`check_privacy`]); nothing is written if not.
pub fn publish_batch(
    store: &Store,
    batch: &Batch,
    options: &Options,
) -> Result<Publication, Error> {
    check_privacy(batch, options.privacy)?;
    let policy = store::Policy {
        ref_name: &options.ref_name,
        max_attempts: options.max_attempts,
        lock_wait: store::transact::HELD_LOCK_BUDGET,
    };
    let out = store::transact(store, &policy, |tip, attempts| {
        Ok(match build_on(store, batch, tip, options, attempts)? {
            Built::Unchanged(publication) => store::Step::Settled(Ok(publication)),
            Built::Commit(plan, commit) => store::Step::Commit {
                commit,
                reflog: "action-ledger publish".to_owned(),
                value: Err(plan),
            },
        })
    })
    .map_err(|e| transact_error(e, &options.ref_name))?;
    Ok(match (out.value, out.commit) {
        (Ok(publication), _) => publication,
        (Err(plan), Some(commit)) => landed(plan, commit, out.attempts),
        (Err(_), None) => unreachable!("a built commit either lands or fails"),
    })
}

/// The publication error for a write loop that did not land.
fn transact_error(e: store::TransactError<Error>, ref_name: &str) -> Error {
    match e {
        store::TransactError::Build(e) => e,
        store::TransactError::Contention { attempts, .. } => Error::Contention {
            ref_name: ref_name.to_owned(),
            attempts,
        },
        store::TransactError::RefLocked { lock, .. } => Error::RefLocked {
            ref_name: ref_name.to_owned(),
            lock,
        },
        store::TransactError::Store(e) => e.into(),
    }
}

/// Where a publication lands: the local repository's ref, or a remote repository's ref reached
/// through `git` (the local repository then only holds objects).
#[derive(Clone, Debug)]
pub enum Target {
    Local,
    Remote { url: String, ref_name: String },
}

/// Publishes one validated batch to a remote state repository (design.md §5): read the remote
/// tip, fetch it, plan and build the commit locally on it, push with a lease on that tip; when
/// the remote moved, fetch and rebuild, within `options.max_attempts`. A refusal by the server
/// (its pre-receive hook) is final. The batch must first pass `options.privacy`
/// ([`check_privacy`]); nothing is fetched or pushed if not.
pub fn publish_batch_remote(
    store: &Store,
    batch: &Batch,
    options: &Options,
    url: &str,
    remote_ref: &str,
) -> Result<Publication, Error> {
    use crate::store::remote::{self, PushOutcome};
    check_privacy(batch, options.privacy)?;
    let git_dir = store.git_dir().to_owned();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let tip = remote::remote_tip(&git_dir, url, remote_ref)?;
        if tip.is_some() {
            remote::fetch(&git_dir, url, remote_ref)?;
        }
        let (plan, commit) = match build_on(store, batch, tip, options, attempts)? {
            Built::Unchanged(publication) => return Ok(publication),
            Built::Commit(plan, commit) => (plan, commit),
        };
        match remote::push(&git_dir, url, remote_ref, commit, tip)? {
            PushOutcome::Landed => return Ok(landed(plan, commit, attempts)),
            // A push round trip (with the server's hook) costs far more than a local ref
            // update, so losers back off on that scale: 25 ms doubling to 1.6 s, plus jitter.
            PushOutcome::Moved if attempts < options.max_attempts => {
                store::transact::jittered_sleep(25 << attempts.min(6));
            }
            PushOutcome::Moved => {
                return Err(Error::Contention {
                    ref_name: format!("{url} {remote_ref}"),
                    attempts,
                });
            }
            PushOutcome::Refused(why) => return Err(Error::RemoteRefused(why)),
        }
    }
}

/// What planning a batch on one tip produced.
enum Built {
    /// Everything is already there: no commit.
    Unchanged(Publication),
    /// The plan and its commit on the tip (no ref moved yet).
    Commit(Plan, CommitId),
}

/// Plans `batch` against `tip` and, when it adds anything, writes its commit on `tip`.
fn build_on(
    store: &Store,
    batch: &Batch,
    tip: Option<CommitId>,
    options: &Options,
    attempts: u32,
) -> Result<Built, Error> {
    let plan = plan(batch, &store.snapshot(tip)?, options.layout)?;
    if plan.additions.is_empty() {
        return Ok(Built::Unchanged(Publication {
            manifest: plan.manifest,
            status: Status::Unchanged,
            commit: tip,
            attempts,
            files_written: 0,
        }));
    }
    let message = commit_message(&plan);
    let commit = store.write_commit(tip, &plan.additions, &message, &options.signature)?;
    Ok(Built::Commit(plan, commit))
}

/// The publication of a commit that landed.
fn landed(plan: Plan, commit: CommitId, attempts: u32) -> Publication {
    Publication {
        files_written: plan.additions.len(),
        manifest: plan.manifest,
        status: Status::Created,
        commit: Some(commit),
        attempts,
    }
}

fn commit_message(plan: &Plan) -> String {
    format!(
        "ledger: publish {} shard(s), {} new file(s)\n\nLedger-Manifest-Sha256: {}\n",
        plan.manifest.event_paths.len(),
        plan.additions.len(),
        Digest::of(plan.manifest.to_json())
    )
}

/// Whether any of `lines` is not JSON or holds a value the strict profile refuses, checked on
/// all cores.
fn any_strict_hit(lines: &[&String]) -> bool {
    let hit = |line: &&String| {
        canonical::parse(line).map_or(true, |v| privacy::strict::first(&v).is_some())
    };
    crate::parallel::map(lines, 64, hit).into_iter().any(|h| h)
}

/// The fast path of an unchanged replay (issue 7): when `root` is a sealed spool whose every
/// event file is, byte for byte, a line of the shards its seals name in `snap`, and those sets
/// are complete (reservation listing exactly those shards, completion marker and producer-run
/// binding with the bytes the publisher writes, an identity binding for every event), the
/// publication would add nothing: its manifest is returned without validating a single event.
/// Anything else returns `None` and the full path (which reports the precise refusal) runs; so
/// does an event the `strict` profile refuses.
///
/// Sound because published lines were validated when they were published: bytes equal to them
/// are the same events, and a spool holding exactly the published events of its sealed producers
/// packs into exactly the published shards.
fn sealed_replay(
    root: &Path,
    snap: &Snapshot<'_>,
    requested: Option<Layout>,
    privacy: Profile,
) -> Result<Option<Manifest>, Error> {
    let layout = match layout::detect(snap) {
        Ok(layout::Detected::Existing(l)) if requested.is_none_or(|r| r == l) => l,
        _ => return Ok(None),
    };
    let Ok(handle) = Root::open(root, SOURCE_LABEL) else {
        return Ok(None);
    };
    if handle.entry_kind(spool::SPOOL_DIR)? != Some(EntryKind::Dir) {
        return Ok(None);
    }
    let seal_dir = format!("{}/_finalizations", spool::SPOOL_DIR);
    let Some(seals) = handle.list_dir(&seal_dir, spool::MAX_ENTRIES)? else {
        return Ok(None);
    };
    // No seal beside shard files: not a replay of a sealed spool (read_source_shards publishes
    // the shards).
    if seals.is_empty() && handle.entry_kind(shard::EVENTS_ROOT)? == Some(EntryKind::Dir) {
        return Ok(None);
    }
    // Through the view, so a shard of a compacted month reads as its original bytes.
    let view = crate::view::View::new(snap);
    let read_snap = |path: &str| -> Result<Option<String>, Error> {
        Ok(view
            .read(path, limits::MAX_FILE_BYTES as u64)?
            .and_then(|b| String::from_utf8(b).ok()))
    };
    let mut manifest = Manifest::default();
    let mut lines: HashSet<String> = HashSet::new();
    let mut expected_events = 0usize;
    for (name, _) in seals {
        let Some(text) = handle.read_text(
            &format!("{seal_dir}/{name}"),
            seal::MAX_SEAL_BYTES,
            "action event producer finalization",
        )?
        else {
            return Ok(None);
        };
        let Some(id) = seal_identity(&text) else {
            return Ok(None);
        };
        let (res_path, _) = binding::shard_set(layout, &id.0, &[]);
        let Some(reservation) = read_snap(&res_path)? else {
            return Ok(None);
        };
        let Some(parts) = binding::parse_shard_set(&reservation, &id.0) else {
            return Ok(None);
        };
        let mut count = 0usize;
        for (path, _) in &parts {
            let Some(content) = read_snap(path)? else {
                return Ok(None);
            };
            for line in content.lines() {
                count += 1;
                lines.insert(line.to_owned());
            }
            manifest.event_paths.push(path.clone());
        }
        if count != id.1 {
            return Ok(None);
        }
        expected_events += count;
        let (comp_path, comp) = binding::completion(layout, &id.0, &reservation);
        let (run_path, run) = binding::producer_run(layout, &id.0);
        for (path, bytes) in [(&comp_path, &comp), (&run_path, &run)] {
            if read_snap(path)?.as_ref() != Some(bytes) {
                return Ok(None);
            }
        }
        manifest.reservation_paths.push(run_path);
        manifest.reservation_paths.push(res_path);
        manifest.completion_paths.push(comp_path);
    }
    // Every event file of the spool is one of those lines, and there are exactly as many.
    let spool = Spool::from_root(handle)?;
    let names = spool.event_names()?;
    if names.len() != expected_events || lines.len() != expected_events {
        return Ok(None);
    }
    for name in &names {
        let Some(id) = name
            .rsplit_once('/')
            .and_then(|(_, f)| f.strip_suffix(".json"))
            .and_then(Digest::parse)
        else {
            return Ok(None);
        };
        let text = spool.handle().read_text(
            &format!("{}/{name}", spool::SPOOL_DIR),
            spool::MAX_EVENT_FILE_BYTES,
            "action event",
        )?;
        let Some(line) = text.as_deref().and_then(|t| t.strip_suffix('\n')) else {
            return Ok(None);
        };
        let path = Kind::Event.path(layout, &id);
        if !lines.contains(line)
            || !line.contains(&format!("\"event_id\":\"{id}\""))
            || !snap.exists(&path)?
        {
            return Ok(None);
        }
        manifest.reservation_paths.push(path);
    }
    // The spool's lines are exactly `lines` now (as many distinct files as lines, each one of
    // them). The strict profile refuses such a batch even when it is present (check_privacy):
    // scan them on all cores, and let the full path say what it refuses.
    if privacy == Profile::Strict && any_strict_hit(&lines.iter().collect::<Vec<_>>()) {
        return Ok(None);
    }
    manifest.unchanged = manifest.event_paths.len();
    manifest.event_paths.sort();
    manifest.reservation_paths.sort();
    manifest.completion_paths.sort();
    manifest.set_paths();
    Ok(Some(manifest))
}

/// The shard identity and event count a seal record names (`None` unless it is a canonical
/// seal whose producer normalizes).
fn seal_identity(text: &str) -> Option<(ShardIdentity, usize)> {
    let v = canonical::parse_canonical(text.strip_suffix('\n')?).ok()?;
    let p = v.get("producer")?;
    if !seal::is_valid_seal(text, p) {
        return None;
    }
    let f = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
    let id = ShardIdentity {
        repository: f("repository")?,
        sha: f("sha")?,
        producer: f("component")?,
        workflow: f("workflow")?,
        job: f("job")?,
        run_id: f("run_id")?,
        run_attempt: p.get("run_attempt")?.as_safe_integer()?,
        partition_date: v.get("partition_date")?.as_str()?.to_owned(),
    }
    .normalized()
    .ok()?;
    let count = usize::try_from(v.get("event_count")?.as_safe_integer()?).ok()?;
    Some((id, count))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sig() -> Signature {
        Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: 1_773_100_800,
        }
    }

    fn day1(job_prefix: &str) -> std::path::PathBuf {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1/shards");
        let name = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with(job_prefix))
            .unwrap();
        dir.join(name)
    }

    #[test]
    fn replay_is_unchanged_and_makes_no_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main").unwrap();
        let options = Options::new(sig());
        let first = publish(&store, &day1("001"), &options).unwrap();
        assert_eq!(first.status, Status::Created);
        assert_eq!(first.manifest.created, 4);
        let again = publish(&store, &day1("001"), &options).unwrap();
        assert_eq!(again.status, Status::Unchanged);
        assert_eq!(again.commit, first.commit);
        assert_eq!((again.manifest.created, again.manifest.unchanged), (0, 4));
        assert_eq!(again.manifest.paths, first.manifest.paths);
    }

    /// Sources without events (an empty root, other state under `.clawsweeper-repair`, an empty
    /// spool directory, an empty `ledger/v1/events`) publish nothing and make no commit, on a
    /// new ledger (no layout record either) and on an existing one; a missing source and a file
    /// are errors that say so.
    #[test]
    fn sources_without_events_publish_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main").unwrap();
        let options = Options::new(sig());
        let empties: Vec<std::path::PathBuf> = [
            "bare",
            "other/.clawsweeper-repair/action-ledger-state",
            "spool/.clawsweeper-repair/action-events",
            // With a seal directory: on an existing ledger, the unchanged-replay fast path.
            "sealed/.clawsweeper-repair/action-events/_finalizations",
            "shards/ledger/v1/events",
        ]
        .iter()
        .map(|p| {
            std::fs::create_dir_all(dir.path().join(p)).unwrap();
            dir.path().join(p.split('/').next().unwrap())
        })
        .collect();
        let mut tip = None;
        for round in 0..2 {
            for root in &empties {
                let p = publish(&store, root, &options).unwrap();
                assert_eq!(p.status, Status::Empty, "{}", root.display());
                assert_eq!(p.manifest, Manifest::default());
                assert_eq!((p.commit, p.files_written), (tip, 0));
                assert_eq!(store.tip("refs/heads/main").unwrap(), tip, "round {round}");
            }
            tip = publish(&store, &day1("001"), &options).unwrap().commit;
        }
        let missing = dir.path().join("nowhere");
        assert!(matches!(
            publish(&store, &missing, &options),
            Err(Error::MissingSource(p)) if p == missing
        ));
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            publish(&store, &file, &options),
            Err(Error::SourceNotADirectory(p)) if p == file
        ));
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip);
    }

    /// Shard files beside a spool directory that holds no events (only its lock directories, as
    /// a finalize leaves it) are published, never silently dropped as an empty source.
    #[test]
    fn shards_beside_an_eventless_spool_are_published() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main").unwrap();
        let options = Options::new(sig());
        for (name, spool_dirs) in [
            ("locks", &["_locks"][..]),
            ("reserved", &["_locks", "_partitions", "_finalizations"][..]),
            ("bare", &[][..]),
        ] {
            let root = dir.path().join(name);
            for d in spool_dirs {
                std::fs::create_dir_all(root.join(spool::SPOOL_DIR).join(d)).unwrap();
            }
            std::fs::create_dir_all(root.join(spool::SPOOL_DIR)).unwrap();
            for file in read_source(&day1("001"), None).unwrap() {
                let path = root.join(&file.path);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, &file.content).unwrap();
            }
            let p = publish(&store, &root, &options).unwrap();
            assert_ne!(p.status, Status::Empty, "{name}: shards were dropped");
            assert!(!p.manifest.event_paths.is_empty(), "{name}");
        }
    }

    #[test]
    fn a_different_set_under_a_published_run_is_refused_and_the_ref_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main").unwrap();
        let options = Options::new(sig());
        let first = publish(&store, &day1("001"), &options).unwrap();
        // The same producer run with one event fewer: a different shard set, same identity.
        let files = read_source(&day1("001"), None).unwrap();
        let mut f = files[0].clone();
        let lines: Vec<&str> = f.content.lines().collect();
        f.content = format!("{}\n", lines[..lines.len() - 1].join("\n"));
        let batch = validate_batch(&[f], None).unwrap();
        let err = publish_batch(&store, &batch, &options).unwrap_err();
        assert!(
            matches!(
                err,
                Error::BindingConflict { .. } | Error::PayloadConflict(_)
            ),
            "{err}"
        );
        assert_eq!(store.tip("refs/heads/main").unwrap(), first.commit);
    }

    /// The day1 corpus passes the default strict profile: no event of the 24 jobs has a strict
    /// hit, and the first jobs publish with the reference's manifests
    /// (expected-import-results.json). scripts/e2e.sh publishes all 24 with the binary's
    /// default (strict) and compares the tree with expected-state/ byte for byte.
    #[test]
    fn day1_publishes_unchanged_under_strict() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1");
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(corpus.join("expected-import-results.json")).unwrap(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main").unwrap();
        let mut options = Options::new(sig());
        // The reference's manifests name reference-layout paths.
        options.layout = Some(Layout::Reference);
        assert_eq!(options.privacy, Profile::Strict);
        let jobs = expected.as_array().unwrap();
        assert_eq!(jobs.len(), 24);
        let mut events = 0;
        for (i, job) in jobs.iter().enumerate() {
            let source = corpus.join(job["source"].as_str().unwrap());
            let batch = validate_batch(&read_source(&source, None).unwrap(), None).unwrap();
            for e in batch.shards.iter().flat_map(|s| &s.events) {
                assert_eq!(privacy::strict::scan(&e.value), [], "{}", e.event_id);
                events += 1;
            }
            check_privacy(&batch, options.privacy).unwrap();
            if i >= 3 {
                continue;
            }
            let p = publish_batch(&store, &batch, &options).unwrap();
            assert_eq!(p.status, Status::Created);
            let want = canonical::to_canonical_unchecked(
                &canonical::parse(&job["result"].to_string()).unwrap(),
            );
            let got = canonical::to_canonical_unchecked(
                &canonical::parse(&p.manifest.to_json()).unwrap(),
            );
            assert_eq!(got, want, "{}", job["job"]);
        }
        assert_eq!(events, 5091);
    }

    /// A batch with one strict hit is refused before the repository is touched, whatever the
    /// rest of the batch; `--privacy reference` publishes it.
    #[test]
    fn a_strict_hit_refuses_the_batch_and_reference_publishes_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), "refs/heads/main").unwrap();
        let files = read_source(&day1("001"), None).unwrap();
        // Changed after validation: the check reads the parsed values of every event.
        let mut batch = validate_batch(&files, None).unwrap();
        let event = &mut batch.shards[1].events[0];
        let Value::Object(m) = &mut event.value else {
            panic!("an event is an object")
        };
        m.insert(
            "learning".into(),
            Value::object([(
                "signal",
                Value::str("hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh"),
            )]),
        );
        let err = publish_batch(&store, &batch, &Options::new(sig())).unwrap_err();
        let Error::StrictPrivacy {
            path,
            event_id,
            finding,
        } = &err
        else {
            panic!("{err}")
        };
        assert_eq!(path, &batch.shards[1].path);
        assert_eq!(event_id, &batch.shards[1].events[0].event_id);
        assert_eq!(
            (finding.path.as_str(), finding.family, finding.rule),
            (
                "$.learning.signal",
                "huggingface-token",
                "gitleaks:huggingface-access-token"
            )
        );
        assert_eq!(store.tip("refs/heads/main").unwrap(), None);
        assert_eq!(
            check_privacy(&batch, Profile::Reference).map_err(|e| e.to_string()),
            Ok(())
        );
        assert!(err.to_string().contains(&batch.shards[1].path), "{err}");
        // A path that holds the refused value (producer fields are part of it) is not printed.
        let withheld = Error::StrictPrivacy {
            path: "ledger/v1/events/2026/03/10/o-r/hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh.x.y/1-1-j.jsonl"
                .into(),
            event_id: event_id.clone(),
            finding: finding.clone(),
        };
        assert!(
            withheld.to_string().starts_with(
                "action event shard (path withheld: it holds the refused value): event "
            ),
            "{withheld}"
        );
        assert!(!withheld.to_string().contains("hf_ABCD"));
    }

    /// Publishers racing on one ref: every publication lands exactly once, in a linear history,
    /// whatever the interleaving (the losers re-plan on the new tip).
    #[test]
    fn concurrent_publishers_all_land_once() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("s.git");
        Store::open_or_init_bare(&repo, "refs/heads/main").unwrap();
        let jobs = ["001", "002", "003", "004", "005", "006"];
        let barrier = std::sync::Barrier::new(jobs.len());
        let results: Vec<Publication> = std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .iter()
                .map(|job| {
                    let (repo, barrier) = (&repo, &barrier);
                    scope.spawn(move || {
                        let store = Store::open(repo).unwrap();
                        let source = day1(job);
                        let files = read_source(&source, None).unwrap();
                        let batch = validate_batch(&files, None).unwrap();
                        barrier.wait();
                        publish_batch(&store, &batch, &Options::new(sig())).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(results.iter().all(|p| p.status == Status::Created));
        let store = Store::open(&repo).unwrap();
        let mut tip = store.tip("refs/heads/main").unwrap();
        let mut commits = 0;
        while let Some(c) = tip {
            commits += 1;
            let parents = store.parents(c).unwrap();
            assert!(parents.len() <= 1, "history is linear");
            tip = parents.first().copied();
        }
        assert_eq!(commits, jobs.len());
        let head = store.tip("refs/heads/main").unwrap().unwrap();
        let snap = store.snapshot(Some(head)).unwrap();
        for p in &results {
            for path in &p.manifest.paths {
                assert!(snap.exists(path).unwrap(), "{path}");
            }
        }
        assert!(
            crate::verify::verify_revision(&store, head)
                .unwrap()
                .is_clean()
        );
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn files_in(dir: &Path, keep: impl Fn(&str) -> bool) -> std::collections::BTreeSet<String> {
        walkdir::WalkDir::new(dir)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_file())
            .map(|e| e.path().strip_prefix(dir).unwrap().display().to_string())
            .filter(|p| keep(p))
            .collect()
    }

    /// Issue 7: a publication into a repository that already holds many bindings writes exactly
    /// the trees on its own paths (no other tree is rewritten) and all its objects as one pack
    /// (no loose object), which Git reads back.
    #[test]
    fn a_publication_writes_one_pack_and_only_the_trees_on_its_paths() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("s.git");
        let store = Store::open_or_init_bare(&repo, "refs/heads/main").unwrap();
        let options = Options::new(sig());
        for job in ["001", "002", "003", "004", "005", "006", "007", "008"] {
            publish(&store, &day1(job), &options).unwrap();
        }
        let objects = repo.join("objects");
        let packs_before = files_in(&objects, |p| p.ends_with(".pack"));
        let loose_before = files_in(&objects, |p| {
            !p.starts_with("pack") && !p.starts_with("info")
        });
        let base = store.tip("refs/heads/main").unwrap().unwrap();
        let p = publish(&store, &day1("009"), &options).unwrap();
        let new = p.commit.unwrap();
        assert_eq!(p.status, Status::Created);

        // One new pack, no new loose object, and Git can read the pack.
        let packs: Vec<String> = files_in(&objects, |p| p.ends_with(".pack"))
            .difference(&packs_before)
            .cloned()
            .collect();
        assert_eq!(packs.len(), 1, "{packs:?}");
        assert_eq!(
            files_in(&objects, |p| !p.starts_with("pack")
                && !p.starts_with("info")),
            loose_before
        );
        let index = objects.join(packs[0].replace(".pack", ".idx"));
        git(&repo, &["verify-pack", index.to_str().unwrap()]);
        git(&repo, &["fsck", "--strict"]);

        // The new trees are exactly the directories on the added paths (and the root).
        let added: Vec<String> = git(
            &repo,
            &["diff", "--name-only", &base.to_hex(), &new.to_hex()],
        )
        .lines()
        .map(str::to_owned)
        .collect();
        assert_eq!(added.len(), p.files_written);
        let mut expected_dirs: std::collections::BTreeSet<String> = [String::new()].into();
        for path in &added {
            let mut dir = path.as_str();
            while let Some((parent, _)) = dir.rsplit_once('/') {
                expected_dirs.insert(parent.to_owned());
                dir = parent;
            }
        }
        let new_objects = git(
            &repo,
            &[
                "rev-list",
                "--objects",
                &new.to_hex(),
                "--not",
                &base.to_hex(),
            ],
        );
        let mut new_trees = std::collections::BTreeSet::new();
        for line in new_objects.lines() {
            let (id, path) = line.split_once(' ').unwrap_or((line, ""));
            let kind = git(&repo, &["cat-file", "-t", id]);
            if kind.trim() == "tree" {
                new_trees.insert(path.to_owned());
            }
        }
        assert_eq!(new_trees, expected_dirs);
        // In the fanout layout no tree on those paths is large.
        let widest = expected_dirs
            .iter()
            .map(|d| {
                let spec = format!("{}:{d}", new.to_hex());
                git(&repo, &["ls-tree", &spec]).lines().count()
            })
            .max()
            .unwrap();
        assert!(widest <= 256, "a rewritten tree has {widest} entries");
    }
}
