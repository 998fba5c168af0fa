//! `serve`: the execution finality runtime API over HTTP, wire-compatible with the DashClaw
//! clients (the Python SDK `dashclaw` 5.33.9 and the hooks), backed by the Git state repository.
//!
//! # Architecture
//!
//! - An axum router on tokio answers requests ([`api`]). It parses and checks every request
//!   body on the executor, but never touches Git there.
//! - Reads (`GET`) run on tokio's blocking threads, each with its own open repository.
//! - Every write goes to ONE writer thread ([`writer`]) as a queued operation. The writer takes
//!   all operations queued at that moment, plans each on the tip plus the operations before it
//!   ([`crate::finality::batch`]), writes them as one commit and lands it with one
//!   compare-and-swap of the ledger ref (or one leased push with `--remote`). A request is
//!   answered only after its commit landed; a moved ref is re-planned, and when the attempts are
//!   used up the request gets 503, never a false conflict.
//! - The stale-outcome sweep (the timer and the cron endpoint) scans the tip on a read thread
//!   and hands the writer only its candidates, which the writer checks again: a scan grows with
//!   the repository, and inside the writer it would hold every other request.
//! - The server logs every batch, pack roll-up and sweep scan of 1 s or more (`SLOW`), with
//!   its duration.
//! - `GET /metrics` answers the request counts and latencies by route template, the writer's
//!   batch sizes, commit latencies and queue depth, the roll-up times, the sweeps and the
//!   reloads, in the OpenMetrics text format, without a key like `/healthz` ([`metrics`]: the
//!   list, and what a label may hold).
//! - Memory: the heap holds the queued operations, per open repository (the writer's, each
//!   read thread's) at most 16 MiB of decoded upper trees shared by its snapshots and 16 MiB of
//!   deeper ones per snapshot in use, and a scan's undecided actions. Mapped pack
//!   and index pages are released when they grow by half of
//!   [`MAPPED_BUDGET`](crate::store::MAPPED_BUDGET) above what the last release left
//!   ([`crate::store::Store::bound_mapped_packs`]); the hot index pages of a large repository
//!   stay mapped, 28 bytes per object for each repository that maps them.
//! - The records are exactly the CLI's (`finality/v1/actions/…`), plus guard decision records,
//!   operator approvals and containment verdicts, so `action show`, `verify` and the
//!   pre-receive hook read what the server wrote.
//!
//! # Idempotency keys
//!
//! `POST /api/actions` and `POST /api/guard?record=true` take an `idempotency_key`, scoped to
//! the authenticated principal; both name the same action for it. A request under a key (or an
//! explicit `action_id`) already used is compared with the binding the ledger stored for the
//! first request: `action_type`, `agent_id`, principal, act hash, protocol (`execution_claims`),
//! `allow_contained` for a contained action, and the initial `status`. The same binding is a
//! replay: nothing is written or decided again, and the answer is the first one's status and
//! body shape (201, 202 or 403 for a creation, the stored decision for the guard) with
//! `idempotent_replay: true`. Another binding is refused and never answered with the stored
//! action or its verdict: 422 `IDEMPOTENCY_KEY_REUSED` under a key (the IETF `Idempotency-Key`
//! draft's status for a key reused with another payload), 409 `ACTION_EXISTS` under an explicit
//! id (as `action create --id` refuses it). A request refused before it wrote anything (400,
//! 401, 503) left nothing under its key, so its retry may create. [`api::actions`] gives the
//! rule in full.
//!
//! # Who may settle an action
//!
//! An outcome (`POST /api/actions/{id}/outcome`) or a close (`PATCH /api/actions/{id}`) is
//! accepted only from the key of the principal that created the action, or from an operator
//! key. Any other key is answered 404 `NOT_FOUND`, as for an id that does not exist
//! ([`finality::Settler`]). Acts the act hash cannot take one to one are refused with 400
//! naming their path ([`finality::act::check_act`]).
//!
//! # Reloading the keys and the policy (SIGHUP)
//!
//! [`serve`] takes SIGHUP over (it no longer stops the process): each one calls
//! [`api::App::reload`], which asks the reload source the CLI gave ([`Settings::reload`]: it
//! reads `--api-keys` and `--policy` again and adds the key of `$ACTION_LEDGER_API_KEY`, read
//! once at start) for a new [`Access`]. When both files parse, and the keys still fit the
//! server's authentication (at least one key; none with `--insecure-no-auth`), the keys and
//! the policy are swapped together: a request takes them once, when it is authenticated, and
//! finishes with that version. Otherwise nothing changes. Either way one line is logged: the
//! counts (`reloaded: 2 API key(s), 4 policy rule(s)`), or `reload refused, …` with the file and
//! the rule it breaks (keys-file errors never quote a column that may hold a key). The reloads
//! are counted in `/metrics`. SIGINT and SIGTERM still stop the server gracefully.
//!
//! With `--webhooks FILE`, SIGHUP also reads the webhooks file again ([`webhooks`]): a malformed
//! file keeps the webhooks in force and logs why, independently of the keys and the policy.
//!
//! # Webhooks
//!
//! The events of `GET /api/stream` are also POSTed, signed with HMAC-SHA256 as DashClaw signs
//! them, to the endpoints of `--webhooks FILE`, through a durable outbox the writer fills after
//! each landed commit and before it answers, and a background task drains ([`webhooks`]).
//!
//! The library reads neither the clock nor the environment: [`Settings`] carries everything,
//! including a [`Clock`] that tests drive.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::finality;
use crate::time::Timestamp;

