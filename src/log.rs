//! `log`: the ledger's events in one canonical order, from hot shards and segments alike.
//!
//! Order: partition date, then shard path, then line order. Shard paths start with
//! `ledger/v1/events/YYYY/MM/DD/`, so this is the byte order of the shard paths, and a compacted
//! shard sorts as its original path; every shard is read through [`crate::view`] (checked reads),
//! so the output is the same before and after compaction.
//!
//! Every shard goes through `verify`'s own checks before any of its events is handed out
//! ([`crate::verify::LogGate`]): on its own ([`crate::verify::check_shard`]: size cap, UTF-8,
//! canonical lines and newline rules, valid events in causal order, one producer), its entry
//! (a plain `100644` file), and its set against the ledger (the path its identity gives, complete
//! and deterministically packed parts, the reservation, completion marker, producer-run and
//! event bindings the publisher writes). A shard that `verify` would refuse stops the log with
//! [`Error::Shard`], naming the shard and the rule, and none of its events is handed out. The
//! shard checks run on all cores, a batch of whole sets at a time, while the events of the batch
//! before are handed out in order.
//!
//! Memory: the paths of the hot shards, one month's manifest, a few segments and a batch of
//! shards (about 1 MiB) at a time; events are handed to the caller one by one and not kept.
//!
//! [`stream_paths`] streams a given list of shards the same way, and [`added_shards`] lists the
//! shards a descendant commit gained (a tree diff), so a reader can fold only what is new.
//!
//! Two other orders hold the matching events in memory ([`ordered`]): time order
//! ([`Order::Time`]: `occurred_at`, then canonical order) and the causal order of one operation
//! followed across jobs ([`follow`]: grouped by attempt, attempts and events in causal order).

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use crate::canonical::Value;
use crate::event::Event;
use crate::ledger::segment::Month;
use crate::ledger::shard;
use crate::store;
use crate::time::CalendarDate;
use crate::verify::{self, Rule};
use crate::view::{self, View};

/// Why the log could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Git repository or an object in it could not be read; the inner error names the
    /// object or ref.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A checked read of a shard, manifest or segment failed.
    #[error(transparent)]
    View(#[from] view::Error),
    /// A shard that `verify` refuses, on its own or in its set (the ledger is damaged): none of
    /// its events was handed out.
    #[error(
        "shard {path} breaks {rule}: {detail}; none of its events was printed (run `action-ledger verify` for every finding)"
    )]
    Shard {
        /// The shard path.
        path: String,
        /// The rule it breaks.
        rule: Rule,
        /// What is wrong, naming the shard (and the line where there is one).
        detail: String,
    },
}

/// Which events to print. Every given criterion must match; an empty filter matches all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// `subject.repository` equals this (compare normalized: lowercase).
    pub repository: Option<String>,
    /// `subject.number` equals this.
    pub number: Option<i64>,
    /// `operation_id` starts with this (lowercase hex).
    pub operation: Option<String>,
    /// `attempt_id` starts with this (lowercase hex).
    pub attempt: Option<String>,
    /// `event_type` is one of these (none: any).
    pub event_types: Vec<String>,
    /// `producer.component` equals this.
    pub producer: Option<String>,
    /// Partition date on or after this one.
    pub since: Option<CalendarDate>,
    /// Partition date on or before this one.
    pub until: Option<CalendarDate>,
}

impl Filter {
    /// Whether the partition date `date` (`YYYY-MM-DD`) is within `since..=until`; a date that
    /// is not one is outside any bound (and inside no bound at all).
    fn date_in_range(&self, date: &str) -> bool {
        if self.since.is_none() && self.until.is_none() {
            return true;
        }
        CalendarDate::parse(date)
            .is_some_and(|d| self.since.is_none_or(|s| d >= s) && self.until.is_none_or(|u| d <= u))
    }

    /// Whether `month` may hold a date within `since..=until`.
    fn month_in_range(&self, month: Month) -> bool {
        let month_of = |d: CalendarDate| (d.year(), d.month());
        let m = (u32::from(month.year), u32::from(month.month));
        self.since.is_none_or(|s| m >= month_of(s)) && self.until.is_none_or(|u| m <= month_of(u))
    }

    /// Whether the event `v` matches the field criteria (not the dates).
    pub fn matches(&self, v: &Value) -> bool {
        let text = |path: &[&str]| {
            let mut cur = v;
            for k in path {
                cur = cur.get(k)?;
            }
            cur.as_str()
        };
        let starts = |field: &str, prefix: &Option<String>| {
            prefix
                .as_deref()
                .is_none_or(|p| text(&[field]).is_some_and(|x| x.starts_with(p)))
        };
        self.repository
            .as_deref()
            .is_none_or(|r| text(&["subject", "repository"]) == Some(r))
            && self.number.is_none_or(|n| {
                v.get("subject")
                    .and_then(|s| s.get("number"))
                    .and_then(Value::as_safe_integer)
                    == Some(n)
            })
            && starts("operation_id", &self.operation)
            && starts("attempt_id", &self.attempt)
            && (self.event_types.is_empty()
                || text(&["event_type"]).is_some_and(|t| self.event_types.iter().any(|x| x == t)))
            && self
                .producer
                .as_deref()
                .is_none_or(|p| text(&["producer", "component"]) == Some(p))
    }
}

