//! `containment.json`: an operator's one verdict on a contained action, promote or discard
//! (DashClaw's `POST /api/actions/{id}/containment`, RFC 2026-07-06 "containment verdicts").
//!
//! A contained action (guard verdict `allow_contained`) runs its effect in a containment (the
//! `containment_ref`, e.g. a branch) instead of in place. DashClaw keeps a mutable
//! `containment_status` column: `contained` at creation, `awaiting_promotion` once the agent
//! says the staged effect is ready (a `PATCH`), then `promoted` or `discarded` by an operator.
//! Here the status is a pure function of the action's files ([`status`]):
//!
//! - `contained`: the verdict is `allow_contained` and the contained run has not completed;
//! - `awaiting_promotion`: its outcome is `completed` (the contained run is done, so there is a
//!   staged effect to judge) and nobody resolved it yet;
//! - `promoted` or `discarded`: `containment.json` exists, with that verdict.
//!
//! The agent's `PATCH` flip is not needed (and `serve` still refuses `containment_status` on a
//! close): the completed outcome is the ledger's own signal that the staged effect is ready.
//!
//! The verdict is one create-only file, so two operators resolving at once have one winner and
//! the other is refused ([`Error::ContainmentNotAwaiting`]).
//! A promotion also creates, in the same commit, the grant DashClaw raises: an action of type
//! [`PROMOTION_ACTION_TYPE`] whose act is `git merge --no-ff <containment_ref>`
//! ([`promotion_act`]), for the same agent and principal, born `pending_approval` with the
//! operator's approval (so `running`, claimable once within the approval's 15 minutes), under
//! the id [`promotion_action_id`] derives from the contained action's. DashClaw stamps the grant
//! to the operator and lets the agent's retry consume it; here the contained action's own
//! principal claims it, the only principal a claim is ever granted to.

use std::fmt;

use super::batch::{self, Resolved, run};
use super::error::Error;
use super::ids::{ActionId, MAX_ID_UNITS};
use super::records::RecordError;
use super::records::{Fields, SCHEMA_VERSION, format_time, record_bytes, record_value};
use super::redaction::Security;
use super::state::State;
use super::status::{OutcomeStatus, Verdict};
use super::write::{Options, Written};
use crate::canonical::Value;
use crate::identity::Digest;
use crate::store::Store;
use crate::time::Timestamp;

/// `schema` of `containment.json`.
pub const CONTAINMENT_SCHEMA: &str = "action-ledger.finality-containment";

/// The action type of the grant a promotion creates (DashClaw's).
pub const PROMOTION_ACTION_TYPE: &str = "containment_promote";

string_enum! {
    /// The operator's verdict `containment.json` records.
    ContainmentVerdict {
        /// The staged effect lands: a promotion grant is created.
        Promote = "promote",
        /// The staged effect is thrown away.
        Discard = "discard",
    }
}

string_enum! {
    /// An action's `containment_status` (DashClaw's column), derived by [`status`].
    ContainmentStatus {
        /// Contained; its run has not completed.
        Contained = "contained",
        /// Its contained run completed; an operator may promote or discard it.
        AwaitingPromotion = "awaiting_promotion",
        /// Promoted by an operator.
        Promoted = "promoted",
        /// Discarded by an operator.
        Discarded = "discarded",
    }
}

impl ContainmentVerdict {
    /// The status this verdict leaves.
    pub fn status(self) -> ContainmentStatus {
        match self {
            ContainmentVerdict::Promote => ContainmentStatus::Promoted,
            ContainmentVerdict::Discard => ContainmentStatus::Discarded,
        }
    }
}

/// `containment.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Containment {
    /// The contained action.
    pub action_id: ActionId,
    /// Promote or discard.
    pub verdict: ContainmentVerdict,
    /// The operator principal (machine text, at most [`MAX_ID_UNITS`]).
    pub resolved_by: String,
    /// Resolution time.
    pub resolved_at: Timestamp,
    /// The operator's reasoning, redacted and truncated ([`clean_text`](super::clean_text));
    /// the key is written only when set.
    pub reasoning: Option<String>,
    /// The grant a promotion created ([`promotion_action_id`] of the action); `None` exactly
    /// for a discard.
    pub promotion_action_id: Option<ActionId>,
}

