//! Keeping the packs few: geometric consolidation ([`Store::consolidate_packs`]).
//!
//! Every publication of more than 16 objects adds one pack, and every object lookup probes the
//! index of each pack until one holds the object. Left alone, a repository of `n` publications
//! keeps `n` packs and a lookup costs `n` probes. Consolidation rolls the smallest packs up into
//! one, as `git repack --geometric=2` does: with the packs sorted by object count, the packs
//! that do not already form a progression in which each pack holds at least twice the objects
//! of the next smaller one are merged, so a repository of `n` publications of about equal size
//! keeps about `log2(n)` packs, and an object is rewritten about `log2(n)` times over its life.
//!
//! # Cost
//!
//! Entries are copied byte for byte, with their CRC-32 checked against the source index:
//! consolidation reads and writes the rolled-up packs sequentially (the headers of each once
//! more, first) and hashes the new pack once. A delta against an earlier entry of its pack
//! (`OBJ_OFS_DELTA`, what our pack writer and `git repack` write) keeps its compressed delta;
//! only the distance to its base in the new pack is rewritten. The base is always copied before
//! it: from the same pack, or, when the same object was already copied from an earlier pack,
//! that copy. A delta that names its base by id (`OBJ_REF_DELTA`, as `git pack-objects` writes
//! by default) may have its base anywhere and is resolved through the object database and
//! stored whole.
//!
//! Trees are the exception to copying. A publication writes a new version of every directory it
//! touches, and the versions of one directory sit in the packs of different publications, so
//! the pack writer could not store one as a delta against another. When the roll-up brings them
//! into one pack, it inflates every tree it copies, and a tree stored whole becomes a delta
//! against the version of it already in the new pack when that pays ([`TreeVersions`] finds the
//! version by the entries the two name in common). A tree that stays whole is copied as it
//! is, unless its zlib stream says that it was written at the fastest level, as a commit's
//! pack writes trees (most of them become deltas here), and the new pack is one that stays:
//! then it is compressed again at level 6, so that the repository at rest keeps the sizes of
//! level 6. On a generated ledger published in ten
//! steps this takes about an eighth off the repository, to within a few percent of `git
//! fast-import`'s for the same final tree (figures: CHANGELOG). It costs CPU, most of it
//! inflating small trees, and memory for the index of versions, both several times those of a
//! byte-for-byte copy. A chain
//! that ends in such a delta holds at most [`TREE_VERSION_CHAIN`] deltas, counting those
//! already built on the tree in its pack (read from the headers before the pack is copied).
//!
//! Memory: one entry at a time, the source index entries of one pack and their new offsets and
//! depths (about 50 bytes an object), the new index (32 bytes an object), the new offsets of
//! the objects held by more than one pack, and for trees the index of [`TreeVersions`] (at most
//! [`VERSION_INDEX_ENTRIES`] sampled entries, 24 MiB) and the bytes of the trees written last
//! ([`VERSION_HELD_BYTES`]).
//!
//! After every landed commit, at most [`PUBLISH_ROLLUP_MAX`] objects are rolled up (by the
//! landing loop, [`crate::store::land()`], for publish, compact and the finality operations; on
//! a thread of its own for `serve`'s batches: [`crate::store::RollUp`] says who), so a commit
//! never pays for rewriting the whole repository: packs of at least half that bound are left
//! alone and the rule runs on the smaller ones (see [`Rollup::Geometric`]); `action-ledger
//! maintain` runs the same roll-up without that bound (or merges every pack) when a quiet
//! moment allows it, and then writes a multi-pack index over every pack.
//!
//! # Safety beside readers, publishers and a kill
//!
//! - One consolidation at a time per repository: an exclusive `flock` on
//!   `action-ledger/consolidate.lock`; a second one finds it held and does nothing.
//! - The new pack and its index are written to temporary names, fsynced, renamed (pack first,
//!   index last) and the directory fsynced before any old pack is touched: every object is in
//!   a durable pack at every moment. A kill before that leaves a temporary file (removed by the
//!   next pack writer) or, after it, objects in two packs, which is harmless and undone by the
//!   next consolidation. That next roll-up, given the same packs, writes the same pack again
//!   (same objects in the same order, so the same name): it keeps it instead of removing it as
//!   one of its inputs, which lost every object it held.
//! - Old packs are removed index first, so that nobody who lists the directory afterwards loads
//!   them. A reader that already mapped an old pack keeps reading it (an unlinked file stays
//!   readable through its mapping); one that loaded an old index but not yet its pack finds the
//!   pack gone, and git and gix then re-scan the pack directory and find the object in the new
//!   pack. A publisher's pack written after the listing is not touched; one listed is copied
//!   before it is removed, whether or not its commit has landed.
//! - Packs with a `.keep` file are left alone. So are the packs a multi-pack index names,
//!   except by `maintain` ([`Rollup::Maintain`], [`Rollup::All`]), which writes the new index
//!   before it removes them ([`super::midx`]); a multi-pack index that cannot be read stops
//!   every roll-up (git may still read it).

use std::collections::BinaryHeap;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::odb::pack::index::File as PackIndex;

use super::error::git_err;
use crate::durable;
use crate::store::delta::{self, Encoder};
use crate::store::pack::{
    self as ours, MIN_DELTA_OBJECT, compressor, delta_pays, entry_into, index_bytes,
    offset_delta_into,
};
use crate::store::*;

/// The most objects that the roll-up after a landed commit (a publication, a compaction, a
/// finality batch) rolls up: as many as the largest publication holds events (a batch carries
/// at most 262,144), so that its cost stays within a small multiple of the largest
/// publication's. Larger roll-ups are left to `maintain`.
pub const PUBLISH_ROLLUP_MAX: u64 = 1 << 18;

/// Which packs [`Store::consolidate_packs`] merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rollup {
    /// The roll-up after a commit: geometric (factor 2) within a budget. Packs of at least
    /// half of `max_objects` objects are left alone, the rule runs on the smaller ones, and a
    /// roll-up that would still merge more than `max_objects` objects merges only the smallest
    /// of its packs that fit. Packs a multi-pack index names are left alone, as are packs
    /// with a `.keep` file.
    Geometric {
        /// The most objects one roll-up merges.
        max_objects: u64,
    },
    /// `maintain`: the geometric rule over every pack (those a multi-pack index names too),
    /// without a budget, then a multi-pack index over every pack.
    Maintain,
    /// `maintain --all`: every pack into one, then a multi-pack index over every pack.
    All,
}

impl Rollup {
    /// Whether this roll-up may merge the packs a multi-pack index names, and so writes the
    /// multi-pack index anew.
    fn owns_multi_pack_index(self) -> bool {
        !matches!(self, Rollup::Geometric { .. })
    }
}

/// What a consolidation did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consolidated {
    /// Packs before.
    pub packs_before: usize,
    /// Packs merged (0 when nothing was due, or another consolidation held the lock).
    pub merged: usize,
    /// Objects in the new pack.
    pub objects: u64,
    /// The new pack's bytes.
    pub bytes: u64,
    /// Whether another consolidation was running (nothing was done).
    pub busy: bool,
    /// The objects of the multi-pack index written ([`Rollup::Maintain`] and [`Rollup::All`]),
    /// `None` when none was written (the one there was already true, or the roll-up does not
    /// write one).
    pub multi_pack_index: Option<u64>,
}

/// A pack of the repository as the consolidation sees it.
#[derive(Clone, Debug)]
struct Candidate {
    /// `objects/pack/pack-<hex>` (without extension).
    stem: PathBuf,
    objects: u64,
}

impl Store {
    /// The roll-up that follows a commit that landed: [`Rollup::Geometric`] of at most
    /// [`PUBLISH_ROLLUP_MAX`] objects, its errors left to the next commit or to `maintain`
    /// (the commit has landed whatever happens here). Every writer runs it, so that the packs
    /// stay logarithmic in the number of its commits; [`crate::store::RollUp`] says who runs it
    /// when.
    pub fn roll_up_after_commit(&self) {
        let _ = self.consolidate_packs(Rollup::Geometric {
            max_objects: PUBLISH_ROLLUP_MAX,
        });
    }

