//! Monthly segments: the compacted form of a month's hot shards (our format, the
//! reference leaves it open). Pure format code: paths, caps, the manifest's canonical bytes and
//! strict parsing, packing shards into segments, and cutting a shard's bytes back out. No I/O.
//!
//! # Layout
//!
//! ```text
//! ledger/v1/segments/YYYY/MM/segment-0001.jsonl   folded shards, concatenated
//! ledger/v1/segments/YYYY/MM/segment-0002.jsonl   ...
//! ledger/v1/segments/YYYY/MM/manifest.json        one per month, canonical JSON + "\n"
//! ```
//!
//! A **segment** is the byte-exact concatenation of whole shard files of one month, in shard
//! path order. Shards are canonical JSONL (every line one canonical event, each line ending in
//! `\n`, no empty line, no `\r`), so a segment is itself canonical event lines, and a shard's exact
//! bytes are the lines `first_line .. first_line + lines` of its segment (1-based), newlines
//! included. A shard never spans two segments. Caps ([`MAX_SEGMENT_BYTES`], [`MAX_SEGMENT_LINES`])
//! are four times the shard caps (2 MiB, 1,024 events), so any shard fits in an empty segment;
//! packing is greedy in path order and starts a new segment when the next shard would pass
//! either cap. Segment names are numbered from `segment-0001.jsonl` without gaps, at most
//! [`MAX_SEGMENTS`] per month.
//!
//! The **manifest** lists every segment and every replaced shard:
//!
//! ```text
//! {"generation":1,"month":"2026-03","schema":"action-ledger.segment-manifest","schema_version":1,
//!  "segments":[{"bytes":…,"lines":…,"name":"segment-0001.jsonl","sha256":"…"},…],
//!  "shards":[{"bytes":…,"events":…,"first_line":1,"lines":…,"path":"ledger/v1/events/2026/03/…",
//!             "replay_sha256":"…","segment":"segment-0001.jsonl","sha256":"…"},…]}
//! ```
//!
//! (one line, no whitespace, keys in canonical order). `sha256` is of the exact bytes (of the
//! segment file, or of the original shard file); `replay_sha256` is the shard's replay digest
//! (the value its shard-set reservation lists); `events` equals `lines`. Shard
//! entries are sorted by path and unique; within each segment they tile its lines exactly, in
//! path order, and their bytes add up to the segment's bytes.
//!
//! **Late folds.** Segments are create-only. When new hot shards appear in a month that is
//! already compacted (a late publication), the next compaction packs them into *new* segments
//! numbered after the existing ones and replaces `manifest.json` by one with `generation` + 1 that
//! keeps every old segment and shard entry byte-identical and adds the new ones. A replaced
//! manifest is accepted by `verify --range` only when it is such a superset ([`Manifest::extends`]).
//!
//! The manifest is parsed by [`Manifest::parse`] token by token against its canonical encoding,
//! not through the event-sized limits of [`crate::canonical::parse`] (10,000 nodes), because a
//! busy month lists many thousand shards; its own cap is [`MAX_MANIFEST_BYTES`].

use std::collections::HashMap;
use std::fmt;

use crate::canonical::{self, Value};
use crate::identity::Digest;
use crate::ledger::shard;

/// Directory of all segments.
pub const SEGMENTS_ROOT: &str = "ledger/v1/segments";
/// Schema string of a manifest.
pub const MANIFEST_SCHEMA: &str = "action-ledger.segment-manifest";
/// File name of a month's manifest.
pub const MANIFEST_NAME: &str = "manifest.json";
/// Most bytes in one segment file: four times [`shard::MAX_BYTES`] (8 MiB).
pub const MAX_SEGMENT_BYTES: u64 = 4 * shard::MAX_BYTES as u64;
/// Most lines (events) in one segment file: four times [`shard::MAX_EVENTS`] (4,096).
pub const MAX_SEGMENT_LINES: u32 = 4 * shard::MAX_EVENTS as u32;
/// Most segments in one month (`segment-0001.jsonl` … `segment-9999.jsonl`).
pub const MAX_SEGMENTS: u32 = 9999;
/// Largest manifest file readers accept (64 MiB: about 180,000 shard entries).
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024 * 1024;

/// A manifest or a segment set that breaks the format.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The manifest's bytes are not a canonical manifest of the expected shape.
    #[error(
        "{path} is not a valid segment manifest: {reason}; restore it from the compaction commit"
    )]
    InvalidManifest {
        /// The manifest path.
        path: String,
        /// What is wrong, e.g. "shard entries are not sorted by path".
        reason: String,
    },
    /// A month already holds [`MAX_SEGMENTS`] segments.
    #[error("{month} already has {MAX_SEGMENTS} segments: no segment can be added")]
    TooManySegments {
        /// The month, `YYYY-MM`.
        month: Month,
    },
    /// A shard to fold does not fit the format (too large, not reproducible from its lines).
    #[error("{path} cannot be folded into a segment: {reason}")]
    NotFoldable {
        /// The shard path.
        path: String,
        /// Why.
        reason: String,
    },
}

