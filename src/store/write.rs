//! The write path's first half: validate a whole batch of files against a base tree, then write
//! the blobs, the trees on changed paths and one commit ([`Store::write_commit`]). No ref moves
//! here (see `refs.rs`).
//!
//! Objects go loose when a commit writes at most 16 of them (each written to a temporary file in
//! its fan-out directory, fsynced, renamed; then the fan-out directories are fsynced), otherwise
//! into one pack with its index ([`crate::store::pack`]). The commit object is
//! `tree <hex>\n[parent <hex>\n]author <name> <<email>> <seconds> +0000\ncommitter <same>\n\n<message>`.

use std::collections::BTreeMap;

use gix::ObjectId;
use gix::bstr::{BStr, ByteSlice};
use gix::objs::tree::EntryKind;
use rayon::prelude::*;

use super::error::{base_name, git_err};
use super::sync_dir;
use super::tree::{is_file, validate_write_path};
use crate::durable;
use crate::store::pack::PackBuilder;
use crate::store::*;

/// The identity and time written as both author and committer of a commit, with UTC offset
/// `+0000`. The caller injects the time (clock or `SOURCE_DATE_EPOCH`); the store never reads it.
///
/// `name` must be non-empty; `name` and `email` must not contain `<`, `>`, newlines or NUL, nor
/// start or end with whitespace; `email` may be empty. `time_seconds` must not be negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Author and committer name.
    pub name: String,
    /// Author and committer e-mail (written between `<` and `>`).
    pub email: String,
    /// Seconds since the Unix epoch.
    pub time_seconds: i64,
}

impl Signature {
    fn validate(&self) -> Result<(), Error> {
        let bad = |s: &str| s.contains(['<', '>', '\n', '\0']) || s.trim() != s;
        if self.name.is_empty() {
            return Err(Error::InvalidSignature {
                reason: "the name is empty; set a name",
            });
        }
        if bad(&self.name) {
            return Err(Error::InvalidSignature {
                reason: "the name contains '<', '>', a newline, NUL, or surrounding whitespace",
            });
        }
        if bad(&self.email) {
            return Err(Error::InvalidSignature {
                reason: "the email contains '<', '>', a newline, NUL, or surrounding whitespace",
            });
        }
        if self.time_seconds < 0 {
            return Err(Error::InvalidSignature {
                reason: "the time is before 1970; pass seconds since the unix epoch",
            });
        }
        Ok(())
    }
}

impl Store {
    /// Prepare a publication: write a blob for each of `files` (a '/'-separated path and its
    /// bytes), edit the tree of `base` (only trees on changed paths are rewritten), and write a
    /// commit with `message` whose single parent is `base` (no parent when `None`), with `sig` as
    /// author and committer. Returns the new commit id. **No ref moves**; call
    /// [`Store::update_ref`] to publish it.
    ///
    /// Paths are upserted, but the store is create-only: a path that exists in `base` with the
    /// same bytes is left as it is; with different bytes it is an error. All the validation errors
    /// below are found before the first object is written. Written objects are fsynced before
    /// returning.
    ///
    /// # Errors
    /// [`Error::InvalidPath`] (empty, absolute, `.`/`..`/`.git` components, …),
    /// [`Error::DuplicatePath`], [`Error::FileInTheWay`], [`Error::DirectoryInTheWay`],
    /// [`Error::Conflict`], [`Error::InvalidSignature`], [`Error::InvalidMessage`], errors of
    /// [`Store::snapshot`] for `base`, [`Error::Git`] if writing fails, [`Error::Sync`].
    pub fn write_commit<B: AsRef<[u8]> + Sync>(
        &self,
        base: Option<CommitId>,
        files: &[(String, B)],
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        self.write_commit_with(base, files, &[], false, message, sig)
    }

    /// Like [`Store::write_commit`], but may also replace existing files (`replace`) and remove
    /// the files in `removals`. For compaction, which replaces hot shards by segments, and for
    /// tests that plant defects; publishing never replaces.
    ///
    /// # Errors
    /// As [`Store::write_commit`]; a removal of a path that is not a file is [`Error::NotAFile`],
    /// and of a path that `files` also writes [`Error::DuplicatePath`].
    pub fn write_commit_with<B: AsRef<[u8]> + Sync>(
        &self,
        base: Option<CommitId>,
        files: &[(String, B)],
        removals: &[String],
        replace: bool,
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        self.write_commit_in(
            &self.snapshot(base)?,
            files,
            removals,
            &[],
            replace,
            message,
            sig,
        )
    }

