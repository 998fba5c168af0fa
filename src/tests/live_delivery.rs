//! Live projection's delivery against the CrabFleet stand-in ([`super::crabfleet`]): every
//! failure kind, the queue caps, the drain deadline, two roots draining at once, and a
//! partial credential pair. Behaviour, not timing: the only time bounds are generous ones where
//! the issue demands a bound (a drain past its deadline, a hung request).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::crabfleet::{Answer, Responder, StandIn};
use crate::event::Event;
use crate::live::config::{self, Verdict};
use crate::live::deliver::{self, Failure, Projector};
use crate::live::outbox::{self, State};
use crate::live::{self, Queued};
use crate::time::Timestamp;
use crate::writer::files::Root;
use crate::writer::record::{self, Environment};
use crate::writer::spool::{self, Spool};

const NOW: i64 = 1_768_480_496_000;

fn wall() -> Timestamp {
    Timestamp::from_millis(NOW + 5_000)
}

/// The writer environment plus a valid projection configuration for `port`.
fn env_for(port: u16, timeout_ms: u64) -> Environment {
    let mut env = crate::cli::tests::writer_env();
    let base = format!("https://127.0.0.1:{port}");
    for (k, v) in [
        (config::SESSION_ID, "session-1".to_owned()),
        (config::AGENT_TOKEN, "secret-token".to_owned()),
        (config::URL, base.clone()),
        (
            config::WORK_STATE_URL,
            format!("{base}/api/agent/interactive-sessions/session-1/work-state"),
        ),
        (config::TIMEOUT_MS, timeout_ms.to_string()),
    ] {
        env.insert(k.to_owned(), v);
    }
    env
}

/// A spool with `n` recorded events (items `1..=n`), each queued in the outbox under
/// `verdict`; returns the directory, its opened root and the events.
fn spool_with(n: u64, verdict: &Verdict) -> (tempfile::TempDir, Root, Vec<Event>) {
    let dir = tempfile::tempdir().unwrap();
    let path = crate::writer::files::absolute_root(dir.path()).unwrap();
    let env = crate::cli::tests::writer_env();
    let root = Root::open(&path, spool::ROOT_LABEL).unwrap();
    let mut events = Vec::new();
    for item in 1..=n {
        let input = crate::canonical::parse_input(&format!(
            r#"{{"phase":"review.item","status":"started","component":"review-runner","identity":{{"item":{item}}},"subject":{{"repository":"openclaw/openclaw","kind":"issue","number":{item}}},"retryable":true,"mutation":false}}"#
        ))
        .unwrap();
        let (event, _) = record::record_phase_outcome(
            &path,
            &input,
            &env,
            Timestamp::from_millis(NOW),
            &record::Options::default(),
        )
        .unwrap()
        .unwrap();
        live::after_record(&root, &event, verdict, wall()).unwrap();
        events.push(event);
    }
    (dir, root, events)
}

/// The `projection.failed` events of the spool, by source event id.
fn failures(root: &Root) -> Vec<String> {
    let spool = Spool::from_root(root.try_clone().unwrap()).unwrap();
    let mut out: Vec<String> = spool
        .read_all()
        .unwrap()
        .iter()
        .filter(|e| e.event_type() == live::FAILURE_TYPE)
        .map(|e| {
            e.record()
                .get("parent_event_id")
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap()
        })
        .collect();
    out.sort();
    out
}

fn all_settled(root: &Root) -> bool {
    outbox::entries(root)
        .unwrap()
        .iter()
        .all(|e| outbox::state(root, e).unwrap() == State::Done)
}

fn responder(f: impl Fn() -> Answer + Send + Sync + 'static) -> Responder {
    Arc::new(move |_| f())
}

/// One event against a stand-in answering `answer`, drained with a per-request timeout of
/// `timeout_ms`: the drain's log line, and whether a failure event was recorded.
fn one_delivery(answer: Answer, timeout_ms: u64) -> (Vec<String>, bool, usize) {
    let stand = StandIn::start(responder(move || answer.clone()));
    let verdict = config::verdict(&env_for(stand.port, timeout_ms));
    let (_dir, root, events) = spool_with(1, &verdict);
    let projector = Projector::new(Some(&stand.ca_pem)).unwrap();
    let began = Instant::now();
    let report = deliver::drain(
        Some(&projector),
        &root,
        &verdict,
        Duration::from_secs(30),
        std::process::id(),
        &wall,
    )
    .unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "a drain waited past every bound"
    );
    assert!(all_settled(&root), "every request is settled");
    let failed = failures(&root);
    assert!(failed.is_empty() || failed == [events[0].event_id.as_str().to_owned()]);
    assert_eq!(
        report.delivered + report.failed,
        1,
        "one request, settled once"
    );
    (report.log, !failed.is_empty(), stand.captured().len())
}

