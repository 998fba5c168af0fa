//! Identifiers of the finality records: action ids (also the directory name of an action and
//! the name of a guard decision record) and attempt ids (the single-use nonce of a claim); agent
//! ids, principals and guard decision ids are checked strings ([`MAX_ID_UNITS`]). Each id type
//! is a newtype so a public signature says which id it takes; the
//! parsers accept exactly the shapes below and nothing else, so an id is always a safe single
//! path component.

use std::fmt;

/// Longest agent id, principal, guard decision id or containment ref (UTF-16 code units).
pub const MAX_ID_UNITS: usize = 256;

fn is_token(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An action id: `^[A-Za-z0-9_-]{1,128}$` (a safe single path component).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ActionId(String);

impl ActionId {
    /// Accepts exactly `^[A-Za-z0-9_-]{1,128}$`.
    pub fn parse(s: &str) -> Option<ActionId> {
        is_token(s, 1, 128).then(|| ActionId(s.to_owned()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ActionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An execution attempt id (the claim's nonce): `^[A-Za-z0-9_-]{16,128}$`, for example a
/// UUID.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId(String);

impl AttemptId {
    /// Accepts exactly `^[A-Za-z0-9_-]{16,128}$`.
    pub fn parse(s: &str) -> Option<AttemptId> {
        is_token(s, 16, 128).then(|| AttemptId(s.to_owned()))
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