    /// Like [`Store::write_commit`], and also moves each file `from` → `to` of `moves`: the
    /// file goes from `from` and the same blob (same id, never read or written again) appears
    /// at `to`. For a layout migration, which changes where records live and never their bytes.
    /// With `replace`, a file of `files` may replace an existing one (a migration's new layout
    /// record); a move's `to` never may.
    ///
    /// # Errors
    /// As [`Store::write_commit`]; a `from` that is not a file is [`Error::NotAFile`], a `to`
    /// that exists (or a file of `files` that exists, without `replace`) is [`Error::Conflict`],
    /// a `to` that `files` also writes [`Error::DuplicatePath`].
    pub fn write_commit_moving<B: AsRef<[u8]> + Sync>(
        &self,
        base: Option<CommitId>,
        files: &[(String, B)],
        moves: &[(String, String)],
        replace: bool,
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        self.write_commit_in(
            &self.snapshot(base)?,
            files,
            &[],
            moves,
            replace,
            message,
            sig,
        )
    }

    /// [`Store::write_commit`] on the commit that `base_view` (a snapshot of this store) reads,
    /// through that snapshot: the trees a caller has already read in it (a publisher's plan
    /// looks up every path it writes) are not read again.
    ///
    /// # Errors
    /// As [`Store::write_commit`], except those of taking the snapshot.
    pub fn write_commit_on<B: AsRef<[u8]> + Sync>(
        &self,
        base_view: &Snapshot<'_>,
        files: &[(String, B)],
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        self.write_commit_in(base_view, files, &[], &[], false, message, sig)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_commit_in<B: AsRef<[u8]> + Sync>(
        &self,
        base_view: &Snapshot<'_>,
        files: &[(String, B)],
        removals: &[String],
        moves: &[(String, String)],
        replace: bool,
        message: &str,
        sig: &Signature,
    ) -> Result<CommitId, Error> {
        debug_assert!(
            std::ptr::eq(base_view.store(), self),
            "a snapshot of another store"
        );
        let base = base_view.commit();
        sig.validate()?;
        if message.contains('\0') {
            return Err(Error::InvalidMessage {
                reason: "it contains a NUL byte",
            });
        }
        let hash_kind = self.repo.object_hash();

        // Prepare: validate the whole batch against itself and the base before writing anything.
        // The blobs' ids first, on all cores for a large batch; the pack takes them as they are
        // (`put_hashed`).
        let hash = |(path, bytes): &(String, B)| {
            gix::objs::compute_hash(hash_kind, gix::objs::Kind::Blob, bytes.as_ref())
                .map_err(git_err("hash blob for", path))
        };
        let ids: Vec<ObjectId> = if files.len() >= PARALLEL_HASHING {
            files.par_iter().map(hash).collect::<Result<_, _>>()?
        } else {
            files.iter().map(hash).collect::<Result<_, _>>()?
        };
        let mut batch: BTreeMap<&str, (&[u8], ObjectId)> = BTreeMap::new();
        for ((path, bytes), id) in files.iter().zip(ids) {
            let bytes = bytes.as_ref();
            validate_write_path(path)?;
            if let Some((_, existing)) = batch.insert(path, (bytes, id))
                && existing != id
            {
                return Err(Error::DuplicatePath { path: path.clone() });
            }
        }
        for path in batch.keys() {
            for (idx, _) in path.match_indices('/') {
                let ancestor = &path[..idx];
                if batch.contains_key(ancestor) {
                    return Err(Error::FileInTheWay {
                        path: (*path).to_owned(),
                        file: ancestor.to_owned(),
                    });
                }
            }
        }
        let mut new_files = Vec::new();
        for (path, (bytes, id)) in &batch {
            match base_view.lookup_for_write(path)? {
                None => new_files.push((*path, *bytes, *id)),
                Some(entry) if entry.kind == EntryKind::Tree => {
                    return Err(Error::DirectoryInTheWay {
                        path: (*path).to_owned(),
                    });
                }
                Some(entry) if is_file(entry.kind) && entry.id == *id => {}
                Some(entry) if is_file(entry.kind) && replace => {
                    new_files.push((*path, *bytes, *id));
                }
                Some(entry) if is_file(entry.kind) => {
                    return Err(Error::Conflict {
                        path: (*path).to_owned(),
                    });
                }
                Some(_) => {
                    return Err(Error::NotAFile {
                        path: (*path).to_owned(),
                    });
                }
            }
        }

        for path in removals {
            // Written and removed by one commit: which one wins would be an accident of order.
            if batch.contains_key(path.as_str()) {
                return Err(Error::DuplicatePath { path: path.clone() });
            }
            match base_view.lookup_for_write(path)? {
                Some(entry) if is_file(entry.kind) => {}
                _ => {
                    return Err(Error::NotAFile { path: path.clone() });
                }
            }
        }

        // Moves: the blob found at `from` goes to `to` as it is.
        let mut moved: Vec<(&str, &str, ObjectId)> = Vec::with_capacity(moves.len());
        for (from, to) in moves {
            validate_write_path(to)?;
            if batch.contains_key(to.as_str()) || batch.contains_key(from.as_str()) {
                return Err(Error::DuplicatePath { path: to.clone() });
            }
            let id = match base_view.lookup_for_write(from)? {
                Some(entry) if is_file(entry.kind) => entry.id,
                _ => return Err(Error::NotAFile { path: from.clone() }),
            };
            if base_view.lookup_for_write(to)?.is_some() {
                return Err(Error::Conflict { path: to.clone() });
            }
            moved.push((from, to, id));
        }

        // Write: blobs, the trees on changed paths, the commit. Few objects stay loose (each
        // fsynced); more go into one pack with its index (pack.rs), which is faster and far
        // smaller from a handful of objects on.
        let mut dirs: Vec<&str> = new_files
            .iter()
            .map(|(path, _, _)| *path)
            .chain(removals.iter().map(String::as_str))
            .chain(moved.iter().flat_map(|(from, to, _)| [*from, *to]))
            .map(|path| path.rsplit_once('/').map_or("", |(dir, _)| dir))
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        let mut sink = if new_files.len() + dirs.len() + 2 > LOOSE_MAX {
            Sink::Pack(Box::new(PackBuilder::new(
                hash_kind,
                &self.objects_dir().join("pack"),
            )))
        } else {
            Sink::Loose(Vec::new())
        };
        // Changes sorted by path: every directory's changes are one contiguous run.
        let mut changes: Vec<(&str, Change)> = Vec::with_capacity(new_files.len() + removals.len());
        for (path, bytes, id) in &new_files {
            self.put_hashed(&mut sink, *id, gix::objs::Kind::Blob, bytes)?;
            changes.push((path, Change::Upsert(*id)));
        }
        changes.extend(removals.iter().map(|p| (p.as_str(), Change::Remove)));
        for (from, to, id) in &moved {
            changes.push((from, Change::Remove));
            changes.push((to, Change::Upsert(*id)));
        }
        changes.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut buf = Vec::new();
        let tree = match self.write_changed_tree(
            base_view,
            &mut sink,
            base_view.root,
            &changes,
            0,
            0,
            &mut buf,
        )? {
            Some(id) => id,
            // Every file removed: the root is the empty tree.
            None => self.put(&mut sink, gix::objs::Kind::Tree, &[], "the empty tree")?,
        };
        let time = format!("{} +0000", sig.time_seconds);
        let person = format!("{} <{}> {time}", sig.name, sig.email);
        let tree_hex = tree.to_hex().to_string();
        let parent_hex = base.map(|b| b.0.to_hex().to_string());
        let commit_ref = gix::objs::CommitRef {
            tree: BStr::new(&tree_hex),
            parents: parent_hex.iter().map(|p| BStr::new(p.as_str())).collect(),
            author: BStr::new(&person),
            committer: BStr::new(&person),
            encoding: None,
            message: BStr::new(message),
            extra_headers: Vec::new(),
        };
        buf.clear();
        gix::objs::WriteTo::write_to(&commit_ref, &mut buf).map_err(|e| Error::Git {
            action: "serialize commit on",
            subject: base_name(&base),
            source: Box::new(e),
        })?;
        let commit = self.put(&mut sink, gix::objs::Kind::Commit, &buf, "the commit")?;
        match sink {
            Sink::Loose(pending) => self.write_loose_objects(&pending)?,
            Sink::Pack(pack) => {
                pack.finish().map_err(|e| Error::Pack(Box::new(e)))?;
            }
        }
        Ok(CommitId(commit))
    }
}

/// Batches of at least this many files are hashed on all cores; smaller ones (a claim's, an
/// outcome's) on the writing thread, which costs less than waking the pool.
const PARALLEL_HASHING: usize = 64;

/// Publications writing at most this many objects stay loose (fsynced one by one); larger ones
/// are written as one pack. A pack costs two files and a directory sync whatever its size; loose
/// objects one file and sync each, and every pack adds an index that lookups consult, so the
/// handful of objects of a claim or outcome commit stay loose.
const LOOSE_MAX: usize = 16;

/// One file's change in a commit ([`Store::write_changed_tree`]).
#[derive(Clone, Copy)]
enum Change {
    /// The file is written with this blob (added, or replacing another).
    Upsert(ObjectId),
    /// The file is removed.
    Remove,
}

/// A directory entry a commit writes: its kind and object.
struct Entry(EntryKind, ObjectId);

/// Where the objects of one commit go.
enum Sink {
    /// Objects not yet in the repository, written loose at the end ([`Store::write_loose_objects`]).
    Loose(Vec<(ObjectId, gix::objs::Kind, Vec<u8>)>),
    /// Collected into one pack, written at the end.
    Pack(Box<PackBuilder>),
}

impl Store {
    /// Stores one object in `sink`; returns its id. `what` names it in errors.
    fn put(
        &self,
        sink: &mut Sink,
        kind: gix::objs::Kind,
        bytes: &[u8],
        what: &str,
    ) -> Result<ObjectId, Error> {
        let id = gix::objs::compute_hash(self.repo.object_hash(), kind, bytes)
            .map_err(git_err("hash object for", what))?;
        self.put_hashed(sink, id, kind, bytes)?;
        Ok(id)
    }

