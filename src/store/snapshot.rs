//! [`Snapshot`], the read view of one commit's tree.
//!
//! Decoded trees are cached by object id: those near the root (depth below 6: the root,
//! `ledger`, `v1`, `import-bindings`, a binding kind, its first fan-out level) for the snapshot's
//! life, deeper ones in a cache of at most [`MAX_CACHED_TREE_BYTES`] (16 MiB of decoded entries,
//! counted by size, not by trees: one flat directory can outweigh thousands of fan-out leaves)
//! that starts over when full, so a walk of a whole fan-out ledger (65,536 leaf trees for a
//! million bindings) stays bounded. Each time it starts over, the mapped pack pages are
//! released too ([`Store::release_mapped_packs`]), so point lookups over a large repository
//! keep neither decoded trees nor pack pages in proportion to the repository. Full walks
//! ([`Snapshot::for_each_entry`]) decode each tree once without caching. Every tree and blob
//! read keeps the mapped pack pages within a budget ([`Store::bound_mapped_packs`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;

use super::error::git_err;
use super::tree::{Dir, Entry, is_file, raw_tree_defect, under_ledger_root, validate_path};
use crate::store::*;

/// One entry of a tree walk ([`Snapshot::for_each_entry`]).
#[derive(Clone, Copy, Debug)]
pub struct Walked<'p> {
    /// The full '/'-separated path.
    pub path: &'p str,
    /// The entry's name: the last component of `path`.
    pub name: &'p str,
    /// Its mode.
    pub mode: Mode,
    /// The content id of a file or symbolic link (its blob); `None` for a directory or a
    /// submodule.
    pub blob: Option<BlobId>,
}

/// Whether [`Snapshot::try_for_each_entry`] walks the directory it just visited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Descend {
    /// Read the directory and visit its entries (the answer for a file is ignored).
    Into,
    /// Leave the directory out of this walk: its tree is not read.
    Over,
}

/// Bytes of decoded trees a [`Snapshot`] keeps at most below [`PINNED_DEPTH`] (their heap
/// bytes; see [`dir_bytes`]).
const MAX_CACHED_TREE_BYTES: usize = 16 << 20;

/// The bytes a cache counts for one tree beside the tree itself: its reference-counted box's
/// counts and its slot in the map.
const CACHE_SLOT_BYTES: usize = 16 + 48;

/// The heap bytes of a decoded tree and its share of a cache: the tree object's bytes, its
/// index of entries, the [`Dir`] in its reference-counted box, and the cache's slot.
fn dir_bytes(dir: &Dir) -> usize {
    dir.heap_bytes() + std::mem::size_of::<Dir>() + CACHE_SLOT_BYTES
}

/// Trees at depths 0..6 (root, `ledger`, `v1`, `import-bindings`, a binding kind, its first
/// fan-out level) are kept for the snapshot's life; deeper ones in the bounded cache.
const PINNED_DEPTH: usize = 6;

/// The most bytes ([`dir_bytes`]) of [`SharedTrees`]: 16 MiB.
const SHARED_TREE_BYTES: usize = 16 << 20;

/// Trees near the root (depth < [`PINNED_DEPTH`]) decoded by any snapshot of one [`Store`], or
/// written by it, kept for the next snapshots: a tree id names its content, so a decoded tree
/// is valid in every commit that holds it. A writer that lands commit after commit on the same
/// tip (`serve`, a publisher's retries, a publish of many sources) otherwise reads the same
/// upper trees from their packs again for every snapshot: with the finality layout's two levels
/// of 256 directories, a batch of 64 operations touches a quarter of the first level's trees,
/// and each of those (8 KiB once a history passes about 100,000 actions) was read back from its
/// pack and decoded again by the next batch that touched it. A tree the store writes is held as
/// its bytes and decoded (and checked, as every tree read) only when a snapshot reads it.
///
/// Each snapshot of a new root tree starts a generation, and a tree is marked with the last
/// generation that read or wrote it. Bounded by [`SHARED_TREE_BYTES`]: when an insertion passes
/// it, the least recently used generations are dropped until at most three quarters of it is
/// held, so superseded trees of a long run of commits age out and the trees that every commit
/// touches stay.
pub(super) struct SharedTrees {
    map: RefCell<HashMap<ObjectId, (Held, u64)>>,
    bytes: std::cell::Cell<usize>,
    /// The current generation and the root tree that started it.
    generation: std::cell::Cell<(u64, Option<ObjectId>)>,
    /// The most bytes held ([`SHARED_TREE_BYTES`]; smaller in tests).
    budget: usize,
}

/// A tree in [`SharedTrees`]: as written (not decoded yet) or decoded.
enum Held {
    Written(Box<[u8]>),
    Decoded(Rc<Dir>),
}

impl Held {
    /// Its heap bytes and its share of the cache, as [`dir_bytes`] counts them.
    fn bytes(&self) -> usize {
        match self {
            Held::Written(raw) => raw.len() + CACHE_SLOT_BYTES,
            Held::Decoded(dir) => dir_bytes(dir),
        }
    }
}

impl Default for SharedTrees {
    fn default() -> SharedTrees {
        SharedTrees::with_budget(SHARED_TREE_BYTES)
    }
}

impl SharedTrees {
    fn with_budget(budget: usize) -> SharedTrees {
        SharedTrees {
            map: RefCell::default(),
            bytes: std::cell::Cell::new(0),
            generation: std::cell::Cell::new((0, None)),
            budget,
        }
    }

    /// Notes a snapshot of `root`: a root other than the current generation's starts the next
    /// generation.
    pub(super) fn begin(&self, root: Option<ObjectId>) {
        let (generation, current) = self.generation.get();
        if current != root {
            self.generation.set((generation + 1, root));
        }
    }