    /// Merges packs of `objects/pack` as `rollup` asks (see the module docs for the safety
    /// against concurrent readers, publishers and a kill). Returns what was done; nothing when
    /// fewer than two packs qualify or another consolidation holds the lock.
    ///
    /// # Errors
    /// [`Error::Pack`] when a pack cannot be read, written or removed (naming the directory),
    /// when a copied entry does not match its CRC-32, or an object cannot be read.
    pub fn consolidate_packs(&self, rollup: Rollup) -> Result<Consolidated, Error> {
        let dir = self.objects_dir().join("pack");
        let io = |source: std::io::Error| {
            Error::Pack(Box::new(ours::Error::Io {
                dir: dir.clone(),
                source,
            }))
        };
        let lock_dir = self.git_dir().join("action-ledger");
        std::fs::create_dir_all(&lock_dir).map_err(io)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_dir.join("consolidate.lock"))
            .map_err(io)?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(Consolidated {
                busy: true,
                ..Consolidated::default()
            });
        }
        // A multi-pack index that cannot be read may still be read by git: touch nothing.
        let named = midx::named(&dir).map_err(io)?;
        let kept: &[PathBuf] = match (&named, rollup.owns_multi_pack_index()) {
            (Some(names), false) => names,
            _ => &[],
        };
        let (mut packs, packs_before) = candidates(&dir, kept).map_err(io)?;
        let chosen = match rollup {
            Rollup::All => packs.len(),
            Rollup::Maintain => bounded_split(&mut packs, u64::MAX),
            Rollup::Geometric { max_objects } => bounded_split(&mut packs, max_objects),
        };
        if chosen < 2 {
            let multi_pack_index = if rollup.owns_multi_pack_index() {
                self.write_multi_pack_index(&dir, &[], None, named.as_deref())
                    .map_err(io)?
            } else {
                None
            };
            return Ok(Consolidated {
                packs_before,
                multi_pack_index,
                ..Consolidated::default()
            });
        }
        let merged = &packs[..chosen];
        let (objects, bytes, written) = self.write_merged(&dir, merged, rollup)?;
        // The new multi-pack index names the new pack and the packs that stay before any pack
        // the old one names goes, so that a reader of the old one that misses a pack finds it.
        let multi_pack_index = if rollup.owns_multi_pack_index() {
            self.write_multi_pack_index(&dir, merged, Some(&written), named.as_deref())
                .map_err(io)?
        } else {
            None
        };
        // A multi-pack index written meanwhile by git (`git maintenance`) keeps its packs.
        let named_now = midx::named(&dir).map_err(io)?.unwrap_or_default();
        // Every object is now in a durable pack: remove the old ones, index first. The new pack
        // can be one of them: a roll-up killed after its pack was durable but before it removed
        // its inputs leaves both, and rolling them up again writes the same objects in the same
        // order, so the same bytes under the same name. That pack stays.
        for pack in merged
            .iter()
            .filter(|p| p.stem != written && !names_pack(&named_now, &p.stem))
        {
            for ext in ["idx", "pack", "rev", "bitmap", "mtimes"] {
                match std::fs::remove_file(pack.stem.with_extension(ext)) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
                    _ => {}
                }
            }
        }
        durable::sync_dir(&dir).map_err(io)?;
        Ok(Consolidated {
            packs_before,
            merged: chosen,
            objects,
            bytes,
            busy: false,
            multi_pack_index,
        })
    }

    /// Writes the multi-pack index of `dir` over every pack there except those of `merged`
    /// (`written`, the pack they were merged into, stays), unless `named` (what the current
    /// one names) is already exactly that set. With no pack left, removes the one there.
    /// Returns the objects of the index written.
    fn write_multi_pack_index(
        &self,
        dir: &Path,
        merged: &[Candidate],
        written: Option<&Path>,
        named: Option<&[PathBuf]>,
    ) -> std::io::Result<Option<u64>> {
        let mut indices: Vec<PathBuf> = every_pack(dir)?
            .into_iter()
            .filter(|stem| {
                Some(stem.as_path()) == written || !merged.iter().any(|m| &m.stem == stem)
            })
            .map(|stem| stem.with_extension("idx"))
            .collect();
        indices.sort();
        if indices.is_empty() {
            midx::remove(dir)?;
            return Ok(None);
        }
        let mut names: Vec<PathBuf> = indices
            .iter()
            .filter_map(|p| p.file_name().map(PathBuf::from))
            .collect();
        names.sort();
        if named.is_some_and(|named| {
            let mut named = named.to_vec();
            named.sort();
            named == names
        }) {
            return Ok(None);
        }
        midx::write(dir, indices, self.repo.object_hash()).map(Some)
    }

    /// Writes one pack holding every object of `packs` (each once) into `dir`, durably; returns
    /// its object count, its size and its path without extension (`objects/pack/pack-<hex>`).
    fn write_merged(
        &self,
        dir: &Path,
        packs: &[Candidate],
        rollup: Rollup,
    ) -> Result<(u64, u64, PathBuf), Error> {
        let hash_kind = self.repo.object_hash();
        let indices: Vec<PackIndex> = packs
            .iter()
            .map(|p| open_index(dir, p, hash_kind))
            .collect::<Result<_, _>>()?;
        let copies = Copies::of(&indices);
        let count = u32::try_from(copies.unique)
            .map_err(|_| Error::Pack(Box::new(ours::Error::TooMany)))?;
        drop(indices);
        // A pack that no later roll-up after a commit merges again: trees that stay whole in
        // it stay so until `maintain`.
        let at_rest = rollup.owns_multi_pack_index() || u64::from(count) >= PUBLISH_ROLLUP_MAX / 2;

        durable::remove_stale_temp_files(dir);
        let tmp_pack = dir.join(durable::temp_name("pack"));
        let tmp_index = dir.join(durable::temp_name("idx"));
        let result = self
            .write_pack(dir, &tmp_pack, packs, count, &copies, at_rest)
            .and_then(|(checksum, size, index)| {
                let stem = land(dir, &tmp_pack, &tmp_index, &checksum, &index)?;
                Ok((size, stem))
            });
        match result {
            Ok((size, stem)) => Ok((copies.unique, size, stem)),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp_pack);
                let _ = std::fs::remove_file(&tmp_index);
                Err(e)
            }
        }
    }

    /// Writes the merged pack of `packs` (`count` objects) to the new file `tmp_pack` and syncs
    /// it; returns its checksum, its size and the bytes of its index. `at_rest`: whether whole
    /// trees written at the fastest level are compressed again ([`Merger::recompress_trees`]).
    fn write_pack(
        &self,
        dir: &Path,
        tmp_pack: &Path,
        packs: &[Candidate],
        count: u32,
        copies: &Copies,
        at_rest: bool,
    ) -> Result<(ObjectId, u64, Vec<u8>), Error> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp_pack)
            .map_err(|e| pack_io(dir, e))?;
        let mut merger = Merger::new(self, dir, file, count, copies, at_rest)?;
        for (p, pack) in packs.iter().enumerate() {
            merger.copy_pack(p, pack)?;
        }
        merger.finish()
    }
}

/// An I/O error of the pack directory `dir`.
fn pack_io(dir: &Path, source: std::io::Error) -> Error {
    Error::Pack(Box::new(ours::Error::Io {
        dir: dir.to_owned(),
        source,
    }))
}

/// The index of `pack`, opened.
fn open_index(
    dir: &Path,
    pack: &Candidate,
    hash_kind: gix::hash::Kind,
) -> Result<PackIndex, Error> {
    PackIndex::at(pack.stem.with_extension("idx"), hash_kind)
        .map_err(|e| pack_io(dir, std::io::Error::other(e.to_string())))
}

/// An object read through the object database. A roll-up of a large repository reads many, so
/// the mapped pages of the packs being merged are bounded first, as on every path that reads
/// many objects.
fn read_object(store: &Store, id: &ObjectId) -> Result<Vec<u8>, Error> {
    store.bound_mapped_packs();
    Ok(store
        .repo
        .try_find_object(*id)
        .map_err(git_err("read object", id))?
        .ok_or_else(|| Error::MissingObject {
            id: id.to_hex().to_string(),
        })?
        .detach()
        .data)
}

/// Moves the synced pack `tmp_pack` and its index (written to `tmp_index`, synced) to their
/// names (`pack-<checksum>`, pack first, index last) and syncs the directory; returns the path
/// without extension.
fn land(
    dir: &Path,
    tmp_pack: &Path,
    tmp_index: &Path,
    checksum: &ObjectId,
    index: &[u8],
) -> Result<PathBuf, Error> {
    let io = |e| pack_io(dir, e);
    durable::write_synced(tmp_index, &[index]).map_err(io)?;
    let name = format!("pack-{}", checksum.to_hex());
    std::fs::rename(tmp_pack, dir.join(format!("{name}.pack"))).map_err(io)?;
    std::fs::rename(tmp_index, dir.join(format!("{name}.idx"))).map_err(io)?;
    durable::sync_dir(dir).map_err(io)?;
    Ok(dir.join(name))
}

/// Which objects of the packs being merged are copied: those held by more than one pack are
/// copied from the first only.
struct Copies {
    /// Distinct objects.
    unique: u64,
    /// `(pack, object)` of every copy after the first.
    later: std::collections::HashSet<(usize, ObjectId)>,
    /// The objects with a later copy.
    shared: std::collections::HashSet<ObjectId>,
}

impl Copies {
    /// Merges the sorted indices (memory: one cursor per pack).
    fn of(indices: &[PackIndex]) -> Copies {
        let mut later: std::collections::HashSet<(usize, ObjectId)> = Default::default();
        let mut heap = BinaryHeap::new();
        for (p, index) in indices.iter().enumerate() {
            if index.num_objects() > 0 {
                heap.push(std::cmp::Reverse((
                    index.oid_at_index(0).to_owned(),
                    p,
                    0u32,
                )));
            }
        }
        let mut last: Option<ObjectId> = None;
        let mut unique: u64 = 0;
        while let Some(std::cmp::Reverse((id, p, i))) = heap.pop() {
            if last == Some(id) {
                later.insert((p, id));
            } else {
                unique += 1;
                last = Some(id);
            }
            if i + 1 < indices[p].num_objects() {
                heap.push(std::cmp::Reverse((
                    indices[p].oid_at_index(i + 1).to_owned(),
                    p,
                    i + 1,
                )));
            }
        }
        let shared = later.iter().map(|(_, id)| *id).collect();
        Copies {
            unique,
            later,
            shared,
        }
    }
}

/// The merged pack being written: its output, the entries written so far, and what copying
/// each entry reuses (buffers, the compressor, the tree versions that deltas are made
/// against).
struct Merger<'a> {
    store: &'a Store,
    dir: &'a Path,
    hash_kind: gix::hash::Kind,
    copies: &'a Copies,
    out: Hashed<BufWriter<std::fs::File>>,
    /// Id, offset and CRC-32 of every entry written, for the index.
    entries: Vec<(ObjectId, u64, u32)>,
    /// Where the first copy of each object held by more than one pack went: a later pack's
    /// delta may name its own copy as its base.
    first_copy_at: std::collections::HashMap<ObjectId, Moved>,
    compress: gix_zlib::stream::deflate::Compress,
    scratch: Vec<u8>,
    /// The entry read.
    buf: Vec<u8>,
    /// The entry built, when it is not copied as read.
    object: Vec<u8>,
    encoder: Encoder,
    delta: Vec<u8>,
    versions: TreeVersions,
    inflate: gix_zlib::Inflate,
    /// Whether a whole tree whose zlib stream was written at the fastest level (a commit's
    /// pack writes trees so) and that stays whole is compressed again at level 6: only in a
    /// pack that stays as it is (`maintain`'s, or one that the roll-up after a commit leaves
    /// alone), as a smaller roll-up's pack is merged again soon and most of its whole trees
    /// then become deltas.
    recompress_trees: bool,
}

