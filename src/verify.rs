//! Verification of a state repository revision (design.md §6, runtime §8.6): proves from a fresh
//! clone, offline, that the ledger is complete, canonical and conflict-free, and reports every
//! finding (path, rule, detail) instead of stopping at the first.
//!
//! Whole revision ([`verify_revision`]): every path under `ledger/v1/` is a known kind; shards
//! are canonical, causally ordered, at the path their identity gives, complete and
//! deterministically packed; each shard set has the exact reservation, completion marker and
//! producer-run binding the publisher writes (bytes recomputed and compared); every event has
//! its identity binding with its semantic digest and parent edge; no event id appears twice; no
//! binding is left without its shard; causal edges are acyclic across the whole ledger; every
//! event passes the privacy rules (they are part of event validation).
//!
//! Push range ([`verify_range`]): NEW descends from OLD; no existing path under `ledger/v1/` is
//! modified or deleted; every shard set touched by the range is verified as above; added
//! bindings must belong to an added set; an added event must not already be bound; parent walks
//! through published history must not close a cycle. It reads only the changed subtrees, the
//! touched sets and the bindings those need.
//!
//! Memory: sets are verified one at a time; across the ledger only each event's id, parent and
//! shard index are kept (for duplicates and cycles), not the events.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use crate::binding::{self, Kind};
use crate::event::{self, Event, FieldError};
use crate::identity::{Digest, ShardIdentity};
use crate::privacy;
use crate::shard::{self, Shard};
use crate::store::{self, Change, CommitId, Snapshot, Store};

/// The rule a finding breaks. `code()` is the stable name used in `--json` output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// A path under `ledger/v1/` that is neither a shard nor a binding.
    UnknownPath,
    /// A shard that cannot be read as canonical event lines (bytes, JSON, fields, digests).
    ShardInvalid,
    /// An event that breaks the privacy rules of ledger-core §4.
    Privacy,
    /// A shard whose events are not in canonical causal order.
    ShardOrder,
    /// A shard whose path does not reproduce its identity.
    ShardPath,
    /// Numbered parts missing, repeated or inconsistent.
    PartsIncomplete,
    /// Parts that the deterministic packing would not produce.
    PartsNotDeterministic,
    ReservationMissing,
    /// A reservation that is not a canonical shard-set reservation for its identity.
    ReservationInvalid,
    /// A valid reservation that does not list exactly the set's parts and replay digests.
    ReservationMismatch,
    /// A reservation without its shards.
    ReservationOrphan,
    /// A set without completion marker: readers treat it as incomplete (invisible).
    CompletionMissing,
    CompletionInvalid,
    /// A completion marker without its reserved set.
    CompletionOrphan,
    ProducerRunMissing,
    /// A producer-run binding that disagrees with the set (another partition date, bad bytes).
    ProducerRunMismatch,
    ProducerRunOrphan,
    EventBindingMissing,
    /// An event binding with another semantic digest or parent edge, or malformed.
    EventBindingMismatch,
    /// An event binding whose event is in no shard.
    EventBindingOrphan,
    DuplicateEvent,
    CausalCycle,
    /// A push that modifies an existing path.
    Modified,
    /// A push that deletes an existing path.
    Deleted,
    /// A push whose new commit does not descend from the old one.
    NotDescendant,
}

