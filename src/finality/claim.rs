//! Claiming the execution of an action for one attempt: exactly one claimer ever wins.
//!
//! The claim is one commit adding `claim.json`, planned on the tip only if every precondition
//! holds there (the private `eligible`) and landed by a compare-and-swap of the ref from that tip. Two
//! claimers that both planned on the same tip cannot both land: the second swap finds the ref
//! moved, plans again on the new tip, sees the first claim and is refused. That is the whole
//! of exactly-one-claim; no lock is held while planning.

use super::act::{act_content_hash, check_act, scrub_act};
use super::batch::{self, run};
use super::error::Error;
use super::ids::{ActionId, AttemptId};
use super::records::Claim;
use super::state::State;
use super::status::{Lifecycle, Verdict};
use super::write::{Options, Written};
use crate::canonical::Value;
use crate::privacy;
use crate::store::Store;
use crate::time::Timestamp;

/// A claim request (the body of `PATCH /api/actions/{id}` plus what the caller's authentication says).
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
    /// Reads a claim body: an object with only `claim_execution` (exactly `true`),
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
            // `"act": null` is no act, as at creation.
            act: map.get("act").filter(|a| **a != Value::Null).cloned(),
            verified,
        })
    }
}

/// Why a claim is not eligible, named as the reference's refusal reasons name it (the
/// `claim_reason` of a claim folded into a guard request; a bare claim never says why, every
/// refusal is the one [`Error::ClaimConflict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimRefusal {
    /// Already claimed, or the outcome is decided.
    ClaimConflict,
    /// The claim does not match the binding (agent, principal, act hash), the action is not
    /// protocol 1, or its lifecycle is not `running`.
    NoCandidate,
    /// The creator's identity was verified and the caller's is not.
    IdentityUnverified,
    /// The action has no guard decision.
    NoDecisionId,
    /// An `allow_contained` verdict without a containment, or one that needs an approval it
    /// does not have.
    ContainmentMismatch,
    /// The verdict does not permit execution and no operator approval grants it.
    DecisionNotPermissive,
    /// The caller has no authenticated principal.
    MissingPrincipal,
}

impl ClaimRefusal {
    /// The reason's name (`claim_conflict`, `no_candidate`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimRefusal::ClaimConflict => "claim_conflict",
            ClaimRefusal::NoCandidate => "no_candidate",
            ClaimRefusal::IdentityUnverified => "identity_unverified",
            ClaimRefusal::NoDecisionId => "no_decision_id",
            ClaimRefusal::ContainmentMismatch => "containment_mismatch",
            ClaimRefusal::DecisionNotPermissive => "decision_not_permissive",
            ClaimRefusal::MissingPrincipal => "missing_principal",
        }
    }
}

/// The claim preconditions that apply without policy re-evaluation, checked once, in the
/// reference's order, for a claim by `agent_id` and `principal` of the act hashed `act_hash`
/// on `state` at `now`: not claimed or decided; the binding matches, protocol 1, lifecycle
/// `running`; a verified creator needs a verified caller; a guard decision; a permissive verdict
/// (`allow_contained` only with a containment ref), or `require_approval` (or an action born
/// `pending_approval`) with an operator approval that still grants
/// ([`approval::GRANT_WINDOW_MS`](super::approval::GRANT_WINDOW_MS)).
///
/// # Errors
/// The first precondition that fails, as a [`ClaimRefusal`].
pub(super) fn check_claim(
    state: &State,
    agent_id: &str,
    principal: &str,
    act_hash: &Option<String>,
    verified: bool,
    now: Timestamp,
) -> Result<(), ClaimRefusal> {
    let a = &state.action;
    if state.claim.is_some() || state.outcome.is_some() {
        return Err(ClaimRefusal::ClaimConflict);
    }
    if a.agent_id != agent_id
        || a.created_by != principal
        || a.act_content_hash != *act_hash
        || a.execution_protocol != Some(1)
        || state.lifecycle() != Lifecycle::Running
    {
        return Err(ClaimRefusal::NoCandidate);
    }
    if a.identity_verified && !verified {
        return Err(ClaimRefusal::IdentityUnverified);
    }
    if a.guard_decision_id.is_none() {
        return Err(ClaimRefusal::NoDecisionId);
    }
    let approved = state.approval.as_ref().is_some_and(|p| p.grants_at(now));
    let granted = (a.guard_verdict.is_permissive()
        || (a.guard_verdict == Verdict::RequireApproval && approved))
        && (a.lifecycle != Lifecycle::PendingApproval || approved)
        && (a.guard_verdict != Verdict::AllowContained || a.containment_ref.is_some());
    match (granted, a.guard_verdict) {
        (true, _) => Ok(()),
        (false, Verdict::AllowContained) => Err(ClaimRefusal::ContainmentMismatch),
        (false, _) => Err(ClaimRefusal::DecisionNotPermissive),
    }
}

