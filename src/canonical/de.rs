//! The reader: JSON text to a [`Value`] through `serde_json`, plus what `serde_json` leaves to
//! its caller.
//!
//! `serde_json` already refuses what the ledger refuses of the grammar: trailing bytes, raw
//! control characters in strings, lone surrogates in escapes, leading zeros, a lone `-` or
//! `1.`. A [`DeserializeSeed`] adds the rest while the value is built, in the order the
//! reference's reader applies it: each value first counts against the depth and value limits
//! (so that a too-deep or too-large text is refused before its next byte is looked at), and
//! each object member is compared with the members before it after unescaping (duplicate keys
//! are refused, not overwritten).
//!
//! Numbers follow JavaScript's `Number(text)`: the decimal text is rounded once to the nearest
//! double (Rust's `f64` parsing is correctly rounded, as ECMAScript's is), so `1e400` reads as
//! `Infinity` and `-0` as negative zero, which the writer then refuses as lossy with the
//! value's path. `serde_json` is built with `arbitrary_precision` for this: it hands over the
//! text of every number that does not fit a 64-bit integer instead of refusing it as out of
//! range or rounding it itself. It does so as a one-member map whose value arrives as an owned
//! string, which text never produces (a string of the text arrives borrowed), so an object with
//! the same key is still read as an object.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{Error, Object, Value};

/// The key under which `serde_json` (with `arbitrary_precision`) hands over a number's text.
pub(crate) const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Parses `text` into a [`Value`] under the given limits (see [`super::parse`]).
pub(super) fn read(text: &str, max_depth: usize, max_nodes: usize) -> Result<Value, Error> {
    let mut state = State {
        nodes: 0,
        max_depth,
        max_nodes,
        refusal: None,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    // The seed bounds the depth itself (at most `max_depth + 1` frames), below the stack's size.
    de.disable_recursion_limit();
    let parsed = ValueSeed {
        state: &mut state,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(v) => Ok(v),
        Err(e) => Err(state.refusal.take().unwrap_or_else(|| syntax(text, &e))),
    }
}

/// What the seed refused, kept aside: `serde_json` carries a custom error as text only.
struct State {
    nodes: usize,
    max_depth: usize,
    max_nodes: usize,
    refusal: Option<Error>,
}

impl State {
    fn refuse<E: de::Error>(&mut self, e: Error) -> E {
        self.refusal = Some(e);
        E::custom("refused")
    }
}

struct ValueSeed<'s> {
    state: &'s mut State,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        let state = self.state;
        if self.depth > state.max_depth {
            return Err(state.refuse(Error::ComplexityLimit));
        }
        state.nodes += 1;
        if state.nodes > state.max_nodes {
            return Err(state.refuse(Error::ComplexityLimit));
        }
        d.deserialize_any(ValueVisitor {
            state,
            depth: self.depth,
        })
    }
}

struct ValueVisitor<'s> {
    state: &'s mut State,
    depth: usize,
}

impl ValueVisitor<'_> {
    fn child(&mut self) -> ValueSeed<'_> {
        ValueSeed {
            state: self.state,
            depth: self.depth + 1,
        }
    }
}

impl<'de> Visitor<'de> for ValueVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    // Integers that fit 64 bits: the conversion rounds to nearest, ties to even, as
    // `Number(text)` does.
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n as f64))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n as f64))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        Ok(Value::Number(n))
    }

    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_owned()))
    }

    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child())? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        // Keeps the text's key order too: JavaScript walks an object's keys in the order they
        // were written ([`Object::js_order`]).
        let mut members = Object::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.is_empty() && key == NUMBER_TOKEN {
                match map.next_value_seed(NumberOrMember(self.child()))? {
                    Member::Number(n) => return Ok(Value::Number(n)),
                    Member::Value(v) => {
                        members.push(key, v);
                        continue;
                    }
                }
            }
            let value = map.next_value_seed(self.child())?;
            if members.contains_key(&key) {
                return Err(self.state.refuse(Error::DuplicateKey { key }));
            }
            members.push(key, value);
        }
        Ok(Value::Object(members))
    }
}

/// The value under [`NUMBER_TOKEN`]: a number's text (an owned string), or an ordinary member
/// of an object that happens to use that key.
enum Member {
    Number(f64),
    Value(Value),
}

struct NumberOrMember<'s>(ValueSeed<'s>);

impl<'de> DeserializeSeed<'de> for NumberOrMember<'_> {
    type Value = Member;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Member, D::Error> {
        let ValueSeed { state, depth } = self.0;
        d.deserialize_any(EitherVisitor { state, depth })
    }
}

/// Reads a number's text (an owned string) as a number, anything else as a member value at
/// `depth`, counted against the limits like any other member.
struct EitherVisitor<'s> {
    state: &'s mut State,
    depth: usize,
}

