//! The ledger's canonical JSON: the value model, the encoder and the strict parser.
//!
//! Rules (ledger-core.md §2): no whitespace; object keys sorted by UTF-8 bytes; strings escaped as
//! ECMAScript `JSON.stringify` does; numbers printed as ECMAScript `Number.prototype.toString`
//! (via `ryu-js`); `NaN`, `±Infinity`, `-0` and integers outside ±(2^53−1) are refused as lossy.
//! Complexity limits (§2.3): depth 64, 10,000 nodes and an *estimated* 1 MiB (24 bytes per number),
//! checked in one pre-order walk so that the first failure and its path match the reference.
//! Identity hashing (§2.4) additionally refuses credential-named object keys.
//!
//! The parser (§2.6) accepts JSON text only: duplicate keys (compared after unescaping), raw control
//! characters in strings, lone surrogates, trailing bytes and nesting beyond the limits are refused.
//! Whether the text was *canonical* is decided by re-encoding the parsed value and comparing bytes,
//! which [`parse_canonical`] does.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

/// Maximum nesting depth; the root has depth 0 (ledger-core §2.3).
pub const MAX_DEPTH: usize = 64;
/// Maximum number of values (containers and scalars; keys do not count).
pub const MAX_NODES: usize = 10_000;
/// Maximum estimated encoded size in bytes (numbers count 24 bytes each).
pub const MAX_BYTES: usize = 1024 * 1024;
/// Largest integer magnitude that JavaScript represents exactly (2^53 − 1).
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A JSON value as the ledger sees it: numbers are IEEE-754 doubles (JavaScript semantics) and
/// objects are kept sorted by UTF-8 key bytes (`String`'s `Ord`), which is the canonical order.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Value>),
    Object(BTreeMap<String, Value>),
}

/// Errors of encoding and parsing. Encoding errors carry a JSONPath-like location (`$.a[1].b`)
/// of the offending value; messages are the reference's texts (ledger-core §7).
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

impl Value {
    /// Builds an object from `(key, value)` pairs; a repeated key keeps the last value.
    pub fn object<K: Into<String>>(entries: impl IntoIterator<Item = (K, Value)>) -> Value {
        Value::Object(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A string value.
    pub fn str(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    /// The member `key` of an object, `None` for a missing key or a non-object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(map) => map.get(key),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// JavaScript truthiness, used where the reference tests `if (value)`.
    pub fn is_truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => *n != 0.0 && !n.is_nan(),
            Value::String(s) => !s.is_empty(),
            Value::Array(_) | Value::Object(_) => true,
        }
    }

    /// A safe integer value (|n| ≤ 2^53−1, no fraction), as `i64`.
    pub fn as_safe_integer(&self) -> Option<i64> {
        let n = self.as_f64()?;
        (n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER).then_some(n as i64)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}
impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Number(n as f64)
    }
}

/// Serialize `value` canonically after validating it (§2.1–§2.3). No trailing newline.
pub fn to_canonical(value: &Value) -> Result<String, Error> {
    validate(value, false)?;
    let mut out = String::new();
    write_value(&mut out, value);
    Ok(out)
}

/// The checks of [`to_canonical`] without the text: value kinds and the complexity limits.
///
/// # Errors
/// As [`to_canonical`].
pub fn check(value: &Value) -> Result<(), Error> {
    validate(value, false)
}

/// Serialize an identity tree canonically (§2.4): as [`to_canonical`] plus refusal of
/// credential-named object keys anywhere in the tree.
pub fn to_identity_canonical(value: &Value) -> Result<String, Error> {
    validate(value, true)?;
    let mut out = String::new();
    write_value(&mut out, value);
    Ok(out)
}

