//! `commands`: the current state of every command a comment router handled, in the shape a
//! reader of the router's `results/comment-router.json` reads (one record per command: where
//! it came from, what it asks, where it stands, what its mutation did).
//!
//! A command is the operation of the `command` family's events (`command.received`,
//! `classified`, `claim_refreshed`, `progress`, `wait`, `mutation`, `requeue`, `recover`, and the
//! compatibility types `command.claimed` … `command.skipped`), keyed by `operation_id`: its
//! `command.mutation` events are about the pull request or issue acted on, the others about
//! the command itself (subject kind `command`, its comment in `subject_id`).
//!
//! Per command: the comment (`repository`, `number`, `comment_id`) from its events of subject
//! kind `command`; `target` from its events about another subject; `work_kind` and
//! `authorization` (`attributes.work_kind`, `attributes.state` of `command.classified`);
//! `status`, `phase` (the event type) and `reason_code` of its greatest-ranked event ([`Rank`]);
//! `received_at` (least `occurred_at`) and `updated_at`; the last mutation (status, reason,
//! `completion_reason`, when); `requeues` and `recoveries` counted; `attempts` (distinct ids,
//! at most `limits.entries` kept). Where events disagree on a value that should be constant
//! (the comment, the target, the work kind), the value of the greatest-ranked event carrying it
//! is kept.
//!
//! View shape: `{"commands": {OPERATION_ID: Command}}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Ev, IdSet, Limits, Projection, Rank, Ranked, keep, slot};

/// The `commands` view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Commands {
    /// Commands by operation id.
    pub commands: BTreeMap<String, Command>,
}

/// The last mutation of a command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mutation {
    /// `action.status` (`started`, `completed`, `failed`).
    pub status: String,
    /// `action.reason_code`.
    pub reason_code: Option<String>,
    /// `attributes.completion_reason` (`mutation_attempted`, `mutation_accepted`,
    /// `mutation_rejected`, `mutation_outcome_unknown`).
    pub completion_reason: Option<String>,
    /// Its rank (`at` is when).
    pub rank: Rank,
}

/// One command.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Command {
    /// The repository of the comment.
    pub repository: Option<Ranked>,
    /// The issue or pull request number the comment is on.
    pub number: Option<Ranked>,
    /// The comment (`subject_id` of the command's own events).
    pub comment_id: Option<Ranked>,
    /// What it acts on (`owner/repo#N` of its events about another subject).
    pub target: Option<Ranked>,
    /// `attributes.work_kind` (`close`, `reopen`, …).
    pub work_kind: Option<Ranked>,
    /// `attributes.state` of `command.classified` (`authorized`, …).
    pub authorization: Option<Ranked>,
    /// The last event's `action.status`.
    pub status: String,
    /// The last event's `event_type`.
    pub phase: String,
    /// The last event's `action.reason_code`.
    pub reason_code: Option<String>,
    /// The least `occurred_at`.
    pub received_at: String,
    /// The last event's `occurred_at`.
    pub updated_at: String,
    /// The last `command.mutation`.
    pub mutation: Option<Mutation>,
    /// `command.requeue` events.
    pub requeues: u64,
    /// `command.recover` events.
    pub recoveries: u64,
    /// Events with status `failed`.
    pub failures: u64,
    /// Distinct attempt ids (kept).
    pub attempts: u64,
    /// Events folded.
    pub events: u64,
    /// The smallest attempt ids (at most `limits.entries`).
    pub attempt_ids: IdSet,
    /// The rank of the last event.
    pub last: Rank,
}

impl Projection for Commands {
    const NAME: &'static str = "commands";
    const SCHEMA: &'static str = "action-ledger.project.commands.v1";

    fn add(&mut self, e: &Ev<'_>, limits: &Limits) {
        if e.family() != "command" {
            return;
        }
        let c = slot(&mut self.commands, e.operation_id);
        let r = &e.rank;
        if e.text(&["subject", "kind"]) == Some("command") {
            keep(&mut c.repository, e.text(&["subject", "repository"]), r);
            let number = e.number().map(|n| n.to_string());
            keep(&mut c.number, number.as_deref(), r);
            keep(&mut c.comment_id, e.text(&["subject", "subject_id"]), r);
        } else {
            keep(&mut c.target, Some(&e.subject()), r);
        }
        keep(&mut c.work_kind, e.attribute("work_kind").as_deref(), r);
        if e.event_type == "command.classified" {
            keep(&mut c.authorization, e.attribute("state").as_deref(), r);
        }
        if e.event_type == "command.mutation" && c.mutation.as_ref().is_none_or(|m| *r > m.rank) {
            c.mutation = Some(Mutation {
                status: e.status.to_owned(),
                reason_code: e.reason.map(str::to_owned),
                completion_reason: e.attribute("completion_reason"),
                rank: r.clone(),
            });
        }
        if c.events == 0 || r.at < c.received_at {
            c.received_at = r.at.clone();
        }
        if c.events == 0 || *r > c.last {
            c.last = r.clone();
            c.status = e.status.to_owned();
            c.phase = e.event_type.to_owned();
            c.reason_code = e.reason.map(str::to_owned);
            c.updated_at = r.at.clone();
        }
        c.events += 1;
        c.requeues += u64::from(e.event_type == "command.requeue");
        c.recoveries += u64::from(e.event_type == "command.recover");
        c.failures += u64::from(e.status == "failed");
        c.attempt_ids.add(e.attempt_id, limits.entries);
        c.attempts = c.attempt_ids.ids.len() as u64;
    }

