//! The record files of an action directory ([`RecordKind`]) and the root of the finality tree.
//! Where an action directory lives depends on the repository's layout
//! ([`Layout::action_dir`](super::layout::Layout::action_dir), [`super::layout`]).

pub use super::layout::ACTIONS;

/// Root of all finality records in the state repository.
pub const ROOT: &str = "finality/v1";

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
    /// `containment.json` (an operator's promote or discard, see
    /// [`containment`](super::containment)).
    Containment,
}

impl RecordKind {
    /// The file name in the action directory.
    pub fn file_name(self) -> &'static str {
        match self {
            RecordKind::Action => "action.json",
            RecordKind::Claim => "claim.json",
            RecordKind::Outcome => "outcome.json",
            RecordKind::Approval => "approval.json",
            RecordKind::Containment => "containment.json",
        }
    }

    pub(super) fn from_file_name(name: &str) -> Option<RecordKind> {
        match name {
            "action.json" => Some(RecordKind::Action),
            "claim.json" => Some(RecordKind::Claim),
            "outcome.json" => Some(RecordKind::Outcome),
            "approval.json" => Some(RecordKind::Approval),
            "containment.json" => Some(RecordKind::Containment),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::finality::test_support::*;
    use crate::finality::*;

    #[test]
    fn ids_and_times() {
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
