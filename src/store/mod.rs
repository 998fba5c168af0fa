//! The Git-native store: the state repository, its objects and its one moving ref.
//!
//! The state repository is an ordinary Git repository, bare or not. Nothing here uses a work tree
//! or an index: a publication writes blobs, edits trees (only the trees on changed paths are
//! rewritten), writes one commit, and moves one ref with a compare-and-swap. Every other module
//! reaches Git through this one: through [`Store`] and [`Snapshot`] (gix, in process), through
//! [`pack`] (our own pack writer over gix's ids and zlib), or through [`remote`] (the `git`
//! program, for fetch and push only, which gix cannot do here). Every writer lands its commits
//! through one loop, [`land()`], on the local ref or a remote's.
//!
//! # Where things are
//!
//! | file | concept |
//! |---|---|
//! | `error.rs` | [`Error`]: every failure, naming the path, ref or object |
//! | `ids.rs` | [`CommitId`], [`BlobId`], [`Mode`] |
//! | `create.rs` | opening or creating a repository ([`Store::open_or_create_bare`]), config edits |
//! | `write.rs` | the write path: [`Signature`], [`Store::write_commit`], loose objects or a pack |
//! | `pack.rs` | one pack and its index for a publication with many objects, blobs as deltas |
//! | `delta.rs` | git's binary delta format and its encoder |
//! | `consolidate.rs` | few packs: geometric roll-up ([`Store::consolidate_packs`]) |
//! | `midx.rs` | the multi-pack index `maintain` writes: one lookup over every pack, kept true beside roll-ups and git |
//! | `tree.rs` | tree rules: [`TreeDefect`], [`tree_defect`], path checks |
//! | `refs.rs` | the commit point: [`Store::tip`], [`Store::update_ref`], ref-lock ownership notes |
//! | `land.rs` | the one landing loop of every writer, local or remote ([`land()`], [`LandOptions`], [`LandError`]): build on the tip, compare-and-swap or leased push, build again on a moved ref, and the roll-up after a landed commit ([`RollUp`]) |
//! | `remote/mod.rs` | the `git` transport: ls-remote, fetch, push with a lease, failure causes, URL redaction, the rewritten-remote check ([`remote::Target`]) |
//! | `remote/many.rs` | several remote refs at once: [`remote::list_refs`], [`remote::fetch_many`], [`remote::push_many`] (a lease per ref, atomic or not), for landing pending publications |
//! | `snapshot.rs` | [`Snapshot`]: cached read view of one commit's tree |
//! | `history.rs` | revisions, ancestry, tree diffs ([`Store::resolve`], [`Store::diff`]) |
//! | `quarantine.rs` | reading a pre-receive hook's quarantined objects ([`Store::with_object_dirs`]) |
//! | `release.rs` | dropping mapped pack pages ([`Store::release_mapped_packs`]; in a process with several stores, asking their owners to open them again, [`Store::mappings_stale`]) and keeping them within [`MAPPED_BUDGET`] ([`Store::bound_mapped_packs`]), the one `unsafe` |
//!
//! # The write path: prepare, then one commit point
//!
//! 1. **Prepare**: [`Store::write_commit`] validates every path against the base tree and against
//!    each other (no file where a directory is needed and vice versa, no existing path with
//!    different bytes, no malformed tree on the way) *before* writing anything. Then it writes the
//!    blobs, the edited trees and one commit whose single parent is the base. A commit of at most
//!    16 objects stays loose (one fsynced file per object); more go into one pack with its
//!    version-2 index ([`pack`]). Every file is written to a temporary name, fsynced, renamed into
//!    place, and its directory fsynced before the call returns ([`crate::durable`]). No ref moves.
//! 2. **Commit point**: [`Store::update_ref`] moves the ref from the tip the commit was built on
//!    to the new commit through a gix ref transaction with
//!    `PreviousValue::MustExistAndMatch(old)` (`MustNotExist` for the first commit). The expected
//!    value is checked while the ref's `<ref>.lock` file is held. The lock, which holds the new
//!    value, is fsynced, then renamed over the ref, so the swap is atomic; then the ref's
//!    directories are fsynced, and only then does the call return (and the caller acknowledge).
//!
//! A lost race is [`Error::RefMoved`] (carrying the expected and the actual value); a lock held
//! by another writer is [`Error::RefLocked`], a different value. Writers do not handle either
//! themselves: [`land()`] re-reads the tip, rebuilds and retries after a lost race, and waits
//! out a held lock. A single attempt waits at most [`REF_LOCK_TIMEOUT`] for the lock.
//!
//! Commits carry one fixed author and committer identity ([`Signature`]: configurable, no
//! person's address), a time injected by the caller (the clock or `SOURCE_DATE_EPOCH`; the store
//! never reads it) at UTC offset `+0000`, and the caller's message. Everything written passes
//! `git fsck --strict`.
//!
//! # Ref-lock ownership
//!
//! A writer of this crate holds an exclusive `flock` on `<ref>.lock` from just after gix creates
//! it until the rename, and notes itself as the owner in `action-ledger/ref-locks/<hex of the ref
//! name>` inside the repository directory: `<pid> <incarnation> <dev>:<ino>:<mtime>\n`, where the
//! incarnation is [`crate::process::process_incarnation`]. A left-over lock is removed only when
//! nobody holds its `flock`, the note names this very lock file, and the noted process is dead
//! (or its PID now names another process). A lock without such a note (git's own writers note
//! nothing, and a writer may die between creating the lock and noting it) is never removed
//! automatically: the error says how to check and remove it. There is no age rule.
//!
//! # What remains on disk after a crash
//!
//! - **Before the ref update** (during or after `write_commit`): the ref still names the old tip.
//!   Blobs, trees and the commit already written are unreachable objects: harmless, invisible to
//!   readers, pruned by `git gc`. Rebuilding writes identical objects again. A temporary pack or
//!   object file may remain; the next pack written removes those whose writer is gone.
//! - **During the ref update**: at most a left-over `<ref>.lock` (and its owner note) remains;
//!   the ref itself holds the old value or the new one (rename is atomic), never a torn value.
//!   Later updates fail with [`Error::RefLocked`] until the lock is provably stale (see above);
//!   then the next writer removes it and goes on.
//! - **After the ref update returned**: the new tip is durable and complete: every object it
//!   reaches, the ref file and the rename were on disk before the call returned.
//!
//! So a crash at any point leaves the old tip or the new one, never a partial publication and
//! never a corrupt ref.
//!
//! # Reads
//!
//! [`Snapshot`] is a read view of one commit's tree. It decodes each tree once and caches it by
//! object id, so repeated lookups in a directory with thousands of entries cost one hash-map
//! probe per path component. Reads look through malformed trees as git does; writes refuse to
//! build on them ([`Error::MalformedTree`]).

