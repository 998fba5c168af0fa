//! Listing actions and guard decisions: the one implementation behind `serve`'s
//! `GET /api/actions`, `GET /api/actions/stats` and `GET /api/guard`, and the CLI's
//! `action list`.
//!
//! The filters and limits are the reference's (DashClaw's `GET /api/actions` and
//! `GET /api/guard`), parsed from query-string pairs by [`ActionQuery::parse`] and
//! [`DecisionQuery::parse`] so that the server and the CLI refuse the same bad input the same
//! way ([`ListError::BadParam`]).
//!
//! # What a page costs
//!
//! The records are create-only files; the only index is the pending index of the `hex2x2` and
//! `nibble` layouts ([`super::pending`]), which names every action whose outcome is still pending in a lifecycle
//! the sweep may close. A listing therefore takes one of two paths:
//!
//! - **From the pending index**, newest first, with an exact `total` and `stats`, when the
//!   query asks for `status` `running`, `pending` or `pending_approval` (and no outcome status
//!   other than `pending`): every such action is in the index, so the page reads the index's
//!   names and the records of the pending actions only, never the history. `pending_approval`
//!   here means still awaiting an operator: an action the sweep reconciled while it waited
//!   (outcome `lost_confirmation`, no longer approvable) is listed with
//!   `outcome_status=lost_confirmation`, not under `status=pending_approval` alone. An entry
//!   that disagrees with its action's records refuses the listing
//!   ([`Error::PendingIndex`]), as it refuses a sweep.
//! - **A bounded walk** otherwise (closed statuses, no status, the `flat` layout, guard
//!   decisions): the action directories (or decision files) are visited in the order of the
//!   fan-out, which is the order of the SHA-256 of the id (stable while no record is added, not
//!   time order), and the walk stops as soon as `offset + limit` matches were found. Without
//!   filters the `offset` skipped records are not read. The cost is the records read until the
//!   page is full: a selective filter over a long history reads the whole history. `total` and
//!   `stats` are known only when the walk reached the end; otherwise they are `None` and
//!   [`ActionPage::more`] says there may be more.
//!
//! [`action_stats`] always walks everything (the reference's `GET /api/actions/stats`): its
//! cost is the history. An index of closed actions by time, written in the same commit as the
//! records, is what would make those paths cost the page; it does not exist yet.
//!
//! Records that do not parse are skipped and named ([`ActionPage::skipped`]); `verify` reports
//! them.

use std::collections::BTreeMap;

use super::batch::Overlay;
use super::containment::ContainmentStatus;
use super::decision::{self, DECISIONS, Decision, DecisionId};
use super::ids::ActionId;
use super::layout::ACTIONS;
use super::pending;
use super::state::State;
use super::status::{Lifecycle, OutcomeStatus, Verdict};
use super::{Error, format_time};
use crate::finding::Rule;
use crate::store::remote::Target;
use crate::store::{Snapshot, Store};

/// `limit` of an action listing when none is given (the reference's).
pub const DEFAULT_ACTIONS_LIMIT: usize = 50;
/// Largest `limit` of an action listing (the reference's); a larger one is refused (the
/// reference lowers it silently, so a client asking for more would never learn it got less).
pub const MAX_ACTIONS_LIMIT: usize = 200;
/// `limit` of a decision listing when none is given (the reference's).
pub const DEFAULT_DECISIONS_LIMIT: usize = 20;
/// Largest `limit` of a decision listing (the reference's); a larger one is refused, as for
/// [`MAX_ACTIONS_LIMIT`].
pub const MAX_DECISIONS_LIMIT: usize = 1000;
/// Largest `offset`: deeper pages of a walk would read that many records first.
pub const MAX_OFFSET: usize = 1_000_000;

/// Filters of the reference that this ledger cannot apply (it keeps no windowed count);
/// asking for one is refused rather than silently ignored.
const UNSUPPORTED: &[&str] = &["days"];

/// Why a listing could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListError {
    /// A query parameter breaks its rule: fix the parameter and ask again.
    #[error("query parameter {param}={value:?}: {rule}")]
    BadParam {
        /// The parameter's name.
        param: String,
        /// Its value (at most 64 characters of it).
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// The records could not be read (or the pending index disagrees with them).
    #[error(transparent)]
    Read(#[from] Error),
}

fn bad(param: &str, value: &str, rule: &'static str) -> ListError {
    ListError::BadParam {
        param: param.to_owned(),
        value: value.chars().take(64).collect(),
        rule,
    }
}

/// `limit`: an integer from 1 to `max` ([`MAX_ACTIONS_LIMIT`] or [`MAX_DECISIONS_LIMIT`]);
/// `rule` names the range.
fn parse_limit(value: &str, max: usize, rule: &'static str) -> Result<usize, ListError> {
    match value.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(bad("limit", value, rule)),
    }
}

/// The rule of an action listing's `limit`.
const ACTIONS_LIMIT_RULE: &str = "must be a whole number from 1 to 200";
/// The rule of a decision listing's `limit`.
const DECISIONS_LIMIT_RULE: &str = "must be a whole number from 1 to 1000";

/// The pairs of a query string, refusing a known parameter given twice (`?status=a&status=b`
/// would otherwise mean whichever came last); unknown names are ignored, repeated or not.
fn once<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    known: &[&str],
) -> Result<Vec<(&'a str, &'a str)>, ListError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (name, value) in pairs {
        if known.contains(&name) && !seen.insert(name) {
            return Err(bad(name, value, "is given more than once: give it once"));
        }
        out.push((name, value));
    }
    Ok(out)
}

