//! What the pre-receive hook admits under `refs/ledger/`: pending publications and refusal
//! marks ([`super::combine`] has the design). Every other ref of a push is a ledger ref, which
//! the hook checks as before (no deletion, `verify --range OLD..NEW`).
//!
//! The rules see the whole push at once, because a deletion is justified by another ref of the
//! same push (the ledger ref that lands the publication, or the refusal mark created beside
//! it):
//! - `refs/ledger/incoming/<key>`
//!   - **created** with a publication commit whose name is its key ([`combine::publication_key`]),
//!     with at most one parent, adding only plain files under `ledger/v1/` within the
//!     publisher's limits, and whose range `parent..commit` verifies clean under the hook's
//!     privacy profile: the checks a ledger push of that commit gets (run once: when the same
//!     push moves a ledger ref over that range, the hook's check of that ref is the one);
//!   - **never updated**: a key names its content, so a different commit under it is a forgery;
//!   - **deleted** only when a ref outside `refs/ledger/`, as this push leaves it, holds every
//!     file the publication adds ([`combine::is_landed`]), or when its refusal mark exists
//!     after the push (created by it, or before it for the same key).
//! - `refs/ledger/refused/<key>`: **created** only beside the deletion of
//!   `refs/ledger/incoming/<key>` in the same push, as a commit whose single parent is the
//!   deleted incoming commit and whose tree is that commit's tree (the mark adds nothing to the
//!   repository but its message); never updated or deleted.
//! - Any other ref under `refs/ledger/` is refused: the namespace is the protocol's.

use super::combine::{self, INCOMING_PREFIX, Incoming, REFUSED_PREFIX};
use crate::privacy::Profile;
use crate::store::{self, CommitId, Store};
use crate::verify;

/// The namespace whose refs [`admit`] judges.
pub const NAMESPACE: &str = "refs/ledger/";

/// How many refs outside [`NAMESPACE`] that the push leaves alone are looked at for a landed
/// publication, at most.
pub const MAX_LEDGER_CANDIDATES: usize = 64;

/// One line of a pre-receive hook's input: `<old> <new> <ref>`, with git's null id as `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushedRef {
    /// The full ref name.
    pub name: String,
    /// What it named before the push (`None`: it did not exist).
    pub old: Option<CommitId>,
    /// What it names after the push (`None`: the push deletes it).
    pub new: Option<CommitId>,
}

