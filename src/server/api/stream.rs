//! `GET /api/stream`: the actions' changes as Server-Sent Events, in DashClaw's wire shape, so
//! that the SDK's `wait_for_approval` is told of a decision instead of polling.
//!
//! # Events
//!
//! Each event is `event: NAME` and one `data: JSON` line, then a blank line:
//!
//! | Event | When | `data` |
//! |---|---|---|
//! | `connected` | first, once subscribed | `{"status":"ok","orgId":PRINCIPAL,"backend":"memory","realtimeStatus":"healthy","replayed":0,"lastEventId":null,"replayError":null}` |
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
//! The writer thread ([`crate::server::writer`]) sends an operation's events on a broadcast
//! channel after its batch landed, never before and never for an operation that refused or a
//! batch that did not land. Sending never blocks the writer. With `serve --webhooks`, the same
//! events are written to the webhooks' durable outbox first and POSTed to the endpoints that
//! want them ([`crate::server::webhooks`]).
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
//! - No replay: `Last-Event-ID` is ignored and no `id:` lines are sent (DashClaw replays from
//!   its event store; this server keeps none).

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

/// The events the broadcast channel holds for its slowest subscriber.
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

/// The channel the writer feeds and the streams read.
pub(crate) fn channel() -> broadcast::Sender<Arc<Event>> {
    broadcast::channel(CHANNEL).0
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
) -> Response {
    let Ok(permit) = app.streams.clone().try_acquire_owned() else {
        let mut busy = error(503, "Too many open streams");
        busy.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
        return busy;
    };
    let rx = app.events.subscribe();
    let stopping = app.shutdown.subscribe();
    let connected = Value::object([
        ("status", Value::str("ok")),
        ("orgId", Value::str(caller.principal.as_str())),
        ("backend", Value::str("memory")),
        ("realtimeStatus", Value::str("healthy")),
        ("replayed", Value::from(0)),
        ("lastEventId", Value::Null),
        ("replayError", Value::Null),
    ]);
    let principal = caller.principal.clone();
    let operator = caller.operator;
    let presented: Arc<[u8]> = headers
        .get("x-api-key")
        .map_or(&[][..], |v| v.as_bytes())
        .into();
    let caller = Arc::new(caller);
    // State: the subscription, what to send before reading it again, and whether to end then.
    let deadline = tokio::time::Instant::now() + MAX_DURATION;
    let first = std::collections::VecDeque::from([sse("connected", &connected), padding()]);
    let events = futures_util::stream::unfold(
        (rx, first, false),
        move |(mut rx, mut queue, done)| {
            // The permit lives as long as the stream.
            let _permit = &permit;
            let principal = principal.clone();
            let mut stop = stopping.clone();
            let (app, caller, presented) = (app.clone(), caller.clone(), presented.clone());
            async move {
                if let Some(next) = queue.pop_front() {
                    return Some((Ok::<_, Infallible>(next), (rx, queue, done)));
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
                            Ok(e) if operator || e.created_by == principal => {
                                queue.push_back(padding());
                                return Some((Ok(sse(e.name, &e.data)), (rx, queue, false)));
                            }
                            Ok(_) => {}
                            Err(broadcast::error::RecvError::Lagged(n)) => {
                                let body = Value::object([
                                    ("error", Value::str("The subscriber fell behind: events were missed; reconnect and read the actions again")),
                                    ("missed", Value::from(n as i64)),
                                ]);
                                queue.push_back(padding());
                                return Some((Ok(sse("stream.lagged", &body)), (rx, queue, true)));
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
