//! Verification of the finality records, for `verify`, `verify --range` and the pre-receive
//! hook: every path is a known record at the path its id gives, every record parses, the claim
//! matches its action's binding and the action was claimable, the outcome is one the operations
//! can write from the action's lifecycle, a stored act hashes to its action's `act_content_hash`
//! (`finality-act-unbound`) and its details keep their rules (`finality-detail-invalid`), nothing
//! holds an unredacted secret, and a push never changes or removes a record (create-only).

use std::collections::{BTreeMap, BTreeSet};

use super::approval::{self, ApprovalDecision};
use super::containment;
use super::decision::{self, Decision, DecisionId};
use super::details;
use super::ids::ActionId;
use super::layout::{self, DECISIONS, Detected, Layout, LayoutError};
use super::paths::{ROOT, RecordKind};
use super::pending;
use super::records::RecordError;
use super::records::{
    Action, MAX_RECORD_BYTES, MAX_TEXT_UNITS, Outcome, parse_action, parse_claim, parse_outcome,
};
use super::redaction::{Security, clean_text, clean_value, keys_confidential};
use super::status::{Lifecycle, OutcomeStatus, Source, Verdict};
use crate::finding::{Finding, Rule};
use crate::identity::Digest;
use crate::privacy;
use crate::store::{self, BlobId, Change, CommitId, Descend, Snapshot, Store, TreeDefect, Walked};
use crate::time::Timestamp;

fn finding(path: &str, rule: Rule, detail: impl Into<String>) -> Finding {
    Finding {
        path: path.to_owned(),
        rule,
        detail: detail.into(),
    }
}

/// The layout a snapshot records; an unknown record is a finding, and the rest is then checked
/// as the default layout (the one a record is most likely to have meant).
fn layout_of(snap: &Snapshot<'_>, findings: &mut Vec<Finding>) -> Result<Detected, store::Error> {
    match layout::detect(snap) {
        Ok(d) => Ok(d),
        Err(LayoutError::UnknownRecord) => {
            findings.push(finding(
                layout::RECORD_PATH,
                Rule::FinalityLayoutRecordInvalid,
                "not the canonical record of a layout this version knows (nibble, hex2x2)",
            ));
            Ok(Detected {
                layout: Layout::DEFAULT,
                fresh: false,
            })
        }
        Err(LayoutError::Store(e)) => Err(e),
    }
}

/// What a path under `finality/v1/` is, in `layout`.
enum PathKind {
    /// The layout record.
    LayoutRecord,
    /// An action record.
    Record(ActionId, RecordKind),
    /// A decision record path (checked by [`verify_decision`]).
    Decision,
    /// A pending-index entry.
    Entry(ActionId, Timestamp),
    /// Not a path of this layout: the finding.
    Bad(Finding),
}

fn path_kind(layout: Layout, path: &str) -> PathKind {
    let under = |dir: &str| {
        path.strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
    };
    let mixed = |what: &str, other: Layout| {
        PathKind::Bad(finding(
            path,
            Rule::FinalityLayoutMixed,
            format!(
                "{what} at the {} layout's path in a {} repository",
                other.name(),
                layout.name()
            ),
        ))
    };
    if path == layout::RECORD_PATH {
        return PathKind::LayoutRecord;
    }
    if under(layout::DECISIONS) {
        return if layout.classify_decision(path).is_some() {
            PathKind::Decision
        } else if let Some(other) = layout.other_classifying_decision(path) {
            mixed("a decision record", other)
        } else {
            PathKind::Decision
        };
    }
    if under(pending::PENDING) {
        return match pending::parse_entry(path) {
            Some(_) if !layout.has_pending_index() => {
                mixed("a pending-index entry", Layout::DEFAULT)
            }
            Some((id, at)) => PathKind::Entry(id, at),
            None => PathKind::Bad(finding(
                path,
                Rule::FinalityUnknownPath,
                "not finality/v1/pending/<YYYY-MM-DD>/<HH>/<created_at ms>.<id>",
            )),
        };
    }
    match layout.classify(path) {
        Some((id, kind)) => PathKind::Record(id, kind),
        None => match layout.other_classifying(path) {
            Some(other) => mixed("an action record", other),
            None => PathKind::Bad(finding(
                path,
                Rule::FinalityUnknownPath,
                format!(
                    "not an action record of the {} layout \
                     (finality/v1/actions/<fan-out of sha256(id)>/<id>/{})",
                    layout.name(),
                    RecordKind::file_names_pattern()
                ),
            )),
        },
    }
}

/// What the pending index must hold for one action, as its records say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// No valid `action.json`: the index is not checked against it (the record is reported).
    Invalid,
    /// No `action.json`: no entry may name the action.
    Absent,
    /// An action created at `created_at`; `pending` when it must have an entry.
    Action {
        /// Its `created_at`.
        created_at: Timestamp,
        /// Whether it is indexed ([`pending::indexed`]).
        pending: bool,
    },
}

/// The index findings of one action: `entries` are the entries naming it (time, path);
/// `complete` when they are all of them (a whole snapshot), else only those a push added, and
/// the expected entry is looked up.
fn index_findings(
    snap: &Snapshot<'_>,
    id: &ActionId,
    expect: Expect,
    entries: &[(Timestamp, String)],
    complete: bool,
) -> Result<Vec<Finding>, store::Error> {
    let mut out = Vec::new();
    match expect {
        Expect::Invalid => {}
        Expect::Absent => {
            for (_, p) in entries {
                out.push(finding(
                    p,
                    Rule::FinalityPendingExtra,
                    format!("an entry for action {id}, which does not exist"),
                ));
            }
        }
        Expect::Action {
            created_at,
            pending: indexed,
        } => {
            let expected = pending::entry_path(id, created_at);
            for (at, p) in entries {
                if !indexed {
                    out.push(finding(
                        p,
                        Rule::FinalityPendingExtra,
                        format!("action {id} has an outcome or a lifecycle the sweep skips"),
                    ));
                } else if *at != created_at {
                    out.push(finding(
                        p,
                        Rule::FinalityPendingTime,
                        format!(
                            "action {id} was created at {}",
                            super::format_time(created_at)
                        ),
                    ));
                }
            }
            let present = if complete {
                entries.iter().any(|(_, p)| *p == expected)
            } else {
                snap.exists(&expected)?
            };
            let listed = entries.iter().any(|(_, p)| *p == expected);
            if indexed && !present && entries.is_empty() {
                out.push(finding(
                    &expected,
                    Rule::FinalityPendingMissing,
                    format!("action {id} is pending and has no entry"),
                ));
            }
            if !indexed && present && !listed {
                out.push(finding(
                    &expected,
                    Rule::FinalityPendingExtra,
                    format!("action {id} has an outcome or a lifecycle the sweep skips"),
                ));
            }
        }
    }
    Ok(out)
}

