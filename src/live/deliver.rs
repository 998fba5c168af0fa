//! Delivery: the HTTP client, the bounded queue and the drain of a spool's outbox.
//!
//! Limits (ledger-runtime §9): at most [`MAX_IN_FLIGHT`] requests run at once per
//! [`Projector`] (one per process); requests that cannot start wait in a queue of at most
//! [`MAX_QUEUED_PER_ROOT`] per spool root, [`MAX_QUEUED_ROOTS`] roots and [`MAX_QUEUED_TOTAL`] in
//! all; a request refused by a cap fails at once (`queue limit <n> reached`; a new root past the
//! root cap gets the total's message, as in the reference). A freed slot goes to the waiting
//! request whose root has the fewest running requests, the earliest among equals (fair
//! admission: a root with a long queue does not starve another). A waiting request fails once it has
//! waited its per-request timeout; a running one is aborted at its timeout. One deadline bounds
//! a whole drain: what has not settled by then fails, so nothing waits forever.
//!
//! The client is `reqwest` on rustls with the bundled web roots plus the extra CA certificates
//! the caller passes (the CLI reads `SSL_CERT_FILE`); it ignores proxy variables (the library
//! reads no environment) and follows redirects (a same-origin 307 is posted again with the
//! token, as `fetch` does).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::event::Event;
use crate::time::Timestamp;
use crate::writer::files::Root;

use super::config::{Config, Verdict};
use super::outbox::{self, Entry, State};

/// Requests running at once.
pub const MAX_IN_FLIGHT: usize = 4;
/// Requests waiting per spool root.
pub const MAX_QUEUED_PER_ROOT: usize = 64;
/// Spool roots with waiting requests.
pub const MAX_QUEUED_ROOTS: usize = 64;
/// Requests waiting in all.
pub const MAX_QUEUED_TOTAL: usize = 256;

/// The client could not be built. Holds no secret.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The extra CA certificates are not a PEM bundle of certificates.
    #[error("invalid extra CA certificates: {0}")]
    Certificates(String),
    /// The TLS client or its runtime could not be built.
    #[error("cannot build the CrabFleet client: {0}")]
    Build(String),
}

/// Why one delivery failed: the reference's log messages. None holds the token, a header or a
/// response body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// A non-2xx answer.
    #[error("CrabFleet action event append failed ({0})")]
    Status(u16),
    /// No answer: connection refused or reset, TLS failure, too many redirects.
    #[error("fetch failed")]
    Transport,
    /// The per-request timeout ran out, running or waiting, in milliseconds.
    #[error("CrabFleet action event append timed out after {0}ms")]
    Timeout(u64),
    /// The drain's deadline ran out first.
    #[error("CrabFleet projection flush deadline reached")]
    Deadline,
    /// A queue cap refused the request.
    #[error("queue limit {0} reached")]
    QueueLimit(usize),
    /// The configuration is invalid (or projection is no longer configured at drain time).
    #[error("invalid CrabFleet projection configuration")]
    Config,
    /// The request was claimed by a process that died before settling it: it is not posted again.
    #[error("CrabFleet projection interrupted")]
    Interrupted,
}

/// One delivery's outcome.
type Outcome = Result<(), Failure>;

/// The process-wide slots and queues: requests running per root and in all, and the requests
/// waiting for a slot in arrival order.
#[derive(Default)]
struct Sched {
    active_total: usize,
    active: HashMap<String, usize>,
    waiting_total: usize,
    waiting: HashMap<String, usize>,
    waiters: std::collections::VecDeque<Waiter>,
    next_id: u64,
}

/// A request waiting for a slot: [`release`] sends it its [`Slot`].
struct Waiter {
    id: u64,
    root: String,
    grant: tokio::sync::oneshot::Sender<Slot>,
}

fn bump(map: &mut HashMap<String, usize>, root: &str, up: bool) {
    if up {
        *map.entry(root.to_owned()).or_insert(0) += 1;
    } else if let Some(n) = map.get_mut(root) {
        *n -= 1;
        if *n == 0 {
            map.remove(root);
        }
    }
}

/// A running request's slot, released when dropped (also when its task is aborted, or when it
/// is dropped unreceived in a channel): the slot then goes to the waiting request whose root has
/// the fewest running requests, the earliest among equals (fair admission across roots).
struct Slot {
    sched: Arc<Mutex<Sched>>,
    root: String,
    armed: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.armed {
            release(&self.sched, &self.root);
        }
    }
}

