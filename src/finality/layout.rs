//! Tree layouts of the finality records: where an action's directory and a guard decision's
//! file live, as a function of the layout the repository records.
//!
//! ```text
//! flat    finality/v1/actions/<h[0:2]>/<id>/…           finality/v1/decisions/<h[0:2]>/<id>.json
//! nibble  finality/v1/actions/<h0>/<h1>/…/<h5>/<id>/…   finality/v1/decisions/<h0>/…/<h5>/<id>.json
//! ```
//!
//! `h` is the hex SHA-256 of the id text and `h0`…`h5` its first six hex digits, one directory
//! level each. Both layouts hold identical record bytes; they differ only in the directories
//! above an action directory (or a decision file). `nibble` also keeps the pending index
//! ([`super::pending`]); `flat` does not, and its sweep walks every action.
//!
//! # Why six nibble levels
//!
//! A write rewrites every tree on the path of each file it adds: the cost of an operation in
//! bytes is the sum of the sizes of those trees. With `flat` the 256 bucket trees grow with the
//! history (a bucket holds `n / 256` action directories), so that sum grows linearly with the
//! number of actions `n`, and so does the repository's growth per operation. The options
//! weighed, by the expected bytes of the fan-out trees one operation on a random action rewrites
//! (uncompressed; entries of 27 bytes plus the name, an action directory entry about 57 bytes):
//!
//! | layout | trees per path | 10^4 | 10^6 | 10^8 |
//! |---|---|---|---|---|
//! | `<h[0:2]>` (flat) | 2 | 9.5 KiB | 225 KiB | 21 MiB |
//! | `<h[0:2]>/<h[2:4]>` | 3 | 8.4 KiB | 15 KiB | 100 KiB |
//! | `<h[0:2]>/<h[2:4]>/<h[4:6]>` | 4 | 8.4 KiB | 15 KiB | 22 KiB |
//! | four nibble levels | 5 | 1.4 KiB | 2.7 KiB | 87 KiB |
//! | six nibble levels | 7 | 1.5 KiB | 2.1 KiB | 3.0 KiB |
//!
//! A tree of 16 entries costs about 0.45 KiB against 7.4 KiB for one of 256, so narrow levels
//! win by an order of magnitude; six of them (16.7 million leaves) keep the last level at a
//! handful of entries up to 10^8 actions, while a sparse deep level costs one small tree.
//! An adaptive fan-out (git notes' restructuring) would save the few empty-ish levels of a
//! small repository, but a reader would then have to discover the depth before each lookup,
//! and a split would rewrite a whole subtree in one commit; a fixed depth keeps every path a
//! pure function of the id, so a point lookup reads seven small trees and nothing else.
//!
//! # The record
//!
//! The layout is recorded once, in [`RECORD_PATH`] (the canonical file [`Layout::record`]
//! returns); its absence in a repository that holds anything under `finality/v1/` means `flat`,
//! the layout of every repository written before layouts were versioned. A repository without
//! `finality/v1/` gets `nibble`, and its first finality commit writes the record
//! ([`detect`]). A repository never mixes layouts: `verify` reports a record path of the other
//! layout (`finality-layout-mixed`) and `maintain` migrates a `flat` repository in one commit
//! (see [`super::migrate`]).

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
    /// Six levels of one hex digit, and the pending index.
    Nibble,
}

/// Errors of reading a repository's finality layout.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// [`RECORD_PATH`] holds something other than a record this version writes.
    #[error(
        "{RECORD_PATH} is not a finality layout record this version knows (expected exactly the \
         canonical nibble record); the repository was written by another tool or damaged: \
         repair it before writing (finality-layout-record-invalid)"
    )]
    UnknownRecord,
    /// The repository could not be read.
    #[error(transparent)]
    Store(#[from] store::Error),
}

impl Layout {
    /// The layout new repositories get.
    pub const DEFAULT: Layout = Layout::Nibble;

