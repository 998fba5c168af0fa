//! The value model: what a ledger value is ([`Value`]) and how one is built and read.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};

use super::MAX_SAFE_INTEGER;
use super::writer::to_canonical_unchecked;

/// A JSON value as the ledger sees it: numbers are IEEE-754 doubles (JavaScript semantics) and
/// objects are kept sorted by UTF-8 key bytes (`String`'s `Ord`), which is the canonical order;
/// an object also remembers the order its keys were given in ([`Object::js_order`]), which
/// decides which fault the complexity limits report first.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as JavaScript holds it (an IEEE-754 double).
    Number(f64),
    /// A string (valid Unicode: lone surrogates are refused by the parser).
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// An object, its keys in canonical (UTF-8 byte) order.
    Object(Object),
}

/// The members of an object: a map in canonical (UTF-8 byte) key order, which is how it is
/// read, written and compared, plus the order the keys were first given in when that differs
/// (parsed text, [`Value::object`]).
///
/// The reference is JavaScript, where an object's keys are walked in *property order*: keys
/// that are array indices (`"0"`, `"7"`, `"10"`, below 2^32 − 1) in ascending numeric order,
/// then the other keys in insertion order. Its complexity limits walk that order, so which of
/// two faulty siblings is reported, and where a running budget runs out, depend on it
/// ([`Object::js_order`]). Equality ignores it: two objects with the same members are equal.
/// The map is reachable through `Deref`; a key inserted through it counts as given after the
/// recorded ones.
#[derive(Clone, Debug, Default)]
pub struct Object {
    map: BTreeMap<String, Value>,
    /// The keys in the order they were first given, when that is not the canonical order.
    given: Option<Vec<String>>,
}

impl Object {
    /// An empty object.
    pub fn new() -> Object {
        Object::default()
    }

    /// Adds the member `key` after those given so far, as a JavaScript property assignment
    /// does: a key already present keeps its place and takes the new value.
    pub fn push(&mut self, key: String, value: Value) {
        if let Some(slot) = self.map.get_mut(&key) {
            *slot = value;
            return;
        }
        match &mut self.given {
            Some(keys) => keys.push(key.clone()),
            // Recorded only from the first key out of canonical order: until then the map's
            // order is the order given.
            None if self
                .map
                .last_key_value()
                .is_some_and(|(last, _)| *last > key) =>
            {
                let mut keys: Vec<String> = self.map.keys().cloned().collect();
                keys.push(key.clone());
                self.given = Some(keys);
            }
            None => {}
        }
        self.map.insert(key, value);
    }

    /// The map, in canonical key order.
    pub fn into_map(self) -> BTreeMap<String, Value> {
        self.map
    }

    /// The members in JavaScript's property order (see [`Object`]) when it differs from the
    /// canonical order, `None` when it is the same (then walk the map itself).
    pub fn js_order(&self) -> Option<Vec<(&str, &Value)>> {
        let has_index = self.map.keys().any(|k| is_array_index(k));
        if self.given.is_none() && !has_index {
            return None;
        }
        let mut indices: Vec<&str> = self
            .map
            .keys()
            .map(String::as_str)
            .filter(|k| is_array_index(k))
            .collect();
        // Without leading zeros, numeric order is length first, then digits.
        indices.sort_by_key(|k| (k.len(), *k));
        let mut keys = indices;
        let mut seen = std::collections::HashSet::new();
        for k in self.given.iter().flatten() {
            if !is_array_index(k) && self.map.contains_key(k) && seen.insert(k.as_str()) {
                keys.push(k);
            }
        }
        // Keys inserted after the recorded ones (or all of them, when none were recorded).
        keys.extend(
            self.map
                .keys()
                .map(String::as_str)
                .filter(|k| !is_array_index(k) && !seen.contains(k)),
        );
        Some(keys.into_iter().map(|k| (k, &self.map[k])).collect())
    }
}

/// Whether JavaScript treats `key` as an array index, which its property order puts first:
/// the canonical decimal text of an integer from 0 to 2^32 − 2.
fn is_array_index(key: &str) -> bool {
    let b = key.as_bytes();
    !b.is_empty()
        && b.len() <= 10
        && b.iter().all(u8::is_ascii_digit)
        && (b[0] != b'0' || b.len() == 1)
        && key.parse::<u64>().is_ok_and(|n| n < u64::from(u32::MAX))
}

