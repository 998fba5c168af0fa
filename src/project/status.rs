//! `status`: per lane and operation, where it stands: current status, start, end, duration,
//! attempts and failures.
//!
//! A **lane** is the producer's `repository:workflow/job`: the job that runs the operations,
//! whichever run, run attempt or step (component) recorded an event. The run and its attempt
//! are left out on purpose, so that a rerun (a new run attempt resuming an operation) folds into
//! the lane of the first run. Within a lane, operations are keyed by `operation_id`.
//!
//! Per operation: the event type, subject, status and reason of its greatest-ranked event
//! ([`Rank`]); `started_at` is the least `occurred_at`, `ended_at` the greatest when that
//! event's status is terminal ([`super::TERMINAL_STATUSES`]), `duration_ms` the difference;
//! `attempts` counts the distinct `attempt_id`s (at most `limits.entries` kept:
//! `attempts_truncated` says there were more), `failures` the events with status `failed`,
//! `events` all of them.
//!
//! View shape (`view` of the document): `{"lanes": {LANE: {OPERATION_ID: Operation}}}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Ev, IdSet, Limits, Projection, Rank, TERMINAL_STATUSES, millis_between, slot};

/// The `status` view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Lanes, then operations.
    pub lanes: BTreeMap<String, BTreeMap<String, Operation>>,
}

/// One operation of a lane.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// The `event_type` of the last event.
    pub event_type: String,
    /// The last event's subject (`owner/repo#N` or `owner/repo:kind`).
    pub subject: String,
    /// The last event's `action.status`.
    pub status: String,
    /// The last event's `action.reason_code`.
    pub reason_code: Option<String>,
    /// The least `occurred_at`.
    pub started_at: String,
    /// The last event's `occurred_at` when its status is terminal.
    pub ended_at: Option<String>,
    /// `ended_at - started_at` in milliseconds.
    pub duration_ms: Option<i64>,
    /// Distinct attempt ids seen (kept ones; see `attempts_truncated`).
    pub attempts: u64,
    /// More attempt ids were seen than kept.
    pub attempts_truncated: bool,
    /// Events with status `failed`.
    pub failures: u64,
    /// Events folded.
    pub events: u64,
    /// The smallest attempt ids (at most `limits.entries`).
    pub attempt_ids: IdSet,
    /// The rank of the last event.
    pub last: Rank,
}

impl Projection for Status {
    const NAME: &'static str = "status";
    const SCHEMA: &'static str = "action-ledger.project.status.v1";

    fn add(&mut self, e: &Ev<'_>, limits: &Limits) {
        let producer = |k: &str| e.text(&["producer", k]).unwrap_or("");
        let lane = format!(
            "{}:{}/{}",
            producer("repository"),
            producer("workflow"),
            producer("job")
        );
        let op = slot(slot(&mut self.lanes, &lane), e.operation_id);
        let first = op.events == 0;
        // The end and the duration follow the start and the last event only: recomputed when
        // either changes, not for every event.
        let mut moved = false;
        if first || e.rank.at < op.started_at {
            op.started_at = e.rank.at.clone();
            moved = true;
        }
        if first || e.rank > op.last {
            op.last = e.rank.clone();
            op.event_type = e.event_type.to_owned();
            op.subject = e.subject();
            op.status = e.status.to_owned();
            op.reason_code = e.reason.map(str::to_owned);
            moved = true;
        }
        op.events += 1;
        if e.status == "failed" {
            op.failures += 1;
        }
        op.attempt_ids.add(e.attempt_id, limits.entries);
        op.attempts = op.attempt_ids.ids.len() as u64;
        op.attempts_truncated = op.attempt_ids.truncated;
        if moved {
            if TERMINAL_STATUSES.contains(&op.status.as_str()) {
                op.ended_at = Some(op.last.at.clone());
                op.duration_ms = millis_between(&op.started_at, &op.last.at);
            } else {
                op.ended_at = None;
                op.duration_ms = None;
            }
        }
    }

    fn truncated(&self) -> u64 {
        self.lanes
            .values()
            .flat_map(BTreeMap::values)
            .filter(|o| o.attempts_truncated)
            .count() as u64
    }

