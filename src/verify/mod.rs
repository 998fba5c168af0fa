//! Verification of a state repository revision: proves from a fresh
//! clone, offline, that the ledger is complete, canonical and conflict-free, and reports every
//! finding (path, rule, detail) instead of stopping at the first.
//!
//! Whole revision ([`verify_revision`]): every path under `ledger/v1/` is a known kind, and
//! every entry there and under `finality/v1/` a `100644` file or a directory
//! ([`Rule::EntryMode`]); shards are canonical, causally ordered, at the path their identity
//! gives, complete and deterministically packed; each shard set has the exact reservation,
//! completion marker and producer-run binding the publisher writes (bytes recomputed and
//! compared); every event has its identity binding with its semantic digest and parent edge; no
//! event id appears twice; no binding is left without its shard; causal edges are acyclic across
//! the whole ledger; every event passes the privacy rules (they are part of event validation).
//!
//! Push range ([`verify_range`]): NEW descends from OLD; no existing path under `ledger/v1/` is
//! modified or deleted; no added or changed entry is other than a `100644` file or a directory;
//! every shard set touched by the range is verified as above; added bindings must belong to an
//! added set; an added event must not already be bound; parent walks through published history
//! must not close a cycle. It reads only the changed subtrees, the touched sets and the bindings
//! those need.
//!
//! Warnings ([`Report::warnings`]) do not make a report unclean: sibling names that a
//! case-insensitive file system folds into one ([`Rule::CaseCollision`]), over the whole tree or,
//! for a push, the pairs it brings.
//!
//! Privacy profile ([`Options::privacy`], default strict): besides the reference's rules, which
//! are part of event validation ([`Rule::Privacy`]), every event of a verified set is checked
//! against [`privacy::strict::RULES`]; each hit is a [`Rule::PrivacyStrict`] finding naming the
//! event, the field path and the family. In history such a value cannot be removed (the ledger
//! is immutable), so the finding says to treat it as exposed; in a push range it refuses the
//! push. Under the `reference` profile these findings are not reported.
//!
//! Compacted months: shards are read through [`crate::view`], so a compacted shard
//! is verified like a hot one, from the bytes its segment holds; [`crate::compact`] checks each
//! manifest against its segments, and in a range lets a shard file be deleted only when the new
//! manifest proves its exact bytes, and a manifest be replaced only by a superset.
//!
//! Cost (whole revision): one walk of the tree lists every file with its object id; a binding
//! is checked by comparing that id with the id of the bytes the publisher would write
//! ([`BlobId::of`]), so no binding blob is read and no binding path is looked up. Shards are read
//! in batches on this thread (the snapshot is not shared) and parsed, privacy-scanned and hashed
//! on all cores while the next batch is read; the set-level checks run in order on this thread.
//!
//! Memory: across the ledger only each binding's (kind, digest, object id) and each event's id,
//! parent and shard index are kept (for orphans, duplicates and cycles), not the events; at most
//! three batches of shards are in flight; pack pages mapped by gix are released after each batch
//! ([`Store::release_mapped_packs`]).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::event::{self, Event, FieldError};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::binding::{self, Kind};
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self, Shard};
use crate::privacy::{self, Profile};
use crate::store::{self, BlobId, Change, CommitId, Snapshot, Store};

pub use crate::finding::{Finding, Report, Rule};

/// Knobs of a verification.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// The privacy profile (default [`Profile::Strict`]): whether [`Rule::PrivacyStrict`]
    /// findings are reported.
    pub privacy: Profile,
}

/// Verification could not run (the repository or revision cannot be read).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
}

const LEDGER: &str = "ledger/v1";
const FINALITY: &str = crate::finality::ROOT;

/// How much of a broken shard is read to find the bindings it accounts for (four times the
/// shard cap), so that one broken shard is one finding and not a cascade of orphans.
const CLAIM_READ_MAX: u64 = 4 * shard::MAX_BYTES as u64;

/// A digest as 32 raw bytes.
type Key = [u8; 32];

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
    /// The snapshot, read with compacted shards present.
    view: crate::view::View<'s, 'r>,
    /// The repository's layout: where the bindings the publisher writes must be.
    layout: Layout,
    report: Report,
    /// Whole revision: every binding file of the repository's layout with its content id, read
    /// from one walk of the tree. Bindings are then checked by comparing ids (no blob is read,
    /// no path is looked up) and claimed in place.
    index: Option<BindingIndex>,
    /// Push range (no index): bindings that a verified set accounts for. Fixed-size keys, no
    /// allocation per entry.
    claimed: HashSet<(Kind, Key)>,
    /// Every event seen: parent edge and the shard it was first seen in.
    events: Events,
    shard_paths: Vec<String>,
    privacy: Profile,
}

impl<'s, 'r> Ctx<'s, 'r> {
    /// A context for `snap`, with its layout read from the tree (an unreadable record is a
    /// finding; the bindings are then expected where the reference puts them).
    fn new(snap: &'s Snapshot<'r>, privacy: Profile) -> Result<Self, Error> {
        let mut report = Report::default();
        let record = match snap.read(layout::RECORD_PATH, layout::MAX_RECORD_BYTES) {
            Ok(Some(bytes)) => layout::RecordRead::Bytes(bytes),
            Ok(None) => layout::RecordRead::Absent,
            Err(store::Error::TooLarge { .. }) => layout::RecordRead::TooLarge,
            Err(e) => return Err(e.into()),
        };
        let ledger_exists =
            record == layout::RecordRead::Absent && snap.is_dir(layout::LEDGER_ROOT)?;
        let layout = match layout::detect_from(record, ledger_exists) {
            Ok(layout::Detected::Existing(l)) => l,
            Ok(layout::Detected::Empty) => Layout::Reference,
            Err(e) => {
                report.findings.push(Finding {
                    path: layout::RECORD_PATH.to_owned(),
                    rule: Rule::LayoutRecordInvalid,
                    detail: e.to_string(),
                });
                Layout::Reference
            }
        };
        Ok(Ctx {
            view: crate::view::View::new(snap),
            layout,
            report,
            index: None,
            claimed: HashSet::new(),
            events: Events::default(),
            shard_paths: Vec::new(),
            privacy,
        })
    }

    /// Reports a binding at a path of `found`, the layout the repository does not use.
    fn mixed(&mut self, path: &str, found: Layout) {
        self.finding(
            path,
            Rule::LayoutMixed,
            format!(
                "a {} binding path in a {} repository",
                found.name(),
                self.layout.name()
            ),
        );
    }

    fn claim(&mut self, path: &str) {
        if let Some((kind, digest, _)) = binding::classify(path) {
            self.claim_key(kind, digest.bytes());
        }
    }

    fn claim_key(&mut self, kind: Kind, key: Key) {
        match &mut self.index {
            Some(index) => {
                if let Some(i) = index.find(kind, &key) {
                    index.claimed[i] = true;
                }
            }
            None => {
                self.claimed.insert((kind, key));
            }
        }
    }

    /// Range only: whether a verified set accounts for the binding at `path`.
    fn is_claimed(&self, path: &str) -> bool {
        binding::classify(path)
            .is_some_and(|(kind, d, _)| self.claimed.contains(&(kind, d.bytes())))
    }

    /// The content id of the binding file at `path` (built by [`Kind::path`] in this layout),
    /// `None` if it is absent: from the index, or from the trees for a range.
    fn binding_id(&self, path: &str) -> Result<Option<BlobId>, Error> {
        match &self.index {
            Some(index) => Ok(binding::classify(path)
                .and_then(|(kind, digest, _)| index.find(kind, &digest.bytes()))
                .map(|i| BlobId::from_bytes(&index.entries[i].2))),
            // A directory or submodule where the binding belongs holds no binding (its mode is
            // reported as `entry-mode`).
            None => match self.view.snapshot().file_id(path) {
                Err(store::Error::NotAFile { .. }) => Ok(None),
                other => Ok(other?),
            },
        }
    }

    /// The text of the binding blob `id` found at `path`; not UTF-8 or over
    /// [`binding::MAX_BYTES`] reads as U+FFFD, which no binding equals.
    fn read_binding(&self, id: BlobId, path: &str) -> Result<String, Error> {
        match self.view.snapshot().read_blob(id, path, binding::MAX_BYTES) {
            Ok(bytes) => Ok(String::from_utf8(bytes).unwrap_or_else(|_| String::from("\u{fffd}"))),
            Err(store::Error::TooLarge { .. }) => Ok(String::from("\u{fffd}")),
            Err(e) => Err(e.into()),
        }
    }

    fn finding(&mut self, path: &str, rule: Rule, detail: impl Into<String>) {
        self.report.findings.push(Finding {
            path: path.to_owned(),
            rule,
            detail: detail.into(),
        });
    }

