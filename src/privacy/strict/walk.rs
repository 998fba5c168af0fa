//! The walk of a stored line ([`scan_line`], [`first_in_line`], [`refuses_line`]): every string
//! and object key of a JSON text, in the text's own order and without building its tree, with
//! the path of each hit. The tree walk ([`scan`], [`first`]) is kept for tests only, as the
//! model the line walk is checked against.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::ops::ControlFlow;

use super::{Finding, scan_text_remembered};
/// serde_json's key for a number's text (see [`crate::canonical`]'s reader).
use crate::canonical::NUMBER_TOKEN;
#[cfg(test)]
use crate::canonical::Value;

/// Every strict hit in `value`: one [`Finding`] per string value or object key that a rule
/// matches (the first rule of the table for that text). A flagged key's members are not
/// walked, so no flagged text ever appears in a path.
#[cfg(test)]
pub fn scan(value: &Value) -> Vec<Finding> {
    let mut found = Vec::new();
    let _ = walk(value, &mut Vec::new(), &mut |f| {
        found.push(f);
        ControlFlow::Continue(())
    });
    found
}

/// The first strict hit in `value`, in canonical (sorted key) order, or `None`.
#[cfg(test)]
pub fn first(value: &Value) -> Option<Finding> {
    let mut hit = None;
    let _ = walk(value, &mut Vec::new(), &mut |f| {
        hit = Some(f);
        ControlFlow::Break(())
    });
    hit
}

/// Every strict hit in the value that the JSON `text` holds: one [`Finding`] per string value
/// or object key that a rule matches (the first rule of the table for that text), walked in
/// the text's own order without building its tree. A flagged key's members are not walked, so
/// no flagged text ever appears in a path. For canonical text (keys in sorted order) the
/// findings, their paths and their order are those of the parsed value walked in canonical
/// order: the strict pass of a stored line costs one pass over its bytes. Text with keys in
/// another order gives the same findings in the text's order (so [`first_in_line`] may name
/// another of them); text that is not JSON gives the findings before the point where it stops
/// being JSON.
pub fn scan_line(text: &str) -> Vec<Finding> {
    let mut found = Vec::new();
    walk_text(text, &mut |f| {
        found.push(f);
        ControlFlow::Continue(())
    });
    found
}

/// The first strict hit in the value that the JSON `text` holds, as [`scan_line`] walks it, or
/// `None`.
pub fn first_in_line(text: &str) -> Option<Finding> {
    let mut hit = None;
    walk_text(text, &mut |f| {
        hit = Some(f);
        ControlFlow::Break(())
    });
    hit
}

/// Whether the strict profile refuses the JSON text `text`: a strict hit in the value it holds
/// (as [`first_in_line`] finds one), or text that is not one JSON value (trailing bytes
/// included). No tree is built. A key repeated in an object is walked in each of its members,
/// so a text never has fewer hits than any tree read from it. For a stored line that was
/// published, this is whether [`first_in_line`] finds a hit.
pub fn refuses_line(text: &str) -> bool {
    let mut hit = false;
    let whole = walk_text(text, &mut |_| {
        hit = true;
        ControlFlow::Break(())
    });
    hit || !whole
}

/// Walks the value of `text`; whether the whole text was walked and is one JSON value.
fn walk_text(text: &str, emit: &mut dyn FnMut(Finding) -> ControlFlow<()>) -> bool {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut steps = Vec::new();
    // An error is the end of the walk: a break asked for by `emit`, or text that is not JSON.
    TextWalk {
        steps: &mut steps,
        emit,
    }
    .deserialize(&mut de)
    .is_ok()
        && de.end().is_ok()
}

/// The walk of one value of a JSON text, as [`walk`] walks a tree: every string, and every
/// object key (a flagged key's member is skipped).
struct TextWalk<'w, 'de> {
    steps: &'w mut Vec<Step<'de>>,
    emit: &'w mut dyn FnMut(Finding) -> ControlFlow<()>,
}

