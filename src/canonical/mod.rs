//! The ledger's canonical JSON: the value model, the encoder and the strict parser.
//!
//! Rules: no whitespace; object keys sorted by UTF-8 bytes; strings escaped as
//! ECMAScript `JSON.stringify` does; numbers printed as ECMAScript `Number.prototype.toString`
//! (via `ryu-js`); `NaN`, `±Infinity`, `-0` and integers outside ±(2^53−1) are refused as lossy.
//! Complexity limits: depth 64, 10,000 nodes and an *estimated* 1 MiB (24 bytes per number),
//! checked in one pre-order walk so that the first failure and its path match the reference.
//! Identity hashing additionally refuses credential-named object keys.
//!
//! The parser accepts JSON text only: duplicate keys (compared after unescaping), raw control
//! characters in strings, lone surrogates, trailing bytes and nesting beyond the limits are refused.
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

mod parser;
mod rules;
mod value;
mod writer;

pub use parser::{
    MAX_INPUT_DEPTH, MAX_INPUT_NODES, parse, parse_canonical, parse_input, within_limits_by_length,
};
pub use rules::{find_lossy_number, is_credential_key, is_lossy_number};
pub use value::Value;
pub use writer::{
    check, to_canonical, to_canonical_unchecked, to_identity_canonical, write_canonical_without,
};

/// Errors of encoding and parsing. Encoding errors carry a JSONPath-like location (`$.a[1].b`)
/// of the offending value; messages are the reference's texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("action event data contains a lossy number at {path}")]
    LossyNumber { path: String },
    #[error("action event data exceeds canonical JSON depth limit 64 at {path}")]
    DepthLimit { path: String },
    #[error("action event data exceeds canonical JSON node limit 10000 at {path}")]
    NodeLimit { path: String },
    #[error("action event data exceeds canonical JSON size limit 1048576 bytes at {path}")]
    SizeLimit { path: String },
    #[error("action event identity contains a high-risk credential field at {path}")]
    CredentialField { path: String },
    #[error("JSON contains a duplicate object key {key:?}")]
    DuplicateKey { key: String },
    #[error("JSON exceeds canonical complexity limits (depth 64, 10000 values)")]
    ComplexityLimit,
    #[error("JSON input exceeds its parse bounds (depth 128, 100000 values)")]
    InputLimit,
    #[error("invalid JSON at byte {offset}: {reason}")]
    Syntax { offset: usize, reason: &'static str },
    #[error("JSON is not canonical")]
    NotCanonical,
}
