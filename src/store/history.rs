//! History: resolving revisions as `git rev-parse` does, parents and ancestry, and file-level
//! diffs between two commits' trees that read only the subtrees whose ids differ (the cost follows
//! the size of the change, not of the repository).

use gix::ObjectId;
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;

use super::error::git_err;
use super::tree::{Dir, Entry, is_file};
use crate::store::*;

/// A path with the mode of its entry ([`Store::diff_with_modes`]).
pub type ModedPath = (String, Mode);

/// What happened to one file path between two trees ([`Store::diff`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A file only in the new tree.
    Added(String),
    /// A file in both, with other content or kind.
    Modified(String),
    /// A file only in the old tree.
    Deleted(String),
}

impl Change {
    /// The path the change is about.
    pub fn path(&self) -> &str {
        match self {
            Change::Added(p) | Change::Modified(p) | Change::Deleted(p) => p,
        }
    }
}

impl Store {
    /// Resolves a revision to a commit with gix's rev-spec parser, which reads what
    /// `git rev-parse` reads: full or abbreviated commit ids, `HEAD`, full ref names, short
    /// branch, tag and remote-tracking names (`main`, `v1`, `origin/main`), ancestry (`~N`,
    /// `^N`) and peeling (`^{commit}`); an annotated tag is peeled to its commit.
    ///
    /// # Errors
    /// [`Error::NoLedger`] when `rev` names a ref that does not exist yet (an unborn `HEAD`,
    /// or a full ref name, or the short name of the ref an unborn `HEAD` points at),
    /// [`Error::UnknownRevision`] when nothing else matches, [`Error::NotACommit`] when it
    /// names another kind of object, [`Error::Git`].
    pub fn resolve(&self, rev: &str) -> Result<CommitId, Error> {
        let id = match self.repo.rev_parse_single(rev) {
            Ok(id) => id,
            Err(e) => {
                if let Some(ref_name) = self.unborn_ref(rev)? {
                    return Err(Error::NoLedger {
                        rev: rev.to_owned(),
                        ref_name,
                    });
                }
                // The deepest cause that is a sentence says most ("Reference \"x\" could not
                // be found", "… ancestor number 5 is out of range").
                let mut reason = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    let text = c.to_string();
                    if text.contains(' ') {
                        reason = text;
                    }
                    cause = c.source();
                }
                return Err(Error::UnknownRevision {
                    rev: rev.to_owned(),
                    reason,
                });
            }
        };
        let object = id.object().map_err(git_err("read object", rev))?;
        let commit = object.peel_to_commit().map_err(|_| Error::NotACommit {
            id: id.detach().to_hex().to_string(),
        })?;
        Ok(CommitId(commit.id))
    }

    /// The commit at the tip of the ledger ref `ref_name` (a full name such as
    /// `refs/heads/main`, the ref `publish --ref` writes), read by that exact name: not through
    /// `HEAD`, which may name another branch, and not by rev-parse's search of short names.
    /// An annotated tag there is peeled to its commit.
    ///
    /// # Errors
    /// [`Error::NoLedger`] when the ref does not exist (nothing was published to it),
    /// [`Error::InvalidRefName`], [`Error::SymbolicRef`], [`Error::NotACommit`], [`Error::Git`].
    pub fn resolve_ledger(&self, ref_name: &str) -> Result<CommitId, Error> {
        match self.tip(ref_name)? {
            None => Err(Error::NoLedger {
                rev: ref_name.to_owned(),
                ref_name: ref_name.to_owned(),
            }),
            Some(id) => {
                let object = self
                    .repo
                    .find_object(id.0)
                    .map_err(git_err("read object", ref_name))?;
                let commit = object
                    .peel_to_commit()
                    .map_err(|_| Error::NotACommit { id: id.to_hex() })?;
                Ok(CommitId(commit.id))
            }
        }
    }

    /// The full names of at most `limit` refs of the repository (`HEAD` excepted), in the
    /// order the ref store lists them (loose and packed alike): to say which refs exist when
    /// the one asked for does not.
    ///
    /// # Errors
    /// [`Error::Git`] when the refs cannot be listed.
    pub fn ref_names(&self, limit: usize) -> Result<Vec<String>, Error> {
        let failed = |e: Box<dyn std::error::Error + Send + Sync>| Error::Git {
            action: "list refs",
            subject: "refs/".to_owned(),
            source: e,
        };
        let platform = self.repo.references().map_err(|e| failed(Box::new(e)))?;
        let all = platform.all().map_err(|e| failed(Box::new(e)))?;
        let mut names = Vec::new();
        for r in all {
            if names.len() >= limit {
                break;
            }
            let r = r.map_err(|e| failed(Box::new(e)))?;
            names.push(r.name().as_bstr().to_string());
        }
        Ok(names)
    }

    /// The full name of the ref that `rev` names (before any `~`, `^` or `@{`) when that ref
    /// does not exist: `HEAD` or `@` while `HEAD` is unborn, a full `refs/...` name, or the
    /// short name of the ref an unborn `HEAD` points at.
    fn unborn_ref(&self, rev: &str) -> Result<Option<String>, Error> {
        let base = &rev[..rev.find(['~', '^', ':']).unwrap_or(rev.len())];
        let base = base.split("@{").next().unwrap_or(base);
        let exists = |name: &str| -> Result<bool, Error> {
            Ok(self
                .repo
                .try_find_reference(name)
                .map_err(git_err("read ref", name))?
                .is_some())
        };
        let head = self
            .repo
            .head_name()
            .map_err(git_err("read ref", "HEAD"))?
            .map(|n| n.as_bstr().to_string());
        let unborn_head = match &head {
            Some(target) => !exists(target)?,
            None => false,
        };
        Ok(match (base, head) {
            ("HEAD" | "@" | "", Some(target)) if unborn_head => Some(target),
            (name, _) if name.starts_with("refs/") && !exists(name)? => Some(name.to_owned()),
            (name, Some(target)) if unborn_head && target.rsplit('/').next() == Some(name) => {
                Some(target)
            }
            _ => None,
        })
    }

    /// The parents of a commit, in order.
    ///
    /// # Errors
    /// [`Error::MissingObject`], [`Error::NotACommit`], [`Error::Git`].
    pub fn parents(&self, id: CommitId) -> Result<Vec<CommitId>, Error> {
        let object = self
            .find_object(id.0)
            .map_err(git_err("read commit", &id.to_hex()))?
            .ok_or_else(|| Error::MissingObject { id: id.to_hex() })?;
        let commit = object
            .try_into_commit()
            .map_err(|_| Error::NotACommit { id: id.to_hex() })?;
        Ok(commit.parent_ids().map(|p| CommitId(p.detach())).collect())
    }

    /// The message of a commit, as stored (bytes that are not UTF-8 replaced).
    ///
    /// # Errors
    /// [`Error::MissingObject`], [`Error::NotACommit`], [`Error::Git`].
    pub fn message(&self, id: CommitId) -> Result<String, Error> {
        let commit = self.find_commit(id)?;
        let message = commit
            .message_raw()
            .map_err(git_err("read message of", id))?;
        Ok(String::from_utf8_lossy(message).into_owned())
    }

    /// Whether `ancestor` is `descendant` or one of its ancestors: for a commit written before
    /// a compare-and-swap whose outcome is unknown (a kill fell in between), whether it landed.
    ///
    /// Walks back from `descendant` through every parent, and never below `ancestor`'s own
    /// parents, which cannot have `ancestor` among their ancestors: asked of a commit planned
    /// on a recent tip, the walk costs the commits landed since, not the history. An
    /// `ancestor` absent from the repository is no ancestor.
    ///
    /// # Errors
    /// As [`Store::parents`], for a commit of `descendant`'s history (or `ancestor`) that cannot
    /// be read.
    pub fn is_ancestor(&self, ancestor: CommitId, descendant: CommitId) -> Result<bool, Error> {
        if ancestor == descendant {
            return Ok(true);
        }
        let floor: std::collections::HashSet<CommitId> = match self.parents(ancestor) {
            Ok(parents) => parents.into_iter().collect(),
            Err(Error::MissingObject { .. }) => return Ok(false),
            Err(e) => return Err(e),
        };
        let mut seen = std::collections::HashSet::new();
        let mut queue = std::collections::VecDeque::from([descendant]);
        while let Some(id) = queue.pop_front() {
            if id == ancestor {
                return Ok(true);
            }
            if !floor.contains(&id) && seen.insert(id) {
                queue.extend(self.parents(id)?);
            }
        }
        Ok(false)
    }

    /// File-level changes from the tree of `old` (`None` = empty) to the tree of `new`, below
    /// `prefix` (`""` = everything). Only subtrees whose ids differ are read, so the cost follows
    /// the size of the change, not of the repository. Sorted by path.
    ///
    /// # Errors
    /// [`Error::Git`] when a tree cannot be read.
    pub fn diff(
        &self,
        old: Option<CommitId>,
        new: CommitId,
        prefix: &str,
    ) -> Result<Vec<Change>, Error> {
        Ok(self.diff_with_modes(old, new, prefix)?.changes)
    }

    /// [`Store::diff`], and every entry below `prefix` that is new or changed in `new` (content
    /// or mode) and is neither a directory nor a plain `100644` file: symbolic links,
    /// executable files, submodules (which [`Change`] does not list, as they are not files),
    /// with their modes, sorted by path.
    ///
    /// # Errors
    /// As [`Store::diff`].
    pub fn diff_with_modes(
        &self,
        old: Option<CommitId>,
        new: CommitId,
        prefix: &str,
    ) -> Result<TreeDiff, Error> {
        let old_snap = self.snapshot(old)?;
        let new_snap = self.snapshot(Some(new))?;
        let locate = |snap: &Snapshot<'_>| -> Result<Option<ObjectId>, Error> {
            if prefix.is_empty() {
                return Ok(snap.root);
            }
            Ok(match snap.lookup(prefix)? {
                Some(e) if e.kind == EntryKind::Tree => Some(e.id),
                _ => None,
            })
        };
        let mut out = Vec::new();
        let mut irregular = Vec::new();
        let mut malformed = Vec::new();
        diff_trees(
            &new_snap,
            locate(&old_snap)?,
            locate(&new_snap)?,
            prefix,
            &mut Diffed {
                changes: &mut out,
                irregular: &mut irregular,
                malformed: &mut malformed,
            },
        )?;
        out.sort_by(|a, b| a.path().cmp(b.path()));
        irregular.sort_by(|a, b| a.0.cmp(&b.0));
        malformed.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(TreeDiff {
            changes: out,
            irregular,
            malformed,
        })
    }
}