    /// [`Store::put`] of an object whose id the caller has computed.
    fn put_hashed(
        &self,
        sink: &mut Sink,
        id: ObjectId,
        kind: gix::objs::Kind,
        bytes: &[u8],
    ) -> Result<(), Error> {
        match sink {
            Sink::Pack(pack) => pack
                .add_hashed(id, kind, bytes)
                .map_err(|e| Error::Pack(Box::new(e))),
            Sink::Loose(pending) => {
                if !self.repo.objects.exists_without_refresh(&id)
                    && !pending.iter().any(|(p, _, _)| *p == id)
                {
                    pending.push((id, kind, bytes.to_vec()));
                }
                Ok(())
            }
        }
    }

    /// Writes the tree at `base` (`None`: an empty directory) with `changes` applied, and the
    /// changed trees below it, children before parents. `changes` are the changes under this
    /// directory, sorted by path, each path's first `skip` bytes being this directory's path and
    /// its `/`; `depth` is the directory's number of path components (0: the root). Returns
    /// `None` when the directory ends up empty: git keeps no empty trees, so its entry goes
    /// from the parent.
    ///
    /// The base trees are the ones `view` decoded when the batch was checked
    /// ([`Snapshot::lookup_for_write`] of every changed path), taken from its cache: each tree
    /// of a publication is read and inflated once, not again here: reading them again was a
    /// visible share of a publication's CPU into a large ledger, where each new binding
    /// rewrites a fan-out leaf. Memory: the new trees' entries
    /// borrow the names from the cached trees and the changes, for the directories of one path
    /// at a time. A malformed base tree was refused on the way in; one found anyway is an
    /// error, never a silent repair (also on a commit that changes nothing, which rewrites the
    /// root as it is).
    #[allow(clippy::too_many_arguments)]
    fn write_changed_tree(
        &self,
        view: &Snapshot<'_>,
        sink: &mut Sink,
        base: Option<ObjectId>,
        changes: &[(&str, Change)],
        skip: usize,
        depth: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Option<ObjectId>, Error> {
        // This directory's path, borrowed from its first change (not built per tree).
        let dir_path = changes
            .first()
            .map_or("", |(p, _)| &p[..skip.saturating_sub(1)]);
        let dir = match base {
            Some(id) => {
                let first = changes.first().map_or("", |(p, _)| *p);
                let dir = view.cached_tree(id, first, depth)?;
                if let Some(defect) = dir.defect_at(dir_path) {
                    return Err(Error::MalformedTree {
                        path: dir_path.to_owned(),
                        defect: defect.clone(),
                    });
                }
                Some(dir)
            }
            None => None,
        };
        // What this directory's entries become, by name: a new id and kind, or gone.
        let mut edits: Vec<(&[u8], Option<Entry>)> = Vec::new();
        let mut i = 0;
        while i < changes.len() {
            let rest = &changes[i].0[skip..];
            match rest.find('/') {
                None => {
                    let edit = match changes[i].1 {
                        Change::Upsert(id) => Some(Entry(EntryKind::Blob, id)),
                        Change::Remove => None,
                    };
                    edits.push((rest.as_bytes(), edit));
                    i += 1;
                }
                Some(end) => {
                    let name = &rest[..end];
                    let prefix = &changes[i].0[..skip + end + 1];
                    let group = changes[i..]
                        .iter()
                        .take_while(|(p, _)| p.starts_with(prefix))
                        .count();
                    let sub_base = match dir.as_ref().and_then(|d| d.get(name.as_bytes())) {
                        Some(e) if e.kind == EntryKind::Tree => Some(e.id),
                        Some(_) => {
                            return Err(Error::FileInTheWay {
                                path: changes[i].0.to_owned(),
                                file: prefix[..prefix.len() - 1].to_owned(),
                            });
                        }
                        None => None,
                    };
                    let sub = self.write_changed_tree(
                        view,
                        sink,
                        sub_base,
                        &changes[i..i + group],
                        prefix.len(),
                        depth + 1,
                        buf,
                    )?;
                    edits.push((name.as_bytes(), sub.map(|id| Entry(EntryKind::Tree, id))));
                    i += group;
                }
            }
        }
        let mut edited: Vec<&[u8]> = edits.iter().map(|(name, _)| *name).collect();
        edited.sort_unstable();
        let kept = dir
            .iter()
            .flat_map(|d| d.entry_refs())
            .filter(|e| edited.binary_search(&e.filename.as_bytes()).is_err());
        let added = edits.iter().filter_map(|(name, edit)| {
            edit.as_ref()
                .map(|Entry(kind, oid)| gix::objs::tree::EntryRef {
                    mode: (*kind).into(),
                    filename: name.as_bstr(),
                    oid,
                })
        });
        let mut tree = gix::objs::TreeRef {
            entries: kept.chain(added).collect(),
        };
        if tree.entries.is_empty() {
            return Ok(None);
        }
        // Git's order: a tree's name compares as if it ended in '/'.
        tree.entries.sort_unstable();
        buf.clear();
        gix::objs::WriteTo::write_to(&tree, buf).map_err(|e| Error::Git {
            action: "serialize tree",
            subject: dir_path.to_owned(),
            source: Box::new(e),
        })?;
        let id = self.put(sink, gix::objs::Kind::Tree, buf, "a tree")?;
        self.trees.insert_written(id, buf, depth);
        Ok(Some(id))
    }

    /// Writes `objects` as loose object files following [`crate::durable`]: each is written to a
    /// temporary file in its fan-out directory and fsynced, then renamed into place; then the
    /// fan-out directories (and `objects/` when a fan-out directory was created) are fsynced.
    ///
    /// Git's maintenance runs beside writers (`prune-packed`, `repack -d`, `gc`, `maintenance
    /// run`) and removes fan-out directories it finds empty, also the one this writer has just
    /// created and not filled yet. A directory that vanishes like that is created again and the
    /// object written again ([`LOOSE_DIR_ATTEMPTS`] times); a fan-out directory removed after
    /// the object was renamed into it means git packed the object first (only packed objects
    /// are pruned), which is checked before it is taken as written.
    fn write_loose_objects(
        &self,
        objects: &[(ObjectId, gix::objs::Kind, Vec<u8>)],
    ) -> Result<(), Error> {
        let root = self.objects_dir();
        let mut dirs = Vec::new();
        let mut created_dir = false;
        for (id, kind, bytes) in objects {
            let hex = id.to_hex().to_string();
            let dir = root.join(&hex[..2]);
            let io = |source: std::io::Error| Error::Sync {
                path: dir.clone(),
                source,
            };
            let data = crate::store::pack::loose_object(*kind, bytes)
                .map_err(|e| Error::Pack(Box::new(e)))?;
            let mut attempt = 0;
            loop {
                attempt += 1;
                match write_loose_object(&dir, &hex[2..], &data) {
                    Ok(created) => {
                        created_dir |= created;
                        break;
                    }
                    Err(e) if vanished(&e) && attempt < LOOSE_DIR_ATTEMPTS => {
                        // Give the remover the processor, rather than racing it in lockstep.
                        std::thread::yield_now();
                        continue;
                    }
                    Err(e) => return Err(io(e)),
                }
            }
            dirs.push((dir, *id));
        }
        dirs.sort_unstable();
        dirs.dedup_by(|a, b| a.0 == b.0);
        for (dir, id) in &dirs {
            match durable::sync_dir(dir) {
                Ok(()) => {}
                // Removed after the rename: git packed the object and pruned the loose copy.
                Err(e) if vanished(&e) && self.repo.has_object(id) => {}
                Err(source) => {
                    return Err(Error::Sync {
                        path: dir.clone(),
                        source,
                    });
                }
            }
        }
        if created_dir {
            sync_dir(&root)?;
        }
        Ok(())
    }
}

/// How many times a loose object is written again when git's maintenance removes its fan-out
/// directory meanwhile. The window lost each time is the few microseconds between creating
/// the directory and creating the temporary file in it; a remover that loops on the directory
/// (as the test does) on a loaded machine won 50 attempts in a row once, so the bound is
/// generous: a try costs a `mkdir` and an `open`.
const LOOSE_DIR_ATTEMPTS: u32 = 1000;

/// Whether `e` says a path (a fan-out directory) is gone.
fn vanished(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound
}

/// Writes one loose object file `name` with `data` into the fan-out directory `dir` (created
/// when absent): a temporary file written and fsynced, renamed into place. Returns whether the
/// directory was created. The temporary file is removed on failure.
fn write_loose_object(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<bool> {
    let created = match std::fs::create_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(e),
    };
    let tmp = dir.join(durable::temp_name("obj"));
    let result =
        durable::write_synced(&tmp, &[data]).and_then(|()| std::fs::rename(&tmp, dir.join(name)));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    /// The tree id gix's tree editor computes for `base` with `files` upserted and `removals`
    /// removed: the writer this one replaced, kept as the model.
    fn editor_tree(
        store: &Store,
        base: CommitId,
        files: &[(String, Vec<u8>)],
        removals: &[String],
    ) -> ObjectId {
        let hash = store.repo.object_hash();
        let root = store
            .repo
            .find_commit(base.0)
            .unwrap()
            .tree()
            .unwrap()
            .decode()
            .unwrap()
            .into();
        let mut editor = gix::objs::tree::Editor::new(root, &store.repo.objects, hash);
        for (path, bytes) in files {
            let id = gix::objs::compute_hash(hash, gix::objs::Kind::Blob, bytes).unwrap();
            editor.upsert(path.split('/'), EntryKind::Blob, id).unwrap();
        }
        for path in removals {
            editor.remove(path.split('/')).unwrap();
        }
        editor
            .write(|tree| {
                let mut buf = Vec::new();
                gix::objs::WriteTo::write_to(tree, &mut buf).unwrap();
                Ok::<_, std::convert::Infallible>(
                    gix::objs::compute_hash(hash, gix::objs::Kind::Tree, &buf).unwrap(),
                )
            })
            .unwrap()
    }

    /// Git's maintenance (`prune-packed`, `gc`) removes every empty fan-out directory it meets,
    /// also one a writer has just created: a thread doing that in a tight loop on the fan-out
    /// directory of the blob about to be written, beside 150 commits of loose objects, fails none
    /// of them.
    #[test]
    fn loose_writes_survive_fan_out_directories_removed_by_git_maintenance() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let (_tmp, _repo, store) = new_store();
        let objects = store.objects_dir();
        let stop = Arc::new(AtomicBool::new(false));
        let target: Arc<Mutex<Option<PathBuf>>> = Arc::default();
        let pruner = {
            let (stop, target) = (stop.clone(), target.clone());
            std::thread::spawn(move || {
                let mut removed = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let dir = target.lock().unwrap().clone();
                    // rmdir fails on a directory with files: only an empty one goes, as in git.
                    if let Some(dir) = dir
                        && std::fs::remove_dir(&dir).is_ok()
                    {
                        removed += 1;
                    }
                }
                removed
            })
        };
        let mut base = None;
        for i in 0..150 {
            let bytes = format!("bytes {i}");
            let blob = gix::objs::compute_hash(
                gix::hash::Kind::Sha1,
                gix::objs::Kind::Blob,
                bytes.as_bytes(),
            )
            .unwrap()
            .to_hex()
            .to_string();
            *target.lock().unwrap() = Some(objects.join(&blob[..2]));
            let commit = store
                .write_commit(base, &files(&[(format!("f/{i}"), bytes)]), "m", &sig())
                .unwrap_or_else(|e| panic!("commit {i}: {e}"));
            base = Some(commit);
        }
        stop.store(true, Ordering::Relaxed);
        let removed = pruner.join().unwrap();
        eprintln!("fan-out directories removed beside the writer: {removed}");
        let snap = store.snapshot(base).unwrap();
        assert_eq!(
            snap.read("f/149", 100).unwrap().as_deref(),
            Some(&b"bytes 149"[..])
        );
    }

