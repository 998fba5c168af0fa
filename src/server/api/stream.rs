//! `GET /api/stream`: the actions' changes as Server-Sent Events, in DashClaw's wire shape, so
//! that the SDK's `wait_for_approval` is told of a decision instead of polling.
//!
//! # Events
//!
//! Each event is `event: NAME` and one `data: JSON` line, then a blank line; an action's
//! event is preceded by `id: CURSOR`, its place in this server's feed ([`Feed`]):
//!
//! | Event | When | `data` |
//! |---|---|---|
//! | `connected` | first, once subscribed | `{"status":"ok","orgId":PRINCIPAL,"backend":"memory","realtimeStatus":"healthy","replayed":N,"lastEventId":CURSOR\|null,"replayError":TEXT\|null}` |
//! | `action.created` | an action was created (also pending approval, or blocked) | the action row, as `GET /api/actions/{id}` answers it under `action` |
//! | `action.updated` | an approval, a denial (`status: "failed"`, the reasoning as `error_message`), an expiry (`status: "expired"`) or a sweep's close | the action row |
//! | `stream.lagged` | the subscriber fell too far behind; the stream then ends | `{"error":…,"missed":N}` |
//!
//! Each event is followed by a comment line of [`PADDING`] bytes (see [`PADDING`] for why), and
//! a comment line `: heartbeat` is sent every 15 seconds ([`HEARTBEAT`], DashClaw's interval)
//! so that proxies keep the connection open.
//!
//! # Where events come from
//!
//! The writer thread ([`crate::server::writer`]) sends an operation's events to the [`Feed`]
//! (which numbers them, keeps the last [`CHANNEL`] and broadcasts them) after its batch landed,
//! never before and never for an operation that refused or a batch that did not land. Sending
//! never blocks the writer. With `serve --webhooks`, the same events are staged in the
//! webhooks' durable outbox before the batch's commit lands and POSTed to the endpoints that
//! want them once it did ([`crate::server::webhooks`]).
//!
//! # Scoping, limits
//!
//! - The same keys as every `/api` route (`x-api-key`, 401 otherwise). A key without the
//!   `operator` mark sees the actions its principal created (DashClaw scopes the stream to the
//!   caller's organisation); an operator's key sees all. A reload (SIGHUP) applies to open
//!   streams too: the next event after it is sent only if the stream's key still
//!   authenticates as the same principal with the same mark; otherwise the stream ends
//!   (checked by the private `still_admitted`).
//! - At most [`crate::server::Settings::max_streams`] streams are open at once; past it, 503
//!   with `Retry-After` ([`RETRY_AFTER_SECONDS`]).
//! - The channel holds the last [`CHANNEL`] events, shared by every subscriber (a subscriber's
//!   memory is bounded by it): one that falls further behind gets `stream.lagged` and is
//!   disconnected (a client reconnects and reads the actions it cares about).
//! - The streams end when the server stops, so a shutdown never waits on them, and after
//!   [`MAX_DURATION`] (DashClaw's 30 minutes).
//!
//! # Not streamed
//!
//! - Changes landed by another process on the same repository (the CLI's `action` commands,
//!   another `serve` sharing the remote) are not seen: only this server's writer feeds the
//!   channel. A client that must see them polls `GET /api/actions/{id}` (the SDK polls beside
//!   the stream).
//! - Claims, outcome reports and legacy closes are not streamed yet, nor DashClaw's other
//!   families (messages, goals, loops, guard decisions): this server has no such records.
//!
//! # Replay
//!
//! A client that reconnects with the last cursor it read (the `Last-Event-ID` header, which
//! browsers' `EventSource` sends by itself, or DashClaw's `?lastEventId=` query) first gets
//! the events after it that it may read, then the live ones, none twice and none skipped
//! (the subscription and the replay are taken under one lock, [`Feed::subscribe`]); the
//! `connected` event says how many were replayed. The feed keeps the last [`CHANNEL`] events
//! of this run, in memory: a cursor of an earlier run (the server restarted), one older than
//! what is kept, or one that is not a cursor replays what can be replayed and says why the
//! rest cannot in `replayError`; the client then reads the actions it cares about again.
//! DashClaw replays at most 200 events from its event store; this server replays up to
//! [`CHANNEL`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::broadcast;

use super::App;
use super::extract::Caller;
use super::respond::error;
use crate::canonical::Value;
use crate::finality::State as ActionState;

