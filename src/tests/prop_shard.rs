//! Property tests of shard packing over generated event sets.
//!
//! Events are built as `record` builds them, with generated parent links (always to an earlier
//! event, so the set is acyclic), source or generated occurrence times and sizes. For every set:
//!
//! - normalization and packing are deterministic: any order of the input, with duplicates,
//!   gives the same shards byte for byte;
//! - every part is within the limits (1,024 events, 2 MiB) and the packing is greedy: a part is
//!   closed only when the next event would break a limit;
//! - causal order is kept across parts: the parts concatenated are the normalized order, in
//!   which every parent precedes its children, and each part passes the stored-shard check;
//! - every part's bytes read back to its events, and its path to its part number.
#![cfg(test)]

use proptest::prelude::*;
use serde_json::json;

use crate::canonical;
use crate::event::Event;
use crate::identity::ShardIdentity;
use crate::ledger::shard;
use crate::writer::record;

const DATE: &str = "2026-01-15";

/// One generated event: its parent (an earlier index, modulo its own), occurrence offset in seconds (`None`:
/// generated occurrence) and padding bytes.
#[derive(Clone, Debug)]
struct Spec {
    parent: Option<usize>,
    occurred: Option<u32>,
    pad: usize,
}

fn spec(max_pad: usize) -> impl Strategy<Value = Spec> {
    (
        prop::option::weighted(0.4, any::<usize>()),
        prop::option::weighted(0.5, 0u32..4),
        0..=max_pad,
    )
        .prop_map(|(parent, occurred, pad)| Spec {
            parent,
            occurred,
            pad,
        })
}

/// Builds the events of `specs` in order (parents are earlier events).
fn build(specs: &[Spec]) -> Vec<Event> {
    let env = crate::cli::tests::writer_env();
    let mut events: Vec<Event> = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        let mut input = json!({
            "scope": "review",
            "type": "review.item",
            "component": "packing",
            "identity": format!("event-{i}"),
            "subject": {"repository": "openclaw/openclaw", "kind": "issue", "number": i + 1},
            "action": {"name": "review", "status": "completed", "retryable": false, "mutation": false},
            "evidence": [{
                "kind": "run",
                "runUrl": format!("https://github.com/{}/r/actions/runs/{}", "a".repeat(1 + s.pad), i + 1),
            }],
        });
        if let Some(p) = &s.parent
            && i > 0
        {
            input["parentEventId"] = json!(events[p % i].event_id.as_str());
        }
        if let Some(sec) = s.occurred {
            // Few distinct instants, so that ties between source times are common.
            input["occurredAt"] = json!(format!("2026-01-15T10:00:0{sec}.000Z"));
        }
        let value = canonical::parse(&input.to_string()).expect("generated input");
        let event = record::build_action_event(
            &value,
            &env,
            crate::time::Timestamp::from_millis(1_768_471_200_000),
        )
        .unwrap_or_else(|e| panic!("event {i}: {e}"));
        events.push(event);
    }
    events
}

fn identity_of(events: &[Event]) -> ShardIdentity {
    events[0]
        .shard_identity(DATE)
        .normalized()
        .expect("the writer's shard identity")
}

/// `events` in the order `order` picks, with the events at `dups` repeated at the end.
fn shuffled(
    events: &[Event],
    order: &[prop::sample::Index],
    dups: &[prop::sample::Index],
) -> Vec<Event> {
    let mut out = events.to_vec();
    for (i, pick) in order.iter().enumerate().take(out.len()) {
        let j = i + pick.index(out.len() - i);
        out.swap(i, j);
    }
    for d in dups {
        out.push(events[d.index(events.len())].clone());
    }
    out
}

/// Checks every packing property of `events` against the packing of `other` (the same set in
/// another order, with duplicates).
fn check_packing(
    events: Vec<Event>,
    other: Vec<Event>,
) -> Result<Vec<shard::Shard>, TestCaseError> {
    let id = identity_of(&events);
    let distinct = events.len();
    let normalized = shard::normalize_events(&id, events, shard::MAX_SET_EVENTS)?;
    prop_assert_eq!(normalized.len(), distinct);
    let again = shard::normalize_events(&id, other, shard::MAX_SET_EVENTS)?;
    prop_assert!(
        normalized
            .iter()
            .map(|e| &e.json)
            .eq(again.iter().map(|e| &e.json)),
        "normalization depends on input order"
    );
    let shards = shard::pack(&id, normalized.clone())?;
    prop_assert_eq!(
        &shards,
        &shard::pack(&id, again)?,
        "packing depends on input order"
    );

    // Parents before children in the normalized order.
    let position: std::collections::HashMap<&str, usize> = normalized
        .iter()
        .enumerate()
        .map(|(i, e)| (e.event_id.as_str(), i))
        .collect();
    for (i, e) in normalized.iter().enumerate() {
        if let Some(p) = e
            .parent_event_id
            .as_ref()
            .and_then(|p| position.get(p.as_str()))
        {
            prop_assert!(*p < i, "parent at {} after its child at {}", p, i);
        }
    }

    // Parts: limits, greedy closing, numbering, bytes, order.
    let count = shards.len();
    let mut concatenated: Vec<&Event> = Vec::new();
    for (k, s) in shards.iter().enumerate() {
        prop_assert!(!s.events.is_empty());
        // Each line is held once: the events' lines are ranges of the part's bytes.
        prop_assert!(
            s.events.iter().all(|e| e.json.is_within(&s.content)),
            "part {} has an event line outside its bytes",
            k + 1
        );
        prop_assert!(s.events.len() <= shard::MAX_EVENTS);
        prop_assert!(
            s.content.len() <= shard::MAX_BYTES,
            "part {} has {} bytes",
            k + 1,
            s.content.len()
        );
        if let Some(next) = shards.get(k + 1) {
            let full = s.events.len() == shard::MAX_EVENTS
                || s.content.len() + next.events[0].json.len() + 1 > shard::MAX_BYTES;
            prop_assert!(full, "part {} was closed before a limit", k + 1);
        }
        prop_assert_eq!(
            shard::parse_path(&s.path),
            Some((DATE.to_owned(), Some((k as u32 + 1, count as u32))))
        );
        let read = shard::parse_content(&s.content, &s.path)?;
        prop_assert!(
            read.iter()
                .map(|e| &e.json)
                .eq(s.events.iter().map(|e| &e.json))
        );
        shard::check_file_events(&s.events, &s.path)?;
        concatenated.extend(&s.events);
    }
    prop_assert!(
        concatenated
            .iter()
            .map(|e| &e.json)
            .eq(normalized.iter().map(|e| &e.json)),
        "the parts are not the normalized order"
    );
    Ok(shards)
}

