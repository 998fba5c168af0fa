//! One pack per publication: the objects of a commit with more than 16 objects are written as a
//! single Git pack file with its version-2 index, instead of one loose file each.
//!
//! Loose objects cost one file, one fsync and one directory entry per object (about 4 KiB on disk
//! for a 300-byte binding); a pack holds them back to back, zlib-compressed, behind one header,
//! and its index makes them findable. The format is Git's (`gitformat-pack(5)`):
//!
//! ```text
//! pack: "PACK" | version 2 (u32 BE) | object count (u32 BE) | entries… | SHA-1 of all before
//! entry: type and size (varint: 3 type bits, 4 + 7k size bits) | zlib stream of the object
//! delta: type 6 and the delta's size | distance back to the base's entry | zlib stream of the delta
//! idx:  \377tOc | version 2 | fanout[256] | sorted ids | CRC-32 of each entry | 31-bit offsets
//!       (MSB set: index into the 64-bit table) | 64-bit offsets | pack SHA-1 | SHA-1 of all before
//! ```
//!
//! Blobs are stored as deltas where that pays (`OBJ_OFS_DELTA`, the format of `delta.rs`): each
//! against the blob added just before it, as `git fast-import` does. The publisher adds files in
//! path order, so a file's base is its neighbour in the tree: the same producer's previous
//! shard, the previous binding with the same keys. A delta is kept when it is at most 3/4 of the
//! object, and every 4th blob is stored whole, so a chain holds at most 3 deltas (the constant
//! `MAX_DEPTH` says why so few); readers keep the objects they last built ([`crate::store`]).
//! This makes a generated ledger's repository markedly smaller. `git fast-import` still writes
//! less for the same tree: it writes only the final tree, where ten publications wrote ten
//! versions of the directories they touched, and a new version cannot be a delta against an
//! old one in another pack. The roll-up of small packs (`consolidate.rs`) copies entries byte
//! for byte and stores the tree versions it brings together as deltas against each other,
//! which brings the repository close to fast-import's (the measured figures are in the
//! CHANGELOG and in `scripts/bench.sh`'s output).
//!
//! Trees are stored whole. A publication writes the new versions of the directories it
//! touches, children before parents, so the tree added before a tree is an unrelated
//! directory (two fan-out leaves share no names): almost none of a publication's trees come
//! out smaller as a delta, and trying them all took most of the delta encoder's time in a
//! publication into a large ledger, whose leaves are larger. A tree's useful base is its
//! previous version, which lies in an older pack; the roll-up is where versions meet.
//!
//! The pack and index are written to temporary files, fsynced, and renamed into
//! `objects/pack/` index last (readers only consider a pack once its index exists); then the
//! directory is fsynced (the discipline of [`crate::durable`]). A crash leaves at most an
//! unreferenced temporary file or an unreferenced pack, never a ref to a missing object; the
//! next pack written removes temporary files whose writer is gone.
//!
//! Deltas and compression run on all cores (rayon) in contiguous runs of about equal size; which
//! objects may be deltas is fixed by their place among the objects of their kind, and entries
//! are appended in the order the objects were added, so the pack's bytes do not depend on the
//! number of threads.
//!
//! # Why our own writer, not gix's
//!
//! gix (gix-pack) writes packs along two paths, and neither serves a publication:
//!
//! - `data::output` (count, then `output::Entry`, then `FromEntriesIter`) packs objects that are
//!   already in an object database, found through its `Find` trait: it is built for sending
//!   existing objects (fetch and push servers). A publication's objects are new and only in
//!   memory; putting them in a database first is exactly the loose-object cost a pack avoids.
//! - The index comes from `Bundle::write_to_directory` / `index::File::write_data_iter_to_stream`,
//!   which reads the pack stream back, decompresses every entry to find its end and hashes it
//!   again: a second pass over data whose ids, offsets and CRC-32s the writer already knows. Its
//!   temporary files (gix-tempfile) are neither fsynced with their directory in our order nor
//!   named so that a dead writer's debris can be told from a live one's ([`crate::durable`]).
//!   It also needs gix's pack-writing features, which the crate keeps off.
//!
//! The format written here is small and fixed (whole entries and offset deltas, version 2 only);
//! `git verify-pack` accepts it (the tests check), and git and gix read it back as any pack.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use gix::objs::Kind;

use rayon::prelude::*;

use crate::durable;
use crate::store::delta::Encoder;

/// zlib level for pack entries: 6, zlib's default and git's. The zlib of this crate (zlib-rs)
/// writes level 1 with fixed Huffman codes only, which leaves a small object or a delta (the
/// literal bytes of ids and hashes) about as large as it was, where level 6 takes about a
/// quarter off it; level 2 would save only a few percent of publish CPU for a larger
/// repository.
const LEVEL: i32 = 6;