/// Each answer CrabFleet may give: any 2xx delivers (no failure event); 4xx and 5xx, a request
/// that is never answered, one answered after its timeout and a reset connection each record
/// one `projection.failed` event and log the reference's message; a slow answer within the
/// timeout delivers. Each request reached the stand-in exactly once.
#[test]
fn every_failure_kind() {
    let slow = |status, delay_ms| Answer::Status {
        status,
        headers: Vec::new(),
        body: String::new(),
        delay_ms,
    };
    for (name, answer, timeout, log, failed) in [
        ("200", Answer::status(200), 5_000, None, false),
        ("202", Answer::status(202), 5_000, None, false),
        (
            "slow 200 within the timeout",
            slow(200, 300),
            5_000,
            None,
            false,
        ),
        (
            "404",
            Answer::status(404),
            5_000,
            Some("live CrabFleet projection failed: CrabFleet action event append failed (404)"),
            true,
        ),
        (
            "401",
            Answer::status(401),
            5_000,
            Some("live CrabFleet projection failed: CrabFleet action event append failed (401)"),
            true,
        ),
        (
            "500",
            Answer::status(500),
            5_000,
            Some("live CrabFleet projection failed: CrabFleet action event append failed (500)"),
            true,
        ),
        (
            "503",
            Answer::status(503),
            5_000,
            Some("live CrabFleet projection failed: CrabFleet action event append failed (503)"),
            true,
        ),
        (
            "never answers",
            Answer::Hang,
            300,
            Some(
                "live CrabFleet projection failed: CrabFleet action event append timed out after 300ms",
            ),
            true,
        ),
        (
            "200 after the timeout",
            slow(200, 3_000),
            300,
            Some(
                "live CrabFleet projection failed: CrabFleet action event append timed out after 300ms",
            ),
            true,
        ),
        (
            "connection reset",
            Answer::Reset,
            5_000,
            Some("live CrabFleet projection failed: fetch failed"),
            true,
        ),
    ] {
        let (logs, got_failure, requests) = one_delivery(answer, timeout);
        assert_eq!(got_failure, failed, "{name}: failure event");
        assert_eq!(logs.first().map(String::as_str), log, "{name}: log");
        assert_eq!(requests, 1, "{name}: requests received");
    }
}

