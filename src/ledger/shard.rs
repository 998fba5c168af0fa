//! Shards: immutable JSONL files of canonical event lines.
//!
//! A shard set holds one producer run's events on one partition date, in canonical causal order,
//! packed greedily into parts of at most 1,024 events and 2 MiB, named
//! `ledger/v1/events/YYYY/MM/DD/<repo>/<producer>/<run>-<attempt>-<job>-<digest12>-part-<i>-of-<n>.jsonl`.
//! Packing is a pure function of the event set, so any writer reproduces the same parts, paths and
//! bytes, which is what makes replays no-ops and lets the importer check packing.
//!
//! Bytes: one canonical event record per line (the canonical JSON of [`crate::canonical`]),
//! each line ending in `\n`, including the last; no empty line, no `\r`, no byte order mark;
//! UTF-8. `<digest12>` is the first 12 hex digits of the sha256 of the canonical shard identity
//! ([`ShardIdentity`]); the other name parts are safe path segments ([`bounded_path_segment`]:
//! a segment that is too long, a Windows device name or ends in `.` becomes a prefix, `-` and
//! the first 12 hex digits of its sha256).
//! Every event of a set has the same producer, and the set's parts are numbered from 1
//! (`part-1-of-3`). Limits: [`MAX_EVENTS`] events and [`MAX_BYTES`] bytes per file,
//! [`MAX_SET_EVENTS`] per set, [`MAX_PARTS`] parts.
//!
//! A shard is never rewritten: a replay of the same events produces the same files, and a
//! publication refuses a path that exists with other bytes.

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::{self, Event};
use crate::identity::{self, Digest, ShardIdentity};

/// Most events in one shard file.
pub const MAX_EVENTS: usize = 1024;
/// Most bytes in one shard file.
pub const MAX_BYTES: usize = 2 * 1024 * 1024;
/// Most raw events in one shard set.
pub const MAX_SET_EVENTS: usize = 65_536;
/// Largest part index or count.
pub const MAX_PARTS: u32 = 999_999;
/// Prefix of every shard path.
pub const EVENTS_ROOT: &str = "ledger/v1/events";