/// zlib level for whole trees in the packs a commit writes: 1. A tree is mostly object ids,
/// which no level compresses: on `serve`'s trees of 4 KiB and more, level 1 (fixed Huffman
/// codes) leaves 87% of the bytes against level 6's 81% at under a quarter of its CPU time,
/// and on small trees it is both faster and smaller. A wide directory is written again with
/// every change below it, and the roll-up replaces most of those versions by deltas, so the
/// level-6 stream of each was mostly wasted work. A tree that stays whole in a pack that the
/// roll-up leaves alone, or in `maintain`'s, is compressed again at [`LEVEL`] there (it knows
/// such a tree by [`fastest_stream`]).
const TREE_LEVEL: i32 = 1;

/// Every 4th blob of a pack is stored whole, so a chain holds at most 3 deltas and a
/// reader builds any object from at most 3 (one when it reads about in the order of writing:
/// gix, as this crate opens it, and git keep the objects they last built). Readers do not read
/// in that order: an unchanged replay reads each seal's reservation, shards and markers, which
/// lie far apart in path order. Chains of 49 (`git fast-import`'s default) made an unchanged
/// replay about twice as slow as no deltas at all; chains of 3 cost little time and keep
/// nearly all of the size gained.
const MAX_DEPTH: u64 = 4;

/// Objects smaller than this are stored whole: a delta's two size fields and one copy leave
/// little to save. The roll-up's tree versions keep to it too.
pub(super) const MIN_DELTA_OBJECT: usize = 64;

/// A delta is stored only when it is at most 3/4 of the object's bytes: past that, zlib on
/// the whole object does about as well, and the reader is spared the base.
pub(super) fn delta_pays(object_len: usize) -> usize {
    object_len / 4 * 3
}

/// Errors of writing a pack.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An object could not be hashed or compressed.
    #[error("cannot compress an object for the pack: {0}")]
    Compress(String),
    #[error("cannot write pack files in {}: {source}; {}", dir.display(), crate::durable::io_advice(source))]
    /// Writing, syncing or renaming a pack file failed.
    Io {
        /// The pack directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// More objects than a version-2 pack can count.
    #[error("a pack holds at most 4294967295 objects")]
    TooMany,
}

/// Raw bytes of added objects compressed together: past this many, the pending objects are
/// compressed (on all cores) and appended.
const PENDING_BYTES: usize = 8 << 20;

/// Compressed entries held in memory before the pack is spilled to its temporary file: 4 MiB.
/// A large publication's pack is many times that, and holding it whole (in a vector grown by
/// doubling) until it was written set the publisher's peak memory.
pub const SPILL_BYTES: usize = 4 << 20;

/// A pack being built: add objects, then [`PackBuilder::finish`] writes it. Compression is
/// deferred and done in batches on worker threads: an object's id is known as soon as it is
/// added (hashing is cheap), its compressed entry only when its batch is flushed. Compressed
/// entries stay in memory up to [`SPILL_BYTES`] (checked after each entry is appended, so at
/// most one entry more); past that (and for the rest at the end) they go
/// to the pack's temporary file in the pack directory (named as [`crate::durable`] names debris,
/// removed when the builder is dropped unfinished), whose header and checksum
/// [`PackBuilder::finish`] writes, reading the file back once to hash it. Memory: the
/// pending raw objects (at most 8 MiB and one object), the spill threshold, and about 60 bytes
/// an object for the ids, offsets and CRC-32s of the index.
pub struct PackBuilder {
    hash_kind: gix::hash::Kind,
    /// Where the pack goes (the repository's `objects/pack`), and the spill file with it.
    pack_dir: PathBuf,
    /// Entry bytes (headers and compressed data) not yet in the spill file.
    data: Vec<u8>,
    /// The temporary pack file once `data` passed `spill_bytes`: a 12-byte placeholder header,
    /// then `spilled` bytes of entries.
    spill: Option<Spill>,
    spilled: u64,
    spill_bytes: usize,
    /// `(id, offset in the pack file, CRC-32 of the entry)`.
    entries: Vec<(ObjectId, u64, u32)>,
    seen: HashSet<ObjectId>,
    /// Objects added but not compressed yet, in order, and their total size.
    pending: Vec<(ObjectId, Kind, Vec<u8>)>,
    pending_bytes: usize,
    /// The chain of blob deltas (trees, commits and tags are stored whole).
    chain: Chain,
}

/// The last blob written to the pack: the base of the next one.
#[derive(Debug, Default)]
struct Chain {
    /// Blobs written so far: every [`MAX_DEPTH`]th is stored whole.
    count: u64,
    /// The last one's bytes and pack offset, once it is written.
    last: Option<(Vec<u8>, u64)>,
}

