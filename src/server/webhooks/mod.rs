//! Webhooks: the events of `GET /api/stream`, also POSTed to the endpoints the server's
//! operator lists in the file of `serve --webhooks FILE`, signed as DashClaw signs its webhooks,
//! through a durable outbox.
//!
//! # The file
//!
//! JSON, read at start and again on each SIGHUP (a malformed file keeps the webhooks in force and
//! logs why, as the keys and the policy do):
//!
//! ```json
//! {
//!   "endpoints": [
//!     {"name": "ops", "url": "https://hooks.example.com/action-ledger",
//!      "secret_file": "/etc/action-ledger/ops.secret", "events": ["all"]},
//!     {"name": "audit", "url": "http://127.0.0.1:9000/in", "secret": "at least 16 bytes…",
//!      "events": ["action.updated"]}
//!   ],
//!   "retry": {"max_attempts": 8, "initial_backoff_ms": 1000, "max_backoff_ms": 300000},
//!   "timeout_ms": 10000
//! }
//! ```
//!
//! - `endpoints` (required, 1 to [`MAX_ENDPOINTS`]): `name` (1 to 64 of `A-Z a-z 0-9 . _ -`,
//!   unique: the outbox names an endpoint by it, and `/metrics` labels by it), `url` (`http` or
//!   `https`, with a host, no fragment), exactly one of `secret` (the HMAC key itself) and
//!   `secret_file` (a file holding it, relative to the webhooks file's directory; one trailing
//!   newline is dropped), at least [`MIN_SECRET_BYTES`] bytes, and `events` (a non-empty list of
//!   [`EVENTS`], or `["all"]`).
//! - `retry` (optional): `max_attempts` (1–100, default [`Retry::default`]'s 8),
//!   `initial_backoff_ms` (1–3600000, default 1000), `max_backoff_ms` (at least the initial
//!   backoff, at most 86400000; default 300000).
//! - `timeout_ms` (optional, 100–120000, default 10000: DashClaw's 10 s): the whole request.
//!
//! A refusal names the file, the field and the rule; it never quotes a secret, nor the URL
//! (which may carry credentials). Log lines name an endpoint by its `name` and its URL's
//! scheme, host and port only ([`display_url`]).
//!
//! # What is sent
//!
//! One `POST` per event and endpoint that wants it, body (canonical JSON, the event as the
//! stream sends it, in DashClaw's webhook envelope):
//!
//! ```json
//! {"action": {…the action row…}, "delivery_id": "wd_…", "event": "action.updated",
//!  "org_id": "ci-bot", "timestamp": "2026-03-01T12:00:00.000Z"}
//! ```
//!
//! `org_id` is the principal that created the action, `timestamp` when the server queued the
//! event (its clock). Headers, DashClaw's:
//!
//! | Header | Value |
//! |---|---|
//! | `Content-Type` | `application/json` |
//! | `X-DashClaw-Signature` | lowercase hex HMAC-SHA256 of the body's bytes under the endpoint's secret ([`sign`]) |
//! | `X-DashClaw-Event` | the event's name |
//! | `X-DashClaw-Delivery` | the delivery id, `wd_` and a UUID: the same on every retry of the delivery |
//! | `User-Agent` | `action-ledger-webhooks/VERSION` |
//!
//! DashClaw signs the body only (its organisation webhooks send no timestamp header); the
//! `timestamp` and `delivery_id` fields are inside the signed body, so a receiver can refuse an
//! old or replayed delivery from signed values alone.
//!
//! # Delivery
//!
//! - **Durable before the commit lands.** The writer ([`crate::server::writer`]) writes the
//!   deliveries of a batch into the outbox ([`outbox`]: one file per batch, fsynced, by a
//!   create-only staging link) after its commit is written and before the compare-and-swap
//!   that lands it, then confirms them (it landed) or removes them (it did not) before any
//!   request of the batch is answered. A kill in between is settled at the next start by
//!   looking for the commit in the ledger's history: an event is delivered if and only if its
//!   commit landed, even across a SIGKILL. The writer posts nothing: delivery runs on a
//!   background task ([`deliver`]), so an endpoint that is slow or down never holds a commit.
//! - **Retries.** A delivery succeeds on a 2xx answer. Anything else (another status, a refused
//!   connection, a timeout, a redirect to another origin) is retried after
//!   `initial_backoff_ms`, doubling up to `max_backoff_ms`, until `max_attempts` attempts were
//!   made. Redirects are followed (at most 5) only within the URL's own scheme, host and port.
//! - **Dead letters.** A delivery whose attempts ran out, or whose endpoint is no longer in the
//!   file, is moved to the outbox's `dead/` directory with its last error, counted in
//!   `/metrics` (`action_ledger_webhook_dead_letters`) and logged: nothing is dropped silently.
//! - **Restarts.** The outbox is drained at start. Attempts are counted per run of the
//!   server: a restart gives each delivery still in the outbox `max_attempts` more.
//! - **Exactly once, by delivery id.** A delivery is removed only after its 2xx; a kill between
//!   a receiver's 2xx and that removal sends it again after the restart, with the same delivery
//!   id and body. Receivers de-duplicate by `X-DashClaw-Delivery` (or `delivery_id`): each
//!   landed event then counts once. Deliveries are not ordered: a retry can arrive after a
//!   later event.
//! - **A landing that failed may have landed.** When a batch's landing fails in a way that may
//!   have taken effect all the same (a push cut off after the remote took it, a ref renamed
//!   into place whose directory could not be synced), its deliveries stay staged, unsent, until
//!   the history of the writer's next landed commit (or the next start) tells whether that
//!   commit landed ([`Webhooks::settle_undecided`]).
//! - **Lost only with the disk, or given up.** If the outbox cannot be written (a full disk),
//!   the commit has landed all the same: the requests are answered, and the failure is logged
//!   and counted (`action_ledger_webhook_enqueue_failures_total`). A delivery whose attempts
//!   ran out is a dead letter (above), kept, never delivered by itself.
//!
//! The outbox lives in the state repository's git directory,
//! `action-ledger/webhooks-<digest>/` (the digest of the ref and target, as the sweep's
//! sightings), locked by one server at a time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sha2::Digest as _;