impl Rule {
    /// Stable kebab-case name.
    pub fn code(self) -> &'static str {
        match self {
            Rule::UnknownPath => "unknown-path",
            Rule::ShardInvalid => "shard-invalid",
            Rule::Privacy => "privacy",
            Rule::ShardOrder => "shard-order",
            Rule::ShardPath => "shard-path",
            Rule::PartsIncomplete => "parts-incomplete",
            Rule::PartsNotDeterministic => "parts-not-deterministic",
            Rule::ReservationMissing => "reservation-missing",
            Rule::ReservationInvalid => "reservation-invalid",
            Rule::ReservationMismatch => "reservation-mismatch",
            Rule::ReservationOrphan => "reservation-orphan",
            Rule::CompletionMissing => "completion-missing",
            Rule::CompletionInvalid => "completion-invalid",
            Rule::CompletionOrphan => "completion-orphan",
            Rule::ProducerRunMissing => "producer-run-missing",
            Rule::ProducerRunMismatch => "producer-run-mismatch",
            Rule::ProducerRunOrphan => "producer-run-orphan",
            Rule::EventBindingMissing => "event-binding-missing",
            Rule::EventBindingMismatch => "event-binding-mismatch",
            Rule::EventBindingOrphan => "event-binding-orphan",
            Rule::DuplicateEvent => "duplicate-event",
            Rule::CausalCycle => "causal-cycle",
            Rule::Modified => "modified",
            Rule::Deleted => "deleted",
            Rule::NotDescendant => "not-descendant",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One broken rule at one path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub path: String,
    pub rule: Rule,
    pub detail: String,
}

/// The outcome of a verification: findings sorted by path then rule, and what was read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Shard files read.
    pub shards: usize,
    /// Events read from those shards.
    pub events: usize,
    /// Binding files checked.
    pub bindings: usize,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Verification could not run (the repository or revision cannot be read).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
}

const LEDGER: &str = "ledger/v1";

/// The set a shard path belongs to: its directory and file stem without the part suffix.
fn set_key(path: &str) -> String {
    let stem = path.strip_suffix(".jsonl").unwrap_or(path);
    match stem.len().checked_sub(22) {
        Some(at) if stem[at..].starts_with("-part-") => stem[..at].to_owned(),
        _ => stem.to_owned(),
    }
}

fn is_privacy(e: &shard::Error) -> bool {
    matches!(
        e,
        shard::Error::Event(event::Error::Field {
            error: FieldError::Text(
                privacy::Error::Confidential { .. }
                    | privacy::Error::NotRelativeDataPath { .. }
                    | privacy::Error::NotCredentialFreeHttps { .. }
                    | privacy::Error::NotGithubActionsRun { .. }
                    | privacy::Error::InvalidUrl { .. }
            ),
            ..
        })
    )
}

/// State shared across the sets of one verification.
struct Ctx<'s, 'r> {
    snap: &'s Snapshot<'r>,
    report: Report,
    /// Binding paths that a verified set accounts for.
    claimed: HashSet<String>,
    /// Every event seen: parent edge and the shard it was first seen in.
    events: HashMap<Digest, (Option<Digest>, u32)>,
    shard_paths: Vec<String>,
}

impl Ctx<'_, '_> {
    fn finding(&mut self, path: &str, rule: Rule, detail: impl Into<String>) {
        self.report.findings.push(Finding {
            path: path.to_owned(),
            rule,
            detail: detail.into(),
        });
    }

