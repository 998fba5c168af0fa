#![allow(unsafe_code)]
//! Releasing mapped pack pages ([`Store::release_mapped_packs`]): the one module with `unsafe`.
//!
//! gix maps pack and index files read-only; a walk over most objects of a large repository would
//! otherwise keep every page it touched resident. gix offers no call to drop those pages, so this
//! module advises the kernel directly on the mappings listed in `/proc/self/maps`.

use crate::store::*;

impl Store {
    /// Drops this process's page-table entries for the pack and pack-index files that are
    /// mapped into it (Linux: `madvise(MADV_DONTNEED)` on each read-only mapping of an
    /// `objects/pack/*.pack` or `*.idx` file listed in `/proc/self/maps`). The pages stay in
    /// the page cache and fault back in on the next read, so only resident memory changes: a
    /// walk over most objects of a large repository otherwise keeps every pack page it touched
    /// resident (1.1 GiB of a million-event ledger for `verify`). Does nothing on other
    /// systems or when the map cannot be read; it is an optimization, never needed for
    /// correctness.
    pub fn release_mapped_packs(&self) {
        #[cfg(target_os = "linux")]
        {
            let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
                return;
            };
            for (start, end) in maps.lines().filter_map(pack_mapping) {
                // SAFETY: the range is a whole read-only (`r-`) mapping of a pack file that
                // this process made (gix maps packs and indices with PROT_READ). Its pages can
                // never have been written, so MADV_DONTNEED only unmaps them: the next access
                // faults the same file bytes back in, and every reference into the mapping
                // stays valid and sees unchanged data.
                let _ = unsafe {
                    rustix::mm::madvise(
                        start as *mut std::ffi::c_void,
                        end.saturating_sub(start),
                        rustix::mm::Advice::LinuxDontNeed,
                    )
                };
            }
        }
    }
}

/// The address range of one `/proc/self/maps` line when it is a read-only mapping of a pack
/// or pack index (`objects/pack/*.pack`, `*.idx`), including one whose file was removed since
/// it was mapped: the kernel then appends ` (deleted)`. Pack consolidation removes the packs it
/// rolled up while gix keeps them mapped, so skipping those would leave every page read from a
/// rolled-up pack resident for the rest of a long run.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn pack_mapping(line: &str) -> Option<(usize, usize)> {
    let mut fields = line.splitn(6, ' ');
    let (range, perms) = (fields.next()?, fields.next()?);
    let path = fields.nth(3).unwrap_or("").trim_start();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    let is_pack =
        path.contains("/objects/pack/") && (path.ends_with(".pack") || path.ends_with(".idx"));
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
        // More than 16 objects: the publication is written as a pack, which gix maps.
        let files: Vec<(String, String)> = (0..40)
            .map(|i| (format!("d{}/f{i}.json", i % 4), format!("content {i}\n")))
            .collect();
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
}
