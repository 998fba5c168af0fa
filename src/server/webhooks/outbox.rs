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
//! - `queue/<seq>.<commit>.staged`: the deliveries of one batch, written before its commit's
//!   compare-and-swap ([`Outbox::stage`]), one JSON object a line (`delivery_id`, `endpoint`,
//!   `event`, `body`: the exact bytes to send). `seq` (20 digits) grows with each batch;
//!   `commit` is the hex id of the commit the deliveries belong to.
//! - `queue/<seq>.jsonl`: the same segment once its commit landed ([`Outbox::confirm`], a
//!   rename); a segment whose commit did not land is removed ([`Outbox::discard`]).
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
//! start); a mark whole or absent. A kill between a segment's staging and its confirmation
//! leaves a commit whose fate the outbox does not know: at start ([`Outbox::open`]) the caller
//! says whether it landed (in the ledger's history), and the segment is confirmed or removed,
//! so an event is sent if and only if its commit landed; a segment whose commit cannot be
//! looked up (an unreachable remote) is kept unsent until a start that can. Then every line
//! without a mark is pending again, except one whose dead letter exists (the kill fell between
//! the dead letter and its mark, which is then written). A kill after a receiver's 2xx and
//! before the mark sends the delivery again, under the same delivery id (a receiver that
//! de-duplicates by it counts it once). Marks left by a kill
//! between a segment's removal and theirs are removed, and a new segment's number is above
//! every number on disk, so a left mark never settles a new line.

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
    /// Staged segments whose commit could not be looked up, with why (kept unsent on disk).
    pub unconfirmed: Vec<String>,
    /// Staged segments removed because their commit never landed.
    pub discarded: usize,
}

/// A segment written for a commit before its compare-and-swap ([`Outbox::stage`]): confirmed
/// when the commit landed, discarded when it did not.
#[derive(Debug)]
pub struct Staged {
    seq: u64,
    commit: String,
    lines: Vec<Line>,
}

impl Staged {
    /// Its lines as pending deliveries (after [`Outbox::confirm`]).
    pub fn into_deliveries(self) -> Vec<Delivery> {
        let (seq, of) = (self.seq, self.lines.len() as u32);
        self.lines
            .into_iter()
            .enumerate()
            .map(|(i, line)| Delivery {
                seq,
                index: i as u32,
                of,
                line: Arc::new(line),
            })
            .collect()
    }
}

/// The outbox, open and locked.
pub struct Outbox {
    root: Root,
    _lock: std::fs::File,
    next: Mutex<u64>,
    scan: Mutex<Option<Scan>>,
    /// Segments confirmed whose rename failed: still under their staged name, which
    /// [`Outbox::finish`] removes with them.
    unrenamed: Mutex<BTreeMap<u64, String>>,
}

fn segment(seq: u64) -> String {
    format!("queue/{seq:020}.jsonl")
}

fn mark(seq: u64, index: u32) -> String {
    format!("queue/{seq:020}.{index}.sent")
}

fn staged(seq: u64, commit: &str) -> String {
    format!("queue/{seq:020}.{commit}.staged")
}

/// A queue file, by its name.
#[derive(Debug, PartialEq, Eq)]
enum Name {
    /// `<seq>.jsonl`
    Segment(u64),
    /// `<seq>.<index>.sent`
    Mark(u64, u32),
    /// `<seq>.<commit>.staged`
    Staged(u64, String),
}

impl Name {
    fn seq(&self) -> u64 {
        match self {
            Name::Segment(s) | Name::Mark(s, _) | Name::Staged(s, _) => *s,
        }
    }
}

fn parse_name(name: &str) -> Option<Name> {
    let (seq, rest) = name.split_once('.')?;
    if seq.len() != 20 || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = seq.parse().ok()?;
    if rest == "jsonl" {
        return Some(Name::Segment(seq));
    }
    if let Some(commit) = rest.strip_suffix(".staged") {
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        return (matches!(commit.len(), 40 | 64) && commit.bytes().all(hex))
            .then(|| Name::Staged(seq, commit.to_owned()));
    }
    let index = rest.strip_suffix(".sent")?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Name::Mark(seq, index.parse().ok()?))
}

