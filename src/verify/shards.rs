//! The checks of one shard file on its own (shared with `log`), and the pipeline that reads
//! shards in batches on one thread while the batch before is prepared on all cores.

use std::sync::Arc;

use super::*;

/// One shard read and checked on its own, ahead of its set's checks: the part of verification
/// that needs no shared state, so that [`verify_revision_with`] runs it on worker threads.
pub(super) struct Prepared {
    /// Events parsed (counted even when a later check of the file fails).
    pub(super) events: usize,
    /// Details of the strict-profile findings, in event order.
    pub(super) strict: Vec<String>,
    pub(super) outcome: Outcome,
}

pub(super) enum Outcome {
    /// No file at the path (a compacted shard its manifest does not prove).
    Absent,
    /// A finding that stops the file's checks.
    Broken(Rule, String),
    /// Canonical lines of one producer in causal order, with the content id of each event's
    /// binding (`None` if it could not be computed here; the caller computes it again and
    /// reports the error), and the shard's replay digest.
    Good(Shard, Vec<Option<BlobId>>, Digest),
}

/// One shard file checked on its own ([`check_shard`]).
#[derive(Debug)]
pub struct ShardCheck {
    /// The events its lines hold: all of them once every line parses (also when a later check
    /// of the file fails), none when a line does not.
    pub events: Vec<Event>,
    /// The rule the file breaks and the detail naming it; `None` when the file passes.
    pub refused: Option<(Rule, String)>,
}

/// The checks of one shard file that need nothing but its text, shared by `verify` and `log`
/// (so that `log` never prints an event out of a shard `verify` would refuse): canonical event
/// lines (a final newline, no empty line, no `\r`, each line canonical and a
/// valid event, the privacy rules included), 1 to 1,024 events in exact canonical causal order
///, one producer. A long shard's lines are parsed on all cores. The checks that need the
/// rest of the ledger (path, parts, bindings) stay in [`verify_revision`].
pub fn check_shard(path: &str, text: &str) -> ShardCheck {
    let events = match shard::parse_content(text, path) {
        Ok(events) => events,
        Err(e) => {
            return ShardCheck {
                events: Vec::new(),
                refused: Some(shard_refusal(&e)),
            };
        }
    };
    let refused = match shard::check_file_events(&events, path) {
        Err(e) => Some(shard_refusal(&e)),
        Ok(()) if events.iter().any(|e| e.producer() != events[0].producer()) => Some((
            Rule::ShardInvalid,
            format!("action event shard mixes producer identities: {path}"),
        )),
        Ok(()) => None,
    };
    ShardCheck { events, refused }
}

/// The rule a shard error breaks, with its text as the detail.
pub fn shard_refusal(e: &shard::Error) -> (Rule, String) {
    let rule = match e {
        _ if is_privacy(e) => Rule::Privacy,
        shard::Error::NotCausalOrder(_) => Rule::ShardOrder,
        shard::Error::Event(event::Error::DuplicateEvent(_)) => Rule::DuplicateEvent,
        _ => Rule::ShardInvalid,
    };
    (rule, e.to_string())
}

/// A shard file as read for [`prepare`]: absent, its text, or why it is not text (over
/// [`shard::MAX_BYTES`], not UTF-8).
pub(super) type ShardRead = Option<Result<String, shard::Error>>;

/// Parses and checks one shard file on its own ([`check_shard`]), scans its events for the
/// strict profile, and computes the content id of each event's binding and the replay digest.
pub(super) fn prepare(path: &str, read: &ShardRead, layout: Layout, profile: Profile) -> Prepared {
    let text = match read {
        None => {
            return Prepared {
                events: 0,
                strict: Vec::new(),
                outcome: Outcome::Absent,
            };
        }
        Some(Err(e)) => {
            let (rule, detail) = shard_refusal(e);
            return Prepared {
                events: 0,
                strict: Vec::new(),
                outcome: Outcome::Broken(rule, detail),
            };
        }
        Some(Ok(text)) => text,
    };
    let ShardCheck { events, refused } = check_shard(path, text);
    let mut strict = Vec::new();
    if profile == Profile::Strict {
        for e in &events {
            for f in privacy::strict::scan_line(&e.json) {
                strict.push(format!(
                    "event {}: {f}; the ledger is immutable and cannot take it back, so treat the value as exposed (revoke or rotate a credential)",
                    e.event_id
                ));
            }
        }
    }
    if let Some((rule, detail)) = refused {
        return Prepared {
            events: events.len(),
            strict,
            outcome: Outcome::Broken(rule, detail),
        };
    }
    let ids = events
        .iter()
        .map(|e| BlobId::of(binding::event(layout, e).1.as_bytes()).ok())
        .collect();
    let replay = event::replay_digest(&events);
    Prepared {
        events: events.len(),
        strict,
        outcome: Outcome::Good(
            Shard::new(path.to_owned(), events, Arc::from(text.as_str())),
            ids,
            replay,
        ),
    }
}

