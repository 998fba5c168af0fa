//! The delivery task: posts the outbox's deliveries in the background, retries them with
//! bounded backoff, settles each in the outbox (a 2xx) or buries it (`dead/`).
//!
//! - At most [`MAX_IN_FLIGHT`] requests at once, each bounded by the file's `timeout_ms`
//!   (connection included; the connection alone by [`CONNECT_TIMEOUT`] at most).
//! - The client is `reqwest` on rustls with the bundled web roots; it ignores proxy variables
//!   (the library reads no environment), never reads the answer's body, and follows a redirect
//!   only to the URL's own scheme, host and port, at most [`MAX_REDIRECTS`] times (DashClaw
//!   follows none: a redirect elsewhere is a failed attempt, as there).
//! - No message holds a secret, a signature or more of a URL than [`super::display_url`]: the
//!   client's own errors (which quote the URL) are reduced to their kind.
//! - When the server stops, no new request starts; those in flight are settled, and the task
//!   ends. What is left stays in the outbox for the next start.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::outbox::Delivery;
use super::{Endpoint, Webhooks};
use crate::canonical::Value;

/// Requests in flight at once.
pub const MAX_IN_FLIGHT: usize = 8;
/// The longest a connection may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Redirects followed within the URL's origin.
pub const MAX_REDIRECTS: usize = 5;

/// Why one attempt failed. Holds no URL, header or answer body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// A status outside 2xx (a redirect to another origin included).
    #[error("answered {0}")]
    Status(u16),
    /// The timeout ran out.
    #[error("no answer within the timeout")]
    Timeout,
    /// No connection (refused, unreachable, TLS refused).
    #[error("cannot connect")]
    Connect,
    /// Another transport failure (reset, malformed answer, too many redirects).
    #[error("the request failed")]
    Transport,
    /// The endpoint is no longer in the webhooks file.
    #[error("the endpoint is no longer in the webhooks file")]
    Unconfigured,
}

/// The HTTP client of the deliveries.
///
/// # Errors
/// When the TLS client cannot be built (the reason, no secret).
pub fn client() -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else if same_origin {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    reqwest::Client::builder()
        .use_rustls_tls()
        .no_proxy()
        .redirect(policy)
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(super::USER_AGENT)
        .build()
        .map_err(|e| format!("cannot build the webhook client: {}", e.without_url()))
}

/// One attempt of `delivery` to `endpoint`: the status of a 2xx answer.
///
/// # Errors
/// [`Failure`].
pub async fn post(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    timeout: Duration,
    delivery: &super::outbox::Line,
) -> Result<u16, Failure> {
    let signature = super::sign(endpoint.secret.bytes(), delivery.body.as_bytes());
    let sent = client
        .post(endpoint.url.clone())
        .header("content-type", "application/json")
        .header("x-dashclaw-signature", signature)
        .header("x-dashclaw-event", delivery.event.as_str())
        .header("x-dashclaw-delivery", delivery.delivery_id.as_str())
        .body(delivery.body.clone())
        .timeout(timeout)
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => Ok(r.status().as_u16()),
        Ok(r) => Err(Failure::Status(r.status().as_u16())),
        Err(e) if e.is_timeout() => Err(Failure::Timeout),
        Err(e) if e.is_connect() => Err(Failure::Connect),
        Err(_) => Err(Failure::Transport),
    }
}

/// A delivery the task holds.
struct Item {
    delivery: Delivery,
    /// Attempts made in this run.
    attempts: u32,
    due: Instant,
    running: bool,
}

/// Starts the delivery task: it drains what the outbox held at start, then what the writer
/// queues, until `stop` turns `true`.
pub fn spawn_deliverer(
    hooks: Arc<Webhooks>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(hooks, stop))
}