/// The parameters of [`ActionQuery::parse`] (the refused [`UNSUPPORTED`] ones included).
const ACTION_PARAMS: &[&str] = &[
    "status",
    "exclude_status",
    "outcome_status",
    "agent_id",
    "action_type",
    "containment_status",
    "swarm_id",
    "risk_min",
    "limit",
    "offset",
    "days",
];

/// The parameters of [`DecisionQuery::parse`].
const DECISION_PARAMS: &[&str] = &["agent_id", "decision", "limit", "offset", "days"];

/// `offset`: an integer from 0 to [`MAX_OFFSET`].
fn parse_offset(value: &str) -> Result<usize, ListError> {
    match value.parse::<usize>() {
        Ok(n) if n <= MAX_OFFSET => Ok(n),
        _ => Err(bad(
            "offset",
            value,
            "must be a whole number from 0 to 1000000",
        )),
    }
}

/// The filters and page of an action listing (the reference's `GET /api/actions`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionQuery {
    /// Only actions in this lifecycle (`status`).
    pub status: Option<Lifecycle>,
    /// Only actions not in this lifecycle (`exclude_status`; ignored with `status`, as in the
    /// reference).
    pub exclude_status: Option<Lifecycle>,
    /// Only actions with this outcome status (`outcome_status`).
    pub outcome_status: Option<OutcomeStatus>,
    /// Only actions of this agent (`agent_id`).
    pub agent_id: Option<String>,
    /// Only actions whose guard decision record names this action type (`action_type`);
    /// actions created by the CLI have no decision record and never match.
    pub action_type: Option<String>,
    /// Only contained actions in this containment status (`containment_status`, the SDK's
    /// `list_contained`; [`super::containment::status`]).
    pub containment_status: Option<ContainmentStatus>,
    /// Only actions whose details name this swarm (`swarm_id`, [`super::details`]); actions
    /// without details never match.
    pub swarm_id: Option<String>,
    /// Only actions whose details give a `risk_score` of at least this (`risk_min`, 0 to
    /// 100); actions without one never match.
    pub risk_min: Option<i64>,
    /// Most actions in the page, 1 to [`MAX_ACTIONS_LIMIT`].
    pub limit: usize,
    /// Matching actions skipped before the page, at most [`MAX_OFFSET`].
    pub offset: usize,
}

impl Default for ActionQuery {
    fn default() -> ActionQuery {
        ActionQuery {
            status: None,
            exclude_status: None,
            outcome_status: None,
            agent_id: None,
            action_type: None,
            containment_status: None,
            swarm_id: None,
            risk_min: None,
            limit: DEFAULT_ACTIONS_LIMIT,
            offset: 0,
        }
    }
}

impl ActionQuery {
    /// The query of query-string pairs. An empty value is the same as no value (the
    /// reference's rule); names the reference does not know are ignored.
    ///
    /// # Errors
    /// [`ListError::BadParam`] for a `status` or `exclude_status` that is no lifecycle, an
    /// `outcome_status` that is no outcome status, a `containment_status` that is no
    /// [`ContainmentStatus`], a `limit` (1 to [`MAX_ACTIONS_LIMIT`]) or
    /// `offset` or `risk_min` that breaks its rule, a filter this ledger cannot apply
    /// (`days`), or a known parameter given more than once.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<ActionQuery, ListError> {
        let mut q = ActionQuery::default();
        for (name, value) in once(pairs, ACTION_PARAMS)? {
            if value.is_empty() {
                continue;
            }
            let lifecycle = || {
                Lifecycle::parse(value).ok_or_else(|| {
                    bad(
                        name,
                        value,
                        "must be running, pending, pending_approval, blocked, completed, failed, \
                         cancelled, unknown or expired",
                    )
                })
            };
            match name {
                "status" => q.status = Some(lifecycle()?),
                "exclude_status" => q.exclude_status = Some(lifecycle()?),
                "outcome_status" => {
                    q.outcome_status = Some(OutcomeStatus::parse(value).ok_or_else(|| {
                        bad(
                            name,
                            value,
                            "must be pending, completed, partial, failed or lost_confirmation",
                        )
                    })?);
                }
                "agent_id" => q.agent_id = Some(value.to_owned()),
                "action_type" => q.action_type = Some(value.to_owned()),
                "containment_status" => {
                    q.containment_status =
                        Some(ContainmentStatus::parse(value).ok_or_else(|| {
                            bad(
                                name,
                                value,
                                "must be contained, awaiting_promotion, promoted or discarded",
                            )
                        })?);
                }
                "swarm_id" => q.swarm_id = Some(value.to_owned()),
                "risk_min" => {
                    q.risk_min = Some(
                        value
                            .parse::<i64>()
                            .ok()
                            .filter(|r| (0..=100).contains(r))
                            .ok_or_else(|| bad(name, value, "must be an integer of 0 to 100"))?,
                    );
                }
                "limit" => q.limit = parse_limit(value, MAX_ACTIONS_LIMIT, ACTIONS_LIMIT_RULE)?,
                "offset" => q.offset = parse_offset(value)?,
                n if UNSUPPORTED.contains(&n) => {
                    return Err(bad(
                        n,
                        value,
                        "this ledger keeps no such field to filter on",
                    ));
                }
                _ => {}
            }
        }
        Ok(q)
    }

    /// Whether every action this query can match is in the pending index (see the module
    /// docs).
    fn served_by_index(&self) -> bool {
        matches!(
            self.status,
            Some(Lifecycle::Running | Lifecycle::Pending | Lifecycle::PendingApproval)
        ) && matches!(self.outcome_status, None | Some(OutcomeStatus::Pending))
    }

    /// Whether the query filters at all (without filters a walk skips `offset` unread).
    fn filters(&self) -> bool {
        self.status.is_some()
            || self.exclude_status.is_some()
            || self.outcome_status.is_some()
            || self.agent_id.is_some()
            || self.action_type.is_some()
            || self.containment_status.is_some()
            || self.swarm_id.is_some()
            || self.risk_min.is_some()
    }

    /// Whether `state` (with its decision record) matches the filters.
    fn matches(&self, state: &State, decision: Option<&Decision>) -> bool {
        let lifecycle = state.lifecycle();
        self.status.is_none_or(|s| s == lifecycle)
            && (self.status.is_some() || self.exclude_status.is_none_or(|s| s != lifecycle))
            && self
                .outcome_status
                .is_none_or(|s| s == state.outcome_status())
            && self
                .agent_id
                .as_deref()
                .is_none_or(|a| a == state.action.agent_id)
            && self
                .action_type
                .as_deref()
                .is_none_or(|t| decision.and_then(|d| d.action_type.as_deref()) == Some(t))
            && self
                .containment_status
                .is_none_or(|c| super::containment::status(state) == Some(c))
            && self.swarm_id.as_deref().is_none_or(|w| {
                state
                    .action
                    .details
                    .as_ref()
                    .and_then(|d| d.text("swarm_id"))
                    == Some(w)
            })
            && self.risk_min.is_none_or(|r| {
                state
                    .action
                    .details
                    .as_ref()
                    .and_then(super::details::Details::risk_score)
                    .is_some_and(|s| s >= r)
            })
    }
}