/// [`prepare`] over many shards on all cores (rayon); results in input order. A long shard's
/// lines are spread across the cores as well (the work nests).
pub(super) fn prepare_all(
    items: &[(&str, ShardRead)],
    layout: Layout,
    profile: Profile,
) -> Vec<Prepared> {
    use rayon::prelude::*;
    items
        .par_iter()
        .map(|(path, read)| prepare(path, read, layout, profile))
        .collect()
}

/// Verifies `sets` in order, as a pipeline: this thread reads a batch of shards (about 1 MiB;
/// the snapshot is not shared) while the batch before it is prepared on all cores
/// ([`prepare_all`]), then checks the prepared batch against the ledger's state. Memory holds
/// at most three batches. Each checked batch is reported to `progress` (its shards and events).
pub(super) fn check_sets_pipelined(
    ctx: &mut Ctx<'_, '_>,
    sets: &[&Vec<String>],
    progress: &dyn crate::progress::Progress,
) -> Result<(), Error> {
    use std::sync::mpsc::sync_channel;
    const BATCH_BYTES: usize = 1 << 20;
    type Batch<'p> = (std::ops::Range<usize>, Vec<(&'p str, ShardRead)>);
    let (layout, profile) = (ctx.layout, ctx.privacy);
    std::thread::scope(|scope| {
        let (to_prepare, batches) = sync_channel::<Batch<'_>>(1);
        let (to_check, prepared) = sync_channel::<(std::ops::Range<usize>, Vec<Prepared>)>(1);
        scope.spawn(move || {
            for (range, items) in batches {
                let done = prepare_all(&items, layout, profile);
                if to_check.send((range, done)).is_err() {
                    break;
                }
            }
        });
        let check = |ctx: &mut Ctx<'_, '_>| -> Result<(), Error> {
            let (range, done) = prepared
                .recv()
                .expect("the preparing thread answers every batch");
            // Counted as `check_set` counts them, so the advances sum to the report's figures.
            let shards = done.len() as u64;
            let events: u64 = done.iter().map(|p| p.events as u64).sum();
            let mut done = done.into_iter();
            for paths in &sets[range] {
                let set: Vec<Prepared> = done.by_ref().take(paths.len()).collect();
                ctx.check_set(paths, set)?;
            }
            progress.advance(shards, events);
            Ok(())
        };
        let mut next = 0;
        let mut in_flight = 0;
        while next < sets.len() {
            let first = next;
            let mut bytes = 0;
            let mut items = Vec::new();
            while next < sets.len() && (next == first || bytes < BATCH_BYTES) {
                for path in sets[next] {
                    let read = ctx.read_shard(path)?;
                    bytes += match &read {
                        Some(Ok(text)) => text.len(),
                        _ => 0,
                    };
                    items.push((path.as_str(), read));
                }
                next += 1;
            }
            // The batch's shards are read: let their pack pages go (resident memory stays
            // bounded by a batch, not by the repository).
            ctx.view.snapshot().store().release_mapped_packs();
            to_prepare
                .send((first..next, items))
                .expect("the preparing thread runs until the batches end");
            in_flight += 1;
            if in_flight > 1 {
                check(ctx)?;
                in_flight -= 1;
            }
        }
        drop(to_prepare);
        for _ in 0..in_flight {
            check(ctx)?;
        }
        Ok(())
    })
}