    fn read(&mut self, path: &str, max: u64) -> Result<Option<String>, Error> {
        match self.snap.read(path, max) {
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(t) => Ok(Some(t)),
                Err(_) => Ok(Some(String::from("\u{fffd}"))),
            },
            Ok(None) => Ok(None),
            Err(store::Error::TooLarge { .. }) => Ok(Some(String::from("\u{fffd}"))),
            Err(e) => Err(e.into()),
        }
    }

    /// Compares a binding file with the bytes the publisher would write.
    fn expect_binding(
        &mut self,
        path: &str,
        expected: &str,
        missing: Rule,
        differs: Rule,
        what: &str,
    ) -> Result<Option<String>, Error> {
        self.claimed.insert(path.to_owned());
        self.report.bindings += 1;
        let actual = self.read(path, binding::MAX_BYTES)?;
        match &actual {
            None => self.finding(path, missing, format!("{what} is missing")),
            Some(text) if text != expected => self.finding(
                path,
                differs,
                format!("{what} differs from the set it binds"),
            ),
            Some(_) => {}
        }
        Ok(actual)
    }

    /// Verifies one shard set (all files sharing a set key); returns its events' ids.
    fn verify_set(&mut self, paths: &[String]) -> Result<Vec<Digest>, Error> {
        let mut shards = Vec::with_capacity(paths.len());
        for path in paths {
            self.report.shards += 1;
            let Some(text) = self.read(path, shard::MAX_BYTES as u64)? else {
                continue;
            };
            let events = match shard::parse_content(&text, path) {
                Ok(ev) => ev,
                Err(e) => {
                    let rule = if is_privacy(&e) {
                        Rule::Privacy
                    } else {
                        Rule::ShardInvalid
                    };
                    self.finding(path, rule, e.to_string());
                    continue;
                }
            };
            self.report.events += events.len();
            if let Err(e) = shard::check_file_events(&events, path) {
                let rule = match e {
                    shard::Error::NotCausalOrder(_) => Rule::ShardOrder,
                    _ => Rule::ShardInvalid,
                };
                self.finding(path, rule, e.to_string());
                continue;
            }
            if events.iter().any(|e| e.producer() != events[0].producer()) {
                self.finding(
                    path,
                    Rule::ShardInvalid,
                    "the shard mixes producer identities",
                );
                continue;
            }
            shards.push(Shard {
                path: path.clone(),
                content: text,
                events,
            });
        }
        if shards.len() != paths.len() {
            return Ok(Vec::new());
        }
        // Identity and path.
        let mut identity: Option<ShardIdentity> = None;
        for s in &shards {
            let (date, part) = shard::parse_path(&s.path).expect("classified as a shard");
            let id = match s.events[0].shard_identity(&date).normalized() {
                Ok(id) => id,
                Err(e) => {
                    self.finding(&s.path, Rule::ShardPath, e.to_string());
                    return Ok(Vec::new());
                }
            };
            match shard::relative_path(&id, part) {
                Ok(expected) if expected == s.path => {}
                Ok(expected) => {
                    self.finding(
                        &s.path,
                        Rule::ShardPath,
                        format!("the events' identity gives {expected}"),
                    );
                    return Ok(Vec::new());
                }
                Err(e) => {
                    self.finding(&s.path, Rule::ShardPath, e.to_string());
                    return Ok(Vec::new());
                }
            }
            identity = Some(id);
        }
        let id = identity.expect("at least one shard");
        // Parts.
        let parts: Vec<Option<shard::Part>> = shards
            .iter()
            .map(|s| shard::parse_path(&s.path).and_then(|(_, p)| p))
            .collect();
        let numbered = parts.iter().flatten().count();
        let first = &shards[0].path;
        if numbered == 0 && shards.len() > 1 {
            self.finding(first, Rule::PartsIncomplete, "repeated unnumbered shards");
        } else if numbered != 0 && numbered != shards.len() {
            self.finding(
                first,
                Rule::PartsIncomplete,
                "numbered and unnumbered shards mixed",
            );
        } else if numbered != 0 {
            let count = parts[0].map_or(0, |p| p.1);
            let mut indices: Vec<u32> = parts.iter().flatten().map(|p| p.0).collect();
            indices.sort_unstable();
            let complete = parts.iter().flatten().all(|p| p.1 == count)
                && indices == (1..=count).collect::<Vec<_>>();
            if !complete {
                self.finding(
                    first,
                    Rule::PartsIncomplete,
                    format!("parts {indices:?} of {count}"),
                );
            } else {
                let all: Vec<Event> = shards
                    .iter()
                    .flat_map(|s| s.events.iter().cloned())
                    .collect();
                let same = event::sort_causally(all)
                    .map_err(shard::Error::from)
                    .and_then(|sorted| shard::pack(&id, sorted))
                    .is_ok_and(|repacked| {
                        repacked.len() == shards.len()
                            && repacked
                                .iter()
                                .zip(&shards)
                                .all(|(r, s)| r.path == s.path && r.content == s.content)
                    });
                if !same {
                    self.finding(
                        first,
                        Rule::PartsNotDeterministic,
                        "the parts are not the deterministic packing of their events",
                    );
                }
            }
        }
        // Set bindings.
        let refs: Vec<&Shard> = shards.iter().collect();
        let (res_path, res_expected) = binding::shard_set(&id, &refs);
        self.claimed.insert(res_path.clone());
        self.report.bindings += 1;
        let reservation = self.read(&res_path, binding::MAX_BYTES)?;
        let (comp_path, _) = binding::completion(&id, "");
        match &reservation {
            None => self.finding(
                &res_path,
                Rule::ReservationMissing,
                format!("no shard-set reservation for {first}"),
            ),
            Some(text) if *text != res_expected => {
                let rule = if binding::parse_shard_set(text, &id).is_some() {
                    Rule::ReservationMismatch
                } else {
                    Rule::ReservationInvalid
                };
                self.finding(
                    &res_path,
                    rule,
                    format!("does not list exactly the parts of {first} with their replay digests"),
                );
            }
            Some(_) => {}
        }
        match &reservation {
            Some(text) => {
                let (_, expected) = binding::completion(&id, text);
                self.expect_binding(
                    &comp_path,
                    &expected,
                    Rule::CompletionMissing,
                    Rule::CompletionInvalid,
                    "the completion marker (without it the set is invisible)",
                )?;
            }
            None => {
                self.claimed.insert(comp_path.clone());
                if self.read(&comp_path, binding::MAX_BYTES)?.is_some() {
                    self.finding(
                        &comp_path,
                        Rule::CompletionOrphan,
                        "a completion marker without its reservation",
                    );
                }
            }
        }
        let (run_path, run_expected) = binding::producer_run(&id);
        self.expect_binding(
            &run_path,
            &run_expected,
            Rule::ProducerRunMissing,
            Rule::ProducerRunMismatch,
            "the producer-run binding",
        )?;
        // Event bindings and global bookkeeping.
        let mut ids = Vec::new();
        for s in &shards {
            let index = self.shard_paths.len() as u32;
            self.shard_paths.push(s.path.clone());
            for e in &s.events {
                let (path, expected) = binding::event(e);
                self.expect_binding(
                    &path,
                    &expected,
                    Rule::EventBindingMissing,
                    Rule::EventBindingMismatch,
                    "the event identity binding",
                )?;
                if let Some((_, first)) = self.events.get(&e.event_id) {
                    let other = self.shard_paths[*first as usize].clone();
                    self.finding(
                        &s.path,
                        Rule::DuplicateEvent,
                        format!("event {} also in {other}", e.event_id),
                    );
                } else {
                    self.events
                        .insert(e.event_id.clone(), (e.parent_event_id.clone(), index));
                }
                ids.push(e.event_id.clone());
            }
        }
        Ok(ids)
    }

    /// Reports each causal cycle among `starts` once, following parents through the known
    /// events and, via `lookup`, through bindings.
    fn find_cycles(
        &mut self,
        starts: &[Digest],
        mut lookup: impl FnMut(&mut Self, &Digest) -> Result<Option<Option<Digest>>, Error>,
    ) -> Result<(), Error> {
        let mut done: HashSet<Digest> = HashSet::new();
        for start in starts {
            let mut walk: Vec<Digest> = Vec::new();
            let mut on_walk: HashSet<Digest> = HashSet::new();
            let mut current = Some(start.clone());
            while let Some(id) = current {
                if done.contains(&id) {
                    break;
                }
                if !on_walk.insert(id.clone()) {
                    let path = binding::Kind::Event.path(&id);
                    let at = walk.iter().position(|w| *w == id).unwrap_or(0);
                    self.finding(
                        &path,
                        Rule::CausalCycle,
                        format!(
                            "{} events form a parent cycle through {id}",
                            walk.len() - at
                        ),
                    );
                    break;
                }
                walk.push(id.clone());
                current = match self.events.get(&id) {
                    Some((parent, _)) => parent.clone(),
                    None => lookup(self, &id)?.flatten(),
                };
            }
            done.extend(walk);
        }
        Ok(())
    }

    fn finish(mut self) -> Report {
        self.report.findings.sort();
        self.report.findings.dedup();
        self.report
    }
}

