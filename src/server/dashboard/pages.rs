//! The dashboard's templates ([`maud`]: checked at compile time, every `(value)` escaped).
//!
//! Nothing here uses `PreEscaped`: record data, and even the SVG chart, go through maud's
//! escaping. Free text from records passes [`shown`] first.

use maud::{DOCTYPE, Markup, html};

use super::handlers::{ListParams, PAGE_SIZE};
use crate::finality::decision::Decision;
use crate::finality::list::ActionPage;
use crate::finality::{
    self, ApprovalDecision, Lifecycle, OutcomeStatus, Security, State as ActionState,
};
use crate::project::status::{Operation, Status};
use crate::time::Timestamp;

/// Who is looking at a page.
#[derive(Clone, Debug)]
pub(super) struct Viewer {
    /// The key's principal.
    pub(super) principal: String,
    /// Whether the key is marked `operator`.
    pub(super) operator: bool,
    /// The session's CSRF token, put in every form.
    pub(super) csrf: String,
}

/// Free text of a record as the page shows it: the redaction rules applied again (see the
/// module docs of the dashboard), at most 2,000 UTF-16 units.
pub(super) fn shown(text: &str) -> String {
    finality::clean_text(text, 2000, &mut Security::default())
}

/// The status tabs of the listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tab {
    PendingApproval,
    Running,
    PendingOutcome,
    Completed,
    Failed,
    Cancelled,
    Expired,
    LostConfirmation,
    All,
}

impl Tab {
    const ALL: [Tab; 9] = [
        Tab::PendingApproval,
        Tab::Running,
        Tab::PendingOutcome,
        Tab::Completed,
        Tab::Failed,
        Tab::Cancelled,
        Tab::Expired,
        Tab::LostConfirmation,
        Tab::All,
    ];