/// One listed action: its records and the guard decision record it names, when there is one.
#[derive(Clone, Debug, PartialEq)]
pub struct Listed {
    /// The action's records.
    pub state: State,
    /// Its guard decision record (`None` for an action created by the CLI).
    pub decision: Option<Decision>,
}

/// Counts of the matching actions by current lifecycle (the reference's `stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActionStats {
    /// Matching actions.
    pub total: u64,
    /// Matching actions by current lifecycle (absent lifecycles count 0).
    pub by_status: BTreeMap<Lifecycle, u64>,
}

impl ActionStats {
    fn add(&mut self, state: &State) {
        self.total += 1;
        *self.by_status.entry(state.lifecycle()).or_default() += 1;
    }

    /// The count of lifecycle `l`.
    pub fn count(&self, l: Lifecycle) -> u64 {
        self.by_status.get(&l).copied().unwrap_or(0)
    }
}

/// How a page was found (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// From the pending index: newest first, `total` and `stats` exact.
    PendingIndex,
    /// A walk in fan-out (id hash) order.
    Walk,
}

/// One page of an action listing.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionPage {
    /// The page, at most `limit` actions.
    pub actions: Vec<Listed>,
    /// All matching actions; `None` when a walk stopped before the end.
    pub total: Option<u64>,
    /// Counts of all matching actions; `None` when a walk stopped before the end.
    pub stats: Option<ActionStats>,
    /// Whether more matching actions may follow the page.
    pub more: bool,
    /// How the page was found.
    pub path: Path,
    /// Action directories whose records did not parse, skipped.
    pub skipped: Vec<String>,
    /// Entries of the action tree that are not at an action's place in the repository's
    /// layout, in walk order (a walk only; the pending index names actions by id): an action
    /// left at another layout's place, or something else. Not listed; `verify` reports them
    /// (`finality-layout-mixed`, `finality-unknown-path`).
    pub misplaced: Vec<String>,
}

