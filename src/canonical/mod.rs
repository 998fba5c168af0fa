//! The ledger's canonical JSON: the value model, the encoder and the strict parser.
//!
//! Rules: no whitespace; object keys sorted by UTF-8 bytes; strings escaped as
//! ECMAScript `JSON.stringify` does; numbers printed as ECMAScript `Number.prototype.toString`
//! (via `ryu-js`); `NaN`, `±Infinity`, `-0` and integers outside ±(2^53−1) are refused as lossy.
//! Complexity limits: depth 64, 10,000 nodes and an *estimated* 1 MiB (24 bytes per number).
//! Identity hashing additionally refuses credential-named object keys.
//!
//! # Check order
//!
//! The reference's order (`actionLedgerJson`, and `canonicalIdentityJson` for identities), so
//! that an input with several faults reports the one the reference reports, at the same path:
//!
//! 1. the complexity limits, over the whole tree before anything else, in one pre-order walk
//!    that visits an object's keys in JavaScript's property order ([`Object::js_order`]:
//!    array-index keys ascending, then the keys in the order they were given); at each value:
//!    1. its depth (the root is 0; over [`MAX_DEPTH`] fails);
//!    2. the node count, the value included (a container also counts its children on entry;
//!       over [`MAX_NODES`] fails);
//!    3. the estimated size (over [`MAX_BYTES`] fails);
//! 2. then one pre-order walk in canonical key order (UTF-8 bytes):
//!    1. a lossy number fails where the walk meets it;
//!    2. for an identity, each object key is checked against the credential rule
//!       ([`is_credential_key`]) when the walk reaches it, before its value is walked; the path
//!       named is the object's.
//!
//! So `{"token":[[…64 levels…]]}` fails the depth limit at `$.token[0]…`, not the credential
//! rule; `{"a":[{"token":1}],"token":1}` fails at `$.a[0]`; `{"a":NaN,"token":1}` fails as a
//! lossy number at `$.a`; and `{"b":<too deep>,"a":<too deep>}` fails at `$.b…`.
//!
//! The parser is `serde_json` with the ledger's rules added by a `DeserializeSeed`: it accepts
//! JSON text only; duplicate keys (compared after unescaping), raw control characters in
//! strings, lone surrogates, trailing bytes and nesting beyond the limits are refused, and
//! numbers read as JavaScript's `Number(text)` reads them.
//! Whether the text was *canonical* is decided by re-encoding the parsed value and comparing bytes,
//! which [`parse_canonical`] does.

/// Maximum nesting depth; the root has depth 0.
pub const MAX_DEPTH: usize = 64;
/// Maximum number of values (containers and scalars; keys do not count).
pub const MAX_NODES: usize = 10_000;
/// Maximum estimated encoded size in bytes (numbers count 24 bytes each).
pub const MAX_BYTES: usize = 1024 * 1024;
/// Largest integer magnitude that JavaScript represents exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

mod de;
mod parser;
#[cfg(test)]
mod proptests;
mod rules;
mod value;
mod writer;

pub(crate) use de::{JsNumber, NUMBER_TOKEN};
#[cfg(test)]
pub(crate) use parser::parse_document;
pub use parser::{
    MAX_INPUT_DEPTH, MAX_INPUT_NODES, parse, parse_canonical, parse_input, within_limits_by_length,
};
pub use rules::{find_inexact_number, find_lossy_number, is_credential_key, is_lossy_number};
pub use value::{Object, Value};
pub use writer::{
    check, to_canonical, to_canonical_unchecked, to_identity_canonical,
    write_canonical_text_without, write_canonical_without,
};
pub(crate) use writer::{write_number_checked, write_string};

/// Errors of encoding and parsing. Encoding errors carry a JSONPath-like location (`$.a[1].b`)
/// of the offending value; messages are the reference's texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A number without exact canonical text (`NaN`, `±Infinity`, `-0`, an integer beyond
    /// ±(2^53−1)).
    #[error("action event data contains a lossy number at {path}")]
    LossyNumber {
        /// Where, as `$.a[1].b`.
        path: String,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("action event data exceeds canonical JSON depth limit 64 at {path}")]
    DepthLimit {
        /// The first value too deep.
        path: String,
    },
    /// More than [`MAX_NODES`] values.
    #[error("action event data exceeds canonical JSON node limit 10000 at {path}")]
    NodeLimit {
        /// The value that went over the limit (pre-order).
        path: String,
    },
    /// An estimated encoded size over [`MAX_BYTES`] (numbers count 24 bytes).
    #[error("action event data exceeds canonical JSON size limit 1048576 bytes at {path}")]
    SizeLimit {
        /// The value that went over the limit (pre-order).
        path: String,
    },
    /// An identity tree with a credential-named object key ([`is_credential_key`]).
    #[error("action event identity contains a high-risk credential field at {path}")]
    CredentialField {
        /// The key's path.
        path: String,
    },
    /// Parsed text with the same object key twice (compared after unescaping).
    #[error("JSON contains a duplicate object key {key:?}")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// Parsed text nested deeper or with more values than canonical JSON allows.
    #[error("JSON exceeds canonical complexity limits (depth 64, 10000 values)")]
    ComplexityLimit,
    /// Writer input beyond [`MAX_INPUT_DEPTH`] or [`MAX_INPUT_NODES`].
    #[error("JSON input exceeds its parse bounds (depth 128, 100000 values)")]
    InputLimit,
    /// Text that is not JSON.
    #[error("invalid JSON at byte {offset}: {reason}")]
    Syntax {
        /// Byte offset of the error.
        offset: usize,
        /// What was expected or found.
        reason: &'static str,
    },
    /// Valid JSON whose bytes are not the canonical encoding of its value.
    #[error("JSON is not canonical")]
    NotCanonical,
}
