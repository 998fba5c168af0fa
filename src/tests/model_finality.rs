//! Model-based test of execution finality: random sequences of create, claim, outcome, legacy
//! close, sweep, approval, clock advances and concurrent claimers (threads racing on one
//! action), each run on a real state repository and on a small in-memory model of the rules,
//! compared after every step: the answer (granted or refused, and which actions a sweep took),
//! and every action's state read back (lifecycle, outcome, claim attempt, approval). At the end
//! of a sequence the repository is read back through the CLI (`action show --json`, `verify`)
//! and must equal the model too.
//!
//! The model restates the rules from the finality module docs, independently of the code:
//! the initial lifecycle of a verdict, the claim preconditions (running, no claim, no outcome,
//! same agent, a permissive verdict or an operator approval at most 15 minutes old), the
//! one-shot outcome with its closure table, the legacy close of a running action, the sweep of
//! pending outcomes created more than the timeout ago, and the single operator decision.
//!
//! The sequences run on a new repository (the default `hex2x2` layout and its pending index),
//! and on one in an older layout (`flat`, of repositories written before layouts were
//! versioned, or `nibble`, the default of 0.1.x), where a `Migrate` step (what `maintain` runs)
//! can move the records to the default at any point: the answers before and after it must
//! follow the same model.
#![cfg(test)]

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use crate::canonical::Value;
use crate::finality::batch::{self, Op as BatchOp};
use crate::finality::layout::{self, Layout};
use crate::finality::migrate;
use crate::finality::test_support::{default_act, new_action, options, repo};
use crate::finality::*;
use crate::store::Store;
use crate::time::Timestamp;

const T0: i64 = 1_772_366_400_000; // 2026-03-01T12:00:00Z
const MINUTE: i64 = 60_000;
const REF: &str = "refs/heads/main";
/// The actions of a sequence, each with the verdict it is created with.
const ACTIONS: [(&str, &str); 4] = [
    ("act_m0", "allow"),
    ("act_m1", "warn"),
    ("act_m2", "require_approval"),
    ("act_m3", "block"),
];

#[derive(Clone, Copy, Debug)]
enum AttemptKind {
    None,
    TheClaims,
    Wrong,
}

#[derive(Clone, Debug)]
enum Step {
    Create {
        a: usize,
        other_agent: bool,
    },
    Claim {
        a: usize,
        other_agent: bool,
    },
    Outcome {
        a: usize,
        status: &'static str,
        attempt: AttemptKind,
    },
    Close {
        a: usize,
        status: &'static str,
    },
    Sweep,
    Approve {
        a: usize,
        deny: bool,
    },
    Advance {
        minutes: i64,
        extra_ms: i64,
    },
    Race {
        a: usize,
        claimers: usize,
    },
    /// `maintain`'s layout migration.
    Migrate,
}

fn step() -> impl Strategy<Value = Step> {
    let a = 0..ACTIONS.len();
    prop_oneof![
        3 => (a.clone(), prop::bool::weighted(0.15))
            .prop_map(|(a, other_agent)| Step::Create { a, other_agent }),
        3 => (a.clone(), prop::bool::weighted(0.15))
            .prop_map(|(a, other_agent)| Step::Claim { a, other_agent }),
        2 => (
            a.clone(),
            prop::sample::select(vec!["completed", "partial", "failed"]),
            prop_oneof![Just(AttemptKind::None), Just(AttemptKind::TheClaims), Just(AttemptKind::Wrong)],
        )
            .prop_map(|(a, status, attempt)| Step::Outcome { a, status, attempt }),
        1 => (a.clone(), prop::sample::select(vec!["completed", "failed", "cancelled", "blocked"]))
            .prop_map(|(a, status)| Step::Close { a, status }),
        1 => Just(Step::Sweep),
        2 => (a.clone(), prop::bool::weighted(0.3)).prop_map(|(a, deny)| Step::Approve { a, deny }),
        2 => (
            prop::sample::select(vec![0i64, 1, 5, 14, 15, 16, 30]),
            prop::sample::select(vec![0i64, 0, 1, -1]),
        )
            .prop_map(|(minutes, extra_ms)| Step::Advance { minutes, extra_ms }),
        1 => (a, 2usize..5).prop_map(|(a, claimers)| Step::Race { a, claimers }),
    ]
}

/// The steps of a sequence on a repository of an older layout: those of [`step`], and the migration.
fn step_or_migrate() -> impl Strategy<Value = Step> {
    prop_oneof![12 => step(), 1 => Just(Step::Migrate)]
}