impl<'de> TextWalk<'_, 'de> {
    fn child(&mut self) -> TextWalk<'_, 'de> {
        TextWalk {
            steps: self.steps,
            emit: self.emit,
        }
    }

    fn text<E: serde::de::Error>(&mut self, s: &str, key: bool) -> Result<bool, E> {
        let Some(rule) = scan_text_remembered(s) else {
            return Ok(false);
        };
        match (self.emit)(Finding::new(render(self.steps), key, rule)) {
            ControlFlow::Continue(()) => Ok(true),
            ControlFlow::Break(()) => Err(E::custom("stop")),
        }
    }

    fn member<A: serde::de::MapAccess<'de>>(
        &mut self,
        key: Cow<'de, str>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        if self.text(&key, true)? {
            return map.next_value::<serde::de::IgnoredAny>().map(drop);
        }
        self.steps.push(Step::Key(key));
        let walked = map.next_value_seed(self.child());
        self.steps.pop();
        walked
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for TextWalk<'_, 'de> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for TextWalk<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: serde::de::Error>(mut self, s: &str) -> Result<(), E> {
        self.text(s, false).map(drop)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        for i in 0.. {
            self.steps.push(Step::Index(i));
            let walked = seq.next_element_seed(self.child());
            self.steps.pop();
            if walked?.is_none() {
                break;
            }
        }
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut first = true;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if std::mem::take(&mut first) && key == NUMBER_TOKEN {
                // A number's text holds nothing to scan. A member that uses the key (the key
                // itself matches no rule: a test says so) is walked as any member.
                self.steps.push(Step::Key(key));
                let number = map.next_value_seed(NumberOrMember(self.child()));
                self.steps.pop();
                if number? {
                    return Ok(());
                }
                continue;
            }
            self.member(key, &mut map)?;
        }
        Ok(())
    }
}

/// An object key: borrowed from the text when it holds no escape.
struct KeySeed;

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(s))
    }
    fn visit_str<E>(self, s: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(s.to_owned()))
    }
}

/// The value under [`NUMBER_TOKEN`] when it is an object's first key: `true` for a number's text
/// (handed over as an owned string, which a string of the text never is: it comes borrowed, or
/// unescaped into a scratch buffer), else the member's value walked.
struct NumberOrMember<'w, 'de>(TextWalk<'w, 'de>);

impl<'de> serde::de::DeserializeSeed<'de> for NumberOrMember<'_, 'de> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NumberOrMember<'_, 'de> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_string<E>(self, _: String) -> Result<bool, E> {
        Ok(true)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<bool, E> {
        self.0.visit_str(s).map(|()| false)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<bool, A::Error> {
        self.0.visit_seq(seq).map(|()| false)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        self.0.visit_map(map).map(|()| false)
    }
}

/// One step of the path to a value: a member key (borrowed from the tree or the text, owned
/// when the text escapes it) or an array index.
enum Step<'v> {
    Key(Cow<'v, str>),
    Index(usize),
}

/// The JSONPath-like text of `steps`: `$`, then `.key` for identifier keys, `["key"]` (with
/// `"` and `\` escaped) for other keys and `[i]` for indices. Only built for a hit.
fn render(steps: &[Step<'_>]) -> String {
    let mut path = String::from("$");
    for step in steps {
        match step {
            Step::Index(i) => {
                let _ = write!(path, "[{i}]");
            }
            Step::Key(key) => {
                let identifier = key
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
                    && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if identifier {
                    path.push('.');
                    path.push_str(key);
                } else {
                    path.push_str("[\"");
                    for c in key.chars() {
                        if c == '"' || c == '\\' {
                            path.push('\\');
                        }
                        path.push(c);
                    }
                    path.push_str("\"]");
                }
            }
        }
    }
    path
}

/// The tree walk: the model [`walk_text`] is checked against (tests only).
#[cfg(test)]
fn walk<'v>(
    value: &'v Value,
    steps: &mut Vec<Step<'v>>,
    emit: &mut dyn FnMut(Finding) -> ControlFlow<()>,
) -> ControlFlow<()> {
    match value {
        Value::String(s) => {
            if let Some(rule) = scan_text_remembered(s) {
                emit(Finding::new(render(steps), false, rule))?;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                steps.push(Step::Index(i));
                let flow = walk(item, steps, emit);
                steps.pop();
                flow?;
            }
        }
        Value::Object(members) => {
            for (key, member) in members {
                if let Some(rule) = scan_text_remembered(key) {
                    emit(Finding::new(render(steps), true, rule))?;
                    continue;
                }
                steps.push(Step::Key(Cow::Borrowed(key)));
                let flow = walk(member, steps, emit);
                steps.pop();
                flow?;
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    ControlFlow::Continue(())
}
