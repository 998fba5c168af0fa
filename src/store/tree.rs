//! Tree rules: what a well-formed tree is ([`TreeDefect`], [`tree_defect`]), the decoded tree the
//! snapshot caches, and the checks on paths read or written.
//!
//! Git writes every tree sorted by name (a tree's name compared as if it ended in `/`), each name
//! once, each entry encoded as `<octal mode without leading zeros> <name>\0<20-byte id>`, and no
//! empty, `.`, `..`, `.git` or `/`-containing names. Below `ledger/v1/` and `finality/v1/` the
//! ledger adds one rule: every entry is a tree or a regular file of mode exactly `100644`.
//! Readers look through a defect, as git's own lookups do; writers refuse to build on it.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;

use crate::store::*;

pub(super) fn is_file(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::Blob | EntryKind::BlobExecutable | EntryKind::Link
    )
}

/// Structural checks for any path: '/'-separated, relative, no empty components.
pub(super) fn validate_path(path: &str) -> Result<(), Error> {
    let invalid = |reason| Error::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    if path.is_empty() {
        return Err(invalid(
            "it is empty; pass a path such as ledger/v1/file.json",
        ));
    }
    if path.starts_with('/') || path.ends_with('/') || path.contains("//") {
        return Err(invalid(
            "it has a leading, trailing or doubled '/'; pass a relative path such as a/b.json",
        ));
    }
    if path.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    Ok(())
}

