//! The migration of a repository's finality records to the default layout
//! ([`Layout::DEFAULT`], `hex2x2`) by `action-ledger maintain`: from `flat` (the layout before
//! layouts were versioned) or `nibble` (the default of 0.1.x). One commit moves every action
//! record and decision record to the path the new layout gives it, keeping its blob (same id,
//! so the same bytes), writes the layout record and, from `flat`, builds the pending index (the
//! index's paths are the same in every layout that has one, so from `nibble` it stays as it
//! is). The migration refuses a repository that does not verify, checks its own commit
//! ([`check_migration`] and a whole [`verify`](super::verify())) before moving the ref, and lands
//! it with one compare-and-swap: a kill leaves the old tip or the new one. A repository already
//! in the default layout, or with no finality records yet, is left as it is.

use std::collections::BTreeMap;

use super::error::Error;
use super::layout::{self, ACTIONS, DECISIONS, Layout};
use super::pending;
use super::state::read_state_in;
use crate::finding::{Finding, Rule};
use crate::store::{self, BlobId, CommitId, Signature, Snapshot, Store};

/// What [`migrate`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Migrated {
    /// The repository already has the layout: nothing written.
    AlreadyCurrent(Layout),
    /// No finality records: nothing to move (the first write records the new layout).
    Empty,
    /// One commit moved the records.
    Moved {
        /// The layout the records were in.
        from: Layout,
        /// The layout they are in now ([`Layout::DEFAULT`]).
        to: Layout,
        /// The new tip.
        commit: CommitId,
        /// Record files moved (action records and decisions), bytes unchanged.
        records: usize,
        /// Pending-index entries written.
        pending: usize,
    },
}

/// Errors of [`migrate`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The repository does not verify: a migration would carry the damage into the new layout.
    #[error(
        "the finality records do not verify ({count} finding(s), first: {first}); nothing was \
         migrated: run `action-ledger verify` and repair the repository first"
    )]
    Unverified {
        /// Findings.
        count: usize,
        /// The first, as `rule path: detail`.
        first: String,
    },
    /// The migration commit did not verify (a bug): the ref was not moved.
    #[error(
        "the migration commit did not verify ({first}); the ref was not moved and nothing changed"
    )]
    Unsound {
        /// The first finding.
        first: String,
    },
    /// Another writer moved the ref during every attempt ([`MIGRATE_ATTEMPTS`]): nothing
    /// changed.
    #[error(
        "{ref_name} moved during each of {attempts} attempts at the migration (other writers \
         are landing faster than it takes); nothing changed: run maintain again at a quieter \
         moment, or with serve and other writers of this repository stopped"
    )]
    Moved {
        /// The ref.
        ref_name: String,
        /// Attempts made.
        attempts: u32,
    },
    /// A finality read failed.
    #[error(transparent)]
    Finality(#[from] Error),
    /// The repository could not be read or written.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl MigrateError {
    /// True when another writer won the ref (exit 1 in the CLI: run it again); anything else
    /// is an error.
    pub fn is_refusal(&self) -> bool {
        matches!(self, MigrateError::Moved { .. })
    }
}

fn describe(f: &Finding) -> String {
    format!("{} {}: {}", f.rule.code(), f.path, f.detail)
}

/// Every record file (action records and decisions) of `snap` in `layout`, by its path in
/// `to`, with its path in `layout` and its blob.
pub(crate) fn records_by_target(
    snap: &Snapshot<'_>,
    from: Layout,
    to: Layout,
) -> Result<BTreeMap<String, (String, BlobId)>, store::Error> {
    let mut out = BTreeMap::new();
    for dir in [ACTIONS, DECISIONS] {
        snap.for_each_file_id(dir, |path, blob| {
            let target = if let Some((id, kind)) = from.classify(path) {
                Some(to.record_path(&id, kind))
            } else {
                from.classify_decision(path).map(|id| to.decision_path(&id))
            };
            if let Some(t) = target {
                out.insert(t, (path.to_owned(), blob));
            }
        })?;
    }
    Ok(out)
}

/// Checks that `after` (in layout `to`) holds exactly the records of `before` (in layout
/// `from`), each with the same blob at its new path: the rule of a layout change, applied by
/// `verify --range` and the hook to a push that changes the layout. Findings are `deleted`
/// for a record the migration lost and `modified` for one whose bytes changed (added records
/// are reported by `verify` of `after`).
///
/// # Errors
/// [`store::Error`] when a snapshot cannot be read.
pub fn check_migration(
    before: &Snapshot<'_>,
    from: Layout,
    after: &Snapshot<'_>,
    to: Layout,
) -> Result<Vec<Finding>, store::Error> {
    let mut out = Vec::new();
    let old = records_by_target(before, from, to)?;
    for (target, (source, blob)) in old {
        match after.file_id(&target)? {
            Some(b) if b == blob => {}
            Some(_) => out.push(Finding {
                path: target,
                rule: Rule::Modified,
                detail: format!("the layout change altered the bytes of {source}"),
            }),
            None => out.push(Finding {
                path: source,
                rule: Rule::Deleted,
                detail: format!("the layout change lost this record (expected at {target})"),
            }),
        }
    }
    Ok(out)
}

