//! `GET /metrics`: the server's counters, gauges and histograms in the OpenMetrics text format
//! (`application/openmetrics-text; version=1.0.0`, which Prometheus scrapes; encoded by the
//! official Rust client, `prometheus-client`).
//!
//! | Metric | Type | Labels | What |
//! |---|---|---|---|
//! | `action_ledger_http_requests_total` | counter | `method`, `route`, `status` | answered requests |
//! | `action_ledger_http_request_duration_seconds` | histogram | `method`, `route` | from the request's arrival at the router to its answer |
//! | `action_ledger_writer_batch_operations` | histogram | | operations per writer batch |
//! | `action_ledger_writer_commit_duration_seconds` | histogram | | planning and landing a batch that landed a commit |
//! | `action_ledger_writer_queue_depth` | gauge | | operations queued, not yet taken by the writer |
//! | `action_ledger_pack_rollup_duration_seconds` | histogram | | pack roll-ups after landed batches |
//! | `action_ledger_sweep_runs_total` | counter | `result` (`ok`, `failed`) | sweeps (the timer's and the cron endpoint's) |
//! | `action_ledger_sweep_actions_swept_total` | counter | | actions the sweeps moved to `lost_confirmation` |
//! | `action_ledger_reloads_total` | counter | `result` (`ok`, `refused`) | SIGHUP reloads of the keys and policy |
//! | `action_ledger_webhook_deliveries_total` | counter | `endpoint`, `result` (`delivered`, `failed_attempt`, `dead`) | webhook attempts that succeeded, attempts that failed and will be retried, deliveries given up ([`crate::server::webhooks`]) |
//! | `action_ledger_webhook_outbox_pending` | gauge | | webhook deliveries in the outbox, not yet settled |
//! | `action_ledger_webhook_dead_letters` | gauge | | webhook deliveries kept in the outbox's `dead/` directory (this run's and earlier ones) |
//! | `action_ledger_webhook_enqueue_failures_total` | counter | | landed events whose deliveries could not be written to the outbox |
//! | `action_ledger_webhook_reloads_total` | counter | `result` (`ok`, `refused`) | SIGHUP reloads of the webhooks file |
//!
//! Labels hold only values from fixed sets: `route` is the route's template
//! (`/api/actions/{id}`, never an action id), `unmatched` for a path no route has; `method` is
//! one of the methods the routes use or `other`; `status` is the HTTP status; `endpoint` is the name the webhooks file gives an
//! endpoint (1 to 64 of `A-Z a-z 0-9 . _ -`, at most 32 of them). No label holds a
//! key, a principal, a path or a URL. The number of pending actions is not exported: the
//! server knows it only by scanning the ledger (what the sweep does), which a scrape must not
//! cost.
//!
//! `/metrics` is not authenticated, like `/healthz`: a DashClaw-style deployment scrapes it
//! from the same host; listen on loopback (the default) or filter the port when that matters.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The route label of a request no route matched.
pub const UNMATCHED: &str = "unmatched";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    endpoint: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds, from half a millisecond to about 16 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The server's metrics; shared by the router, the writer and the roll-up thread.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: HistogramFamily<RouteLabels>,
    batch_operations: Histogram,
    commit_seconds: Histogram,
    queue_depth: Gauge,
    rollup_seconds: Histogram,
    sweep_runs: Family<ResultLabels, Counter>,
    swept: Counter,
    reloads: Family<ResultLabels, Counter>,
    webhook_deliveries: Family<WebhookLabels, Counter>,
    webhook_pending: Gauge,
    webhook_dead_letters: Gauge,
    webhook_enqueue_failures: Counter,
    webhook_reloads: Family<ResultLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("action_ledger");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests answered, by method, route template and status",
            requests.clone(),
        );
        let latency: HistogramFamily<RouteLabels> = Family::new_with_constructor(seconds);
        registry.register_with_unit(
            "http_request_duration",
            "Time from a request's arrival at the router to its answer, by method and route template",
            Unit::Seconds,
            latency.clone(),
        );
        let batch_operations = Histogram::new(exponential_buckets(1.0, 2.0, 17));
        registry.register(
            "writer_batch_operations",
            "Operations in each writer batch",
            batch_operations.clone(),
        );
        let commit_seconds = seconds();
        registry.register_with_unit(
            "writer_commit_duration",
            "Time to plan and land a writer batch that landed a commit",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        let queue_depth = Gauge::default();
        registry.register(
            "writer_queue_depth",
            "Operations queued for the writer and not yet taken",
            queue_depth.clone(),
        );
        let rollup_seconds = seconds();
        registry.register_with_unit(
            "pack_rollup_duration",
            "Time of each pack roll-up after a landed batch",
            Unit::Seconds,
            rollup_seconds.clone(),
        );
        let sweep_runs = Family::<ResultLabels, Counter>::default();
        registry.register(
            "sweep_runs",
            "Stale-outcome sweeps (timer and cron endpoint), by result",
            sweep_runs.clone(),
        );
        let swept = Counter::default();
        registry.register(
            "sweep_actions_swept",
            "Actions the sweeps moved to lost_confirmation",
            swept.clone(),
        );
        let reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "reloads",
            "Reloads of the keys and the policy (SIGHUP), by result",
            reloads.clone(),
        );
        let webhook_deliveries = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Webhook attempts by endpoint and result (delivered, failed_attempt: retried later, dead: given up)",
            webhook_deliveries.clone(),
        );
        let webhook_pending = Gauge::default();
        registry.register(
            "webhook_outbox_pending",
            "Webhook deliveries in the outbox, not yet settled",
            webhook_pending.clone(),
        );
        let webhook_dead_letters = Gauge::default();
        registry.register(
            "webhook_dead_letters",
            "Webhook deliveries given up and kept in the outbox's dead/ directory",
            webhook_dead_letters.clone(),
        );
        let webhook_enqueue_failures = Counter::default();
        registry.register(
            "webhook_enqueue_failures",
            "Landed events whose webhook deliveries could not be written to the outbox",
            webhook_enqueue_failures.clone(),
        );
        let webhook_reloads = Family::<ResultLabels, Counter>::default();
        registry.register(
            "webhook_reloads",
            "Reloads of the webhooks file (SIGHUP), by result",
            webhook_reloads.clone(),
        );
        // Every result from the start, at zero: a series that appears late is missed by `rate`.
        for result in ["ok", "failed"] {
            sweep_runs.get_or_create(&ResultLabels { result }).inc_by(0);
        }
        for result in ["ok", "refused"] {
            reloads.get_or_create(&ResultLabels { result }).inc_by(0);
            webhook_reloads
                .get_or_create(&ResultLabels { result })
                .inc_by(0);
        }
        Metrics {
            registry,
            requests,
            latency,
            batch_operations,
            commit_seconds,
            queue_depth,
            rollup_seconds,
            sweep_runs,
            swept,
            reloads,
            webhook_deliveries,
            webhook_pending,
            webhook_dead_letters,
            webhook_enqueue_failures,
            webhook_reloads,
        }
    }

    /// The metrics as OpenMetrics text ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// An answered request. `method` is a [`method_label`], `route` a route template or
    /// [`UNMATCHED`].
    pub fn request(&self, method: &'static str, route: &str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                method,
                route: route.to_owned(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                method,
                route: route.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// `n` operations were queued for the writer.
    pub fn queued(&self, n: usize) {
        self.queue_depth.inc_by(n as i64);
    }

    /// The writer took `n` queued operations (into a batch, or dropped them).
    pub fn dequeued(&self, n: usize) {
        self.queue_depth.dec_by(n as i64);
    }

    /// A batch of `operations` was planned; `landed`: it landed a commit, in `took`.
    pub fn batch(&self, operations: usize, landed: bool, took: Duration) {
        self.batch_operations.observe(operations as f64);
        if landed {
            self.commit_seconds.observe(took.as_secs_f64());
        }
    }

    /// A pack roll-up ran for `took`.
    pub fn rollup(&self, took: Duration) {
        self.rollup_seconds.observe(took.as_secs_f64());
    }

    /// A sweep ran: `Some(n)` it moved `n` actions, `None` it failed.
    pub fn sweep(&self, swept: Option<u64>) {
        let result = if swept.is_some() { "ok" } else { "failed" };
        self.sweep_runs
            .get_or_create(&ResultLabels { result })
            .inc();
        self.swept.inc_by(swept.unwrap_or(0));
    }

    /// A reload was tried.
    pub fn reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "refused" };
        self.reloads.get_or_create(&ResultLabels { result }).inc();
    }
}