/// The attempt id and the trimmed agent id of a claim request, the first checks of every claim.
///
/// # Errors
/// [`Error::InvalidClaim`] for a malformed attempt id, then [`Error::AgentIdentityRequired`]
/// for a missing or blank agent id.
pub(super) fn claimant(request: &ClaimRequest) -> Result<(AttemptId, &str), Error> {
    let attempt_id = AttemptId::parse(&request.attempt_id).ok_or(Error::InvalidClaim {
        reason: "attempt_id must match ^[A-Za-z0-9_-]{16,128}$",
    })?;
    let agent_id = request
        .agent_id
        .as_deref()
        .map(privacy::js_trim)
        .filter(|s| !s.is_empty())
        .ok_or(Error::AgentIdentityRequired)?;
    Ok((attempt_id, agent_id))
}

/// A claim request checked before anything is read: the attempt id and agent
/// ([`claimant`]), the act's numbers ([`check_act`]), the principal and the action id (`None`
/// when missing or malformed: a claim of nothing is a conflict, not a bad request) and the
/// scrubbed act's hash.
pub(super) struct ClaimInput<'r> {
    pub(super) attempt_id: AttemptId,
    pub(super) agent_id: &'r str,
    pub(super) principal: Option<&'r str>,
    pub(super) id: Option<ActionId>,
    pub(super) act_hash: Option<String>,
}

/// Checks `request` for `action_id` (see [`ClaimInput`]): the one place both the direct claim
/// and the server's group commit take a claim's body apart, so they accept the same requests.
///
/// # Errors
/// [`Error::InvalidClaim`], [`Error::AgentIdentityRequired`], and [`Error::InvalidInput`] for an
/// act with a lossy number.
pub(super) fn claim_input<'r>(
    action_id: &str,
    request: &'r ClaimRequest,
) -> Result<ClaimInput<'r>, Error> {
    let (attempt_id, agent_id) = claimant(request)?;
    if let Some(act) = &request.act {
        check_act(act)?;
    }
    Ok(ClaimInput {
        attempt_id,
        agent_id,
        principal: request
            .principal
            .as_deref()
            .map(privacy::js_trim)
            .filter(|s| !s.is_empty()),
        id: ActionId::parse(action_id),
        act_hash: act_content_hash(request.act.as_ref().map(scrub_act).as_ref()),
    })
}

/// The claim record `input` gets on `state` at `now` for `principal`, or `None` when the action
/// is not eligible (every ineligibility is one conflict to the caller).
pub(super) fn plan_claim(
    state: &State,
    input: &ClaimInput<'_>,
    principal: &str,
    verified: bool,
    now: Timestamp,
) -> Option<Claim> {
    check_claim(
        state,
        input.agent_id,
        principal,
        &input.act_hash,
        verified,
        now,
    )
    .ok()?;
    Some(Claim {
        action_id: state.action.action_id.clone(),
        attempt_id: input.attempt_id.clone(),
        binding_sha256: state.action_sha256.clone(),
        claimed_at: now,
        guard_decision_id: state
            .action
            .guard_decision_id
            .clone()
            .expect("eligible actions have a decision"),
    })
}