/// Why a push could not be judged (a refusal is a `Some` reason in [`admit`]'s answer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository (with the push's quarantined objects) could not be read.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// A publication could not be read or checked.
    #[error(transparent)]
    Combine(#[from] combine::Error),
    /// Verification could not read the repository.
    #[error(transparent)]
    Verify(#[from] verify::Error),
}

/// Judges every ref of `push` under [`NAMESPACE`] by the rules of the module docs: one entry
/// per such ref, in push order, with `None` when it is admitted and the reason when it is
/// refused. Refs outside the namespace are not judged here. `privacy` is the profile the hook
/// verifies ledger pushes under. `store` must see the push's objects (the quarantine).
///
/// # Errors
/// [`Error`] when the repository cannot be read; the hook then refuses the push.
pub fn admit(
    store: &Store,
    push: &[PushedRef],
    privacy: Profile,
) -> Result<Vec<(String, Option<String>)>, Error> {
    let mut verdicts = Vec::new();
    for pushed in push.iter().filter(|p| p.name.starts_with(NAMESPACE)) {
        let verdict = if let Some(key) = pushed.name.strip_prefix(INCOMING_PREFIX) {
            incoming(store, push, pushed, key, privacy)?
        } else if let Some(key) = pushed.name.strip_prefix(REFUSED_PREFIX) {
            refused(store, push, pushed, key)?
        } else {
            Some(format!(
                "{NAMESPACE} holds only {INCOMING_PREFIX}<key> and {REFUSED_PREFIX}<key>"
            ))
        };
        verdicts.push((pushed.name.clone(), verdict));
    }
    Ok(verdicts)
}

/// Whether `key` is a key's shape: 64 lowercase hex digits.
fn is_key(key: &str) -> bool {
    key.len() == 64 && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The verdict on `refs/ledger/incoming/<key>`.
fn incoming(
    store: &Store,
    push: &[PushedRef],
    pushed: &PushedRef,
    key: &str,
    privacy: Profile,
) -> Result<Option<String>, Error> {
    if !is_key(key) {
        return Ok(Some(
            "a pending publication is named by its key (64 lowercase hex)".into(),
        ));
    }
    match (pushed.old, pushed.new) {
        (None, None) => Ok(None),
        (None, Some(commit)) => created(store, push, key, commit, privacy),
        (Some(_), Some(_)) => Ok(Some(
            "a pending publication is never updated: its name is the key of its content".into(),
        )),
        (Some(old), None) => deleted(store, push, key, old),
    }
}

/// The verdict on a new incoming ref naming `commit`.
fn created(
    store: &Store,
    push: &[PushedRef],
    key: &str,
    commit: CommitId,
    privacy: Profile,
) -> Result<Option<String>, Error> {
    let parent = match store.parents(commit)?.as_slice() {
        [] => None,
        [p] => Some(*p),
        many => {
            return Ok(Some(format!(
                "a publication has one parent; {commit} has {}",
                many.len()
            )));
        }
    };
    let inc = Incoming {
        key: key.to_owned(),
        commit,
    };
    // The parent is the ledger tip the job read; which ledger it belongs to is the lander's
    // check (a foreign base is refused by `combine`), not the hook's.
    let history = parent.into_iter().collect();
    if let Err(why) = combine::additions(store, &inc, parent, &history)? {
        return Ok(Some(why));
    }
    // A job's first push moves the ledger ref from the parent to this same commit beside
    // creating its incoming ref; the hook verifies that range as a ledger push, and any
    // refusal refuses the whole push, so verifying it again here would only double the cost.
    let checked_beside = push
        .iter()
        .any(|p| !p.name.starts_with(NAMESPACE) && p.old == parent && p.new == Some(commit));
    if checked_beside {
        return Ok(None);
    }
    let report = verify::verify_range_with(store, parent, commit, &verify::Options { privacy })?;
    if report.is_clean() {
        return Ok(None);
    }
    let lines: Vec<String> = report
        .findings
        .iter()
        .map(|f| format!("{}: {}: {}", f.path, f.rule, f.detail))
        .collect();
    Ok(Some(format!(
        "the publication breaks the ledger rules:\n{}",
        lines.join("\n")
    )))
}

/// The verdict on deleting the incoming ref of `key`, which named `old`.
fn deleted(
    store: &Store,
    push: &[PushedRef],
    key: &str,
    old: CommitId,
) -> Result<Option<String>, Error> {
    let mark = combine::refused_ref(key);
    let marked_now = push.iter().any(|p| p.name == mark && p.new.is_some());
    if marked_now || store.tip(&mark)?.is_some() {
        return Ok(None);
    }
    let inc = Incoming {
        key: key.to_owned(),
        commit: old,
    };
    // The refs this push moves first (a landing round moves the ledger beside its deletions),
    // then the ones it leaves alone.
    let pushed: Vec<CommitId> = push
        .iter()
        .filter(|p| is_ledger_ref(&p.name))
        .filter_map(|p| p.new)
        .collect();
    for tip in pushed {
        if combine::is_landed(store, Some(tip), &inc)? {
            return Ok(None);
        }
    }
    for tip in other_ledger_tips(store, push)? {
        if combine::is_landed(store, Some(tip), &inc)? {
            return Ok(None);
        }
    }
    Ok(Some(
        "a pending publication is deleted only once a ledger ref holds every file it adds, \
         or beside its refusal mark"
            .into(),
    ))
}

/// Whether `name` is a ref the ledger may live on: outside [`NAMESPACE`], under `refs/`.
fn is_ledger_ref(name: &str) -> bool {
    !name.starts_with(NAMESPACE) && name.starts_with("refs/")
}

/// The commits of up to [`MAX_LEDGER_CANDIDATES`] refs outside [`NAMESPACE`] that this push
/// leaves alone.
fn other_ledger_tips(store: &Store, push: &[PushedRef]) -> Result<Vec<CommitId>, Error> {
    let mut tips = Vec::new();
    for name in store.ref_names(MAX_LEDGER_CANDIDATES * 4 + push.len())? {
        if tips.len() >= MAX_LEDGER_CANDIDATES {
            break;
        }
        if is_ledger_ref(&name)
            && !push.iter().any(|p| p.name == name)
            && let Some(tip) = store.tip(&name)?
        {
            tips.push(tip);
        }
    }
    Ok(tips)
}

/// The verdict on `refs/ledger/refused/<key>`.
fn refused(
    store: &Store,
    push: &[PushedRef],
    pushed: &PushedRef,
    key: &str,
) -> Result<Option<String>, Error> {
    if !is_key(key) {
        return Ok(Some(
            "a refusal mark is named by its publication's key (64 lowercase hex)".into(),
        ));
    }
    let (None, Some(mark)) = (pushed.old, pushed.new) else {
        return Ok(Some(
            "a refusal mark is only ever created: it is the durable answer to a job".into(),
        ));
    };
    let incoming = combine::incoming_ref(key);
    let Some(deleted) = push
        .iter()
        .find(|p| p.name == incoming && p.new.is_none())
        .and_then(|p| p.old)
    else {
        return Ok(Some(format!(
            "a refusal mark is created only by the push that deletes {incoming}"
        )));
    };
    if store.parents(mark)? != [deleted] {
        return Ok(Some(format!(
            "a refusal mark's one parent is the refused publication {deleted}"
        )));
    }
    let diff = store.diff_with_modes(Some(deleted), mark, "")?;
    if !diff.changes.is_empty() || !diff.irregular.is_empty() || !diff.malformed.is_empty() {
        return Ok(Some(
            "a refusal mark's tree is its publication's tree: it adds nothing".into(),
        ));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::land::{Built, build_on};
    use crate::publish::test_support::*;
    use crate::publish::{Options, publish, read_source, validate_batch};

    const MAIN: &str = "refs/heads/main";

    /// A ledger with one publication on `main`, and two more built on its tip (not landed):
    /// the store, the tip, and the two as pending publications.
    fn ledger() -> (tempfile::TempDir, Store, CommitId, Incoming, Incoming) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_or_init_bare(&dir.path().join("s.git"), MAIN).unwrap();
        publish(&store, &day1("001"), &Options::new(sig())).unwrap();
        let tip = store.tip(MAIN).unwrap().unwrap();
        let built = |job: &str| {
            let batch = validate_batch(&read_source(&day1(job), None).unwrap(), None).unwrap();
            let Built::Commit(_, commit) =
                build_on(&store, &batch, Some(tip), &Options::new(sig()), 1).unwrap()
            else {
                panic!("nothing to publish");
            };
            let key = combine::publication_key(&store, commit).unwrap();
            Incoming { key, commit }
        };
        let (a, b) = (built("002"), built("003"));
        (dir, store, tip, a, b)
    }

    fn pushed(name: &str, old: Option<CommitId>, new: Option<CommitId>) -> PushedRef {
        PushedRef {
            name: name.to_owned(),
            old,
            new,
        }
    }

    /// The one verdict on the only namespace ref of `push`.
    fn verdict(store: &Store, push: &[PushedRef]) -> Option<String> {
        let verdicts = admit(store, push, Profile::Strict).unwrap();
        let judged: Vec<_> = verdicts
            .iter()
            .filter(|(n, _)| *n == push[0].name)
            .collect();
        assert_eq!(judged.len(), 1, "{verdicts:?}");
        judged[0].1.clone()
    }

    /// An honest pending publication is admitted; a misnamed, forged, updated, two-parent or
    /// non-ledger one is refused, each with its rule.
    #[test]
    fn pending_publications_are_created_once_under_their_key() {
        let (_dir, store, tip, a, b) = ledger();
        let create =
            |key: &str, commit| vec![pushed(&combine::incoming_ref(key), None, Some(commit))];
        assert_eq!(verdict(&store, &create(&a.key, a.commit)), None);

        // Another publication's key, a key of the wrong shape.
        let why = verdict(&store, &create(&b.key, a.commit)).unwrap();
        assert!(why.contains("is not the key of what it adds"), "{why}");
        let why = verdict(&store, &create("ABC", a.commit)).unwrap();
        assert!(why.contains("64 lowercase hex"), "{why}");
        // Updated, even to the same content.
        let update = [pushed(
            &combine::incoming_ref(&a.key),
            Some(a.commit),
            Some(b.commit),
        )];
        assert!(verdict(&store, &update).unwrap().contains("never updated"));

        // A merge, a file outside ledger/v1/, a changed file.
        let (pa, pb) = (a.commit.to_hex(), b.commit.to_hex());
        let tree = format!("{pa}^{{tree}}");
        let out = git(
            store.git_dir(),
            &["commit-tree", &tree, "-p", &pa, "-p", &pb, "-m", "merge"],
        );
        let two = CommitId::from_hex(out.trim()).unwrap();
        let key = combine::publication_key(&store, two).unwrap();
        assert!(
            verdict(&store, &create(&key, two))
                .unwrap()
                .contains("one parent")
        );
        let outside = store
            .write_commit(
                Some(tip),
                &[("notes/x".to_owned(), b"x\n".to_vec())],
                "x",
                &sig(),
            )
            .unwrap();
        let key = combine::publication_key(&store, outside).unwrap();
        assert!(
            verdict(&store, &create(&key, outside))
                .unwrap()
                .contains("outside ledger/v1/")
        );
        let snap = store.snapshot(Some(tip)).unwrap();
        let existing = snap
            .list_files("ledger/v1/")
            .unwrap()
            .into_iter()
            .next()
            .unwrap();
        let changed = store
            .write_commit_with(
                Some(tip),
                &[(existing, b"{}\n".to_vec())],
                &[],
                true,
                "x",
                &sig(),
            )
            .unwrap();
        let key = combine::publication_key(&store, changed).unwrap();
        assert!(
            verdict(&store, &create(&key, changed))
                .unwrap()
                .contains("existing file is changed")
        );
        // Anything else under the namespace.
        let other = [pushed("refs/ledger/other", None, Some(a.commit))];
        assert!(verdict(&store, &other).unwrap().contains("holds only"));
    }

    /// A pending publication is deleted only beside what decides it: a ledger ref that holds
    /// it (updated in the push, or already), or its refusal mark (created in the push, or
    /// before). A bare deletion, or one beside a ledger that does not hold it, is refused.
    #[test]
    fn pending_publications_are_deleted_only_when_decided() {
        let (_dir, store, tip, a, b) = ledger();
        let delete = pushed(&combine::incoming_ref(&a.key), Some(a.commit), None);
        let why = verdict(&store, std::slice::from_ref(&delete)).unwrap();
        assert!(
            why.contains("deleted only once a ledger ref holds"),
            "{why}"
        );
        // Beside a ledger update that lands another publication only.
        let other_lands = [delete.clone(), pushed(MAIN, Some(tip), Some(b.commit))];
        assert!(verdict(&store, &other_lands).is_some());
        // Beside the ledger update that lands it.
        let lands = [delete.clone(), pushed(MAIN, Some(tip), Some(a.commit))];
        assert_eq!(verdict(&store, &lands), None);
        // The ledger already holds it.
        store.update_ref(MAIN, Some(tip), a.commit, "land").unwrap();
        assert_eq!(verdict(&store, std::slice::from_ref(&delete)), None);
        store.update_ref(MAIN, Some(a.commit), tip, "back").unwrap();
        // Beside its refusal mark, or after one.
        let mark = combine::refusal_mark(&store, &a, "conflict", &sig()).unwrap();
        let marked = [
            delete.clone(),
            pushed(&combine::refused_ref(&a.key), None, Some(mark)),
        ];
        assert_eq!(verdict(&store, &marked), None);
        assert_eq!(admit(&store, &marked, Profile::Strict).unwrap()[1].1, None);
        store
            .update_ref(&combine::refused_ref(&a.key), None, mark, "mark")
            .unwrap();
        assert_eq!(verdict(&store, std::slice::from_ref(&delete)), None);
    }

    /// A refusal mark is created only with the deletion of its publication, as a commit on it
    /// with its tree; never alone, on another commit, with other content, updated or deleted.
    #[test]
    fn refusal_marks_are_created_only_beside_the_refused_publication() {
        let (_dir, store, tip, a, b) = ledger();
        let mark_ref = combine::refused_ref(&a.key);
        let delete = pushed(&combine::incoming_ref(&a.key), Some(a.commit), None);
        let mark = combine::refusal_mark(&store, &a, "conflict", &sig()).unwrap();
        let judge = |push: &[PushedRef]| {
            admit(&store, push, Profile::Strict)
                .unwrap()
                .into_iter()
                .find(|(n, _)| *n == mark_ref)
                .unwrap()
                .1
        };
        assert_eq!(
            judge(&[pushed(&mark_ref, None, Some(mark)), delete.clone()]),
            None
        );
        let alone = judge(&[pushed(&mark_ref, None, Some(mark))]).unwrap();
        assert!(alone.contains("only by the push that deletes"), "{alone}");
        let on_other = combine::refusal_mark(&store, &b, "conflict", &sig()).unwrap();
        let why = judge(&[pushed(&mark_ref, None, Some(on_other)), delete.clone()]).unwrap();
        assert!(
            why.contains("one parent is the refused publication"),
            "{why}"
        );
        let with_content = store
            .write_commit(
                Some(a.commit),
                &[("x".to_owned(), b"x\n".to_vec())],
                "m",
                &sig(),
            )
            .unwrap();
        let why = judge(&[pushed(&mark_ref, None, Some(with_content)), delete.clone()]).unwrap();
        assert!(why.contains("adds nothing"), "{why}");
        let update = judge(&[pushed(&mark_ref, Some(mark), Some(tip))]).unwrap();
        assert!(update.contains("only ever created"), "{update}");
        let deletion = judge(&[pushed(&mark_ref, Some(mark), None)]).unwrap();
        assert!(deletion.contains("only ever created"), "{deletion}");
    }

    /// A publication whose events break the ledger rules is refused with the findings, as a
    /// ledger push of it would be: here one that repeats an existing shard path with other
    /// bytes cannot be built, so a duplicate event under a new path stands for it.
    #[test]
    fn a_publication_that_breaks_the_ledger_rules_is_refused_with_findings() {
        let (_dir, store, tip, _, _) = ledger();
        let snap = store.snapshot(Some(tip)).unwrap();
        let shard = snap
            .list_files("ledger/v1/")
            .unwrap()
            .into_iter()
            .find(|p| p.ends_with(".jsonl"))
            .unwrap();
        let bytes = snap.read(&shard, 1 << 24).unwrap().unwrap();
        let copy = shard.replace(".jsonl", "-copy.jsonl");
        let forged = store
            .write_commit(Some(tip), &[(copy, bytes.to_vec())], "x", &sig())
            .unwrap();
        let key = combine::publication_key(&store, forged).unwrap();
        let why = verdict(
            &store,
            &[pushed(&combine::incoming_ref(&key), None, Some(forged))],
        )
        .unwrap();
        assert!(why.contains("breaks the ledger rules"), "{why}");
    }
}
