//! Tree layouts of the finality records: where an action's directory and a guard decision's
//! file live, as a function of the layout the repository records.
//!
//! ```text
//! flat    finality/v1/actions/<h[0:2]>/<id>/…             finality/v1/decisions/<h[0:2]>/<id>.json
//! nibble  finality/v1/actions/<h0>/<h1>/…/<h5>/<id>/…     finality/v1/decisions/<h0>/…/<h5>/<id>.json
//! hex2x2  finality/v1/actions/<h[0:2]>/<h[2:4]>/<id>/…    finality/v1/decisions/<h[0:2]>/<h[2:4]>/<id>.json
//! ```
//!
//! `h` is the hex SHA-256 of the id text; `h0`…`h5` its first six hex digits, one directory
//! level each; `h[0:2]` its first two. Every layout holds identical record bytes; they differ
//! only in the directories above an action directory (or a decision file). `nibble` and
//! `hex2x2` also keep the pending index ([`super::pending`]); `flat` does not, and its sweep
//! walks every action. New repositories get `hex2x2`.
//!
//! # Why two levels of 256
//!
//! A write rewrites every tree on the path of each file it adds. What that costs the repository
//! is not the trees' bytes but their number: every object costs its index entry (28 bytes), its
//! pack header and a zlib stream, and the roll-up ([`crate::store`]'s consolidation) stores a new
//! version of a tree as a delta against the one it replaced, so a one-entry change to a wide
//! tree costs tens of bytes whatever the tree's width. Measured with
//! `scripts/bench-finality-layouts.sh`, which replays a real `serve` history (guard with
//! `record=true`, claim and outcome from 64 clients) under each fan-out, bytes of trees and
//! commits that one action added to a history of about 24,000 and 96,000 actions, with deltas
//! against what was there (the blobs, about 0.6 KB an action, are the same in every layout):
//!
//! | layout | trees an action | 24k | 96k | leaves (directories above an id) |
//! |---|---|---|---|---|
//! | `nibble` (six levels of 16) | 22 | 2,802 | 2,915 | 16.7 million |
//! | `<h[0:2]>/<h[2:4]>/<h[4:6]>` | 13 | — | 2,494 | 16.7 million |
//! | `hex2x2` (two levels of 256) | 9 | 1,784 | 1,933 | 65,536 |
//! | `<h[0:3]>` (one level of 4,096) | 5 | — | 1,650 | 4,096 |
//!
//! `hex2x2` writes the fewest objects, so it is the smallest and the fastest to write and to
//! read (a point lookup reads four trees below `finality/v1`, against seven). Its cost is the
//! width of what a write hashes before the roll-up shrinks it: the first level's trees have 256
//! entries (about 8 KiB) from the start, and a leaf holds `n / 65,536` action directories: 15 at
//! a million actions, 150 at ten million. Past that the leaves' width starts to count, and the
//! layout record lets a later version add a deeper layout and migrate to it, as `flat` migrates
//! now. An adaptive fan-out (git notes' restructuring) would have to be discovered before each
//! lookup and would rewrite a whole subtree when it splits; a fixed depth keeps every path a pure
//! function of the id.
//!
//! One level of 4,096 is smaller still at 96k, but its leaves fill sixteen times faster (244
//! directories at a million actions, 2,441 at ten million) and the 4,096-entry tree above them
//! (128 KiB) is rewritten by every commit, so its cost grows with the history as `flat`'s does,
//! only later.
//!
//! `flat` (one level of 256) grows without bound: its buckets hold `n / 256` directories, so the
//! bytes an operation rewrites grow linearly with the history. `nibble` bounds them but writes
//! more than twice the objects of `hex2x2`.
//!
//! # The record
//!
//! The layout is recorded once, in [`RECORD_PATH`] (the canonical file [`Layout::record`]
//! returns); its absence in a repository that holds anything under `finality/v1/` means `flat`,
//! the layout of every repository written before layouts were versioned. A repository without
//! `finality/v1/` gets [`Layout::DEFAULT`], and its first finality commit writes the record
//! ([`detect`]). A repository never mixes layouts: `verify` reports a record path of another
//! layout (`finality-layout-mixed`) and `maintain` migrates a `flat` or `nibble` repository to
//! the default in one commit (see [`super::migrate`]).