/// The finding for an index entry that is not an empty file.
fn entry_not_empty(path: &str) -> Finding {
    finding(
        path,
        Rule::FinalityRecordInvalid,
        "a pending-index entry is an empty file",
    )
}

/// Checks that an index entry is an empty file.
fn entry_file(snap: &Snapshot<'_>, path: &str) -> Result<Option<Finding>, store::Error> {
    match snap.read(path, 0) {
        Ok(_) => Ok(None),
        Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
            Ok(Some(entry_not_empty(path)))
        }
        Err(e) => Err(e),
    }
}

/// Checks the finality records of a whole snapshot: the layout record is one this version
/// writes; every path under `finality/v1/` is a record at the path the repository's layout
/// gives its id (a path of another layout is `finality-layout-mixed`); each action directory
/// has a valid `action.json`; its `claim.json` (at most one, by construction) matches the
/// action's binding and the action was claimable; its `outcome.json` (at most one) has a status
/// and a lifecycle the closure table, the legacy mapping or the sweep can produce from the
/// action's initial lifecycle, names the claim's attempt when it names one, and holds no
/// unredacted secret. In a layout with the pending index (`hex2x2`, `nibble`), the index agrees
/// with the records in both directions (`finality-pending-missing`, `-extra`, `-time`). The
/// findings come sorted.
///
/// # Cost
/// Every record is read once, in the order the tree holds it, and every tree once: the pending
/// index and the decisions are walked first, then the rest of `finality/v1/`, each action from
/// its directory's records as the walk meets them. Memory is bounded by one action directory's
/// records, plus 40 bytes for each pending-index entry and 48 for each decision record (the
/// index is checked against the actions, and each action against its decision, without a
/// lookup by path): about 50 MiB for a million decisions.
///
/// # Errors
/// [`store::Error`] when the snapshot cannot be read.
pub fn verify(snap: &Snapshot<'_>) -> Result<Vec<Finding>, store::Error> {
    verify_observed(snap, &mut |_| {}, &mut |_, _| {})
}

