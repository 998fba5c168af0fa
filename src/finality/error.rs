//! The errors of the finality operations, with the stable codes the CLI's `--json` output and
//! the HTTP API report. (The record readers' errors are [`RecordError`](super::RecordError).)

use super::ids::{ActionId, AttemptId};
use super::status::{Lifecycle, OutcomeStatus};
use crate::store;

/// Why a finality operation was refused or could not run. [`Error::code`] gives the contract's
/// code; refusals never change the ref.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Any ineligibility of a claim, or a lost race; deliberately the same for every cause (not
    /// found, other agent, principal or act, already claimed, terminal, not protocol 1, …) so it
    /// is no existence oracle.
    #[error(
        "action {action_id} is not eligible for a new execution attempt: reconcile its state before retrying"
    )]
    ClaimConflict {
        /// The action id as the caller gave it.
        action_id: String,
    },
    /// The claim request breaks a body rule of the claim (attempt id format, extra keys, …).
    #[error("invalid execution claim: {reason}")]
    InvalidClaim {
        /// Which rule.
        reason: &'static str,
    },
    /// A claim without an agent id.
    #[error("an agent identity is required to claim an execution")]
    AgentIdentityRequired,
    /// The claim could not be written or checked for a reason other than eligibility (I/O, a
    /// busy or moving ref, an unreadable record); the caller was not granted and may retry with
    /// a new attempt id after reading the action back.
    #[error("execution claim unavailable for action {action_id}: {reason}")]
    ClaimUnavailable {
        /// The action id as the caller gave it.
        action_id: String,
        /// What failed.
        reason: String,
    },
    /// An outcome status other than `completed`, `partial`, `failed` (also `lost_confirmation`,
    /// which only the sweep writes).
    #[error("invalid status {status:?}: report completed, partial or failed")]
    InvalidStatus {
        /// The refused status.
        status: String,
    },
    /// An outcome report that breaks a rule of the report (error message, progress).
    #[error("invalid outcome: {reason}")]
    InvalidOutcome {
        /// Which rule (and, for a progress value, where in it).
        reason: String,
    },
    /// Invalid input to [`create_action`](super::create_action), [`claim`](fn@super::claim) (its
    /// act) or [`close`](super::close).
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// The action does not exist.
    #[error("action {action_id} not found")]
    NotFound {
        /// The action id as the caller gave it.
        action_id: String,
    },
    /// The action's lifecycle does not accept a caller's outcome.
    #[error("cannot report an outcome for action {action_id} in status '{lifecycle}'")]
    LifecycleConflict {
        /// The action.
        action_id: ActionId,
        /// Its current lifecycle.
        lifecycle: Lifecycle,
    },
    /// The outcome is one-shot and already set.
    #[error("outcome already set for action {action_id}: current status {current_status}")]
    OutcomeAlreadySet {
        /// The action.
        action_id: ActionId,
        /// The outcome that won.
        current_status: OutcomeStatus,
    },
    /// A legacy close of an action whose lifecycle is no longer `running`.
    #[error(
        "action {action_id} is in a terminal state and cannot be modified (status '{lifecycle}')"
    )]
    TerminalState {
        /// The action.
        action_id: ActionId,
        /// Its current lifecycle.
        lifecycle: Lifecycle,
    },
    /// A cancel of an action that is no longer cancellable (claimed, settled, pending approval
    /// or already cancelled), DashClaw's `NOT_CANCELLABLE`.
    #[error(
        "action {action_id} is no longer cancellable: it has been claimed or reached a terminal state (status '{lifecycle}', claimed: {claimed})"
    )]
    NotCancellable {
        /// The action.
        action_id: ActionId,
        /// Its current lifecycle.
        lifecycle: Lifecycle,
        /// Whether its execution was claimed.
        claimed: bool,
        /// Its outcome status (`pending` without an outcome).
        outcome_status: OutcomeStatus,
    },
    /// A containment verdict on an action that is not awaiting promotion (not contained, its
    /// contained run not completed, or already promoted or discarded), DashClaw's
    /// `CONTAINMENT_NOT_AWAITING`.
    #[error(
        "action {action_id} is not awaiting promotion (containment status: {})",
        status.map_or("none", |s| s.as_str())
    )]
    ContainmentNotAwaiting {
        /// The action.
        action_id: ActionId,
        /// Its containment status; `None` when it is not contained.
        status: Option<super::containment::ContainmentStatus>,
    },
    /// A promotion of a contained action without a `containment_ref`: there is nothing to
    /// merge, DashClaw's `CONTAINMENT_REF_MISSING`.
    #[error("action {action_id} has no containment_ref to promote: discard it instead")]
    ContainmentRefMissing {
        /// The action.
        action_id: ActionId,
    },
    /// The principal that created a contained action resolving its own containment (separation
    /// of duties), DashClaw's `SELF_APPROVAL_FORBIDDEN`.
    #[error(
        "the principal that created action {action_id} cannot resolve its containment: resolve it as another operator"
    )]
    SelfApprovalForbidden {
        /// The action.
        action_id: ActionId,
    },
    /// An outcome reported with an attempt id that is not the action's claim.
    #[error(
        "attempt {attempt_id} does not hold the claim of action {action_id}: report without an attempt id or with the claiming one"
    )]
    AttemptMismatch {
        /// The action.
        action_id: ActionId,
        /// The attempt id given.
        attempt_id: AttemptId,
    },
    /// An action with this id exists with a different binding.
    #[error("action {action_id} already exists with a different binding: choose another id")]
    ActionExists {
        /// The action.
        action_id: ActionId,
    },
    /// A record in the repository is not valid (see `verify`).
    #[error("{path} is not a valid finality record: {reason}")]
    Corrupt {
        /// The record's path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The ref kept moving.
    #[error("ref {ref_name} kept moving: gave up after {attempts} attempts; retry")]
    Contention {
        /// The ledger ref.
        ref_name: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The ref lock was held for longer than [`Options::lock_wait`](super::Options::lock_wait).
    #[error(
        "the ref lock of {ref_name} ({}) is held and was not released in time; retry later; if no action-ledger or git process writes to this repository (check with `fuser {}` or `ps`), remove that file",
        lock.display(), lock.display()
    )]
    RefLocked {
        /// The ledger ref.
        ref_name: String,
        /// The lock file that is held, by its real path.
        lock: std::path::PathBuf,
    },
    /// The repository's finality layout record is not one this version knows.
    #[error(transparent)]
    Layout(#[from] super::layout::LayoutError),
    /// The pending index disagrees with the records of an action the operation touches: the
    /// repository was damaged or written by another tool. Nothing was written.
    #[error(
        "the pending index disagrees with the records at {path} ({rule}: {detail}); nothing was \
         written: run `action-ledger verify` and repair the repository before writing"
    )]
    PendingIndex {
        /// The rule broken (`finality-pending-missing`, `-extra` or `-time`).
        rule: crate::finding::Rule,
        /// The entry's path.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// The state repository could not be read or written.
    #[error(transparent)]
    Store(#[from] store::Error),
    /// The remote state repository could not be read, fetched or pushed to (`--remote`):
    /// nothing was recorded, unless a push broke after the server applied it
    /// ([`may_have_landed`](store::remote::Error::may_have_landed)).
    #[error("{}; {}", .0, remote_left(.0))]
    Remote(#[from] store::remote::Error),
    /// The remote refused the push (its pre-receive hook's lines): final, nothing was recorded.
    #[error("the remote refused the push:\n{0}")]
    RemoteRefused(String),
    /// The remote ref's history was rewritten since this cache last confirmed it: nothing was
    /// recorded.
    #[error(transparent)]
    RemoteRewritten(store::remote::Rewritten),
}

/// A target's tip that could not be read: the local ref ([`Error::Store`]) or the remote
/// ([`Error::Remote`], an unavailable dependency, never invalid input).
impl From<store::remote::TipError> for Error {
    fn from(e: store::remote::TipError) -> Error {
        match e {
            store::remote::TipError::Store(e) => Error::Store(e),
            store::remote::TipError::Transport(e) => Error::Remote(e),
        }
    }
}

// The landing loop's failures as the variants above (`store::land`).
crate::store::land::impl_from_land_error!(Error);

/// What a failed remote step left on the remote.
fn remote_left(e: &store::remote::Error) -> &'static str {
    if e.may_have_landed() {
        "the remote holds either its old state or this whole record"
    } else {
        "nothing was recorded"
    }
}

impl Error {
    /// The contract's code or ours, in `SCREAMING_SNAKE_CASE`; stable in `--json` output.
    pub fn code(&self) -> &'static str {
        match self {
            Error::ClaimConflict { .. } => "EXECUTION_CLAIM_CONFLICT",
            Error::InvalidClaim { .. } => "INVALID_EXECUTION_CLAIM",
            Error::AgentIdentityRequired => "AGENT_IDENTITY_REQUIRED",
            Error::ClaimUnavailable { .. } => "EXECUTION_CLAIM_UNAVAILABLE",
            Error::InvalidStatus { .. } => "INVALID_STATUS",
            Error::InvalidOutcome { .. } => "INVALID_OUTCOME",
            Error::InvalidInput { .. } => "INVALID_INPUT",
            Error::NotFound { .. } => "NOT_FOUND",
            Error::LifecycleConflict { .. } => "LIFECYCLE_CONFLICT",
            Error::OutcomeAlreadySet { .. } => "OUTCOME_ALREADY_SET",
            Error::TerminalState { .. } => "TERMINAL_STATE",
            Error::NotCancellable { .. } => "NOT_CANCELLABLE",
            Error::ContainmentNotAwaiting { .. } => "CONTAINMENT_NOT_AWAITING",
            Error::ContainmentRefMissing { .. } => "CONTAINMENT_REF_MISSING",
            Error::SelfApprovalForbidden { .. } => "SELF_APPROVAL_FORBIDDEN",
            Error::AttemptMismatch { .. } => "ATTEMPT_MISMATCH",
            Error::ActionExists { .. } => "ACTION_EXISTS",
            Error::Corrupt { .. } => "CORRUPT_RECORD",
            Error::Contention { .. } => "CONTENTION",
            Error::RefLocked { .. } => "REF_LOCKED",
            Error::Layout(_) => "LAYOUT_INVALID",
            Error::PendingIndex { .. } => "PENDING_INDEX_INVALID",
            Error::Store(_) => "STORE_ERROR",
            Error::Remote(_) => "REMOTE_UNAVAILABLE",
            Error::RemoteRefused(_) => "REMOTE_REFUSED",
            Error::RemoteRewritten(_) => "REMOTE_REWRITTEN",
        }
    }

    /// The current outcome status or lifecycle a refusal reports (`current_status` of the HTTP refusal).
    pub fn current_status(&self) -> Option<&'static str> {
        match self {
            Error::OutcomeAlreadySet { current_status, .. } => Some(current_status.as_str()),
            Error::LifecycleConflict { lifecycle, .. }
            | Error::TerminalState { lifecycle, .. }
            | Error::NotCancellable { lifecycle, .. } => Some(lifecycle.as_str()),
            _ => None,
        }
    }

    /// Whether the operation ran and refused (a conflict with the ledger's state, HTTP 404/409 in
    /// the contract) rather than failing on its input or on I/O.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::ClaimConflict { .. }
                | Error::NotFound { .. }
                | Error::LifecycleConflict { .. }
                | Error::OutcomeAlreadySet { .. }
                | Error::TerminalState { .. }
                | Error::NotCancellable { .. }
                | Error::ContainmentNotAwaiting { .. }
                | Error::ContainmentRefMissing { .. }
                | Error::SelfApprovalForbidden { .. }
                | Error::AttemptMismatch { .. }
                | Error::ActionExists { .. }
                | Error::Contention { .. }
                | Error::RemoteRefused(_)
                | Error::RemoteRewritten(_)
        )
    }
}