    /// A shard file for [`prepare`]: its text, or the rule it breaks when it is over
    /// [`shard::MAX_BYTES`] or not UTF-8 (named as `publish` names them).
    fn read_shard(&self, path: &str) -> Result<ShardRead, Error> {
        match self.view.read_unchecked(path, shard::MAX_BYTES as u64) {
            Ok(Some(bytes)) => Ok(Some(shard::text_of(bytes, path))),
            Ok(None) => Ok(None),
            Err(store::Error::TooLarge { .. }) => {
                Ok(Some(Err(shard::Error::FileTooLarge(path.to_owned()))))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The text of a binding file; not UTF-8 or over `max` reads as U+FFFD, which no binding
    /// parses as.
    fn read(&mut self, path: &str, max: u64) -> Result<Option<String>, Error> {
        match self.view.read_unchecked(path, max) {
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Ok(t) => Ok(Some(t)),
                Err(_) => Ok(Some(String::from("\u{fffd}"))),
            },
            Ok(None) | Err(store::Error::NotAFile { .. }) => Ok(None),
            Err(store::Error::TooLarge { .. }) => Ok(Some(String::from("\u{fffd}"))),
            Err(e) => Err(e.into()),
        }
    }

    /// Compares a binding file with the bytes the publisher would write, by content id.
    fn expect_binding(
        &mut self,
        path: &str,
        expected: &str,
        missing: Rule,
        differs: Rule,
        what: &str,
    ) -> Result<(), Error> {
        let expected = BlobId::of(expected.as_bytes())?;
        self.expect_binding_id(path, expected, missing, differs, what)
    }

    fn expect_binding_id(
        &mut self,
        path: &str,
        expected: BlobId,
        missing: Rule,
        differs: Rule,
        what: &str,
    ) -> Result<(), Error> {
        self.claim(path);
        self.report.bindings += 1;
        match self.binding_id(path)? {
            None => self.finding(path, missing, format!("{what} is missing")),
            Some(id) if id != expected => self.finding(
                path,
                differs,
                format!("{what} differs from the set it binds"),
            ),
            Some(_) => {}
        }
        Ok(())
    }

    /// Verifies one shard set (all files sharing a set key); returns its events' ids.
    fn verify_set(&mut self, paths: &[String]) -> Result<Vec<Digest>, Error> {
        let mut prepared = Vec::with_capacity(paths.len());
        for path in paths {
            let read = self.read_shard(path)?;
            prepared.push(prepare(path, &read, self.layout, self.privacy));
        }
        self.check_set(paths, prepared)
    }

    /// The checks of one shard set that need the whole ledger's state, on its shards prepared
    /// by [`prepare`] (in the order of `paths`); returns its events' ids.
    fn check_set(
        &mut self,
        paths: &[String],
        prepared: Vec<Prepared>,
    ) -> Result<Vec<Digest>, Error> {
        let mut shards = Vec::with_capacity(paths.len());
        let mut binding_ids = Vec::with_capacity(paths.len());
        let mut replays = Vec::with_capacity(paths.len());
        for (path, p) in paths.iter().zip(prepared) {
            self.report.shards += 1;
            self.report.events += p.events;
            for detail in p.strict {
                self.finding(path, Rule::PrivacyStrict, detail);
            }
            match p.outcome {
                Outcome::Absent => {}
                Outcome::Broken(rule, detail) => self.finding(path, rule, detail),
                Outcome::Good(shard, ids, replay) => {
                    shards.push(shard);
                    binding_ids.push(ids);
                    replays.push(replay);
                }
            }
        }
        if shards.len() != paths.len() {
            self.claim_broken(paths)?;
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
                    self.claim_broken(paths)?;
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
                    self.claim_broken(paths)?;
                    return Ok(Vec::new());
                }
                Err(e) => {
                    self.finding(&s.path, Rule::ShardPath, e.to_string());
                    self.claim_broken(paths)?;
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
        let findings_before = self.report.findings.len();
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
            } else if count == 1 {
                // One part whose events are already in exact canonical causal order (checked
                // above, with its bytes equal to their lines): greedy packing leaves it whole
                // exactly when it is within both part limits. Repacking would only re-derive it.
                let s = &shards[0];
                if s.events.len() > shard::MAX_EVENTS || s.content.len() > shard::MAX_BYTES {
                    self.finding(
                        first,
                        Rule::PartsNotDeterministic,
                        "the parts are not the deterministic packing of their events",
                    );
                }
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
        if self.report.findings.len() != findings_before {
            // The bindings describe the correct packing; comparing them would repeat the finding.
            self.claim_broken(paths)?;
            return Ok(Vec::new());
        }
        // Set bindings.
        let parts: Vec<(&str, Digest)> = shards
            .iter()
            .zip(replays)
            .map(|(s, replay)| (s.path.as_str(), replay))
            .collect();
        let (res_path, res_expected) = binding::shard_set_of(self.layout, &id, &parts);
        self.claim(&res_path);
        self.report.bindings += 1;
        let reservation = self.binding_id(&res_path)?;
        let (comp_path, _) = binding::completion(self.layout, &id, "");
        match reservation {
            None => self.finding(
                &res_path,
                Rule::ReservationMissing,
                format!("no shard-set reservation for {first}"),
            ),
            Some(found) if found != BlobId::of(res_expected.as_bytes())? => {
                let text = self.read_binding(found, &res_path)?;
                let rule = if binding::parse_shard_set(&text, &id).is_some() {
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
        if reservation.is_some() {
            // Against the reservation the publisher writes, so that one forged file is one finding.
            let (_, expected) = binding::completion(self.layout, &id, &res_expected);
            self.expect_binding(
                &comp_path,
                &expected,
                Rule::CompletionMissing,
                Rule::CompletionInvalid,
                "the completion marker (without it the set is invisible)",
            )?;
        } else {
            // Missing reservation already reported; a completion beside it is part of that defect.
            self.claim(&comp_path);
        }
        let (run_path, run_expected) = binding::producer_run(self.layout, &id);
        self.expect_binding(
            &run_path,
            &run_expected,
            Rule::ProducerRunMissing,
            Rule::ProducerRunMismatch,
            "the producer-run binding",
        )?;
        // Event bindings and global bookkeeping.
        let mut ids = Vec::new();
        for (s, binding_ids) in shards.iter().zip(&binding_ids) {
            let index = self.shard_paths.len() as u32;
            self.shard_paths.push(s.path.clone());
            for (e, id) in s.events.iter().zip(binding_ids) {
                let expected = match id {
                    Some(id) => *id,
                    None => BlobId::of(binding::event(self.layout, e).1.as_bytes())?,
                };
                let path = Kind::Event.path(self.layout, &e.event_id);
                self.expect_binding_id(
                    &path,
                    expected,
                    Rule::EventBindingMissing,
                    Rule::EventBindingMismatch,
                    "the event identity binding",
                )?;
                self.events.push(Seen {
                    id: e.event_id.bytes(),
                    parent: e.parent_event_id.as_ref().map(Digest::bytes),
                    shard: index,
                });
                ids.push(e.event_id.clone());
            }
        }
        Ok(ids)
    }

    /// Claims the bindings of a set that could not be verified, as far as its bytes allow (event
    /// ids from lines that are JSON; set bindings from the first line's producer and the path's
    /// date), so that one broken shard is one finding rather than a cascade of orphans.
    fn claim_broken(&mut self, paths: &[String]) -> Result<(), Error> {
        let mut identity = None;
        for path in paths {
            // Lossy and past the shard cap (bounded): a shard refused for its size or bytes still
            // names the events whose bindings belong to it.
            let text = match self.view.read_unchecked(path, CLAIM_READ_MAX) {
                Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Ok(None) | Err(store::Error::TooLarge { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            for line in text.lines() {
                let Ok(v) = crate::canonical::parse(line) else {
                    continue;
                };
                if let Some(id) = v
                    .get("event_id")
                    .and_then(|x| x.as_str())
                    .and_then(Digest::parse)
                {
                    self.claim_key(Kind::Event, id.bytes());
                }
                if identity.is_none()
                    && let (Some(p), Some((date, _))) = (v.get("producer"), shard::parse_path(path))
                {
                    let f = |k: &str| p.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned();
                    identity = ShardIdentity {
                        repository: f("repository"),
                        sha: f("sha"),
                        producer: f("component"),
                        workflow: f("workflow"),
                        job: f("job"),
                        run_id: f("run_id"),
                        run_attempt: p
                            .get("run_attempt")
                            .and_then(|x| x.as_safe_integer())
                            .unwrap_or(0),
                        partition_date: date,
                    }
                    .normalized()
                    .ok();
                }
            }
        }
        if let Some(id) = identity {
            let (res, _) = binding::shard_set(self.layout, &id, &[]);
            let (comp, _) = binding::completion(self.layout, &id, "");
            let (run, _) = binding::producer_run(self.layout, &id);
            for path in [res, comp, run] {
                self.claim(&path);
            }
        }
        Ok(())
    }

    /// A reservation that lists a shard present in the tree belongs to that (broken) set, and so
    /// do its completion marker and producer-run binding: claim them so that the broken set is
    /// reported once, not again as orphans.
    fn claim_reserved_sets(&mut self, sets: &BTreeMap<String, Vec<String>>) -> Result<(), Error> {
        let Some(index) = &self.index else {
            return Ok(());
        };
        let unclaimed: Vec<(Key, BlobId)> = index
            .entries
            .iter()
            .zip(&index.claimed)
            .filter(|((kind, _, _), claimed)| *kind == Kind::ShardSet && !**claimed)
            .map(|((_, key, id), _)| (*key, BlobId::from_bytes(id)))
            .collect();
        for (key, blob) in unclaimed {
            let path = Kind::ShardSet.path(self.layout, &Digest::from_bytes(&key));
            let text = self.read_binding(blob, &path)?;
            let Ok(v) = crate::canonical::parse(text.trim_end()) else {
                continue;
            };
            let listed = v
                .get("shards")
                .and_then(|s| s.as_array())
                .unwrap_or(&[])
                .iter()
                .filter_map(|e| e.get("path").and_then(|p| p.as_str()))
                .any(|p| sets.contains_key(&set_key(p)));
            if !listed {
                continue;
            }
            self.claim_key(Kind::ShardSet, key);
            self.claim_key(Kind::Completion, key);
            if let Some(crate::canonical::Value::Object(mut producer)) = v.get("producer").cloned()
            {
                producer.remove("partitionDate");
                let run = Digest::of(crate::canonical::to_canonical_unchecked(
                    &crate::canonical::Value::Object(producer),
                ));
                self.claim_key(Kind::ProducerRun, run.bytes());
            }
        }
        Ok(())
    }

    /// Sorts the events seen by id and reports every id seen again after its first shard
    /// (call once, after the last set).
    fn settle_events(&mut self) {
        for (again, first) in self.events.settle() {
            let other = self.shard_paths[first.shard as usize].clone();
            let path = self.shard_paths[again.shard as usize].clone();
            self.finding(
                &path,
                Rule::DuplicateEvent,
                format!("event {} also in {other}", Digest::from_bytes(&again.id)),
            );
        }
    }

    /// Reports each causal cycle once, walking parents from each of `starts` (every event seen
    /// when `None`) through the events seen and, via `lookup`, through bindings. Events must be
    /// settled ([`Ctx::settle_events`]).
    fn find_cycles(
        &mut self,
        starts: Option<&[Key]>,
        mut lookup: impl FnMut(&mut Self, &Key) -> Result<Option<Option<Key>>, Error>,
    ) -> Result<(), Error> {
        let mut done_seen = vec![false; self.events.seen.len()];
        let mut done_other: HashSet<Key> = HashSet::new();
        let mut walk: Vec<Key> = Vec::new();
        let mut on_walk: HashSet<Key> = HashSet::new();
        let count = starts.map_or(self.events.seen.len(), <[Key]>::len);
        for n in 0..count {
            let start = match starts {
                Some(ids) => ids[n],
                None => self.events.seen[n].id,
            };
            walk.clear();
            on_walk.clear();
            let mut current = Some(start);
            while let Some(id) = current {
                let at = self.events.position(&id);
                let done = match at {
                    Some(i) => done_seen[i],
                    None => done_other.contains(&id),
                };
                if done {
                    break;
                }
                if !on_walk.insert(id) {
                    let digest = Digest::from_bytes(&id);
                    let from = walk.iter().position(|w| *w == id).unwrap_or(0);
                    self.finding(
                        &Kind::Event.path(self.layout, &digest),
                        Rule::CausalCycle,
                        format!(
                            "{} events form a parent cycle through {digest}",
                            walk.len() - from
                        ),
                    );
                    break;
                }
                walk.push(id);
                current = match at {
                    Some(i) => self.events.seen[i].parent,
                    None => lookup(self, &id)?.flatten(),
                };
            }
            for id in &walk {
                match self.events.position(id) {
                    Some(i) => done_seen[i] = true,
                    None => {
                        done_other.insert(*id);
                    }
                }
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Report {
        self.report.findings.sort();
        self.report.findings.dedup();
        self.report.warnings.sort();
        self.report.warnings.dedup();
        self.report
    }
}

/// The binding files of a whole revision in the repository's layout, sorted by (kind, digest),
/// each with the id of its content and whether a verified set accounts for it (53 bytes and a
/// flag a binding).
struct BindingIndex {
    entries: Vec<(Kind, Key, [u8; 20])>,
    claimed: Vec<bool>,
}

impl BindingIndex {
    fn find(&self, kind: Kind, key: &Key) -> Option<usize> {
        self.entries
            .binary_search_by(|(k, d, _)| (*k, d).cmp(&(kind, key)))
            .ok()
    }
}

/// An event seen in a verified set: its id, its parent edge and the index of its shard in
/// `Ctx::shard_paths`.
#[derive(Clone, Copy)]
struct Seen {
    id: Key,
    parent: Option<Key>,
    shard: u32,
}

/// The events seen across the ledger, appended set by set and sorted by id once all sets are
/// read: a sorted vector holds a million events in about 72 MB, where a hash map took twice that.
#[derive(Default)]
struct Events {
    seen: Vec<Seen>,
}

impl Events {
    fn push(&mut self, seen: Seen) {
        self.seen.push(seen);
    }

    /// Sorts by id (then shard: the first seen stays first), keeps the first of each id and
    /// returns every later one with the one it repeats. Unstable sort: no buffer of half the
    /// events (shards are numbered in the order they are seen, and a shard that repeats an id
    /// within itself never gets here).
    fn settle(&mut self) -> Vec<(Seen, Seen)> {
        self.seen
            .sort_unstable_by(|a, b| a.id.cmp(&b.id).then(a.shard.cmp(&b.shard)));
        let mut repeats = Vec::new();
        self.seen.dedup_by(|later, first| {
            let same = later.id == first.id;
            if same {
                repeats.push((*later, *first));
            }
            same
        });
        self.seen.shrink_to_fit();
        repeats
    }

    /// Where `id` is among the settled events.
    fn position(&self, id: &Key) -> Option<usize> {
        self.seen.binary_search_by(|s| s.id.cmp(id)).ok()
    }
}

/// One shard read and checked on its own, ahead of its set's checks: the part of verification
/// that needs no shared state, so that [`verify_revision_with`] runs it on worker threads.
struct Prepared {
    /// Events parsed (counted even when a later check of the file fails).
    events: usize,
    /// Details of the strict-profile findings, in event order.
    strict: Vec<String>,
    outcome: Outcome,
}

enum Outcome {
    /// No file at the path (a compacted shard its manifest does not prove).
    Absent,
    /// A finding that stops the file's checks.
    Broken(Rule, String),
    /// Canonical lines of one producer in causal order, with the content id of each event's
    /// binding (`None` if it could not be computed here; the caller computes it again and
    /// reports the error), and the shard's replay digest.
    Good(Shard, Vec<Option<BlobId>>, Digest),
}

/// One shard file checked on its own ([`check_shard`]).
#[derive(Debug)]
pub struct ShardCheck {
    /// The events its lines hold: all of them once every line parses (also when a later check
    /// of the file fails), none when a line does not.
    pub events: Vec<Event>,
    /// The rule the file breaks and the detail naming it; `None` when the file passes.
    pub refused: Option<(Rule, String)>,
}

/// The checks of one shard file that need nothing but its text, shared by `verify` and `log`
/// (so that `log` never prints an event out of a shard `verify` would refuse): canonical event
/// lines (a final newline, no empty line, no `\r`, each line canonical and a
/// valid event, the privacy rules included), 1 to 1,024 events in exact canonical causal order
///, one producer. A long shard's lines are parsed on all cores. The checks that need the
/// rest of the ledger (path, parts, bindings) stay in [`verify_revision`].
pub fn check_shard(path: &str, text: &str) -> ShardCheck {
    let events = match shard::parse_content(text, path) {
        Ok(events) => events,
        Err(e) => {
            return ShardCheck {
                events: Vec::new(),
                refused: Some(shard_refusal(&e)),
            };
        }
    };
    let refused = match shard::check_file_events(&events, path) {
        Err(e) => Some(shard_refusal(&e)),
        Ok(()) if events.iter().any(|e| e.producer() != events[0].producer()) => Some((
            Rule::ShardInvalid,
            format!("action event shard mixes producer identities: {path}"),
        )),
        Ok(()) => None,
    };
    ShardCheck { events, refused }
}

/// The rule a shard error breaks, with its text as the detail.
pub fn shard_refusal(e: &shard::Error) -> (Rule, String) {
    let rule = match e {
        _ if is_privacy(e) => Rule::Privacy,
        shard::Error::NotCausalOrder(_) => Rule::ShardOrder,
        shard::Error::Event(event::Error::DuplicateEvent(_)) => Rule::DuplicateEvent,
        _ => Rule::ShardInvalid,
    };
    (rule, e.to_string())
}

/// A shard file as read for [`prepare`]: absent, its text, or why it is not text (over
/// [`shard::MAX_BYTES`], not UTF-8).
type ShardRead = Option<Result<String, shard::Error>>;

/// Parses and checks one shard file on its own ([`check_shard`]), scans its events for the
/// strict profile, and computes the content id of each event's binding and the replay digest.
fn prepare(path: &str, read: &ShardRead, layout: Layout, profile: Profile) -> Prepared {
    let text = match read {
        None => {
            return Prepared {
                events: 0,
                strict: Vec::new(),
                outcome: Outcome::Absent,
            };
        }
        Some(Err(e)) => {
            let (rule, detail) = shard_refusal(e);
            return Prepared {
                events: 0,
                strict: Vec::new(),
                outcome: Outcome::Broken(rule, detail),
            };
        }
        Some(Ok(text)) => text,
    };
    let ShardCheck { events, refused } = check_shard(path, text);
    let mut strict = Vec::new();
    if profile == Profile::Strict {
        for e in &events {
            for f in privacy::strict::scan(&e.value) {
                strict.push(format!(
                    "event {}: {f}; the ledger is immutable and cannot take it back, so treat the value as exposed (revoke or rotate a credential)",
                    e.event_id
                ));
            }
        }
    }
    if let Some((rule, detail)) = refused {
        return Prepared {
            events: events.len(),
            strict,
            outcome: Outcome::Broken(rule, detail),
        };
    }
    let ids = events
        .iter()
        .map(|e| BlobId::of(binding::event(layout, e).1.as_bytes()).ok())
        .collect();
    let replay = event::replay_digest(&events);
    Prepared {
        events: events.len(),
        strict,
        outcome: Outcome::Good(
            Shard {
                path: path.to_owned(),
                content: text.to_owned(),
                events,
            },
            ids,
            replay,
        ),
    }
}

/// [`prepare`] over many shards on all cores (rayon); results in input order. A long shard's
/// lines are spread across the cores as well (the work nests).
fn prepare_all(items: &[(&str, ShardRead)], layout: Layout, profile: Profile) -> Vec<Prepared> {
    use rayon::prelude::*;
    items
        .par_iter()
        .map(|(path, read)| prepare(path, read, layout, profile))
        .collect()
}

/// Verifies `sets` in order, as a pipeline: this thread reads a batch of shards (about 1 MiB;
/// the snapshot is not shared) while the batch before it is prepared on all cores
/// ([`prepare_all`]), then checks the prepared batch against the ledger's state. Memory holds
/// at most three batches.
fn check_sets_pipelined(ctx: &mut Ctx<'_, '_>, sets: &[&Vec<String>]) -> Result<(), Error> {
    use std::sync::mpsc::sync_channel;
    const BATCH_BYTES: usize = 1 << 20;
    type Batch<'p> = (std::ops::Range<usize>, Vec<(&'p str, ShardRead)>);
    let (layout, profile) = (ctx.layout, ctx.privacy);
    std::thread::scope(|scope| {
        let (to_prepare, batches) = sync_channel::<Batch<'_>>(1);
        let (to_check, prepared) = sync_channel::<(std::ops::Range<usize>, Vec<Prepared>)>(1);
        scope.spawn(move || {
            for (range, items) in batches {
                let done = prepare_all(&items, layout, profile);
                if to_check.send((range, done)).is_err() {
                    break;
                }
            }
        });
        let check = |ctx: &mut Ctx<'_, '_>| -> Result<(), Error> {
            let (range, done) = prepared
                .recv()
                .expect("the preparing thread answers every batch");
            let mut done = done.into_iter();
            for paths in &sets[range] {
                let set: Vec<Prepared> = done.by_ref().take(paths.len()).collect();
                ctx.check_set(paths, set)?;
            }
            Ok(())
        };
        let mut next = 0;
        let mut in_flight = 0;
        while next < sets.len() {
            let first = next;
            let mut bytes = 0;
            let mut items = Vec::new();
            while next < sets.len() && (next == first || bytes < BATCH_BYTES) {
                for path in sets[next] {
                    let read = ctx.read_shard(path)?;
                    bytes += match &read {
                        Some(Ok(text)) => text.len(),
                        _ => 0,
                    };
                    items.push((path.as_str(), read));
                }
                next += 1;
            }
            // The batch's shards are read: let their pack pages go (resident memory stays
            // bounded by a batch, not by the repository).
            ctx.view.snapshot().store().release_mapped_packs();
            to_prepare
                .send((first..next, items))
                .expect("the preparing thread runs until the batches end");
            in_flight += 1;
            if in_flight > 1 {
                check(ctx)?;
                in_flight -= 1;
            }
        }
        drop(to_prepare);
        for _ in 0..in_flight {
            check(ctx)?;
        }
        Ok(())
    })
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

/// Checks the compacted months of a revision and adds their compacted shards to
/// `sets`, so that they are verified like hot ones (read through the view).
fn check_compacted(
    ctx: &mut Ctx<'_, '_>,
    sets: &mut BTreeMap<String, Vec<String>>,
    segment_files: &[String],
) -> Result<(), Error> {
    if segment_files.is_empty() {
        return Ok(());
    }
    let checked = {
        let hot = |p: &str| {
            sets.get(&set_key(p))
                .is_some_and(|m| m.iter().any(|x| x == p))
        };
        crate::compact::check_revision(&ctx.view, segment_files, hot)?
    };
    report_compaction(ctx, checked.problems);
    for path in checked.shards {
        let members = sets.entry(set_key(&path)).or_default();
        members.push(path);
        members.sort_unstable();
    }
    Ok(())
}

/// Reports compaction problems under their rules.
fn report_compaction(ctx: &mut Ctx<'_, '_>, problems: Vec<crate::compact::Problem>) {
    use crate::compact::ProblemKind as K;
    for p in problems {
        let rule = match p.kind {
            K::ManifestInvalid => Rule::ManifestInvalid,
            K::SegmentDigestMismatch => Rule::SegmentDigestMismatch,
            K::EntryMismatch => Rule::ManifestEntryMismatch,
            K::CompactedMissing => Rule::CompactedMissing,
            K::CompactedExtra => Rule::CompactedExtra,
            K::DeletionUnproven => Rule::DeletionUnproven,
            K::ManifestNotSuperset => Rule::ManifestNotSuperset,
            K::Deleted => Rule::Deleted,
        };
        ctx.finding(&p.path, rule, p.detail);
    }
}

/// The name two sibling entries share on a case-insensitive, normalization-insensitive file
/// system: NFC of the Unicode default (full) case folding of the name's NFD (the canonical
/// caseless match of the Unicode standard, section 3.13). Full folding, not lowercasing: `ß`,
/// `ẞ` and `ss` fold alike, and so do `ſ` and `s`, `ﬁ` and `fi`, which `to_lowercase` keeps
/// apart. An ASCII name folds to its ASCII lowercase.
fn fold_key(name: &str) -> std::borrow::Cow<'_, str> {
    use caseless::Caseless;
    use unicode_normalization::UnicodeNormalization;
    if name.is_ascii() {
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            name.to_ascii_lowercase().into()
        } else {
            name.into()
        }
    } else {
        name.nfd()
            .default_case_fold()
            .nfc()
            .collect::<String>()
            .into()
    }
}

/// The [`Rule::CaseCollision`] warnings among the entries named `names` of the directory
/// `dir` (`""` or ending in `/`): each pair whose fold keys are equal, once, named by the
/// first path in byte order; `only`, when given, keeps the pairs with a member it accepts.
fn collisions(dir: &str, names: &[&str], only: Option<&dyn Fn(&str) -> bool>) -> Vec<Finding> {
    let mut keyed: Vec<(std::borrow::Cow<'_, str>, &str)> =
        names.iter().map(|n| (fold_key(n), *n)).collect();
    keyed.sort_unstable();
    let mut out = Vec::new();
    for run in keyed.chunk_by(|a, b| a.0 == b.0) {
        for (i, (_, a)) in run.iter().enumerate() {
            for (_, b) in &run[i + 1..] {
                if only.is_some_and(|keep| !keep(a) && !keep(b)) {
                    continue;
                }
                let (first, second) = if a <= b { (a, b) } else { (b, a) };
                out.push(Finding {
                    path: format!("{dir}{first}"),
                    rule: Rule::CaseCollision,
                    detail: format!(
                        "warning: {dir}{second} is the same name on a case-insensitive file system (equal after Unicode case folding and NFC normalization): a checkout on macOS or Windows holds only one of them; the ledger keeps both as published"
                    ),
                });
            }
        }
    }
    out
}

/// Collects [`Rule::CaseCollision`] warnings during a tree walk, one directory at a time (the
/// walk visits the entries of a directory together). Holds one directory's names in one
/// buffer, and folds them only when one of them is not plain lowercase ASCII.
#[derive(Default)]
struct Siblings {
    dir: String,
    names: String,
    ends: Vec<usize>,
    plain: bool,
    warnings: Vec<Finding>,
}

impl Siblings {
    fn visit(&mut self, entry: &store::Walked<'_>) {
        let dir = &entry.path[..entry.path.len() - entry.name.len()];
        if dir != self.dir || self.ends.is_empty() {
            self.flush();
            self.dir.clear();
            self.dir.push_str(dir);
        }
        self.plain &= entry
            .name
            .bytes()
            .all(|b| b.is_ascii() && !b.is_ascii_uppercase());
        self.names.push_str(entry.name);
        self.ends.push(self.names.len());
    }

    fn flush(&mut self) {
        if !self.plain {
            let mut names = Vec::with_capacity(self.ends.len());
            let mut start = 0;
            for &end in &self.ends {
                names.push(&self.names[start..end]);
                start = end;
            }
            self.warnings.extend(collisions(&self.dir, &names, None));
        }
        self.names.clear();
        self.ends.clear();
        self.plain = true;
    }

    fn finish(mut self) -> Vec<Finding> {
        self.flush();
        self.warnings
    }
}

/// The [`Rule::CaseCollision`] warnings a push brings: in every directory on the way to an
/// added path (below `ledger/v1/` or `finality/v1/`), the pairs of sibling names at `new` that
/// fold alike and of which at least one is not at `old`.
fn added_collisions<'p>(
    old: &Snapshot<'_>,
    new: &Snapshot<'_>,
    added: impl Iterator<Item = &'p str>,
) -> Result<Vec<Finding>, Error> {
    let mut on_the_way: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for path in added {
        let root = if path.starts_with(FINALITY) {
            FINALITY
        } else {
            LEDGER
        };
        let mut at = root.len() + 1;
        while at <= path.len() {
            let end = path[at..].find('/').map_or(path.len(), |i| at + i);
            on_the_way
                .entry(&path[..at])
                .or_default()
                .insert(&path[at..end]);
            at = end + 1;
        }
    }
    let mut warnings = Vec::new();
    for (dir, names) in on_the_way {
        let mut fresh = BTreeSet::new();
        for name in names {
            if old.mode(&format!("{dir}{name}"))?.is_none() {
                fresh.insert(name);
            }
        }
        if fresh.is_empty() {
            continue;
        }
        let siblings = new.entry_names(dir.trim_end_matches('/'))?;
        let siblings: Vec<&str> = siblings.iter().map(String::as_str).collect();
        warnings.extend(collisions(dir, &siblings, Some(&|n| fresh.contains(n))));
    }
    Ok(warnings)
}

/// The [`Rule::EntryMode`] finding for the entry at `path` of `mode`.
fn entry_mode_finding(path: &str, mode: store::Mode) -> Finding {
    let root = if path.starts_with("finality") {
        FINALITY
    } else {
        LEDGER
    };
    Finding {
        path: path.to_owned(),
        rule: Rule::EntryMode,
        detail: format!(
            "{} (mode {mode}): only plain files (mode 100644) and directories belong under {root}/; a clone would not check out the bytes verified here",
            mode.describe()
        ),
    }
}

/// The finding for the malformed tree at `path` (its [`store::TreeDefect`]); a mode defect is
/// reported per entry as [`Rule::EntryMode`] instead.
fn tree_defect_finding(path: &str, defect: store::TreeDefect) -> Finding {
    use store::TreeDefect;
    let rule = match defect {
        TreeDefect::DuplicateName { .. } => Rule::TreeDuplicateEntry,
        TreeDefect::FileDirectoryConflict { .. } => Rule::TreeFileDirectoryConflict,
        TreeDefect::Unsorted { .. } => Rule::TreeUnsorted,
        TreeDefect::BadName { .. } => Rule::TreeBadName,
        TreeDefect::NotCanonical { .. } => Rule::TreeNotCanonical,
        TreeDefect::Mode { .. } => Rule::EntryMode,
    };
    Finding {
        path: path.to_owned(),
        rule,
        detail: format!(
            "malformed tree: {defect}; git resolves, checks out and lists such a tree inconsistently, and writers refuse to build on it (`git fsck` reports it too)"
        ),
    }
}

/// Malformed trees above the ledger roots: the root tree, `ledger` and `finality` (the trees
/// below `ledger/v1` and `finality/v1` are checked by the walks and the push diff).
fn check_upper_trees(snap: &Snapshot<'_>) -> Result<Vec<Finding>, Error> {
    let mut findings = Vec::new();
    for path in ["", "ledger", "finality"] {
        if let Some(defect) = snap.tree_defect_at(path)? {
            findings.push(tree_defect_finding(path, defect));
        }
    }
    Ok(findings)
}

/// Checks the directories on the way to `root` (`ledger`, then `ledger/v1`): each absent or a
/// directory. Returns the findings and whether `root` can be walked (it is a directory).
fn check_root(snap: &Snapshot<'_>, root: &str) -> Result<(Vec<Finding>, bool), Error> {
    let mut at = 0;
    loop {
        let end = root[at..].find('/').map_or(root.len(), |i| at + i);
        let path = &root[..end];
        match snap.mode(path)? {
            None => return Ok((Vec::new(), false)),
            Some(mode) if !mode.is_dir() => {
                return Ok((vec![entry_mode_finding(path, mode)], false));
            }
            Some(_) if end == root.len() => return Ok((Vec::new(), true)),
            Some(_) => at = end + 1,
        }
    }
}

/// Verifies the whole ledger at `commit` with the default [`Options`] (strict privacy).
pub fn verify_revision(store: &Store, commit: CommitId) -> Result<Report, Error> {
    verify_revision_with(store, commit, &Options::default())
}

/// Verifies the whole ledger at `commit`.
pub fn verify_revision_with(
    store: &Store,
    commit: CommitId,
    options: &Options,
) -> Result<Report, Error> {
    let snap = store.snapshot(Some(commit))?;
    let mut ctx = Ctx::new(&snap, options.privacy)?;
    let mut sets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Bindings as (kind, digest, content id): 53 bytes each instead of a path string, so that a
    // ledger of a million events is not held as a million paths; the path is rebuilt where it
    // is reported.
    let mut bindings: Vec<(Kind, Key, [u8; 20])> = Vec::new();
    let mut segment_files: Vec<String> = Vec::new();
    ctx.report.findings.extend(check_upper_trees(&snap)?);
    let (findings, walk_ledger) = check_root(&snap, LEDGER)?;
    ctx.report.findings.extend(findings);
    let mut malformed: Vec<Finding> = Vec::new();
    let mut walk = |visit: &mut dyn FnMut(&store::Walked<'_>)| {
        if walk_ledger {
            snap.for_each_entry_checked(LEDGER, visit, |path, defect| {
                malformed.push(tree_defect_finding(path, defect));
            })
        } else {
            Ok(())
        }
    };
    let mut siblings = Siblings::default();
    walk(&mut |entry| {
        siblings.visit(entry);
        if entry.mode.is_dir() {
            return;
        }
        if !entry.mode.is_regular_file() {
            ctx.report
                .findings
                .push(entry_mode_finding(entry.path, entry.mode));
        }
        // A submodule has no bytes: its path is reported above and holds no shard or binding.
        let Some(id) = entry.blob else {
            return;
        };
        let path = entry.path;
        if shard::parse_path(path).is_some() {
            sets.entry(set_key(path)).or_default().push(path.to_owned());
        } else if path == layout::RECORD_PATH {
            // Checked by `Ctx::new`.
        } else if let Some((kind, digest, path_layout)) = binding::classify(path) {
            if path_layout == ctx.layout {
                bindings.push((kind, digest.bytes(), id.bytes()));
            } else {
                ctx.mixed(path, path_layout);
            }
        } else if crate::ledger::segment::parse_path(path).is_some() {
            segment_files.push(path.to_owned());
        } else {
            ctx.finding(path, Rule::UnknownPath, "not a shard or binding path");
        }
    })?;
    ctx.report.findings.append(&mut malformed);
    bindings.sort_unstable_by_key(|b| (b.0, b.1));
    bindings.shrink_to_fit();
    ctx.index = Some(BindingIndex {
        claimed: vec![false; bindings.len()],
        entries: bindings,
    });
    // The walk's order is the trees' and is not sorted: parts are compared in path order.
    for members in sets.values_mut() {
        members.sort_unstable();
    }
    segment_files.sort_unstable();
    check_compacted(&mut ctx, &mut sets, &segment_files)?;
    let all: Vec<&Vec<String>> = sets.values().collect();
    check_sets_pipelined(&mut ctx, &all)?;
    ctx.claim_reserved_sets(&sets)?;
    let index = ctx.index.take().expect("set above");
    for ((kind, key, _), claimed) in index.entries.iter().zip(&index.claimed) {
        if !claimed {
            let (rule, detail) = orphan_rule(*kind);
            let path = kind.path(ctx.layout, &Digest::from_bytes(key));
            ctx.finding(&path, rule, detail);
        }
    }
    drop(index);
    ctx.settle_events();
    // Parents outside the ledger end a walk.
    ctx.find_cycles(None, |_, _| Ok(None))?;
    let (findings, walk_finality) = check_root(&snap, FINALITY)?;
    ctx.report.findings.extend(findings);
    if walk_finality {
        let mut malformed = Vec::new();
        snap.for_each_entry_checked(
            FINALITY,
            |entry| {
                siblings.visit(entry);
                if !entry.mode.is_dir() && !entry.mode.is_regular_file() {
                    ctx.report
                        .findings
                        .push(entry_mode_finding(entry.path, entry.mode));
                }
            },
            |path, defect| malformed.push(tree_defect_finding(path, defect)),
        )?;
        ctx.report.findings.append(&mut malformed);
        let finality = crate::finality::verify(&snap)?;
        ctx.report.findings.extend(finality);
    }
    ctx.report.warnings = siblings.finish();
    Ok(ctx.finish())
}

/// Verifies a push from `old` (`None` for a new ref) to `new` with the default [`Options`]
/// (strict privacy).
pub fn verify_range(store: &Store, old: Option<CommitId>, new: CommitId) -> Result<Report, Error> {
    verify_range_with(store, old, new, &Options::default())
}

/// Verifies a push from `old` (`None` for a new ref) to `new`.
pub fn verify_range_with(
    store: &Store,
    old: Option<CommitId>,
    new: CommitId,
    options: &Options,
) -> Result<Report, Error> {
    let snap = store.snapshot(Some(new))?;
    let mut ctx = Ctx::new(&snap, options.privacy)?;
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
    let mut compaction = crate::compact::RangeChanges::default();
    // Entry modes: the roots as they are at NEW, and every entry the push adds or changes.
    let (ledger_roots, _) = check_root(&snap, LEDGER)?;
    let (finality_roots, _) = check_root(&snap, FINALITY)?;
    ctx.report.findings.extend(ledger_roots);
    ctx.report.findings.extend(finality_roots);
    ctx.report.findings.extend(check_upper_trees(&snap)?);
    let store::TreeDiff {
        changes,
        irregular,
        malformed,
    } = store.diff_with_modes(old, new, LEDGER)?;
    let store::TreeDiff {
        changes: finality_changes,
        irregular: irregular_finality,
        malformed: malformed_finality,
    } = store.diff_with_modes(old, new, FINALITY)?;
    for (path, mode) in irregular.iter().chain(&irregular_finality) {
        ctx.report.findings.push(entry_mode_finding(path, *mode));
    }
    for (path, defect) in malformed.into_iter().chain(malformed_finality) {
        ctx.report.findings.push(tree_defect_finding(&path, defect));
    }
    let added = changes
        .iter()
        .chain(&finality_changes)
        .filter_map(|c| match c {
            Change::Added(p) => Some(p.as_str()),
            _ => None,
        })
        .chain(
            irregular
                .iter()
                .chain(&irregular_finality)
                .map(|(p, _)| p.as_str()),
        );
    ctx.report.warnings = added_collisions(&store.snapshot(old)?, &snap, added)?;
    for change in changes {
        match change {
            Change::Modified(p) if crate::ledger::segment::is_manifest_path(&p) => {
                compaction.modified_manifests.push(p)
            }
            Change::Deleted(p) if shard::parse_path(&p).is_some() => {
                compaction.deleted_shards.push(p)
            }
            Change::Modified(p) => {
                ctx.finding(&p, Rule::Modified, "an existing ledger file was changed")
            }
            Change::Deleted(p) => {
                ctx.finding(&p, Rule::Deleted, "an existing ledger file was deleted")
            }
            Change::Added(p) => {
                if shard::parse_path(&p).is_some() {
                    touched.insert(set_key(&p));
                } else if p == layout::RECORD_PATH {
                    // A record added to a ledger that already has content changes its layout.
                    if ctx.layout == Layout::Fanout && store.snapshot(old)?.is_dir(LEDGER)? {
                        ctx.finding(
                            &p,
                            Rule::LayoutMixed,
                            "a layout record added to an existing reference-layout ledger",
                        );
                    }
                } else if let Some((kind, _, path_layout)) = binding::classify(&p) {
                    if path_layout == ctx.layout {
                        added_bindings.push((p, kind));
                    } else {
                        ctx.mixed(&p, path_layout);
                    }
                } else if crate::ledger::segment::parse_path(&p).is_some() {
                    compaction.added.push(p);
                } else {
                    ctx.finding(&p, Rule::UnknownPath, "not a shard or binding path");
                }
            }
        }
    }
    let proof = crate::compact::check_range(store, old, &ctx.view, &compaction)?;
    report_compaction(&mut ctx, proof.problems);
    touched.extend(proof.shards.iter().map(|p| set_key(p)));
    let added: HashSet<String> = added_bindings.iter().map(|(p, _)| p.clone()).collect();
    let mut incoming = Vec::new();
    for key in &touched {
        let dir = key.rsplit_once('/').map_or("", |(d, _)| d);
        let members: Vec<String> = ctx
            .view
            .shard_paths_unchecked(dir)?
            .into_iter()
            .filter(|p| shard::parse_path(p).is_some() && set_key(p) == *key)
            .collect();
        incoming.extend(ctx.verify_set(&members)?);
    }
    ctx.settle_events();
    // An added event whose binding was already there was published before.
    for id in &incoming {
        let path = Kind::Event.path(ctx.layout, id);
        let bound = match snap.exists(&path) {
            Err(store::Error::NotAFile { .. }) => false,
            other => other?,
        };
        if !added.contains(&path) && bound {
            let shard = ctx
                .events
                .position(&id.bytes())
                .map(|i| ctx.shard_paths[ctx.events.seen[i].shard as usize].clone());
            ctx.finding(
                &shard.unwrap_or(path),
                Rule::DuplicateEvent,
                format!("event {id} was already published"),
            );
        }
    }
    for (path, kind) in added_bindings {
        if !ctx.is_claimed(&path) {
            let (rule, detail) = orphan_rule(kind);
            ctx.finding(&path, rule, detail);
        }
    }
    let mut reads = 0usize;
    let starts: Vec<Key> = incoming.iter().map(Digest::bytes).collect();
    ctx.find_cycles(Some(&starts), |ctx, key| {
        reads += 1;
        if reads > 262_144 {
            return Ok(None);
        }
        let id = Digest::from_bytes(key);
        let path = Kind::Event.path(ctx.layout, &id);
        Ok(ctx
            .read(&path, binding::MAX_BYTES)?
            .and_then(|t| binding::parse_event(&t, &id))
            .map(|(_, parent)| parent.as_ref().map(Digest::bytes)))
    })?;
    let finality = crate::finality::verify_range(store, old, new)?;
    ctx.report.findings.extend(finality);
    Ok(ctx.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{self, Value};
    use crate::publish::{self, Options};
    use std::path::Path;

    fn sig() -> store::Signature {
        store::Signature {
            name: "action-ledger".into(),
            email: "action-ledger@invalid".into(),
            time_seconds: 1_773_100_800,
        }
    }

    fn manifest_dir() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// Shard files of a finalize vector case, written below `root`.
    fn vector_shards(root: &Path, case: &str) {
        let text = std::fs::read_to_string(manifest_dir().join("testdata/conformance/shards.json"))
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let case = doc["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == case)
            .unwrap();
        for f in case["expected"]["output_files"].as_array().unwrap() {
            let p = root.join(f["path"].as_str().unwrap());
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, f["bytes"].as_str().unwrap()).unwrap();
        }
    }

    /// The clean base: day1 job 001 (four sets) and a two-part set of 1,500 events.
    struct Base {
        _dir: tempfile::TempDir,
        layout: Layout,
        store: Store,
        commit: CommitId,
        files: BTreeMap<String, String>,
    }

    fn base(layout: Layout) -> Base {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
        let mut options = Options::new(sig());
        options.layout = Some(layout);
        let day1 = manifest_dir()
            .join("testdata/corpus/day1/shards/001-openclaw-clawsweeper-review-r13550107154-a1");
        publish::publish(&store, &day1, &options).unwrap();
        let two = dir.path().join("two-part");
        vector_shards(&two, "events_1500_two_parts");
        let p = publish::publish(&store, &two, &options).unwrap();
        let commit = p.commit.unwrap();
        let snap = store.snapshot(Some(commit)).unwrap();
        let files = snap
            .list_files("")
            .unwrap()
            .into_iter()
            .map(|path| {
                let bytes = snap.read(&path, u64::MAX).unwrap().unwrap();
                (path, String::from_utf8(bytes).unwrap())
            })
            .collect();
        drop(snap);
        Base {
            _dir: dir,
            layout,
            store,
            commit,
            files,
        }
    }

    #[derive(Default)]
    struct Edits {
        put: Vec<(String, String)>,
        remove: Vec<String>,
    }

    impl Base {
        fn shards(&self) -> Vec<&String> {
            self.files
                .keys()
                .filter(|p| shard::parse_path(p).is_some())
                .collect()
        }
        /// The first single-part shard (a day1 set).
        fn single(&self) -> &String {
            self.shards()
                .into_iter()
                .find(|p| p.ends_with("-of-000001.jsonl"))
                .unwrap()
        }
        fn part(&self, i: u32) -> &String {
            let suffix = format!("-part-{i:06}-of-000002.jsonl");
            self.shards()
                .into_iter()
                .find(|p| p.ends_with(&suffix))
                .unwrap()
        }
        fn lines(&self, path: &str) -> Vec<String> {
            self.files[path].lines().map(str::to_owned).collect()
        }
        fn event(&self, path: &str, line: usize) -> Event {
            Event::parse_line(&self.lines(path)[line], "test").unwrap()
        }
        fn identity(&self, path: &str) -> ShardIdentity {
            let (date, _) = shard::parse_path(path).unwrap();
            self.event(path, 0)
                .shard_identity(&date)
                .normalized()
                .unwrap()
        }
        fn binding_path(&self, kind: Kind, path: &str) -> String {
            let id = self.identity(path);
            match kind {
                Kind::ShardSet => binding::shard_set(self.layout, &id, &[]).0,
                Kind::Completion => binding::completion(self.layout, &id, "").0,
                Kind::ProducerRun => binding::producer_run(self.layout, &id).0,
                Kind::Event => binding::event(self.layout, &self.event(path, 0)).0,
            }
        }
        fn replace_in(&self, path: &str, from: &str, to: &str) -> Edits {
            let text = &self.files[path];
            assert!(text.contains(from), "{from} not in {path}");
            Edits {
                put: vec![(path.to_owned(), text.replacen(from, to, 1))],
                ..Edits::default()
            }
        }
        fn set_lines(&self, path: &str, lines: &[String]) -> Edits {
            Edits {
                put: vec![(path.to_owned(), format!("{}\n", lines.join("\n")))],
                ..Edits::default()
            }
        }
        fn remove(&self, path: String) -> Edits {
            Edits {
                remove: vec![path],
                ..Edits::default()
            }
        }
        fn add(&self, path: &str, text: &str) -> Edits {
            Edits {
                put: vec![(path.to_owned(), text.to_owned())],
                ..Edits::default()
            }
        }
    }

    /// Re-derives `semantic_sha256` of a tampered record the way a forger would, so that the
    /// validator gets as far as the field rules.
    fn resign(v: &mut Value) {
        let Value::Object(m) = v else { panic!() };
        let mut semantic = m.clone();
        for k in [
            "schema",
            "schema_version",
            "event_id",
            "event_key",
            "semantic_sha256",
            "occurred_at",
            "occurred_at_source",
            "recorded_at",
        ] {
            semantic.remove(k);
        }
        let occurrence = if m.get("occurred_at_source").and_then(Value::as_str) == Some("source") {
            Value::object([
                ("occurred_at", m["occurred_at"].clone()),
                ("occurred_at_source", Value::str("source")),
            ])
        } else {
            Value::object([("occurred_at_source", Value::str("generated"))])
        };
        let digest = Digest::of(canonical::to_canonical_unchecked(&Value::object([
            ("occurrence", occurrence),
            ("semantic", Value::Object(semantic)),
        ])));
        m.insert("semantic_sha256".into(), Value::str(digest.as_str()));
    }

    fn forge_line(b: &Base, path: &str, edit: impl Fn(&mut BTreeMap<String, Value>)) -> Edits {
        let mut lines = b.lines(path);
        let mut v = canonical::parse(&lines[0]).unwrap();
        if let Value::Object(m) = &mut v {
            edit(m);
        }
        resign(&mut v);
        lines[0] = canonical::to_canonical_unchecked(&v);
        b.set_lines(path, &lines)
    }

    /// All bindings of `shards` as the publisher writes them.
    fn with_bindings(
        layout: Layout,
        shards: &[Shard],
        id: &ShardIdentity,
        skip_run: bool,
    ) -> Edits {
        let mut put: Vec<(String, String)> = shards
            .iter()
            .map(|s| (s.path.clone(), s.content.clone()))
            .collect();
        let refs: Vec<&Shard> = shards.iter().collect();
        let (rp, rt) = binding::shard_set(layout, id, &refs);
        put.push(binding::completion(layout, id, &rt));
        put.push((rp, rt));
        if !skip_run {
            put.push(binding::producer_run(layout, id));
        }
        for s in shards {
            for e in &s.events {
                put.push(binding::event(layout, e));
            }
        }
        Edits {
            put,
            ..Edits::default()
        }
    }

    fn mutate(b: &Base, name: &str) -> Edits {
        let fake = "f".repeat(64);
        match name {
            "tamper_shard_byte" => b.replace_in(b.single(), "\"retryable\":", "\"retryable\": "),
            "non_canonical_line" => b.replace_in(b.single(), "{\"action\":{", "{\"action\": {"),
            "empty_shard" => b.add(b.single(), ""),
            "events_out_of_order" => {
                let mut l = b.lines(b.single());
                let last = l.len() - 1;
                l.swap(0, last);
                b.set_lines(b.single(), &l)
            }
            "duplicate_line" => {
                let mut l = b.lines(b.single());
                let first = l[0].clone();
                l.insert(1, first);
                b.set_lines(b.single(), &l)
            }
            "secret_in_attribute" => forge_line(b, b.single(), |m| {
                let mut attrs = match m.get("attributes") {
                    Some(Value::Object(a)) => a.clone(),
                    _ => BTreeMap::new(),
                };
                attrs.insert("model".into(), Value::str("alice@example.com"));
                m.insert("attributes".into(), Value::Object(attrs));
            }),
            "private_host_in_subject" => forge_line(b, b.single(), |m| {
                if let Some(Value::Object(s)) = m.get_mut("subject") {
                    s.insert("subject_id".into(), Value::str("10.1.2.3"));
                }
            }),
            "shard_wrong_path" => {
                let from = b.single().clone();
                let to = from.replacen("/13550107154-", "/13550107155-", 1);
                assert_ne!(from, to);
                Edits {
                    put: vec![(to, b.files[&from].clone())],
                    remove: vec![from],
                }
            }
            "missing_part" => b.remove(b.part(2).clone()),
            "part_count_changed" => {
                let from = b.part(2).clone();
                Edits {
                    put: vec![(
                        from.replace("-of-000002", "-of-000003"),
                        b.files[&from].clone(),
                    )],
                    remove: vec![from],
                }
            }
            "repacked_parts" => {
                let (p1, p2) = (b.part(1).clone(), b.part(2).clone());
                let mut l1 = b.lines(&p1);
                let mut l2 = b.lines(&p2);
                l2.insert(0, l1.pop().unwrap());
                let mut e = b.set_lines(&p1, &l1);
                e.put.extend(b.set_lines(&p2, &l2).put);
                e
            }
            "missing_reservation" => b.remove(b.binding_path(Kind::ShardSet, b.single())),
            "reservation_wrong_digest" => {
                let path = b.binding_path(Kind::ShardSet, b.single());
                let text = &b.files[&path];
                let at = text.find("\"replay_sha256\":\"").unwrap() + 17;
                let forged = format!("{}{}{}", &text[..at], "0".repeat(64), &text[at + 64..]);
                b.add(&path, &forged)
            }
            "reservation_non_canonical" => {
                let path = b.binding_path(Kind::ShardSet, b.single());
                b.replace_in(&path, "{\"producer\":", "{ \"producer\":")
            }
            "missing_completion" => b.remove(b.binding_path(Kind::Completion, b.single())),
            "forged_completion" => {
                let path = b.binding_path(Kind::Completion, b.single());
                let text = &b.files[&path];
                let at = text.find("\"reservation_sha256\":\"").unwrap() + 22;
                let forged = format!("{}{}{}", &text[..at], "0".repeat(64), &text[at + 64..]);
                b.add(&path, &forged)
            }
            "completion_non_canonical" => {
                let path = b.binding_path(Kind::Completion, b.single());
                b.replace_in(&path, "{\"producer\":", "{\"producer\" :")
            }
            "missing_producer_run" => b.remove(b.binding_path(Kind::ProducerRun, b.single())),
            "producer_run_other_date" => {
                let path = b.binding_path(Kind::ProducerRun, b.single());
                b.replace_in(
                    &path,
                    "\"partition_date\":\"2026-03-10\"",
                    "\"partition_date\":\"2026-03-11\"",
                )
            }
            "missing_event_binding" => b.remove(b.binding_path(Kind::Event, b.single())),
            "event_binding_other_semantic" => {
                let path = b.binding_path(Kind::Event, b.single());
                let text = &b.files[&path];
                let at = text.find("\"semantic_sha256\":\"").unwrap() + 19;
                b.add(
                    &path,
                    &format!("{}{}{}", &text[..at], "0".repeat(64), &text[at + 64..]),
                )
            }
            "event_binding_other_parent" => {
                let path = b.binding_path(Kind::Event, b.single());
                let text = b.files[&path].clone();
                let forged = if text.contains("\"parent_event_id\":null") {
                    text.replace(
                        "\"parent_event_id\":null",
                        &format!("\"parent_event_id\":\"{fake}\""),
                    )
                } else {
                    let at = text.find("\"parent_event_id\":\"").unwrap() + 19;
                    format!("{}{}{}", &text[..at], fake, &text[at + 64..])
                };
                b.add(&path, &forged)
            }
            "event_binding_malformed" => b.add(&b.binding_path(Kind::Event, b.single()), "{}\n"),
            "orphan_event_binding" => {
                let d = Digest::parse(&fake).unwrap();
                b.add(
                    &Kind::Event.path(b.layout, &d),
                    &format!("{{\"event_id\":\"{fake}\",\"parent_event_id\":null,\"schema\":\"{}\",\"schema_version\":1,\"semantic_sha256\":\"{fake}\"}}\n", binding::EVENT_SCHEMA),
                )
            }
            "orphan_reservation" => b.add(
                &Kind::ShardSet.path(b.layout, &Digest::parse(&fake).unwrap()),
                "{}\n",
            ),
            "orphan_completion" => b.add(
                &Kind::Completion.path(b.layout, &Digest::parse(&fake).unwrap()),
                "{}\n",
            ),
            "orphan_producer_run" => b.add(
                &Kind::ProducerRun.path(b.layout, &Digest::parse(&fake).unwrap()),
                "{}\n",
            ),
            "unknown_file" => b.add("ledger/v1/notes.txt", "hello\n"),
            "unknown_binding_kind" => {
                b.add(&format!("{}/other/{fake}.json", binding::ROOT), "{}\n")
            }
            "duplicate_event_across_sets" => {
                let mut id = b.identity(b.single());
                id.partition_date = "2026-03-11".into();
                let shards = shard::pack(&id, vec![b.event(b.single(), 0)]).unwrap();
                with_bindings(b.layout, &shards, &id, true)
            }
            "cross_set_causal_cycle" => {
                let text = std::fs::read_to_string(
                    manifest_dir().join("testdata/conformance/import.json"),
                )
                .unwrap();
                let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
                let case = doc["cases"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["id"] == "cycle_within_batch")
                    .unwrap();
                let files = case["source_trees"]["cycle_both"].as_array().unwrap();
                let mut edits = Edits::default();
                for f in files {
                    let path = f["path"].as_str().unwrap();
                    let events = shard::parse_content(f["bytes"].as_str().unwrap(), path).unwrap();
                    let (date, _) = shard::parse_path(path).unwrap();
                    let id = events[0].shard_identity(&date).normalized().unwrap();
                    let s = shard::pack(&id, events).unwrap();
                    assert_eq!(s[0].path, path);
                    edits
                        .put
                        .extend(with_bindings(b.layout, &s, &id, false).put);
                }
                edits
            }
            "binding_in_other_layout" => {
                let from = b.binding_path(Kind::Event, b.single());
                let (kind, digest, _) = binding::classify(&from).unwrap();
                let other = match b.layout {
                    Layout::Reference => Layout::Fanout,
                    Layout::Fanout => Layout::Reference,
                };
                Edits {
                    put: vec![(kind.path(other, &digest), b.files[&from].clone())],
                    remove: vec![from],
                }
            }
            "layout_record_damaged" => b.add(layout::RECORD_PATH, "{\"layout\":\"fanout\"}\n"),
            other => panic!("unknown mutation {other} in testdata/verify/cases.json"),
        }
    }

    /// Every broken ledger of testdata/verify/cases.json is reported with exactly its rules;
    /// the base itself is clean.
    #[test]
    fn planted_defects_are_reported_by_rule_in_the_reference_layout() {
        planted_defects_are_reported_by_rule(Layout::Reference);
    }

    #[test]
    fn planted_defects_are_reported_by_rule_in_the_fanout_layout() {
        planted_defects_are_reported_by_rule(Layout::Fanout);
    }

    fn planted_defects_are_reported_by_rule(layout: Layout) {
        let b = base(layout);
        let clean = verify_revision(&b.store, b.commit).unwrap();
        assert!(clean.is_clean(), "base: {:?}", clean.findings);
        assert_eq!(clean.shards, 6);
        let text =
            std::fs::read_to_string(manifest_dir().join("testdata/verify/cases.json")).unwrap();
        let doc = canonical::parse(&text).unwrap();
        let cases = doc.get("cases").and_then(Value::as_array).unwrap();
        assert!(cases.len() >= 25);
        let mut failures = Vec::new();
        for case in cases {
            let id = case.get("id").and_then(Value::as_str).unwrap();
            let edits = mutate(&b, case.get("mutation").and_then(Value::as_str).unwrap());
            let put: Vec<(String, Vec<u8>)> = edits
                .put
                .into_iter()
                .map(|(p, t)| (p, t.into_bytes()))
                .collect();
            let commit = b
                .store
                .write_commit_with(Some(b.commit), &put, &edits.remove, true, id, &sig())
                .unwrap();
            let report = verify_revision(&b.store, commit).unwrap();
            let got: BTreeSet<&str> = report.findings.iter().map(|f| f.rule.code()).collect();
            let want: BTreeSet<&str> = case
                .get(&format!("expect_{}", layout.name()))
                .or_else(|| case.get("expect"))
                .and_then(Value::as_array)
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            if got != want {
                failures.push(format!("{id}: want {want:?}, got {:#?}", report.findings));
            }
            // A push of the same defect is refused too (unless it only removes a file, which
            // the range check reports as a deletion).
            let range = verify_range(&b.store, Some(b.commit), commit).unwrap();
            if range.is_clean() {
                failures.push(format!("{id}: the push range was accepted"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// Commits `bytes` at `path` on top of `base` (create or replace).
    fn commit_bytes(b: &Base, base: CommitId, path: &str, bytes: Vec<u8>) -> CommitId {
        b.store
            .write_commit_with(
                Some(base),
                &[(path.to_owned(), bytes)],
                &[],
                true,
                "edit",
                &sig(),
            )
            .unwrap()
    }

    /// A stored shard over the 2 MiB cap or with bytes that are not UTF-8 is reported under the
    /// rule it breaks, in the words `publish` uses for such a source file (not "must end with a
    /// newline"), by a whole-revision verify and by a push range; one broken shard is one
    /// finding (its bindings are still accounted for).
    #[test]
    fn shards_over_the_cap_or_not_utf8_name_the_rule_they_break() {
        let b = base(Layout::Fanout);
        let parent = b.store.parents(b.commit).unwrap()[0];
        let path = b.part(1).clone();
        let text = b.files[&path].as_bytes().to_vec();
        let at = b.files[&path].find("\"event_type\":\"").unwrap() + 14;
        let splice = |bad: &[u8]| {
            let mut v = text[..at].to_vec();
            v.extend_from_slice(bad);
            v.extend_from_slice(&text[at..]);
            v
        };
        let padded = |len: usize| {
            let mut v = text.clone();
            v.resize(len, b' ');
            v
        };
        let repeated = {
            let mut v = Vec::new();
            while v.len() <= 3 * shard::MAX_BYTES {
                v.extend_from_slice(&text);
            }
            v
        };
        let not_utf8 = format!("invalid UTF-8 in action event shard file: {path}");
        let too_large = format!("action event shard file exceeds 2097152 byte limit: {path}");
        let members: Vec<(&str, Vec<u8>, &str)> = vec![
            ("a 0xFF byte", splice(b"\xff"), &not_utf8),
            ("a lone continuation byte", splice(b"\x80"), &not_utf8),
            ("a truncated two-byte sequence", splice(b"\xc3"), &not_utf8),
            ("an overlong '/'", splice(b"\xc0\xaf"), &not_utf8),
            ("an encoded surrogate", splice(b"\xed\xa0\x80"), &not_utf8),
            (
                "one byte over the cap",
                padded(shard::MAX_BYTES + 1),
                &too_large,
            ),
            ("its lines repeated past 6 MiB", repeated, &too_large),
        ];
        for (name, bytes, detail) in members {
            let commit = commit_bytes(&b, b.commit, &path, bytes);
            let want = vec![Finding {
                path: path.clone(),
                rule: Rule::ShardInvalid,
                detail: detail.to_owned(),
            }];
            let whole = verify_revision(&b.store, commit).unwrap();
            assert_eq!(whole.findings, want, "{name}: whole revision");
            // The same tree pushed onto the commit before the set was published.
            let range = verify_range(&b.store, Some(parent), commit).unwrap();
            assert_eq!(range.findings, want, "{name}: push range");
        }
        // At exactly the cap the size is not the problem (the padding is).
        let commit = commit_bytes(&b, b.commit, &path, padded(shard::MAX_BYTES));
        let whole = verify_revision(&b.store, commit).unwrap();
        assert_eq!(whole.findings.len(), 1);
        assert_eq!(whole.findings[0].rule, Rule::ShardInvalid);
        assert!(
            !whole.findings[0].detail.contains("byte limit"),
            "{:?}",
            whole.findings
        );
    }

    /// Runs git with `GIT_INDEX_FILE=index` in the bare repository `git_dir`; returns stdout.
    fn git(git_dir: &Path, index: &Path, args: &[&str], stdin: &[u8]) -> String {
        use std::io::Write as _;
        let mut child = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(git_dir)
            .args(args)
            .env("GIT_INDEX_FILE", index)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@invalid")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
    }

    /// A commit on `base` (with git plumbing, as a user would make it) in which everything at
    /// or below `path` is replaced by one entry of `mode` holding `object`.
    fn commit_with_mode(
        store: &Store,
        base: CommitId,
        path: &str,
        mode: &str,
        object: &str,
    ) -> CommitId {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("index");
        let g = |args: &[&str], stdin: &[u8]| git(store.git_dir(), &index, args, stdin);
        g(&["read-tree", &base.to_hex()], b"");
        let below: String = g(&["ls-files", "-z", "--", path], b"")
            .split('\0')
            .filter(|p| !p.is_empty())
            .map(|p| format!("0 {}\t{p}\n", "0".repeat(40)))
            .collect();
        g(&["update-index", "--index-info"], below.as_bytes());
        g(
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("{mode},{object},{path}"),
            ],
            b"",
        );
        let tree = g(&["write-tree"], b"");
        let commit = g(
            &["commit-tree", &tree, "-p", &base.to_hex(), "-m", "mode"],
            b"",
        );
        CommitId::from_hex(&commit).unwrap()
    }

    /// Entries that are not plain `100644` files (symbolic links, executables, submodules) are
    /// `entry-mode` findings naming the path and the mode, at a shard, a binding, a finality
    /// record and at directory positions, in a whole revision and in a push range; the same
    /// bytes in a link or an executable are otherwise accepted (one finding).
    #[test]
    fn entries_that_are_not_plain_files_are_reported_with_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
        let options = Options::new(sig());
        let jobs = manifest_dir().join("testdata/corpus/day1/shards");
        let first = publish::publish(
            &store,
            &jobs.join("001-openclaw-clawsweeper-review-r13550107154-a1"),
            &options,
        )
        .unwrap()
        .commit
        .unwrap();
        publish::publish(
            &store,
            &jobs.join("008-openclaw-clawsweeper-repair-worker-r13550308979-a1"),
            &options,
        )
        .unwrap();
        let action = crate::finality::NewAction {
            action_id: crate::finality::ActionId::parse("act_deploy").unwrap(),
            agent_id: "deploy-bot".into(),
            principal: "ci-key-7".into(),
            act: None,
            guard_decision_id: Some("gd_1".into()),
            verdict: crate::finality::Verdict::parse("allow").unwrap(),
            client_capabilities: vec![crate::finality::EXECUTION_CLAIMS.to_owned()],
            identity_verified: false,
            containment_ref: None,
            lifecycle: None,
        };
        let tip = crate::finality::create_action(
            &store,
            &crate::finality::Options::new(sig()),
            &action,
            1_773_100_800_000,
        )
        .unwrap()
        .commit
        .unwrap();
        assert!(verify_revision(&store, tip).unwrap().is_clean());
        let snap = store.snapshot(Some(tip)).unwrap();
        let all = snap.list_files("").unwrap();
        let added = store.diff(Some(first), tip, "").unwrap();
        let added: Vec<&str> = added.iter().map(Change::path).collect();
        let pick = |f: &dyn Fn(&str) -> bool| -> String {
            added.iter().find(|p| f(p)).unwrap().to_string()
        };
        let shard_path = pick(&|p| shard::parse_path(p).is_some());
        let binding_path =
            pick(&|p| binding::classify(p).is_some_and(|(k, _, _)| k == Kind::Event));
        let record = pick(&|p| p.ends_with("/action.json"));
        let producer_dir = shard_path.rsplit_once('/').unwrap().0.to_owned();
        let action_dir = record.rsplit_once('/').unwrap().0.to_owned();
        let fanout_dir = binding_path.rsplit_once('/').unwrap().0.to_owned();
        assert!(all.contains(&shard_path) && all.contains(&binding_path));
        let blob_of = |path: &str| snap.file_id(path).unwrap().unwrap().to_string();
        let link_target = BlobId::of(b"../../elsewhere").unwrap().to_string();
        // The link's blob must exist for git to write the tree.
        let index = dir.path().join("scratch-index");
        let written = git(
            store.git_dir(),
            &index,
            &["hash-object", "-w", "--stdin"],
            b"../../elsewhere",
        );
        assert_eq!(written, link_target);
        let commit_id = tip.to_hex();
        // (position, path, whether its bytes stay those verified)
        let positions: Vec<(&str, &str, bool)> = vec![
            ("shard", &shard_path, true),
            ("event binding", &binding_path, true),
            ("finality record", &record, true),
            ("producer directory", &producer_dir, false),
            ("binding fan-out directory", &fanout_dir, false),
            ("action directory", &action_dir, false),
            ("ledger root", "ledger/v1", false),
            ("ledger directory", "ledger", false),
            ("finality root", "finality/v1", false),
        ];
        for (position, path, same_bytes) in positions {
            for mode in ["120000", "100755", "160000"] {
                let object = match mode {
                    "160000" => commit_id.clone(),
                    _ if same_bytes => blob_of(path),
                    _ => link_target.clone(),
                };
                let name = format!("{position} {path} as {mode}");
                let commit = commit_with_mode(&store, tip, path, mode, &object);
                let wanted = |report: &Report| {
                    report.findings.iter().any(|f| {
                        f.path == path
                            && f.rule == Rule::EntryMode
                            && f.detail.contains(&format!("(mode {mode})"))
                    })
                };
                let whole = verify_revision(&store, commit).unwrap();
                assert!(wanted(&whole), "{name}: whole {:#?}", whole.findings);
                if same_bytes && mode != "160000" {
                    assert_eq!(whole.findings.len(), 1, "{name}: {:#?}", whole.findings);
                }
                // Pushed onto the tip, and as part of the publication that adds the path.
                for old in [tip, first] {
                    let range = verify_range(&store, Some(old), commit).unwrap();
                    assert!(wanted(&range), "{name}: range {:#?}", range.findings);
                    if old == first && same_bytes && mode != "160000" {
                        assert_eq!(range.findings.len(), 1, "{name}: {:#?}", range.findings);
                    }
                }
                let new_ref = verify_range(&store, None, commit).unwrap();
                assert!(wanted(&new_ref), "{name}: new ref {:#?}", new_ref.findings);
            }
        }
    }

    #[test]
    fn names_fold_with_full_case_folding_and_nfc() {
        let same = [
            ("Review", "review"),
            ("Straße", "STRASSE"),
            ("straße", "strasse"),
            ("\u{1e9e}", "ss"),
            ("\u{c9}", "E\u{301}"),
            ("\u{e9}", "E\u{301}"),
            ("\u{fb01}le", "FILE"),
            ("\u{17f}tep", "Step"),
            ("\u{212a}elvin", "kelvin"),
            ("\u{212b}", "\u{e5}"),
            ("όσος", "ΌΣΟΣ"),
            ("όσοσ", "όσος"),
        ];
        for (a, b) in same {
            assert_eq!(fold_key(a), fold_key(b), "{a:?} {b:?}");
            assert_eq!(collisions("d/", &[a, b], None).len(), 1, "{a:?} {b:?}");
        }
        let apart = [
            ("review", "reviews"),
            ("Straße", "Strase"),
            ("\u{c9}", "E"),
            ("\u{130}", "i"),
            ("\u{131}", "I"),
            ("a-b", "a_b"),
            ("kelvin", "kelvin."),
        ];
        for (a, b) in apart {
            assert_ne!(fold_key(a), fold_key(b), "{a:?} {b:?}");
            assert!(collisions("d/", &[a, b], None).is_empty(), "{a:?} {b:?}");
        }
        // Three names that fold alike are three pairs; each pair is named once, by the first.
        let three = collisions("d/", &["b", "B", "\u{ff22}"], None);
        assert_eq!(three.len(), 1, "fullwidth B is not B: {three:?}");
        let three = collisions("d/", &["READ", "Read", "read"], None);
        let paths: Vec<&str> = three.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["d/READ", "d/READ", "d/Read"]);
        assert!(three[0].detail.contains("d/Read is the same name"));
    }

    /// Sibling names that a case-insensitive file system folds into one are reported as
    /// warnings (each pair once), which leave the report's findings alone, in a whole revision
    /// and in the push that brings them; near misses are not reported.
    #[test]
    fn case_insensitive_collisions_are_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main").unwrap();
        let job = manifest_dir()
            .join("testdata/corpus/day1/shards/001-openclaw-clawsweeper-review-r13550107154-a1");
        let base = publish::publish(&store, &job, &Options::new(sig()))
            .unwrap()
            .commit
            .unwrap();
        let put = |base: CommitId, names: &[&str]| {
            let files: Vec<(String, Vec<u8>)> = names
                .iter()
                .map(|n| (format!("ledger/v1/notes/{n}"), b"x\n".to_vec()))
                .collect();
            store
                .write_commit_with(Some(base), &files, &[], false, "notes", &sig())
                .unwrap()
        };
        let pairs = [
            ("STRASSE.txt", "Straße.txt"),
            ("E\u{301}.txt", "\u{c9}.txt"),
            ("FILE.txt", "\u{fb01}le.txt"),
            ("kelvin.txt", "\u{212a}elvin.txt"),
            ("Docs/a.txt", "docs/b.txt"),
        ];
        let near = [
            "Strase.txt",
            "E.txt",
            "\u{130}.txt",
            "i.txt",
            "kelvins.txt",
            "doc/c.txt",
        ];
        let mut names: Vec<&str> = pairs.iter().flat_map(|(a, b)| [*a, *b]).collect();
        names.extend(near);
        let commit = put(base, &names);
        let key = |r: &Report| -> BTreeSet<(String, String)> {
            r.warnings
                .iter()
                .map(|w| {
                    assert_eq!(w.rule, Rule::CaseCollision);
                    let other = w.detail.split(' ').nth(1).unwrap().to_owned();
                    (w.path.clone(), other)
                })
                .collect()
        };
        let want: BTreeSet<(String, String)> = pairs
            .iter()
            .map(|(a, b)| {
                let top = |n: &str| format!("ledger/v1/notes/{}", n.split('/').next().unwrap());
                (top(a), top(b))
            })
            .collect();
        let whole = verify_revision(&store, commit).unwrap();
        assert_eq!(key(&whole), want, "{:#?}", whole.warnings);
        assert_eq!(whole.warnings.len(), pairs.len());
        assert!(
            whole.findings.iter().all(|f| f.rule == Rule::UnknownPath),
            "{:#?}",
            whole.findings
        );
        let range = verify_range(&store, Some(base), commit).unwrap();
        assert_eq!(key(&range), want, "{:#?}", range.warnings);
        // Only the pairs a push brings: another near miss adds none, a new twin adds one.
        let later = put(commit, &["Kelvins.txt.bak"]);
        assert!(
            verify_range(&store, Some(commit), later)
                .unwrap()
                .warnings
                .is_empty()
        );
        let twin = put(commit, &["KELVIN.txt"]);
        let report = verify_range(&store, Some(commit), twin).unwrap();
        assert_eq!(report.warnings.len(), 2, "{:#?}", report.warnings);
        assert!(
            report
                .warnings
                .iter()
                .all(|w| w.path.ends_with("/KELVIN.txt")),
            "{:#?}",
            report.warnings
        );
        // The clean base has none.
        let clean = verify_revision(&store, base).unwrap();
        assert!(clean.is_clean() && clean.warnings.is_empty());
    }

    #[test]
    fn range_accepts_a_valid_publication_and_refuses_history_rewrites() {
        let b = base(Layout::Fanout);
        let first = b.store.parents(b.commit).unwrap()[0];
        let report = verify_range(&b.store, Some(first), b.commit).unwrap();
        assert!(report.is_clean(), "{:?}", report.findings);
        let report = verify_range(&b.store, None, b.commit).unwrap();
        assert!(report.is_clean(), "{:?}", report.findings);
        // Rewinding is not a descendant.
        let report = verify_range(&b.store, Some(b.commit), first).unwrap();
        assert_eq!(report.findings[0].rule, Rule::NotDescendant);
        assert_eq!(b.store.resolve("main~1").unwrap(), first);
        assert_eq!(b.store.resolve("HEAD").unwrap(), b.commit);
        assert_eq!(b.store.resolve(&b.commit.to_hex()).unwrap(), b.commit);
        assert!(b.store.resolve("nope").is_err());
    }
}
