//! The state of one verification ([`Ctx`]): the snapshot, the layout, the report, the
//! bindings claimed so far and the events seen across sets (for duplicates, orphans and cycles).

use super::*;

/// State shared across the sets of one verification.
pub(super) struct Ctx<'s, 'r> {
    /// The snapshot, read with compacted shards present.
    pub(super) view: crate::view::View<'s, 'r>,
    /// The repository's layout: where the bindings the publisher writes must be.
    pub(super) layout: Layout,
    pub(super) report: Report,
    /// Whole revision: every binding file of the repository's layout with its content id, read
    /// from one walk of the tree. Bindings are then checked by comparing ids (no blob is read,
    /// no path is looked up) and claimed in place.
    pub(super) index: Option<BindingIndex>,
    /// Push range (no index): bindings that a verified set accounts for. Fixed-size keys, no
    /// allocation per entry.
    pub(super) claimed: HashSet<(Kind, Key)>,
    /// Every event seen: parent edge and the shard it was first seen in.
    pub(super) events: Events,
    pub(super) shard_paths: Vec<String>,
    pub(super) privacy: Profile,
    /// Whole revision: the content id of each shard file the tree walk met, so that the shard
    /// is read by id, without looking its path up again. `None` for a path the walk met twice
    /// (a malformed tree with a duplicate entry), which is then read by path as before.
    pub(super) shard_ids: HashMap<String, Option<BlobId>>,
}

impl<'s, 'r> Ctx<'s, 'r> {
    /// A context for `snap`, with its layout read from the tree (an unreadable record is a
    /// finding; the bindings are then expected where the reference puts them).
    pub(super) fn new(snap: &'s Snapshot<'r>, privacy: Profile) -> Result<Self, Error> {
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
            shard_ids: HashMap::new(),
        })
    }

    /// Reports a binding at a path of `found`, the layout the repository does not use.
    pub(super) fn mixed(&mut self, path: &str, found: Layout) {
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

    pub(super) fn claim(&mut self, path: &str) {
        if let Some((kind, digest, _)) = binding::classify(path) {
            self.claim_key(kind, digest.bytes());
        }
    }

    pub(super) fn claim_key(&mut self, kind: Kind, key: Key) {
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
    pub(super) fn is_claimed(&self, path: &str) -> bool {
        binding::classify(path)
            .is_some_and(|(kind, d, _)| self.claimed.contains(&(kind, d.bytes())))
    }

    /// The content id of the binding file at `path` (built by [`Kind::path`] in this layout),
    /// `None` if it is absent: from the index, or from the trees for a range.
    pub(super) fn binding_id(&self, path: &str) -> Result<Option<BlobId>, Error> {
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
    pub(super) fn read_binding(&self, id: BlobId, path: &str) -> Result<String, Error> {
        match self.view.snapshot().read_blob(id, path, binding::MAX_BYTES) {
            Ok(bytes) => Ok(String::from_utf8(bytes).unwrap_or_else(|_| String::from("\u{fffd}"))),
            Err(store::Error::TooLarge { .. }) => Ok(String::from("\u{fffd}")),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn finding(&mut self, path: &str, rule: Rule, detail: impl Into<String>) {
        self.report.findings.push(Finding {
            path: path.to_owned(),
            rule,
            detail: detail.into(),
        });
    }

    /// A shard file for [`prepare`]: its text, or the rule it breaks when it is over
    /// [`shard::MAX_BYTES`] or not UTF-8 (named as `publish` names them).
    pub(super) fn read_shard(&self, path: &str) -> Result<ShardRead, Error> {
        let max = shard::MAX_BYTES as u64;
        let read = match self.shard_ids.get(path) {
            Some(Some(id)) => self.view.snapshot().read_blob(*id, path, max).map(Some),
            _ => self.view.read_unchecked(path, max),
        };
        match read {
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
    pub(super) fn read(&mut self, path: &str, max: u64) -> Result<Option<String>, Error> {
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
    pub(super) fn expect_binding(
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

    pub(super) fn expect_binding_id(
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
}

impl Ctx<'_, '_> {
    /// Sorts the events seen by id and reports every id seen again after its first shard
    /// (call once, after the last set).
    pub(super) fn settle_events(&mut self) {
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
    pub(super) fn find_cycles(
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

    pub(super) fn finish(mut self) -> Report {
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
pub(super) struct BindingIndex {
    pub(super) entries: Vec<(Kind, Key, [u8; 20])>,
    pub(super) claimed: Vec<bool>,
}

impl BindingIndex {
    pub(super) fn find(&self, kind: Kind, key: &Key) -> Option<usize> {
        self.entries
            .binary_search_by(|(k, d, _)| (*k, d).cmp(&(kind, key)))
            .ok()
    }
}

/// An event seen in a verified set: its id, its parent edge and the index of its shard in
/// `Ctx::shard_paths`.
#[derive(Clone, Copy)]
pub(super) struct Seen {
    pub(super) id: Key,
    pub(super) parent: Option<Key>,
    pub(super) shard: u32,
}

/// The events seen across the ledger, appended set by set and sorted by id once all sets are
/// read: a sorted vector holds them in less memory than a hash map.
#[derive(Default)]
pub(super) struct Events {
    pub(super) seen: Vec<Seen>,
}

impl Events {
    pub(super) fn push(&mut self, seen: Seen) {
        self.seen.push(seen);
    }

    /// Sorts by id (then shard: the first seen stays first), keeps the first of each id and
    /// returns every later one with the one it repeats. Unstable sort: no buffer of half the
    /// events (shards are numbered in the order they are seen, and a shard that repeats an id
    /// within itself never gets here).
    pub(super) fn settle(&mut self) -> Vec<(Seen, Seen)> {
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
    pub(super) fn position(&self, id: &Key) -> Option<usize> {
        self.seen.binary_search_by(|s| s.id.cmp(id)).ok()
    }
}
pub(super) fn orphan_rule(kind: Kind) -> (Rule, &'static str) {
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
