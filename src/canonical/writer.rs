//! The encoder: canonical text of a value, the only JSON writer of the crate.
//!
//! No whitespace; object keys in UTF-8 byte order (the order [`Value::Object`] keeps); strings
//! escaped as ECMAScript `JSON.stringify` escapes them (ES2019 well-formed, `\u00XX` for the
//! other control characters, everything else as its UTF-8 bytes); numbers as ECMAScript
//! `Number.prototype.toString` writes them (exact integers as plain digits, everything else
//! through `ryu-js`, which produces the same shortest round-trip text, including the exponent
//! form `1e+21` from 10^21 up). `serde_json` does not serve: its number text differs from
//! JavaScript's (`1e21` vs `1e+21`, `0.000001` vs `1e-6`) and it escapes differently.

use std::fmt::Write as _;

use super::rules::validate;
use super::{Error, MAX_SAFE_INTEGER, Value};

/// Serialize `value` canonically after validating it (kinds, lossy numbers, complexity limits). No trailing newline.
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

/// Serialize an identity tree canonically: as [`to_canonical`] plus refusal of
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
/// named in `skip` (the replay JSON of an event without copying the event). Not
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

/// [`write_canonical_without`] on the canonical text of an object instead of its tree: appends
/// `text` to `out` without the top-level members whose key is in `skip`, by scanning the text
/// (strings and nesting), never parsing it. `text` must be the canonical text of an object, as
/// this module writes it (keys in `skip` are plain ASCII, which the writer never escapes); the
/// result is then byte-identical to [`write_canonical_without`] on the parsed tree. Lets an
/// event keep only its canonical line and still give its replay JSON.
///
/// # Panics
/// When `text` is not an object's text (a caller's broken invariant, not bad input).
pub fn write_canonical_text_without(out: &mut String, text: &str, skip: &[&str]) {
    let b = text.as_bytes();
    assert!(
        b.first() == Some(&b'{') && b.last() == Some(&b'}'),
        "canonical object text"
    );
    out.push('{');
    let mut first = true;
    let mut i = 1;
    while i < b.len() - 1 {
        // A member: "key":value, then ',' or the closing '}'.
        let start = i;
        let key_end = string_end(b, i);
        let key = &text[i + 1..key_end];
        let mut k = key_end + 2; // past the closing quote and ':'
        let mut depth = 0usize;
        while k < b.len() {
            match b[k] {
                b'"' => k = string_end(b, k),
                b'{' | b'[' => depth += 1,
                b'}' | b']' if depth > 0 => depth -= 1,
                b',' | b'}' if depth == 0 => break,
                _ => {}
            }
            k += 1;
        }
        if !skip.contains(&key) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(&text[start..k]);
        }
        i = k + 1;
    }
    out.push('}');
}

/// The index of the closing quote of the string literal opening at `b[open]`.
fn string_end(b: &[u8], open: usize) -> usize {
    let mut j = open + 1;
    while b[j] != b'"' {
        j += if b[j] == b'\\' { 2 } else { 1 };
    }
    j
}

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

/// Appends `n` as [`to_canonical`] writes it, or returns `false` (and appends nothing) when the
/// number is lossy ([`super::is_lossy_number`]: `NaN`, `±Infinity`, `-0`, an integer beyond
/// ±(2^53−1)), which canonical text cannot hold. For writers of typed records that hold their
/// numbers as `f64`.
pub(crate) fn write_number_checked(out: &mut String, n: f64) -> bool {
    if super::is_lossy_number(n) {
        return false;
    }
    write_number(out, n);
    true
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

/// Appends `s` quoted and escaped as `JSON.stringify` escapes it (ES2019 well-formed; a Rust
/// string is valid Unicode, so no lone surrogate reaches it).
pub(crate) fn write_string(out: &mut String, s: &str) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::parse;

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
    fn escapes_like_json_stringify() {
        let v = Value::str("a\"\\\u{8}\u{c}\n\r\t\u{1}\u{7f}/\u{2028}é");
        assert_eq!(
            to_canonical(&v).unwrap(),
            "\"a\\\"\\\\\\b\\f\\n\\r\\t\\u0001\u{7f}/\u{2028}é\""
        );
    }
}