/// How often the keep-alive comment is sent: DashClaw's 15 seconds.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// A stream ends after this long (DashClaw's 30 minutes): clients reconnect, and a subscriber
/// that stopped reading does not hold its slot for ever.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 60);

/// `Retry-After` of the 503 past [`crate::server::Settings::max_streams`], in seconds: a slot
/// frees when a subscriber leaves, which nothing predicts, so a client is told to come back
/// soon rather than at a time a slot is known to be free.
pub const RETRY_AFTER_SECONDS: &str = "5";

/// The events the feed keeps for replay, and its broadcast channel holds for its slowest
/// subscriber.
pub const CHANNEL: usize = 1024;

/// The default of [`crate::server::Settings::max_streams`].
pub const DEFAULT_MAX_STREAMS: u32 = 256;

/// The names of the events of actions ([`Event::name`]): the stream sends them, and the webhooks
/// ([`crate::server::webhooks`]) deliver them.
pub const EVENT_NAMES: [&str; 2] = ["action.created", "action.updated"];

/// A change to an action, to be told to the subscribers that may read it (and, with `serve
/// --webhooks`, delivered to the webhooks that want it).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// DashClaw's event name: `action.created` or `action.updated`.
    pub name: &'static str,
    /// The principal that created the action: non-operators see only their own.
    pub created_by: String,
    /// The action row (`GET /api/actions/{id}`'s `action`).
    pub data: Value,
}

impl Event {
    /// `action.created` for `state`, whose row is `row`.
    pub fn created(state: &ActionState, row: Value) -> Event {
        Event {
            name: EVENT_NAMES[0],
            created_by: state.action.created_by.clone(),
            data: row,
        }
    }

    /// `action.updated` for `state`, whose row is `row`.
    pub fn updated(state: &ActionState, row: Value) -> Event {
        Event {
            name: EVENT_NAMES[1],
            created_by: state.action.created_by.clone(),
            data: row,
        }
    }
}

/// An event as the feed keeps it: with its number in this run.
#[derive(Debug)]
pub struct Told {
    /// Its number in this run (from 1).
    pub seq: u64,
    /// The event.
    pub event: Event,
}

/// The events of this run: the writer sends each landed event once ([`Feed::send`]); each
/// stream subscribes, replaying what it missed ([`Feed::subscribe`]).
pub struct Feed {
    live: broadcast::Sender<Arc<Told>>,
    /// The last [`CHANNEL`] events, oldest first, and the next number.
    kept: std::sync::Mutex<(std::collections::VecDeque<Arc<Told>>, u64)>,
    /// Random, per run: a cursor of another run is known not to be this one's.
    run: String,
}

/// The most characters of a client's `Last-Event-ID` echoed back in `connected`.
const MAX_CURSOR_ECHO: usize = 100;

/// What a subscription replays.
pub struct Replay {
    /// The number after which the subscription's events (replayed, then live) start: the
    /// cursor `connected` carries, so that a client that reads nothing more and reconnects
    /// with it misses nothing.
    pub after: u64,
    /// The events after the client's cursor (all that are kept, when it is unknown).
    pub events: Vec<Arc<Told>>,
    /// Why the replay may miss events, for `replayError`.
    pub error: Option<String>,
}

impl Feed {
    /// A feed for one run of the server; `run` tells its cursors from another run's.
    pub fn new(run: String) -> Feed {
        Feed {
            live: broadcast::channel(CHANNEL).0,
            kept: std::sync::Mutex::new((std::collections::VecDeque::with_capacity(CHANNEL), 1)),
            run,
        }
    }

    /// Numbers `event`, keeps it for replay and tells the live subscribers. Never blocks on a
    /// subscriber.
    pub fn send(&self, event: Event) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let told = Arc::new(Told { seq: kept.1, event });
        kept.1 += 1;
        if kept.0.len() == CHANNEL {
            kept.0.pop_front();
        }
        kept.0.push_back(told.clone());
        // Under the lock, so that a subscription sees each event once: kept or live.
        let _ = self.live.send(told);
    }

    /// The cursor of event `seq`: `<run>-<seq>`.
    pub fn cursor(&self, seq: u64) -> String {
        format!("{}-{seq}", self.run)
    }

    /// Subscribes to the live events, and takes the kept events after `last` (a client's
    /// `Last-Event-ID`; none for a new client, which replays nothing).
    pub fn subscribe(&self, last: Option<&str>) -> (broadcast::Receiver<Arc<Told>>, Replay) {
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let rx = self.live.subscribe();
        let Some(last) = last else {
            return (
                rx,
                Replay {
                    after: kept.1 - 1,
                    events: Vec::new(),
                    error: None,
                },
            );
        };
        let oldest = kept.0.front().map_or(kept.1, |t| t.seq);
        let after = match last
            .strip_prefix(self.run.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n < kept.1)
        {
            Some(n) if n + 1 >= oldest => Ok(n),
            Some(_) => Err(format!(
                "events after this cursor were dropped: this server keeps the last {CHANNEL}; read the actions again"
            )),
            None => Err(
                "unknown cursor (from another run of the server, or not one of its cursors); read the actions again"
                    .to_owned(),
            ),
        };
        let from = *after.as_ref().unwrap_or(&(oldest - 1));
        let events = kept.0.iter().filter(|t| t.seq > from).cloned().collect();
        (
            rx,
            Replay {
                after: from,
                events,
                error: after.err(),
            },
        )
    }
}