/// Why a shard or a batch of events was refused; texts are the reference's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event in the batch or the file failed event validation.
    #[error(transparent)]
    Event(#[from] event::Error),
    /// The shard identity failed normalization (repository, machine text, run attempt, date).
    #[error(transparent)]
    Identity(#[from] identity::Error),
    /// The batch holds more than this many raw events ([`MAX_SET_EVENTS`]) before
    /// de-duplication; split the run into several shard sets.
    #[error("action event shard input exceeds {0} raw event limit")]
    RawLimit(usize),
    /// The batch holds no events; an empty shard set is never written.
    #[error("action event shard requires events")]
    Empty,
    /// This event's producer (repository, sha, component, workflow, job, run, attempt) differs
    /// from the shard identity; one shard set holds one producer run only.
    #[error("action event {0} does not match shard producer identity")]
    ProducerMismatch(Digest),
    /// Two events share an id but not a semantic digest: the same event key was used for
    /// different facts. The event key must be derived from everything that distinguishes them.
    #[error("action event conflict at {id}: {expected} != {actual}")]
    EventConflict {
        /// The shared event id.
        id: Digest,
        /// The semantic digest of the first copy.
        expected: Digest,
        /// The semantic digest of the later copy.
        actual: Digest,
    },
    /// Two events share an id and a semantic digest but differ in their replay record
    /// ([`Event::replay_json`]: the record without `recorded_at`), e.g. in a source
    /// `occurred_at`; the copies are not the same record.
    #[error("action event {0} has conflicting duplicate metadata")]
    DuplicateMetadata(Digest),
    /// One event line alone is larger than [`MAX_BYTES`], so no shard file can hold it.
    #[error("action event {0} exceeds 2097152 shard byte limit")]
    EventTooLarge(Digest),
    /// A part index or part count is outside 1..=[`MAX_PARTS`] (also when a set would need
    /// more parts than that).
    #[error("action event shard index must be an integer between 1 and 999999")]
    PartRange,
    /// A part index is greater than the part count.
    #[error("action event shard index cannot exceed shard count")]
    PartOrder,
    /// A non-empty shard file (path carried) does not end with `\n`.
    #[error("action event shard must end with a newline: {0}")]
    NoFinalNewline(String),
    /// A stored shard file larger than [`MAX_BYTES`] (the import's file limit; the same text as
    /// `publish` gives a source file over it).
    #[error("action event shard file exceeds 2097152 byte limit: {0}")]
    FileTooLarge(String),
    /// A stored shard file whose bytes are not UTF-8 (canonical JSON lines are UTF-8 text).
    #[error("invalid UTF-8 in action event shard file: {0}")]
    NotUtf8(String),
    /// A shard file (path carried) has an empty line, a `\r`, a line that is not its event's
    /// canonical JSON, or bytes that differ from what the writer would produce.
    #[error("action event shard content is not canonical: {0}")]
    NotCanonical(String),
    /// A stored shard file (path carried) holds no events.
    #[error("action event shard requires events: {0}")]
    NoEvents(String),
    /// A stored shard file (path carried) holds more than [`MAX_EVENTS`] events.
    #[error("action event shard exceeds 1024 event limit: {0}")]
    TooManyEvents(String),
    /// A stored shard file's (path carried) events are not in the order
    /// [`event::sort_causally`] gives: parents first, ties broken by [`event::compare_events`].
    #[error("action event shard events are not in canonical causal order: {0}")]
    NotCausalOrder(String),
}

/// `safePathSegment`: runs outside `[A-Za-z0-9_.-]` become `-`, dashes trimmed at both ends;
/// empty, `.` or `..` become `unknown`.
pub fn safe_path_segment(v: &str) -> String {
    let out = identity::replace_runs(
        v,
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'),
        "-",
    );
    let trimmed = out.trim_matches('-');
    match trimmed {
        "" | "." | ".." => "unknown".to_owned(),
        s => s.to_owned(),
    }
}

fn is_reserved_device(s: &str) -> bool {
    let upper = s.to_ascii_uppercase();
    let stem = upper.split('.').next().unwrap_or("");
    let stem_end = stem.len();
    let reserved = matches!(stem, "CON" | "PRN" | "AUX" | "NUL")
        || ((stem.starts_with("COM") || stem.starts_with("LPT"))
            && stem.len() == 4
            && matches!(stem.as_bytes()[3], b'1'..=b'9'));
    // `(?:\.|$)` after the name: either the whole segment or the part before the first dot.
    reserved && (stem_end == upper.len() || upper.as_bytes()[stem_end] == b'.')
}

/// `boundedPathSegment(v, max)`: the safe segment when it fits and is neither a Windows
/// device name nor dot-terminated; otherwise a prefix plus `-` plus 12 hex of sha256(`v`).
pub fn bounded_path_segment(v: &str, max: usize) -> String {
    let safe = safe_path_segment(v);
    let reserved = is_reserved_device(&safe);
    let trailing_dot = safe.ends_with('.');
    if !reserved && !trailing_dot && safe.len() <= max {
        return safe;
    }
    let mut base = if reserved { format!("_{safe}") } else { safe };
    if trailing_dot {
        base.truncate(base.trim_end_matches('.').len());
    }
    base.truncate(max - 13);
    format!("{base}-{}", Digest::of(v).prefix(12))
}

/// A part number: `(index, count)`, both 1…999,999 with index ≤ count.
pub type Part = (u32, u32);

/// The canonical path of a shard of `identity` (already normalized), with an optional part
/// suffix `-part-NNNNNN-of-MMMMMM`.
pub fn relative_path(identity: &ShardIdentity, part: Option<Part>) -> Result<String, Error> {
    let date: Vec<&str> = identity.partition_date.split('-').collect();
    let mut file = format!(
        "{}-{}-{}-{}",
        bounded_path_segment(&identity.run_id, 64),
        identity.run_attempt,
        bounded_path_segment(&identity.job, 64),
        identity.digest().prefix(12)
    );
    if let Some((index, count)) = part {
        if !(1..=MAX_PARTS).contains(&index) || !(1..=MAX_PARTS).contains(&count) {
            return Err(Error::PartRange);
        }
        if index > count {
            return Err(Error::PartOrder);
        }
        file.push_str(&format!("-part-{index:06}-of-{count:06}"));
    }
    Ok(format!(
        "{EVENTS_ROOT}/{}/{}/{}/{}/{}/{file}.jsonl",
        date[0],
        date[1],
        date[2],
        bounded_path_segment(&identity::slug_for_repo(&identity.repository), 120),
        bounded_path_segment(&identity.producer, 120),
    ))
}

/// True when the persisted producer of `event` is exactly the shard identity.
pub fn matches_identity(event: &Event, id: &ShardIdentity) -> bool {
    let p = event.producer();
    p.repository == id.repository
        && p.sha == id.sha
        && p.component == id.producer
        && p.workflow == id.workflow
        && p.job == id.job
        && p.run_id == id.run_id
        && p.run_attempt == id.run_attempt
}

/// `normalizeShardEvents`: dedupe by event id (first occurrence wins; a different
/// semantic digest is a conflict, different replay JSON is conflicting metadata), require every
/// event to belong to `identity`, and sort causally.
pub fn normalize_events(
    identity: &ShardIdentity,
    events: Vec<Event>,
    raw_limit: usize,
) -> Result<Vec<Event>, Error> {
    if events.len() > raw_limit {
        return Err(Error::RawLimit(raw_limit));
    }
    let mut seen: HashMap<Digest, usize> = HashMap::new();
    let mut kept: Vec<Event> = Vec::with_capacity(events.len());
    for e in events {
        if let Some(&i) = seen.get(&e.event_id) {
            let first = &kept[i];
            if first.semantic_sha256 != e.semantic_sha256 {
                return Err(Error::EventConflict {
                    id: e.event_id.clone(),
                    expected: first.semantic_sha256.clone(),
                    actual: e.semantic_sha256.clone(),
                });
            }
            if first.replay_json() != e.replay_json() {
                return Err(Error::DuplicateMetadata(e.event_id.clone()));
            }
            continue;
        }
        seen.insert(e.event_id.clone(), kept.len());
        kept.push(e);
    }
    if kept.is_empty() {
        return Err(Error::Empty);
    }
    if let Some(e) = kept.iter().find(|e| !matches_identity(e, identity)) {
        return Err(Error::ProducerMismatch(e.event_id.clone()));
    }
    Ok(event::sort_causally(kept)?)
}

/// One shard file: its path, its events in file order and its exact bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Shard {
    /// Repository-relative path under [`EVENTS_ROOT`], derived from the shard identity and
    /// its part index.
    pub path: String,
    /// The events in file (canonical causal) order. Their lines are ranges of `content`
    /// ([`event::share_lines`]) when the shard was built by [`pack`], [`single`] or [`Shard::new`].
    pub events: Vec<Event>,
    /// The file's bytes: one canonical JSON line per event, each ending in `\n`.
    pub content: Arc<str>,
}