impl Metrics {
    /// Sets every webhook series of `endpoint` at zero (a series that appears late is missed by
    /// `rate`).
    pub fn webhook_endpoint(&self, endpoint: &str) {
        for result in ["delivered", "failed_attempt", "dead"] {
            self.webhook(endpoint, result).inc_by(0);
        }
    }

    fn webhook(
        &self,
        endpoint: &str,
        result: &'static str,
    ) -> impl std::ops::Deref<Target = Counter> + '_ {
        self.webhook_deliveries.get_or_create(&WebhookLabels {
            endpoint: endpoint.to_owned(),
            result,
        })
    }

    /// `n` webhook deliveries are pending in the outbox (queued now, or found at start).
    pub fn webhook_queued(&self, n: usize) {
        self.webhook_pending.inc_by(n as i64);
    }

    /// A pending webhook delivery was settled (delivered or given up).
    pub fn webhook_settled(&self) {
        self.webhook_pending.dec();
    }

    /// A webhook delivery to `endpoint` was answered 2xx.
    pub fn webhook_delivered(&self, endpoint: &str) {
        self.webhook(endpoint, "delivered").inc();
    }

    /// An attempt of a webhook delivery to `endpoint` failed; it is retried.
    pub fn webhook_attempt_failed(&self, endpoint: &str) {
        self.webhook(endpoint, "failed_attempt").inc();
    }

    /// A webhook delivery to `endpoint` was given up and kept as a dead letter.
    pub fn webhook_dead(&self, endpoint: &str) {
        self.webhook(endpoint, "dead").inc();
        self.webhook_dead_letters.inc();
    }

    /// The outbox holds `n` dead letters (at start).
    pub fn webhook_dead_letters(&self, n: u64) {
        self.webhook_dead_letters.set(n as i64);
    }

    /// The deliveries of `events` landed events could not be written to the outbox.
    pub fn webhook_enqueue_failed(&self, events: usize) {
        self.webhook_enqueue_failures.inc_by(events as u64);
    }

    /// A reload of the webhooks file was tried.
    pub fn webhook_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "refused" };
        self.webhook_reloads
            .get_or_create(&ResultLabels { result })
            .inc();
    }
}