/// The model of one action.
#[derive(Clone, Debug)]
struct Action {
    agent: &'static str,
    verdict: &'static str,
    created_at: i64,
    /// `(approved, decided_at)`.
    approval: Option<(bool, i64)>,
    /// Nobody decided in time: the sweep expired the approval.
    expired: bool,
    claim: Option<String>,
    /// `(outcome status, lifecycle after it)`.
    outcome: Option<(&'static str, &'static str)>,
}

impl Action {
    fn initial(&self) -> &'static str {
        match self.verdict {
            "require_approval" => "pending_approval",
            "block" => "blocked",
            _ => "running",
        }
    }

    fn lifecycle(&self) -> &'static str {
        match (self.outcome, self.approval) {
            (Some((_, l)), _) => l,
            (None, _) if self.expired => "expired",
            (None, Some((true, _))) => "running",
            (None, Some((false, _))) => "failed",
            (None, None) => self.initial(),
        }
    }

    fn outcome_status(&self) -> &'static str {
        self.outcome.map_or("pending", |(s, _)| s)
    }

    fn claimable(&self, agent: &str, now: i64) -> bool {
        let approved_recently =
            matches!(self.approval, Some((true, at)) if now - at <= 15 * MINUTE);
        let permissive = matches!(self.verdict, "allow" | "warn");
        self.agent == agent
            && self.lifecycle() == "running"
            && self.claim.is_none()
            && self.outcome.is_none()
            && (permissive || (self.verdict == "require_approval" && approved_recently))
    }
}

#[derive(Default, Debug)]
struct Model {
    now: i64,
    actions: BTreeMap<usize, Action>,
    attempts: u64,
    /// The older layout the repository is in (it holds records and was not migrated).
    older: Option<Layout>,
    /// The sweeper's sightings: one writer whose clock is right, which witnesses the actions
    /// it creates, so the sweep times them from their creation.
    observations: Observations,
}

impl Model {
    fn fresh_attempt(&mut self) -> String {
        self.attempts += 1;
        format!("attempt-model-{:010}", self.attempts)
    }
}

fn verdict(v: &str) -> Verdict {
    Verdict::parse(v).expect("a verdict of the model")
}

fn agent(other: bool) -> &'static str {
    if other { "agent-b" } else { "agent-a" }
}

fn claim_request(attempt: &str, agent_id: &str) -> ClaimRequest {
    ClaimRequest {
        attempt_id: attempt.to_owned(),
        agent_id: Some(agent_id.to_owned()),
        principal: Some("principal-a".into()),
        act: Some(default_act()),
        verified: false,
    }
}

