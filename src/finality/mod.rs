//! Execution finality on the Git store (design.md §8; the contract is execution-finality.md):
//! exactly one caller wins the authority to run one attempt of a governed action, its outcome is
//! recorded once and never rewritten, and pending outcomes older than a timeout become
//! `lost_confirmation`.
//!
//! # Records
//!
//! Every governed action has one directory in the state repository, keyed by its id and the first
//! two hex digits of `sha256(action_id)` (so no tree grows past a few thousand entries):
//!
//! ```text
//! finality/v1/actions/<sha256(action_id)[0:2]>/<action_id>/action.json    the binding (§1.1)
//! finality/v1/actions/<sha256(action_id)[0:2]>/<action_id>/claim.json     the one claim (§1.2)
//! finality/v1/actions/<sha256(action_id)[0:2]>/<action_id>/outcome.json   the one outcome (§1.4)
//! finality/v1/actions/<sha256(action_id)[0:2]>/<action_id>/approval.json  an operator's decision
//! finality/v1/decisions/<sha256(decision_id)[0:2]>/<decision_id>.json      a guard decision
//! ```
//!
//! ([`approval`] and [`decision`]; both are written by `serve`.)
//!
//! Each file is canonical JSON plus `"\n"` and create-only: it is written once and never changed
//! or removed. The contract keeps two mutable columns on one row (lifecycle `status` and
//! `outcome_status`); here the lifecycle only ever changes together with the outcome, so
//! `action.json` holds the *initial* lifecycle and `outcome.json` the lifecycle *after* the
//! outcome write (the closure table of §1.4 applied). The current state of an action is therefore
//! a pure function of its (at most) three files; an absent `outcome.json` is outcome `pending`.
//!
//! # Operations
//!
//! [`create_action`], [`claim`], [`report_outcome`], [`close`] (the legacy close mapping) and
//! [`sweep`] each read the tip of the ledger ref, check their preconditions against that
//! snapshot, write ONE commit that adds the new record(s) on top of it and land it with ONE
//! compare-and-swap of the ref ([`Store::update_ref`]). When another writer moved the ref
//! meanwhile, the operation re-reads the new tip and re-checks everything from scratch, so a
//! second claim sees the first one's `claim.json` and is refused, and a report racing the sweep
//! sees the winner's `outcome.json` and is told its status (§2.1, §2.2, §7). A held ref lock is
//! waited for ([`Options::lock_wait`]), never mistaken for a lost race. [`batch`] lands many
//! operations (planned one after the other on the same tip) as one commit the same way.
//!
//! # What remains after a crash
//!
//! Before the compare-and-swap the ref still names the old tip: at most unreachable objects
//! remain, the operation did not happen, and retrying it is safe (a claim with a *new* attempt
//! id; the old one was never granted). After it the record is complete and durable (the store
//! fsyncs objects and the ref before returning). A claim whose result was lost in between (the
//! process died after the swap) must be reconciled by reading the action back ([`show`]) and
//! comparing the attempt id, never by claiming again.
//!
//! # Not implemented from the contract
//!
//! Plan grants, operator grants of one action used by another, organisations and the lazy sweep
//! throttle are out of scope (design.md §8); here the guard decision is an input (id and verdict)
//! fixed at creation, and an operator approval is the action's own single-use grant. Policy
//! evaluation lives in `serve`. The backfill pass of §2.3 has nothing to heal, since the lifecycle
//! and the outcome are written in the same file.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use sha2::{Digest as _, Sha256};
use unicode_normalization::UnicodeNormalization;

use crate::canonical::{self, Value};
use crate::event;
use crate::finding::{Finding, Rule};
use crate::identity::Digest;
use crate::privacy;
use crate::store::{self, Change, CommitId, Signature, Snapshot, Store};

/// Root of all finality records in the state repository.
pub const ROOT: &str = "finality/v1";
/// Directory of the per-action directories.
pub const ACTIONS: &str = "finality/v1/actions";
/// `schema` of `action.json`.
pub const ACTION_SCHEMA: &str = "action-ledger.finality-action";
/// `schema` of `claim.json`.
pub const CLAIM_SCHEMA: &str = "action-ledger.finality-claim";
/// `schema` of `outcome.json`.
pub const OUTCOME_SCHEMA: &str = "action-ledger.finality-outcome";
/// `schema_version` of every finality record.
pub const SCHEMA_VERSION: i64 = 1;
/// The capability a creator must advertise for the action to be claimable (protocol 1, §1.1).
pub const EXECUTION_CLAIMS: &str = "execution_claims";
/// Largest finality record the readers accept.
pub const MAX_RECORD_BYTES: u64 = 256 * 1024;
/// `summary` and `error_message` are truncated to this many UTF-16 code units (§1.5).
pub const MAX_TEXT_UNITS: usize = 4000;
/// Largest `progress`, in bytes of its JSON (§1.5).
pub const MAX_PROGRESS_BYTES: usize = 8 * 1024;
/// The sweep's default timeout in minutes (§2.3).
pub const DEFAULT_TIMEOUT_MINUTES: u32 = 15;
/// Largest sweep timeout in minutes (§2.3); the smallest is 1.
pub const MAX_TIMEOUT_MINUTES: u32 = 1440;
/// `summary` of a swept outcome (§2.3).
pub const SWEEP_SUMMARY: &str = "No outcome reported within timeout window";
/// `error_message` of a swept outcome whose lifecycle was open (§2.3).
pub const SWEEP_ERROR: &str = "reconciled to unknown by the stale-outcome sweep";
/// Longest agent id, principal, guard decision id or containment ref (UTF-16 code units).
pub const MAX_ID_UNITS: usize = 256;
/// The text that replaces a secret or confidential identifier.
pub const REDACTED: &str = "[REDACTED]";

// ---------------------------------------------------------------------------------------------
// Identifiers

