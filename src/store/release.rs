#![allow(unsafe_code)]
//! Releasing mapped pack pages ([`Store::release_mapped_packs`], [`Store::bound_mapped_packs`])
//! and the free heap ([`release_free_heap`], [`map_large_allocations`]): the one module with
//! `unsafe`.
//!
//! gix maps pack and index files read-only; a walk over most objects of a large repository would
//! otherwise keep every page it touched resident. gix offers no call to drop those pages, so this
//! module advises the kernel directly on the mappings listed in `/proc/self/maps`.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::store::*;

/// The resident file-backed memory of this process (mapped pack and index pages, and the
/// binary's own pages) above which [`Store::bound_mapped_packs`] releases the mapped pack
/// pages: 24 MiB.
///
/// Why 24 and not more: the binary's own pages take about 10 MiB of the measure, and a
/// publish of 100,000 events from ten sources mapped up to 37 MiB of pack pages in each
/// source's roll-up with a budget of 48 MiB, which never released them; with 24 MiB its peak
/// file-backed memory was 24 MiB and its CPU time unchanged, and `verify` of that ledger was as
/// fast.
///
/// Why a budget and not a count of objects read: on kernels that keep files in the page cache
/// as large folios (Linux 6.x; this machine maps about 300 KiB per random touch of a pack of a
/// million-event ledger), one object read can map far more than its own bytes, so a
/// publication of 1,000 events into that ledger kept 120 MiB of pack and index pages
/// resident.
pub const MAPPED_BUDGET: u64 = 24 << 20;

/// The budget in force: [`MAPPED_BUDGET`] unless the process set a larger one
/// ([`set_mapped_budget`]).
static BUDGET: AtomicU64 = AtomicU64::new(MAPPED_BUDGET);

/// Sets this process's budget of resident file-backed memory for
/// [`Store::bound_mapped_packs`], in bytes, at least [`MAPPED_BUDGET`] (a smaller one is
/// raised to it). A process that reads most objects of a repository once (`verify`) trades
/// memory for fewer releases: each release drops every mapped page, and the kernel maps a
/// large folio back on each later touch, so that under the default budget such a walk spends
/// about as much time in the kernel as in its own work.
pub fn set_mapped_budget(bytes: u64) {
    BUDGET.store(bytes.max(MAPPED_BUDGET), Ordering::Relaxed);
}

/// The resident file-backed bytes that the last release left, lowered whenever a look finds
/// less (process-wide, as the mappings are): the part of the budget's measure that releasing
/// cannot drop. See [`over_budget`].
static FLOOR: AtomicU64 = AtomicU64::new(0);

/// Object reads between two looks at the resident file-backed memory
/// ([`Store::bound_mapped_packs`]): reading `/proc/self/statm` costs a few microseconds, an
/// object read from a mapped pack about as much.
const READS_PER_CHECK: u32 = 32;

/// Object reads since the last look (process-wide, as the mappings are).
static READS: AtomicU32 = AtomicU32::new(0);

/// [`Store`]s alive in this process ([`Alive`]).
static LIVE_STORES: AtomicUsize = AtomicUsize::new(0);

/// Releases in progress that discard pages (`MADV_DONTNEED`, [`Store::release_mapped_packs`]).
static DISCARDING: AtomicUsize = AtomicUsize::new(0);

/// The generation of pack mappings: raised by a release in a process with several stores, so
/// that each is opened again ([`Store::mappings_stale`]).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Counts a [`Store`] as alive from before its repository is opened until after it is dropped
/// (the store's last field, so it drops after the repository and its pack mappings): a
/// discarding release runs only while exactly one store is alive ([`Store::release_mapped_packs`]
/// says why).
#[derive(Debug)]
pub(super) struct Alive {
    /// The generation of mappings this store was opened in ([`Store::mappings_stale`]).
    generation: u64,
}