fn orphan_rule(kind: Kind) -> (Rule, &'static str) {
    match kind {
        Kind::Event => (
            Rule::EventBindingOrphan,
            "an event binding whose event is in no shard",
        ),
        Kind::ShardSet => (Rule::ReservationOrphan, "a reservation without its shards"),
        Kind::Completion => (
            Rule::CompletionOrphan,
            "a completion marker without its shards",
        ),
        Kind::ProducerRun => (
            Rule::ProducerRunOrphan,
            "a producer-run binding without shards",
        ),
    }
}

/// Verifies the whole ledger at `commit`.
pub fn verify_revision(store: &Store, commit: CommitId) -> Result<Report, Error> {
    let snap = store.snapshot(Some(commit))?;
    let mut ctx = Ctx {
        snap: &snap,
        report: Report::default(),
        claimed: HashSet::new(),
        events: HashMap::new(),
        shard_paths: Vec::new(),
    };
    let mut sets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut bindings: Vec<(String, Kind)> = Vec::new();
    for path in snap.list_files(LEDGER)? {
        if shard::parse_path(&path).is_some() {
            sets.entry(set_key(&path)).or_default().push(path);
        } else if let Some((kind, _)) = binding::classify(&path) {
            bindings.push((path, kind));
        } else {
            ctx.finding(&path, Rule::UnknownPath, "not a shard or binding path");
        }
    }
    for paths in sets.values() {
        ctx.verify_set(paths)?;
    }
    for (path, kind) in bindings {
        if !ctx.claimed.contains(&path) {
            let (rule, detail) = orphan_rule(kind);
            ctx.finding(&path, rule, detail);
        }
    }
    let starts: Vec<Digest> = ctx.events.keys().cloned().collect();
    // Parents outside the ledger end a walk.
    ctx.find_cycles(&starts, |_, _| Ok(None))?;
    Ok(ctx.finish())
}

