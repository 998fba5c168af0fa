//! Where the records live: every path under `finality/v1/`, built from an action id and a record
//! kind, and read back from a path ([`classify`]).
//!
//! ```text
//! finality/v1/actions/<sha256(id)[0:2]>/<id>/{action,claim,outcome,approval}.json
//! ```
//!
//! The fan-out directory is the first two hex digits of the SHA-256 of the id text, so no tree
//! holds more than a few thousand entries; a directory under the wrong prefix is not an action
//! directory (`verify` reports it as an unknown path). Guard decision records have their own
//! directory ([`super::decision::DECISIONS`]).

use super::ids::ActionId;
use crate::identity::Digest;

/// Root of all finality records in the state repository.
pub const ROOT: &str = "finality/v1";
/// Directory of the per-action directories.
pub const ACTIONS: &str = "finality/v1/actions";

impl ActionId {
    /// `finality/v1/actions/<sha256(id)[0:2]>/<id>`.
    pub fn dir(&self) -> String {
        let id = self.as_str();
        format!("{ACTIONS}/{}/{id}", Digest::of(id).prefix(2))
    }

    /// The path of one of the action's records.
    pub fn path(&self, kind: RecordKind) -> String {
        format!("{}/{}", self.dir(), kind.file_name())
    }
}

/// The record files of an action directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// `action.json`.
    Action,
    /// `claim.json`.
    Claim,
    /// `outcome.json`.
    Outcome,
    /// `approval.json` (an operator's decision, see [`approval`](super::approval)).
    Approval,
}

impl RecordKind {
    /// The file name in the action directory.
    pub fn file_name(self) -> &'static str {
        match self {
            RecordKind::Action => "action.json",
            RecordKind::Claim => "claim.json",
            RecordKind::Outcome => "outcome.json",
            RecordKind::Approval => "approval.json",
        }
    }

    fn from_file_name(name: &str) -> Option<RecordKind> {
        match name {
            "action.json" => Some(RecordKind::Action),
            "claim.json" => Some(RecordKind::Claim),
            "outcome.json" => Some(RecordKind::Outcome),
            "approval.json" => Some(RecordKind::Approval),
            _ => None,
        }
    }
}

/// Splits a path under [`ACTIONS`] into its action id and record kind; `None` for any other
/// shape, an invalid id, or a prefix directory that is not `sha256(id)[0:2]`.
pub fn classify(path: &str) -> Option<(ActionId, RecordKind)> {
    let rest = path.strip_prefix(ACTIONS)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let (prefix, id, file) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let id = ActionId::parse(id)?;
    let kind = RecordKind::from_file_name(file)?;
    (Digest::of(id.as_str()).prefix(2) == prefix).then_some((id, kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;

    #[test]
    fn paths_and_ids() {
        let id = ActionId::parse("act_case").unwrap();
        assert_eq!(id.dir(), "finality/v1/actions/7d/act_case");
        assert_eq!(
            classify("finality/v1/actions/7d/act_case/claim.json"),
            Some((id.clone(), RecordKind::Claim))
        );
        assert_eq!(classify("finality/v1/actions/00/act_case/claim.json"), None);
        assert_eq!(classify("finality/v1/actions/7d/act_case/other.json"), None);
        assert_eq!(
            classify("finality/v1/actions/7d/act_case/x/claim.json"),
            None
        );
        for bad in ["", ".", "..", "a/b", "a.b", &"x".repeat(129)] {
            assert!(ActionId::parse(bad).is_none(), "{bad:?}");
        }
        assert!(AttemptId::parse("0123456789abcdef").is_some());
        assert!(AttemptId::parse("0123456789abcde").is_none());
        assert_eq!(
            parse_time(BASE),
            Some(Timestamp::from_millis(1_772_366_400_000))
        );
        assert_eq!(format_time(Timestamp::from_millis(1_772_366_400_000)), BASE);
        for bad in [
            "2026-03-01T12:00:00Z",
            "2026-03-01T12:00:00.000+00:00",
            "2026-02-30T12:00:00.000Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