mod consolidate;
mod create;
mod delta;
mod error;
mod history;
mod ids;
pub mod land;
mod midx;
pub mod pack;
mod quarantine;
mod refs;
mod release;
pub mod remote;
mod snapshot;
mod test_support;
mod tree;
mod write;

pub use consolidate::{Consolidated, PUBLISH_ROLLUP_MAX, Rollup};
pub use create::{STAGING_GRACE_MILLIS, remove_stale_staging};
pub use error::Error;
pub use history::{Change, MalformedTree, ModedPath, TreeDiff};
pub use ids::{BlobId, CommitId, Mode};
pub use land::{LandError, LandOptions, Landed, RollUp, Step, land};
pub use refs::REF_LOCK_TIMEOUT;
pub use release::{MAPPED_BUDGET, map_large_allocations, release_free_heap, set_mapped_budget};
pub use snapshot::{Descend, Snapshot, Walked};
pub use tree::{TreeDefect, tree_defect};
pub use write::Signature;

use std::fmt;
use std::path::{Path, PathBuf};

use gix::ObjectId;

use crate::durable;
use error::git_err;

/// An open state repository. Holds one `gix` repository handle, opened with only the
/// repository's own configuration; open it once and reuse it for all reads and writes of a run.
pub struct Store {
    repo: gix::Repository,
    /// A private object directory added by [`Store::with_object_dirs`], removed on drop.
    overlay: Option<PathBuf>,
    /// Upper trees decoded by this store's snapshots, shared by the next ones.
    trees: snapshot::SharedTrees,
    /// Whether `repo` reads through git's multi-pack index ([`midx`]).
    multi_pack_index: bool,
    /// With the multi-pack index, the same repository read without it, opened at the first
    /// miss ([`Store::find_object`]; `None` when it did not open).
    without_midx: std::cell::OnceCell<Option<gix::Repository>>,
    /// Counts this store among the live ones until after `repo` (and its pack mappings) is
    /// dropped: declared last, so it drops last ([`release::Alive`]).
    _alive: release::Alive,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("git_dir", &self.repo.git_dir())
            .finish()
    }
}

