//! Reading a pushed range before git accepts it. `git receive-pack` keeps pushed objects in a
//! quarantine directory (`GIT_QUARANTINE_PATH`, listed in `GIT_ALTERNATE_OBJECT_DIRECTORIES`)
//! until the pre-receive hook accepts them; [`Store::with_object_dirs`] reads through a private
//! object directory (in a scratch directory the caller names, removed when the [`Store`] is
//! dropped) whose `info/alternates` lists those directories and the repository's own objects.

use std::path::{Path, PathBuf};

use crate::store::*;

impl Store {
    /// Also reads objects from `dirs` (object directories), as `git receive-pack` requires of a
    /// pre-receive hook: pushed objects wait in a quarantine directory until the hook accepts
    /// them. Builds a private object directory whose `info/alternates` names `dirs` and the
    /// repository's own objects, and reads through it. Writes are not expected afterwards.
    /// The private directory is made, under a fresh random name, in `scratch` (the caller's
    /// temporary directory: the library reads no environment), and removed with the store.
    ///
    /// # Errors
    /// [`Error::Open`] when the overlay cannot be set up.
    pub fn with_object_dirs(mut self, dirs: &[PathBuf], scratch: &Path) -> Result<Store, Error> {
        if dirs.is_empty() {
            return Ok(self);
        }
        let git_dir = self.repo.git_dir().to_owned();
        let open_err = |e: std::io::Error| Error::Open {
            path: git_dir.clone(),
            source: Box::new(e),
        };
        let name = crate::random::hex16().map_err(|e| open_err(e.0))?;
        let overlay = scratch.join(format!("action-ledger-objects-{name}"));
        // Made here, not found: a directory of that name already there is refused.
        std::fs::create_dir(&overlay).map_err(open_err)?;
        // From here on the store owns it, and removes it when dropped.
        self.overlay = Some(overlay.clone());
        std::fs::create_dir(overlay.join("info")).map_err(open_err)?;
        let own = self.repo.common_dir().join("objects");
        let mut lines = String::new();
        for dir in dirs.iter().chain([&own]) {
            let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            lines.push_str(&abs.to_string_lossy());
            lines.push('\n');
        }
        std::fs::write(overlay.join("info/alternates"), lines).map_err(open_err)?;
        let handle = gix::odb::at(&overlay, self.repo.object_hash()).map_err(open_err)?;
        self.repo.objects = gix::OdbHandle::new(handle, self.repo.object_hash());
        Ok(self)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(overlay) = self.overlay.take() {
            let _ = std::fs::remove_dir_all(overlay);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::*;
    use crate::store::*;

    /// Objects found only through the added directories are read through them, also after
    /// a release of the mapped pack pages; the private object directory lives in the scratch
    /// directory given and is removed with the store.
    #[test]
    fn objects_of_the_added_directories_stay_readable_after_a_release() {
        let (tmp, repo, _store) = new_store();
        let (_other_tmp, other, other_store) = new_store();
        let files: Vec<(String, String)> = (0..40)
            .map(|i| (format!("q{}/f{i}.json", i % 3), format!("pushed {i}\n")))
            .collect();
        let commit = publish(&other_store, &files);
        assert!(
            Store::open(&repo)
                .expect("open")
                .snapshot(Some(commit))
                .is_err()
        );

        let store = Store::open(&repo)
            .and_then(|s| s.with_object_dirs(&[other.join("objects")], tmp.path()))
            .expect("overlay");
        for _ in 0..2 {
            let view = store
                .snapshot(Some(commit))
                .expect("snapshot through the overlay");
            for (path, content) in &files {
                let bytes = view.read(path, 1 << 20).expect("read").expect("present");
                assert_eq!(bytes, content.as_bytes(), "{path}");
            }
            drop(view);
            store.release_mapped_packs();
        }
        // The private directory is in the scratch directory named, and goes with the store.
        let overlays = || {
            std::fs::read_dir(tmp.path())
                .expect("scratch")
                .filter(|e| {
                    let name = e.as_ref().expect("entry").file_name();
                    name.to_string_lossy().starts_with("action-ledger-objects-")
                })
                .count()
        };
        assert_eq!(overlays(), 1);
        drop(store);
        assert_eq!(overlays(), 0);
    }
}