    /// `<lane> op=<12 hex> <event type> <status[/reason]> <subject> started=<at>
    /// [ended=<at> duration_ms=<n>] attempts=<n>[+] failures=<n>`.
    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (lane, ops) in &self.lanes {
            for (id, o) in ops {
                let mut line = String::new();
                write_line(&mut line, lane, id, o);
                line.pop();
                out.push(line);
            }
        }
        out
    }

    fn write_lines(&self, out: &mut String) {
        for (lane, ops) in &self.lanes {
            for (id, o) in ops {
                write_line(out, lane, id, o);
            }
        }
    }
}

/// Appends the line of one operation, with its newline.
fn write_line(out: &mut String, lane: &str, id: &str, o: &Operation) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{lane} op={} {} {}",
        super::short(id),
        o.event_type,
        o.status
    );
    if let Some(r) = o.reason_code.as_deref()
        && r != o.status
    {
        let _ = write!(out, "/{r}");
    }
    let _ = write!(out, " {} started={}", o.subject, o.started_at);
    if let (Some(end), Some(ms)) = (&o.ended_at, o.duration_ms) {
        let _ = write!(out, " ended={end} duration_ms={ms}");
    }
    let more = if o.attempts_truncated { "+" } else { "" };
    let _ = writeln!(
        out,
        " attempts={}{more} failures={}",
        o.attempts, o.failures
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::{event, fold};
    use super::*;

    /// Start, failure, retry in a new attempt, completion: the last event wins whatever the
    /// order of folding, with the first start and both attempts.
    #[test]
    fn an_operation_retried_and_completed() {
        let events = [
            event(
                "review.item",
                "started",
                "op1",
                "a1",
                "2026-03-10T10:00:00.000Z",
                1,
            ),
            event(
                "review.item",
                "failed",
                "op1",
                "a1",
                "2026-03-10T10:01:00.000Z",
                2,
            ),
            event(
                "review.item",
                "started",
                "op1",
                "a2",
                "2026-03-10T10:05:00.000Z",
                1,
            ),
            event(
                "review.item",
                "completed",
                "op1",
                "a2",
                "2026-03-10T10:06:30.000Z",
                2,
            ),
        ];
        for order in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]] {
            let doc = fold::<Status>(order.iter().map(|&i| &events[i]), 20);
            let lane = &doc.view.lanes["example-org/widgets:review.yml/review"];
            let op = &lane["op1"];
            assert_eq!(op.status, "completed");
            assert_eq!(op.started_at, "2026-03-10T10:00:00.000Z");
            assert_eq!(op.ended_at.as_deref(), Some("2026-03-10T10:06:30.000Z"));
            assert_eq!(op.duration_ms, Some(390_000));
            assert_eq!((op.attempts, op.failures, op.events), (2, 1, 4));
            assert_eq!(
                doc.view.lines(),
                [
                    "example-org/widgets:review.yml/review op=op1 review.item completed \
                  example-org/widgets#7 started=2026-03-10T10:00:00.000Z \
                  ended=2026-03-10T10:06:30.000Z duration_ms=390000 attempts=2 failures=1"
                ]
            );
        }
    }

    /// An open operation has no end; attempts over the limit are cut and counted.
    #[test]
    fn open_operations_and_the_attempt_bound() {
        let events: Vec<_> = (0..5)
            .map(|i| {
                event(
                    "repair.execute",
                    "started",
                    "op2",
                    &format!("a{i}"),
                    &format!("2026-03-10T10:0{i}:00.000Z"),
                    1,
                )
            })
            .collect();
        let mut doc = fold::<Status>(events.iter(), 3);
        let op = &doc.view.lanes["example-org/widgets:review.yml/review"]["op2"];
        assert_eq!((op.ended_at.clone(), op.duration_ms), (None, None));
        assert_eq!(op.attempt_ids.ids, ["a0", "a1", "a2"]);
        assert!(op.attempts_truncated);
        assert!(doc.view.lines()[0].ends_with(" attempts=3+ failures=0"));
        doc.to_json();
        assert_eq!(doc.truncated, 1);
    }
}