impl Store {
    /// Open an existing repository (bare, or the work tree / `.git` directory of a non-bare one)
    /// at `path`.
    ///
    /// Only the repository's own configuration is read — no global or system config and no `GIT_*`
    /// environment variables — so results do not depend on the machine.
    ///
    /// # Errors
    /// [`Error::Open`] if `path` is not a Git repository.
    pub fn open(path: &Path) -> Result<Store, Error> {
        let store = Self::open_with(path, true)?;
        if midx::stale(&store.objects_dir().join("pack")) {
            drop(store);
            return Self::open_with(path, false);
        }
        Ok(store)
    }

    /// [`Store::open`], reading the multi-pack index or not ([`midx`]).
    fn open_with(path: &Path, multi_pack_index: bool) -> Result<Store, Error> {
        let alive = release::Alive::new();
        gix::open_opts(path, open_options(multi_pack_index))
            .map(|mut repo| {
                set_delta_cache(&mut repo);
                repo
            })
            .map(|repo| Store {
                repo,
                overlay: None,
                trees: snapshot::SharedTrees::default(),
                multi_pack_index,
                without_midx: std::cell::OnceCell::new(),
                _alive: alive,
            })
            .map_err(|err| Error::Open {
                path: path.to_owned(),
                source: Box::new(err),
            })
    }

    /// The repository's git directory (for a bare repository, the repository itself).
    pub fn git_dir(&self) -> &Path {
        self.repo.common_dir()
    }

    /// Reads object `id`. A store that reads through git's multi-pack index sees only the
    /// packs it names, and gix does not look past it when an object misses; git's maintenance
    /// (`repack -d`, `gc`, `maintenance run`) moves objects into new packs while others read,
    /// so a miss there is read again from the same repository opened without the index
    /// (once per store, at its first miss; a missing object costs that open).
    ///
    /// # Errors
    /// gix's, when the object cannot be read.
    fn find_object(&self, id: ObjectId) -> Result<Option<gix::Object<'_>>, gix::Error> {
        if let Some(object) = self.repo.try_find_object(id)? {
            return Ok(Some(object));
        }
        match self.without_midx() {
            Some(repo) => repo.try_find_object(id),
            None => Ok(None),
        }
    }

    /// [`Self::find_object`] for a tree, reporting a miss as gix's `find_tree` does.
    ///
    /// # Errors
    /// gix's, when the tree cannot be read, is missing or is not a tree.
    fn find_tree(&self, id: ObjectId) -> Result<gix::Tree<'_>, gix::Error> {
        match self.find_object(id)? {
            Some(object) => object.try_into_tree(),
            None => self.repo.find_tree(id),
        }
    }

    /// The repository read without the multi-pack index, when this store reads with it and
    /// it opens (else the miss stands as it is).
    fn without_midx(&self) -> Option<&gix::Repository> {
        if !self.multi_pack_index {
            return None;
        }
        self.without_midx
            .get_or_init(|| {
                let mut repo = gix::open_opts(self.repo.git_dir(), open_options(false)).ok()?;
                set_delta_cache(&mut repo);
                Some(repo)
            })
            .as_ref()
    }

    fn find_commit(&self, id: CommitId) -> Result<gix::Commit<'_>, Error> {
        let object = self
            .find_object(id.0)
            .map_err(git_err("read object", id))?
            .ok_or_else(|| Error::MissingObject { id: id.to_hex() })?;
        if object.kind != gix::objs::Kind::Commit {
            return Err(Error::NotACommit { id: id.to_hex() });
        }
        Ok(object.into_commit())
    }

    fn commit_tree(&self, id: CommitId) -> Result<ObjectId, Error> {
        let commit = self.find_commit(id)?;
        commit
            .tree_id()
            .map(gix::Id::detach)
            .map_err(git_err("read tree of commit", id))
    }

    fn objects_dir(&self) -> PathBuf {
        self.repo.common_dir().join("objects")
    }
}