use super::RecordKind;
use super::decision::DecisionId;
use super::ids::ActionId;
use super::paths::ROOT;
use crate::canonical::{self, Value};
use crate::identity::Digest;
use crate::store::{self, Snapshot};

/// Path of the layout record.
pub const RECORD_PATH: &str = "finality/v1/layout.json";
/// `schema` of the layout record.
pub const SCHEMA: &str = "action-ledger.finality-layout";
/// Directory of the per-action directories.
pub const ACTIONS: &str = "finality/v1/actions";
/// Directory of the decision records.
pub const DECISIONS: &str = "finality/v1/decisions";
/// Directory levels of the `nibble` layout, one hex digit each.
pub const NIBBLE_LEVELS: usize = 6;

/// Where the finality records live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// One level of two hex digits (the layout before layouts were versioned); no pending index.
    Flat,
    /// Six levels of one hex digit, and the pending index (the default of 0.1.x).
    Nibble,
    /// Two levels of two hex digits, and the pending index (the default).
    Hex2x2,
}

/// Errors of reading a repository's finality layout.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// [`RECORD_PATH`] holds something other than a record this version writes.
    #[error(
        "{RECORD_PATH} is not a finality layout record this version knows (expected exactly the \
         canonical record of the nibble or hex2x2 layout); the repository was written by another \
         tool or a newer version, or damaged: repair it or upgrade before writing \
         (finality-layout-record-invalid)"
    )]
    UnknownRecord,
    /// The repository could not be read.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl Layout {
    /// The layout new repositories get, and the one `maintain` migrates to.
    pub const DEFAULT: Layout = Layout::Hex2x2;

    /// Every layout this version reads, oldest first.
    pub const ALL: [Layout; 3] = [Layout::Flat, Layout::Nibble, Layout::Hex2x2];

    /// `flat`, `nibble` or `hex2x2`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Flat => "flat",
            Layout::Nibble => "nibble",
            Layout::Hex2x2 => "hex2x2",
        }
    }

    /// The bytes of [`RECORD_PATH`] for this layout: canonical JSON plus `\n`
    /// (`{"layout":"hex2x2","schema":…,"schema_version":1}`); `None` for `flat`, whose record
    /// is the absence of the file.
    pub fn record(self) -> Option<String> {
        match self {
            Layout::Flat => None,
            Layout::Nibble | Layout::Hex2x2 => Some(format!(
                "{}\n",
                canonical::to_canonical_unchecked(&Value::object([
                    ("layout", Value::str(self.name())),
                    ("schema", Value::str(SCHEMA)),
                    ("schema_version", Value::from(1)),
                ]))
            )),
        }
    }

    /// Whether this layout keeps the pending index ([`super::pending`]).
    pub fn has_pending_index(self) -> bool {
        self != Layout::Flat
    }

    /// The fan-out directories of an id: `7d` (flat), `7/d/…` (six levels) or `7d/0c`.
    fn fanout(self, id: &str) -> String {
        let digest = Digest::of(id);
        match self {
            Layout::Flat => digest.prefix(2).to_owned(),
            Layout::Hex2x2 => {
                let p = digest.prefix(4);
                format!("{}/{}", &p[..2], &p[2..])
            }
            Layout::Nibble => {
                let mut out = String::with_capacity(2 * NIBBLE_LEVELS);
                for (i, c) in digest.prefix(NIBBLE_LEVELS).chars().enumerate() {
                    if i > 0 {
                        out.push('/');
                    }
                    out.push(c);
                }
                out
            }
        }
    }

    /// The directory of action `id`: `finality/v1/actions/<fan-out>/<id>`.
    pub fn action_dir(self, id: &ActionId) -> String {
        format!("{ACTIONS}/{}/{}", self.fanout(id.as_str()), id.as_str())
    }

    /// The path of one of the action's records.
    pub fn record_path(self, id: &ActionId, kind: RecordKind) -> String {
        format!("{}/{}", self.action_dir(id), kind.file_name())
    }

    /// The path of the record of decision `id`: `finality/v1/decisions/<fan-out>/<id>.json`.
    pub fn decision_path(self, id: &DecisionId) -> String {
        format!(
            "{DECISIONS}/{}/{}.json",
            self.fanout(id.as_str()),
            id.as_str()
        )
    }

    /// The fan-out directory components this layout puts above an id.
    pub(super) fn levels(self) -> usize {
        match self {
            Layout::Flat => 1,
            Layout::Nibble => NIBBLE_LEVELS,
            Layout::Hex2x2 => 2,
        }
    }

    /// Splits a path under [`ACTIONS`] into its action id and record kind, when it is exactly
    /// the path this layout gives that record; `None` for any other shape, an invalid id, or
    /// fan-out directories that do not match the id.
    pub fn classify(self, path: &str) -> Option<(ActionId, RecordKind)> {
        let rest = path.strip_prefix(ACTIONS)?.strip_prefix('/')?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [fan @ .., id, file] = parts.as_slice() else {
            return None;
        };
        if fan.len() != self.levels() {
            return None;
        }
        let id = ActionId::parse(id)?;
        let kind = RecordKind::from_file_name(file)?;
        (fan.join("/") == self.fanout(id.as_str())).then_some((id, kind))
    }

    /// The decision id a path under [`DECISIONS`] names, when it is exactly the path
    /// [`Layout::decision_path`] gives.
    pub fn classify_decision(self, path: &str) -> Option<DecisionId> {
        let rest = path.strip_prefix(DECISIONS)?.strip_prefix('/')?;
        let (fan, file) = rest.rsplit_once('/')?;
        let id = DecisionId::parse(file.strip_suffix(".json")?)?;
        (fan == self.fanout(id.as_str())).then_some(id)
    }

    /// The layouts other than this one.
    pub fn others(self) -> impl Iterator<Item = Layout> {
        Layout::ALL.into_iter().filter(move |l| *l != self)
    }

    /// The first other layout whose path for an action record `path` is (with its id and
    /// kind); `None` when no other layout would put a record there.
    pub fn other_classifying(self, path: &str) -> Option<Layout> {
        self.others().find(|l| l.classify(path).is_some())
    }

    /// The first other layout whose decision path `path` is.
    pub fn other_classifying_decision(self, path: &str) -> Option<Layout> {
        self.others().find(|l| l.classify_decision(path).is_some())
    }
}

