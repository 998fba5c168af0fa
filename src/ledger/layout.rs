//! Tree layouts of a state repository.
//!
//! Both layouts hold identical file bytes; they differ only in where binding files live:
//!
//! ```text
//! reference  ledger/v1/import-bindings/<dir>/<hex>.json
//! fanout     ledger/v1/import-bindings/<dir>/<hex[0:2]>/<hex[2:4]>/<hex>.json
//! ```
//!
//! `reference` is exactly the reference's layout, so a repository written with it
//! is byte-identical to one the reference's importer writes. `fanout` keeps every tree at a few
//! thousand entries at most (65,536 leaf directories), so a publication rewrites trees in
//! proportion to what it adds, not to the size of the ledger.
//!
//! The layout is recorded once, in [`RECORD_PATH`]: the fanout record is the canonical file
//! [`Layout::record`] returns; absence means `reference`. A repository never mixes the two:
//! [`detect_from`] tells the layout from what a tree holds there ([`choose`] picks it for a
//! publication), `publish` refuses a layout that differs from the one an
//! existing ledger has, and `verify` reports binding paths of the other layout.

use crate::canonical::{self, Value};
use crate::identity::Digest;

/// Path of the layout record.
pub const RECORD_PATH: &str = "ledger/v1/layout.json";
/// Schema of the layout record.
pub const SCHEMA: &str = "action-ledger.state-layout";
/// The ledger's root directory: a tree with anything under it and no record is `reference`.
pub const LEDGER_ROOT: &str = "ledger/v1";

/// Where binding files live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layout {
    /// The reference's flat directories, one file per binding.
    Reference,
    /// Two levels of hex prefix under each binding directory.
    Fanout,
}

/// Errors of reading a repository's layout.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// [`RECORD_PATH`] holds something other than the fanout record this version writes.
    #[error(
        "{RECORD_PATH} is not a layout record this version knows (expected exactly the canonical \
         fanout record); the repository was written by another tool or damaged: repair it before \
         publishing"
    )]
    UnknownRecord,
    /// A requested layout that differs from the existing ledger's.
    #[error(
        "the repository's ledger uses the `{existing}` layout and `{requested}` was requested: one \
         repository never mixes layouts; drop --layout or give --layout {existing}"
    )]
    Mismatch {
        /// The existing ledger's layout name.
        existing: &'static str,
        /// The layout name requested.
        requested: &'static str,
    },
}

impl Layout {
    /// The name used on the command line and in the record: `reference` or `fanout`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Reference => "reference",
            Layout::Fanout => "fanout",
        }
    }

    /// The layout called `name` (see [`Layout::name`]).
    pub fn from_name(name: &str) -> Option<Layout> {
        match name {
            "reference" => Some(Layout::Reference),
            "fanout" => Some(Layout::Fanout),
            _ => None,
        }
    }

    /// The bytes of [`RECORD_PATH`] for this layout: canonical JSON plus `\n`
    /// (`{"layout":"fanout","schema":…,"schema_version":1}`); `None` for `reference`, whose
    /// record is the absence of the file.
    pub fn record(self) -> Option<String> {
        match self {
            Layout::Reference => None,
            Layout::Fanout => Some(format!(
                "{}\n",
                canonical::to_canonical_unchecked(&Value::object([
                    ("layout", Value::str("fanout")),
                    ("schema", Value::str(SCHEMA)),
                    ("schema_version", Value::from(1)),
                ]))
            )),
        }
    }

    /// The path of the binding named `digest` in the binding directory `dir` (for example
    /// `ledger/v1/import-bindings/events`).
    pub fn binding_path(self, dir: &str, digest: &Digest) -> String {
        let hex = digest.as_str();
        match self {
            Layout::Reference => format!("{dir}/{hex}.json"),
            Layout::Fanout => format!("{dir}/{}/{}/{hex}.json", &hex[..2], &hex[2..4]),
        }
    }

    /// Splits the part of a binding path below its binding directory (`<hex>.json` or
    /// `<h2>/<h2>/<hex>.json`) into the digest and the layout whose shape it has; `None` for
    /// anything else (including fan-out directories that do not match the digest).
    pub fn parse_binding_file(rest: &str) -> Option<(Digest, Layout)> {
        match rest.split('/').collect::<Vec<_>>().as_slice() {
            [file] => Some((
                Digest::parse(file.strip_suffix(".json")?)?,
                Layout::Reference,
            )),
            [a, b, file] => {
                let digest = Digest::parse(file.strip_suffix(".json")?)?;
                let hex = digest.as_str();
                (*a == &hex[..2] && *b == &hex[2..4]).then_some((digest, Layout::Fanout))
            }
            _ => None,
        }
    }
}

/// Parses the bytes of a layout record; `None` unless they are exactly a record this version
/// writes.
pub fn parse_record(bytes: &[u8]) -> Option<Layout> {
    (Layout::Fanout.record()?.as_bytes() == bytes).then_some(Layout::Fanout)
}

/// What a tree says about its layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detected {
    /// No ledger yet (nothing under `ledger/v1/`): a publication chooses.
    Empty,
    /// An existing ledger in this layout.
    Existing(Layout),
}

