//! The dashboard's handlers: who is asking (the session), what they may do, and which library
//! call answers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use maud::Markup;

use super::pages::{self, Viewer};
use super::session::csrf_ok;
use crate::finality::batch::BatchError;
use crate::finality::list::{self, ActionQuery};
use crate::finality::{ActionId, ApprovalDecision};
use crate::project::{self, Document, status::Status};
use crate::server::api::App;
use crate::server::api::approvals;
use crate::server::api::observe::PrincipalSlot;
use crate::server::api::reads::{decision_of, read};

/// The session cookie's name.
pub(super) const COOKIE: &str = "al_session";

/// Rows of an action listing page.
pub(super) const PAGE_SIZE: usize = 25;

/// Largest form body the dashboard reads (a key, a token and a decision fit many times).
const MAX_FORM_BYTES: usize = 8 * 1024;

/// An HTML answer with the dashboard's headers: no caching, no script, no framing.
pub(super) fn html(status: u16, markup: Markup) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        markup.into_string(),
    )
        .into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: with it a browser sends `Origin: null` on the page's own form posts,
        // which the same-site check below could not tell from a sandboxed page's.
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// 303 to `to` (after a form's `POST`, so a reload does not send it again).
fn see_other(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// An error page.
fn refuse(status: u16, viewer: Option<&Viewer>, message: &str) -> Response {
    html(status, pages::message(viewer, status, message))
}

/// The session id of the request's `al_session` cookie.
fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Whether `host` (a `Host` header) names the loopback interface: `127.0.0.1`, `[::1]` or
/// `localhost`, with any port.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(name, "127.0.0.1" | "::1" | "localhost")
}

/// The dashboard's gate before anything else: without authentication only a loopback `Host`
/// is served (see the module docs: DNS rebinding).
fn host_refused(app: &App, headers: &HeaderMap) -> Option<Response> {
    if !app.settings.insecure_no_auth {
        return None;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    (!loopback_host(host)).then(|| {
        refuse(
            403,
            None,
            "Without authentication the dashboard answers loopback host names only.",
        )
    })
}

/// Whether a `POST` comes from another site: an `Origin` (which browsers send with every
/// form post) other than this host's (`null` included), or `Sec-Fetch-Site` `cross-site` or
/// `same-site` (another port or subdomain). A request without
/// either (a command-line client) is not a browser's cross-site request.
fn cross_site(headers: &HeaderMap) -> bool {
    let text = |h| headers.get(h).and_then(|v: &HeaderValue| v.to_str().ok());
    if matches!(text("sec-fetch-site"), Some("cross-site" | "same-site")) {
        return true;
    }
    match text(header::ORIGIN.as_str()) {
        None => false,
        Some(origin) => {
            let host = text(header::HOST.as_str()).unwrap_or_default();
            origin != format!("http://{host}") && origin != format!("https://{host}")
        }
    }
}

/// Who the request's session belongs to, checked against the keys in force now.
fn viewer(app: &App, parts: &Parts) -> Option<Viewer> {
    let sid = cookie(&parts.headers)?;
    let session = app.dashboard.sessions.get(&sid, app.settings.clock.now())?;
    let (principal, operator) = match session.digest {
        None if app.settings.insecure_no_auth => ("anonymous".to_owned(), true),
        None => return None,
        Some(d) => {
            let access = app.access();
            let key = access.keys.by_digest(&d)?;
            (key.principal.clone(), key.operator)
        }
    };
    // The access log line names who acted, as it does for a key.
    if let Some(slot) = parts.extensions.get::<PrincipalSlot>() {
        slot.set(&principal);
    }
    Some(Viewer {
        principal,
        operator,
        csrf: session.csrf,
    })
}

/// The viewer, or the answer for a request without a session (a `GET` goes to the login page).
fn signed_in(app: &App, parts: &Parts) -> Result<Viewer, Response> {
    if let Some(r) = host_refused(app, &parts.headers) {
        return Err(r);
    }
    viewer(app, parts).ok_or_else(|| see_other("/ui/login"))
}

/// The decoded pairs of a form body, at most [`MAX_FORM_BYTES`].
async fn form(body: Body) -> Result<Vec<(String, String)>, Response> {
    let bytes = axum::body::to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| refuse(413, None, "The form is too large."))?;
    Ok(url::form_urlencoded::parse(&bytes)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect())
}

fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A state-changing `POST` of a session: same site, signed in, and the session's CSRF token.
async fn checked_post(
    app: &App,
    request: Request,
) -> Result<(Viewer, Vec<(String, String)>), Response> {
    let (parts, body) = request.into_parts();
    if let Some(r) = host_refused(app, &parts.headers) {
        return Err(r);
    }
    if cross_site(&parts.headers) {
        return Err(refuse(403, None, "Cross-site form posts are refused."));
    }
    let Some(viewer) = viewer(app, &parts) else {
        return Err(refuse(401, None, "Log in first."));
    };
    let pairs = form(body).await?;
    let token = field(&pairs, "csrf").unwrap_or_default();
    if !csrf_ok(&viewer.csrf, token) {
        return Err(refuse(
            403,
            Some(&viewer),
            "The form's CSRF token does not match this session: reload the page and try again.",
        ));
    }
    Ok((viewer, pairs))
}

/// `GET /ui/login`.
pub(super) async fn login_form(State(app): State<Arc<App>>, parts: Parts) -> Response {
    if let Some(r) = host_refused(&app, &parts.headers) {
        return r;
    }
    if viewer(&app, &parts).is_some() {
        return see_other("/");
    }
    html(200, pages::login(app.settings.insecure_no_auth, None))
}