    /// Paths over names that sort differently as files and as trees ("a" < "a-b" < "a.b" <
    /// "a/" < "a0"), up to three deep.
    fn paths() -> impl proptest::strategy::Strategy<Value = Vec<String>> {
        use proptest::prelude::*;
        let name = prop::sample::select(vec!["a", "a-b", "a.b", "a0", "ab", "b"]);
        prop::collection::vec(prop::collection::vec(name, 1..4), 0..24)
            .prop_map(|ps| ps.into_iter().map(|p| p.join("/")).collect())
    }

    proptest::proptest! {
        #![proptest_config(crate::tests::prop_support::config(40))]
        /// Two commits of generated files (the second also replacing and removing some, which
        /// empties directories): each tree equals the one gix's editor computes, `git ls-tree -r`
        /// lists exactly the model's files with their bytes, and `git fsck --strict` is clean.
        #[test]
        fn changed_trees_match_the_editor_and_git(
            first in paths(),
            second in paths(),
            removed in proptest::collection::vec(proptest::prelude::any::<bool>(), 24),
        ) {
            let (_tmp, repo, store) = new_store();
            let mut model: BTreeMap<String, String> = BTreeMap::new();
            // Keep a generated path only when no file is a directory of another.
            let fits = |model: &BTreeMap<String, String>, path: &str| {
                let prefix = format!("{path}/");
                !model.keys().any(|p| {
                    p.starts_with(&prefix) || path.starts_with(&format!("{p}/"))
                })
            };
            for path in first {
                if fits(&model, &path) {
                    model.insert(path.clone(), format!("one {path}\n"));
                }
            }
            let list: Vec<_> = model.iter().collect();
            let base = publish(&store, &list);
            let removals: Vec<String> = model
                .keys()
                .zip(&removed)
                .filter(|(_, r)| **r)
                .map(|(p, _)| p.clone())
                .collect();
            // A path may not cross a file removed in the same commit either.
            let before = model.clone();
            for path in &removals {
                model.remove(path);
            }
            let mut changed = BTreeMap::new();
            for path in second {
                let new_path = !model.contains_key(&path);
                if removals.contains(&path) || new_path && !(fits(&model, &path) && fits(&before, &path)) {
                    continue;
                }
                changed.insert(path.clone(), format!("two {path}\n"));
                model.insert(path.clone(), format!("two {path}\n"));
            }
            let changed = files(&changed.iter().collect::<Vec<_>>());
            let commit = store
                .write_commit_with(Some(base), &changed, &removals, true, "second\n", &sig())
                .unwrap();
            store.update_ref(MAIN, Some(base), commit, "second").unwrap();
            let tree = store.repo.find_commit(commit.0).unwrap().tree_id().unwrap().detach();
            proptest::prop_assert_eq!(tree, editor_tree(&store, base, &changed, &removals));
            let listed = git(&repo, &["ls-tree", "-r", "--name-only", "main"]);
            let listed: Vec<&str> = listed.lines().collect();
            proptest::prop_assert_eq!(listed, model.keys().map(String::as_str).collect::<Vec<_>>());
            for (path, text) in &model {
                proptest::prop_assert_eq!(&git(&repo, &["show", &format!("main:{path}")]), text.trim_end());
            }
            assert_fsck_clean(&repo);
        }
    }