// Handlers return their early answers (401, 400, …) as `Err(Response)`: boxing them would only
// add noise to every handler.
#[allow(clippy::result_large_err)]
pub mod api;
pub mod auth;
pub mod dashboard;
pub mod metrics;
pub mod policy;
pub mod webhooks;
pub mod writer;

#[cfg(test)]
mod hostile_tests;

/// How long a stopping server waits for the webhook requests in flight to be answered; those
/// still unanswered then are sent again after the next start.
const DELIVERER_STOP: Duration = Duration::from_secs(5);

/// Largest request body (64 KiB); larger bodies get 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The time source of the server. Injected so tests can drive time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

impl<F: Fn() -> Timestamp + Send + Sync> Clock for F {
    fn now(&self) -> Timestamp {
        self()
    }
}

/// Where diagnostics go (the CLI prints them on stderr unless `--quiet`).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// Everything the server needs, resolved by the CLI.
#[derive(Clone)]
pub struct Settings {
    /// The state repository (with `--remote`, only a cache of objects).
    pub repo: PathBuf,
    /// Ledger ref, commit identity, attempts and lock wait of the writer, and where it lands
    /// (`options.target`: the local ref or a remote).
    pub options: finality::Options,
    /// API keys at start; empty only with `insecure_no_auth` ([`api::App::access`] holds those in
    /// force after a reload).
    pub keys: auth::Keys,
    /// No authentication at all (loopback only; every caller is the principal `anonymous` and
    /// an operator).
    pub insecure_no_auth: bool,
    /// The guard policy at start (as the keys).
    pub policy: policy::Policy,
    /// Reads the keys and the policy again on SIGHUP ([`Reload`]); `None`: SIGHUP is logged and
    /// changes nothing.
    pub reload: Option<Reload>,
    /// The cron secret (`Authorization: Bearer …` of the sweep endpoint); `None`: the endpoint
    /// answers 503.
    pub cron_secret: Option<String>,
    /// Minutes a pending outcome must stay pending on this server's clock, from its creation here
    /// or from when this server first saw it, before it is swept (1–1440).
    pub timeout_minutes: u32,
    /// When the sweep expires approvals nobody gave (`--approval-timeout`, the wait of an action
    /// created without `approval_wait_seconds`; the retry grace added to every wait).
    pub approval_expiry: finality::ApprovalExpiry,
    /// Sweep on a timer this often; `None`: never.
    pub sweep_every: Option<Duration>,
    /// Most operations in one commit (1: one commit per operation, for comparison).
    pub max_batch: usize,
    /// How long the writer waits after the first queued operation for more to join its batch,
    /// when the last batch had more than one (a few milliseconds: the clients answered by one
    /// commit send their next requests together).
    pub batch_linger: Duration,
    /// How long a client may take to send a request's headers, and then its body.
    pub client_timeout: Duration,
    /// At most this many `GET /api/stream` subscribers at once; past it, 503
    /// ([`api::stream`]).
    pub max_streams: usize,
    /// The webhooks of `--webhooks FILE` and how to read the file again on SIGHUP
    /// ([`webhooks`]); `None`: no webhooks.
    pub webhooks: Option<webhooks::Setup>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Diagnostics.
    pub log: Log,
}