/// The size of the comment sent after each event: the Python SDK reads the stream in blocks of
/// 4 KiB and acts on an event only once the block that ends it is full, so without it an
/// approval would wait in the SDK's socket buffer for the next events (and its
/// `wait_for_approval` would wait out its polling interval). Clients ignore comments.
pub const PADDING: usize = 4096;

/// A comment of [`PADDING`] bytes, sent after each event.
fn padding() -> SseEvent {
    SseEvent::default().comment(" ".repeat(PADDING))
}

fn sse(name: &str, data: &Value) -> SseEvent {
    SseEvent::default()
        .event(name)
        .data(crate::canonical::to_canonical_unchecked(data))
}

/// An action's event, with its cursor.
fn sse_told(feed: &Feed, told: &Told) -> SseEvent {
    sse(told.event.name, &told.event.data).id(feed.cursor(told.seq))
}

/// The client's cursor: the `Last-Event-ID` header, else DashClaw's `lastEventId` query
/// parameter; an empty one is none.
fn last_event_id(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
                .find(|(k, _)| k == "lastEventId")
                .map(|(_, v)| v.into_owned())
        })
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Whether a stream opened by `caller` with the key `presented` may still be sent events: the
/// keys in force are those it was opened under, or the key authenticates under the keys now in
/// force as the same principal with the same `operator` mark (a reload removed or changed
/// neither). Without authentication, always.
fn still_admitted(app: &App, caller: &Caller, presented: &[u8]) -> bool {
    let now = app.access();
    Arc::ptr_eq(&now, &caller.access)
        || app.settings.insecure_no_auth
        || now
            .keys
            .authenticate(presented)
            .is_some_and(|key| key.principal == caller.principal && key.operator == caller.operator)
}