/// A calendar month, the unit of compaction. `Display` is `YYYY-MM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Month {
    /// 0001–9999.
    pub year: u16,
    /// 1–12.
    pub month: u8,
}

impl Month {
    /// The month of a `YYYY-MM-DD` partition date (also accepts `YYYY-MM`).
    pub fn of_date(date: &str) -> Option<Month> {
        let b = date.as_bytes();
        if !date.is_ascii()
            || !(date.len() == 7 || (date.len() == 10 && b[7] == b'-'))
            || b[4] != b'-'
        {
            return None;
        }
        let digits = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
        if !digits(&date[..4]) || !digits(&date[5..7]) {
            return None;
        }
        let year: u16 = date[..4].parse().ok()?;
        let month: u8 = date[5..7].parse().ok()?;
        (year >= 1 && (1..=12).contains(&month)).then_some(Month { year, month })
    }

    /// The month of a shard path (`ledger/v1/events/YYYY/MM/...`).
    pub fn of_shard(path: &str) -> Option<Month> {
        let (date, _) = shard::parse_path(path)?;
        Month::of_date(&date)
    }

    /// The month after this one.
    pub fn next(self) -> Month {
        if self.month == 12 {
            Month {
                year: self.year + 1,
                month: 1,
            }
        } else {
            Month {
                year: self.year,
                month: self.month + 1,
            }
        }
    }

    /// Seconds since the Unix epoch of the first instant (00:00:00 UTC on day 1).
    pub fn start_epoch_seconds(self) -> i64 {
        crate::time::day_start_epoch_seconds(i32::from(self.year), self.month, 1)
            .expect("any u16 year is inside the calendar's range, and month is 1-12")
    }

    /// `ledger/v1/events/YYYY/MM`: the directory of the month's hot shards.
    pub fn events_dir(self) -> String {
        format!("{}/{:04}/{:02}", shard::EVENTS_ROOT, self.year, self.month)
    }

    /// `ledger/v1/segments/YYYY/MM`.
    pub fn segments_dir(self) -> String {
        format!("{SEGMENTS_ROOT}/{:04}/{:02}", self.year, self.month)
    }

    /// `ledger/v1/segments/YYYY/MM/manifest.json`.
    pub fn manifest_path(self) -> String {
        format!("{}/{MANIFEST_NAME}", self.segments_dir())
    }

    /// The full path of the segment file `name` of this month.
    pub fn segment_path(self, name: &str) -> String {
        format!("{}/{name}", self.segments_dir())
    }
}

impl fmt::Display for Month {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

/// `segment-NNNN.jsonl` for index 1…[`MAX_SEGMENTS`].
pub fn segment_name(index: u32) -> String {
    format!("segment-{index:04}.jsonl")
}

/// A file under [`SEGMENTS_ROOT`] that the format knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentFile {
    /// `YYYY/MM/manifest.json`.
    Manifest(Month),
    /// `YYYY/MM/segment-NNNN.jsonl` with its index.
    Segment(Month, u32),
}

impl SegmentFile {
    /// The month the file belongs to.
    pub fn month(self) -> Month {
        match self {
            SegmentFile::Manifest(m) | SegmentFile::Segment(m, _) => m,
        }
    }
}

/// Classifies a path under `ledger/v1/segments/`; `None` for anything the format does not name
/// (other names, other depths, months out of range, index 0 or past [`MAX_SEGMENTS`]).
pub fn parse_path(path: &str) -> Option<SegmentFile> {
    let rest = path.strip_prefix(SEGMENTS_ROOT)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (y, m, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 {
        return None;
    }
    let month = Month::of_date(&format!("{y}-{m}"))?;
    if file == MANIFEST_NAME {
        return Some(SegmentFile::Manifest(month));
    }
    let n = file.strip_prefix("segment-")?.strip_suffix(".jsonl")?;
    if n.len() != 4 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let index: u32 = n.parse().ok()?;
    (1..=MAX_SEGMENTS)
        .contains(&index)
        .then_some(SegmentFile::Segment(month, index))
}

/// Whether `path` is a month's `manifest.json`.
pub fn is_manifest_path(path: &str) -> bool {
    matches!(parse_path(path), Some(SegmentFile::Manifest(_)))
}

/// One segment file as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentEntry {
    /// `segment-NNNN.jsonl`.
    pub name: String,
    /// SHA-256 of the file's bytes.
    pub sha256: Digest,
    /// Size in bytes (≤ [`MAX_SEGMENT_BYTES`]).
    pub bytes: u64,
    /// Number of lines (≤ [`MAX_SEGMENT_LINES`]).
    pub lines: u32,
}

