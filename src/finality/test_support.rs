//! Fixtures shared by the finality unit tests.
#![cfg(test)]

use crate::canonical::Value;
use crate::finality::*;
use crate::store::{Signature, Store};
pub(crate) use crate::time::Timestamp;

pub(crate) const BASE: &str = "2026-03-01T12:00:00.000Z";
pub(crate) const ACTION: &str = "act_case";
pub(crate) const ATTEMPT: &str = "attempt-0000000001";

pub(crate) fn sig() -> Signature {
    Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_772_366_400,
    }
}

pub(crate) fn options(ref_name: &str) -> Options {
    let mut o = Options::new(sig());
    o.ref_name = ref_name.to_owned();
    o
}

pub(crate) fn default_act() -> Value {
    shell_act(&["./deploy.sh".to_owned(), "prod".to_owned()])
}

pub(crate) fn new_action(id: &str) -> NewAction {
    NewAction {
        action_id: ActionId::parse(id).unwrap(),
        agent_id: "agent-a".into(),
        principal: "principal-a".into(),
        act: Some(default_act()),
        guard_decision_id: Some("gd_1".into()),
        verdict: Verdict::Allow,
        client_capabilities: vec![EXECUTION_CLAIMS.into()],
        identity_verified: false,
        containment_ref: None,
        lifecycle: None,
        approval_wait_seconds: None,
        details: None,
    }
}

pub(crate) fn request(attempt: &str) -> ClaimRequest {
    ClaimRequest {
        attempt_id: attempt.into(),
        agent_id: Some("agent-a".into()),
        principal: Some("principal-a".into()),
        act: Some(default_act()),
        verified: false,
    }
}

pub(crate) fn repo() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
    (dir, store)
}

/// A fresh repository in which [`ACTION`] was created at [`BASE`] on `refs/heads/main`: the
/// options that created it and what the creation wrote come with it.
pub(crate) fn repo_with_action() -> (tempfile::TempDir, Store, Options, Written<Action>) {
    let (dir, store) = repo();
    let opts = options("refs/heads/main");
    let created = create_action(&store, &opts, &new_action(ACTION), at(BASE)).unwrap();
    (dir, store, opts, created)
}

/// Lands a commit on `refs/heads/main` whose `action.json` for `id` is `{}`, a record no reader
/// parses (replacing the action's own when there is one).
pub(crate) fn plant_unparsable_action(store: &Store, id: &str) {
    let tip = store.tip("refs/heads/main").unwrap();
    let layout = crate::finality::layout::detect(&store.snapshot(tip).unwrap())
        .unwrap()
        .layout;
    let path = layout.record_path(&ActionId::parse(id).unwrap(), RecordKind::Action);
    let commit = store
        .write_commit_with(tip, &[(path, b"{}\n".to_vec())], &[], true, "plant", &sig())
        .unwrap();
    store
        .update_ref("refs/heads/main", tip, commit, "plant")
        .unwrap();
}

/// An operator's legacy close of [`ACTION`] to `completed` at [`BASE`] with what `sent` holds.
pub(crate) fn close_as_operator(
    store: &Store,
    opts: &Options,
    sent: &CloseReport,
) -> Result<Written<Reported>, Error> {
    close(
        store,
        opts,
        ACTION,
        "completed",
        sent,
        &Settler::Operator,
        at(BASE),
    )
}

/// The report of a close read from a JSON object of report fields (panics on a broken rule).
pub(crate) fn report_of(json: &str) -> Details {
    let body = crate::canonical::parse(json).unwrap();
    Details::report_from_request(body.as_object().unwrap()).unwrap()
}

pub(crate) fn at(s: &str) -> Timestamp {
    parse_time(s).unwrap_or_else(|| panic!("bad time {s}"))
}

/// Rewrites the tip of `refs/heads/main` into the `flat` layout, the layout of repositories
/// written before layouts were versioned: every record moves (bytes unchanged) to its flat
/// path, and the layout record and the pending index go. Panics when there is nothing to move.
pub(crate) fn flatten(store: &Store) {
    relayout(store, crate::finality::Layout::Flat);
}

/// Rewrites the tip of `refs/heads/main` into layout `to` as an older version would have
/// written it: every record moves (bytes unchanged) to its path in `to`; the layout record is
/// `to`'s (none for `flat`, which also has no pending index). Panics when there is nothing to
/// move or the result does not verify.
pub(crate) fn relayout(store: &Store, to: crate::finality::Layout) {
    use crate::finality::layout;
    let tip = store.tip("refs/heads/main").unwrap();
    let snap = store.snapshot(tip).unwrap();
    let from = layout::detect(&snap).unwrap().layout;
    assert_ne!(from, to, "already {to:?}");
    let moves: Vec<(String, String)> = crate::finality::migrate::records_by_target(&snap, from, to)
        .unwrap()
        .into_iter()
        .map(|(to, (from, _))| (from, to))
        .collect();
    assert!(!moves.is_empty(), "no finality records to move");
    let mut removals = Vec::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    match to.record() {
        Some(record) => files.push((layout::RECORD_PATH.to_owned(), record.into_bytes())),
        None => {
            removals.push(layout::RECORD_PATH.to_owned());
            snap.for_each_file(crate::finality::pending::PENDING, |p| {
                removals.push(p.to_owned())
            })
            .unwrap();
        }
    }
    let none: &[(String, Vec<u8>)] = &[];
    let moved = store
        .write_commit_moving(tip, &files, &moves, true, "test: older layout", &sig())
        .unwrap();
    let done = if removals.is_empty() {
        moved
    } else {
        store
            .write_commit_with(
                Some(moved),
                none,
                &removals,
                false,
                "test: older layout",
                &sig(),
            )
            .unwrap()
    };
    store
        .update_ref("refs/heads/main", tip, done, "test")
        .unwrap();
    let detected = layout::detect(&store.snapshot(Some(done)).unwrap()).unwrap();
    assert_eq!(detected.layout, to);
    let findings = crate::finality::verify(&store.snapshot(Some(done)).unwrap()).unwrap();
    assert!(findings.is_empty(), "{findings:?}");
}

/// Sweep observations that saw action `id` pending at `seen` (the sweeper created it).
pub(crate) fn witnessed(id: &str, seen: Timestamp) -> crate::finality::Observations {
    let mut o = crate::finality::Observations::new();
    o.witness(crate::finality::ActionId::parse(id).unwrap(), seen);
    o
}
