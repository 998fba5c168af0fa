//! `log`: the ledger's events in canonical order, filtered.
//!
//! It reads the ledger ref of `--ref` (the ref `publish --ref` writes) unless `--rev` names a
//! revision. Before anything is published to the repository (it holds no ref), the log is
//! empty (exit 0); a ref that does not exist beside others is an error naming it (exit 2). A
//! shard that fails `verify`'s checks of a shard, on its own or in its set, stops the log
//! (exit 2) before any of its events is printed. A closed stdout pipe stops the walk early.

use std::path::Path;

use crate::canonical::{self, Value};
use crate::log::Entry;
use crate::store::Store;
use crate::time::CalendarDate;

use crate::cli::output::{Failure, Printer};

/// Resolves the `log` flags into a filter.
pub(in crate::cli) fn filter(
    subject: Option<String>,
    operation: Option<String>,
    attempt: Option<String>,
    event_types: Vec<String>,
    producer: Option<String>,
    since: Option<String>,
    until: Option<String>,
) -> Result<crate::log::Filter, Failure> {
    let (repository, number) = match subject {
        None => (None, None),
        Some(s) => {
            let (repo, number) = match s.split_once('#') {
                Some((r, n)) => (
                    r.to_owned(),
                    Some(n.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        Failure::input(format!(
                            "--subject {s}: the number after # must be a positive integer"
                        ))
                    })?),
                ),
                None => (s.clone(), None),
            };
            let repo = crate::identity::normalize_repository(&repo).map_err(|e| {
                Failure::input(format!(
                    "--subject {s}: {e}; give OWNER/NAME or OWNER/NAME#NUMBER"
                ))
            })?;
            (Some(repo), number)
        }
    };
    let hex = |flag: &str, v: Option<String>| -> Result<Option<String>, Failure> {
        match v {
            Some(x)
                if x.is_empty() || !x.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Err(Failure::input(format!(
                    "{flag} {x}: give lowercase hex (a prefix is enough)"
                )))
            }
            other => Ok(other),
        }
    };
    let date = |flag: &str, v: Option<String>| -> Result<Option<CalendarDate>, Failure> {
        v.map(|d| {
            CalendarDate::parse(&d)
                .ok_or_else(|| Failure::input(format!("{flag} {d}: give a date as YYYY-MM-DD")))
        })
        .transpose()
    };
    Ok(crate::log::Filter {
        repository,
        number,
        operation: hex("--operation", operation)?,
        attempt: hex("--attempt", attempt)?,
        event_types,
        producer,
        since: date("--since", since)?,
        until: date("--until", until)?,
    })
}

/// Runs `log` with its resolved filter, in `order`; with `--operation`, the operation's
/// events grouped by attempt in causal order (each group headed by an `attempt` line in the
/// human format).
pub(in crate::cli) fn run(
    out: &mut Printer,
    repo: &Path,
    read: &crate::cli::cmd::verify::Read<'_>,
    json: bool,
    order: crate::log::Order,
    filter: &crate::log::Filter,
) -> Result<(), Failure> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Failure::input(format!("cannot read the log of {}: {e}", repo.display()))
    };
    let store = Store::open(repo).map_err(|e| unreadable(&e))?;
    let rev = read.name();
    // Nothing published to the repository yet (it holds no ref at all): an empty log, not an
    // error. A ref missing beside others is one: the log of a mistyped ref is not empty.
    let empty = store.ref_names(1).map_err(|e| unreadable(&e))?.is_empty();
    let commit = match read.resolve(&store) {
        Ok(commit) => commit,
        Err(e @ crate::store::Error::NoLedger { .. }) if empty => {
            let message = read.explain(&store, &e);
            out.note(&format!("log of {rev}: {message}; nothing to show"));
            return Ok(());
        }
        Err(e) => return Err(unreadable(&read.explain(&store, &e))),
    };
    let snap = store.snapshot(Some(commit)).map_err(|e| unreadable(&e))?;
    let view = crate::view::View::new(&snap);
    let meter = out.meter();
    let print = |out: &mut Printer, entry: &crate::log::Entry<'_>| {
        if json {
            out.data(entry.json);
        } else {
            out.text(&columns(entry));
        }
    };
    let stats = if filter.operation.is_some() {
        let (held, stats) =
            crate::log::ordered(&view, filter, crate::log::Order::Canonical, &meter)
                .map_err(|e| unreadable(&e))?;
        let groups = crate::log::follow(held);
        let attempts = groups.len();
        for (n, (attempt, events)) in groups.iter().enumerate() {
            if !json {
                let first = events.first().map(|h| h.entry());
                let producer = first
                    .as_ref()
                    .and_then(|e| e.value.get("producer"))
                    .map(|p| {
                        let f = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("");
                        let attempt_no = p
                            .get("run_attempt")
                            .and_then(crate::canonical::Value::as_safe_integer)
                            .unwrap_or(0);
                        format!(
                            "{} {} run {}/{attempt_no} job {}",
                            f("repository"),
                            f("workflow"),
                            f("run_id"),
                            f("job")
                        )
                    })
                    .unwrap_or_default();
                out.text(&format!(
                    "attempt #{} of {attempts}: {}, {} event(s), {producer}",
                    n + 1,
                    if attempt.is_empty() {
                        "(none)"
                    } else {
                        attempt
                    },
                    events.len()
                ));
            }
            for h in events {
                print(out, &h.entry());
            }
            if out.broken.is_some() {
                break;
            }
        }
        stats
    } else if order == crate::log::Order::Time {
        let (held, stats) =
            crate::log::ordered(&view, filter, order, &meter).map_err(|e| unreadable(&e))?;
        for h in &held {
            print(out, &h.entry());
            if out.broken.is_some() {
                break;
            }
        }
        stats
    } else {
        crate::log::stream_observed(&view, filter, &meter, &mut |entry| {
            meter.suspend(|| print(out, entry));
            if out.broken.is_some() {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        })
        .map_err(|e| unreadable(&e))?
    };
    out.note(&format!(
        "log of {rev} ({}): {} of {} event(s) from {} shard(s)",
        commit.to_hex(),
        stats.matched,
        stats.events,
        stats.shards
    ));
    Ok(())
}

