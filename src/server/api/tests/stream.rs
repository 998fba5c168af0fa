//! `GET /api/stream`: the events told, authentication, bounds, reconnection, lagging subscribers.

use super::*;
use crate::server::api::stream;

/// The stream tells each landed change of an approval in DashClaw's names and row shape: the
/// creation pending approval, the approval (`approved_by`), the denial (`failed`, the reasoning
/// as `error_message`) and the sweep's expiry (`expired`). The creator and the operators see
/// them; another principal does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_tells_approvals_denials_and_expiries() {
    let s = server();
    let (_, bot) = subscribe(&s, BOT).await;
    let (_, ops) = subscribe(&s, OPS).await;
    let (_, other) = subscribe(&s, OTHER).await;
    let (mut bot, mut ops, mut other) = (bot.unwrap(), ops.unwrap(), other.unwrap());

    let approved = recorded(&s, "deploy", ACT, "").await;
    for sub in [&mut bot, &mut ops] {
        let (name, data) = sub.expect().await;
        assert_eq!(name, "action.created");
        assert_eq!(field(&data, "action_id"), Some(approved.as_str()));
        assert_eq!(field(&data, "status"), Some("pending_approval"));
    }
    let g = s
        .post(
            format!("/api/actions/{approved}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    for sub in [&mut bot, &mut ops] {
        let (name, data) = sub.expect().await;
        assert_eq!(name, "action.updated");
        assert_eq!(field(&data, "action_id"), Some(approved.as_str()));
        assert_eq!(field(&data, "approved_by"), Some("ops"));
        // The row is the one `GET /api/actions/{id}` answers.
        let got = s.get(format!("/api/actions/{approved}"), BOT).await;
        assert_eq!(Some(&data), got.body.get("action"));
    }

    let denied = recorded(&s, "deploy", ACT, "").await;
    assert_eq!(bot.expect().await.0, "action.created");
    let g = s
        .post(
            format!("/api/actions/{denied}/approve"),
            OPS,
            r#"{"decision":"deny","reasoning":"not today"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let (name, data) = bot.expect().await;
    assert_eq!(name, "action.updated");
    assert_eq!(field(&data, "action_id"), Some(denied.as_str()));
    assert_eq!(field(&data, "status"), Some("failed"));
    assert_eq!(field(&data, "error_message"), Some("not today"));
    assert_eq!(field(&data, "approved_by"), None);

    let expiring = recorded(&s, "deploy", ACT, r#","approval_wait_seconds":5"#).await;
    assert_eq!(bot.expect().await.0, "action.created");
    s.clock.fetch_add(905_001, Ordering::SeqCst);
    let ok = [("authorization", "Bearer cron-secret")];
    let g = call_raw(&s, "GET", "/api/cron/outcome-sweep", &ok, vec![]).await;
    assert_eq!(
        g.body.get("expired"),
        Some(&Value::Array(vec![Value::str(expiring.as_str())]))
    );
    // The sweep may also close the approved action nobody claimed: each change is told.
    let expired_seen = |events: &[(String, Value)]| {
        events.iter().any(|(name, data)| {
            name == "action.updated"
                && field(data, "action_id") == Some(expiring.as_str())
                && field(data, "status") == Some("expired")
        })
    };
    let mut told = Vec::new();
    while let Some(e) = bot.next(std::time::Duration::from_millis(500)).await {
        told.push(e);
    }
    assert!(expired_seen(&told), "{told:?}");

    // The operator saw all of it; the other principal none of it.
    let mut seen = Vec::new();
    while let Some(e) = ops.next(std::time::Duration::from_millis(500)).await {
        seen.push(e);
    }
    assert!(expired_seen(&seen), "{seen:?}");
    assert_eq!(seen.len(), 3 + told.len(), "created, updated, created, …");
    assert!(
        other.quiet().await,
        "another principal's actions are not shown"
    );
}

/// A write that is refused lands nothing and tells nothing: a second decision on a decided
/// action (409), a decision on an unknown action (404), a replayed creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_emits_nothing() {
    let s = server();
    let id = recorded(&s, "deploy", ACT, r#","idempotency_key":"once""#).await;
    let g = s
        .post(
            format!("/api/actions/{id}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(g.status, 200);
    let (_, sub) = subscribe(&s, OPS).await;
    let mut sub = sub.unwrap();
    let g = s
        .post(
            format!("/api/actions/{id}/approve"),
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
    assert_eq!(g.status, 409, "{:?}", g.body);
    let g = s
        .post(
            "/api/actions/act_nothere/approve",
            OPS,
            r#"{"decision":"deny"}"#,
        )
        .await;
    assert_eq!(g.status, 404, "{:?}", g.body);
    assert!(sub.quiet().await, "a refused write emits nothing");
}

/// The stream takes the API keys (401 without one), at most `max_streams` subscribers (503
/// past it, a slot freed when one leaves), and ends when the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_is_authenticated_bounded_and_ends_at_shutdown() {
    let s = server_custom(
        Some("cron-secret"),
        |_| Target::Local,
        |st| st.max_streams = 2,
    );
    let g = call_raw(&s, "GET", "/api/stream", &[], vec![]).await;
    assert_eq!((g.status, g.str("error")), (401, "Unauthorized"));
    let g = call(&s, "GET", "/api/stream", "k-wrong", "").await;
    assert_eq!(g.status, 401);
    let (a, first) = subscribe(&s, BOT).await;
    let (b, second) = subscribe(&s, OPS).await;
    assert_eq!((a, b), (200, 200));
    let g = call(&s, "GET", "/api/stream", BOT, "").await;
    assert_eq!(g.status, 503, "{:?}", g.body);
    assert_eq!(
        g.headers
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap()),
        Some(stream::RETRY_AFTER_SECONDS)
    );
    drop(first);
    let (c, third) = subscribe(&s, BOT).await;
    assert_eq!(c, 200, "a closed stream frees its slot");
    s.app.as_ref().unwrap().stop();
    for mut sub in [second.unwrap(), third.unwrap()] {
        let started = std::time::Instant::now();
        assert_eq!(sub.next(std::time::Duration::from_secs(10)).await, None);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "the stream ends when the server stops, not at a timeout"
        );
    }
}

/// A client that reconnects with the last cursor it read (`Last-Event-ID`, or DashClaw's
/// `?lastEventId=`) gets what it missed, in its scope, then the live events: each once. A
/// cursor the server cannot place replays what it keeps and says why in `replayError`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_gets_what_it_missed_once() {
    let s = server();
    let (_, ops) = subscribe(&s, OPS).await;
    let mut ops = ops.unwrap();
    // `connected` carries the place the stream starts from.
    let at_connect = ops.last_id.clone().expect("connected has an id");
    let first = recorded(&s, "deploy", ACT, "").await;
    assert_eq!(ops.expect().await.0, "action.created");
    let cursor = ops.last_id.clone().expect("an action's event has an id");
    assert_ne!(cursor, at_connect);
    drop(ops);
    // Missed while disconnected: an approval of the first, a creation by another principal.
    let g = s
        .post(
            format!("/api/actions/{first}/approve"),
            OPS,
            r#"{"decision":"approve"}"#,
        )
        .await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let g = s.guard(OTHER, "build", ACT, "").await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let other = g.str("action_id").to_owned();
    let (_, back) = subscribe_after(&s, OPS, Some(&cursor), "").await;
    let (mut back, connected) = back.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(2)));
    assert_eq!(field(&connected, "lastEventId"), Some(cursor.as_str()));
    assert_eq!(connected.get("replayError"), Some(&Value::Null));
    assert_eq!(
        back.expect_action().await,
        ("action.updated".to_owned(), first.clone())
    );
    assert_eq!(
        back.expect_action().await,
        ("action.created".to_owned(), other.clone())
    );
    // Then live, with nothing replayed twice.
    let third = recorded(&s, "build", ACT, "").await;
    let (_, data) = back.expect().await;
    assert_eq!(field(&data, "action_id"), Some(third.as_str()));
    assert!(back.quiet().await);

    // The creator's key, by the query parameter: only its own actions are replayed.
    let query = format!("?lastEventId={cursor}");
    let (_, bot) = subscribe_after(&s, BOT, None, &query).await;
    let (mut bot, connected) = bot.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(2)));
    for want in [&first, &third] {
        assert_eq!(
            field(&bot.expect().await.1, "action_id"),
            Some(want.as_str())
        );
    }
    assert!(bot.quiet().await);

    // A client that read nothing after `connected` misses nothing when it comes back with its
    // id.
    let (_, early) = subscribe_after(&s, OPS, Some(&at_connect), "").await;
    let (_, connected) = early.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(4)));
    assert_eq!(connected.get("replayError"), Some(&Value::Null));

    // A cursor of another run (or none of the server's): all that is kept, and why.
    let (_, stale) = subscribe_after(&s, OPS, Some("0123abcd-7"), "").await;
    let (_, connected) = stale.unwrap();
    assert_eq!(connected.get("replayed"), Some(&Value::from(4)));
    assert!(
        field(&connected, "replayError").is_some_and(|e| e.contains("unknown cursor")),
        "{connected:?}"
    );
}

