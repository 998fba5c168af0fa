//! `project`: deterministic views folded from the ledger's events, for the readers the
//! reference's consumers serve (a lane status board, the comment router's command state, the
//! marker-backed review comment, notification delivery, the evidence graph).
//!
//! A view is a function of the **set** of events it folds: every view keys its entries by
//! values the events carry (lane, operation, subject, notification), and where it keeps one
//! event's value over another's it keeps the one of the greatest [`Rank`] (`occurred_at`, then
//! `phase_seq`, then `event_id`: a total order on the events of a ledger), never the one seen
//! last. So the order of publication, the grouping of events into shards, and whether a shard
//! is hot or compacted into a segment change nothing: the same events give the same bytes.
//!
//! # The fold driver
//!
//! [`fold_revision`] reads the events of a revision once, through [`crate::log::stream`] (so
//! every shard passes `verify`'s checks of a shard before any of its events is folded, and hot
//! shards and segments read alike), and feeds each to the view. [`fold_increment`] brings a
//! saved view up to date: it folds only the shards the ledger gained between the view's
//! checkpoint (the commit it was folded at) and the new revision, found by a tree diff
//! ([`crate::log::added_shards`], which reads only the subtrees that differ), after checking
//! that the new revision descends from the checkpoint. Because every view merges exactly
//! (counts add, kept sets are the greatest of a total order), the increment gives the same
//! bytes as a full refold.
//!
//! # Bounds
//!
//! Every entry of a view is bounded by one limit, [`Limits::entries`] (`--limit`): the newest
//! history entries of a subject, the attempt ids of an operation, the deliveries of a
//! notification, the claims of a subject in the evidence graph. What an entry left out is
//! counted beside it (`truncated`, or a `*_truncated` flag) and totalled in the view's
//! `truncated` member. The number of entries follows the number of distinct keys (lanes and
//! operations, commands, subjects, notifications): a view cannot evict a whole key, because an
//! evicted key that gains an event later could not be folded the same way incrementally as in
//! full. Folding only reads: the ledger is never written.
//!
//! # The document
//!
//! Every view is written as one JSON document (pretty-printed, a final newline):
//!
//! ```text
//! {
//!   "schema": "action-ledger.project.<view>.v1",   the view and its version (see below)
//!   "revision": "<40 hex>",                         the commit folded at (the checkpoint)
//!   "filter": {…},                                  the event filter of the fold
//!   "limits": {"entries": N},
//!   "events": N,                                    events the filter selected and the
//!                                                   fold read (a view skips other families)
//!   "truncated": N,                                 entries left out, over the whole view
//!   "view": {…}                                     the view's own shape (one file per view)
//! }
//! ```
//!
//! Maps are sorted by key. The `schema` string names the view's version: a reader refuses a
//! `--from` file of another schema, filter or limit (refold instead). A view may gain members
//! within a version; removing or retyping one, or changing what it means, is a new version.
//! (Any change of members is a new version of the saved form below, whose members have no
//! names.)
//!
//! # The saved form
//!
//! `--save` writes the same document in the compact binary form of [`saved`] (saved form v2:
//! a version line, the members in order without names, a CRC-32), which is what `--from` reads
//! back at a fraction of the JSON's cost; `--from` also reads the JSON document itself (saved
//! form v1, what `--save` wrote before). A saved file of another version, damaged, or that
//! does not decode is refused ([`Error::Saved`]: the file, the field, the rule), and nothing is
//! written: fold again without `--from`.
//!
//! | View | `schema` | Keyed by | Module |
//! |---|---|---|---|
//! | `status` | `action-ledger.project.status.v1` | lane (producer `repository:workflow/job`), then `operation_id` | [`status`] |
//! | `commands` | `action-ledger.project.commands.v1` | the command's `operation_id` | [`commands`] |
//! | `review-history` | `action-ledger.project.review-history.v1` | subject `owner/repo#N` | [`review_history`] |
//! | `notifications` | `action-ledger.project.notifications.v1` | `repository/subject_id`, or `crabfleet/<source event id>` | [`notifications`] |
//! | `evidence` | `action-ledger.project.evidence.v1` | subject, then claim event id | [`evidence`] |

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::canonical::Value;
use crate::log;
use crate::store::{self, CommitId, Store};
use crate::view::View;