impl Shard {
    /// The shard at `path` of `events` (in file order) and `content` (their lines), whose
    /// events are pointed at the lines of `content` they equal, so that each line is held once.
    /// Nothing is checked: an event whose line `content` does not hold in that place keeps its
    /// own text.
    pub fn new(path: String, mut events: Vec<Event>, content: Arc<str>) -> Shard {
        event::share_lines(&content, events.iter_mut().map(|e| &mut e.json));
        Shard {
            path,
            events,
            content,
        }
    }

    /// Replay digest of the shard's events (the `replay_sha256` of reservations).
    pub fn replay_sha256(&self) -> Digest {
        event::replay_digest(&self.events)
    }
}

/// Shard content: canonical lines joined by `\n` plus a final `\n`.
pub fn content(events: &[Event]) -> String {
    let mut s = String::with_capacity(events.iter().map(|e| e.json.len() + 1).sum());
    for e in events {
        s.push_str(&e.json);
        s.push('\n');
    }
    s
}

/// `writeActionEventShards` packing: greedy over canonical order; a new part starts when the
/// current one holds 1,024 events or the next line would pass 2 MiB. Parts are always numbered.
/// `events` must already be normalized ([`normalize_events`]).
pub fn pack(identity: &ShardIdentity, events: Vec<Event>) -> Result<Vec<Shard>, Error> {
    let mut parts: Vec<Vec<Event>> = Vec::new();
    let mut current: Vec<Event> = Vec::new();
    let mut bytes = 0usize;
    for e in events {
        let size = e.json.len() + 1;
        if size > MAX_BYTES {
            return Err(Error::EventTooLarge(e.event_id.clone()));
        }
        if !current.is_empty() && (current.len() >= MAX_EVENTS || bytes + size > MAX_BYTES) {
            parts.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += size;
        current.push(e);
    }
    if !current.is_empty() {
        parts.push(current);
    }
    let count = u32::try_from(parts.len()).map_err(|_| Error::PartRange)?;
    parts
        .into_iter()
        .enumerate()
        .map(|(i, events)| {
            let text = Arc::from(content(&events));
            Ok(Shard::new(
                relative_path(identity, Some((i as u32 + 1, count)))?,
                events,
                text,
            ))
        })
        .collect()
}

/// `writeActionEventShard` without index/count: one unnumbered shard of at most 1,024
/// raw events and 2 MiB, events normalized and causally ordered. Legacy and direct writes only;
/// sealing always numbers parts.
pub fn single(identity: &ShardIdentity, events: Vec<Event>) -> Result<Shard, Error> {
    let identity = identity.normalized()?;
    let events = normalize_events(&identity, events, MAX_EVENTS)?;
    if let Some(e) = events.iter().find(|e| e.json.len() + 1 > MAX_BYTES) {
        return Err(Error::EventTooLarge(e.event_id.clone()));
    }
    let content = content(&events);
    if content.len() > MAX_BYTES {
        return Err(Error::RawLimit(MAX_EVENTS));
    }
    Ok(Shard::new(
        relative_path(&identity, None)?,
        events,
        Arc::from(content),
    ))
}

/// The text of a stored shard file read with a cap of [`MAX_BYTES`]: `bytes` as UTF-8, or
/// [`Error::NotUtf8`] naming `path`. (A read that hit the cap is [`Error::FileTooLarge`].)
pub fn text_of(bytes: Vec<u8>, path: &str) -> Result<String, Error> {
    String::from_utf8(bytes).map_err(|_| Error::NotUtf8(path.to_owned()))
}

/// `parseActionEventShardContent`: final newline required, no empty line, no `\r`,
/// each line canonical (source `<path>:<line>`). Does not check order.
pub fn parse_content(text: &str, path: &str) -> Result<Vec<Event>, Error> {
    Ok(parse_content_with(text, path, |_| ())?
        .into_iter()
        .map(|(e, ())| e)
        .collect())
}

/// [`parse_content`], handing each valid event's line to `inspect` on the thread that parsed it
/// ([`Event::parse_lines_with`]): the events come back with what `inspect` returned.
pub fn parse_content_with<T, F>(
    text: &str,
    path: &str,
    inspect: F,
) -> Result<Vec<(Event, T)>, Error>
where
    T: Send,
    F: Fn(&str) -> T + Sync,
{
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(body) = text.strip_suffix('\n') else {
        return Err(Error::NoFinalNewline(path.to_owned()));
    };
    let lines: Vec<&str> = body.split('\n').collect();
    if lines.iter().any(|l| l.is_empty() || l.ends_with('\r')) {
        return Err(Error::NotCanonical(path.to_owned()));
    }
    let sources = lines
        .iter()
        .enumerate()
        .map(|(i, line)| (*line, format!("{path}:{}", i + 1)));
    Event::parse_lines_with(sources, inspect)
        .into_iter()
        .map(|r| r.map_err(Error::from))
        .collect()
}

/// Direct shard validation: 1…1,024 events in exact canonical causal order.
pub fn check_file_events(events: &[Event], path: &str) -> Result<(), Error> {
    if events.is_empty() {
        return Err(Error::NoEvents(path.to_owned()));
    }
    if events.len() > MAX_EVENTS {
        return Err(Error::TooManyEvents(path.to_owned()));
    }
    let order = event::causal_order(events)?;
    if order.iter().enumerate().any(|(i, &j)| i != j) {
        return Err(Error::NotCausalOrder(path.to_owned()));
    }
    Ok(())
}

/// The parts of a shard path: `(partition date, part)` when it matches the import path regex
/// `^ledger/v1/events/\d{4}/\d{2}/\d{2}/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+\.jsonl$`.
pub fn parse_path(path: &str) -> Option<(String, Option<Part>)> {
    let rest = path.strip_prefix("ledger/v1/events/")?;
    let segs: Vec<&str> = rest.split('/').collect();
    if segs.len() != 6 {
        return None;
    }
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(segs[0], 4) || !digits(segs[1], 2) || !digits(segs[2], 2) {
        return None;
    }
    let portable = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    };
    let stem = segs[5].strip_suffix(".jsonl")?;
    if !portable(segs[3]) || !portable(segs[4]) || !portable(stem) {
        return None;
    }
    let part = stem.len().checked_sub(22).and_then(|at| {
        let tail = &stem[at..];
        let (i, c) = tail.strip_prefix("-part-")?.split_once("-of-")?;
        (digits(i, 6) && digits(c, 6)).then(|| (i.parse().ok(), c.parse().ok()))
    });
    let part = match part {
        Some((Some(i), Some(c))) => Some((i, c)),
        _ => None,
    };
    Some((format!("{}-{}-{}", segs[0], segs[1], segs[2]), part))
}