/// `prefix/name`, or `name` at the root.
pub(super) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// A tree's path and how it is malformed.
pub type MalformedTree = (String, TreeDefect);

/// What [`Store::diff_with_modes`] finds below its prefix.
#[derive(Debug, Default)]
pub struct TreeDiff {
    /// Files added, modified or deleted, sorted by path.
    pub changes: Vec<Change>,
    /// New or changed entries that are neither directories nor `100644` files, sorted by path.
    pub irregular: Vec<ModedPath>,
    /// Trees of the new side that differ from the old side and are malformed, sorted by path.
    pub malformed: Vec<MalformedTree>,
}

/// What [`diff_trees`] collects.
struct Diffed<'a> {
    changes: &'a mut Vec<Change>,
    irregular: &'a mut Vec<ModedPath>,
    /// Trees of the new side that differ from the old side and are malformed.
    malformed: &'a mut Vec<MalformedTree>,
}

fn diff_trees(
    snap: &Snapshot<'_>,
    old: Option<ObjectId>,
    new: Option<ObjectId>,
    path: &str,
    acc: &mut Diffed<'_>,
) -> Result<(), Error> {
    if old == new {
        return Ok(());
    }
    let read = |id: Option<ObjectId>| -> Result<Dir, Error> {
        id.map_or_else(|| Ok(Dir::default()), |id| snap.decode_tree(id, path))
    };
    let (old_dir, new_dir) = (read(old)?, read(new)?);
    if let Some(defect) = &new_dir.defect {
        acc.malformed.push((path.to_owned(), defect.clone()));
    }
    let mut names: Vec<&[u8]> = old_dir.names();
    names.extend(new_dir.names());
    names.sort_unstable();
    names.dedup();
    for name in names {
        let full = join(path, &name.to_str_lossy());
        let (o, n) = (old_dir.get(name), new_dir.get(name));
        let tree_id = |e: Option<Entry>| e.filter(|e| e.kind == EntryKind::Tree).map(|e| e.id);
        let file = |e: Option<Entry>| e.filter(|e| is_file(e.kind)).map(|e| (e.id, e.kind));
        // Trees on either side: recurse (a tree replaced by a file shows as both).
        if tree_id(o).is_some() || tree_id(n).is_some() {
            diff_trees(snap, tree_id(o), tree_id(n), &full, acc)?;
        }
        if let Some(e) = n
            && !e.mode.is_dir()
            && !e.mode.is_regular_file()
            && o.is_none_or(|o| (o.id, o.mode) != (e.id, e.mode))
        {
            acc.irregular.push((full.clone(), e.mode));
        }
        match (file(o), file(n)) {
            (None, Some(_)) => acc.changes.push(Change::Added(full.clone())),
            (Some(_), None) => acc.changes.push(Change::Deleted(full.clone())),
            (Some(a), Some(b)) if a != b => acc.changes.push(Change::Modified(full.clone())),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::*;
    use std::process::Command;

    /// A commit written on a tip lands or not; `is_ancestor` tells which from any later tip,
    /// for a commit planned on the tip, on an older tip, as the first commit, or never written.
    #[test]
    fn is_ancestor_tells_a_landed_commit_from_one_that_lost_its_compare_and_swap() {
        let (_tmp, _repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        // Lost its race: another writer landed c2 on c1 first.
        let lost = commit_on(&store, c1, &[("x", "lost")], "lost\n");
        let c2 = publish(&store, &[("b", "2")]);
        let c3 = publish(&store, &[("c", "3")]);
        // Planned on c2, never landed, while c3 and c4 did.
        let stale = commit_on(&store, c2, &[("y", "stale")], "stale\n");
        let c4 = publish(&store, &[("d", "4")]);
        let root_elsewhere = store
            .write_commit(None, &files(&[("z", "root")]), "root\n", &sig())
            .unwrap();
        for (commit, want) in [
            (c1, true),
            (c2, true),
            (c3, true),
            (c4, true),
            (lost, false),
            (stale, false),
            (root_elsewhere, false),
        ] {
            assert_eq!(store.is_ancestor(commit, c4).unwrap(), want, "{commit}");
        }
        assert!(
            !store.is_ancestor(c4, c2).unwrap(),
            "a later commit is not below"
        );
        let absent = CommitId::from_hex(&"1".repeat(40)).unwrap();
        assert!(!store.is_ancestor(absent, c4).unwrap());
    }

    /// `resolve` reads what `git rev-parse` reads (checked against git itself), peels
    /// annotated tags, and tells a ref that does not exist yet from an unknown name.
    #[test]
    fn revisions_resolve_as_git_rev_parse_does() {
        let (_tmp, repo, store) = new_store();
        let c1 = publish(&store, &[("a", "1")]);
        let c2 = publish(&store, &[("b", "2")]);
        let c3 = publish(&store, &[("c", "3")]);
        git(
            &repo,
            &["update-ref", "refs/remotes/origin/main", &c2.to_hex()],
        );
        git(&repo, &["tag", "v1", &c1.to_hex()]);
        let env_git = |args: &[&str]| {
            let out = Command::new("git")
                .args(args)
                .current_dir(&repo)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@invalid")
                .output()
                .expect("git");
            assert!(out.status.success(), "{out:?}");
        };
        env_git(&["tag", "-a", "v2", "-m", "release", &c3.to_hex()]);
        let hex = c1.to_hex();
        let forms = [
            "HEAD",
            "@",
            "main",
            "heads/main",
            "refs/heads/main",
            "origin/main",
            "remotes/origin/main",
            "refs/remotes/origin/main",
            "origin/main^",
            "v1",
            "tags/v1",
            "v2",
            "v2^{commit}",
            "v2~1",
            "HEAD~2",
            "HEAD^",
            "HEAD^^",
            "HEAD~1^",
            "@~1",
            "main~2",
            "main^1",
            &hex,
            &hex[..7],
            &hex[..12],
        ];
        for form in forms {
            let want = git(
                &repo,
                &["rev-parse", "--verify", &format!("{form}^{{commit}}")],
            );
            let got = store
                .resolve(form)
                .unwrap_or_else(|e| panic!("{form}: {e}"));
            assert_eq!(got.to_hex(), want, "{form}");
        }
        for unknown in ["nope", "HEAD~5", "origin/nope", "v3", "main~x"] {
            assert!(
                matches!(store.resolve(unknown), Err(Error::UnknownRevision { .. })),
                "{unknown}: {:?}",
                store.resolve(unknown)
            );
        }
        let tree = git(&repo, &["rev-parse", &format!("{c1}^{{tree}}")]);
        assert!(matches!(
            store.resolve(&tree),
            Err(Error::NotACommit { .. })
        ));
        assert!(matches!(
            store.resolve("refs/heads/other"),
            Err(Error::NoLedger { ref_name, .. }) if ref_name == "refs/heads/other"
        ));

        // Nothing published yet.
        let (_tmp, _repo, empty) = new_store();
        for form in ["HEAD", "@", "HEAD~2", "HEAD^", "main", "refs/heads/main"] {
            assert!(
                matches!(
                    empty.resolve(form),
                    Err(Error::NoLedger { ref_name, .. }) if ref_name == MAIN
                ),
                "{form}: {:?}",
                empty.resolve(form)
            );
        }
        assert!(matches!(
            empty.resolve("refs/heads/other"),
            Err(Error::NoLedger { ref_name, .. }) if ref_name == "refs/heads/other"
        ));
        assert!(matches!(
            empty.resolve("nope"),
            Err(Error::UnknownRevision { .. })
        ));
    }
}