pub mod commands;
pub mod evidence;
pub mod notifications;
pub mod review_history;
pub mod saved;
pub mod status;
#[cfg(test)]
mod tests;

/// Why a view could not be folded or brought up to date.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the events failed (a damaged shard, an unreadable repository); the inner error
    /// names the shard or object.
    #[error(transparent)]
    Log(#[from] log::Error),
    /// The Git repository could not be read.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A `--from` or `--compare` file is not a view document.
    #[error("{file}: {reason}")]
    Document {
        /// The file as the caller named it.
        file: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `--from` file in the saved form ([`saved`]) that cannot be read: another version of
    /// the form, a damaged file, or a member that breaks the form's rules. Nothing is written:
    /// fold the view again without `--from`.
    #[error("{file}: {field}: {rule}: fold the view again without --from")]
    Saved {
        /// The file as the caller named it.
        file: String,
        /// Where: `version line`, `checksum`, `body`, or a member path by position
        /// (`member [3][0]`).
        field: String,
        /// The rule it breaks.
        rule: String,
    },
    /// Writing the document out failed.
    #[error("writing the view: {0}")]
    Write(#[source] std::io::Error),
    /// The saved view was folded at a commit the new revision does not descend from (the
    /// ledger's history was rewritten, or another ledger): refold without `--from`.
    #[error(
        "{file} was folded at {checkpoint}, which {revision} does not descend from: fold the view again without --from"
    )]
    NotDescendant {
        /// The saved file.
        file: String,
        /// The saved checkpoint.
        checkpoint: String,
        /// The revision to fold to.
        revision: String,
    },
}

/// The bounds of a view (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Entries kept per key: history entries per subject, attempt ids per operation,
    /// deliveries per notification, claims per subject. At least 1.
    pub entries: u32,
}

/// The default [`Limits::entries`].
pub const DEFAULT_ENTRIES: u32 = 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: DEFAULT_ENTRIES,
        }
    }
}

/// The order in which one event's value wins over another's: `occurred_at` (ISO-8601 UTC with
/// milliseconds, so text order is time order), then `phase_seq`, then `event_id`, which no two
/// events of a ledger share. Serialized as `{"at","seq","event_id"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Rank {
    /// `occurred_at`.
    pub at: String,
    /// `phase_seq`.
    pub seq: u64,
    /// `event_id`.
    pub event_id: String,
}

/// The fields of an event the views read, borrowed from its record.
#[derive(Debug)]
pub struct Ev<'a> {
    /// The whole record.
    pub record: &'a Value,
    /// Its rank.
    pub rank: Rank,
    /// `event_type`.
    pub event_type: &'a str,
    /// `operation_id`.
    pub operation_id: &'a str,
    /// `attempt_id`.
    pub attempt_id: &'a str,
    /// `parent_event_id` (`None` for `null`).
    pub parent: Option<&'a str>,
    /// `action.status`.
    pub status: &'a str,
    /// `action.reason_code`.
    pub reason: Option<&'a str>,
}

impl<'a> Ev<'a> {
    /// The fields of `record` (a valid event: `log` hands out only those).
    pub fn of(record: &'a Value) -> Ev<'a> {
        let text = |k: &str| record.get(k).and_then(Value::as_str).unwrap_or("");
        let action = |k: &str| {
            record
                .get("action")
                .and_then(|a| a.get(k))
                .and_then(Value::as_str)
        };
        Ev {
            record,
            rank: Rank {
                at: text("occurred_at").to_owned(),
                seq: record
                    .get("phase_seq")
                    .and_then(Value::as_safe_integer)
                    .map_or(0, |n| n.max(0) as u64),
                event_id: text("event_id").to_owned(),
            },
            event_type: text("event_type"),
            operation_id: text("operation_id"),
            attempt_id: text("attempt_id"),
            parent: record.get("parent_event_id").and_then(Value::as_str),
            status: action("status").unwrap_or(""),
            reason: action("reason_code"),
        }
    }

    /// A text member at `path`.
    pub fn text(&self, path: &[&str]) -> Option<&'a str> {
        let mut cur = self.record;
        for k in path {
            cur = cur.get(k)?;
        }
        cur.as_str()
    }