/// An object's entry, compressed: whole (its header and zlib stream), or a delta against the
/// blob written before it (the delta's size and zlib stream; the header, which names the
/// base's offset, is written when the entry is appended).
enum Packed {
    Whole(Vec<u8>),
    Delta { size: usize, data: Vec<u8> },
}

/// The temporary file of a spilled pack.
struct Spill {
    path: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl Drop for PackBuilder {
    fn drop(&mut self) {
        // An unfinished pack (a refused or failed publication) leaves nothing behind.
        if let Some(spill) = self.spill.take() {
            drop(spill.file);
            let _ = std::fs::remove_file(&spill.path);
        }
    }
}

impl std::fmt::Debug for PackBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackBuilder")
            .field("objects", &self.len())
            .field("bytes", &(self.spilled + self.data.len() as u64))
            .finish()
    }
}

/// Where a finished pack landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The `.pack` file.
    pub pack: PathBuf,
    /// The `.idx` file.
    pub index: PathBuf,
    /// Objects in the pack.
    pub objects: usize,
}

/// The compressed entries of `objects`, in order, with one compressor and one delta encoder for
/// the run; `bases[i]` is the base that object `i` may be stored as a delta against.
fn entries_of(
    objects: &[(ObjectId, Kind, Vec<u8>)],
    bases: &[Option<&[u8]>],
) -> Result<Vec<Packed>, Error> {
    let mut compress = compressor();
    let mut compress_tree = compressor_at(TREE_LEVEL);
    let mut encoder = Encoder::default();
    let (mut scratch, mut delta) = (Vec::new(), Vec::new());
    objects
        .iter()
        .zip(bases)
        .map(|((_, kind, bytes), base)| {
            if let Some(base) = base
                && bytes.len() >= MIN_DELTA_OBJECT
                && encoder.encode(base, bytes, delta_pays(bytes.len()), &mut delta)
            {
                let mut data = Vec::with_capacity(delta.len() / 2 + 16);
                deflate(&mut compress, &mut scratch, &delta, &mut data)?;
                return Ok(Packed::Delta {
                    size: delta.len(),
                    data,
                });
            }
            let mut entry = Vec::with_capacity(bytes.len() / 2 + 16);
            let compress = if *kind == Kind::Tree {
                &mut compress_tree
            } else {
                &mut compress
            };
            entry_into(compress, &mut scratch, *kind, bytes, &mut entry)?;
            Ok(Packed::Whole(entry))
        })
        .collect()
}

