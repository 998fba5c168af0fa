//! The ledger as every reader sees it: a [`Snapshot`] in which a compacted shard path is present
//! with exactly its original bytes, cut out of its monthly segment (format in
//! [`crate::ledger::segment`]). `publish` (create-only checks), `verify` and `log` read shards through
//! this view, so a ledger reads the same before and after compaction.
//!
//! A hot shard file wins over a manifest entry for the same path (verify reports the pair).
//!
//! Two kinds of read:
//! - [`View::read`] is **checked**: the bytes cut from a segment must have the sha256 the
//!   manifest lists, and an invalid manifest or a missing segment is an error. Publish and log
//!   use it, so they never act on altered bytes.
//! - [`View::read_unchecked`] returns whatever the segments hold, and treats a month whose
//!   manifest cannot be read as having no compacted shards. `verify` uses it and reports the
//!   manifest and segment problems itself, as findings.
//!
//! Memory: manifests and segment files are cached in small most-recently-used caches
//! ([`MANIFEST_CACHE`] months, [`SEGMENT_CACHE`] segments of at most 8 MiB each), so reading a
//! ledger in path order holds one month's manifest and a few segments at a time.

use std::cell::{OnceCell, RefCell};
use std::rc::Rc;

use crate::ledger::segment::{self, Lines, Manifest, Month, SegmentFile, ShardEntry};
use crate::ledger::shard;
use crate::store::{self, Snapshot};

/// Months whose manifests are kept decoded.
pub const MANIFEST_CACHE: usize = 8;
/// Segment files kept in memory.
pub const SEGMENT_CACHE: usize = 4;

/// Why a checked read failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Git repository or an object in it could not be read; the inner error names the
    /// object or ref.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A month's manifest is not valid.
    #[error(transparent)]
    Manifest(#[from] segment::Error),
    /// The segment a compacted shard points at is missing or shorter than the manifest says.
    #[error(
        "{path} is compacted into {segment}, which is missing or shorter than its manifest says: run `action-ledger verify`"
    )]
    SegmentMissing {
        /// The compacted shard path.
        path: String,
        /// The segment path.
        segment: String,
    },
    /// The bytes cut from the segment do not have the manifest's sha256.
    #[error(
        "{path} is compacted into {segment}, but the bytes there do not have the sha256 the manifest lists: the segment or the manifest was altered; run `action-ledger verify`"
    )]
    Mismatch {
        /// The compacted shard path.
        path: String,
        /// The segment path.
        segment: String,
    },
}

/// A month's manifest as found in the tree.
#[derive(Clone, Debug)]
pub enum ManifestState {
    /// No `manifest.json` for the month.
    Absent,
    /// A file is there but is not a valid manifest.
    Invalid(segment::Error),
    /// The parsed manifest.
    Valid(Rc<Manifest>),
}

/// A small most-recently-used cache (linear scan; a handful of entries).
struct Mru<K, V> {
    cap: usize,
    items: Vec<(K, V)>,
}

impl<K: PartialEq, V: Clone> Mru<K, V> {
    fn new(cap: usize) -> Self {
        Mru {
            cap,
            items: Vec::new(),
        }
    }

    fn get(&mut self, key: &K) -> Option<V> {
        let at = self.items.iter().position(|(k, _)| k == key)?;
        let item = self.items.remove(at);
        let v = item.1.clone();
        self.items.push(item);
        Some(v)
    }

    fn put(&mut self, key: K, value: V) {
        if self.items.len() >= self.cap {
            self.items.remove(0);
        }
        self.items.push((key, value));
    }
}

/// A read view of one snapshot with compacted shards present (see the module docs).
pub struct View<'s, 'r> {
    snap: &'s Snapshot<'r>,
    manifests: RefCell<Mru<Month, ManifestState>>,
    segments: RefCell<Mru<String, Option<Rc<Lines>>>>,
    compacted: OnceCell<Vec<Month>>,
}

impl std::fmt::Debug for View<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("View")
            .field("commit", &self.snap.commit())
            .finish_non_exhaustive()
    }
}