    /// `attributes.<key>` as text: a string as it is, a number or boolean in canonical JSON.
    pub fn attribute(&self, key: &str) -> Option<String> {
        match self.record.get("attributes")?.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Null | Value::Array(_) | Value::Object(_) => None,
            other => Some(crate::canonical::to_canonical_unchecked(other)),
        }
    }

    /// `subject.number`.
    pub fn number(&self) -> Option<i64> {
        self.record.get("subject")?.get("number")?.as_safe_integer()
    }

    /// The subject as `owner/repo#N`, or `owner/repo:<kind>` without a number (the
    /// reference's CrabFleet message forms).
    pub fn subject(&self) -> String {
        let repo = self.text(&["subject", "repository"]).unwrap_or("");
        match self.number() {
            Some(n) => format!("{repo}#{n}"),
            None => format!("{repo}:{}", self.text(&["subject", "kind"]).unwrap_or("")),
        }
    }

    /// The event's family: the part of `event_type` before the first dot.
    pub fn family(&self) -> &'a str {
        self.event_type.split('.').next().unwrap_or("")
    }
}

/// Statuses that end an operation (the rest are open: started, in_progress, queued, …).
pub const TERMINAL_STATUSES: &[&str] = &[
    "blocked",
    "cached",
    "cancelled",
    "completed",
    "executed",
    "failed",
    "published",
    "released",
    "sent",
    "skipped",
    "unchanged",
    "yielded",
];

/// Milliseconds from `from` to `to` (event timestamps), `None` when either is not one.
pub fn millis_between(from: &str, to: &str) -> Option<i64> {
    let (a, b) = (
        crate::time::Timestamp::from_iso(from)?,
        crate::time::Timestamp::from_iso(to)?,
    );
    Some(b.millis() - a.millis())
}

/// Keeps the greatest `cap` items of `items` (by their rank), sorted ascending; returns how
/// many were dropped.
pub fn keep_greatest<T>(items: &mut Vec<T>, cap: u32, rank: impl Fn(&T) -> &Rank) -> u64 {
    items.sort_by(|a, b| rank(a).cmp(rank(b)));
    let cap = cap.max(1) as usize;
    let over = items.len().saturating_sub(cap);
    items.drain(..over);
    over as u64
}

/// A value with the rank of the event that gave it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ranked {
    /// The value.
    pub value: String,
    /// The rank of its event.
    pub rank: Rank,
}

/// Keeps `value` of rank `rank` in `slot` when it outranks what is there.
pub fn keep(slot: &mut Option<Ranked>, value: Option<&str>, rank: &Rank) {
    if let Some(value) = value
        && slot.as_ref().is_none_or(|s| *rank > s.rank)
    {
        *slot = Some(Ranked {
            value: value.to_owned(),
            rank: rank.clone(),
        });
    }
}

/// A bounded set of ids: the smallest `cap` of those seen, and whether there were more.
/// Union then cut is exact, so it merges in any order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdSet {
    /// The smallest ids, sorted, unique.
    pub ids: Vec<String>,
    /// More ids were seen than are kept.
    pub truncated: bool,
}

impl IdSet {
    /// Adds `id`, keeping at most `cap`.
    pub fn add(&mut self, id: &str, cap: u32) {
        if let Err(at) = self.ids.binary_search_by(|x| x.as_str().cmp(id)) {
            // Most sets hold one or two ids: grow one at a time rather than by doubling, as a
            // view keeps one set per key.
            self.ids.reserve_exact(1);
            self.ids.insert(at, id.to_owned());
            if self.ids.len() > cap.max(1) as usize {
                self.ids.pop();
                self.truncated = true;
            }
        }
    }
}