fn release(sched: &Arc<Mutex<Sched>>, root: &str) {
    let mut s = sched.lock().expect("sched lock");
    s.active_total -= 1;
    bump(&mut s.active, root, false);
    while s.active_total < MAX_IN_FLIGHT {
        let Some(pos) = (0..s.waiters.len())
            .min_by_key(|&i| (s.active.get(&s.waiters[i].root).copied().unwrap_or(0), i))
        else {
            break;
        };
        let w = s.waiters.remove(pos).expect("a waiter at pos");
        s.waiting_total -= 1;
        bump(&mut s.waiting, &w.root, false);
        s.active_total += 1;
        bump(&mut s.active, &w.root, true);
        let slot = Slot {
            sched: sched.clone(),
            root: w.root.clone(),
            armed: true,
        };
        if let Err(mut back) = w.grant.send(slot) {
            // The waiter is gone (timed out or aborted): undo, try the next one.
            back.armed = false;
            s.active_total -= 1;
            bump(&mut s.active, &w.root, false);
        }
    }
}

/// A waiting request's place in the queue, given up when dropped (timed out or aborted)
/// unless it was granted a slot meanwhile.
struct Place {
    sched: Arc<Mutex<Sched>>,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut s = self.sched.lock().expect("sched lock");
        if let Some(pos) = s.waiters.iter().position(|w| w.id == self.id) {
            let w = s.waiters.remove(pos).expect("a waiter at pos");
            s.waiting_total -= 1;
            bump(&mut s.waiting, &w.root, false);
        }
    }
}

/// How a request starts: at once, after waiting, or refused by a cap.
enum Admission {
    Run(Slot),
    Wait(Place, tokio::sync::oneshot::Receiver<Slot>),
    Refused(usize),
}

/// The process-wide projector: one client, one set of slots and queue caps shared by every
/// root it drains (several threads may drain different roots at once).
pub struct Projector {
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    sched: Arc<Mutex<Sched>>,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projector").finish_non_exhaustive()
    }
}

