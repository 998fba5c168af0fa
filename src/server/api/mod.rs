//! The HTTP endpoints: routes, authentication, request parsing, and the mapping of finality
//! results onto the reference's status codes, bodies and refusal codes.
//!
//! | Route | What | Module |
//! |---|---|---|
//! | `POST /api/guard[?record=true]` | policy decision (recorded); with `record`, the action; a folded claim | [`actions`] |
//! | `GET /api/guard` | the guard decisions, filtered and paged (`get_guard_decisions`) | [`lists`] |
//! | `POST /api/actions` | create an action (201, 202 pending approval, 403 blocked, 200 replay) | [`actions`] |
//! | `GET /api/actions` | the actions, filtered and paged (`get_actions`, `get_pending_approvals`) | [`lists`] |
//! | `GET /api/actions/stats` | counts of the actions by lifecycle | [`lists`] |
//! | `GET /api/actions/{id}` | the action (`{action:{…}}`) | [`reads`] |
//! | `PATCH /api/actions/{id}` | the claim (`claim_execution`), or the legacy close (`status`) | [`claims`] |
//! | `GET /api/actions/{id}/outcome` | the outcome view | [`reads`] |
//! | `POST /api/actions/{id}/outcome` | the one-shot outcome report | [`outcomes`] |
//! | `POST /api/actions/{id}/approve` | an operator's approval or denial | [`approvals`] |
//! | `GET /api/stream` | the actions' changes as Server-Sent Events (`wait_for_approval`) | [`stream`] |
//! | `POST /api/actions/{id}/cancel` | cancel an action allowed but never executed (one-shot) | [`cancel`] |
//! | `POST /api/actions/{id}/containment` | promote or discard a contained action awaiting promotion (one-shot) | [`containment`] |
//! | `GET /api/cron/outcome-sweep` | the stale-outcome sweep (`Authorization: Bearer` cron secret) | [`sweep`] |
//! | `GET /healthz` | 200 when the repository is readable, else 503 | [`reads`] |
//! | `GET /metrics` | the metrics, OpenMetrics text (not JSON), no key needed | [`crate::server::metrics`] |
//! | `GET /`, `/ui/…` | the operators' dashboard, HTML behind a session cookie | [`crate::server::dashboard`] |
//!
//! Every answer but the dashboard's is JSON, errors included (`{"error": …}`, with `code` where the reference has
//! one); unknown routes are a JSON 404 and wrong methods a JSON 405 ([`respond`]).
//!
//! # Status codes
//!
//! - 400: a body that is not JSON, not an object, or breaks a field rule (`Validation failed`
//!   with `details`, or the route's own message and `code`).
//! - 401: no key or an unknown key (`x-api-key`), or a wrong cron secret.
//! - 403: a claim without an agent identity, an approval by a non-operator, a blocked creation.
//! - 404: an unknown action (also an id that is not a valid action id).
//! - 408 / 413: the body did not arrive within the client timeout / is over 64 KiB.
//! - 409: a refusal by the ledger's state (claim conflict, outcome already set, terminal state,
//!   an id taken by another principal), with `code` and `current_status` where they apply.
//! - 503: the ledger could not be read or written, or the writer's attempts were used up
//!   (`LEDGER_UNAVAILABLE`, `EXECUTION_CLAIM_UNAVAILABLE`): nothing was recorded, retry.
//!
//! # Authentication
//!
//! Each request presents `x-api-key`; the keys file holds the SHA-256 of each key with its
//! principal and an optional `operator` mark, compared in constant time ([`crate::server::auth`]).
//! The extractors of [`extract`] apply it before the body is read.
//!
//! # Access log
//!
//! Every request, whatever its route and answer, is counted in `/metrics` and leaves one JSON
//! line on the server's log: method, route template, status, duration, the principal when it
//! was authenticated, the client's `x-request-id`; never a key, a body or the query string
//! ([`observe`]).
//!
//! # Writes and group commit
//!
//! A write handler checks the request on the executor, then submits one operation to the writer
//! thread ([`crate::server::writer`]). The writer plans every queued operation on the tip plus
//! the operations before it, lands them as one commit with one compare-and-swap of the ref (or a
//! leased push), and only then answers each request. An operation that refuses writes nothing
//! and does not affect the others in its batch.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::auth;
use super::metrics::Metrics;
use super::writer::{Handle, Writer};
use super::{Access, Error, ReloadError, Settings};
use crate::finality::batch::Target;
use crate::finality::{Observations, observations};
use crate::store::{CommitId, Store};

