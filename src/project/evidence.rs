//! `evidence`: the graph from review and apply claims to their sources.
//!
//! A **claim** is an event of the `review` or `apply` family that carries `evidence[]`; each of
//! its entries is a **source**, named `kind:<sha256 | snapshot_id | report_path | run_url>`
//! (the first the entry has). Claims are grouped by subject; per subject the newest
//! `limits.entries` claims by [`Rank`] are kept (`truncated` counts the rest), and the sources
//! are those of the kept claims.
//!
//! View shape: `{"subjects": {SUBJECT: {"claims_total", "truncated", "claims": [Claim]}},
//! "sources": {SOURCE: {"kind", "sha256", "snapshot_id", "report_path", "run_url", "claims"}}}`
//! (`sources` is rebuilt from the kept claims on every fold).
//!
//! DOT ([`Evidence::dot`]): `digraph evidence`, one box node per claim (labelled with its type,
//! status and subject), one ellipse node per source, an edge from each claim to each of its
//! sources; nodes and edges in key order.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Ev, Limits, Projection, Rank, keep_greatest, slot};
use crate::canonical::Value;

/// The `evidence` view.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Claims by subject.
    pub subjects: BTreeMap<String, Claims>,
    /// The sources of the kept claims, by name.
    pub sources: BTreeMap<String, Source>,
}

/// The claims of one subject.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    /// Claims folded for the subject.
    pub claims_total: u64,
    /// Claims left out (older than the kept ones).
    pub truncated: u64,
    /// The newest claims, ascending by rank.
    pub claims: Vec<Claim>,
}

/// One claim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// Its rank (`event_id` names the claim).
    pub rank: Rank,
    /// `event_type`.
    pub event_type: String,
    /// `action.status`.
    pub status: String,
    /// The names of its sources, in the event's `evidence[]` order.
    pub sources: Vec<String>,
}

/// One source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// `evidence[].kind`.
    pub kind: String,
    /// `evidence[].sha256`.
    pub sha256: Option<String>,
    /// `evidence[].snapshot_id`.
    pub snapshot_id: Option<String>,
    /// `evidence[].report_path`.
    pub report_path: Option<String>,
    /// `evidence[].run_url`.
    pub run_url: Option<String>,
    /// Kept claims that cite it.
    pub claims: u64,
}

impl Source {
    fn of(entry: &Value) -> Source {
        let text = |k: &str| entry.get(k).and_then(Value::as_str).map(str::to_owned);
        Source {
            kind: text("kind").unwrap_or_default(),
            sha256: text("sha256"),
            snapshot_id: text("snapshot_id"),
            report_path: text("report_path"),
            run_url: text("run_url"),
            claims: 0,
        }
    }

    fn details(&self) -> [&Option<String>; 4] {
        [
            &self.sha256,
            &self.snapshot_id,
            &self.report_path,
            &self.run_url,
        ]
    }

    /// `kind:<sha256 | snapshot_id | report_path | run_url>`.
    pub fn name(&self) -> String {
        let id = [
            &self.sha256,
            &self.snapshot_id,
            &self.report_path,
            &self.run_url,
        ]
        .into_iter()
        .find_map(Option::as_deref)
        .unwrap_or("");
        format!("{}:{id}", self.kind)
    }
}

impl Projection for Evidence {
    const NAME: &'static str = "evidence";
    const SCHEMA: &'static str = "action-ledger.project.evidence.v1";