proptest! {
    #![proptest_config(super::prop_support::config(32))]

    /// Small sets: one part, every property.
    #[test]
    fn packing_small_sets(
        specs in prop::collection::vec(spec(64), 1..60),
        order in prop::collection::vec(any::<prop::sample::Index>(), 60),
        dups in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
    ) {
        let events = build(&specs);
        let other = shuffled(&events, &order, &dups);
        let shards = check_packing(events, other)?;
        prop_assert_eq!(shards.len(), 1);
    }
}

/// A fixed pool of events built once per test binary (building is the slow part): `n` specs
/// from a small linear congruential generator, parents always earlier.
fn pool(n: usize, min_pad: usize, max_pad: usize, seed: u64) -> Vec<Event> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (x >> 33) as usize
    };
    let specs: Vec<Spec> = (0..n)
        .map(|_| Spec {
            parent: (next() % 5 < 2).then(&mut next),
            occurred: (next() % 2 == 0).then(|| (next() % 4) as u32),
            pad: min_pad + next() % (max_pad - min_pad + 1),
        })
        .collect();
    build(&specs)
}

static LARGE: std::sync::LazyLock<Vec<Event>> =
    std::sync::LazyLock::new(|| pool(10, 150_000, 450_000, 7));
static MANY: std::sync::LazyLock<Vec<Event>> =
    std::sync::LazyLock::new(|| pool(shard::MAX_EVENTS + 40, 0, 4, 11));

/// The events of `pool` that `keep` picks (at least `min`), in generated order.
fn subset(pool: &[Event], keep: &[bool], min: usize) -> Vec<Event> {
    let mut picked: Vec<Event> = pool
        .iter()
        .zip(keep.iter().chain(std::iter::repeat(&true)))
        .filter(|(_, k)| **k)
        .map(|(e, _)| e.clone())
        .collect();
    for e in pool {
        if picked.len() >= min {
            break;
        }
        if !picked.iter().any(|p| p.event_id == e.event_id) {
            picked.push(e.clone());
        }
    }
    picked
}

proptest! {
    // Reading back megabytes of events is the slow part: few cases (PROPTEST_CASES for more).
    #![proptest_config(super::prop_support::config(2))]

    /// Large events (150 to 450 KB): several parts split by the byte limit.
    #[test]
    fn packing_splits_at_the_byte_limit(
        keep in prop::collection::vec(prop::bool::weighted(0.8), 10),
        order in prop::collection::vec(any::<prop::sample::Index>(), 10),
        dups in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    ) {
        let events = subset(&LARGE, &keep, 6);
        let total: usize = events.iter().map(|e| e.json.len() + 1).sum();
        let other = shuffled(&events, &order, &dups);
        let shards = check_packing(events, other)?;
        prop_assert!(shards.len() >= total.div_ceil(shard::MAX_BYTES));
    }

    /// More than 1,024 small events: split by the event limit.
    #[test]
    fn packing_splits_at_the_event_limit(
        drop in prop::collection::vec(any::<prop::sample::Index>(), 0..39),
        order in prop::collection::vec(any::<prop::sample::Index>(), 1064),
    ) {
        let mut keep = vec![true; MANY.len()];
        for d in &drop {
            keep[d.index(MANY.len())] = false;
        }
        let events = subset(&MANY, &keep, 0);
        let extra = events.len() - shard::MAX_EVENTS;
        let other = shuffled(&events, &order, &[]);
        let shards = check_packing(events, other)?;
        prop_assert_eq!(shards.len(), 2);
        prop_assert_eq!(shards[0].events.len(), shard::MAX_EVENTS);
        prop_assert_eq!(shards[1].events.len(), extra);
    }
}

#[test]
fn the_generator_builds_writer_events() {
    // The generator's events are the writer's: valid, within one producer run, and distinct.
    let specs: Vec<Spec> = (0..3)
        .map(|_| Spec {
            parent: None,
            occurred: None,
            pad: 0,
        })
        .collect();
    let events = build(&specs);
    let id = identity_of(&events);
    assert!(events.iter().all(|e| shard::matches_identity(e, &id)));
    let again = Event::parse_line(&events[0].json, "generated").expect("a valid event line");
    assert_eq!(again.event_id, events[0].event_id);
    assert_ne!(events[0].event_id, events[1].event_id);
}