/// One view: its state is its output, so that a saved view can be brought up to date.
pub trait Projection: Default + Serialize + DeserializeOwned {
    /// The view's name on the command line (`status`, …).
    const NAME: &'static str;
    /// The document's `schema` string.
    const SCHEMA: &'static str;
    /// Folds one event in (in any order: see the module docs).
    fn add(&mut self, event: &Ev<'_>, limits: &Limits);
    /// Entries left out by the bounds, over the whole view.
    fn truncated(&self) -> u64;
    /// Brings derived members up to date before the view is written (default: nothing).
    fn finish(&mut self) {}
    /// One readable line per entry, in key order (the CLI's default output).
    fn lines(&self) -> Vec<String>;
    /// [`Self::lines`], each ending in a newline, appended to `out` (a view of many entries
    /// overrides it to write them without a string per line).
    fn write_lines(&self, out: &mut String) {
        for line in self.lines() {
            out.push_str(&line);
            out.push('\n');
        }
    }
}

/// `status`, or `status/reason` when the reason says more (as `log` shows them).
pub fn with_reason(status: &str, reason: Option<&str>) -> String {
    match reason {
        Some(r) if r != status => format!("{status}/{r}"),
        _ => status.to_owned(),
    }
}

/// The first 12 characters of an id (as `log` shows ids).
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The event filter of a fold as its document records it (the `log` filter's criteria).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterDoc {
    /// `subject.repository`.
    pub repository: Option<String>,
    /// `subject.number`.
    pub number: Option<i64>,
    /// `event_type` is one of these (none: any).
    pub event_types: Vec<String>,
    /// `producer.component`.
    pub producer: Option<String>,
    /// Partition date on or after (`YYYY-MM-DD`).
    pub since: Option<String>,
    /// Partition date on or before (`YYYY-MM-DD`).
    pub until: Option<String>,
}

impl FilterDoc {
    /// The record of `filter` (its operation and attempt prefixes are not view filters: they
    /// are left out).
    pub fn of(filter: &log::Filter) -> FilterDoc {
        let date = |d: &Option<crate::time::CalendarDate>| d.map(|d| d.to_string());
        let mut event_types = filter.event_types.clone();
        event_types.sort();
        event_types.dedup();
        FilterDoc {
            repository: filter.repository.clone(),
            number: filter.number,
            event_types,
            producer: filter.producer.clone(),
            since: date(&filter.since),
            until: date(&filter.until),
        }
    }

    /// The `log` filter this records.
    pub fn to_filter(&self) -> log::Filter {
        let date = |d: &Option<String>| d.as_deref().and_then(crate::time::CalendarDate::parse);
        log::Filter {
            repository: self.repository.clone(),
            number: self.number,
            event_types: self.event_types.clone(),
            producer: self.producer.clone(),
            since: date(&self.since),
            until: date(&self.until),
            ..log::Filter::default()
        }
    }
}

/// A view with its checkpoint: the document of the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Document<P> {
    /// [`Projection::SCHEMA`].
    pub schema: String,
    /// The commit folded at, 40 hex.
    pub revision: String,
    /// The event filter.
    pub filter: FilterDoc,
    /// The bounds.
    pub limits: Limits,
    /// Events folded.
    pub events: u64,
    /// Entries left out, over the whole view ([`Projection::truncated`]).
    pub truncated: u64,
    /// The view.
    pub view: P,
}

impl<P: Projection> Document<P> {
    /// An empty view of `filter` and `limits`, at no revision yet.
    pub fn new(filter: FilterDoc, limits: Limits) -> Self {
        Document {
            schema: P::SCHEMA.to_owned(),
            revision: String::new(),
            filter,
            limits,
            events: 0,
            truncated: 0,
            view: P::default(),
        }
    }

    /// Folds one event record in.
    pub fn add(&mut self, record: &Value) {
        self.view.add(&Ev::of(record), &self.limits);
        self.events += 1;
    }

    /// Brings the view's derived members and `truncated` up to date (as [`Self::to_json`]
    /// does before writing).
    pub fn finish(&mut self) {
        self.view.finish();
        self.truncated = self.view.truncated();
    }

    /// The document's bytes: pretty JSON, a final newline (with `truncated` brought up to
    /// date).
    pub fn to_json(&mut self) -> String {
        let mut bytes = Vec::new();
        self.write_json(&mut bytes)
            .expect("a Vec takes every write");
        String::from_utf8(bytes).expect("serde_json writes UTF-8")
    }