/// Checks that `after` (in layout `to`) holds no record that `before` (in layout `from`) did
/// not: a migration moves records and adds none, so that a push cannot ride a layout change to
/// add a record the range rules would refuse (a claim after an outcome). Findings are
/// `finality-layout-change`, one per added record.
///
/// # Errors
/// [`store::Error`] when a snapshot cannot be read.
pub fn check_no_record_added(
    before: &Snapshot<'_>,
    from: Layout,
    after: &Snapshot<'_>,
    to: Layout,
) -> Result<Vec<Finding>, store::Error> {
    let old = records_by_target(before, from, to)?;
    let new = records_by_target(after, to, to)?;
    Ok(new
        .into_keys()
        .filter(|path| !old.contains_key(path))
        .map(|path| Finding {
            path,
            rule: Rule::FinalityLayoutChange,
            detail: "a record added by a push that changes the layout: a migration moves \
                     records and adds none; push the migration alone, then the record"
                .to_owned(),
        })
        .collect())
}

/// Attempts of [`migrate`] before it reports [`MigrateError::Moved`]: each starts again from
/// the tip another writer landed. A writer that lands more often than a migration takes (a busy
/// `serve`) wins them all; the error then says to run it at a quieter moment.
pub const MIGRATE_ATTEMPTS: u32 = 5;

/// Migrates the finality records at the tip of the local ref `ref_name` to
/// [`Layout::DEFAULT`] in one commit signed by `sig` (see the module docs), moving the ref from the tip read with
/// one compare-and-swap. When another writer moves the ref meanwhile, it starts again from the
/// new tip, up to [`MIGRATE_ATTEMPTS`] times in all.
///
/// # Errors
/// [`MigrateError::Unverified`] when the repository does not verify,
/// [`MigrateError::Unsound`] when the commit does not verify, [`MigrateError::Moved`] when the
/// ref moved during every attempt, read and write errors.
pub fn migrate(store: &Store, ref_name: &str, sig: &Signature) -> Result<Migrated, MigrateError> {
    migrate_with(store, ref_name, sig, MIGRATE_ATTEMPTS, &mut |_| {})
}

/// [`migrate`] with `attempts` attempts, calling `before_swap` with the attempt's number (from
/// 1) just before each compare-and-swap (tests land a competing commit there).
fn migrate_with(
    store: &Store,
    ref_name: &str,
    sig: &Signature,
    attempts: u32,
    before_swap: &mut dyn FnMut(u32),
) -> Result<Migrated, MigrateError> {
    for attempt in 1..=attempts {
        if let Some(done) = migrate_once(store, ref_name, sig, &mut || before_swap(attempt))? {
            return Ok(done);
        }
    }
    Err(MigrateError::Moved {
        ref_name: ref_name.to_owned(),
        attempts,
    })
}