/// Create-only rule for an existing shard file: identical bytes, or canonical content that
/// is replay-equivalent line by line to `candidate` (the existing, first-writer bytes then win).
/// `Ok(false)` means a conflict; an existing file that is not canonical is an error.
pub fn existing_is_equivalent(existing: &str, candidate: &Shard) -> Result<bool, Error> {
    if existing == &*candidate.content {
        return Ok(true);
    }
    let events = parse_content(existing, &candidate.path)
        .map_err(|_| Error::NotCanonical(candidate.path.clone()))?;
    if content(&events) != existing {
        return Err(Error::NotCanonical(candidate.path.clone()));
    }
    Ok(events.len() == candidate.events.len()
        && events
            .iter()
            .zip(&candidate.events)
            .all(|(a, b)| a.replay_json() == b.replay_json()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_segments() {
        assert_eq!(bounded_path_segment("con", 120), "_con-1143da2bc54c");
        assert_eq!(bounded_path_segment("console", 120), "console");
        assert_eq!(bounded_path_segment("com10", 120), "com10");
        assert!(bounded_path_segment("COM1.txt", 120).starts_with("_COM1.txt-"));
        assert_eq!(safe_path_segment("--a b--"), "a-b");
        assert_eq!(safe_path_segment("///"), "unknown");
        assert_eq!(safe_path_segment(".."), "unknown");
        let long = "x".repeat(130);
        let b = bounded_path_segment(&long, 120);
        assert_eq!(b.len(), 120);
        assert!(b.starts_with(&"x".repeat(107)));
        let dot = bounded_path_segment("job.", 64);
        assert!(dot.starts_with("job-"), "{dot}");
        assert_eq!(dot.len(), 3 + 13);
    }

    #[test]
    fn worked_example_path() {
        let id = ShardIdentity::worked_example();
        assert_eq!(
            relative_path(&id, Some((1, 1))).unwrap(),
            "ledger/v1/events/2026/07/12/openclaw-clawsweeper/review.process.default/123-2-review-f64c7bbdc35c-part-000001-of-000001.jsonl"
        );
        assert_eq!(relative_path(&id, Some((2, 1))), Err(Error::PartOrder));
        assert_eq!(relative_path(&id, Some((0, 1))), Err(Error::PartRange));
    }

    #[test]
    fn path_parsing() {
        let p =
            "ledger/v1/events/2026/07/12/o-r/prod/1-2-job-abcdefabcdef-part-000002-of-000003.jsonl";
        assert_eq!(parse_path(p), Some(("2026-07-12".into(), Some((2, 3)))));
        let p = "ledger/v1/events/2026/07/12/o-r/prod/1-2-job-abcdefabcdef.jsonl";
        assert_eq!(parse_path(p), Some(("2026-07-12".into(), None)));
        assert_eq!(
            parse_path("ledger/v1/events/2026/07/12/o r/p/x.jsonl"),
            None
        );
        assert_eq!(parse_path("ledger/v1/events/2026/7/12/o/p/x.jsonl"), None);
        assert_eq!(
            parse_path("ledger/v1/events/2026/07/12/o/p/q/x.jsonl"),
            None
        );
    }
}