    /// Writes [`Self::to_json`]'s bytes to `out` as they are serialized, without holding the
    /// whole document in memory.
    ///
    /// # Errors
    /// The writer's.
    pub fn write_json(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        use std::io::Write as _;
        self.finish();
        // A buffer of a concrete type: serde_json writes a few bytes at a time, which through
        // `dyn Write` would each be a call through the vtable.
        let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
        serde_json::to_writer_pretty(&mut out, self).map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// Writes the view in the saved form ([`saved`]) to `out` (with `truncated` brought up
    /// to date): what `--save` writes, and [`Self::read_saved`] reads.
    ///
    /// # Errors
    /// The writer's.
    pub fn write_saved(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.finish();
        saved::write(self, out)
    }

    /// Reads a saved view: the saved form ([`saved`]), or the JSON document (saved form v1,
    /// as [`Self::parse`]); `file` names it in errors.
    ///
    /// # Errors
    /// [`Error::Document`] when it is a view of another schema, or not a saved view;
    /// [`Error::Saved`] when it is in a saved form this version does not read, damaged, or
    /// does not decode.
    pub fn read_saved(bytes: &[u8], file: &str) -> Result<Self, Error> {
        if !saved::is_binary(bytes) {
            let text = std::str::from_utf8(bytes).map_err(|e| Error::Document {
                file: file.to_owned(),
                reason: format!("not JSON, nor a saved view: {e}"),
            })?;
            return Self::parse(text, file);
        }
        let refused = |r: saved::Refusal| Error::Saved {
            file: file.to_owned(),
            field: r.field,
            rule: r.rule,
        };
        // The schema first (the first member), so that another view's file is named as such.
        #[derive(serde::Deserialize)]
        struct Head {
            schema: String,
        }
        // The version line and the checksum once, for both reads.
        let body = saved::body(bytes).map_err(refused)?;
        let head: Head = saved::decode_prefix(body).map_err(refused)?;
        if head.schema != P::SCHEMA {
            return Err(Error::Document {
                file: file.to_owned(),
                reason: format!(
                    "its schema is {}, not {}: save it with `project {}`",
                    head.schema,
                    P::SCHEMA,
                    P::NAME
                ),
            });
        }
        saved::decode_all(body).map_err(refused)
    }

    /// Reads a saved document; `file` names it in errors.
    ///
    /// # Errors
    /// [`Error::Document`] when it is not JSON of this view's schema.
    pub fn parse(text: &str, file: &str) -> Result<Self, Error> {
        let bad = |reason: String| Error::Document {
            file: file.to_owned(),
            reason,
        };
        // The document straight into its types, never as a tree of JSON values, which cost
        // several times the view's own memory and most of an increment's time; its schema is
        // checked after. Only a document that does not read is read again for its schema
        // alone, to say which view it is (a pass over the whole text: not paid when it reads).
        let schema_error = |found: &str| {
            bad(format!(
                "its schema is {found}, not {}: save it with `project {}`",
                P::SCHEMA,
                P::NAME
            ))
        };
        let full_error = match serde_json::from_str::<Self>(text) {
            Ok(doc) if doc.schema == P::SCHEMA => return Ok(doc),
            Ok(doc) => return Err(schema_error(&doc.schema)),
            Err(e) => e,
        };
        #[derive(serde::Deserialize)]
        struct Head {
            schema: Option<String>,
        }
        let schema = match serde_json::from_str::<Head>(text) {
            Ok(head) => head.schema,
            Err(e) if e.is_syntax() || e.is_eof() => return Err(bad(format!("not JSON: {e}"))),
            // Not an object, or a schema that is not a string.
            Err(_) => None,
        };
        match schema {
            Some(s) if s == P::SCHEMA => Err(bad(format!("not a {} view: {full_error}", P::NAME))),
            Some(s) => Err(schema_error(&s)),
            None => Err(bad("it has no `schema` member: not a saved view".into())),
        }
    }
}

/// Folds every event of `commit` that `filter` selects into a new view. The filter is applied
/// as the document records it ([`FilterDoc::of`]: the operation and attempt prefixes of a
/// `log` filter are not view filters and are ignored), so that an increment of the saved view
/// selects exactly as the full fold did.
///
/// # Errors
/// [`Error::Log`] for a damaged shard or compaction, [`Error::Store`].
pub fn fold_revision<P: Projection>(
    store: &Store,
    commit: CommitId,
    filter: &log::Filter,
    limits: Limits,
) -> Result<Document<P>, Error> {
    let mut doc = Document::<P>::new(FilterDoc::of(filter), limits);
    let filter = doc.filter.to_filter();
    let snap = store.snapshot(Some(commit))?;
    let view = View::new(&snap);
    log::stream(&view, &filter, &mut |e| {
        doc.add(e.value);
        ControlFlow::Continue(())
    })?;
    doc.revision = commit.to_hex();
    Ok(doc)
}

/// Brings `doc` (saved at its `revision`, read from `file`) up to `commit`, folding only the
/// shards added in between ([`log::added_shards`]); a `doc` already at `commit` is unchanged.
///
/// # Errors
/// [`Error::Document`] when its revision is not a commit id of this repository,
/// [`Error::NotDescendant`], [`Error::Log`], [`Error::Store`].
pub fn fold_increment<P: Projection>(
    store: &Store,
    mut doc: Document<P>,
    file: &str,
    commit: CommitId,
) -> Result<Document<P>, Error> {
    let checkpoint = CommitId::from_hex(&doc.revision).map_err(|_| Error::Document {
        file: file.to_owned(),
        reason: format!("its revision {:?} is not a commit id", doc.revision),
    })?;
    if checkpoint == commit {
        return Ok(doc);
    }
    let descends = match store.is_ancestor(checkpoint, commit) {
        Ok(d) => d,
        Err(store::Error::MissingObject { .. }) => false,
        Err(e) => return Err(e.into()),
    };
    if !descends {
        return Err(Error::NotDescendant {
            file: file.to_owned(),
            checkpoint: doc.revision.clone(),
            revision: commit.to_hex(),
        });
    }
    let paths = log::added_shards(store, checkpoint, commit)?;
    let filter = doc.filter.to_filter();
    let snap = store.snapshot(Some(commit))?;
    let view = View::new(&snap);
    log::stream_paths(&view, &paths, &filter, &mut |e| {
        doc.add(e.value);
        ControlFlow::Continue(())
    })?;
    doc.revision = commit.to_hex();
    Ok(doc)
}

/// One difference between a legacy projection and the fold: a JSON path
/// (`$.view.lanes["x"].status`) and the two values (`None`: absent on that side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// Where, as a JSON path from the document's root.
    pub path: String,
    /// The legacy file's value, compact JSON.
    pub legacy: Option<String>,
    /// The fold's value, compact JSON.
    pub fold: Option<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
        write!(
            f,
            "{}: legacy {}, fold {}",
            self.path,
            side(&self.legacy),
            side(&self.fold)
        )
    }
}