impl<'a> Merger<'a> {
    /// A merger writing into `file`, its header (`count` objects) written;
    /// `recompress_trees`: [`Merger::recompress_trees`].
    fn new(
        store: &'a Store,
        dir: &'a Path,
        file: std::fs::File,
        count: u32,
        copies: &'a Copies,
        recompress_trees: bool,
    ) -> Result<Merger<'a>, Error> {
        let hash_kind = store.repo.object_hash();
        let mut out = Hashed {
            inner: BufWriter::with_capacity(1 << 20, file),
            hasher: gix::hash::hasher(hash_kind),
            written: 0,
        };
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(b"PACK");
        header.extend_from_slice(&2u32.to_be_bytes());
        header.extend_from_slice(&count.to_be_bytes());
        out.put(&header).map_err(|e| pack_io(dir, e))?;
        Ok(Merger {
            store,
            dir,
            hash_kind,
            copies,
            out,
            entries: Vec::with_capacity(copies.unique as usize),
            first_copy_at: Default::default(),
            compress: compressor(),
            scratch: Vec::new(),
            buf: Vec::new(),
            object: Vec::new(),
            encoder: Encoder::default(),
            delta: Vec::new(),
            versions: TreeVersions::default(),
            inflate: gix_zlib::Inflate::default(),
            recompress_trees,
        })
    }

    /// Copies the entries of `pack` (the `p`th merged), in offset order, skipping the objects
    /// an earlier pack already gave.
    fn copy_pack(&mut self, p: usize, pack: &Candidate) -> Result<(), Error> {
        let dir = self.dir;
        let io = |e| pack_io(dir, e);
        let index = open_index(dir, pack, self.hash_kind)?;
        let mut located: Vec<(u64, ObjectId, Option<u32>)> = index
            .iter()
            .map(|e| (e.pack_offset, e.oid, e.crc32))
            .collect();
        drop(index);
        located.sort_unstable_by_key(|e| e.0);
        // Where each entry of this pack went, in the order of `located`.
        let mut moved_to: Vec<Moved> = Vec::with_capacity(located.len());
        let data = std::fs::File::open(pack.stem.with_extension("pack")).map_err(io)?;
        let end = data.metadata().map_err(io)?.len() - self.hash_kind.len_in_bytes() as u64;
        let mut data = BufReader::with_capacity(1 << 20, data);
        let first = located.first().map_or(end, |e| e.0);
        data.seek(SeekFrom::Start(first)).map_err(io)?;
        let layout = layout_of(&mut data, &located, end).map_err(io)?;
        data.seek(SeekFrom::Start(first)).map_err(io)?;
        for (k, (offset, id, crc)) in located.iter().enumerate() {
            let next = located.get(k + 1).map_or(end, |e| e.0);
            let len = next
                .checked_sub(*offset)
                .ok_or_else(|| io(std::io::Error::other("pack entries overlap their index")))?;
            self.buf.resize(len as usize, 0);
            data.read_exact(&mut self.buf).map_err(io)?;
            if self.copies.later.contains(&(p, *id)) {
                moved_to.push(self.first_copy_at[id]);
                continue;
            }
            if let Some(crc) = crc
                && crc32fast::hash(&self.buf) != *crc
            {
                return Err(io(std::io::Error::other(format!(
                    "object {id} in {} does not match its CRC-32; run git fsck",
                    pack.stem.display()
                ))));
            }
            let moved = self.copy_entry(pack, *id, &layout, k, &moved_to)?;
            moved_to.push(moved);
        }
        Ok(())
    }

    /// Writes the entry `k` of `pack` (object `id`, its bytes in `buf`) into the new pack: a
    /// whole tree as a delta against an earlier version of it when that pays, an offset delta
    /// with its base's new distance, a delta against an object named by id as the whole
    /// object, anything else as read. Returns where it went.
    fn copy_entry(
        &mut self,
        pack: &Candidate,
        id: ObjectId,
        layout: &Layout,
        k: usize,
        moved_to: &[Moved],
    ) -> Result<Moved, Error> {
        let dir = self.dir;
        let io = |e| pack_io(dir, e);
        let at = self.out.written;
        let is_tree = layout.type_bits[k] == TREE;
        let hash_len = self.hash_kind.len_in_bytes();
        // Whether the entry to write is the one built in `object` (else `buf`, as read).
        let (built, depth, tree): (bool, u8, Option<u32>) = match entry_shape(&self.buf) {
            Some(Shape::Whole {
                size, data_start, ..
            }) if is_tree && size >= MIN_DELTA_OBJECT => {
                // A whole tree becomes a delta against an earlier version of it in the new
                // pack, when one is there, the chain stays within its bound and the delta
                // pays.
                let tree = inflate_entry(&mut self.inflate, &self.buf[data_start..], size)
                    .ok_or_else(|| {
                        io(std::io::Error::other(format!(
                            "object {id} in {} does not inflate to its size; run git fsck",
                            pack.stem.display()
                        )))
                    })?;
                let mut written = (false, 0);
                let store = self.store;
                if let Some((base_at, depth)) = self.versions.delta_for(
                    &tree,
                    layout.height[k],
                    hash_len,
                    &mut self.encoder,
                    &mut self.delta,
                    |id| read_object(store, id),
                )? {
                    self.object.clear();
                    offset_delta_into(
                        &mut self.compress,
                        &mut self.scratch,
                        &self.delta,
                        at - base_at,
                        &mut self.object,
                    )
                    .map_err(|e| Error::Pack(Box::new(e)))?;
                    written = (true, depth);
                } else if self.recompress_trees && ours::fastest_stream(&self.buf[data_start..]) {
                    // Kept whole: compressed at the pack writer's level, not the commit's
                    // fast one.
                    self.object.clear();
                    entry_into(
                        &mut self.compress,
                        &mut self.scratch,
                        gix::objs::Kind::Tree,
                        &tree,
                        &mut self.object,
                    )
                    .map_err(|e| Error::Pack(Box::new(e)))?;
                    written = (true, 0);
                }
                let index = self.versions.add(id, at, written.1, tree, hash_len);
                (written.0, written.1, index)
            }
            Some(Shape::Whole { .. }) => (false, 0, None),
            Some(Shape::OffsetDelta {
                size, data_start, ..
            }) => {
                // The base is an earlier entry of this pack, already copied: the delta is
                // kept, its header names the base's new offset.
                let base = layout.base[k].map(|b| b as usize).ok_or_else(|| {
                    io(std::io::Error::other(format!(
                        "object {id} in {} is a delta whose base is not an entry before it; \
                         run git fsck",
                        pack.stem.display()
                    )))
                })?;
                let Moved {
                    at: base_at,
                    depth: base_depth,
                    tree: base_tree,
                } = moved_to[base];
                let depth = base_depth.saturating_add(1);
                let mut index = None;
                if is_tree {
                    // A later tree may be a version of this one: added when its base's bytes
                    // are held to rebuild it from. Reading the others through the object
                    // database costs far more than the deltas it adds.
                    let rebuilt = base_tree
                        .and_then(|b| self.versions.held(b))
                        .and_then(|base| {
                            let delta =
                                inflate_entry(&mut self.inflate, &self.buf[data_start..], size)?;
                            delta::apply(base, &delta)
                        });
                    if let Some(tree) = rebuilt
                        && tree.len() >= MIN_DELTA_OBJECT
                    {
                        index = self.versions.add(id, at, depth, tree, hash_len);
                    }
                }
                self.object.clear();
                ours::push_entry_header(&mut self.object, 6, size);
                ours::push_base_distance(&mut self.object, at - base_at);
                self.object.extend_from_slice(&self.buf[data_start..]);
                (true, depth, index)
            }
            None => {
                // A delta against an object named by id (git's packs may have them): store
                // the object whole.
                let found = self
                    .store
                    .repo
                    .try_find_object(id)
                    .map_err(git_err("read object", &id))?
                    .ok_or_else(|| Error::MissingObject {
                        id: id.to_hex().to_string(),
                    })?;
                self.object.clear();
                entry_into(
                    &mut self.compress,
                    &mut self.scratch,
                    found.kind,
                    &found.data,
                    &mut self.object,
                )
                .map_err(|e| Error::Pack(Box::new(e)))?;
                (true, 0, None)
            }
        };
        let entry: &[u8] = if built { &self.object } else { &self.buf };
        let moved = Moved { at, depth, tree };
        if self.copies.shared.contains(&id) {
            self.first_copy_at.insert(id, moved);
        }
        self.entries.push((id, at, crc32fast::hash(entry)));
        self.out.put(entry).map_err(io)?;
        Ok(moved)
    }

    /// Ends the pack with its checksum and syncs it; returns the checksum, the pack's size and
    /// its index's bytes.
    fn finish(self) -> Result<(ObjectId, u64, Vec<u8>), Error> {
        let dir = self.dir;
        let io = |e| pack_io(dir, e);
        let Hashed {
            inner,
            hasher,
            written,
        } = self.out;
        let checksum = hasher
            .try_finalize()
            .map_err(|e| io(std::io::Error::other(e.to_string())))?;
        let mut file = inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.write_all(checksum.as_bytes()).map_err(io)?;
        file.sync_all().map_err(io)?;
        let index = index_bytes(self.hash_kind, &self.entries, &checksum)
            .map_err(|e| Error::Pack(Box::new(e)))?;
        Ok((checksum, written + checksum.as_bytes().len() as u64, index))
    }
}

/// Where an entry went in the new pack.
#[derive(Clone, Copy, Debug)]
struct Moved {
    /// Its offset.
    at: u64,
    /// The deltas below it.
    depth: u8,
    /// Its index in [`TreeVersions`], for a tree added there.
    tree: Option<u32>,
}

/// The type bits of a tree in a pack entry's header.
const TREE: u8 = 2;

/// The most deltas in a chain that ends in a tree made a version delta by the roll-up: 50, git's
/// default `pack.depth`; a blob's chain and a publication's own holds at most 3 (`pack.rs`).
/// Trees are read along a path, each directory once, and readers keep the trees and objects
/// they built last, so a longer chain costs them little, while a short one stores every few
/// versions of a directory whole: `serve` rewrites its 256-entry fan-out trees (7 KiB each) in
/// most batches, and with chains of 9 those whole versions were most of its repository.
const TREE_VERSION_CHAIN: usize = 50;

/// Sampled entries that [`TreeVersions`] indexes before it forgets every tree and starts again:
/// about 24 MiB of index. A roll-up of 100,000 events holds far fewer (a fan-out leaf tree has
/// one to three entries); one of a million-event ledger, whose leaves hold about 15, may reach
/// it, and then finds bases among the trees added since.
const VERSION_INDEX_ENTRIES: usize = 1 << 20;

/// What a pack entry holds, read from its header.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    /// A whole object of `size` bytes: a commit, tree, blob or tag (`type_bits` 1 to 4).
    Whole {
        /// The type bits of the header (1 commit, 2 tree, 3 blob, 4 tag).
        type_bits: u8,
        /// The object's size.
        size: usize,
        /// Where its zlib stream starts.
        data_start: usize,
    },
    /// A delta of `size` bytes against the entry `distance` bytes before it, whose zlib stream
    /// starts at `data_start`.
    OffsetDelta {
        size: usize,
        distance: u64,
        data_start: usize,
    },
}

