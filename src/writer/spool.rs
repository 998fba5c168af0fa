//! The spool: one canonical event file per event under a job's spool root, plus the per-producer partition markers, seals and locks beside them.
//!
//! ```text
//! <root>/.clawsweeper-repair/action-events/
//!     <slug(repo)>-<sha256(repo)[0:12]>/<event_id>.json
//!     _partitions/<sha256(canonical(producer))>.txt      YYYY-MM-DD\n
//!     _finalizations/<sha256(canonical(producer))>.json  the seal
//!     _locks/<sha256(canonical(producer))>.lock
//! ```
//! Reading is bounded: 256 repository directories, 4,096 entries per directory, 65,536
//! events, 256 producers, 64 MiB of canonical event bytes. Entries that are not what the layout
//! allows are refused, never skipped, except staging files (names not ending in `.json`).
//!
//! A root without the spool directory is the spool of a job that recorded nothing: it holds no
//! events (the reference's finalize of an empty spool returns no paths and writes nothing). A
//! root that does not exist is an error.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::canonical::{self, Value};
use crate::event::{self, Event};
use crate::identity::{self, Digest};
use crate::privacy::{self, strict::Finding};
use crate::writer::files::{self, EntryKind, Root};
use rayon::prelude::*;

/// The spool directory below a spool root.
pub const SPOOL_DIR: &str = ".clawsweeper-repair/action-events";
/// Most repository directories in a spool.
pub const MAX_REPOSITORIES: usize = 256;
/// Most entries in one repository directory.
pub const MAX_ENTRIES: usize = 4096;
/// Most events in a spool.
pub const MAX_EVENTS: usize = 65_536;
/// Most distinct producers in a spool.
pub const MAX_PRODUCERS: usize = 256;
/// Most canonical event bytes (each event counted as its JSON plus a newline).
pub const MAX_TOTAL_BYTES: usize = 64 * 1024 * 1024;
/// Largest spool event file.
pub const MAX_EVENT_FILE_BYTES: u64 = 1024 * 1024;
/// Largest partition marker.
pub const MAX_MARKER_BYTES: u64 = 64;

const RESERVED: [&str; 3] = ["_partitions", "_finalizations", "_locks"];