/// Visits the directory entries `levels` fan-out levels under `root`, in name order at each
/// level, calling `leaf(parent_dir, name)` for each entry of the last level; stops when it
/// answers `false`. Answers whether it went to the end.
fn walk(
    snap: &Snapshot<'_>,
    root: &str,
    levels: usize,
    leaf: &mut dyn FnMut(&str, &str) -> Result<bool, Error>,
) -> Result<bool, Error> {
    let mut names = snap.entry_names(root)?;
    names.sort_unstable();
    for name in names {
        let go_on = if levels == 0 {
            leaf(root, &name)?
        } else {
            walk(snap, &format!("{root}/{name}"), levels - 1, leaf)?
        };
        if !go_on {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The decision record an action names, when there is one that parses.
fn decision_of(ov: &Overlay<'_>, state: &State) -> Option<Decision> {
    let id = DecisionId::parse(state.action.guard_decision_id.as_deref()?)?;
    ov.decision(&id).ok().flatten()
}

/// One page of the actions of `ov` (the tip: what is staged in it is not walked) matching `q`
/// (see the module docs for the order and the cost).
///
/// # Errors
/// [`ListError::Read`]: the tip could not be read, or the pending index disagrees with the
/// records ([`Error::PendingIndex`]).
pub fn list_actions(ov: &Overlay<'_>, q: &ActionQuery) -> Result<ActionPage, ListError> {
    if ov.layout().has_pending_index() && q.served_by_index() {
        return from_index(ov, q);
    }
    scan(ov, q, true)
}

/// [`list_actions`] at the tip of `ref_name` on `target` (the local ref, or a remote's, read
/// with `git ls-remote` and fetched): the CLI's `action list`.
///
/// # Errors
/// As [`list_actions`]; [`Error::Remote`] when the remote cannot be asked or fetched.
pub fn list_at(
    store: &Store,
    target: &Target,
    ref_name: &str,
    q: &ActionQuery,
) -> Result<ActionPage, ListError> {
    let tip = target.tip(store, ref_name).map_err(Error::from)?;
    let snap = store.snapshot(tip).map_err(Error::from)?;
    list_actions(&Overlay::new(snap)?, q)
}

/// Counts of all actions matching `q` (`limit` and `offset` do not apply): the reference's
/// `GET /api/actions/stats`. Walks every action: its cost is the history. Answers the counts
/// and the directories skipped because a record did not parse.
///
/// # Errors
/// As [`list_actions`].
pub fn action_stats(
    ov: &Overlay<'_>,
    q: &ActionQuery,
) -> Result<(ActionStats, Vec<String>), ListError> {
    let page = scan(
        ov,
        &ActionQuery {
            limit: 0,
            offset: 0,
            ..q.clone()
        },
        false,
    )?;
    Ok((page.stats.unwrap_or_default(), page.skipped))
}

fn from_index(ov: &Overlay<'_>, q: &ActionQuery) -> Result<ActionPage, ListError> {
    let entries = pending::all_entries(ov.snapshot(), &|| false)
        .map_err(Error::from)?
        .unwrap_or_default();
    let mut page = ActionPage {
        actions: Vec::new(),
        total: None,
        stats: None,
        more: false,
        path: Path::PendingIndex,
        skipped: Vec::new(),
        misplaced: Vec::new(),
    };
    let mut stats = ActionStats::default();
    for (id, at, path) in entries.into_iter().rev() {
        let disagrees = |rule, detail: String| Error::PendingIndex {
            rule,
            path: path.clone(),
            detail,
        };
        let state = match ov.state(&id) {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(disagrees(
                    Rule::FinalityPendingExtra,
                    format!("action {id} does not exist"),
                )
                .into());
            }
            Err(Error::Corrupt { .. }) => {
                page.skipped.push(ov.layout().action_dir(&id));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if !pending::indexed(&state) {
            return Err(disagrees(
                Rule::FinalityPendingExtra,
                format!("action {id} is not pending"),
            )
            .into());
        }
        if state.action.created_at != at {
            return Err(disagrees(
                Rule::FinalityPendingTime,
                format!(
                    "action {id} was created at {}",
                    format_time(state.action.created_at)
                ),
            )
            .into());
        }
        let decision = q.action_type.as_ref().and_then(|_| decision_of(ov, &state));
        if !q.matches(&state, decision.as_ref()) {
            continue;
        }
        stats.add(&state);
        if stats.total as usize > q.offset && page.actions.len() < q.limit {
            let decision = decision.or_else(|| decision_of(ov, &state));
            page.actions.push(Listed { state, decision });
        }
    }
    page.more = (stats.total as usize) > q.offset + page.actions.len();
    page.total = Some(stats.total);
    page.stats = Some(stats);
    Ok(page)
}

/// The walk: stops once the page is full when `bounded`, else visits everything.
fn scan(ov: &Overlay<'_>, q: &ActionQuery, bounded: bool) -> Result<ActionPage, ListError> {
    let layout = ov.layout();
    let mut page = ActionPage {
        actions: Vec::new(),
        total: None,
        stats: None,
        more: false,
        path: Path::Walk,
        skipped: Vec::new(),
        misplaced: Vec::new(),
    };
    let mut stats = ActionStats::default();
    let filters = q.filters();
    let mut matched = 0usize;
    let ended = walk(ov.snapshot(), ACTIONS, layout.levels(), &mut |dir, name| {
        let path = format!("{dir}/{name}");
        let parsed = ActionId::parse(name);
        let Some(id) = parsed
            .as_ref()
            .filter(|id| layout.action_dir(id) == path)
            .cloned()
        else {
            // Not an action directory at its place: a name that is no id is a file of a
            // directory the walk took for a fan-out level (an action of a shallower layout):
            // that directory is named, once.
            let stray = if parsed.is_some() {
                path
            } else {
                dir.to_owned()
            };
            if page.misplaced.last() != Some(&stray) {
                page.misplaced.push(stray);
            }
            return Ok(true);
        };
        let full = page.actions.len() >= q.limit;
        if bounded && full {
            // One more match exists (without filters: one more action): there is more.
            if !filters {
                page.more = true;
                return Ok(false);
            }
        }
        // Without filters the skipped actions need not be read.
        if bounded && !filters && matched < q.offset {
            matched += 1;
            return Ok(true);
        }
        let state = match ov.state(&id) {
            Ok(Some(s)) => s,
            Ok(None) => return Ok(true),
            Err(Error::Corrupt { .. }) => {
                page.skipped.push(layout.action_dir(&id));
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        let decision = q.action_type.as_ref().and_then(|_| decision_of(ov, &state));
        if !q.matches(&state, decision.as_ref()) {
            return Ok(true);
        }
        if bounded && full {
            page.more = true;
            return Ok(false);
        }
        matched += 1;
        stats.add(&state);
        if matched > q.offset && page.actions.len() < q.limit {
            let decision = decision.or_else(|| decision_of(ov, &state));
            page.actions.push(Listed { state, decision });
        }
        Ok(true)
    })?;
    // A walk that went to the end without skipping unread actions counted every match.
    if ended && (filters || q.offset == 0 || !bounded) {
        page.total = Some(stats.total);
        page.stats = Some(stats);
    } else if ended {
        // Skipped unread: the counts of the skipped part are unknown, the total is not.
        page.total = Some(matched as u64);
    }
    Ok(page)
}

/// The filters and page of a guard decision listing (the reference's `GET /api/guard`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionQuery {
    /// Only decisions asked for by this agent (`agent_id`).
    pub agent_id: Option<String>,
    /// Only decisions with this verdict (`decision`).
    pub decision: Option<Verdict>,
    /// Most decisions in the page, 1 to [`MAX_DECISIONS_LIMIT`].
    pub limit: usize,
    /// Matching decisions skipped before the page, at most [`MAX_OFFSET`].
    pub offset: usize,
}

impl Default for DecisionQuery {
    fn default() -> DecisionQuery {
        DecisionQuery {
            agent_id: None,
            decision: None,
            limit: DEFAULT_DECISIONS_LIMIT,
            offset: 0,
        }
    }
}

impl DecisionQuery {
    /// The query of query-string pairs, under the rules of [`ActionQuery::parse`].
    ///
    /// # Errors
    /// [`ListError::BadParam`] for a `decision` that is no verdict, a bad `limit` (1 to
    /// [`MAX_DECISIONS_LIMIT`]) or `offset`, `days` (this ledger keeps no windowed count), or a
    /// known parameter given more than once.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<DecisionQuery, ListError> {
        let mut q = DecisionQuery::default();
        for (name, value) in once(pairs, DECISION_PARAMS)? {
            if value.is_empty() {
                continue;
            }
            match name {
                "agent_id" => q.agent_id = Some(value.to_owned()),
                "decision" => {
                    q.decision = Some(Verdict::parse(value).ok_or_else(|| {
                        bad(
                            name,
                            value,
                            "must be allow, warn, allow_contained, require_approval or block",
                        )
                    })?);
                }
                "limit" => q.limit = parse_limit(value, MAX_DECISIONS_LIMIT, DECISIONS_LIMIT_RULE)?,
                "offset" => q.offset = parse_offset(value)?,
                "days" => {
                    return Err(bad(name, value, "this ledger keeps no windowed count"));
                }
                _ => {}
            }
        }
        Ok(q)
    }

    fn matches(&self, d: &Decision) -> bool {
        self.agent_id
            .as_deref()
            .is_none_or(|a| d.agent_id.as_deref() == Some(a))
            && self.decision.is_none_or(|v| v == d.verdict)
    }
}

/// One page of a guard decision listing.
#[derive(Clone, Debug, PartialEq)]
pub struct DecisionPage {
    /// The page, at most `limit` decisions, in fan-out (id hash) order.
    pub decisions: Vec<Decision>,
    /// All matching decisions; `None` when the walk stopped before the end.
    pub total: Option<u64>,
    /// Whether more matching decisions may follow the page.
    pub more: bool,
    /// Decision files that did not parse, skipped.
    pub skipped: Vec<String>,
}

/// One page of the guard decisions of `ov` matching `q`: a bounded walk (see the module docs).
///
/// # Errors
/// [`ListError::Read`] when the tip cannot be read.
pub fn list_decisions(ov: &Overlay<'_>, q: &DecisionQuery) -> Result<DecisionPage, ListError> {
    let layout = ov.layout();
    let mut page = DecisionPage {
        decisions: Vec::new(),
        total: None,
        more: false,
        skipped: Vec::new(),
    };
    let mut matched = 0usize;
    let ended = walk(
        ov.snapshot(),
        DECISIONS,
        layout.levels(),
        &mut |dir, name| {
            let path = format!("{dir}/{name}");
            let Some(id) = layout.classify_decision(&path) else {
                return Ok(true);
            };
            let bytes = match ov.read(&path) {
                Ok(Some(b)) => b,
                Ok(None) => return Ok(true),
                Err(Error::Corrupt { .. }) => {
                    page.skipped.push(path);
                    return Ok(true);
                }
                Err(e) => return Err(e),
            };
            let Ok(d) = decision::parse(&bytes, &id) else {
                page.skipped.push(path);
                return Ok(true);
            };
            if !q.matches(&d) {
                return Ok(true);
            }
            if page.decisions.len() >= q.limit {
                page.more = true;
                return Ok(false);
            }
            matched += 1;
            if matched > q.offset {
                page.decisions.push(d);
            }
            Ok(true)
        },
    )?;
    if ended {
        page.total = Some(matched as u64);
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::batch::{self, Target};
    use crate::finality::test_support::*;
    use crate::finality::*;
    use crate::store::Store;

    /// Six actions a minute apart, each from its own recorded decision:
    /// `act_0` running, `act_1` pending approval, `act_2` completed, `act_3` blocked,
    /// `act_4` pending approval, `act_5` running; agents alternate a/b, types read/deploy.
    fn seeded() -> (tempfile::TempDir, Store, Options) {
        let (dir, store) = repo();
        let opts = options("refs/heads/main");
        let verdicts = [
            Verdict::Allow,
            Verdict::RequireApproval,
            Verdict::Allow,
            Verdict::Block,
            Verdict::RequireApproval,
            Verdict::Allow,
        ];
        for (i, verdict) in verdicts.into_iter().enumerate() {
            let now = Timestamp::from_millis(at(BASE).millis() + 60_000 * i as i64);
            let agent = if i % 2 == 0 { "agent-a" } else { "agent-b" };
            let d = Decision {
                decision_id: DecisionId::parse(&format!("gd_{i}")).unwrap(),
                verdict,
                rule: None,
                reason: None,
                action_type: Some(if i % 2 == 0 { "read" } else { "deploy" }.into()),
                agent_id: Some(agent.into()),
                principal: "principal-a".into(),
                act_content_hash: act_content_hash(Some(&scrub_act(&default_act()))),
                containment_ref: None,
                decided_at: now,
            };
            let mut input = new_action(&format!("act_{i}"));
            input.agent_id = agent.into();
            input.guard_decision_id = Some(d.decision_id.as_str().into());
            input.verdict = verdict;
            batch::run(&store, &opts, now, |ov, now| {
                batch::decide(ov, &d)?;
                batch::create(ov, &input, now).map(|_| ())
            })
            .unwrap();
        }
        close(
            &store,
            &opts,
            "act_2",
            "completed",
            &CloseReport::default(),
            &Settler::Operator,
            at(BASE),
        )
        .unwrap();
        (dir, store, opts)
    }

    fn list(store: &Store, opts: &Options, params: &[(&str, &str)]) -> ActionPage {
        let q = ActionQuery::parse(params.iter().copied()).unwrap();
        batch::read_at_target(store, opts, &Target::Local, |ov| {
            list_actions(ov, &q).map_err(|e| match e {
                ListError::Read(e) => e,
                other => panic!("{other}"),
            })
        })
        .unwrap()
    }

    fn ids(page: &ActionPage) -> Vec<&str> {
        page.actions
            .iter()
            .map(|l| l.state.action.action_id.as_str())
            .collect()
    }

    #[test]
    fn an_empty_store_lists_nothing_with_exact_totals() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        for params in [&[][..], &[("status", "pending_approval")][..]] {
            let page = list(&store, &opts, params);
            assert!(page.actions.is_empty() && !page.more, "{params:?}");
            assert_eq!(page.total, Some(0), "{params:?}");
        }
        let decisions = batch::read_at_target(&store, &opts, &Target::Local, |ov| {
            Ok(list_decisions(ov, &DecisionQuery::default()).unwrap())
        })
        .unwrap();
        assert_eq!((decisions.decisions.len(), decisions.total), (0, Some(0)));
    }

    #[test]
    fn open_statuses_come_from_the_pending_index_newest_first() {
        let (_dir, store, opts) = seeded();
        let page = list(&store, &opts, &[("status", "pending_approval")]);
        assert_eq!(page.path, Path::PendingIndex);
        assert_eq!(ids(&page), ["act_4", "act_1"]);
        assert_eq!(page.total, Some(2));
        let stats = page.stats.unwrap();
        assert_eq!(stats.count(Lifecycle::PendingApproval), 2);
        assert_eq!(stats.count(Lifecycle::Running), 0);
        // The row carries the decision it names.
        assert_eq!(
            page.actions[0]
                .decision
                .as_ref()
                .unwrap()
                .decision_id
                .as_str(),
            "gd_4"
        );

        let running = list(
            &store,
            &opts,
            &[("status", "running"), ("agent_id", "agent-b")],
        );
        assert_eq!(ids(&running), ["act_5"]);
        let page = list(
            &store,
            &opts,
            &[
                ("status", "pending_approval"),
                ("limit", "1"),
                ("offset", "1"),
            ],
        );
        assert_eq!(
            (ids(&page), page.total, page.more),
            (vec!["act_1"], Some(2), false)
        );
        let page = list(
            &store,
            &opts,
            &[("status", "pending_approval"), ("limit", "1")],
        );
        assert_eq!((ids(&page), page.more), (vec!["act_4"], true));
    }

    #[test]
    fn closed_statuses_and_other_filters_walk() {
        let (_dir, store, opts) = seeded();
        let page = list(&store, &opts, &[("status", "completed")]);
        assert_eq!(page.path, Path::Walk);
        assert_eq!((ids(&page), page.total), (vec!["act_2"], Some(1)));
        assert_eq!(
            page.actions[0].state.outcome_status(),
            OutcomeStatus::Completed
        );
        let page = list(&store, &opts, &[("status", "blocked")]);
        assert_eq!(ids(&page), ["act_3"]);
        let page = list(&store, &opts, &[("action_type", "deploy")]);
        let mut got = ids(&page);
        got.sort_unstable();
        assert_eq!(
            (got, page.total),
            (vec!["act_1", "act_3", "act_5"], Some(3))
        );
        let page = list(
            &store,
            &opts,
            &[("outcome_status", "pending"), ("agent_id", "agent-a")],
        );
        let mut got = ids(&page);
        got.sort_unstable();
        assert_eq!(got, ["act_0", "act_4"]);
        let page = list(&store, &opts, &[("exclude_status", "pending_approval")]);
        assert_eq!(page.total, Some(4));
        // exclude_status is ignored beside status, as in the reference.
        let page = list(
            &store,
            &opts,
            &[("status", "running"), ("exclude_status", "running")],
        );
        assert_eq!(page.total, Some(2));
    }

    #[test]
    fn pages_of_a_walk_cover_every_action_once() {
        let (_dir, store, opts) = seeded();
        let mut seen = Vec::new();
        for offset in 0..7 {
            let offset = offset.to_string();
            let page = list(&store, &opts, &[("limit", "1"), ("offset", &offset)]);
            seen.extend(ids(&page).into_iter().map(str::to_owned));
            if page.actions.is_empty() {
                assert!(!page.more);
                assert_eq!(page.total, Some(6));
            }
        }
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "{seen:?}");
        assert_eq!(seen.len(), 6, "{seen:?}");
        // A page that stopped early knows no total; the first page that ends knows it.
        let first = list(&store, &opts, &[("limit", "2")]);
        assert_eq!(
            (first.actions.len(), first.total, first.more),
            (2, None, true)
        );
        assert!(first.stats.is_none());
        let all = list(&store, &opts, &[]);
        assert_eq!((all.total, all.more), (Some(6), false));
        let stats = all.stats.unwrap();
        assert_eq!(stats.count(Lifecycle::Running), 2);
        assert_eq!(stats.count(Lifecycle::Completed), 1);
        assert_eq!(stats.count(Lifecycle::Blocked), 1);
    }

    #[test]
    fn stats_count_every_matching_action() {
        let (_dir, store, opts) = seeded();
        let q = ActionQuery::parse([("agent_id", "agent-b"), ("limit", "1")]).unwrap();
        let (stats, skipped) = batch::read_at_target(&store, &opts, &Target::Local, |ov| {
            Ok(action_stats(ov, &q).unwrap())
        })
        .unwrap();
        assert!(skipped.is_empty());
        assert_eq!(stats.total, 3);
        assert_eq!(stats.count(Lifecycle::PendingApproval), 1);
        assert_eq!(stats.count(Lifecycle::Blocked), 1);
        assert_eq!(stats.count(Lifecycle::Running), 1);
    }

    #[test]
    fn decisions_filter_by_verdict_and_agent() {
        let (_dir, store, opts) = seeded();
        let run = |params: &[(&str, &str)]| {
            let q = DecisionQuery::parse(params.iter().copied()).unwrap();
            batch::read_at_target(&store, &opts, &Target::Local, |ov| {
                Ok(list_decisions(ov, &q).unwrap())
            })
            .unwrap()
        };
        let page = run(&[("decision", "require_approval")]);
        let mut got: Vec<&str> = page
            .decisions
            .iter()
            .map(|d| d.decision_id.as_str())
            .collect();
        got.sort_unstable();
        assert_eq!((got, page.total), (vec!["gd_1", "gd_4"], Some(2)));
        let page = run(&[("agent_id", "agent-a"), ("decision", "allow")]);
        assert_eq!(page.total, Some(2));
        let page = run(&[("limit", "2")]);
        assert_eq!(
            (page.decisions.len(), page.total, page.more),
            (2, None, true)
        );
        let page = run(&[("limit", "2"), ("offset", "4")]);
        assert_eq!(
            (page.decisions.len(), page.total, page.more),
            (2, Some(6), false)
        );
    }

    /// Every page size gives the same actions, each once, in the same order as one page of
    /// everything; on both paths.
    #[test]
    fn pages_concatenate_to_the_whole_listing() {
        let (_dir, store, opts) = seeded();
        for filter in [
            &[][..],
            &[("status", "pending_approval")][..],
            &[("status", "running")][..],
            &[("outcome_status", "pending")][..],
            &[("agent_id", "agent-a")][..],
        ] {
            let whole = ids(&list(&store, &opts, filter))
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>();
            for limit in 1..=7usize {
                let mut got = Vec::new();
                let mut offset = 0;
                loop {
                    let (l, o) = (limit.to_string(), offset.to_string());
                    let mut params = filter.to_vec();
                    params.extend([("limit", l.as_str()), ("offset", o.as_str())]);
                    let page = list(&store, &opts, &params);
                    got.extend(ids(&page).into_iter().map(str::to_owned));
                    offset += limit;
                    if !page.more {
                        assert_eq!(page.total, Some(whole.len() as u64), "{filter:?} {limit}");
                        break;
                    }
                }
                assert_eq!(got, whole, "{filter:?} limit {limit}");
            }
        }
    }

    #[test]
    fn a_flat_repository_is_walked_with_the_same_answers() {
        let (_dir, store, opts) = seeded();
        let before = list(&store, &opts, &[("status", "pending_approval")]);
        flatten(&store);
        let after = list(&store, &opts, &[("status", "pending_approval")]);
        assert_eq!(after.path, Path::Walk);
        let mut got = ids(&after);
        got.sort_unstable();
        assert_eq!((got, after.total), (vec!["act_1", "act_4"], before.total));
        assert_eq!(list(&store, &opts, &[]).total, Some(6));
        let decisions = batch::read_at_target(&store, &opts, &Target::Local, |ov| {
            Ok(list_decisions(ov, &DecisionQuery::default()).unwrap())
        })
        .unwrap();
        assert_eq!(decisions.total, Some(6));
    }

    #[test]
    fn unparsable_records_are_skipped_and_named() {
        let (_dir, store, opts) = seeded();
        plant_unparsable_action(&store, "act_0");
        let dir = Layout::DEFAULT.action_dir(&ActionId::parse("act_0").unwrap());
        for params in [&[("status", "running")][..], &[][..]] {
            let page = list(&store, &opts, params);
            assert!(!ids(&page).contains(&"act_0"), "{params:?}");
            assert_eq!(page.skipped, std::slice::from_ref(&dir), "{params:?}");
        }
    }

    /// An action left at another layout's place is not listed, and the walk names where it
    /// is, once (the index-served statuses never see it).
    #[test]
    fn actions_at_another_layouts_place_are_named_not_listed() {
        for other in Layout::DEFAULT.others() {
            let (_dir, store, opts) = seeded();
            let id = ActionId::parse("act_0").unwrap();
            let tip = store.tip("refs/heads/main").unwrap();
            let own = Layout::DEFAULT.action_dir(&id);
            let stray = other.action_dir(&id);
            let moves: Vec<(String, String)> = store
                .snapshot(tip)
                .unwrap()
                .entry_names(&own)
                .unwrap()
                .into_iter()
                .map(|f| (format!("{own}/{f}"), format!("{stray}/{f}")))
                .collect();
            let moved = store
                .write_commit_moving::<Vec<u8>>(tip, &[], &moves, false, "mislay", &sig())
                .unwrap();
            store
                .update_ref("refs/heads/main", tip, moved, "mislay")
                .unwrap();
            let page = list(&store, &opts, &[]);
            assert!(!ids(&page).contains(&"act_0"), "{other:?}");
            assert_eq!(page.misplaced.len(), 1, "{other:?}: {:?}", page.misplaced);
            assert!(
                stray.starts_with(&page.misplaced[0]),
                "{other:?}: {} names {stray}",
                page.misplaced[0]
            );
            assert!(page.skipped.is_empty());
        }
    }

    #[test]
    fn an_index_entry_without_its_action_refuses_the_listing() {
        let (_dir, store, opts) = seeded();
        let tip = store.tip("refs/heads/main").unwrap();
        let ghost = pending::entry_path(&ActionId::parse("act_ghost").unwrap(), at(BASE));
        let commit = store
            .write_commit_with(tip, &[(ghost, Vec::new())], &[], true, "plant", &sig())
            .unwrap();
        store
            .update_ref("refs/heads/main", tip, commit, "plant")
            .unwrap();
        let q = ActionQuery::parse([("status", "running")]).unwrap();
        let got =
            batch::read_at_target(&store, &opts, &Target::Local, |ov| Ok(list_actions(ov, &q)))
                .unwrap();
        assert!(
            matches!(got, Err(ListError::Read(Error::PendingIndex { .. }))),
            "{got:?}"
        );
        // A walk does not read the index.
        assert_eq!(
            list(&store, &opts, &[("status", "completed")]).total,
            Some(1)
        );
    }

    #[test]
    fn bad_parameters_name_the_parameter_and_the_rule() {
        for (name, value) in [
            ("limit", "0"),
            ("limit", "-1"),
            ("limit", "ten"),
            ("offset", "-1"),
            ("offset", "1000001"),
            ("status", "done"),
            ("exclude_status", "done"),
            ("outcome_status", "running"),
            ("days", "7"),
            ("risk_min", "101"),
            ("risk_min", "high"),
        ] {
            match ActionQuery::parse([(name, value)]) {
                Err(ListError::BadParam {
                    param, value: v, ..
                }) => {
                    assert_eq!((param.as_str(), v.as_str()), (name, value));
                }
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        // Above the largest limit is refused, naming the range.
        for (limit, max) in [("201", MAX_ACTIONS_LIMIT), ("5000", MAX_ACTIONS_LIMIT)] {
            let Err(ListError::BadParam { param, rule, .. }) =
                ActionQuery::parse([("limit", limit)])
            else {
                panic!("limit={limit} accepted")
            };
            assert_eq!(param, "limit");
            assert!(rule.ends_with(&format!("to {max}")), "{rule}");
        }
        assert_eq!(
            ActionQuery::parse([("limit", "200")]).unwrap().limit,
            MAX_ACTIONS_LIMIT
        );
        assert_eq!(
            DecisionQuery::parse([("limit", "1000")]).unwrap().limit,
            MAX_DECISIONS_LIMIT
        );
        // A known parameter given twice is refused, naming it; an unknown one is ignored.
        for name in ["status", "agent_id", "limit", "offset"] {
            let Err(ListError::BadParam { param, .. }) =
                ActionQuery::parse([(name, "1"), (name, "2")])
            else {
                panic!("{name} twice accepted")
            };
            assert_eq!(param, name);
        }
        assert!(matches!(
            DecisionQuery::parse([("decision", "allow"), ("decision", "block")]),
            Err(ListError::BadParam { param, .. }) if param == "decision"
        ));
        assert!(ActionQuery::parse([("sort", "a"), ("sort", "b")]).is_ok());
        for (name, value) in [
            ("decision", "maybe"),
            ("limit", "0"),
            ("limit", "1001"),
            ("days", "1"),
        ] {
            assert!(
                matches!(
                    DecisionQuery::parse([(name, value)]),
                    Err(ListError::BadParam { .. })
                ),
                "{name}={value}"
            );
        }
        // Empty values and unknown names are absent.
        let q = ActionQuery::parse([("status", ""), ("sort", "x")]).unwrap();
        assert_eq!(q, ActionQuery::default());
        let long = "x".repeat(500);
        let Err(ListError::BadParam { value, .. }) =
            ActionQuery::parse([("status", long.as_str())])
        else {
            panic!("refused")
        };
        assert_eq!(value.len(), 64);
    }
}