    fn key(self) -> &'static str {
        match self {
            Tab::PendingApproval => "pending_approval",
            Tab::Running => "running",
            Tab::PendingOutcome => "pending_outcome",
            Tab::Completed => "completed",
            Tab::Failed => "failed",
            Tab::Cancelled => "cancelled",
            Tab::Expired => "expired",
            Tab::LostConfirmation => "lost_confirmation",
            Tab::All => "all",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Tab::PendingApproval => "Pending approval",
            Tab::Running => "Running",
            Tab::PendingOutcome => "Pending outcome",
            Tab::Completed => "Completed",
            Tab::Failed => "Failed",
            Tab::Cancelled => "Cancelled",
            Tab::Expired => "Approval expired",
            Tab::LostConfirmation => "Lost confirmation",
            Tab::All => "All",
        }
    }

    pub(super) fn parse(key: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.key() == key)
    }

    /// The tab as `GET /api/actions` query pairs. `pending_outcome`: every action whose outcome
    /// is not reported yet, whatever its lifecycle.
    pub(super) fn filter(self) -> Option<(&'static str, &'static str)> {
        match self {
            Tab::PendingApproval => Some(("status", "pending_approval")),
            Tab::Running => Some(("status", "running")),
            Tab::PendingOutcome => Some(("outcome_status", "pending")),
            Tab::Completed => Some(("status", "completed")),
            Tab::Failed => Some(("status", "failed")),
            Tab::Cancelled => Some(("status", "cancelled")),
            Tab::Expired => Some(("status", "expired")),
            Tab::LostConfirmation => Some(("outcome_status", "lost_confirmation")),
            Tab::All => None,
        }
    }
}

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#223;color:#eee;padding:.5em 1em;display:flex;gap:1em;align-items:center}
header a{color:#eee}header form{margin-left:auto}
main{padding:1em}table{border-collapse:collapse;background:#fff}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
nav.tabs a{margin-right:.8em}nav.tabs a.on{font-weight:bold;text-decoration:none}
.st{font-family:monospace}dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}
dt{font-weight:bold}section{margin-bottom:1.5em}.msg{padding:.5em;background:#fee}
.button{padding:.3em .8em;border:1px solid #888;text-decoration:none;color:#fff}
.approve{background:#2a6;color:#fff}.deny{background:#c33;color:#fff}
svg{background:#fff;border:1px solid #ddd}
";

fn layout(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · action-ledger" }
                style { (STYLE) }
            }
            body {
                header {
                    strong { "action-ledger" }
                    @if let Some(v) = viewer {
                        a href="/" { "Actions" }
                        a href="/ui/lanes" { "Lanes" }
                        span #who {
                            "signed in as " (v.principal)
                            @if v.operator { " (operator)" }
                        }
                        form method="post" action="/ui/logout" {
                            input type="hidden" name="csrf" value=(v.csrf);
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// A page with one message (errors).
pub(super) fn message(viewer: Option<&Viewer>, status: u16, text: &str) -> Markup {
    layout(
        &format!("{status}"),
        viewer,
        html! {
            p.msg #message { (text) }
            p { a href="/" { "Back to the actions" } }
        },
    )
}

/// The login form.
pub(super) fn login(no_auth: bool, error: Option<&str>) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            @if let Some(e) = error { p.msg #message { (e) } }
            form method="post" action="/ui/login" {
                @if no_auth {
                    p { "This server runs without authentication (loopback only): every session is the operator anonymous." }
                } @else {
                    p { label for="key" { "API key" } }
                    p { input #key type="password" name="key" autocomplete="off" required size="48"; }
                }
                button #login type="submit" { "Log in" }
            }
        },
    )
}

/// Milliseconds as `1h 02m 03s`, `4m 05s`, `6.789s`.
pub(super) fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}h {:02}m {:02}s", s / 3600, (s % 3600) / 60, s % 60)
    } else if s >= 60 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{}.{:03}s", s, ms % 1000)
    }
}

/// From creation to the outcome, or to `now` while the outcome is pending (then `so far`).
fn elapsed(state: &ActionState, now: Timestamp) -> String {
    match &state.outcome {
        Some(o) => duration(o.outcome_at.millis_since(state.action.created_at)),
        None => format!(
            "{} so far",
            duration(now.millis_since(state.action.created_at))
        ),
    }
}

fn time(t: Timestamp) -> String {
    finality::format_time(t)
}

fn list_href(tab: Tab, agent: Option<&str>, offset: usize) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("tab", tab.key());
    if let Some(a) = agent {
        q.append_pair("agent", a);
    }
    if offset > 0 {
        q.append_pair("offset", &offset.to_string());
    }
    format!("/?{}", q.finish())
}

/// `GET /`: the tabs, the agent filter, one page of actions.
pub(super) fn index(
    viewer: &Viewer,
    params: &ListParams,
    page: &ActionPage,
    now: Timestamp,
) -> Markup {
    let agent = params.agent.as_deref();
    layout(
        "Governed actions",
        Some(viewer),
        html! {
            nav.tabs {
                @for t in Tab::ALL {
                    a class=[(t == params.tab).then_some("on")] href=(list_href(t, agent, 0)) { (t.label()) }
                }
            }
            form method="get" action="/" {
                input type="hidden" name="tab" value=(params.tab.key());
                label for="agent" { "Agent " }
                input #agent name="agent" value=[agent];
                button type="submit" { "Filter" }
            }
            p {
                @match page.total {
                    Some(n) => { (n) " action(s)" }
                    None => { "More actions than one walk counts" }
                }
                @if params.offset > 0 || page.more {
                    ", showing " (params.offset + 1) "–" (params.offset + page.actions.len())
                }
            }
            @if page.actions.is_empty() {
                p #empty { "No actions." }
            } @else {
                table #actions {
                    tr { th { "Action" } th { "Agent" } th { "Created by" } th { "Status" } th { "Outcome" } th { "Created" } th { "Elapsed" } }
                    @for l in &page.actions {
                        @let s = &l.state;
                        tr {
                            td { a.st href=(format!("/ui/actions/{}", s.action.action_id.as_str())) { (s.action.action_id.as_str()) } }
                            td { (s.action.agent_id) }
                            td { (s.action.created_by) }
                            td.st { (s.lifecycle().as_str()) }
                            td.st { (s.outcome_status().as_str()) }
                            td { (time(s.action.created_at)) }
                            td { (elapsed(s, now)) }
                        }
                    }
                }
            }
            p {
                @if params.offset > 0 {
                    a #prev href=(list_href(params.tab, agent, params.offset.saturating_sub(PAGE_SIZE))) { "← Newer page" }
                    " "
                }
                @if page.more {
                    a #next href=(list_href(params.tab, agent, params.offset + PAGE_SIZE)) { "Next page →" }
                }
            }
        },
    )
}

fn opt(v: Option<&str>) -> Markup {
    html! { @match v { Some(t) => (t), None => span { "—" } } }
}

/// Whether an operator may still decide on the action (the rule of `batch::approve`).
fn decidable(state: &ActionState) -> bool {
    state.lifecycle() == Lifecycle::PendingApproval
        && state.outcome_status() == OutcomeStatus::Pending
        && state.approval.is_none()
}

/// What the creator asked for (the full action record, [`finality::details`]): the declared
/// goal, the act as stored (the scrubbed, redacted one), the risk score, the systems touched,
/// whether it is reversible and the reasoning; every text shown through [`shown`] and escaped
/// by the template. A record without details says so.
fn request(details: Option<&finality::Details>) -> Markup {
    let text = |name: &str| details.and_then(|d| d.text(name)).map(shown);
    let systems = details
        .map(|d| d.list("systems_touched"))
        .unwrap_or_default();
    let act = details.and_then(|d| d.act()).map(|a| {
        finality::clean_text(
            &crate::canonical::to_canonical_unchecked(a),
            finality::MAX_TEXT_UNITS,
            &mut Security::default(),
        )
    });
    html! {
        section #request {
            h2 { "Request" }
            @if details.is_none() {
                p { "Not recorded (an action created without its details)." }
            }
            dl {
                dt { "Goal" } dd #goal { (opt(text("declared_goal").as_deref())) }
                dt { "Act" } dd #act {
                    @match &act {
                        Some(a) => pre { (a) },
                        None => span { "—" },
                    }
                    @if details.is_some_and(finality::Details::act_redacted) {
                        p.note { "Redacted before it was stored: its hash cannot be recomputed from it." }
                    }
                }
                dt { "Risk score" } dd #risk { (opt(details.and_then(finality::Details::risk_score).map(|r| r.to_string()).as_deref())) }
                dt { "Systems touched" } dd #systems {
                    @if systems.is_empty() { span { "—" } }
                    @else { ul { @for s in &systems { li { (shown(s)) } } } }
                }
                dt { "Reversible" } dd #reversible { (opt(details.and_then(finality::Details::reversible).map(|r| if r { "yes" } else { "no" }))) }
                dt { "Reasoning" } dd #request-reasoning { (opt(text("reasoning").as_deref())) }
            }
        }
    }
}

