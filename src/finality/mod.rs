//! Execution finality on the Git store: exactly one caller wins the authority to run one attempt
//! of a governed action, its outcome is recorded once and never rewritten, and an outcome still
//! pending long after the action was created becomes `lost_confirmation`.
//!
//! This is the runtime contract of the reference system (DashClaw's execution claims and
//! outcomes), carried onto create-only files in the state repository instead of mutable
//! database columns.
//!
//! # Records and paths
//!
//! ```text
//! finality/v1/layout.json                                   the layout record
//! finality/v1/actions/<fan-out>/<action_id>/action.json     the binding
//! finality/v1/actions/<fan-out>/<action_id>/claim.json      the one claim
//! finality/v1/actions/<fan-out>/<action_id>/outcome.json    the one outcome
//! finality/v1/actions/<fan-out>/<action_id>/approval.json   an operator's decision
//! finality/v1/actions/<fan-out>/<action_id>/containment.json an operator's promote or discard
//! finality/v1/decisions/<fan-out>/<decision_id>.json        a guard decision
//! finality/v1/pending/<YYYY-MM-DD>/<HH>/<ms>.<action_id>    a pending outcome
//! ```
//!
//! The fan-out depends on the repository's [`layout`]: two two-hex-digit levels of the id's
//! SHA-256 in `hex2x2` (new repositories), six one-hex-digit levels in `nibble` (the default of
//! 0.1.x), one two-hex-digit level in `flat` (repositories written before layouts were
//! versioned); the older two are read and written as they are until `maintain` migrates them
//! (see [`migrate`]). The module docs of [`layout`] weigh the options with the bytes one action
//! adds at each size. `hex2x2` and `nibble` also keep the [`pending`] index:
//! one empty file per action whose outcome can still be swept, named by its creation time,
//! added and removed in the same commit as the records it indexes, so that a sweep reads only
//! the hours old enough. Each record file is canonical JSON plus `"\n"`
//! with a `schema` and `schema_version` ([`records`] gives the byte format and the keys of each,
//! [`approval`] and [`decision`] the two written by `serve`). A record file is written once and
//! never changed or removed (only a migration moves it, with its bytes); `verify --range` and the
//! pre-receive hook refuse a push that does. Pending-index entries come and go with the outcomes.
//!
//! The reference keeps two mutable columns on one row: the lifecycle `status` (`running`,
//! `pending`, `pending_approval`, `blocked`, `completed`, `failed`, `cancelled`, and the
//! server-only `unknown` and `expired`) and the durable `outcome_status` (`pending`,
//! `completed`, `partial`, `failed`, `lost_confirmation`). Here the lifecycle only ever changes
//! together with the outcome or an operator's decision, so `action.json` holds the *initial*
//! lifecycle, `approval.json` moves `pending_approval` to `running`, `failed` (a denial;
//! `cancelled` in older records) or `expired` (written by the sweep when nobody decided in
//! time), and
//! `outcome.json` holds the lifecycle *after* the outcome closed it. The state of an action is a
//! pure function of its (at most five) files ([`State`]); no `outcome.json` means outcome
//! `pending`.
//!
//! # The rules
//!
//! - **Create** ([`create_action`]). The binding records the agent that may claim, the creating
//!   principal, the `act_content_hash` of the scrubbed act ([`act`]), the guard decision id and
//!   verdict, the containment ref, whether the creator's identity was verified, and protocol 1
//!   when the creator advertised the `execution_claims` capability; with [`details`] also the
//!   full action record (declared goal, the scrubbed act itself, risk score, systems touched,
//!   reversible, reasoning, idempotency key, assumptions, …), redacted and bounded, the act
//!   bound to its hash. The initial lifecycle comes
//!   from the verdict (`require_approval` → `pending_approval`, `block` → `blocked`, otherwise
//!   `running`). A retry with the same binding returns the first record and writes nothing
//!   (idempotent creation); a different binding under a taken id is refused
//!   ([`Error::ActionExists`]), never answered with the first record. An action id is the
//!   idempotency key of its creation: the CLI's `--id`, or in `serve` the id derived from the
//!   principal and the request's `idempotency_key`, where a replay answers what the first
//!   request answered and a reused key is refused (the `server` module docs give the rule).
//! - **Claim** ([`claim`](fn@claim)). A claim presents a fresh attempt id (`^[A-Za-z0-9_-]{16,128}$`),
//!   the agent, the authenticated principal and the act. It is granted only when the agent,
//!   principal and act hash equal the binding's, the lifecycle is `running`, there is no claim
//!   and no outcome yet, the action is protocol 1, a verified creator is matched by a verified
//!   caller, there is a guard decision with a permissive verdict (`allow`, `warn`, or
//!   `allow_contained` with a containment ref), or a `require_approval` verdict with an operator
//!   approval at most 15 minutes old. Every refusal is the same `EXECUTION_CLAIM_CONFLICT`,
//!   whatever the cause, so a refusal reveals nothing about the action.
//! - **Exactly one claim.** A claim is one commit adding `claim.json`, built on the tip where
//!   the preconditions were checked and landed with one compare-and-swap of the ledger ref from
//!   that tip ([`store::land()`](fn@crate::store::land)). A second claimer that checked the
//!   same tip loses the swap, re-reads the new tip, finds the first claim and is refused.
//!   Attempt ids are single-use: repeating the winning attempt id is refused too.
//! - **Outcome** ([`report_outcome`]). One-shot: `outcome.json` is added only while the outcome
//!   is pending on the tip it was built on. A caller reports `completed`, `partial` (with a
//!   `progress` object) or `failed` (with an `error_message`); text is redacted and truncated
//!   ([`redaction`]), never refused for length. An open lifecycle (`running`, `pending`) is
//!   closed: `completed` → `completed`, `partial`/`failed` → `failed`, `lost_confirmation` →
//!   `unknown`; a `blocked`, `pending_approval`, `cancelled` or `failed` lifecycle refuses a
//!   report. A report that names an attempt id must name the claim's.
//! - **Who settles** ([`Settler`]). Only the action's own principal (the one that created it,
//!   and so the only one that can claim it) or an operator reports its outcome or closes it.
//!   Anyone else gets [`Error::NotFound`], the answer for an unknown id, so the refusal does not
//!   reveal whether the action exists. The reference binds claims to the principal but not
//!   outcomes; a ledger that lets any key settle any action would let one agent erase another's
//!   real report.
//! - **Acts must hash one to one** ([`act::check_act`], at creation, guard and claim). The act
//!   hash is the only thing binding a claim to what was approved, so an act it cannot take one
//!   to one is refused, naming its path: an act that is not an object (it has no hash), keys
//!   equal after NFC normalisation, keys or strings not in NFC, nesting deeper than 100 levels,
//!   lossy numbers (`1e400`, `-0`, integers beyond ±(2^53−1)) and number text with more digits
//!   than a double holds (`1e-400`, `1.00000000000000000001`). The reference would hash the
//!   non-NFC ones to their normalised form and the others to null; both let another act claim
//!   the action. An action created with an act always has a hash, and its claim must present
//!   an act with that hash.
//! - **Legacy close** ([`close`]). Closing a `running` action to `completed`, `failed`,
//!   `cancelled` or `blocked` also sets the implicit outcome (`completed`, or `failed` for the
//!   others) in the same `outcome.json`.
//! - **Sweep** ([`sweep`](fn@sweep)). Every action whose outcome is pending, whose lifecycle is
//!   not `completed`, `failed`, `cancelled` or `blocked`, and whose timeout (default 15 minutes,
//!   1 to 1440) has passed gets outcome `lost_confirmation` in one commit: the effect may or may
//!   not have happened, and someone must reconcile it. An open lifecycle becomes `unknown`. The
//!   sweep never grants execution; it and a late report race to exactly one outcome under the
//!   same create-only rule, and the loser is told the winner's status.
//! - **Clocks** ([`sweep`](mod@sweep) has the details). Every writer stamps records with its own
//!   clock, and the clocks of writers sharing a ref may disagree by any amount. The timeout is
//!   therefore measured on the sweeper's clock alone, from when the sweeper first saw the action
//!   pending ([`Observations`]: the action's creation when the sweeper's process created it),
//!   never by comparing another writer's `created_at` with the sweeper's clock. No offset,
//!   ahead or behind, makes a claim stale before the timeout has passed on the clock that
//!   created it; a sweeper with no memory of an action waits one more timeout. Record times
//!   more than a minute ahead of the sweeper's clock are reported ([`ClockNotice`]), never
//!   acted on; an outcome stamped before its action's creation is shown with `clock_skew`.
//! - **Approvals** ([`approval`]). An operator approves or denies an action born
//!   `pending_approval`, once, with optional reasoning (redacted, kept in `approval.json`; a
//!   denial's `error_message`); an approval is the action's own single-use grant, consumed by
//!   the one claim it allows. An action nobody decided on within its wait
//!   (`approval_wait_seconds`, else the sweeper's default) plus a 15-minute grace, on the
//!   sweeper's clock, is expired by the sweep ([`sweep_expiring`]): the same create-only
//!   `approval.json`, so a decision racing the expiry has one winner, and a decision after it is
//!   refused ([`Error::TerminalState`] with lifecycle `expired`). An action awaiting an operator
//!   is never swept to `lost_confirmation` (nothing can have run; the reference sweeps its
//!   outcome all the same).
//! - **Containment** ([`containment`]). An `allow_contained` action whose outcome is `completed`
//!   awaits promotion; an operator other than its creating principal promotes or discards it,
//!   once (the create-only `containment.json`). A promotion also creates, in the same commit, an
//!   operator-approved `containment_promote` action for the same agent and principal whose act
//!   merges the containment ref.
//!
//! Every operation reads the tip of the ledger ref, checks its preconditions against that
//! snapshot, writes one commit and lands it with one compare-and-swap; when another writer moved
//! the ref, it plans again from scratch on the new tip. A held ref lock is waited for
//! ([`Options::lock_wait`]), never mistaken for a lost race. [`batch`] lands many operations as
//! one commit the same way (the group commit of `serve`).
//!
//! The ref may be a remote's ([`Options::target`], the CLI's `--remote`): the tip is then read
//! with `git ls-remote` and fetched, and the commit is pushed with a lease on that tip
//! ([`store::land()`](fn@crate::store::land), the loop `publish` and compaction use too). The
//! server takes its ref lock and checks the lease atomically, so claimers on different
//! machines, each with its own local repository, still race to exactly one claim; a claimer
//! whose lease failed fetches the winner's commit and is refused.
//!
//! # What remains after a crash
//!
//! Before the compare-and-swap the ref still names the old tip: at most unreachable objects
//! remain, the operation did not happen, and retrying it is safe (a claim with a *new* attempt
//! id; the old one was never granted). After it the record is complete and durable (the store
//! fsyncs objects and the ref before returning). A claim whose answer was lost in between must
//! be reconciled by reading the action back ([`show`]) and comparing the attempt id, never by
//! claiming again.
//!
//! # Not implemented from the reference
//!
//! Plan grants, operator grants of one action used by another, organisations and the lazy
//! sweep throttle. The guard decision is an input here (id and verdict) fixed at creation;
//! policy evaluation lives in `serve`. The reference's backfill of outcomes for closed rows has
//! nothing to heal: the lifecycle and the outcome are written in the same file.
//!
//! # Modules
//!
//! [`ids`] (action and attempt ids), [`status`] (lifecycles, outcome statuses, verdicts),
//! [`paths`] and [`layout`] (where each record lives), [`pending`] (the index of pending
//! outcomes), [`migrate`] (older layouts to `hex2x2`), [`records`] (the byte format and its
//! parsers), [`error`], [`act`] (scrub and hash), [`details`] (the full action record),
//! [`redaction`], [`state`] (reading an action), [`write`](mod@write) (the compare-and-swap
//! wrapper), one module per operation ([`create`],
//! [`claim`](mod@claim), [`outcome`], [`sweep`](mod@sweep)),
//! [`verify`](mod@verify), [`batch`], [`approval`], [`containment`], [`decision`], and [`list`]
//! (the listings of actions and guard decisions, and what a page costs).

