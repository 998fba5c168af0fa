//! The safe file layer (ledger-core §9, runtime §3.1): bounded reads that refuse links and
//! special files, and create-only writes that never expose a partial file.
//!
//! Create-only write: write a staging sibling `<name>.<pid>.<nonce>.tmp` (exclusive create, mode
//! 0600), fsync it, hard-link it to the final name (an existing name is reported, never replaced),
//! fsync the directory, remove the staging file. A crash leaves at most a stray `*.tmp`, which
//! readers ignore because it does not end in `.json` / `.jsonl`.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// File-layer failures, each naming the path and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{label} file exceeds {max} byte limit: {path}")]
    TooLarge {
        label: String,
        max: u64,
        path: PathBuf,
    },
    #[error("invalid UTF-8 in {label} file: {path}")]
    Utf8 { label: String, path: PathBuf },
    #[error("refusing symbolic link or non-regular file for {label}: {path}")]
    NotRegular { label: String, path: PathBuf },
    #[error("refusing changed {label} file: {path}")]
    Changed { label: String, path: PathBuf },
    #[error("refusing unsafe relative path for {label}: {rel}")]
    UnsafeRelative { label: String, rel: String },
    #[error("refusing symbolic link or junction for {label}: {path}")]
    LinkInPath { label: String, path: PathBuf },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Reads a regular file of at most `max` bytes as UTF-8. `Ok(None)` when it does not exist.
/// Refuses links, non-regular files, a file swapped between lstat and open, oversize and
/// invalid UTF-8. `label` names the kind of file in messages (e.g. "action event").
pub fn read_text(path: &Path, max: u64, label: &str) -> Result<Option<String>, Error> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("cannot inspect", path)(e)),
    };
    if !meta.file_type().is_file() {
        return Err(Error::NotRegular {
            label: label.to_owned(),
            path: path.to_owned(),
        });
    }
    let file = fs::File::open(path).map_err(io("cannot open", path))?;
    let opened = file.metadata().map_err(io("cannot inspect", path))?;
    if opened.dev() != meta.dev() || opened.ino() != meta.ino() {
        return Err(Error::Changed {
            label: label.to_owned(),
            path: path.to_owned(),
        });
    }
    let too_large = || Error::TooLarge {
        label: label.to_owned(),
        max,
        path: path.to_owned(),
    };
    if opened.len() > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(opened.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(io("cannot read", path))?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    String::from_utf8(bytes).map(Some).map_err(|_| Error::Utf8 {
        label: label.to_owned(),
        path: path.to_owned(),
    })
}

/// Lists a directory without following links: `(name, kind)` sorted by name, where kind is
/// `Dir`, `File` or `Other` (links, sockets, …). Missing directory → `Ok(None)`.
pub fn list_dir(dir: &Path) -> Result<Option<Vec<(String, EntryKind)>>, Error> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("cannot list", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(io("cannot list", dir))?;
        let ft = entry
            .file_type()
            .map_err(io("cannot inspect", &entry.path()))?;
        let kind = if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        };
        out.push((entry.file_name().to_string_lossy().into_owned(), kind));
    }
    out.sort();
    Ok(Some(out))
}

/// What a directory entry is, without following links.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    Dir,
    File,
    Other,
}

/// Outcome of [`write_create_only`].
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Created,
    /// The name already existed; its current content (read back, bounded by the caller's max).
    Exists,
}

fn checked_relative(rel: &str, label: &str) -> Result<(), Error> {
    let bad = rel.is_empty()
        || rel.starts_with('/')
        || rel.contains('\\')
        || rel
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..");
    if bad {
        return Err(Error::UnsafeRelative {
            label: label.to_owned(),
            rel: rel.to_owned(),
        });
    }
    Ok(())
}

static NONCE: AtomicU64 = AtomicU64::new(0);