/// One replaced shard as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardEntry {
    /// The original shard path (`ledger/v1/events/YYYY/MM/DD/...jsonl`).
    pub path: String,
    /// SHA-256 of the original shard file's exact bytes.
    pub sha256: Digest,
    /// Replay digest of its events.
    pub replay_sha256: Digest,
    /// Number of events (equals `lines`).
    pub events: u32,
    /// Size of the original file in bytes.
    pub bytes: u64,
    /// The segment holding its lines.
    pub segment: String,
    /// First line in that segment, 1-based.
    pub first_line: u32,
    /// Number of lines.
    pub lines: u32,
}

/// A month's manifest. Build with [`fold`], read with [`Manifest::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The month it covers.
    pub month: Month,
    /// 1 for the first compaction of the month, +1 for each late fold.
    pub generation: u32,
    /// Segments in index order.
    pub segments: Vec<SegmentEntry>,
    /// Replaced shards in path order.
    pub shards: Vec<ShardEntry>,
}

/// What is wrong with a manifest, or with a manifest replacing another ([`Manifest::check`],
/// [`Manifest::extends`]), as a phrase that completes "the manifest is invalid: …".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ManifestDefect(pub String);

impl Manifest {
    /// The file bytes: canonical JSON plus `\n`.
    pub fn to_text(&self) -> String {
        let n = |v: u64| Value::from(v as i64);
        let segments = self
            .segments
            .iter()
            .map(|s| {
                Value::object([
                    ("bytes", n(s.bytes)),
                    ("lines", n(u64::from(s.lines))),
                    ("name", Value::str(&s.name)),
                    ("sha256", Value::str(s.sha256.as_str())),
                ])
            })
            .collect();
        let shards = self
            .shards
            .iter()
            .map(|e| {
                Value::object([
                    ("bytes", n(e.bytes)),
                    ("events", n(u64::from(e.events))),
                    ("first_line", n(u64::from(e.first_line))),
                    ("lines", n(u64::from(e.lines))),
                    ("path", Value::str(&e.path)),
                    ("replay_sha256", Value::str(e.replay_sha256.as_str())),
                    ("segment", Value::str(&e.segment)),
                    ("sha256", Value::str(e.sha256.as_str())),
                ])
            })
            .collect();
        let v = Value::object([
            ("generation", n(u64::from(self.generation))),
            ("month", Value::str(self.month.to_string())),
            ("schema", Value::str(MANIFEST_SCHEMA)),
            ("schema_version", Value::from(1)),
            ("segments", Value::Array(segments)),
            ("shards", Value::Array(shards)),
        ]);
        format!("{}\n", canonical::to_canonical_unchecked(&v))
    }

    /// Strictly parses the manifest file of `month`: the bytes must be exactly the canonical
    /// encoding [`Manifest::to_text`] gives, and the content must satisfy every invariant of the
    /// module docs ([`Manifest::check`]).
    ///
    /// # Errors
    /// [`Error::InvalidManifest`] naming the first problem.
    pub fn parse(text: &str, month: Month) -> Result<Manifest, Error> {
        let invalid = |reason: String| Error::InvalidManifest {
            path: month.manifest_path(),
            reason,
        };
        let m = Reader::new(text)
            .manifest()
            .map_err(|at| invalid(format!("not the canonical manifest encoding {at}")))?;
        if m.month != month {
            return Err(invalid(format!("it names month {}", m.month)));
        }
        m.check().map_err(|d| invalid(d.0))?;
        Ok(m)
    }

