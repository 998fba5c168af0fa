//! API keys: who may call the server, as which principal, and who is an operator.
//!
//! Keys are never stored in clear. A keys file holds one key a line:
//!
//! ```text
//! # PRINCIPAL  SHA256_HEX_OF_KEY                                                 [operator]
//! ci-bot       9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! ops-lead     60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  operator
//! ```
//!
//! A request's `x-api-key` header is hashed with SHA-256 and compared with every configured
//! digest in constant time (the comparison does not stop at the first differing byte, nor at the
//! first matching key), so neither the time nor the answer tells a caller anything about a key
//! it does not hold. The key's principal becomes the `created_by` of the actions it creates (the
//! reference binds the authenticated principal the same way).

use std::path::Path;

use sha2::{Digest as _, Sha256};

/// Why the keys could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The keys file could not be read.
    #[error("cannot read the API keys file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line of the keys file breaks a rule.
    #[error("{path}:{line}: {reason}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// Which rule, and what to write instead.
        reason: String,
    },
    /// A key from the environment is incomplete.
    #[error("{0}")]
    Env(String),
}

/// One configured key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The principal it authenticates (machine text, at most 256 characters).
    pub principal: String,
    /// SHA-256 of the key.
    pub digest: [u8; 32],
    /// Whether the principal may approve or deny actions.
    pub operator: bool,
}

/// The configured keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keys {
    keys: Vec<Key>,
}

/// Constant-time equality of two byte strings of the same length; `false` for different
/// lengths (lengths are not secret here: both sides are SHA-256 digests or the cron secret's
/// digest).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// SHA-256 of `text`.
pub fn sha256(text: &[u8]) -> [u8; 32] {
    Sha256::digest(text).into()
}

/// 64 hex digits (either case) as 32 bytes.
fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

fn principal_ok(p: &str) -> Result<(), String> {
    match crate::privacy::machine_text(p, "principal", crate::finality::MAX_ID_UNITS) {
        Ok(t) if t == p => Ok(()),
        Ok(_) => Err("the principal has surrounding whitespace".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Keys {
    /// No keys.
    pub fn new() -> Keys {
        Keys::default()
    }

    /// Parses a keys file's text (`path` only names it in errors): one
    /// `PRINCIPAL SHA256_HEX [operator]` a line, separated by spaces or tabs; blank lines and
    /// lines starting with `#` are skipped.
    ///
    /// # Errors
    /// [`Error::Line`] for a line with too few or too many columns, a principal that is not
    /// privacy-safe machine text, a digest that is not 64 hex digits, a third column other than
    /// `operator`, or a digest listed twice.
    pub fn parse(text: &str, path: &str) -> Result<Keys, Error> {
        let mut keys = Keys::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: String| Error::Line {
                path: path.to_owned(),
                line: i + 1,
                reason,
            };
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (principal, hex, operator) = match cols.as_slice() {
                [p, h] => (*p, *h, false),
                [p, h, "operator"] => (*p, *h, true),
                // Not quoted: a key pasted in clear must not reach the log.
                [_, _, _] => {
                    return Err(bad("the third column must be `operator` or absent".into()));
                }
                _ => {
                    return Err(bad(
                        "expected `PRINCIPAL SHA256_HEX_OF_KEY [operator]` (the key itself is never written here; store `printf %s KEY | sha256sum`)".into(),
                    ));
                }
            };
            principal_ok(principal).map_err(|r| bad(format!("principal {principal:?}: {r}")))?;
            let digest = parse_hex32(hex).ok_or_else(|| {
                bad("the key digest must be 64 hex digits (sha256 of the key)".into())
            })?;
            keys.add(Key {
                principal: principal.to_owned(),
                digest,
                operator,
            })
            .map_err(bad)?;
        }
        Ok(keys)
    }

    /// Reads a keys file ([`Keys::parse`]).
    ///
    /// # Errors
    /// [`Error::Read`], and those of [`Keys::parse`].
    pub fn load(path: &Path) -> Result<Keys, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Keys::parse(&text, &path.display().to_string())
    }

    /// Adds the key `key` (in clear, as a client sends it) for `principal`.
    ///
    /// # Errors
    /// [`Error::Env`] for an empty key or a principal that is not machine text, or a key that is
    /// already configured.
    pub fn add_clear(&mut self, key: &str, principal: &str, operator: bool) -> Result<(), Error> {
        if key.is_empty() {
            return Err(Error::Env("the API key is empty".into()));
        }
        principal_ok(principal).map_err(|r| Error::Env(format!("principal {principal:?}: {r}")))?;
        self.add(Key {
            principal: principal.to_owned(),
            digest: sha256(key.as_bytes()),
            operator,
        })
        .map_err(Error::Env)
    }

    fn add(&mut self, key: Key) -> Result<(), String> {
        if self.keys.iter().any(|k| k.digest == key.digest) {
            return Err("this key digest is already configured (one key, one principal)".into());
        }
        self.keys.push(key);
        Ok(())
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The key whose digest is `digest` (a dashboard session keeps the digest of the key it was
    /// opened with, never the key), compared in constant time with every configured key.
    pub fn by_digest(&self, digest: &[u8; 32]) -> Option<&Key> {
        let mut found = None;
        for key in &self.keys {
            if ct_eq(&key.digest, digest) && found.is_none() {
                found = Some(key);
            }
        }
        found
    }

    /// The key a client presented, compared in constant time with every configured key.
    pub fn authenticate(&self, presented: &[u8]) -> Option<&Key> {
        self.by_digest(&sha256(presented))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: &[u8; 32]) -> String {
        hex::encode(d)
    }

    #[test]
    fn parses_keys_files_and_refuses_bad_lines() {
        let text = format!(
            "# comment\n\nci-bot {}\nops-lead\t{}  operator\n",
            hex(&sha256(b"k1")),
            hex(&sha256(b"k2")).to_uppercase()
        );
        let keys = Keys::parse(&text, "keys").unwrap();
        assert_eq!(keys.len(), 2);
        let k1 = keys.authenticate(b"k1").unwrap();
        assert_eq!((k1.principal.as_str(), k1.operator), ("ci-bot", false));
        let k2 = keys.authenticate(b"k2").unwrap();
        assert_eq!((k2.principal.as_str(), k2.operator), ("ops-lead", true));
        assert!(keys.authenticate(b"k3").is_none());
        assert!(keys.authenticate(b"").is_none());

        let d = hex(&sha256(b"x"));
        let cases = [
            (format!("bot {d} admin"), "third column"),
            (format!("bot {d} operator extra"), "expected"),
            ("bot".to_owned(), "expected"),
            ("bot k1".to_owned(), "64 hex"),
            (format!("bot {}", &d[..63]), "64 hex"),
            (format!("bot {}g", &d[..63]), "64 hex"),
            (format!("b@d! {d}"), "principal"),
            (format!("a {d}\nb {d}"), "already configured"),
        ];
        for (text, want) in cases {
            let e = Keys::parse(&text, "keys.txt").unwrap_err().to_string();
            assert!(e.starts_with("keys.txt:"), "{e}");
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn clear_keys_and_constant_time_compare() {
        let mut keys = Keys::new();
        keys.add_clear("secret-1", "bot", false).unwrap();
        assert!(keys.add_clear("secret-1", "other", false).is_err());
        assert!(keys.add_clear("", "bot", false).is_err());
        assert!(keys.add_clear("k", "bad principal", false).is_err());
        assert_eq!(keys.authenticate(b"secret-1").unwrap().principal, "bot");
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }
}