pub mod actions;
pub mod approvals;
pub mod cancel;
pub mod claims;
pub mod containment;
pub mod extract;
pub mod lists;
pub mod observe;
pub mod outcomes;
pub mod reads;
pub mod respond;
pub mod stream;
pub mod sweep;

#[cfg(test)]
mod tests;

pub use sweep::spawn_sweeper;

/// The shared state of the handlers.
pub struct App {
    /// The settings the server was started with.
    pub settings: Settings,
    writer: Writer,
    /// The counters, gauges and histograms of `GET /metrics`.
    metrics: Arc<Metrics>,
    /// The keys and policy in force: a request takes them once, when it is authenticated, and
    /// keeps that version to its end; [`App::reload`] swaps in new ones.
    access: std::sync::RwLock<Arc<Access>>,
    cron_digest: Option<[u8; 32]>,
    /// Set when the server stops taking connections: a sweep's scan then gives up.
    stopping: std::sync::atomic::AtomicBool,
    /// When, on this server's clock, it first saw each pending action: the sweep times actions
    /// from it, never from another writer's `created_at`
    /// ([`crate::finality::sweep`](mod@crate::finality::sweep)). Settled actions are forgotten.
    observations: std::sync::Mutex<Observations>,
    /// Where the sightings are kept between runs, shared with the CLI's `sweep` and `action
    /// create` on the same repository and target ([`crate::finality::observations`]): read at
    /// start and before each sweep, written after each sweep and when the server has stopped.
    observations_file: PathBuf,
    /// The operators' dashboard's sessions and its cached lane view
    /// ([`crate::server::dashboard`]).
    pub(crate) dashboard: crate::server::dashboard::Dashboard,
    /// The landed changes, fed by the writer, read by `GET /api/stream` ([`stream`]).
    events: Arc<stream::Feed>,
    /// One permit per open stream ([`Settings::max_streams`]).
    streams: Arc<tokio::sync::Semaphore>,
    /// Set to `true` by [`App::stop`]: the open streams end.
    shutdown: tokio::sync::watch::Sender<bool>,
    /// The webhooks (`--webhooks`), shared with the writer and the delivery task.
    webhooks: Option<Arc<crate::server::webhooks::Webhooks>>,
}