/// The differences between a legacy projection and the fold (a [`Document`] as JSON), in path
/// order. A legacy document (an object with a `schema` member) is compared whole, except the
/// members that name the fold itself (`revision`, `events`): it is compared for what it says
/// about the ledger, not for when it was written. A legacy file without `schema` is a bare view
/// and is compared with the fold's `view` member (paths then start at `$.view`).
pub fn compare(legacy: &serde_json::Value, fold: &serde_json::Value) -> Vec<Difference> {
    let mut out = Vec::new();
    match (legacy.get("schema"), fold.get("view")) {
        (None, Some(view)) if legacy.is_object() => {
            diff_values("$.view", legacy, view, false, &mut out);
        }
        _ => diff_values("$", legacy, fold, true, &mut out),
    }
    out
}

fn diff_values(
    path: &str,
    a: &serde_json::Value,
    b: &serde_json::Value,
    root: bool,
    out: &mut Vec<Difference>,
) {
    use serde_json::Value as J;
    let show = |v: &J| serde_json::to_string(v).expect("JSON serializes");
    let member = |k: &str| {
        if !k.is_empty() && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            format!("{path}.{k}")
        } else {
            format!("{path}[{}]", show(&J::String(k.to_owned())))
        }
    };
    match (a, b) {
        (J::Object(x), J::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                if root && (k == "revision" || k == "events") {
                    continue;
                }
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff_values(&member(k), p, q, false, out),
                    (p, q) => out.push(Difference {
                        path: member(k),
                        legacy: p.map(show),
                        fold: q.map(show),
                    }),
                }
            }
        }
        (J::Array(x), J::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let at = format!("{path}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(p), Some(q)) => diff_values(&at, p, q, false, out),
                    (p, q) => out.push(Difference {
                        path: at,
                        legacy: p.map(show),
                        fold: q.map(show),
                    }),
                }
            }
        }
        // Numbers compare by value (`1.0` is `1`); everything else by its JSON.
        (J::Number(x), J::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a == b => {}
        _ => out.push(Difference {
            path: path.to_owned(),
            legacy: Some(show(a)),
            fold: Some(show(b)),
        }),
    }
}