    /// Checks the invariants: generation ≥ 1; at least one segment and one shard; segments named
    /// `segment-0001.jsonl`… without gaps and within the caps; shard entries sorted by path,
    /// unique, in this month, within the shard caps, `events == lines`, pointing at a listed
    /// segment, and tiling each segment's lines exactly in path order with bytes adding up.
    ///
    /// # Errors
    /// What is wrong, as a phrase.
    pub fn check(&self) -> Result<(), ManifestDefect> {
        if self.generation == 0 {
            return Err(ManifestDefect("generation must be at least 1".to_owned()));
        }
        if self.segments.is_empty() || self.shards.is_empty() {
            return Err(ManifestDefect("it lists no segment or no shard".to_owned()));
        }
        if self.segments.len() > MAX_SEGMENTS as usize {
            return Err(ManifestDefect(format!("more than {MAX_SEGMENTS} segments")));
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in self.segments.iter().enumerate() {
            if s.name != segment_name(i as u32 + 1) {
                return Err(ManifestDefect(format!(
                    "segment {} is listed where {} belongs",
                    s.name,
                    segment_name(i as u32 + 1)
                )));
            }
            if s.bytes > MAX_SEGMENT_BYTES || s.lines == 0 || s.lines > MAX_SEGMENT_LINES {
                return Err(ManifestDefect(format!(
                    "{} is outside the segment caps",
                    s.name
                )));
            }
            index.insert(&s.name, i);
        }
        // Per segment: the next line expected and the bytes seen.
        let mut next_line = vec![1u64; self.segments.len()];
        let mut bytes = vec![0u64; self.segments.len()];
        if let Some(w) = self.shards.windows(2).find(|w| w[0].path >= w[1].path) {
            return Err(ManifestDefect(format!(
                "shard entries are not sorted by path and unique at {}",
                w[1].path
            )));
        }
        for e in &self.shards {
            if Month::of_shard(&e.path) != Some(self.month) {
                return Err(ManifestDefect(format!(
                    "{} is not a shard path of {}",
                    e.path, self.month
                )));
            }
            if e.lines == 0
                || e.lines as usize > shard::MAX_EVENTS
                || e.events != e.lines
                || e.bytes > shard::MAX_BYTES as u64
                || e.bytes < 2 * u64::from(e.lines)
            {
                return Err(ManifestDefect(format!(
                    "{} has inconsistent counts",
                    e.path
                )));
            }
            let Some(&s) = index.get(e.segment.as_str()) else {
                return Err(ManifestDefect(format!(
                    "{} names an unlisted segment {}",
                    e.path, e.segment
                )));
            };
            if u64::from(e.first_line) != next_line[s] {
                return Err(ManifestDefect(format!(
                    "{} does not start where the previous shard of {} ends (line {})",
                    e.path, e.segment, next_line[s]
                )));
            }
            next_line[s] += u64::from(e.lines);
            bytes[s] += e.bytes;
        }
        for (i, s) in self.segments.iter().enumerate() {
            if next_line[i] != u64::from(s.lines) + 1 || bytes[i] != s.bytes {
                return Err(ManifestDefect(format!(
                    "the shard entries do not cover {} exactly",
                    s.name
                )));
            }
        }
        Ok(())
    }

    /// The entry of a shard path (binary search).
    pub fn entry(&self, path: &str) -> Option<&ShardEntry> {
        self.shards
            .binary_search_by(|e| e.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.shards[i])
    }

    /// The entry of a segment name.
    pub fn segment(&self, name: &str) -> Option<&SegmentEntry> {
        let n: u32 = parse_path(&self.month.segment_path(name)).and_then(|f| match f {
            SegmentFile::Segment(_, n) => Some(n),
            SegmentFile::Manifest(_) => None,
        })?;
        self.segments.get(n as usize - 1).filter(|s| s.name == name)
    }

    /// Whether this manifest may replace `old` (the late-fold rule): a higher generation, every
    /// old segment entry kept byte-identical at its index, every old shard entry kept identical.
    /// (New entries can then only point into new segments, since old entries already tile the
    /// old segments.)
    ///
    /// # Errors
    /// What the new manifest drops or changes, as a phrase.
    pub fn extends(&self, old: &Manifest) -> Result<(), ManifestDefect> {
        if self.month != old.month {
            return Err(ManifestDefect(format!(
                "it covers {} instead of {}",
                self.month, old.month
            )));
        }
        if self.generation <= old.generation {
            return Err(ManifestDefect(format!(
                "generation {} does not follow generation {}",
                self.generation, old.generation
            )));
        }
        if self.segments.len() < old.segments.len()
            || self.segments[..old.segments.len()] != old.segments[..]
        {
            return Err(ManifestDefect(
                "it drops or changes a segment the old manifest listed".to_owned(),
            ));
        }
        for e in &old.shards {
            if self.entry(&e.path) != Some(e) {
                return Err(ManifestDefect(format!(
                    "it drops or changes the entry of {} that the old manifest proved",
                    e.path
                )));
            }
        }
        Ok(())
    }
}

/// The line structure of one segment's bytes: shard bytes are cut out by line range.
#[derive(Clone, Debug)]
pub struct Lines {
    bytes: Vec<u8>,
    /// Byte offset of the start of each line.
    starts: Vec<usize>,
}

impl Lines {
    /// Indexes `bytes` by `\n`; a last line without `\n` still counts as a line.
    pub fn new(bytes: Vec<u8>) -> Lines {
        let mut starts = Vec::new();
        if !bytes.is_empty() {
            starts.push(0);
        }
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' && i + 1 < bytes.len() {
                starts.push(i + 1);
            }
        }
        Lines { bytes, starts }
    }

    /// The whole segment.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Number of lines.
    pub fn count(&self) -> usize {
        self.starts.len()
    }

    /// The bytes of lines `first_line .. first_line + lines` (1-based), newlines included;
    /// `None` when the range is empty or passes the end.
    pub fn slice(&self, first_line: u32, lines: u32) -> Option<&[u8]> {
        let first = (first_line as usize).checked_sub(1)?;
        let end = first.checked_add(lines as usize)?;
        if lines == 0 || end > self.starts.len() {
            return None;
        }
        let to = self.starts.get(end).copied().unwrap_or(self.bytes.len());
        Some(&self.bytes[self.starts[first]..to])
    }
}