use crate::canonical::{self, Value};
use crate::time::Timestamp;

pub mod deliver;
pub mod outbox;

#[cfg(test)]
mod tests;

pub use deliver::spawn_deliverer;

/// The events an endpoint can ask for: those of `GET /api/stream` ([`crate::server::api::stream`]).
pub const EVENTS: [&str; 2] = crate::server::api::stream::EVENT_NAMES;

/// Most endpoints in a file (DashClaw allows 10 per organisation).
pub const MAX_ENDPOINTS: usize = 32;

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// The longest secret accepted, in bytes.
pub const MAX_SECRET_BYTES: usize = 4096;

/// Largest webhooks file or secret file read.
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The `User-Agent` of every delivery.
pub const USER_AGENT: &str = concat!("action-ledger-webhooks/", env!("CARGO_PKG_VERSION"));

/// An endpoint's HMAC key. Its `Debug` shows no byte of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// The key's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(redacted)")
    }
}

/// The events an endpoint wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wants {
    /// Every event (`["all"]`, DashClaw's spelling).
    All,
    /// These events.
    Only(BTreeSet<String>),
}

impl Wants {
    /// Whether `event` is wanted.
    pub fn wants(&self, event: &str) -> bool {
        match self {
            Wants::All => true,
            Wants::Only(set) => set.contains(event),
        }
    }
}

/// One endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Its name: how the outbox, the log and `/metrics` name it.
    pub name: String,
    /// Where deliveries are POSTed (may carry credentials: never printed; see [`display_url`]).
    pub url: url::Url,
    /// The HMAC key.
    pub secret: Secret,
    /// The events it wants.
    pub events: Wants,
}

/// The retry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Attempts of one delivery in all, the first one included.
    pub max_attempts: u32,
    /// The wait after the first failed attempt; doubled after each further one.
    pub initial_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for Retry {
    /// 8 attempts, waiting 1 s, 2 s, 4 s, … up to 5 minutes between them (about 2 minutes in
    /// all before a delivery is dead-lettered).
    fn default() -> Retry {
        Retry {
            max_attempts: 8,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
        }
    }
}