/// [`verify`], calling `observe` with every entry under `finality/v1/` (directories, files,
/// symbolic links, submodules; the entries of one directory one after another, as
/// [`Snapshot::try_for_each_entry`] gives them) and `malformed` with every tree there that
/// breaks git's rules on trees, so that a caller checking the entries' modes and names
/// (`verify` of a whole revision) needs no walk of its own. Each entry and each tree is given
/// once.
///
/// # Errors
/// As [`verify`].
pub fn verify_observed(
    snap: &Snapshot<'_>,
    observe: &mut dyn FnMut(&Walked<'_>),
    malformed: &mut dyn FnMut(&str, TreeDefect),
) -> Result<Vec<Finding>, store::Error> {
    let mut findings = Vec::new();
    let layout = layout_of(snap, &mut findings)?.layout;
    let mut walk = Walk {
        snap,
        layout,
        empty: BlobId::of(b"")?,
        findings,
        entries: Vec::new(),
        matched: Vec::new(),
        decisions: Vec::new(),
        group: None,
    };
    // The index and the decisions come before the actions that are checked against them; the
    // rest of the tree then skips them.
    let mut separate = Vec::new();
    for dir in [pending::PENDING, DECISIONS] {
        if snap.is_dir(dir)? {
            snap.try_for_each_entry(
                dir,
                |entry| {
                    observe(entry);
                    walk.visit(entry)?;
                    Ok::<_, store::Error>(Descend::Into)
                },
                &mut *malformed,
            )?;
            separate.push(dir);
        }
        match dir {
            pending::PENDING => walk.entries.sort_unstable(),
            _ => {
                // The last of two records at one path is the one a lookup finds (`Dir::get`).
                walk.decisions.reverse();
                walk.decisions.sort_by_key(|d| d.0);
                walk.decisions.dedup_by_key(|d| d.0);
            }
        }
    }
    walk.matched = vec![false; walk.entries.len()];
    snap.try_for_each_entry(
        ROOT,
        |entry| {
            observe(entry);
            if entry.mode.is_dir() && separate.contains(&entry.path) {
                return Ok(Descend::Over);
            }
            walk.visit(entry)?;
            Ok::<_, store::Error>(Descend::Into)
        },
        &mut *malformed,
    )?;
    walk.flush()?;
    let mut findings = walk.finish()?;
    findings.sort();
    Ok(findings)
}

/// A pending-index entry as [`verify`] keeps it: the sha256 of the action id and the entry's
/// time in epoch milliseconds (the path is a function of the two, [`pending::entry_path`]).
type IndexKey = ([u8; 32], i64);

/// One record file of an action directory, as read.
#[derive(Debug, Default)]
enum Slot {
    /// Nothing at its path.
    #[default]
    Absent,
    /// Its bytes.
    Bytes(Vec<u8>),
    /// Something that is not a file of at most [`MAX_RECORD_BYTES`] (its finding is out).
    Invalid,
}

impl Slot {
    fn present(&self) -> bool {
        !matches!(self, Slot::Absent)
    }

    fn take(&mut self) -> Option<Vec<u8>> {
        match std::mem::take(self) {
            Slot::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// The record files of one action directory, by [`RecordKind`].
#[derive(Debug, Default)]
struct Records {
    action: Slot,
    claim: Slot,
    outcome: Slot,
    approval: Slot,
    containment: Slot,
}

impl Records {
    fn slot(&mut self, kind: RecordKind) -> &mut Slot {
        match kind {
            RecordKind::Action => &mut self.action,
            RecordKind::Claim => &mut self.claim,
            RecordKind::Outcome => &mut self.outcome,
            RecordKind::Approval => &mut self.approval,
            RecordKind::Containment => &mut self.containment,
        }
    }
}

/// The slot of a record read as `read` answered; the finding when it is not a file within the
/// size limit.
fn slot(
    path: &str,
    read: Result<Option<Vec<u8>>, store::Error>,
    out: &mut Vec<Finding>,
) -> Result<Slot, store::Error> {
    match read {
        Ok(Some(bytes)) => Ok(Slot::Bytes(bytes)),
        Ok(None) => Ok(Slot::Absent),
        Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
            out.push(not_a_record_file(path));
            Ok(Slot::Invalid)
        }
        Err(e) => Err(e),
    }
}

fn not_a_record_file(path: &str) -> Finding {
    finding(
        path,
        Rule::FinalityRecordInvalid,
        format!("not a file of at most {MAX_RECORD_BYTES} bytes"),
    )
}

/// The action directory being read by a walk: its id, its records so far and their findings,
/// whether one of them is a file (a directory whose record paths are all directories or
/// submodules holds no record: its files, if any, are unknown paths).
struct Group {
    id: ActionId,
    records: Records,
    findings: Vec<Finding>,
    has_file: bool,
}

/// The state of [`verify`]'s walk.
struct Walk<'s, 'r> {
    snap: &'s Snapshot<'r>,
    layout: Layout,
    /// The id of the empty blob: every index entry's.
    empty: BlobId,
    findings: Vec<Finding>,
    /// The pending-index entries, sorted once the index is walked.
    entries: Vec<IndexKey>,
    /// Whether an action claimed each of `entries`.
    matched: Vec<bool>,
    /// The valid decision records at their paths: sha256 of the id, [`decision_terms`].
    decisions: Vec<([u8; 32], [u8; 16])>,
    group: Option<Group>,
}

impl Walk<'_, '_> {
    /// Takes one entry of the walk.
    fn visit(&mut self, entry: &Walked<'_>) -> Result<(), store::Error> {
        let path = entry.path;
        let Some(blob) = entry.blob else {
            // A directory or a submodule where a record belongs is a record that is not a
            // file; anything else that is not a file is no path of its own.
            if let Some((id, kind)) = self.layout.classify(path) {
                let group = self.group_of(id)?;
                *group.records.slot(kind) = Slot::Invalid;
                group.findings.push(not_a_record_file(path));
            }
            return Ok(());
        };
        match path_kind(self.layout, path) {
            PathKind::LayoutRecord => {}
            PathKind::Decision => {
                let (found, decision) = verify_decision(self.snap, self.layout, path, Some(blob))?;
                self.findings.extend(found);
                if let Some(d) = decision {
                    self.decisions
                        .push((Digest::of(d.decision_id.as_str()).bytes(), terms_of(&d)));
                }
            }
            PathKind::Record(id, kind) => {
                let read = self.snap.read_blob(blob, path, MAX_RECORD_BYTES).map(Some);
                let group = self.group_of(id)?;
                *group.records.slot(kind) = slot(path, read, &mut group.findings)?;
                group.has_file = true;
            }
            PathKind::Entry(id, at) => {
                if blob != self.empty {
                    self.findings.push(entry_not_empty(path));
                }
                self.entries
                    .push((Digest::of(id.as_str()).bytes(), at.millis()));
            }
            PathKind::Bad(f) => self.findings.push(f),
        }
        Ok(())
    }

    /// The group of action `id`, checking the one before when it is another action's: the
    /// records of one action are entries of one directory, which the walk visits together.
    fn group_of(&mut self, id: ActionId) -> Result<&mut Group, store::Error> {
        if self.group.as_ref().is_some_and(|g| g.id != id) {
            self.flush()?;
        }
        Ok(self.group.get_or_insert_with(|| Group {
            id,
            records: Records::default(),
            findings: Vec::new(),
            has_file: false,
        }))
    }

    /// Checks the current action, if any, against its records, its decision and the index.
    fn flush(&mut self) -> Result<(), store::Error> {
        let Some(group) = self.group.take() else {
            return Ok(());
        };
        if !group.has_file {
            return Ok(());
        }
        self.findings.extend(group.findings);
        let id = group.id;
        let decisions = &self.decisions;
        let snap = self.snap;
        let layout = self.layout;
        let (found, expect) = check_records(layout, &id, group.records, &mut |did, action| {
            let key = Digest::of(did.as_str()).bytes();
            let Ok(at) = decisions.binary_search_by_key(&key, |d| d.0) else {
                return Ok(Vec::new());
            };
            if decisions[at].1 == action_terms(action) {
                return Ok(Vec::new());
            }
            // They differ: say how, from the record (a repository in need of repair).
            decision_problems(snap, layout, did, action)
        })?;
        self.findings.extend(found);
        if layout.has_pending_index() {
            let key = Digest::of(id.as_str()).bytes();
            let start = self.entries.partition_point(|e| e.0 < key);
            let mut named = Vec::new();
            for (i, e) in self.entries[start..].iter().enumerate() {
                if e.0 != key {
                    break;
                }
                self.matched[start + i] = true;
                let at = Timestamp::from_millis(e.1);
                named.push((at, pending::entry_path(&id, at)));
            }
            self.findings
                .extend(index_findings(snap, &id, expect, &named, true)?);
        }
        Ok(())
    }

    /// The findings, with those of the index entries no action claimed: the index is walked
    /// again for their ids only when there are any.
    fn finish(mut self) -> Result<Vec<Finding>, store::Error> {
        if self.matched.iter().all(|&m| m) {
            return Ok(self.findings);
        }
        let (entries, matched) = (&self.entries, &self.matched);
        let mut extra = Vec::new();
        self.snap.try_for_each_entry(
            pending::PENDING,
            |entry| {
                if entry.blob.is_some()
                    && let Some((id, at)) = pending::parse_entry(entry.path)
                {
                    let key = (Digest::of(id.as_str()).bytes(), at.millis());
                    let start = entries.partition_point(|e| *e < key);
                    let claimed = entries[start..]
                        .iter()
                        .zip(&matched[start..])
                        .take_while(|(e, _)| **e == key)
                        .any(|(_, m)| *m);
                    if !claimed {
                        extra.push(finding(
                            entry.path,
                            Rule::FinalityPendingExtra,
                            format!("an entry for action {id}, which does not exist"),
                        ));
                    }
                }
                Ok::<_, store::Error>(Descend::Into)
            },
            |_, _| {},
        )?;
        self.findings.extend(extra);
        Ok(self.findings)
    }
}

/// What an action and its guard decision must agree on ([`decision::disagreements`]), as a
/// 16-byte digest: equal exactly when they agree (but for a sha256 collision).
fn decision_terms(
    verdict: Verdict,
    agent_id: Option<&str>,
    principal: &str,
    act_content_hash: Option<&str>,
    containment_ref: Option<&str>,
) -> [u8; 16] {
    let mut buf = Vec::with_capacity(128);
    let mut put = |v: Option<&str>| match v {
        None => buf.push(0),
        Some(t) => {
            buf.push(1);
            buf.extend_from_slice(&(t.len() as u64).to_le_bytes());
            buf.extend_from_slice(t.as_bytes());
        }
    };
    put(Some(verdict.as_str()));
    put(agent_id);
    put(Some(principal));
    put(act_content_hash);
    put(containment_ref);
    let mut out = [0; 16];
    out.copy_from_slice(&Digest::of(&buf).bytes()[..16]);
    out
}

fn terms_of(d: &Decision) -> [u8; 16] {
    decision_terms(
        d.verdict,
        d.agent_id.as_deref(),
        &d.principal,
        d.act_content_hash.as_deref(),
        d.containment_ref.as_deref(),
    )
}

fn action_terms(a: &Action) -> [u8; 16] {
    decision_terms(
        a.guard_verdict,
        Some(&a.agent_id),
        &a.created_by,
        a.act_content_hash.as_deref(),
        a.containment_ref.as_deref(),
    )
}

/// How `action` disagrees with its decision record `id`, read at its path; nothing when the
/// record is absent, unreadable or invalid (it is reported on its own).
fn decision_problems(
    snap: &Snapshot<'_>,
    layout: Layout,
    id: &DecisionId,
    action: &Action,
) -> Result<Vec<&'static str>, store::Error> {
    let path = layout.decision_path(id);
    Ok(match snap.read(&path, MAX_RECORD_BYTES) {
        Ok(Some(bytes)) => match decision::parse(&bytes, id) {
            Ok(d) => decision::disagreements(action, &d),
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    })
}

/// Checks the finality part of a push from `old` to `new`: nothing under
/// `finality/v1/` was modified or deleted (pending-index entries excepted: the index follows
/// the records), every added path is a known record of the repository's layout, every touched
/// action directory is valid at `new` ([`verify_action`]) and agrees with the index there, and
/// no claim was added to an action whose outcome was already set at `old`. A push that
/// changes the layout is a migration: only to the default layout, keeping every record's bytes
/// ([`super::migrate::check_migration`]) and adding no record
/// ([`super::migrate::check_no_record_added`]), and `new` must verify whole.
///
/// # Errors
/// [`store::Error`] when a revision cannot be read.
pub fn verify_range(
    store: &Store,
    old: Option<CommitId>,
    new: CommitId,
) -> Result<Vec<Finding>, store::Error> {
    let mut findings = Vec::new();
    let snap = store.snapshot(Some(new))?;
    let before = store.snapshot(old)?;
    let layout = layout_of(&snap, &mut findings)?.layout;
    let mut ignored = Vec::new();
    let old_layout = layout_of(&before, &mut ignored)?;
    if !old_layout.fresh && old_layout.layout != layout {
        let mut out = Vec::new();
        if layout != Layout::DEFAULT {
            out.push(finding(
                layout::RECORD_PATH,
                Rule::FinalityLayoutChange,
                format!(
                    "the push changes the finality layout from {} to {}; a repository only \
                     moves to {} (`action-ledger maintain` migrates it)",
                    old_layout.layout.name(),
                    layout.name(),
                    Layout::DEFAULT.name()
                ),
            ));
        }
        out.extend(super::migrate::check_migration(
            &before,
            old_layout.layout,
            &snap,
            layout,
        )?);
        out.extend(super::migrate::check_no_record_added(
            &before,
            old_layout.layout,
            &snap,
            layout,
        )?);
        out.extend(verify(&snap)?);
        return Ok(out);
    }
    let mut touched = BTreeSet::new();
    let mut claims = Vec::new();
    let mut decisions = Vec::new();
    let mut entries: BTreeMap<ActionId, Vec<(Timestamp, String)>> = BTreeMap::new();
    for change in store.diff(old, new, ROOT)? {
        match change {
            Change::Modified(p) => findings.push(finding(
                &p,
                Rule::Modified,
                "an existing finality record was changed",
            )),
            Change::Deleted(p) => match path_kind(layout, &p) {
                // The index follows the records: the records decide (below) whether it may go.
                PathKind::Entry(id, _) => {
                    touched.insert(id);
                }
                _ => findings.push(finding(
                    &p,
                    Rule::Deleted,
                    "an existing finality record was deleted",
                )),
            },
            Change::Added(p) => match path_kind(layout, &p) {
                PathKind::LayoutRecord => {}
                PathKind::Decision => decisions.push(p),
                PathKind::Record(id, kind) => {
                    if matches!(kind, RecordKind::Claim | RecordKind::Approval) {
                        claims.push((id.clone(), kind));
                    }
                    touched.insert(id);
                }
                PathKind::Entry(id, at) => {
                    findings.extend(entry_file(&snap, &p)?);
                    touched.insert(id.clone());
                    entries.entry(id).or_default().push((at, p));
                }
                PathKind::Bad(f) => findings.push(f),
            },
        }
    }
    for path in &decisions {
        findings.extend(verify_decision(&snap, layout, path, None)?.0);
    }
    // In the order of their directories, so that consecutive lookups share the trees above
    // them (the snapshot's cache), not in the order of the ids, which is random in the tree.
    let mut touched: Vec<(String, ActionId)> = touched
        .into_iter()
        .map(|id| (layout.action_dir(&id), id))
        .collect();
    touched.sort_unstable();
    for (_, id) in &touched {
        let (f, expect) = check_action(&snap, layout, id)?;
        findings.extend(f);
        if layout.has_pending_index() {
            let named = entries.remove(id).unwrap_or_default();
            findings.extend(index_findings(&snap, id, expect, &named, false)?);
        }
    }
    if !claims.is_empty() {
        for (id, kind) in claims {
            if before
                .exists(&layout.record_path(&id, RecordKind::Outcome))
                .unwrap_or(false)
            {
                let (rule, detail) = match kind {
                    RecordKind::Claim => (
                        Rule::FinalityClaimMismatch,
                        "claimed after the outcome was set",
                    ),
                    _ => (
                        Rule::FinalityLifecycleMismatch,
                        "approved or denied after the outcome was set",
                    ),
                };
                findings.push(finding(&layout.record_path(&id, kind), rule, detail));
            }
        }
    }
    Ok(findings)
}

/// How a containment verdict disagrees with its action ([`containment`]): a verdict on an
/// action that is not contained, or before its contained run completed
/// (`finality-lifecycle-mismatch`); a promotion of an action without a `containment_ref`, or an
/// unredacted reasoning (`finality-record-invalid`, `privacy`).
fn containment_problems(
    action: &Action,
    outcome: Option<&Outcome>,
    c: &containment::Containment,
) -> Vec<(Rule, &'static str)> {
    let mut out = Vec::new();
    if action.guard_verdict != Verdict::AllowContained {
        out.push((
            Rule::FinalityLifecycleMismatch,
            "a containment verdict on an action that is not contained",
        ));
    } else if outcome.map(|o| o.status) != Some(OutcomeStatus::Completed) {
        out.push((
            Rule::FinalityLifecycleMismatch,
            "a containment verdict before the contained run completed",
        ));
    }
    if c.verdict == containment::ContainmentVerdict::Promote && action.containment_ref.is_none() {
        out.push((
            Rule::FinalityRecordInvalid,
            "a promotion of an action without a containment_ref",
        ));
    }
    let mut security = Security::default();
    if c.reasoning
        .as_ref()
        .is_some_and(|r| clean_text(r, MAX_TEXT_UNITS, &mut security) != *r)
    {
        out.push((
            Rule::Privacy,
            "the reasoning holds an unredacted secret or confidential identifier",
        ));
    }
    out
}

/// Checks one action directory (see [`verify`]) in the snapshot's layout.
///
/// # Errors
/// [`store::Error`] when the snapshot cannot be read.
pub fn verify_action(snap: &Snapshot<'_>, id: &ActionId) -> Result<Vec<Finding>, store::Error> {
    let mut findings = Vec::new();
    let layout = layout_of(snap, &mut findings)?.layout;
    findings.extend(check_action(snap, layout, id)?.0);
    Ok(findings)
}

/// [`verify_action`] in `layout`, with what the index must hold for the action: its records
/// and its decision found by path.
fn check_action(
    snap: &Snapshot<'_>,
    layout: Layout,
    id: &ActionId,
) -> Result<(Vec<Finding>, Expect), store::Error> {
    let mut out = Vec::new();
    let mut records = Records::default();
    for kind in [
        RecordKind::Action,
        RecordKind::Claim,
        RecordKind::Outcome,
        RecordKind::Approval,
        RecordKind::Containment,
    ] {
        let path = layout.record_path(id, kind);
        *records.slot(kind) = slot(&path, snap.read(&path, MAX_RECORD_BYTES), &mut out)?;
    }
    let (found, expect) = check_records(layout, id, records, &mut |did, action| {
        decision_problems(snap, layout, did, action)
    })?;
    out.extend(found);
    Ok((out, expect))
}

/// How an action disagrees with its guard decision (by the decision's id): nothing when the
/// decision has no valid record.
type DecisionCheck<'c> =
    dyn FnMut(&DecisionId, &Action) -> Result<Vec<&'static str>, store::Error> + 'c;

/// Checks one action from its records (read already, their own findings out), with
/// `decision` for its guard decision; what the index must hold for it.
fn check_records(
    layout: Layout,
    id: &ActionId,
    mut records: Records,
    decision: &mut DecisionCheck<'_>,
) -> Result<(Vec<Finding>, Expect), store::Error> {
    let mut out = Vec::new();
    let (action_present, claim_present, outcome_present, approval_present) = (
        records.action.present(),
        records.claim.present(),
        records.outcome.present(),
        records.approval.present(),
    );
    let action_bytes = records.action.take();
    let claim_bytes = records.claim.take();
    let outcome_bytes = records.outcome.take();
    let approval_bytes = records.approval.take();
    let containment_present = records.containment.present();
    let containment_bytes = records.containment.take();
    let containment_path = layout.record_path(id, RecordKind::Containment);
    let (action_path, claim_path, outcome_path) = (
        layout.record_path(id, RecordKind::Action),
        layout.record_path(id, RecordKind::Claim),
        layout.record_path(id, RecordKind::Outcome),
    );
    let approval_path = layout.record_path(id, RecordKind::Approval);
    if !action_present {
        for (path, present) in [
            (&claim_path, claim_present),
            (&outcome_path, outcome_present),
            (&approval_path, approval_present),
            (&containment_path, containment_present),
        ] {
            if present {
                out.push(finding(
                    path,
                    Rule::FinalityActionMissing,
                    "a record without its action.json",
                ));
            }
        }
        return Ok((out, Expect::Absent));
    }
    let action = parsed(
        &mut out,
        &action_path,
        action_bytes.map(|b| parse_action(&b, id).map(|a| (a, Digest::of(&b)))),
    );
    let claim = parsed(
        &mut out,
        &claim_path,
        claim_bytes.map(|b| parse_claim(&b, id)),
    );
    let outcome = parsed(
        &mut out,
        &outcome_path,
        outcome_bytes.map(|b| parse_outcome(&b, id)),
    );
    let approval = parsed(
        &mut out,
        &approval_path,
        approval_bytes.map(|b| approval::parse_approval(&b, id)),
    );
    let containment = parsed(
        &mut out,
        &containment_path,
        containment_bytes.map(|b| containment::parse_containment(&b, id)),
    );
    let Some((action, action_sha)) = action else {
        return Ok((out, Expect::Invalid));
    };
    if let Some(c) = &containment {
        for (rule, problem) in containment_problems(&action, outcome.as_ref(), c) {
            out.push(finding(&containment_path, rule, problem));
        }
    }
    if approval.is_some() && action.lifecycle != Lifecycle::PendingApproval {
        out.push(finding(
            &approval_path,
            Rule::FinalityLifecycleMismatch,
            format!(
                "an operator decision on an action born {}",
                action.lifecycle
            ),
        ));
    }
    let approved = approval
        .as_ref()
        .is_some_and(|p| p.decision == ApprovalDecision::Approve);
    if let Some(decision_id) = action
        .guard_decision_id
        .as_deref()
        .and_then(ActionId::parse)
    {
        for problem in decision(&decision_id, &action)? {
            out.push(finding(&action_path, Rule::FinalityRecordInvalid, problem));
        }
    }
    let ids = [
        ("agent_id", Some(&action.agent_id)),
        ("created_by", Some(&action.created_by)),
        ("guard_decision_id", action.guard_decision_id.as_ref()),
        ("containment_ref", action.containment_ref.as_ref()),
    ];
    for (key, value) in ids {
        if let Some(v) = value
            && privacy::contains_confidential_identifier(v)
        {
            out.push(finding(
                &action_path,
                Rule::Privacy,
                format!("{key} contains a confidential identifier"),
            ));
        }
    }
    if let Some(details) = &action.details {
        for problem in details.problems(action.act_content_hash.as_deref()) {
            let rule = match problem {
                details::Problem::ActUnbound(_) => Rule::FinalityActUnbound,
                details::Problem::Unredacted(_) => Rule::Privacy,
            };
            out.push(finding(&action_path, rule, problem.to_string()));
        }
    }
    if let Some(c) = &claim {
        let mut problems = Vec::new();
        if c.binding_sha256 != action_sha {
            problems.push("binding_sha256 is not the sha256 of action.json");
        }
        if action.guard_decision_id.as_deref() != Some(c.guard_decision_id.as_str()) {
            problems.push("guard_decision_id is not the action's");
        }
        if action.execution_protocol != Some(1) {
            problems.push("the action is not protocol 1");
        }
        if action.lifecycle != Lifecycle::Running
            && !(action.lifecycle == Lifecycle::PendingApproval && approved)
        {
            problems.push("the action's lifecycle was never running");
        }
        let permitted = action.guard_verdict.is_permissive()
            || (action.guard_verdict == Verdict::RequireApproval && approved);
        if !permitted
            || (action.guard_verdict == Verdict::AllowContained && action.containment_ref.is_none())
        {
            problems.push("the action's guard verdict does not permit a claim");
        }
        for p in problems {
            out.push(finding(&claim_path, Rule::FinalityClaimMismatch, p));
        }
    }
    if let Some(o) = &outcome {
        // An operator decision came first (it is refused once an outcome exists): the outcome
        // closed the lifecycle the decision left.
        let mut before = action.clone();
        if let Some(p) = &approval {
            before.lifecycle = p.lifecycle;
        }
        if let Some(problem) = lifecycle_problem(&before, o) {
            out.push(finding(
                &outcome_path,
                Rule::FinalityLifecycleMismatch,
                problem,
            ));
        }
        if let Some(attempt) = &o.attempt_id
            && claim.as_ref().map(|c| &c.attempt_id) != Some(attempt)
        {
            out.push(finding(
                &outcome_path,
                Rule::FinalityAttemptMismatch,
                format!("attempt {attempt} does not hold the action's claim"),
            ));
        }
        let mut security = Security::default();
        let unredacted = [&o.summary, &o.error_message]
            .into_iter()
            .flatten()
            .any(|t| clean_text(t, MAX_TEXT_UNITS, &mut security) != *t)
            || o.progress
                .as_ref()
                .is_some_and(|p| clean_value(p, &mut security) != *p || keys_confidential(p))
            || o.report
                .as_ref()
                .is_some_and(|r| !r.problems(None).is_empty());
        if unredacted {
            out.push(finding(
                &outcome_path,
                Rule::Privacy,
                "the outcome holds an unredacted secret or confidential identifier",
            ));
        }
    }
    let expect = if (outcome_present && outcome.is_none())
        || (approval_present && approval.is_none())
        || (containment_present && containment.is_none())
    {
        Expect::Invalid
    } else {
        let lifecycle = match (&outcome, &approval) {
            (Some(o), _) => o.lifecycle,
            (None, Some(a)) => a.lifecycle,
            (None, None) => action.lifecycle,
        };
        Expect::Action {
            created_at: action.created_at,
            pending: outcome.is_none() && !lifecycle.is_sweep_excluded(),
        }
    };
    Ok((out, expect))
}

/// Checks one path under the decisions directory: a decision record at the path its id gives,
/// valid and redacted; the record too when it is valid. `blob` is the file's content id when
/// the caller has it (a walk), else the path is looked up.
fn verify_decision(
    snap: &Snapshot<'_>,
    layout: Layout,
    path: &str,
    blob: Option<BlobId>,
) -> Result<(Vec<Finding>, Option<Decision>), store::Error> {
    let Some(id) = layout.classify_decision(path) else {
        let found = vec![finding(
            path,
            Rule::FinalityUnknownPath,
            format!(
                "not a decision record of the {} layout \
                 (finality/v1/decisions/<fan-out of sha256(id)>/<id>.json)",
                layout.name()
            ),
        )];
        return Ok((found, None));
    };
    let read = match blob {
        Some(blob) => snap.read_blob(blob, path, MAX_RECORD_BYTES).map(Some),
        None => snap.read(path, MAX_RECORD_BYTES),
    };
    let bytes = match read {
        Ok(Some(b)) => b,
        Ok(None) => return Ok((Vec::new(), None)),
        Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
            return Ok((vec![not_a_record_file(path)], None));
        }
        Err(e) => return Err(e),
    };
    Ok(match decision::parse(&bytes, &id) {
        Err(e) => (
            vec![finding(path, Rule::FinalityRecordInvalid, e.to_string())],
            None,
        ),
        Ok(d) => (
            decision::privacy_problems(&d)
                .into_iter()
                .map(|p| finding(path, Rule::Privacy, p))
                .collect(),
            Some(d),
        ),
    })
}

/// The parsed record, or a finding for it.
fn parsed<T>(out: &mut Vec<Finding>, path: &str, r: Option<Result<T, RecordError>>) -> Option<T> {
    match r {
        Some(Ok(v)) => Some(v),
        Some(Err(reason)) => {
            let rule = match reason {
                RecordError::Detail(_) => Rule::FinalityDetailInvalid,
                _ => Rule::FinalityRecordInvalid,
            };
            out.push(finding(path, rule, reason.to_string()));
            None
        }
        None => None,
    }
}

/// Whether an outcome's status, lifecycle and source are what the operations can write from the
/// action's initial lifecycle; the problem when not.
fn lifecycle_problem(action: &Action, o: &Outcome) -> Option<String> {
    let initial = action.lifecycle;
    let expected = match o.source {
        Source::Outcome => {
            if !matches!(
                o.status,
                OutcomeStatus::Completed | OutcomeStatus::Partial | OutcomeStatus::Failed
            ) {
                return Some(format!("a reported outcome cannot be {}", o.status));
            }
            if initial.refuses_outcome() {
                return Some(format!("no outcome can be reported in lifecycle {initial}"));
            }
            initial.closed_by(o.status)
        }
        Source::LegacyClose => {
            if initial != Lifecycle::Running {
                return Some(format!(
                    "a legacy close needs lifecycle running, not {initial}"
                ));
            }
            if o.lifecycle.legacy_outcome() != Some(o.status) {
                return Some(format!(
                    "a legacy close to {} implies outcome {}, not {}",
                    o.lifecycle,
                    o.lifecycle
                        .legacy_outcome()
                        .map_or("(none)", OutcomeStatus::as_str),
                    o.status
                ));
            }
            o.lifecycle
        }
        Source::Sweep => {
            if o.status != OutcomeStatus::LostConfirmation {
                return Some(format!(
                    "the sweep writes lost_confirmation, not {}",
                    o.status
                ));
            }
            if initial.is_sweep_excluded() {
                return Some(format!("the sweep skips lifecycle {initial}"));
            }
            initial.closed_by(o.status)
        }
    };
    (o.lifecycle != expected).then(|| {
        format!(
            "lifecycle {} after outcome {} ({}) from {initial}; expected {expected}",
            o.lifecycle, o.status, o.source
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;

    /// A push may add finality records but never change or remove one, nor claim an action whose
    /// outcome was already set.
    #[test]
    fn push_ranges_refuse_rewrites_of_finality_records() {
        let (_dir, store, opts, _) = repo_with_action();
        let ref_name = "refs/heads/main";
        let created = store.tip(ref_name).unwrap().unwrap();
        claim(&store, &opts, ACTION, &request(ATTEMPT), at(BASE)).unwrap();
        let report = OutcomeReport {
            status: "completed".into(),
            ..OutcomeReport::default()
        };
        report_outcome(&store, &opts, ACTION, &report, &Settler::Operator, at(BASE)).unwrap();
        let done = store.tip(ref_name).unwrap().unwrap();
        let rules = |old, new| -> Vec<&'static str> {
            let mut r: Vec<&str> = crate::verify::verify_range(&store, old, new)
                .unwrap()
                .findings
                .iter()
                .map(|f| f.rule.code())
                .collect();
            r.sort_unstable();
            r.dedup();
            r
        };
        assert_eq!(rules(Some(created), done), Vec::<&str>::new());
        assert_eq!(rules(None, done), Vec::<&str>::new());
        let id = ActionId::parse(ACTION).unwrap();
        let edit = |put: Vec<(String, Vec<u8>)>, remove: Vec<String>| {
            store
                .write_commit_with(Some(done), &put, &remove, true, "edit", &sig())
                .unwrap()
        };
        let other = Claim {
            action_id: id.clone(),
            attempt_id: AttemptId::parse("attempt-0000000002").unwrap(),
            binding_sha256: show(&store, ref_name, ACTION).unwrap().action_sha256,
            claimed_at: at(BASE),
            guard_decision_id: "gd_1".into(),
        };
        let rewritten = edit(
            vec![(
                crate::finality::Layout::DEFAULT
                    .record_path(&id, crate::finality::RecordKind::Claim),
                other.to_bytes(),
            )],
            vec![],
        );
        assert_eq!(rules(Some(done), rewritten), vec!["modified"]);
        let deleted = edit(
            vec![],
            vec![
                crate::finality::Layout::DEFAULT
                    .record_path(&id, crate::finality::RecordKind::Outcome),
            ],
        );
        assert_eq!(rules(Some(done), deleted), vec!["deleted"]);
        let stray = edit(vec![(format!("{ROOT}/notes.txt"), b"x\n".to_vec())], vec![]);
        assert_eq!(rules(Some(done), stray), vec!["finality-unknown-path"]);
        // A claim added to an action whose outcome was set before the push.
        create_action(&store, &opts, &new_action("act_late"), at(BASE)).unwrap();
        close(
            &store,
            &opts,
            "act_late",
            "completed",
            &CloseReport::default(),
            &Settler::Operator,
            at(BASE),
        )
        .unwrap();
        let before = store.tip(ref_name).unwrap().unwrap();
        let late = ActionId::parse("act_late").unwrap();
        let st = show(&store, ref_name, "act_late").unwrap();
        let c = Claim {
            action_id: late.clone(),
            attempt_id: AttemptId::parse(ATTEMPT).unwrap(),
            binding_sha256: st.action_sha256,
            claimed_at: at(BASE),
            guard_decision_id: "gd_1".into(),
        };
        let claimed_late = store
            .write_commit(
                Some(before),
                &[(
                    crate::finality::Layout::DEFAULT
                        .record_path(&late, crate::finality::RecordKind::Claim),
                    c.to_bytes(),
                )],
                "late",
                &sig(),
            )
            .unwrap();
        assert_eq!(
            rules(Some(before), claimed_late),
            vec!["finality-claim-mismatch"]
        );
    }

    /// The findings of a whole snapshot as `verify` found them before it walked the tree: a
    /// listing of every file, then each action looked up by path in id order. The oracle of
    /// [`the_walk_finds_what_lookups_by_path_find`].
    /// A legacy close's report is stored redacted, so `verify` is clean; the same report with
    /// the secret left in it is a `privacy` finding on `outcome.json` (issue 45).
    #[test]
    fn an_unredacted_close_report_is_a_privacy_finding() {
        let (_dir, store, opts, _) = repo_with_action();
        let ref_name = "refs/heads/main";
        let raw =
            report_of(r#"{"model":"ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","tokens_in":3}"#);
        let sent = CloseReport {
            report: Some(raw.clone()),
            ..CloseReport::default()
        };
        close_as_operator(&store, &opts, &sent).unwrap();
        let closed = store.tip(ref_name).unwrap().unwrap();
        let findings = crate::verify::verify_revision(&store, closed)
            .unwrap()
            .findings;
        assert!(findings.is_empty(), "{findings:?}");
        let mut o = show(&store, ref_name, ACTION).unwrap().outcome.unwrap();
        assert!(
            !format!("{:?}", o.report).contains("ghp_a"),
            "stored redacted"
        );
        o.report = Some(raw);
        let id = ActionId::parse(ACTION).unwrap();
        let path = Layout::DEFAULT.record_path(&id, RecordKind::Outcome);
        let leaked = store
            .write_commit_with(
                Some(closed),
                &[(path.clone(), o.to_bytes())],
                &[],
                true,
                "leak",
                &sig(),
            )
            .unwrap();
        let findings = crate::verify::verify_revision(&store, leaked)
            .unwrap()
            .findings;
        assert!(
            findings.iter().any(|f| f.rule == Rule::Privacy
                && f.detail.contains("the outcome holds an unredacted secret")),
            "{findings:?}"
        );
    }

    fn by_lookup(snap: &Snapshot<'_>) -> Vec<Finding> {
        let mut findings = Vec::new();
        let layout = layout_of(snap, &mut findings).unwrap().layout;
        let mut dirs = BTreeSet::new();
        let mut entries: BTreeMap<ActionId, Vec<(Timestamp, String)>> = BTreeMap::new();
        for path in snap.list_files(ROOT).unwrap() {
            match path_kind(layout, &path) {
                PathKind::LayoutRecord => {}
                PathKind::Decision => {
                    findings.extend(verify_decision(snap, layout, &path, None).unwrap().0);
                }
                PathKind::Record(id, _) => {
                    dirs.insert(id);
                }
                PathKind::Entry(id, at) => {
                    findings.extend(entry_file(snap, &path).unwrap());
                    entries.entry(id).or_default().push((at, path));
                }
                PathKind::Bad(f) => findings.push(f),
            }
        }
        for id in &dirs {
            let (f, expect) = check_action(snap, layout, id).unwrap();
            findings.extend(f);
            let named = entries.remove(id).unwrap_or_default();
            findings.extend(index_findings(snap, id, expect, &named, true).unwrap());
        }
        for (id, named) in entries {
            findings.extend(index_findings(snap, &id, Expect::Absent, &named, true).unwrap());
        }
        findings.sort();
        findings
    }

    /// The walk in tree order reports exactly what lookups by path report, over every kind of
    /// damage it handles on its own: index entries that are not empty, at the wrong time, for
    /// closed or absent actions, or missing; records that are directories, too large, or
    /// without their action; a directory whose only record path is a directory; an action
    /// that disagrees with its decision record. Each entry is observed once.
    #[test]
    fn the_walk_finds_what_lookups_by_path_find() {
        let (_dir, store, opts, created) = repo_with_action();
        let layout = Layout::DEFAULT;
        let id = |s: &str| ActionId::parse(s).unwrap();
        create_action(&store, &opts, &new_action("act_done"), at(BASE)).unwrap();
        close(
            &store,
            &opts,
            "act_done",
            "completed",
            &CloseReport::default(),
            &Settler::Operator,
            at(BASE),
        )
        .unwrap();
        for a in ["act_dirclaim", "act_big", "act_unindexed"] {
            create_action(&store, &opts, &new_action(a), at(BASE)).unwrap();
        }
        let decision = |did: &str, agent: &str| Decision {
            decision_id: id(did),
            verdict: Verdict::Allow,
            rule: None,
            reason: None,
            action_type: None,
            agent_id: Some(agent.into()),
            principal: "principal-a".into(),
            act_content_hash: act_content_hash(Some(&default_act())),
            containment_ref: None,
            decided_at: at(BASE),
        };
        for (a, did) in [("act_agrees", "gd_8"), ("act_differs", "gd_9")] {
            let mut n = new_action(a);
            n.guard_decision_id = Some(did.into());
            create_action(&store, &opts, &n, at(BASE)).unwrap();
        }
        let tip = store.tip("refs/heads/main").unwrap().unwrap();
        let created_at = created.value.created_at;
        let later = Timestamp::from_millis(created_at.millis() + 3_600_000);
        let put: Vec<(String, Vec<u8>)> = vec![
            (pending::entry_path(&id(ACTION), later), vec![]),
            (pending::entry_path(&id("act_done"), created_at), vec![]),
            (pending::entry_path(&id("act_ghost"), created_at), vec![]),
            (pending::entry_path(&id("act_ghost2"), later), b"x".to_vec()),
            (
                format!(
                    "{}/x",
                    layout.record_path(&id("act_nofile"), RecordKind::Outcome)
                ),
                b"{}".to_vec(),
            ),
            (
                format!(
                    "{}/x",
                    layout.record_path(&id("act_dirclaim"), RecordKind::Claim)
                ),
                b"{}".to_vec(),
            ),
            (
                layout.record_path(&id("act_big"), RecordKind::Action),
                vec![b' '; MAX_RECORD_BYTES as usize + 1],
            ),
            (
                layout.record_path(&id("act_orphan"), RecordKind::Outcome),
                b"{}".to_vec(),
            ),
            (
                layout.decision_path(&id("gd_8")),
                decision("gd_8", "agent-a").to_bytes(),
            ),
            (
                layout.decision_path(&id("gd_9")),
                decision("gd_9", "agent-b").to_bytes(),
            ),
        ];
        let unindexed = store
            .snapshot(Some(tip))
            .unwrap()
            .list_files(pending::PENDING)
            .unwrap()
            .into_iter()
            .filter(|p| p.ends_with(".act_unindexed"))
            .collect::<Vec<_>>();
        assert_eq!(unindexed.len(), 1);
        let damaged = store
            .write_commit_with(Some(tip), &put, &unindexed, true, "damage", &sig())
            .unwrap();
        let snap = store.snapshot(Some(damaged)).unwrap();
        let want = by_lookup(&snap);
        let mut observed = Vec::new();
        let got = verify_observed(
            &snap,
            &mut |e| observed.push(e.path.to_owned()),
            &mut |p, d| panic!("{p}: {d:?}"),
        )
        .unwrap();
        assert_eq!(got, want);
        let mut rules: Vec<&str> = got.iter().map(|f| f.rule.code()).collect();
        rules.sort_unstable();
        rules.dedup();
        assert_eq!(
            rules,
            [
                "finality-action-missing",
                "finality-pending-extra",
                "finality-pending-missing",
                "finality-pending-time",
                "finality-record-invalid",
                "finality-unknown-path",
            ]
        );
        for detail in [
            "agent_id is not the decision's",
            "a pending-index entry is an empty file",
            "an entry for action act_ghost, which does not exist",
            "not a file of at most",
        ] {
            assert!(
                got.iter().any(|f| f.detail.contains(detail)),
                "{detail}: {got:#?}"
            );
        }
        assert!(
            !got.iter().any(|f| f.path.contains("act_agrees")),
            "{got:#?}"
        );
        // The directory-only record path is no action: only its file is reported.
        let nofile: Vec<_> = got
            .iter()
            .filter(|f| f.path.contains("act_nofile"))
            .collect();
        assert_eq!(nofile.len(), 1, "{nofile:?}");
        let mut walked = Vec::new();
        snap.for_each_entry(ROOT, |e| walked.push(e.path.to_owned()))
            .unwrap();
        observed.sort();
        walked.sort();
        assert_eq!(observed, walked);
        // The findings of a clean snapshot are none, by either road.
        let clean = store.snapshot(Some(tip)).unwrap();
        assert_eq!(verify(&clean).unwrap(), by_lookup(&clean));
        assert!(verify(&clean).unwrap().is_empty());
    }
}
