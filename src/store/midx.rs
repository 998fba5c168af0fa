//! The multi-pack index: one lookup table over many packs, in git's format
//! (`objects/pack/multi-pack-index`, `gitformat-pack(5)`, "multi-pack-index (MIDX) files").
//!
//! # Why
//!
//! Without it, every object lookup probes the index of each pack in turn, and every handle that
//! opens a pack index first scans its whole offset table (gix validates the index's size that
//! way), so opening a repository of a million actions in 88 packs reads about 60 MB of index
//! before the first object. A multi-pack index is opened by reading its header and found by one
//! binary search, whatever the number of packs it names.
//!
//! # Who writes it
//!
//! `action-ledger maintain` ([`crate::store::Rollup::Geometric`]'s unbounded form and
//! [`crate::store::Rollup::All`]): after its roll-up, one multi-pack index over every pack of the
//! repository ([`write`]), unless the one there already names exactly those packs. Git writes
//! the same file (`git multi-pack-index write`, `git maintenance`'s incremental-repack task,
//! `git repack --write-midx`); each reads the other's.
//!
//! # Keeping it true
//!
//! A multi-pack index names packs; when one of them is removed, the index is stale. Git then
//! reads the remaining packs' own indices; gix does not, and reports every object the stale
//! index places in a removed pack as missing (an error, never other bytes). So:
//!
//! - The roll-up after a commit leaves every pack that a multi-pack index names alone, as it
//!   leaves a pack with a `.keep` file ([`named`]), and checks again just before it removes
//!   anything, so that an index git wrote meanwhile keeps its packs.
//! - `maintain` writes the new index, naming the merged pack and the packs that stay, before
//!   it removes the packs it merged: a reader that loaded the old index and then finds a pack
//!   gone re-scans the directory and finds the new index.
//! - [`crate::store::Store::open`] checks that every pack the index names is there
//!   ([`stale`]) and, if one is not (removed by hand, or by a tool racing with git's
//!   maintenance), opens the repository without it, as git would read it. A store opened
//!   before the index went stale (git's repacks remove the packs it names while others read)
//!   reads what misses through it again from the repository opened without it, once per store
//!   at its first miss (`Store::find_object`); `maintain`, or `git multi-pack-index write`,
//!   writes a true one.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::durable;

/// The file name of the multi-pack index in `objects/pack`.
pub(crate) const FILE: &str = "multi-pack-index";

/// The pack index file names (`pack-<hex>.idx`) that the multi-pack index of the pack
/// directory `dir` names: `None` when there is none.
///
/// # Errors
/// The file exists but cannot be read or is not a multi-pack index (its error names the
/// file).
pub(crate) fn named(dir: &Path) -> std::io::Result<Option<Vec<PathBuf>>> {
    let path = dir.join(FILE);
    if !path.exists() {
        return Ok(None);
    }
    // Only the header and the chunk of pack names are read: opening validates the structure,
    // not every entry.
    let file = gix::odb::pack::multi_index::File::at(&path, Some(1 << 20)).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: not a readable multi-pack index: {e}", path.display()),
        )
    })?;
    Ok(Some(file.index_names().to_vec()))
}

/// Whether the pack directory `dir` has a multi-pack index that readers must not use: one
/// that names a pack whose index or data file is gone, or one that cannot be read.
pub(crate) fn stale(dir: &Path) -> bool {
    match named(dir) {
        Ok(None) => false,
        Ok(Some(names)) => names.iter().any(|idx| {
            let idx = dir.join(idx);
            !idx.exists() || !idx.with_extension("pack").exists()
        }),
        Err(_) => true,
    }
}

/// Writes a multi-pack index over the pack indices `indices` (paths in `dir`) and replaces the
/// one of `dir` with it, durably: a temporary file, fsynced, renamed, the directory fsynced. An
/// object held by several packs is found in the one whose index is the newest (gix's rule).
/// Returns the number of objects it indexes.
///
/// Memory: about 60 bytes per object of the named packs while it is written (the entries are
/// collected and sorted), so this is for `maintain`, not for the roll-up after a commit.
///
/// # Errors
/// An index cannot be read, or the file cannot be written, synced or renamed.
pub(crate) fn write(
    dir: &Path,
    indices: Vec<PathBuf>,
    hash: gix::hash::Kind,
) -> std::io::Result<u64> {
    durable::remove_stale_temp_files(dir);
    let tmp = dir.join(durable::temp_name("midx"));
    let result = (|| {
        let mut out = std::io::BufWriter::new(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?,
        );
        gix::odb::pack::multi_index::write_from_index_paths(
            indices,
            &mut out,
            &mut gix::progress::Discard,
            &AtomicBool::new(false),
            gix::odb::pack::multi_index::write::Options { object_hash: hash },
        )
        .map_err(|e| std::io::Error::other(format!("writing a multi-pack index: {e}")))?;
        out.flush()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, dir.join(FILE))?;
        durable::sync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    let objects = gix::odb::pack::multi_index::File::at(dir.join(FILE), None)
        .map(|f| u64::from(f.num_objects()))
        .map_err(|e| std::io::Error::other(format!("reading the multi-pack index: {e}")))?;
    Ok(objects)
}

/// Removes the multi-pack index of `dir`, if any, durably.
pub(crate) fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(FILE)) {
        Ok(()) => durable::sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
