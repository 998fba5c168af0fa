//! What every request leaves behind: its metrics ([`crate::server::metrics`]) and one access
//! log line on the server's log ([`Settings::log`](crate::server::Settings::log)), a JSON
//! object in canonical JSON:
//!
//! ```json
//! {"duration_ms":1.25,"method":"POST","principal":"ci-bot","request_id":"req-42","route":"/api/actions/{id}/outcome","status":200,"time":"2026-03-01T12:00:00.000Z","type":"access","v":1}
//! ```
//!
//! - `route` is the route's template, never the path (an action id is the caller's business);
//!   `unmatched` when no route matched. The query string is dropped entirely.
//! - `principal` is the authenticated key's principal (`anonymous` with `--insecure-no-auth`),
//!   absent when the request was not authenticated (a 401, `/healthz`, `/metrics`, the cron
//!   endpoint); never the key, nor any header but `x-request-id`.
//! - `request_id` is the client's `x-request-id` when it is 1 to 128 characters of
//!   `A-Z a-z 0-9 - _ . :`, else absent.
//! - `time` is the server's clock ([`Settings::clock`](crate::server::Settings::clock)) at the
//!   answer; `duration_ms` is measured from the request's arrival at the router.
//! - No body is logged, nor anything of the answer but its status.

use std::sync::{Arc, OnceLock};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::App;
use crate::canonical::{self, Value};
use crate::server::metrics::{UNMATCHED, method_label};

/// Where the extractors leave the principal of an authenticated request for its access line.
#[derive(Clone, Default)]
pub(crate) struct PrincipalSlot(Arc<OnceLock<String>>);

impl PrincipalSlot {
    /// Notes the principal (the first one set stays).
    pub(crate) fn set(&self, principal: &str) {
        let _ = self.0.set(principal.to_owned());
    }
}

/// The client's request id, when it is short and plain (see the module doc).
fn request_id(request: &Request) -> Option<String> {
    let id = request.headers().get("x-request-id")?.to_str().ok()?;
    let plain = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    plain.then(|| id.to_owned())
}

/// The middleware: times the request, counts it, and logs its access line.
pub(super) async fn observe(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = std::time::Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let request_id = request_id(&request);
    let slot = PrincipalSlot::default();
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    app.metrics.request(method, &route, status, took);
    let mut line = vec![
        ("type", Value::str("access")),
        ("v", Value::from(1)),
        ("method", Value::str(method)),
        ("route", Value::str(route)),
        ("status", Value::from(i64::from(status))),
        (
            "duration_ms",
            Value::Number(took.as_micros() as f64 / 1000.0),
        ),
        (
            "time",
            Value::str(crate::finality::format_time(app.settings.clock.now())),
        ),
    ];
    if let Some(principal) = slot.0.get() {
        line.push(("principal", Value::str(principal.as_str())));
    }
    if let Some(id) = request_id {
        line.push(("request_id", Value::str(id)));
    }
    (app.settings.log)(&canonical::to_canonical_unchecked(&Value::object(line)));
    response
}