/// Verifies a push from `old` (`None` for a new ref) to `new`.
pub fn verify_range(store: &Store, old: Option<CommitId>, new: CommitId) -> Result<Report, Error> {
    let snap = store.snapshot(Some(new))?;
    let mut ctx = Ctx {
        snap: &snap,
        report: Report::default(),
        claimed: HashSet::new(),
        events: HashMap::new(),
        shard_paths: Vec::new(),
    };
    if let Some(old) = old
        && !store.is_ancestor(old, new)?
    {
        ctx.finding(
            "",
            Rule::NotDescendant,
            format!("{} does not descend from {}", new.to_hex(), old.to_hex()),
        );
        return Ok(ctx.finish());
    }
    let mut touched: BTreeSet<String> = BTreeSet::new();
    let mut added_bindings: Vec<(String, Kind)> = Vec::new();
    for change in store.diff(old, new, LEDGER)? {
        match change {
            Change::Modified(p) => {
                ctx.finding(&p, Rule::Modified, "an existing ledger file was changed")
            }
            Change::Deleted(p) => {
                ctx.finding(&p, Rule::Deleted, "an existing ledger file was deleted")
            }
            Change::Added(p) => {
                if shard::parse_path(&p).is_some() {
                    touched.insert(set_key(&p));
                } else if let Some((kind, _)) = binding::classify(&p) {
                    added_bindings.push((p, kind));
                } else {
                    ctx.finding(&p, Rule::UnknownPath, "not a shard or binding path");
                }
            }
        }
    }
    let added: HashSet<String> = added_bindings.iter().map(|(p, _)| p.clone()).collect();
    let mut incoming = Vec::new();
    for key in &touched {
        let dir = key.rsplit_once('/').map_or("", |(d, _)| d);
        let members: Vec<String> = snap
            .list_files(dir)?
            .into_iter()
            .filter(|p| shard::parse_path(p).is_some() && set_key(p) == *key)
            .collect();
        incoming.extend(ctx.verify_set(&members)?);
    }
    // An added event whose binding was already there was published before.
    for id in &incoming {
        let path = Kind::Event.path(id);
        if !added.contains(&path) && snap.exists(&path)? {
            let shard = ctx
                .events
                .get(id)
                .map(|(_, i)| ctx.shard_paths[*i as usize].clone());
            ctx.finding(
                &shard.unwrap_or(path),
                Rule::DuplicateEvent,
                format!("event {id} was already published"),
            );
        }
    }
    for (path, kind) in added_bindings {
        if !ctx.claimed.contains(&path) {
            let (rule, detail) = orphan_rule(kind);
            ctx.finding(&path, rule, detail);
        }
    }
    let mut reads = 0usize;
    ctx.find_cycles(&incoming, |ctx, id| {
        reads += 1;
        if reads > 262_144 {
            return Ok(None);
        }
        let path = Kind::Event.path(id);
        Ok(ctx
            .read(&path, binding::MAX_BYTES)?
            .and_then(|t| binding::parse_event(&t, id))
            .map(|(_, parent)| parent))
    })?;
    Ok(ctx.finish())
}
