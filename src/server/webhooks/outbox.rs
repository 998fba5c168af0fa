//! The durable outbox of the webhooks: what was queued and not yet delivered survives a
//! restart, a SIGKILL or a power loss.
//!
//! # Files
//!
//! In the outbox directory ([`super::outbox_dir`]), every file written create-only through the
//! project's safe file layer ([`crate::writer::files::Root::write_create_only`]: a staging file,
//! fsynced, hard-linked to its final name, the directory fsynced), as the CrabFleet outbox
//! ([`crate::live::outbox`]) writes its requests, so that a name never holds part of its bytes:
//!
//! - `lock`: held (`flock`, exclusive) by the one server that delivers from this outbox.
//! - `queue/<seq>.jsonl`: the deliveries of one landed batch, one JSON object a line
//!   (`delivery_id`, `endpoint`, `event`, `body`: the exact bytes to send). `seq` (20 digits)
//!   grows with each batch.
//! - `queue/<seq>.<index>.sent`: the delivery on line `index` (from 0) is settled: answered 2xx,
//!   or moved to `dead/`. Empty.
//! - `dead/<delivery_id>.json`: a dead letter: the delivery, its attempts, its last error and
//!   when it was given up.
//!
//! A segment whose every line is settled is removed, then its marks.
//!
//! # Crash rules
//!
//! A kill leaves a segment whole or absent (its staging file, `*.tmp`, is removed at the next
//! start); a mark whole or absent. At start ([`Outbox::open`]) every line without a mark is
//! pending again, except one whose dead letter exists (the kill fell between the dead letter and
//! its mark, which is then written). A kill after a receiver's 2xx and before the mark sends the
//! delivery again: at least once, never lost. Marks left by a kill between a segment's removal
//! and theirs are removed, and a new segment's number is above every number on disk, so a left
//! mark never settles a new line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::writer::files::{EntryKind, Root, Written};

/// Largest segment read back.
const MAX_SEGMENT_BYTES: u64 = 256 * 1024 * 1024;
/// Most entries a directory of the outbox may hold.
const MAX_ENTRIES: usize = 4 * 1024 * 1024;

/// What can go wrong with the outbox. Holds no secret (the files hold none).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error(transparent)]
    Files(#[from] crate::writer::files::Error),
    /// A file could not be removed, or the lock taken.
    #[error("webhook outbox {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Another process delivers from this outbox.
    #[error(
        "webhook outbox {0} is locked by another serve process (one server delivers from an outbox)"
    )]
    Locked(PathBuf),
    /// A delivery id could not be made.
    #[error("cannot make a delivery id: {0}")]
    Random(crate::random::Unavailable),
}

/// One delivery, as a segment line holds it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Line {
    /// `wd_` and a UUID: `X-DashClaw-Delivery`.
    pub delivery_id: String,
    /// The endpoint's name.
    pub endpoint: String,
    /// The event's name.
    pub event: String,
    /// The exact body to send.
    pub body: String,
}

/// A pending delivery: where its line is, and the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its segment's number.
    pub seq: u64,
    /// Its line in the segment (from 0).
    pub index: u32,
    /// How many lines the segment has.
    pub of: u32,
    /// The line.
    pub line: Arc<Line>,
}

/// What [`Outbox::open`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// The deliveries still pending, in queue order.
    pub pending: Vec<Delivery>,
    /// The segments that could not be read (kept on disk, named here for the log).
    pub unreadable: Vec<String>,
}

/// The outbox, open and locked.
pub struct Outbox {
    root: Root,
    _lock: std::fs::File,
    next: Mutex<u64>,
    scan: Mutex<Option<Scan>>,
}

fn segment(seq: u64) -> String {
    format!("queue/{seq:020}.jsonl")
}

fn mark(seq: u64, index: u32) -> String {
    format!("queue/{seq:020}.{index}.sent")
}

/// The number of a queue file name: `<seq>.jsonl` or `<seq>.<index>.sent`.
fn parse_name(name: &str) -> Option<(u64, Option<u32>)> {
    let (seq, rest) = name.split_once('.')?;
    if seq.len() != 20 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = seq.parse().ok()?;
    if rest == "jsonl" {
        return Some((seq, None));
    }
    let index = rest.strip_suffix(".sent")?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((seq, Some(index.parse().ok()?)))
}