pub(super) async fn stream(
    State(app): State<Arc<App>>,
    caller: Caller,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    let Ok(permit) = app.streams.clone().try_acquire_owned() else {
        let mut busy = error(503, "Too many open streams");
        busy.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
        return busy;
    };
    let last = last_event_id(&headers, uri.query());
    let (rx, replay) = app.events.subscribe(last.as_deref());
    let stopping = app.shutdown.subscribe();
    let principal = caller.principal.clone();
    let operator = caller.operator;
    // Only pointers to the kept events: each is rendered when it is sent.
    let replayed: std::collections::VecDeque<Arc<Told>> = replay
        .events
        .into_iter()
        .filter(|t| operator || t.event.created_by == principal)
        .collect();
    let connected = Value::object([
        ("status", Value::str("ok")),
        ("orgId", Value::str(caller.principal.as_str())),
        ("backend", Value::str("memory")),
        ("realtimeStatus", Value::str("healthy")),
        ("replayed", Value::from(replayed.len() as i64)),
        (
            "lastEventId",
            last.as_deref().map_or(Value::Null, |l| {
                Value::str(l.chars().take(MAX_CURSOR_ECHO).collect::<String>())
            }),
        ),
        (
            "replayError",
            replay.error.as_deref().map_or(Value::Null, Value::str),
        ),
    ]);
    let presented: Arc<[u8]> = headers
        .get("x-api-key")
        .map_or(&[][..], |v| v.as_bytes())
        .into();
    let caller = Arc::new(caller);
    // State: the subscription, what to send before reading it again, and whether to end then.
    let deadline = tokio::time::Instant::now() + MAX_DURATION;
    let first = std::collections::VecDeque::from([
        sse("connected", &connected).id(app.events.cursor(replay.after)),
        padding(),
    ]);
    let events = futures_util::stream::unfold(
        (rx, first, replayed, false),
        move |(mut rx, mut queue, mut replayed, done)| {
            // The permit lives as long as the stream.
            let _permit = &permit;
            let principal = principal.clone();
            let mut stop = stopping.clone();
            let (app, caller, presented) = (app.clone(), caller.clone(), presented.clone());
            async move {
                if let Some(next) = queue.pop_front() {
                    return Some((Ok::<_, Infallible>(next), (rx, queue, replayed, done)));
                }
                if let Some(t) = replayed.pop_front() {
                    queue.push_back(padding());
                    let next = sse_told(&app.events, &t);
                    return Some((Ok(next), (rx, queue, replayed, done)));
                }
                if done {
                    return None;
                }
                loop {
                    if *stop.borrow() {
                        return None;
                    }
                    tokio::select! {
                        got = rx.recv() => match got {
                            // A reload removed or changed the stream's key: it ends.
                            Ok(_) if !still_admitted(&app, &caller, &presented) => return None,
                            Ok(t) if operator || t.event.created_by == principal => {
                                queue.push_back(padding());
                                let next = sse_told(&app.events, &t);
                                return Some((Ok(next), (rx, queue, replayed, false)));
                            }
                            Ok(_) => {}
                            Err(broadcast::error::RecvError::Lagged(n)) => {
                                let body = Value::object([
                                    ("error", Value::str("The subscriber fell behind: events were missed; reconnect and read the actions again")),
                                    ("missed", Value::from(n as i64)),
                                ]);
                                queue.push_back(padding());
                                return Some((Ok(sse("stream.lagged", &body)), (rx, queue, replayed, true)));
                            }
                            Err(broadcast::error::RecvError::Closed) => return None,
                        },
                        changed = stop.changed() => if changed.is_err() { return None; },
                    () = tokio::time::sleep_until(deadline) => return None,
                    }
                }
            }
        },
    );
    (
        [(axum::http::header::CACHE_CONTROL, "no-cache, no-transform")],
        Sse::new(events).keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat")),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: i64) -> Event {
        Event {
            name: EVENT_NAMES[1],
            created_by: "bot".into(),
            data: Value::object([("n", Value::from(n))]),
        }
    }

    fn seqs(replay: &Replay) -> Vec<u64> {
        replay.events.iter().map(|t| t.seq).collect()
    }

    /// A cursor replays what came after it, and the live subscription goes on from there: each
    /// event once, none skipped. A cursor the feed cannot place replays all it keeps and says
    /// why.
    #[test]
    fn a_cursor_replays_what_came_after_it_and_only_that() {
        let feed = Feed::new("r1".into());
        for n in 1..=3 {
            feed.send(event(n));
        }
        let (_, fresh) = feed.subscribe(None);
        assert!(fresh.events.is_empty() && fresh.error.is_none());
        assert_eq!(fresh.after, 3);
        let (mut rx, replay) = feed.subscribe(Some(&feed.cursor(1)));
        assert_eq!((seqs(&replay), replay.error), (vec![2, 3], None));
        feed.send(event(4));
        assert_eq!(rx.try_recv().unwrap().seq, 4);
        assert!(rx.try_recv().is_err());
        let (_, none) = feed.subscribe(Some("r1-4"));
        assert_eq!((seqs(&none), none.error), (vec![], None));
        for unknown in ["r0-2", "r1-5", "r1-x", "r1", "r12", "nonsense", "-1"] {
            let (_, all) = feed.subscribe(Some(unknown));
            assert_eq!(seqs(&all), [1, 2, 3, 4], "{unknown}");
            assert!(
                all.error.as_deref().unwrap().contains("unknown cursor"),
                "{unknown}"
            );
        }
    }

    #[test]
    fn the_feed_keeps_the_last_events_and_says_when_a_cursor_is_older() {
        let feed = Feed::new("r".into());
        for n in 0..(CHANNEL + 10) as i64 {
            feed.send(event(n));
        }
        let oldest = 11;
        // Just before the oldest kept: nothing was dropped after it.
        let (_, replay) = feed.subscribe(Some(&feed.cursor(oldest - 1)));
        assert_eq!(replay.events.len(), CHANNEL);
        assert_eq!(replay.error, None);
        let (_, replay) = feed.subscribe(Some(&feed.cursor(oldest - 2)));
        assert_eq!(replay.events.len(), CHANNEL);
        assert_eq!(replay.events[0].seq, oldest);
        assert_eq!(replay.after, oldest - 1);
        assert!(replay.error.as_deref().unwrap().contains("dropped"));
    }
}
