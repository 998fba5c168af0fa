//! Group commit: many finality operations checked against one tip and landed as ONE commit with
//! ONE compare-and-swap of the ledger ref (local, or a leased push to a remote).
//!
//! Each operation is a planner: a function of an [`Overlay`] (the tip's tree plus the records
//! staged by the operations before it in the same batch) and the batch's clock reading. It
//! checks its preconditions exactly as the single-operation functions of the parent module do
//! and stages its records; a planner that refuses stages nothing, and the others are not
//! affected. [`land`] writes everything staged as one commit on the tip and swaps the ref.
//!
//! When the ref moved underneath (another server, a CLI writer), every planner runs again from
//! scratch on the new tip, so a claim that lost to a claim landed elsewhere is now refused, and
//! nothing is ever answered from a plan that did not land. When the attempts are used up, or the
//! repository cannot be written, every operation that would have written (or whose answer
//! depended on a record staged earlier in the batch) gets [`BatchError::Unavailable`]: the
//! caller was not granted anything and must not be told it lost a race.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

use super::approval::{ApprovalDecision, ApprovalExpiry};
use super::claim::{ClaimRefusal, check_claim, claim_input, claim_line, plan_claim};
use super::containment::{self, Containment, ContainmentStatus, ContainmentVerdict};
use super::create::id_field;
use super::decision::{self, Decision};
use super::observations::Observations;
use super::outcome::{CloseReport, outcome_line, prepare_close, prepare_report};
use super::sweep::{ClockNotice, is_sweepable, notice, notices, timed_out};
use super::write::Written;
use super::{
    ACTIONS, ActionId, Approval, Claim, ClaimRequest, Error, Layout, Lifecycle, MAX_TEXT_UNITS,
    NewAction, Options, Outcome, OutcomeReport, Reported, Security, Settler, State, SweepReport,
    Swept, clean_text, pending, timeout_minutes,
};
use crate::finding::Rule;
use crate::identity::Digest;
use crate::store::{self, CommitId, Snapshot, Store};
use crate::time::Timestamp;

/// Where a batch lands: the local ref, or a remote's by leased push (the landing loop shared
/// with publishing and the CLI, [`store::land()`](fn@crate::store::land)).
pub use crate::store::remote::Target;

/// Why an operation of a batch did not land.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The operation's own answer: a refusal or invalid input, decided on the tip that landed
    /// (or on the committed tip alone).
    #[error(transparent)]
    Refused(#[from] Error),
    /// The batch could not be landed (the ref kept moving, the repository or the remote could
    /// not be written). Nothing of the operation was recorded; read the state back before
    /// retrying.
    #[error("the ledger could not be written: {reason}; nothing was recorded, retry later")]
    Unavailable {
        /// What failed.
        reason: String,
    },
}

/// The tip's tree plus the records staged by the operations planned before (and the pending
/// index entries they add or remove), in the tip's layout.
pub struct Overlay<'s> {
    snap: Snapshot<'s>,
    layout: Layout,
    fresh: bool,
    staged: BTreeMap<String, Vec<u8>>,
    removed: BTreeSet<String>,
    log: Vec<Edit>,
    lines: Vec<String>,
    read_staged: Cell<bool>,
}

/// One change of an overlay, kept to roll a refused operation back.
enum Edit {
    /// A path staged.
    Staged(String),
    /// A path staged earlier, unstaged again (with its bytes).
    Unstaged(String, Vec<u8>),
    /// A path of the tip removed.
    Removed(String),
}

impl<'s> Overlay<'s> {
    /// An empty overlay on `snap`, in its layout ([`detect`](super::layout::detect)).
    ///
    /// # Errors
    /// [`Error::Layout`] for an unknown layout record, [`Error::Store`].
    pub fn new(snap: Snapshot<'s>) -> Result<Overlay<'s>, Error> {
        let detected = super::layout::detect(&snap)?;
        Ok(Overlay {
            snap,
            layout: detected.layout,
            fresh: detected.fresh,
            staged: BTreeMap::new(),
            removed: BTreeSet::new(),
            log: Vec::new(),
            lines: Vec::new(),
            read_staged: Cell::new(false),
        })
    }

    /// The layout of the tip (and of everything staged).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The tip's tree, without what is staged (for walks that read the tip only, and for the
    /// dashboard's fold of the ledger's events at the same tip).
    pub fn snapshot(&self) -> &Snapshot<'s> {
        &self.snap
    }

    /// The record at `path`: staged, else the tip's unless removed; `None` when absent.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for an entry that is not a file within
    /// [`MAX_RECORD_BYTES`](super::MAX_RECORD_BYTES),
    /// [`Error::Store`] when the tip cannot be read.
    pub fn read(&self, path: &str) -> Result<Option<Vec<u8>>, Error> {
        if let Some(bytes) = self.staged.get(path) {
            self.read_staged.set(true);
            return Ok(Some(bytes.clone()));
        }
        if self.removed.contains(path) {
            self.read_staged.set(true);
            return Ok(None);
        }
        super::state::read_record(&self.snap, path)
    }

    /// The state of action `id` (as [`super::read_state`]), staged records included.
    ///
    /// # Errors
    /// As [`Overlay::read`], and [`Error::Corrupt`] for an invalid record.
    pub fn state(&self, id: &ActionId) -> Result<Option<State>, Error> {
        self.state_without(id, &BTreeSet::new())
    }

    /// [`Overlay::state`] as if the records at `hidden` were absent.
    fn state_without(
        &self,
        id: &ActionId,
        hidden: &BTreeSet<&str>,
    ) -> Result<Option<State>, Error> {
        super::state::refuse_other_copy(&self.snap, self.layout, id)?;
        super::state::state_from(id, |kind| {
            let path = self.layout.record_path(id, kind);
            if hidden.contains(path.as_str()) {
                return Ok(None);
            }
            Ok(self.read(&path)?.map(|b| (path, b)))
        })
    }

    /// The decision record `id`, when there is one.
    ///
    /// # Errors
    /// As [`Overlay::read`], and [`Error::Corrupt`] for an invalid record or one with a copy at
    /// another layout's place.
    pub fn decision(&self, id: &decision::DecisionId) -> Result<Option<Decision>, Error> {
        super::state::refuse_other_decision_copy(&self.snap, self.layout, id)?;
        let path = self.layout.decision_path(id);
        match self.read(&path)? {
            None => Ok(None),
            Some(bytes) => decision::parse(&bytes, id)
                .map(Some)
                .map_err(|e| Error::Corrupt {
                    path,
                    reason: e.to_string(),
                }),
        }
    }