impl Outbox {
    /// Creates (when absent) and locks the outbox at `dir`, clears what killed writers left, and
    /// reads what is pending ([`Outbox::take_scan`]).
    ///
    /// # Errors
    /// [`Error::Locked`] when another process holds it; [`Error::Files`], [`Error::Io`].
    pub fn open(dir: &Path) -> Result<Outbox, Error> {
        let root = Root::open_or_create(dir, "webhook outbox")?;
        let io = |path: PathBuf| move |source| Error::Io { path, source };
        let lock_path = dir.join("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io(lock_path.clone()))?;
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(Error::Locked(dir.to_owned())),
            Err(e) => return Err(io(lock_path)(e.into())),
        }
        for sub in ["queue", "dead"] {
            std::fs::create_dir_all(dir.join(sub)).map_err(io(dir.join(sub)))?;
            root.remove_dead_staging(sub, MAX_ENTRIES)?;
        }
        let outbox = Outbox {
            root,
            _lock: lock,
            next: Mutex::new(0),
            scan: Mutex::new(None),
        };
        let scan = outbox.scan()?;
        *outbox.scan.lock().unwrap_or_else(|e| e.into_inner()) = Some(scan);
        Ok(outbox)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// What was pending at [`Outbox::open`]; `None` after the first call.
    pub fn take_scan(&self) -> Option<Scan> {
        self.scan.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn scan(&self) -> Result<Scan, Error> {
        let listed = self
            .root
            .list_dir("queue", MAX_ENTRIES)?
            .unwrap_or_default();
        let mut segments = BTreeSet::new();
        let mut marks: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
        let mut high = None;
        for (name, kind) in &listed {
            if *kind != EntryKind::File {
                continue;
            }
            let Some((seq, index)) = parse_name(name) else {
                continue;
            };
            high = high.max(Some(seq));
            match index {
                None => {
                    segments.insert(seq);
                }
                Some(i) => {
                    marks.entry(seq).or_default().insert(i);
                }
            }
        }
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = high.map_or(0, |h| h + 1);
        // Marks of segments already removed: a kill fell between the two removals.
        for (seq, indices) in &marks {
            if !segments.contains(seq) {
                for i in indices {
                    self.remove(&mark(*seq, *i))?;
                }
            }
        }
        let mut scan = Scan::default();
        for seq in segments {
            let lines = match self.read_segment(seq) {
                Ok(lines) => lines,
                Err(why) => {
                    scan.unreadable.push(format!(
                        "{}: {why}",
                        self.root.display_path(&segment(seq)).display()
                    ));
                    continue;
                }
            };
            let done = marks.remove(&seq).unwrap_or_default();
            let of = lines.len() as u32;
            let mut left = 0;
            for (i, line) in lines.into_iter().enumerate() {
                let index = i as u32;
                if done.contains(&index) {
                    continue;
                }
                if self.is_dead(&line.delivery_id)? {
                    self.mark_sent(seq, index)?;
                    continue;
                }
                left += 1;
                scan.pending.push(Delivery {
                    seq,
                    index,
                    of,
                    line: Arc::new(line),
                });
            }
            if left == 0 {
                self.finish(seq, of)?;
            }
        }
        Ok(scan)
    }

    fn read_segment(&self, seq: u64) -> Result<Vec<Line>, String> {
        let text = self
            .root
            .read_text(&segment(seq), MAX_SEGMENT_BYTES, "webhook outbox segment")
            .map_err(|e| e.to_string())?
            .ok_or("removed meanwhile")?;
        text.lines()
            .enumerate()
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
            .collect()
    }

    fn is_dead(&self, delivery_id: &str) -> Result<bool, Error> {
        Ok(self
            .root
            .entry_kind(&format!("dead/{delivery_id}.json"))?
            .is_some())
    }

    /// Writes `lines` as a new segment, durably, and returns them as pending deliveries.
    ///
    /// # Errors
    /// [`Error::Files`]: nothing was queued.
    pub fn append(&self, lines: Vec<Line>) -> Result<Vec<Delivery>, Error> {
        let mut text = String::new();
        for line in &lines {
            // A struct of strings always serializes.
            text.push_str(&serde_json::to_string(line).unwrap_or_default());
            text.push('\n');
        }
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let seq = *next;
            *next += 1;
            match self.root.write_create_only(
                &segment(seq),
                text.as_bytes(),
                "webhook outbox segment",
            )? {
                Written::Created => {
                    let of = lines.len() as u32;
                    return Ok(lines
                        .into_iter()
                        .enumerate()
                        .map(|(i, line)| Delivery {
                            seq,
                            index: i as u32,
                            of,
                            line: Arc::new(line),
                        })
                        .collect());
                }
                Written::Exists => {}
            }
        }
    }

    /// Marks line `index` of segment `seq` settled.
    ///
    /// # Errors
    /// [`Error::Files`].
    pub fn mark_sent(&self, seq: u64, index: u32) -> Result<(), Error> {
        self.root
            .write_create_only(&mark(seq, index), b"", "webhook outbox mark")?;
        Ok(())
    }

    /// Writes the dead letter of `delivery` (`record`: its JSON), then marks it settled.
    ///
    /// # Errors
    /// [`Error::Files`].
    pub fn bury(&self, delivery: &Delivery, record: &str) -> Result<(), Error> {
        self.root.write_create_only(
            &format!("dead/{}.json", delivery.line.delivery_id),
            record.as_bytes(),
            "webhook dead letter",
        )?;
        self.mark_sent(delivery.seq, delivery.index)
    }

    /// Removes segment `seq` (of `of` lines), every line settled, then its marks.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn finish(&self, seq: u64, of: u32) -> Result<(), Error> {
        self.remove(&segment(seq))?;
        for i in 0..of {
            self.remove(&mark(seq, i))?;
        }
        let queue = self.root.path().join("queue");
        crate::durable::sync_dir(&queue).map_err(|source| Error::Io {
            path: queue,
            source,
        })
    }