/// One attempt: `None` when another writer moved the ref before the compare-and-swap.
fn migrate_once(
    store: &Store,
    ref_name: &str,
    sig: &Signature,
    before_swap: &mut dyn FnMut(),
) -> Result<Option<Migrated>, MigrateError> {
    let tip = store.tip(ref_name)?;
    let snap = store.snapshot(tip)?;
    let detected = layout::detect(&snap).map_err(Error::from)?;
    if detected.fresh {
        return Ok(Some(Migrated::Empty));
    }
    if detected.layout == Layout::DEFAULT {
        return Ok(Some(Migrated::AlreadyCurrent(Layout::DEFAULT)));
    }
    let findings = super::verify(&snap)?;
    if let Some(first) = findings.first() {
        return Err(MigrateError::Unverified {
            count: findings.len(),
            first: describe(first),
        });
    }
    let (from, to) = (detected.layout, Layout::DEFAULT);
    let records = records_by_target(&snap, from, to)?;
    let mut moves = Vec::with_capacity(records.len());
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut ids = Vec::new();
    for (target, (source, _)) in &records {
        if let Some((id, super::RecordKind::Action)) = to.classify(target) {
            ids.push(id);
        }
        moves.push((source.clone(), target.clone()));
    }
    // The index's paths do not depend on the layout: one that has it keeps it as it is.
    if !from.has_pending_index() {
        for id in &ids {
            if let Some(state) = read_state_in(&snap, from, id)?
                && pending::indexed(&state)
            {
                files.push((pending::entry_path(id, state.action.created_at), Vec::new()));
            }
        }
    }
    let entries = files.len();
    files.push((
        layout::RECORD_PATH.to_owned(),
        to.record().unwrap_or_default().into_bytes(),
    ));
    let message = format!(
        "finality: migrate from the {} to the {} layout\n\n{} record(s) moved with their bytes \
         unchanged; {entries} pending-index entr{} written\n",
        from.name(),
        to.name(),
        records.len(),
        if entries == 1 { "y" } else { "ies" }
    );
    // The layout record of `nibble` is replaced; nothing else is (moves never replace).
    let commit = store.write_commit_moving(tip, &files, &moves, true, &message, sig)?;
    let after = store.snapshot(Some(commit))?;
    let mut problems = check_migration(&snap, from, &after, to)?;
    problems.extend(check_no_record_added(&snap, from, &after, to)?);
    problems.extend(super::verify(&after)?);
    if let Some(first) = problems.first() {
        return Err(MigrateError::Unsound {
            first: describe(first),
        });
    }
    before_swap();
    match store.update_ref(
        ref_name,
        tip,
        commit,
        &format!("finality: migrate to the {} layout", to.name()),
    ) {
        Ok(()) => {}
        Err(store::Error::RefMoved { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    Ok(Some(Migrated::Moved {
        from,
        to,
        commit,
        records: records.len(),
        pending: entries,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::{
        ActionId, OutcomeReport, RecordKind, claim, create_action, report_outcome, show,
        verify_range,
    };

    const REF: &str = "refs/heads/main";

    /// A `flat` repository with a pending action, a claimed one and a completed one.
    fn flat_repo() -> (tempfile::TempDir, Store) {
        let (dir, store) = three_actions();
        flatten(&store);
        (dir, store)
    }

    /// A repository of the default layout with a pending action, a claimed one and a completed
    /// one.
    fn three_actions() -> (tempfile::TempDir, Store) {
        let (dir, store) = repo();
        let opts = options(REF);
        for id in ["act_pending", "act_claimed", "act_done"] {
            create_action(&store, &opts, &new_action(id), at(BASE)).unwrap();
        }
        for (id, attempt) in [
            ("act_claimed", "attempt-claimed-000001"),
            ("act_done", "attempt-done-00000001"),
        ] {
            claim(&store, &opts, id, &request(attempt), at(BASE)).unwrap();
        }
        let done = OutcomeReport {
            status: "completed".into(),
            summary: None,
            error_message: None,
            progress: None,
            attempt_id: None,
        };
        report_outcome(
            &store,
            &opts,
            "act_done",
            &done,
            &super::super::Settler::Operator,
            at(BASE),
        )
        .unwrap();
        (dir, store)
    }

    /// Migrates the three actions of `store` (in layout `from`) and checks what every
    /// migration must hold: one commit to the default layout, the records' bytes unchanged,
    /// `verify` and `verify --range` clean, every action shown as before, a second run a no-op.
    /// Returns the tip before, the migration commit, and the records and entries it counted.
    fn migrated_as_before(
        store: &Store,
        from: Layout,
    ) -> (Option<CommitId>, CommitId, usize, usize) {
        let ids = ["act_pending", "act_claimed", "act_done"];
        let before = store.tip(REF).unwrap();
        let states: Vec<_> = ids.iter().map(|id| show(store, REF, id).unwrap()).collect();
        let Migrated::Moved {
            from: was,
            to,
            commit,
            records,
            pending,
        } = migrate(store, REF, &sig()).unwrap()
        else {
            panic!("not migrated")
        };
        assert_eq!((was, to), (from, Layout::Hex2x2));
        assert_eq!(store.tip(REF).unwrap(), Some(commit));
        let (old, new) = (
            store.snapshot(before).unwrap(),
            store.snapshot(Some(commit)).unwrap(),
        );
        assert!(
            check_migration(&old, from, &new, Layout::Hex2x2)
                .unwrap()
                .is_empty()
        );
        assert!(super::super::verify(&new).unwrap().is_empty());
        assert!(verify_range(store, before, commit).unwrap().is_empty());
        assert_eq!(layout::detect(&new).unwrap().layout, Layout::Hex2x2);
        for (id, was) in ids.iter().zip(&states) {
            assert_eq!(&show(store, REF, id).unwrap(), was, "{id}");
        }
        // Once migrated, there is nothing more to do.
        assert_eq!(
            migrate(store, REF, &sig()).unwrap(),
            Migrated::AlreadyCurrent(Layout::Hex2x2)
        );
        assert_eq!(store.tip(REF).unwrap(), Some(commit));
        (before, commit, records, pending)
    }

    #[test]
    fn a_flat_repository_migrates_in_one_commit_with_every_record_unchanged() {
        let (_dir, store) = flat_repo();
        let (_, _, records, pending) = migrated_as_before(&store, Layout::Flat);
        // 3 action.json, 2 claim.json, 1 outcome.json.
        assert_eq!(records, 6);
        // The two whose outcome is pending.
        assert_eq!(pending, 2);
    }

    #[test]
    fn a_nibble_repository_migrates_keeping_its_pending_index_and_every_record() {
        let (_dir, store) = three_actions();
        // The records as the 0.1.x default wrote them.
        crate::finality::test_support::relayout(&store, Layout::Nibble);
        let mut entries_before = Vec::new();
        store
            .snapshot(store.tip(REF).unwrap())
            .unwrap()
            .for_each_file(pending::PENDING, |p| entries_before.push(p.to_owned()))
            .unwrap();
        assert_eq!(entries_before.len(), 2);
        let (_, commit, records, pending) = migrated_as_before(&store, Layout::Nibble);
        assert_eq!((records, pending), (6, 0));
        let new = store.snapshot(Some(commit)).unwrap();
        let mut entries_after = Vec::new();
        new.for_each_file(pending::PENDING, |p| entries_after.push(p.to_owned()))
            .unwrap();
        assert_eq!(entries_after, entries_before);
        assert_eq!(
            new.read(layout::RECORD_PATH, 4096).unwrap(),
            Layout::Hex2x2.record().map(String::into_bytes)
        );
        // Nothing of the nibble layout is left.
        let mut paths = Vec::new();
        new.for_each_file("finality/v1", |p| paths.push(p.to_owned()))
            .unwrap();
        for p in &paths {
            assert_eq!(Layout::Nibble.classify(p), None, "{p}");
            assert_eq!(Layout::Nibble.classify_decision(p), None, "{p}");
        }
    }

    #[test]
    fn a_new_or_empty_repository_is_left_as_it_is() {
        let (_dir, store) = repo();
        assert_eq!(migrate(&store, REF, &sig()).unwrap(), Migrated::Empty);
        assert_eq!(store.tip(REF).unwrap(), None);
        let (_dir, store, _, created) = repo_with_action();
        assert_eq!(
            migrate(&store, REF, &sig()).unwrap(),
            Migrated::AlreadyCurrent(Layout::Hex2x2)
        );
        assert_eq!(store.tip(REF).unwrap(), created.commit);
    }

    /// A writer that lands during a migration makes it start again from the new tip, with
    /// that writer's record moved too; one that lands during every attempt leaves the
    /// repository as that writer left it, with an error that says what to do.
    #[test]
    fn a_migration_overtaken_by_a_writer_starts_again_and_gives_up_after_its_attempts() {
        // Overtaken once (a `nibble` writer lands a new action): the second attempt wins.
        let (_dir, store) = three_actions();
        relayout(&store, Layout::Nibble);
        let opts = options(REF);
        let mut overtake = |attempt: u32| {
            if attempt == 1 {
                create_action(&store, &opts, &new_action("act_late"), at(BASE)).unwrap();
            }
        };
        let done = migrate_with(&store, REF, &sig(), 3, &mut overtake).unwrap();
        let Migrated::Moved { from, records, .. } = done else {
            panic!("not migrated: {done:?}")
        };
        assert_eq!(from, Layout::Nibble);
        let tip = store.tip(REF).unwrap();
        let snap = store.snapshot(tip).unwrap();
        assert_eq!(layout::detect(&snap).unwrap().layout, Layout::DEFAULT);
        assert!(super::super::verify(&snap).unwrap().is_empty());
        assert!(show(&store, REF, "act_late").is_ok());
        // The late action's record was moved with the others.
        assert_eq!(
            records, 7,
            "three actions with two claims and an outcome, and the late one"
        );

        // Overtaken every time: nothing of the migration lands.
        let (_dir, store) = three_actions();
        relayout(&store, Layout::Nibble);
        let mut n = 0;
        let mut overtake = |_: u32| {
            n += 1;
            create_action(
                &store,
                &opts,
                &new_action(&format!("act_late{n}")),
                at(BASE),
            )
            .unwrap();
        };
        let err = migrate_with(&store, REF, &sig(), 3, &mut overtake).unwrap_err();
        assert!(
            matches!(err, MigrateError::Moved { attempts: 3, .. }) && err.is_refusal(),
            "{err}"
        );
        assert!(err.to_string().contains("at a quieter moment"), "{err}");
        let snap = store.snapshot(store.tip(REF).unwrap()).unwrap();
        assert_eq!(layout::detect(&snap).unwrap().layout, Layout::Nibble);
        assert!(super::super::verify(&snap).unwrap().is_empty());
    }

    #[test]
    fn a_repository_that_does_not_verify_is_not_migrated() {
        let (_dir, store) = flat_repo();
        plant_unparsable_action(&store, "act_pending");
        let before = store.tip(REF).unwrap();
        let err = migrate(&store, REF, &sig()).unwrap_err();
        assert!(matches!(err, MigrateError::Unverified { .. }), "{err}");
        assert!(
            err.to_string().contains("run `action-ledger verify`"),
            "{err}"
        );
        assert_eq!(store.tip(REF).unwrap(), before);
    }

    #[test]
    fn a_layout_change_that_alters_or_loses_a_record_is_refused_by_verify_range() {
        let (_dir, store) = flat_repo();
        let before = store.tip(REF).unwrap();
        let Migrated::Moved { commit, .. } = migrate(&store, REF, &sig()).unwrap() else {
            panic!("not migrated")
        };
        let id = ActionId::parse("act_done").unwrap();
        let outcome = Layout::DEFAULT.record_path(&id, RecordKind::Outcome);
        let claim_path = Layout::DEFAULT.record_path(&id, RecordKind::Claim);
        let none: &[(String, Vec<u8>)] = &[];
        // Altered bytes.
        let altered = store
            .write_commit_with(
                Some(commit),
                &[(outcome.clone(), b"{}\n".to_vec())],
                &[],
                true,
                "alter",
                &sig(),
            )
            .unwrap();
        let found = verify_range(&store, before, altered).unwrap();
        assert!(
            found
                .iter()
                .any(|f| f.rule == Rule::Modified && f.path == outcome),
            "{found:?}"
        );
        // A lost record.
        let lost = store
            .write_commit_with(Some(commit), none, &[claim_path], false, "lose", &sig())
            .unwrap();
        let found = verify_range(&store, before, lost).unwrap();
        assert!(found.iter().any(|f| f.rule == Rule::Deleted), "{found:?}");
    }

    #[test]
    fn a_layout_change_may_not_add_a_record_or_go_anywhere_but_the_default() {
        // Records riding on a migration (an approval after the outcome, which a plain push may
        // not add; a claim): refused, whatever they hold.
        let (_dir, store) = flat_repo();
        let before = store.tip(REF).unwrap();
        let Migrated::Moved { commit, .. } = migrate(&store, REF, &sig()).unwrap() else {
            panic!("not migrated")
        };
        let id = ActionId::parse("act_done").unwrap();
        let pending_id = ActionId::parse("act_pending").unwrap();
        let claimed = ActionId::parse("act_claimed").unwrap();
        let new = store.snapshot(Some(commit)).unwrap();
        let claim = new
            .read(
                &Layout::DEFAULT.record_path(&claimed, RecordKind::Claim),
                1 << 20,
            )
            .unwrap()
            .unwrap();
        for (target, what) in [
            (
                Layout::DEFAULT.record_path(&pending_id, RecordKind::Claim),
                "a claim",
            ),
            (
                Layout::DEFAULT.record_path(&id, RecordKind::Approval),
                "an approval after the outcome",
            ),
        ] {
            let riding = store
                .write_commit_with(
                    Some(commit),
                    &[(target.clone(), claim.clone())],
                    &[],
                    false,
                    "ride",
                    &sig(),
                )
                .unwrap();
            let found = verify_range(&store, before, riding).unwrap();
            assert!(
                found
                    .iter()
                    .any(|f| f.rule == Rule::FinalityLayoutChange && f.path == target),
                "{what}: {found:?}"
            );
        }
        // Back from the default to an older layout: refused, however whole.
        let (_dir, store) = three_actions();
        let at = store.tip(REF).unwrap();
        for older in [Layout::Nibble, Layout::Flat] {
            crate::finality::test_support::relayout(&store, older);
            let down = store.tip(REF).unwrap().unwrap();
            let found = verify_range(&store, at, down).unwrap();
            assert!(
                found.iter().any(
                    |f| f.rule == Rule::FinalityLayoutChange && f.detail.contains(older.name())
                ),
                "{older:?}: {found:?}"
            );
            store
                .update_ref(REF, Some(down), at.unwrap(), "back")
                .unwrap();
        }
    }
}
