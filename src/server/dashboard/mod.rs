//! The operators' dashboard: a small server-rendered web application on `serve` (`GET /`),
//! HTML from compile-time templates ([`maud`]), no JavaScript and no build step.
//!
//! # Pages
//!
//! | Route | What |
//! |---|---|
//! | `GET /` | governed actions by status (tabs), paged, filtered by agent |
//! | `GET /ui/actions/{id}` | one action: binding, request (goal, act, risk, systems, reversible, reasoning), approval, claim, outcome, elapsed time |
//! | `GET /ui/actions/{id}/confirm?decision=approve\|deny` | the confirmation step (operators) |
//! | `POST /ui/actions/{id}/decide` | the decision and its optional reasoning, through the JSON route's own path |
//! | `GET /ui/lanes` | the ledger's `status` view as a table, and per lane an SVG bar chart of recent run durations |
//! | `GET /ui/login`, `POST /ui/login`, `POST /ui/logout` | a session from an API key, and its end |
//!
//! # One data path
//!
//! The dashboard reads what the JSON routes read and writes what they write: the listings go
//! through [`crate::finality::list::list_actions`] (the query parsed by
//! [`ActionQuery::parse`](crate::finality::list::ActionQuery::parse), as `GET /api/actions`
//! parses it), an action through [`Overlay::state`](crate::finality::batch::Overlay::state) at
//! the target's tip, and a decision through
//! [`approvals::submit_decision`](crate::server::api::approvals), the one writer operation of
//! `POST /api/actions/{id}/approve`. Times are the records'; the elapsed time of an open action
//! runs to the server's injected [`Clock`](crate::server::Clock). The lane view is
//! [`crate::project::status`] folded at the same tip, kept in memory and brought up to date
//! from the shards a newer tip adds ([`crate::project::fold_increment`]).
//!
//! # Sessions and CSRF
//!
//! The login form exchanges an API key (checked as `x-api-key` is: [`crate::server::auth`])
//! for a session cookie `al_session`: a random id of 244 bits, `HttpOnly` (no script reads it),
//! `SameSite=Strict` (no other site's page sends it), `Path=/`, valid 8 hours
//! ([`session::SESSION_TTL_MS`]). Sessions live in memory only (a restart logs everyone out),
//! at most [`session::MAX_SESSIONS`]. A session keeps the key's digest, never the key, and is
//! checked against the keys in force on every request: a key removed by a reload ends its
//! sessions. Every state-changing `POST` (decide, logout) carries the session's CSRF token in a
//! hidden field, compared in constant time; a `POST` whose `Origin` is another site's is refused
//! before that. `Secure` is not set: `serve` speaks plain HTTP (put TLS in front and the
//! cookie still works).
//!
//! Only keys marked `operator` see the approve and deny buttons; a forged decision from another
//! key's session is refused 403, as the JSON route refuses it. Without authentication
//! (`--insecure-no-auth`, loopback only) the login is one button and every session is the
//! operator `anonymous`; the dashboard then also refuses a `Host` that is not a loopback name,
//! so a page of another site that rebinds its DNS name to 127.0.0.1 cannot drive it.
//!
//! # What reaches the page
//!
//! Every value from a record is HTML-escaped by the templates (nothing is inserted unescaped
//! but the page's own fixed markup), and free text from records (outcome summaries and errors,
//! lane names, subjects, reasons) passes [`crate::finality::clean_text`] again: a secret shape
//! or confidential identifier shows as `[REDACTED]` even in a record written before a rule
//! existed. No key, session id or server path is written into a page. Pages are sent with
//! `Cache-Control: no-store` and a Content-Security-Policy that allows no script at all.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{get, post};

use crate::project::{Document, status::Status};
use crate::server::api::App;

// Handlers return their early answers (a redirect, a 403 page) as `Err(Response)`, as the
// JSON routes do.
#[allow(clippy::result_large_err)]
mod handlers;
mod pages;
pub mod session;

#[cfg(test)]
mod tests;

pub use session::Sessions;

/// The dashboard's state inside the server: its sessions and the lane view last folded.
#[derive(Debug, Default)]
pub struct Dashboard {
    /// The open sessions.
    pub sessions: Sessions,
    /// The `status` view at the last tip the lanes page was drawn at.
    lanes: Mutex<Option<Document<Status>>>,
}

impl Dashboard {
    /// No sessions, no lane view yet.
    pub fn new() -> Dashboard {
        Dashboard::default()
    }
}

/// The dashboard's routes, merged into [`crate::server::api::router`].
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/", get(handlers::index))
        .route("/ui/login", get(handlers::login_form).post(handlers::login))
        .route("/ui/logout", post(handlers::logout))
        .route("/ui/lanes", get(handlers::lanes))
        .route("/ui/actions/{id}", get(handlers::action))
        .route("/ui/actions/{id}/confirm", get(handlers::confirm))
        .route("/ui/actions/{id}/decide", post(handlers::decide))
}