/// What the operator may change while the server runs: the keys and the policy, swapped
/// together by [`api::App::reload`].
#[derive(Clone, Debug)]
pub struct Access {
    /// The API keys.
    pub keys: auth::Keys,
    /// The guard policy.
    pub policy: policy::Policy,
}

/// The reload source the CLI hands the server: reads the keys file and the policy file again
/// (and adds the key of the environment, read once at start). `Err` names the file and why,
/// never the key material. The library reads no file or environment itself.
pub type Reload = Arc<dyn Fn() -> Result<Access, String> + Send + Sync>;

/// Why a reload was refused; the keys and policy in force stay.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// No reload source was configured.
    #[error("nothing to reload (no keys or policy file)")]
    NoSource,
    /// A file could not be read or parsed (the source's message).
    #[error("{0}")]
    Source(String),
    /// The keys file now holds no key, and the server requires one.
    #[error("no API key would be left (an empty keys file locks every client out)")]
    NoKeys,
    /// Keys appeared on a server started with `--insecure-no-auth`.
    #[error(
        "the keys file now holds keys, which contradicts --insecure-no-auth: restart without it"
    )]
    KeysWithoutAuth,
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The state repository could not be opened or created.
    #[error("cannot open state repository {path}: {source}")]
    Repo {
        /// The repository.
        path: String,
        /// The cause.
        #[source]
        source: crate::store::Error,
    },
    /// Listening or accepting failed.
    #[error("cannot serve on {addr}: {source}")]
    Io {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The writer thread could not be started.
    #[error("cannot start the writer thread: {0}")]
    Thread(std::io::Error),
    /// SIGHUP could not be taken over.
    #[error("cannot listen for SIGHUP: {0}")]
    Signal(std::io::Error),
    /// The webhooks' outbox could not be opened.
    #[error(transparent)]
    Webhooks(#[from] webhooks::StartError),
    /// The event stream's run id (random) could not be made.
    #[error("cannot make the event stream's run id: {0}")]
    Random(crate::random::Unavailable),
}

/// Whether `addr` is a loopback address (the only place `--insecure-no-auth` is accepted).
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// A server whose repository is open and whose writer runs, not yet accepting connections.
pub struct Started {
    app: Arc<api::App>,
    writer: writer::Handle,
    hangup: Option<tokio::signal::unix::Signal>,
}

impl Started {
    /// Takes SIGHUP over from now on: it then reloads instead of stopping the process (its
    /// default). Call it inside the runtime before announcing that the server is ready, so a
    /// SIGHUP sent right after the announcement cannot stop it; [`serve`] does it otherwise.
    ///
    /// # Errors
    /// [`Error::Signal`].
    pub fn take_hangup(&mut self) -> Result<(), Error> {
        if self.hangup.is_none() {
            let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
                .map_err(Error::Signal)?;
            self.hangup = Some(hangup);
        }
        Ok(())
    }
}

/// Reloads on each SIGHUP ([`api::App::reload`], on a blocking thread: it reads files).
fn spawn_reloader(
    app: &Arc<api::App>,
    mut hangup: tokio::signal::unix::Signal,
) -> tokio::task::JoinHandle<()> {
    let app = app.clone();
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            let app = app.clone();
            let _ = tokio::task::spawn_blocking(move || app.reload()).await;
        }
    })
}