/// `POST /ui/login`: a key for a session cookie.
pub(super) async fn login(State(app): State<Arc<App>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Some(r) = host_refused(&app, &parts.headers) {
        return r;
    }
    if cross_site(&parts.headers) {
        return refuse(403, None, "Cross-site form posts are refused.");
    }
    let pairs = match form(body).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let digest = if app.settings.insecure_no_auth {
        None
    } else {
        let key = field(&pairs, "key").unwrap_or_default().trim().as_bytes();
        let access = app.access();
        match access.keys.authenticate(key) {
            Some(k) if !key.is_empty() => {
                if let Some(slot) = parts.extensions.get::<PrincipalSlot>() {
                    slot.set(&k.principal);
                }
                Some(k.digest)
            }
            _ => {
                return html(
                    401,
                    pages::login(false, Some("That key is not configured on this server.")),
                );
            }
        }
    };
    let now = app.settings.clock.now();
    let (sid, _) = match app.dashboard.sessions.open(digest, now) {
        Ok(s) => s,
        Err(_) => return refuse(503, None, "No session could be opened; retry."),
    };
    let mut r = see_other("/");
    let cookie = format!(
        "{COOKIE}={sid}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        super::session::SESSION_TTL_MS / 1000
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /ui/logout`: ends the session (CSRF-checked, so another site cannot log one out).
pub(super) async fn logout(State(app): State<Arc<App>>, request: Request) -> Response {
    let sid = cookie(request.headers());
    if let Err(r) = checked_post(&app, request).await {
        return r;
    }
    if let Some(sid) = sid {
        app.dashboard.sessions.close(&sid);
    }
    let mut r = see_other("/ui/login");
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("al_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

/// The tab, agent and offset of the listing page's query.
pub(super) struct ListParams {
    pub(super) tab: pages::Tab,
    pub(super) agent: Option<String>,
    pub(super) offset: usize,
}

fn list_params(query: Option<&str>) -> Result<(ListParams, ActionQuery), String> {
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let get = |n: &str| field(&pairs, n).filter(|v| !v.is_empty());
    let tab = match get("tab") {
        None => pages::Tab::PendingApproval,
        Some(t) => pages::Tab::parse(t).ok_or_else(|| format!("unknown tab {t:?}"))?,
    };
    let agent = get("agent").map(str::to_owned);
    let offset = get("offset").unwrap_or("0");
    // The JSON listing's own parser: the same rules, the same refusals.
    let limit = PAGE_SIZE.to_string();
    let mut q: Vec<(&str, &str)> = vec![("limit", &limit), ("offset", offset)];
    q.extend(tab.filter());
    if let Some(a) = &agent {
        q.push(("agent_id", a));
    }
    let query = ActionQuery::parse(q).map_err(|e| e.to_string())?;
    Ok((
        ListParams {
            tab,
            agent,
            offset: query.offset,
        },
        query,
    ))
}

/// `GET /`: the actions of one status tab, paged, filtered by agent.
pub(super) async fn index(
    State(app): State<Arc<App>>,
    parts: Parts,
    RawQuery(query): RawQuery,
) -> Response {
    let viewer = match signed_in(&app, &parts) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let (params, q) = match list_params(query.as_deref()) {
        Ok(p) => p,
        Err(e) => return refuse(400, Some(&viewer), &e),
    };
    let r = read(&app, move |ov, now| {
        Ok(list::list_actions(ov, &q).map(|page| (page, now)))
    })
    .await;
    match r {
        Ok(Ok((page, now))) => html(200, pages::index(&viewer, &params, &page, now)),
        Ok(Err(list::ListError::BadParam { .. })) => {
            refuse(400, Some(&viewer), "A filter is not valid.")
        }
        Ok(Err(list::ListError::Read(_))) | Err(_) => unreadable(&viewer),
    }
}

fn unreadable(viewer: &Viewer) -> Response {
    refuse(
        503,
        Some(viewer),
        "The ledger could not be read. Retry later.",
    )
}

/// `GET /ui/actions/{id}`.
pub(super) async fn action(
    State(app): State<Arc<App>>,
    parts: Parts,
    Path(id): Path<String>,
) -> Response {
    let viewer = match signed_in(&app, &parts) {
        Ok(v) => v,
        Err(r) => return r,
    };
    action_page(&app, &viewer, &id, None).await
}

async fn action_page(
    app: &Arc<App>,
    viewer: &Viewer,
    raw_id: &str,
    confirm: Option<ApprovalDecision>,
) -> Response {
    let Some(id) = ActionId::parse(raw_id) else {
        return refuse(404, Some(viewer), "No such action.");
    };
    let r = read(app, move |ov, now| {
        Ok(ov.state(&id)?.map(|s| {
            let d = decision_of(ov, &s);
            (s, d, now)
        }))
    })
    .await;
    match r {
        Ok(Some((state, decision, now))) => html(
            200,
            pages::action(viewer, &state, decision.as_ref(), now, confirm),
        ),
        Ok(None) => refuse(404, Some(viewer), "No such action."),
        Err(_) => unreadable(viewer),
    }
}

fn parse_decision(text: Option<&str>) -> Option<ApprovalDecision> {
    match text {
        Some("approve") => Some(ApprovalDecision::Approve),
        Some("deny") => Some(ApprovalDecision::Deny),
        _ => None,
    }
}

const OPERATORS_ONLY: &str =
    "Only operators may approve or deny actions (the key is not marked operator).";

/// `GET /ui/actions/{id}/confirm?decision=…`: the action with a confirmation form.
pub(super) async fn confirm(
    State(app): State<Arc<App>>,
    parts: Parts,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let viewer = match signed_in(&app, &parts) {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !viewer.operator {
        return refuse(403, Some(&viewer), OPERATORS_ONLY);
    }
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let Some(decision) = parse_decision(field(&pairs, "decision")) else {
        return refuse(400, Some(&viewer), "decision must be approve or deny.");
    };
    action_page(&app, &viewer, &id, Some(decision)).await
}

/// `POST /ui/actions/{id}/decide`: an operator's confirmed decision (`decision`, optional
/// `reasoning`), written by the JSON route's own operation.
pub(super) async fn decide(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    let (viewer, pairs) = match checked_post(&app, request).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !viewer.operator {
        return refuse(403, Some(&viewer), OPERATORS_ONLY);
    }
    let Some(decision) = parse_decision(field(&pairs, "decision")) else {
        return refuse(400, Some(&viewer), "decision must be approve or deny.");
    };
    if ActionId::parse(&id).is_none() {
        return refuse(404, Some(&viewer), "No such action.");
    }
    let reasoning = field(&pairs, "reasoning").map(str::to_owned);
    match approvals::submit_decision(&app, &id, decision, &viewer.principal, reasoning).await {
        Ok(_) => see_other(&format!("/ui/actions/{id}")),
        Err(BatchError::Unavailable { .. }) => unreadable(&viewer),
        Err(BatchError::Refused(e)) => {
            let (status, message) = match approvals::refusal(&e) {
                Some(r) => (
                    r.status().as_u16(),
                    "This action is no longer pending approval.".to_owned(),
                ),
                None if e.code() == "NOT_FOUND" => (404, "No such action.".to_owned()),
                None => (409, format!("The decision was refused ({}).", e.code())),
            };
            refuse(status, Some(&viewer), &message)
        }
    }
}

/// `GET /ui/lanes`: the ledger's `status` view at the tip, with per-lane bar charts.
pub(super) async fn lanes(State(app): State<Arc<App>>, parts: Parts) -> Response {
    let viewer = match signed_in(&app, &parts) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let cached = app
        .dashboard
        .lanes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let r = read(&app, move |ov, _| {
        let snap = ov.snapshot();
        let Some(commit) = snap.commit() else {
            return Ok(Ok(None));
        };
        let store = snap.store();
        let folded = match cached {
            Some(doc) if !doc.revision.is_empty() => {
                project::fold_increment(store, doc, "the dashboard's lane view", commit)
            }
            _ => project::fold_revision::<Status>(
                store,
                commit,
                &crate::log::Filter::default(),
                project::Limits::default(),
            ),
        };
        Ok(folded.map(Some))
    })
    .await;
    let doc: Option<Document<Status>> = match r {
        Ok(Ok(doc)) => doc,
        // A history rewritten under the cache: fold again from nothing next time.
        Ok(Err(_)) | Err(_) => {
            *app.dashboard
                .lanes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            return unreadable(&viewer);
        }
    };
    if let Some(d) = &doc {
        *app.dashboard
            .lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(d.clone());
    }
    html(200, pages::lanes(&viewer, doc.as_ref().map(|d| &d.view)))
}