/// Checks for paths that will be written: structure, plus names Git refuses in trees.
pub(super) fn validate_write_path(path: &str) -> Result<(), Error> {
    validate_path(path)?;
    for component in path.split('/') {
        if component == "." || component == ".." {
            return Err(Error::InvalidPath {
                path: path.to_owned(),
                reason: "it has a '.' or '..' component; pass a normalized path",
            });
        }
        if component.eq_ignore_ascii_case(".git") {
            return Err(Error::InvalidPath {
                path: path.to_owned(),
                reason: "it has a '.git' component, which git refuses to check out",
            });
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) kind: EntryKind,
    /// The raw mode (`kind` is derived from it).
    pub(super) mode: Mode,
    pub(super) id: ObjectId,
}

/// One decoded tree: the tree object's bytes, its entries in the tree's order, and the first
/// way in which it is not well-formed. Reads look through a defect (a duplicate name resolves
/// to its last entry, as a map of the entries would); writes refuse to build on it
/// ([`Error::MalformedTree`]).
///
/// Memory: the object's bytes and 12 bytes an entry, no allocation per entry. The snapshot's
/// caches hold many of these: the trees near the root of a fan-out ledger of 100,000 events
/// hold about 200,000 entries, which a map with an owned name per entry kept in about three
/// times the space.
#[derive(Default)]
pub(super) struct Dir {
    /// The tree object: `<octal mode> <name>\0<id>` entries back to back.
    raw: Box<[u8]>,
    /// Each entry's name (offset and length in `raw`; its id follows the name's NUL) and mode,
    /// in the tree's order.
    slots: Vec<Slot>,
    /// The length of an object id in bytes.
    id_len: u8,
    /// Duplicate names or order; the same wherever the tree appears. `None` also means the
    /// slots are strictly in git's order, so a name is found by binary search.
    pub(super) defect: Option<TreeDefect>,
    /// The first entry that is neither a tree nor a `100644` file: a defect only below a ledger
    /// root, and a tree object may appear at several paths.
    pub(super) odd_mode: Option<TreeDefect>,
}

/// Where one entry of a [`Dir`] lies in the tree's bytes, and its mode.
#[derive(Clone, Copy)]
struct Slot {
    name: u32,
    len: u32,
    mode: gix::objs::tree::EntryMode,
}

impl Dir {
    /// Decodes the tree object `raw` (ids of `hash`), noting its first defect.
    ///
    /// # Errors
    /// gix's decoding error when `raw` is not a sequence of tree entries.
    pub(super) fn decode(raw: Vec<u8>, hash: gix::hash::Kind) -> Result<Dir, gix::error::Error> {
        if u32::try_from(raw.len()).is_err() {
            return Err(gix::error::message("a tree object of 4 GiB or more").into());
        }
        let raw = raw.into_boxed_slice();
        let decoded = gix::objs::TreeRef::from_bytes(&raw, hash)?;
        let base = raw.as_ptr() as usize;
        let slots = decoded
            .entries
            .iter()
            .map(|e| Slot {
                // gix borrows the names from `raw`, which is below 4 GiB.
                name: (e.filename.as_ptr() as usize - base) as u32,
                len: e.filename.len() as u32,
                mode: e.mode,
            })
            .collect();
        let defect = raw_tree_defect(&raw, &decoded.entries);
        let odd_mode = odd_mode(&decoded.entries);
        drop(decoded);
        Ok(Dir {
            raw,
            slots,
            id_len: hash.len_in_bytes() as u8,
            defect,
            odd_mode,
        })
    }

    /// The first defect of this tree when it stands at `tree_path`.
    pub(super) fn defect_at(&self, tree_path: &str) -> Option<&TreeDefect> {
        self.defect.as_ref().or(self
            .odd_mode
            .as_ref()
            .filter(|_| under_ledger_root(tree_path)))
    }

    /// The heap bytes this tree holds, beyond the `Dir` itself.
    pub(super) fn heap_bytes(&self) -> usize {
        self.raw.len() + self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    fn name(&self, slot: &Slot) -> &[u8] {
        &self.raw[slot.name as usize..(slot.name + slot.len) as usize]
    }

    fn oid(&self, slot: &Slot) -> &gix::oid {
        let at = (slot.name + slot.len) as usize + 1;
        gix::oid::from_bytes_unchecked(&self.raw[at..at + self.id_len as usize])
    }

    fn entry(&self, slot: &Slot) -> Entry {
        Entry {
            kind: slot.mode.kind(),
            mode: Mode(slot.mode.value()),
            id: self.oid(slot).to_owned(),
        }
    }

    /// The entry named `name`: found by binary search in a well-formed tree (once as a file's
    /// name, once as a tree's, which sorts as if it ended in `/`), by a scan from the end in
    /// a malformed one.
    pub(super) fn get(&self, name: &[u8]) -> Option<Entry> {
        if self.defect.is_some() {
            return self
                .slots
                .iter()
                .rev()
                .find(|s| self.name(s) == name)
                .map(|s| self.entry(s));
        }
        [false, true].into_iter().find_map(|as_tree| {
            let at = self
                .slots
                .binary_search_by(|s| name_order(self.name(s), s.mode.is_tree(), name, as_tree))
                .ok()?;
            // A name ending in `/` sorts as a tree of the name without it.
            let slot = &self.slots[at];
            (slot.mode.is_tree() == as_tree).then(|| self.entry(slot))
        })
    }

    /// Each entry as gix's borrowed entry, in the tree's order.
    pub(super) fn entry_refs(&self) -> impl Iterator<Item = gix::objs::tree::EntryRef<'_>> + '_ {
        self.slots.iter().map(|s| gix::objs::tree::EntryRef {
            mode: s.mode,
            filename: self.name(s).as_bstr(),
            oid: self.oid(s),
        })
    }

    /// The entries' names, each once: in the tree's order for a well-formed tree, sorted for a
    /// malformed one (which may name one twice).
    pub(super) fn names(&self) -> Vec<&[u8]> {
        let mut names: Vec<&[u8]> = self.slots.iter().map(|s| self.name(s)).collect();
        if self.defect.is_some() {
            names.sort_unstable();
            names.dedup();
        }
        names
    }
}

/// Git's order of two entries by name and kind: byte order, a tree's name compared as if it
/// ended in `/`.
fn name_order(a: &[u8], a_tree: bool, b: &[u8], b_tree: bool) -> Ordering {
    let n = a.len().min(b.len());
    a[..n].cmp(&b[..n]).then_with(|| {
        let slash = |tree: bool| if tree { &b"/"[..] } else { &b""[..] };
        a[n..]
            .iter()
            .chain(slash(a_tree))
            .cmp(b[n..].iter().chain(slash(b_tree)))
    })
}

/// How a tree object breaks the rules that git's own trees follow, or the ledger's rule on entry
/// kinds. Git writes every tree sorted by name (a tree's name compared as if it ended in `/`),
/// with each name once; `git fsck` reports the first two as `treeNotSorted` and
/// `duplicateEntries`. Below `ledger/v1/` and `finality/v1/` every entry is a tree or a regular
/// file (mode `100644`): a symbolic link, an executable or a submodule link there is a defect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeDefect {
    /// The same name twice with the same kind of entry.
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// The same name both as a file and as a directory.
    FileDirectoryConflict {
        /// The name used for both.
        name: String,
    },
    /// `name` sorts before the entry in front of it.
    Unsorted {
        /// The first entry out of order.
        name: String,
    },
    /// A name git refuses in a tree (`git fsck`: `emptyName`, `hasDot`, `hasDotdot`,
    /// `hasDotgit`, `fullPathname`): empty, `.`, `..`, `.git` in any case, or containing `/`.
    BadName {
        /// The name, lossily decoded.
        name: String,
    },
    /// Bytes that are not the canonical encoding of the entries they hold, such as a mode with
    /// a leading zero (`040000`; `git fsck`: `zeroPaddedFilemode`). Git writes each tree in
    /// exactly one way, so such a tree was made by another tool and hashes differently from
    /// the same entries written by git.
    NotCanonical {
        /// The first entry whose encoding differs.
        name: String,
    },
    /// An entry that is neither a tree nor a `100644` file below a ledger root.
    Mode {
        /// The entry's name.
        name: String,
        /// Its mode in octal, as git prints it (`120000`, `100755`, `160000`).
        mode: String,
    },
}

impl TreeDefect {
    /// The stable rule name `verify` reports this defect under.
    pub fn rule_name(&self) -> &'static str {
        match self {
            TreeDefect::DuplicateName { .. } => "tree-duplicate-entry",
            TreeDefect::FileDirectoryConflict { .. } => "tree-file-directory-conflict",
            TreeDefect::Unsorted { .. } => "tree-unsorted",
            TreeDefect::BadName { .. } => "tree-bad-name",
            TreeDefect::NotCanonical { .. } => "tree-not-canonical",
            TreeDefect::Mode { .. } => "entry-mode",
        }
    }
}