impl<'s, 'r> View<'s, 'r> {
    /// A view of `snap`.
    pub fn new(snap: &'s Snapshot<'r>) -> View<'s, 'r> {
        View {
            snap,
            manifests: RefCell::new(Mru::new(MANIFEST_CACHE)),
            segments: RefCell::new(Mru::new(SEGMENT_CACHE)),
            compacted: OnceCell::new(),
        }
    }

    /// The snapshot below the view.
    pub fn snapshot(&self) -> &'s Snapshot<'r> {
        self.snap
    }

    /// The manifest of `month` as found in the tree (cached).
    ///
    /// # Errors
    /// [`store::Error`] when the tree or the blob cannot be read.
    pub fn manifest_state(&self, month: Month) -> Result<ManifestState, store::Error> {
        if let Some(state) = self.manifests.borrow_mut().get(&month) {
            return Ok(state);
        }
        let path = month.manifest_path();
        let state = match self.snap.read(&path, segment::MAX_MANIFEST_BYTES) {
            Ok(None) => ManifestState::Absent,
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(text) => match Manifest::parse(&text, month) {
                    Ok(m) => ManifestState::Valid(Rc::new(m)),
                    Err(e) => ManifestState::Invalid(e),
                },
                Err(_) => ManifestState::Invalid(segment::Error::InvalidManifest {
                    path,
                    reason: "it is not UTF-8".into(),
                }),
            },
            Err(store::Error::TooLarge { max, .. }) => {
                ManifestState::Invalid(segment::Error::InvalidManifest {
                    path,
                    reason: format!("it is larger than {max} bytes"),
                })
            }
            Err(e) => return Err(e),
        };
        self.manifests.borrow_mut().put(month, state.clone());
        Ok(state)
    }

    /// The valid manifest of `month`, `None` when the month has none.
    ///
    /// # Errors
    /// [`Error::Manifest`] for an invalid manifest, [`Error::Store`].
    pub fn manifest(&self, month: Month) -> Result<Option<Rc<Manifest>>, Error> {
        match self.manifest_state(month)? {
            ManifestState::Absent => Ok(None),
            ManifestState::Invalid(e) => Err(e.into()),
            ManifestState::Valid(m) => Ok(Some(m)),
        }
    }

    /// The lines of segment `name` of `month` (cached); `None` when the file is absent.
    ///
    /// # Errors
    /// [`store::Error::TooLarge`] for a file over [`segment::MAX_SEGMENT_BYTES`], other
    /// [`store::Error`]s when it cannot be read.
    pub fn segment(&self, month: Month, name: &str) -> Result<Option<Rc<Lines>>, store::Error> {
        let path = month.segment_path(name);
        if let Some(lines) = self.segments.borrow_mut().get(&path) {
            return Ok(lines);
        }
        let lines = self
            .snap
            .read(&path, segment::MAX_SEGMENT_BYTES)?
            .map(|bytes| Rc::new(Lines::new(bytes)));
        self.segments.borrow_mut().put(path, lines.clone());
        Ok(lines)
    }

    /// The bytes the segment holds for `entry` of `month`'s manifest, unchecked; `None` when the
    /// segment is absent, over its cap, or shorter than the entry's line range.
    ///
    /// # Errors
    /// [`store::Error`] when the segment cannot be read.
    pub fn cut(&self, month: Month, entry: &ShardEntry) -> Result<Option<Vec<u8>>, store::Error> {
        let lines = match self.segment(month, &entry.segment) {
            Ok(lines) => lines,
            Err(store::Error::TooLarge { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(lines.and_then(|l| l.slice(entry.first_line, entry.lines).map(<[u8]>::to_vec)))
    }

    /// **Checked** read of any file: a file in the tree, else a compacted shard's original bytes
    /// (their sha256 checked against the manifest), else `None`.
    ///
    /// # Errors
    /// [`store::Error::TooLarge`] (as [`Error::Store`]) when the file is larger than `max_bytes`;
    /// [`Error::Manifest`], [`Error::SegmentMissing`], [`Error::Mismatch`] for a damaged
    /// compaction; other [`Error::Store`]s.
    pub fn read(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, Error> {
        if let Some(bytes) = self.snap.read(path, max_bytes)? {
            return Ok(Some(bytes));
        }
        let Some(month) = Month::of_shard(path) else {
            return Ok(None);
        };
        let Some(manifest) = self.manifest(month)? else {
            return Ok(None);
        };
        let Some(entry) = manifest.entry(path) else {
            return Ok(None);
        };
        let segment = month.segment_path(&entry.segment);
        let Some(bytes) = self.cut(month, entry)? else {
            return Err(Error::SegmentMissing {
                path: path.to_owned(),
                segment,
            });
        };
        if crate::identity::Digest::of(&bytes) != entry.sha256 {
            return Err(Error::Mismatch {
                path: path.to_owned(),
                segment,
            });
        }
        if bytes.len() as u64 > max_bytes {
            return Err(store::Error::TooLarge {
                path: path.to_owned(),
                max: max_bytes,
            }
            .into());
        }
        Ok(Some(bytes))
    }

    /// **Unchecked** read for `verify`: a file in the tree, else whatever the segment holds at a
    /// compacted shard's line range (`None` when it cannot be cut out, or when the month's
    /// manifest is invalid).
    ///
    /// # Errors
    /// [`store::Error::TooLarge`] when the file is larger than `max_bytes`, other
    /// [`store::Error`]s.
    pub fn read_unchecked(
        &self,
        path: &str,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, store::Error> {
        if let Some(bytes) = self.snap.read(path, max_bytes)? {
            return Ok(Some(bytes));
        }
        let Some(month) = Month::of_shard(path) else {
            return Ok(None);
        };
        let ManifestState::Valid(manifest) = self.manifest_state(month)? else {
            return Ok(None);
        };
        let Some(entry) = manifest.entry(path) else {
            return Ok(None);
        };
        match self.cut(month, entry)? {
            Some(bytes) if bytes.len() as u64 > max_bytes => Err(store::Error::TooLarge {
                path: path.to_owned(),
                max: max_bytes,
            }),
            other => Ok(other),
        }
    }

    /// The months that have a `manifest.json` (valid or not), sorted.
    ///
    /// # Errors
    /// [`store::Error`] when the segments tree cannot be listed.
    pub fn compacted_months(&self) -> Result<Vec<Month>, store::Error> {
        if let Some(months) = self.compacted.get() {
            return Ok(months.clone());
        }
        let months: Vec<Month> = self
            .snap
            .list_files(segment::SEGMENTS_ROOT)?
            .iter()
            .filter_map(|p| match segment::parse_path(p) {
                Some(SegmentFile::Manifest(m)) => Some(m),
                _ => None,
            })
            .collect();
        Ok(self.compacted.get_or_init(|| months).clone())
    }

    /// Every shard path under `prefix` (a directory such as `ledger/v1/events/2026/03/10/repo`),
    /// hot or compacted, sorted by path and unique. A month with an invalid manifest is an error.
    ///
    /// # Errors
    /// [`Error::Manifest`], [`Error::Store`].
    pub fn shard_paths(&self, prefix: &str) -> Result<Vec<String>, Error> {
        self.collect_shard_paths(prefix, true)
    }

    /// As [`View::shard_paths`], but a month with an invalid manifest contributes no compacted
    /// path (for `verify`, which reports the manifest).
    ///
    /// # Errors
    /// [`store::Error`].
    pub fn shard_paths_unchecked(&self, prefix: &str) -> Result<Vec<String>, store::Error> {
        match self.collect_shard_paths(prefix, false) {
            Ok(paths) => Ok(paths),
            Err(Error::Store(e)) => Err(e),
            Err(e) => unreachable!("unchecked listing only fails in the store: {e}"),
        }
    }

    fn collect_shard_paths(&self, prefix: &str, checked: bool) -> Result<Vec<String>, Error> {
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        let mut out: Vec<String> = match self.snap.list_files(prefix) {
            Ok(files) => files
                .into_iter()
                .filter(|p| shard::parse_path(p).is_some())
                .collect(),
            Err(store::Error::NotADirectory { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let within = |dir: &str| {
            // `prefix` lies inside `dir`, or `dir` inside `prefix`.
            prefix.is_empty()
                || dir == prefix
                || dir.starts_with(&format!("{prefix}/"))
                || prefix.starts_with(&format!("{dir}/"))
        };
        for month in self.compacted_months()? {
            if !within(&month.events_dir()) {
                continue;
            }
            let manifest = match self.manifest_state(month)? {
                ManifestState::Valid(m) => m,
                ManifestState::Invalid(e) if checked => return Err(e.into()),
                _ => continue,
            };
            let under = format!("{prefix}/");
            out.extend(
                manifest
                    .shards
                    .iter()
                    .filter(|e| prefix.is_empty() || e.path.starts_with(&under))
                    .map(|e| e.path.clone()),
            );
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Signature;

    fn sig() -> Signature {
        Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: 1_773_100_800,
        }
    }

    #[test]
    fn mru_keeps_the_most_recent() {
        let mut c: Mru<u8, u8> = Mru::new(2);
        c.put(1, 10);
        c.put(2, 20);
        assert_eq!(c.get(&1), Some(10));
        c.put(3, 30);
        assert_eq!(
            (c.get(&1), c.get(&2), c.get(&3)),
            (Some(10), None, Some(30))
        );
    }

    /// A month folded by hand: reads, limits, and what an invalid manifest does to each read.
    #[test]
    fn compacted_reads_checked_and_unchecked() {
        let (_dir, store) = crate::tests::scratch_store();
        let job = crate::tests::day1_job("008");
        let files = crate::publish::read_source(&job, None).unwrap();
        let foldable: Vec<segment::Foldable> = files
            .iter()
            .map(|f| segment::Foldable::new(&f.path, f.content.clone()).unwrap())
            .collect();
        let march = Month::of_date("2026-03").unwrap();
        let folded = segment::fold(march, None, &foldable, segment::Caps::MAX).unwrap();
        let mut put = folded.files.clone();
        put.push((
            march.manifest_path(),
            folded.manifest.to_text().into_bytes(),
        ));
        let good = store.write_commit(None, &put, "fold\n", &sig()).unwrap();
        let snap = store.snapshot(Some(good)).unwrap();
        let view = View::new(&snap);
        let path = &files[0].path;
        let size = files[0].content.len() as u64;
        assert_eq!(
            view.read(path, size).unwrap().unwrap(),
            files[0].content.as_bytes()
        );
        assert!(matches!(
            view.read(path, size - 1),
            Err(Error::Store(store::Error::TooLarge { .. }))
        ));
        assert!(matches!(
            view.read_unchecked(path, size - 1),
            Err(store::Error::TooLarge { .. })
        ));
        assert_eq!(
            view.read("ledger/v1/events/2026/03/10/x/y/z.jsonl", 9)
                .unwrap(),
            None
        );
        assert_eq!(view.read("ledger/v1/other.json", 9).unwrap(), None);
        assert_eq!(view.compacted_months().unwrap(), vec![march]);
        let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        assert_eq!(view.shard_paths("ledger/v1/events").unwrap(), paths);
        assert_eq!(
            view.shard_paths("ledger/v1/events/2026/04").unwrap(),
            Vec::<String>::new()
        );
        drop(snap);

        let broken = store
            .write_commit_with(
                Some(good),
                &[(march.manifest_path(), b"{}\n".to_vec())],
                &[],
                true,
                "break\n",
                &sig(),
            )
            .unwrap();
        let snap = store.snapshot(Some(broken)).unwrap();
        let view = View::new(&snap);
        assert!(matches!(view.read(path, u64::MAX), Err(Error::Manifest(_))));
        assert!(matches!(view.shard_paths(""), Err(Error::Manifest(_))));
        assert_eq!(view.read_unchecked(path, u64::MAX).unwrap(), None);
        assert_eq!(
            view.shard_paths_unchecked("").unwrap(),
            Vec::<String>::new()
        );
        assert!(matches!(
            view.manifest_state(march).unwrap(),
            ManifestState::Invalid(_)
        ));
    }
}