    /// The decoded tree `id` (ids of `hash`), decoding it now if it was held as written;
    /// `None` when it is not held (or does not decode, which its reader then reports).
    fn get(&self, id: &ObjectId, hash: gix::hash::Kind) -> Option<Rc<Dir>> {
        let generation = self.generation.get().0;
        let mut map = self.map.borrow_mut();
        let (held, used) = map.get_mut(id)?;
        *used = generation;
        let dir = match held {
            Held::Decoded(dir) => return Some(Rc::clone(dir)),
            Held::Written(raw) => Rc::new(Dir::decode(raw.to_vec(), hash).ok()?),
        };
        let before = held.bytes();
        *held = Held::Decoded(Rc::clone(&dir));
        self.bytes.set(self.bytes.get() - before + held.bytes());
        Some(dir)
    }

    fn insert(&self, id: ObjectId, dir: &Rc<Dir>) {
        self.hold(id, Held::Decoded(Rc::clone(dir)));
    }

    /// Keeps the tree `raw` (id `id`) that a commit writes at component depth `depth` (0: the
    /// root), for the next snapshot that reads it: the next commit on the new tip then finds
    /// it here instead of in its pack.
    pub(super) fn insert_written(&self, id: ObjectId, raw: &[u8], depth: usize) {
        if depth < PINNED_DEPTH && !self.map.borrow().contains_key(&id) {
            self.hold(id, Held::Written(raw.into()));
        }
    }

    fn hold(&self, id: ObjectId, held: Held) {
        let bytes = held.bytes();
        if bytes > self.budget / 4 {
            return;
        }
        let generation = self.generation.get().0;
        if let Some((old, _)) = self.map.borrow_mut().insert(id, (held, generation)) {
            self.bytes.set(self.bytes.get() - old.bytes());
        }
        self.bytes.set(self.bytes.get() + bytes);
        if self.bytes.get() > self.budget {
            self.evict();
        }
    }

    /// Drops the least recently used generations until at most three quarters of the budget
    /// is held.
    fn evict(&self) {
        let mut map = self.map.borrow_mut();
        let mut by_use: Vec<(u64, usize)> = map
            .values()
            .map(|(held, used)| (*used, held.bytes()))
            .collect();
        by_use.sort_unstable();
        let (mut held, target) = (self.bytes.get(), self.budget / 4 * 3);
        let mut cutoff = None;
        for (used, bytes) in by_use {
            if held <= target && cutoff != Some(used) {
                break;
            }
            held -= bytes;
            cutoff = Some(used);
        }
        if let Some(cutoff) = cutoff {
            map.retain(|_, (_, used)| *used > cutoff);
        }
        self.bytes.set(held);
    }

    /// How many trees are held (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.borrow().len()
    }
}

/// A read view of the tree of one commit (or the empty tree), from [`Store::snapshot`].
///
/// Paths are '/'-separated and relative, like `ledger/v1/a.json`. Decoded trees are cached by
/// object id for the lifetime of the snapshot, so use one snapshot per tip and drop it afterwards.
pub struct Snapshot<'a> {
    pub(super) store: &'a Store,
    pub(super) commit: Option<CommitId>,
    pub(super) root: Option<ObjectId>,
    pub(super) trees: RefCell<HashMap<ObjectId, Rc<Dir>>>,
    /// Bytes held by `trees` ([`dir_bytes`]).
    pub(super) tree_bytes: std::cell::Cell<usize>,
    /// The most bytes `trees` holds ([`MAX_CACHED_TREE_BYTES`]; smaller in tests).
    pub(super) tree_budget: usize,
    /// Trees near the root (depth < [`PINNED_DEPTH`]), never evicted: every lookup passes them.
    pub(super) pinned: RefCell<HashMap<ObjectId, Rc<Dir>>>,
}

impl fmt::Debug for Snapshot<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("commit", &self.commit)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// A read view of the tree of `commit`; `None` gives a view of the empty tree.
    ///
    /// # Errors
    /// [`Error::MissingObject`] or [`Error::NotACommit`] for a bad `commit`, [`Error::Git`] if it
    /// cannot be decoded.
    pub fn snapshot(&self, commit: Option<CommitId>) -> Result<Snapshot<'_>, Error> {
        let root = match commit {
            None => None,
            Some(id) => Some(self.commit_tree(id)?),
        };
        self.trees.begin(root);
        Ok(Snapshot {
            store: self,
            commit,
            root,
            trees: RefCell::new(HashMap::new()),
            tree_bytes: std::cell::Cell::new(0),
            tree_budget: MAX_CACHED_TREE_BYTES,
            pinned: RefCell::new(HashMap::new()),
        })
    }
}

