//! Reading a publication source: a sealed spool (its shards are packed from the sealed events) or
//! a finalized shard root (files under `ledger/v1/events`).
//!
//! With an expected path list (a lane manifest's `event_paths`), only those files are read: the
//! list must be non-empty, at most 256, sorted and unique, each a shard path. A sealed spool's
//! shards (all of which are published) must be exactly the listed paths. Otherwise
//! `ledger/v1/events` is traversed within the [`limits`](super::limits): at most 512 directories,
//! 512 entries per directory, depth 6 (a directory at depth 6 is refused, so files live at
//! `YYYY/MM/DD/repo/producer/file`), 256 regular files (all count; only `*.jsonl` are
//! collected); a symbolic link or any other kind of entry is refused. The root is opened once and
//! every read goes through that handle, so a link anywhere below it fails closed. A root without
//! a spool or shards holds nothing: an empty publication.

use std::collections::HashMap;
use std::path::Path;

use super::limits;
use super::*;
use crate::identity::Digest;
use crate::ledger::shard::{self, Shard};
use crate::privacy::strict::Finding;
use crate::writer::files::{self, EntryKind, Root};
use crate::writer::seal;
use crate::writer::spool::{self, Spool};

/// A source file of a batch: shard path and content.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Path under the source root (`ledger/v1/events/...jsonl`).
    pub path: String,
    /// The file's text.
    pub content: String,
}

/// Label of a publication source root in file-layer errors.
pub const SOURCE_LABEL: &str = "action event shard import source";

/// Reads a publication source: a sealed spool root (its shards are derived from the sealed
/// events) or a finalized shard root (files under `ledger/v1/events`, traversed within the
/// import limits). The root is opened once ([`Root`]) and every listing and read goes
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
        Source::Sealed(shards, _) => shards
            .into_iter()
            .map(|s| SourceFile {
                path: s.path,
                content: s.content.to_string(),
            })
            .collect(),
    })
}

/// What a source holds: files to validate from their bytes, or the shards packed from a sealed
/// spool's events (validated when the spool was read, packed by [`shard::pack`]) with the
/// strict-profile findings of their events, by event id ([`seal::ProducerRun::strict`]).
pub(super) enum Source {
    Files(Vec<SourceFile>),
    Sealed(Vec<Shard>, HashMap<Digest, Finding>),
}

pub(super) fn read_source_shards(
    root: &Path,
    expected_paths: Option<&[String]>,
) -> Result<Source, Error> {
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
        let (mut shards, mut strict) = (Vec::new(), HashMap::new());
        for mut run in seal::sealed_runs(&spool)? {
            strict.extend(std::mem::take(&mut run.strict));
            shards.extend(run.into_shards()?);
        }
        shards.sort_by(|a, b| a.path.cmp(&b.path));
        // A spool without events beside shard files (a finalize output whose spool directory
        // kept only its lock directories) publishes the shards, never silently nothing.
        if !shards.is_empty() || h.entry_kind(shard::EVENTS_ROOT)? != Some(EntryKind::Dir) {
            if let Some(paths) = expected_paths {
                check_manifest_list(paths)?;
                same_paths(paths, &shards)?;
            }
            return Ok(Source::Sealed(shards, strict));
        }
    }
    if let Some(paths) = expected_paths {
        return read_manifest_files(handle.as_ref(), paths).map(Source::Files);
    }
    let Some(h) = handle else {
        return Err(absent.expect("an unopened root says why"));
    };
    // Neither a spool directory nor shards: the spool of a job that recorded nothing, or a
    // finalize output without shards (an empty result, as the reference's).
    if h.entry_kind(shard::EVENTS_ROOT)? != Some(EntryKind::Dir) {
        return Ok(Source::Files(Vec::new()));
    }
    traverse(&h).map(Source::Files)
}

/// The expected list against the shards packed from a sealed spool: exactly the same paths
/// (the spool's shards are all published, so one not listed is refused rather than left out).
fn same_paths(paths: &[String], shards: &[Shard]) -> Result<(), Error> {
    let have: std::collections::BTreeSet<&str> = shards.iter().map(|s| s.path.as_str()).collect();
    let listed: std::collections::BTreeSet<&str> = paths.iter().map(String::as_str).collect();
    if have == listed {
        return Ok(());
    }
    let owned = |set: std::collections::btree_set::Difference<'_, &str>| {
        set.map(|p| (*p).to_owned()).collect::<Vec<_>>()
    };
    Err(Error::ManifestMismatch {
        missing: owned(listed.difference(&have)),
        extra: owned(have.difference(&listed)),
    })
}

/// The reference's checks of an expected path list: non-empty, at most 256, sorted and
/// unique, each a shard path.
fn check_manifest_list(paths: &[String]) -> Result<(), Error> {
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
    Ok(())
}

fn read_manifest_files(root: Option<&Root>, paths: &[String]) -> Result<Vec<SourceFile>, Error> {
    check_manifest_list(paths)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::test_support::*;

    /// Sources without events (an empty root, other state under `.clawsweeper-repair`, an empty
    /// spool directory, an empty `ledger/v1/events`) publish nothing and make no commit, on a
    /// new ledger (no layout record either) and on an existing one; a missing source and a file
    /// are errors that say so.
    #[test]
    fn sources_without_events_publish_nothing() {
        let (dir, store) = crate::tests::scratch_store();
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
        let (dir, store) = crate::tests::scratch_store();
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
}
