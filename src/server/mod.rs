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
//! - Memory: the heap holds the queued operations, per open repository (the writer's, each
//!   read thread's) at most 16 MiB of decoded upper trees shared by its snapshots and 16 MiB of
//!   deeper ones per snapshot in use, and a scan's undecided actions. Mapped pack
//!   and index pages are released when they grow by half of
//!   [`MAPPED_BUDGET`](crate::store::MAPPED_BUDGET) above what the last release left
//!   ([`crate::store::Store::bound_mapped_packs`]); the hot index pages of a large repository
//!   stay mapped, 28 bytes per object for each repository that maps them.
//! - The records are exactly the CLI's (`finality/v1/actions/…`), plus guard decision records
//!   and operator approvals, so `action show`, `verify` and the pre-receive hook read what the
//!   server wrote.
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
//! The library reads neither the clock nor the environment: [`Settings`] carries everything,
//! including a [`Clock`] that tests drive.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::finality::{self, batch::Target};
use crate::time::Timestamp;

// Handlers return their early answers (401, 400, …) as `Err(Response)`: boxing them would only
// add noise to every handler.
#[allow(clippy::result_large_err)]
pub mod api;
pub mod auth;
pub mod policy;
pub mod writer;

#[cfg(test)]
mod hostile_tests;

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
    /// Ledger ref, commit identity, attempts and lock wait of the writer.
    pub options: finality::Options,
    /// Local ref or remote.
    pub target: Target,
    /// API keys; empty only with `insecure_no_auth`.
    pub keys: auth::Keys,
    /// No authentication at all (loopback only; every caller is the principal `anonymous` and
    /// an operator).
    pub insecure_no_auth: bool,
    /// The guard policy.
    pub policy: policy::Policy,
    /// The cron secret (`Authorization: Bearer …` of the sweep endpoint); `None`: the endpoint
    /// answers 503.
    pub cron_secret: Option<String>,
    /// Minutes a pending outcome must stay pending on this server's clock, from its creation here
    /// or from when this server first saw it, before it is swept (1–1440).
    pub timeout_minutes: u32,
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
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Diagnostics.
    pub log: Log,
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
}

/// Opens (locally: creates when absent) the repository and starts the writer: everything that
/// can fail before the server is ready.
///
/// # Errors
/// [`Error::Repo`], [`Error::Thread`].
pub fn start(settings: Settings) -> Result<Started, Error> {
    let (app, writer) = api::App::start(settings)?;
    Ok(Started { app, writer })
}

/// Serves a started server on `listener` until `shutdown` resolves, then stops accepting, lets
/// the requests in flight finish (the writer lands what was queued), and returns.
///
/// # Errors
/// [`Error::Io`] when serving fails.
pub async fn serve(
    started: Started,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let Started { app, writer } = started;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let sweeper = api::spawn_sweeper(&app);
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
    app.save_sightings();
    drop(app);
    // The router's clones of the app are gone with the connections: the queue closes and the
    // writer finishes its last batch.
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    result.map_err(|source| Error::Io { addr, source })
}

/// [`start`] then [`serve`].
///
/// # Errors
/// Those of [`start`] and [`serve`].
pub async fn run(
    settings: Settings,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    serve(start(settings)?, listener, shutdown).await
}

async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()>,
    client_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt as _;

    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
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
                let service = router
                    .clone()
                    .map_request(|r: hyper::Request<hyper::body::Incoming>| r.map(axum::body::Body::new));
                let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    // In-flight requests finish; idle keep-alive connections close at once.
    let _ = tokio::time::timeout(Duration::from_secs(60), graceful.shutdown()).await;
    Ok(())
}