/// One event as the log hands it out.
#[derive(Debug)]
pub struct Entry<'a> {
    /// Partition date `YYYY-MM-DD`.
    pub date: &'a str,
    /// The (original) shard path.
    pub path: &'a str,
    /// 1-based line in the shard.
    pub line: usize,
    /// The exact canonical line (no newline).
    pub json: &'a str,
    /// The parsed record.
    pub value: &'a Value,
}

/// What a log run read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Shards read.
    pub shards: usize,
    /// Events read.
    pub events: usize,
    /// Events that matched and were handed out.
    pub matched: usize,
}

/// Bytes of shards read before their batch is checked.
const BATCH_BYTES: usize = 1 << 20;

/// Streams the matching events of the view's snapshot, in canonical order, to `sink`; the sink
/// returns [`ControlFlow::Break`] to stop early (a closed pipe). Each shard is checked as
/// `verify` checks it, on its own and in its set ([`verify::LogGate`]), before any of its
/// events reaches the sink.
///
/// # Errors
/// [`Error::Shard`] for the first shard in order that fails the checks (the events of the
/// shards before it have been handed out), [`Error::View`] for a damaged compaction,
/// [`Error::Store`].
pub fn stream(
    view: &View<'_, '_>,
    filter: &Filter,
    sink: &mut dyn FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> Result<Stats, Error> {
    stream_observed(view, filter, &crate::progress::Silent, sink)
}

/// [`stream`], reporting each shard read (with its events) to `progress`.
///
/// # Errors
/// As [`stream`].
pub fn stream_observed(
    view: &View<'_, '_>,
    filter: &Filter,
    progress: &dyn crate::progress::Progress,
    sink: &mut dyn FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> Result<Stats, Error> {
    let mut hot: BTreeMap<Month, Vec<String>> = BTreeMap::new();
    for path in view.snapshot().list_files(shard::EVENTS_ROOT)? {
        if let Some(month) = Month::of_shard(&path) {
            hot.entry(month).or_default().push(path);
        }
    }
    for month in view.compacted_months()? {
        hot.entry(month).or_default();
    }
    progress.begin("shards", None);
    let mut gate = verify::LogGate::new(view.snapshot()).map_err(from_verify)?;
    let mut stats = Stats::default();
    let mut batch: Vec<Read> = Vec::new();
    let mut bytes = 0usize;
    // Shards and events already reported to `progress`.
    let mut reported = (0u64, 0u64);
    for (month, mut paths) in hot {
        if !filter.month_in_range(month) {
            continue;
        }
        if let Some(manifest) = view.manifest(month)? {
            paths.extend(manifest.shards.iter().map(|e| e.path.clone()));
            paths.sort_unstable();
            paths.dedup();
        }
        for path in paths {
            let Some((date, _)) = shard::parse_path(&path) else {
                continue;
            };
            if !filter.date_in_range(&date) {
                continue;
            }
            let text = match view.read(&path, shard::MAX_BYTES as u64) {
                Ok(Some(bytes)) => shard::text_of(bytes, &path),
                Ok(None) => continue,
                Err(view::Error::Store(store::Error::TooLarge { .. })) => {
                    Err(shard::Error::FileTooLarge(path.clone()))
                }
                Err(e) => return Err(e.into()),
            };
            // A batch ends between two sets only: the gate checks whole sets.
            let full = bytes >= BATCH_BYTES
                && batch
                    .last()
                    .is_some_and(|last| verify::set_key(&last.path) != verify::set_key(&path));
            let size = text.as_ref().map_or(0, String::len);
            if full {
                bytes = 0;
                let flow = hand_out(
                    &mut gate,
                    std::mem::take(&mut batch),
                    filter,
                    sink,
                    &mut stats,
                )?;
                progress.advance(
                    stats.shards as u64 - reported.0,
                    stats.events as u64 - reported.1,
                );
                reported = (stats.shards as u64, stats.events as u64);
                if flow.is_break() {
                    progress.end();
                    return Ok(stats);
                }
            }
            bytes += size;
            batch.push(Read { date, path, text });
        }
    }
    // The last batch: the stream ends here whether or not the sink stopped it.
    let _ = hand_out(&mut gate, batch, filter, sink, &mut stats)?;
    progress.advance(
        stats.shards as u64 - reported.0,
        stats.events as u64 - reported.1,
    );
    progress.end();
    Ok(stats)
}

/// Streams the matching events of the shards `paths` (sorted, each set whole, as
/// [`added_shards`] returns them) in that order, each shard read through the view (checked)
/// and gated exactly as in [`stream`]; a path the view does not hold is skipped. For readers
/// that fold only what a range of commits added (`project --from`).
///
/// # Errors
/// As [`stream`].
pub fn stream_paths(
    view: &View<'_, '_>,
    paths: &[String],
    filter: &Filter,
    sink: &mut dyn FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> Result<Stats, Error> {
    let mut gate = verify::LogGate::new(view.snapshot()).map_err(from_verify)?;
    let mut stats = Stats::default();
    let mut batch: Vec<Read> = Vec::new();
    let mut bytes = 0usize;
    for path in paths {
        let Some((date, _)) = shard::parse_path(path) else {
            continue;
        };
        if !filter.date_in_range(&date) {
            continue;
        }
        let text = match view.read(path, shard::MAX_BYTES as u64) {
            Ok(Some(bytes)) => shard::text_of(bytes, path),
            Ok(None) => continue,
            Err(view::Error::Store(store::Error::TooLarge { .. })) => {
                Err(shard::Error::FileTooLarge(path.clone()))
            }
            Err(e) => return Err(e.into()),
        };
        let full = bytes >= BATCH_BYTES
            && batch
                .last()
                .is_some_and(|last| verify::set_key(&last.path) != verify::set_key(path));
        if full {
            bytes = 0;
            let flow = hand_out(
                &mut gate,
                std::mem::take(&mut batch),
                filter,
                sink,
                &mut stats,
            )?;
            if flow.is_break() {
                return Ok(stats);
            }
        }
        bytes += text.as_ref().map_or(0, String::len);
        batch.push(Read {
            date,
            path: path.clone(),
            text,
        });
    }
    let _ = hand_out(&mut gate, batch, filter, sink, &mut stats)?;
    Ok(stats)
}

/// The shard paths a descendant `new` holds that `old` did not, hot or compacted, sorted:
/// shard files the tree diff of `ledger/v1/events/` adds, and entries of a month's manifest that
/// `new` adds or replaces which neither `old`'s manifest lists nor `old` held hot (a shard a
/// compaction in between moved into a segment was there before). Only the subtrees that
/// differ are read ([`store::Store::diff`], as `verify --range` reads a push), so the cost
/// follows the change, not the ledger; and only below the events and the segments, as the
/// import bindings a publication adds beside each shard name no shard.
///
/// # Errors
/// [`Error::Store`]; [`Error::View`] for an invalid manifest at either side.
pub fn added_shards(
    store: &store::Store,
    old: store::CommitId,
    new: store::CommitId,
) -> Result<Vec<String>, Error> {
    use crate::ledger::segment::{self, SegmentFile};
    use std::collections::BTreeSet;
    let mut changes = store.diff(Some(old), new, shard::EVENTS_ROOT)?;
    changes.extend(store.diff(Some(old), new, segment::SEGMENTS_ROOT)?);
    let mut added = BTreeSet::new();
    let mut removed = BTreeSet::new();
    let mut months = BTreeSet::new();
    for change in &changes {
        match change {
            store::Change::Added(p) if shard::parse_path(p).is_some() => {
                added.insert(p.clone());
            }
            store::Change::Deleted(p) if shard::parse_path(p).is_some() => {
                removed.insert(p.clone());
            }
            store::Change::Added(p) | store::Change::Modified(p) => {
                if let Some(SegmentFile::Manifest(month)) = segment::parse_path(p) {
                    months.insert(month);
                }
            }
            store::Change::Deleted(_) => {}
        }
    }
    let (old_snap, new_snap) = (store.snapshot(Some(old))?, store.snapshot(Some(new))?);
    let (old_view, new_view) = (View::new(&old_snap), View::new(&new_snap));
    // A hot file beside a compacted entry of the same path (which verify reports) was read
    // from the segment before: not new.
    let mut kept = BTreeSet::new();
    for path in added {
        let compacted = match Month::of_shard(&path) {
            Some(month) => old_view
                .manifest(month)?
                .is_some_and(|m| m.entry(&path).is_some()),
            None => false,
        };
        if !compacted {
            kept.insert(path);
        }
    }
    let mut added = kept;
    if !months.is_empty() {
        for month in months {
            let Some(manifest) = new_view.manifest(month)? else {
                continue;
            };
            let before = old_view.manifest(month)?;
            for entry in &manifest.shards {
                let known = removed.contains(&entry.path)
                    || before
                        .as_ref()
                        .is_some_and(|m| m.entry(&entry.path).is_some());
                if !known {
                    added.insert(entry.path.clone());
                }
            }
        }
    }
    Ok(added.into_iter().collect())
}

/// One shard as read: its partition date, path and text (or why it is not text).
struct Read {
    date: String,
    path: String,
    text: Result<String, shard::Error>,
}

/// A verification error as a log error (it can only be the store's).
fn from_verify(e: verify::Error) -> Error {
    match e {
        verify::Error::Store(e) => Error::Store(e),
    }
}

/// Checks a batch of whole shard sets through `verify`'s gate ([`verify::LogGate`]: each shard
/// on its own on all cores, its entry mode, its set against the ledger), then hands out their
/// matching events in order, stopping at the first shard that fails.
fn hand_out(
    gate: &mut verify::LogGate<'_, '_>,
    batch: Vec<Read>,
    filter: &Filter,
    sink: &mut dyn FnMut(&Entry<'_>) -> ControlFlow<()>,
    stats: &mut Stats,
) -> Result<ControlFlow<()>, Error> {
    use rayon::prelude::*;
    type Checked = Result<(Vec<Event>, Vec<Value>), (Rule, String)>;
    let mut places = Vec::with_capacity(batch.len());
    let mut shards = Vec::with_capacity(batch.len());
    for r in batch {
        places.push((r.date, r.path.clone()));
        shards.push((r.path, r.text));
    }
    let gated = gate.check(shards).map_err(from_verify)?;
    // The trees are for the filter and the sink; the check itself builds none.
    let checked: Vec<Checked> = gated
        .into_par_iter()
        .map(|g| {
            g.map(|events| {
                let records = events.iter().map(Event::record).collect();
                (events, records)
            })
        })
        .collect();
    for ((date, path), checked) in places.iter().zip(checked) {
        let (events, records) = checked.map_err(|(rule, detail)| Error::Shard {
            path: path.clone(),
            rule,
            detail,
        })?;
        stats.shards += 1;
        stats.events += events.len();
        for (i, (event, record)) in events.iter().zip(&records).enumerate() {
            if !filter.matches(record) {
                continue;
            }
            stats.matched += 1;
            let entry = Entry {
                date,
                path,
                line: i + 1,
                json: &event.json,
                value: record,
            };
            if sink(&entry).is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// The order `log` prints events in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// Partition date, shard path, line (streamed).
    #[default]
    Canonical,
    /// `occurred_at` (ISO-8601 UTC with milliseconds, so text order is time order), then
    /// canonical order.
    Time,
}

/// One matching event, owned (for the orders that sort).
#[derive(Clone, Debug)]
pub struct Held {
    /// Partition date `YYYY-MM-DD`.
    pub date: String,
    /// The (original) shard path.
    pub path: String,
    /// 1-based line in the shard.
    pub line: usize,
    /// The exact canonical line (no newline).
    pub json: String,
    /// The parsed record.
    pub value: Value,
}

impl Held {
    /// The event as [`stream`] hands it out.
    pub fn entry(&self) -> Entry<'_> {
        Entry {
            date: &self.date,
            path: &self.path,
            line: self.line,
            json: &self.json,
            value: &self.value,
        }
    }

    fn text(&self, key: &str) -> &str {
        self.value.get(key).and_then(Value::as_str).unwrap_or("")
    }
}

/// The matching events in `order`, held in memory (the sink of [`stream`] collects them, so
/// every shard is checked as there).
///
/// # Errors
/// As [`stream`].
pub fn ordered(
    view: &View<'_, '_>,
    filter: &Filter,
    order: Order,
    progress: &dyn crate::progress::Progress,
) -> Result<(Vec<Held>, Stats), Error> {
    let mut held = Vec::new();
    let stats = stream_observed(view, filter, progress, &mut |e| {
        held.push(Held {
            date: e.date.to_owned(),
            path: e.path.to_owned(),
            line: e.line,
            json: e.json.to_owned(),
            value: e.value.clone(),
        });
        ControlFlow::Continue(())
    })?;
    if order == Order::Time {
        // Stable: equal times keep canonical order.
        held.sort_by(|a, b| a.text("occurred_at").cmp(b.text("occurred_at")));
    }
    Ok((held, stats))
}

/// Events of one operation (as [`ordered`] in canonical order returns them) grouped by
/// `attempt_id`, for following an operation across jobs and runs.
///
/// Events are first put in causal order: an event comes after its `parent_event_id` when the
/// parent is among them, ties broken by `occurred_at`, then canonical order. Attempts are then
/// listed in the order of their first event in that order (so a retry whose first event's
/// parent is in an earlier attempt comes after it), each with its events in causal order.
/// Events without an `attempt_id` form one group under the empty id.
pub fn follow(held: Vec<Held>) -> Vec<(String, Vec<Held>)> {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};
    let index: HashMap<&str, usize> = held
        .iter()
        .enumerate()
        .map(|(i, h)| (h.text("event_id"), i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); held.len()];
    let mut waiting = vec![false; held.len()];
    for (i, h) in held.iter().enumerate() {
        if let Some(&p) = index.get(h.text("parent_event_id"))
            && p != i
        {
            children[p].push(i);
            waiting[i] = true;
        }
    }
    let key = |i: usize| Reverse((held[i].text("occurred_at"), i));
    let mut ready: BinaryHeap<_> = (0..held.len()).filter(|&i| !waiting[i]).map(key).collect();
    let mut causal = Vec::with_capacity(held.len());
    let mut placed = vec![false; held.len()];
    while let Some(Reverse((_, i))) = ready.pop() {
        placed[i] = true;
        causal.push(i);
        for &c in &children[i] {
            ready.push(key(c));
        }
    }
    // A parent cycle cannot pass the shard checks; should one appear, its events keep
    // canonical order at the end rather than vanish.
    causal.extend((0..held.len()).filter(|&i| !placed[i]));
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    let mut group_of: HashMap<&str, usize> = HashMap::new();
    for &i in &causal {
        let attempt = held[i].text("attempt_id");
        let g = *group_of.entry(attempt).or_insert_with(|| {
            groups.push((attempt.to_owned(), Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(i);
    }
    let mut slots: Vec<Option<Held>> = held.into_iter().map(Some).collect();
    groups
        .into_iter()
        .map(|(attempt, members)| {
            let events = members
                .into_iter()
                .filter_map(|i| slots[i].take())
                .collect();
            (attempt, events)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    /// Date bounds are dates, not strings: a partition date that is not one (non-ASCII, short)
    /// is outside every bound without a panic, and months compare by year first.
    #[test]
    fn date_bounds_compare_dates() {
        let f = Filter {
            since: CalendarDate::parse("2025-12-31"),
            until: CalendarDate::parse("2026-01-01"),
            ..Filter::default()
        };
        for (date, inside) in [
            ("2025-12-31", true),
            ("2026-01-01", true),
            ("2025-12-30", false),
            ("2026-01-02", false),
            ("2026-0\u{e9}-01", false),
            ("2026", false),
            ("", false),
        ] {
            assert_eq!(f.date_in_range(date), inside, "{date}");
        }
        assert!(Filter::default().date_in_range("not a date"));
        let month = |year, month| Month { year, month };
        assert!(f.month_in_range(month(2025, 12)) && f.month_in_range(month(2026, 1)));
        assert!(!f.month_in_range(month(2025, 11)) && !f.month_in_range(month(2026, 2)));
        assert!(!f.month_in_range(month(2024, 12)) && !f.month_in_range(month(2027, 1)));
    }

    use super::*;
    use crate::store::{CommitId, Signature, Store};
    use std::path::PathBuf;

    fn job008() -> PathBuf {
        crate::tests::day1_job("008")
    }

    /// The job's events straight from its shard files, in path order, as JSON values.
    fn source_events() -> Vec<(String, serde_json::Value)> {
        let mut files: Vec<PathBuf> = walkdir::WalkDir::new(job008())
            .into_iter()
            .map(|e| e.unwrap().into_path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        files
            .iter()
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .lines()
                    .map(|l| (l.to_owned(), serde_json::from_str(l).unwrap()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Which source events a filter must select.
    type Want<'a> = Box<dyn Fn(&serde_json::Value) -> bool + 'a>;

    fn ledger() -> (tempfile::TempDir, Store, CommitId) {
        let (dir, store) = crate::tests::scratch_store();
        let sig = Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: 1_773_100_800,
        };
        let p =
            crate::publish::publish(&store, &job008(), &crate::publish::Options::new(sig)).unwrap();
        let commit = p.commit.unwrap();
        (dir, store, commit)
    }

    fn run(store: &Store, commit: CommitId, filter: &Filter) -> (Vec<String>, Stats) {
        let snap = store.snapshot(Some(commit)).unwrap();
        let view = View::new(&snap);
        let mut out = Vec::new();
        let stats = stream(&view, filter, &mut |e| {
            out.push(e.json.to_owned());
            ControlFlow::Continue(())
        })
        .unwrap();
        (out, stats)
    }

    #[test]
    fn filters_select_exactly_the_matching_events_in_order() {
        let (_dir, store, commit) = ledger();
        let all = source_events();
        let pick = |f: &dyn Fn(&serde_json::Value) -> bool| -> Vec<String> {
            all.iter()
                .filter(|(_, v)| f(v))
                .map(|(l, _)| l.clone())
                .collect()
        };
        let (lines, stats) = run(&store, commit, &Filter::default());
        assert_eq!(lines, pick(&|_| true));
        assert_eq!(
            stats,
            Stats {
                shards: 2,
                events: 63,
                matched: 63
            }
        );
        let cases: Vec<(Filter, Want<'_>)> = vec![
            (
                Filter {
                    event_types: vec!["repair.execute".into(), "repair.plan".into()],
                    ..Filter::default()
                },
                Box::new(|v| {
                    v["event_type"] == "repair.execute" || v["event_type"] == "repair.plan"
                }),
            ),
            (
                Filter {
                    repository: Some("openclaw/openclaw".into()),
                    number: Some(41979),
                    ..Filter::default()
                },
                Box::new(|v| {
                    v["subject"]["repository"] == "openclaw/openclaw"
                        && v["subject"]["number"] == 41979
                }),
            ),
            (
                Filter {
                    repository: Some("openclaw/clawhub".into()),
                    ..Filter::default()
                },
                Box::new(|v| v["subject"]["repository"] == "openclaw/clawhub"),
            ),
            (
                Filter {
                    operation: Some("5b5d23caffda".into()),
                    ..Filter::default()
                },
                Box::new(|v| {
                    v["operation_id"]
                        .as_str()
                        .is_some_and(|o| o.starts_with("5b5d23caffda"))
                }),
            ),
            (
                Filter {
                    attempt: Some(all[5].1["attempt_id"].as_str().unwrap().into()),
                    ..Filter::default()
                },
                Box::new(|v| v["attempt_id"] == all[5].1["attempt_id"]),
            ),
            (
                Filter {
                    producer: Some("workflow.ledger.default".into()),
                    ..Filter::default()
                },
                Box::new(|v| v["producer"]["component"] == "workflow.ledger.default"),
            ),
            (
                Filter {
                    since: CalendarDate::parse("2026-03-10"),
                    until: CalendarDate::parse("2026-03-10"),
                    ..Filter::default()
                },
                Box::new(|_| true),
            ),
            (
                Filter {
                    since: CalendarDate::parse("2026-03-11"),
                    ..Filter::default()
                },
                Box::new(|_| false),
            ),
            (
                Filter {
                    until: CalendarDate::parse("2026-03-09"),
                    ..Filter::default()
                },
                Box::new(|_| false),
            ),
        ];
        for (filter, want) in cases {
            let (lines, stats) = run(&store, commit, &filter);
            assert_eq!(lines, pick(want.as_ref()), "{filter:?}");
            assert_eq!(stats.matched, lines.len());
            assert!(!lines.is_empty() || filter.since.is_some() || filter.until.is_some());
        }
    }

    /// A held event with the fields `follow` reads; `line` is its canonical position.
    fn held(line: usize, id: &str, attempt: &str, at: &str, parent: Option<&str>) -> Held {
        let mut members = vec![
            ("event_id", Value::str(id)),
            ("attempt_id", Value::str(attempt)),
            ("occurred_at", Value::str(at)),
        ];
        if let Some(p) = parent {
            members.push(("parent_event_id", Value::str(p)));
        }
        let value = Value::object(members);
        Held {
            date: "2026-03-10".into(),
            path: format!("p{line}"),
            line,
            json: crate::canonical::to_canonical_unchecked(&value),
            value,
        }
    }

    fn ids(groups: &[(String, Vec<Held>)]) -> Vec<(String, Vec<String>)> {
        groups
            .iter()
            .map(|(a, hs)| {
                (
                    a.clone(),
                    hs.iter().map(|h| h.text("event_id").to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn follow_puts_attempts_and_events_in_causal_order() {
        let at = |s: u32| format!("2026-03-10T00:00:{s:02}.000Z");
        // Canonical order: the retry (attempt b, clock behind) comes first; its first event's
        // parent is the last event of attempt a, so a is listed first all the same.
        let canonical = vec![
            held(1, "b1", "b", &at(1), Some("a2")),
            held(2, "b2", "b", &at(2), Some("b1")),
            held(3, "a1", "a", &at(5), None),
            held(4, "a2", "a", &at(6), Some("a1")),
            // Unrelated attempt c, by time between a and b's clocks; no parent among them.
            held(5, "c1", "c", &at(3), None),
        ];
        let want = |v: &[(&str, &[&str])]| -> Vec<(String, Vec<String>)> {
            v.iter()
                .map(|(a, es)| {
                    (
                        (*a).to_owned(),
                        es.iter().map(|e| (*e).to_owned()).collect(),
                    )
                })
                .collect()
        };
        assert_eq!(
            ids(&follow(canonical)),
            want(&[("c", &["c1"]), ("a", &["a1", "a2"]), ("b", &["b1", "b2"])])
        );
        // Events of one attempt interleaved with another's keep causal order within it.
        let interleaved = vec![
            held(1, "x2", "x", &at(1), Some("x1")),
            held(2, "y1", "y", &at(2), None),
            held(3, "x1", "x", &at(4), None),
        ];
        assert_eq!(
            ids(&follow(interleaved)),
            want(&[("y", &["y1"]), ("x", &["x1", "x2"])])
        );
        // Equal times keep canonical order; no attempt id is its own group.
        let plain = vec![
            held(1, "n1", "", &at(7), None),
            held(2, "n2", "", &at(7), None),
        ];
        assert_eq!(ids(&follow(plain)), want(&[("", &["n1", "n2"])]));
    }

    /// Every event `stream` hands out (its JSON), and the error it ends with.
    fn collect(store: &Store, commit: CommitId) -> (Vec<String>, Result<Stats, Error>) {
        let snap = store.snapshot(Some(commit)).unwrap();
        let view = View::new(&snap);
        let mut out = Vec::new();
        let result = stream(&view, &Filter::default(), &mut |e| {
            out.push(e.json.to_owned());
            ControlFlow::Continue(())
        });
        (out, result)
    }

    /// Damaged copies of a shard's bytes, one per kind of fault `verify` refuses a shard for,
    /// with the rule and a piece of the detail the refusal must carry.
    fn damaged(text: &str) -> Vec<(&'static str, Vec<u8>, Rule, &'static str)> {
        let lines: Vec<&str> = text.lines().collect();
        let joined = |sep: &str, end: &str| format!("{}{end}", lines.join(sep)).into_bytes();
        let mut invalid_utf8 = text.as_bytes().to_vec();
        let at = text.find("\"event_type\":\"").unwrap() + 14;
        invalid_utf8.insert(at, 0xff);
        let mut over = text.as_bytes().to_vec();
        while over.len() <= shard::MAX_BYTES {
            over.extend_from_slice(text.as_bytes());
        }
        let mut members = vec![
            (
                "CRLF line ends",
                joined("\r\n", "\r\n"),
                Rule::ShardInvalid,
                "not canonical",
            ),
            (
                "one CRLF line end",
                joined("\n", "\r\n"),
                Rule::ShardInvalid,
                "not canonical",
            ),
            (
                "no final newline",
                joined("\n", ""),
                Rule::ShardInvalid,
                "must end with a newline",
            ),
            (
                "a non-canonical line",
                text.replacen("{\"action\":{", "{\"action\": {", 1)
                    .into_bytes(),
                Rule::ShardInvalid,
                "not canonical",
            ),
            (
                "invalid UTF-8",
                invalid_utf8,
                Rule::ShardInvalid,
                "invalid UTF-8",
            ),
            (
                "over the 2 MiB cap",
                over,
                Rule::ShardInvalid,
                "exceeds 2097152 byte limit",
            ),
            (
                "a blank first line",
                format!("\n{text}").into_bytes(),
                Rule::ShardInvalid,
                "not canonical",
            ),
            (
                "a blank last line",
                joined("\n", "\n\n"),
                Rule::ShardInvalid,
                "not canonical",
            ),
            ("empty", Vec::new(), Rule::ShardInvalid, "requires events"),
        ];
        if lines.len() > 1 {
            let mut swapped = lines.clone();
            let last = lines.len() - 1;
            swapped.swap(0, last);
            members.push((
                "a blank line between lines",
                format!("{}\n\n{}\n", lines[0], lines[1..].join("\n")).into_bytes(),
                Rule::ShardInvalid,
                "not canonical",
            ));
            members.push((
                "events out of causal order",
                format!("{}\n", swapped.join("\n")).into_bytes(),
                Rule::ShardOrder,
                "canonical causal order",
            ));
        }
        members
    }

    /// The signature of the commits that plant a damaged shard.
    fn damage_sig() -> Signature {
        Signature {
            name: "t".into(),
            email: "t@invalid".into(),
            time_seconds: 1_773_100_800,
        }
    }

    /// Asserts that `result` is the log's refusal of shard `path` for `rule`, its detail naming
    /// `piece` (`case` names the damage in a failure), and hands that refusal back.
    fn assert_shard_refused(
        result: Result<Stats, Error>,
        case: &str,
        path: &str,
        rule: Rule,
        piece: &str,
    ) -> Error {
        match result {
            Err(Error::Shard {
                path: got_path,
                rule: got,
                detail,
            }) => {
                assert_eq!(got_path, path, "{case}");
                assert_eq!(got, rule, "{case}: {detail}");
                assert!(detail.contains(piece), "{case}: {detail}");
                Error::Shard {
                    path: got_path,
                    rule: got,
                    detail,
                }
            }
            other => panic!("{case}: {other:?}"),
        }
    }

    /// `log` reads every shard through `verify`'s per-shard checks: a damaged shard stops it
    /// with an error naming the shard and the rule, and none of its events is printed (the
    /// shard before it in order still is); `verify` refuses the same shard.
    #[test]
    fn a_shard_verify_refuses_stops_the_log_and_prints_nothing_of_it() {
        let (_dir, store, commit) = ledger();
        let snap = store.snapshot(Some(commit)).unwrap();
        let shards = snap.list_files(shard::EVENTS_ROOT).unwrap();
        assert_eq!(shards.len(), 2);
        let text = |p: &str| String::from_utf8(snap.read(p, u64::MAX).unwrap().unwrap()).unwrap();
        let first: Vec<String> = text(&shards[0]).lines().map(str::to_owned).collect();
        let sig = damage_sig();
        for (index, target) in shards.iter().enumerate() {
            for (name, bytes, rule, piece) in damaged(&text(target)) {
                let bad = store
                    .write_commit_with(
                        Some(commit),
                        &[(target.clone(), bytes)],
                        &[],
                        true,
                        name,
                        &sig,
                    )
                    .unwrap();
                let (printed, result) = collect(&store, bad);
                let case = format!("{name} in shard {index}");
                let message = assert_shard_refused(result, &case, target, rule, piece).to_string();
                assert!(
                    message.starts_with(&format!("shard {target} breaks {rule}: ")),
                    "{message}"
                );
                let want: &[String] = if index == 0 { &[] } else { &first };
                assert_eq!(printed, want, "{name} in shard {index}");
                let report = crate::verify::verify_revision(&store, bad).unwrap();
                assert!(
                    report
                        .findings
                        .iter()
                        .any(|f| &f.path == target && f.rule == rule),
                    "{name}: verify {:?}",
                    report.findings
                );
            }
        }
    }

    /// The same through compacted segments: a shard whose bytes the month's manifest proves
    /// (so that the view's checked read passes) but that `verify` refuses is not printed.
    #[test]
    fn a_refused_shard_read_out_of_a_segment_stops_the_log() {
        use crate::ledger::segment::{self, Foldable};
        let (_dir, store, commit) = ledger();
        let snap = store.snapshot(Some(commit)).unwrap();
        let shards = snap.list_files(shard::EVENTS_ROOT).unwrap();
        let text = |p: &str| String::from_utf8(snap.read(p, u64::MAX).unwrap().unwrap()).unwrap();
        let first = Foldable::new(&shards[0], text(&shards[0])).unwrap();
        let printed_first: Vec<String> = text(&shards[0]).lines().map(str::to_owned).collect();
        let month = Month::of_shard(&shards[0]).unwrap();
        let sig = damage_sig();
        let mut folded = 0;
        for (name, bytes, rule, piece) in damaged(&text(&shards[1])) {
            // A segment holds text lines: what is not UTF-8 or has no line cannot be folded.
            let Ok(content) = String::from_utf8(bytes) else {
                continue;
            };
            let lines = content.split_inclusive('\n').count() as u32;
            if lines == 0 {
                continue;
            }
            let bad = Foldable {
                path: shards[1].clone(),
                events: lines,
                replay_sha256: crate::identity::Digest::of(""),
                content,
            };
            let Ok(segment::Folded {
                manifest,
                mut files,
            }) = segment::fold(month, None, &[first.clone(), bad], segment::Caps::MAX)
            else {
                continue;
            };
            files.push((month.manifest_path(), manifest.to_text().into_bytes()));
            let compacted = store
                .write_commit_with(Some(commit), &files, &shards, false, name, &sig)
                .unwrap();
            assert!(
                store
                    .snapshot(Some(compacted))
                    .unwrap()
                    .list_files(shard::EVENTS_ROOT)
                    .unwrap()
                    .is_empty()
            );
            folded += 1;
            let (printed, result) = collect(&store, compacted);
            assert_shard_refused(result, name, &shards[1], rule, piece);
            assert_eq!(printed, printed_first, "{name}");
        }
        assert!(folded >= 6, "only {folded} damaged shards could be folded");
    }

    #[test]
    fn a_sink_can_stop_early() {
        let (_dir, store, commit) = ledger();
        let snap = store.snapshot(Some(commit)).unwrap();
        let view = View::new(&snap);
        let mut seen = Vec::new();
        let stats = stream(&view, &Filter::default(), &mut |e| {
            seen.push((e.date.to_owned(), e.line, e.value.clone()));
            if seen.len() == 3 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(stats.matched, 3);
        assert_eq!(seen[0].0, "2026-03-10");
        assert_eq!(seen.iter().map(|s| s.1).collect::<Vec<_>>(), vec![1, 2, 3]);
        let (_, first) = &source_events()[0];
        assert_eq!(
            seen[0].2.get("event_id").and_then(Value::as_str),
            first["event_id"].as_str()
        );
    }
}