/// The shape of the pack entry at the start of `entry`; `None` for a delta against an object
/// named by id, or a header that ends too soon or does not fit.
fn entry_shape(entry: &[u8]) -> Option<Shape> {
    let first = *entry.first()?;
    let (mut size, mut shift, mut at) = ((first & 0x0f) as u64, 4, 1);
    let mut byte = first;
    while byte & 0x80 != 0 {
        byte = *entry.get(at)?;
        at += 1;
        size |= u64::from(byte & 0x7f).checked_shl(shift)?;
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    match (first >> 4) & 7 {
        type_bits @ 1..=4 => Some(Shape::Whole {
            type_bits,
            size: usize::try_from(size).ok()?,
            data_start: at,
        }),
        6 => {
            let mut byte = *entry.get(at)?;
            at += 1;
            let mut distance = u64::from(byte & 0x7f);
            while byte & 0x80 != 0 {
                byte = *entry.get(at)?;
                at += 1;
                distance = distance.checked_add(1)?.checked_mul(128)? | u64::from(byte & 0x7f);
            }
            Some(Shape::OffsetDelta {
                size: usize::try_from(size).ok()?,
                distance,
                data_start: at,
            })
        }
        _ => None,
    }
}

/// What the roll-up needs to know of a pack's entries before it copies the first, each in the
/// order of `located` (by offset).
struct Layout {
    /// The object's type bits; a delta's are its base's; 0 for a delta against an object named
    /// by id.
    type_bits: Vec<u8>,
    /// The index of an offset delta's base among the entries before it; `None` for whole
    /// entries, deltas by id, and a delta whose distance names no entry before it.
    base: Vec<Option<u32>>,
    /// The most deltas built on the entry within the pack, one upon another (0 when none is).
    height: Vec<u8>,
}

/// Reads the header of every entry of a pack (`located`: offset, id and CRC-32 of each, by
/// offset; `end`: where the checksum starts) from `data` and returns their [`Layout`]. A delta
/// comes after its base, so one pass from the end finds every height.
fn layout_of<R: Read + Seek>(
    data: &mut BufReader<R>,
    located: &[(u64, ObjectId, Option<u32>)],
    end: u64,
) -> std::io::Result<Layout> {
    let mut type_bits = Vec::with_capacity(located.len());
    let mut base: Vec<Option<u32>> = Vec::with_capacity(located.len());
    // A header is at most 10 bytes of type and size and 10 of distance.
    let mut head = [0u8; 24];
    for (k, (offset, _, _)) in located.iter().enumerate() {
        let len = located
            .get(k + 1)
            .map_or(end, |e| e.0)
            .saturating_sub(*offset);
        let take = head.len().min(len as usize);
        data.read_exact(&mut head[..take])?;
        data.seek_relative((len - take as u64) as i64)?;
        let (bits, of) = match entry_shape(&head[..take]) {
            Some(Shape::Whole { type_bits, .. }) => (type_bits, None),
            Some(Shape::OffsetDelta { distance, .. }) => {
                let of = offset
                    .checked_sub(distance)
                    .and_then(|b| located[..k].binary_search_by_key(&b, |e| e.0).ok());
                (of.map_or(0, |b| type_bits[b]), of.map(|b| b as u32))
            }
            None => (0, None),
        };
        type_bits.push(bits);
        base.push(of);
    }
    let mut height = vec![0u8; located.len()];
    for k in (0..located.len()).rev() {
        if let Some(b) = base[k] {
            let b = b as usize;
            height[b] = height[b].max(height[k].saturating_add(1));
        }
    }
    Ok(Layout {
        type_bits,
        base,
        height,
    })
}

/// The trees already in the new pack, found by the ids their entries name: a version of a
/// directory names mostly the same files and subtrees as the version before it, and two other
/// directories name none in common.
///
/// Sampled entries only are indexed: the first and the last of each tree, and those whose id
/// starts with a byte below a bound that gives about 16 entries of a tree of 16 to 256 entries,
/// one in 16 of a wider tree's and every entry of a narrower one (a fan-out leaf of one or two
/// bindings). A sampled id names the last tree added that holds it, by the first 8
/// bytes of the id (an id named by two unrelated trees, or two ids alike in those bytes, only
/// make a poorer base: the delta is tried and may not pay). Memory: about 24 bytes a sampled
/// entry, 32 a tree, and the bytes held.
#[derive(Default)]
struct TreeVersions {
    /// Each tree added since the index was last cleared: its id, its offset in the new pack and
    /// the deltas below it there. Tree `i` (counting every tree ever added) is at
    /// `i - forgotten`.
    trees: Vec<(ObjectId, u64, u8)>,
    /// The trees added before the index was last cleared.
    forgotten: u32,
    /// A sampled entry's id (its first 8 bytes) → the last tree of `trees` that names it.
    by_entry: std::collections::HashMap<u64, u32>,
    /// Reused: the sampled ids of one tree.
    keys: Vec<u64>,
    /// Reused: a delta tried against the second base.
    attempt: Vec<u8>,
    /// The bytes of the trees added last, [`VERSION_HELD_BYTES`] at most, oldest first: the
    /// base of a tree is most often the version added one publication before it.
    held: std::collections::VecDeque<(u32, Box<[u8]>)>,
    held_bytes: usize,
}

/// The bytes of trees that [`TreeVersions`] keeps to delta against without reading them again:
/// 8 MiB, more than the trees that a publication of 10,000 events writes.
const VERSION_HELD_BYTES: usize = 8 << 20;

impl TreeVersions {
    /// The sampled entries of the tree `bytes` (ids of `hash_len` bytes) into `self.keys`,
    /// sorted and each once; a malformed tree yields what it holds before the fault.
    fn sample(&mut self, bytes: &[u8], hash_len: usize) {
        self.keys.clear();
        let mut ids = Vec::new();
        let mut at = 0;
        while let Some(nul) = bytes[at..].iter().position(|&b| b == 0) {
            let id = at + nul + 1;
            let Some(entry) = bytes.get(id..id + hash_len) else {
                break;
            };
            ids.push(entry);
            at = id + hash_len;
        }
        // About 16 entries of a tree of 16 to 256, one in 16 of a wider one, all of a
        // narrower one; a wider version samples a subset of what a narrower one did.
        let below = (4096 / ids.len().max(1)).clamp(16, 256);
        let last = ids.len().saturating_sub(1);
        for (i, id) in ids.iter().enumerate() {
            if i == 0 || i == last || usize::from(id[0]) < below {
                self.keys.push(u64::from_be_bytes(
                    id[..8].try_into().expect("ids are 20 bytes or more"),
                ));
            }
        }
        self.keys.sort_unstable();
        self.keys.dedup();
    }

    /// The indices (counting every tree added) of the two trees that name the most of the
    /// sampled entries of `tree`, most first (of those that tie, the last added first).
    fn likeliest_bases(&mut self, tree: &[u8], hash_len: usize) -> [Option<u32>; 2] {
        self.sample(tree, hash_len);
        let mut named: Vec<u32> = self
            .keys
            .iter()
            .filter_map(|key| self.by_entry.get(key).copied())
            .collect();
        named.sort_unstable();
        let mut best: [Option<(usize, u32)>; 2] = [None, None];
        for run in named.chunk_by(|a, b| a == b) {
            let this = Some((run.len(), run[0]));
            if best[0].is_none_or(|(votes, _)| run.len() >= votes) {
                best = [this, best[0]];
            } else if best[1].is_none_or(|(votes, _)| run.len() >= votes) {
                best[1] = this;
            }
        }
        best.map(|b| b.map(|(_, tree)| tree))
    }

    /// The shortest delta of `tree` (with `height` deltas built on it in its pack) against
    /// either of its two likeliest bases that keep every chain within [`TREE_VERSION_CHAIN`]
    /// and that pays: written into `delta`, with the base's offset and the tree's new depth.
    /// A base's bytes come from those held, or else from `read`.
    ///
    /// # Errors
    /// The errors of `read`.
    fn delta_for(
        &mut self,
        tree: &[u8],
        height: u8,
        hash_len: usize,
        encoder: &mut Encoder,
        delta: &mut Vec<u8>,
        read: impl Fn(&ObjectId) -> Result<Vec<u8>, Error>,
    ) -> Result<Option<(u64, u8)>, Error> {
        let mut attempt = std::mem::take(&mut self.attempt);
        let mut limit = delta_pays(tree.len());
        let mut best = None;
        for base in self.likeliest_bases(tree, hash_len).into_iter().flatten() {
            let Some(&(base_id, base_at, base_depth)) = self.tree(base) else {
                continue;
            };
            if usize::from(base_depth) + 1 + usize::from(height) > TREE_VERSION_CHAIN {
                continue;
            }
            let read_base;
            let bytes = match self.held(base) {
                Some(bytes) => bytes,
                None => {
                    read_base = read(&base_id)?;
                    &read_base
                }
            };
            if encoder.encode(bytes, tree, limit, &mut attempt) {
                std::mem::swap(delta, &mut attempt);
                limit = delta.len().saturating_sub(1);
                best = Some((base_at, base_depth + 1));
            }
        }
        self.attempt = attempt;
        Ok(best)
    }

    /// The id, offset and depth of tree `index` (counting every tree added), unless forgotten.
    fn tree(&self, index: u32) -> Option<&(ObjectId, u64, u8)> {
        self.trees.get(index.checked_sub(self.forgotten)? as usize)
    }

    /// The bytes of tree `index` (counting every tree added), if they are still held.
    fn held(&self, index: u32) -> Option<&[u8]> {
        let first = self.held.front()?.0;
        let (held, bytes) = self.held.get(index.checked_sub(first)? as usize)?;
        debug_assert_eq!(*held, index);
        Some(bytes)
    }

    /// Adds the tree `id` with its bytes, written at `at` with `depth` deltas below it, and
    /// returns its index (counting every tree added; `None` past `u32::MAX` trees).
    fn add(
        &mut self,
        id: ObjectId,
        at: u64,
        depth: u8,
        tree: Vec<u8>,
        hash_len: usize,
    ) -> Option<u32> {
        if self.by_entry.len() >= VERSION_INDEX_ENTRIES {
            self.forgotten = self.forgotten.checked_add(self.trees.len() as u32)?;
            self.by_entry.clear();
            self.trees.clear();
            self.held.clear();
            self.held_bytes = 0;
        }
        let index = self
            .forgotten
            .checked_add(u32::try_from(self.trees.len()).ok()?)?;
        self.trees.push((id, at, depth));
        self.sample(&tree, hash_len);
        for key in &self.keys {
            self.by_entry.insert(*key, index);
        }
        self.held_bytes += tree.len();
        self.held.push_back((index, tree.into_boxed_slice()));
        while self.held_bytes > VERSION_HELD_BYTES
            && let Some((_, oldest)) = self.held.pop_front()
        {
            self.held_bytes -= oldest.len();
        }
        Some(index)
    }
}

/// The object (or delta) of `size` bytes whose zlib stream starts `stream`; `None` when the
/// stream does not end there or holds another size.
fn inflate_entry(inflate: &mut gix_zlib::Inflate, stream: &[u8], size: usize) -> Option<Vec<u8>> {
    inflate.reset();
    // One byte more than the object, to tell a longer stream from one of the size.
    let mut out = vec![0u8; size + 1];
    match inflate.once(stream, &mut out) {
        Ok((gix_zlib::Status::StreamEnd, _, written)) if written == size => {
            out.truncate(size);
            Some(out)
        }
        _ => None,
    }
}

/// A writer that hashes what it writes and counts it.
struct Hashed<W: Write> {
    inner: W,
    hasher: gix::hash::Hasher,
    written: u64,
}

impl<W: Write> Hashed<W> {
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hasher.update(bytes);
        self.written += bytes.len() as u64;
        self.inner.write_all(bytes)
    }
}

/// Every pack of `dir`: `objects/pack/pack-<hex>` (without extension) for each `.idx` with its
/// `.pack`.
fn every_pack(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut packs = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        let Some(stem) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".idx"))
            .filter(|n| n.starts_with("pack-"))
        else {
            continue;
        };
        let stem = dir.join(stem);
        if stem.with_extension("pack").exists() {
            packs.push(stem);
        }
    }
    Ok(packs)
}