impl Retry {
    /// The wait after `failed` failed attempts (1 for the first).
    pub fn backoff(&self, failed: u32) -> Duration {
        let factor = 1u32
            .checked_shl(failed.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// The webhooks file, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The endpoints, in the file's order.
    pub endpoints: Vec<Endpoint>,
    /// The retry policy.
    pub retry: Retry,
    /// The timeout of one request, connection included.
    pub timeout: Duration,
}

impl Config {
    /// The endpoint named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == name)
    }
}

/// Why a webhooks file was refused. Holds no secret and no URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the webhooks file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file breaks a rule.
    #[error("webhooks {path}: {field}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// The field (`endpoints[1].url`, …).
        field: String,
        /// Which rule, and what to write instead.
        reason: String,
    },
}

/// The scheme, host and port of `url`: what a message may show of an endpoint's URL (its
/// credentials, path and query may be secret).
pub fn display_url(url: &url::Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port() {
        Some(p) => format!("{}://{host}:{p}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

fn is_name(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Config {
    /// Reads the webhooks file at `path` (and the secret files it names, relative to its
    /// directory).
    ///
    /// # Errors
    /// [`ConfigError::Read`], and those of [`Config::parse`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let shown = path.display().to_string();
        let text = read_bounded(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Config::parse(&text, &shown, &|rel| {
            read_bounded(&base.join(rel)).map_err(|e| e.to_string())
        })
    }

    /// Parses a webhooks document; `path` only names it in errors, `read_secret` reads the file
    /// a `secret_file` names (its error is shown as the reason).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the field and the rule (module docs).
    pub fn parse(
        text: &str,
        path: &str,
        read_secret: &dyn Fn(&Path) -> Result<String, String>,
    ) -> Result<Config, ConfigError> {
        let invalid = |field: &str, reason: &str| ConfigError::Invalid {
            path: path.to_owned(),
            field: field.to_owned(),
            reason: reason.to_owned(),
        };
        // The parser's message names a position, never the text: a secret in a malformed file
        // is not echoed.
        let value = canonical::parse(text).map_err(|e| invalid("(document)", &e.to_string()))?;
        let map = value
            .as_object()
            .ok_or_else(|| invalid("(document)", "must be a JSON object"))?;
        only_keys(map, &["endpoints", "retry", "timeout_ms"], "", &invalid)?;
        let list = map
            .get("endpoints")
            .ok_or_else(|| invalid("endpoints", "is required"))?
            .as_array()
            .ok_or_else(|| invalid("endpoints", "must be an array"))?;
        if list.is_empty() || list.len() > MAX_ENDPOINTS {
            return Err(invalid(
                "endpoints",
                &format!("must list 1 to {MAX_ENDPOINTS} endpoints"),
            ));
        }
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for (i, e) in list.iter().enumerate() {
            let at = |k: &str| format!("endpoints[{i}].{k}");
            let m = e
                .as_object()
                .ok_or_else(|| invalid(&format!("endpoints[{i}]"), "must be an object"))?;
            only_keys(
                m,
                &["name", "url", "secret", "secret_file", "events"],
                &format!("endpoints[{i}]."),
                &invalid,
            )?;
            let string = |k: &str| -> Result<String, ConfigError> {
                m.get(k)
                    .ok_or_else(|| invalid(&at(k), "is required"))?
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(&at(k), "must be a string"))
            };
            let name = string("name")?;
            if !is_name(&name) {
                return Err(invalid(
                    &at("name"),
                    "must be 1 to 64 of A-Z, a-z, 0-9, '.', '_', '-'",
                ));
            }
            if endpoints.iter().any(|x| x.name == name) {
                return Err(invalid(&at("name"), &format!("{name:?} is used twice")));
            }
            let url = parse_url(&string("url")?).map_err(|r| invalid(&at("url"), r))?;
            let secret = match (m.get("secret"), m.get("secret_file")) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        &at("secret"),
                        "give either secret or secret_file, not both",
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        &at("secret"),
                        "is required (or secret_file, a file holding it)",
                    ));
                }
                (Some(_), None) => string("secret")?.into_bytes(),
                (None, Some(_)) => {
                    let file = string("secret_file")?;
                    let text = read_secret(Path::new(&file)).map_err(|e| {
                        invalid(&at("secret_file"), &format!("cannot read {file}: {e}"))
                    })?;
                    let text = text.strip_suffix('\n').unwrap_or(&text);
                    let text = text.strip_suffix('\r').unwrap_or(text);
                    text.as_bytes().to_vec()
                }
            };
            let which = if m.contains_key("secret") {
                "secret"
            } else {
                "secret_file"
            };
            if secret.len() < MIN_SECRET_BYTES || secret.len() > MAX_SECRET_BYTES {
                return Err(invalid(
                    &at(which),
                    &format!(
                        "the secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes (e.g. 32 random bytes in hex)"
                    ),
                ));
            }
            let events = m
                .get("events")
                .ok_or_else(|| invalid(&at("events"), "is required (e.g. [\"all\"])"))?
                .as_array()
                .ok_or_else(|| invalid(&at("events"), "must be an array of event names"))?;
            let mut wanted = BTreeSet::new();
            for (j, ev) in events.iter().enumerate() {
                let name = ev.as_str().filter(|s| *s == "all" || EVENTS.contains(s));
                let Some(name) = name else {
                    return Err(invalid(
                        &format!("endpoints[{i}].events[{j}]"),
                        &format!("must be one of all, {}", EVENTS.join(", ")),
                    ));
                };
                wanted.insert(name.to_owned());
            }
            let events = if wanted.is_empty() {
                return Err(invalid(&at("events"), "must name at least one event"));
            } else if wanted.contains("all") {
                Wants::All
            } else {
                Wants::Only(wanted)
            };
            endpoints.push(Endpoint {
                name,
                url,
                secret: Secret(secret),
                events,
            });
        }
        let mut retry = Retry::default();
        if let Some(r) = map.get("retry") {
            let m = r
                .as_object()
                .ok_or_else(|| invalid("retry", "must be an object"))?;
            only_keys(
                m,
                &["max_attempts", "initial_backoff_ms", "max_backoff_ms"],
                "retry.",
                &invalid,
            )?;
            let number = |k: &str, lo: u64, hi: u64| -> Result<Option<u64>, ConfigError> {
                match m.get(k) {
                    None => Ok(None),
                    Some(v) => v
                        .as_safe_integer()
                        .and_then(|n| u64::try_from(n).ok())
                        .filter(|n| (lo..=hi).contains(n))
                        .map(Some)
                        .ok_or_else(|| {
                            invalid(
                                &format!("retry.{k}"),
                                &format!("must be an integer from {lo} to {hi}"),
                            )
                        }),
                }
            };
            if let Some(n) = number("max_attempts", 1, 100)? {
                retry.max_attempts = n as u32;
            }
            if let Some(n) = number("initial_backoff_ms", 1, 3_600_000)? {
                retry.initial_backoff = Duration::from_millis(n);
            }
            if let Some(n) = number("max_backoff_ms", 1, 86_400_000)? {
                retry.max_backoff = Duration::from_millis(n);
            }
            if retry.max_backoff < retry.initial_backoff {
                return Err(invalid(
                    "retry.max_backoff_ms",
                    "must be at least initial_backoff_ms",
                ));
            }
        }
        let timeout = match map.get("timeout_ms") {
            None => Duration::from_secs(10),
            Some(v) => v
                .as_safe_integer()
                .filter(|n| (100..=120_000).contains(n))
                .map(|n| Duration::from_millis(n as u64))
                .ok_or_else(|| invalid("timeout_ms", "must be an integer from 100 to 120000"))?,
        };
        Ok(Config {
            endpoints,
            retry,
            timeout,
        })
    }
}