impl PartialEq for Object {
    fn eq(&self, other: &Object) -> bool {
        self.map == other.map
    }
}

impl Deref for Object {
    type Target = BTreeMap<String, Value>;

    fn deref(&self) -> &BTreeMap<String, Value> {
        &self.map
    }
}

impl DerefMut for Object {
    fn deref_mut(&mut self) -> &mut BTreeMap<String, Value> {
        &mut self.map
    }
}

impl From<BTreeMap<String, Value>> for Object {
    fn from(map: BTreeMap<String, Value>) -> Object {
        Object { map, given: None }
    }
}

impl FromIterator<(String, Value)> for Object {
    /// Keeps the order the keys are given in; a repeated key keeps its first place and its last
    /// value, as a JavaScript object literal does.
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(entries: I) -> Object {
        let mut object = Object::new();
        for (k, v) in entries {
            object.push(k, v);
        }
        object
    }
}

impl IntoIterator for Object {
    type Item = (String, Value);
    type IntoIter = std::collections::btree_map::IntoIter<String, Value>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.into_iter()
    }
}

impl<'a> IntoIterator for &'a Object {
    type Item = (&'a String, &'a Value);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Value>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl<'a> IntoIterator for &'a mut Object {
    type Item = (&'a String, &'a mut Value);
    type IntoIter = std::collections::btree_map::IterMut<'a, String, Value>;

    fn into_iter(self) -> Self::IntoIter {
        self.map.iter_mut()
    }
}

impl Value {
    /// Builds an object from `(key, value)` pairs, remembering their order
    /// ([`Object::js_order`]); a repeated key keeps the last value.
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

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(n) => Some(*n),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The members, if this is an object.
    pub fn as_object(&self) -> Option<&BTreeMap<String, Value>> {
        match self {
            Value::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The items, if this is an array.
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

impl fmt::Display for Value {
    /// Canonical text without validation (for diagnostics).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_canonical_unchecked(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(v: &Value) -> Vec<&str> {
        let Value::Object(o) = v else {
            panic!("object")
        };
        match o.js_order() {
            Some(members) => members.into_iter().map(|(k, _)| k).collect(),
            None => o.keys().map(String::as_str).collect(),
        }
    }

    /// JavaScript's property order: array-index keys ascending, then the others as given (a
    /// repeated key keeps its first place and its last value); the canonical order, the text
    /// and equality do not depend on it.
    #[test]
    fn objects_keep_javascript_property_order() {
        let n = |x: f64| Value::Number(x);
        let v = Value::object([
            ("b", n(1.0)),
            ("10", n(2.0)),
            ("a", n(3.0)),
            ("9", n(4.0)),
            ("b", n(5.0)),
            ("01", n(6.0)),
            ("4294967294", n(7.0)),
            ("4294967295", n(8.0)),
        ]);
        assert_eq!(
            order(&v),
            ["9", "10", "4294967294", "b", "a", "01", "4294967295"]
        );
        assert_eq!(v.get("b"), Some(&n(5.0)));
        let sorted = Value::object([("01", n(6.0)), ("10", n(2.0))]);
        assert_eq!(order(&sorted), ["10", "01"]);
        let parsed = crate::canonical::parse(r#"{"z":1,"y":{"d":1,"c":2},"x":3}"#).unwrap();
        assert_eq!(order(&parsed), ["z", "y", "x"]);
        assert_eq!(order(parsed.get("y").unwrap()), ["d", "c"]);
        assert_eq!(
            parsed,
            crate::canonical::parse(r#"{"x":3,"y":{"c":2,"d":1},"z":1}"#).unwrap()
        );
        assert_eq!(parsed.to_string(), r#"{"x":3,"y":{"c":2,"d":1},"z":1}"#);
        // A key added later comes after the given ones.
        let Value::Object(mut o) = parsed else {
            unreachable!()
        };
        o.insert("a".into(), Value::Null);
        assert_eq!(order(&Value::Object(o)), ["z", "y", "x", "a"]);
    }
}