impl Projector {
    /// A projector trusting the bundled web roots and the certificates of `extra_ca_pem` (a
    /// PEM bundle, such as the file `SSL_CERT_FILE` names).
    pub fn new(extra_ca_pem: Option<&[u8]>) -> Result<Projector, ClientError> {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::limited(20));
        if let Some(pem) = extra_ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| ClientError::Certificates(e.to_string()))?;
            if certs.is_empty() {
                return Err(ClientError::Certificates(
                    "no certificate in the bundle".into(),
                ));
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| ClientError::Build(e.to_string()))?;
        Ok(Projector {
            client,
            runtime,
            sched: Arc::new(Mutex::new(Sched::default())),
        })
    }

    /// Requests waiting for a slot now, in all roots.
    pub fn waiting(&self) -> usize {
        self.sched.lock().expect("sched lock").waiting_total
    }

    /// Admits one request of `root`: a free slot when no request waits, else a place in the
    /// queue within the caps.
    fn admit(&self, root: &str) -> Admission {
        let mut s = self.sched.lock().expect("sched lock");
        if s.active_total < MAX_IN_FLIGHT && s.waiters.is_empty() {
            s.active_total += 1;
            bump(&mut s.active, root, true);
            return Admission::Run(Slot {
                sched: self.sched.clone(),
                root: root.to_owned(),
                armed: true,
            });
        }
        let waiting = s.waiting.get(root).copied().unwrap_or(0);
        if waiting >= MAX_QUEUED_PER_ROOT {
            return Admission::Refused(MAX_QUEUED_PER_ROOT);
        }
        if s.waiting_total >= MAX_QUEUED_TOTAL
            || (waiting == 0 && s.waiting.len() >= MAX_QUEUED_ROOTS)
        {
            return Admission::Refused(MAX_QUEUED_TOTAL);
        }
        let (grant, receive) = tokio::sync::oneshot::channel();
        let id = s.next_id;
        s.next_id += 1;
        s.waiters.push_back(Waiter {
            id,
            root: root.to_owned(),
            grant,
        });
        s.waiting_total += 1;
        bump(&mut s.waiting, root, true);
        let place = Place {
            sched: self.sched.clone(),
            id,
        };
        Admission::Wait(place, receive)
    }

    /// Posts `bodies` (in order, for the spool root `root_key`) under `config`, all within
    /// `deadline`; returns each one's outcome in the same order.
    pub fn post_all(
        &self,
        root_key: &str,
        config: &Config,
        bodies: &[String],
        deadline: Duration,
    ) -> Vec<Result<(), Failure>> {
        let results: Arc<Mutex<Vec<Option<Outcome>>>> =
            Arc::new(Mutex::new(vec![None; bodies.len()]));
        self.runtime.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (i, body) in bodies.iter().enumerate() {
                let admission = match self.admit(root_key) {
                    Admission::Refused(limit) => {
                        results.lock().expect("results")[i] = Some(Err(Failure::QueueLimit(limit)));
                        continue;
                    }
                    other => other,
                };
                let results = results.clone();
                let client = self.client.clone();
                let (endpoint, bearer, timeout_ms) = (
                    config.endpoint.clone(),
                    config.token.bearer(),
                    config.timeout_ms,
                );
                let body = body.clone();
                set.spawn(async move {
                    let timeout = Duration::from_millis(timeout_ms);
                    let permit = match admission {
                        Admission::Run(slot) => Some(slot),
                        Admission::Wait(place, receive) => {
                            let got = tokio::time::timeout(timeout, receive).await;
                            drop(place);
                            got.ok().and_then(Result::ok)
                        }
                        Admission::Refused(_) => unreachable!("refusals are settled above"),
                    };
                    let outcome = match permit {
                        None => Err(Failure::Timeout(timeout_ms)),
                        Some(_permit) => post(&client, &endpoint, &bearer, body, timeout).await,
                    };
                    results.lock().expect("results")[i] = Some(outcome.map_err(|f| match f {
                        Failure::Timeout(_) => Failure::Timeout(timeout_ms),
                        other => other,
                    }));
                });
            }
            let all = async { while set.join_next().await.is_some() {} };
            if tokio::time::timeout(deadline, all).await.is_err() {
                set.abort_all();
                while set.join_next().await.is_some() {}
            }
        });
        let mut results = results.lock().expect("results");
        results
            .iter_mut()
            .map(|r| r.take().unwrap_or(Err(Failure::Deadline)))
            .collect()
    }
}

/// One POST: any 2xx succeeds (the body is not read).
async fn post(
    client: &reqwest::Client,
    endpoint: &str,
    bearer: &str,
    body: String,
    timeout: Duration,
) -> Result<(), Failure> {
    let sent = client
        .post(endpoint)
        .header("authorization", bearer)
        .header("content-type", "application/json")
        .body(body)
        .timeout(timeout)
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(Failure::Status(r.status().as_u16())),
        Err(e) if e.is_timeout() => Err(Failure::Timeout(timeout.as_millis() as u64)),
        Err(_) => Err(Failure::Transport),
    }
}

/// What one drain did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Requests answered 2xx now.
    pub delivered: usize,
    /// Requests whose `projection.failed` event was recorded now.
    pub failed: usize,
    /// Requests another live process is posting (left to it).
    pub busy: usize,
    /// One line per failure (the reference's log messages; never the token), and per failure
    /// that could not be recorded.
    pub log: Vec<String>,
}

/// The source event a request body carries (`payload.event`).
fn source_of(root: &Root, entry: &Entry, body: &str) -> Result<Event, super::Error> {
    let malformed = |what: &str| super::Error::Outbox {
        path: root.display_path(&entry.path("request")),
        what: what.to_owned(),
    };
    let v = crate::canonical::parse(body).map_err(|_| malformed("not JSON"))?;
    let event = v
        .get("payload")
        .and_then(|p| p.get("event"))
        .ok_or_else(|| malformed("no payload.event"))?;
    let line = crate::canonical::to_canonical_unchecked(event);
    Event::parse_line(&line, "outbox request")
        .map_err(|_| malformed("payload.event is not an event"))
}