impl Alive {
    pub(super) fn new() -> Alive {
        LIVE_STORES.fetch_add(1, Ordering::SeqCst);
        // A discarding release that counted the stores before this one ends before this store
        // can map anything (and so before it can unmap anything). Either that release sees this
        // store counted, or this store sees the release running (both use SeqCst).
        while DISCARDING.load(Ordering::SeqCst) > 0 {
            std::thread::yield_now();
        }
        Alive {
            generation: GENERATION.load(Ordering::SeqCst),
        }
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        LIVE_STORES.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Store {
    /// Keeps the mapped pack pages within [`MAPPED_BUDGET`]: call it once per object read on a
    /// path that reads many objects (tree lookups, the tree writer, walks, blob reads). Every
    /// 32 calls it reads this process's resident file-backed memory
    /// (Linux: `/proc/self/statm`) and, when that is over the budget and at least half the
    /// budget above what the last release left (pages it could not drop: the binary's own, and
    /// index pages that several of the process's repositories map), releases the mapped pack
    /// pages ([`Store::release_mapped_packs`]). Does nothing on other systems.
    pub fn bound_mapped_packs(&self) {
        if READS.fetch_add(1, Ordering::Relaxed) + 1 < READS_PER_CHECK {
            return;
        }
        READS.store(0, Ordering::Relaxed);
        let Some(resident) = resident_file_bytes() else {
            return;
        };
        let floor = FLOOR.fetch_min(resident, Ordering::Relaxed).min(resident);
        if over_budget(resident, floor, BUDGET.load(Ordering::Relaxed)) {
            self.release_mapped_packs();
            if let Some(left) = resident_file_bytes() {
                FLOOR.store(left, Ordering::Relaxed);
            }
        }
    }

    /// Drops this process's page-table entries for the pack and pack-index files that are
    /// mapped into it, or asks its stores to drop them. A walk over most objects of a large
    /// repository otherwise keeps every pack page it touched resident (1.1 GiB of a
    /// million-event ledger for `verify`). It is an optimization, never needed for correctness.
    ///
    /// How depends on who else could unmap a pack meanwhile. An address range read from
    /// `/proc/self/maps` is only known to be a pack's while nothing unmaps it: once unmapped,
    /// the range can be handed to a new mapping (a heap allocation of another thread), and
    /// `MADV_DONTNEED` on that would zero its memory. gix unmaps a pack when its repository is
    /// dropped or refreshes its pack list; every gix repository of the process is a [`Store`]'s
    /// (its handle, and its way past a multi-pack index, are private; gix is opened nowhere
    /// outside `src/store/`, which `scripts/check.sh` enforces), and a [`Store`] is neither
    /// `Send` nor `Sync`, so:
    ///
    /// - while this is the only live store of the process (the CLI's case), only this thread
    ///   can unmap a pack, and it is here: `MADV_DONTNEED` on each read-only mapping of an
    ///   `objects/pack/*.pack` or `*.idx` file (Linux), which keeps the pages in the page cache
    ///   (the next read faults them back in from memory);
    /// - otherwise (`serve`'s writer, readers and roll-up), it advises nothing: it starts a new
    ///   generation of mappings, and each store's owner opens its store again at its next safe
    ///   point ([`Store::mappings_stale`]), which unmaps the old store's packs and keeps their
    ///   pages in the page cache. Not `MADV_PAGEOUT`, which never changes memory contents but
    ///   evicts the pages from the page cache, so that every later read of them goes to the
    ///   disk (`serve` under load then reads its whole repository again every few seconds).
    ///
    /// Why not open the store again in the one-store case too, which needs no `unsafe`: gix
    /// validates each pack index as it loads it, reading its whole offset table, so opening
    /// again costs time in proportion to the objects of the repository, and a whole-repository
    /// walk releases hundreds of times (the measurement is in the CHANGELOG).
    pub fn release_mapped_packs(&self) {
        #[cfg(target_os = "linux")]
        {
            DISCARDING.fetch_add(1, Ordering::SeqCst);
            let alone = LIVE_STORES.load(Ordering::SeqCst) == 1;
            if !alone {
                DISCARDING.fetch_sub(1, Ordering::SeqCst);
                GENERATION.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
                for (start, end) in maps.lines().filter_map(pack_mapping) {
                    // SAFETY: the range was a whole read-only (`r-`) mapping of a pack file
                    // when the map was read, and nothing can unmap it before this call: this
                    // is the only live store (see above). Its pages were never written, so
                    // MADV_DONTNEED only drops them, the next access faults the same file
                    // bytes back in, and every reference into the mapping stays valid.
                    let _ = unsafe {
                        rustix::mm::madvise(
                            start as *mut std::ffi::c_void,
                            end.saturating_sub(start),
                            rustix::mm::Advice::LinuxDontNeed,
                        )
                    };
                }
            }
            DISCARDING.fetch_sub(1, Ordering::SeqCst);
        }
        #[cfg(not(target_os = "linux"))]
        GENERATION.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether this store's pack mappings are of an older generation than the process's: a
    /// release ([`Store::release_mapped_packs`]) found the mapped pages over the budget while
    /// other stores were alive, and asks every store to be opened again. A process that keeps
    /// several stores open (`serve`) checks this where it owns a store between operations and
    /// opens it again then: dropping a store unmaps its packs, which drops their pages from
    /// the process but not from the page cache. Never true in a process with one store.
    pub fn mappings_stale(&self) -> bool {
        self._alive.generation < GENERATION.load(Ordering::SeqCst)
    }
}

/// Whether `resident` file-backed bytes call for a release, given the `floor` that the last
/// release left and the `budget` in force: above the budget, and above the floor by at least
/// half of it.
///
/// Why the floor: not every resident page can be dropped at once. The binary's own pages are
/// file-backed, and in a process with several stores a release only asks them to be opened
/// again ([`Store::mappings_stale`]): until each owner does, their pages stay mapped. A rule of
/// the budget alone would release again after every 32 reads and drop nothing more; with the
/// floor, a release follows at least half a budget of newly mapped pages.
fn over_budget(resident: u64, floor: u64, budget: u64) -> bool {
    resident > budget && resident > floor.saturating_add(budget / 2)
}

/// Returns the free memory of the heap to the system (glibc: `malloc_trim(0)`, which trims
/// every arena and releases the free pages inside them): call it after dropping the state of a
/// large unit of work whose successor allocates afresh, as publish does between sources and
/// after a source's validation. glibc keeps one arena per thread that allocated (the parallel
/// event checks run on several), and freed memory in them stays resident: a publish of 10
/// sources of 10,000 events each peaked about 30 MiB above the largest source alone without
/// it. Does nothing with other C libraries.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim only returns free heap memory to the kernel; it is thread-safe
        // (it takes each arena's lock) and invalidates no live allocation.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Makes glibc give every allocation of 128 KiB or more a mapping of its own, returned to the
/// system as soon as it is freed (`mallopt(M_MMAP_THRESHOLD, 128 KiB)`), for the rest of the
/// process. Does nothing with other C libraries.
///
/// 128 KiB is glibc's initial threshold, but by default glibc raises it (up to 32 MiB) each time
/// such a mapping is freed; from then on large buffers come from the heap arenas, one per thread
/// that allocated, and their freed pages stay resident between the arenas' live objects. A
/// publish compresses packs and reads spools on worker threads, whose arenas held about 16 MiB
/// each at its peak. Measured on ten sealed spools of 10,000 events published into an empty
/// repository, three alternating runs: peak RSS 131–135 MiB down to 117–118 MiB (123–125 MiB
/// without the trim of the free heap after each source's validation), wall time unchanged and
/// 0.2 s more system time. Not for every command: `verify` of a million events, which reads
/// every shard into a buffer of its own, took 1.8 s more system time (3.1 against 4.9 s) for
/// 10 MiB less.
pub fn map_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        // glibc's <malloc.h>: M_MMAP_THRESHOLD.
        const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
        // SAFETY: mallopt only changes the allocator's parameters, under its own lock; no live
        // allocation is affected (a block is freed as it was allocated).
        let set = unsafe { mallopt(M_MMAP_THRESHOLD, 128 << 10) };
        debug_assert_eq!(set, 1, "glibc refused M_MMAP_THRESHOLD");
    }
}

/// This process's resident file-backed and shared memory in bytes (the third field of
/// `/proc/self/statm`, in pages); `None` where it cannot be read.
fn resident_file_bytes() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(2)?.parse().ok()?;
        Some(pages * rustix::param::page_size() as u64)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The address range of one `/proc/self/maps` line when it is a read-only mapping of a pack
/// or pack index (`objects/pack/*.pack`, `*.idx`, `multi-pack-index`), including one whose file was removed since
/// it was mapped: the kernel then appends ` (deleted)`. Pack consolidation removes the packs it
/// rolled up while gix keeps them mapped, so skipping those would leave every page read from a
/// rolled-up pack resident for the rest of a long run.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn pack_mapping(line: &str) -> Option<(usize, usize)> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms) = (fields.next()?, fields.next()?);
    let path = fields.nth(3).unwrap_or("").trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let is_pack = path.contains("/objects/pack/")
        && (path.ends_with(".pack")
            || path.ends_with(".idx")
            || path.ends_with("/multi-pack-index"));
    if !is_pack || !perms.starts_with("r-") {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    Some((
        usize::from_str_radix(start, 16).ok()?,
        usize::from_str_radix(end, 16).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    /// More than 16 files: a publication of them is written as a pack, which gix maps.
    fn forty_files() -> Vec<(String, String)> {
        (0..40)
            .map(|i| (format!("d{}/f{i}.json", i % 4), format!("content {i}\n")))
            .collect()
    }

    #[test]
    fn mappings_of_packs_are_found_also_after_their_files_were_removed() {
        let line = |perms: &str, path: &str| {
            format!(
                "7f10a0000000-7f10a0200000 {perms} 00000000 fe:01 1234                       {path}"
            )
        };
        let range = Some((0x7f10a0000000, 0x7f10a0200000));
        let pack = "/srv/s.git/objects/pack/pack-0123abcd.pack";
        let idx = "/srv/s.git/objects/pack/pack-0123abcd.idx";
        assert_eq!(pack_mapping(&line("r--s", pack)), range);
        assert_eq!(pack_mapping(&line("r--p", idx)), range);
        let midx = "/srv/s.git/objects/pack/multi-pack-index";
        assert_eq!(pack_mapping(&line("r--s", midx)), range);
        assert_eq!(
            pack_mapping(&line(
                "r--s",
                "/srv/s.git/objects/pack/not-a-multi-pack-index"
            )),
            None
        );
        // Rolled up by consolidation while still mapped.
        assert_eq!(
            pack_mapping(&line("r--s", &format!("{pack} (deleted)"))),
            range
        );
        assert_eq!(
            pack_mapping(&line("r--p", &format!("{idx} (deleted)"))),
            range
        );
        // Not ours to drop: writable, other files, anonymous memory, a malformed line.
        assert_eq!(pack_mapping(&line("rw-p", pack)), None);
        assert_eq!(
            pack_mapping(&line("r--p", "/srv/s.git/objects/pack/pack-1.keep")),
            None
        );
        assert_eq!(pack_mapping(&line("r--p", "/usr/lib/libc.so.6")), None);
        assert_eq!(pack_mapping(&line("r--p", "")), None);
        assert_eq!(pack_mapping("garbage"), None);
    }

    #[test]
    fn file_ids_are_git_blob_ids_and_reads_survive_released_pack_pages() {
        let (_tmp, repo, store) = new_store();
        let files = forty_files();
        let c = publish(&store, &files);
        let view = store.snapshot(Some(c)).expect("snapshot");
        let mut seen = Vec::new();
        view.for_each_file_id("", |path, id| seen.push((path.to_owned(), id)))
            .expect("walk");
        seen.sort();
        assert_eq!(seen.len(), files.len());
        for (path, id) in &seen {
            let git_id = git(&repo, &["rev-parse", &format!("{c}:{path}")]);
            assert_eq!(id.to_string(), git_id, "{path}");
            assert_eq!(view.file_id(path).expect("lookup"), Some(*id));
            let bytes = view.read(path, 1 << 20).expect("read").expect("present");
            assert_eq!(BlobId::of(&bytes).expect("hash"), *id);
        }
        assert_eq!(
            BlobId::of(b"hello\n").expect("hash").to_string(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        store.release_mapped_packs();
        for (path, id) in &seen {
            let again = view
                .read_blob(*id, path, 1 << 20)
                .expect("read after release");
            assert_eq!(BlobId::of(&again).expect("hash"), *id);
        }
        assert_eq!(
            view.file_id("d0")
                .err()
                .map(|e| matches!(e, Error::NotAFile { .. })),
            Some(true)
        );
        assert_eq!(view.file_id("d0/missing.json").expect("lookup"), None);
    }

    /// With another store alive, a release advises nothing and marks every store open now as
    /// stale, so that its owner opens it again; a store opened afterwards is of the new
    /// generation. (Other tests may release meanwhile, which only raises the generation.)
    #[test]
    fn a_release_beside_another_store_marks_the_stores_open_now_as_stale() {
        let (_tmp, repo, store) = new_store();
        let other = Store::open(&repo).expect("second store");
        let files = forty_files();
        let view = store
            .snapshot(Some(publish(&store, &files)))
            .expect("snapshot");
        let before = GENERATION.load(Ordering::SeqCst);
        store.release_mapped_packs();
        assert!(GENERATION.load(Ordering::SeqCst) > before);
        assert!(store.mappings_stale() && other.mappings_stale());
        // Nothing was advised: the mapped pages still read the same bytes.
        for (path, content) in &files {
            let bytes = view.read(path, 1 << 20).expect("read").expect("present");
            assert_eq!(bytes, content.as_bytes(), "{path}");
        }
        drop(view);
        drop(other);
        let fresh = Store::open(&repo).expect("open again");
        assert!(fresh._alive.generation > before);
    }

    /// A release is due above the budget, and only when the pages mapped since the last release
    /// are at least half the budget: a floor that releasing cannot lower does not make every
    /// look release again.
    #[test]
    fn a_release_is_due_above_the_budget_and_half_a_budget_above_the_floor() {
        const MIB: u64 = 1 << 20;
        const B: u64 = MAPPED_BUDGET;
        assert_eq!(B, 24 * MIB);
        // Nothing left by a release (or only the binary's pages): the budget alone decides.
        assert!(!over_budget(B, 0, B));
        assert!(over_budget(B + 1, 0, B));
        assert!(over_budget(B + MIB, 10 * MIB, B));
        // A release left 60 MiB it could not drop: the next one at more than 72 MiB.
        assert!(!over_budget(61 * MIB, 60 * MIB, B));
        assert!(!over_budget(72 * MIB, 60 * MIB, B));
        assert!(over_budget(72 * MIB + 1, 60 * MIB, B));
        assert!(!over_budget(u64::MAX, u64::MAX, B));
        // A larger budget moves both bounds.
        assert!(!over_budget(100 * MIB, 0, 128 * MIB));
        assert!(over_budget(128 * MIB + 1, 0, 128 * MIB));
        assert!(!over_budget(128 * MIB + 1, 100 * MIB, 128 * MIB));
    }

    /// The budget check reads this process's file-backed resident memory (the binary's own
    /// pages are file-backed, so it is never zero), and looking at it between reads changes
    /// nothing they return.
    #[test]
    #[cfg(target_os = "linux")]
    fn the_budget_check_reads_resident_file_memory_and_keeps_reads_intact() {
        assert!(resident_file_bytes().is_some_and(|b| b > 0));
        let (_tmp, _repo, store) = new_store();
        let files = forty_files();
        let view = store
            .snapshot(Some(publish(&store, &files)))
            .expect("snapshot");
        for _ in 0..3 {
            for (path, content) in &files {
                for _ in 0..READS_PER_CHECK {
                    store.bound_mapped_packs();
                }
                let bytes = view.read(path, 1 << 20).expect("read").expect("present");
                assert_eq!(bytes, content.as_bytes(), "{path}");
            }
        }
    }
}