/// Runs `step` on the repository and on the model; fails when their answers differ.
fn run_step(
    store: &Store,
    path: &Path,
    model: &mut Model,
    step: &Step,
) -> Result<(), TestCaseError> {
    let opts = options(REF);
    let now = Timestamp::from_millis(model.now);
    match *step {
        Step::Create { a, other_agent } => {
            let (id, v) = ACTIONS[a];
            let mut input = new_action(id);
            input.verdict = verdict(v);
            input.agent_id = agent(other_agent).to_owned();
            let got = create_action(store, &opts, &input, now);
            if got.is_ok() {
                model
                    .observations
                    .witness(ActionId::parse(id).expect("an id"), now);
            }
            let expect_ok = match model.actions.get(&a) {
                None => {
                    model.actions.insert(
                        a,
                        Action {
                            agent: agent(other_agent),
                            verdict: v,
                            created_at: model.now,
                            approval: None,
                            expired: false,
                            claim: None,
                            outcome: None,
                        },
                    );
                    true
                }
                Some(m) => m.agent == agent(other_agent),
            };
            prop_assert_eq!(got.is_ok(), expect_ok, "{:?}: {:?}", step, got.err());
        }
        Step::Claim { a, other_agent } => {
            let attempt = model.fresh_attempt();
            let who = agent(other_agent);
            let got = claim(
                store,
                &opts,
                ACTIONS[a].0,
                &claim_request(&attempt, who),
                now,
            );
            let expect = model
                .actions
                .get(&a)
                .is_some_and(|m| m.claimable(who, model.now));
            prop_assert_eq!(got.is_ok(), expect, "{:?}: {:?}", step, got.err());
            if !expect {
                prop_assert!(
                    matches!(got, Err(Error::ClaimConflict { .. })),
                    "a refused claim is a claim conflict: {:?}",
                    got
                );
            }
            if expect {
                model.actions.get_mut(&a).expect("claimed").claim = Some(attempt);
            }
        }
        Step::Race { a, claimers } => {
            let attempts: Vec<String> = (0..claimers).map(|_| model.fresh_attempt()).collect();
            let barrier = std::sync::Barrier::new(claimers);
            let results: Vec<Result<Written<Claim>, Error>> = std::thread::scope(|scope| {
                let handles: Vec<_> = attempts
                    .iter()
                    .map(|attempt| {
                        let (barrier, opts) = (&barrier, &opts);
                        scope.spawn(move || {
                            let store = Store::open(path).expect("the repository opens");
                            barrier.wait();
                            claim(
                                &store,
                                opts,
                                ACTIONS[a].0,
                                &claim_request(attempt, "agent-a"),
                                now,
                            )
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a claimer thread"))
                    .collect()
            });
            let eligible = model
                .actions
                .get(&a)
                .is_some_and(|m| m.claimable("agent-a", model.now));
            let winners: Vec<&Claim> = results
                .iter()
                .filter_map(|r| r.as_ref().ok().map(|w| &w.value))
                .collect();
            prop_assert_eq!(
                winners.len(),
                usize::from(eligible),
                "{:?}: {:?}",
                step,
                results
            );
            prop_assert!(
                results
                    .iter()
                    .all(|r| r.is_ok() || matches!(r, Err(Error::ClaimConflict { .. }))),
                "every loser is a claim conflict: {:?}",
                results
            );
            if let Some(w) = winners.first() {
                model.actions.get_mut(&a).expect("claimed").claim =
                    Some(w.attempt_id.as_str().to_owned());
            }
        }
        Step::Outcome { a, status, attempt } => {
            let wrong = model.fresh_attempt();
            let current = model.actions.get(&a).and_then(|m| m.claim.clone());
            let attempt_id = match attempt {
                AttemptKind::None => None,
                AttemptKind::TheClaims => Some(current.clone().unwrap_or(wrong)),
                AttemptKind::Wrong => Some(wrong),
            };
            let report = OutcomeReport {
                status: status.to_owned(),
                summary: Some("model".into()),
                error_message: (status == "failed").then(|| "boom".to_owned()),
                progress: (status == "partial").then(|| Value::object([("done", Value::from(1))])),
                attempt_id: attempt_id.clone(),
            };
            let got = report_outcome(store, &opts, ACTIONS[a].0, &report, &Settler::Operator, now);
            let expect = model.actions.get(&a).is_some_and(|m| {
                m.outcome.is_none()
                    && matches!(m.lifecycle(), "running" | "pending")
                    && attempt_id
                        .as_ref()
                        .is_none_or(|x| Some(x) == current.as_ref())
            });
            prop_assert_eq!(got.is_ok(), expect, "{:?}: {:?}", step, got.err());
            if expect {
                let closed = if status == "completed" {
                    "completed"
                } else {
                    "failed"
                };
                model.actions.get_mut(&a).expect("reported").outcome = Some((status, closed));
            }
        }
        Step::Close { a, status } => {
            let got = close(
                store,
                &opts,
                ACTIONS[a].0,
                status,
                &CloseReport::summary(Some("model")),
                &Settler::Operator,
                now,
            );
            let expect = model
                .actions
                .get(&a)
                .is_some_and(|m| m.outcome.is_none() && m.lifecycle() == "running");
            prop_assert_eq!(got.is_ok(), expect, "{:?}: {:?}", step, got.err());
            if expect {
                let outcome = if status == "completed" {
                    "completed"
                } else {
                    "failed"
                };
                model.actions.get_mut(&a).expect("closed").outcome = Some((outcome, status));
            }
        }
        Step::Sweep => {
            let got = sweep(store, &opts, 15.0, now, &mut model.observations);
            let report = match got {
                Ok(w) => w.value,
                Err(e) => return Err(TestCaseError::fail(format!("sweep failed: {e}"))),
            };
            let mut expect: Vec<&str> = Vec::new();
            let mut expect_expired: Vec<&str> = Vec::new();
            for (&a, m) in model.actions.iter_mut() {
                let stale = model.now - m.created_at > 15 * MINUTE;
                let excluded = matches!(
                    m.lifecycle(),
                    "completed" | "failed" | "cancelled" | "blocked" | "expired"
                );
                // Awaiting an operator: expired after the default wait and grace (300 s + 15
                // min), never swept to lost_confirmation.
                if m.outcome.is_none()
                    && m.approval.is_none()
                    && m.lifecycle() == "pending_approval"
                {
                    if model.now - m.created_at > 20 * MINUTE {
                        m.expired = true;
                        expect_expired.push(ACTIONS[a].0);
                    }
                    continue;
                }
                if m.outcome.is_none() && stale && !excluded {
                    let after = match m.lifecycle() {
                        "running" | "pending" => "unknown",
                        other => other,
                    };
                    m.outcome = Some(("lost_confirmation", after));
                    expect.push(ACTIONS[a].0);
                }
            }
            let mut swept: Vec<&str> = report.swept.iter().map(|s| s.action_id.as_str()).collect();
            swept.sort_unstable();
            prop_assert_eq!(swept, expect, "{:?}", step);
            let mut expired: Vec<&str> = report.expired.iter().map(|s| s.as_str()).collect();
            expired.sort_unstable();
            prop_assert_eq!(expired, expect_expired, "{:?}", step);
            prop_assert!(
                report.lost.is_empty() && report.skipped.is_empty(),
                "{:?}",
                report
            );
        }
        Step::Approve { a, deny } => {
            let decision = if deny {
                ApprovalDecision::Deny
            } else {
                ApprovalDecision::Approve
            };
            let id = ACTIONS[a].0;
            let mut ops: Vec<BatchOp<'_, ()>> = vec![Box::new(move |ov, now| {
                let mut security = crate::finality::Security::default();
                batch::approve(ov, id, decision, "ops", None, &mut security, now).map(drop)
            })];
            let (results, _) = batch::land(store, &opts, &mut ops, &mut || now);
            let got = results.into_iter().next().expect("one result");
            let expect = model.actions.get(&a).is_some_and(|m| {
                m.outcome.is_none() && m.approval.is_none() && m.lifecycle() == "pending_approval"
            });
            prop_assert_eq!(got.is_ok(), expect, "{:?}: {:?}", step, got.err());
            if expect {
                model.actions.get_mut(&a).expect("decided").approval = Some((!deny, model.now));
            }
        }
        Step::Advance { minutes, extra_ms } => {
            model.now += minutes * MINUTE + extra_ms;
        }
        Step::Migrate => {
            let got = migrate::migrate(store, REF, &crate::finality::test_support::sig())
                .map_err(|e| TestCaseError::fail(format!("migrate: {e}")))?;
            if let Some(from) = model.older {
                prop_assert!(
                    matches!(got, migrate::Migrated::Moved { from: f, to: Layout::DEFAULT, .. } if f == from),
                    "{:?}",
                    got
                );
                model.older = None;
            } else {
                prop_assert!(
                    matches!(
                        got,
                        migrate::Migrated::AlreadyCurrent(Layout::DEFAULT)
                            | migrate::Migrated::Empty
                    ),
                    "{:?}",
                    got
                );
            }
        }
    }
    let detected = layout::detect(
        &store
            .snapshot(store.tip(REF).expect("tip"))
            .expect("snapshot"),
    )
    .map_err(|e| TestCaseError::fail(format!("layout: {e}")))?;
    if !detected.fresh {
        let want = model.older.unwrap_or(Layout::DEFAULT);
        prop_assert_eq!(detected.layout, want, "after {:?}", step);
    }
    Ok(())
}

/// Every action of the model read back from the repository.
fn compare_states(store: &Store, model: &Model, after: &Step) -> Result<(), TestCaseError> {
    for (a, (id, _)) in ACTIONS.iter().enumerate() {
        let got = show(store, REF, id);
        let Some(m) = model.actions.get(&a) else {
            prop_assert!(
                got.is_err(),
                "{id} exists after {after:?} but the model has none"
            );
            continue;
        };
        let st = got.map_err(|e| TestCaseError::fail(format!("{id}: {e}")))?;
        prop_assert_eq!(
            st.lifecycle().as_str(),
            m.lifecycle(),
            "{} after {:?}",
            id,
            after
        );
        prop_assert_eq!(
            st.outcome_status().as_str(),
            m.outcome_status(),
            "{} after {:?}",
            id,
            after
        );
        prop_assert_eq!(
            st.claim.as_ref().map(|c| c.attempt_id.as_str().to_owned()),
            m.claim.clone(),
            "{} after {:?}",
            id,
            after
        );
        prop_assert_eq!(
            st.approval
                .as_ref()
                .filter(|p| p.decision != ApprovalDecision::Expire)
                .map(|p| p.decision == ApprovalDecision::Approve),
            m.approval.map(|(approved, _)| approved),
            "{} after {:?}",
            id,
            after
        );
        prop_assert_eq!(st.action.agent_id.as_str(), m.agent);
        prop_assert_eq!(st.action.created_at, Timestamp::from_millis(m.created_at));
    }
    Ok(())
}

/// Runs the CLI in-process at the model's time; returns the exit code and stdout.
fn cli(now: i64, args: &[&str]) -> (i32, String) {
    let env = crate::cli::Env::from([
        ("SOURCE_DATE_EPOCH".to_owned(), "1772366400".to_owned()),
        (
            "ACTION_LEDGER_NOW".to_owned(),
            Timestamp::from_millis(now).to_iso_millis(),
        ),
    ]);
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv =
        std::iter::once("action-ledger".to_owned()).chain(args.iter().map(|a| a.to_string()));
    let code = crate::cli::run(argv, &env, &mut std::io::empty(), &mut out, &mut err);
    (code, String::from_utf8(out).expect("utf-8"))
}

/// The repository as the CLI shows it equals the model, and `verify` finds nothing.
fn compare_cli(path: &Path, model: &Model) -> Result<(), TestCaseError> {
    let repo = path.to_str().expect("a UTF-8 path");
    for (a, (id, _)) in ACTIONS.iter().enumerate() {
        let (code, out) = cli(model.now, &["action", "show", "--json", "--repo", repo, id]);
        let Some(m) = model.actions.get(&a) else {
            prop_assert_ne!(code, 0, "{} shown but absent from the model", id);
            continue;
        };
        prop_assert_eq!(code, 0, "action show {}", id);
        let shown: serde_json::Value = serde_json::from_str(&out).expect("action show --json");
        prop_assert_eq!(
            shown["lifecycle"].as_str(),
            Some(m.lifecycle()),
            "{}: {}",
            id,
            out
        );
        prop_assert_eq!(
            shown["outcome"]["status"].as_str().unwrap_or("pending"),
            m.outcome_status(),
            "{}: {}",
            id,
            out
        );
        prop_assert_eq!(
            shown["claim"]["attempt_id"].as_str().map(str::to_owned),
            m.claim.clone(),
            "{}: {}",
            id,
            out
        );
    }
    if !model.actions.is_empty() {
        let (code, out) = cli(model.now, &["-q", "verify", "--repo", repo]);
        prop_assert_eq!(code, 0, "verify: {}", out);
    }
    Ok(())
}

proptest! {
    #![proptest_config(super::prop_support::config(12))]

    #[test]
    fn finality_matches_its_model(steps in prop::collection::vec(step(), 1..32)) {
        let (dir, store) = repo();
        let path = dir.path().join("state.git");
        let mut model = Model { now: T0, ..Model::default() };
        for s in &steps {
            run_step(&store, &path, &mut model, s)?;
            compare_states(&store, &model, s)?;
        }
        compare_cli(&path, &model)?;
    }

    #[test]
    fn finality_matches_its_model_across_a_migration(
        older in prop_oneof![Just(Layout::Flat), Just(Layout::Nibble)],
        steps in prop::collection::vec(step_or_migrate(), 1..32),
    ) {
        let (dir, store) = repo();
        let path = dir.path().join("state.git");
        // A terminal action outside the model's four gives the repository records to move to
        // the older layout; no sweep or claim of the sequence can touch it.
        let (seed, opts) = ("act_seed", options(REF));
        let t0 = Timestamp::from_millis(T0);
        create_action(&store, &opts, &new_action(seed), t0).expect("seed created");
        claim(&store, &opts, seed, &crate::finality::test_support::request("attempt-seed-00000001"), t0)
            .expect("seed claimed");
        let done = OutcomeReport {
            status: "completed".into(),
            summary: None,
            error_message: None,
            progress: None,
            attempt_id: None,
        };
        report_outcome(&store, &opts, seed, &done, &Settler::Operator, t0).expect("seed completed");
        crate::finality::test_support::relayout(&store, older);
        let mut model = Model { now: T0, older: Some(older), ..Model::default() };
        for s in &steps {
            run_step(&store, &path, &mut model, s)?;
            compare_states(&store, &model, s)?;
        }
        compare_cli(&path, &model)?;
    }
}