/// How every repository is opened: only its own configuration, room for the indices of many
/// packs, and the multi-pack index when `multi_pack_index` (it is not when it is stale).
///
/// - Slots: each publication adds a pack, and a long-lived handle re-scans `objects/pack`
///   whenever another publisher's objects are missing; gix holds every index it ever loaded in a
///   fixed set of slots (32 by default), so a busy repository would exhaust them. 8,192 slots
///   cost well under a MiB; past that many packs, `git gc` (which only repacks, safe beside
///   publishers) is due.
/// - `core.multiPackIndex`: a multi-pack index names packs, and goes stale when one of them is
///   removed (by hand, or by a tool racing with `git maintenance`). Git then falls back to the
///   packs' own indices; gix does not, and reads every object the stale index places in a
///   removed pack as missing. [`Store::open`] therefore checks the index first ([`midx`]) and
///   opens without it when it is stale; every pack keeps its own `.idx` (git requires it).
fn open_options(multi_pack_index: bool) -> gix::open::Options {
    let options = gix::open::Options::isolated().object_store_slots(
        gix::odb::store::init::Slots::AsNeededByDiskState {
            multiplier: 2.0,
            minimum: 8192,
        },
    );
    if multi_pack_index {
        options
    } else {
        options.config_overrides(["core.multiPackIndex=false"])
    }
}

/// Objects that a reader keeps once it has built them from deltas, for each handle (every
/// thread's clone has its own): 32 objects, 8 MiB at most.
const DELTA_CACHE_BYTES: usize = 8 << 20;

/// Gives `repo` (and every clone of it) a cache of the objects last built from deltas. Packs
/// store most blobs as deltas against the blob written before them, in chains of up to 3
/// deltas ([`pack`]), and the roll-up stores tree versions as deltas; with the cache, a reader
/// that reads objects about in the order they were written (a tree walk does) builds each from
/// its cached base with one delta, instead of from the chain's whole object through every
/// delta between.
fn set_delta_cache(repo: &mut gix::Repository) {
    repo.objects.set_pack_cache(|| {
        Box::new(gix::odb::pack::cache::lru::StaticLinkedList::<32>::new(
            DELTA_CACHE_BYTES,
        ))
    });
}