    /// The actions on the tip or staged whose directory holds no outcome record, by id, and
    /// the number of action directories seen (directories whose name or prefix is not valid
    /// are left to `verify`): the `flat` layout's sweep, which has no index. The tip is walked
    /// without listing it: the files of one action directory come one after another, so
    /// memory follows the undecided actions, not the repository. The walk goes one bucket
    /// (`<h>/`) at a time and asks `stop` before each: `None` when it said to stop.
    fn undecided_actions(
        &self,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<(Vec<ActionId>, usize)>, Error> {
        use super::RecordKind::Outcome;
        let layout = self.layout;
        let mut staged: BTreeMap<ActionId, bool> = BTreeMap::new();
        for path in self.staged.keys() {
            if let Some((id, kind)) = layout.classify(path) {
                *staged.entry(id).or_default() |= kind == Outcome;
            }
        }
        let mut undecided = Vec::new();
        let mut seen = 0usize;
        let mut note = |id: ActionId, decided: bool| {
            seen += 1;
            if !decided {
                undecided.push(id);
            }
        };
        let mut buckets = self.snap.entry_names(ACTIONS)?;
        buckets.sort_unstable();
        for bucket in buckets {
            if stop() {
                return Ok(None);
            }
            let dir = format!("{ACTIONS}/{bucket}");
            // A file here, or a name that is not UTF-8 (read lossily), is not a bucket.
            if !self.snap.is_dir(&dir)? {
                continue;
            }
            // The action whose files the walk is in, and whether one of them is its outcome.
            let mut current: Option<(ActionId, bool)> = None;
            self.snap.for_each_file(&dir, |path| {
                let Some((id, kind)) = layout.classify(path) else {
                    return;
                };
                match &mut current {
                    Some((at, decided)) if *at == id => *decided |= kind == Outcome,
                    _ => {
                        if let Some((done, decided)) = current.replace((id, kind == Outcome)) {
                            let staged_outcome = staged.remove(&done).unwrap_or(false);
                            note(done, decided || staged_outcome);
                        }
                    }
                }
            })?;
            if let Some((done, decided)) = current {
                let staged_outcome = staged.remove(&done).unwrap_or(false);
                note(done, decided || staged_outcome);
            }
        }
        // Actions only staged so far.
        for (id, decided) in staged {
            note(id, decided);
        }
        undecided.sort();
        Ok(Some((undecided, seen)))
    }

    /// Stages a new record; `line` describes it in the commit message.
    fn stage(&mut self, path: String, bytes: Vec<u8>, line: String) {
        self.stage_quietly(path, bytes);
        self.lines.push(line);
    }

    /// Stages a file without a line of its own (an index entry).
    fn stage_quietly(&mut self, path: String, bytes: Vec<u8>) {
        self.log.push(Edit::Staged(path.clone()));
        self.staged.insert(path, bytes);
    }

    /// Removes a file: unstages it when staged, else removes the tip's.
    fn remove(&mut self, path: String) {
        match self.staged.remove(&path) {
            Some(bytes) => self.log.push(Edit::Unstaged(path, bytes)),
            None => {
                self.removed.insert(path.clone());
                self.log.push(Edit::Removed(path));
            }
        }
    }

    /// Whether `path` exists on the tip plus what is staged.
    fn exists(&self, path: &str) -> Result<bool, Error> {
        if self.staged.contains_key(path) {
            return Ok(true);
        }
        if self.removed.contains(path) {
            return Ok(false);
        }
        Ok(self.snap.exists(path)?)
    }

    fn mark(&self) -> (usize, usize) {
        (self.log.len(), self.lines.len())
    }

    fn rollback(&mut self, (edits, lines): (usize, usize)) {
        while self.log.len() > edits {
            match self.log.pop() {
                Some(Edit::Staged(p)) => {
                    self.staged.remove(&p);
                }
                Some(Edit::Unstaged(p, b)) => {
                    self.staged.insert(p, b);
                }
                Some(Edit::Removed(p)) => {
                    self.removed.remove(&p);
                }
                None => break,
            }
        }
        self.lines.truncate(lines);
    }

    /// Brings the pending index up to date with the records staged since `mark` (one
    /// operation's): for each action they touch, the entry its state before called for must be
    /// there (else the index is bad and nothing is built on it), and the entry its state after
    /// calls for replaces it. A no-op in a layout without the index.
    ///
    /// # Errors
    /// [`Error::PendingIndex`] when the index disagrees with the action's records before the
    /// operation; read errors.
    fn keep_index(&mut self, mark: usize) -> Result<(), Error> {
        if !self.layout.has_pending_index() {
            return Ok(());
        }
        let new_paths: BTreeSet<String> = self.log[mark..]
            .iter()
            .filter_map(|e| match e {
                Edit::Staged(p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        let ids: BTreeSet<ActionId> = new_paths
            .iter()
            .filter_map(|p| self.layout.classify(p).map(|(id, _)| id))
            .collect();
        let hidden: BTreeSet<&str> = new_paths.iter().map(String::as_str).collect();
        for id in ids {
            let before = self.state_without(&id, &hidden)?;
            let after = self.state(&id)?;
            let entry = |s: &Option<State>| {
                s.as_ref()
                    .filter(|s| pending::indexed(s))
                    .map(|s| pending::entry_path(&id, s.action.created_at))
            };
            let (was, will) = (entry(&before), entry(&after));
            // The entry the records before the operation call for, checked where it would be.
            if let Some(s) = before.as_ref().or(after.as_ref()) {
                let p = pending::entry_path(&id, s.action.created_at);
                let present = self.exists(&p)?;
                if was.is_some() && !present {
                    return Err(Error::PendingIndex {
                        rule: Rule::FinalityPendingMissing,
                        path: p,
                        detail: format!("action {id} is pending and has no entry"),
                    });
                }
                if was.is_none() && present {
                    return Err(Error::PendingIndex {
                        rule: Rule::FinalityPendingExtra,
                        path: p,
                        detail: format!("action {id} is not pending and has an entry"),
                    });
                }
            }
            if was != will {
                if let Some(p) = was {
                    self.remove(p);
                }
                if let Some(p) = will {
                    self.stage_quietly(p, Vec::new());
                }
            }
        }
        Ok(())
    }

    /// Whether nothing is staged or removed.
    pub fn is_empty(&self) -> bool {
        self.staged.is_empty() && self.removed.is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// Planners

/// Stages a guard decision record. A record with the same id and bytes is left as it is.
///
/// # Errors
/// [`Error::InvalidInput`] when the id is taken by another decision or an id field is not
/// privacy-safe machine text; read errors.
pub fn decide(ov: &mut Overlay<'_>, d: &Decision) -> Result<(), Error> {
    for (field, value) in [
        ("rule", d.rule.as_deref()),
        ("action_type", d.action_type.as_deref()),
        ("agent_id", d.agent_id.as_deref()),
        ("principal", Some(d.principal.as_str())),
        ("containment_ref", d.containment_ref.as_deref()),
    ] {
        if let Some(v) = value
            && id_field(v, field)? != v
        {
            return Err(Error::InvalidInput {
                field,
                reason: "must be machine text without surrounding whitespace".into(),
            });
        }
    }
    let mut security = Security::default();
    if let Some(r) = &d.reason
        && clean_text(r, MAX_TEXT_UNITS, &mut security) != *r
    {
        return Err(Error::InvalidInput {
            field: "reason",
            reason: "must be redacted and at most 4000 characters".into(),
        });
    }
    let path = ov.layout.decision_path(&d.decision_id);
    let bytes = d.to_bytes();
    match ov.read(&path)? {
        Some(existing) if existing == bytes => Ok(()),
        Some(_) => Err(Error::InvalidInput {
            field: "decision_id",
            reason: format!("{} is taken by another decision", d.decision_id),
        }),
        None => {
            ov.stage(
                path,
                bytes,
                format!("decision {} {}", d.decision_id, d.verdict),
            );
            Ok(())
        }
    }
}

/// What [`create`] found or staged.
#[derive(Clone, Debug, PartialEq)]
pub struct Created {
    /// The action's state: the new one, or the existing one for a replay.
    pub state: State,
    /// Whether the action already existed (an idempotent replay: nothing staged).
    pub replayed: bool,
}

/// Creates an action, or answers the existing one when its id is taken by an action with the
/// same binding: agent, principal, act hash, guard decision and verdict, containment ref,
/// identity verification, protocol and lifecycle (an idempotent replay, which stages nothing
/// and answers the first record, its `created_at` included: a retry after a lost
/// acknowledgement must not need a new id, which would create the duplicate it meant to avoid).
///
/// # Errors
/// [`Error::InvalidInput`]; [`Error::ActionExists`] when the id is taken by another binding, or
/// by a record that does not parse; read errors.
pub fn create(ov: &mut Overlay<'_>, input: &NewAction, now: Timestamp) -> Result<Created, Error> {
    let action = input.to_action(now)?;
    let id = &action.action_id;
    let exists = || Error::ActionExists {
        action_id: id.clone(),
    };
    match ov.read(&ov.layout.record_path(id, super::RecordKind::Action)) {
        Ok(None) => {}
        Ok(Some(existing)) => {
            // The creation time is the retry's own clock, not part of the binding.
            return match super::parse_action(&existing, id) {
                Ok(first)
                    if first
                        == (super::Action {
                            created_at: first.created_at,
                            ..action.clone()
                        }) =>
                {
                    let state = ov.state(id)?.ok_or_else(exists)?;
                    Ok(Created {
                        state,
                        replayed: true,
                    })
                }
                _ => Err(exists()),
            };
        }
        Err(Error::Corrupt { .. }) => return Err(exists()),
        Err(e) => return Err(e),
    }
    let bytes = action.to_bytes();
    let state = State {
        action_sha256: Digest::of(&bytes),
        action: action.clone(),
        claim: None,
        outcome: None,
        approval: None,
        containment: None,
    };
    ov.stage(
        ov.layout
            .record_path(&action.action_id, super::RecordKind::Action),
        bytes,
        format!("create action {} ({})", action.action_id, action.lifecycle),
    );
    Ok(Created {
        state,
        replayed: false,
    })
}

/// Claims the execution of an action for one attempt (as [`super::claim`](fn@super::claim)): stages `claim.json`
/// when the action is eligible on the tip plus the batch so far.
///
/// # Errors
/// [`Error::InvalidClaim`], [`Error::AgentIdentityRequired`] for the body;
/// [`Error::ClaimConflict`] for every ineligibility (including a claim staged earlier in the
/// batch); [`Error::ClaimUnavailable`] when the action could not be read.
pub fn claim(
    ov: &mut Overlay<'_>,
    action_id: &str,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Claim, Error> {
    let input = claim_input(action_id, request)?;
    let conflict = || Error::ClaimConflict {
        action_id: action_id.to_owned(),
    };
    let (Some(principal), Some(id)) = (input.principal, input.id.clone()) else {
        return Err(conflict());
    };
    let state = match ov.state(&id) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(conflict()),
        Err(e) => {
            return Err(Error::ClaimUnavailable {
                action_id: action_id.to_owned(),
                reason: e.to_string(),
            });
        }
    };
    let claim =
        plan_claim(&state, &input, principal, request.verified, now).ok_or_else(conflict)?;
    ov.stage(
        ov.layout.record_path(&id, super::RecordKind::Claim),
        claim.to_bytes(),
        claim_line(&claim),
    );
    Ok(claim)
}

/// The first precondition a claim of `request` on `state` fails at `now` ([`ClaimRefusal`],
/// with [`ClaimRefusal::MissingPrincipal`] for a caller without one); `None` when the claim is
/// eligible or its body is invalid. For the `claim_reason` of a folded claim: a bare claim never
/// says why.
pub fn claim_refusal(
    state: &State,
    request: &ClaimRequest,
    now: Timestamp,
) -> Option<ClaimRefusal> {
    let input = claim_input(state.action.action_id.as_str(), request).ok()?;
    let Some(principal) = input.principal else {
        return Some(ClaimRefusal::MissingPrincipal);
    };
    check_claim(
        state,
        input.agent_id,
        principal,
        &input.act_hash,
        request.verified,
        now,
    )
    .err()
}

fn with_outcome(mut state: State, outcome: Outcome) -> State {
    state.outcome = Some(outcome);
    state
}

/// Reports an outcome (as [`super::report_outcome`]).
///
/// # Errors
/// As [`super::report_outcome`], without its write-path errors.
pub fn report(
    ov: &mut Overlay<'_>,
    action_id: &str,
    report: &OutcomeReport,
    by: &Settler,
    now: Timestamp,
) -> Result<Reported, Error> {
    let p = prepare_report(report)?;
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let state = settleable(ov, &id, by)?;
    let outcome = p.outcome_on(&state, &id, now)?;
    Ok(stage_outcome(ov, state, outcome, p.security, now))
}

/// The legacy close (as [`super::close`]): `outcome.json` keeps what the closer `sent`
/// ([`CloseReport`]: the summary, the error message, `timestamp_end` and the report's tokens,
/// cost, model, …), read back on the action's row, as DashClaw's server keeps them on a legacy
/// `PATCH`.
///
/// # Errors
/// As [`super::close`], without its write-path errors.
pub fn close(
    ov: &mut Overlay<'_>,
    action_id: &str,
    status: &str,
    sent: &CloseReport,
    by: &Settler,
    now: Timestamp,
) -> Result<Reported, Error> {
    let p = prepare_close(action_id, status, sent)?;
    let state = settleable(ov, &p.id, by)?;
    let outcome = p.outcome_on(&state, now)?;
    Ok(stage_outcome(ov, state, outcome, p.security, now))
}

/// The prefix of a cancel's stored summary, as DashClaw's server writes it on the row it
/// cancels (`outcome_summary`).
pub const CANCEL_SUMMARY_PREFIX: &str = "Deliberately not executed: ";

/// The most of a cancel's reason that is kept, in UTF-16 code units (3,973): the stored summary
/// is [`CANCEL_SUMMARY_PREFIX`] and the reason, and holds at most [`MAX_TEXT_UNITS`] (4,000)
/// like every stored text, so the reason keeps what the prefix leaves; the rest is cut, after
/// redaction. DashClaw cuts the reason at 4,000 and stores a longer summary, which no finality
/// record may hold.
pub const MAX_CANCEL_REASON_UNITS: usize = MAX_TEXT_UNITS - CANCEL_SUMMARY_PREFIX.len();

/// Whether `state` may still be cancelled, as DashClaw's server decides it: `running`, no
/// outcome, and never claimed (a claimed action must report its real outcome instead).
pub fn cancellable(state: &State) -> bool {
    state.lifecycle() == Lifecycle::Running && state.outcome.is_none() && state.claim.is_none()
}

/// Cancels an action that was allowed but never executed (`POST /api/actions/{id}/cancel`,
/// `action cancel`): stages the one `outcome.json` of a direct close to `cancelled` (outcome
/// `failed`), its summary [`CANCEL_SUMMARY_PREFIX`] and the `reason` (redacted, then cut to
/// [`MAX_CANCEL_REASON_UNITS`]; what the redaction found is reported). The same create-only record
/// as every close, so a cancel racing a claim, an outcome or another cancel has one winner, and
/// a cancelled action refuses every later claim, outcome and close. Only the action's principal
/// or an operator may cancel ([`Settler`]).
///
/// # Errors
/// [`Error::InvalidInput`] for a blank reason (only whitespace or invisible characters,
/// [`is_blank`](super::is_blank)); [`Error::NotFound`] (also when `by` may not
/// settle the action); [`Error::NotCancellable`] with the current lifecycle when the action is
/// not [`cancellable`] (claimed, settled, pending approval, or already cancelled).
pub fn cancel(
    ov: &mut Overlay<'_>,
    action_id: &str,
    reason: &str,
    by: &Settler,
    now: Timestamp,
) -> Result<Reported, Error> {
    let reason = reason.trim();
    if super::is_blank(reason) {
        return Err(Error::InvalidInput {
            field: "reason",
            reason: "a cancel needs a reason".into(),
        });
    }
    let summary = format!("{CANCEL_SUMMARY_PREFIX}{reason}");
    let p = prepare_close(
        action_id,
        Lifecycle::Cancelled.as_str(),
        &CloseReport::summary(Some(&summary)),
    )?;
    let state = settleable(ov, &p.id, by)?;
    if !cancellable(&state) {
        return Err(Error::NotCancellable {
            action_id: p.id.clone(),
            lifecycle: state.lifecycle(),
            claimed: state.claim.is_some(),
            outcome_status: state.outcome_status(),
        });
    }
    let outcome = p.outcome_on(&state, now)?;
    Ok(stage_outcome(ov, state, outcome, p.security, now))
}

/// The state of `id` when `by` may settle it (an outcome, a close, a cancel).
///
/// # Errors
/// [`Error::NotFound`] for an unknown action and for another principal's: it answers as an
/// unknown id, so the refusal is no existence oracle.
fn settleable(ov: &mut Overlay<'_>, id: &ActionId, by: &Settler) -> Result<State, Error> {
    ov.state(id)?
        .filter(|s| by.may_settle(&s.action))
        .ok_or_else(|| Error::NotFound {
            action_id: id.as_str().to_owned(),
        })
}

/// Stages `outcome.json` for an outcome of `state` and answers with the action as it reads
/// once the outcome lands.
fn stage_outcome(
    ov: &mut Overlay<'_>,
    state: State,
    outcome: Outcome,
    security: Security,
    now: Timestamp,
) -> Reported {
    ov.stage(
        ov.layout
            .record_path(&outcome.action_id, super::RecordKind::Outcome),
        outcome.to_bytes(),
        outcome_line(&outcome),
    );
    let view = with_outcome(state, outcome.clone()).view(now);
    Reported {
        outcome,
        view,
        security,
    }
}

/// An operator's decision on a `pending_approval` action, with the operator's `reasoning`
/// (redacted and truncated as outcome texts are, [`clean_text`]; what the
/// redaction found is added to `security`): stages `approval.json`.
///
/// # Errors
/// [`Error::InvalidInput`] for an operator that is not machine text, or the decision
/// `expire` (the sweep's alone); [`Error::NotFound`];
/// [`Error::OutcomeAlreadySet`] when the outcome is set (the sweep may have reconciled it);
/// [`Error::TerminalState`] with the current lifecycle when the action is not pending approval
/// (never was, already decided, or `expired`).
pub fn approve(
    ov: &mut Overlay<'_>,
    action_id: &str,
    decision: ApprovalDecision,
    operator: &str,
    reasoning: Option<&str>,
    security: &mut Security,
    now: Timestamp,
) -> Result<State, Error> {
    if decision == ApprovalDecision::Expire {
        return Err(Error::InvalidInput {
            field: "decision",
            reason: "only the sweep expires an approval: approve or deny".into(),
        });
    }
    let operator = id_field(operator, "operator")?;
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let mut state = ov.state(&id)?.ok_or_else(not_found)?;
    if let Some(o) = &state.outcome {
        return Err(Error::OutcomeAlreadySet {
            action_id: id,
            current_status: o.status,
        });
    }
    if state.approval.is_some() || state.lifecycle() != Lifecycle::PendingApproval {
        return Err(Error::TerminalState {
            action_id: id,
            lifecycle: state.lifecycle(),
        });
    }
    let approval = Approval {
        action_id: id.clone(),
        decision,
        decided_by: operator,
        decided_at: now,
        lifecycle: decision.lifecycle(),
        reasoning: reasoning.map(|r| super::clean_text(r, MAX_TEXT_UNITS, security)),
    };
    ov.stage(
        ov.layout.record_path(&id, super::RecordKind::Approval),
        approval.to_bytes(),
        format!("{decision} {id} by {}", approval.decided_by),
    );
    state.approval = Some(approval);
    Ok(state)
}

/// What [`resolve_containment`] staged.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The contained action once the verdict lands.
    pub state: State,
    /// The promotion grant it created (a promotion only), approved by the operator.
    pub promotion: Option<State>,
}

/// An operator's verdict on a contained action awaiting promotion (DashClaw's
/// `POST /api/actions/{id}/containment`, [`super::containment`]): stages `containment.json`
/// and, for a promotion, the grant: the decision, `action.json` and `approval.json` of a
/// [`PROMOTION_ACTION_TYPE`](super::containment::PROMOTION_ACTION_TYPE) action for the same
/// agent and principal, its act the merge of the `containment_ref`. The `reasoning` is
/// redacted and truncated as every stored text is (what the redaction found is added to
/// `security`). The verdict is create-only: two operators resolving at once have one winner.
///
/// # Errors
/// In DashClaw's order: [`Error::InvalidInput`] for an operator that is not machine text;
/// [`Error::NotFound`]; [`Error::ContainmentNotAwaiting`] unless the action is
/// `awaiting_promotion` (also once resolved); [`Error::SelfApprovalForbidden`] when `operator`
/// is the action's creating principal; [`Error::ContainmentRefMissing`] for a promotion of an
/// action without a `containment_ref`; [`Error::ActionExists`] when the grant's id is taken by
/// another binding; read errors.
pub fn resolve_containment(
    ov: &mut Overlay<'_>,
    action_id: &str,
    verdict: ContainmentVerdict,
    operator: &str,
    reasoning: Option<&str>,
    security: &mut Security,
    now: Timestamp,
) -> Result<Resolved, Error> {
    let operator = id_field(operator, "operator")?;
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let mut state = ov.state(&id)?.ok_or_else(not_found)?;
    let status = containment::status(&state);
    if status != Some(ContainmentStatus::AwaitingPromotion) {
        return Err(Error::ContainmentNotAwaiting {
            action_id: id,
            status,
        });
    }
    if state.action.created_by == operator {
        return Err(Error::SelfApprovalForbidden { action_id: id });
    }
    let containment_ref = match (verdict, &state.action.containment_ref) {
        (ContainmentVerdict::Promote, None) => {
            return Err(Error::ContainmentRefMissing { action_id: id });
        }
        (_, r) => r.clone(),
    };
    let record = Containment {
        action_id: id.clone(),
        verdict,
        resolved_by: operator.clone(),
        resolved_at: now,
        reasoning: reasoning.map(|r| clean_text(r, MAX_TEXT_UNITS, security)),
        promotion_action_id: (verdict == ContainmentVerdict::Promote)
            .then(|| containment::promotion_action_id(&id)),
    };
    ov.stage(
        ov.layout.record_path(&id, super::RecordKind::Containment),
        record.to_bytes(),
        format!("{verdict} contained {id} by {operator}"),
    );
    let promotion = match (&record.promotion_action_id, containment_ref) {
        (Some(grant), Some(r)) => Some(stage_promotion(ov, &state, grant, &r, &operator, now)?),
        _ => None,
    };
    state.containment = Some(record);
    Ok(Resolved { state, promotion })
}

/// Stages the promotion grant of `contained` (see [`resolve_containment`]).
fn stage_promotion(
    ov: &mut Overlay<'_>,
    contained: &State,
    grant: &ActionId,
    containment_ref: &str,
    operator: &str,
    now: Timestamp,
) -> Result<State, Error> {
    let a = &contained.action;
    let act = containment::promotion_act(containment_ref);
    let input = NewAction {
        action_id: grant.clone(),
        agent_id: a.agent_id.clone(),
        principal: a.created_by.clone(),
        act: Some(act.clone()),
        guard_decision_id: Some(grant.as_str().to_owned()),
        verdict: super::Verdict::RequireApproval,
        client_capabilities: a
            .execution_protocol
            .map(|_| super::EXECUTION_CLAIMS.to_owned())
            .into_iter()
            .collect(),
        identity_verified: false,
        containment_ref: None,
        lifecycle: None,
        approval_wait_seconds: None,
        details: None,
    };
    let binding = input.to_action(now)?;
    decide(
        ov,
        &Decision {
            decision_id: grant.clone(),
            verdict: super::Verdict::RequireApproval,
            rule: None,
            reason: Some(format!(
                "Operator promoted contained action {}",
                a.action_id
            )),
            action_type: Some(containment::PROMOTION_ACTION_TYPE.to_owned()),
            agent_id: Some(binding.agent_id.clone()),
            principal: binding.created_by.clone(),
            act_content_hash: binding.act_content_hash.clone(),
            containment_ref: None,
            decided_at: now,
        },
    )?;
    let created = create(ov, &input, now)?;
    if created.replayed {
        return Err(Error::ActionExists {
            action_id: grant.clone(),
        });
    }
    let mut ignored = Security::default();
    approve(
        ov,
        grant.as_str(),
        ApprovalDecision::Approve,
        operator,
        None,
        &mut ignored,
        now,
    )
}

/// The actions a stale-outcome sweep may reconcile, found by [`sweep_scan`]: each with no
/// outcome record, in a lifecycle the sweep may close, and first seen pending by the sweeper at
/// least the timeout ago on its own clock, when the view was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepScan {
    /// The candidates, by id.
    pub candidates: Vec<ActionId>,
    /// Actions still awaiting an operator whose approval window has passed
    /// ([`ApprovalExpiry`]), by id.
    pub expiring: Vec<ActionId>,
    /// Action directories skipped because a record is invalid (`verify` reports them).
    pub skipped: Vec<String>,
    /// Action directories (or, in a layout with the pending index, its entries) seen.
    pub scanned: usize,
    /// Pending actions whose timeout has not passed yet on the sweeper's clock.
    pub waiting: usize,
    /// Record times well ahead of the sweeper's clock.
    pub clock_skew: Vec<ClockNotice>,
}

/// Whether the action in `state` still waits for an operator: born `pending_approval`, no
/// decision yet (nor an outcome). The outcome sweep leaves it alone (nothing can have run);
/// the approval expiry closes it.
pub(super) fn awaiting_approval(state: &State) -> bool {
    state.outcome.is_none()
        && state.approval.is_none()
        && state.lifecycle() == Lifecycle::PendingApproval
}

impl SweepScan {
    /// Files the pending action `id`, first seen at `seen` and due for the outcome sweep when
    /// `due`: an action awaiting an operator expires once its window passed on the sweeper's
    /// clock, and is never swept to `lost_confirmation`; any other is a candidate when due.
    fn place(
        &mut self,
        id: ActionId,
        state: &State,
        seen: Timestamp,
        due: bool,
        expiry: &ApprovalExpiry,
        now: Timestamp,
    ) {
        if awaiting_approval(state) {
            if now.millis_since(seen) > expiry.window_ms(&state.action) {
                self.expiring.push(id);
            } else {
                self.waiting += 1;
            }
        } else if due {
            self.candidates.push(id);
        } else {
            self.waiting += 1;
        }
    }
}

/// The scan half of the sweep: the actions of the view (the tip plus what is staged) that have
/// timed out at `now` on the sweeper's clock since `observations` first saw them pending (as
/// [`super::sweep`](fn@super::sweep) decides). It stages nothing. It adds the pending actions
/// seen for the first time to `observations` (at `now`) and, when it ran to the end, drops
/// those no longer pending.
///
/// In a layout with the pending index (`hex2x2`, `nibble`) it reads the names of the index's
/// entries ([`pending::all_entries`]) and the records of only the actions seen for the first
/// time or timed out: its cost is what is pending, not what exists. Each entry read is checked
/// against its action's records, and a disagreement refuses the sweep ([`Error::PendingIndex`]). In the `flat` layout it
/// walks every action directory, those holding an outcome record skipped unread.
///
/// `serve` runs it on a read view beside the writer and hands only the candidates to
/// [`sweep_candidates`] in a batch. Candidates stay candidates as the clock moves on, and an
/// action created after the view was read has not been seen, so a scan of an older tip never
/// closes anything early.
///
/// `stop` is asked before each bucket and each action read; the scan returns `None` as soon as
/// it says to stop (`serve` stopping: a flat scan of a large repository takes minutes, and a
/// stop must not wait for it).
///
/// # Errors
/// Read errors; [`Error::PendingIndex`].
pub fn sweep_scan(
    ov: &Overlay<'_>,
    timeout: f64,
    expiry: &ApprovalExpiry,
    now: Timestamp,
    observations: &mut Observations,
    stop: &dyn Fn() -> bool,
) -> Result<Option<SweepScan>, Error> {
    let minutes = timeout_minutes(timeout);
    let mut scan = SweepScan::default();
    let mut pending_ids: BTreeSet<ActionId> = BTreeSet::new();
    if ov.layout.has_pending_index() {
        let Some(entries) = pending::all_entries(&ov.snap, stop)? else {
            return Ok(None);
        };
        scan.scanned = entries.len();
        for (id, at, path) in entries {
            if stop() {
                return Ok(None);
            }
            // Removed earlier in this batch: its action was closed.
            if ov.removed.contains(&path) {
                continue;
            }
            pending_ids.insert(id.clone());
            // An entry is read when first seen and when timed out, so a bad index is refused
            // as soon as it is seen, and never built on.
            let first = observations.first_seen(&id).is_none();
            let seen = observations.observe(&id, now);
            let due = timed_out(seen, now, minutes);
            // An action awaiting an operator is read once it may have outlived its window.
            let probe = now.millis_since(seen) > expiry.shortest_window_ms();
            if !due && !first && !probe {
                scan.waiting += 1;
                scan.clock_skew.extend(notice(&id, "created_at", at, now));
                continue;
            }
            let bad = |rule, detail: String| Error::PendingIndex {
                rule,
                path: path.clone(),
                detail,
            };
            let state = match ov.state(&id) {
                Ok(Some(state)) => state,
                Ok(None) => {
                    return Err(bad(
                        Rule::FinalityPendingExtra,
                        format!("action {id} does not exist"),
                    ));
                }
                Err(Error::Corrupt { .. }) => {
                    scan.skipped.push(ov.layout.action_dir(&id));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !pending::indexed(&state) {
                return Err(bad(
                    Rule::FinalityPendingExtra,
                    format!("action {id} is not pending"),
                ));
            }
            if state.action.created_at != at {
                return Err(bad(
                    Rule::FinalityPendingTime,
                    format!(
                        "action {id} was created at {}",
                        super::format_time(state.action.created_at)
                    ),
                ));
            }
            scan.clock_skew.extend(notices(&state, now));
            scan.place(id, &state, seen, due, expiry, now);
        }
    } else {
        let Some((undecided, scanned)) = ov.undecided_actions(stop)? else {
            return Ok(None);
        };
        scan.scanned = scanned;
        for id in undecided {
            if stop() {
                return Ok(None);
            }
            match ov.state(&id) {
                Ok(Some(state)) => {
                    if !is_sweepable(&state) {
                        continue;
                    }
                    pending_ids.insert(id.clone());
                    scan.clock_skew.extend(notices(&state, now));
                    let seen = observations.observe(&id, now);
                    let due = timed_out(seen, now, minutes);
                    scan.place(id, &state, seen, due, expiry, now);
                }
                Ok(None) | Err(Error::Corrupt { .. }) => {
                    scan.skipped.push(ov.layout.action_dir(&id));
                }
                Err(e) => return Err(e),
            }
        }
    }
    // Actions no longer pending are forgotten: the memory holds what is pending.
    observations.retain(|id| pending_ids.contains(id));
    Ok(Some(scan))
}

/// The write half of the sweep: each of `candidates` that is still stale on the tip plus the
/// batch so far gets outcome `lost_confirmation`, staged in this batch (one commit for all);
/// the others (reported meanwhile, or gone) are left alone. `skipped` is carried into the
/// report.
///
/// # Errors
/// Read errors.
pub fn sweep_candidates(
    ov: &mut Overlay<'_>,
    scan: &SweepScan,
    timeout: f64,
    now: Timestamp,
) -> Result<SweepReport, Error> {
    let minutes = timeout_minutes(timeout);
    let mut report = SweepReport {
        timeout_minutes: minutes,
        skipped: scan.skipped.clone(),
        waiting: scan.waiting,
        clock_skew: scan.clock_skew.clone(),
        ..SweepReport::default()
    };
    for id in &scan.expiring {
        let state = match ov.state(id) {
            Ok(Some(s)) => s,
            Ok(None) | Err(Error::Corrupt { .. }) => continue,
            Err(e) => return Err(e),
        };
        // An operator's decision landed meanwhile: it won.
        if !awaiting_approval(&state) {
            continue;
        }
        let approval = Approval {
            action_id: id.clone(),
            decision: ApprovalDecision::Expire,
            decided_by: super::approval::EXPIRY_DECIDER.to_owned(),
            decided_at: now,
            lifecycle: Lifecycle::Expired,
            reasoning: None,
        };
        ov.stage(
            ov.layout.record_path(id, super::RecordKind::Approval),
            approval.to_bytes(),
            format!("expire the approval of {id} (nobody decided in time)"),
        );
        report.expired.push(id.clone());
    }
    for id in &scan.candidates {
        let state = match ov.state(id) {
            Ok(Some(s)) => s,
            Ok(None) | Err(Error::Corrupt { .. }) => continue,
            Err(e) => return Err(e),
        };
        // Timed out when scanned, and time only moves on: still stale unless a report or a
        // close landed meanwhile.
        if !is_sweepable(&state) {
            continue;
        }
        let outcome = super::sweep::sweep_outcome(id, state.lifecycle(), now);
        report.swept.push(Swept {
            action_id: id.clone(),
            agent_id: state.action.agent_id.clone(),
            created_at: state.action.created_at,
            outcome_at: now,
            lifecycle: outcome.lifecycle,
        });
        ov.stage(
            ov.layout.record_path(id, super::RecordKind::Outcome),
            outcome.to_bytes(),
            format!("sweep {id} to lost_confirmation (timeout {minutes} min)"),
        );
    }
    Ok(report)
}

/// The stale-outcome sweep (as [`super::sweep`](fn@super::sweep)) on the tip plus the batch
/// so far: [`sweep_scan`] and [`sweep_candidates`] on the same view.
///
/// # Errors
/// Read errors.
pub fn sweep(
    ov: &mut Overlay<'_>,
    timeout: f64,
    expiry: &ApprovalExpiry,
    now: Timestamp,
    observations: &mut Observations,
) -> Result<SweepReport, Error> {
    // Never told to stop, the scan always returns one.
    let scan = sweep_scan(ov, timeout, expiry, now, observations, &|| false)?.unwrap_or_default();
    sweep_candidates(ov, &scan, timeout, now)
}

// ---------------------------------------------------------------------------------------------
// Landing

/// One queued operation: plans itself on an overlay at the batch's time. It may run
/// more than once (once per attempt), so it must be a pure function of its inputs.
pub type Op<'a, R> = Box<dyn FnMut(&mut Overlay<'_>, Timestamp) -> Result<R, Error> + Send + 'a>;

/// What [`land`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Landed {
    /// The commit that landed; `None` when nothing had to be written (or nothing landed).
    pub commit: Option<CommitId>,
    /// Tips planned on (1 unless the ref moved).
    pub attempts: u32,
    /// Operations that staged records in the landed commit.
    pub writers: usize,
    /// When nothing is known to have landed because the landing failed: the last commit
    /// written, whose compare-and-swap may have taken effect all the same (a push cut off
    /// after the remote took it, a ref renamed into place whose directory could not be
    /// synced). Look for it with [`Store::is_ancestor`](crate::store::Store::is_ancestor).
    pub unsettled: Option<CommitId>,
}

/// The state of action `id` at the target's tip (for reads outside a batch).
///
/// # Errors
/// [`Error::ClaimUnavailable`]-free read errors: [`Error::Corrupt`], [`Error::Store`];
/// [`Error::Remote`] when the remote cannot be asked or fetched: an unavailable dependency,
/// never invalid input.
pub fn read_at_target<T>(
    store: &Store,
    options: &Options,
    target: &Target,
    read: impl FnOnce(&Overlay<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    let tip = target.tip(store, &options.ref_name)?;
    let ov = Overlay::new(store.snapshot(tip)?)?;
    read(&ov)
}

/// Plans `ops` in order on the tip of `options.target` and lands everything they staged as ONE
/// commit with ONE compare-and-swap (group commit); re-plans all of them on a moved ref, at most
/// `options.max_attempts` times. `now` is read once per attempt. Returns one result per
/// operation, in order, and what landed.
///
/// An operation's `Ok` is returned only when its records landed (or it staged none); its
/// refusal stands on its own unless it read a record staged earlier in the batch and the batch
/// did not land, in which case it is [`BatchError::Unavailable`] like every writer.
///
/// The packs are rolled up after a landed commit as `options.roll_up` says: `serve`'s writer
/// lands with [`RollUp::Caller`](crate::store::RollUp::Caller), answers the batch first and
/// rolls them up on a thread of its own.
pub fn land<R>(
    store: &Store,
    options: &Options,
    ops: &mut [Op<'_, R>],
    clock: &mut dyn FnMut() -> Timestamp,
) -> (Vec<Result<R, BatchError>>, Landed) {
    land_with(store, options, ops, clock, &mut |_, _| {})
}

/// Called by [`land_with`] for each commit it is about to land: after the commit is written,
/// before its compare-and-swap, with the plan's answers (one per operation, in order; `None`
/// for a refusal). At most one such commit lands: the one [`Landed::commit`] names; when the
/// landing failed, the one [`Landed::unsettled`] names may have (look for it); none of the
/// others did.
pub type BeforeLanding<'h, R> = dyn FnMut(CommitId, &[Option<&R>]) + 'h;

/// [`land`], calling `before` with each commit before it is landed, so that a caller can make
/// what the commit's answers imply durable first and learn afterwards whether it landed (a
/// kill in between leaves the commit to be looked for with
/// [`Store::is_ancestor`](crate::store::Store::is_ancestor)): `serve` stages a batch's webhook
/// deliveries this way.
pub fn land_with<R>(
    store: &Store,
    options: &Options,
    ops: &mut [Op<'_, R>],
    clock: &mut dyn FnMut() -> Timestamp,
    before: &mut BeforeLanding<'_, R>,
) -> (Vec<Result<R, BatchError>>, Landed) {
    let n = ops.len();
    let (planned, out) = plan_and_land(store, options, ops, clock, before);
    match out {
        Ok(landed) => (
            planned
                .unwrap_or_default()
                .into_iter()
                .map(|(r, _)| r.map_err(BatchError::Refused))
                .collect(),
            landed,
        ),
        Err((cause, tried, unsettled)) => {
            let reason = cause.to_string();
            let unavailable = || BatchError::Unavailable {
                reason: reason.clone(),
            };
            let out = match planned {
                // Planned: a refusal that depended on nothing staged stands on its own.
                Some(results) => results
                    .into_iter()
                    .map(|(r, depends)| match r {
                        Err(e) if !depends && !matches!(e, Error::ClaimUnavailable { .. }) => {
                            Err(BatchError::Refused(e))
                        }
                        _ => Err(unavailable()),
                    })
                    .collect(),
                None => (0..n).map(|_| Err(unavailable())).collect(),
            };
            (
                out,
                Landed {
                    commit: None,
                    attempts: tried,
                    writers: 0,
                    unsettled,
                },
            )
        }
    }
}

/// One operation alone through the batch planner: the write path of the CLI and the library's
/// single-operation functions ([`create_action`](super::create_action),
/// [`claim`](fn@super::claim), [`report_outcome`](super::report_outcome),
/// [`close`](super::close), [`sweep`](fn@super::sweep)), so that each operation's rules exist
/// once. Plans `op` on the tip of [`Options::target`] at `now` and lands what it staged with one
/// compare-and-swap (planning again on a moved ref), rolling the local packs up as
/// [`Options::roll_up`] says.
///
/// # Errors
/// The operation's own refusal; when it planned a write that could not land, the write path's
/// typed cause: [`Error::Contention`], [`Error::RefLocked`], [`Error::Store`],
/// [`Error::Remote`], [`Error::RemoteRefused`].
pub fn run<R>(
    store: &Store,
    options: &Options,
    now: Timestamp,
    op: impl FnMut(&mut Overlay<'_>, Timestamp) -> Result<R, Error> + Send,
) -> Result<Written<R>, Error> {
    let mut ops: [Op<'_, R>; 1] = [Box::new(op)];
    let (planned, out) = plan_and_land(store, options, &mut ops, &mut || now, &mut |_, _| {});
    let result = planned.and_then(|mut p| p.pop()).map(|(r, _)| r);
    match (out, result) {
        (Ok(landed), Some(value)) => Ok(Written {
            value: value?,
            commit: landed.commit,
            attempts: landed.attempts,
        }),
        // Alone in its batch, a refusal staged nothing and never depends on another operation.
        (Err(_), Some(Err(refusal))) => Err(refusal),
        (Err((cause, ..)), _) => Err(cause),
        (Ok(_), None) => unreachable!("a landed batch was planned"),
    }
}

/// The planned answers, each with whether it wrote or read a staged record.
type Planned<R> = Vec<(Result<R, Error>, bool)>;

/// Why a batch did not land, the attempts made, and the last commit written (which may have
/// landed all the same: [`Landed::unsettled`]).
type Unlanded = (Error, u32, Option<CommitId>);

/// The one loop of [`land`] and [`run`]: plans every operation on the tip, writes one commit and
/// lands it. Returns the last plan's answers (`None` when nothing was planned) and what landed,
/// or the typed reason nothing did with the attempts made.
fn plan_and_land<R>(
    store: &Store,
    options: &Options,
    ops: &mut [Op<'_, R>],
    clock: &mut dyn FnMut() -> Timestamp,
    before: &mut BeforeLanding<'_, R>,
) -> (Option<Planned<R>>, Result<Landed, Unlanded>) {
    // The answers of the last plan (an answer need not be Clone, so it stays out of the loop's
    // value) and the attempts made, for the answers when nothing lands.
    let mut planned: Option<Planned<R>> = None;
    let mut tried = 0u32;
    let mut written_last = None;
    let n = ops.len();
    let out = store::land(store, options, |tip, attempt| {
        tried = attempt;
        planned = None;
        let now = clock();
        let mut ov = Overlay::new(store.snapshot(tip)?)?;
        let mut results = Vec::with_capacity(n);
        let mut writers = 0;
        for op in ops.iter_mut() {
            let mark = ov.mark();
            ov.read_staged.set(false);
            // The operation's records, then the index entries they call for (one planner
            // writes both, so every writer keeps the index the same way).
            let r = op(&mut ov, now).and_then(|v| ov.keep_index(mark.0).map(|()| v));
            if r.is_err() {
                ov.rollback(mark);
            }
            let wrote = ov.mark().0 > mark.0;
            writers += usize::from(wrote);
            results.push((r, wrote || ov.read_staged.get()));
        }
        if ov.is_empty() {
            planned = Some(results);
            return Ok(store::Step::Settled(0));
        }
        let message = if ov.lines.len() == 1 {
            format!("finality: {}\n", ov.lines[0])
        } else {
            let records = ov
                .staged
                .keys()
                .filter(|p| !p.starts_with(pending::PENDING))
                .count();
            let mut m = format!("finality: {records} record(s) of {writers} operation(s)\n\n");
            for line in &ov.lines {
                m.push_str("- ");
                m.push_str(line);
                m.push('\n');
            }
            m
        };
        let mut files: Vec<(String, Vec<u8>)> = ov
            .staged
            .iter()
            .map(|(p, b)| (p.clone(), b.clone()))
            .collect();
        // The first records of a new repository carry its layout record.
        if ov.fresh
            && let Some(record) = ov.layout.record()
        {
            files.push((super::layout::RECORD_PATH.to_owned(), record.into_bytes()));
        }
        let removals: Vec<String> = ov.removed.iter().cloned().collect();
        drop(ov);
        let mut sig = options.signature.clone();
        sig.time_seconds = now.epoch_seconds();
        let written = store.write_commit_with(tip, &files, &removals, false, &message, &sig);
        let answers: Vec<Option<&R>> = results.iter().map(|(r, _)| r.as_ref().ok()).collect();
        if let Ok(commit) = &written {
            written_last = Some(*commit);
            before(*commit, &answers);
        }
        drop(answers);
        planned = Some(results);
        let commit = written?;
        Ok(store::Step::Commit {
            commit,
            reflog: message.lines().next().unwrap_or("finality").to_owned(),
            value: writers,
        })
    });
    let out = out
        .map(|landed| Landed {
            commit: landed.commit,
            attempts: landed.attempts,
            writers: landed.value,
            unsettled: None,
        })
        .map_err(|e| (Error::from(e), tried, written_last));
    (planned, out)
}

#[cfg(test)]
mod tests {
    use super::super::{AttemptId, Verdict, act_content_hash};
    use super::*;
    use crate::finality::test_support::{
        default_act, new_action, plant_unparsable_action, repo, request, sig,
    };
    use crate::store::Signature;

    const T0: Timestamp = Timestamp::from_millis(1_772_366_400_000);

    fn options() -> Options {
        let mut o = Options::new(Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: T0.epoch_seconds(),
        });
        o.max_attempts = 3;
        o
    }

    fn claim_op(id: &'static str, attempt: &'static str) -> Op<'static, Claim> {
        Box::new(move |ov, now| claim(ov, id, &request(attempt), now))
    }

    fn commits(store: &Store) -> usize {
        let mut n = 0;
        let mut c = store.tip("refs/heads/main").unwrap();
        while let Some(id) = c {
            n += 1;
            c = store.parents(id).unwrap().first().copied();
        }
        n
    }

    #[test]
    fn one_batch_one_commit_and_in_batch_races_have_one_winner() {
        let (_dir, store) = repo();
        let mut ops: Vec<Op<'static, Claim>> = vec![
            Box::new(|ov, now| {
                create(ov, &new_action("act_a"), now)?;
                Err(Error::InvalidInput {
                    field: "test",
                    reason: "a refusal after staging rolls its records back".into(),
                })
            }),
            Box::new(|ov, now| {
                create(ov, &new_action("act_b"), now)?;
                claim(ov, "act_b", &request("attempt-0000000000000001"), now)
            }),
            claim_op("act_b", "attempt-0000000000000002"),
            claim_op("act_missing", "attempt-0000000000000003"),
        ];
        let (results, landed) = land(&store, &options(), &mut ops, &mut || T0);
        assert_eq!((landed.attempts, landed.writers), (1, 1));
        assert!(matches!(
            results[0],
            Err(BatchError::Refused(Error::InvalidInput { .. }))
        ));
        assert_eq!(
            results[1].as_ref().unwrap().attempt_id.as_str(),
            "attempt-0000000000000001"
        );
        assert!(matches!(
            results[2],
            Err(BatchError::Refused(Error::ClaimConflict { .. }))
        ));
        assert!(matches!(
            results[3],
            Err(BatchError::Refused(Error::ClaimConflict { .. }))
        ));
        assert_eq!(commits(&store), 1);
        let snap = store.snapshot(landed.commit).unwrap();
        assert!(
            !snap
                .exists(&crate::finality::Layout::DEFAULT.record_path(
                    &ActionId::parse("act_a").unwrap(),
                    super::super::RecordKind::Action
                ))
                .unwrap()
        );
        assert!(crate::finality::verify(&snap).unwrap().is_empty());
    }

    /// The sweep's two halves on two tips: the scan lists the stale actions of its tip
    /// (from the pending index: decided ones unread); an action reported between the scan and
    /// the landing keeps its report, and one created after the scan is never a candidate.
    #[test]
    fn a_sweep_lands_only_the_scanned_candidates_that_are_still_stale() {
        let (dir, store) = repo();
        let land_one = |op: Op<'static, ()>, now: Timestamp| {
            let (results, landed) = land(&store, &options(), &mut [op], &mut || now);
            results.into_iter().next().unwrap().unwrap();
            landed
        };
        let done = |id: &str, status: &str| OutcomeReport {
            status: status.into(),
            summary: None,
            error_message: (status == "failed").then(|| "exit 1".to_owned()),
            progress: None,
            attempt_id: Some(format!("attempt-{id}-0000000001")),
        };
        land_one(
            Box::new(move |ov, now| {
                for id in ["act_a", "act_b", "act_c"] {
                    create(ov, &new_action(id), now)?;
                    claim(ov, id, &request(&format!("attempt-{id}-0000000001")), now)?;
                }
                report(
                    ov,
                    "act_b",
                    &done("act_b", "completed"),
                    &Settler::Operator,
                    now,
                )?;
                Ok(())
            }),
            T0,
        );
        plant_unparsable_action(&store, "act_bad");
        let later = T0.saturating_add_millis(20 * 60_000);
        let tip = store.tip("refs/heads/main").unwrap();
        let view = Overlay::new(store.snapshot(tip).unwrap()).unwrap();
        // The sweeper created the three: it times them from their creation.
        let mut seen = Observations::new();
        for id in ["act_a", "act_b", "act_c"] {
            seen.witness(ActionId::parse(id).unwrap(), T0);
        }
        let scan = sweep_scan(
            &view,
            15.0,
            &ApprovalExpiry::default(),
            later,
            &mut seen,
            &|| false,
        )
        .unwrap()
        .unwrap();
        // Told to stop, before any bucket or after some: no scan.
        assert_eq!(
            sweep_scan(
                &view,
                15.0,
                &ApprovalExpiry::default(),
                later,
                &mut seen,
                &|| true
            )
            .unwrap(),
            None
        );
        let asked = std::cell::Cell::new(0);
        let stop_after_one = || {
            asked.set(asked.get() + 1);
            asked.get() > 1
        };
        assert_eq!(
            sweep_scan(
                &view,
                15.0,
                &ApprovalExpiry::default(),
                later,
                &mut seen,
                &stop_after_one
            )
            .unwrap(),
            None
        );
        let ids = |v: &[ActionId]| v.iter().map(|i| i.as_str().to_owned()).collect::<Vec<_>>();
        assert_eq!(ids(&scan.candidates), ["act_a", "act_c"]);
        // The index holds the two pending actions; the planted action has no entry, so the
        // sweep never reads it (verify reports it).
        assert_eq!((scan.skipped.len(), scan.scanned), (0, 2));
        // Meanwhile act_c is reported and act_d created.
        land_one(
            Box::new(move |ov, now| {
                report(
                    ov,
                    "act_c",
                    &done("act_c", "failed"),
                    &Settler::Operator,
                    now,
                )
                .map(|_| ())?;
                create(ov, &new_action("act_d"), now).map(|_| ())
            }),
            later,
        );
        let sweep_at = later.saturating_add_millis(60_000);
        let mut ops: Vec<Op<'_, SweepReport>> =
            vec![Box::new(|ov, now| sweep_candidates(ov, &scan, 15.0, now))];
        let (results, _) = land(&store, &options(), &mut ops, &mut || sweep_at);
        drop(ops);
        let report = results.into_iter().next().unwrap().unwrap();
        assert_eq!(
            report
                .swept
                .iter()
                .map(|s| s.action_id.as_str())
                .collect::<Vec<_>>(),
            ["act_a"]
        );
        assert_eq!(report.skipped.len(), 0);
        let show = |id| crate::finality::show(&store, "refs/heads/main", id).unwrap();
        assert_eq!(
            show("act_a").outcome.unwrap().status,
            super::super::OutcomeStatus::LostConfirmation
        );
        assert_eq!(
            show("act_c").outcome.unwrap().status,
            super::super::OutcomeStatus::Failed
        );
        assert!(show("act_d").outcome.is_none());
        drop(dir);
    }

    /// A repository in which `act_a` was created.
    fn repo_with_act_a() -> (tempfile::TempDir, Store) {
        let (dir, store) = repo();
        let mut setup: Vec<Op<'static, Created>> =
            vec![Box::new(|ov, now| create(ov, &new_action("act_a"), now))];
        land(&store, &options(), &mut setup, &mut || T0).0[0]
            .as_ref()
            .unwrap();
        (dir, store)
    }

    /// The first time (`moved` unset), a CLI claim of `act_a` lands through another handle on
    /// the repository at `path`: the ref moves under the plan that calls this.
    fn claim_underneath_once(path: &std::path::Path, moved: &mut bool, now: Timestamp) {
        if !std::mem::replace(moved, true) {
            let other = Store::open(path).unwrap();
            crate::finality::claim(
                &other,
                &options(),
                "act_a",
                &request("attempt-cli-000000001"),
                now,
            )
            .unwrap();
        }
    }

    #[test]
    fn a_moved_ref_is_replanned_so_a_claim_landed_elsewhere_wins() {
        let (dir, store) = repo_with_act_a();
        // The first plan of our claim is overtaken by a CLI claim landing underneath.
        let path = dir.path().join("state.git");
        let mut moved = false;
        let mut ops: Vec<Op<'_, Claim>> = vec![Box::new(|ov, now| {
            claim_underneath_once(&path, &mut moved, now);
            claim(ov, "act_a", &request("attempt-srv-000000001"), now)
        })];
        let (results, landed) = land(&store, &options(), &mut ops, &mut || T0);
        drop(ops);
        assert_eq!(landed.attempts, 2);
        assert!(matches!(
            results[0],
            Err(BatchError::Refused(Error::ClaimConflict { .. }))
        ));
        let st = crate::finality::show(&store, "refs/heads/main", "act_a").unwrap();
        assert_eq!(
            st.claim.unwrap().attempt_id.as_str(),
            "attempt-cli-000000001"
        );
    }

    /// `before` sees each written commit with its plan's answers before the compare-and-swap;
    /// only the last one lands, and the one a moved ref overtook is found never to have landed.
    #[test]
    fn before_landing_sees_every_commit_written_and_the_last_one_lands() {
        let (dir, store) = repo_with_act_a();
        let path = dir.path().join("state.git");
        let mut moved = false;
        let mut ops: Vec<Op<'_, Option<Claim>>> = vec![
            Box::new(|ov, now| {
                claim_underneath_once(&path, &mut moved, now);
                claim(ov, "act_a", &request("attempt-srv-000000001"), now).map(Some)
            }),
            Box::new(|ov, now| create(ov, &new_action("act_b"), now).map(|_| None)),
        ];
        let mut seen: Vec<(CommitId, Vec<bool>)> = Vec::new();
        let (results, landed) = land_with(
            &store,
            &options(),
            &mut ops,
            &mut || T0,
            &mut |commit, answers| {
                seen.push((commit, answers.iter().map(Option::is_some).collect()))
            },
        );
        drop(ops);
        assert!(results[1].is_ok(), "{:?}", results[1]);
        assert_eq!(landed.attempts, 2);
        // First plan: both operations answered; second: the claim lost to the CLI's.
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].1, [true, true]);
        assert_eq!(seen[1].1, [false, true]);
        assert_eq!(landed.commit, Some(seen[1].0));
        let tip = store.tip("refs/heads/main").unwrap().unwrap();
        assert!(store.is_ancestor(seen[1].0, tip).unwrap());
        assert!(!store.is_ancestor(seen[0].0, tip).unwrap());
    }