/// The durable event a reserved `entry` names (`event_path`), when it was written and is the
/// event the intent was made for.
fn reserved_event(
    root: &Root,
    entry: &Entry,
    event_path: &str,
) -> Result<Option<Event>, super::Error> {
    let text = root.read_text(
        event_path,
        crate::writer::spool::MAX_EVENT_FILE_BYTES,
        "action event",
    )?;
    let Some(text) = text else {
        return Ok(None);
    };
    let event =
        Event::parse_line(text.trim_end(), "action event").map_err(|_| super::Error::Outbox {
            path: root.display_path(event_path),
            what: "the reserved event is not an event".into(),
        })?;
    Ok((event.event_id.as_str() == entry.event_id).then_some(event))
}

/// Settles every unsettled request of the outbox at `root` (its key `root_key` for the queue
/// caps) under `verdict`, within `deadline`: pending requests are claimed (process `pid`) and
/// posted; a 2xx marks the request delivered; any failure records `projection.failed`
/// (`recorded_at` from `wall()` at that moment) and marks it failed. A request claimed by a
/// dead process is not posted again: its failure is recorded. Failures to record a failure are
/// only logged (in the report), as in the reference.
pub fn drain(
    projector: Option<&Projector>,
    root: &Root,
    verdict: &Verdict,
    deadline: Duration,
    pid: u32,
    wall: &dyn Fn() -> Timestamp,
) -> Result<DrainReport, super::Error> {
    let mut report = DrainReport::default();
    let mut to_post: Vec<(Entry, Event, String)> = Vec::new();
    let settle = |report: &mut DrainReport, entry: &Entry, source: &Event, f: Failure| {
        report
            .log
            .push(format!("live CrabFleet projection failed: {f}"));
        match super::record_failure(root, source, wall()) {
            Ok(_) => {
                report.failed += 1;
                if let Err(e) = outbox::mark_failed(root, entry) {
                    report
                        .log
                        .push(format!("cannot mark {}: {e}", entry.event_id));
                }
            }
            Err(e) => report
                .log
                .push(format!("cannot record projection failure: {e}")),
        }
    };
    // A writer killed mid-write left its staging file (`*.<pid>.<uuid>.tmp`); nothing reads
    // one, and a live writer's is kept. Best effort: debris must not stop a drain.
    let _ = root.remove_dead_staging(outbox::DIR, outbox::MAX_ENTRIES);
    for entry in outbox::entries(root)? {
        let mut state = outbox::state(root, &entry)?;
        if let State::Reserved(intent) = &state {
            if intent.pid == pid || crate::process::pid_alive(intent.pid) {
                // Its writer is still on its way to the request (or the failure).
                report.busy += 1;
                continue;
            }
            // The writer died between its intent and the request: the event decides.
            let Some(event) = reserved_event(root, &entry, &intent.event_path)? else {
                outbox::void(root, &entry)?;
                continue;
            };
            if intent.failure {
                if outbox::claim(root, &entry, pid)? {
                    settle(&mut report, &entry, &event, Failure::Config);
                }
                continue;
            }
            outbox::fulfil(root, &entry, &event)?;
            state = outbox::state(root, &entry)?;
        }
        let body = match state {
            State::Done | State::Reserved(_) => continue,
            State::Sending(p) if p != pid && crate::process::pid_alive(p) => {
                report.busy += 1;
                continue;
            }
            _ => outbox::body(root, &entry)?,
        };
        let source = source_of(root, &entry, &body)?;
        if let State::Sending(_) = state {
            settle(&mut report, &entry, &source, Failure::Interrupted);
            continue;
        }
        match (verdict, projector) {
            (Verdict::Valid(_), Some(_)) => {
                if outbox::claim(root, &entry, pid)? {
                    to_post.push((entry, source, body));
                } else {
                    report.busy += 1;
                }
            }
            _ => {
                if outbox::claim(root, &entry, pid)? {
                    settle(&mut report, &entry, &source, Failure::Config);
                }
            }
        }
    }
    if let (Verdict::Valid(config), Some(projector)) = (verdict, projector) {
        let bodies: Vec<String> = to_post.iter().map(|(_, _, b)| b.clone()).collect();
        let key = root.path().display().to_string();
        let outcomes = projector.post_all(&key, config, &bodies, deadline);
        for ((entry, source, _), outcome) in to_post.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {
                    outbox::mark_delivered(root, entry)?;
                    report.delivered += 1;
                }
                Err(f) => settle(&mut report, entry, source, f),
            }
        }
    }
    Ok(report)
}