    fn add(&mut self, e: &Ev<'_>, limits: &Limits) {
        if !matches!(e.family(), "review" | "apply") {
            return;
        }
        let Some(entries) = e.record.get("evidence").and_then(Value::as_array) else {
            return;
        };
        let sources: Vec<Source> = entries.iter().map(Source::of).collect();
        let c = slot(&mut self.subjects, &e.subject());
        c.claims_total += 1;
        c.claims.push(Claim {
            rank: e.rank.clone(),
            event_type: e.event_type.to_owned(),
            status: e.status.to_owned(),
            sources: sources.iter().map(Source::name).collect(),
        });
        keep_greatest(&mut c.claims, limits.entries, |x| &x.rank);
        c.truncated = c.claims_total - c.claims.len() as u64;
        for s in sources {
            // One name, differing details: the least details win, in any order.
            match self.sources.entry(s.name()) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(s);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    if s.details() < o.get().details() {
                        o.insert(s);
                    }
                }
            }
        }
    }

    fn finish(&mut self) {
        self.rebuild_counts();
    }

    fn truncated(&self) -> u64 {
        self.subjects.values().map(|c| c.truncated).sum()
    }

    /// `<subject> claim=<12 hex> <event type> <status> -> <source>` per claim and source.
    fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (subject, claims) in &self.subjects {
            for c in &claims.claims {
                for s in &c.sources {
                    out.push(format!(
                        "{subject} claim={} {} {} -> {s}",
                        super::short(&c.rank.event_id),
                        c.event_type,
                        c.status
                    ));
                }
            }
        }
        out
    }
}

impl Evidence {
    /// Recounts the claims of each source over the kept claims, dropping sources no kept claim
    /// cites.
    fn rebuild_counts(&mut self) {
        let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
        for c in self.subjects.values().flat_map(|s| &s.claims) {
            for name in &c.sources {
                *counts.entry(name).or_default() += 1;
            }
        }
        let counts: BTreeMap<String, u64> =
            counts.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        self.sources.retain(|name, s| match counts.get(name) {
            Some(n) => {
                s.claims = *n;
                true
            }
            None => false,
        });
    }

    /// The graph in Graphviz DOT (see the module docs).
    pub fn dot(&self) -> String {
        let q = |s: &str| serde_json::to_string(s).expect("a string serializes");
        let mut out = String::from("digraph evidence {\n  rankdir=LR;\n");
        for (subject, claims) in &self.subjects {
            for c in &claims.claims {
                let label = format!("{} {}\\n{subject}", c.event_type, c.status);
                let _ = writeln!(
                    out,
                    "  {} [shape=box,label={}];",
                    q(&c.rank.event_id),
                    q(&label).replace("\\\\n", "\\n")
                );
            }
        }
        for name in self.sources.keys() {
            let _ = writeln!(out, "  {} [shape=ellipse];", q(name));
        }
        for claims in self.subjects.values() {
            for c in &claims.claims {
                for s in &c.sources {
                    let _ = writeln!(out, "  {} -> {};", q(&c.rank.event_id), q(s));
                }
            }
        }
        out.push_str("}\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{event, fold, with};
    use super::*;

    /// A review claim and an apply claim citing one report: two claims, one shared source,
    /// the same graph in any order; an event without evidence is no claim.
    #[test]
    fn claims_and_their_sources() {
        let report = serde_json::json!([{"kind":"review_report",
            "report_path":"artifacts/reviews/x.json","sha256":"a".repeat(64)}]);
        let events = [
            with(
                event(
                    "review.item",
                    "completed",
                    "o1",
                    "a",
                    "2026-03-10T09:00:00.000Z",
                    2,
                ),
                "evidence",
                report.clone(),
            ),
            with(
                event(
                    "apply.action",
                    "executed",
                    "o2",
                    "b",
                    "2026-03-10T10:00:00.000Z",
                    3,
                ),
                "evidence",
                report,
            ),
            event(
                "review.item",
                "started",
                "o1",
                "a",
                "2026-03-10T08:59:00.000Z",
                1,
            ),
        ];
        let a = fold::<Evidence>(events.iter(), 20);
        let b = fold::<Evidence>(events.iter().rev(), 20);
        assert_eq!(a.view, b.view);
        let name = format!("review_report:{}", "a".repeat(64));
        assert_eq!(a.view.sources[&name].claims, 2);
        assert_eq!(a.view.subjects["example-org/widgets#7"].claims_total, 2);
        let dot = a.view.dot();
        assert!(dot.starts_with("digraph evidence {\n"));
        assert_eq!(dot.matches(" -> ").count(), 2, "{dot}");
        // With a bound of one, the older claim is left out and counted.
        let one = fold::<Evidence>(events.iter(), 1);
        assert_eq!(one.view.subjects["example-org/widgets#7"].truncated, 1);
        assert_eq!(one.view.sources[&name].claims, 1);
    }
}