/// Appends the type and size header of a pack entry (`type_bits`: 1 commit, 2 tree, 3 blob,
/// 4 tag, 6 delta against an offset): the first byte has the continuation bit, 3 type bits and
/// the low 4 size bits; each following byte 7 more size bits.
pub(super) fn push_entry_header(entry: &mut Vec<u8>, type_bits: u8, size: usize) {
    let mut size = size as u64;
    let mut byte = (type_bits << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size != 0 {
        entry.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    entry.push(byte);
}

/// Appends the distance back to a delta's base as a delta entry names it (`gitformat-pack(5)`,
/// `OBJ_OFS_DELTA`): 7 bits a byte, most significant first, each continued byte offset by one
/// so that every distance has exactly one encoding.
pub(super) fn push_base_distance(entry: &mut Vec<u8>, mut distance: u64) {
    let mut bytes = [0u8; 10];
    let mut at = bytes.len() - 1;
    bytes[at] = (distance & 0x7f) as u8;
    distance >>= 7;
    while distance != 0 {
        distance -= 1;
        at -= 1;
        bytes[at] = 0x80 | (distance & 0x7f) as u8;
        distance >>= 7;
    }
    entry.extend_from_slice(&bytes[at..]);
}

/// Appends the whole (undeltified) pack entry of an object to `entry`: the type and size
/// header, then the zlib stream of `bytes`.
pub(super) fn entry_into(
    compress: &mut gix_zlib::stream::deflate::Compress,
    scratch: &mut Vec<u8>,
    kind: Kind,
    bytes: &[u8],
    entry: &mut Vec<u8>,
) -> Result<(), Error> {
    let type_bits: u8 = match kind {
        Kind::Commit => 1,
        Kind::Tree => 2,
        Kind::Blob => 3,
        Kind::Tag => 4,
    };
    push_entry_header(entry, type_bits, bytes.len());
    deflate(compress, scratch, bytes, entry)
}

/// Appends the entry of a delta against the entry `distance` bytes before it
/// (`OBJ_OFS_DELTA`): the header with the delta's size, the distance, the delta's zlib stream.
pub(super) fn offset_delta_into(
    compress: &mut gix_zlib::stream::deflate::Compress,
    scratch: &mut Vec<u8>,
    delta: &[u8],
    distance: u64,
    entry: &mut Vec<u8>,
) -> Result<(), Error> {
    push_entry_header(entry, 6, delta.len());
    push_base_distance(entry, distance);
    deflate(compress, scratch, delta, entry)
}

/// A compressor at the level of pack entries.
pub(super) fn compressor() -> gix_zlib::stream::deflate::Compress {
    compressor_at(LEVEL)
}

fn compressor_at(level: i32) -> gix_zlib::stream::deflate::Compress {
    gix_zlib::stream::deflate::Compress::new(
        gix_zlib::Compression::new(level).expect("valid zlib level"),
    )
}

/// Whether the zlib stream `data` (an entry's data, after its header) says that it was
/// written at the fastest level (RFC 1950: the two `FLEVEL` bits of its second byte are 0,
/// which zlib writes for levels 0 and 1), as [`TREE_LEVEL`] writes trees.
pub(super) fn fastest_stream(data: &[u8]) -> bool {
    data.get(1).is_some_and(|flags| flags >> 6 == 0)
}

/// The bytes of a loose object file (`gitformat-loose`): the zlib stream of
/// `"<kind> <size>\0"` followed by the object's bytes.
///
/// # Errors
/// [`Error::Compress`] if zlib fails.
pub fn loose_object(kind: Kind, bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let mut compress = gix_zlib::stream::deflate::Compress::new(
        gix_zlib::Compression::new(LEVEL).expect("valid zlib level"),
    );
    let mut input = format!("{} {}\0", kind, bytes.len()).into_bytes();
    input.extend_from_slice(bytes);
    let mut out = Vec::with_capacity(input.len() / 2 + 16);
    deflate(&mut compress, &mut Vec::new(), &input, &mut out)?;
    Ok(out)
}

/// Appends the zlib stream of `input` to `out`.
fn deflate(
    compress: &mut gix_zlib::stream::deflate::Compress,
    scratch: &mut Vec<u8>,
    input: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    use gix_zlib::Status;
    use gix_zlib::stream::deflate::FlushCompress;
    compress.reset();
    let err = |e: gix::error::Error| Error::Compress(e.to_string());
    // zlib's bound for one stream: the input plus 0.1% and a few bytes of framing.
    scratch.resize(input.len() + input.len() / 1000 + 64, 0);
    let mut consumed = 0;
    loop {
        let before_in = compress.total_in();
        let before_out = compress.total_out();
        let status = compress
            .compress(&input[consumed..], scratch, FlushCompress::Finish)
            .map_err(err)?;
        consumed += (compress.total_in() - before_in) as usize;
        let produced = (compress.total_out() - before_out) as usize;
        out.extend_from_slice(&scratch[..produced]);
        match status {
            Status::StreamEnd => return Ok(()),
            Status::Ok | Status::BufError if produced > 0 || consumed < input.len() => {}
            _ => return Err(Error::Compress("zlib made no progress".into())),
        }
    }
}

impl PackBuilder {
    /// An empty pack for objects hashed with `hash_kind`, to be written into `pack_dir` (the
    /// repository's `objects/pack`, created when needed).
    pub fn new(hash_kind: gix::hash::Kind, pack_dir: &Path) -> PackBuilder {
        PackBuilder::with_spill_bytes(hash_kind, pack_dir, SPILL_BYTES)
    }

    /// [`PackBuilder::new`] spilling past `spill_bytes` of compressed entries.
    fn with_spill_bytes(
        hash_kind: gix::hash::Kind,
        pack_dir: &Path,
        spill_bytes: usize,
    ) -> PackBuilder {
        PackBuilder {
            hash_kind,
            pack_dir: pack_dir.to_owned(),
            data: Vec::new(),
            spill: None,
            spilled: 0,
            spill_bytes,
            entries: Vec::new(),
            seen: HashSet::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            chain: Chain::default(),
        }
    }

    /// Number of distinct objects added.
    pub fn len(&self) -> usize {
        self.entries.len() + self.pending.len()
    }

    /// Whether no object was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds an object of `kind` with `bytes` (its serialized content, without the loose header)
    /// and returns its id. Adding the same object twice stores it once.
    ///
    /// # Errors
    /// [`Error::Compress`] if hashing or zlib fails (a detected SHA-1 collision, out of memory).
    pub fn add(&mut self, kind: Kind, bytes: &[u8]) -> Result<ObjectId, Error> {
        let id = gix::objs::compute_hash(self.hash_kind, kind, bytes)
            .map_err(|e| Error::Compress(e.to_string()))?;
        self.add_hashed(id, kind, bytes)?;
        Ok(id)
    }

    /// [`PackBuilder::add`] of an object whose id the caller has computed
    /// (`gix::objs::compute_hash` of `kind` and `bytes`), so that a batch of objects can be
    /// hashed on all cores. A wrong id makes a corrupt pack: debug builds check it.
    ///
    /// # Errors
    /// [`Error::Compress`] if zlib fails (out of memory).
    pub(crate) fn add_hashed(
        &mut self,
        id: ObjectId,
        kind: Kind,
        bytes: &[u8],
    ) -> Result<(), Error> {
        debug_assert_eq!(
            gix::objs::compute_hash(self.hash_kind, kind, bytes).ok(),
            Some(id),
            "add_hashed was given another object's id"
        );
        if !self.seen.insert(id) {
            return Ok(());
        }
        self.pending.push((id, kind, bytes.to_vec()));
        self.pending_bytes += bytes.len();
        if self.pending_bytes >= PENDING_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Compresses the pending objects (on all cores, with rayon) and appends their
    /// entries in the order they were added, each blob as a delta against the blob before it
    /// where that pays (see the module docs).
    fn flush(&mut self) -> Result<(), Error> {
        let mut pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        if pending.is_empty() {
            return Ok(());
        }
        // The base of each blob: the blob before it, in this flush or the last one; none for
        // every MAX_DEPTH-th blob, which bounds a chain's length whatever the deltas turn out
        // to be.
        let mut count = self.chain.count;
        let mut previous: Option<usize> = None;
        let bases: Vec<Option<&[u8]>> = pending
            .iter()
            .enumerate()
            .map(|(i, (_, kind, _))| {
                if *kind != Kind::Blob {
                    return None;
                }
                let whole = count.is_multiple_of(MAX_DEPTH);
                count += 1;
                let base = match previous.replace(i) {
                    Some(p) => Some(pending[p].2.as_slice()),
                    None => self.chain.last.as_ref().map(|(b, _)| b.as_slice()),
                };
                base.filter(|_| !whole)
            })
            .collect();
        let total: usize = pending.iter().map(|(_, _, b)| b.len()).sum();
        // Contiguous runs of about equal size, each compressed with one compressor; a few runs
        // per core, so that the threads balance.
        let target = total.div_ceil(rayon::current_num_threads() * 4).max(1);
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut from, mut size) = (0, 0);
        for (i, (_, _, bytes)) in pending.iter().enumerate() {
            size += bytes.len();
            if size >= target {
                runs.push(from..i + 1);
                (from, size) = (i + 1, 0);
            }
        }
        if from < pending.len() {
            runs.push(from..pending.len());
        }
        let compressed: Vec<_> = runs
            .par_iter()
            .map(|run| entries_of(&pending[run.clone()], &bases[run.clone()]))
            .collect();
        drop(bases);
        let mut entries = Vec::with_capacity(pending.len());
        for run in compressed {
            entries.extend(run?);
        }
        let mut entry = Vec::new();
        for ((id, kind, _), packed) in pending.iter().zip(entries) {
            let offset = 12 + self.spilled + self.data.len() as u64;
            let bytes = match packed {
                Packed::Whole(whole) => whole,
                Packed::Delta { size, data } => {
                    let (_, base) = self
                        .chain
                        .last
                        .as_ref()
                        .expect("a delta's base is written before it");
                    entry.clear();
                    push_entry_header(&mut entry, 6, size);
                    push_base_distance(&mut entry, offset - base);
                    entry.extend_from_slice(&data);
                    std::mem::take(&mut entry)
                }
            };
            let crc = crc32fast::hash(&bytes);
            self.data.extend_from_slice(&bytes);
            self.entries.push((*id, offset, crc));
            // Spilled as it passes the threshold, not after the flush: a flush's entries
            // held on top of the threshold's would double what is in memory.
            if self.data.len() >= self.spill_bytes {
                self.spill_data().map_err(|e| self.io(e))?;
            }
            if *kind == Kind::Blob {
                self.chain.count += 1;
                // The offset now; the bytes once the flush is done.
                self.chain.last = Some((Vec::new(), offset));
            }
        }
        // The last blob is the base of the next flush's first.
        if let (Some(p), Some(kept)) = (previous, self.chain.last.as_mut()) {
            kept.0 = std::mem::take(&mut pending[p].2);
        }
        Ok(())
    }

    /// Appends the entries held in memory to the spill file, creating it first.
    fn spill_data(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        if self.spill.is_none() {
            std::fs::create_dir_all(&self.pack_dir)?;
            let path = self.pack_dir.join(durable::temp_name("pack"));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            let mut spill = Spill {
                path,
                file: std::io::BufWriter::with_capacity(1 << 20, file),
            };
            // Noted before the first write, so that a failed write still removes the file.
            let header = spill.file.write_all(&[0; 12]);
            self.spill = Some(spill);
            header?;
        }
        let spill = self.spill.as_mut().expect("created above");
        spill.file.write_all(&self.data)?;
        self.spilled += self.data.len() as u64;
        self.data.clear();
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            dir: self.pack_dir.clone(),
            source,
        }
    }

    /// Writes the pack and its index into the pack directory, fsynced, index renamed into
    /// place last, directory fsynced. Returns `None` (and writes nothing) for an empty pack.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory; [`Error::TooMany`].
    pub fn finish(mut self) -> Result<Option<Written>, Error> {
        self.flush()?;
        if self.entries.is_empty() {
            return Ok(None);
        }
        let count = u32::try_from(self.entries.len()).map_err(|_| Error::TooMany)?;
        let pack_dir = self.pack_dir.clone();
        let io = |source: std::io::Error| Error::Io {
            dir: pack_dir.clone(),
            source,
        };
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(b"PACK");
        header.extend_from_slice(&2u32.to_be_bytes());
        header.extend_from_slice(&count.to_be_bytes());
        // Every pack goes through its temporary file; a small one is written there only now.
        let (tmp_pack, checksum) = self.finish_spill(&header).map_err(io)?;

        let index = self.index_bytes(&checksum)?;
        let name = format!("pack-{}", checksum.to_hex());
        let final_pack = pack_dir.join(format!("{name}.pack"));
        let final_index = pack_dir.join(format!("{name}.idx"));

        // Debris of writers killed mid-pack; names of live writers are kept (durable.rs).
        durable::remove_stale_temp_files(&pack_dir);
        let tmp_index = pack_dir.join(durable::temp_name("idx"));
        let result = (|| {
            durable::write_synced(&tmp_index, &[&index])?;
            std::fs::rename(&tmp_pack, &final_pack)?;
            std::fs::rename(&tmp_index, &final_index)?;
            durable::sync_dir(&pack_dir)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp_pack);
            let _ = std::fs::remove_file(&tmp_index);
            return Err(io(e));
        }
        Ok(Some(Written {
            pack: final_pack,
            index: final_index,
            objects: self.entries.len(),
        }))
    }

    /// Completes the temporary pack file: the rest of the entries, the real header over the
    /// placeholder, the checksum of the whole file read back from the start (SHA-1 cannot take
    /// the header afterwards, and the object count is only known now), fsynced. Returns its
    /// path, which the caller now owns, and the checksum.
    fn finish_spill(&mut self, header: &[u8]) -> std::io::Result<(PathBuf, ObjectId)> {
        use std::io::{Read, Seek, SeekFrom, Write};
        self.spill_data()?;
        let mut spill = self.spill.take().expect("created by spill_data");
        let mut hasher = gix::hash::hasher(self.hash_kind);
        hasher.update(header);
        let result = (|| {
            spill.file.flush()?;
            let file = spill.file.get_mut();
            file.seek(SeekFrom::Start(0))?;
            file.write_all(header)?;
            let mut buf = vec![0u8; 1 << 20];
            let mut left = self.spilled;
            while left > 0 {
                let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                file.read_exact(&mut buf[..n])?;
                hasher.update(&buf[..n]);
                left -= n as u64;
            }
            let checksum = hasher
                .try_finalize()
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            file.write_all(checksum.as_bytes())?;
            file.sync_all()?;
            Ok(checksum)
        })();
        match result {
            Ok(checksum) => Ok((spill.path.clone(), checksum)),
            Err(e) => {
                let _ = std::fs::remove_file(&spill.path);
                Err(e)
            }
        }
    }

    /// The version-2 index of the pack whose checksum is `pack_checksum`.
    fn index_bytes(&self, pack_checksum: &ObjectId) -> Result<Vec<u8>, Error> {
        index_bytes(self.hash_kind, &self.entries, pack_checksum)
    }
}

/// The version-2 index of a pack with `entries` (`(id, offset, CRC-32)`, any order) whose
/// checksum is `pack_checksum`.
pub(super) fn index_bytes(
    hash_kind: gix::hash::Kind,
    entries: &[(ObjectId, u64, u32)],
    pack_checksum: &ObjectId,
) -> Result<Vec<u8>, Error> {
    let mut sorted: Vec<&(ObjectId, u64, u32)> = entries.iter().collect();
    sorted.sort_unstable_by_key(|a| a.0);
    let hash_len = hash_kind.len_in_bytes();
    let mut out = Vec::with_capacity(8 + 1024 + sorted.len() * (hash_len + 8) + 2 * hash_len);
    out.extend_from_slice(b"\xfftOc");
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for (id, _, _) in &sorted {
        fanout[id.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for slot in &mut fanout {
        total += *slot;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (id, _, _) in &sorted {
        out.extend_from_slice(id.as_bytes());
    }
    for (_, _, crc) in &sorted {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, offset, _) in &sorted {
        if *offset < 0x8000_0000 {
            out.extend_from_slice(&(*offset as u32).to_be_bytes());
        } else {
            let slot = u32::try_from(large.len()).map_err(|_| Error::TooMany)?;
            out.extend_from_slice(&(0x8000_0000 | slot).to_be_bytes());
            large.push(*offset);
        }
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_checksum.as_bytes());
    let mut hasher = gix::hash::hasher(hash_kind);
    hasher.update(&out);
    let own = hasher
        .try_finalize()
        .map_err(|e| Error::Compress(e.to_string()))?;
    out.extend_from_slice(own.as_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trees are written at the fastest level and say so in their zlib header; blobs and
    /// deltas at level 6, which says otherwise; both inflate to what was written.
    #[test]
    fn trees_are_written_at_the_fastest_level_and_say_so() {
        let tree: Vec<u8> = (0u8..=255)
            .flat_map(|b| {
                let mut entry = format!("40000 {b:02x}\0").into_bytes();
                entry.extend_from_slice(&[b; 20]);
                entry
            })
            .collect();
        let blob = br#"{"action_id":"act_1","status":"running"}"#.repeat(20);
        let objects = vec![
            (
                ObjectId::null(gix::hash::Kind::Sha1),
                Kind::Tree,
                tree.clone(),
            ),
            (
                ObjectId::null(gix::hash::Kind::Sha1),
                Kind::Blob,
                blob.clone(),
            ),
        ];
        let packed = entries_of(&objects, &[None, None]).expect("compressed");
        for (packed, (kind, bytes)) in packed
            .iter()
            .zip([(Kind::Tree, &tree), (Kind::Blob, &blob)])
        {
            let Packed::Whole(entry) = packed else {
                panic!("whole");
            };
            // One header byte for the type and low size bits, then the size's continuations.
            let data = &entry[entry.iter().position(|b| b & 0x80 == 0).expect("header") + 1..];
            assert_eq!(fastest_stream(data), kind == Kind::Tree, "{kind}");
            let mut out = vec![0u8; bytes.len()];
            let mut inflate = gix_zlib::Inflate::default();
            let (status, _, written) = inflate.once(data, &mut out).expect("inflates");
            assert_eq!(status, gix_zlib::Status::StreamEnd);
            assert_eq!(&out[..written], bytes.as_slice());
        }
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A pack with objects of every size class is read back by Git itself, byte for byte.
    #[test]
    fn git_reads_the_pack_and_its_index() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare", "r.git"]);
        let repo = dir.path().join("r.git");
        let mut b = PackBuilder::new(gix::hash::Kind::Sha1, &repo.join("objects/pack"));
        let mut blobs = Vec::new();
        for size in [0usize, 1, 15, 16, 127, 128, 2047, 2048, 70_000, 1 << 20] {
            let bytes: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
            let id = b.add(Kind::Blob, &bytes).unwrap();
            blobs.push((id, bytes));
        }
        let again = b.add(Kind::Blob, &blobs[3].1).unwrap();
        assert_eq!(again, blobs[3].0);
        assert_eq!(b.len(), blobs.len());
        let written = b.finish().unwrap().unwrap();
        assert_eq!(written.objects, blobs.len());
        let verify = git(
            dir.path(),
            &["verify-pack", "-v", written.index.to_str().unwrap()],
        );
        let (whole, deepest) = chains(&verify);
        assert!(whole < 10 && deepest >= 1, "some are deltas: {verify}");
        for (id, bytes) in &blobs {
            let out = std::process::Command::new("git")
                .args(["cat-file", "blob", &id.to_hex().to_string()])
                .current_dir(&repo)
                .output()
                .unwrap();
            assert!(out.status.success());
            assert_eq!(&out.stdout, bytes);
        }
        // Nothing temporary is left behind.
        let names: Vec<String> = std::fs::read_dir(repo.join("objects/pack"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    /// The whole objects and the longest delta chain that `git verify-pack -v` reports.
    pub(crate) fn chains(verify: &str) -> (usize, usize) {
        let whole = verify
            .lines()
            .find_map(|l| l.strip_prefix("non delta: "))
            .and_then(|l| l.split(' ').next())
            .map_or(0, |n| n.parse().unwrap());
        let deepest = verify
            .lines()
            .filter_map(|l| l.strip_prefix("chain length = "))
            .map(|l| l.split(':').next().unwrap().parse::<usize>().unwrap())
            .max()
            .unwrap_or(0);
        (whole, deepest)
    }

    /// A tree of 40 files, the last one's blob id made of `salt`.
    fn tree_bytes(salt: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..40u8 {
            out.extend_from_slice(format!("100644 shard-{i:04}.jsonl\0").as_bytes());
            let byte = if i == 39 { salt as u8 } else { i + 1 };
            out.extend_from_slice(&[byte; 20]);
        }
        out
    }

    /// Similar blobs and trees, added interleaved: blobs delta against the blob before them
    /// (the trees between them do not break the chain; a blob built on a tree would come out a
    /// tree, which verify-pack refuses), no chain is longer than 3 deltas, every 4th blob is
    /// whole, trees are whole however alike, and git and gix read every object back as it was
    /// added.
    #[test]
    fn blobs_delta_along_short_chains_and_trees_stay_whole() {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "--bare", "r.git"]);
        let repo = dir.path().join("r.git");
        let mut b = PackBuilder::new(gix::hash::Kind::Sha1, &repo.join("objects/pack"));
        let mut objects = Vec::new();
        for i in 0..120usize {
            let blob = format!(
                "{{\"event_id\":\"{i:064}\",\"schema\":\"clawsweeper.action-ledger-import-event\",\"n\":{i}}}\n"
            )
            .into_bytes();
            let tree = tree_bytes(i);
            for (kind, bytes) in [(Kind::Blob, blob), (Kind::Tree, tree)] {
                objects.push((b.add(kind, &bytes).unwrap(), kind, bytes));
            }
        }
        let written = b.finish().unwrap().unwrap();
        let verify = git(
            dir.path(),
            &["verify-pack", "-v", written.index.to_str().unwrap()],
        );
        let (whole, deepest) = chains(&verify);
        // Every 4th of the 120 blobs is whole, the rest deltas; all 120 trees are whole.
        assert_eq!((whole, deepest), (30 + 120, 3), "{verify}");
        // A delta's line names its depth and base after the sizes and offset.
        let deltas = |kind: &str| {
            verify
                .lines()
                .filter(|l| l.split(' ').nth(1) == Some(kind))
                .filter(|l| l.split_whitespace().count() > 5)
                .count()
        };
        assert_eq!((deltas("blob"), deltas("tree")), (90, 0), "{verify}");
        let reader = gix::open(&repo).unwrap();
        for (id, kind, bytes) in &objects {
            let found = reader.find_object(*id).unwrap();
            assert_eq!((found.kind, &found.data[..]), (*kind, &bytes[..]));
        }
    }

    #[test]
    fn an_empty_pack_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let b = PackBuilder::new(gix::hash::Kind::Sha1, dir.path());
        assert!(b.is_empty());
        assert_eq!(b.finish().unwrap(), None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// Objects of about 20 MiB in all: several flushes of pending objects.
    fn many_objects() -> Vec<Vec<u8>> {
        (0..300u32)
            .map(|i| {
                let text = format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", i * 7919);
                text.repeat(70_000 / text.len() + 1).into_bytes()
            })
            .collect()
    }

    /// A pack spilled to its temporary file while it is built (after every flush, or past a
    /// few KiB) has the same bytes, name and index as one held in memory until the end (and as
    /// one built on one thread), git reads it, and nothing temporary stays. The objects span
    /// several flushes, so a flush's first delta has its base in the flush before.
    #[test]
    fn spilled_packs_equal_packs_held_in_memory() {
        let objects = many_objects();
        let build = |spill_bytes: usize| {
            let dir = tempfile::tempdir().unwrap();
            git(dir.path(), &["init", "-q", "--bare", "r.git"]);
            let pack_dir = dir.path().join("r.git/objects/pack");
            let mut b =
                PackBuilder::with_spill_bytes(gix::hash::Kind::Sha1, &pack_dir, spill_bytes);
            for bytes in &objects {
                b.add(Kind::Blob, bytes).unwrap();
            }
            let written = b.finish().unwrap().unwrap();
            let names: Vec<String> = std::fs::read_dir(&pack_dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names.len(), 2, "{names:?}");
            git(
                dir.path(),
                &["verify-pack", "-v", written.index.to_str().unwrap()],
            );
            (
                written.pack.file_name().unwrap().to_owned(),
                std::fs::read(&written.pack).unwrap(),
                std::fs::read(&written.index).unwrap(),
            )
        };
        let in_memory = build(usize::MAX);
        assert_eq!(build(1), in_memory);
        assert_eq!(build(64 << 10), in_memory);
        // Nor do the bytes depend on the threads that compute the deltas and compress.
        let one_thread = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(one_thread.install(|| build(usize::MAX)), in_memory);
    }

    /// A builder dropped unfinished (a refused publication) removes its spill file.
    #[test]
    fn an_unfinished_spilled_pack_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = PackBuilder::with_spill_bytes(gix::hash::Kind::Sha1, dir.path(), 1);
        for bytes in many_objects() {
            b.add(Kind::Blob, &bytes).unwrap();
        }
        assert!(b.spill.is_some(), "spilled after the first flush");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(b);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
