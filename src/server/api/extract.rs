//! The handler prelude as axum extractors, so every route states what it needs in its
//! signature and the checks run in one order everywhere:
//!
//! 1. [`Caller`]: the `x-api-key` header names a key of the keys file (401 `Unauthorized`
//!    otherwise); with `--insecure-no-auth` every caller is the principal `anonymous` and an
//!    operator. [`Operator`] also requires the key's `operator` mark (403 `OPERATOR_REQUIRED`).
//! 2. [`JsonObject`]: a `Content-Type`, when present, is JSON (`application/json` or
//!    `application/…+json`, 415 otherwise); the body is at most [`MAX_BODY_BYTES`] (413, also
//!    when `Content-Length` announces more), arrives within the client timeout (408), is JSON
//!    (400 `Invalid JSON body`) and an object (400 `Validation failed`).
//!
//! Why the media type and `Origin` matter: a web page can make a browser send `text/plain`,
//! form or multipart bodies to any address, loopback included, without asking first (no CORS
//! preflight); a body that says what it is and is not JSON is refused before it is parsed.
//! With `--insecure-no-auth` no key proves the caller is not such a page, so a request that
//! carries an `Origin` header (which browsers add and the clients never send) is refused 403.
//!
//! axum runs the extractors in argument order, and the body one last, so a request without a
//! valid key is refused before its body is read.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;

use super::App;
use super::respond::{error, error_with, validation};
use crate::canonical::{self, Value};
use crate::server::MAX_BODY_BYTES;
use crate::server::auth::Key;

/// The `{id}` of an action route. A segment that is not even UTF-8 becomes the empty id, which
/// no action has: the route then answers as for any unknown id (404, or 409 for a claim), in
/// JSON, instead of axum's plain-text rejection.
pub struct ActionPath(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for ActionPath {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<ActionPath, Self::Rejection> {
        let id = axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|p| p.0)
            .unwrap_or_default();
        Ok(ActionPath(id))
    }
}

/// The principal of an authenticated request.
#[derive(Clone, Debug)]
pub struct Caller {
    /// The key's principal (`anonymous` without authentication).
    pub principal: String,
    /// Whether the key is marked `operator` (always without authentication).
    pub operator: bool,
    /// The keys and policy in force when the request was authenticated: the request keeps them
    /// to its end, whatever a reload swaps in meanwhile.
    pub access: Arc<crate::server::Access>,
}

impl Caller {
    /// Who this caller settles as (an outcome, a close): an operator key settles any action,
    /// another key only its principal's.
    pub fn settler(&self) -> crate::finality::Settler {
        if self.operator {
            crate::finality::Settler::Operator
        } else {
            crate::finality::Settler::Principal(self.principal.clone())
        }
    }
}

impl FromRequestParts<Arc<App>> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Caller, Response> {
        authenticated(app, parts)
    }
}

/// An authenticated caller whose key is marked `operator`.
pub struct Operator(pub Caller);

impl FromRequestParts<Arc<App>> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Operator, Response> {
        let caller = authenticated(app, parts)?;
        if !caller.operator {
            return Err(error_with(
                403,
                "Only operators may approve or deny actions (mark the principal `operator` in the keys file)",
                [("code", Value::str("OPERATOR_REQUIRED"))],
            ));
        }
        Ok(Operator(caller))
    }
}

/// A request body that is one JSON object (see the module doc for the refusals), and its text:
/// the value no longer holds how its numbers were written, which the act's rules need
/// ([`check_act_text`](crate::finality::check_act_text)).
pub struct JsonObject(pub Value, pub String);

impl FromRequest<Arc<App>> for JsonObject {
    type Rejection = Response;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<JsonObject, Response> {
        let (parts, body) = request.into_parts();
        let (body, text) = read_json(app, &parts.headers, body).await?;
        if !matches!(body, Value::Object(_)) {
            return Err(validation(vec![
                "request body must be a JSON object".into(),
            ]));
        }
        Ok(JsonObject(body, text))
    }
}

/// [`authenticate`], leaving the principal for the request's access log line.
fn authenticated(app: &App, parts: &Parts) -> Result<Caller, Response> {
    let caller = authenticate(app, &parts.headers)?;
    if let Some(slot) = parts.extensions.get::<super::observe::PrincipalSlot>() {
        slot.set(&caller.principal);
    }
    Ok(caller)
}

fn authenticate(app: &App, headers: &HeaderMap) -> Result<Caller, Response> {
    let access = app.access();
    if app.settings.insecure_no_auth {
        if headers.contains_key(header::ORIGIN) {
            return Err(error(
                403,
                "Requests from web pages are refused without authentication (an Origin header was sent); configure API keys",
            ));
        }
        return Ok(Caller {
            principal: "anonymous".into(),
            operator: true,
            access,
        });
    }
    let presented = headers
        .get("x-api-key")
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    match access.keys.authenticate(presented) {
        Some(Key {
            principal,
            operator,
            ..
        }) if !presented.is_empty() => Ok(Caller {
            principal: principal.clone(),
            operator: *operator,
            access: access.clone(),
        }),
        _ => Err(error(401, "Unauthorized")),
    }
}

/// Whether a `Content-Type` value names JSON: `application/json` or `application/<x>+json`,
/// with any parameters (`; charset=utf-8`), in any case.
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

async fn read_json(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Value, String), Response> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE)
        && !ct.to_str().is_ok_and(is_json)
    {
        return Err(error(
            415,
            "Unsupported Media Type: send the body as Content-Type: application/json",
        ));
    }
    let too_large = || {
        error(
            413,
            format!("Request body too large (limit {MAX_BODY_BYTES} bytes)"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    let bytes = match tokio::time::timeout(
        app.settings.client_timeout,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Err(_) => return Err(error(408, "Request body timeout")),
        Ok(Err(e)) if e.to_string().contains("length limit") => return Err(too_large()),
        Ok(Err(_)) => return Err(error(400, "Could not read the request body")),
        Ok(Ok(b)) => b,
    };
    std::str::from_utf8(&bytes)
        .ok()
        .and_then(|t| canonical::parse(t).ok().map(|v| (v, t.to_owned())))
        .ok_or_else(|| error(400, "Invalid JSON body"))
}