/// The commit-message line of a claim.
pub(super) fn claim_line(claim: &Claim) -> String {
    format!("claim {} for attempt {}", claim.action_id, claim.attempt_id)
}

/// Claims the execution of an action for one attempt: one commit adding
/// `claim.json`, landed only if no claim exists on the tip it was built on. Exactly one of any
/// number of concurrent claimers wins; every other gets [`Error::ClaimConflict`], as does any
/// later claim, including one that repeats the winning attempt id (nonces are single-use).
///
/// # Errors
/// [`Error::InvalidClaim`] (attempt id format), [`Error::AgentIdentityRequired`] and
/// [`Error::InvalidInput`] (an act with a lossy number, [`check_act`]) before anything is
/// read; [`Error::ClaimConflict`] for every ineligibility and a lost race;
/// [`Error::ClaimUnavailable`] when the claim could not be checked or written (I/O, a ref that
/// kept moving or stayed locked, a corrupt record, an unreachable remote) — never a conflict;
/// [`Error::RemoteRefused`] when the remote's hook refused the push.
pub fn claim(
    store: &Store,
    options: &Options,
    action_id: &str,
    request: &ClaimRequest,
    now: Timestamp,
) -> Result<Written<Claim>, Error> {
    // The body is refused before the tip is read.
    claim_input(action_id, request)?;
    run(store, options, now, |ov, now| {
        batch::claim(ov, action_id, request, now)
    })
    .map_err(|e| match e {
        // A refusal by the remote's hook, or a remote whose history was rewritten, is final and
        // reported as such, like a publication's.
        Error::ClaimConflict { .. }
        | Error::RemoteRefused(_)
        | Error::RemoteRewritten(_)
        | Error::ClaimUnavailable { .. } => e,
        other => Error::ClaimUnavailable {
            action_id: action_id.to_owned(),
            reason: other.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;
    use std::time::Duration;

    /// An I/O failure while claiming is EXECUTION_CLAIM_UNAVAILABLE, never a conflict.
    #[test]
    fn unwritable_repository_makes_the_claim_unavailable() {
        let (dir, store, opts, _) = repo_with_action();
        create_action(&store, &opts, &new_action("act_perm"), at(BASE)).unwrap();
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
        let result = claim(&store, &opts, "act_perm", &request(ATTEMPT), at(BASE));
        set(0o755);
        if !writable {
            let e = result.unwrap_err();
            assert_eq!(e.code(), "EXECUTION_CLAIM_UNAVAILABLE", "{e}");
        }
        // A ref lock held past the wait: unavailable, and nothing was granted, so a later claim
        // (with a fresh attempt id) succeeds (the reference's rollback scenario).
        let lock = dir.path().join("state.git/refs/heads/main.lock");
        std::fs::write(&lock, b"").unwrap();
        let mut short = options("refs/heads/main");
        short.lock_wait = Duration::from_millis(50);
        let e = claim(&store, &short, ACTION, &request(ATTEMPT), at(BASE)).unwrap_err();
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
            at(BASE),
        )
        .unwrap();
        assert_eq!(won.value.attempt_id.as_str(), "attempt-0000000003");
        // A corrupt action record is unavailable too, not a conflict (a missing one is).
        let e = claim(
            &store,
            &opts,
            "act_other",
            &request("attempt-0000000002"),
            at(BASE),
        );
        assert_eq!(e.unwrap_err().code(), "EXECUTION_CLAIM_CONFLICT");
        create_action(&store, &opts, &new_action("act_bad"), at(BASE)).unwrap();
        plant_unparsable_action(&store, "act_bad");
        let e = claim(
            &store,
            &opts,
            "act_bad",
            &request("attempt-0000000002"),
            at(BASE),
        )
        .unwrap_err();
        assert_eq!(e.code(), "EXECUTION_CLAIM_UNAVAILABLE", "{e}");
    }
}