/// Whether the pack index names `named` (from a multi-pack index) include the pack `stem`.
fn names_pack(named: &[PathBuf], stem: &Path) -> bool {
    let idx = stem.with_extension("idx");
    idx.file_name()
        .is_some_and(|idx| named.iter().any(|n| n.as_os_str() == idx))
}

/// The packs of `dir` that consolidation may merge, and how many packs there are in all: every
/// pack ([`every_pack`]) without a `.keep` file and not in `kept` (the pack index names a
/// multi-pack index holds). The object count is read from the index's fan-out table.
fn candidates(dir: &Path, kept: &[PathBuf]) -> std::io::Result<(Vec<Candidate>, usize)> {
    let every = every_pack(dir)?;
    let total = every.len();
    let mut packs = Vec::new();
    for stem in every {
        if stem.with_extension("keep").exists() || names_pack(kept, &stem) {
            continue;
        }
        if let Some(objects) = index_object_count(&stem.with_extension("idx")) {
            packs.push(Candidate { stem, objects });
        }
    }
    Ok((packs, total))
}

/// The object count of a pack index (version 1 or 2): the last fan-out entry. `None` when the
/// file is unreadable or too short (a pack being removed; it is left alone).
fn index_object_count(path: &Path) -> Option<u64> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 8];
    file.read_exact(&mut head).ok()?;
    let fanout_start = if head == *b"\xfftOc\0\0\0\x02" { 8 } else { 0 };
    file.seek(SeekFrom::Start(fanout_start + 255 * 4)).ok()?;
    let mut last = [0u8; 4];
    file.read_exact(&mut last).ok()?;
    Some(u32::from_be_bytes(last) as u64)
}

/// Sorts `packs` by object count (then name) and returns how many of the smallest to merge so
/// that the rest, with the merged pack, form a geometric progression of factor 2 (the rule of
/// `git repack --geometric=2`). 0 or 1 means nothing to do.
fn geometric_split(packs: &mut [Candidate]) -> usize {
    packs.sort_by(|a, b| a.objects.cmp(&b.objects).then_with(|| a.stem.cmp(&b.stem)));
    let weight = |p: &Candidate| p.objects.max(1);
    // The largest packs that already grow by a factor of 2 stay; everything below is merged.
    let mut split = 0;
    for i in (1..packs.len()).rev() {
        if weight(&packs[i]) < 2 * weight(&packs[i - 1]) {
            split = i + 1;
            break;
        }
    }
    // The merged pack may break the progression of the packs above it: take those in too.
    let mut total: u64 = packs[..split].iter().map(weight).sum();
    while split < packs.len() && weight(&packs[split]) < 2 * total {
        total += weight(&packs[split]);
        split += 1;
    }
    split
}

