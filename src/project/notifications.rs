//! `notifications`: per notification, its delivery state.
//!
//! Two kinds of event carry delivery:
//! - the `notification.*` events (`planned`, `delivery`, `retried`, `skipped`, and the
//!   compatibility `notification.sent` / `notification.failed`), about a subject of kind
//!   `notification`: keyed `repository/subject_id`;
//! - `projection.failed`, which live projection writes when posting an event to CrabFleet
//!   failed (its parent is the event that was not delivered): keyed
//!   `crabfleet/<parent event id>`.
//!
//! Per notification: `state` from the status of its greatest-ranked event ([`Rank`]):
//! `sent` → `delivered`, `failed` → `failed`, `skipped` → `skipped`, `retried` → `retrying`,
//! anything else → `pending`; `delivery_kind` (`attributes.delivery_kind`, of the
//! greatest-ranked event carrying it); `deliveries` and `failures` counted (delivery events,
//! and events with status `failed`); the newest `limits.entries` attempts (`status`, reason,
//! rank) with `truncated` the rest.
//!
//! View shape: `{"notifications": {KEY: Notification}}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Ev, Limits, Projection, Rank, Ranked, keep, keep_greatest, slot};

/// The `notifications` view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Notifications {
    /// Notifications by key.
    pub notifications: BTreeMap<String, Notification>,
}

/// One notification.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// `delivered`, `failed`, `skipped`, `retrying` or `pending`.
    pub state: String,
    /// The last event's `action.status`.
    pub status: String,
    /// The last event's `action.reason_code`.
    pub reason_code: Option<String>,
    /// `attributes.delivery_kind` of the greatest-ranked event carrying it.
    pub delivery_kind: Option<Ranked>,
    /// The subject's repository.
    pub repository: String,
    /// Delivery events (`notification.delivery`, `.sent`, `.failed`, `projection.failed`).
    pub deliveries: u64,
    /// Events with status `failed`.
    pub failures: u64,
    /// Events folded.
    pub events: u64,
    /// Events left out of `history`.
    pub truncated: u64,
    /// The newest events, ascending.
    pub history: Vec<Step>,
}

/// One event of a notification.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Its rank.
    pub rank: Rank,
    /// `event_type`.
    pub event_type: String,
    /// `action.status`.
    pub status: String,
    /// `action.reason_code`.
    pub reason_code: Option<String>,
}

/// The delivery state of a last status.
pub fn state_of(status: &str) -> &'static str {
    match status {
        "sent" => "delivered",
        "failed" => "failed",
        "skipped" => "skipped",
        "retried" => "retrying",
        _ => "pending",
    }
}

impl Projection for Notifications {
    const NAME: &'static str = "notifications";
    const SCHEMA: &'static str = "action-ledger.project.notifications.v1";

    fn add(&mut self, e: &Ev<'_>, limits: &Limits) {
        let key = if e.event_type == "projection.failed" {
            format!("crabfleet/{}", e.parent.unwrap_or(""))
        } else if e.family() == "notification" {
            format!(
                "{}/{}",
                e.text(&["subject", "repository"]).unwrap_or(""),
                e.text(&["subject", "subject_id"]).unwrap_or("")
            )
        } else {
            return;
        };
        let n = slot(&mut self.notifications, &key);
        n.events += 1;
        n.deliveries += u64::from(matches!(
            e.event_type,
            "notification.delivery"
                | "notification.sent"
                | "notification.failed"
                | "projection.failed"
        ));
        n.failures += u64::from(e.status == "failed");
        keep(
            &mut n.delivery_kind,
            e.attribute("delivery_kind").as_deref(),
            &e.rank,
        );
        n.history.push(Step {
            rank: e.rank.clone(),
            event_type: e.event_type.to_owned(),
            status: e.status.to_owned(),
            reason_code: e.reason.map(str::to_owned),
        });
        keep_greatest(&mut n.history, limits.entries, |s| &s.rank);
        n.truncated = n.events - n.history.len() as u64;
        let last = n.history.last().expect("one was just added");
        n.status = last.status.clone();
        n.reason_code = last.reason_code.clone();
        n.state = state_of(&n.status).to_owned();
        if last.rank == e.rank {
            n.repository = e.text(&["subject", "repository"]).unwrap_or("").to_owned();
        }
    }

    fn truncated(&self) -> u64 {
        self.notifications.values().map(|n| n.truncated).sum()
    }

    /// `<key> <state> <status[/reason]> deliveries=<n> failures=<n> last=<at>`.
    fn lines(&self) -> Vec<String> {
        self.notifications
            .iter()
            .map(|(key, n)| {
                format!(
                    "{key} {} {} deliveries={} failures={} last={}",
                    n.state,
                    super::with_reason(&n.status, n.reason_code.as_deref()),
                    n.deliveries,
                    n.failures,
                    n.history.last().map_or("", |s| s.rank.at.as_str())
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{event, fold, with};
    use super::*;

    /// Planned, failed, retried, sent: delivered, in any order; a failed live projection is a
    /// failed delivery of its source event.
    #[test]
    fn delivery_states() {
        let subject = serde_json::json!({"kind":"notification","repository":"openclaw/clawhub",
            "subject_id":"digest-mail-1"});
        let at = |s: u32| format!("2026-03-10T12:00:{s:02}.000Z");
        let mut events: Vec<_> = [
            ("notification.planned", "planned", 1),
            ("notification.delivery", "failed", 2),
            ("notification.retried", "retried", 3),
            ("notification.delivery", "sent", 4),
        ]
        .iter()
        .map(|(t, s, n)| {
            with(
                event(t, s, "n1", "a1", &at(*n), u64::from(*n)),
                "subject",
                subject.clone(),
            )
        })
        .collect();
        let mut failed = event("projection.failed", "failed", "o", "a", &at(9), 2);
        failed["parent_event_id"] = serde_json::json!("e".repeat(64));
        events.push(failed);
        let a = fold::<Notifications>(events.iter(), 20);
        let b = fold::<Notifications>(events.iter().rev(), 20);
        assert_eq!(a.view, b.view);
        let n = &a.view.notifications["openclaw/clawhub/digest-mail-1"];
        assert_eq!(
            (n.state.as_str(), n.deliveries, n.failures),
            ("delivered", 2, 1)
        );
        let p = &a.view.notifications[&format!("crabfleet/{}", "e".repeat(64))];
        assert_eq!((p.state.as_str(), p.deliveries), ("failed", 1));
    }
}