/// `GET /ui/actions/{id}` (and its confirmation step).
pub(super) fn action(
    viewer: &Viewer,
    state: &ActionState,
    decision: Option<&Decision>,
    now: Timestamp,
    confirm: Option<ApprovalDecision>,
) -> Markup {
    let a = &state.action;
    let id = a.action_id.as_str();
    layout(
        &format!("Action {id}"),
        Some(viewer),
        html! {
            section #binding {
                h2 { "Binding" }
                dl {
                    dt { "Status" } dd.st #status { (state.lifecycle().as_str()) }
                    dt { "Outcome status" } dd.st #outcome-status { (state.outcome_status().as_str()) }
                    dt { "Agent" } dd { (a.agent_id) }
                    dt { "Created by" } dd { (a.created_by) }
                    dt { "Created at" } dd { (time(a.created_at)) }
                    dt { "Elapsed" } dd #elapsed { (elapsed(state, now)) }
                    dt { "Action type" } dd { (opt(decision.and_then(|d| d.action_type.as_deref()))) }
                    dt { "Guard verdict" } dd.st { (a.guard_verdict.as_str()) }
                    dt { "Guard decision" } dd.st { (opt(a.guard_decision_id.as_deref())) }
                    dt { "Guard reason" } dd { (opt(decision.and_then(|d| d.reason.as_deref()).map(shown).as_deref())) }
                    dt { "Act hash" } dd.st { (opt(a.act_content_hash.as_deref())) }
                    dt { "Containment" } dd { (opt(a.containment_ref.as_deref().map(shown).as_deref())) }
                    dt { "Identity verified" } dd { (a.identity_verified) }
                    dt { "Protocol" } dd { (opt(a.execution_protocol.map(|p| p.to_string()).as_deref())) }
                }
            }
            (request(a.details.as_ref()))
            section #approval {
                h2 { "Approval" }
                @if let Some(p) = &state.approval {
                    p { (p.decision.as_str()) " by " (p.decided_by) " at " (time(p.decided_at)) }
                    @if let Some(r) = &p.reasoning {
                        p #approval-reasoning { "Reasoning: " (shown(r)) }
                    }
                } @else if decidable(state) {
                    p { "Waiting for an operator." }
                    @if viewer.operator {
                        @match confirm {
                            Some(d) => {
                                form #confirm method="post" action=(format!("/ui/actions/{id}/decide")) {
                                    p { "Really " (d.as_str()) " this action?" }
                                    input type="hidden" name="csrf" value=(viewer.csrf);
                                    input type="hidden" name="decision" value=(d.as_str());
                                    p {
                                        label for="reasoning" { "Reasoning (optional, kept with the decision"
                                            @if d == ApprovalDecision::Deny { " and shown to the agent as the error" }
                                            "):" }
                                        br;
                                        textarea #reasoning name="reasoning" rows="3" cols="60" maxlength=(finality::MAX_TEXT_UNITS) {}
                                    }
                                    button #confirm-button type="submit" class=(d.as_str()) { "Confirm: " (d.as_str()) }
                                    " "
                                    a href=(format!("/ui/actions/{id}")) { "Cancel" }
                                }
                            }
                            None => {
                                p.buttons {
                                    a.button.approve #approve href=(format!("/ui/actions/{id}/confirm?decision=approve")) { "Approve…" }
                                    " "
                                    a.button.deny #deny href=(format!("/ui/actions/{id}/confirm?decision=deny")) { "Deny…" }
                                }
                            }
                        }
                    }
                } @else {
                    p { "None." }
                }
            }
            section #claim {
                h2 { "Claim" }
                @if let Some(c) = &state.claim {
                    dl {
                        dt { "Attempt" } dd.st { (c.attempt_id.as_str()) }
                        dt { "Claimed at" } dd { (time(c.claimed_at)) }
                        dt { "Guard decision" } dd.st { (c.guard_decision_id) }
                    }
                } @else {
                    p { "Not claimed." }
                }
            }
            section #outcome {
                h2 { "Outcome" }
                @if let Some(o) = &state.outcome {
                    dl {
                        dt { "Status" } dd.st { (o.status.as_str()) }
                        dt { "At" } dd { (time(o.outcome_at)) }
                        dt { "Source" } dd.st { (match o.source { finality::Source::Outcome => "outcome", finality::Source::LegacyClose => "close", finality::Source::Sweep => "sweep" }) }
                        dt { "Summary" } dd #summary { (opt(o.summary.as_deref().map(shown).as_deref())) }
                        dt { "Error" } dd #error { (opt(o.error_message.as_deref().map(shown).as_deref())) }
                    }
                } @else {
                    p { "Pending." }
                }
            }
        },
    )
}