#[macro_use]
pub mod status;

pub mod act;
pub mod approval;
pub mod batch;
pub mod claim;
pub mod containment;
pub mod create;
pub mod decision;
pub mod details;
pub mod error;
pub mod ids;
pub mod layout;
pub mod list;
pub mod migrate;
pub mod observations;
pub mod outcome;
pub mod paths;
pub mod pending;
pub mod records;
pub mod redaction;
pub mod state;
pub mod sweep;
pub mod verify;
pub mod write;

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
pub(crate) mod test_support;

pub use act::{act_content_hash, check_act, check_act_text, scrub_act, shell_act};
pub use approval::{Approval, ApprovalDecision, ApprovalExpiry};
pub use claim::{ClaimRefusal, ClaimRequest, claim};
pub use containment::{Containment, ContainmentStatus, ContainmentVerdict, resolve_containment};
pub use create::{NewAction, create_action};
pub use details::{DetailError, Details};
pub use error::Error;
pub use ids::{ActionId, AttemptId, MAX_ID_UNITS};
pub use layout::{Detected, Layout, LayoutError};
pub use observations::{Observations, ObservationsError};
pub use outcome::{CloseReport, OutcomeReport, Reported, Settler, cancel, close, report_outcome};
pub use paths::{ACTIONS, ROOT, RecordKind};
pub use records::{
    ACTION_SCHEMA, Action, CLAIM_SCHEMA, Claim, EXECUTION_CLAIMS, MAX_PROGRESS_BYTES,
    MAX_RECORD_BYTES, MAX_TEXT_UNITS, OUTCOME_SCHEMA, Outcome, RecordError, SCHEMA_VERSION,
    format_time, parse_action, parse_claim, parse_outcome, parse_time,
};
pub use redaction::{REDACTED, Security, clean_text, is_blank, mask_secrets};
pub use state::{
    ClockSkew, OutcomeView, Stamp, State, Timing, get_outcome, read_state, show, show_at,
};
pub use status::{Lifecycle, OutcomeStatus, Source, Verdict};
pub use sweep::{
    ClockNotice, DEFAULT_TIMEOUT_MINUTES, MAX_TIMEOUT_MINUTES, SKEW_NOTICE_MS, SWEEP_ERROR,
    SWEEP_SUMMARY, SweepReport, Swept, sweep, sweep_expiring, timeout_minutes,
};
pub use verify::{verify, verify_action, verify_observed, verify_range};
pub use write::{Options, Written};
