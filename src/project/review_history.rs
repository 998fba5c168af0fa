//! `review-history`: per subject (`owner/repo#N`), the newest review events, bounded, and the
//! marker-backed comment body a review bot keeps on the issue or pull request.
//!
//! Folded: the events of the `review` family (`review.item`, `review.retry`,
//! `review.comment_publication`, `review.batch`, … and the compatibility types
//! `review.started` … `review.published`) whose subject has a number. Per subject the newest
//! `limits.entries` entries by [`Rank`] are kept, ascending; `events` counts every one folded
//! and `truncated` those left out (`events - entries.len()`).
//!
//! View shape: `{"subjects": {"owner/repo#N": {"events", "truncated", "entries": [Entry]}}}`.
//!
//! Markdown ([`ReviewHistory::markdown`]): per subject, in subject order, a comment body whose
//! first line is the marker `<!-- action-ledger:review-history owner/repo#N -->` (a bot finds
//! its comment by it and edits it in place), a heading, one list line per entry (newest first),
//! and a line saying how many older entries were left out; bodies are separated by a blank
//! line.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Ev, Limits, Projection, Rank, keep_greatest, slot};

/// The `review-history` view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReviewHistory {
    /// Subjects by `owner/repo#N`.
    pub subjects: BTreeMap<String, History>,
}

/// The bounded history of one subject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Review events folded for the subject.
    pub events: u64,
    /// Events left out (older than the kept entries).
    pub truncated: u64,
    /// The newest entries, ascending by rank.
    pub entries: Vec<Entry>,
}

/// One review event of a subject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Its rank (`at` is `occurred_at`).
    pub rank: Rank,
    /// `event_type`.
    pub event_type: String,
    /// `action.status`.
    pub status: String,
    /// `action.reason_code`.
    pub reason_code: Option<String>,
    /// The producer's `run_id/run_attempt`.
    pub run: String,
    /// `subject.source_revision` (the commit reviewed).
    pub source_revision: Option<String>,
    /// `attributes.model`.
    pub model: Option<String>,
    /// `attributes.finding_count`.
    pub finding_count: Option<String>,
    /// The `report_path` of its first evidence entry that has one.
    pub report_path: Option<String>,
}

impl Projection for ReviewHistory {
    const NAME: &'static str = "review-history";
    const SCHEMA: &'static str = "action-ledger.project.review-history.v1";

    fn add(&mut self, e: &Ev<'_>, limits: &Limits) {
        if e.family() != "review" || e.number().is_none() {
            return;
        }
        let report_path = e
            .record
            .get("evidence")
            .and_then(crate::canonical::Value::as_array)
            .and_then(|ev| {
                ev.iter()
                    .find_map(|x| x.get("report_path").and_then(|p| p.as_str()))
            })
            .map(str::to_owned);
        let run = format!(
            "{}/{}",
            e.text(&["producer", "run_id"]).unwrap_or(""),
            e.record
                .get("producer")
                .and_then(|p| p.get("run_attempt"))
                .and_then(crate::canonical::Value::as_safe_integer)
                .unwrap_or(0)
        );
        let h = slot(&mut self.subjects, &e.subject());
        h.events += 1;
        h.entries.push(Entry {
            rank: e.rank.clone(),
            event_type: e.event_type.to_owned(),
            status: e.status.to_owned(),
            reason_code: e.reason.map(str::to_owned),
            run,
            source_revision: e.text(&["subject", "source_revision"]).map(str::to_owned),
            model: e.attribute("model"),
            finding_count: e.attribute("finding_count"),
            report_path,
        });
        keep_greatest(&mut h.entries, limits.entries, |x| &x.rank);
        h.truncated = h.events - h.entries.len() as u64;
    }

    fn truncated(&self) -> u64 {
        self.subjects.values().map(|h| h.truncated).sum()
    }

    /// `<subject> events=<n> truncated=<n> last=<at> <event type> <status[/reason]>`.
    fn lines(&self) -> Vec<String> {
        self.subjects
            .iter()
            .filter_map(|(subject, h)| {
                let last = h.entries.last()?;
                Some(format!(
                    "{subject} events={} truncated={} last={} {} {}",
                    h.events,
                    h.truncated,
                    last.rank.at,
                    last.event_type,
                    super::with_reason(&last.status, last.reason_code.as_deref())
                ))
            })
            .collect()
    }
}

/// The marker line of a subject's comment body.
pub fn marker(subject: &str) -> String {
    format!("<!-- action-ledger:review-history {subject} -->")
}

impl ReviewHistory {
    /// The marker-backed comment bodies (see the module docs).
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for (subject, h) in &self.subjects {
            if !out.is_empty() {
                out.push('\n');
            }
            let _ = writeln!(out, "{}", marker(subject));
            let _ = writeln!(out, "### Review history of {subject}\n");
            for e in h.entries.iter().rev() {
                let mut status = e.status.clone();
                if let Some(r) = e.reason_code.as_ref().filter(|r| **r != e.status) {
                    let _ = write!(status, " ({r})");
                }
                let _ = write!(
                    out,
                    "- {} `{}` **{status}**, run {}",
                    e.rank.at, e.event_type, e.run
                );
                if let Some(rev) = &e.source_revision {
                    let _ = write!(out, ", at `{}`", &rev[..rev.len().min(12)]);
                }
                if let Some(m) = &e.model {
                    let _ = write!(out, ", model `{m}`");
                }
                if let Some(n) = &e.finding_count {
                    let _ = write!(out, ", {n} finding(s)");
                }
                if let Some(p) = &e.report_path {
                    let _ = write!(out, ", report `{p}`");
                }
                out.push('\n');
            }
            if h.truncated > 0 {
                let _ = writeln!(out, "\n_{} older event(s) not shown._", h.truncated);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{event, fold};
    use super::*;

    /// The newest entries are kept whatever the order, the rest counted; the body starts with
    /// the marker and lists the newest first.
    #[test]
    fn bounded_history_and_its_comment_body() {
        let events: Vec<_> = (0..6)
            .map(|i| {
                event(
                    "review.item",
                    if i % 2 == 0 { "started" } else { "completed" },
                    &format!("op{}", i / 2),
                    "a1",
                    &format!("2026-03-10T09:0{i}:00.000Z"),
                    1 + i % 2,
                )
            })
            .collect();
        let forward = fold::<ReviewHistory>(events.iter(), 4);
        let backward = fold::<ReviewHistory>(events.iter().rev(), 4);
        assert_eq!(forward.view, backward.view);
        let h = &forward.view.subjects["example-org/widgets#7"];
        assert_eq!((h.events, h.truncated, h.entries.len()), (6, 2, 4));
        assert_eq!(h.entries[0].rank.at, "2026-03-10T09:02:00.000Z");
        let md = forward.view.markdown();
        assert!(md.starts_with("<!-- action-ledger:review-history example-org/widgets#7 -->\n"));
        let first = md.lines().find(|l| l.starts_with("- ")).unwrap();
        assert!(first.starts_with("- 2026-03-10T09:05:00.000Z"), "{first}");
        assert!(md.ends_with("_2 older event(s) not shown._\n"), "{md}");
        // Not a review, or no number: not in the history.
        let other = fold::<ReviewHistory>(
            [event(
                "apply.action",
                "planned",
                "x",
                "a",
                "2026-03-10T09:00:00.000Z",
                1,
            )]
            .iter(),
            4,
        );
        assert!(other.view.subjects.is_empty());
    }
}