/// A shard ready to be folded: its path, exact bytes and what the manifest records of it.
#[derive(Clone, Debug)]
pub struct Foldable {
    /// The shard path.
    pub path: String,
    /// The exact file bytes.
    pub content: String,
    /// Number of events (lines).
    pub events: u32,
    /// Replay digest of the events.
    pub replay_sha256: Digest,
}

impl Foldable {
    /// Checks that a shard is exactly reproducible from its lines and within the shard caps, and
    /// records its replay digest: the content must be canonical event lines as
    /// [`shard::parse_content`] reads them (non-empty, final `\n`, no empty line, no `\r`).
    ///
    /// # Errors
    /// [`Error::NotFoldable`] saying why.
    pub fn new(path: &str, content: String) -> Result<Foldable, Error> {
        let refuse = |reason: String| Error::NotFoldable {
            path: path.to_owned(),
            reason,
        };
        if content.len() > shard::MAX_BYTES {
            return Err(refuse(format!(
                "it is larger than {} bytes",
                shard::MAX_BYTES
            )));
        }
        let events = shard::parse_content(&content, path)
            .map_err(|e| refuse(format!("its lines are not canonical events ({e})")))?;
        if events.is_empty() || events.len() > shard::MAX_EVENTS {
            return Err(refuse(format!(
                "it holds {} events (1 to {} can be folded)",
                events.len(),
                shard::MAX_EVENTS
            )));
        }
        if shard::content(&events) != content {
            return Err(refuse(
                "its bytes are not its lines joined by newlines".into(),
            ));
        }
        Ok(Foldable {
            path: path.to_owned(),
            events: events.len() as u32,
            replay_sha256: crate::event::replay_digest(&events),
            content,
        })
    }
}

/// Packing caps of new segments. [`Caps::MAX`] (the format's caps) unless a caller wants smaller
/// segments; readers accept any segment within the format's caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Most bytes per segment (at most [`MAX_SEGMENT_BYTES`]).
    pub bytes: u64,
    /// Most lines per segment (at most [`MAX_SEGMENT_LINES`]).
    pub lines: u32,
}

impl Caps {
    /// The format's caps: 8 MiB and 4,096 lines.
    pub const MAX: Caps = Caps {
        bytes: MAX_SEGMENT_BYTES,
        lines: MAX_SEGMENT_LINES,
    };
}

/// The result of [`fold`].
#[derive(Clone, Debug)]
pub struct Folded {
    /// The month's new manifest.
    pub manifest: Manifest,
    /// The new segment files: full path and bytes, in index order.
    pub files: Vec<(String, Vec<u8>)>,
}

/// Folds `shards` (sorted by path, none already in `existing`) into new segments of `month`,
/// numbered after the existing ones, and returns the new manifest (generation + 1, or 1) with
/// the new segment files `(path, bytes)`. Greedy packing in path order within `caps` (clamped
/// to the format's caps); the result is checked ([`Manifest::check`]) and every new entry is
/// cut back out of its segment and compared with the original bytes before it is returned.
///
/// # Errors
/// [`Error::TooManySegments`]; [`Error::InvalidManifest`] when `shards` are unsorted, repeated,
/// already listed or of another month (a caller bug, reported rather than written).
pub fn fold(
    month: Month,
    existing: Option<&Manifest>,
    shards: &[Foldable],
    caps: Caps,
) -> Result<Folded, Error> {
    let max_bytes = caps.bytes.min(MAX_SEGMENT_BYTES);
    let max_lines = caps.lines.min(MAX_SEGMENT_LINES);
    let mut manifest = existing.cloned().unwrap_or(Manifest {
        month,
        generation: 0,
        segments: Vec::new(),
        shards: Vec::new(),
    });
    manifest.generation += 1;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut current: Vec<u8> = Vec::new();
    let mut current_lines = 0u32;
    let mut new_entries: Vec<ShardEntry> = Vec::new();
    let mut flush = |manifest: &mut Manifest, current: &mut Vec<u8>, lines: &mut u32| {
        if current.is_empty() {
            return Ok(());
        }
        let index = manifest.segments.len() as u32 + 1;
        if index > MAX_SEGMENTS {
            return Err(Error::TooManySegments { month });
        }
        let name = segment_name(index);
        manifest.segments.push(SegmentEntry {
            name: name.clone(),
            sha256: Digest::of(&current[..]),
            bytes: current.len() as u64,
            lines: *lines,
        });
        files.push((month.segment_path(&name), std::mem::take(current)));
        *lines = 0;
        Ok(())
    };
    for s in shards {
        let bytes = s.content.len() as u64;
        if !current.is_empty()
            && (current.len() as u64 + bytes > max_bytes || current_lines + s.events > max_lines)
        {
            flush(&mut manifest, &mut current, &mut current_lines)?;
        }
        new_entries.push(ShardEntry {
            path: s.path.clone(),
            sha256: Digest::of(&s.content),
            replay_sha256: s.replay_sha256.clone(),
            events: s.events,
            bytes,
            segment: segment_name(manifest.segments.len() as u32 + 1),
            first_line: current_lines + 1,
            lines: s.events,
        });
        current.extend_from_slice(s.content.as_bytes());
        current_lines += s.events;
    }
    flush(&mut manifest, &mut current, &mut current_lines)?;
    manifest.shards.extend(new_entries);
    manifest.shards.sort_by(|a, b| a.path.cmp(&b.path));
    let invalid = |reason: String| Error::InvalidManifest {
        path: month.manifest_path(),
        reason,
    };
    manifest.check().map_err(|d| invalid(d.0))?;
    // Prove before writing: every new entry reproduces its shard's bytes.
    let segments: HashMap<&str, Lines> = files
        .iter()
        .map(|(p, b)| (p.rsplit('/').next().unwrap_or(p), Lines::new(b.clone())))
        .collect();
    for s in shards {
        let e = manifest
            .entry(&s.path)
            .ok_or_else(|| invalid(format!("{} was not listed", s.path)))?;
        let cut = segments
            .get(e.segment.as_str())
            .and_then(|l| l.slice(e.first_line, e.lines));
        if cut != Some(s.content.as_bytes()) {
            return Err(invalid(format!("{} is not reproduced", s.path)));
        }
    }
    Ok(Folded { manifest, files })
}