/// Runs drawn per lane in the chart.
const CHART_RUNS: usize = 20;
/// Rows per lane in the table.
const TABLE_ROWS: usize = 50;

/// The finished operations of a lane, most recent last, at most [`CHART_RUNS`].
fn recent_runs(ops: &std::collections::BTreeMap<String, Operation>) -> Vec<(&str, &Operation)> {
    let mut runs: Vec<(&str, &Operation)> = ops
        .iter()
        .filter(|(_, o)| o.duration_ms.is_some())
        .map(|(k, o)| (k.as_str(), o))
        .collect();
    runs.sort_by(|a, b| a.1.last.cmp(&b.1.last));
    let skip = runs.len().saturating_sub(CHART_RUNS);
    runs.split_off(skip)
}

/// A lane's operations, the most recent first.
fn newest_first(ops: &std::collections::BTreeMap<String, Operation>) -> Vec<(&String, &Operation)> {
    let mut rows: Vec<(&String, &Operation)> = ops.iter().collect();
    rows.sort_by(|a, b| b.1.last.cmp(&a.1.last));
    rows
}

/// A bar chart of the durations of a lane's recent runs, one bar each, scaled to the longest;
/// each bar's `<title>` is its operation, status and duration.
pub(super) fn chart(runs: &[(&str, &Operation)]) -> Markup {
    const W: i64 = 14;
    const GAP: i64 = 4;
    const H: i64 = 80;
    let longest = runs
        .iter()
        .filter_map(|(_, o)| o.duration_ms)
        .max()
        .unwrap_or(0);
    let max = longest.max(1);
    let width = (runs.len() as i64) * (W + GAP) + GAP;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(width.max(40)) height=(H + 16) role="img" {
            title { "Durations of the lane's recent runs (longest " (duration(longest)) ")" }
            @for (i, (op, o)) in runs.iter().enumerate() {
                @let ms = o.duration_ms.unwrap_or(0);
                @let h = (ms * H / max).max(1);
                @let x = GAP + i as i64 * (W + GAP);
                rect x=(x) y=(H - h) width=(W) height=(h)
                    fill=(if o.status == "completed" { "#2a6" } else if o.failures > 0 || o.status == "failed" { "#c33" } else { "#68a" }) {
                    title { (crate::project::short(op)) " " (shown(&o.status)) " " (duration(ms)) }
                }
            }
            text x="2" y=(H + 13) font-size="10" { "max " (duration(longest)) }
        }
    }
}