/// What a tree holds at [`RECORD_PATH`], as its reader found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordRead {
    /// No file there.
    Absent,
    /// The file's bytes (read with a cap of [`MAX_RECORD_BYTES`]).
    Bytes(Vec<u8>),
    /// A file larger than [`MAX_RECORD_BYTES`]: never a record this version writes.
    TooLarge,
}

/// The most bytes a reader needs to read of [`RECORD_PATH`]; a larger file is
/// [`RecordRead::TooLarge`].
pub const MAX_RECORD_BYTES: u64 = 4096;

/// The layout a tree declares, from what it holds at [`RECORD_PATH`] and whether anything is
/// under `ledger/v1/`: the record if present, else `reference` for an existing ledger, else
/// [`Detected::Empty`].
///
/// # Errors
/// [`Error::UnknownRecord`] when the record is not one this version writes.
pub fn detect_from(record: RecordRead, ledger_exists: bool) -> Result<Detected, Error> {
    match record {
        RecordRead::Bytes(bytes) => parse_record(&bytes)
            .map(Detected::Existing)
            .ok_or(Error::UnknownRecord),
        RecordRead::TooLarge => Err(Error::UnknownRecord),
        RecordRead::Absent if ledger_exists => Ok(Detected::Existing(Layout::Reference)),
        RecordRead::Absent => Ok(Detected::Empty),
    }
}

/// The layout a publication uses, given what the tree declares ([`detect_from`]): the existing
/// ledger's, which `requested` must match when given; for an empty ledger `requested`, else
/// `fanout` (the default for new repositories). The flag is true for an empty ledger, whose
/// first publication writes the layout record.
///
/// # Errors
/// [`Error::Mismatch`] when `requested` differs from an existing ledger's layout.
pub fn choose(detected: Detected, requested: Option<Layout>) -> Result<(Layout, bool), Error> {
    match (detected, requested) {
        (Detected::Empty, r) => Ok((r.unwrap_or(Layout::Fanout), true)),
        (Detected::Existing(existing), Some(r)) if r != existing => Err(Error::Mismatch {
            existing: existing.name(),
            requested: r.name(),
        }),
        (Detected::Existing(existing), _) => Ok((existing, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_paths_round_trip_in_both_layouts() {
        let d = Digest::of("x");
        let dir = "ledger/v1/import-bindings/events";
        let reference = Layout::Reference.binding_path(dir, &d);
        let fanout = Layout::Fanout.binding_path(dir, &d);
        assert_eq!(reference, format!("{dir}/{d}.json"));
        assert_eq!(
            fanout,
            format!("{dir}/{}/{}/{d}.json", &d.as_str()[..2], &d.as_str()[2..4])
        );
        for (path, layout) in [(reference, Layout::Reference), (fanout, Layout::Fanout)] {
            let rest = path.strip_prefix(&format!("{dir}/")).unwrap();
            assert_eq!(Layout::parse_binding_file(rest), Some((d.clone(), layout)));
        }
        // Fan-out directories must match the digest.
        assert_eq!(
            Layout::parse_binding_file(&format!("00/00/{d}.json")),
            None,
            "{d}"
        );
        assert_eq!(Layout::parse_binding_file(&format!("xx/{d}.json")), None);
    }

    /// What a tree declares, and the layout a publication then uses.
    #[test]
    fn detection_and_choice() {
        use RecordRead::*;
        assert!(matches!(detect_from(Absent, false), Ok(Detected::Empty)));
        assert!(matches!(
            detect_from(Absent, true),
            Ok(Detected::Existing(Layout::Reference))
        ));
        for bad in [TooLarge, Bytes(b"{}".to_vec()), Bytes(Vec::new())] {
            assert!(matches!(detect_from(bad, true), Err(Error::UnknownRecord)));
        }
        assert_eq!(
            choose(Detected::Empty, None).unwrap(),
            (Layout::Fanout, true)
        );
        assert_eq!(
            choose(Detected::Empty, Some(Layout::Reference)).unwrap(),
            (Layout::Reference, true)
        );
        let existing = Detected::Existing(Layout::Reference);
        assert_eq!(choose(existing, None).unwrap(), (Layout::Reference, false));
        assert_eq!(
            choose(existing, Some(Layout::Fanout))
                .unwrap_err()
                .to_string(),
            "the repository's ledger uses the `reference` layout and `fanout` was requested: one \
             repository never mixes layouts; drop --layout or give --layout reference"
        );
    }

    #[test]
    fn the_record_is_canonical_and_only_fanout_has_one() {
        let record = Layout::Fanout.record().unwrap();
        assert_eq!(
            record,
            "{\"layout\":\"fanout\",\"schema\":\"action-ledger.state-layout\",\"schema_version\":1}\n"
        );
        assert_eq!(parse_record(record.as_bytes()), Some(Layout::Fanout));
        assert_eq!(parse_record(record.trim_end().as_bytes()), None);
        assert_eq!(Layout::Reference.record(), None);
        assert!(matches!(
            detect_from(RecordRead::Bytes(record.into_bytes()), true),
            Ok(Detected::Existing(Layout::Fanout))
        ));
        for l in [Layout::Reference, Layout::Fanout] {
            assert_eq!(Layout::from_name(l.name()), Some(l));
        }
    }
}