impl App {
    /// Opens (locally: creates when absent) the repository and starts the writer.
    ///
    /// # Errors
    /// [`Error::Repo`], [`Error::Thread`].
    pub fn start(settings: Settings) -> Result<(Arc<App>, Handle), Error> {
        let repo_err = |source| Error::Repo {
            path: settings.repo.display().to_string(),
            source,
        };
        let head = match &settings.options.target {
            Target::Local => &settings.options.ref_name,
            Target::Remote { ref_name, .. } => ref_name,
        };
        let store = Store::open_or_init_bare(&settings.repo, head).map_err(repo_err)?;
        let observations_file = observations::file_path(
            store.git_dir(),
            &settings.options.ref_name,
            &settings.options.target,
        );
        let git_dir = store.git_dir().to_owned();
        let seen = observations::load(&observations_file).unwrap_or_else(|e| {
            (settings.log)(&format!("sweep observations ignored: {e}"));
            Observations::new()
        });
        let metrics = Arc::new(Metrics::new());
        let run = crate::random::bytes::<8>().map_err(Error::Random)?;
        let events = Arc::new(stream::Feed::new(hex::encode(run)));
        let webhooks = match &settings.webhooks {
            Some(setup) => {
                let dir = crate::server::webhooks::outbox_dir(
                    &git_dir,
                    &settings.options.ref_name,
                    &settings.options.target,
                );
                for e in &setup.config.endpoints {
                    metrics.webhook_endpoint(&e.name);
                }
                // A kill between a batch's staged deliveries and its compare-and-swap: look for
                // the commit in the ledger's history (read at most once per start).
                let mut tip = None;
                let mut landed = |hex: &str| -> Result<bool, String> {
                    // A name no commit of this repository can have never landed.
                    let Ok(commit) = CommitId::from_hex(hex) else {
                        return Ok(false);
                    };
                    let tip = tip
                        .get_or_insert_with(|| {
                            settings
                                .options
                                .target
                                .tip(&store, &settings.options.ref_name)
                                .map_err(|e| e.to_string())
                        })
                        .clone()?;
                    match tip {
                        Some(tip) => store.is_ancestor(commit, tip).map_err(|e| e.to_string()),
                        None => Ok(false),
                    }
                };
                Some(crate::server::webhooks::Webhooks::start(
                    setup.clone(),
                    &dir,
                    &mut landed,
                    metrics.clone(),
                    settings.log.clone(),
                    settings.clock.clone(),
                )?)
            }
            None => None,
        };
        drop(store);
        let (writer, handle) = Writer::start(
            settings.repo.clone(),
            settings.options.clone(),
            settings.clock.clone(),
            settings.max_batch,
            settings.batch_linger,
            settings.log.clone(),
            metrics.clone(),
            events.clone(),
            webhooks.clone(),
        )
        .map_err(Error::Thread)?;
        let streams = Arc::new(tokio::sync::Semaphore::new(settings.max_streams));
        let cron_digest = settings
            .cron_secret
            .as_deref()
            .filter(|s| !s.is_empty())
            .map(|s| auth::sha256(s.as_bytes()));
        let access = std::sync::RwLock::new(Arc::new(Access {
            keys: settings.keys.clone(),
            policy: settings.policy.clone(),
        }));
        Ok((
            Arc::new(App {
                settings,
                writer,
                metrics,
                access,
                cron_digest,
                stopping: std::sync::atomic::AtomicBool::new(false),
                observations: std::sync::Mutex::new(seen),
                observations_file,
                dashboard: crate::server::dashboard::Dashboard::new(),
                events,
                streams,
                shutdown: tokio::sync::watch::channel(false).0,
                webhooks,
            }),
            handle,
        ))
    }