/// A strict reader of the manifest's canonical encoding: it accepts exactly the bytes
/// [`Manifest::to_text`] writes (keys in order, no whitespace, integers without leading zeros,
/// strings of path and hex characters only, which canonical JSON writes without escapes).
struct Reader<'a> {
    text: &'a [u8],
    pos: usize,
}

/// Where reading stopped: a byte offset.
struct At(usize);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}", self.0)
    }
}

impl<'a> Reader<'a> {
    fn new(text: &'a str) -> Reader<'a> {
        Reader {
            text: text.as_bytes(),
            pos: 0,
        }
    }

    fn expect(&mut self, lit: &str) -> Result<(), At> {
        if self.text[self.pos..].starts_with(lit.as_bytes()) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(At(self.pos))
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn uint(&mut self) -> Result<u64, At> {
        let start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        let digits = &self.text[start..self.pos];
        if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') || digits.len() > 15 {
            return Err(At(start));
        }
        std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or(At(start))
    }

    fn u32(&mut self) -> Result<u32, At> {
        let at = self.pos;
        u32::try_from(self.uint()?).map_err(|_| At(at))
    }

    /// A string of `[A-Za-z0-9_./-]` (what paths, names, months and digests are made of).
    fn string(&mut self) -> Result<String, At> {
        self.expect("\"")?;
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
        {
            self.pos += 1;
        }
        let s = String::from_utf8(self.text[start..self.pos].to_vec()).map_err(|_| At(start))?;
        self.expect("\"")?;
        Ok(s)
    }

    fn digest(&mut self) -> Result<Digest, At> {
        let at = self.pos;
        Digest::parse(&self.string()?).ok_or(At(at))
    }

    /// `[` item (`,` item)* `]`, or `[]`.
    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> Result<T, At>) -> Result<Vec<T>, At> {
        self.expect("[")?;
        let mut out = Vec::new();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(out);
        }
        loop {
            out.push(item(self)?);
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(out);
                }
                _ => return Err(At(self.pos)),
            }
        }
    }

    fn segment_entry(&mut self) -> Result<SegmentEntry, At> {
        self.expect("{\"bytes\":")?;
        let bytes = self.uint()?;
        self.expect(",\"lines\":")?;
        let lines = self.u32()?;
        self.expect(",\"name\":")?;
        let name = self.string()?;
        self.expect(",\"sha256\":")?;
        let sha256 = self.digest()?;
        self.expect("}")?;
        Ok(SegmentEntry {
            name,
            sha256,
            bytes,
            lines,
        })
    }

    fn shard_entry(&mut self) -> Result<ShardEntry, At> {
        self.expect("{\"bytes\":")?;
        let bytes = self.uint()?;
        self.expect(",\"events\":")?;
        let events = self.u32()?;
        self.expect(",\"first_line\":")?;
        let first_line = self.u32()?;
        self.expect(",\"lines\":")?;
        let lines = self.u32()?;
        self.expect(",\"path\":")?;
        let path = self.string()?;
        self.expect(",\"replay_sha256\":")?;
        let replay_sha256 = self.digest()?;
        self.expect(",\"segment\":")?;
        let segment = self.string()?;
        self.expect(",\"sha256\":")?;
        let sha256 = self.digest()?;
        self.expect("}")?;
        Ok(ShardEntry {
            path,
            sha256,
            replay_sha256,
            events,
            bytes,
            segment,
            first_line,
            lines,
        })
    }

    fn manifest(mut self) -> Result<Manifest, At> {
        self.expect("{\"generation\":")?;
        let generation = self.u32()?;
        self.expect(",\"month\":")?;
        let at = self.pos;
        let text = self.string()?;
        let month = Month::of_date(&text)
            .filter(|m| m.to_string() == text)
            .ok_or(At(at))?;
        self.expect(&format!(
            ",\"schema\":\"{MANIFEST_SCHEMA}\",\"schema_version\":1,\"segments\":"
        ))?;
        let segments = self.list(Self::segment_entry)?;
        self.expect(",\"shards\":")?;
        let shards = self.list(Self::shard_entry)?;
        self.expect("}\n")?;
        if self.pos != self.text.len() {
            return Err(At(self.pos));
        }
        Ok(Manifest {
            month,
            generation,
            segments,
            shards,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shards of day1 job 001 (four single-part sets), as foldable inputs.
    fn day1_shards() -> Vec<Foldable> {
        let root = crate::tests::day1_job("001");
        let mut out: Vec<Foldable> = walkdir::WalkDir::new(&root)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().is_file())
            .map(|e| {
                let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy();
                Foldable::new(&rel, std::fs::read_to_string(e.path()).unwrap()).unwrap()
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    const MARCH: Month = Month {
        year: 2026,
        month: 3,
    };

    #[test]
    fn paths_and_months() {
        assert_eq!(
            parse_path("ledger/v1/segments/2026/03/manifest.json"),
            Some(SegmentFile::Manifest(MARCH))
        );
        assert_eq!(
            parse_path("ledger/v1/segments/2026/03/segment-0002.jsonl"),
            Some(SegmentFile::Segment(MARCH, 2))
        );
        for bad in [
            "ledger/v1/segments/2026/03/segment-0000.jsonl",
            "ledger/v1/segments/2026/03/segment-12345.jsonl",
            "ledger/v1/segments/2026/13/manifest.json",
            "ledger/v1/segments/2026/3/manifest.json",
            "ledger/v1/segments/2026/03/x/manifest.json",
            "ledger/v1/segments/2026/03/notes.txt",
            "ledger/v1/segments/2026/03",
            "ledger/v1/segmentsx/2026/03/manifest.json",
        ] {
            assert_eq!(parse_path(bad), None, "{bad}");
        }
        assert_eq!(MARCH.to_string(), "2026-03");
        assert_eq!(
            Month::of_date("2026-12-31").unwrap().next(),
            Month {
                year: 2027,
                month: 1
            }
        );
        assert_eq!(MARCH.start_epoch_seconds(), 1_772_323_200); // 2026-03-01T00:00:00Z
        assert_eq!(MARCH.events_dir(), "ledger/v1/events/2026/03");
        assert_eq!(Month::of_date("2026-00-01"), None);
        assert_eq!(Month::of_date("2026/03/01"), None);
    }

    #[test]
    fn fold_reproduces_every_shard_and_round_trips() {
        let shards = day1_shards();
        assert_eq!(shards.len(), 4);
        let Folded { manifest: m, files } = fold(MARCH, None, &shards, Caps::MAX).unwrap();
        assert_eq!(m.generation, 1);
        assert_eq!(files.len(), 1, "four small shards fit one segment");
        let concatenated: String = shards.iter().map(|s| s.content.as_str()).collect();
        assert_eq!(files[0].1, concatenated.as_bytes());
        assert_eq!(files[0].0, "ledger/v1/segments/2026/03/segment-0001.jsonl");
        let text = m.to_text();
        assert_eq!(Manifest::parse(&text, MARCH).unwrap(), m);
        // The generic canonical parser agrees (a small manifest is within its limits).
        let generic = canonical::parse_canonical(text.strip_suffix('\n').unwrap()).unwrap();
        assert_eq!(
            generic.get("schema").and_then(Value::as_str),
            Some(MANIFEST_SCHEMA)
        );
        let lines = Lines::new(files[0].1.clone());
        for s in &shards {
            let e = m.entry(&s.path).unwrap();
            assert_eq!(
                lines.slice(e.first_line, e.lines).unwrap(),
                s.content.as_bytes()
            );
            assert_eq!(e.sha256, Digest::of(&s.content));
        }
        assert_eq!(m.segment("segment-0001.jsonl"), Some(&m.segments[0]));
        assert_eq!(m.segment("segment-0002.jsonl"), None);
    }

    #[test]
    fn a_late_fold_adds_segments_and_extends_the_manifest() {
        let shards = day1_shards();
        let first = fold(
            MARCH,
            None,
            &[shards[0].clone(), shards[2].clone()],
            Caps::MAX,
        )
        .unwrap()
        .manifest;
        let Folded {
            manifest: second,
            files,
        } = fold(MARCH, Some(&first), &[shards[1].clone()], Caps::MAX).unwrap();
        assert_eq!(second.generation, 2);
        assert_eq!(files.len(), 1);
        assert!(files[0].0.ends_with("/segment-0002.jsonl"));
        assert_eq!(second.shards.len(), 3);
        second.extends(&first).unwrap();
        assert!(first.extends(&second).is_err(), "older generation");
        let mut dropped = second.clone();
        dropped.shards.remove(0);
        assert!(dropped.extends(&first).is_err());
        // Folding a listed shard again is refused.
        assert!(fold(MARCH, Some(&second), &[shards[1].clone()], Caps::MAX).is_err());
    }

    #[test]
    fn packing_respects_the_caps() {
        // 40 shards of 100 lines each: 4,000 lines fit a segment by lines (4,096) but not by
        // their bytes, which are chosen so that four shards need two segments.
        let line = |i: usize| format!("{{\"x\":{i}}}\n");
        let mk = |path: String, lines: u32, bytes: u64| Foldable {
            path,
            content: "y".repeat(bytes as usize - lines as usize) + &"\n".repeat(lines as usize),
            events: lines,
            replay_sha256: Digest::of(line(0)),
        };
        let p = |i: usize| {
            format!("ledger/v1/events/2026/03/10/o-r/prod/{i:03}-1-job-abcdefabcdef.jsonl")
        };
        let big = shard::MAX_BYTES as u64;
        let shards: Vec<Foldable> = (0..5).map(|i| mk(p(i), 10, big)).collect();
        let Folded { manifest: m, files } = fold(MARCH, None, &shards, Caps::MAX).unwrap();
        assert_eq!(
            files
                .iter()
                .map(|(_, b)| b.len() as u64)
                .collect::<Vec<_>>(),
            vec![4 * big, big]
        );
        assert_eq!(m.segments.len(), 2);
        let shards: Vec<Foldable> = (0..9).map(|i| mk(p(i), 1000, 10_000)).collect();
        let m = fold(MARCH, None, &shards, Caps::MAX).unwrap().manifest;
        assert_eq!(
            m.segments.iter().map(|s| s.lines).collect::<Vec<_>>(),
            vec![4000, 4000, 1000]
        );
    }

    #[test]
    fn parse_refuses_anything_but_the_canonical_valid_manifest() {
        let shards = day1_shards();
        let m = fold(MARCH, None, &shards, Caps::MAX).unwrap().manifest;
        let text = m.to_text();
        let bad = |t: String| Manifest::parse(&t, MARCH).unwrap_err().to_string();
        assert!(
            bad(text.replace("{\"generation\":1,", "{\"generation\": 1,")).contains("canonical")
        );
        assert!(bad(text.replace("\"generation\":1", "\"generation\":01")).contains("canonical"));
        assert!(bad(text.trim_end().to_owned()).contains("canonical"));
        assert!(bad(format!("{text}\n")).contains("canonical"));
        assert!(bad(text.replace("\"generation\":1", "\"generation\":0")).contains("generation"));
        assert!(
            Manifest::parse(&text, Month::of_date("2026-04").unwrap())
                .unwrap_err()
                .to_string()
                .contains("names month 2026-03")
        );
        // A line range that no longer tiles its segment.
        let mut shifted = m.clone();
        shifted.shards[1].first_line += 1;
        assert!(bad(shifted.to_text()).contains("does not start"));
        let mut unsorted = m.clone();
        unsorted.shards.swap(0, 1);
        assert!(bad(unsorted.to_text()).contains("sorted"));
        let mut counts = m.clone();
        counts.shards[0].events += 1;
        assert!(bad(counts.to_text()).contains("counts"));
        let mut short = m.clone();
        short.segments[0].lines += 1;
        assert!(bad(short.to_text()).contains("cover"));
    }

    #[test]
    fn foldable_refuses_unreproducible_shards() {
        let good = day1_shards().remove(0);
        let p = good.path.clone();
        let reason = |content: &str| {
            Foldable::new(&p, content.to_owned())
                .unwrap_err()
                .to_string()
        };
        assert!(reason("").contains("0 events"));
        assert!(reason(good.content.trim_end()).contains("not canonical"));
        assert!(reason(&format!("{}\n", good.content)).contains("not canonical"));
        assert!(reason(&good.content.replacen('\n', "\r\n", 1)).contains("not canonical"));
    }

    #[test]
    fn lines_index() {
        let l = Lines::new(b"a\nbb\nccc\n".to_vec());
        assert_eq!(l.count(), 3);
        assert_eq!(l.slice(1, 1), Some(&b"a\n"[..]));
        assert_eq!(l.slice(2, 2), Some(&b"bb\nccc\n"[..]));
        assert_eq!(l.slice(3, 2), None);
        assert_eq!(l.slice(0, 1), None);
        assert_eq!(l.slice(1, 0), None);
        let unterminated = Lines::new(b"a\nb".to_vec());
        assert_eq!(unterminated.count(), 2);
        assert_eq!(unterminated.slice(2, 1), Some(&b"b"[..]));
        assert_eq!(Lines::new(Vec::new()).count(), 0);
    }
}