/// The `method` label: the methods the routes use, else `other` (a label never holds what a
/// client made up).
pub fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_metric_with_its_labels() {
        let m = Metrics::new();
        m.request("GET", "/api/actions/{id}", 404, Duration::from_millis(3));
        m.queued(3);
        m.dequeued(2);
        m.batch(2, true, Duration::from_millis(20));
        m.sweep(Some(4));
        m.sweep(None);
        m.reload(false);
        m.webhook_endpoint("ops");
        m.webhook_queued(3);
        m.webhook_delivered("ops");
        m.webhook_attempt_failed("ops");
        m.webhook_dead("ops");
        m.webhook_settled();
        m.webhook_settled();
        m.webhook_enqueue_failed(2);
        m.webhook_reload(true);
        let text = m.encode();
        for want in [
            r#"action_ledger_http_requests_total{method="GET",route="/api/actions/{id}",status="404"} 1"#,
            r#"action_ledger_http_request_duration_seconds_count{method="GET",route="/api/actions/{id}"} 1"#,
            "action_ledger_writer_batch_operations_count 1",
            "action_ledger_writer_commit_duration_seconds_count 1",
            "action_ledger_writer_queue_depth 1",
            "action_ledger_pack_rollup_duration_seconds_count 0",
            r#"action_ledger_sweep_runs_total{result="ok"} 1"#,
            r#"action_ledger_sweep_runs_total{result="failed"} 1"#,
            "action_ledger_sweep_actions_swept_total 4",
            r#"action_ledger_reloads_total{result="refused"} 1"#,
            r#"action_ledger_webhook_deliveries_total{endpoint="ops",result="delivered"} 1"#,
            r#"action_ledger_webhook_deliveries_total{endpoint="ops",result="failed_attempt"} 1"#,
            r#"action_ledger_webhook_deliveries_total{endpoint="ops",result="dead"} 1"#,
            "action_ledger_webhook_outbox_pending 1",
            "action_ledger_webhook_dead_letters 1",
            "action_ledger_webhook_enqueue_failures_total 2",
            r#"action_ledger_webhook_reloads_total{result="ok"} 1"#,
            "# EOF",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
        assert_eq!(
            method_label(&axum::http::Method::from_bytes(b"BREW").unwrap()),
            "other"
        );
    }
}