fn sync_dir(path: &Path) -> Result<(), Error> {
    durable::sync_dir(path).map_err(|source| Error::Sync {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    #[test]
    fn reads_a_non_bare_repository_written_by_git() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path();
        git(dir, &["init", "--quiet", "--initial-branch=main"]);
        std::fs::create_dir_all(dir.join("data/v1")).expect("mkdir");
        std::fs::write(dir.join("data/v1/x.json"), "{}\n").expect("write");
        git(dir, &["add", "--chmod=+x", "."]);
        git(
            dir,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "-m",
                "m",
            ],
        );
        let head = git(dir, &["rev-parse", "HEAD"]);
        let store = Store::open(dir).expect("open");
        let tip = store.tip(MAIN).expect("tip").expect("exists");
        assert_eq!(tip.to_hex(), head);
        let view = store.snapshot(Some(tip)).expect("snapshot");
        assert_eq!(
            view.read("data/v1/x.json", 3).expect("read"),
            Some(b"{}\n".to_vec())
        );
        // The reflog of a non-bare repository is written with the commit's committer.
        let c2 = publish(
            &store,
            &[("data/v1/y.json", "[]\n"), ("data/v1/x.json", "{}\n")],
        );
        // Re-publishing identical bytes leaves the existing entry (and its mode) alone; outside the
        // ledger roots an executable is the repository owner's business.
        assert!(
            git(dir, &["ls-tree", MAIN, "data/v1/x.json"]).starts_with("100755 blob "),
            "existing entry kept"
        );
        assert_eq!(
            git(dir, &["reflog", "-1", "--format=%H %gs %gn", MAIN]),
            format!("{c2} publish action-ledger")
        );
    }

    #[test]
    fn ids_refs_and_objects_are_validated() {
        let hex = "0123456789abcdef0123456789abcdef01234567";
        let id = CommitId::from_hex(hex).expect("valid");
        assert_eq!(
            (id.to_hex(), id.to_string()),
            (hex.to_owned(), hex.to_owned())
        );
        for bad in [
            "",
            "0123",
            &hex.to_uppercase(),
            &format!("{hex}0"),
            &hex.replace('0', "g"),
        ] {
            assert!(matches!(
                CommitId::from_hex(bad),
                Err(Error::InvalidCommitId { .. })
            ));
        }

        let (_tmp, repo, store) = new_store();
        assert!(matches!(
            store.tip("main"),
            Err(Error::InvalidRefName { .. })
        ));
        assert!(matches!(
            store.tip("refs/heads/a..b"),
            Err(Error::InvalidRefName { .. })
        ));
        assert!(matches!(
            store.snapshot(Some(id)),
            Err(Error::MissingObject { id }) if id == hex
        ));
        let c1 = publish(&store, &[("a", "1")]);
        let tree = CommitId::from_hex(&git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]))
            .expect("hex");
        assert!(matches!(
            store.snapshot(Some(tree)),
            Err(Error::NotACommit { .. })
        ));
        assert!(matches!(
            store.update_ref(MAIN, Some(c1), tree, "m"),
            Err(Error::NotACommit { .. })
        ));
        let not_a_repo = tempfile::tempdir().expect("temp dir");
        std::fs::write(not_a_repo.path().join("file"), "x").expect("write");
        assert!(matches!(
            Store::open(not_a_repo.path()),
            Err(Error::Open { .. })
        ));
        assert!(matches!(
            Store::open_or_init_bare(not_a_repo.path(), MAIN),
            Err(Error::Open { .. })
        ));
    }

    /// git's maintenance packs new objects into a pack the multi-pack index does not name
    /// (here `repack -d` of loose objects) while a store that reads through that index is
    /// open: its reads still find them, and its way past the index reads them too. (What
    /// made gix miss such objects is a race with git's maintenance loop, which
    /// `scripts/e2e-maintenance.sh` runs.)
    #[test]
    fn objects_in_a_pack_the_multi_pack_index_does_not_name_are_found() {
        let (_tmp, repo, first) = new_store();
        publish(&first, &[("a/one.json", "1\n")]);
        git(&repo, &["repack", "-q", "-a", "-d"]);
        git(&repo, &["multi-pack-index", "write"]);
        let reader = Store::open(&repo).expect("open");
        assert!(
            reader.multi_pack_index,
            "opened with the index that names every pack"
        );
        let old = reader.tip(MAIN).expect("tip").expect("a tip");
        assert!(reader.snapshot(Some(old)).is_ok());
        let writer = Store::open(&repo).expect("open");
        let new = publish(&writer, &[("b/two.json", "2\n")]);
        git(&repo, &["repack", "-q", "-d"]);
        assert!(repo.join("objects/pack/multi-pack-index").exists());
        let view = reader.snapshot(Some(new)).expect("the new commit");
        assert_eq!(
            view.read("b/two.json", 100).expect("read"),
            Some(b"2\n".to_vec())
        );
        assert_eq!(reader.parents(new).expect("parents"), vec![old]);
        // The way past the index itself: it reads what the index does not name; a store
        // opened without the index has none.
        let past = reader.without_midx().expect("opened without the index");
        assert!(past.try_find_object(new.0).expect("read").is_some());
        std::fs::remove_file(repo.join("objects/pack/multi-pack-index")).expect("remove");
        let plain = Store::open_with(&repo, false).expect("open");
        assert!(!plain.multi_pack_index && plain.without_midx().is_none());
    }
}