/// Parses the bytes of a layout record; `None` unless they are exactly a record this version
/// writes.
pub fn parse_record(bytes: &[u8]) -> Option<Layout> {
    Layout::ALL
        .into_iter()
        .find(|l| l.record().is_some_and(|r| r.as_bytes() == bytes))
}

/// A repository's layout as [`detect`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Detected {
    /// The layout.
    pub layout: Layout,
    /// True when nothing is under `finality/v1/` yet: the first commit that writes a record
    /// writes the layout record with it.
    pub fresh: bool,
}

/// The layout of the tree `snap` reads: the record if present; else `flat` when anything is
/// under `finality/v1/`; else [`Layout::DEFAULT`], fresh. Reads at most two trees and one small
/// blob.
///
/// # Errors
/// [`LayoutError::UnknownRecord`] when the record is not one this version writes;
/// [`LayoutError::Store`] when the snapshot cannot be read.
pub fn detect(snap: &Snapshot<'_>) -> Result<Detected, LayoutError> {
    match snap.read(RECORD_PATH, 4096) {
        Ok(Some(bytes)) => parse_record(&bytes)
            .map(|layout| Detected {
                layout,
                fresh: false,
            })
            .ok_or(LayoutError::UnknownRecord),
        Err(store::Error::TooLarge { .. } | store::Error::NotAFile { .. }) => {
            Err(LayoutError::UnknownRecord)
        }
        Err(e) => Err(e.into()),
        Ok(None) if snap.is_dir(ROOT)? => Ok(Detected {
            layout: Layout::Flat,
            fresh: false,
        }),
        Ok(None) => Ok(Detected {
            layout: Layout::DEFAULT,
            fresh: true,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_in_every_layout_and_only_in_their_own() {
        let id = ActionId::parse("act_case").unwrap();
        let h = Digest::of("act_case");
        assert_eq!(
            Layout::Flat.action_dir(&id),
            "finality/v1/actions/7d/act_case"
        );
        let nibbles: Vec<String> = h.prefix(6).chars().map(String::from).collect();
        assert_eq!(
            Layout::Nibble.action_dir(&id),
            format!("finality/v1/actions/{}/act_case", nibbles.join("/"))
        );
        assert_eq!(
            Layout::Hex2x2.action_dir(&id),
            format!(
                "finality/v1/actions/{}/{}/act_case",
                &h.prefix(2),
                &h.prefix(4)[2..]
            )
        );
        for layout in Layout::ALL {
            for kind in [
                RecordKind::Action,
                RecordKind::Claim,
                RecordKind::Outcome,
                RecordKind::Approval,
                RecordKind::Containment,
            ] {
                let p = layout.record_path(&id, kind);
                assert_eq!(layout.classify(&p), Some((id.clone(), kind)), "{p}");
                for other in layout.others() {
                    assert_eq!(other.classify(&p), None, "{p} in {other:?}");
                    assert_eq!(other.other_classifying(&p), Some(layout), "{p}");
                }
                assert_eq!(layout.other_classifying(&p), None, "{p}");
            }
            let d = layout.decision_path(&id);
            assert_eq!(layout.classify_decision(&d), Some(id.clone()));
            for other in layout.others() {
                assert_eq!(other.classify_decision(&d), None, "{d}");
                assert_eq!(other.other_classifying_decision(&d), Some(layout));
            }
            assert_eq!(layout.classify_decision(&d.replace(".json", ".txt")), None);
        }
        // Fan-out directories must be the id's.
        for wrong in [
            "finality/v1/actions/00/act_case/claim.json",
            "finality/v1/actions/0/0/0/0/0/0/act_case/claim.json",
            "finality/v1/actions/00/00/act_case/claim.json",
            "finality/v1/actions/7d/act_case/x/claim.json",
            "finality/v1/actions/7d/act_case/other.json",
        ] {
            for layout in Layout::ALL {
                assert_eq!(layout.classify(wrong), None, "{wrong} in {layout:?}");
            }
        }
    }

    #[test]
    fn records_are_canonical_and_flat_has_none() {
        for (layout, name) in [(Layout::Nibble, "nibble"), (Layout::Hex2x2, "hex2x2")] {
            let record = layout.record().unwrap();
            assert_eq!(
                record,
                format!(
                    "{{\"layout\":\"{name}\",\"schema\":\"action-ledger.finality-layout\",\"schema_version\":1}}\n"
                )
            );
            assert_eq!(parse_record(record.as_bytes()), Some(layout));
            assert_eq!(parse_record(record.trim_end().as_bytes()), None);
            assert_eq!(layout.name(), name);
            assert!(layout.has_pending_index());
        }
        assert_eq!(Layout::Flat.record(), None);
        assert!(!Layout::Flat.has_pending_index());
        assert_eq!(Layout::DEFAULT, Layout::Hex2x2);
        assert_eq!(
            parse_record(b"{\"layout\":\"flat\",\"schema\":\"action-ledger.finality-layout\",\"schema_version\":1}\n"),
            None
        );
    }
}