impl<'a> Snapshot<'a> {
    /// The store this view reads.
    pub fn store(&self) -> &'a Store {
        self.store
    }

    /// The commit this view reads, or `None` for the empty tree.
    pub fn commit(&self) -> Option<CommitId> {
        self.commit
    }

    /// The bytes of the file at `path`, or `None` if nothing is there (also when a component on
    /// the way is a file). The size is checked from the object header before the blob is
    /// decompressed.
    ///
    /// # Errors
    /// [`Error::TooLarge`] if the blob is larger than `max_bytes`, [`Error::NotAFile`] if `path`
    /// is a directory or submodule, [`Error::InvalidPath`], [`Error::MissingObject`],
    /// [`Error::Git`].
    pub fn read(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, Error> {
        let Some(entry) = self.file_entry(path)? else {
            return Ok(None);
        };
        self.read_entry(entry.id, path, max_bytes).map(Some)
    }

    fn read_entry(&self, id: ObjectId, path: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
        self.store.bound_mapped_packs();
        let missing = || Error::MissingObject {
            id: id.to_hex().to_string(),
        };
        let mut repo = &self.store.repo;
        let mut header = repo
            .try_find_header(id)
            .map_err(git_err("read object header of", path))?;
        if header.is_none() {
            // Past the multi-pack index ([`Store::find_object`]), header and blob alike.
            repo = self.store.without_midx().ok_or_else(missing)?;
            header = repo
                .try_find_header(id)
                .map_err(git_err("read object header of", path))?;
        }
        let header = header.ok_or_else(missing)?;
        if header.size() > max_bytes {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                max: max_bytes,
            });
        }
        let blob = repo.find_blob(id).map_err(git_err("read blob of", path))?;
        // The header and the object come from the same immutable object; check anyway.
        if blob.data.len() as u64 > max_bytes {
            return Err(Error::TooLarge {
                path: path.to_owned(),
                max: max_bytes,
            });
        }
        // A copy of just the bytes: gix sizes its buffer for the whole delta chain the object
        // was built from, many times the object, and callers hold many blobs at once (verify's
        // batches held about 100 MiB of such slack). The buffer itself goes back to gix's pool.
        Ok(blob.data.to_vec())
    }

    /// Whether a file exists at `path`.
    ///
    /// # Errors
    /// [`Error::NotAFile`] if a directory or submodule is at `path` (a layout the caller did not
    /// expect), [`Error::InvalidPath`], [`Error::Git`].
    pub fn exists(&self, path: &str) -> Result<bool, Error> {
        Ok(self.file_entry(path)?.is_some())
    }

    /// [`Snapshot::exists`] of each of `paths`, answered in their order, for many paths at once:
    /// the paths are taken directory by directory, so a directory's tree is found once for all
    /// its files, and a tree this snapshot has not cached is searched where it lies, in one pass
    /// over its entries for all the names asked in it (a binary search of the sorted names per
    /// entry), instead of being decoded into the cache. A run over the fanout layout's bindings
    /// (a leaf tree for every one or two files, 51,000 leaves for 100,000 events) so neither
    /// copies each leaf's entries nor fills and restarts the cache, and the reference layout's
    /// one directory of every binding is read once; the trees above go through the cache as
    /// for `exists`.
    ///
    /// # Errors
    /// As [`Snapshot::exists`], for the first failing path in directory order (not in the
    /// order of `paths`).
    pub fn files_exist(&self, paths: &[&str]) -> Result<Vec<bool>, Error> {
        fn split(path: &str) -> (&str, &str) {
            path.rsplit_once('/').unwrap_or(("", path))
        }
        for path in paths {
            validate_path(path)?;
        }
        // By directory, then name: each directory's paths are one run, its names sorted.
        let mut order: Vec<usize> = (0..paths.len()).collect();
        order.sort_by_key(|&i| split(paths[i]));
        let mut found = vec![false; paths.len()];
        let mut kinds: Vec<Option<EntryKind>> = Vec::new();
        for group in order.chunk_by(|&a, &b| split(paths[a]).0 == split(paths[b]).0) {
            let dir = split(paths[group[0]]).0;
            let tree = if dir.is_empty() {
                self.root
            } else {
                match self.lookup(dir)? {
                    Some(e) if e.kind == EntryKind::Tree => Some(e.id),
                    _ => None,
                }
            };
            kinds.clear();
            kinds.resize(group.len(), None);
            let names: Vec<&[u8]> = group
                .iter()
                .map(|&i| split(paths[i]).1.as_bytes())
                .collect();
            if let Some(id) = tree {
                let cached = self.trees.borrow().get(&id).cloned();
                if let Some(dir) = cached.or_else(|| self.pinned.borrow().get(&id).cloned()) {
                    for (kind, name) in kinds.iter_mut().zip(&names) {
                        *kind = dir.get(name).map(|e| e.kind);
                    }
                } else {
                    // One pass over the tree's entries for all the names asked in it; the
                    // last entry of a name wins, as in a decoded tree (`Dir::get`).
                    self.store.bound_mapped_packs();
                    let first = paths[group[0]];
                    let tree = self
                        .store
                        .find_tree(id)
                        .map_err(git_err("read tree on the way to", first))?;
                    let hash = self.store.repo.object_hash();
                    for entry in gix::objs::TreeRefIter::from_bytes(&tree.data, hash) {
                        let entry = entry.map_err(git_err("decode tree on the way to", first))?;
                        let name: &[u8] = entry.filename;
                        // The names are sorted: the run of this name (a path asked twice).
                        let lo = names.partition_point(|n| *n < name);
                        let hi = names.partition_point(|n| *n <= name);
                        for kind in &mut kinds[lo..hi] {
                            *kind = Some(entry.mode.kind());
                        }
                    }
                }
            }
            for (k, &i) in group.iter().enumerate() {
                found[i] = match kinds[k] {
                    None => false,
                    Some(kind) if is_file(kind) => true,
                    Some(_) => {
                        return Err(Error::NotAFile {
                            path: paths[i].to_owned(),
                        });
                    }
                };
            }
        }
        Ok(found)
    }

    /// Whether a directory (tree) exists at `path`.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn is_dir(&self, path: &str) -> Result<bool, Error> {
        validate_path(path)?;
        Ok(self
            .lookup(path)?
            .is_some_and(|entry| entry.kind == EntryKind::Tree))
    }

    /// Calls `visit` with every file path under the directory `prefix` (recursively), in no
    /// particular order, holding only the trees on the current path and the pending siblings:
    /// memory stays bounded by the tree shape, not by the number of files. Same errors and
    /// rules as [`Snapshot::list_files`].
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_file(&self, prefix: &str, mut visit: impl FnMut(&str)) -> Result<(), Error> {
        self.for_each_file_id(prefix, |path, _| visit(path))
    }

    /// [`Snapshot::for_each_file`] that also gives each file's [`BlobId`], so that a caller can
    /// compare contents with expected bytes ([`BlobId::of`]) without reading a single blob.
    /// Files are blobs of any file mode and symbolic links ([`Snapshot::for_each_entry`] tells
    /// them apart).
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_file_id(
        &self,
        prefix: &str,
        mut visit: impl FnMut(&str, BlobId),
    ) -> Result<(), Error> {
        self.for_each_entry(prefix, |entry| {
            if let (false, Some(id)) = (entry.mode.is_dir(), entry.blob) {
                visit(entry.path, id);
            }
        })
    }

    /// Calls `visit` with every entry under the directory `prefix` (recursively): directories,
    /// files, symbolic links and submodules, each with its mode. The entries of one directory
    /// are visited one after another, before or after those of any other directory; the
    /// directories come in no particular order. Holds only the trees on the current path and
    /// the pending siblings: memory stays bounded by the tree shape, not by the number of
    /// files. Every tree is decoded once and not cached; the mapped pack pages stay within
    /// [`MAPPED_BUDGET`](crate::store::MAPPED_BUDGET) ([`Store::bound_mapped_packs`]).
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_entry(
        &self,
        prefix: &str,
        visit: impl FnMut(&Walked<'_>),
    ) -> Result<(), Error> {
        self.for_each_entry_checked(prefix, visit, |_, _| {})
    }

    /// [`Snapshot::for_each_entry`] that also calls `malformed` with the path and the defect of
    /// every tree it decodes (the one at `prefix` included) that breaks git's rules on trees:
    /// duplicate names, a name both file and directory, entries out of order ([`TreeDefect`];
    /// entry modes are left to the caller, which sees every entry's mode).
    ///
    /// # Errors
    /// As [`Snapshot::list_files`].
    pub fn for_each_entry_checked(
        &self,
        prefix: &str,
        mut visit: impl FnMut(&Walked<'_>),
        malformed: impl FnMut(&str, TreeDefect),
    ) -> Result<(), Error> {
        self.try_for_each_entry(
            prefix,
            |entry| {
                visit(entry);
                Ok::<_, Error>(Descend::Into)
            },
            malformed,
        )
    }

    /// [`Snapshot::for_each_entry_checked`] whose `visit` may fail, which ends the walk with its
    /// error, and decides for each directory whether the walk reads it ([`Descend`]; the
    /// answer is ignored for other entries): a caller that walks some subtrees on their own
    /// skips them here, so that every tree is still read once. The entries of one directory
    /// are visited one after another; of the directories below one directory, each is walked
    /// whole before the next, in reverse name order (the order a stack gives; callers that
    /// need another order walk subtrees separately). `visit` may read blobs
    /// ([`Snapshot::read_blob`]) with the ids it is given: the walk holds only the trees on the
    /// current path and the pending siblings, so memory stays bounded by the tree shape.
    ///
    /// # Errors
    /// As [`Snapshot::list_files`], or the first error `visit` returns.
    pub fn try_for_each_entry<E: From<Error>>(
        &self,
        prefix: &str,
        mut visit: impl FnMut(&Walked<'_>) -> Result<Descend, E>,
        mut malformed: impl FnMut(&str, TreeDefect),
    ) -> Result<(), E> {
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        let start = if prefix.is_empty() {
            match self.root {
                Some(root) => root,
                None => return Ok(()),
            }
        } else {
            validate_path(prefix)?;
            match self.lookup(prefix)? {
                None => return Ok(()),
                Some(entry) if entry.kind == EntryKind::Tree => entry.id,
                Some(_) => {
                    return Err(Error::NotADirectory {
                        path: prefix.to_owned(),
                    }
                    .into());
                }
            }
        };
        let mut pending = vec![(prefix.to_owned(), start)];
        let mut full = String::new();
        while let Some((dir_path, id)) = pending.pop() {
            // A walk of a large tree reads trees from every pack: keep resident memory
            // bounded by what the walk holds, not by the packs it passed through.
            self.store.bound_mapped_packs();
            let tree = self
                .store
                .find_tree(id)
                .map_err(git_err("read tree on the way to", &dir_path))?;
            let decoded = tree
                .decode()
                .map_err(git_err("decode tree on the way to", &dir_path))?;
            if let Some(defect) = raw_tree_defect(&tree.data, &decoded.entries) {
                malformed(&dir_path, defect);
            }
            for entry in &decoded.entries {
                let name = std::str::from_utf8(entry.filename).map_err(|_| Error::InvalidPath {
                    path: format!("{dir_path}/{}", entry.filename.as_bstr()),
                    reason: "a file name in the tree is not valid UTF-8",
                })?;
                full.clear();
                if !dir_path.is_empty() {
                    full.push_str(&dir_path);
                    full.push('/');
                }
                full.push_str(name);
                let kind = entry.mode.kind();
                let step = visit(&Walked {
                    path: &full,
                    name,
                    mode: Mode(entry.mode.value()),
                    blob: is_file(kind).then(|| BlobId(entry.oid.to_owned())),
                })?;
                if kind == EntryKind::Tree && step == Descend::Into {
                    pending.push((full.clone(), entry.oid.to_owned()));
                }
            }
        }
        Ok(())
    }

    /// The id of the tree at `path` (`""` for the root); `None` when nothing or a file is there.
    fn tree_id_at(&self, path: &str) -> Result<Option<ObjectId>, Error> {
        if path.is_empty() {
            return Ok(self.root);
        }
        validate_path(path)?;
        Ok(self
            .lookup(path)?
            .filter(|e| e.kind == EntryKind::Tree)
            .map(|e| e.id))
    }

    /// The names of the entries of the directory `path` (`""` for the root), each once, in no
    /// promised order; empty when nothing or no directory is there. Names that are not UTF-8
    /// are read lossily.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn entry_names(&self, path: &str) -> Result<Vec<String>, Error> {
        let id = self.tree_id_at(path)?;
        let Some(id) = id else {
            return Ok(Vec::new());
        };
        let depth = if path.is_empty() {
            0
        } else {
            path.split('/').count()
        };
        let dir = self.cached_tree(id, path, depth)?;
        Ok(dir
            .names()
            .into_iter()
            .map(|k| k.to_str_lossy().into_owned())
            .collect())
    }

    /// How the tree at `path` (`""` for the root) breaks git's rules on trees (duplicate names,
    /// a name both file and directory, entries out of order; not entry modes), `None` when it
    /// is well-formed or no tree is there.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn tree_defect_at(&self, path: &str) -> Result<Option<TreeDefect>, Error> {
        let id = self.tree_id_at(path)?;
        let Some(id) = id else {
            return Ok(None);
        };
        let depth = if path.is_empty() {
            0
        } else {
            path.split('/').count()
        };
        Ok(self.cached_tree(id, path, depth)?.defect.clone())
    }

    /// The mode of the entry at `path`, `None` if nothing is there (also when a component on
    /// the way is not a directory). Reads trees only.
    ///
    /// # Errors
    /// [`Error::InvalidPath`], [`Error::Git`].
    pub fn mode(&self, path: &str) -> Result<Option<Mode>, Error> {
        validate_path(path)?;
        Ok(self.lookup(path)?.map(|entry| entry.mode))
    }

    /// The [`BlobId`] of the file at `path`, or `None` if nothing is there (also when a
    /// component on the way is a file). Reads trees only, never the blob.
    ///
    /// # Errors
    /// [`Error::NotAFile`] if a directory or submodule is at `path`, [`Error::InvalidPath`],
    /// [`Error::Git`].
    pub fn file_id(&self, path: &str) -> Result<Option<BlobId>, Error> {
        Ok(self.file_entry(path)?.map(|entry| BlobId(entry.id)))
    }

    /// The bytes of the blob `id` (found in this snapshot at `path`, which errors name). The
    /// size is checked from the object header before the blob is decompressed.
    ///
    /// # Errors
    /// [`Error::TooLarge`] if the blob is larger than `max_bytes`, [`Error::MissingObject`],
    /// [`Error::Git`].
    pub fn read_blob(&self, id: BlobId, path: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
        self.read_entry(id.0, path, max_bytes)
    }

    /// All file paths under the directory `prefix` (recursively), as full '/'-separated paths,
    /// sorted by byte order. `""` lists the whole tree; a trailing '/' on `prefix` is ignored.
    /// Empty if `prefix` does not exist. Submodule entries are not files and are skipped.
    ///
    /// # Errors
    /// [`Error::NotADirectory`] if `prefix` is a file, [`Error::InvalidPath`] for a bad prefix or a
    /// file name that is not UTF-8, [`Error::Git`].
    pub fn list_files(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        self.for_each_file(prefix, |path| out.push(path.to_owned()))?;
        out.sort_unstable();
        Ok(out)
    }

    /// [`Snapshot::list_files`] for a writer that will edit what it lists (compaction): every
    /// tree under `prefix` must be well-formed, and below the ledger roots hold only trees and
    /// `100644` files, as [`Store::write_commit_with`] requires of the trees it edits.
    ///
    /// # Errors
    /// [`Error::MalformedTree`] naming the first malformed tree met; as [`Snapshot::list_files`].
    pub fn list_files_for_write(&self, prefix: &str) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        let mut odd: Option<(String, TreeDefect)> = None;
        let mut malformed: Option<(String, TreeDefect)> = None;
        self.for_each_entry_checked(
            prefix,
            |entry| {
                if entry.mode.is_dir() {
                    return;
                }
                if !entry.mode.is_regular_file() && under_ledger_root(entry.path) {
                    let dir = entry.path.rsplit_once('/').map_or("", |(d, _)| d);
                    odd.get_or_insert_with(|| {
                        (
                            dir.to_owned(),
                            TreeDefect::Mode {
                                name: entry.name.to_owned(),
                                mode: format!("{:06o}", entry.mode.0),
                            },
                        )
                    });
                }
                if entry.blob.is_some() {
                    out.push(entry.path.to_owned());
                }
            },
            |path, defect| {
                malformed.get_or_insert_with(|| (path.to_owned(), defect));
            },
        )?;
        let first = malformed.or(odd);
        if let Some((path, defect)) = first {
            return Err(Error::MalformedTree { path, defect });
        }
        out.sort_unstable();
        Ok(out)
    }

    /// The entry at `path` if it is a file; `None` if absent.
    fn file_entry(&self, path: &str) -> Result<Option<Entry>, Error> {
        validate_path(path)?;
        match self.lookup(path)? {
            None => Ok(None),
            Some(entry) if is_file(entry.kind) => Ok(Some(entry)),
            Some(_) => Err(Error::NotAFile {
                path: path.to_owned(),
            }),
        }
    }

    /// The entry at `path`; `None` if absent or if a component on the way is not a tree.
    pub(super) fn lookup(&self, path: &str) -> Result<Option<Entry>, Error> {
        let Some(mut tree) = self.root else {
            return Ok(None);
        };
        let mut components = path.split('/').enumerate().peekable();
        while let Some((depth, name)) = components.next() {
            let dir = self.cached_tree(tree, path, depth)?;
            let Some(entry) = dir.get(name.as_bytes()) else {
                return Ok(None);
            };
            if components.peek().is_none() {
                return Ok(Some(entry));
            }
            if entry.kind != EntryKind::Tree {
                return Ok(None);
            }
            tree = entry.id;
        }
        Ok(None)
    }

    /// Like [`Self::lookup`], but a file on the way to `path` is an error, as writing `path`
    /// would have to replace it by a directory.
    pub(super) fn lookup_for_write(&self, path: &str) -> Result<Option<Entry>, Error> {
        let Some(mut tree) = self.root else {
            return Ok(None);
        };
        let mut walked = 0;
        let mut components = path.split('/').enumerate().peekable();
        while let Some((depth, name)) = components.next() {
            let dir = self.cached_tree(tree, path, depth)?;
            // `walked` is the length of this tree's own path (with a trailing '/' past the root).
            let tree_path = path[..walked].trim_end_matches('/');
            if let Some(defect) = dir.defect_at(tree_path) {
                return Err(Error::MalformedTree {
                    path: tree_path.to_owned(),
                    defect: defect.clone(),
                });
            }
            walked += name.len();
            let Some(entry) = dir.get(name.as_bytes()) else {
                return Ok(None);
            };
            if components.peek().is_none() {
                return Ok(Some(entry));
            }
            if entry.kind != EntryKind::Tree {
                return Err(Error::FileInTheWay {
                    path: path.to_owned(),
                    file: path[..walked].to_owned(),
                });
            }
            tree = entry.id;
            walked += 1;
        }
        Ok(None)
    }

    /// The decoded tree `id` at component depth `depth` (0: the root tree) on the way to
    /// `path`, from the snapshot's caches or decoded and cached now.
    pub(super) fn cached_tree(
        &self,
        id: ObjectId,
        path: &str,
        depth: usize,
    ) -> Result<Rc<Dir>, Error> {
        let cache = if depth < PINNED_DEPTH {
            &self.pinned
        } else {
            &self.trees
        };
        if let Some(dir) = cache.borrow().get(&id) {
            return Ok(Rc::clone(dir));
        }
        if depth < PINNED_DEPTH {
            let dir = match self.store.trees.get(&id, self.store.repo.object_hash()) {
                Some(dir) => dir,
                None => {
                    let dir = Rc::new(self.decode_tree(id, path)?);
                    self.store.trees.insert(id, &dir);
                    dir
                }
            };
            self.pinned.borrow_mut().insert(id, Rc::clone(&dir));
            return Ok(dir);
        }
        let dir = Rc::new(self.decode_tree(id, path)?);
        // Bounded: a walk over a whole fanout ledger touches every leaf tree (65,536 of them
        // for a million bindings); holding them all would cost hundreds of MiB. Starting over
        // costs only re-decoding the few trees on the next paths.
        let bytes = dir_bytes(&dir);
        if self.tree_bytes.get() + bytes > self.tree_budget {
            self.trees.borrow_mut().clear();
            self.tree_bytes.set(0);
            self.store.release_mapped_packs();
        }
        self.tree_bytes.set(self.tree_bytes.get() + bytes);
        self.trees.borrow_mut().insert(id, Rc::clone(&dir));
        Ok(dir)
    }

    /// Decodes the tree `id` found on the way to `path`, noting its first [`TreeDefect`].
    pub(super) fn decode_tree(&self, id: ObjectId, path: &str) -> Result<Dir, Error> {
        self.store.bound_mapped_packs();
        let mut tree = self
            .store
            .find_tree(id)
            .map_err(git_err("read tree on the way to", path))?;
        Dir::decode(
            std::mem::take(&mut tree.data),
            self.store.repo.object_hash(),
        )
        .map_err(git_err("decode tree on the way to", path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    #[test]
    fn list_files_is_sorted_by_full_path_bytes() {
        let (_tmp, _repo, store) = new_store();
        let c = publish(
            &store,
            &[
                ("d/b", "1"),
                ("d/a/z", "2"),
                ("d/a.txt", "3"),
                ("d/a-b/x", "4"),
                ("d/A", "5"),
                ("e", "6"),
            ],
        );
        let view = store.snapshot(Some(c)).expect("snapshot");
        // Git's tree order would put "a.txt" after "a-b" but "a" (as "a/") after "a.txt"; we
        // return plain byte order of the full path.
        assert_eq!(
            view.list_files("d").expect("list"),
            vec!["d/A", "d/a-b/x", "d/a.txt", "d/a/z", "d/b"]
        );
        assert_eq!(
            view.list_files("nope").expect("absent"),
            Vec::<String>::new()
        );
        assert_eq!(view.list_files("d/a").expect("list"), vec!["d/a/z"]);
        assert!(matches!(
            view.list_files("e"),
            Err(Error::NotADirectory { path }) if path == "e"
        ));
        let empty = store.snapshot(None).expect("empty");
        assert_eq!(empty.list_files("").expect("list"), Vec::<String>::new());
        assert_eq!(empty.read("e", 10).expect("read"), None);
    }

    #[test]
    fn read_limits_and_kinds() {
        let (_tmp, _repo, store) = new_store();
        let c = publish(&store, &[("a/b/c.json", "0123456789")]);
        let view = store.snapshot(Some(c)).expect("snapshot");
        assert_eq!(
            view.read("a/b/c.json", 10).expect("at limit"),
            Some(b"0123456789".to_vec())
        );
        match view.read("a/b/c.json", 9) {
            Err(Error::TooLarge { path, max }) => {
                assert_eq!((path.as_str(), max), ("a/b/c.json", 9));
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert!(matches!(view.read("a/b", 100), Err(Error::NotAFile { path }) if path == "a/b"));
        assert!(matches!(view.exists("a"), Err(Error::NotAFile { .. })));
        assert_eq!(view.read("a/b/missing", 100).expect("absent"), None);
        assert!(!view.exists("a/b/c.json/under-a-file").expect("absent"));
        assert!(matches!(
            view.read("a//b", 100),
            Err(Error::InvalidPath { path, .. }) if path == "a//b"
        ));
    }

    /// The batch lookup answers as `exists` does, path by path, whether the last tree on a path
    /// is cached (pinned near the root, or deeper) or searched where it lies, for files at the
    /// top, in shared and deep directories, absent names, absent directories and paths
    /// through a file; a directory is an error, as for `exists`.
    #[test]
    fn files_exist_answers_as_exists_does() {
        let (_tmp, _repo, store) = new_store();
        let deep = "a/b/c/d/e/f/g";
        let c = publish(
            &store,
            &[
                ("top", "0"),
                ("a/x", "1"),
                ("a/y", "2"),
                ("a/b/c/z", "3"),
                (&format!("{deep}/h1"), "4"),
                (&format!("{deep}/h2"), "5"),
                ("q/r/s/t/u/v/w", "6"),
            ],
        );
        let paths = [
            "a/b/c/d/e/f/g/h2",
            "top",
            "a/y",
            "nope",
            "a/x",
            "a/b/c/d/e/f/g/missing",
            "a/b/c/z",
            "a/b/c/d/e/f/g/h1",
            "a/absent/dir/file",
            "q/r/s/t/u/v/w",
            "top/under-a-file",
            "a/x/under-a-file",
            "q/r/s/t/u/v/absent",
        ];
        let want: Vec<bool> = {
            let view = store.snapshot(Some(c)).expect("snapshot");
            paths.iter().map(|p| view.exists(p).unwrap()).collect()
        };
        assert_eq!(want.iter().filter(|&&e| e).count(), 7);
        // Nothing cached yet in this snapshot (the shared upper trees aside).
        let fresh = store.snapshot(Some(c)).expect("snapshot");
        assert_eq!(fresh.files_exist(&paths).unwrap(), want);
        // Every tree cached: the same answers from the cache.
        let warm = store.snapshot(Some(c)).expect("snapshot");
        for p in paths {
            warm.exists(p).unwrap();
        }
        assert_eq!(warm.files_exist(&paths).unwrap(), want);
        assert_eq!(warm.files_exist(&[]).unwrap(), Vec::<bool>::new());
        for view in [&fresh, &warm] {
            assert!(matches!(
                view.files_exist(&["top", "a/b/c/d"]),
                Err(Error::NotAFile { path }) if path == "a/b/c/d"
            ));
            assert!(matches!(
                view.files_exist(&["a//x"]),
                Err(Error::InvalidPath { path, .. }) if path == "a//x"
            ));
        }
        let empty = store.snapshot(None).expect("empty");
        assert_eq!(empty.files_exist(&paths[..3]).unwrap(), [false; 3]);
    }

    /// Many names asked in one directory (the reference layout keeps every event binding in
    /// one), in any order, some twice, some absent: one pass over the tree answers them all as
    /// `exists` does, uncached and cached.
    #[test]
    fn files_exist_answers_many_names_in_one_directory() {
        let (_tmp, _repo, store) = new_store();
        let files: Vec<(String, String)> = (0..300)
            .filter(|i| i % 3 != 0)
            .map(|i| (format!("a/b/c/d/e/f/{i:03}.json"), i.to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(p, b)| (p.as_str(), b.as_str()))
            .collect();
        let c = publish(&store, &refs);
        let asked: Vec<String> = (0..300)
            .rev()
            .chain([5, 7, 9])
            .map(|i| format!("a/b/c/d/e/f/{i:03}.json"))
            .collect();
        let asked: Vec<&str> = asked.iter().map(String::as_str).collect();
        let want: Vec<bool> = {
            let view = store.snapshot(Some(c)).expect("snapshot");
            asked.iter().map(|p| view.exists(p).unwrap()).collect()
        };
        assert_eq!(want.iter().filter(|&&e| e).count(), 200 + 2);
        let fresh = store.snapshot(Some(c)).expect("snapshot");
        assert_eq!(fresh.files_exist(&asked).unwrap(), want);
        fresh.exists(asked[0]).unwrap();
        assert_eq!(fresh.files_exist(&asked).unwrap(), want);
    }

    /// Upper trees written or decoded by a store serve its next snapshots: a commit that
    /// changes one bucket adds only the trees on the changed path, and a tree shared by two
    /// commits reads the same in both.
    #[test]
    fn upper_trees_are_shared_by_the_snapshots_of_a_store() {
        let reads = |view: &Snapshot<'_>, path: &str, want: &str| {
            assert_eq!(
                view.read(path, 16).unwrap().as_deref(),
                Some(want.as_bytes())
            );
        };
        let (_tmp, _repo, store) = new_store();
        let first = publish(
            &store,
            &[("finality/v1/a/x/f", "1"), ("finality/v1/b/y/f", "2")],
        );
        // Written, so held before any read: root, finality, v1, a, a/x, b, b/y.
        assert_eq!(store.trees.len(), 7);
        let view = store.snapshot(Some(first)).expect("snapshot");
        assert!(view.exists("finality/v1/a/x/f").unwrap());
        assert!(view.exists("finality/v1/b/y/f").unwrap());
        assert_eq!(store.trees.len(), 7);
        drop(view);
        let second = publish(&store, &[("finality/v1/a/z/f", "3")]);
        // New: root, finality, v1, a, a/z.
        assert_eq!(store.trees.len(), 12);
        let view = store.snapshot(Some(second)).expect("snapshot");
        reads(&view, "finality/v1/b/y/f", "2");
        reads(&view, "finality/v1/a/z/f", "3");
        reads(&view, "finality/v1/a/x/f", "1");
        assert_eq!(store.trees.len(), 12);
        drop(view);
        // Nothing is dropped while the budget holds; another snapshot of the same tip starts
        // no generation.
        let third = publish(&store, &[("finality/v1/a/w/f", "4")]);
        let view = store.snapshot(Some(third)).expect("snapshot");
        reads(&view, "finality/v1/a/w/f", "4");
        reads(&view, "finality/v1/b/y/f", "2");
        assert_eq!(store.trees.len(), 17);
        let same = store.snapshot(Some(third)).expect("snapshot");
        assert!(same.exists("finality/v1/a/x/f").unwrap());
        assert_eq!(store.trees.len(), 17);
        // A store opened afresh starts empty and reads the same.
        let other = Store::open(store.git_dir()).expect("open");
        assert_eq!(other.trees.len(), 0);
        let again = other.snapshot(Some(second)).expect("snapshot");
        reads(&again, "finality/v1/b/y/f", "2");
        reads(&again, "finality/v1/a/x/f", "1");
    }

    /// Past its budget, the shared cache drops the least recently used generations, down to
    /// three quarters of the budget: a tree used by the latest snapshots stays, however early
    /// it was first read.
    #[test]
    fn the_shared_tree_cache_drops_the_least_recently_used_first() {
        let hash = gix::hash::Kind::Sha1;
        let tree = |n: u8| {
            let name = format!("f{n:03}");
            let id = [n; 20];
            let entry = gix::objs::tree::EntryRef {
                mode: gix::objs::tree::EntryKind::Blob.into(),
                filename: name.as_str().into(),
                oid: gix::oid::from_bytes_unchecked(&id),
            };
            let mut raw = Vec::new();
            gix::objs::WriteTo::write_to(
                &gix::objs::TreeRef {
                    entries: vec![entry],
                },
                &mut raw,
            )
            .expect("tree");
            (gix::ObjectId::from_bytes_or_panic(&[n; 20]), raw)
        };
        let root = |n: u8| Some(gix::ObjectId::from_bytes_or_panic(&[200 + n; 20]));
        let decoded = |n: u8| Rc::new(Dir::decode(tree(n).1, hash).expect("decode"));
        let one = dir_bytes(&decoded(0));
        // Room for ten trees.
        let cache = SharedTrees::with_budget(one * 10);
        for n in 0..10u8 {
            cache.begin(root(n));
            cache.insert(tree(n).0, &decoded(n));
            // Tree 0 is used by every generation.
            assert!(cache.get(&tree(0).0, hash).is_some());
        }
        assert_eq!(cache.len(), 10);
        // The eleventh passes the budget: the oldest generations go until 7 trees are held
        // (trees 1 to 4 go), and tree 0, used by this generation, stays.
        cache.begin(root(10));
        assert!(cache.get(&tree(0).0, hash).is_some());
        cache.insert(tree(10).0, &decoded(10));
        assert_eq!(cache.len(), 7);
        for n in [0, 5, 6, 7, 8, 9, 10] {
            assert!(cache.get(&tree(n).0, hash).is_some(), "tree {n}");
        }
        for n in 1..=4 {
            assert!(cache.get(&tree(n).0, hash).is_none(), "tree {n}");
        }
        // A written tree is held as its bytes until a read decodes it.
        let (id, raw) = tree(11);
        let before = cache.bytes.get();
        cache.insert_written(id, &raw, 1);
        assert_eq!(cache.bytes.get(), before + raw.len() + CACHE_SLOT_BYTES);
        let read = cache.get(&id, hash).expect("held");
        assert_eq!(read.names(), vec![b"f011".as_slice()]);
        assert_eq!(cache.bytes.get(), before + one);
        // Deeper trees, and a tree larger than a quarter of the budget, are not kept.
        let (id, raw) = tree(12);
        cache.insert_written(id, &raw, PINNED_DEPTH);
        assert!(cache.get(&id, hash).is_none());
        let (id, raw) = tree(13);
        let small = SharedTrees::with_budget(raw.len() * 3);
        small.insert_written(id, &raw, 0);
        assert_eq!(small.len(), 0);
    }

    /// The deep-tree cache is bounded by bytes: one large directory is worth many small ones.
    #[test]
    fn the_tree_cache_is_bounded_by_bytes() {
        let (_tmp, _repo, store) = new_store();
        let files: Vec<(String, String)> = ["a", "b", "c"]
            .iter()
            .flat_map(|d| {
                (0..40).map(move |i| (format!("1/2/3/4/5/{d}/file-{i:04}.json"), format!("{i}")))
            })
            .collect();
        let c = publish(&store, &files);
        let mut view = store.snapshot(Some(c)).expect("snapshot");
        assert!(view.exists("1/2/3/4/5/a/file-0000.json").expect("read"));
        let one = view.tree_bytes.get();
        assert!(one > 40 * 10, "{one}");
        view.trees.borrow_mut().clear();
        view.tree_bytes.set(0);
        view.tree_budget = one + one / 2;
        for d in ["a", "b", "c"] {
            assert!(
                view.exists(&format!("1/2/3/4/5/{d}/file-0001.json"))
                    .expect("read")
            );
            assert!(view.tree_bytes.get() <= view.tree_budget);
        }
        // The root-near trees stay; of the three deep ones only the last is held.
        assert_eq!(view.trees.borrow().len(), 1);
        assert!(
            view.exists("1/2/3/4/5/a/file-0039.json")
                .expect("read again")
        );
    }

    /// A directory the visitor answers `Over` for is not read, and the first error of the
    /// visitor ends the walk with it; every other entry is visited once, a directory's entries
    /// together.
    #[test]
    fn try_for_each_entry_skips_directories_and_stops_at_an_error() {
        let (_tmp, _repo, store) = new_store();
        let c = publish(
            &store,
            &[("d/a/x", "1"), ("d/a/y", "2"), ("d/b/z", "3"), ("d/c", "4")],
        );
        let view = store.snapshot(Some(c)).expect("snapshot");
        let mut seen = Vec::new();
        view.try_for_each_entry(
            "d",
            |e| {
                seen.push(e.path.to_owned());
                Ok::<_, Error>(if e.path == "d/a" {
                    Descend::Over
                } else {
                    Descend::Into
                })
            },
            |_, _| {},
        )
        .expect("walk");
        seen.sort();
        assert_eq!(seen, ["d/a", "d/b", "d/b/z", "d/c"]);
        let mut visits = 0;
        let stopped = view.try_for_each_entry(
            "d",
            |_| {
                visits += 1;
                Err(Error::NotAFile { path: "x".into() })
            },
            |_, _| {},
        );
        assert!(matches!(stopped, Err(Error::NotAFile { path }) if path == "x"));
        assert_eq!(visits, 1);
        assert!(matches!(
            view.try_for_each_entry("d/c", |_| Ok::<_, Error>(Descend::Into), |_, _| {}),
            Err(Error::NotADirectory { path }) if path == "d/c"
        ));
    }
}