impl fmt::Display for TreeDefect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TreeDefect::DuplicateName { name } => write!(f, "the entry {name:?} appears twice"),
            TreeDefect::FileDirectoryConflict { name } => {
                write!(f, "{name:?} is both a file and a directory")
            }
            TreeDefect::Unsorted { name } => {
                write!(f, "the entry {name:?} is out of git's sort order")
            }
            TreeDefect::BadName { name } => {
                write!(f, "the entry name {name:?} is not allowed in a git tree")
            }
            TreeDefect::NotCanonical { name } => write!(
                f,
                "the entry {name:?} is not encoded as git encodes it (for example a zero-padded mode)"
            ),
            TreeDefect::Mode { name, mode } => write!(
                f,
                "the entry {name:?} has mode {mode}; only regular files (100644) and trees are allowed"
            ),
        }
    }
}

/// Whether the tree at `path` (relative to the root, no trailing slash) lies at or below a ledger
/// root, where only trees and `100644` files may appear.
pub(super) fn under_ledger_root(path: &str) -> bool {
    ["ledger/v1", "finality/v1"]
        .iter()
        .any(|root| path == *root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/')))
}

/// The first defect of a decoded tree at `path` ([`TreeDefect`]), `None` when it is well-formed.
pub fn tree_defect(entries: &[gix::objs::tree::EntryRef<'_>], path: &str) -> Option<TreeDefect> {
    let name_of = |e: &gix::objs::tree::EntryRef<'_>| e.filename.to_str_lossy().into_owned();
    if let Some(defect) = bad_name(entries) {
        return Some(defect);
    }
    // The common case, a well-formed tree, is proven without allocating: strictly in git's
    // order (so no name appears twice as the same kind) with no name both a file and a tree.
    // Anything else takes the checks below, which name the first defect in entry order.
    let sorted = entries
        .windows(2)
        .all(|pair| git_order(&pair[0], &pair[1]) == Ordering::Less);
    if sorted && !has_file_tree_pair(entries) {
        return under_ledger_root(path).then(|| odd_mode(entries)).flatten();
    }
    if let Some(defect) = repeated_name(entries) {
        return Some(defect);
    }
    for pair in entries.windows(2) {
        if git_order(&pair[0], &pair[1]) != Ordering::Less {
            return Some(TreeDefect::Unsorted {
                name: name_of(&pair[1]),
            });
        }
    }
    if under_ledger_root(path) {
        return odd_mode(entries);
    }
    None
}

/// The first entry whose name git refuses in a tree (empty, `.`, `..`, `.git` in any case, or
/// holding a `/`), as a [`TreeDefect::BadName`].
fn bad_name(entries: &[gix::objs::tree::EntryRef<'_>]) -> Option<TreeDefect> {
    entries
        .iter()
        .find(|e| {
            let name = e.filename.as_bytes();
            name.is_empty()
                || name == b"."
                || name == b".."
                || name.eq_ignore_ascii_case(b".git")
                || name.contains(&b'/')
        })
        .map(|e| TreeDefect::BadName {
            name: e.filename.to_str_lossy().into_owned(),
        })
}

/// The first entry whose name an earlier entry has: a [`TreeDefect::DuplicateName`] when both
/// are the same kind, else a [`TreeDefect::FileDirectoryConflict`].
fn repeated_name(entries: &[gix::objs::tree::EntryRef<'_>]) -> Option<TreeDefect> {
    let mut kinds: HashMap<&[u8], bool> = HashMap::with_capacity(entries.len());
    entries.iter().find_map(|e| {
        let was_tree = kinds.insert(e.filename.as_bytes(), e.mode.is_tree())?;
        let name = e.filename.to_str_lossy().into_owned();
        Some(if was_tree == e.mode.is_tree() {
            TreeDefect::DuplicateName { name }
        } else {
            TreeDefect::FileDirectoryConflict { name }
        })
    })
}

/// Git's order of tree entries ([`name_order`]).
fn git_order(a: &gix::objs::tree::EntryRef<'_>, b: &gix::objs::tree::EntryRef<'_>) -> Ordering {
    name_order(a.filename, a.mode.is_tree(), b.filename, b.mode.is_tree())
}

/// Whether some name of `entries`, which are strictly in [`git_order`], is both a file and a
/// tree. The file sorts where its bare name does, so each tree's name is looked up by binary
/// search.
fn has_file_tree_pair(entries: &[gix::objs::tree::EntryRef<'_>]) -> bool {
    entries.iter().filter(|e| e.mode.is_tree()).any(|tree| {
        let name = tree.filename.as_bytes();
        entries
            .binary_search_by(|e| name_order(e.filename, e.mode.is_tree(), name, false))
            .is_ok()
    })
}

/// The first defect of the tree whose raw bytes are `raw` and entries `entries`: those of
/// [`tree_defect`] (no mode rule), or else bytes that are not git's encoding of the entries.
pub(super) fn raw_tree_defect(
    raw: &[u8],
    entries: &[gix::objs::tree::EntryRef<'_>],
) -> Option<TreeDefect> {
    if let Some(defect) = tree_defect(entries, "") {
        return Some(defect);
    }
    // Git's encoding: the mode in octal without leading zeros, a space, the name, NUL, the id.
    let mut at = 0;
    let mut expected = Vec::new();
    for e in entries {
        expected.clear();
        let _ = write!(expected, "{:o} ", e.mode.value());
        expected.extend_from_slice(e.filename.as_bytes());
        expected.push(0);
        expected.extend_from_slice(e.oid.as_bytes());
        if raw.get(at..at + expected.len()) != Some(expected.as_slice()) {
            return Some(TreeDefect::NotCanonical {
                name: e.filename.to_str_lossy().into_owned(),
            });
        }
        at += expected.len();
    }
    (at != raw.len()).then(|| TreeDefect::NotCanonical {
        name: String::new(),
    })
}

/// The first entry that is neither a tree nor a file of mode exactly `100644` (git also reads
/// the obsolete `100664` as a file; the ledger's rule, like `verify`'s, does not), as a
/// [`TreeDefect::Mode`].
pub(super) fn odd_mode(entries: &[gix::objs::tree::EntryRef<'_>]) -> Option<TreeDefect> {
    entries
        .iter()
        .find(|e| !e.mode.is_tree() && e.mode.value() != 0o100644)
        .map(|e| TreeDefect::Mode {
            name: e.filename.to_str_lossy().into_owned(),
            mode: format!("{:06o}", e.mode.value()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;

    /// Raw tree bytes of `(mode, name, id)` entries, in the order given (git's encoding: octal
    /// mode without leading zeros, a space, the name, NUL, the 20-byte id).
    fn raw_tree(entries: &[(u32, Vec<u8>, ObjectId)]) -> Vec<u8> {
        let mut raw = Vec::new();
        for (mode, name, id) in entries {
            raw.extend_from_slice(format!("{mode:o} ").as_bytes());
            raw.extend_from_slice(name);
            raw.push(0);
            raw.extend_from_slice(id.as_bytes());
        }
        raw
    }

    /// [`tree_defect`] without its allocation-free path: the name rules, every name into a map,
    /// then the order by an allocated key per pair. The model that path must agree with.
    fn model_tree_defect(
        entries: &[gix::objs::tree::EntryRef<'_>],
        path: &str,
    ) -> Option<TreeDefect> {
        let name_of = |e: &gix::objs::tree::EntryRef<'_>| e.filename.to_str_lossy().into_owned();
        if let Some(defect) = bad_name(entries) {
            return Some(defect);
        }
        if let Some(defect) = repeated_name(entries) {
            return Some(defect);
        }
        let key = |e: &gix::objs::tree::EntryRef<'_>| {
            let mut k = e.filename.as_bytes().to_vec();
            if e.mode.is_tree() {
                k.push(b'/');
            }
            k
        };
        for pair in entries.windows(2) {
            if key(&pair[0]) >= key(&pair[1]) {
                return Some(TreeDefect::Unsorted {
                    name: name_of(&pair[1]),
                });
            }
        }
        if under_ledger_root(path) {
            return odd_mode(entries);
        }
        None
    }

    /// Up to 9 `(mode index, name)` pairs of short names over `ab.-`: repeated names, names
    /// that are both a file and a tree, and names that sort apart from their tree (`a`, `a-b`,
    /// `a/`) come up often.
    fn picked_entries() -> impl proptest::strategy::Strategy<Value = Vec<(usize, String)>> {
        proptest::collection::vec(
            (
                0..3usize,
                proptest::string::string_regex("[ab.-]{1,3}").unwrap(),
            ),
            0..10,
        )
    }

    /// Tree entries from generated `(mode index, name)` pairs (a file, a tree, an executable),
    /// each with its own id; sorted in git's order when `sort`.
    fn generated_entries(picked: &[(usize, String)], sort: bool) -> Vec<(u32, Vec<u8>, ObjectId)> {
        let modes = [0o100644u32, 0o40000, 0o100755];
        let mut entries: Vec<(u32, Vec<u8>, ObjectId)> = picked
            .iter()
            .enumerate()
            .map(|(i, (m, name))| {
                let id = ObjectId::from_bytes_or_panic(&[i as u8 + 1; 20]);
                (modes[*m], name.clone().into_bytes(), id)
            })
            .collect();
        if sort {
            entries.sort_by_key(|(mode, name, _)| {
                let mut k = name.clone();
                if *mode == 0o40000 {
                    k.push(b'/');
                }
                k
            });
        }
        entries
    }

    proptest::proptest! {
        #![proptest_config(crate::tests::prop_support::config(256))]

        /// Generated trees, sorted in git's order or not, with repeated names, names that are
        /// both a file and a tree (`a` beside `a-b` and `a/` sort apart) and odd modes: the
        /// defect found is the model's, and a well-formed encoding is never called
        /// non-canonical.
        #[test]
        fn tree_defect_agrees_with_the_plain_model(
            picked in picked_entries(),
            sort in proptest::bool::ANY,
            ledger in proptest::bool::ANY,
        ) {
            let raw = raw_tree(&generated_entries(&picked, sort));
            let tree = gix::objs::TreeRef::from_bytes(&raw, gix::hash::Kind::Sha1).unwrap();
            let path = if ledger { "ledger/v1/x" } else { "other" };
            proptest::prop_assert_eq!(
                tree_defect(&tree.entries, path),
                model_tree_defect(&tree.entries, path)
            );
            proptest::prop_assert_eq!(
                raw_tree_defect(&raw, &tree.entries),
                model_tree_defect(&tree.entries, "")
            );
        }

        /// Generated trees as above, each entry with its own id: a decoded [`Dir`] finds every
        /// name as a map of the entries would (the last entry of a repeated name wins), finds
        /// no other name (a prefix, a longer name, a name with `/` appended), lists each name
        /// once, and hands the entries back as they were written.
        #[test]
        fn a_decoded_tree_answers_as_a_map_of_its_entries(
            picked in picked_entries(),
            sort in proptest::bool::ANY,
        ) {
            let entries = generated_entries(&picked, sort);
            let raw = raw_tree(&entries);
            let dir = Dir::decode(raw.clone(), gix::hash::Kind::Sha1).unwrap();
            let model: HashMap<&[u8], (u32, ObjectId)> = entries
                .iter()
                .map(|(mode, name, id)| (name.as_slice(), (*mode, *id)))
                .collect();
            let mut asked: Vec<Vec<u8>> = Vec::new();
            for (_, name, _) in &entries {
                asked.push(name.clone());
                asked.push(name[..name.len() - 1].to_vec());
                asked.push([name.as_slice(), b"a"].concat());
                asked.push([name.as_slice(), b"/"].concat());
            }
            for name in &asked {
                let found = dir.get(name).map(|e| (u32::from(e.mode.bits()), e.id));
                proptest::prop_assert_eq!(found, model.get(name.as_slice()).copied(), "{:?}", name);
            }
            let mut names = dir.names();
            names.sort_unstable();
            let mut expected: Vec<&[u8]> = model.keys().copied().collect();
            expected.sort_unstable();
            proptest::prop_assert_eq!(names, expected);
            // Written back byte for byte, in the order read (gix's writer asserts git's order,
            // which these trees need not keep).
            let again: Vec<(u32, Vec<u8>, ObjectId)> = dir
                .entry_refs()
                .map(|e| (u32::from(e.mode.value()), e.filename.to_vec(), e.oid.to_owned()))
                .collect();
            proptest::prop_assert_eq!(raw_tree(&again), raw);
        }
    }

    /// A commit on `base` whose tree at `dir` is replaced by `edit` of its entries; the trees
    /// above it are rebuilt well-formed. Written as raw objects, as any tool can.
    fn plant(
        store: &Store,
        base: CommitId,
        dir: &str,
        edit: impl Fn(&mut Vec<(u32, Vec<u8>, ObjectId)>),
    ) -> CommitId {
        let entries_of = |id: ObjectId| -> Vec<(u32, Vec<u8>, ObjectId)> {
            let tree = store.repo.find_tree(id).expect("tree");
            let decoded = tree.decode().expect("decode");
            decoded
                .entries
                .iter()
                .map(|e| (e.mode.value() as u32, e.filename.to_vec(), e.oid.to_owned()))
                .collect()
        };
        let write = |raw: Vec<u8>| -> ObjectId {
            gix::objs::Write::write_buf(&store.repo.objects, gix::objs::Kind::Tree, &raw)
                .expect("write tree")
        };
        // The chain of tree ids from the root down to `dir`.
        let mut chain = vec![store.commit_tree(base).expect("root")];
        let names: Vec<&str> = if dir.is_empty() {
            vec![]
        } else {
            dir.split('/').collect()
        };
        for name in &names {
            let here = entries_of(*chain.last().expect("tree"));
            let (_, _, id) = here
                .iter()
                .find(|(_, n, _)| n == name.as_bytes())
                .expect("path exists");
            chain.push(*id);
        }
        let mut leaf = entries_of(chain.pop().expect("leaf"));
        edit(&mut leaf);
        let mut id = write(raw_tree(&leaf));
        for name in names.iter().rev() {
            let mut parent = entries_of(chain.pop().expect("parent"));
            for entry in parent.iter_mut() {
                if entry.1 == name.as_bytes() {
                    entry.2 = id;
                }
            }
            id = write(raw_tree(&parent));
        }
        let time = "1700000000 +0000";
        let commit = format!(
            "tree {}\nparent {}\nauthor p <p@invalid> {time}\ncommitter p <p@invalid> {time}\n\nplant\n",
            id.to_hex(),
            base.to_hex()
        );
        let commit = gix::objs::Write::write_buf(
            &store.repo.objects,
            gix::objs::Kind::Commit,
            commit.as_bytes(),
        )
        .expect("commit");
        store
            .update_ref(MAIN, Some(base), CommitId(commit), "plant")
            .expect("plant");
        CommitId(commit)
    }

    /// A commit of no changes rewrites the root as it is: on a malformed root it is refused,
    /// not a silent repair into another tree.
    #[test]
    fn a_commit_of_no_changes_refuses_a_malformed_root() {
        let (_tmp, _repo, store) = new_store();
        let base = publish(&store, &[("a", "1"), ("b", "2")]);
        let planted = plant(&store, base, "", |entries| entries.reverse());
        let none: Vec<(String, Vec<u8>)> = Vec::new();
        let err = store
            .write_commit(Some(planted), &none, "nothing\n", &sig())
            .unwrap_err();
        assert!(
            matches!(&err, Error::MalformedTree { path, defect: TreeDefect::Unsorted { .. } } if path.is_empty()),
            "{err}"
        );
        // On a well-formed root it writes the same tree.
        let same = store
            .write_commit(Some(base), &none, "nothing\n", &sig())
            .unwrap();
        assert_eq!(
            store.commit_tree(same).unwrap(),
            store.commit_tree(base).unwrap()
        );
    }

    #[test]
    fn writes_refuse_to_build_on_malformed_trees_at_any_depth() {
        let leaf = "ledger/v1/events/2026/01/15/openclaw-clawsweeper";
        let action = "finality/v1/actions/ab/act_1";
        let layout = [
            (format!("{leaf}/run-1.jsonl"), "{}\n"),
            (format!("{leaf}/run-2.jsonl"), "{}\n"),
            (format!("{action}/record.json"), "{}"),
            ("README".to_owned(), "x"),
            ("tools/run.sh".to_owned(), "x"),
        ];
        let list: Vec<(&str, &str)> = layout.iter().map(|(p, b)| (p.as_str(), *b)).collect();
        let blob = |store: &Store| {
            gix::objs::Write::write_buf(&store.repo.objects, gix::objs::Kind::Blob, b"x")
                .expect("blob")
        };
        type Edit = fn(&mut Vec<(u32, Vec<u8>, ObjectId)>, ObjectId);
        // The name of a tree's first subtree: what a planted file or entry collides with.
        fn subtree_name(entries: &[(u32, Vec<u8>, ObjectId)]) -> Vec<u8> {
            entries
                .iter()
                .find(|x| x.0 == 0o40000)
                .expect("a subtree")
                .1
                .clone()
        }
        let kinds: [(&str, Edit, &str); 7] = [
            (
                "duplicate",
                |e, _| e.push(e[0].clone()),
                "tree-duplicate-entry",
            ),
            (
                "file and directory",
                |e, b| {
                    let dir = subtree_name(e);
                    e.push((0o100644, dir, b));
                },
                "tree-file-directory-conflict",
            ),
            (
                "unsorted",
                |e, b| {
                    e.push((0o100644, b"zz-extra".to_vec(), b));
                    e.reverse();
                },
                "tree-unsorted",
            ),
            (
                "symbolic link",
                |e, b| e.push((0o120000, b"zz-link".to_vec(), b)),
                "entry-mode",
            ),
            (
                "executable",
                |e, b| e.push((0o100755, b"zz-exec".to_vec(), b)),
                "entry-mode",
            ),
            (
                "submodule link",
                |e, b| e.push((0o160000, b"zz-sub".to_vec(), b)),
                "entry-mode",
            ),
            (
                "duplicate far apart",
                |e, b| {
                    let name = subtree_name(e);
                    // "name" as a file sorts before "name-x", the directory after it.
                    let mut other = name.clone();
                    other.extend_from_slice(b"-x");
                    e.push((0o100644, other, b));
                    e.push((0o100644, name, b));
                    e.sort_by(|a, b| {
                        let key = |x: &(u32, Vec<u8>, ObjectId)| {
                            let mut k = x.1.clone();
                            if x.0 == 0o40000 {
                                k.push(b'/');
                            }
                            k
                        };
                        key(a).cmp(&key(b))
                    });
                },
                "tree-file-directory-conflict",
            ),
        ];
        // (tree planted, a path written through it); the unsorted edit needs two entries.
        let places = [
            ("", format!("{leaf}/run-3.jsonl")),
            ("ledger/v1", format!("{leaf}/run-3.jsonl")),
            ("ledger/v1/events/2026/01", format!("{leaf}/run-3.jsonl")),
            ("finality/v1/actions", format!("{action}/claim.json")),
        ];
        for (place, write_path) in &places {
            for (kind, edit, rule) in &kinds {
                let (_tmp, repo, store) = new_store();
                let base = publish(&store, &list);
                let b = blob(&store);
                // Entry-mode defects count only below a ledger root.
                if *rule == "entry-mode" && place.is_empty() {
                    continue;
                }
                let planted = plant(&store, base, place, |e| edit(e, b));
                let err = store
                    .write_commit(Some(planted), &files(&[(write_path, "new")]), "w\n", &sig())
                    .expect_err(&format!("{kind} at {place:?}: refused"));
                match &err {
                    Error::MalformedTree { path, defect } => {
                        assert_eq!(path, place, "{kind}: names the tree");
                        assert_eq!(defect.rule_name(), *rule, "{kind} at {place:?}");
                    }
                    other => panic!("{kind} at {place:?}: expected MalformedTree, got {other:?}"),
                }
                let message = err.to_string();
                assert!(
                    message.contains("verify") && message.contains("git fsck"),
                    "{message}"
                );
                assert_eq!(
                    git(&repo, &["rev-parse", MAIN]),
                    planted.to_hex(),
                    "ref unchanged"
                );
            }
        }
        // Outside the ledger roots, other modes are the repository owner's business.
        let (_tmp, _repo, store) = new_store();
        let base = publish(&store, &list);
        let b = blob(&store);
        let planted = plant(&store, base, "tools", |e| {
            e.push((0o100755, b"run2.sh".to_vec(), b))
        });
        store
            .write_commit(Some(planted), &files(&[("tools/new", "n")]), "w\n", &sig())
            .expect("an executable outside the ledger roots is fine");
    }
}