    /// `flat` or `nibble`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Flat => "flat",
            Layout::Nibble => "nibble",
        }
    }

    /// The bytes of [`RECORD_PATH`] for this layout: canonical JSON plus `\n`
    /// (`{"layout":"nibble","schema":…,"schema_version":1}`); `None` for `flat`, whose record is
    /// the absence of the file.
    pub fn record(self) -> Option<String> {
        match self {
            Layout::Flat => None,
            Layout::Nibble => Some(format!(
                "{}\n",
                canonical::to_canonical_unchecked(&Value::object([
                    ("layout", Value::str("nibble")),
                    ("schema", Value::str(SCHEMA)),
                    ("schema_version", Value::from(1)),
                ]))
            )),
        }
    }

    /// Whether this layout keeps the pending index ([`super::pending`]).
    pub fn has_pending_index(self) -> bool {
        self == Layout::Nibble
    }

    /// The fan-out directories of an id: `7d` (flat) or `7/d/…` (six levels).
    fn fanout(self, id: &str) -> String {
        let digest = Digest::of(id);
        match self {
            Layout::Flat => digest.prefix(2).to_owned(),
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

    /// The other layout.
    pub fn other(self) -> Layout {
        match self {
            Layout::Flat => Layout::Nibble,
            Layout::Nibble => Layout::Flat,
        }
    }
}

/// Parses the bytes of a layout record; `None` unless they are exactly a record this version
/// writes.
pub fn parse_record(bytes: &[u8]) -> Option<Layout> {
    (Layout::Nibble.record()?.as_bytes() == bytes).then_some(Layout::Nibble)
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
    fn paths_round_trip_in_both_layouts_and_only_in_their_own() {
        let id = ActionId::parse("act_case").unwrap();
        assert_eq!(
            Layout::Flat.action_dir(&id),
            "finality/v1/actions/7d/act_case"
        );
        let h = Digest::of("act_case");
        let nibbles: Vec<String> = h.prefix(6).chars().map(String::from).collect();
        assert_eq!(
            Layout::Nibble.action_dir(&id),
            format!("finality/v1/actions/{}/act_case", nibbles.join("/"))
        );
        for layout in [Layout::Flat, Layout::Nibble] {
            for kind in [
                RecordKind::Action,
                RecordKind::Claim,
                RecordKind::Outcome,
                RecordKind::Approval,
                RecordKind::Containment,
            ] {
                let p = layout.record_path(&id, kind);
                assert_eq!(layout.classify(&p), Some((id.clone(), kind)), "{p}");
                assert_eq!(layout.other().classify(&p), None, "{p}");
            }
            let d = layout.decision_path(&id);
            assert_eq!(layout.classify_decision(&d), Some(id.clone()));
            assert_eq!(layout.other().classify_decision(&d), None);
            assert_eq!(layout.classify_decision(&d.replace(".json", ".txt")), None);
        }
        // Fan-out directories must be the id's.
        assert_eq!(
            Layout::Flat.classify("finality/v1/actions/00/act_case/claim.json"),
            None
        );
        assert_eq!(
            Layout::Nibble.classify("finality/v1/actions/0/0/0/0/0/0/act_case/claim.json"),
            None
        );
        assert_eq!(
            Layout::Flat.classify("finality/v1/actions/7d/act_case/x/claim.json"),
            None
        );
        assert_eq!(
            Layout::Flat.classify("finality/v1/actions/7d/act_case/other.json"),
            None
        );
    }

    #[test]
    fn the_record_is_canonical_and_only_nibble_has_one() {
        let record = Layout::Nibble.record().unwrap();
        assert_eq!(
            record,
            "{\"layout\":\"nibble\",\"schema\":\"action-ledger.finality-layout\",\"schema_version\":1}\n"
        );
        assert_eq!(parse_record(record.as_bytes()), Some(Layout::Nibble));
        assert_eq!(parse_record(record.trim_end().as_bytes()), None);
        assert_eq!(Layout::Flat.record(), None);
        assert!(Layout::Nibble.has_pending_index() && !Layout::Flat.has_pending_index());
    }
}