/// A subscriber that falls more than the channel's capacity behind is told (`stream.lagged`,
/// with how many it missed) and disconnected; the writer never waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_subscriber_is_told_and_dropped() {
    let s = server();
    let (_, sub) = subscribe(&s, OPS).await;
    let mut sub = sub.unwrap();
    let app = s.app.as_ref().unwrap();
    for i in 0..stream::CHANNEL + 10 {
        let event = stream::Event {
            name: "action.updated",
            created_by: "bot".into(),
            data: Value::object([("n", Value::from(i as i64))]),
        };
        app.events.send(event); // never blocks
    }
    let (name, data) = sub.expect().await;
    assert_eq!(name, "stream.lagged");
    assert_eq!(data.get("missed"), Some(&Value::from(10)));
    let started = std::time::Instant::now();
    assert_eq!(sub.next(std::time::Duration::from_secs(10)).await, None);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "then it ends"
    );
}

/// A landed cancel is told on the stream as `action.updated` with the cancelled row; a refused
/// cancel (409, 404) tells nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_tells_a_cancel_once() {
    let s = server();
    let id = recorded(&s, "build", ACT, "").await;
    let (_, sub) = subscribe(&s, BOT).await;
    let mut sub = sub.unwrap();
    let uri = format!("/api/actions/{id}/cancel");
    let g = s.post(&uri, BOT, r#"{"reason":"not needed"}"#).await;
    assert_eq!(g.status, 200, "{:?}", g.body);
    let (name, data) = sub.expect().await;
    assert_eq!(name, "action.updated");
    assert_eq!(field(&data, "action_id"), Some(id.as_str()));
    assert_eq!(field(&data, "status"), Some("cancelled"));
    let got = s.get(format!("/api/actions/{id}"), BOT).await;
    assert_eq!(Some(&data), got.body.get("action"));
    assert_eq!(s.post(&uri, BOT, r#"{"reason":"again"}"#).await.status, 409);
    let g = s
        .post("/api/actions/act_missing/cancel", BOT, r#"{"reason":"x"}"#)
        .await;
    assert_eq!(g.status, 404);
    assert!(sub.quiet().await, "a refused cancel emits nothing");
}