    fn truncated(&self) -> u64 {
        self.commands
            .values()
            .filter(|c| c.attempt_ids.truncated)
            .count() as u64
    }

    /// `op=<12 hex> <repo>#<n> <comment> <work kind> <status[/reason]> <phase>
    /// [mutation=<status>/<completion reason>] requeues=<n> updated=<at>`.
    fn lines(&self) -> Vec<String> {
        let v = |r: &Option<Ranked>| r.as_ref().map_or("-", |r| r.value.as_str()).to_owned();
        self.commands
            .iter()
            .map(|(id, c)| {
                let mut line = format!(
                    "op={} {}#{} {} {} {} {}",
                    super::short(id),
                    v(&c.repository),
                    v(&c.number),
                    v(&c.comment_id),
                    v(&c.work_kind),
                    super::with_reason(&c.status, c.reason_code.as_deref()),
                    c.phase
                );
                if let Some(m) = &c.mutation {
                    let why = m.completion_reason.as_deref().unwrap_or(&m.status);
                    line.push_str(&format!(" mutation={}/{why}", m.status));
                }
                line.push_str(&format!(
                    " requeues={} updated={}",
                    c.requeues, c.updated_at
                ));
                line
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{event, fold, with};
    use super::*;

    /// Received, classified, a mutation that timed out, requeued, recovered, completed: the
    /// record a router reads, whatever the order of folding; other families are not commands.
    #[test]
    fn a_command_through_its_lifecycle() {
        let at = |m: u32| format!("2026-03-10T11:{m:02}:00.000Z");
        let cmd = serde_json::json!({"kind":"command","repository":"openclaw/openclaw",
            "number":41379,"subject_id":"comment-202624191"});
        let pr = serde_json::json!({"kind":"pull_request","repository":"openclaw/openclaw",
            "number":41379});
        let events = [
            with(
                event("command.received", "received", "c1", "a1", &at(0), 1),
                "subject",
                cmd.clone(),
            ),
            with(
                with(
                    event("command.classified", "classified", "c1", "a1", &at(1), 2),
                    "subject",
                    cmd.clone(),
                ),
                "attributes",
                serde_json::json!({"state":"authorized","work_kind":"close"}),
            ),
            with(
                with(
                    event("command.mutation", "failed", "c1", "a1", &at(2), 3),
                    "subject",
                    pr,
                ),
                "attributes",
                serde_json::json!({"completion_reason":"mutation_outcome_unknown"}),
            ),
            with(
                event("command.requeue", "requeued", "c1", "a1", &at(3), 4),
                "subject",
                cmd.clone(),
            ),
            with(
                event("command.recover", "recovered", "c1", "a1", &at(4), 5),
                "subject",
                cmd.clone(),
            ),
            with(
                event("command.progress", "completed", "c1", "a1", &at(5), 6),
                "subject",
                cmd,
            ),
            event("review.item", "started", "r1", "a9", &at(6), 1),
        ];
        let mut bytes = Vec::new();
        for order in [
            [0, 1, 2, 3, 4, 5, 6],
            [6, 5, 4, 3, 2, 1, 0],
            [3, 6, 0, 5, 2, 4, 1],
        ] {
            let mut doc = fold::<Commands>(order.iter().map(|&i| &events[i]), 20);
            assert_eq!(doc.view.commands.len(), 1);
            let c = &doc.view.commands["c1"];
            let v = |r: &Option<Ranked>| r.as_ref().map(|r| r.value.clone());
            assert_eq!(v(&c.comment_id).as_deref(), Some("comment-202624191"));
            assert_eq!(v(&c.number).as_deref(), Some("41379"));
            assert_eq!(v(&c.target).as_deref(), Some("openclaw/openclaw#41379"));
            assert_eq!(v(&c.work_kind).as_deref(), Some("close"));
            assert_eq!(v(&c.authorization).as_deref(), Some("authorized"));
            assert_eq!(
                (c.status.as_str(), c.phase.as_str()),
                ("completed", "command.progress")
            );
            let m = c.mutation.as_ref().unwrap();
            assert_eq!(
                m.completion_reason.as_deref(),
                Some("mutation_outcome_unknown")
            );
            assert_eq!(
                (c.requeues, c.recoveries, c.failures, c.events),
                (1, 1, 1, 6)
            );
            assert_eq!(
                (c.received_at.clone(), c.updated_at.clone()),
                (at(0), at(5))
            );
            assert_eq!(
                doc.view.lines(),
                [format!(
                    "op=c1 openclaw/openclaw#41379 comment-202624191 close completed \
                     command.progress mutation=failed/mutation_outcome_unknown requeues=1 \
                     updated={}",
                    at(5)
                )]
            );
            bytes.push(doc.to_json());
        }
        assert!(bytes.windows(2).all(|w| w[0] == w[1]));
    }
}