/// One readable line for an event, its fields separated by one space:
/// `<occurred_at> <event_type> <status> <subject> <producer component> [op=<12 hex>]
/// [attempt=<12 hex>] event=<12 hex>`, where subject is `owner/name#number` (or the repository
/// and kind when there is no number) and status is `action.status` (with `/reason_code` when it
/// says more). [`columns`] is the same line aligned for a terminal.
#[cfg(test)]
fn human(entry: &Entry<'_>) -> String {
    line_of(entry, [0; 4])
}

/// [`human`] in columns, as `log` prints it: time, type, status and subject padded to 24, 28,
/// 20 and 32 characters (the usual widths; a longer value pushes the rest of its line).
fn columns(entry: &Entry<'_>) -> String {
    line_of(entry, [24, 28, 20, 32])
}

/// The readable line with the first four fields padded to `widths`.
fn line_of(entry: &Entry<'_>, widths: [usize; 4]) -> String {
    let v = entry.value;
    let s = |path: &[&str]| {
        let mut cur = v;
        for k in path {
            match cur.get(k) {
                Some(x) => cur = x,
                None => return String::new(),
            }
        }
        match cur {
            Value::String(x) => x.clone(),
            Value::Null => String::new(),
            other => canonical::to_canonical_unchecked(other),
        }
    };
    let short = |x: String| x.chars().take(12).collect::<String>();
    let repo = s(&["subject", "repository"]);
    let subject = match v.get("subject").and_then(|x| x.get("number")) {
        Some(n) if !matches!(n, Value::Null) => format!("{repo}#{}", s(&["subject", "number"])),
        _ => format!("{repo} ({})", s(&["subject", "kind"])),
    };
    let mut status = s(&["action", "status"]);
    let reason = s(&["action", "reason_code"]);
    if !reason.is_empty() && reason != status {
        status = format!("{status}/{reason}");
    }
    let [w0, w1, w2, w3] = widths;
    let mut out = format!(
        "{:<w0$} {:<w1$} {:<w2$} {:<w3$} {}",
        s(&["occurred_at"]),
        s(&["event_type"]),
        if status.is_empty() {
            "-".into()
        } else {
            status
        },
        subject,
        s(&["producer", "component"]),
    );
    for (label, key) in [("op", "operation_id"), ("attempt", "attempt_id")] {
        let id = s(&[key]);
        if !id.is_empty() {
            out.push_str(&format!(" {label}={}", short(id)));
        }
    }
    out.push_str(&format!(" event={}", short(s(&["event_id"]))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_of(value: &Value, f: impl FnOnce(&Entry<'_>)) {
        let json = canonical::to_canonical_unchecked(value);
        f(&Entry {
            date: "2026-03-10",
            path: "ledger/v1/events/2026/03/10/x.jsonl",
            line: 1,
            json: &json,
            value,
        });
    }

    #[test]
    fn the_readable_line_names_the_event_and_columns_only_pad_it() {
        let v = canonical::parse(
            r#"{"occurred_at":"2026-03-10T00:00:01.000Z","event_type":"repair.plan",
                "action":{"status":"failed","reason_code":"worker_lost"},
                "subject":{"repository":"openclaw/openclaw","kind":"issue","number":7},
                "producer":{"component":"repair.run.default"},
                "operation_id":"0123456789abcdef","event_id":"fedcba9876543210"}"#,
        )
        .unwrap();
        entry_of(&v, |e| {
            let plain = human(e);
            assert_eq!(
                plain,
                "2026-03-10T00:00:01.000Z repair.plan failed/worker_lost openclaw/openclaw#7 \
                 repair.run.default op=0123456789ab event=fedcba987654"
            );
            let aligned = columns(e);
            assert_eq!(
                plain.split_whitespace().collect::<Vec<_>>(),
                aligned.split_whitespace().collect::<Vec<_>>()
            );
            // Type and status start at fixed columns when the values fit.
            assert_eq!(&aligned[25..25 + "repair.plan".len()], "repair.plan");
            assert_eq!(
                &aligned[54..54 + "failed/worker_lost".len()],
                "failed/worker_lost"
            );
        });
        // No number: the repository and the kind; no status: `-`.
        let v = canonical::parse(
            r#"{"occurred_at":"t","event_type":"x","subject":{"repository":"o/n","kind":"pull"},
                "event_id":"e"}"#,
        )
        .unwrap();
        entry_of(&v, |e| assert_eq!(human(e), "t x - o/n (pull)  event=e"));
    }
}
