//! The strict parser: JSON text to a [`Value`], refusing what the reference's reader refuses.

use std::collections::BTreeMap;

use super::writer::to_canonical;
use super::{Error, MAX_BYTES, MAX_DEPTH, MAX_NODES, Value};

/// Parse JSON text strictly: duplicate keys, depth and node limits, grammar.
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
}