/// A drain ends at its deadline even when requests hang with a long per-request timeout:
/// what has not settled by then records a failure (`flush deadline reached`), within a
/// generous second of the deadline; nothing is left unsettled, nothing posted twice.
#[test]
fn the_drain_deadline_bounds_hung_requests() {
    let stand = StandIn::start(responder(|| Answer::Hang));
    let verdict = config::verdict(&env_for(stand.port, 60_000));
    let (_dir, root, events) = spool_with(6, &verdict);
    let projector = Projector::new(Some(&stand.ca_pem)).unwrap();
    let deadline = Duration::from_millis(700);
    let began = Instant::now();
    let report = deliver::drain(
        Some(&projector),
        &root,
        &verdict,
        deadline,
        std::process::id(),
        &wall,
    )
    .unwrap();
    let took = began.elapsed();
    assert!(took >= deadline, "the drain ended before its deadline");
    assert!(
        took < deadline + Duration::from_secs(1),
        "the drain took {took:?}"
    );
    assert_eq!(report.failed, 6);
    assert!(
        report
            .log
            .iter()
            .all(|l| l.ends_with("CrabFleet projection flush deadline reached"))
    );
    let mut want: Vec<String> = events
        .iter()
        .map(|e| e.event_id.as_str().to_owned())
        .collect();
    want.sort();
    assert_eq!(failures(&root), want);
    assert!(all_settled(&root));
    // 4 in flight; the two waiting never reached the server.
    assert_eq!(stand.captured().len(), 4);
    assert_eq!(
        stand
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
    // A second drain has nothing left to post.
    let again = deliver::drain(
        Some(&projector),
        &root,
        &verdict,
        deadline,
        std::process::id(),
        &wall,
    )
    .unwrap();
    assert_eq!(again, deliver::DrainReport::default());
    assert_eq!(stand.captured().len(), 4);
}

/// Queue saturation: with the 4 slots held by hung requests, one root queues at most 64 (the
/// 65th is refused `queue limit 64 reached`); more roots queue up to 256 in all (the next is
/// refused `queue limit 256 reached`), and a 65th root is refused with the total's message
/// even below 256.
#[test]
fn queue_caps_per_root_and_process_wide() {
    let stand = StandIn::start(responder(|| Answer::Hang));
    let env = env_for(stand.port, 60_000);
    let Verdict::Valid(config) = config::verdict(&env) else {
        panic!("valid configuration");
    };
    let projector = Arc::new(Projector::new(Some(&stand.ca_pem)).unwrap());
    let body = |i: usize| format!("{{\"n\":{i}}}");
    let deadline = Duration::from_millis(2_500);
    let post = |root: String, n: usize| {
        let projector = projector.clone();
        let config = config.clone();
        let bodies: Vec<String> = (0..n).map(body).collect();
        std::thread::spawn(move || projector.post_all(&root, &config, &bodies, deadline))
    };
    let wait_for = |n: usize| {
        let began = Instant::now();
        while projector.waiting() < n {
            assert!(began.elapsed() < Duration::from_secs(5), "{n} never queued");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // Root a: 4 running, 64 waiting, 2 refused by the per-root cap.
    let a = post("a".into(), 70);
    wait_for(64);
    // Roots b, c, d: 64 waiting each (256 in all); root e's first request is refused by the
    // total.
    let others: Vec<_> = ["b", "c", "d"]
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let h = post(r.into(), 64);
            wait_for(64 * (i + 2));
            h
        })
        .collect();
    let e = post("e".into(), 1).join().unwrap();
    assert_eq!(e, vec![Err(Failure::QueueLimit(256))]);
    // Before any deadline, only the 4 holding the slots have reached the server.
    let began = Instant::now();
    while stand.captured().len() < 4 {
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "the 4 in flight never arrived"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(stand.captured().len(), 4, "only the 4 in flight were sent");
    let a = a.join().unwrap();
    assert_eq!(
        a.iter()
            .filter(|r| **r == Err(Failure::QueueLimit(64)))
            .count(),
        2
    );
    assert_eq!(
        a.iter().filter(|r| **r == Err(Failure::Deadline)).count(),
        68
    );
    for h in others {
        assert!(
            h.join()
                .unwrap()
                .iter()
                .all(|r| matches!(r, Err(Failure::Deadline) | Err(Failure::Timeout(_))))
        );
    }
    assert_eq!(
        projector.waiting(),
        0,
        "every waiting request left the queue"
    );
    // A root's deadline aborts its hung requests, and their slots pass to the next root's
    // waiters: at most 4 more per root (a, b, c, d).
    assert!(
        stand.captured().len() <= 4 * 4,
        "more requests than slots were freed"
    );
}

/// The 65th root with a waiting request is refused with the total's message, as in the
/// reference, though the total is below 256.
#[test]
fn a_65th_waiting_root_is_refused() {
    let stand = StandIn::start(responder(|| Answer::Hang));
    let Verdict::Valid(config) = config::verdict(&env_for(stand.port, 60_000)) else {
        panic!("valid configuration");
    };
    let projector = Arc::new(Projector::new(Some(&stand.ca_pem)).unwrap());
    let deadline = Duration::from_millis(2_500);
    let mut handles = Vec::new();
    // Root 0 takes the 4 slots and waits with one more; roots 1..=63 wait with one each.
    for root in 0..64usize {
        let shared = projector.clone();
        let config = config.clone();
        let n = if root == 0 { 5 } else { 1 };
        handles.push(std::thread::spawn(move || {
            let bodies: Vec<String> = (0..n).map(|i| format!("{{\"{root}\":{i}}}")).collect();
            shared.post_all(&format!("root-{root}"), &config, &bodies, deadline)
        }));
        let began = Instant::now();
        while projector.waiting() < root + 1 {
            assert!(began.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let refused = projector.post_all("root-64", &config, &["{}".to_owned()], deadline);
    assert_eq!(refused, vec![Err(Failure::QueueLimit(256))]);
    for h in handles {
        h.join().unwrap();
    }
}

/// Two spool roots drained at once by one process share its 4 slots: every request of both
/// is delivered once, never more than 4 run at once, and neither root's failures or marks
/// reach the other.
#[test]
fn two_roots_drain_at_once() {
    let stand = StandIn::start(responder(|| Answer::Status {
        status: 200,
        headers: Vec::new(),
        body: String::new(),
        delay_ms: 40,
    }));
    let verdict = config::verdict(&env_for(stand.port, 10_000));
    let (_d1, r1, e1) = spool_with(12, &verdict);
    let (_d2, r2, e2) = spool_with(12, &verdict);
    let projector = Projector::new(Some(&stand.ca_pem)).unwrap();
    let reports = std::thread::scope(|s| {
        let run = |root: &Root| {
            let (projector, verdict) = (&projector, &verdict);
            let root = root.try_clone().unwrap();
            s.spawn(move || {
                deliver::drain(
                    Some(projector),
                    &root,
                    verdict,
                    Duration::from_secs(30),
                    std::process::id(),
                    &wall,
                )
                .unwrap()
            })
        };
        let (a, b) = (run(&r1), run(&r2));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!((reports.0.delivered, reports.1.delivered), (12, 12));
    assert!(failures(&r1).is_empty() && failures(&r2).is_empty());
    assert!(all_settled(&r1) && all_settled(&r2));
    assert!(
        stand
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 4
    );
    // The same events (same items, same clock) in both spools: each was posted once per spool.
    let captured = stand.captured();
    assert_eq!(captured.len(), 24);
    for e in e1.iter().chain(&e2) {
        let id = format!("\"event_id\":\"{}\"", e.event_id);
        assert_eq!(captured.iter().filter(|c| c.body.contains(&id)).count(), 2);
    }
}

/// Exactly one of session id and agent token set is a configuration error: the event is
/// recorded with a redacted `projection.failed` event beside it, no request is queued or
/// made. Neither set: projection is off, nothing beside the event.
#[test]
fn a_partial_credential_pair_is_a_configuration_failure() {
    let stand = StandIn::start(responder(|| Answer::status(200)));
    for missing in [config::SESSION_ID, config::AGENT_TOKEN] {
        let mut env = env_for(stand.port, 1_000);
        env.remove(missing);
        let verdict = config::verdict(&env);
        assert_eq!(
            verdict,
            Verdict::Invalid(config::ConfigError::PartialCredentials),
            "{missing} unset"
        );
        let (_dir, root, events) = spool_with(2, &verdict);
        let mut want: Vec<String> = events
            .iter()
            .map(|e| e.event_id.as_str().to_owned())
            .collect();
        want.sort();
        assert_eq!(
            failures(&root),
            want,
            "{missing} unset: one failure per event"
        );
        assert!(outbox::entries(&root).unwrap().is_empty());
    }
    let mut env = env_for(stand.port, 1_000);
    env.remove(config::SESSION_ID);
    env.remove(config::AGENT_TOKEN);
    let verdict = config::verdict(&env);
    assert_eq!(verdict, Verdict::Disabled);
    let (_dir, root, events) = spool_with(1, &verdict);
    assert_eq!(
        live::after_record(&root, &events[0], &verdict, wall()).unwrap(),
        Queued::Disabled
    );
    assert!(failures(&root).is_empty());
    assert!(stand.captured().is_empty(), "no request was made");
}

/// A writer killed between its outbox intent and the request: a drain by another process
/// writes the request from the durable event and posts it once; an intent whose event never
/// became durable is void (nothing posted).
#[test]
fn an_intent_of_a_dead_writer_is_settled_from_the_spool() {
    let stand = StandIn::start(responder(|| Answer::status(200)));
    let verdict = config::verdict(&env_for(stand.port, 5_000));
    let (_dir, root, events) = spool_with(1, &Verdict::Disabled);
    // A pid that is not running: the largest pid the kernel can hand out is far below it.
    let dead = 2_000_000_000u32;
    let durable = outbox::reserve(&root, &events[0], dead, false).unwrap();
    // An intent whose event is not in the spool (the writer died before writing it): an
    // event of another spool.
    let (_other_dir, _, others) = spool_with(2, &Verdict::Disabled);
    let never = outbox::reserve(&root, &others[1], dead, false).unwrap();
    assert!(matches!(
        outbox::state(&root, &durable).unwrap(),
        State::Reserved(_)
    ));
    let projector = Projector::new(Some(&stand.ca_pem)).unwrap();
    let report = deliver::drain(
        Some(&projector),
        &root,
        &verdict,
        Duration::from_secs(10),
        std::process::id(),
        &wall,
    )
    .unwrap();
    assert_eq!(report.delivered, 1);
    assert_eq!(stand.captured().len(), 1);
    assert_eq!(stand.captured()[0].body, live::request_body(&events[0]));
    assert!(root.entry_kind(&never.path("void")).unwrap().is_some());
    assert!(all_settled(&root));
}

/// A drain clears the staging files that killed writers left in the outbox (their pid is not
/// running), keeps a live writer's, and settles the requests beside them as usual.
#[test]
fn a_drain_clears_dead_writers_staging_files() {
    let stand = StandIn::start(responder(|| Answer::status(200)));
    let verdict = config::verdict(&env_for(stand.port, 5_000));
    let (_dir, root, events) = spool_with(2, &verdict);
    let dir = root.path().join(outbox::DIR);
    let uuid = "0b8e0a3c-5f1e-4c3b-9d2a-7e6f5a4b3c2d";
    let dead = 2_000_000_000u32;
    let stem = |i: usize| format!("{:010}.{}", i, events[i].event_id.as_str());
    let debris = [
        format!("{}.request.{dead}.{uuid}.tmp", stem(0)),
        format!("{}.sending.{dead}.{uuid}.tmp", stem(1)),
        format!("{}.delivered.{dead}.{uuid}.reclaim", stem(1)),
    ];
    let live = format!("{}.failed.{}.{uuid}.tmp", stem(0), std::process::id());
    let not_staging = "notes.tmp".to_owned();
    for name in debris.iter().chain([&live, &not_staging]) {
        std::fs::write(dir.join(name), b"partial").unwrap();
    }
    let projector = Projector::new(Some(&stand.ca_pem)).unwrap();
    let report = deliver::drain(
        Some(&projector),
        &root,
        &verdict,
        Duration::from_secs(10),
        std::process::id(),
        &wall,
    )
    .unwrap();
    assert_eq!(report.delivered, 2);
    for name in &debris {
        assert!(!dir.join(name).exists(), "{name} was left");
    }
    assert!(
        dir.join(&live).exists(),
        "a live writer's staging file was removed"
    );
    assert!(
        dir.join(&not_staging).exists(),
        "a file that is no staging name was removed"
    );
    assert!(all_settled(&root));
}

/// Fair admission: with root `a` running 4 requests and 4 more waiting, a request of root `b`
/// that arrives after them gets the first freed slot (its root runs none), so it is posted in
/// the second wave and not after all of `a`'s (first come, first served would post it ninth).
#[test]
fn a_freed_slot_goes_to_the_root_with_fewest_running() {
    let stand = StandIn::start(responder(|| Answer::Status {
        status: 200,
        headers: Vec::new(),
        body: String::new(),
        delay_ms: 300,
    }));
    let Verdict::Valid(config) = config::verdict(&env_for(stand.port, 10_000)) else {
        panic!("valid configuration");
    };
    let projector = Arc::new(Projector::new(Some(&stand.ca_pem)).unwrap());
    let deadline = Duration::from_secs(20);
    let a = {
        let (projector, config) = (projector.clone(), config.clone());
        std::thread::spawn(move || {
            let bodies: Vec<String> = (0..8).map(|i| format!("{{\"a\":{i}}}")).collect();
            projector.post_all("a", &config, &bodies, deadline)
        })
    };
    let began = Instant::now();
    while projector.waiting() < 4 {
        assert!(began.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(2));
    }
    let b = projector.post_all("b", &config, &["{\"b\":0}".to_owned()], deadline);
    assert_eq!(b, vec![Ok(())]);
    assert!(a.join().unwrap().iter().all(Result::is_ok));
    let order: Vec<String> = stand.captured().into_iter().map(|c| c.body).collect();
    assert_eq!(order.len(), 9);
    let at = order.iter().position(|b| b == "{\"b\":0}").unwrap();
    assert!((4..8).contains(&at), "b was posted at {at} of {order:?}");
}