    fn remove(&self, rel: &str) -> Result<(), Error> {
        let path = self.root.path().join(rel);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { path, source }),
        }
    }

    /// The dead letters kept.
    ///
    /// # Errors
    /// [`Error::Files`].
    pub fn dead_count(&self) -> Result<u64, Error> {
        Ok(self
            .root
            .list_dir("dead", MAX_ENTRIES)?
            .unwrap_or_default()
            .iter()
            .filter(|(n, k)| *k == EntryKind::File && n.ends_with(".json"))
            .count() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u32) -> Line {
        Line {
            delivery_id: format!("wd_{n:08}"),
            endpoint: "ops".into(),
            event: "action.created".into(),
            body: format!("{{\"n\":{n}}}"),
        }
    }

    fn pending(dir: &Path) -> Vec<(u64, u32, String)> {
        let outbox = Outbox::open(dir).unwrap();
        let scan = outbox.take_scan().unwrap();
        assert!(scan.unreadable.is_empty(), "{:?}", scan.unreadable);
        scan.pending
            .iter()
            .map(|d| (d.seq, d.index, d.line.delivery_id.clone()))
            .collect()
    }

    #[test]
    fn what_is_not_settled_is_pending_again_after_a_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("outbox");
        {
            let outbox = Outbox::open(&dir).unwrap();
            assert!(outbox.take_scan().unwrap().pending.is_empty());
            let a = outbox.append(vec![line(0), line(1), line(2)]).unwrap();
            let b = outbox.append(vec![line(3)]).unwrap();
            assert_eq!((a[0].seq, b[0].seq, a[2].index, a[2].of), (0, 1, 2, 3));
            // A second server cannot deliver from it.
            assert!(matches!(Outbox::open(&dir), Err(Error::Locked(_))));
            outbox.mark_sent(0, 1).unwrap();
            outbox.bury(&a[2], "{}").unwrap();
            assert_eq!(outbox.dead_count().unwrap(), 1);
        }
        assert_eq!(
            pending(&dir),
            [(0, 0, "wd_00000000".into()), (1, 0, "wd_00000003".into())]
        );
    }

    #[test]
    fn a_kill_at_any_point_loses_nothing_and_leaves_no_debris_that_settles_a_new_line() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("outbox");
        let q = dir.join("queue");
        {
            let outbox = Outbox::open(&dir).unwrap();
            let a = outbox.append(vec![line(0), line(1)]).unwrap();
            outbox.append(vec![line(2)]).unwrap();
            // Killed between a dead letter and its mark.
            outbox
                .root
                .write_create_only("dead/wd_00000001.json", b"{}", "t")
                .unwrap();
            outbox.mark_sent(a[0].seq, 0).unwrap();
        }
        // A staging file of a dead writer (as a kill mid-write leaves it): removed, never read.
        std::fs::write(
            q.join(format!(
                "{:020}.jsonl.4194305.01234567-89ab-4def-8123-456789abcdef.tmp",
                7
            )),
            b"half a li",
        )
        .unwrap();
        // Marks of a removed segment (killed between the removals), numbered above the rest.
        std::fs::write(q.join(format!("{:020}.0.sent", 9)), b"").unwrap();
        let outbox = Outbox::open(&dir).unwrap();
        let scan = outbox.take_scan().unwrap();
        let left: Vec<_> = scan.pending.iter().map(|d| (d.seq, d.index)).collect();
        assert_eq!(left, [(1, 0)]);
        // The next segment is numbered above every number seen (the stray marks' 9), so no old
        // mark could settle one of its lines.
        assert_eq!(outbox.append(vec![line(4)]).unwrap()[0].seq, 10);
        outbox.mark_sent(1, 0).unwrap();
        outbox.finish(1, 1).unwrap();
        drop(outbox);
        // Segment 0 (all settled) and 1 (finished) were removed with their marks, the staging
        // file and the stray marks too.
        let mut names: Vec<String> = std::fs::read_dir(&q)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [format!("{:020}.jsonl", 10)]);
        assert_eq!(pending(&dir), [(10, 0, "wd_00000004".into())]);
    }

    #[test]
    fn an_unreadable_segment_is_named_and_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("outbox");
        drop(Outbox::open(&dir).unwrap());
        let bad = dir.join("queue").join(format!("{:020}.jsonl", 0));
        std::fs::write(&bad, b"not json\n").unwrap();
        let outbox = Outbox::open(&dir).unwrap();
        let scan = outbox.take_scan().unwrap();
        assert_eq!(scan.unreadable.len(), 1, "{:?}", scan.unreadable);
        assert!(
            scan.unreadable[0].contains("line 1"),
            "{:?}",
            scan.unreadable
        );
        assert!(bad.exists());
        assert_eq!(outbox.append(vec![line(0)]).unwrap()[0].seq, 1);
    }
}
