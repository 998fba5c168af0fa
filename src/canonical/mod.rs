//! The ledger's canonical JSON: the value model, the encoder and the strict parser.
//!
//! Rules: no whitespace; object keys sorted by UTF-8 bytes; strings escaped as
//! ECMAScript `JSON.stringify` does; numbers printed as ECMAScript `Number.prototype.toString`
//! (via `ryu-js`); `NaN`, `±Infinity`, `-0` and integers outside ±(2^53−1) are refused as lossy.
//! Complexity limits: depth 64, 10,000 nodes and an *estimated* 1 MiB (24 bytes per number),
//! checked in one pre-order walk so that the first failure and its path match the reference.
//! Identity hashing additionally refuses credential-named object keys.
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
pub use parser::{
    MAX_INPUT_DEPTH, MAX_INPUT_NODES, parse, parse_canonical, parse_input, within_limits_by_length,
};
pub use rules::{find_lossy_number, is_credential_key, is_lossy_number};
pub use value::Value;
pub use writer::{
    check, to_canonical, to_canonical_unchecked, to_identity_canonical,
    write_canonical_text_without, write_canonical_without,
};
pub(crate) use writer::{write_number_checked, write_string};

/// Errors of encoding and parsing. Encoding errors carry a JSONPath-like location (`$.a[1].b`)
/// of the offending value; messages are the reference's texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