/// The geometric split of [`geometric_split`] within a budget of `max_objects`: packs of at
/// least half the budget are left as they are (to `maintain`), the rule runs on the smaller
/// ones, and when its roll-up would still exceed the budget, the largest of the packs it chose
/// are dropped from it until it fits. Without this, a roll-up over the budget was skipped whole,
/// and since every later one included it, a long-lived repository gained one pack per
/// publication (85 packs after 100 publications of 10,000 events). With it, the packs are the
/// ones of at least half the budget (about `objects / (max_objects / 2)` of them) plus a
/// geometric progression below, and an object is rewritten about `log2` of the budget over the
/// publication size times before its pack is left alone.
fn bounded_split(packs: &mut [Candidate], max_objects: u64) -> usize {
    let weight = |p: &Candidate| p.objects.max(1);
    packs.sort_by(|a, b| a.objects.cmp(&b.objects).then_with(|| a.stem.cmp(&b.stem)));
    let open = packs
        .iter()
        .take_while(|p| weight(p) < max_objects.div_ceil(2))
        .count();
    let mut split = geometric_split(&mut packs[..open]);
    let mut total: u64 = packs[..split].iter().map(weight).sum();
    while split > 0 && total > max_objects {
        split -= 1;
        total -= weight(&packs[split]);
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    fn pack_count(repo: &Path) -> usize {
        std::fs::read_dir(repo.join("objects/pack"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".idx"))
                })
                .count()
            })
            .unwrap_or(0)
    }

    /// Publishes `n` commits of `size` files each (packs, as more than 16 objects).
    fn publish_many(store: &Store, n: usize, size: usize, tag: &str) -> Vec<CommitId> {
        (0..n)
            .map(|k| {
                let files: Vec<(String, String)> = (0..size)
                    .map(|i| {
                        (
                            format!("{tag}{k}/d{}/f{i}.json", i % 3),
                            format!("{tag} {k} {i}\n"),
                        )
                    })
                    .collect();
                publish(store, &files)
            })
            .collect()
    }

    #[test]
    fn the_geometric_rule_merges_the_small_packs() {
        let c = |objects: u64, n: &str| Candidate {
            stem: PathBuf::from(n),
            objects,
        };
        for (sizes, merged) in [
            (vec![], 0),
            (vec![10], 0),
            (vec![10, 10], 2),
            (vec![10, 20], 0),
            (vec![10, 20, 40, 80], 0),
            (vec![80, 10, 40, 10], 2),
            (vec![1, 1, 1, 1, 1], 5),
            (vec![5, 5, 100], 2),
            (vec![5, 5, 15, 100], 3),
            (vec![100, 1000, 1000], 3),
        ] {
            let mut packs: Vec<Candidate> = sizes
                .iter()
                .enumerate()
                .map(|(i, s)| c(*s, &format!("p{i}")))
                .collect();
            assert_eq!(geometric_split(&mut packs), merged, "{sizes:?}");
        }
    }

    #[test]
    fn the_bounded_rule_merges_what_fits_and_leaves_large_packs() {
        let packs_of = |sizes: &[u64]| -> Vec<Candidate> {
            sizes
                .iter()
                .enumerate()
                .map(|(i, &objects)| Candidate {
                    stem: PathBuf::from(format!("p{i}")),
                    objects,
                })
                .collect()
        };
        for (sizes, max, merged) in [
            (vec![10, 10], u64::MAX, 2),
            (vec![10, 10], 21, 2),
            (vec![10, 10], 20, 0),
            // The progression's roll-up (420) exceeds the budget: the packs below it that fit.
            (vec![21, 21, 42, 84, 168], 262, 4),
            // A pack of half the budget or more stays; the rule runs on the rest.
            (vec![5, 5, 131, 140], 262, 2),
            (vec![131, 131], 262, 0),
            (vec![30, 30, 30, 30], 10, 0),
        ] {
            let mut packs = packs_of(&sizes);
            assert_eq!(
                bounded_split(&mut packs, max),
                merged,
                "{sizes:?} within {max}"
            );
        }
        // Publications of equal size under the publish budget: each roll-up stays within the
        // budget, and the packs stay few (they grew by one per publication before).
        let (size, budget) = (21_000u64, PUBLISH_ROLLUP_MAX);
        let mut packs: Vec<Candidate> = Vec::new();
        for k in 0..100 {
            packs.push(Candidate {
                stem: PathBuf::from(format!("pub{k:03}")),
                objects: size,
            });
            let n = bounded_split(&mut packs, budget);
            if n >= 2 {
                let objects: u64 = packs[..n].iter().map(|p| p.objects).sum();
                assert!(objects <= budget, "a roll-up of {objects} objects");
                packs.drain(..n);
                packs.push(Candidate {
                    stem: PathBuf::from(format!("merged{k:03}")),
                    objects,
                });
            }
        }
        let total = 100 * size;
        let bound = (total / (budget / 2)) as usize + 4;
        assert!(
            packs.len() <= bound,
            "{} packs (at most {bound})",
            packs.len()
        );
        assert_eq!(packs.iter().map(|p| p.objects).sum::<u64>(), total);
    }

    #[test]
    fn consolidation_keeps_every_object_and_few_packs() {
        let (_tmp, repo, store) = new_store();
        let commits = publish_many(&store, 8, 30, "a");
        assert_eq!(pack_count(&repo), 8);
        let before = git(&repo, &["rev-list", "--objects", "--all"]);
        let done = store
            .consolidate_packs(Rollup::Geometric {
                max_objects: u64::MAX,
            })
            .expect("consolidate");
        assert_eq!((done.packs_before, done.merged), (8, 8));
        assert_eq!(pack_count(&repo), 1);
        assert_eq!(git(&repo, &["rev-list", "--objects", "--all"]), before);
        assert_fsck_clean(&repo);
        for pack in std::fs::read_dir(repo.join("objects/pack")).expect("dir") {
            let path = pack.expect("entry").path();
            if path.extension().is_some_and(|e| e == "idx") {
                git(&repo, &["verify-pack", path.to_str().expect("utf-8")]);
            }
        }
        // The same open handle still reads everything, including objects it had looked up.
        let view = store.snapshot(commits.last().copied()).expect("snapshot");
        assert_eq!(
            view.read("a7/d0/f0.json", 100).expect("read"),
            Some(b"a 7 0\n".to_vec())
        );
        // A second run finds nothing to do; new publications roll up again.
        let again = store.consolidate_packs(Rollup::All).expect("again");
        assert_eq!(again.merged, 0);
        publish_many(&store, 3, 30, "b");
        store.consolidate_packs(Rollup::All).expect("all");
        assert_eq!(pack_count(&repo), 1);
        assert_fsck_clean(&repo);
    }

    /// The packs a `multi-pack-index` names, removed after their objects went elsewhere, as a
    /// `git repack` or our roll-up racing with `git maintenance run --task=incremental-repack`
    /// leaves them. Git falls back to the remaining packs' indices; so must every handle, old
    /// or new, and a write on top must land.
    #[test]
    fn a_stale_multi_pack_index_hides_no_object() {
        // Where the objects went: another pack (a repack), loose files (`git repack -A`
        // loosening, an unpack), or a pack written and a second midx-named pack also removed.
        for moved_to in ["pack", "loose", "pack, two named packs removed"] {
            let (_tmp, repo, store) = new_store();
            let commits = publish_many(&store, 3, 30, "a");
            let before = git(&repo, &["rev-list", "--objects", "--all"]);
            if moved_to.starts_with("pack,") {
                // Two packs the midx will name, each holding part of the history.
                git(&repo, &["repack", "-q", "-d"]);
            } else {
                git(&repo, &["repack", "-q", "-a", "-d"]);
            }
            let named: Vec<PathBuf> = std::fs::read_dir(repo.join("objects/pack"))
                .expect("dir")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .collect();
            git(&repo, &["multi-pack-index", "write"]);
            let everything = git(
                &repo,
                &["rev-list", "--objects", "--all", "--no-object-names"],
            );
            let remove_named = || {
                for pack in &named {
                    for ext in ["idx", "pack", "rev", "bitmap"] {
                        let _ = std::fs::remove_file(pack.with_extension(ext));
                    }
                }
            };
            let git_with_input = |args: &[&str], input: &[u8]| {
                use std::io::Write as _;
                let mut child = std::process::Command::new("git")
                    .args(args)
                    .current_dir(&repo)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .expect("git");
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(input)
                    .expect("write");
                assert!(child.wait().expect("wait").success(), "git {args:?}");
            };
            if moved_to == "loose" {
                // unpack-objects skips the objects it can already read: remove the packs first.
                let bytes: Vec<Vec<u8>> = named
                    .iter()
                    .map(|p| std::fs::read(p).expect("pack"))
                    .collect();
                remove_named();
                for pack in &bytes {
                    git_with_input(&["unpack-objects", "-q"], pack);
                }
            } else {
                git_with_input(
                    &["pack-objects", "-q", "objects/pack/pack"],
                    format!("{everything}\n").as_bytes(),
                );
                remove_named();
            }
            assert!(repo.join("objects/pack/multi-pack-index").exists());
            // Git itself reads through the stale index.
            assert_eq!(
                git(&repo, &["rev-list", "--objects", "--all"]),
                before,
                "{moved_to}"
            );
            let fresh = Store::open(&repo).expect("open");
            for handle in [&fresh, &store] {
                let view = handle.snapshot(commits.last().copied()).expect("snapshot");
                assert_eq!(
                    view.read("a2/d0/f0.json", 100).expect("read"),
                    Some(b"a 2 0\n".to_vec()),
                    "{moved_to}"
                );
            }
            publish(&fresh, &[("b/f.json", "b\n")]);
            assert_eq!(
                fresh
                    .snapshot(Some(fresh.tip(MAIN).expect("tip").expect("a tip")))
                    .expect("snapshot")
                    .read("a0/d1/f1.json", 100)
                    .expect("read"),
                Some(b"a 0 1\n".to_vec()),
                "{moved_to}"
            );
        }
    }

    /// Copies of the files of `objects/pack`, to put back as a kill would leave them.
    fn pack_files(repo: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        std::fs::read_dir(repo.join("objects/pack"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .map(|p| (p.clone(), std::fs::read(&p).expect("read")))
            .collect()
    }

    #[test]
    fn a_rollup_killed_before_removing_its_inputs_loses_nothing_after() {
        // A kill after the merged pack is durable and before the old packs are removed leaves
        // both; the next roll-up then writes the very same pack again (same objects, same
        // order, same name). It must not remove that pack as one of its inputs.
        for rollup in [
            Rollup::All,
            Rollup::Geometric {
                max_objects: u64::MAX,
            },
        ] {
            let (_tmp, repo, store) = new_store();
            publish_many(&store, 3, 30, "a");
            let before = git(&repo, &["rev-list", "--objects", "--all"]);
            let inputs = pack_files(&repo);
            let done = store.consolidate_packs(rollup).expect("consolidate");
            assert_eq!(done.merged, 3);
            for (path, bytes) in &inputs {
                std::fs::write(path, bytes).expect("put back");
            }
            assert_eq!(pack_count(&repo), 4);
            let again = store.consolidate_packs(rollup).expect("again");
            assert_eq!(again.merged, 4, "{rollup:?}");
            assert_eq!(pack_count(&repo), 1, "{rollup:?}");
            assert_fsck_clean(&repo);
            assert_eq!(git(&repo, &["rev-list", "--objects", "--all"]), before);
            // Killed after removing some of its inputs: one input is left beside the new pack.
            let merged = pack_files(&repo);
            publish_many(&store, 2, 30, "b");
            let before = git(&repo, &["rev-list", "--objects", "--all"]);
            let inputs = pack_files(&repo);
            store.consolidate_packs(rollup).expect("third");
            let left = inputs
                .iter()
                .find(|(p, _)| {
                    p.extension().is_some_and(|e| e == "idx") && !merged.iter().any(|m| &m.0 == p)
                })
                .expect("a new pack");
            for (path, bytes) in inputs
                .iter()
                .filter(|(p, _)| p.with_extension("idx") == left.0)
            {
                std::fs::write(path, bytes).expect("put back");
            }
            store.consolidate_packs(rollup).expect("fourth");
            assert_fsck_clean(&repo);
            assert_eq!(git(&repo, &["rev-list", "--objects", "--all"]), before);
        }
    }

    /// Runs `git pack-objects` on every object of the repository, with `flags`, into a new pack
    /// beside the others.
    fn git_pack_objects(repo: &Path, flags: &[&str]) {
        use std::io::Write as _;
        let objects = git(repo, &["rev-list", "--objects", "--all"]);
        let mut child = std::process::Command::new("git")
            .args(["pack-objects", "-q", "--window=50", "--depth=10"])
            .args(flags)
            .arg("objects/pack/pack")
            .current_dir(repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("git is installed");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(objects.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write");
        drop(stdin);
        assert!(child.wait().expect("wait").success());
    }

    /// The deltas of every pack: `(offset deltas, deltas naming their base by id)`.
    fn delta_kinds(repo: &Path) -> (usize, usize) {
        let mut kinds = (0, 0);
        for path in std::fs::read_dir(repo.join("objects/pack"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "pack"))
        {
            let bytes = std::fs::read(&path).expect("read");
            let index =
                PackIndex::at(path.with_extension("idx"), gix::hash::Kind::Sha1).expect("index");
            for entry in index.iter() {
                match entry_shape(&bytes[entry.pack_offset as usize..]) {
                    Some(Shape::Whole { .. }) => {}
                    Some(Shape::OffsetDelta { .. }) => kinds.0 += 1,
                    None => kinds.1 += 1,
                }
            }
        }
        kinds
    }

    /// Packs of git's own (offset deltas from `git repack`, deltas by id from
    /// `git pack-objects` without `--delta-base-offset`) beside ours, holding second copies
    /// of our objects: every object is written once, git's offset deltas stay deltas, deltas
    /// by id (whose base may be anywhere) are stored whole.
    #[test]
    fn objects_in_two_packs_are_written_once_and_git_deltas_kept_or_resolved() {
        let (_tmp, repo, store) = new_store();
        // Files large and alike enough for git to store most as deltas.
        let similar = |k: usize| -> Vec<(String, String)> {
            (0..30)
                .map(|i| {
                    let text = format!("{{\"k\":{k},\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(200));
                    (format!("s{k}/d{}/f{i}.json", i % 3), text)
                })
                .collect()
        };
        publish(&store, &similar(0));
        publish(&store, &similar(1));
        git(&repo, &["repack", "-a", "-f", "--depth=10", "--window=50"]);
        git_pack_objects(&repo, &[]);
        publish(&store, &similar(2));
        let (offset_deltas, id_deltas) = delta_kinds(&repo);
        assert!(
            offset_deltas > 0 && id_deltas > 0,
            "{offset_deltas} {id_deltas}"
        );
        let packs = pack_count(&repo);
        assert!(packs >= 3, "{packs}");
        let objects = git(&repo, &["count-objects", "-v"]);
        let done = store.consolidate_packs(Rollup::All).expect("consolidate");
        assert_eq!(done.merged, packs);
        assert_eq!(pack_count(&repo), 1);
        assert_fsck_clean(&repo);
        let listed = git(&repo, &["rev-list", "--objects", "--all"])
            .lines()
            .count() as u64;
        assert_eq!(done.objects, listed, "{objects}");
        let (offset_deltas, id_deltas) = delta_kinds(&repo);
        assert!(offset_deltas > 0, "git's offset deltas are copied");
        assert_eq!(id_deltas, 0);
    }

    /// Our own packs with deltas, the second holding copies of objects of the first, some of
    /// them the bases of its deltas: the roll-up keeps every delta, pointed at the one copy of
    /// its base that it keeps, and git reads every object back.
    #[test]
    fn deltas_are_copied_with_their_bases_even_when_the_base_was_a_second_copy() {
        let (_tmp, repo, store) = new_store();
        let blob = |i: usize| {
            format!(
                "{{\"event_id\":\"{i:064}\",\"schema\":\"clawsweeper.action-ledger-import-event\"}}\n"
            )
            .into_bytes()
        };
        let dir = repo.join("objects/pack");
        // Both packs hold blobs 50..60. Whichever the roll-up reads first, the other's copy of
        // blob 59 is dropped while the delta after it (blob 100 in the first pack, 60 in the
        // second: neither a 4th object, so both deltas) is kept and must find its base in the
        // copy that was kept.
        let first: Vec<usize> = (0..20).chain(50..60).chain(100..120).collect();
        let second: Vec<usize> = (21..100).collect();
        for blobs in [&first, &second] {
            let mut b = crate::store::pack::PackBuilder::new(gix::hash::Kind::Sha1, &dir);
            for &i in blobs {
                b.add(gix::objs::Kind::Blob, &blob(i)).expect("add");
            }
            b.finish().expect("write").expect("a pack");
        }
        let all: std::collections::BTreeSet<usize> = first.iter().chain(&second).copied().collect();
        // Every 4th object of a pack is whole.
        let before = delta_kinds(&repo);
        assert_eq!(before, (37 + 59, 0), "50 objects and 79");
        let done = store.consolidate_packs(Rollup::All).expect("consolidate");
        assert_eq!((done.merged, done.objects), (2, all.len() as u64));
        assert_eq!(pack_count(&repo), 1);
        // Only the dropped copies' deltas are gone (at most the 10 shared objects').
        let after = delta_kinds(&repo);
        assert!(
            after.1 == 0 && after.0 >= before.0 - 10,
            "the deltas stay deltas: {after:?}"
        );
        for path in std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("e").path())
        {
            if path.extension().is_some_and(|e| e == "idx") {
                git(&repo, &["verify-pack", path.to_str().expect("utf-8")]);
            }
        }
        for i in all {
            let id =
                gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, &blob(i))
                    .expect("hash");
            let text = git(&repo, &["cat-file", "blob", &id.to_hex().to_string()]);
            assert_eq!(format!("{text}\n").into_bytes(), blob(i));
        }
    }

    /// Entry headers as git writes them: whole objects, offset deltas with distances of one to
    /// three bytes, and headers cut short.
    #[test]
    fn entry_shapes_are_read_from_their_headers() {
        let mut e = Vec::new();
        crate::store::pack::push_entry_header(&mut e, 3, 70_000);
        assert_eq!(
            entry_shape(&e),
            Some(Shape::Whole {
                type_bits: 3,
                size: 70_000,
                data_start: e.len()
            })
        );
        for distance in [1u64, 127, 128, 16_511, 16_512, 1 << 30] {
            let mut e = Vec::new();
            crate::store::pack::push_entry_header(&mut e, 6, 300);
            let header = e.len();
            crate::store::pack::push_base_distance(&mut e, distance);
            let data_start = e.len();
            e.push(0x78);
            assert_eq!(
                entry_shape(&e),
                Some(Shape::OffsetDelta {
                    size: 300,
                    distance,
                    data_start
                })
            );
            assert_eq!(entry_shape(&e[..header]), None, "cut short");
        }
        assert_eq!(entry_shape(&[0x70]), None, "a delta by id");
        assert_eq!(
            entry_shape(&[0xb0]),
            None,
            "a size that goes on past the end"
        );
    }

    /// `(tree deltas, the longest chain)` over every pack, from `git verify-pack -v`.
    fn tree_deltas_and_deepest_chain(repo: &Path) -> (usize, usize) {
        let (mut trees, mut deepest) = (0, 0);
        for path in std::fs::read_dir(repo.join("objects/pack"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        {
            let listing = git(repo, &["verify-pack", "-v", path.to_str().expect("utf-8")]);
            for fields in listing
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
            {
                if fields.len() == 7 {
                    trees += usize::from(fields[1] == "tree");
                    deepest = deepest.max(fields[5].parse::<usize>().expect("depth"));
                }
            }
        }
        (trees, deepest)
    }

    /// Publication `k` of a directory that grows by 12 files each time (a tree of `12 (k + 1)`
    /// entries, every version in its own pack), beside a directory of its own.
    fn grown(k: usize) -> Vec<(String, String)> {
        (0..12 * (k + 1))
            .map(|i| (format!("wide/f{i:04}.json"), format!("file {i}\n")))
            .chain((0..20).map(|i| (format!("own{k}/f{i}.json"), format!("{k} {i}\n"))))
            .collect()
    }

    /// Versions of one directory, each in the pack of its own publication, become deltas
    /// against each other when the roll-up brings them together: the pack shrinks, git reads
    /// every version back, no chain exceeds its bound, and a roll-up of the same packs again
    /// writes the same pack (so a kill before the inputs are removed loses nothing).
    #[test]
    fn tree_versions_become_deltas_when_their_packs_are_rolled_up() {
        let (_tmp, repo, store) = new_store();
        let commits: Vec<CommitId> = (0..14).map(|k| publish(&store, &grown(k))).collect();
        assert_eq!(
            tree_deltas_and_deepest_chain(&repo).0,
            0,
            "no pack had two versions"
        );
        let packed = |repo: &Path| -> u64 {
            std::fs::read_dir(repo.join("objects/pack"))
                .expect("dir")
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "pack"))
                .map(|p| std::fs::metadata(p).expect("size").len())
                .sum()
        };
        let before = packed(&repo);
        let listed = git(&repo, &["rev-list", "--objects", "--all"]);
        let inputs = pack_files(&repo);
        store.consolidate_packs(Rollup::All).expect("consolidate");
        let (tree_deltas, deepest) = tree_deltas_and_deepest_chain(&repo);
        // 14 versions of `wide` and of the root: at most one whole per chain of 10.
        assert!(tree_deltas >= 2 * 14 - 4, "{tree_deltas} tree deltas");
        assert!(deepest <= TREE_VERSION_CHAIN, "a chain of {deepest}");
        let after = packed(&repo);
        // The versions of `wide` (12 to 168 entries of 43 bytes, 65 KB) were most of the bytes.
        assert!(after * 2 < before, "{before} -> {after} bytes");
        assert_fsck_clean(&repo);
        assert_eq!(git(&repo, &["rev-list", "--objects", "--all"]), listed);
        for (k, commit) in commits.iter().enumerate() {
            let tree = git(&repo, &["ls-tree", &commit.0.to_hex().to_string(), "wide/"]);
            assert_eq!(tree.lines().count(), 12 * (k + 1));
        }
        let merged = pack_files(&repo);
        for (path, bytes) in &inputs {
            std::fs::write(path, bytes).expect("put back");
        }
        store.consolidate_packs(Rollup::All).expect("again");
        assert_eq!(
            pack_files(&repo),
            merged,
            "the same pack, under the same name"
        );
    }

    /// The zlib level (`FLEVEL`, 0 fastest to 3 best) of every whole tree of at least
    /// [`MIN_DELTA_OBJECT`] bytes in the packs of `repo`.
    fn whole_tree_levels(repo: &Path) -> Vec<u8> {
        let mut levels = Vec::new();
        for path in std::fs::read_dir(repo.join("objects/pack"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        {
            let data = std::fs::read(path.with_extension("pack")).expect("pack");
            let listing = git(repo, &["verify-pack", "-v", path.to_str().expect("utf-8")]);
            for fields in listing
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .filter(|f| f.len() == 5 && f[1] == "tree")
            {
                let size: usize = fields[2].parse().expect("size");
                let offset: usize = fields[4].parse().expect("offset");
                let Some(Shape::Whole { data_start, .. }) = entry_shape(&data[offset..]) else {
                    panic!("a whole tree at {offset}");
                };
                if size >= MIN_DELTA_OBJECT {
                    levels.push(data[offset + data_start + 1] >> 6);
                }
            }
        }
        levels
    }

    /// A commit's pack writes trees at the fastest level. A roll-up whose pack is merged again
    /// later copies the trees it keeps whole as they are; one whose pack stays (`maintain`'s
    /// here) compresses them again at level 6. Every object stays intact.
    #[test]
    fn trees_kept_whole_in_a_pack_that_stays_are_compressed_at_level_6() {
        let (_tmp, repo, store) = new_store();
        for k in 0..3 {
            publish(&store, &grown(k));
        }
        let written = whole_tree_levels(&repo);
        assert!(written.len() >= 6, "{written:?}");
        assert!(written.iter().all(|&l| l == 0), "{written:?}");
        let small = store
            .consolidate_packs(Rollup::Geometric {
                max_objects: PUBLISH_ROLLUP_MAX,
            })
            .expect("roll up");
        assert_eq!(small.merged, 3);
        let copied = whole_tree_levels(&repo);
        assert!(
            !copied.is_empty() && copied.iter().all(|&l| l == 0),
            "{copied:?}"
        );
        for k in 3..5 {
            publish(&store, &grown(k));
        }
        let listed = git(&repo, &["rev-list", "--objects", "--all"]);
        store.consolidate_packs(Rollup::All).expect("consolidate");
        let kept = whole_tree_levels(&repo);
        assert!(!kept.is_empty() && kept.len() < written.len(), "{kept:?}");
        assert!(kept.iter().all(|&l| l == 2), "{kept:?}");
        assert_fsck_clean(&repo);
        assert_eq!(git(&repo, &["rev-list", "--objects", "--all"]), listed);
    }

    /// Each roll-up may make more trees deltas beneath those its inputs already built on
    /// them: over many publications, each followed by a roll-up, the chains stay within their
    /// bound and every version stays readable.
    #[test]
    fn repeated_rollups_keep_tree_chains_short() {
        let (_tmp, repo, store) = new_store();
        for k in 0..24 {
            publish(&store, &grown(k));
            store.consolidate_packs(Rollup::All).expect("consolidate");
            let (_, deepest) = tree_deltas_and_deepest_chain(&repo);
            assert!(
                deepest <= TREE_VERSION_CHAIN,
                "a chain of {deepest} after {k}"
            );
        }
        assert!(
            tree_deltas_and_deepest_chain(&repo).0 >= 24,
            "versions became deltas"
        );
        assert_fsck_clean(&repo);
    }

    /// A tree of one entry per id byte in `ids` (ids of 20 equal bytes).
    fn tree_of(ids: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in ids {
            out.extend_from_slice(format!("100644 f{b:03}\0").as_bytes());
            out.extend_from_slice(&[b; 20]);
        }
        out
    }

    #[test]
    fn the_likeliest_base_names_the_most_entries_in_common() {
        let id = |b: u8| ObjectId::from_bytes_or_panic(&[b; 20]);
        let mut versions = TreeVersions::default();
        let key = |b: u8| u64::from_be_bytes([b; 8]);
        // A narrow tree: every entry. A wide one: the first, the last, ids starting below 16.
        versions.sample(&tree_of(&[1, 20, 30, 40]), 20);
        assert_eq!(versions.keys, vec![key(1), key(20), key(30), key(40)]);
        let wide: Vec<u8> = (0..512).map(|i| (i % 256) as u8).collect();
        versions.sample(&tree_of(&wide), 20);
        let mut sampled: Vec<u64> = (0..16).chain([255]).map(key).collect();
        sampled.sort_unstable();
        assert_eq!(versions.keys, sampled);
        versions.sample(b"100644 cut\0\x01\x02", 20);
        assert!(versions.keys.is_empty(), "a malformed tree yields nothing");
        assert_eq!(
            versions.likeliest_bases(&tree_of(&[1, 2, 3]), 20),
            [None, None]
        );

        let old = tree_of(&[1, 2, 3, 4, 5, 50]);
        let other = tree_of(&[6, 7, 8, 60]);
        versions.add(id(100), 12, 0, old.clone(), 20);
        versions.add(id(101), 500, 2, other, 20);
        let new = tree_of(&[1, 2, 3, 4, 9, 50, 70]);
        assert_eq!(versions.likeliest_bases(&new, 20), [Some(0), None]);
        assert_eq!(versions.trees[0], (id(100), 12, 0));
        assert_eq!(versions.held(0), Some(&old[..]));
        // An entry names the last tree added that holds it; of two that tie (1, 2 and 3
        // against 4, 5 and 50), the last added comes first.
        versions.add(id(102), 900, 1, tree_of(&[1, 2, 3]), 20);
        assert_eq!(versions.likeliest_bases(&new, 20), [Some(2), Some(0)]);
        assert_eq!(versions.likeliest_bases(&old, 20), [Some(2), Some(0)]);
        assert_eq!(versions.held(3), None);
    }

    #[test]
    fn held_trees_are_the_last_added_within_the_budget() {
        let mut versions = TreeVersions::default();
        let big = |b: u8| {
            let mut t = tree_of(&[b]);
            t.resize(VERSION_HELD_BYTES / 3, b);
            t
        };
        for b in 0..5u8 {
            versions.add(
                ObjectId::from_bytes_or_panic(&[b; 20]),
                b.into(),
                0,
                big(b),
                20,
            );
        }
        let held: Vec<u32> = (0..5).filter(|&i| versions.held(i).is_some()).collect();
        assert_eq!(held, vec![2, 3, 4]);
        assert_eq!(
            versions.held(4).expect("held").last(),
            Some(&4),
            "tree 4's own bytes"
        );
        assert!(versions.held_bytes <= VERSION_HELD_BYTES);
    }

    /// The heights of a pack of our writer: chains of at most 3 deltas, each whole object
    /// under the 3 after it; every delta's type is its base's.
    #[test]
    fn layouts_give_types_and_the_deltas_built_on_each_entry() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut b = crate::store::pack::PackBuilder::new(gix::hash::Kind::Sha1, tmp.path());
        for i in 0..10 {
            let text = format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "y".repeat(200));
            b.add(gix::objs::Kind::Blob, text.as_bytes()).expect("add");
        }
        b.add(gix::objs::Kind::Tree, &tree_of(&[1, 2, 3, 4, 5]))
            .expect("add");
        let written = b.finish().expect("write").expect("a pack");
        let index = PackIndex::at(&written.index, gix::hash::Kind::Sha1).expect("index");
        let mut located: Vec<(u64, ObjectId, Option<u32>)> = index
            .iter()
            .map(|e| (e.pack_offset, e.oid, e.crc32))
            .collect();
        located.sort_unstable_by_key(|e| e.0);
        let file = std::fs::File::open(&written.pack).expect("pack");
        let end = file.metadata().expect("size").len() - 20;
        let mut data = BufReader::new(file);
        data.seek(SeekFrom::Start(located[0].0)).expect("seek");
        let layout = layout_of(&mut data, &located, end).expect("layout");
        assert_eq!(layout.type_bits, [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2]);
        assert_eq!(layout.height, [3, 2, 1, 0, 3, 2, 1, 0, 1, 0, 0]);
    }

    #[test]
    fn a_whole_entry_inflates_only_to_its_own_size() {
        let mut compress = compressor();
        let mut entry = Vec::new();
        let tree = tree_of(&[1, 2, 3]);
        entry_into(
            &mut compress,
            &mut Vec::new(),
            gix::objs::Kind::Tree,
            &tree,
            &mut entry,
        )
        .expect("entry");
        let Some(Shape::Whole {
            type_bits: TREE,
            size,
            data_start,
        }) = entry_shape(&entry)
        else {
            panic!("a whole tree");
        };
        let mut inflate = gix_zlib::Inflate::default();
        assert_eq!(
            inflate_entry(&mut inflate, &entry[data_start..], size),
            Some(tree.clone())
        );
        assert_eq!(
            inflate_entry(&mut inflate, &entry[data_start..], size - 1),
            None
        );
        assert_eq!(
            inflate_entry(&mut inflate, &entry[data_start..], size + 1),
            None
        );
        assert_eq!(
            inflate_entry(&mut inflate, &entry[data_start..entry.len() - 3], size),
            None
        );
    }

    /// The `.idx` names of the multi-pack index of `repo`, sorted, and the `.idx` files there.
    fn midx_and_packs(repo: &Path) -> (Vec<String>, Vec<String>) {
        let dir = repo.join("objects/pack");
        let mut named: Vec<String> = midx::named(&dir)
            .expect("readable")
            .expect("a multi-pack index")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        named.sort();
        let mut idx: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".idx"))
            .collect();
        idx.sort();
        (named, idx)
    }

    /// `maintain` (both forms) ends with a multi-pack index over every pack, which git
    /// verifies and which the store reads; run again with nothing new it writes none.
    #[test]
    fn maintain_writes_a_multi_pack_index_over_every_pack() {
        for rollup in [Rollup::Maintain, Rollup::All] {
            let (_tmp, repo, store) = new_store();
            // Sizes that leave more than one pack after the geometric rule.
            publish_many(&store, 1, 200, "big");
            let commits = publish_many(&store, 3, 30, "a");
            let before = git(&repo, &["rev-list", "--objects", "--all"]);
            let done = store.consolidate_packs(rollup).expect("consolidate");
            let (named, idx) = midx_and_packs(&repo);
            assert_eq!(named, idx, "{rollup:?}");
            assert!(done.multi_pack_index.is_some_and(|n| n > 0), "{done:?}");
            git(&repo, &["multi-pack-index", "verify"]);
            assert_fsck_clean(&repo);
            assert_eq!(git(&repo, &["rev-list", "--objects", "--all"]), before);
            let fresh = Store::open(&repo).expect("open");
            let view = fresh.snapshot(commits.last().copied()).expect("snapshot");
            assert_eq!(
                view.read("a2/d0/f0.json", 100).expect("read"),
                Some(b"a 2 0\n".to_vec())
            );
            // Nothing new: the index there is true, and is not written again.
            let again = fresh.consolidate_packs(rollup).expect("again");
            assert_eq!(again.multi_pack_index, None, "{rollup:?}: {again:?}");
        }
    }

    /// The roll-up after a commit leaves the packs a multi-pack index names (git's or ours)
    /// and merges the others, so the index never names a removed pack.
    #[test]
    fn the_roll_up_after_a_commit_leaves_the_packs_a_multi_pack_index_names() {
        let (_tmp, repo, store) = new_store();
        publish_many(&store, 4, 30, "a");
        git(&repo, &["multi-pack-index", "write"]);
        let (named, _) = midx_and_packs(&repo);
        assert_eq!(named.len(), 4);
        let commits = publish_many(&store, 4, 30, "b");
        let done = store
            .consolidate_packs(Rollup::Geometric { max_objects: 1000 })
            .expect("roll up");
        assert_eq!((done.packs_before, done.merged), (8, 4), "{done:?}");
        assert_eq!(done.multi_pack_index, None);
        let (still, idx) = midx_and_packs(&repo);
        assert_eq!(still, named, "the index is untouched");
        assert!(named.iter().all(|n| idx.contains(n)), "its packs stay");
        assert_eq!(idx.len(), 5);
        assert!(!midx::stale(&repo.join("objects/pack")));
        git(&repo, &["multi-pack-index", "verify"]);
        assert_fsck_clean(&repo);
        let fresh = Store::open(&repo).expect("open");
        let view = fresh.snapshot(commits.last().copied()).expect("snapshot");
        assert_eq!(
            view.read("b3/d0/f0.json", 100).expect("read"),
            Some(b"b 3 0\n".to_vec())
        );
    }

    /// `maintain` merges packs the old multi-pack index names: the new index is in place
    /// before they go, so a handle that read through the old one, and one opened at any
    /// moment after, reads every object.
    #[test]
    fn maintain_replaces_the_multi_pack_index_before_removing_its_packs() {
        let (_tmp, repo, store) = new_store();
        let first = publish_many(&store, 4, 30, "a");
        git(&repo, &["multi-pack-index", "write"]);
        let reader = Store::open(&repo).expect("open");
        // The reader loads the old index and reads through it.
        let view = reader.snapshot(first.last().copied()).expect("snapshot");
        assert_eq!(
            view.read("a3/d1/f1.json", 100).expect("read"),
            Some(b"a 3 1\n".to_vec())
        );
        let later = publish_many(&store, 2, 30, "b");
        let done = store.consolidate_packs(Rollup::All).expect("maintain");
        assert_eq!(done.merged, 6, "{done:?}");
        let (named, idx) = midx_and_packs(&repo);
        assert_eq!((named.len(), &named), (1, &idx));
        git(&repo, &["multi-pack-index", "verify"]);
        assert_fsck_clean(&repo);
        for handle in [&reader, &Store::open(&repo).expect("open")] {
            for (commit, path, bytes) in [
                (first[0], "a0/d2/f2.json", "a 0 2\n"),
                (later[1], "b1/d0/f0.json", "b 1 0\n"),
            ] {
                let view = handle.snapshot(Some(commit)).expect("snapshot");
                assert_eq!(
                    view.read(path, 100).expect("read"),
                    Some(bytes.as_bytes().to_vec()),
                    "{path}"
                );
            }
        }
    }

    /// A multi-pack index that names a removed pack is not read by a store opened after
    /// (git falls back the same way), and an unreadable one is never touched by a roll-up.
    #[test]
    fn a_stale_or_unreadable_multi_pack_index_is_not_used() {
        let (_tmp, repo, store) = new_store();
        publish_many(&store, 3, 30, "a");
        let dir = repo.join("objects/pack");
        git(&repo, &["multi-pack-index", "write"]);
        assert!(!midx::stale(&dir));
        let (named, _) = midx_and_packs(&repo);
        // Every object copied into a new pack (not named), then one named pack removed by hand.
        {
            use std::io::Write as _;
            let everything = git(
                &repo,
                &["rev-list", "--objects", "--all", "--no-object-names"],
            );
            let mut child = std::process::Command::new("git")
                .args(["pack-objects", "-q", "objects/pack/pack"])
                .current_dir(&repo)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("git");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(format!("{everything}\n").as_bytes())
                .expect("write");
            assert!(child.wait().expect("wait").success());
        }
        let gone = dir.join(&named[0]);
        for ext in ["idx", "pack"] {
            std::fs::remove_file(gone.with_extension(ext)).expect("remove");
        }
        assert!(midx::stale(&dir));
        let fresh = Store::open(&repo).expect("open");
        let tip = fresh.tip(MAIN).expect("tip").expect("a tip");
        for k in 0..3 {
            assert_eq!(
                fresh
                    .snapshot(Some(tip))
                    .expect("snapshot")
                    .read(&format!("a{k}/d0/f0.json"), 100)
                    .expect("read"),
                Some(format!("a {k} 0\n").into_bytes())
            );
        }
        // Unreadable: no roll-up of any kind touches a pack, and readers do without it.
        std::fs::write(dir.join(midx::FILE), b"MIDX but not one").expect("write");
        assert!(midx::stale(&dir));
        let before = pack_count(&repo);
        for rollup in [Rollup::Geometric { max_objects: 1000 }, Rollup::All] {
            assert!(fresh.consolidate_packs(rollup).is_err(), "{rollup:?}");
            assert_eq!(pack_count(&repo), before);
        }
        let again = Store::open(&repo).expect("open");
        let view = again.snapshot(Some(tip)).expect("snapshot");
        assert_eq!(
            view.read("a1/d1/f1.json", 100).expect("read"),
            Some(b"a 1 1\n".to_vec())
        );
    }

    #[test]
    fn a_held_lock_or_a_keep_file_leaves_packs_alone() {
        let (_tmp, repo, store) = new_store();
        publish_many(&store, 3, 30, "a");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(repo.join("action-ledger/consolidate.lock"))
            .or_else(|_| {
                std::fs::create_dir_all(repo.join("action-ledger"))?;
                std::fs::File::create(repo.join("action-ledger/consolidate.lock"))
            })
            .expect("lock file");
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        let done = store.consolidate_packs(Rollup::All).expect("busy");
        assert!(done.busy);
        assert_eq!(pack_count(&repo), 3);
        drop(lock);
        let keep = std::fs::read_dir(repo.join("objects/pack"))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|e| e == "idx"))
            .expect("a pack");
        std::fs::write(keep.with_extension("keep"), "").expect("keep");
        let done = store.consolidate_packs(Rollup::All).expect("consolidate");
        assert_eq!(done.merged, 2);
        assert_eq!(pack_count(&repo), 2);
        assert!(keep.exists());
        assert_fsck_clean(&repo);
    }

    #[test]
    fn the_geometric_bound_skips_large_rollups() {
        let (_tmp, repo, store) = new_store();
        publish_many(&store, 4, 30, "a");
        let done = store
            .consolidate_packs(Rollup::Geometric { max_objects: 10 })
            .expect("consolidate");
        assert_eq!(done.merged, 0);
        assert_eq!(pack_count(&repo), 4);
    }
}
