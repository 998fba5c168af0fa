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
    /// Every kind, in the order of their file names in messages.
    pub const ALL: [RecordKind; 5] = [
        RecordKind::Action,
        RecordKind::Claim,
        RecordKind::Outcome,
        RecordKind::Approval,
        RecordKind::Containment,
    ];

    /// The file names of every kind as one brace list for messages:
    /// `{action,claim,outcome,approval,containment}.json`.
    pub fn file_names_pattern() -> String {
        let stems: Vec<&str> = RecordKind::ALL
            .iter()
            .map(|k| k.file_name().trim_end_matches(".json"))
            .collect();
        format!("{{{}}}.json", stems.join(","))
    }

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
        RecordKind::ALL.into_iter().find(|k| k.file_name() == name)
    }
}

#[cfg(test)]
mod tests {
    use crate::finality::test_support::*;
    use crate::finality::*;

    #[test]
    fn every_record_kind_round_trips_its_file_name_and_is_in_the_pattern() {
        let pattern = RecordKind::file_names_pattern();
        assert_eq!(pattern, "{action,claim,outcome,approval,containment}.json");
        for kind in RecordKind::ALL {
            assert_eq!(RecordKind::from_file_name(kind.file_name()), Some(kind));
        }
        assert_eq!(RecordKind::from_file_name("details.json"), None);
    }

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