    #[test]
    fn first_commit_with_must_not_exist_then_second_on_top() {
        let (_tmp, repo, store) = new_store();
        assert_eq!(store.tip(MAIN).expect("tip"), None);
        assert_eq!(git(&repo, &["symbolic-ref", "HEAD"]), MAIN);

        let c1 = store
            .write_commit(
                None,
                &files(&[("ledger/v1/layout.json", "{\"layout\":\"fanout\"}\n")]),
                "first\n\nLedger-Digest: abc\n",
                &sig(),
            )
            .expect("write first");
        assert_eq!(
            store.tip(MAIN).expect("tip"),
            None,
            "write_commit moves no ref"
        );
        store
            .update_ref(MAIN, None, c1, "first")
            .expect("create ref");
        assert_eq!(store.tip(MAIN).expect("tip"), Some(c1));
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c1.to_hex());

        let tree1 = git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]);
        assert_eq!(
            git(&repo, &["cat-file", "-p", &c1.to_hex()]),
            format!(
                "tree {tree1}\n\
                 author action-ledger <ledger@invalid> 1700000000 +0000\n\
                 committer action-ledger <ledger@invalid> 1700000000 +0000\n\
                 \n\
                 first\n\
                 \n\
                 Ledger-Digest: abc"
            )
        );

        let c2 = store
            .write_commit(
                Some(c1),
                &files(&[("ledger/v1/events/e1.json", "{\"n\":1}\n")]),
                "second\n",
                &sig(),
            )
            .expect("write second");
        store
            .update_ref(MAIN, Some(c1), c2, "second")
            .expect("move ref");
        assert_eq!(git(&repo, &["rev-parse", MAIN]), c2.to_hex());
        assert_eq!(git(&repo, &["rev-parse", &format!("{c2}^")]), c1.to_hex());
        assert_eq!(git(&repo, &["rev-list", "--count", MAIN]), "2");
        assert_eq!(
            git(&repo, &["ls-tree", "-r", MAIN]),
            format!(
                "100644 blob {}\tledger/v1/events/e1.json\n100644 blob {}\tledger/v1/layout.json",
                git(
                    &repo,
                    &["rev-parse", &format!("{c2}:ledger/v1/events/e1.json")]
                ),
                git(
                    &repo,
                    &["rev-parse", &format!("{c1}:ledger/v1/layout.json")]
                ),
            )
        );
        assert_eq!(
            git(&repo, &["cat-file", "-p", "main:ledger/v1/layout.json"]),
            "{\"layout\":\"fanout\"}"
        );
        assert_fsck_clean(&repo);
    }

    #[test]
    fn nested_paths_and_3000_files_in_one_directory() {
        let (_tmp, repo, store) = new_store();
        let mut batch = vec![("a/b/c.json".to_owned(), b"{\"c\":true}\n".to_vec())];
        for i in 0..3000 {
            batch.push((
                format!("ledger/v1/events/{i:05}.json"),
                format!("{{\"i\":{i}}}\n").into_bytes(),
            ));
        }
        let c1 = store
            .write_commit(None, &batch, "bulk\n", &sig())
            .expect("write");
        store.update_ref(MAIN, None, c1, "bulk").expect("ref");

        let view = store.snapshot(Some(c1)).expect("snapshot");
        assert_eq!(view.commit(), Some(c1));
        assert_eq!(
            view.read("a/b/c.json", 1024).expect("read"),
            Some(b"{\"c\":true}\n".to_vec())
        );
        for i in [0, 1, 1499, 2999] {
            let path = format!("ledger/v1/events/{i:05}.json");
            assert_eq!(
                view.read(&path, 1024).expect("read"),
                Some(format!("{{\"i\":{i}}}\n").into_bytes())
            );
            assert!(view.exists(&path).expect("exists"));
        }
        assert!(!view.exists("ledger/v1/events/03000.json").expect("exists"));

        let events = view.list_files("ledger/v1/events").expect("list");
        let mut expected: Vec<String> = (0..3000)
            .map(|i| format!("ledger/v1/events/{i:05}.json"))
            .collect();
        expected.sort();
        assert_eq!(events, expected);
        let all = view.list_files("").expect("list all");
        assert_eq!(all.len(), 3001);
        assert_eq!(all[0], "a/b/c.json");
        let git_paths = git(&repo, &["ls-tree", "-r", "--name-only", MAIN]);
        assert_eq!(git_paths.lines().collect::<Vec<_>>(), all);
        let modes = git(&repo, &["ls-tree", "-r", MAIN]);
        assert!(modes.lines().all(|l| l.starts_with("100644 blob ")));
        assert_eq!(
            git(
                &repo,
                &["cat-file", "-p", "main:ledger/v1/events/02999.json"]
            ),
            "{\"i\":2999}"
        );

        // One more file in the big directory rewrites only the trees on its path.
        let c2 = publish(&store, &[("ledger/v1/events/03000.json", "{}\n")]);
        let rev = |spec: String| git(&repo, &["rev-parse", &spec]);
        assert_eq!(rev(format!("{c1}:a")), rev(format!("{c2}:a")));
        assert_ne!(
            rev(format!("{c1}:ledger/v1/events")),
            rev(format!("{c2}:ledger/v1/events"))
        );
        assert_eq!(
            store
                .snapshot(Some(c2))
                .expect("snapshot")
                .list_files("ledger/v1/events/")
                .expect("list")
                .len(),
            3001
        );
        assert_fsck_clean(&repo);
    }

    #[test]
    fn write_rejects_conflicts_and_bad_paths_before_writing() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a/b/c.json", "one"), ("x", "x")]);
        let tree1 = git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]);
        let objects_before = git(&repo, &["count-objects"]);

        let write = |list: &[(&str, &str)]| store.write_commit(Some(c1), &files(list), "m", &sig());
        assert!(matches!(
            write(&[("new.json", "n"), ("a/b/c.json", "two")]),
            Err(Error::Conflict { path }) if path == "a/b/c.json"
        ));
        assert!(matches!(
            write(&[("a/b", "file over dir")]),
            Err(Error::DirectoryInTheWay { path }) if path == "a/b"
        ));
        assert!(matches!(
            write(&[("a/b/c.json/d", "under a file")]),
            Err(Error::FileInTheWay { path, file }) if path == "a/b/c.json/d" && file == "a/b/c.json"
        ));
        assert!(matches!(
            write(&[("n/m", "1"), ("n/m/o", "2")]),
            Err(Error::FileInTheWay { path, file }) if path == "n/m/o" && file == "n/m"
        ));
        assert!(matches!(
            write(&[("d", "1"), ("d", "2")]),
            Err(Error::DuplicatePath { path }) if path == "d"
        ));
        for bad in [
            "",
            "/abs",
            "trailing/",
            "a//b",
            "../up",
            "a/./b",
            ".git/config",
            "a/.GIT/x",
        ] {
            assert!(
                matches!(write(&[(bad, "v")]), Err(Error::InvalidPath { ref path, .. }) if path == bad),
                "{bad:?} must be rejected"
            );
        }
        assert!(matches!(
            store.write_commit_with(Some(c1), &files(&[("x", "y")]), &["x".to_owned()], true, "m", &sig()),
            Err(Error::DuplicatePath { path }) if path == "x"
        ));
        let bad_sig = Signature {
            name: "a <b>".to_owned(),
            ..sig()
        };
        assert!(matches!(
            store.write_commit(Some(c1), &files(&[("y", "y")]), "m", &bad_sig),
            Err(Error::InvalidSignature { .. })
        ));
        assert_eq!(
            git(&repo, &["count-objects"]),
            objects_before,
            "nothing written"
        );

        // Identical bytes are unchanged: same tree, and a duplicate with equal bytes is fine.
        let c2 = write(&[("a/b/c.json", "one"), ("x", "x"), ("x", "x")]).expect("replay");
        assert_eq!(git(&repo, &["rev-parse", &format!("{c2}^{{tree}}")]), tree1);
        assert_eq!(store.tip(MAIN).expect("tip"), Some(c1));
    }
}
