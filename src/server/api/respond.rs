//! Responses: every answer is canonical JSON with `Content-Type: application/json`, errors
//! included (`{"error": …}`, plus `code`, `details`, `current_status` … where the reference has
//! them), and the mapping of finality results onto status codes.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::canonical::{self, Value};
use crate::finality::{self, batch::BatchError};
use crate::server::writer::{Answer, Reply};

pub(super) fn json(status: u16, body: Value) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        canonical::to_canonical_unchecked(&body),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub(super) fn error(status: u16, message: impl Into<String>) -> Response {
    json(status, Value::object([("error", Value::str(message))]))
}

pub(super) fn error_with(
    status: u16,
    message: impl Into<String>,
    extra: impl IntoIterator<Item = (&'static str, Value)>,
) -> Response {
    let mut v = vec![("error", Value::str(message))];
    v.extend(extra);
    json(status, Value::object(v))
}

pub(super) fn answer(a: Answer) -> Response {
    let no_store = a.no_store;
    let mut r = json(a.status, a.body);
    if no_store {
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

pub(super) fn validation(details: Vec<String>) -> Response {
    error_with(
        400,
        "Validation failed",
        [(
            "details",
            Value::Array(details.into_iter().map(Value::str).collect()),
        )],
    )
}

/// What a client is told when the store (the repository or the remote) fails: that it is
/// unavailable and to retry later, never why in the server's terms.
pub(super) const STORE_UNAVAILABLE: &str =
    "the ledger store is unavailable; retry later (the server's log has the details)";

/// Why an answer failed, in the server's terms (paths, remote URLs, git's lines): attached to
/// the response for [`log_internal`] to write to the server's log, never sent to the client.
#[derive(Clone, Debug)]
pub(super) struct Internal(pub(super) String);

/// `response` carrying `reason` for the server's log ([`Internal`]).
pub(super) fn with_internal(mut response: Response, reason: &str) -> Response {
    response
        .extensions_mut()
        .insert(Internal(reason.to_owned()));
    response
}

/// Writes the [`Internal`] reason of an answer to the server's log, redacted
/// ([`redact`](crate::store::remote::redact)), and drops it from the response.
pub(super) async fn log_internal(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<super::App>>,
    mut response: Response,
) -> Response {
    if let Some(Internal(reason)) = response.extensions_mut().remove::<Internal>() {
        (app.settings.log)(&format!(
            "answered {}: {}",
            response.status().as_u16(),
            crate::store::remote::redact(&reason)
        ));
    }
    response
}

/// 503 `LEDGER_UNAVAILABLE`: the store could not be read or written. The client is told to
/// retry later ([`STORE_UNAVAILABLE`]); `reason` goes to the server's log only.
pub(super) fn unavailable(reason: &str) -> Response {
    with_internal(
        error_with(
            503,
            "The ledger could not be written; nothing was recorded. Retry later.",
            [
                ("code", Value::str("LEDGER_UNAVAILABLE")),
                ("reason", Value::str(STORE_UNAVAILABLE)),
            ],
        ),
        reason,
    )
}

/// The generic mapping of a finality error onto a response (routes override specific cases).
pub(super) fn finality_error(e: &finality::Error) -> Response {
    use finality::Error as E;
    match e {
        E::InvalidInput { .. } | E::InvalidStatus { .. } | E::InvalidOutcome { .. } => {
            validation(vec![e.to_string()])
        }
        E::NotFound { .. } => error(404, "Action not found"),
        E::ActionExists { .. } => error_with(
            409,
            "This action id is taken by an action with another binding (or another principal's); choose another id",
            [("code", Value::str(e.code()))],
        ),
        // The remote's hook refused the server's push: its lines are the store's business.
        E::RemoteRefused(_) | E::RemoteRewritten(_) => unavailable(&e.to_string()),
        e if e.is_refusal() => error_with(409, e.to_string(), [("code", Value::str(e.code()))]),
        other => unavailable(&other.to_string()),
    }
}

pub(super) fn reply_or(
    reply: Reply,
    map: impl FnOnce(&finality::Error) -> Option<Response>,
) -> Response {
    match reply {
        Ok(a) => answer(a),
        Err(BatchError::Unavailable { reason }) => unavailable(&reason),
        Err(BatchError::Refused(e)) => map(&e).unwrap_or_else(|| finality_error(&e)),
    }
}

pub(super) async fn not_found() -> Response {
    error(404, "Not found")
}

pub(super) async fn method_not_allowed() -> Response {
    error(405, "Method not allowed")
}