fn is_token(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An action id: `^[A-Za-z0-9_-]{1,128}$` (a safe single path component).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActionId(String);

impl ActionId {
    /// Accepts exactly `^[A-Za-z0-9_-]{1,128}$`.
    pub fn parse(s: &str) -> Option<ActionId> {
        is_token(s, 1, 128).then(|| ActionId(s.to_owned()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `finality/v1/actions/<sha256(id)[0:2]>/<id>`.
    pub fn dir(&self) -> String {
        format!("{ACTIONS}/{}/{}", Digest::of(&self.0).prefix(2), self.0)
    }

    /// The path of one of the action's records.
    pub fn path(&self, kind: RecordKind) -> String {
        format!("{}/{}", self.dir(), kind.file_name())
    }
}

impl fmt::Display for ActionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An execution attempt id (the claim's nonce): `^[A-Za-z0-9_-]{16,128}$` (§1.5), for example a
/// UUID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId(String);

impl AttemptId {
    /// Accepts exactly `^[A-Za-z0-9_-]{16,128}$`.
    pub fn parse(s: &str) -> Option<AttemptId> {
        is_token(s, 16, 128).then(|| AttemptId(s.to_owned()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The record files of an action directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// `action.json`.
    Action,
    /// `claim.json`.
    Claim,
    /// `outcome.json`.
    Outcome,
    /// `approval.json` (an operator's decision, see [`approval`]).
    Approval,
}

impl RecordKind {
    /// The file name in the action directory.
    pub fn file_name(self) -> &'static str {
        match self {
            RecordKind::Action => "action.json",
            RecordKind::Claim => "claim.json",
            RecordKind::Outcome => "outcome.json",
            RecordKind::Approval => "approval.json",
        }
    }

    fn from_file_name(name: &str) -> Option<RecordKind> {
        match name {
            "action.json" => Some(RecordKind::Action),
            "claim.json" => Some(RecordKind::Claim),
            "outcome.json" => Some(RecordKind::Outcome),
            "approval.json" => Some(RecordKind::Approval),
            _ => None,
        }
    }
}

/// Splits a path under [`ACTIONS`] into its action id and record kind; `None` for any other
/// shape, an invalid id, or a prefix directory that is not `sha256(id)[0:2]`.
pub fn classify(path: &str) -> Option<(ActionId, RecordKind)> {
    let rest = path.strip_prefix(ACTIONS)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (prefix, id, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let id = ActionId::parse(id)?;
    let kind = RecordKind::from_file_name(file)?;
    (Digest::of(id.as_str()).prefix(2) == prefix).then_some((id, kind))
}

// ---------------------------------------------------------------------------------------------
// Status values

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// The contract's string for this value.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// The value named by the contract's string `s`.
            pub fn parse(s: &str) -> Option<$name> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum! {
    /// The lifecycle `status` of an action (§1.1). `unknown` and `expired` are server-only.
    Lifecycle {
        /// Open; the only claimable lifecycle.
        Running = "running",
        /// Open.
        Pending = "pending",
        /// Waiting for an operator (approvals are out of scope; only the sweep touches it).
        PendingApproval = "pending_approval",
        /// Created from a `block` verdict.
        Blocked = "blocked",
        /// Closed.
        Completed = "completed",
        /// Closed.
        Failed = "failed",
        /// Closed.
        Cancelled = "cancelled",
        /// Set by the sweep (server only).
        Unknown = "unknown",
        /// Set by the approval-expiry sweep of the reference (server only; never written here).
        Expired = "expired",
    }
}

impl Lifecycle {
    /// The values a client may give at creation (§1.1's validator enum).
    pub fn is_client_settable(self) -> bool {
        !matches!(self, Lifecycle::Unknown | Lifecycle::Expired)
    }

    /// `running` or `pending`: an outcome write closes it (§1.4).
    pub fn is_open(self) -> bool {
        matches!(self, Lifecycle::Running | Lifecycle::Pending)
    }

    /// The lifecycles the sweep treats as implicitly confirmed and skips (§2.3).
    pub fn is_sweep_excluded(self) -> bool {
        matches!(
            self,
            Lifecycle::Completed | Lifecycle::Failed | Lifecycle::Cancelled | Lifecycle::Blocked
        )
    }

    /// The lifecycles for which a caller may not report an outcome (§1.5).
    pub fn refuses_outcome(self) -> bool {
        matches!(
            self,
            Lifecycle::Blocked
                | Lifecycle::PendingApproval
                | Lifecycle::Cancelled
                | Lifecycle::Failed
        )
    }

    /// The lifecycle after an outcome write (the closure table of §1.4): an open lifecycle is
    /// closed, anything else is left as it is.
    pub fn closed_by(self, status: OutcomeStatus) -> Lifecycle {
        if !self.is_open() {
            return self;
        }
        match status {
            OutcomeStatus::Pending => self,
            OutcomeStatus::Completed => Lifecycle::Completed,
            OutcomeStatus::Partial | OutcomeStatus::Failed => Lifecycle::Failed,
            OutcomeStatus::LostConfirmation => Lifecycle::Unknown,
        }
    }

    /// The implicit outcome of a legacy close to this lifecycle (§1.4), for the four close
    /// statuses `completed`, `failed`, `cancelled`, `blocked`.
    pub fn legacy_outcome(self) -> Option<OutcomeStatus> {
        match self {
            Lifecycle::Completed => Some(OutcomeStatus::Completed),
            Lifecycle::Failed | Lifecycle::Cancelled | Lifecycle::Blocked => {
                Some(OutcomeStatus::Failed)
            }
            _ => None,
        }
    }
}

string_enum! {
    /// The durable outcome `outcome_status` of an action (§1.1).
    OutcomeStatus {
        /// No outcome yet (no `outcome.json`).
        Pending = "pending",
        /// The effect happened.
        Completed = "completed",
        /// Part of the effect happened; never upgraded later.
        Partial = "partial",
        /// The attempt failed (it may still have partially applied).
        Failed = "failed",
        /// No outcome was reported in time: the result is unknown; reconcile (sweep only).
        LostConfirmation = "lost_confirmation",
    }
}

string_enum! {
    /// The verdict of the guard decision that authorised the action (an opaque input here).
    Verdict {
        /// Permissive.
        Allow = "allow",
        /// Permissive.
        Warn = "warn",
        /// Permissive for a contained action only.
        AllowContained = "allow_contained",
        /// Needs an operator; the action is born `pending_approval`.
        RequireApproval = "require_approval",
        /// Never claimable; the action is born `blocked`.
        Block = "block",
    }
}

impl Verdict {
    /// `allow`, `warn` or `allow_contained` (§1.3).
    pub fn is_permissive(self) -> bool {
        matches!(
            self,
            Verdict::Allow | Verdict::Warn | Verdict::AllowContained
        )
    }

    /// The lifecycle an action starts in under this verdict (§1.1).
    pub fn initial_lifecycle(self) -> Lifecycle {
        match self {
            Verdict::RequireApproval => Lifecycle::PendingApproval,
            Verdict::Block => Lifecycle::Blocked,
            _ => Lifecycle::Running,
        }
    }
}

string_enum! {
    /// Which path wrote an outcome.
    Source {
        /// A caller's report ([`report_outcome`]).
        Outcome = "outcome",
        /// The implicit mapping of a legacy close ([`close`]).
        LegacyClose = "legacy_close",
        /// The stale-outcome sweep ([`sweep`]).
        Sweep = "sweep",
    }
}

pub mod approval;
pub mod batch;
pub mod decision;

pub use approval::{Approval, ApprovalDecision};

// ---------------------------------------------------------------------------------------------
// Errors

/// Why a finality operation was refused or could not run. [`Error::code`] gives the contract's
/// code; refusals never change the ref.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Any ineligibility of a claim, or a lost race; deliberately the same for every cause (not
    /// found, other agent, principal or act, already claimed, terminal, not protocol 1, …) so it
    /// is no existence oracle (§1.5).
    #[error(
        "action {action_id} is not eligible for a new execution attempt: reconcile its state before retrying"
    )]
    ClaimConflict {
        /// The action id as the caller gave it.
        action_id: String,
    },
    /// The claim request breaks the body rules of §1.5 (attempt id format, extra keys, …).
    #[error("invalid execution claim: {reason}")]
    InvalidClaim {
        /// Which rule.
        reason: &'static str,
    },
    /// A claim without an agent id (§1.5).
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
    /// An outcome report that breaks a rule of §1.5 (error message, progress).
    #[error("invalid outcome: {reason}")]
    InvalidOutcome {
        /// Which rule (and, for a progress value, where in it).
        reason: String,
    },
    /// Invalid input to [`create_action`], [`claim`] (its act) or [`close`].
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
    /// The action's lifecycle does not accept a caller's outcome (§1.5).
    #[error("cannot report an outcome for action {action_id} in status '{lifecycle}'")]
    LifecycleConflict {
        /// The action.
        action_id: ActionId,
        /// Its current lifecycle.
        lifecycle: Lifecycle,
    },
    /// The outcome is one-shot and already set (§1.4, §2.2).
    #[error("outcome already set for action {action_id}: current status {current_status}")]
    OutcomeAlreadySet {
        /// The action.
        action_id: ActionId,
        /// The outcome that won.
        current_status: OutcomeStatus,
    },
    /// A legacy close of an action whose lifecycle is no longer `running` (§1.4).
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
    /// The ref lock was held for longer than [`Options::lock_wait`].
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
    /// The contract's code (§1.5) or ours, in `SCREAMING_SNAKE_CASE`; stable in `--json` output.
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

    /// The current outcome status or lifecycle a refusal reports (`current_status` of §1.5).
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

// ---------------------------------------------------------------------------------------------
// Time

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of epoch milliseconds (the only time format of the records).
pub fn format_time(epoch_ms: i64) -> String {
    event::iso_millis(epoch_ms)
}

/// Epoch milliseconds of a time in exactly the [`format_time`] form; `None` otherwise.
pub fn parse_time(s: &str) -> Option<i64> {
    if s.len() != 24 || !s.ends_with('Z') || s.as_bytes()[19] != b'.' {
        return None;
    }
    let secs = event::timestamp_epoch_seconds(s)?;
    let millis: i64 = s[20..23].parse().ok()?;
    let ms = secs.checked_mul(1000)?.checked_add(millis)?;
    (format_time(ms) == s).then_some(ms)
}

// ---------------------------------------------------------------------------------------------
// Act scrubbing and hashing (§3 step 1, §4)

static SECRET_PATTERNS: LazyLock<[(Regex, &'static str); 5]> = LazyLock::new(|| {
    let re = |s: &str| Regex::new(s).expect("secret pattern compiles");
    [
        (
            re(r"(?i)\b(password|passwd|token|secret|api[_-]?key)=([^\s&]+)"),
            "${1}=",
        ),
        (re(r"(?i)\b(bearer)\s+([A-Za-z0-9._~+/=-]+)"), "${1} "),
        (re(r"()(oc_live_[A-Za-z0-9_-]+)"), ""),
        (re(r"()\b(sk-[A-Za-z0-9_-]{10,})"), ""),
        (re(r"()\b(ghp_[A-Za-z0-9]{20,})"), ""),
    ]
});

/// Masks the secret shapes of §3 step 1 in `text`: `password=`/`token=`/`secret=`/`api_key=`
/// values, `Bearer` tokens, `oc_live_…`, `sk-…` (10+ characters) and `ghp_…` (20+ characters)
/// become `[REDACTED]`. Returns the masked text and the number of masks applied. Pure and
/// idempotent.
pub fn mask_secrets(text: &str) -> (String, usize) {
    // Every pattern needs one of these; most texts have none, and then the patterns (slow to
    // compile in a debug build) are not needed at all.
    let lower = text.to_ascii_lowercase();
    if !["=", "bearer", "oc_live_", "sk-", "ghp_"]
        .iter()
        .any(|t| lower.contains(t))
    {
        return (text.to_owned(), 0);
    }
    let mut out = text.to_owned();
    let mut count = 0;
    for (re, prefix) in SECRET_PATTERNS.iter() {
        let replaced = re.replace_all(&out, |c: &regex::Captures<'_>| {
            let value = &c[2];
            // Already masked (or a prefix of the mask left by truncation): keep.
            if REDACTED.starts_with(value) {
                return c[0].to_owned();
            }
            count += 1;
            let mut expanded = String::new();
            c.expand(prefix, &mut expanded);
            expanded + REDACTED
        });
        out = replaced.into_owned();
    }
    (out, count)
}

/// The scrub of §3 step 1 applied to an act: drops the `authorization`, `cookie` and `x-api-key`
/// headers of `request.headers` (any case) and masks secrets ([`mask_secrets`]) in `command`,
/// `statement`, `request.body_excerpt` and `file.content_excerpt`. Non-objects pass through;
/// the input is not changed.
pub fn scrub_act(act: &Value) -> Value {
    let Value::Object(map) = act else {
        return act.clone();
    };
    let mut map = map.clone();
    let mask = |v: Option<&mut Value>| {
        if let Some(Value::String(s)) = v {
            *s = mask_secrets(s).0;
        }
    };
    mask(map.get_mut("command"));
    mask(map.get_mut("statement"));
    if let Some(Value::Object(request)) = map.get_mut("request") {
        if let Some(Value::Object(headers)) = request.get_mut("headers") {
            headers.retain(|k, _| {
                !matches!(
                    k.to_ascii_lowercase().as_str(),
                    "authorization" | "cookie" | "x-api-key"
                )
            });
        }
        mask(request.get_mut("body_excerpt"));
    }
    if let Some(Value::Object(file)) = map.get_mut("file") {
        mask(file.get_mut("content_excerpt"));
    }
    Value::Object(map)
}

/// The act a shell command stands for: `{"command": <argv, POSIX-quoted and space-joined>,
/// "kind": "shell"}`. `run` claims with this act, so an action created for one command cannot
/// be claimed to run another.
pub fn shell_act(argv: &[String]) -> Value {
    let quoted: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    Value::object([
        ("kind", Value::str("shell")),
        ("command", Value::str(quoted.join(" "))),
    ])
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// `act_content_hash` of §4: `"sha256:" + base64url_nopad(SHA-256(canonical(act)))`, where the
/// canonical form NFC-normalises every string and key, sorts keys by UTF-16 code units and
/// writes strings and numbers as `JSON.stringify` does, without whitespace. `None` when the act
/// is missing or not an object, nested deeper than 100 levels, or has two keys that are equal
/// after normalisation (where the reference would silently keep one).
///
/// Hash the *scrubbed* act ([`scrub_act`]): the claim recomputes the hash from its own act.
pub fn act_content_hash(act: Option<&Value>) -> Option<String> {
    let act = act?;
    if !matches!(act, Value::Object(_)) {
        return None;
    }
    let mut text = String::new();
    write_act(&mut text, act, 0)?;
    Some(format!(
        "sha256:{}",
        base64url(&Sha256::digest(text.as_bytes()))
    ))
}

/// Refuses an act that holds a number canonical JSON cannot write exactly (the canonical
/// module's lossy-number rule, [`canonical::is_lossy_number`]: `1e400`, `-1e400`, `-0`,
/// integers beyond ±(2^53−1)). Such a number has no text of its own in the act's canonical
/// form (`1e400` and `1e401` both become `Infinity`), so different acts would share one
/// [`act_content_hash`] and an action created for one could be claimed with another.
///
/// # Errors
/// [`Error::InvalidInput`] for field `act`, naming the number's path in the act (`$.n`,
/// `$.request.retries`, `$.args[2]`).
pub fn check_act(act: &Value) -> Result<(), Error> {
    match canonical::find_lossy_number(act) {
        None => Ok(()),
        Some(path) => Err(Error::InvalidInput {
            field: "act",
            reason: format!(
                "{path} is a lossy number (not finite, -0, or an integer beyond ±(2^53−1)), \
                 which canonical JSON cannot write exactly, so the act cannot be hashed: \
                 send it as a string"
            ),
        }),
    }
}

fn write_act(out: &mut String, value: &Value, depth: usize) -> Option<()> {
    if depth > 100 {
        return None;
    }
    match value {
        Value::String(s) => {
            out.push_str(&canonical::to_canonical_unchecked(&Value::String(
                s.nfc().collect(),
            )));
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_act(out, item, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(String, &Value)> =
                map.iter().map(|(k, v)| (k.nfc().collect(), v)).collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            if entries.windows(2).any(|w| w[0].0 == w[1].0) {
                return None;
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&canonical::to_canonical_unchecked(&Value::str(k.as_str())));
                out.push(':');
                write_act(out, v, depth + 1)?;
            }
            out.push('}');
        }
        Value::Number(n) if *n == 0.0 => out.push('0'),
        other => out.push_str(&canonical::to_canonical_unchecked(other)),
    }
    Some(())
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Outcome text: redaction and truncation (§1.5)

/// What the redaction of an outcome's free text found (the `security` block of §1.5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// Secrets and confidential identifiers replaced by `[REDACTED]`.
    pub findings: usize,
    /// Their kinds: `secret` ([`mask_secrets`]) and `confidential_identifier` (ledger-core
    /// §4.4).
    pub categories: BTreeSet<&'static str>,
}

impl Security {
    /// Whether nothing was redacted.
    pub fn is_clean(&self) -> bool {
        self.findings == 0
    }

    /// `{"categories":[…],"clean":…,"findings_count":…}`.
    pub fn to_value(&self) -> Value {
        Value::object([
            ("clean", Value::Bool(self.is_clean())),
            ("findings_count", Value::from(self.findings as i64)),
            (
                "categories",
                Value::Array(self.categories.iter().map(|c| Value::str(*c)).collect()),
            ),
        ])
    }
}

static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\S+").expect("word pattern"));

fn redact_once(text: &str, security: &mut Security) -> String {
    let (masked, secrets) = mask_secrets(text);
    if secrets > 0 {
        security.findings += secrets;
        security.categories.insert("secret");
    }
    let mut confidential = 0;
    let words = WORD.replace_all(&masked, |c: &regex::Captures<'_>| {
        if privacy::contains_confidential_identifier(&c[0]) {
            confidential += 1;
            REDACTED.to_owned()
        } else {
            c[0].to_owned()
        }
    });
    let mut out = words.into_owned();
    // A value can be confidential only as a whole (spanning whitespace): drop all of it.
    if privacy::contains_confidential_identifier(&out) {
        confidential += 1;
        out = REDACTED.to_owned();
    }
    if confidential > 0 {
        security.findings += confidential;
        security.categories.insert("confidential_identifier");
    }
    out
}

fn truncate_units(text: &str, max: usize) -> String {
    let mut units = 0;
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        if units + c.len_utf16() > max {
            end = i;
            break;
        }
        units += c.len_utf16();
    }
    text[..end].to_owned()
}

/// The stored form of a `summary` or `error_message`: NUL characters removed, secrets and
/// confidential identifiers replaced by `[REDACTED]`, truncated to `max_units` UTF-16 code units
/// (never rejected, §1.5). The result is a fixed point: cleaning it again changes nothing
/// (`verify` relies on that).
pub fn clean_text(text: &str, max_units: usize, security: &mut Security) -> String {
    let mut current = text.replace('\0', "");
    for _ in 0..4 {
        let next = truncate_units(&redact_once(&current, security), max_units);
        if next == current {
            return current;
        }
        current = next;
    }
    REDACTED.to_owned()
}

fn clean_value(value: &Value, security: &mut Security) -> Value {
    match value {
        Value::String(s) => Value::String(clean_text(s, usize::MAX, security)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| clean_value(v, security)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), clean_value(v, security)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn keys_confidential(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(keys_confidential),
        Value::Object(map) => map.iter().any(|(k, v)| {
            k.contains('\0') || privacy::contains_confidential_identifier(k) || keys_confidential(v)
        }),
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Records

/// `action.json`: the binding a claim is checked against (§1.1, §1.3).
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// The action id (also the directory name).
    pub action_id: ActionId,
    /// The agent that may claim it.
    pub agent_id: String,
    /// The principal that created it (`created_by`); only it may claim.
    pub created_by: String,
    /// [`act_content_hash`] of the scrubbed act at creation; `None` when there was no act.
    pub act_content_hash: Option<String>,
    /// The guard decision that authorised it; a claim needs one.
    pub guard_decision_id: Option<String>,
    /// That decision's verdict.
    pub guard_verdict: Verdict,
    /// The containment ref of a contained action (needed by `allow_contained`).
    pub containment_ref: Option<String>,
    /// Whether the creator's identity was verified; then only a verified caller may claim.
    pub identity_verified: bool,
    /// `Some(1)` when the creator advertised `execution_claims`; `None` (legacy) is never
    /// claimable.
    pub execution_protocol: Option<i64>,
    /// The initial lifecycle.
    pub lifecycle: Lifecycle,
    /// Creation time (epoch ms); the sweep measures from it.
    pub created_at_ms: i64,
}

/// `claim.json`: the one claim of an action (§1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The claimed action.
    pub action_id: ActionId,
    /// The winning attempt id.
    pub attempt_id: AttemptId,
    /// `sha256` of the exact `action.json` bytes the claim was checked against.
    pub binding_sha256: Digest,
    /// Claim time (epoch ms).
    pub claimed_at_ms: i64,
    /// The guard decision that authorised the claim (`execution_guard_decision_id`).
    pub guard_decision_id: String,
}

/// `outcome.json`: the one outcome of an action and the lifecycle it closed (§1.4).
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The action.
    pub action_id: ActionId,
    /// Never [`OutcomeStatus::Pending`].
    pub status: OutcomeStatus,
    /// Outcome time (epoch ms).
    pub outcome_at_ms: i64,
    /// Redacted, at most [`MAX_TEXT_UNITS`].
    pub summary: Option<String>,
    /// Redacted, at most [`MAX_TEXT_UNITS`].
    pub error_message: Option<String>,
    /// A JSON object (redacted string values) of at most [`MAX_PROGRESS_BYTES`] as given.
    pub progress: Option<Value>,
    /// The attempt that reported it, when the reporter named one (it must be the claim's).
    pub attempt_id: Option<AttemptId>,
    /// The lifecycle after this outcome.
    pub lifecycle: Lifecycle,
    /// Which path wrote it.
    pub source: Source,
}

fn opt_str(v: &Option<String>) -> Value {
    v.as_ref().map_or(Value::Null, |s| Value::str(s.as_str()))
}

fn record_bytes(value: &Value) -> Vec<u8> {
    let mut text = canonical::to_canonical_unchecked(value);
    text.push('\n');
    text.into_bytes()
}

impl Action {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        Value::object([
            ("schema", Value::str(ACTION_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("agent_id", Value::str(self.agent_id.as_str())),
            ("created_by", Value::str(self.created_by.as_str())),
            ("act_content_hash", opt_str(&self.act_content_hash)),
            ("guard_decision_id", opt_str(&self.guard_decision_id)),
            ("guard_verdict", Value::str(self.guard_verdict.as_str())),
            ("containment_ref", opt_str(&self.containment_ref)),
            ("identity_verified", Value::Bool(self.identity_verified)),
            (
                "execution_protocol",
                self.execution_protocol.map_or(Value::Null, Value::from),
            ),
            ("lifecycle", Value::str(self.lifecycle.as_str())),
            ("created_at", Value::str(format_time(self.created_at_ms))),
        ])
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

impl Claim {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        Value::object([
            ("schema", Value::str(CLAIM_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("attempt_id", Value::str(self.attempt_id.as_str())),
            ("binding_sha256", Value::str(self.binding_sha256.as_str())),
            ("claimed_at", Value::str(format_time(self.claimed_at_ms))),
            (
                "guard_decision_id",
                Value::str(self.guard_decision_id.as_str()),
            ),
        ])
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

impl Outcome {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        Value::object([
            ("schema", Value::str(OUTCOME_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("status", Value::str(self.status.as_str())),
            ("outcome_at", Value::str(format_time(self.outcome_at_ms))),
            ("summary", opt_str(&self.summary)),
            ("error_message", opt_str(&self.error_message)),
            ("progress", self.progress.clone().unwrap_or(Value::Null)),
            (
                "attempt_id",
                self.attempt_id
                    .as_ref()
                    .map_or(Value::Null, |a| Value::str(a.as_str())),
            ),
            ("lifecycle", Value::str(self.lifecycle.as_str())),
            ("source", Value::str(self.source.as_str())),
        ])
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

/// Reads a record file: UTF-8, canonical JSON object, one trailing `"\n"`.
fn record_value(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_owned())?;
    let body = text
        .strip_suffix('\n')
        .ok_or_else(|| "does not end with a newline".to_owned())?;
    let value = canonical::parse_canonical(body).map_err(|e| e.to_string())?;
    if !matches!(value, Value::Object(_)) {
        return Err("not a JSON object".to_owned());
    }
    Ok(value)
}

/// Field access with an exact key set.
struct Fields<'a>(&'a BTreeMap<String, Value>);

impl<'a> Fields<'a> {
    fn new(value: &'a Value, schema: &str, keys: &[&str]) -> Result<Fields<'a>, String> {
        let map = value.as_object().ok_or("not a JSON object")?;
        let mut want: Vec<&str> = keys.to_vec();
        want.extend(["schema", "schema_version"]);
        want.sort_unstable();
        let have: Vec<&str> = map.keys().map(String::as_str).collect();
        if have != want {
            return Err(format!("fields are {have:?}, expected {want:?}"));
        }
        let f = Fields(map);
        if f.str("schema")? != schema {
            return Err(format!("schema is not {schema}"));
        }
        if map.get("schema_version").and_then(Value::as_safe_integer) != Some(SCHEMA_VERSION) {
            return Err(format!("schema_version is not {SCHEMA_VERSION}"));
        }
        Ok(f)
    }

    fn str(&self, key: &str) -> Result<&'a str, String> {
        self.0
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{key} is not a string"))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, String> {
        match self.0.get(key) {
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            _ => Err(format!("{key} is not a string or null")),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, String> {
        self.0
            .get(key)
            .and_then(Value::as_bool)
            .ok_or_else(|| format!("{key} is not a boolean"))
    }

    fn time(&self, key: &str) -> Result<i64, String> {
        parse_time(self.str(key)?).ok_or_else(|| format!("{key} is not YYYY-MM-DDTHH:MM:SS.mmmZ"))
    }

    fn parsed<T>(&self, key: &str, parse: impl Fn(&str) -> Option<T>) -> Result<T, String> {
        let s = self.str(key)?;
        parse(s).ok_or_else(|| format!("{key} {s:?} is not valid"))
    }

    /// An id field of the machine-text shape (ledger-core §4.1). Its confidential scan is left
    /// to [`verify`]: it compiles the privacy patterns, which every read would pay for.
    fn id_text(&self, key: &str) -> Result<Option<String>, String> {
        match self.opt_str(key)? {
            None => Ok(None),
            Some(s) if is_machine_shaped(s) => Ok(Some(s.to_owned())),
            Some(_) => Err(format!(
                "{key} is not machine text of at most {MAX_ID_UNITS} characters"
            )),
        }
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$`, at most [`MAX_ID_UNITS`] long.
fn is_machine_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() <= MAX_ID_UNITS
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.:/@+-".contains(c))
}

fn required(v: Option<String>, key: &str) -> Result<String, String> {
    v.ok_or_else(|| format!("{key} is null"))
}

/// Parses `action.json` bytes; `id` is the directory's action id.
pub fn parse_action(bytes: &[u8], id: &ActionId) -> Result<Action, String> {
    let value = record_value(bytes)?;
    let f = Fields::new(
        &value,
        ACTION_SCHEMA,
        &[
            "act_content_hash",
            "action_id",
            "agent_id",
            "containment_ref",
            "created_at",
            "created_by",
            "execution_protocol",
            "guard_decision_id",
            "guard_verdict",
            "identity_verified",
            "lifecycle",
        ],
    )?;
    let action_id = f.parsed("action_id", ActionId::parse)?;
    if action_id != *id {
        return Err(format!("action_id {action_id} is not its directory's"));
    }
    let act_content_hash = match f.opt_str("act_content_hash")? {
        None => None,
        Some(h) => {
            let ok = h.strip_prefix("sha256:").is_some_and(|b| {
                b.len() == 43
                    && b.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            });
            if !ok {
                return Err("act_content_hash is not sha256:<base64url>".to_owned());
            }
            Some(h.to_owned())
        }
    };
    let execution_protocol = match f.0.get("execution_protocol") {
        Some(Value::Null) => None,
        Some(v) if v.as_safe_integer() == Some(1) => Some(1),
        _ => return Err("execution_protocol is not 1 or null".to_owned()),
    };
    let lifecycle = f.parsed("lifecycle", Lifecycle::parse)?;
    if !lifecycle.is_client_settable() {
        return Err(format!(
            "lifecycle {lifecycle} cannot be an initial lifecycle"
        ));
    }
    Ok(Action {
        action_id,
        agent_id: required(f.id_text("agent_id")?, "agent_id")?,
        created_by: required(f.id_text("created_by")?, "created_by")?,
        act_content_hash,
        guard_decision_id: f.id_text("guard_decision_id")?,
        guard_verdict: f.parsed("guard_verdict", Verdict::parse)?,
        containment_ref: f.id_text("containment_ref")?,
        identity_verified: f.bool("identity_verified")?,
        execution_protocol,
        lifecycle,
        created_at_ms: f.time("created_at")?,
    })
}

/// Parses `claim.json` bytes; `id` is the directory's action id.
pub fn parse_claim(bytes: &[u8], id: &ActionId) -> Result<Claim, String> {
    let value = record_value(bytes)?;
    let f = Fields::new(
        &value,
        CLAIM_SCHEMA,
        &[
            "action_id",
            "attempt_id",
            "binding_sha256",
            "claimed_at",
            "guard_decision_id",
        ],
    )?;
    let action_id = f.parsed("action_id", ActionId::parse)?;
    if action_id != *id {
        return Err(format!("action_id {action_id} is not its directory's"));
    }
    Ok(Claim {
        action_id,
        attempt_id: f.parsed("attempt_id", AttemptId::parse)?,
        binding_sha256: f.parsed("binding_sha256", Digest::parse)?,
        claimed_at_ms: f.time("claimed_at")?,
        guard_decision_id: required(f.id_text("guard_decision_id")?, "guard_decision_id")?,
    })
}

/// Parses `outcome.json` bytes; `id` is the directory's action id. Checks the shape and the
/// limits, not the consistency with the action (see [`verify`]).
pub fn parse_outcome(bytes: &[u8], id: &ActionId) -> Result<Outcome, String> {
    let value = record_value(bytes)?;
    let f = Fields::new(
        &value,
        OUTCOME_SCHEMA,
        &[
            "action_id",
            "attempt_id",
            "error_message",
            "lifecycle",
            "outcome_at",
            "progress",
            "source",
            "status",
            "summary",
        ],
    )?;
    let action_id = f.parsed("action_id", ActionId::parse)?;
    if action_id != *id {
        return Err(format!("action_id {action_id} is not its directory's"));
    }
    let status = f.parsed("status", OutcomeStatus::parse)?;
    if status == OutcomeStatus::Pending {
        return Err("status pending is never written".to_owned());
    }
    let text = |key: &str| -> Result<Option<String>, String> {
        let v = f.opt_str(key)?;
        if v.is_some_and(|s| privacy::utf16_len(s) > MAX_TEXT_UNITS || s.contains('\0')) {
            return Err(format!(
                "{key} is longer than {MAX_TEXT_UNITS} characters or contains NUL"
            ));
        }
        Ok(v.map(str::to_owned))
    };
    let progress = match f.0.get("progress") {
        Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        _ => return Err("progress is not an object or null".to_owned()),
    };
    let attempt_id = match f.opt_str("attempt_id")? {
        None => None,
        Some(s) => Some(AttemptId::parse(s).ok_or("attempt_id is not valid")?),
    };
    Ok(Outcome {
        action_id,
        status,
        outcome_at_ms: f.time("outcome_at")?,
        summary: text("summary")?,
        error_message: text("error_message")?,
        progress,
        attempt_id,
        lifecycle: f.parsed("lifecycle", Lifecycle::parse)?,
        source: f.parsed("source", Source::parse)?,
    })
}

/// The state of one action: its binding and, when present, its claim and outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct State {
    /// `action.json`.
    pub action: Action,
    /// `sha256` of the `action.json` bytes.
    pub action_sha256: Digest,
    /// `claim.json`, if claimed.
    pub claim: Option<Claim>,
    /// `outcome.json`, if the outcome is no longer pending.
    pub outcome: Option<Outcome>,
    /// `approval.json`, if an operator decided.
    pub approval: Option<Approval>,
}

impl State {
    /// The current lifecycle: the outcome's when there is one, else the approval's, else the
    /// initial one.
    pub fn lifecycle(&self) -> Lifecycle {
        match (&self.outcome, &self.approval) {
            (Some(o), _) => o.lifecycle,
            (None, Some(a)) => a.decision.lifecycle(),
            (None, None) => self.action.lifecycle,
        }
    }

    /// The current outcome status (`pending` without `outcome.json`).
    pub fn outcome_status(&self) -> OutcomeStatus {
        self.outcome
            .as_ref()
            .map_or(OutcomeStatus::Pending, |o| o.status)
    }

    /// The outcome as `GET …/outcome` returns it (§1.5), `elapsed_ms` measured from
    /// `created_at` to `outcome_at`, or to `now_ms` while pending, never below 0; where the
    /// clocks disagreed, [`OutcomeView::clock_skew`] says so ([`Timing`]).
    pub fn view(&self, now_ms: i64) -> OutcomeView {
        let o = self.outcome.as_ref();
        let timing = Timing::new(
            self.action.created_at_ms,
            self.claim.as_ref().map(|c| c.claimed_at_ms),
            o.map_or(Stamp::Now(now_ms), |o| Stamp::Outcome(o.outcome_at_ms)),
        );
        OutcomeView {
            action_id: self.action.action_id.clone(),
            status: self.outcome_status(),
            outcome_at_ms: o.map(|o| o.outcome_at_ms),
            summary: o.and_then(|o| o.summary.clone()),
            error_message: o.and_then(|o| o.error_message.clone()),
            progress: o.and_then(|o| o.progress.clone()),
            elapsed_ms: timing.elapsed_ms,
            clock_skew: timing.skew,
        }
    }
}

/// The end of an action's elapsed time: its outcome's time, or the reader's clock while the
/// outcome is pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stamp {
    /// `outcome_at` (epoch ms).
    Outcome(i64),
    /// The reader's clock (epoch ms).
    Now(i64),
}

/// Clocks that disagreed: a step of an action carries a time earlier than that of a step
/// written before it (creation, claim, outcome are written in that order, possibly by
/// different machines), so durations between them are not what they say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockSkew {
    /// The step whose time is too early: `claimed_at`, `outcome_at` or `now` (the reader's
    /// clock while the outcome is pending).
    pub time: &'static str,
    /// The step written before it that it precedes: `created_at` or `claimed_at`.
    pub precedes: &'static str,
    /// By how much, in milliseconds (always > 0).
    pub ms: i64,
}

impl ClockSkew {
    /// `{"ms":…,"precedes":…,"time":…}`.
    pub fn to_value(&self) -> Value {
        Value::object([
            ("time", Value::str(self.time)),
            ("precedes", Value::str(self.precedes)),
            ("ms", Value::from(self.ms)),
        ])
    }
}

impl fmt::Display for ClockSkew {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} is {} ms before {}: the clocks that wrote them disagree",
            self.time, self.ms, self.precedes
        )
    }
}

/// `elapsed_ms` of an action and the clock skew its times show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// From `created_at` to the end, clamped to 0 (a negative duration is a skew, not a time).
    pub elapsed_ms: i64,
    /// The largest disagreement between the steps' times, if any.
    pub skew: Option<ClockSkew>,
}

impl Timing {
    /// The timing of an action created at `created_ms`, claimed at `claimed_ms` (if it was) and
    /// ending at `end`.
    pub fn new(created_ms: i64, claimed_ms: Option<i64>, end: Stamp) -> Timing {
        let (end_name, end_ms) = match end {
            Stamp::Outcome(t) => ("outcome_at", t),
            Stamp::Now(t) => ("now", t),
        };
        let mut steps = vec![("created_at", created_ms)];
        steps.extend(claimed_ms.map(|t| ("claimed_at", t)));
        steps.push((end_name, end_ms));
        let mut skew: Option<ClockSkew> = None;
        for (i, &(precedes, earlier)) in steps.iter().enumerate() {
            for &(time, later) in &steps[i + 1..] {
                let ms = earlier.saturating_sub(later);
                if ms > 0 && skew.as_ref().is_none_or(|s| ms > s.ms) {
                    skew = Some(ClockSkew { time, precedes, ms });
                }
            }
        }
        Timing {
            elapsed_ms: end_ms.saturating_sub(created_ms).max(0),
            skew,
        }
    }
}

/// The outcome of an action as the contract's `GET …/outcome` shapes it (§1.5).
#[derive(Clone, Debug, PartialEq)]
pub struct OutcomeView {
    /// The action.
    pub action_id: ActionId,
    /// The current outcome status.
    pub status: OutcomeStatus,
    /// `None` while pending.
    pub outcome_at_ms: Option<i64>,
    /// As stored.
    pub summary: Option<String>,
    /// As stored.
    pub error_message: Option<String>,
    /// As stored.
    pub progress: Option<Value>,
    /// Milliseconds from creation to the outcome (or to now while pending); never negative.
    pub elapsed_ms: i64,
    /// Set when the clocks of the steps disagreed (then `elapsed_ms` may have been clamped).
    pub clock_skew: Option<ClockSkew>,
}

impl OutcomeView {
    /// `{action_id,status,outcome_at,summary,error_message,progress,elapsed_ms}`, and
    /// `clock_skew` (`{"ms","precedes","time"}`) only when the clocks disagreed.
    pub fn to_value(&self) -> Value {
        let mut v = Value::object([
            ("action_id", Value::str(self.action_id.as_str())),
            ("status", Value::str(self.status.as_str())),
            (
                "outcome_at",
                self.outcome_at_ms
                    .map_or(Value::Null, |t| Value::str(format_time(t))),
            ),
            ("summary", opt_str(&self.summary)),
            ("error_message", opt_str(&self.error_message)),
            ("progress", self.progress.clone().unwrap_or(Value::Null)),
            ("elapsed_ms", Value::from(self.elapsed_ms)),
        ]);
        if let (Some(skew), Value::Object(m)) = (&self.clock_skew, &mut v) {
            m.insert("clock_skew".into(), skew.to_value());
        }
        v
    }
}

/// Reads the state of `id` from a snapshot; `None` when there is no `action.json`.
///
/// # Errors
/// [`Error::Corrupt`] for an invalid record, [`Error::Store`] when the repository cannot be read.
pub fn read_state(snap: &Snapshot<'_>, id: &ActionId) -> Result<Option<State>, Error> {
    let read = |kind: RecordKind| -> Result<Option<(String, Vec<u8>)>, Error> {
        let path = id.path(kind);
        match snap.read(&path, MAX_RECORD_BYTES) {
            Ok(bytes) => Ok(bytes.map(|b| (path, b))),
            Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
                Err(Error::Corrupt {
                    reason: format!("not a file of at most {MAX_RECORD_BYTES} bytes"),
                    path,
                })
            }
            Err(e) => Err(e.into()),
        }
    };
    let corrupt = |path: String| move |reason: String| Error::Corrupt { path, reason };
    let Some((path, bytes)) = read(RecordKind::Action)? else {
        return Ok(None);
    };
    let action = parse_action(&bytes, id).map_err(corrupt(path))?;
    let claim = match read(RecordKind::Claim)? {
        Some((path, b)) => Some(parse_claim(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    let outcome = match read(RecordKind::Outcome)? {
        Some((path, b)) => Some(parse_outcome(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    let approval = match read(RecordKind::Approval)? {
        Some((path, b)) => Some(approval::parse_approval(&b, id).map_err(corrupt(path))?),
        None => None,
    };
    Ok(Some(State {
        action,
        action_sha256: Digest::of(&bytes),
        claim,
        outcome,
        approval,
    }))
}

// ---------------------------------------------------------------------------------------------
// The write path: one commit, one compare-and-swap, re-planned on a moved ref

/// Knobs of every finality operation; required inputs are parameters.
#[derive(Clone, Debug)]
pub struct Options {
    /// Full name of the ledger ref (default `refs/heads/main`).
    pub ref_name: String,
    /// Author and committer of the commits.
    pub signature: Signature,
    /// Attempts when the ref moves under us (default 64).
    pub max_attempts: u32,
    /// How long a held ref lock is waited for (default 5 s).
    pub lock_wait: Duration,
}

impl Options {
    /// Defaults with the given signature.
    pub fn new(signature: Signature) -> Options {
        Options {
            ref_name: "refs/heads/main".into(),
            signature,
            max_attempts: 64,
            lock_wait: Duration::from_secs(5),
        }
    }
}

/// What an operation landed.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<T> {
    /// The record written (or found, for a replayed creation).
    pub value: T,
    /// The new tip; `None` when nothing had to be written.
    pub commit: Option<CommitId>,
    /// Snapshots planned (1 unless the ref moved).
    pub attempts: u32,
}

enum Plan<T> {
    Write {
        files: Vec<(String, Vec<u8>)>,
        message: String,
        value: T,
    },
    Done(T),
}

fn transact<T>(
    store: &Store,
    options: &Options,
    mut plan: impl FnMut(&Snapshot<'_>) -> Result<Plan<T>, Error>,
) -> Result<Written<T>, Error> {
    let policy = store::Policy {
        ref_name: &options.ref_name,
        max_attempts: options.max_attempts,
        lock_wait: options.lock_wait,
    };
    let out = store::transact(store, &policy, |tip, _| {
        // The snapshot is dropped before writing: the commit is built on the tip, not on it.
        let planned = plan(&store.snapshot(tip)?)?;
        Ok(match planned {
            Plan::Done(value) => store::Step::Settled(value),
            Plan::Write {
                files,
                message,
                value,
            } => {
                let commit = store.write_commit(tip, &files, &message, &options.signature)?;
                let reflog = message.lines().next().unwrap_or("finality").to_owned();
                store::Step::Commit {
                    commit,
                    reflog,
                    value,
                }
            }
        })
    })
    .map_err(|e| match e {
        store::TransactError::Build(e) => e,
        store::TransactError::Contention { attempts, .. } => Error::Contention {
            ref_name: options.ref_name.clone(),
            attempts,
        },
        store::TransactError::RefLocked { .. } => Error::RefLocked {
            ref_name: options.ref_name.clone(),
        },
        store::TransactError::Store(e) => e.into(),
    })?;
    Ok(Written {
        value: out.value,
        commit: out.commit,
        attempts: out.attempts,
    })
}

// ---------------------------------------------------------------------------------------------
// Create

/// The input of [`create_action`].
#[derive(Clone, Debug, PartialEq)]
pub struct NewAction {
    /// The id of the new action.
    pub action_id: ActionId,
    /// The agent that will claim it (machine text, at most [`MAX_ID_UNITS`]).
    pub agent_id: String,
    /// The creating principal (machine text, at most [`MAX_ID_UNITS`]).
    pub principal: String,
    /// The act; it is scrubbed and hashed ([`act_content_hash`]), never stored.
    pub act: Option<Value>,
    /// The authorising guard decision.
    pub guard_decision_id: Option<String>,
    /// Its verdict.
    pub verdict: Verdict,
    /// The creator's capabilities; with `execution_claims` the action is protocol 1.
    pub client_capabilities: Vec<String>,
    /// Whether the creator's identity was verified.
    pub identity_verified: bool,
    /// The containment ref of a contained action.
    pub containment_ref: Option<String>,
    /// An explicit client-settable initial lifecycle; default from the verdict.
    pub lifecycle: Option<Lifecycle>,
}

fn id_field(value: &str, field: &'static str) -> Result<String, Error> {
    privacy::machine_text(value, field, MAX_ID_UNITS).map_err(|e| Error::InvalidInput {
        field,
        reason: e.to_string(),
    })
}

impl NewAction {
    /// The `action.json` this input creates at `now_ms`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an id field that is not privacy-safe machine text, a
    /// server-only initial lifecycle, or an act with a lossy number ([`check_act`]).
    pub fn to_action(&self, now_ms: i64) -> Result<Action, Error> {
        if let Some(act) = &self.act {
            check_act(act)?;
        }
        let lifecycle = self
            .lifecycle
            .unwrap_or_else(|| self.verdict.initial_lifecycle());
        if !lifecycle.is_client_settable() {
            return Err(Error::InvalidInput {
                field: "lifecycle",
                reason: format!("{lifecycle} is set by the server only"),
            });
        }
        let opt = |v: &Option<String>, field| v.as_deref().map(|s| id_field(s, field)).transpose();
        Ok(Action {
            action_id: self.action_id.clone(),
            agent_id: id_field(&self.agent_id, "agent_id")?,
            created_by: id_field(&self.principal, "principal")?,
            act_content_hash: act_content_hash(self.act.as_ref().map(scrub_act).as_ref()),
            guard_decision_id: opt(&self.guard_decision_id, "guard_decision_id")?,
            guard_verdict: self.verdict,
            containment_ref: opt(&self.containment_ref, "containment_ref")?,
            identity_verified: self.identity_verified,
            execution_protocol: self
                .client_capabilities
                .iter()
                .any(|c| c == EXECUTION_CLAIMS)
                .then_some(1),
            lifecycle,
            created_at_ms: now_ms,
        })
    }
}

/// Creates an action: one commit adding its `action.json`. Repeating a creation with the same
/// binding (every field but the creation time: agent, principal, act hash, guard decision and
/// verdict, containment ref, identity verification, protocol, lifecycle) is a no-op that
/// returns the first record, its `created_at` included (`commit: None`): a retry after a lost
/// acknowledgement must not need a new id, which would create the duplicate it meant to avoid.
///
/// # Errors
/// [`Error::InvalidInput`], [`Error::ActionExists`] when the id is taken by another binding (or
/// by a record that does not parse), and the write path's [`Error::Contention`],
/// [`Error::RefLocked`], [`Error::Store`].
pub fn create_action(
    store: &Store,
    options: &Options,
    input: &NewAction,
    now_ms: i64,
) -> Result<Written<Action>, Error> {
    let action = input.to_action(now_ms)?;
    let bytes = action.to_bytes();
    let path = action.action_id.path(RecordKind::Action);
    transact(store, options, |snap| {
        let exists = || Error::ActionExists {
            action_id: action.action_id.clone(),
        };
        match snap.read(&path, MAX_RECORD_BYTES) {
            Ok(None) => {}
            Ok(Some(existing)) => {
                // The creation time is the retry's own clock, not part of the binding.
                return match parse_action(&existing, &action.action_id) {
                    Ok(first)
                        if first
                            == (Action {
                                created_at_ms: first.created_at_ms,
                                ..action.clone()
                            }) =>
                    {
                        Ok(Plan::Done(first))
                    }
                    _ => Err(exists()),
                };
            }
            Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
                return Err(exists());
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Plan::Write {
            files: vec![(path.clone(), bytes.clone())],
            message: format!(
                "finality: create action {} ({})\n",
                action.action_id, action.lifecycle
            ),
            value: action.clone(),
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Claim

/// A claim request (the body of §1.5 plus what the caller's authentication says).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimRequest {
    /// The fresh attempt id (`^[A-Za-z0-9_-]{16,128}$`).
    pub attempt_id: String,
    /// The claiming agent; required.
    pub agent_id: Option<String>,
    /// The authenticated principal; required.
    pub principal: Option<String>,
    /// The act, scrubbed and hashed as at creation.
    pub act: Option<Value>,
    /// Whether the caller's identity is verified.
    pub verified: bool,
}

impl ClaimRequest {
    /// Reads a claim body of §1.5: an object with only `claim_execution` (exactly `true`),
    /// `attempt_id` (a string), `agent_id` and `act`. The principal and verification come from
    /// the caller's authentication, not from the body.
    ///
    /// # Errors
    /// [`Error::InvalidClaim`] for any body rule broken.
    pub fn from_body(
        body: &Value,
        principal: Option<&str>,
        verified: bool,
    ) -> Result<ClaimRequest, Error> {
        let invalid = |reason| Error::InvalidClaim { reason };
        let map = body
            .as_object()
            .ok_or(invalid("the body must be a JSON object"))?;
        if map.keys().any(|k| {
            !matches!(
                k.as_str(),
                "claim_execution" | "attempt_id" | "agent_id" | "act"
            )
        }) {
            return Err(invalid(
                "only claim_execution, attempt_id, agent_id and act are allowed",
            ));
        }
        if map.get("claim_execution") != Some(&Value::Bool(true)) {
            return Err(invalid("claim_execution must be true"));
        }
        let attempt_id = map
            .get("attempt_id")
            .and_then(Value::as_str)
            .ok_or(invalid("attempt_id must be a string"))?;
        let agent_id = match map.get("agent_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(invalid("agent_id must be a string")),
        };
        Ok(ClaimRequest {
            attempt_id: attempt_id.to_owned(),
            agent_id,
            principal: principal.map(str::to_owned),
            act: map.get("act").cloned(),
            verified,
        })
    }
}

/// Whether the claim may be granted on `state` at `now_ms` (every precondition of §1.3 that
/// applies without policy re-evaluation and plans; an operator approval is the action's own
/// grant, valid for [`approval::GRANT_WINDOW_MS`]). Deliberately a bare yes/no: the refusal does
/// not say why.
fn eligible(
    state: &State,
    agent_id: &str,
    principal: &str,
    act_hash: &Option<String>,
    verified: bool,
    now_ms: i64,
) -> bool {
    let a = &state.action;
    let approved = state.approval.as_ref().is_some_and(|p| p.grants_at(now_ms));
    a.agent_id == agent_id
        && a.created_by == principal
        && a.act_content_hash == *act_hash
        && state.lifecycle() == Lifecycle::Running
        && state.outcome.is_none()
        && state.claim.is_none()
        && a.execution_protocol == Some(1)
        && (!a.identity_verified || verified)
        && a.guard_decision_id.is_some()
        && (a.guard_verdict.is_permissive()
            || (a.guard_verdict == Verdict::RequireApproval && approved))
        && (a.lifecycle != Lifecycle::PendingApproval || approved)
        && (a.guard_verdict != Verdict::AllowContained || a.containment_ref.is_some())
}

/// Claims the execution of an action for one attempt (§1.2, §1.3, §2.1): one commit adding
/// `claim.json`, landed only if no claim exists on the tip it was built on. Exactly one of any
/// number of concurrent claimers wins; every other gets [`Error::ClaimConflict`], as does any
/// later claim, including one that repeats the winning attempt id (nonces are single-use).
///
/// # Errors
/// [`Error::InvalidClaim`] (attempt id format), [`Error::AgentIdentityRequired`] and
/// [`Error::InvalidInput`] (an act with a lossy number, [`check_act`]) before anything is
/// read; [`Error::ClaimConflict`] for every ineligibility and a lost race;
/// [`Error::ClaimUnavailable`] when the claim could not be checked or written (I/O, a ref that
/// kept moving or stayed locked, a corrupt record) — never a conflict.
pub fn claim(
    store: &Store,
    options: &Options,
    action_id: &str,
    request: &ClaimRequest,
    now_ms: i64,
) -> Result<Written<Claim>, Error> {
    let attempt_id = AttemptId::parse(&request.attempt_id).ok_or(Error::InvalidClaim {
        reason: "attempt_id must match ^[A-Za-z0-9_-]{16,128}$",
    })?;
    let agent_id = request
        .agent_id
        .as_deref()
        .map(privacy::js_trim)
        .filter(|s| !s.is_empty())
        .ok_or(Error::AgentIdentityRequired)?;
    let conflict = || Error::ClaimConflict {
        action_id: action_id.to_owned(),
    };
    let principal = request
        .principal
        .as_deref()
        .map(privacy::js_trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(conflict)?;
    if let Some(act) = &request.act {
        check_act(act)?;
    }
    let id = ActionId::parse(action_id).ok_or_else(conflict)?;
    let act_hash = act_content_hash(request.act.as_ref().map(scrub_act).as_ref());
    let result = transact(store, options, |snap| {
        let state = read_state(snap, &id)?.ok_or_else(conflict)?;
        if !eligible(
            &state,
            agent_id,
            principal,
            &act_hash,
            request.verified,
            now_ms,
        ) {
            return Err(conflict());
        }
        let claim = Claim {
            action_id: id.clone(),
            attempt_id: attempt_id.clone(),
            binding_sha256: state.action_sha256.clone(),
            claimed_at_ms: now_ms,
            guard_decision_id: state
                .action
                .guard_decision_id
                .clone()
                .expect("eligible actions have a decision"),
        };
        Ok(Plan::Write {
            files: vec![(id.path(RecordKind::Claim), claim.to_bytes())],
            message: format!("finality: claim {id} for attempt {attempt_id}\n"),
            value: claim,
        })
    });
    result.map_err(|e| match e {
        Error::ClaimConflict { .. } => e,
        other => Error::ClaimUnavailable {
            action_id: action_id.to_owned(),
            reason: other.to_string(),
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Outcomes

/// A caller's outcome report (§1.5 `POST …/outcome`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OutcomeReport {
    /// `completed`, `partial` or `failed`.
    pub status: String,
    /// Free text; redacted and truncated to [`MAX_TEXT_UNITS`].
    pub summary: Option<String>,
    /// Required for `failed`; redacted and truncated to [`MAX_TEXT_UNITS`].
    pub error_message: Option<String>,
    /// Required (an object) for `partial`; at most [`MAX_PROGRESS_BYTES`] of JSON.
    pub progress: Option<Value>,
    /// The claiming attempt, when the reporter holds it; checked against `claim.json`.
    pub attempt_id: Option<String>,
}

/// What [`report_outcome`] and [`close`] landed.
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    /// The stored record.
    pub outcome: Outcome,
    /// The outcome as `GET` shows it.
    pub view: OutcomeView,
    /// What redaction found.
    pub security: Security,
}

fn non_empty(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.trim().is_empty())
}

/// A report checked and cleaned for storage ([`prepare_report`]).
struct PreparedReport {
    status: OutcomeStatus,
    summary: Option<String>,
    error_message: Option<String>,
    progress: Option<Value>,
    attempt_id: Option<AttemptId>,
    security: Security,
}

/// The input rules of a caller's report (see [`report_outcome`]), checked before anything is
/// read, and its texts redacted and truncated.
fn prepare_report(report: &OutcomeReport) -> Result<PreparedReport, Error> {
    let status = match OutcomeStatus::parse(&report.status) {
        Some(s @ (OutcomeStatus::Completed | OutcomeStatus::Partial | OutcomeStatus::Failed)) => s,
        _ => {
            return Err(Error::InvalidStatus {
                status: report.status.clone(),
            });
        }
    };
    let invalid = |reason: &str| Error::InvalidOutcome {
        reason: reason.to_owned(),
    };
    if status == OutcomeStatus::Failed && !non_empty(&report.error_message) {
        return Err(invalid("failed requires an error_message"));
    }
    match &report.progress {
        None if status == OutcomeStatus::Partial => {
            return Err(invalid("partial requires a progress object"));
        }
        Some(p) => check_progress(p)?,
        None => {}
    }
    let attempt_id = match &report.attempt_id {
        None => None,
        Some(a) => Some(
            AttemptId::parse(a)
                .ok_or_else(|| invalid("attempt_id must match ^[A-Za-z0-9_-]{16,128}$"))?,
        ),
    };
    let mut security = Security::default();
    let summary = report
        .summary
        .as_deref()
        .map(|s| clean_text(s, MAX_TEXT_UNITS, &mut security));
    let error_message = report
        .error_message
        .as_deref()
        .map(|s| clean_text(s, MAX_TEXT_UNITS, &mut security));
    let progress = report
        .progress
        .as_ref()
        .map(|p| clean_value(p, &mut security));
    Ok(PreparedReport {
        status,
        summary,
        error_message,
        progress,
        attempt_id,
        security,
    })
}

/// Reports the outcome of an action (§1.4, §1.5, §2.2): one commit adding `outcome.json`,
/// landed only while the outcome is pending on the tip it was built on, closing an open
/// lifecycle by the closure table. Any caller may report (as upstream); a report that names an
/// attempt id must name the claim's.
///
/// # Errors
/// Input, before anything is read: [`Error::InvalidStatus`] (anything but `completed`,
/// `partial`, `failed`), [`Error::InvalidOutcome`] (`failed` without `error_message`, `partial`
/// without an object `progress`, a `progress` that is not an object, holds a lossy number,
/// nests deeper than 64 levels, holds more than 10,000 values or is over
/// [`MAX_PROGRESS_BYTES`] — each named as such, with its path where it has one — confidential
/// progress keys, a malformed attempt id). Refusals:
/// [`Error::NotFound`], [`Error::OutcomeAlreadySet`] with the current status (also for the loser
/// of a race with another report or the sweep), [`Error::LifecycleConflict`] for a `blocked`,
/// `pending_approval`, `cancelled` or `failed` lifecycle, [`Error::AttemptMismatch`]. Write
/// path: [`Error::Contention`], [`Error::RefLocked`], [`Error::Store`], [`Error::Corrupt`].
pub fn report_outcome(
    store: &Store,
    options: &Options,
    action_id: &str,
    report: &OutcomeReport,
    now_ms: i64,
) -> Result<Written<Reported>, Error> {
    let PreparedReport {
        status,
        summary,
        error_message,
        progress,
        attempt_id,
        security,
    } = prepare_report(report)?;
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let mut times = None;
    let written = transact(store, options, |snap| {
        let state = read_state(snap, &id)?.ok_or_else(not_found)?;
        times = Some(step_times(&state));
        if let Some(o) = &state.outcome {
            return Err(Error::OutcomeAlreadySet {
                action_id: id.clone(),
                current_status: o.status,
            });
        }
        let lifecycle = state.lifecycle();
        if lifecycle.refuses_outcome() {
            return Err(Error::LifecycleConflict {
                action_id: id.clone(),
                lifecycle,
            });
        }
        if let Some(attempt) = &attempt_id
            && state.claim.as_ref().map(|c| &c.attempt_id) != Some(attempt)
        {
            return Err(Error::AttemptMismatch {
                action_id: id.clone(),
                attempt_id: attempt.clone(),
            });
        }
        let outcome = Outcome {
            action_id: id.clone(),
            status,
            outcome_at_ms: now_ms,
            summary: summary.clone(),
            error_message: error_message.clone(),
            progress: progress.clone(),
            attempt_id: attempt_id.clone(),
            lifecycle: lifecycle.closed_by(status),
            source: Source::Outcome,
        };
        Ok(Plan::Write {
            files: vec![(id.path(RecordKind::Outcome), outcome.to_bytes())],
            message: format!("finality: outcome {id} {status}\n"),
            value: outcome,
        })
    })?;
    Ok(finish_reported(written, times, security))
}

/// The rules a `progress` value must keep, each refusal naming its own: a JSON object, whose
/// canonical JSON (the canonical module's rules: no lossy number, depth 64, 10,000 values) is
/// at most [`MAX_PROGRESS_BYTES`], and whose keys hold no confidential identifier.
fn check_progress(p: &Value) -> Result<(), Error> {
    let invalid = |reason: String| Err(Error::InvalidOutcome { reason });
    if !matches!(p, Value::Object(_)) {
        return invalid("progress must be a JSON object".into());
    }
    let text = match canonical::to_canonical(p) {
        Ok(text) => text,
        Err(canonical::Error::LossyNumber { path }) => {
            return invalid(format!(
                "progress {path} is a lossy number (not finite, -0, or an integer beyond \
                 ±(2^53−1)), which canonical JSON cannot write exactly: send it as a string"
            ));
        }
        Err(canonical::Error::DepthLimit { path }) => {
            return invalid(format!(
                "progress {path} is nested deeper than {} levels",
                canonical::MAX_DEPTH
            ));
        }
        Err(canonical::Error::NodeLimit { path }) => {
            return invalid(format!(
                "progress holds more than {} values (at {path})",
                canonical::MAX_NODES
            ));
        }
        Err(canonical::Error::SizeLimit { .. }) => {
            return invalid(format!(
                "progress exceeds {MAX_PROGRESS_BYTES} bytes of JSON"
            ));
        }
        Err(e) => return invalid(format!("progress is not canonical JSON: {e}")),
    };
    if text.len() > MAX_PROGRESS_BYTES {
        return invalid(format!(
            "progress exceeds {MAX_PROGRESS_BYTES} bytes of JSON ({} bytes)",
            text.len()
        ));
    }
    if keys_confidential(p) {
        return invalid("progress keys contain a confidential identifier".into());
    }
    Ok(())
}

/// `created_at` and `claimed_at` of an action, for [`Timing`].
fn step_times(state: &State) -> (i64, Option<i64>) {
    (
        state.action.created_at_ms,
        state.claim.as_ref().map(|c| c.claimed_at_ms),
    )
}

fn finish_reported(
    w: Written<Outcome>,
    times: Option<(i64, Option<i64>)>,
    security: Security,
) -> Written<Reported> {
    let o = &w.value;
    let timing = times
        .map(|(created, claimed)| Timing::new(created, claimed, Stamp::Outcome(o.outcome_at_ms)));
    let view = OutcomeView {
        action_id: o.action_id.clone(),
        status: o.status,
        outcome_at_ms: Some(o.outcome_at_ms),
        summary: o.summary.clone(),
        error_message: o.error_message.clone(),
        progress: o.progress.clone(),
        elapsed_ms: timing.as_ref().map_or(0, |t| t.elapsed_ms),
        clock_skew: timing.and_then(|t| t.skew),
    };
    Written {
        value: Reported {
            outcome: w.value.clone(),
            view,
            security,
        },
        commit: w.commit,
        attempts: w.attempts,
    }
}

/// The legacy close (§1.4, `PATCH /api/actions/:id` with `status`): closes a `running` action
/// to `completed`, `failed`, `cancelled` or `blocked` and, since its outcome is then still
/// pending, sets the implicit outcome (`completed` → `completed`, the others → `failed`) in the
/// same `outcome.json`. A report that landed first always wins: the lifecycle is then no longer
/// `running`.
///
/// # Errors
/// [`Error::InvalidInput`] for another status, [`Error::NotFound`], [`Error::TerminalState`] with
/// the current lifecycle when it is not `running`; the write path's errors.
pub fn close(
    store: &Store,
    options: &Options,
    action_id: &str,
    status: &str,
    summary: Option<&str>,
    now_ms: i64,
) -> Result<Written<Reported>, Error> {
    let lifecycle = Lifecycle::parse(status)
        .filter(|l| l.legacy_outcome().is_some())
        .ok_or_else(|| Error::InvalidInput {
            field: "status",
            reason: format!("{status:?} is not completed, failed, cancelled or blocked"),
        })?;
    let outcome_status = lifecycle.legacy_outcome().expect("a close status");
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let mut security = Security::default();
    let summary = summary.map(|s| clean_text(s, MAX_TEXT_UNITS, &mut security));
    let mut times = None;
    let written = transact(store, options, |snap| {
        let state = read_state(snap, &id)?.ok_or_else(not_found)?;
        times = Some(step_times(&state));
        if state.lifecycle() != Lifecycle::Running || state.outcome.is_some() {
            return Err(Error::TerminalState {
                action_id: id.clone(),
                lifecycle: state.lifecycle(),
            });
        }
        let outcome = Outcome {
            action_id: id.clone(),
            status: outcome_status,
            outcome_at_ms: now_ms,
            summary: summary.clone(),
            error_message: None,
            progress: None,
            attempt_id: None,
            lifecycle,
            source: Source::LegacyClose,
        };
        Ok(Plan::Write {
            files: vec![(id.path(RecordKind::Outcome), outcome.to_bytes())],
            message: format!("finality: close {id} {lifecycle} (outcome {outcome_status})\n"),
            value: outcome,
        })
    })?;
    Ok(finish_reported(written, times, security))
}

// ---------------------------------------------------------------------------------------------
// Sweep

/// The sweep timeout of a raw setting (§2.3, §5 #28): a non-finite or non-positive value is the
/// default 15, fractions are floored, and the result is clamped to 1–1440 minutes.
pub fn timeout_minutes(raw: f64) -> u32 {
    if !raw.is_finite() || raw <= 0.0 {
        return DEFAULT_TIMEOUT_MINUTES;
    }
    (raw.floor() as u32).clamp(1, MAX_TIMEOUT_MINUTES)
}

/// One action the sweep reconciled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Swept {
    /// The action.
    pub action_id: ActionId,
    /// Its agent.
    pub agent_id: String,
    /// Its creation time (epoch ms).
    pub created_at_ms: i64,
    /// The sweep's outcome time (epoch ms).
    pub outcome_at_ms: i64,
    /// The lifecycle after the sweep (`unknown`, or the untouched one).
    pub lifecycle: Lifecycle,
}

/// What [`sweep`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// The effective timeout in minutes.
    pub timeout_minutes: u32,
    /// Actions whose pending outcome became `lost_confirmation`, by id.
    pub swept: Vec<Swept>,
    /// Candidates whose outcome another writer set first, with the status that won.
    pub lost: Vec<(ActionId, OutcomeStatus)>,
    /// Action directories skipped because a record is invalid (`verify` reports them).
    pub skipped: Vec<String>,
}

/// The stale-outcome sweep (§2.3): in ONE commit, every action whose outcome is pending, whose
/// `created_at` is more than `timeout_minutes` before `now_ms`, and whose lifecycle is not
/// `completed`, `failed`, `cancelled` or `blocked` gets outcome `lost_confirmation`
/// ([`SWEEP_SUMMARY`]); an open lifecycle becomes `unknown` (with [`SWEEP_ERROR`]), any other
/// (`pending_approval`) is left as it is. It writes through the same create-only rule as a
/// report, so a report and the sweep race to exactly one winner; candidates that a report won
/// are listed in [`SweepReport::lost`]. It never grants execution authority.
///
/// `timeout_minutes` is normalised by [`timeout_minutes`]. Nothing to sweep: no commit.
///
/// # Errors
/// The write path's errors.
pub fn sweep(
    store: &Store,
    options: &Options,
    timeout: f64,
    now_ms: i64,
) -> Result<Written<SweepReport>, Error> {
    let minutes = timeout_minutes(timeout);
    let cutoff = now_ms - i64::from(minutes) * 60_000;
    let mut seen: BTreeSet<ActionId> = BTreeSet::new();
    transact(store, options, |snap| {
        let mut report = SweepReport {
            timeout_minutes: minutes,
            ..SweepReport::default()
        };
        let mut files = Vec::new();
        for (id, kinds) in action_dirs(snap)? {
            // Decided outcomes are skipped unread, unless an earlier attempt meant to sweep them.
            if kinds.contains(&RecordKind::Outcome) && !seen.contains(&id) {
                continue;
            }
            let state = match read_state(snap, &id) {
                Ok(Some(s)) => s,
                Ok(None) | Err(Error::Corrupt { .. }) => {
                    report.skipped.push(id.dir());
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(o) = &state.outcome {
                if seen.contains(&id) {
                    report.lost.push((id, o.status));
                }
                continue;
            }
            let lifecycle = state.lifecycle();
            if state.action.created_at_ms >= cutoff || lifecycle.is_sweep_excluded() {
                continue;
            }
            seen.insert(id.clone());
            let outcome = Outcome {
                action_id: id.clone(),
                status: OutcomeStatus::LostConfirmation,
                outcome_at_ms: now_ms,
                summary: Some(SWEEP_SUMMARY.to_owned()),
                error_message: lifecycle.is_open().then(|| SWEEP_ERROR.to_owned()),
                progress: None,
                attempt_id: None,
                lifecycle: lifecycle.closed_by(OutcomeStatus::LostConfirmation),
                source: Source::Sweep,
            };
            files.push((id.path(RecordKind::Outcome), outcome.to_bytes()));
            report.swept.push(Swept {
                action_id: id,
                agent_id: state.action.agent_id.clone(),
                created_at_ms: state.action.created_at_ms,
                outcome_at_ms: now_ms,
                lifecycle: outcome.lifecycle,
            });
        }
        if files.is_empty() {
            return Ok(Plan::Done(report));
        }
        Ok(Plan::Write {
            message: format!(
                "finality: sweep {} stale outcome(s) to lost_confirmation (timeout {minutes} min)\n",
                files.len()
            ),
            files,
            value: report,
        })
    })
}

/// Every action directory in a snapshot with the records it holds (directories whose name or
/// prefix is not valid are left to `verify`).
fn action_dirs(snap: &Snapshot<'_>) -> Result<BTreeMap<ActionId, BTreeSet<RecordKind>>, Error> {
    let mut dirs: BTreeMap<ActionId, BTreeSet<RecordKind>> = BTreeMap::new();
    for path in snap.list_files(ACTIONS)? {
        if let Some((id, kind)) = classify(&path) {
            dirs.entry(id).or_default().insert(kind);
        }
    }
    Ok(dirs)
}

// ---------------------------------------------------------------------------------------------
// Reads

/// The state of an action at the tip of `ref_name` (`action show`).
///
/// # Errors
/// [`Error::NotFound`], [`Error::Corrupt`], [`Error::Store`].
pub fn show(store: &Store, ref_name: &str, action_id: &str) -> Result<State, Error> {
    let not_found = || Error::NotFound {
        action_id: action_id.to_owned(),
    };
    let id = ActionId::parse(action_id).ok_or_else(not_found)?;
    let tip = store.tip(ref_name)?;
    let snap = store.snapshot(tip)?;
    read_state(&snap, &id)?.ok_or_else(not_found)
}

/// The outcome of an action (§1.5 `GET …/outcome`) with `elapsed_ms` at `now_ms`.
///
/// # Errors
/// As [`show`].
pub fn get_outcome(
    store: &Store,
    ref_name: &str,
    action_id: &str,
    now_ms: i64,
) -> Result<OutcomeView, Error> {
    show(store, ref_name, action_id).map(|s| s.view(now_ms))
}

// ---------------------------------------------------------------------------------------------
// Verification

fn finding(path: &str, rule: Rule, detail: impl Into<String>) -> Finding {
    Finding {
        path: path.to_owned(),
        rule,
        detail: detail.into(),
    }
}

/// Checks the finality records of a whole snapshot (design.md §6): every path under
/// `finality/v1/` is an action record at the path its id gives; each action directory has a
/// valid `action.json`; its `claim.json` (at most one, by construction) matches the action's
/// binding and the action was claimable; its `outcome.json` (at most one) has a status and a
/// lifecycle the closure table, the legacy mapping or the sweep can produce from the action's
/// initial lifecycle, names the claim's attempt when it names one, and holds no unredacted
/// secret.
///
/// # Errors
/// [`store::Error`] when the snapshot cannot be read.
pub fn verify(snap: &Snapshot<'_>) -> Result<Vec<Finding>, store::Error> {
    let mut findings = Vec::new();
    let mut dirs = BTreeSet::new();
    for path in snap.list_files(ROOT)? {
        if path.starts_with(decision::DECISIONS) {
            findings.extend(verify_decision(snap, &path)?);
            continue;
        }
        match classify(&path) {
            Some((id, _)) => {
                dirs.insert(id);
            }
            None => findings.push(finding(
                &path,
                Rule::FinalityUnknownPath,
                "not finality/v1/actions/<sha256(id)[0:2]>/<id>/{action,claim,outcome,approval}.json",
            )),
        }
    }
    for id in &dirs {
        findings.extend(verify_action(snap, id)?);
    }
    Ok(findings)
}

/// Checks the finality part of a push from `old` to `new` (design.md §6): nothing under
/// `finality/v1/` was modified or deleted, every added path is a known record, every touched
/// action directory is valid at `new` ([`verify_action`]), and no claim was added to an action
/// whose outcome was already set at `old`.
///
/// # Errors
/// [`store::Error`] when a revision cannot be read.
pub fn verify_range(
    store: &Store,
    old: Option<CommitId>,
    new: CommitId,
) -> Result<Vec<Finding>, store::Error> {
    let mut findings = Vec::new();
    let mut touched = BTreeSet::new();
    let mut claims = Vec::new();
    let mut decisions = Vec::new();
    for change in store.diff(old, new, ROOT)? {
        match change {
            Change::Modified(p) => findings.push(finding(
                &p,
                Rule::Modified,
                "an existing finality record was changed",
            )),
            Change::Deleted(p) => findings.push(finding(
                &p,
                Rule::Deleted,
                "an existing finality record was deleted",
            )),
            Change::Added(p) if p.starts_with(decision::DECISIONS) => decisions.push(p),
            Change::Added(p) => match classify(&p) {
                Some((id, kind)) => {
                    if matches!(kind, RecordKind::Claim | RecordKind::Approval) {
                        claims.push((id.clone(), kind));
                    }
                    touched.insert(id);
                }
                None => findings.push(finding(
                    &p,
                    Rule::FinalityUnknownPath,
                    "not finality/v1/actions/<sha256(id)[0:2]>/<id>/{action,claim,outcome,approval}.json",
                )),
            },
        }
    }
    let snap = store.snapshot(Some(new))?;
    for path in &decisions {
        findings.extend(verify_decision(&snap, path)?);
    }
    for id in &touched {
        findings.extend(verify_action(&snap, id)?);
    }
    if !claims.is_empty() {
        let before = store.snapshot(old)?;
        for (id, kind) in claims {
            if before
                .exists(&id.path(RecordKind::Outcome))
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
                findings.push(finding(&id.path(kind), rule, detail));
            }
        }
    }
    Ok(findings)
}

/// Checks one action directory (see [`verify`]).
///
/// # Errors
/// [`store::Error`] when the snapshot cannot be read.
pub fn verify_action(snap: &Snapshot<'_>, id: &ActionId) -> Result<Vec<Finding>, store::Error> {
    let mut out = Vec::new();
    // (present, bytes when readable as a file within the size limit)
    let mut load = |kind: RecordKind| -> Result<(bool, Option<Vec<u8>>), store::Error> {
        let path = id.path(kind);
        match snap.read(&path, MAX_RECORD_BYTES) {
            Ok(bytes) => Ok((bytes.is_some(), bytes)),
            Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
                out.push(finding(
                    &path,
                    Rule::FinalityRecordInvalid,
                    format!("not a file of at most {MAX_RECORD_BYTES} bytes"),
                ));
                Ok((true, None))
            }
            Err(e) => Err(e),
        }
    };
    let (action_present, action_bytes) = load(RecordKind::Action)?;
    let (claim_present, claim_bytes) = load(RecordKind::Claim)?;
    let (outcome_present, outcome_bytes) = load(RecordKind::Outcome)?;
    let (approval_present, approval_bytes) = load(RecordKind::Approval)?;
    let (action_path, claim_path, outcome_path) = (
        id.path(RecordKind::Action),
        id.path(RecordKind::Claim),
        id.path(RecordKind::Outcome),
    );
    let approval_path = id.path(RecordKind::Approval);
    if !action_present {
        for (path, present) in [
            (&claim_path, claim_present),
            (&outcome_path, outcome_present),
            (&approval_path, approval_present),
        ] {
            if present {
                out.push(finding(
                    path,
                    Rule::FinalityActionMissing,
                    "a record without its action.json",
                ));
            }
        }
        return Ok(out);
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
    let Some((action, action_sha)) = action else {
        return Ok(out);
    };
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
        let path = decision::path(&decision_id);
        if let Ok(Some(bytes)) = snap.read(&path, MAX_RECORD_BYTES)
            && let Ok(d) = decision::parse(&bytes, &decision_id)
        {
            for problem in decision::disagreements(&action, &d) {
                out.push(finding(&action_path, Rule::FinalityRecordInvalid, problem));
            }
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
            before.lifecycle = p.decision.lifecycle();
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
                .is_some_and(|p| clean_value(p, &mut security) != *p || keys_confidential(p));
        if unredacted {
            out.push(finding(
                &outcome_path,
                Rule::Privacy,
                "the outcome holds an unredacted secret or confidential identifier",
            ));
        }
    }
    Ok(out)
}

/// Checks one path under the decisions directory: a decision record at the path its id gives,
/// valid and redacted.
fn verify_decision(snap: &Snapshot<'_>, path: &str) -> Result<Vec<Finding>, store::Error> {
    let Some(id) = decision::classify(path) else {
        return Ok(vec![finding(
            path,
            Rule::FinalityUnknownPath,
            "not finality/v1/decisions/<sha256(id)[0:2]>/<id>.json",
        )]);
    };
    let bytes = match snap.read(path, MAX_RECORD_BYTES) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(Vec::new()),
        Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
            return Ok(vec![finding(
                path,
                Rule::FinalityRecordInvalid,
                format!("not a file of at most {MAX_RECORD_BYTES} bytes"),
            )]);
        }
        Err(e) => return Err(e),
    };
    Ok(match decision::parse(&bytes, &id) {
        Err(reason) => vec![finding(path, Rule::FinalityRecordInvalid, reason)],
        Ok(d) => decision::privacy_problems(&d)
            .into_iter()
            .map(|p| finding(path, Rule::Privacy, p))
            .collect(),
    })
}

/// The parsed record, or a finding for it.
fn parsed<T>(out: &mut Vec<Finding>, path: &str, r: Option<Result<T, String>>) -> Option<T> {
    match r {
        Some(Ok(v)) => Some(v),
        Some(Err(reason)) => {
            out.push(finding(path, Rule::FinalityRecordInvalid, reason));
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
    use std::path::Path;

    const BASE: &str = "2026-03-01T12:00:00.000Z";
    const ACTION: &str = "act_case";
    const ATTEMPT: &str = "attempt-0000000001";

    fn sig() -> Signature {
        Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: 1_772_366_400,
        }
    }

    fn options(ref_name: &str) -> Options {
        let mut o = Options::new(sig());
        o.ref_name = ref_name.to_owned();
        o
    }

    fn default_act() -> Value {
        shell_act(&["./deploy.sh".to_owned(), "prod".to_owned()])
    }

    fn new_action(id: &str) -> NewAction {
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
        }
    }

    fn request(attempt: &str) -> ClaimRequest {
        ClaimRequest {
            attempt_id: attempt.into(),
            agent_id: Some("agent-a".into()),
            principal: Some("principal-a".into()),
            act: Some(default_act()),
            verified: false,
        }
    }

    fn repo() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
        (dir, store)
    }

    fn ms(s: &str) -> i64 {
        parse_time(s).unwrap_or_else(|| panic!("bad time {s}"))
    }

    /// Expands `{"$repeat": s, "times": n}` anywhere in a case value.
    fn expand(v: &Value) -> Value {
        match v {
            Value::Object(m) if m.contains_key("$repeat") => {
                let s = m["$repeat"].as_str().unwrap();
                let n = m["times"].as_safe_integer().unwrap() as usize;
                Value::str(s.repeat(n))
            }
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, v)| (k.clone(), expand(v))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(expand).collect()),
            other => other.clone(),
        }
    }

    fn opt_string(v: Option<&Value>) -> Option<Option<String>> {
        v.map(|v| v.as_str().map(str::to_owned))
    }

    fn number(v: &Value) -> f64 {
        match v {
            Value::String(s) if s == "NaN" => f64::NAN,
            Value::String(s) if s == "Infinity" => f64::INFINITY,
            other => other.as_f64().unwrap(),
        }
    }

    fn ok(v: Value) -> Result<Value, Error> {
        Ok(v)
    }

    fn reported(r: Result<Written<Reported>, Error>) -> Result<Value, Error> {
        let r = r?.value;
        let Value::Object(mut m) = r.view.to_value() else {
            unreachable!()
        };
        m.insert("lifecycle".into(), Value::str(r.outcome.lifecycle.as_str()));
        m.insert("source".into(), Value::str(r.outcome.source.as_str()));
        m.insert(
            "attempt_id".into(),
            r.outcome
                .attempt_id
                .as_ref()
                .map_or(Value::Null, |a| Value::str(a.as_str())),
        );
        m.insert("security".into(), r.security.to_value());
        ok(Value::Object(m))
    }

    /// Runs one step; returns the result as a JSON value to match `expect` against.
    fn step(store: &Store, path: &Path, s: &Value) -> Result<Value, Error> {
        let op = s.get("op").and_then(Value::as_str).unwrap();
        let now = s.get("at").and_then(Value::as_str).map_or(ms(BASE), ms);
        let action = s.get("action").and_then(Value::as_str).unwrap_or(ACTION);
        let ref_name = s
            .get("ref")
            .and_then(Value::as_str)
            .unwrap_or("refs/heads/main");
        let opts = options(ref_name);
        let with = s
            .get("with")
            .cloned()
            .unwrap_or(Value::object::<String>([]));
        let attempt = s
            .get("attempt_id")
            .and_then(Value::as_str)
            .unwrap_or(ATTEMPT);
        let field = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_owned);
        match op {
            "create" => {
                let mut n = new_action(action);
                if let Some(v) = opt_string(with.get("agent_id")) {
                    n.agent_id = v.unwrap();
                }
                if let Some(v) = opt_string(with.get("principal")) {
                    n.principal = v.unwrap();
                }
                if let Some(v) = with.get("act") {
                    n.act = (v != &Value::Null).then(|| v.clone());
                }
                if let Some(v) = opt_string(with.get("guard_decision_id")) {
                    n.guard_decision_id = v;
                }
                if let Some(v) = with.get("verdict").and_then(Value::as_str) {
                    n.verdict = Verdict::parse(v).unwrap();
                }
                if let Some(v) = with.get("capabilities").and_then(Value::as_array) {
                    n.client_capabilities =
                        v.iter().map(|c| c.as_str().unwrap().to_owned()).collect();
                }
                if let Some(v) = with.get("identity_verified").and_then(Value::as_bool) {
                    n.identity_verified = v;
                }
                if let Some(v) = opt_string(with.get("containment_ref")) {
                    n.containment_ref = v;
                }
                if let Some(v) = with.get("lifecycle").and_then(Value::as_str) {
                    n.lifecycle = Some(Lifecycle::parse(v).unwrap());
                }
                ok(create_action(store, &opts, &n, now)?.value.to_value())
            }
            "claim" => {
                let mut r = request(attempt);
                if let Some(v) = opt_string(with.get("agent_id")) {
                    r.agent_id = v;
                }
                if let Some(v) = opt_string(with.get("principal")) {
                    r.principal = v;
                }
                if let Some(v) = with.get("act") {
                    r.act = (v != &Value::Null).then(|| v.clone());
                }
                if let Some(v) = with.get("verified").and_then(Value::as_bool) {
                    r.verified = v;
                }
                ok(claim(store, &opts, action, &r, now)?.value.to_value())
            }
            "claim_body" => {
                let r = ClaimRequest::from_body(
                    &s.get("body").cloned().unwrap(),
                    Some("principal-a"),
                    false,
                )?;
                ok(claim(store, &opts, action, &r, now)?.value.to_value())
            }
            "claim_race" => {
                let n = s.get("n").and_then(Value::as_safe_integer).unwrap() as usize;
                let barrier = std::sync::Barrier::new(n);
                let results: Vec<Result<Written<Claim>, Error>> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..n)
                        .map(|i| {
                            let barrier = &barrier;
                            let opts = &opts;
                            scope.spawn(move || {
                                let store = Store::open(path).unwrap();
                                barrier.wait();
                                claim(
                                    store_ref(&store),
                                    opts,
                                    action,
                                    &request(&format!("race-attempt-{i:06}")),
                                    now,
                                )
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                let winners = results.iter().filter(|r| r.is_ok()).count();
                let conflicts = results
                    .iter()
                    .filter(|r| matches!(r, Err(Error::ClaimConflict { .. })))
                    .count();
                ok(Value::object([
                    ("winners", Value::from(winners as i64)),
                    ("conflicts", Value::from(conflicts as i64)),
                ]))
            }
            "outcome" => {
                let report = OutcomeReport {
                    status: field("status").unwrap(),
                    summary: field("summary"),
                    error_message: field("error_message"),
                    progress: s.get("progress").cloned(),
                    attempt_id: field("attempt_id"),
                };
                reported(report_outcome(store, &opts, action, &report, now))
            }
            "close" => reported(close(
                store,
                &opts,
                action,
                &field("status").unwrap(),
                field("summary").as_deref(),
                now,
            )),
            "sweep" => {
                let timeout = s.get("timeout").map_or(15.0, number);
                let r = sweep(store, &opts, timeout, now)?.value;
                ok(Value::object([
                    (
                        "swept",
                        Value::Array(
                            r.swept
                                .iter()
                                .map(|w| Value::str(w.action_id.as_str()))
                                .collect(),
                        ),
                    ),
                    (
                        "lifecycles",
                        Value::object(
                            r.swept
                                .iter()
                                .map(|w| (w.action_id.as_str(), Value::str(w.lifecycle.as_str()))),
                        ),
                    ),
                    ("timeout_minutes", Value::from(i64::from(r.timeout_minutes))),
                ]))
            }
            "get" => ok(get_outcome(store, ref_name, action, now)?.to_value()),
            "state" => {
                let st = show(store, ref_name, action)?;
                ok(Value::object([
                    ("lifecycle", Value::str(st.lifecycle().as_str())),
                    ("outcome", Value::str(st.outcome_status().as_str())),
                    ("claimed", Value::Bool(st.claim.is_some())),
                    (
                        "attempt_id",
                        st.claim
                            .as_ref()
                            .map_or(Value::Null, |c| Value::str(c.attempt_id.as_str())),
                    ),
                ]))
            }
            "timeout" => ok(Value::object([(
                "minutes",
                Value::from(i64::from(timeout_minutes(number(s.get("input").unwrap())))),
            )])),
            "act_hash" => ok(Value::object([(
                "hash",
                act_content_hash(s.get("act")).map_or(Value::Null, Value::str),
            )])),
            "scrub" => ok(Value::object([("act", scrub_act(s.get("act").unwrap()))])),
            "plant" | "plant_claim" => {
                let id = ActionId::parse(action).unwrap();
                let (path, bytes) = if op == "plant" {
                    let path = field("path").unwrap().replace("{dir}", &id.dir());
                    (path, field("text").unwrap().into_bytes())
                } else {
                    let st = show(store, ref_name, action)?;
                    let c = Claim {
                        action_id: id.clone(),
                        attempt_id: AttemptId::parse(attempt).unwrap(),
                        binding_sha256: st.action_sha256,
                        claimed_at_ms: now,
                        guard_decision_id: "gd_1".into(),
                    };
                    (id.path(RecordKind::Claim), c.to_bytes())
                };
                let tip = store.tip(ref_name)?;
                let commit =
                    store.write_commit_with(tip, &[(path, bytes)], &[], true, "plant", &sig())?;
                store.update_ref(ref_name, tip, commit, "plant")?;
                ok(Value::Null)
            }
            "verify" => {
                let snap = store.snapshot(store.tip(ref_name)?)?;
                let rules: BTreeSet<&str> = verify(&snap)?.iter().map(|f| f.rule.code()).collect();
                ok(Value::object([(
                    "rules",
                    Value::Array(rules.into_iter().map(Value::str).collect()),
                )]))
            }
            other => panic!("unknown op {other}"),
        }
    }

    fn store_ref(s: &Store) -> &Store {
        s
    }

    /// Whether `actual` has every member of `expect` (objects: a subset; anything else: equal).
    fn matches(expect: &Value, actual: &Value) -> bool {
        match (expect, actual) {
            (Value::Object(e), Value::Object(a)) => e
                .iter()
                .all(|(k, v)| a.get(k).is_some_and(|x| matches(v, x))),
            (e, a) => e == a,
        }
    }

    /// Every case of testdata/finality/cases.json (the contract's §5 scenarios restated).
    #[test]
    fn contract_cases() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/finality/cases.json");
        let doc = canonical::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
        let cases = doc.get("cases").and_then(Value::as_array).unwrap();
        assert!(cases.len() >= 30, "at least 30 cases");
        let mut ids = BTreeSet::new();
        let mut failures = Vec::new();
        for case in cases {
            let id = case.get("id").and_then(Value::as_str).unwrap();
            assert!(ids.insert(id), "duplicate case id {id}");
            let (dir, store) = repo();
            let repo_path = dir.path().join("state.git");
            for (i, s) in case
                .get("steps")
                .and_then(Value::as_array)
                .unwrap()
                .iter()
                .enumerate()
            {
                let s = expand(s);
                let result = step(&store, &repo_path, &s);
                let Some(expect) = s.get("expect") else {
                    if let Err(e) = result {
                        failures.push(format!("{id} step {i}: unexpected error {}: {e}", e.code()));
                    }
                    continue;
                };
                let problem = match (&result, expect.get("error").and_then(Value::as_str)) {
                    (Err(e), Some(code)) => {
                        let status = expect.get("current_status").and_then(Value::as_str);
                        (e.code() != code || (status.is_some() && e.current_status() != status))
                            .then(|| format!("got {} ({:?}): {e}", e.code(), e.current_status()))
                    }
                    (Err(e), None) => Some(format!("unexpected error {}: {e}", e.code())),
                    (Ok(v), Some(code)) => Some(format!(
                        "expected {code}, got {}",
                        canonical::to_canonical_unchecked(v)
                    )),
                    (Ok(v), None) => (!matches(expect, v)).then(|| {
                        format!(
                            "expected {}\n      got {}",
                            canonical::to_canonical_unchecked(expect),
                            canonical::to_canonical_unchecked(v)
                        )
                    }),
                };
                if let Some(p) = problem {
                    failures.push(format!(
                        "{id} step {i} ({}): {p}",
                        s.get("op").and_then(Value::as_str).unwrap()
                    ));
                }
            }
            // Whatever the operations wrote verifies clean, unless the case planted a defect.
            let planted = case
                .get("steps")
                .and_then(Value::as_array)
                .unwrap()
                .iter()
                .any(|s| {
                    s.get("op")
                        .and_then(Value::as_str)
                        .is_some_and(|o| o.starts_with("plant"))
                });
            if !planted && let Ok(Some(tip)) = store.tip("refs/heads/main") {
                let snap = store.snapshot(Some(tip)).unwrap();
                let findings = verify(&snap).unwrap();
                if !findings.is_empty() {
                    failures.push(format!(
                        "{id}: the written records do not verify: {findings:?}"
                    ));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} failure(s):\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn paths_and_ids() {
        let id = ActionId::parse("act_case").unwrap();
        assert_eq!(id.dir(), "finality/v1/actions/7d/act_case");
        assert_eq!(
            classify("finality/v1/actions/7d/act_case/claim.json"),
            Some((id.clone(), RecordKind::Claim))
        );
        assert_eq!(classify("finality/v1/actions/00/act_case/claim.json"), None);
        assert_eq!(classify("finality/v1/actions/7d/act_case/other.json"), None);
        assert_eq!(
            classify("finality/v1/actions/7d/act_case/x/claim.json"),
            None
        );
        for bad in ["", ".", "..", "a/b", "a.b", &"x".repeat(129)] {
            assert!(ActionId::parse(bad).is_none(), "{bad:?}");
        }
        assert!(AttemptId::parse("0123456789abcdef").is_some());
        assert!(AttemptId::parse("0123456789abcde").is_none());
        assert_eq!(parse_time(BASE), Some(1_772_366_400_000));
        assert_eq!(format_time(1_772_366_400_000), BASE);
        for bad in [
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.000+00:00",
            "2026-02-30T12:00:00.000Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn records_round_trip_through_their_parsers() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let a = create_action(&store, &opts, &new_action(ACTION), ms(BASE)).unwrap();
        assert!(a.commit.is_some());
        // Replaying the identical creation is a no-op; another binding under the id is refused.
        let again = create_action(&store, &opts, &new_action(ACTION), ms(BASE)).unwrap();
        assert_eq!(again.commit, None);
        let mut other = new_action(ACTION);
        other.agent_id = "agent-b".into();
        assert!(matches!(
            create_action(&store, &opts, &other, ms(BASE)),
            Err(Error::ActionExists { .. })
        ));
        claim(&store, &opts, ACTION, &request(ATTEMPT), ms(BASE) + 5).unwrap();
        let report = OutcomeReport {
            status: "partial".into(),
            summary: Some("half".into()),
            progress: Some(Value::object([("step", Value::from(2))])),
            attempt_id: Some(ATTEMPT.into()),
            ..OutcomeReport::default()
        };
        report_outcome(&store, &opts, ACTION, &report, ms(BASE) + 9).unwrap();
        let state = show(&store, "refs/heads/main", ACTION).unwrap();
        let id = ActionId::parse(ACTION).unwrap();
        assert_eq!(
            parse_action(&state.action.to_bytes(), &id).unwrap(),
            state.action
        );
        let c = state.claim.clone().unwrap();
        assert_eq!(parse_claim(&c.to_bytes(), &id).unwrap(), c);
        let o = state.outcome.clone().unwrap();
        assert_eq!(parse_outcome(&o.to_bytes(), &id).unwrap(), o);
        assert_eq!(
            String::from_utf8(state.action.to_bytes()).unwrap(),
            "{\"act_content_hash\":\"sha256:-hGhiaKrt0YkI2srGCDO7s_6hMPXEN-TXaGDGysUM8w\",\"action_id\":\"act_case\",\"agent_id\":\"agent-a\",\"containment_ref\":null,\"created_at\":\"2026-03-01T12:00:00.000Z\",\"created_by\":\"principal-a\",\"execution_protocol\":1,\"guard_decision_id\":\"gd_1\",\"guard_verdict\":\"allow\",\"identity_verified\":false,\"lifecycle\":\"running\",\"schema\":\"action-ledger.finality-action\",\"schema_version\":1}\n"
        );
        assert_eq!(c.binding_sha256, Digest::of(state.action.to_bytes()));
        assert_eq!(
            String::from_utf8(o.to_bytes()).unwrap(),
            "{\"action_id\":\"act_case\",\"attempt_id\":\"attempt-0000000001\",\"error_message\":null,\"lifecycle\":\"failed\",\"outcome_at\":\"2026-03-01T12:00:00.009Z\",\"progress\":{\"step\":2},\"schema\":\"action-ledger.finality-outcome\",\"schema_version\":1,\"source\":\"outcome\",\"status\":\"partial\",\"summary\":\"half\"}\n"
        );
    }

    /// `elapsed_ms` is never negative, and every disagreement between the steps' clocks is
    /// reported with the largest skew, whatever the order of the steps' times.
    #[test]
    fn timing_clamps_and_reports_clock_skew() {
        let t = |s: &str| ms(&format!("2026-03-01T{s}.000Z"));
        let skew = |time, precedes, ms| Some(ClockSkew { time, precedes, ms });
        let cases = [
            // In order, or equal: no skew.
            (
                t("12:00:00"),
                Some(t("12:00:01")),
                Stamp::Outcome(t("12:00:02")),
                2_000,
                None,
            ),
            (
                t("12:00:00"),
                Some(t("12:00:00")),
                Stamp::Outcome(t("12:00:00")),
                0,
                None,
            ),
            (t("12:00:00"), None, Stamp::Now(t("12:01:00")), 60_000, None),
            // The outcome's clock behind the creator's (created and claimed at 12:10).
            (
                t("12:10:00"),
                Some(t("12:10:00")),
                Stamp::Outcome(t("12:00:30")),
                0,
                skew("outcome_at", "created_at", 570_000),
            ),
            (
                t("12:10:00"),
                None,
                Stamp::Outcome(t("12:00:05")),
                0,
                skew("outcome_at", "created_at", 595_000),
            ),
            // The claimer's clock behind the creator's.
            (
                t("12:10:00"),
                Some(t("12:05:00")),
                Stamp::Outcome(t("12:20:00")),
                600_000,
                skew("claimed_at", "created_at", 300_000),
            ),
            // The outcome after creation but before the claim.
            (
                t("12:00:00"),
                Some(t("12:10:00")),
                Stamp::Outcome(t("12:05:00")),
                300_000,
                skew("outcome_at", "claimed_at", 300_000),
            ),
            // Both wrong: the largest disagreement is reported.
            (
                t("12:10:00"),
                Some(t("12:00:00")),
                Stamp::Outcome(t("12:05:00")),
                0,
                skew("claimed_at", "created_at", 600_000),
            ),
            (
                t("12:10:00"),
                Some(t("12:09:00")),
                Stamp::Outcome(t("12:00:00")),
                0,
                skew("outcome_at", "created_at", 600_000),
            ),
            // A reader whose clock is behind while the outcome is pending.
            (
                t("12:10:00"),
                Some(t("12:10:00")),
                Stamp::Now(t("12:09:59")),
                0,
                skew("now", "created_at", 1_000),
            ),
        ];
        for (created, claimed, end, elapsed, want) in cases {
            let got = Timing::new(created, claimed, end);
            assert_eq!(
                (got.elapsed_ms, got.skew),
                (elapsed, want),
                "{claimed:?} {end:?}"
            );
        }
        let v = OutcomeView {
            action_id: ActionId::parse(ACTION).unwrap(),
            status: OutcomeStatus::Completed,
            outcome_at_ms: Some(t("12:00:30")),
            summary: None,
            error_message: None,
            progress: None,
            elapsed_ms: 0,
            clock_skew: skew("outcome_at", "created_at", 570_000),
        };
        assert_eq!(
            canonical::to_canonical(&v.to_value()).unwrap(),
            r#"{"action_id":"act_case","clock_skew":{"ms":570000,"precedes":"created_at","time":"outcome_at"},"elapsed_ms":0,"error_message":null,"outcome_at":"2026-03-01T12:00:30.000Z","progress":null,"status":"completed","summary":null}"#
        );
        let v = OutcomeView {
            clock_skew: None,
            ..v
        };
        assert_eq!(v.to_value().get("clock_skew"), None);
        assert_eq!(
            skew("outcome_at", "created_at", 570_000)
                .unwrap()
                .to_string(),
            "outcome_at is 570000 ms before created_at: the clocks that wrote them disagree"
        );
    }

    /// A create retried with the same binding (after a lost acknowledgement, on another clock)
    /// writes nothing and returns the first record; a binding that differs in any one field is
    /// still `ACTION_EXISTS`, and so is an id taken by a record that does not parse.
    #[test]
    fn create_retry_is_idempotent_and_other_bindings_are_refused() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let first = create_action(&store, &opts, &new_action(ACTION), ms(BASE)).unwrap();
        let tip = store.tip("refs/heads/main").unwrap();
        for later in [
            "2026-03-01T12:00:05.000Z",
            "2026-03-02T08:00:00.000Z",
            "2026-02-28T00:00:00.000Z",
        ] {
            let retry = create_action(&store, &opts, &new_action(ACTION), ms(later)).unwrap();
            assert_eq!(retry.commit, None, "{later}");
            assert_eq!(retry.value, first.value, "{later}");
            assert_eq!(retry.value.created_at_ms, ms(BASE));
        }
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip);
        let mut n = new_action(ACTION);
        n.act = Some(scrub_act(&Value::object([
            ("kind", Value::str("shell")),
            ("command", Value::str("./deploy.sh prod")),
        ])));
        let retry = create_action(&store, &opts, &n, ms("2026-03-01T12:01:00.000Z")).unwrap();
        assert_eq!(
            (retry.commit, retry.value.created_at_ms),
            (None, ms(BASE)),
            "same act hash"
        );
        type Change = fn(&mut NewAction);
        let differing: [(&str, Change); 11] = [
            ("agent", |n| n.agent_id = "agent-b".into()),
            ("principal", |n| n.principal = "principal-b".into()),
            ("act", |n| {
                n.act = Some(shell_act(&["./deploy.sh".into(), "staging".into()]))
            }),
            ("no act", |n| n.act = None),
            ("guard decision", |n| {
                n.guard_decision_id = Some("gd_2".into())
            }),
            ("no guard decision", |n| n.guard_decision_id = None),
            ("verdict", |n| n.verdict = Verdict::AllowContained),
            ("containment ref", |n| {
                n.containment_ref = Some("ctr_1".into())
            }),
            ("lifecycle", |n| {
                n.lifecycle = Some(Lifecycle::PendingApproval)
            }),
            ("identity verified", |n| n.identity_verified = true),
            ("legacy", |n| n.client_capabilities.clear()),
        ];
        for (what, change) in differing {
            let mut n = new_action(ACTION);
            change(&mut n);
            let e = create_action(&store, &opts, &n, ms(BASE)).unwrap_err();
            assert_eq!(e.code(), "ACTION_EXISTS", "{what}: {e}");
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            tip,
            "nothing written"
        );
        let id = ActionId::parse("act_planted").unwrap();
        let commit = store
            .write_commit_with(
                tip,
                &[(id.path(RecordKind::Action), b"{}\n".to_vec())],
                &[],
                true,
                "plant",
                &sig(),
            )
            .unwrap();
        store
            .update_ref("refs/heads/main", tip, commit, "plant")
            .unwrap();
        let e = create_action(&store, &opts, &new_action("act_planted"), ms(BASE)).unwrap_err();
        assert_eq!(e.code(), "ACTION_EXISTS");
    }

    /// A lossy number anywhere in an act is refused by create and claim before anything is
    /// read or written, naming its path; it would otherwise be hashed as a stand-in text shared
    /// by other acts (`1e400` and `1e401` are both `Infinity`).
    #[test]
    fn lossy_numbers_in_an_act_are_refused_with_their_path() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let parse = |t: &str| canonical::parse(t).unwrap();
        let (a, b) = (parse(r#"{"n":1e400}"#), parse(r#"{"n":1e401}"#));
        assert_eq!(act_content_hash(Some(&a)), act_content_hash(Some(&b)));
        for (text, path) in [
            (r#"{"kind":"shell","n":1e400}"#, "$.n"),
            (r#"{"kind":"shell","n":-1e400}"#, "$.n"),
            (
                r#"{"kind":"http","request":{"retries":1e401}}"#,
                "$.request.retries",
            ),
            (r#"{"args":["x",1,-0],"kind":"shell"}"#, "$.args[2]"),
            (r#"{"kind":"shell","n":9007199254740993}"#, "$.n"),
            (
                r#"{"kind":"shell","deep":[{"a":[1e21]}]}"#,
                "$.deep[0].a[0]",
            ),
        ] {
            let act = parse(text);
            let want = format!(
                "invalid act: {path} is a lossy number (not finite, -0, or an integer beyond \
                 ±(2^53−1)), which canonical JSON cannot write exactly, so the act cannot be \
                 hashed: send it as a string"
            );
            assert_eq!(check_act(&act).unwrap_err().to_string(), want, "{text}");
            let mut n = new_action("act_lossy");
            n.act = Some(act.clone());
            let e = create_action(&store, &opts, &n, ms(BASE)).unwrap_err();
            assert_eq!((e.code(), e.to_string()), ("INVALID_INPUT", want.clone()));
            let mut r = request(ATTEMPT);
            r.act = Some(act);
            let e = claim(&store, &opts, "act_lossy", &r, ms(BASE)).unwrap_err();
            assert_eq!((e.code(), e.to_string()), ("INVALID_INPUT", want));
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            None,
            "nothing written"
        );
        assert_eq!(
            check_act(&parse(r#"{"n":[0,0.1,-2.5e-300,9007199254740991]}"#)).ok(),
            Some(())
        );
    }

    /// Each refusal of a progress value names its own rule and, where it has one, the path.
    #[test]
    fn progress_refusals_name_their_rule() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        create_action(&store, &opts, &new_action(ACTION), ms(BASE)).unwrap();
        let tip = store.tip("refs/heads/main").unwrap();
        let parse = |t: &str| canonical::parse(t).unwrap();
        let lossy = |path: &str| {
            format!(
                "invalid outcome: progress {path} is a lossy number (not finite, -0, or an \
                 integer beyond ±(2^53−1)), which canonical JSON cannot write exactly: send it \
                 as a string"
            )
        };
        let deep = (0..70).fold(Value::Number(1.0), |v, _| Value::object([("d", v)]));
        let many = Value::object([("a", Value::Array(vec![Value::Null; 10_000]))]);
        let cases = [
            (parse(r#"{"a":1e21}"#), lossy("$.a")),
            (parse(r#"{"a":1e400}"#), lossy("$.a")),
            (parse(r#"{"a":{"b":[1,-1e400]}}"#), lossy("$.a.b[1]")),
            (parse(r#"{"step":-0}"#), lossy("$.step")),
            (parse(r#"{"n":9007199254740992}"#), lossy("$.n")),
            (
                deep,
                format!(
                    "invalid outcome: progress ${} is nested deeper than 64 levels",
                    ".d".repeat(65)
                ),
            ),
            (
                many,
                "invalid outcome: progress holds more than 10000 values (at $.a)".to_owned(),
            ),
            (
                Value::object([("log", Value::str("x".repeat(8200)))]),
                "invalid outcome: progress exceeds 8192 bytes of JSON (8210 bytes)".to_owned(),
            ),
            (
                Value::object([("log", Value::str("x".repeat(2_000_000)))]),
                "invalid outcome: progress exceeds 8192 bytes of JSON".to_owned(),
            ),
            (
                parse("[1]"),
                "invalid outcome: progress must be a JSON object".to_owned(),
            ),
        ];
        for (progress, want) in cases {
            let report = OutcomeReport {
                status: "partial".into(),
                progress: Some(progress),
                ..OutcomeReport::default()
            };
            let e = report_outcome(&store, &opts, ACTION, &report, ms(BASE)).unwrap_err();
            assert_eq!((e.code(), e.to_string()), ("INVALID_OUTCOME", want));
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            tip,
            "nothing written"
        );
    }

    #[test]
    fn redaction_is_a_fixed_point() {
        let samples = [
            "token=oc_live_fixture and password=hunter2",
            "Bearer abc.def and sk-abcdefghijklmnopq",
            "see /home/alice/x and 10.0.0.7 or http://localhost:8080/a",
            "plain words only",
            &format!("{}token=abcdef", "x".repeat(3990)),
            &format!("{} ghp_abcdefghijklmnopqrstuvwxyz", "y".repeat(3985)),
        ];
        for s in samples {
            let mut sec = Security::default();
            let once = clean_text(s, MAX_TEXT_UNITS, &mut sec);
            let mut again = Security::default();
            assert_eq!(clean_text(&once, MAX_TEXT_UNITS, &mut again), once, "{s}");
            assert!(again.is_clean(), "{s}: {once}");
            assert!(privacy::utf16_len(&once) <= MAX_TEXT_UNITS);
        }
        let mut sec = Security::default();
        assert_eq!(
            clean_text("plain words only", 4000, &mut sec),
            "plain words only"
        );
        assert!(sec.is_clean());
        // Truncation never splits a surrogate pair.
        assert_eq!(truncate_units("a😀b", 2), "a");
        assert_eq!(truncate_units("a😀b", 3), "a😀");
    }

    #[test]
    fn shell_acts_quote_their_arguments() {
        let act = shell_act(&[
            "echo".into(),
            "hello world".into(),
            "it's".into(),
            "".into(),
        ]);
        assert_eq!(
            act.get("command").and_then(Value::as_str),
            Some("echo 'hello world' 'it'\\''s' ''")
        );
    }

    /// A report racing the sweep, in threads: exactly one outcome lands, the losing report is
    /// told the winner's status, the losing sweep lists the action as lost.
    #[test]
    fn report_and_sweep_race_to_one_outcome() {
        let (dir, store) = repo();
        let path = dir.path().join("state.git");
        let opts = options("refs/heads/main");
        let rounds = 12;
        for round in 0..rounds {
            let id = format!("act_race_{round}");
            create_action(&store, &opts, &new_action(&id), ms(BASE)).unwrap();
            let barrier = std::sync::Barrier::new(2);
            let later = ms(BASE) + 16 * 60_000;
            let (rep, swp) = std::thread::scope(|scope| {
                let r = scope.spawn(|| {
                    let s = Store::open(&path).unwrap();
                    barrier.wait();
                    let report = OutcomeReport {
                        status: "completed".into(),
                        ..OutcomeReport::default()
                    };
                    report_outcome(&s, &opts, &id, &report, later).map(|w| w.value.outcome.status)
                });
                let w = scope.spawn(|| {
                    let s = Store::open(&path).unwrap();
                    barrier.wait();
                    sweep(&s, &opts, 15.0, later).map(|w| w.value)
                });
                (r.join().unwrap(), w.join().unwrap())
            });
            let swp = swp.unwrap();
            let st = show(&store, "refs/heads/main", &id).unwrap();
            let swept = swp.swept.iter().any(|s| s.action_id.as_str() == id);
            match rep {
                Ok(status) => {
                    assert_eq!(status, OutcomeStatus::Completed);
                    assert!(!swept);
                    assert_eq!(st.outcome_status(), OutcomeStatus::Completed);
                }
                Err(Error::OutcomeAlreadySet { current_status, .. }) => {
                    assert_eq!(current_status, OutcomeStatus::LostConfirmation);
                    assert!(swept);
                    assert_eq!(st.outcome_status(), OutcomeStatus::LostConfirmation);
                }
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        let snap = store
            .snapshot(store.tip("refs/heads/main").unwrap())
            .unwrap();
        assert_eq!(verify(&snap).unwrap(), Vec::new());
    }

    /// An I/O failure while claiming is EXECUTION_CLAIM_UNAVAILABLE, never a conflict.
    #[test]
    fn unwritable_repository_makes_the_claim_unavailable() {
        let (dir, store) = repo();
        let opts = options("refs/heads/main");
        create_action(&store, &opts, &new_action(ACTION), ms(BASE)).unwrap();
        create_action(&store, &opts, &new_action("act_perm"), ms(BASE)).unwrap();
        let objects = dir.path().join("state.git/objects");
        use std::os::unix::fs::PermissionsExt;
        let set = |mode| {
            for e in walkdir::WalkDir::new(&objects) {
                let e = e.unwrap();
                if e.file_type().is_dir() {
                    std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode))
                        .unwrap();
                }
            }
        };
        set(0o555);
        // Root ignores permissions; the test only means something for other users.
        let probe = objects.join("probe");
        let writable = std::fs::write(&probe, b"x").is_ok();
        let _ = std::fs::remove_file(&probe);
        let result = claim(&store, &opts, "act_perm", &request(ATTEMPT), ms(BASE));
        set(0o755);
        if !writable {
            let e = result.unwrap_err();
            assert_eq!(e.code(), "EXECUTION_CLAIM_UNAVAILABLE", "{e}");
        }
        // A ref lock held past the wait: unavailable, and nothing was granted, so a later claim
        // (with a fresh attempt id) succeeds (the rollback of §5 #12).
        let lock = dir.path().join("state.git/refs/heads/main.lock");
        std::fs::write(&lock, b"").unwrap();
        let mut short = options("refs/heads/main");
        short.lock_wait = Duration::from_millis(50);
        let e = claim(&store, &short, ACTION, &request(ATTEMPT), ms(BASE)).unwrap_err();
        assert_eq!(e.code(), "EXECUTION_CLAIM_UNAVAILABLE", "{e}");
        assert!(
            show(&store, "refs/heads/main", ACTION)
                .unwrap()
                .claim
                .is_none()
        );
        std::fs::remove_file(&lock).unwrap();
        let won = claim(
            &store,
            &opts,
            ACTION,
            &request("attempt-0000000003"),
            ms(BASE),
        )
        .unwrap();
        assert_eq!(won.value.attempt_id.as_str(), "attempt-0000000003");
        // A corrupt action record is unavailable too, not a conflict (a missing one is).
        let e = claim(
            &store,
            &opts,
            "act_other",
            &request("attempt-0000000002"),
            ms(BASE),
        );
        assert_eq!(e.unwrap_err().code(), "EXECUTION_CLAIM_CONFLICT");
        create_action(&store, &opts, &new_action("act_bad"), ms(BASE)).unwrap();
        let bad = ActionId::parse("act_bad").unwrap();
        let tip = store.tip("refs/heads/main").unwrap();
        let commit = store
            .write_commit_with(
                tip,
                &[(bad.path(RecordKind::Action), b"{}\n".to_vec())],
                &[],
                true,
                "x",
                &sig(),
            )
            .unwrap();
        store
            .update_ref("refs/heads/main", tip, commit, "x")
            .unwrap();
        let e = claim(
            &store,
            &opts,
            "act_bad",
            &request("attempt-0000000002"),
            ms(BASE),
        )
        .unwrap_err();
        assert_eq!(e.code(), "EXECUTION_CLAIM_UNAVAILABLE", "{e}");
    }

    /// A push may add finality records but never change or remove one, nor claim an action whose
    /// outcome was already set.
    #[test]
    fn push_ranges_refuse_rewrites_of_finality_records() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let ref_name = "refs/heads/main";
        create_action(&store, &opts, &new_action(ACTION), ms(BASE)).unwrap();
        let created = store.tip(ref_name).unwrap().unwrap();
        claim(&store, &opts, ACTION, &request(ATTEMPT), ms(BASE)).unwrap();
        let report = OutcomeReport {
            status: "completed".into(),
            ..OutcomeReport::default()
        };
        report_outcome(&store, &opts, ACTION, &report, ms(BASE)).unwrap();
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
            claimed_at_ms: ms(BASE),
            guard_decision_id: "gd_1".into(),
        };
        let rewritten = edit(vec![(id.path(RecordKind::Claim), other.to_bytes())], vec![]);
        assert_eq!(rules(Some(done), rewritten), vec!["modified"]);
        let deleted = edit(vec![], vec![id.path(RecordKind::Outcome)]);
        assert_eq!(rules(Some(done), deleted), vec!["deleted"]);
        let stray = edit(vec![(format!("{ROOT}/notes.txt"), b"x\n".to_vec())], vec![]);
        assert_eq!(rules(Some(done), stray), vec!["finality-unknown-path"]);
        // A claim added to an action whose outcome was set before the push.
        create_action(&store, &opts, &new_action("act_late"), ms(BASE)).unwrap();
        close(&store, &opts, "act_late", "completed", None, ms(BASE)).unwrap();
        let before = store.tip(ref_name).unwrap().unwrap();
        let late = ActionId::parse("act_late").unwrap();
        let st = show(&store, ref_name, "act_late").unwrap();
        let c = Claim {
            action_id: late.clone(),
            attempt_id: AttemptId::parse(ATTEMPT).unwrap(),
            binding_sha256: st.action_sha256,
            claimed_at_ms: ms(BASE),
            guard_decision_id: "gd_1".into(),
        };
        let claimed_late = store
            .write_commit(
                Some(before),
                &[(late.path(RecordKind::Claim), c.to_bytes())],
                "late",
                &sig(),
            )
            .unwrap();
        assert_eq!(
            rules(Some(before), claimed_late),
            vec!["finality-claim-mismatch"]
        );
    }
}
