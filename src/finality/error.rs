//! The errors of the finality operations ([`Error`], with the stable codes the CLI's `--json`
//! output and the HTTP API report) and of the record readers ([`RecordError`], naming the field
//! and the rule a record breaks).

use super::ids::{ActionId, AttemptId};
use super::status::{Lifecycle, OutcomeStatus};
use crate::store;

/// Why a finality operation was refused or could not run. [`Error::code`] gives the contract's
/// code; refusals never change the ref.
#[derive(Debug, thiserror::Error)]
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
        "the ref lock of {ref_name} is held and was not released in time; if no writer is running, remove {ref_name}.lock"
    )]
    RefLocked {
        /// The ledger ref.
        ref_name: String,
    },
    /// The state repository could not be read or written.
    #[error(transparent)]
    Store(#[from] store::Error),
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
            Error::AttemptMismatch { .. } => "ATTEMPT_MISMATCH",
            Error::ActionExists { .. } => "ACTION_EXISTS",
            Error::Corrupt { .. } => "CORRUPT_RECORD",
            Error::Contention { .. } => "CONTENTION",
            Error::RefLocked { .. } => "REF_LOCKED",
            Error::Store(_) => "STORE_ERROR",
        }
    }

    /// The current outcome status or lifecycle a refusal reports (`current_status` of the HTTP refusal).
    pub fn current_status(&self) -> Option<&'static str> {
        match self {
            Error::OutcomeAlreadySet { current_status, .. } => Some(current_status.as_str()),
            Error::LifecycleConflict { lifecycle, .. } | Error::TerminalState { lifecycle, .. } => {
                Some(lifecycle.as_str())
            }
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
                | Error::AttemptMismatch { .. }
                | Error::ActionExists { .. }
                | Error::Contention { .. }
        )
    }
}

/// Why a record file is not a valid finality record: the field and the rule it breaks. The
/// messages are those `verify` reports as finding details and [`Error::Corrupt`] as its reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The bytes are not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// The file does not end with its one `"\n"`.
    #[error("does not end with a newline")]
    NoNewline,
    /// The text is not canonical JSON (the canonical reader's message).
    #[error("{reason}")]
    NotCanonical {
        /// What the canonical reader refused.
        reason: String,
    },
    /// The JSON value is not an object.
    #[error("not a JSON object")]
    NotAnObject,
    /// The object's keys are not exactly the record's.
    #[error("fields are {have:?}, expected {want:?}")]
    Fields {
        /// The keys present, sorted.
        have: Vec<String>,
        /// The keys of the record, sorted.
        want: Vec<String>,
    },
    /// `schema` names another record kind.
    #[error("schema is not {expected}")]
    Schema {
        /// The record's schema.
        expected: &'static str,
    },
    /// `schema_version` is not [`SCHEMA_VERSION`](super::SCHEMA_VERSION).
    #[error("schema_version is not {}", super::SCHEMA_VERSION)]
    SchemaVersion,
    /// A required string field is missing or not a string.
    #[error("{field} is not a string")]
    NotString {
        /// The field.
        field: &'static str,
    },
    /// An optional string field is neither a string nor `null`.
    #[error("{field} is not a string or null")]
    NotStringOrNull {
        /// The field.
        field: &'static str,
    },
    /// A boolean field is not a boolean.
    #[error("{field} is not a boolean")]
    NotBool {
        /// The field.
        field: &'static str,
    },
    /// A time field is not exactly `YYYY-MM-DDTHH:MM:SS.mmmZ` (a real UTC date).
    #[error("{field} is not YYYY-MM-DDTHH:MM:SS.mmmZ")]
    NotTime {
        /// The field.
        field: &'static str,
    },
    /// A field holds a string that is not one of its values (an id of the wrong shape, an
    /// unknown status, …).
    #[error("{field} {value:?} is not valid")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// An optional field whose value, when set, is not valid (the value is not repeated).
    #[error("{field} is not valid")]
    InvalidOptional {
        /// The field.
        field: &'static str,
    },
    /// An id field is not machine text (`^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$`) of at most
    /// [`MAX_ID_UNITS`](super::MAX_ID_UNITS) characters.
    #[error(
        "{field} is not machine text of at most {} characters",
        super::MAX_ID_UNITS
    )]
    NotMachineText {
        /// The field.
        field: &'static str,
    },
    /// A required field is `null`.
    #[error("{field} is null")]
    Null {
        /// The field.
        field: &'static str,
    },
    /// The record's own id is not the one its path names.
    #[error("{field} {id} is not its {owner}")]
    NotItsPath {
        /// The id field (`action_id`, `decision_id`).
        field: &'static str,
        /// The id in the record.
        id: ActionId,
        /// What names it: `directory's` (an action directory) or `path's` (a decision file).
        owner: &'static str,
    },
    /// `act_content_hash` is not `sha256:` and 43 base64url characters.
    #[error("act_content_hash is not sha256:<base64url>")]
    ActHash,
    /// `execution_protocol` is neither 1 nor `null`.
    #[error("execution_protocol is not 1 or null")]
    Protocol,
    /// `action.json` holds a lifecycle only the server sets (`unknown`, `expired`).
    #[error("lifecycle {lifecycle} cannot be an initial lifecycle")]
    InitialLifecycle {
        /// The lifecycle found.
        lifecycle: Lifecycle,
    },
    /// `outcome.json` holds status `pending`, which is the absence of the file.
    #[error("status pending is never written")]
    PendingWritten,
    /// A free-text field is over [`MAX_TEXT_UNITS`](super::MAX_TEXT_UNITS) UTF-16 code units or
    /// holds NUL, so it was not stored by the redaction that truncates and cleans it.
    #[error(
        "{field} is longer than {} characters or contains NUL",
        super::MAX_TEXT_UNITS
    )]
    Text {
        /// The field.
        field: &'static str,
    },
    /// `progress` is neither an object nor `null`.
    #[error("progress is not an object or null")]
    Progress,
    /// `approval.json`'s lifecycle is not the one its decision leads to.
    #[error("lifecycle {lifecycle} is not the one {decision} leads to ({expected})")]
    ApprovalLifecycle {
        /// The lifecycle found.
        lifecycle: Lifecycle,
        /// The decision (`approve`, `deny`).
        decision: &'static str,
        /// The lifecycle it leads to.
        expected: Lifecycle,
    },
    /// A decision record's `containment_ref` is set for a verdict other than
    /// `allow_contained`, or missing for it.
    #[error("containment_ref is set exactly for allow_contained")]
    ContainmentRef,
}