/// Canonical text of an already-validated value (no limit checks). For values this crate built
/// from validated parts, where validation would only repeat work; numbers must be finite.
pub fn to_canonical_unchecked(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// Appends the canonical text of `value` to `out`, leaving out the top-level object members
/// named in `skip` (the replay JSON of ledger-core §1.12 without copying the event). Not
/// validated, like [`to_canonical_unchecked`].
pub fn write_canonical_without(out: &mut String, value: &Value, skip: &[&str]) {
    let Value::Object(map) = value else {
        write_value(out, value);
        return;
    };
    out.push('{');
    let mut first = true;
    for (k, v) in map.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
        if !first {
            out.push(',');
        }
        first = false;
        write_string(out, k);
        out.push(':');
        write_value(out, v);
    }
    out.push('}');
}

/// Parse JSON text strictly (§2.6 step 1–2): duplicate keys, depth and node limits, grammar.
pub fn parse(text: &str) -> Result<Value, Error> {
    parse_within(text, MAX_DEPTH, MAX_NODES)
}

/// Deepest value [`parse_input`] reads: twice the event limit.
pub const MAX_INPUT_DEPTH: usize = 2 * MAX_DEPTH;
/// Most values [`parse_input`] reads: ten times the event limit.
pub const MAX_INPUT_NODES: usize = 10 * MAX_NODES;

/// [`parse`] for a writer's input document, which is not itself an event: it holds several
/// values that are each hashed or stored under the limits (identities one level below its root,
/// the event fields), so the limits are applied to those values, where the error names the
/// rule and the path, and the document itself is only bounded to keep the parser's stack and
/// memory small ([`MAX_INPUT_DEPTH`], [`MAX_INPUT_NODES`]).
///
/// # Errors
/// As [`parse`]; [`Error::InputLimit`] past the input bounds.
pub fn parse_input(text: &str) -> Result<Value, Error> {
    parse_within(text, MAX_INPUT_DEPTH, MAX_INPUT_NODES).map_err(|e| match e {
        Error::ComplexityLimit => Error::InputLimit,
        other => other,
    })
}

fn parse_within(text: &str, max_depth: usize, max_nodes: usize) -> Result<Value, Error> {
    let mut p = Parser {
        bytes: text.as_bytes(),
        pos: 0,
        nodes: 0,
        max_depth,
        max_nodes,
    };
    p.skip_ws();
    let v = p.value(0)?;
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return Err(p.err("trailing characters"));
    }
    Ok(v)
}

/// Whether the value [`parse`] read from canonical text of `len` bytes is certain to pass the
/// limits of [`to_canonical`]: parse enforces the same depth and value-count limits, and the
/// size estimate exceeds the text's length by at most 24 bytes a value (a number counts 24).
pub fn within_limits_by_length(len: usize) -> bool {
    len + 24 * MAX_NODES <= MAX_BYTES
}

