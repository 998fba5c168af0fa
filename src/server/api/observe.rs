//! What every request leaves behind: its metrics ([`crate::server::metrics`]).

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::App;
use crate::server::metrics::{UNMATCHED, method_label};

/// The middleware: times the request and counts it.
pub(super) async fn observe(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
        .to_owned();
    let response = next.run(request).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    app.metrics.request(method, &route, status, took);
    response
}