    /// The keys and policy in force now.
    pub fn access(&self) -> Arc<Access> {
        self.access
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the keys and the policy again through the reload source ([`Settings::reload`]) and,
    /// when both parse and the keys still fit the server's authentication (some key, unless
    /// `--insecure-no-auth`; none with it), puts them in force together: requests already
    /// authenticated finish with the version they started with. Otherwise the old ones stay.
    /// Either way, one line is logged: the counts, or which file and why (never a key).
    ///
    /// # Errors
    /// [`ReloadError`]: why nothing changed.
    pub fn reload(&self) -> Result<(), ReloadError> {
        // The webhooks file is read again on its own: a malformed one keeps the webhooks in
        // force (and is logged by it), whatever happens to the keys and the policy.
        if let Some(hooks) = &self.webhooks {
            let _ = hooks.reload();
        }
        let result = self.try_reload();
        self.metrics.reload(result.is_ok());
        match &result {
            Ok(()) => {
                let access = self.access();
                (self.settings.log)(&format!(
                    "reloaded: {} API key(s), {} policy rule(s)",
                    access.keys.len(),
                    access.policy.rules.len()
                ));
            }
            Err(e) => (self.settings.log)(&format!(
                "reload refused, the previous keys and policy stay in force: {e}"
            )),
        }
        result
    }

    fn try_reload(&self) -> Result<(), ReloadError> {
        let source = self.settings.reload.as_ref().ok_or(ReloadError::NoSource)?;
        let fresh = source().map_err(ReloadError::Source)?;
        match (self.settings.insecure_no_auth, fresh.keys.is_empty()) {
            (false, true) => return Err(ReloadError::NoKeys),
            (true, false) => return Err(ReloadError::KeysWithoutAuth),
            _ => {}
        }
        *self
            .access
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// The webhooks (`--webhooks`), when configured.
    pub fn webhooks(&self) -> Option<&Arc<crate::server::webhooks::Webhooks>> {
        self.webhooks.as_ref()
    }

    /// Turns `true` when [`App::stop`] is called.
    pub fn stopped(&self) -> tokio::sync::watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Tells the work that can take long (a sweep's scan) to give up and ends the open event
    /// streams: the server is stopping.
    pub fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shutdown.send_replace(true);
    }

    /// Keeps the sweep's sightings for the next run (once the last request has been answered):
    /// what this server created since its last sweep is then timed from its creation after a
    /// restart too. A failure is logged.
    pub fn save_sightings(&self) {
        let seen = self.observations().clone();
        self.save_observations(&seen);
    }

    /// Whether [`App::stop`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The sweep's memory of pending actions (a poisoned lock still holds valid sightings).
    fn observations(&self) -> std::sync::MutexGuard<'_, Observations> {
        self.observations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records that this server's request created (or found) action `id`, now on its clock: the
    /// sweep times the action from here.
    fn witness(&self, id: &crate::finality::ActionId) {
        let now = self.settings.clock.now();
        self.observations().witness(id.clone(), now);
    }

    /// Forgets action `id`, which this server settled (it can no longer be swept), so that the
    /// sightings hold what is pending, not everything the server created.
    fn forget(&self, id: &str) {
        if let Some(id) = crate::finality::ActionId::parse(id) {
            self.observations().forget(&id);
        }
    }

    /// Adds the kept sightings (another process's, the CLI's) to `seen`; an unreadable file is
    /// logged and ignored (a delay, never an early sweep).
    fn merge_saved_observations(&self, seen: &mut Observations) {
        match observations::load(&self.observations_file) {
            Ok(saved) => seen.merge(&saved),
            Err(e) => (self.settings.log)(&format!("sweep observations ignored: {e}")),
        }
    }

    /// Keeps `seen` for the next run and for the CLI; a failure is logged (a lost sighting only
    /// delays a sweep).
    fn save_observations(&self, seen: &Observations) {
        if let Err(e) = observations::save(&self.observations_file, seen) {
            (self.settings.log)(&format!(
                "sweep observations not saved ({}: {}): after a restart, sweeps wait one more \
                 timeout",
                e.kind(),
                crate::durable::io_advice(&e)
            ));
        }
    }
}

/// The router of every endpoint, with JSON 404 and 405 fallbacks.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(reads::healthz))
        .route("/metrics", get(metrics_text))
        .route(
            "/api/guard",
            get(lists::list_decisions).post(actions::guard),
        )
        .route(
            "/api/actions",
            get(lists::list_actions).post(actions::create),
        )
        // A static segment wins over `{id}`: an action named `stats` is read through the listing
        // and claimed or closed here.
        .route(
            "/api/actions/stats",
            get(lists::action_stats).patch(claims::patch_stats),
        )
        .route(
            "/api/actions/{id}",
            get(reads::get_action).patch(claims::patch_action),
        )
        .route(
            "/api/actions/{id}/outcome",
            get(reads::get_outcome).post(outcomes::post_outcome),
        )
        .route("/api/actions/{id}/approve", post(approvals::approve))
        .route("/api/stream", get(stream::stream))
        .route("/api/actions/{id}/cancel", post(cancel::cancel))
        .route("/api/actions/{id}/containment", post(containment::resolve))
        .route("/api/cron/outcome-sweep", get(sweep::cron_sweep))
        .merge(crate::server::dashboard::routes())
        .fallback(respond::not_found)
        .method_not_allowed_fallback(respond::method_not_allowed)
        .layer(axum::middleware::map_response_with_state(
            app.clone(),
            respond::log_internal,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            observe::observe,
        ))
        .with_state(app)
}

/// `GET /metrics`: the metrics as OpenMetrics text. Not authenticated, like `/healthz`
/// ([`crate::server::metrics`] says why, and what the labels may hold).
async fn metrics_text(
    axum::extract::State(app): axum::extract::State<Arc<App>>,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        [
            (
                axum::http::header::CONTENT_TYPE,
                super::metrics::CONTENT_TYPE,
            ),
            (axum::http::header::CACHE_CONTROL, "no-store"),
        ],
        app.metrics.encode(),
    )
        .into_response()
}