async fn run(hooks: Arc<Webhooks>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let taken = hooks
        .receiver
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some(mut queued) = taken else {
        return;
    };
    let client = match client() {
        Ok(c) => c,
        Err(e) => {
            (hooks.log)(&format!("webhooks: NOT delivering: {e}"));
            return;
        }
    };
    let mut items: BTreeMap<(u64, u32), Item> = BTreeMap::new();
    // Lines not yet settled per segment, and the segment's length.
    let mut left: HashMap<u64, (u32, u32)> = HashMap::new();
    let add = |items: &mut BTreeMap<(u64, u32), Item>,
               left: &mut HashMap<u64, (u32, u32)>,
               d: Delivery| {
        let key = (d.seq, d.index);
        if items.contains_key(&key) {
            return false;
        }
        left.entry(d.seq).or_insert((0, d.of)).0 += 1;
        items.insert(
            key,
            Item {
                delivery: d,
                attempts: 0,
                due: Instant::now(),
                running: false,
            },
        );
        true
    };
    if let Some(scan) = hooks.outbox.take_scan() {
        for bad in &scan.unreadable {
            (hooks.log)(&format!(
                "webhooks: an outbox segment cannot be read and is kept as it is: {bad}"
            ));
        }
        for unknown in &scan.unconfirmed {
            (hooks.log)(&format!(
                "webhooks: whether a staged batch's commit landed cannot be known now; its deliveries are kept unsent until a start that can tell: {unknown}"
            ));
        }
        if scan.discarded > 0 {
            (hooks.log)(&format!(
                "webhooks: {} staged batch(es) whose commit never landed (the last run was stopped before its compare-and-swap) removed unsent",
                scan.discarded
            ));
        }
        let n = scan.pending.len();
        for d in scan.pending {
            add(&mut items, &mut left, d);
        }
        hooks.metrics.webhook_queued(n);
        if n > 0 {
            (hooks.log)(&format!(
                "webhooks: {n} delivery(ies) left in the outbox by the last run are sent again"
            ));
        }
    }
    let mut inflight: tokio::task::JoinSet<((u64, u32), Result<u16, Failure>)> =
        tokio::task::JoinSet::new();
    let mut stopping = *stop.borrow();
    loop {
        if !stopping {
            let now = Instant::now();
            let config = hooks.config();
            let due: Vec<(u64, u32)> = items
                .iter()
                .filter(|(_, i)| !i.running && i.due <= now)
                .map(|(k, _)| *k)
                .take(MAX_IN_FLIGHT.saturating_sub(inflight.len()))
                .collect();
            for key in due {
                let Some(item) = items.get_mut(&key) else {
                    continue;
                };
                item.running = true;
                item.attempts += 1;
                let line = item.delivery.line.clone();
                let endpoint = config.endpoint(&line.endpoint).cloned();
                let (client, timeout) = (client.clone(), config.timeout);
                inflight.spawn(async move {
                    let result = match endpoint {
                        Some(e) => post(&client, &e, timeout, &line).await,
                        None => Err(Failure::Unconfigured),
                    };
                    (key, result)
                });
            }
        }
        if stopping && inflight.is_empty() {
            return;
        }
        // Nothing to wait for while stopping, or while every slot is taken (a slot frees when
        // a request in flight settles): the loop would spin on a due time already past.
        let next_due = if stopping || inflight.len() >= MAX_IN_FLIGHT {
            None
        } else {
            items.values().filter(|i| !i.running).map(|i| i.due).min()
        };
        let wait = async {
            match next_due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            got = queued.recv(), if !stopping => {
                if let Some(batch) = got {
                    for d in batch {
                        add(&mut items, &mut left, d);
                    }
                }
            }
            Some(joined) = inflight.join_next(), if !inflight.is_empty() => {
                let Ok((key, result)) = joined else { continue };
                settle(&hooks, &mut items, &mut left, key, result).await;
            }
            () = wait => {}
            changed = stop.changed(), if !stopping => {
                stopping = changed.is_err() || *stop.borrow();
            }
        }
    }
}

/// Settles one attempt's `result`: a 2xx marks the line (and removes a finished segment);
/// a failure schedules the next attempt, or buries the delivery when none is left.
async fn settle(
    hooks: &Arc<Webhooks>,
    items: &mut BTreeMap<(u64, u32), Item>,
    left: &mut HashMap<u64, (u32, u32)>,
    key: (u64, u32),
    result: Result<u16, Failure>,
) {
    let Some(item) = items.get_mut(&key) else {
        return;
    };
    item.running = false;
    let line = item.delivery.line.clone();
    let config = hooks.config();
    let shown = config
        .endpoint(&line.endpoint)
        .map(|e| format!("{} ({})", e.name, super::display_url(&e.url)))
        .unwrap_or_else(|| line.endpoint.clone());
    let bury = match &result {
        Ok(_) => None,
        Err(Failure::Unconfigured) => Some(result.clone().err()),
        Err(_) if item.attempts >= config.retry.max_attempts => Some(result.clone().err()),
        Err(f) => {
            let wait = config.retry.backoff(item.attempts);
            item.due = Instant::now() + wait;
            hooks.metrics.webhook_attempt_failed(&line.endpoint);
            (hooks.log)(&format!(
                "webhook {} ({}) to {shown}: attempt {} of {} failed: {f}; next in {} ms",
                line.delivery_id,
                line.event,
                item.attempts,
                config.retry.max_attempts,
                wait.as_millis()
            ));
            return;
        }
    };
    let attempts = item.attempts;
    let Some(item) = items.remove(&key) else {
        return;
    };
    let delivery = item.delivery;
    let (seq, of) = (delivery.seq, delivery.of);
    let why = bury.flatten();
    let record = why.as_ref().map(|f| {
        crate::canonical::to_canonical_unchecked(&Value::object([
            ("attempts", Value::from(i64::from(attempts))),
            ("body", Value::str(line.body.as_str())),
            ("delivery_id", Value::str(line.delivery_id.as_str())),
            ("endpoint", Value::str(line.endpoint.as_str())),
            ("event", Value::str(line.event.as_str())),
            (
                "given_up_at",
                Value::str(crate::finality::format_time(hooks.clock.now())),
            ),
            ("last_error", Value::str(f.to_string())),
        ]))
    });
    let finished = match left.get_mut(&seq) {
        Some(n) => {
            n.0 = n.0.saturating_sub(1);
            n.0 == 0
        }
        None => false,
    };
    if finished {
        left.remove(&seq);
    }
    let store = hooks.clone();
    let written = tokio::task::spawn_blocking(move || {
        match &record {
            Some(r) => store.outbox.bury(&delivery, r)?,
            None => store.outbox.mark_sent(delivery.seq, delivery.index)?,
        }
        if finished {
            store.outbox.finish(seq, of)?;
        }
        Ok::<(), super::outbox::Error>(())
    })
    .await;
    hooks.metrics.webhook_settled();
    match why {
        None => hooks.metrics.webhook_delivered(&line.endpoint),
        Some(f) => {
            hooks.metrics.webhook_dead(&line.endpoint);
            (hooks.log)(&format!(
                "webhook {} ({}) to {shown}: given up after {attempts} attempt(s) ({f}): kept in {}/dead/{}.json",
                line.delivery_id,
                line.event,
                hooks.outbox.path().display(),
                line.delivery_id
            ));
        }
    }
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => (hooks.log)(&format!(
            "webhook {}: settled, but the outbox could not record it (it is sent again after a restart): {e}",
            line.delivery_id
        )),
        Err(_) => (hooks.log)(&format!(
            "webhook {}: settled, but the outbox could not record it (it is sent again after a restart)",
            line.delivery_id
        )),
    }
}