/// Parse `text` and require it to be exactly the canonical encoding of what it holds.
pub fn parse_canonical(text: &str) -> Result<Value, Error> {
    let v = parse(text)?;
    if to_canonical(&v)? != text {
        return Err(Error::NotCanonical);
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Validation

struct Budget {
    nodes: usize,
    bytes: usize,
}

fn validate(value: &Value, identity: bool) -> Result<(), Error> {
    let mut budget = Budget { nodes: 0, bytes: 0 };
    let mut path = String::from("$");
    visit(value, 0, &mut path, &mut budget, identity)
}

fn visit(
    value: &Value,
    depth: usize,
    path: &mut String,
    budget: &mut Budget,
    identity: bool,
) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::DepthLimit { path: path.clone() });
    }
    budget.nodes += 1;
    let children = match value {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    };
    // The reference checks containers early, before walking their children.
    if budget.nodes + children > MAX_NODES || budget.nodes > MAX_NODES {
        return Err(Error::NodeLimit { path: path.clone() });
    }
    let estimate = match value {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => escaped_len(s),
        Value::Array(a) => 2 + a.len().saturating_sub(1),
        Value::Object(o) => 2 + o.keys().map(|k| escaped_len(k) + 2).sum::<usize>(),
    };
    budget.bytes += estimate;
    if budget.bytes > MAX_BYTES {
        return Err(Error::SizeLimit { path: path.clone() });
    }
    match value {
        Value::Number(n) if is_lossy_number(*n) => {
            return Err(Error::LossyNumber { path: path.clone() });
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                visit(item, depth + 1, path, budget, identity)?;
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            if identity && map.keys().any(|k| is_credential_key(k)) {
                return Err(Error::CredentialField { path: path.clone() });
            }
            for (k, v) in map {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                visit(v, depth + 1, path, budget, identity)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The lossy-number rule of canonical JSON: `NaN`, `±Infinity`, `-0` and integers beyond
/// ±(2^53−1) have no exact canonical text (`1e400` and `1e401` would both read back as
/// `Infinity`, `2^53 + 1` as `2^53`), so canonical JSON refuses them.
pub fn is_lossy_number(n: f64) -> bool {
    !n.is_finite()
        || (n == 0.0 && n.is_sign_negative())
        || (n.fract() == 0.0 && n.abs() > MAX_SAFE_INTEGER)
}

/// The path (`$.a[1].b`, as [`Error::LossyNumber`] names it) of the first number of `value`,
/// in key order, that [`is_lossy_number`] refuses; `None` when there is none. Only that rule is
/// applied: no depth, node or size limit.
pub fn find_lossy_number(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut String) -> bool {
        match value {
            Value::Number(n) => is_lossy_number(*n),
            Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                let found = walk(item, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            Value::Object(map) => map.iter().any(|(k, v)| {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                let found = walk(v, path);
                if !found {
                    path.truncate(len);
                }
                found
            }),
            _ => false,
        }
    }
    let mut path = String::from("$");
    walk(value, &mut path).then_some(path)
}

const CREDENTIAL_KEYS: &[&str] = &[
    "authorization",
    "cookie",
    "credential",
    "credentials",
    "password",
    "passwd",
    "secret",
    "token",
    "accesstoken",
    "apikey",
    "apitoken",
    "authtoken",
    "githubtoken",
    "refreshtoken",
    "cloudflareapitoken",
    "privatekey",
    "clientsecret",
];

const CREDENTIAL_SUFFIXES: &[&str] = &[
    "authorization",
    "authorizationheader",
    "authheader",
    "bearertoken",
    "credential",
    "credentials",
    "password",
    "passwd",
    "privatekey",
    "secret",
    "token",
];

/// The high-risk credential key rule of ledger-core §2.4: strip everything outside `[A-Za-z0-9]`,
/// lowercase, then compare with the fixed list and suffixes.
pub fn is_credential_key(key: &str) -> bool {
    let norm: String = key
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    CREDENTIAL_KEYS.contains(&norm.as_str())
        || CREDENTIAL_SUFFIXES.iter().any(|s| norm.ends_with(s))
}

// ---------------------------------------------------------------------------------------------
// Serialization

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, *n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

/// ECMAScript `Number.prototype.toString` for a finite value.
fn write_number(out: &mut String, n: f64) {
    if n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER {
        // Exact integers print as plain digits; `n == 0.0` covers only +0 here.
        let _ = write!(out, "{}", n as i64);
    } else {
        let mut buf = ryu_js::Buffer::new();
        out.push_str(buf.format(n));
    }
}

/// `JSON.stringify` string escaping (ES2019 well-formed; strings here are valid Unicode).
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Copy runs of bytes that need no escape in one go; only `"`, `\\` and controls are escaped
    // (all ASCII, so a run boundary is always a char boundary).
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.push_str(&s[run..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            _ => {
                let _ = write!(out, "\\u{:04x}", b);
            }
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

fn escaped_len(s: &str) -> usize {
    // Non-ASCII characters are written as their UTF-8 bytes, so only ASCII escapes add length.
    2 + s.len()
        + s.bytes()
            .map(|b| match b {
                b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 1,
                b if b < 0x20 => 5,
                _ => 0,
            })
            .sum::<usize>()
}

impl fmt::Display for Value {
    /// Canonical text without validation (for diagnostics).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_canonical_unchecked(self))
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    nodes: usize,
    max_depth: usize,
    max_nodes: usize,
}

impl Parser<'_> {
    fn err(&self, reason: &'static str) -> Error {
        Error::Syntax {
            offset: self.pos,
            reason,
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, Error> {
        if depth > self.max_depth {
            return Err(Error::ComplexityLimit);
        }
        self.nodes += 1;
        if self.nodes > self.max_nodes {
            return Err(Error::ComplexityLimit);
        }
        match self.bytes.get(self.pos) {
            None => Err(self.err("unexpected end of input")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(Value::String),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
        }
    }

    fn literal(&mut self, word: &'static str, v: Value) -> Result<Value, Error> {
        if self.bytes[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, Error> {
        self.pos += 1;
        let mut map = BTreeMap::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.err("expected object key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if self.bytes.get(self.pos) != Some(&b':') {
                return Err(self.err("expected ':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let v = self.value(depth + 1)?;
            if map.contains_key(&key) {
                return Err(Error::DuplicateKey { key });
            }
            map.insert(key, v);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, Error> {
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.bytes.get(self.pos) == Some(&b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("truncated unicode escape"))?;
        let mut n = 0u32;
        for &d in digits {
            let v = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.err("invalid unicode escape"))?;
            n = n * 16 + v;
        }
        self.pos += 4;
        Ok(n)
    }

    fn string(&mut self) -> Result<String, Error> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(&b) = self.bytes.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // The input is a &str, and we only stop at ASCII bytes, so this slice is valid UTF-8.
            out.push_str(std::str::from_utf8(&self.bytes[start..self.pos]).expect("utf-8 slice"));
            match self.bytes.get(self.pos) {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let esc = *self
                        .bytes
                        .get(self.pos)
                        .ok_or_else(|| self.err("unterminated escape"))?;
                    self.pos += 1;
                    match esc {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&hi) {
                                if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                                    return Err(self.err("lone surrogate in string"));
                                }
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&lo) {
                                    return Err(self.err("lone surrogate in string"));
                                }
                                0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                            } else if (0xDC00..0xE000).contains(&hi) {
                                return Err(self.err("lone surrogate in string"));
                            } else {
                                hi
                            };
                            out.push(
                                char::from_u32(code).ok_or_else(|| self.err("bad code point"))?,
                            );
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn number(&mut self) -> Result<Value, Error> {
        let start = self.pos;
        let b = self.bytes;
        if b.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match b.get(self.pos) {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while let Some(b'0'..=b'9') = b.get(self.pos) {
                    self.pos += 1;
                }
            }
            _ => return Err(self.err("invalid number")),
        }
        if b.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            if !matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number fraction"));
            }
            while let Some(b'0'..=b'9') = b.get(self.pos) {
                self.pos += 1;
            }
        }
        if let Some(b'e' | b'E') = b.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = b.get(self.pos) {
                self.pos += 1;
            }
            if !matches!(b.get(self.pos), Some(b'0'..=b'9')) {
                return Err(self.err("invalid number exponent"));
            }
            while let Some(b'0'..=b'9') = b.get(self.pos) {
                self.pos += 1;
            }
        }
        let text = std::str::from_utf8(&b[start..self.pos]).expect("ascii number");
        // Rust's float parsing is correctly rounded, like ECMAScript's Number(string).
        let n: f64 = text.parse().map_err(|_| self.err("invalid number"))?;
        Ok(Value::Number(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        to_canonical(&parse(text).unwrap()).unwrap()
    }

    #[test]
    fn sorts_keys_by_utf8_bytes() {
        assert_eq!(
            canon(r#"{"9":4,"10":3,"｡":1,"😀":2,"a":{"b":1,"A":2}}"#),
            r#"{"10":3,"9":4,"a":{"A":2,"b":1},"｡":1,"😀":2}"#
        );
    }

    #[test]
    fn numbers_follow_ecmascript() {
        assert_eq!(
            canon("[0.1,1e-7,1.5e-300,123.456,-0.5,100,1e2,5e-324]"),
            "[0.1,1e-7,1.5e-300,123.456,-0.5,100,100,5e-324]"
        );
        // From 1e21 up, ECMAScript writes the exponent form (`String(1e21)` is `"1e+21"`).
        // Such numbers are integers beyond 2^53, which canonical JSON refuses as lossy, so the
        // writer's text is checked on its own, and the refusal next to it.
        let big = parse("[1e21,-1.5e300,1.7976931348623157e308,123456789e20]").unwrap();
        assert_eq!(
            to_canonical_unchecked(&big),
            "[1e+21,-1.5e+300,1.7976931348623157e+308,1.23456789e+28]"
        );
        assert_eq!(
            to_canonical(&parse("[1e21]").unwrap()),
            Err(Error::LossyNumber {
                path: "$[0]".into()
            })
        );
        assert_eq!(
            canon("[0.000001,1.5e-7,-9007199254740991]"),
            "[0.000001,1.5e-7,-9007199254740991]"
        );
    }

    #[test]
    fn rejects_lossy_numbers_with_path() {
        let v = parse(r#"{"a":[1,{"b":-0}]}"#).unwrap();
        assert_eq!(
            to_canonical(&v).unwrap_err(),
            Error::LossyNumber {
                path: "$.a[1].b".into()
            }
        );
        let v = parse("[1,2,9007199254740992]").unwrap();
        assert_eq!(
            to_canonical(&v).unwrap_err().to_string(),
            "action event data contains a lossy number at $[2]"
        );
    }

    /// [`find_lossy_number`] applies the encoder's rule, and only it, anywhere in a tree.
    #[test]
    fn finds_lossy_numbers_at_any_depth() {
        for (text, path) in [
            (r#"{"n":1e400}"#, Some("$.n")),
            (r#"{"n":-1e400}"#, Some("$.n")),
            (r#"{"a":{"b":[0,1e401]}}"#, Some("$.a.b[1]")),
            (r#"[{"x":-0}]"#, Some("$[0].x")),
            (r#"{"big":9007199254740992}"#, Some("$.big")),
            (r#"{"m":-9007199254740993}"#, Some("$.m")),
            (r#"{"e":1e21}"#, Some("$.e")),
            (r#"{"a":1,"b":1e400,"c":1e400}"#, Some("$.b")),
            (
                r#"{"ok":[0,-0.5,0.1,9007199254740991,-9007199254740991,5e-324]}"#,
                None,
            ),
        ] {
            let v = parse(text).unwrap();
            assert_eq!(find_lossy_number(&v).as_deref(), path, "{text}");
            let encoded = to_canonical(&v);
            match path {
                Some(p) => assert_eq!(encoded, Err(Error::LossyNumber { path: p.into() })),
                None => assert!(encoded.is_ok()),
            }
        }
        let deep = (0..80).fold(Value::Number(f64::NAN), |v, _| Value::Array(vec![v]));
        assert_eq!(
            find_lossy_number(&deep).unwrap(),
            format!("${}", "[0]".repeat(80))
        );
    }

    #[test]
    fn escapes_like_json_stringify() {
        let v = Value::str("a\"\\\u{8}\u{c}\n\r\t\u{1}\u{7f}/\u{2028}é");
        assert_eq!(
            to_canonical(&v).unwrap(),
            "\"a\\\"\\\\\\b\\f\\n\\r\\t\\u0001\u{7f}/\u{2028}é\""
        );
    }

    #[test]
    fn parser_refuses_duplicates_grammar_and_surrogates() {
        assert!(matches!(
            parse(r#"{"a":1,"\u0061":2}"#),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(parse("[1,]").is_err());
        assert!(parse("01").is_err());
        assert!(parse("1.").is_err());
        assert!(parse("\"\u{1}\"").is_err());
        assert!(parse(r#""\ud800""#).is_err());
        assert!(parse(r#""\udc00x""#).is_err());
        assert_eq!(parse(r#""\ud83d\ude00""#).unwrap(), Value::str("😀"));
        assert!(parse("{} x").is_err());
        assert!(parse("").is_err());
    }

    #[test]
    fn parser_limits_depth_and_nodes() {
        let deep_ok = format!("{}1{}", "[".repeat(64), "]".repeat(64));
        assert!(parse(&deep_ok).is_ok());
        let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(parse(&deep), Err(Error::ComplexityLimit));
        let many = format!("[{}]", vec!["0"; 10_000].join(","));
        assert_eq!(parse(&many), Err(Error::ComplexityLimit));
    }

    /// A writer's input holds several limited values (each hashed or stored under the limits),
    /// so its parse is bounded more loosely: a value at the limits one level below the root
    /// reads, and the bounds named in the message are the constants.
    #[test]
    fn input_parse_bounds() {
        let nested = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
        let below_root = format!(r#"{{"identity":{}}}"#, nested(MAX_DEPTH));
        assert_eq!(parse(&below_root), Err(Error::ComplexityLimit));
        assert!(parse_input(&below_root).is_ok());
        let values = |n: usize| format!("[{}]", vec!["0"; n - 1].join(","));
        assert!(parse(&values(MAX_NODES + 1)).is_err());
        assert!(parse_input(&values(MAX_NODES + 1)).is_ok());
        assert!(parse_input(&nested(MAX_INPUT_DEPTH)).is_ok());
        assert!(parse_input(&values(MAX_INPUT_NODES)).is_ok());
        assert_eq!(
            parse_input(&nested(MAX_INPUT_DEPTH + 1)),
            Err(Error::InputLimit)
        );
        assert_eq!(
            parse_input(&values(MAX_INPUT_NODES + 1)),
            Err(Error::InputLimit)
        );
        assert_eq!(
            Error::InputLimit.to_string(),
            format!(
                "JSON input exceeds its parse bounds (depth {MAX_INPUT_DEPTH}, {MAX_INPUT_NODES} values)"
            )
        );
        // Duplicate keys and grammar stay refused.
        assert!(matches!(
            parse_input(r#"{"a":1,"a":2}"#),
            Err(Error::DuplicateKey { .. })
        ));
        assert!(parse_input("[1,]").is_err());
    }

    #[test]
    fn canonical_parse_requires_exact_bytes() {
        assert!(parse_canonical(r#"{"a":1}"#).is_ok());
        for bad in [
            r#"{ "a":1}"#,
            r#"{"b":1,"a":2}"#,
            "1.0",
            "1e2",
            r#""\u0041""#,
            "-0",
        ] {
            assert!(parse_canonical(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credential_keys() {
        for k in [
            "password",
            "myPassword",
            "GITHUB_TOKEN",
            "refresh-token",
            "input_token",
            "authorizationHeader",
        ] {
            assert!(is_credential_key(k), "{k}");
        }
        for k in [
            "tokens",
            "tokenizer",
            "max_tokens",
            "session_cookie",
            "x_api_key",
            "author",
            "cookies",
        ] {
            assert!(!is_credential_key(k), "{k}");
        }
        let v = parse(r#"[{"ok":1},{"token":1}]"#).unwrap();
        assert_eq!(
            to_identity_canonical(&v).unwrap_err(),
            Error::CredentialField {
                path: "$[1]".into()
            }
        );
        assert!(to_canonical(&v).is_ok());
    }

    #[test]
    fn size_estimate_counts_numbers_as_24_bytes() {
        // 43,691 numbers would be ~1 MiB by estimate but the node limit trips first.
        let v = Value::Array(vec![Value::Number(1.0); 10_001]);
        assert!(matches!(to_canonical(&v), Err(Error::NodeLimit { .. })));
        let s = Value::str("a".repeat(MAX_BYTES - 2));
        assert!(to_canonical(&s).is_ok());
        let s = Value::str("a".repeat(MAX_BYTES - 1));
        assert_eq!(to_canonical(&s), Err(Error::SizeLimit { path: "$".into() }));
    }
}