/// The views, by name, for callers that pick one at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// [`status::Status`].
    Status,
    /// [`commands::Commands`].
    Commands,
    /// [`review_history::ReviewHistory`].
    ReviewHistory,
    /// [`notifications::Notifications`].
    Notifications,
    /// [`evidence::Evidence`].
    Evidence,
}

impl Kind {
    /// Every view, in the order of the docs.
    pub const ALL: [Kind; 5] = [
        Kind::Status,
        Kind::Commands,
        Kind::ReviewHistory,
        Kind::Notifications,
        Kind::Evidence,
    ];

    /// The view's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Status => status::Status::NAME,
            Kind::Commands => commands::Commands::NAME,
            Kind::ReviewHistory => review_history::ReviewHistory::NAME,
            Kind::Notifications => notifications::Notifications::NAME,
            Kind::Evidence => evidence::Evidence::NAME,
        }
    }

    /// The view named `name`.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What a request asks of [`project`]: the view, where to fold from, and the renderings.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// The view.
    pub kind: Kind,
    /// The revision to fold at.
    pub commit: CommitId,
    /// The event filter (ignored with `from`: the saved view's own is used).
    pub filter: &'a log::Filter,
    /// The bounds (ignored with `from`).
    pub limits: Limits,
    /// A saved view to bring up to date: its file name and bytes ([`Document::read_saved`]).
    pub from: Option<(&'a str, &'a [u8])>,
}

/// A folded view in the forms the CLI writes (a form not asked for in [`Forms`] is empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The document ([`Document::to_json`]).
    pub json: String,
    /// One readable line per entry ([`Projection::lines`]), each ending in a newline.
    pub text: String,
    /// The view's Markdown (review-history: one marker-backed comment body per subject).
    pub markdown: Option<String>,
    /// The view's Graphviz DOT (evidence).
    pub dot: Option<String>,
    /// Events folded by this run (all of them, or only the increment's).
    pub folded: u64,
    /// The document's `events`: every event of the view, a saved view's included.
    pub events: u64,
    /// The document's `truncated`.
    pub truncated: u64,
}

/// Which forms [`project_forms`] renders: a large view's forms cost memory in proportion to
/// it, so a caller asks only for those it writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forms {
    /// [`Rendered::json`].
    pub json: bool,
    /// [`Rendered::text`].
    pub text: bool,
    /// [`Rendered::markdown`] (review-history only).
    pub markdown: bool,
    /// [`Rendered::dot`] (evidence only).
    pub dot: bool,
}

impl Forms {
    /// Every form.
    pub const ALL: Forms = Forms {
        json: true,
        text: true,
        markdown: true,
        dot: true,
    };
}

/// Folds (or brings up to date) the view of `request` and renders it in every form.
///
/// # Errors
/// As [`project_forms`].
pub fn project(store: &Store, request: &Request<'_>) -> Result<Rendered, Error> {
    project_forms(store, request, Forms::ALL)
}