/// Opens (locally: creates when absent) the repository and starts the writer: everything that
/// can fail before the server is ready.
///
/// # Errors
/// [`Error::Repo`], [`Error::Thread`].
pub fn start(settings: Settings) -> Result<Started, Error> {
    let (app, writer) = api::App::start(settings)?;
    Ok(Started {
        app,
        writer,
        hangup: None,
    })
}

/// Serves a started server on `listener` until `shutdown` resolves, then stops accepting, lets
/// the requests in flight finish (the writer lands what was queued), closes the connections
/// that are idle or still sending a request head (a half-sent request would otherwise hold the
/// stop for the client timeout), and returns. Each SIGHUP
/// meanwhile reloads the keys and the policy ([`api::App::reload`]).
///
/// # Errors
/// [`Error::Signal`] when SIGHUP cannot be taken over, [`Error::Io`] when serving fails.
pub async fn serve(
    mut started: Started,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    started.take_hangup()?;
    let Started {
        app,
        writer,
        hangup,
    } = started;
    let reloader = hangup.map(|h| spawn_reloader(&app, h));
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let sweeper = api::spawn_sweeper(&app);
    let deliverer = app
        .webhooks()
        .map(|hooks| webhooks::spawn_deliverer(hooks.clone(), app.stopped()));
    let router = api::router(app.clone());
    // A sweep's scan in flight (the timer's, or a cron request's that the graceful shutdown
    // would wait for) holds the app, and so the writer's queue, until it returns: told at the
    // shutdown's start, it gives up instead of walking a large repository to the end.
    let stopping = app.clone();
    let shutdown = async move {
        shutdown.await;
        stopping.stop();
    };
    let result = serve_connections(listener, router, shutdown, app.settings.client_timeout).await;
    if let Some(s) = sweeper {
        s.abort();
    }
    if let Some(r) = reloader {
        r.abort();
    }
    app.save_sightings();
    drop(app);
    // The router's clones of the app are gone with the connections: the queue closes and the
    // writer finishes its last batch.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    // The webhooks' task settles the requests in flight (no new one starts once stopping);
    // whatever is left stays in the outbox for the next start.
    if let Some(mut d) = deliverer
        && tokio::time::timeout(DELIVERER_STOP, &mut d).await.is_err()
    {
        d.abort();
    }
    result.map_err(|source| Error::Io { addr, source })
}

async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()>,
    client_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt as _;

    // `shutdown()` waits until every connection task has dropped its watcher (or 60 s).
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(client_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    // Out of descriptors or a connection reset before accept: keep serving.
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // Requests of this connection dispatched and not yet answered to the end of
                // their body.
                let in_flight = Arc::new(AtomicUsize::new(0));
                let (started, answered) = (in_flight.clone(), in_flight.clone());
                let service = router
                    .clone()
                    .map_request(move |r: hyper::Request<hyper::body::Incoming>| {
                        started.fetch_add(1, Ordering::SeqCst);
                        r.map(axum::body::Body::new)
                    })
                    .map_response(move |r: axum::response::Response| {
                        let guard = InFlight(answered.clone());
                        r.map(|body| Counted { body, _guard: guard })
                    });
                let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
                let watcher = graceful.watcher();
                let mut stopping = stopping.clone();
                tokio::spawn(async move {
                    let _watcher = watcher;
                    let mut conn = std::pin::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => return,
                        _ = stopping.wait_for(|s| *s) => {}
                    }
                    // Nothing dispatched: the connection is idle or still sending a request
                    // head, which would hold the shutdown for the header timeout. It is
                    // closed; nothing of it ran.
                    if in_flight.load(Ordering::SeqCst) == 0 {
                        return;
                    }
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // In-flight requests finish; idle connections and half-sent requests close at once.
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(60), graceful.shutdown()).await;
    Ok(())
}

/// One request of a connection in flight, until its response body is written or dropped.
struct InFlight(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A response body that holds its request's [`InFlight`] mark until it is done; otherwise
/// the body it wraps, frame for frame (its size hint too, so `Content-Length` is unchanged).
struct Counted {
    body: axum::body::Body,
    _guard: InFlight,
}

impl hyper::body::Body for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
