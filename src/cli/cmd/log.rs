//! `log`: the ledger's events in canonical order, filtered.
//!
//! It reads the ledger ref of `--ref` (the ref `publish --ref` writes) unless `--rev` names a
//! revision. Before anything is published to the repository (it holds no ref), the log is
//! empty (exit 0); a ref that does not exist beside others is an error naming it (exit 2). A
//! shard that fails `verify`'s checks of a shard, on its own or in its set, stops the log
//! (exit 2) before any of its events is printed. A closed stdout pipe stops the walk early.

use std::path::Path;

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
            out.data(&crate::log::columns(entry));
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
                out.data(&format!(
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