    #[test]
    fn an_exhausted_budget_is_unavailable_for_writers_and_their_dependents_only() {
        let (dir, store) = repo();
        let mut setup: Vec<Op<'static, Created>> = vec![
            Box::new(|ov, now| create(ov, &new_action("act_a"), now)),
            Box::new(|ov, now| create(ov, &new_action("act_b"), now)),
        ];
        land(&store, &options(), &mut setup, &mut || T0);
        // Every plan is overtaken by an unrelated write: the ref never holds still.
        let path = dir.path().join("state.git");
        let mut n = 0;
        let mut ops: Vec<Op<'_, Claim>> = vec![
            Box::new(|ov, now| {
                n += 1;
                let other = Store::open(&path).unwrap();
                let mut a = new_action(&format!("act_noise{n}"));
                a.guard_decision_id = None;
                crate::finality::create_action(&other, &options(), &a, now).unwrap();
                claim(ov, "act_a", &request("attempt-0000000000000001"), now)
            }),
            claim_op("act_a", "attempt-0000000000000002"),
            claim_op("act_missing", "attempt-0000000000000003"),
        ];
        let (results, landed) = land(&store, &options(), &mut ops, &mut || T0);
        drop(ops);
        assert_eq!((landed.attempts, landed.commit), (3, None));
        assert!(
            matches!(results[0], Err(BatchError::Unavailable { .. })),
            "{:?}",
            results[0]
        );
        // Refused only because of the first claim, which did not land: not a conflict.
        assert!(
            matches!(results[1], Err(BatchError::Unavailable { .. })),
            "{:?}",
            results[1]
        );
        assert!(matches!(
            results[2],
            Err(BatchError::Refused(Error::ClaimConflict { .. }))
        ));
        assert!(
            crate::finality::show(&store, "refs/heads/main", "act_a")
                .unwrap()
                .claim
                .is_none()
        );
    }

    fn rules(findings: &[crate::finding::Finding]) -> Vec<(String, &'static str)> {
        findings
            .iter()
            .map(|f| (f.path.rsplit('/').next().unwrap().to_owned(), f.rule.code()))
            .collect()
    }

    /// A decision record with a copy at another layout's place is read by nobody, whether or
    /// not one sits at this layout's place; the error names the stray path and what to do.
    #[test]
    fn a_decision_with_a_copy_at_another_layouts_place_is_not_read() {
        let (_dir, store) = repo();
        let decision = Decision {
            decision_id: ActionId::parse("gd_1").unwrap(),
            verdict: Verdict::Allow,
            rule: None,
            reason: None,
            action_type: Some("deploy".into()),
            agent_id: Some("agent-a".into()),
            principal: "principal-a".into(),
            act_content_hash: act_content_hash(Some(&default_act())),
            containment_ref: None,
            decided_at: T0,
        };
        let d = decision.clone();
        let mut ops: Vec<Op<'static, ()>> = vec![Box::new(move |ov, _| decide(ov, &d))];
        let (results, landed) = land(&store, &options(), &mut ops, &mut || T0);
        results.into_iter().for_each(|r| r.unwrap());
        let tip = landed.commit.unwrap();
        let id = &decision.decision_id;
        let own = Layout::DEFAULT.decision_path(id);
        let bytes = store
            .snapshot(Some(tip))
            .unwrap()
            .read(&own, 1 << 20)
            .unwrap()
            .unwrap();
        let read = |commit| {
            let ov = Overlay::new(store.snapshot(Some(commit)).unwrap()).unwrap();
            ov.decision(id)
        };
        assert_eq!(read(tip).unwrap(), Some(decision.clone()));
        // The reason of a refusal naming `stray` as the corrupt record.
        let refused_at = |read: Result<Option<Decision>, Error>, stray: &str| match read {
            Err(Error::Corrupt { path, reason }) if path == stray => reason,
            other => panic!("not refused at {stray}: {other:?}"),
        };
        for other in Layout::DEFAULT.others() {
            let stray = other.decision_path(id);
            // A second copy beside this layout's.
            let twice = store
                .write_commit_with(
                    Some(tip),
                    &[(stray.clone(), bytes.clone())],
                    &[],
                    false,
                    "copy",
                    &sig(),
                )
                .unwrap();
            let reason = refused_at(read(twice), &stray);
            assert!(
                reason.contains("a second copy of decision gd_1"),
                "{reason}"
            );
            assert!(reason.contains(&own), "{reason}");
            // Only at the other layout's place.
            let moved = store
                .write_commit_moving::<Vec<u8>>(
                    Some(tip),
                    &[],
                    &[(own.clone(), stray.clone())],
                    false,
                    "move",
                    &sig(),
                )
                .unwrap();
            let reason = refused_at(read(moved), &stray);
            assert!(reason.contains("move it there"), "{reason}");
        }
    }

    #[test]
    fn verify_checks_approvals_and_decisions() {
        let (_dir, store) = repo();
        let decision = Decision {
            decision_id: ActionId::parse("gd_1").unwrap(),
            verdict: Verdict::RequireApproval,
            rule: Some("deploys".into()),
            reason: None,
            action_type: Some("deploy".into()),
            agent_id: Some("agent-a".into()),
            principal: "principal-a".into(),
            act_content_hash: act_content_hash(Some(&default_act())),
            containment_ref: None,
            decided_at: T0,
        };
        let mut gated = new_action("act_gated");
        gated.verdict = Verdict::RequireApproval;
        let d = decision.clone();
        let mut ops: Vec<Op<'static, ()>> = vec![Box::new(move |ov, now| {
            decide(ov, &d)?;
            create(ov, &gated, now)?;
            assert!(claim(ov, "act_gated", &request("attempt-0000000000000001"), now).is_err());
            approve(
                ov,
                "act_gated",
                ApprovalDecision::Approve,
                "ops",
                None,
                &mut Security::default(),
                now,
            )?;
            claim(ov, "act_gated", &request("attempt-0000000000000001"), now)?;
            let mut open = new_action("act_open");
            open.guard_decision_id = Some("gd_opaque".into());
            create(ov, &open, now)?;
            report(
                ov,
                "act_open",
                &OutcomeReport {
                    status: "completed".into(),
                    ..OutcomeReport::default()
                },
                &Settler::Operator,
                now,
            )?;
            Ok(())
        })];
        let (results, landed) = land(&store, &options(), &mut ops, &mut || T0);
        results.into_iter().for_each(|r| r.unwrap());
        let good = landed.commit.unwrap();
        let clean = crate::finality::verify(&store.snapshot(Some(good)).unwrap()).unwrap();
        assert!(clean.is_empty(), "{clean:?}");

        let id = |s: &str| ActionId::parse(s).unwrap();
        let approval = |a: &str| Approval {
            action_id: id(a),
            decision: ApprovalDecision::Approve,
            decided_by: "ops".into(),
            decided_at: T0,
            lifecycle: Lifecycle::Running,
            reasoning: None,
        };
        let mut disagreeing = decision.clone();
        disagreeing.decision_id = id("gd_2");
        let mut unapproved = new_action("act_unapproved");
        unapproved.verdict = Verdict::RequireApproval;
        let unapproved = unapproved.to_action(T0).unwrap();
        let unapproved_claim = Claim {
            action_id: id("act_unapproved"),
            attempt_id: AttemptId::parse("attempt-0000000000000009").unwrap(),
            binding_sha256: Digest::of(unapproved.to_bytes()),
            claimed_at: T0,
            guard_decision_id: "gd_1".into(),
        };
        let mut misbound = new_action("act_misbound");
        misbound.guard_decision_id = Some("gd_2".into());
        misbound.verdict = Verdict::Allow;
        let files = vec![
            // An approval of an action that never waited for one, after its outcome.
            (
                crate::finality::Layout::DEFAULT
                    .record_path(&id("act_open"), crate::finality::RecordKind::Approval),
                approval("act_open").to_bytes(),
            ),
            // A claim of an action that was never approved.
            (
                crate::finality::Layout::DEFAULT
                    .record_path(&unapproved.action_id, crate::finality::RecordKind::Action),
                unapproved.to_bytes(),
            ),
            (
                crate::finality::Layout::DEFAULT
                    .record_path(&unapproved.action_id, crate::finality::RecordKind::Claim),
                unapproved_claim.to_bytes(),
            ),
            // An action whose verdict is not its decision's.
            (
                crate::finality::Layout::DEFAULT.decision_path(&disagreeing.decision_id),
                disagreeing.to_bytes(),
            ),
            (
                crate::finality::Layout::DEFAULT
                    .record_path(&id("act_misbound"), crate::finality::RecordKind::Action),
                misbound.to_action(T0).unwrap().to_bytes(),
            ),
            // A decision at the wrong path.
            (
                format!("{}/zz/gd_3.json", decision::DECISIONS),
                decision.to_bytes(),
            ),
        ];
        let bad = store
            .write_commit(Some(good), &files, "forged\n", &options().signature)
            .unwrap();
        let mut got = rules(&crate::finality::verify(&store.snapshot(Some(bad)).unwrap()).unwrap());
        got.sort();
        // The forged actions have no pending-index entry either.
        let want = [
            ("1772366400000.act_misbound", "finality-pending-missing"),
            ("1772366400000.act_unapproved", "finality-pending-missing"),
            ("action.json", "finality-record-invalid"),
            ("approval.json", "finality-lifecycle-mismatch"),
            ("claim.json", "finality-claim-mismatch"),
            ("claim.json", "finality-claim-mismatch"),
            ("gd_3.json", "finality-unknown-path"),
        ];
        assert_eq!(got, want.map(|(a, b)| (a.to_owned(), b)).to_vec());
        // A push adding the approval after the outcome is refused for that too.
        let range = rules(&crate::finality::verify_range(&store, Some(good), bad).unwrap());
        assert!(
            range.contains(&("approval.json".to_owned(), "finality-lifecycle-mismatch")),
            "{range:?}"
        );
        assert!(range.len() > want.len(), "{range:?}");
    }
}