/// Folds (or brings up to date) the view of `request` and renders the `forms` asked for.
///
/// # Errors
/// As [`fold_revision`] and [`fold_increment`]; [`Error::Document`] for a `from` file that is
/// not a saved view of this kind.
pub fn project_forms(
    store: &Store,
    request: &Request<'_>,
    forms: Forms,
) -> Result<Rendered, Error> {
    dispatch(store, request, forms, None, None)
}

/// As [`project_forms`], but the document ([`Forms::json`]) is written to `json` as it is
/// serialized, and [`Rendered::json`] is left empty: the document of a large view need not be
/// held in memory beside the view.
///
/// # Errors
/// As [`project_forms`]; [`Error::Write`] when `json` fails.
pub fn project_into(
    store: &Store,
    request: &Request<'_>,
    forms: Forms,
    json: &mut dyn std::io::Write,
) -> Result<Rendered, Error> {
    dispatch(store, request, forms, Some(json), None)
}

/// As [`project_into`] (the document to `json` when given, else as [`project_forms`]), and
/// the view in the saved form ([`Document::write_saved`]) to `saved`, before the document.
///
/// # Errors
/// As [`project_forms`]; [`Error::Write`] when `saved` or `json` fails.
pub fn project_saving(
    store: &Store,
    request: &Request<'_>,
    forms: Forms,
    json: Option<&mut dyn std::io::Write>,
    saved: &mut dyn std::io::Write,
) -> Result<Rendered, Error> {
    dispatch(store, request, forms, json, Some(saved))
}

fn dispatch(
    store: &Store,
    request: &Request<'_>,
    forms: Forms,
    out: Option<&mut dyn std::io::Write>,
    saved: Option<&mut dyn std::io::Write>,
) -> Result<Rendered, Error> {
    let (md, dot) = (forms.markdown, forms.dot);
    match request.kind {
        Kind::Status => run::<status::Status>(store, request, forms, out, saved, |_| (None, None)),
        Kind::Commands => {
            run::<commands::Commands>(store, request, forms, out, saved, |_| (None, None))
        }
        Kind::ReviewHistory => {
            run::<review_history::ReviewHistory>(store, request, forms, out, saved, |v| {
                (md.then(|| v.markdown()), None)
            })
        }
        Kind::Notifications => {
            run::<notifications::Notifications>(store, request, forms, out, saved, |_| (None, None))
        }
        Kind::Evidence => run::<evidence::Evidence>(store, request, forms, out, saved, |v| {
            (None, dot.then(|| v.dot()))
        }),
    }
}

fn run<P: Projection>(
    store: &Store,
    request: &Request<'_>,
    forms: Forms,
    out: Option<&mut dyn std::io::Write>,
    saved: Option<&mut dyn std::io::Write>,
    extra: impl Fn(&P) -> (Option<String>, Option<String>),
) -> Result<Rendered, Error> {
    let (mut doc, before) = match request.from {
        Some((file, bytes)) => {
            let saved = Document::<P>::read_saved(bytes, file)?;
            let before = saved.events;
            (fold_increment(store, saved, file, request.commit)?, before)
        }
        None => (
            fold_revision::<P>(store, request.commit, request.filter, request.limits)?,
            0,
        ),
    };
    if let Some(saved) = saved {
        doc.write_saved(saved).map_err(Error::Write)?;
    }
    let json = match out {
        Some(out) if forms.json => {
            doc.write_json(out).map_err(Error::Write)?;
            String::new()
        }
        _ if forms.json => doc.to_json(),
        _ => {
            doc.finish();
            String::new()
        }
    };
    let (markdown, dot) = extra(&doc.view);
    let text = if forms.text {
        let mut text = String::new();
        doc.view.write_lines(&mut text);
        text
    } else {
        String::new()
    };
    Ok(Rendered {
        folded: doc.events - before,
        events: doc.events,
        truncated: doc.truncated,
        json,
        text,
        markdown,
        dot,
    })
}

/// A map entry, created empty when absent.
pub(crate) fn slot<'m, T: Default>(map: &'m mut BTreeMap<String, T>, key: &str) -> &'m mut T {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), T::default());
    }
    map.get_mut(key).expect("just inserted")
}