/// Create-only write of `bytes` at `root/rel` (`rel` uses `/`). Parents are created one at a
/// time and must be real directories; the final name is never replaced. Returns
/// [`Written::Exists`] when the name already exists, so the caller applies its equality rule.
pub fn write_create_only(
    root: &Path,
    rel: &str,
    bytes: &[u8],
    label: &str,
) -> Result<Written, Error> {
    checked_relative(rel, label)?;
    let mut dir = root.to_path_buf();
    let segments: Vec<&str> = rel.split('/').collect();
    let (name, parents) = segments.split_last().expect("non-empty relative path");
    for seg in parents {
        dir.push(seg);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(Error::LinkInPath {
                    label: label.to_owned(),
                    path: dir,
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match fs::create_dir(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io("cannot create directory", &dir)(e)),
                }
                sync_dir(dir.parent().unwrap_or(root))?;
            }
            Err(e) => return Err(io("cannot inspect", &dir)(e)),
        }
    }
    let target = dir.join(name);
    let nonce = NONCE.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let staging = dir.join(format!(
        "{name}.{}.{nanos:08x}{nonce:04x}.tmp",
        std::process::id()
    ));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&staging)
        .map_err(io("cannot create", &staging))?;
    let result = (|| {
        file.write_all(bytes)
            .map_err(io("cannot write", &staging))?;
        file.sync_all().map_err(io("cannot sync", &staging))?;
        match fs::hard_link(&staging, &target) {
            Ok(()) => {
                sync_dir(&dir)?;
                Ok(Written::Created)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Written::Exists),
            Err(e) => Err(io("cannot link", &target)(e)),
        }
    })();
    let _ = fs::remove_file(&staging);
    result
}

/// fsync a directory so that a new name in it survives a crash.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("cannot sync directory", dir))
}

/// An absolute, normalized form of `path` for use as a root (resolves `.`/`..` lexically against
/// the current directory, then resolves links with `canonicalize` when the path exists).
pub fn absolute_root(path: &Path) -> Result<PathBuf, Error> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io("cannot read current directory", path))?
            .join(path)
    };
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    match fs::canonicalize(&out) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(out),
        Err(e) => Err(io("cannot resolve", &out)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_only_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let w = write_create_only(dir.path(), "a/b/c.json", b"one\n", "test").unwrap();
        assert_eq!(w, Written::Created);
        let w = write_create_only(dir.path(), "a/b/c.json", b"two\n", "test").unwrap();
        assert_eq!(w, Written::Exists);
        let text = read_text(&dir.path().join("a/b/c.json"), 100, "test").unwrap();
        assert_eq!(text.as_deref(), Some("one\n"));
        let names = list_dir(&dir.path().join("a/b")).unwrap().unwrap();
        assert_eq!(names, vec![("c.json".to_owned(), EntryKind::File)]);
    }

    #[test]
    fn refuses_unsafe_inputs() {
        let dir = tempfile::tempdir().unwrap();
        for rel in ["", "/abs", "a/../b", "a//b", "./a", "a\\b"] {
            assert!(matches!(
                write_create_only(dir.path(), rel, b"x", "test"),
                Err(Error::UnsafeRelative { .. })
            ));
        }
        fs::write(dir.path().join("big"), vec![b'a'; 11]).unwrap();
        assert!(matches!(
            read_text(&dir.path().join("big"), 10, "test"),
            Err(Error::TooLarge { max: 10, .. })
        ));
        std::os::unix::fs::symlink(dir.path().join("big"), dir.path().join("link")).unwrap();
        assert!(matches!(
            read_text(&dir.path().join("link"), 100, "test"),
            Err(Error::NotRegular { .. })
        ));
        fs::write(dir.path().join("bad"), [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_text(&dir.path().join("bad"), 100, "test"),
            Err(Error::Utf8 { .. })
        ));
        std::os::unix::fs::symlink(dir.path(), dir.path().join("dirlink")).unwrap();
        assert!(matches!(
            write_create_only(dir.path(), "dirlink/x", b"x", "test"),
            Err(Error::LinkInPath { .. })
        ));
        assert_eq!(
            read_text(&dir.path().join("missing"), 1, "t").unwrap(),
            None
        );
    }
}