/// `GET /ui/lanes`: per lane a chart and a table of its most recent operations.
pub(super) fn lanes(viewer: &Viewer, status: Option<&Status>) -> Markup {
    layout(
        "Lanes",
        Some(viewer),
        html! {
            @match status {
                None => p #empty { "The ledger has no commit yet." }
                Some(s) if s.lanes.is_empty() => p #empty { "No events in the ledger." }
                Some(s) => {
                    @for (lane, ops) in &s.lanes {
                        @let runs = recent_runs(ops);
                        @let rows = newest_first(ops);
                        section.lane {
                            h2 { (shown(lane)) }
                            @if !runs.is_empty() { (chart(&runs)) }
                            table {
                                tr { th { "Operation" } th { "Event" } th { "Status" } th { "Subject" } th { "Started" } th { "Ended" } th { "Duration" } th { "Attempts" } th { "Failures" } }
                                @for (id, o) in rows.iter().take(TABLE_ROWS) {
                                    tr {
                                        td.st { (crate::project::short(id)) }
                                        td { (shown(&o.event_type)) }
                                        td.st { (shown(&crate::project::with_reason(&o.status, o.reason_code.as_deref()))) }
                                        td { (shown(&o.subject)) }
                                        td { (o.started_at) }
                                        td { (opt(o.ended_at.as_deref())) }
                                        td { (opt(o.duration_ms.map(duration).as_deref())) }
                                        td { (o.attempts) @if o.attempts_truncated { "+" } }
                                        td { (o.failures) }
                                    }
                                }
                            }
                            @if rows.len() > TABLE_ROWS { p { (rows.len() - TABLE_ROWS) " older operation(s) not shown." } }
                        }
                    }
                }
            }
        },
    )
}