/// Why a spool could not be read; texts follow the reference.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file layer refused a spool path (link, non-regular file, size limit, I/O).
    #[error(transparent)]
    File(#[from] files::Error),
    /// A spooled event file failed event validation.
    #[error(transparent)]
    Event(#[from] event::Error),
    /// An entry the layout does not allow: a file where a repository directory belongs, a
    /// directory or link where an event file belongs, or a spool directory that is not a real
    /// directory. Remove the entry; spool contents are never skipped.
    #[error("refusing unsafe action event spool entry: {0}")]
    UnsafeEntry(PathBuf),
    /// More than [`MAX_REPOSITORIES`] repository directories.
    #[error("action event spool exceeds 256 repository limit")]
    TooManyRepositories,
    /// More than [`MAX_EVENTS`] event files.
    #[error("action event spool exceeds 65536 event limit")]
    TooManyEvents,
    /// The canonical event bytes (JSON plus newline per event) exceed [`MAX_TOTAL_BYTES`].
    #[error("action event spool exceeds 67108864 total byte limit")]
    TooManyBytes,
    /// More than [`MAX_PRODUCERS`] distinct producers.
    #[error("action event spool exceeds 256 producer limit")]
    TooManyProducers,
    /// An event file is not exactly one line ending in `\n` (no `\r`, nothing after it).
    #[error("action event file content is not canonical: {0}")]
    NotCanonicalFile(PathBuf),
    /// An event file (relative path carried) is not at the path its event derives:
    /// `<slug(repo)>-<sha256(repo)[0:12]>/<event_id>.json`.
    #[error("action event spool path is not canonical: {0}")]
    NonCanonicalPath(String),
    /// A partition marker is not a `YYYY-MM-DD` calendar date plus `\n`.
    #[error("invalid action event partition marker {path}: {reason}")]
    InvalidMarker {
        /// The marker file.
        path: PathBuf,
        /// The date rule it broke.
        reason: String,
    },
    /// The spool root does not exist.
    #[error("action event spool root does not exist: {0}")]
    Missing(PathBuf),
    /// The spool root is not a directory.
    #[error("action event spool root is not a directory: {0}")]
    NotADirectory(PathBuf),
}

/// sha256 of the canonical persisted producer object: names markers, seals and locks.
pub fn producer_digest(producer: &Value) -> Digest {
    Digest::of(canonical::to_canonical_unchecked(producer))
}

/// `<slug>-<sha256(repo)[0:12]>` for a normalized repository.
pub fn repository_dir(repo: &str) -> String {
    format!(
        "{}-{}",
        identity::slug_for_repo(repo),
        Digest::of(repo).prefix(12)
    )
}

/// The spool-relative path of an event file.
pub fn event_relative_path(event: &Event) -> String {
    event_path_in(&repository_dir(event.subject_repository()), &event.event_id)
}

/// The spool-relative path of the event file of `id` in the repository directory `repo_dir`
/// ([`repository_dir`]).
fn event_path_in(repo_dir: &str, id: &Digest) -> String {
    format!("{SPOOL_DIR}/{repo_dir}/{id}.json")
}

/// The spool-relative path of a producer's partition marker.
pub fn marker_relative_path(producer: &Digest) -> String {
    format!("{SPOOL_DIR}/_partitions/{producer}.txt")
}

/// The spool-relative path of a producer's seal.
pub fn seal_relative_path(producer: &Digest) -> String {
    format!("{SPOOL_DIR}/_finalizations/{producer}.json")
}

/// The spool-relative path of a producer's lock.
pub fn lock_relative_path(producer: &Digest) -> String {
    format!("{SPOOL_DIR}/_locks/{producer}.lock")
}

/// Label of a spool root in file-layer errors.
pub const ROOT_LABEL: &str = "action event spool root";

/// A spool root: an existing directory that holds [`SPOOL_DIR`], held open as a [`Root`] so that
/// every read and write of the spool stays inside the directory that was opened.
#[derive(Debug)]
pub struct Spool {
    root: Root,
}

impl Spool {
    /// Opens the spool at `root` (made absolute; the root itself must not be a symbolic link).
    /// A root without a spool directory is a spool without events.
    ///
    /// # Errors
    /// [`Error::Missing`] when `root` does not exist, [`Error::NotADirectory`] when it is not a
    /// directory, [`Error::UnsafeEntry`] when its spool directory is not a real directory.
    pub fn open(root: &Path) -> Result<Spool, Error> {
        match Root::open(root, ROOT_LABEL) {
            Ok(root) => Spool::from_root(root),
            Err(files::Error::Missing { path, .. }) => Err(Error::Missing(path)),
            Err(files::Error::NotDirectory { path, .. }) => Err(Error::NotADirectory(path)),
            Err(e) => Err(e.into()),
        }
    }

    /// A spool on an already opened root (without a spool directory: a spool without events).
    ///
    /// # Errors
    /// [`Error::UnsafeEntry`] when the spool directory is not a real directory.
    pub fn from_root(root: Root) -> Result<Spool, Error> {
        match root.entry_kind(SPOOL_DIR)? {
            Some(EntryKind::Dir) | None => Ok(Spool { root }),
            Some(_) => Err(Error::UnsafeEntry(root.display_path(SPOOL_DIR))),
        }
    }

    /// The path the spool root was opened at (for messages).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The opened spool root: seals, markers, locks and events are written through it.
    pub fn handle(&self) -> &Root {
        &self.root
    }

    /// `readAllSpooledActionEvents`: every event of every repository directory, validated,
    /// path-checked and within the read budget, sorted by [`event::compare_events`]; none when
    /// there is no spool directory.
    pub fn read_all(&self) -> Result<Vec<Event>, Error> {
        self.read(false).map(|(events, _)| events)
    }

    /// [`Spool::read_all`], with each record also scanned by the strict privacy rules while its
    /// file is parsed (the tree is not kept): the first [`Finding`] of every event the strict
    /// profile refuses, by event id (empty when none is).
    pub fn read_all_scanned(&self) -> Result<(Vec<Event>, HashMap<Digest, Finding>), Error> {
        self.read(true)
    }

    fn read(&self, scan: bool) -> Result<(Vec<Event>, HashMap<Digest, Finding>), Error> {
        let dir = self.root.display_path(SPOOL_DIR);
        let entries = self
            .root
            .list_dir(SPOOL_DIR, MAX_REPOSITORIES + RESERVED.len())?
            .unwrap_or_default();
        let mut budget = Budget::default();
        let (mut events, mut strict) = (Vec::new(), HashMap::new());
        let mut repositories = 0usize;
        for (name, kind) in entries {
            if kind != EntryKind::Dir {
                return Err(Error::UnsafeEntry(dir.join(&name)));
            }
            if RESERVED.contains(&name.as_str()) {
                continue;
            }
            repositories += 1;
            if repositories > MAX_REPOSITORIES {
                return Err(Error::TooManyRepositories);
            }
            self.read_repository_dir(&name, &mut budget, scan, &mut events, &mut strict)?;
        }
        events.sort_by(event::compare_events);
        Ok((events, strict))
    }

    /// The names of the spool's event files (`<repository dir>/<event id>.json`, sorted), without
    /// reading them: event files are create-only and never change once named, so an unchanged
    /// listing means unchanged events. Same entry limits as [`Spool::read_all`].
    pub fn event_names(&self) -> Result<Vec<String>, Error> {
        let entries = self
            .root
            .list_dir(SPOOL_DIR, MAX_REPOSITORIES + RESERVED.len())?
            .unwrap_or_default();
        let mut names = Vec::new();
        for (name, kind) in entries {
            if kind != EntryKind::Dir || RESERVED.contains(&name.as_str()) {
                continue;
            }
            let dir_rel = format!("{SPOOL_DIR}/{name}");
            for (file, _) in self
                .root
                .list_dir(&dir_rel, MAX_ENTRIES)?
                .unwrap_or_default()
            {
                if file.ends_with(".json") {
                    names.push(format!("{name}/{file}"));
                }
            }
        }
        Ok(names)
    }

    /// The texts of the event files `names` (as [`Spool::event_names`] gives them), in that
    /// order, read on all cores through one handle per repository directory: `None` for a file
    /// or directory that is gone, or a name that is not `<directory>/<file>`. Same size limit
    /// and file rules as [`Spool::read_all`]; the contents are not parsed.
    ///
    /// Reading stops once `go_on` says no (it is asked before each file): the files not read
    /// then are `None`. For a reader that another thread may find to be wasted work; `|| true`
    /// reads them all.
    pub fn read_event_texts(
        &self,
        names: &[String],
        go_on: impl Fn() -> bool + Sync,
    ) -> Result<Vec<Option<String>>, Error> {
        let mut dirs: HashMap<&str, Option<Root>> = HashMap::new();
        for name in names {
            if let Some((dir, _)) = name.rsplit_once('/')
                && !dirs.contains_key(dir)
            {
                dirs.insert(dir, self.root.subdir(&format!("{SPOOL_DIR}/{dir}"))?);
            }
        }
        names
            .par_iter()
            .map(|name| {
                if !go_on() {
                    return Ok(None);
                }
                let Some((Some(sub), file)) = name
                    .rsplit_once('/')
                    .map(|(dir, file)| (dirs.get(dir).and_then(Option::as_ref), file))
                else {
                    return Ok(None);
                };
                Ok(sub.read_text(file, MAX_EVENT_FILE_BYTES, "action event")?)
            })
            .collect()
    }

    fn read_repository_dir(
        &self,
        name: &str,
        budget: &mut Budget,
        scan: bool,
        out: &mut Vec<Event>,
        strict: &mut HashMap<Digest, Finding>,
    ) -> Result<(), Error> {
        let dir_rel = format!("{SPOOL_DIR}/{name}");
        let entries = self
            .root
            .list_dir(&dir_rel, MAX_ENTRIES)?
            .unwrap_or_default();
        // Read and parse in parallel (Event::parse_lines), then check in order: the first
        // defect in file order is the one reported, as when reading one by one. The files are
        // read through one handle on their directory, not by walking to each.
        let dir_path = self.root.display_path(&dir_rel);
        let Some(sub) = self.root.subdir(&dir_rel)? else {
            return Err(Error::UnsafeEntry(dir_path));
        };
        let read = |(file, kind): &(String, EntryKind)| {
            let rel = format!("{dir_rel}/{file}");
            let path = dir_path.join(file);
            if *kind != EntryKind::File {
                return Err(Error::UnsafeEntry(path));
            }
            if !file.ends_with(".json") {
                return Ok(None); // staging files of interrupted writes
            }
            let text = sub
                .read_text(file, MAX_EVENT_FILE_BYTES, "action event")?
                .ok_or_else(|| Error::UnsafeEntry(path.clone()))?;
            if !text
                .strip_suffix('\n')
                .is_some_and(|l| !l.contains('\n') && !l.ends_with('\r'))
            {
                return Err(Error::NotCanonicalFile(path));
            }
            Ok(Some((rel, text, path)))
        };
        let texts = entries
            .par_iter()
            .map(read)
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(Result::transpose)
            .collect::<Result<Vec<_>, Error>>()?;
        let parsed = Event::parse_lines_with(
            texts
                .iter()
                .map(|(_, text, path)| (&text[..text.len() - 1], path.display().to_string())),
            |line| {
                if scan {
                    privacy::strict::first_in_line(line)
                } else {
                    None
                }
            },
        );
        // The events of one directory name one subject repository (else the path check below
        // fails): its directory name (a digest) is made once, not per event.
        let mut known: Option<(String, String)> = None;
        for ((rel, _, _), event) in texts.iter().zip(parsed) {
            let (event, finding) = event?;
            let repo = event.subject_repository();
            if known.as_ref().is_none_or(|(r, _)| r != repo) {
                known = Some((repo.to_owned(), repository_dir(repo)));
            }
            let repo_dir = known.as_ref().map_or("", |(_, d)| d.as_str());
            if event_path_in(repo_dir, &event.event_id) != *rel {
                return Err(Error::NonCanonicalPath(rel.clone()));
            }
            budget.admit(&event)?;
            if let Some(f) = finding {
                strict.insert(event.event_id.clone(), f);
            }
            out.push(event);
        }
        Ok(())
    }

    /// The partition date recorded for `producer`, `None` when no marker exists.
    pub fn partition_date(&self, producer: &Digest) -> Result<Option<String>, Error> {
        let rel = marker_relative_path(producer);
        let path = self.root.display_path(&rel);
        let Some(text) =
            self.root
                .read_text(&rel, MAX_MARKER_BYTES, "action event partition marker")?
        else {
            return Ok(None);
        };
        identity::calendar_date(&text, "action event partition marker")
            .map(Some)
            .map_err(|e| Error::InvalidMarker {
                path,
                reason: e.to_string(),
            })
    }
}

#[derive(Default)]
struct Budget {
    events: usize,
    bytes: usize,
    producers: HashSet<String>,
}

impl Budget {
    fn admit(&mut self, e: &Event) -> Result<(), Error> {
        if self.events >= MAX_EVENTS {
            return Err(Error::TooManyEvents);
        }
        self.events += 1;
        self.bytes += e.json.len() + 1;
        if self.bytes > MAX_TOTAL_BYTES {
            return Err(Error::TooManyBytes);
        }
        let producer = e.producer().canonical();
        if !self.producers.contains(&producer) {
            if self.producers.len() >= MAX_PRODUCERS {
                return Err(Error::TooManyProducers);
            }
            self.producers.insert(producer);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that recorded nothing: no `.clawsweeper-repair` at all, no spool directory below
    /// it, an empty spool directory, only the reserved directories, only staging files. Each
    /// opens as a spool without events.
    #[test]
    fn roots_without_events_are_empty_spools() {
        let layouts: [&[&str]; 5] = [
            &[],
            &[".clawsweeper-repair/action-ledger-state/"],
            &[".clawsweeper-repair/action-events/"],
            &[
                ".clawsweeper-repair/action-events/_locks/",
                ".clawsweeper-repair/action-events/_partitions/",
                ".clawsweeper-repair/action-events/_finalizations/",
            ],
            &[".clawsweeper-repair/action-events/openclaw-openclaw-5dcd5a46c4da/x.json.1.tmp"],
        ];
        for entries in layouts {
            let dir = tempfile::tempdir().unwrap();
            for e in entries {
                let p = dir.path().join(e);
                if e.ends_with('/') {
                    std::fs::create_dir_all(p).unwrap();
                } else {
                    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                    std::fs::write(p, "partial").unwrap();
                }
            }
            let spool = Spool::open(dir.path()).unwrap();
            assert!(spool.read_all().unwrap().is_empty(), "{entries:?}");
            assert!(spool.event_names().unwrap().is_empty(), "{entries:?}");
        }
    }

    /// An event file must lie where its content puts it: in its subject repository's
    /// directory, under its event id. Files moved under their own names into another
    /// repository's directory (the first, a middle and the last of their own), or renamed to
    /// another id in their own, are refused with their paths.
    #[test]
    fn an_event_file_out_of_its_place_is_refused() {
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/corpus/day1/spools/017-openclaw-clawsweeper-review-r13550726447-a1");
        let events = format!("{SPOOL_DIR}/");
        let copy = |dir: &std::path::Path| crate::tests::copy_files(&corpus, dir, |_, _| true);
        let listing = |dir: &std::path::Path, repo: &str| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir.join(&events).join(repo))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        let (from, into) = (
            "openclaw-clawhub-3df6b0e8b2fe",
            "openclaw-openclaw-5dcd5a46c4da",
        );
        let clean = tempfile::tempdir().unwrap();
        copy(clean.path());
        assert_eq!(
            Spool::open(clean.path()).unwrap().read_all().unwrap().len(),
            121
        );
        let moved = listing(clean.path(), from);
        let there = listing(clean.path(), into);
        let other_id = |name: &str| {
            let flipped = if name.starts_with('0') { "1" } else { "0" };
            format!("{flipped}{}", &name[1..])
        };
        let last = moved.len() - 1;
        let cases = [
            (&moved[0], into, moved[0].clone()),
            (&moved[last / 2], into, moved[last / 2].clone()),
            (&moved[last], into, moved[last].clone()),
            (&moved[3], from, other_id(&moved[3])),
        ];
        assert!(cases.iter().all(|(_, _, name)| !there.contains(name)));
        for (file, dir, name) in cases {
            let tmp = tempfile::tempdir().unwrap();
            copy(tmp.path());
            let source = format!("{events}{from}/{file}");
            let target = format!("{events}{dir}/{name}");
            std::fs::rename(tmp.path().join(&source), tmp.path().join(&target)).unwrap();
            match Spool::open(tmp.path()).unwrap().read_all() {
                Err(Error::NonCanonicalPath(path)) => assert_eq!(path, target),
                other => panic!("{source} as {target}: {:?}", other.map(|e| e.len())),
            }
        }
    }

    /// Event files are read by name, in the order asked, through their directories: a gone
    /// file or directory and a name without one read as `None`, an oversized file is the
    /// reader's error.
    #[test]
    fn event_texts_are_read_by_name_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join(SPOOL_DIR);
        for (repo, file, text) in [
            ("r1", "a.json", "A\n"),
            ("r1", "b.json", "B\n"),
            ("r2", "c.json", "C\n"),
        ] {
            std::fs::create_dir_all(events.join(repo)).unwrap();
            std::fs::write(events.join(repo).join(file), text).unwrap();
        }
        let spool = Spool::open(dir.path()).unwrap();
        let names = spool.event_names().unwrap();
        assert_eq!(names, ["r1/a.json", "r1/b.json", "r2/c.json"]);
        let asked: Vec<String> = [
            "r2/c.json",
            "r1/a.json",
            "r1/gone.json",
            "r3/x.json",
            "flat",
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(
            spool.read_event_texts(&asked, || true).unwrap(),
            [
                Some("C\n".to_owned()),
                Some("A\n".to_owned()),
                None,
                None,
                None
            ]
        );
        let big = "x".repeat(MAX_EVENT_FILE_BYTES as usize + 1);
        std::fs::write(events.join("r2/c.json"), big).unwrap();
        assert!(spool.read_event_texts(&names, || true).is_err());
    }

    /// A root that does not exist, or is a file, is an error that says so; a spool directory
    /// that is a file is refused.
    #[test]
    fn missing_or_file_roots_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let err = Spool::open(&missing).unwrap_err();
        assert!(matches!(err, Error::Missing(_)), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "action event spool root does not exist: {}",
                missing.display()
            )
        );
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let err = Spool::open(&file).unwrap_err();
        assert!(matches!(err, Error::NotADirectory(_)), "{err}");
        assert!(err.to_string().contains("is not a directory"), "{err}");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join(".clawsweeper-repair")).unwrap();
        std::fs::write(root.join(SPOOL_DIR), "x").unwrap();
        assert!(matches!(
            Spool::open(&root).unwrap_err(),
            Error::UnsafeEntry(_)
        ));
    }
}
