//! Object ids and entry modes: [`CommitId`] and [`BlobId`] (40-hex SHA-1, `Display` in lowercase
//! hex) and [`Mode`] (a tree entry's Git mode).

use std::fmt;

use gix::ObjectId;

use super::error::git_err;
use crate::store::*;

/// A commit object id (40-hex SHA-1). `Display` is the lowercase hex form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommitId(pub(super) ObjectId);

impl CommitId {
    /// The 40 lowercase hex digits of the id.
    pub fn to_hex(&self) -> String {
        self.0.to_hex().to_string()
    }

    /// Parse 40 lowercase hex digits.
    ///
    /// # Errors
    /// [`Error::InvalidCommitId`] for any other input. This only parses; it does not check that
    /// the object exists or is a commit.
    pub fn from_hex(s: &str) -> Result<Self, Error> {
        let invalid = || Error::InvalidCommitId {
            input: s.to_owned(),
        };
        if s.len() != 40 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(invalid());
        }
        ObjectId::from_hex(s.as_bytes())
            .map(CommitId)
            .map_err(|_| invalid())
    }
}

/// The Git object id of a file's content (40-hex SHA-1 over `blob <length>\0<bytes>`, what
/// `git hash-object` prints). Two files hold the same bytes exactly when their ids are equal, so
/// verification compares a stored file with the bytes it should hold without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlobId(pub(super) ObjectId);

impl BlobId {
    /// The id a blob holding `bytes` has in a SHA-1 repository.
    ///
    /// # Errors
    /// [`Error::Git`] only if SHA-1 collision detection flags `bytes` (a crafted collision).
    pub fn of(bytes: &[u8]) -> Result<BlobId, Error> {
        gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, bytes)
            .map(BlobId)
            .map_err(git_err("hash blob", "expected file content"))
    }

    /// The 20 raw bytes of the id.
    pub fn bytes(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out.copy_from_slice(self.0.as_slice());
        out
    }

    /// The id from its 20 raw bytes.
    pub fn from_bytes(bytes: &[u8; 20]) -> BlobId {
        BlobId(ObjectId::from_bytes_or_panic(bytes))
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The Git mode of a tree entry as the tree records it: `100644` a file, `100755` an
/// executable file, `120000` a symbolic link (its blob holds the target), `160000` a submodule
/// (a commit link), `40000` a directory. `Display` prints six octal digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mode(pub(super) u16);

impl Mode {
    /// `100644`, the mode of every file the publisher writes.
    pub const FILE: Mode = Mode(0o100644);

    /// The raw mode bits.
    pub fn bits(self) -> u16 {
        self.0
    }

    /// A directory (tree).
    pub fn is_dir(self) -> bool {
        self.0 & 0o170000 == 0o040000
    }

    /// A plain file, mode exactly `100644`.
    pub fn is_regular_file(self) -> bool {
        self == Mode::FILE
    }

    /// What an entry of this mode is, in words ("a symbolic link", …).
    pub fn describe(self) -> &'static str {
        match self.0 & 0o170000 {
            0o040000 => "a directory",
            0o120000 => "a symbolic link",
            0o160000 => "a submodule (commit link)",
            0o100000 if self.0 == 0o100644 => "a file",
            0o100000 if self.0 & 0o100 != 0 => "an executable file",
            0o100000 => "a file with a non-standard mode",
            _ => "an entry of an unknown kind",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:06o}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_name_their_kind() {
        let cases = [
            (0o100644, "100644", "a file", true, false),
            (0o100755, "100755", "an executable file", false, false),
            (
                0o100664,
                "100664",
                "a file with a non-standard mode",
                false,
                false,
            ),
            (0o120000, "120000", "a symbolic link", false, false),
            (
                0o160000,
                "160000",
                "a submodule (commit link)",
                false,
                false,
            ),
            (0o040000, "040000", "a directory", false, true),
        ];
        for (bits, text, words, regular, dir) in cases {
            let mode = Mode(bits);
            assert_eq!(mode.to_string(), text);
            assert_eq!(mode.describe(), words);
            assert_eq!(mode.is_regular_file(), regular, "{text}");
            assert_eq!(mode.is_dir(), dir, "{text}");
        }
    }
}