impl<'s> EitherVisitor<'s> {
    fn member<E: de::Error>(self) -> Result<ValueVisitor<'s>, E> {
        let EitherVisitor { state, depth } = self;
        if depth > state.max_depth {
            return Err(state.refuse(Error::ComplexityLimit));
        }
        state.nodes += 1;
        if state.nodes > state.max_nodes {
            return Err(state.refuse(Error::ComplexityLimit));
        }
        Ok(ValueVisitor { state, depth })
    }
}

impl<'de> Visitor<'de> for EitherVisitor<'_> {
    type Value = Member;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Member, E> {
        // `serde_json` checked the grammar; Rust's parse of it is correctly rounded and
        // overflows to infinity as `Number(text)` does.
        s.parse::<f64>()
            .map(Member::Number)
            .map_err(|_| E::custom("invalid number"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Member, E> {
        self.member()?.visit_unit().map(Member::Value)
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Member, E> {
        self.member()?.visit_bool(b).map(Member::Value)
    }
    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Member, E> {
        self.member()?.visit_u64(n).map(Member::Value)
    }
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Member, E> {
        self.member()?.visit_i64(n).map(Member::Value)
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Member, E> {
        self.member()?.visit_f64(n).map(Member::Value)
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Member, E> {
        self.member()?.visit_str(s).map(Member::Value)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Member, A::Error> {
        self.member()?.visit_seq(seq).map(Member::Value)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Member, A::Error> {
        self.member()?.visit_map(map).map(Member::Value)
    }
}

/// [`Error::Syntax`] for a `serde_json` error in `text`: the byte offset of its line and
/// column, and the reason in the words this crate has always used.
fn syntax(text: &str, e: &serde_json::Error) -> Error {
    // `line` and `column` are 1-based; the column counts bytes. Line 0 means no position.
    let offset = if e.line() == 0 {
        text.len()
    } else {
        let line_start: usize = text
            .split_inclusive('\n')
            .take(e.line() - 1)
            .map(str::len)
            .sum();
        (line_start + e.column().saturating_sub(1)).min(text.len())
    };
    let message = e.to_string();
    let reason = REASONS
        .iter()
        .find(|(theirs, _)| message.starts_with(theirs))
        .map_or("invalid JSON", |(_, ours)| ours);
    Error::Syntax { offset, reason }
}

/// `serde_json`'s error texts and the reasons [`Error::Syntax`] gives for them.
const REASONS: &[(&str, &str)] = &[
    ("EOF while parsing a string", "unterminated string"),
    ("EOF while parsing a list", "expected ',' or ']'"),
    ("EOF while parsing an object", "expected ',' or '}'"),
    ("EOF while parsing a value", "unexpected end of input"),
    ("expected `:`", "expected ':'"),
    ("expected `,` or `]`", "expected ',' or ']'"),
    ("expected `,` or `}`", "expected ',' or '}'"),
    ("expected ident", "invalid literal"),
    ("expected value", "unexpected character"),
    ("key must be a string", "expected object key"),
    ("trailing comma", "unexpected character"),
    ("trailing characters", "trailing characters"),
    ("control character", "control character in string"),
    ("invalid escape", "invalid escape"),
    ("invalid number", "invalid number"),
    ("invalid unicode code point", "invalid unicode escape"),
    ("unexpected end of hex escape", "lone surrogate in string"),
    ("lone leading surrogate", "lone surrogate in string"),
];

/// A number read as JavaScript's `Number(text)` reads it, for typed readers (the event line's
/// structs) that take a number where [`read`] would build a [`Value::Number`]: the same
/// conversions, including the text `serde_json` hands over for numbers beyond 64-bit integers.
/// Any other JSON value is refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct JsNumber(pub(crate) f64);

impl<'de> de::Deserialize<'de> for JsNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JsNumber, D::Error> {
        d.deserialize_any(JsNumberVisitor)
    }
}

struct JsNumberVisitor;

impl<'de> Visitor<'de> for JsNumberVisitor {
    type Value = JsNumber;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON number")
    }

    // As in `ValueVisitor`: the conversions round to nearest, ties to even.
    fn visit_u64<E>(self, n: u64) -> Result<JsNumber, E> {
        Ok(JsNumber(n as f64))
    }

    fn visit_i64<E>(self, n: i64) -> Result<JsNumber, E> {
        Ok(JsNumber(n as f64))
    }

    fn visit_f64<E>(self, n: f64) -> Result<JsNumber, E> {
        Ok(JsNumber(n))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsNumber, A::Error> {
        // Only `serde_json`'s one-member number map; an object is not a number.
        let key = map.next_key::<String>()?;
        if key.as_deref() != Some(NUMBER_TOKEN) {
            return Err(de::Error::custom("not a number"));
        }
        let text = map.next_value::<String>()?;
        if map.next_key::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("not a number"));
        }
        text.parse::<f64>()
            .map(JsNumber)
            .map_err(|_| de::Error::custom("invalid number"))
    }
}