/// Tells [`Outbox::open`] whether the commit of a staged segment (its hex id) landed:
/// `Err(why)` when that cannot be known now.
pub type Landed<'a> = dyn FnMut(&str) -> Result<bool, String> + 'a;

impl Outbox {
    /// Creates (when absent) and locks the outbox at `dir`, clears what killed writers left,
    /// settles each staged segment by whether its commit `landed`, and reads what is pending
    /// ([`Outbox::take_scan`]).
    ///
    /// # Errors
    /// [`Error::Locked`] when another process holds it; [`Error::Files`], [`Error::Io`].
    pub fn open(dir: &Path, landed: &mut Landed<'_>) -> Result<Outbox, Error> {
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
            unrenamed: Mutex::new(BTreeMap::new()),
            scan: Mutex::new(None),
        };
        let scan = outbox.scan(landed)?;
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

    fn scan(&self, landed: &mut Landed<'_>) -> Result<Scan, Error> {
        let listed = self
            .root
            .list_dir("queue", MAX_ENTRIES)?
            .unwrap_or_default();
        let mut segments = BTreeSet::new();
        let mut marks: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
        let mut staged_segments = Vec::new();
        let mut high = None;
        for (name, kind) in &listed {
            if *kind != EntryKind::File {
                continue;
            }
            let Some(name) = parse_name(name) else {
                continue;
            };
            high = high.max(Some(name.seq()));
            match name {
                Name::Segment(seq) => {
                    segments.insert(seq);
                }
                Name::Mark(seq, i) => {
                    marks.entry(seq).or_default().insert(i);
                }
                Name::Staged(seq, commit) => staged_segments.push((seq, commit)),
            }
        }
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = high.map_or(0, |h| h + 1);
        let mut scan = Scan::default();
        // Staged segments a kill left between staging and confirmation: their commit decides.
        let mut kept = BTreeSet::new();
        for (seq, commit) in staged_segments {
            let name = staged(seq, &commit);
            match landed(&commit) {
                Ok(true) => {
                    self.rename(&name, &segment(seq))?;
                    segments.insert(seq);
                }
                Ok(false) => {
                    self.remove(&name)?;
                    scan.discarded += 1;
                }
                Err(why) => {
                    scan.unconfirmed.push(format!(
                        "{}: {why}",
                        self.root.display_path(&name).display()
                    ));
                    kept.insert(seq);
                }
            }
        }
        // Marks of segments already removed: a kill fell between the two removals.
        for (seq, indices) in &marks {
            if !segments.contains(seq) && !kept.contains(seq) {
                for i in indices {
                    self.remove(&mark(*seq, *i))?;
                }
            }
        }
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

    /// Writes `lines`, the deliveries of commit `commit` (hex id), as a new staged segment,
    /// durably, before that commit's compare-and-swap. Nothing is sent until
    /// [`Outbox::confirm`].
    ///
    /// # Errors
    /// [`Error::Files`]: nothing was staged.
    pub fn stage(&self, lines: Vec<Line>, commit: &str) -> Result<Staged, Error> {
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
                &staged(seq, commit),
                text.as_bytes(),
                "webhook outbox segment",
            )? {
                Written::Created => {
                    return Ok(Staged {
                        seq,
                        commit: commit.to_owned(),
                        lines,
                    });
                }
                Written::Exists => {}
            }
        }
    }

    /// The commit of `staged` landed: its segment becomes pending (a rename, made durable by
    /// the next fsync of the directory; a kill before that leaves it staged, and the next start
    /// finds the commit landed).
    ///
    /// # Errors
    /// [`Error::Io`]: it stays under its staged name, which [`Outbox::finish`] removes once its
    /// lines are settled (a kill before that sends its unsettled lines again at the next start).
    pub fn confirm(&self, staged_segment: &Staged) -> Result<(), Error> {
        let name = staged(staged_segment.seq, &staged_segment.commit);
        let renamed = self.rename(&name, &segment(staged_segment.seq));
        if renamed.is_err() {
            self.unrenamed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(staged_segment.seq, name);
        }
        renamed
    }

    /// The commit of `staged` did not land: its segment is removed.
    ///
    /// # Errors
    /// [`Error::Io`]: it stays on disk, and the next start removes it.
    pub fn discard(&self, staged_segment: Staged) -> Result<(), Error> {
        self.remove(&staged(staged_segment.seq, &staged_segment.commit))
    }

    fn rename(&self, from: &str, to: &str) -> Result<(), Error> {
        let (from, to) = (self.root.path().join(from), self.root.path().join(to));
        std::fs::rename(&from, &to).map_err(|source| Error::Io { path: from, source })
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
        let unrenamed = self
            .unrenamed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&seq);
        if let Some(name) = unrenamed {
            self.remove(&name)?;
        }
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

    const LANDED: &str = "1111111111111111111111111111111111111111";

    /// Opens with every commit landed.
    fn open(dir: &Path) -> Result<Outbox, Error> {
        Outbox::open(dir, &mut |_| Ok(true))
    }

    /// Stages `lines` for a commit that lands, and confirms them.
    fn append(outbox: &Outbox, lines: Vec<Line>) -> Result<Vec<Delivery>, Error> {
        let staged = outbox.stage(lines, LANDED)?;
        outbox.confirm(&staged)?;
        Ok(staged.into_deliveries())
    }

    fn pending(dir: &Path) -> Vec<(u64, u32, String)> {
        let outbox = open(dir).unwrap();
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
            let outbox = open(&dir).unwrap();
            assert!(outbox.take_scan().unwrap().pending.is_empty());
            let a = append(&outbox, vec![line(0), line(1), line(2)]).unwrap();
            let b = append(&outbox, vec![line(3)]).unwrap();
            assert_eq!((a[0].seq, b[0].seq, a[2].index, a[2].of), (0, 1, 2, 3));
            // A second server cannot deliver from it.
            assert!(matches!(open(&dir), Err(Error::Locked(_))));
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
            let outbox = open(&dir).unwrap();
            let a = append(&outbox, vec![line(0), line(1)]).unwrap();
            append(&outbox, vec![line(2)]).unwrap();
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
        let outbox = open(&dir).unwrap();
        let scan = outbox.take_scan().unwrap();
        let left: Vec<_> = scan.pending.iter().map(|d| (d.seq, d.index)).collect();
        assert_eq!(left, [(1, 0)]);
        // The next segment is numbered above every number seen (the stray marks' 9), so no old
        // mark could settle one of its lines.
        assert_eq!(append(&outbox, vec![line(4)]).unwrap()[0].seq, 10);
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
        drop(open(&dir).unwrap());
        let bad = dir.join("queue").join(format!("{:020}.jsonl", 0));
        std::fs::write(&bad, b"not json\n").unwrap();
        let outbox = open(&dir).unwrap();
        let scan = outbox.take_scan().unwrap();
        assert_eq!(scan.unreadable.len(), 1, "{:?}", scan.unreadable);
        assert!(
            scan.unreadable[0].contains("line 1"),
            "{:?}",
            scan.unreadable
        );
        assert!(bad.exists());
        assert_eq!(append(&outbox, vec![line(0)]).unwrap()[0].seq, 1);
    }

    /// A kill between staging and confirmation: the segment of a commit that landed is sent,
    /// that of one that did not is removed, and one whose commit cannot be looked up is kept
    /// unsent (with its marks) until a start that can; numbering stays above all of them.
    #[test]
    fn a_staged_segment_is_sent_if_and_only_if_its_commit_landed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("outbox");
        let (won, lost, unknown) = ("a".repeat(40), "b".repeat(40), "c".repeat(64));
        {
            let outbox = open(&dir).unwrap();
            append(&outbox, vec![line(0)]).unwrap();
            outbox.stage(vec![line(1), line(2)], &won).unwrap();
            outbox.stage(vec![line(3)], &lost).unwrap();
            let kept = outbox.stage(vec![line(4), line(5)], &unknown).unwrap();
            // A discarded segment leaves nothing.
            let gone = outbox.stage(vec![line(6)], &lost).unwrap();
            outbox.discard(gone).unwrap();
            // Its first line was settled before a confirmation that a kill lost.
            outbox.mark_sent(kept.seq, 0).unwrap();
        }
        let mut asked = Vec::new();
        let outbox = Outbox::open(&dir, &mut |c: &str| {
            asked.push(c.to_owned());
            match c.as_bytes()[0] {
                b'a' => Ok(true),
                b'b' => Ok(false),
                _ => Err("the remote cannot be reached".into()),
            }
        })
        .unwrap();
        asked.sort();
        assert_eq!(asked, [won.clone(), lost.clone(), unknown.clone()]);
        let scan = outbox.take_scan().unwrap();
        let left: Vec<_> = scan
            .pending
            .iter()
            .map(|d| (d.seq, d.index, d.line.delivery_id.as_str()))
            .collect();
        assert_eq!(
            left,
            [
                (0, 0, "wd_00000000"),
                (1, 0, "wd_00000001"),
                (1, 1, "wd_00000002")
            ]
        );
        assert_eq!(scan.discarded, 1);
        assert_eq!(scan.unconfirmed.len(), 1, "{:?}", scan.unconfirmed);
        assert!(
            scan.unconfirmed[0].contains("cannot be reached"),
            "{:?}",
            scan.unconfirmed
        );
        // The discarded segments' numbers are free again; none of them left a mark.
        assert_eq!(append(&outbox, vec![line(7)]).unwrap()[0].seq, 4);
        drop(outbox);
        let mut names: Vec<String> = std::fs::read_dir(dir.join("queue"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                format!("{:020}.jsonl", 0),
                format!("{:020}.jsonl", 1),
                format!("{:020}.0.sent", 3),
                format!("{:020}.{unknown}.staged", 3),
                format!("{:020}.jsonl", 4),
            ]
        );
        // Once the commit can be looked up and landed, the unsent rest of it is pending.
        let outbox = Outbox::open(&dir, &mut |_| Ok(true)).unwrap();
        let left: Vec<_> = outbox
            .take_scan()
            .unwrap()
            .pending
            .iter()
            .map(|d| (d.seq, d.index))
            .collect();
        assert_eq!(left, [(0, 0), (1, 0), (1, 1), (3, 1), (4, 0)]);
    }

    #[test]
    fn queue_names_parse_and_nothing_else_does() {
        let seq = format!("{:020}", 42);
        let sha1 = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(parse_name(&format!("{seq}.jsonl")), Some(Name::Segment(42)));
        assert_eq!(
            parse_name(&format!("{seq}.7.sent")),
            Some(Name::Mark(42, 7))
        );
        assert_eq!(
            parse_name(&format!("{seq}.{sha1}.staged")),
            Some(Name::Staged(42, sha1.into()))
        );
        for bad in [
            format!("{seq}.{}.staged", &sha1[..39]),
            format!("{seq}.{}.staged", sha1.to_uppercase()),
            format!("{seq}.x.sent"),
            format!("{seq}..sent"),
            format!("{seq}.jsonl.123.abc.tmp"),
            "42.jsonl".into(),
            format!("{seq}.json"),
        ] {
            assert_eq!(parse_name(&bad), None, "{bad}");
        }
    }
}