impl Containment {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        let mut value = Value::object([
            ("schema", Value::str(CONTAINMENT_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("verdict", Value::str(self.verdict.as_str())),
            ("resolved_by", Value::str(self.resolved_by.as_str())),
            ("resolved_at", Value::str(format_time(self.resolved_at))),
            (
                "promotion_action_id",
                self.promotion_action_id
                    .as_ref()
                    .map_or(Value::Null, |id| Value::str(id.as_str())),
            ),
        ]);
        if let (Some(r), Value::Object(map)) = (&self.reasoning, &mut value) {
            map.insert("reasoning".into(), Value::str(r.as_str()));
        }
        value
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

/// Parses `containment.json` bytes; `id` is the directory's action id.
///
/// # Errors
/// The first rule broken ([`RecordError`]: not canonical, wrong fields, another action, an
/// unknown verdict, an operator that is not machine text, a promotion without its grant's id or
/// a discard with one ([`RecordError::PromotionId`]), a grant id that is not the one
/// [`promotion_action_id`] derives).
pub fn parse_containment(bytes: &[u8], id: &ActionId) -> Result<Containment, RecordError> {
    let value = record_value(bytes)?;
    let f = Fields::with_optional(
        &value,
        CONTAINMENT_SCHEMA,
        &[
            "action_id",
            "promotion_action_id",
            "resolved_at",
            "resolved_by",
            "verdict",
        ],
        &["reasoning"],
    )?;
    let action_id = f.own_id("action_id", id, "directory's")?;
    let verdict = f.parsed("verdict", ContainmentVerdict::parse)?;
    let resolved_by = f.id("resolved_by")?;
    debug_assert!(resolved_by.len() <= MAX_ID_UNITS);
    let promotion = match f.opt_str("promotion_action_id")? {
        None => None,
        Some(s) => Some(ActionId::parse(s).ok_or_else(|| RecordError::Invalid {
            field: "promotion_action_id",
            value: s.to_owned(),
        })?),
    };
    let expected = (verdict == ContainmentVerdict::Promote).then(|| promotion_action_id(id));
    if promotion != expected {
        return Err(RecordError::PromotionId);
    }
    let reasoning = match value.as_object().and_then(|m| m.get("reasoning")) {
        None => None,
        Some(_) => Some(
            f.opt_text("reasoning")?
                .ok_or(RecordError::Null { field: "reasoning" })?
                .to_owned(),
        ),
    };
    Ok(Containment {
        action_id,
        verdict,
        resolved_by,
        resolved_at: f.time("resolved_at")?,
        reasoning,
        promotion_action_id: promotion,
    })
}

/// Whether `state`'s action is contained: its guard verdict is `allow_contained`.
pub fn is_contained(state: &State) -> bool {
    state.action.guard_verdict == Verdict::AllowContained
}

/// The action's `containment_status`: `None` for an action that is not contained; otherwise as
/// the module docs derive it.
pub fn status(state: &State) -> Option<ContainmentStatus> {
    if !is_contained(state) {
        return None;
    }
    Some(match &state.containment {
        Some(c) => c.verdict.status(),
        None if state.outcome_status() == OutcomeStatus::Completed => {
            ContainmentStatus::AwaitingPromotion
        }
        None => ContainmentStatus::Contained,
    })
}

/// The id of the grant a promotion of `contained` creates: `promote_` and the first 40 hex
/// digits of the SHA-256 of the contained action's id, so it fits an id whatever the contained
/// id's length, and `verify` can check that a verdict names its own grant.
pub fn promotion_action_id(contained: &ActionId) -> ActionId {
    let digest = Digest::of(contained.as_str().as_bytes());
    ActionId::parse(&format!("promote_{}", digest.prefix(40)))
        .expect("promote_ and 40 hex digits is an action id")
}

/// The act of a promotion grant (DashClaw's canonical promotion act): `{"kind": "shell",
/// "command": "git merge --no-ff <containment_ref>"}`. Its hash binds the grant's claim.
pub fn promotion_act(containment_ref: &str) -> Value {
    Value::object([
        ("kind", Value::str("shell")),
        (
            "command",
            Value::str(format!("git merge --no-ff {containment_ref}")),
        ),
    ])
}

/// Resolves the containment of a contained action awaiting promotion, alone through the batch
/// planner ([`batch::resolve_containment`], `action containment`): one commit adding
/// `containment.json` (and, for a promotion, the grant's records). Answers what was staged and
/// what the redaction of the reasoning found.
///
/// # Errors
/// As [`batch::resolve_containment`]; the write path's errors.
pub fn resolve_containment(
    store: &Store,
    options: &Options,
    action_id: &str,
    verdict: ContainmentVerdict,
    operator: &str,
    reasoning: Option<&str>,
    now: Timestamp,
) -> Result<Written<(Resolved, Security)>, Error> {
    run(store, options, now, |ov, now| {
        let mut security = Security::default();
        let resolved = batch::resolve_containment(
            ov,
            action_id,
            verdict,
            operator,
            reasoning,
            &mut security,
            now,
        )?;
        Ok((resolved, security))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::finality::test_support::*;
    use crate::finality::{
        ClaimRequest, OutcomeReport, RecordKind, Settler, claim, close, create_action,
        report_outcome,
    };

    const CONTAINED: &str = "act_contained";
    const REF: &str = "sandbox/main";

    /// A repository with [`ACTION`] (allowed) and [`CONTAINED`] (`allow_contained` with
    /// `containment_ref`), both created by `principal-a` at [`BASE`].
    fn repo_with_contained(containment_ref: Option<&str>) -> (tempfile::TempDir, Store, Options) {
        let (dir, store, opts, _) = repo_with_action();
        let mut input = new_action(CONTAINED);
        input.verdict = Verdict::AllowContained;
        input.containment_ref = containment_ref.map(str::to_owned);
        create_action(&store, &opts, &input, at(BASE)).unwrap();
        (dir, store, opts)
    }

    fn complete(store: &Store, opts: &Options, id: &str) {
        let report = OutcomeReport {
            status: "completed".into(),
            summary: Some("staged".into()),
            error_message: None,
            progress: None,
            attempt_id: None,
        };
        let by = Settler::Principal("principal-a".into());
        report_outcome(store, opts, id, &report, &by, at(BASE)).unwrap();
    }

    fn resolve(
        store: &Store,
        opts: &Options,
        id: &str,
        verdict: ContainmentVerdict,
        operator: &str,
    ) -> Result<Resolved, Error> {
        resolve_containment(store, opts, id, verdict, operator, Some("ok"), at(BASE))
            .map(|w| w.value.0)
    }

    fn tip_findings(store: &Store) -> Vec<(String, &'static str)> {
        let snap = store
            .snapshot(store.tip("refs/heads/main").unwrap())
            .unwrap();
        crate::finality::verify(&snap)
            .unwrap()
            .into_iter()
            .map(|f| (f.path.clone(), f.rule.code()))
            .collect()
    }

    /// Every refusal in DashClaw's order, then a promotion: the verdict is recorded once, the
    /// grant is running, approved by the operator and claimable by the contained action's agent
    /// and principal with the merge act; `verify` accepts it all.
    #[test]
    fn refusals_then_a_promotion_with_its_grant() {
        let (_dir, store, opts) = repo_with_contained(Some(REF));
        let promote = ContainmentVerdict::Promote;
        assert!(matches!(
            resolve(&store, &opts, "act_missing", promote, "ops-lead"),
            Err(Error::NotFound { .. })
        ));
        assert!(matches!(
            resolve(&store, &opts, CONTAINED, promote, " ops lead "),
            Err(Error::InvalidInput {
                field: "operator",
                ..
            })
        ));
        assert!(matches!(
            resolve(&store, &opts, CONTAINED, promote, "ops-lead"),
            Err(Error::ContainmentNotAwaiting {
                status: Some(ContainmentStatus::Contained),
                ..
            })
        ));
        complete(&store, &opts, ACTION);
        assert!(matches!(
            resolve(&store, &opts, ACTION, promote, "ops-lead"),
            Err(Error::ContainmentNotAwaiting { status: None, .. })
        ));
        complete(&store, &opts, CONTAINED);
        assert!(matches!(
            resolve(&store, &opts, CONTAINED, promote, "principal-a"),
            Err(Error::SelfApprovalForbidden { .. })
        ));
        let before = store.tip("refs/heads/main").unwrap();
        let resolved = resolve(&store, &opts, CONTAINED, promote, "ops-lead").unwrap();
        assert_ne!(store.tip("refs/heads/main").unwrap(), before);
        assert_eq!(status(&resolved.state), Some(ContainmentStatus::Promoted));
        let grant = resolved.promotion.expect("a promotion creates its grant");
        let grant_id = promotion_action_id(&ActionId::parse(CONTAINED).unwrap());
        assert_eq!(grant.action.action_id, grant_id);
        assert_eq!(grant.lifecycle(), crate::finality::Lifecycle::Running);
        assert_eq!(grant.action.created_by, "principal-a");
        assert_eq!(grant.approval.as_ref().unwrap().decided_by, "ops-lead");
        let shown = crate::finality::show(&store, "refs/heads/main", CONTAINED).unwrap();
        assert_eq!(
            shown.containment.as_ref().unwrap().reasoning.as_deref(),
            Some("ok")
        );
        // One-shot: a second verdict, either way, is refused and writes nothing.
        let tip = store.tip("refs/heads/main").unwrap();
        for verdict in [ContainmentVerdict::Discard, promote] {
            assert!(matches!(
                resolve(&store, &opts, CONTAINED, verdict, "ops-other"),
                Err(Error::ContainmentNotAwaiting {
                    status: Some(ContainmentStatus::Promoted),
                    ..
                })
            ));
        }
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip);
        // The grant is claimed with the merge act, by the contained action's agent and principal.
        let request = ClaimRequest {
            attempt_id: "attempt-promote-0001".into(),
            agent_id: Some("agent-a".into()),
            principal: Some("principal-a".into()),
            act: Some(promotion_act(REF)),
            verified: false,
        };
        claim(&store, &opts, grant_id.as_str(), &request, at(BASE)).unwrap();
        assert_eq!(tip_findings(&store), vec![]);
    }

    /// A discard creates no grant; a promotion of an action without a containment ref is
    /// refused, and its discard is accepted.
    #[test]
    fn a_discard_and_a_promotion_without_a_ref() {
        let (_dir, store, opts) = repo_with_contained(Some(REF));
        complete(&store, &opts, CONTAINED);
        let resolved = resolve(
            &store,
            &opts,
            CONTAINED,
            ContainmentVerdict::Discard,
            "ops-lead",
        )
        .unwrap();
        assert_eq!(status(&resolved.state), Some(ContainmentStatus::Discarded));
        assert!(resolved.promotion.is_none());
        let grant = promotion_action_id(&ActionId::parse(CONTAINED).unwrap());
        assert!(crate::finality::show(&store, "refs/heads/main", grant.as_str()).is_err());
        assert_eq!(tip_findings(&store), vec![]);

        let (_dir, store, opts) = repo_with_contained(None);
        let by = Settler::Principal("principal-a".into());
        close(
            &store,
            &opts,
            CONTAINED,
            "completed",
            &crate::finality::CloseReport::default(),
            &by,
            at(BASE),
        )
        .unwrap();
        assert!(matches!(
            resolve(
                &store,
                &opts,
                CONTAINED,
                ContainmentVerdict::Promote,
                "ops-lead"
            ),
            Err(Error::ContainmentRefMissing { .. })
        ));
        let resolved = resolve(
            &store,
            &opts,
            CONTAINED,
            ContainmentVerdict::Discard,
            "ops-lead",
        )
        .unwrap();
        assert_eq!(status(&resolved.state), Some(ContainmentStatus::Discarded));
        assert_eq!(tip_findings(&store), vec![]);
    }

    /// Two operators resolving at once, each with its own repository handle: exactly one
    /// verdict lands, the other is told the winner's status.
    #[test]
    fn two_resolvers_have_one_winner() {
        let (dir, store, opts) = repo_with_contained(Some(REF));
        complete(&store, &opts, CONTAINED);
        let path = dir.path().join("state.git");
        let barrier = std::sync::Barrier::new(2);
        let results: Vec<Result<Resolved, Error>> = std::thread::scope(|scope| {
            let handles: Vec<_> = [
                (ContainmentVerdict::Promote, "ops-one"),
                (ContainmentVerdict::Discard, "ops-two"),
            ]
            .into_iter()
            .map(|(verdict, operator)| {
                let (barrier, opts, path) = (&barrier, &opts, &path);
                scope.spawn(move || {
                    let store = Store::open(path).unwrap();
                    barrier.wait();
                    resolve(&store, opts, CONTAINED, verdict, operator)
                })
            })
            .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<&Resolved> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        let won = status(&winners[0].state).unwrap();
        assert!(results.iter().any(|r| matches!(
            r,
            Err(Error::ContainmentNotAwaiting { status: Some(s), .. }) if *s == won
        )));
        let shown = crate::finality::show(&store, "refs/heads/main", CONTAINED).unwrap();
        assert_eq!(status(&shown), Some(won));
        assert_eq!(tip_findings(&store), vec![]);
    }

    /// Lands `bytes` as `id`'s `containment.json` on `refs/heads/main`; its path.
    fn plant(store: &Store, id: &str, bytes: Vec<u8>) -> String {
        let tip = store.tip("refs/heads/main").unwrap();
        let path = crate::finality::Layout::DEFAULT
            .record_path(&ActionId::parse(id).unwrap(), RecordKind::Containment);
        let commit = store
            .write_commit_with(tip, &[(path.clone(), bytes)], &[], true, "plant", &sig())
            .unwrap();
        store
            .update_ref("refs/heads/main", tip, commit, "plant")
            .unwrap();
        path
    }

    /// `verify` refuses a verdict on an action that is not contained or whose run has not
    /// completed, and a record that does not parse, each with its rule.
    #[test]
    fn verify_refuses_misplaced_and_malformed_verdicts() {
        let discard = |id: &str| {
            let mut c = record(ContainmentVerdict::Discard);
            c.action_id = ActionId::parse(id).unwrap();
            c.to_bytes()
        };
        let (_dir, store, _opts) = repo_with_contained(Some(REF));
        let on_allowed = plant(&store, ACTION, discard(ACTION));
        let on_running = plant(&store, CONTAINED, discard(CONTAINED));
        let findings = tip_findings(&store);
        for path in [on_allowed, on_running] {
            assert!(
                findings.contains(&(path, "finality-lifecycle-mismatch")),
                "{findings:?}"
            );
        }
        let (_dir, store, _opts) = repo_with_contained(Some(REF));
        let broken = plant(&store, CONTAINED, b"{}\n".to_vec());
        assert!(tip_findings(&store).contains(&(broken, "finality-record-invalid")));
    }

    fn record(verdict: ContainmentVerdict) -> Containment {
        let id = ActionId::parse("act_c").unwrap();
        Containment {
            promotion_action_id: (verdict == ContainmentVerdict::Promote)
                .then(|| promotion_action_id(&id)),
            action_id: id,
            verdict,
            resolved_by: "ops-lead".into(),
            resolved_at: Timestamp::from_millis(1_772_366_400_000),
            reasoning: None,
        }
    }

    #[test]
    fn round_trip_and_refusals() {
        let id = ActionId::parse("act_c").unwrap();
        for verdict in [ContainmentVerdict::Promote, ContainmentVerdict::Discard] {
            let mut c = record(verdict);
            assert_eq!(parse_containment(&c.to_bytes(), &id).unwrap(), c);
            c.reasoning = Some("looks right".into());
            assert_eq!(parse_containment(&c.to_bytes(), &id).unwrap(), c);
        }
        let other = ActionId::parse("act_other").unwrap();
        assert!(matches!(
            parse_containment(&record(ContainmentVerdict::Discard).to_bytes(), &other),
            Err(RecordError::NotItsPath { .. })
        ));
        // A promotion without its grant, a discard with one, a grant of another action.
        let mut bad = record(ContainmentVerdict::Promote);
        bad.promotion_action_id = None;
        assert!(matches!(
            parse_containment(&bad.to_bytes(), &id),
            Err(RecordError::PromotionId)
        ));
        let mut bad = record(ContainmentVerdict::Discard);
        bad.promotion_action_id = Some(promotion_action_id(&id));
        assert!(matches!(
            parse_containment(&bad.to_bytes(), &id),
            Err(RecordError::PromotionId)
        ));
        let mut bad = record(ContainmentVerdict::Promote);
        bad.promotion_action_id = Some(promotion_action_id(&other));
        assert!(matches!(
            parse_containment(&bad.to_bytes(), &id),
            Err(RecordError::PromotionId)
        ));
        let text = String::from_utf8(record(ContainmentVerdict::Discard).to_bytes()).unwrap();
        let bad = text.replace("\"discard\"", "\"merge\"");
        assert!(matches!(
            parse_containment(bad.as_bytes(), &id),
            Err(RecordError::Invalid {
                field: "verdict",
                ..
            })
        ));
    }

    #[test]
    fn the_promotion_id_is_an_id_for_the_longest_ids() {
        let long = ActionId::parse(&"a".repeat(128)).unwrap();
        let p = promotion_action_id(&long);
        assert_eq!(p.as_str().len(), "promote_".len() + 40);
        assert_ne!(p, promotion_action_id(&ActionId::parse("act_c").unwrap()));
    }
}