fn only_keys(
    map: &std::collections::BTreeMap<String, Value>,
    keys: &[&str],
    prefix: &str,
    invalid: &dyn Fn(&str, &str) -> ConfigError,
) -> Result<(), ConfigError> {
    match map.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err(invalid(
            &format!("{prefix}{k}"),
            &format!("unknown key (expected {})", keys.join(", ")),
        )),
        None => Ok(()),
    }
}

/// Checks an endpoint URL; the reason never quotes it.
fn parse_url(text: &str) -> Result<url::Url, &'static str> {
    let url = url::Url::parse(text).map_err(|_| "must be an absolute http or https URL")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http or https URL");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host");
    }
    if url.fragment().is_some() {
        return Err("must have no fragment (#…)");
    }
    Ok(url)
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_FILE_BYTES} bytes"
        )));
    }
    Ok(text)
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`, in lowercase hex: the value of
/// `X-DashClaw-Signature`. Written over `sha2` (a dozen lines) rather than adding a crate; the
/// RFC 4231 vectors are its tests.
pub fn sign(key: &[u8], message: &[u8]) -> String {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&sha2::Sha256::digest(key)[..]);
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let mut inner = sha2::Sha256::new();
    inner.update(pad(0x36));
    inner.update(message);
    let mut outer = sha2::Sha256::new();
    outer.update(pad(0x5c));
    outer.update(inner.finalize());
    hex::encode(outer.finalize())
}

/// The body of one delivery of `event` (module docs): canonical JSON.
pub fn body(
    event: &crate::server::api::stream::Event,
    delivery_id: &str,
    now: Timestamp,
) -> String {
    canonical::to_canonical_unchecked(&Value::object([
        ("action", event.data.clone()),
        ("delivery_id", Value::str(delivery_id)),
        ("event", Value::str(event.name)),
        ("org_id", Value::str(event.created_by.as_str())),
        ("timestamp", Value::str(crate::finality::format_time(now))),
    ]))
}

/// Reads the webhooks file again (the CLI's closure over [`Config::load`]); `Err` is the
/// message to log.
pub type Source = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// What `serve --webhooks FILE` hands the server.
#[derive(Clone)]
pub struct Setup {
    /// The webhooks at start.
    pub config: Config,
    /// Reads the file again on SIGHUP; `None`: never reloaded.
    pub reload: Option<Source>,
}

/// The webhooks of a running server: the configuration in force, the outbox, and the channel
/// to the delivery task.
pub struct Webhooks {
    config: RwLock<Arc<Config>>,
    reload: Option<Source>,
    outbox: outbox::Outbox,
    /// Staged deliveries of commits whose landing failed in a way that may have landed them
    /// ([`Staging::after_landing`]), each with its commit.
    undecided: std::sync::Mutex<Vec<(crate::store::CommitId, Staged)>>,
    queued: tokio::sync::mpsc::UnboundedSender<Vec<outbox::Delivery>>,
    /// Taken once by [`spawn_deliverer`].
    receiver: std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Vec<outbox::Delivery>>>>,
    metrics: Arc<crate::server::metrics::Metrics>,
    log: crate::server::Log,
    clock: Arc<dyn crate::server::Clock>,
}

/// Why the webhooks could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The outbox could not be opened.
    #[error(transparent)]
    Outbox(#[from] outbox::Error),
}

/// The deliveries of one batch, staged for its commit ([`Webhooks::stage`]).
#[derive(Debug)]
pub struct Staged {
    /// The segment; `None` when no endpoint wants any of the events.
    segment: Option<outbox::Staged>,
    /// Deliveries per event, in order.
    counts: Vec<usize>,
}

/// The webhook side of one batch of the writer: stages each commit's deliveries before its
/// compare-and-swap ([`Staging::before_landing`]), then confirms those of the commit that
/// landed and discards the others ([`Staging::after_landing`]).
pub struct Staging<'a> {
    hooks: &'a Webhooks,
    /// The last commit's staging.
    last: Option<Last>,
}

/// The deliveries staged for the last commit of a batch.
struct Last {
    commit: crate::store::CommitId,
    /// The staged segment, or why it could not be written.
    staged: Result<Staged, outbox::Error>,
    /// The operation (index in the batch) of each event.
    owners: Vec<usize>,
}

impl Staging<'_> {
    /// `commit` is about to be landed with `events` (each with its operation's index in the
    /// batch): stages their deliveries, and discards those of an earlier commit of the batch
    /// (a moved ref overtook it).
    pub fn before_landing<'e>(
        &mut self,
        commit: crate::store::CommitId,
        events: impl Iterator<Item = (usize, &'e crate::server::api::stream::Event)>,
    ) {
        if let Some(Last {
            staged: Ok(overtaken),
            ..
        }) = self.last.take()
        {
            self.hooks.discard(overtaken);
        }
        let (owners, told): (Vec<usize>, Vec<_>) = events.unzip();
        if !told.is_empty() {
            self.last = Some(Last {
                commit,
                staged: self.hooks.stage(commit, &told),
                owners,
            });
        }
    }

    /// The commit of the last staging, if any.
    pub fn last_commit(&self) -> Option<crate::store::CommitId> {
        self.last.as_ref().map(|l| l.commit)
    }

    /// The batch ended with `landed` (the commit that landed, if any) or, when the landing
    /// failed, `unsettled` (a commit that may have landed all the same,
    /// [`crate::finality::batch::Landed::unsettled`]): the deliveries staged for the landed
    /// commit are sent; those of an unsettled one are kept unsent until a later landing (or the
    /// next start) tells whether it landed ([`Webhooks::settle_undecided`]); any other is
    /// removed. Returns `(operation index, deliveries queued)` for each event sent.
    pub fn after_landing(
        self,
        landed: Option<crate::store::CommitId>,
        unsettled: Option<crate::store::CommitId>,
    ) -> Vec<(usize, usize)> {
        let Some(last) = self.last else {
            return Vec::new();
        };
        match last.staged {
            Ok(s) if landed == Some(last.commit) => {
                last.owners.into_iter().zip(self.hooks.confirm(s)).collect()
            }
            Ok(s) if unsettled == Some(last.commit) => {
                (self.hooks.log)(&format!(
                    "webhooks: whether commit {} landed is not known (its landing failed); its deliveries are kept unsent until that is known",
                    last.commit
                ));
                self.hooks
                    .undecided
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((last.commit, s));
                Vec::new()
            }
            Ok(s) => {
                self.hooks.discard(s);
                Vec::new()
            }
            Err(e) if landed == Some(last.commit) || unsettled == Some(last.commit) => {
                self.hooks.enqueue_failed(last.owners.len(), &e);
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }
}

/// The outbox directory of the repository at `git_dir` for the ledger ref and target (module
/// docs).
pub fn outbox_dir(
    git_dir: &Path,
    ref_name: &str,
    target: &crate::finality::batch::Target,
) -> PathBuf {
    use crate::finality::batch::Target;
    let key = match target {
        Target::Local => format!("local\0{ref_name}"),
        Target::Remote { url, ref_name, .. } => format!("remote\0{url}\0{ref_name}"),
    };
    let digest = hex::encode(&sha2::Sha256::digest(key.as_bytes())[..8]);
    git_dir
        .join("action-ledger")
        .join(format!("webhooks-{digest}"))
}

impl Webhooks {
    /// Opens (creates) and locks the outbox at `dir` and counts what it holds. `landed` says
    /// whether the commit of a segment a kill left staged landed ([`outbox::Outbox::open`]).
    ///
    /// # Errors
    /// [`StartError::Outbox`]: the directory cannot be created or read, or another server holds
    /// its lock.
    pub fn start(
        setup: Setup,
        dir: &Path,
        landed: &mut outbox::Landed<'_>,
        metrics: Arc<crate::server::metrics::Metrics>,
        log: crate::server::Log,
        clock: Arc<dyn crate::server::Clock>,
    ) -> Result<Arc<Webhooks>, StartError> {
        let outbox = outbox::Outbox::open(dir, landed)?;
        metrics.webhook_dead_letters(outbox.dead_count()?);
        let (queued, receiver) = tokio::sync::mpsc::unbounded_channel();
        Ok(Arc::new(Webhooks {
            config: RwLock::new(Arc::new(setup.config)),
            reload: setup.reload,
            outbox,
            undecided: std::sync::Mutex::new(Vec::new()),
            queued,
            receiver: std::sync::Mutex::new(Some(receiver)),
            metrics,
            log,
            clock,
        }))
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the file again and puts it in force; a malformed file keeps the one in force.
    /// Either way one line is logged (never a secret or a URL's credentials).
    ///
    /// # Errors
    /// The reason, when nothing changed.
    pub fn reload(&self) -> Result<(), String> {
        let Some(source) = &self.reload else {
            return Err("nothing to reload".into());
        };
        let result = source();
        self.metrics.webhook_reload(result.is_ok());
        match result {
            Ok(config) => {
                (self.log)(&format!(
                    "webhooks reloaded: {} endpoint(s)",
                    config.endpoints.len()
                ));
                *self
                    .config
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(config);
                Ok(())
            }
            Err(e) => {
                (self.log)(&format!(
                    "webhooks reload refused, the previous webhooks stay in force: {e}"
                ));
                Err(e)
            }
        }
    }

    /// The staging of one batch's deliveries (the writer's, [`Staging`]).
    pub fn staging(&self) -> Staging<'_> {
        Staging {
            hooks: self,
            last: None,
        }
    }

    /// Writes the deliveries of `events` (in order), the events of `commit` about to be landed,
    /// to the outbox, durably; nothing is sent before [`Webhooks::confirm`]. Returns them with
    /// how many deliveries each event got (one per endpoint that wants it). Called by the
    /// writer before the compare-and-swap.
    ///
    /// # Errors
    /// The outbox could not be written: nothing of these events is queued; when the commit
    /// lands all the same the caller reports it ([`Webhooks::enqueue_failed`]).
    pub fn stage(
        &self,
        commit: crate::store::CommitId,
        events: &[&crate::server::api::stream::Event],
    ) -> Result<Staged, outbox::Error> {
        let config = self.config();
        let now = self.clock.now();
        let mut counts = Vec::with_capacity(events.len());
        let mut lines = Vec::new();
        for event in events {
            let mut n = 0;
            for endpoint in config
                .endpoints
                .iter()
                .filter(|e| e.events.wants(event.name))
            {
                let delivery_id = format!(
                    "wd_{}",
                    crate::random::uuid_v4().map_err(outbox::Error::Random)?
                );
                lines.push(outbox::Line {
                    body: body(event, &delivery_id, now),
                    delivery_id,
                    endpoint: endpoint.name.clone(),
                    event: event.name.to_owned(),
                });
                n += 1;
            }
            counts.push(n);
        }
        let segment = if lines.is_empty() {
            None
        } else {
            Some(self.outbox.stage(lines, &commit.to_hex())?)
        };
        Ok(Staged { segment, counts })
    }

    /// The commit of `staged` landed: its deliveries are pending and handed to the delivery
    /// task. Returns how many deliveries each event got. A segment that cannot be renamed is
    /// sent all the same (logged): a restart finds its commit landed and sends what was not
    /// settled again, under the same delivery ids.
    pub fn confirm(&self, staged: Staged) -> Vec<usize> {
        if let Some(segment) = staged.segment {
            if let Err(e) = self.outbox.confirm(&segment) {
                (self.log)(&format!(
                    "webhooks: a landed batch's deliveries stay staged in the outbox ({e}); they are sent now, and the staged file is removed once they are settled"
                ));
            }
            let deliveries = segment.into_deliveries();
            self.metrics.webhook_queued(deliveries.len());
            let _ = self.queued.send(deliveries);
        }
        staged.counts
    }

    /// Settles the deliveries kept by [`Staging::after_landing`] for commits that may have
    /// landed: sent for each commit `landed` says landed, removed for each it says did not,
    /// kept when it cannot tell. The writer calls it after each batch it landed, with that
    /// batch's commit as the tip to look from; a restart settles what is left from the outbox.
    pub fn settle_undecided(
        &self,
        landed: &mut dyn FnMut(crate::store::CommitId) -> Result<bool, String>,
    ) {
        let undecided = std::mem::take(
            &mut *self
                .undecided
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut kept = Vec::new();
        for (commit, staged) in undecided {
            match landed(commit) {
                Ok(true) => {
                    self.confirm(staged);
                }
                Ok(false) => self.discard(staged),
                Err(_) => kept.push((commit, staged)),
            }
        }
        self.undecided
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(kept);
    }

    /// Whether deliveries wait for [`Webhooks::settle_undecided`].
    pub fn has_undecided(&self) -> bool {
        !self
            .undecided
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }

    /// The commit of `staged` did not land: its deliveries are removed, never sent (one that
    /// cannot be removed is removed at the next start, which finds its commit did not land).
    pub fn discard(&self, staged: Staged) {
        if let Some(segment) = staged.segment
            && let Err(e) = self.outbox.discard(segment)
        {
            (self.log)(&format!(
                "webhooks: the deliveries of a batch that did not land stay in the outbox until the next start ({e})"
            ));
        }
    }

    /// Counts the events of a landed commit whose deliveries could not be staged
    /// ([`Webhooks::stage`]) and logs it.
    pub fn enqueue_failed(&self, events: usize, error: &outbox::Error) {
        self.metrics.webhook_enqueue_failed(events);
        (self.log)(&format!(
            "webhooks: the deliveries of {events} landed event(s) could NOT be queued (they will not be sent): {error}"
        ));
    }
}
