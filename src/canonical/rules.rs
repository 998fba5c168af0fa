//! The rules a canonical value obeys beyond its shape: the complexity limits, the lossy-number
//! rule and, for identity trees, the credential-key rule.

use std::fmt::Write as _;

use super::{Error, MAX_BYTES, MAX_DEPTH, MAX_NODES, MAX_SAFE_INTEGER, Value};

struct Budget {
    nodes: usize,
    bytes: usize,
}

/// The checks of canonical JSON, in the reference's order (`actionLedgerJson` and, with
/// `identity`, `canonicalIdentityJson`):
///
/// 1. the complexity limits, over the whole tree first ([`limits`]), walked pre-order in
///    JavaScript's property order ([`super::Object::js_order`]); at each value: its depth
///    (over 64), then the node count (over 10,000, a container counting its children on entry),
///    then the estimated size (over 1 MiB);
/// 2. then one walk in canonical key order ([`kinds`]): a lossy number fails where it is met;
///    with `identity`, each object key is checked against the credential rule when the walk
///    reaches it, before its value is walked.
///
/// So a tree with several faults reports the one the reference reports: a depth fault under a
/// credential-named key is a depth fault, and `{"a":[{"token":1}],"token":1}` fails at `$.a[0]`.
pub(super) fn validate(value: &Value, identity: bool) -> Result<(), Error> {
    let mut budget = Budget { nodes: 0, bytes: 0 };
    let mut path = String::from("$");
    limits(value, 0, &mut path, &mut budget)?;
    kinds(value, &mut path, identity)
}

/// Step 1 of [`validate`]: depth, node and size limits.
fn limits(
    value: &Value,
    depth: usize,
    path: &mut String,
    budget: &mut Budget,
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
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                limits(item, depth + 1, path, budget)?;
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            let mut member = |k: &str, v: &Value| -> Result<(), Error> {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                limits(v, depth + 1, path, budget)?;
                path.truncate(len);
                Ok(())
            };
            match map.js_order() {
                Some(members) => members.into_iter().try_for_each(|(k, v)| member(k, v))?,
                None => map.iter().try_for_each(|(k, v)| member(k, v))?,
            }
        }
        _ => {}
    }
    Ok(())
}

/// Step 2 of [`validate`]: lossy numbers and, for identities, credential-named keys, in
/// canonical key order.
fn kinds(value: &Value, path: &mut String, identity: bool) -> Result<(), Error> {
    match value {
        Value::Number(n) if is_lossy_number(*n) => {
            return Err(Error::LossyNumber { path: path.clone() });
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                kinds(item, path, identity)?;
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter() {
                if identity && is_credential_key(k) {
                    return Err(Error::CredentialField { path: path.clone() });
                }
                let len = path.len();
                path.push('.');
                path.push_str(k);
                kinds(v, path, identity)?;
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

/// Appends `segment` (`[3]`, `.key`) to `path` and runs `find` on it; the segment stays only
/// when `find` found something, so `path` then names the value found.
fn descend(
    path: &mut String,
    segment: std::fmt::Arguments<'_>,
    find: impl FnOnce(&mut String) -> bool,
) -> bool {
    let len = path.len();
    let _ = path.write_fmt(segment);
    let found = find(path);
    if !found {
        path.truncate(len);
    }
    found
}

/// The path (`$.a[1].b`, as [`Error::LossyNumber`] names it) of the first number of `value`,
/// in key order, that [`is_lossy_number`] refuses; `None` when there is none. Only that rule is
/// applied: no depth, node or size limit.
pub fn find_lossy_number(value: &Value) -> Option<String> {
    fn walk(value: &Value, path: &mut String) -> bool {
        match value {
            Value::Number(n) => is_lossy_number(*n),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .any(|(i, item)| descend(path, format_args!("[{i}]"), |p| walk(item, p))),
            Value::Object(map) => map
                .iter()
                .any(|(k, v)| descend(path, format_args!(".{k}"), |p| walk(v, p))),
            _ => false,
        }
    }
    let mut path = String::from("$");
    walk(value, &mut path).then_some(path)
}

/// The path (as [`find_lossy_number`] names it) of the first number, in key order, of the JSON
/// value at `pointer` (a JSON Pointer, `""` for the whole document) in `text` whose text stands
/// for another value than the canonical text of the double it reads as: `1e-400` reads as `0`,
/// `1.00000000000000000001` as `1`, `0.10000000000000001` as `0.1`. Such a number shares its
/// canonical text with every other text that rounds to the same double. Texts that only write
/// the same value differently (`1.0`, `1E0`, `10e-1` for `1`) are exact. Numbers the lossy rule
/// refuses ([`is_lossy_number`]) are left to it. `None` also when `text` is not JSON or has no
/// value at `pointer`: parse it with [`super::parse`] first.
pub fn find_inexact_number(text: &str, pointer: &str) -> Option<String> {
    fn walk(value: &serde_json::Value, path: &mut String) -> bool {
        match value {
            serde_json::Value::Number(n) => is_inexact(n.as_str()),
            serde_json::Value::Array(items) => items
                .iter()
                .enumerate()
                .any(|(i, item)| descend(path, format_args!("[{i}]"), |p| walk(item, p))),
            serde_json::Value::Object(map) => {
                // Canonical key order whatever order the map keeps.
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                keys.into_iter()
                    .any(|k| descend(path, format_args!(".{k}"), |p| walk(&map[k], p)))
            }
            _ => false,
        }
    }
    // `serde_json` with `arbitrary_precision` keeps each number's text.
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let doc = <serde_json::Value as serde::Deserialize>::deserialize(&mut de).ok()?;
    let mut path = String::from("$");
    walk(doc.pointer(pointer)?, &mut path).then_some(path)
}

/// Whether the JSON number `text` stands for another decimal value than the canonical text of
/// the double it reads as (see [`find_inexact_number`]).
fn is_inexact(text: &str) -> bool {
    let Ok(n) = text.parse::<f64>() else {
        return true;
    };
    if is_lossy_number(n) {
        return false;
    }
    decimal(text) != decimal(&super::to_canonical_unchecked(&Value::Number(n)))
}

/// The exact value of JSON number text (the canonical writer's texts included) as sign,
/// significant digits without leading or trailing zeros, and the power of ten of the last
/// digit; zero is `(false, "", 0)`. Exponents beyond ±2^60 saturate: no double comes near.
fn decimal(text: &str) -> (bool, String, i64) {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], &unsigned[i + 1..]),
        None => (unsigned, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    const BOUND: i64 = 1 << 60;
    let exponent = exponent
        .parse::<i64>()
        .unwrap_or(if exponent.starts_with('-') {
            -BOUND
        } else {
            BOUND
        })
        .clamp(-BOUND, BOUND);
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    if significant.is_empty() {
        return (false, String::new(), 0);
    }
    let power = exponent - frac.len() as i64 + (digits.len() - significant.len()) as i64;
    (negative, significant.to_owned(), power)
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

/// The high-risk credential key rule of the reference's identity hashing: strip everything outside `[A-Za-z0-9]`,
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

/// Bytes of the canonical text of the string `s`, quotes included (what [`super::to_canonical`]
/// writes for it), without writing it.
pub(super) fn escaped_len(s: &str) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{parse, to_canonical, to_identity_canonical};

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

    /// A number text that rounds to a double written otherwise is found, at any depth, under
    /// the pointer only; texts that write the canonical value differently are exact.
    #[test]
    fn finds_numbers_whose_text_rounds() {
        for (text, pointer, path) in [
            (r#"{"n":1e-400}"#, "", Some("$.n")),
            (r#"{"n":-1e-400}"#, "", None), // -0: the lossy rule's
            (r#"{"n":1.00000000000000000001}"#, "", Some("$.n")),
            (r#"{"n":0.10000000000000001}"#, "", Some("$.n")),
            (r#"{"a":{"b":[0,2.5e-324]}}"#, "", Some("$.a.b[1]")),
            (r#"{"n":4.9406564584124654e-324}"#, "", Some("$.n")),
            (r#"{"n":1e400}"#, "", None), // Infinity: the lossy rule's
            (r#"{"n":9007199254740993}"#, "", None), // beyond 2^53: the lossy rule's
            (r#"{"n":123456789012345678}"#, "", None),
            (r#"{"b":1e-999999999999999999999,"a":0.3}"#, "", Some("$.b")),
            (
                r#"{"act":{"x":[1,1e-400]},"other":1e-400}"#,
                "/act",
                Some("$.x[1]"),
            ),
            (r#"{"act":{"x":1},"other":1e-400}"#, "/act", None),
            (r#"{"other":1e-400}"#, "/act", None),
            (
                r#"{"ok":[1.0,1E0,10e-1,0.1,100e-3,5e-324,1e-7,-2.5e-300,0e-999999,0.0,1.5E+2]}"#,
                "",
                None,
            ),
        ] {
            assert_eq!(
                find_inexact_number(text, pointer).as_deref(),
                path,
                "{text} at {pointer:?}"
            );
        }
        assert_eq!(decimal("1.50e+2"), (false, "15".into(), 1));
        assert_eq!(decimal("-0.00120"), (true, "12".into(), -4));
        assert_eq!(decimal("0e5"), (false, String::new(), 0));
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

    /// The limits are checked over the whole tree before any credential-named key: under
    /// `token`, a value too deep, too large or with too many nodes reports the limit, with the
    /// path into the value, as the reference does.
    #[test]
    fn limits_come_before_credential_keys() {
        let deep = (0..64).fold(Value::Number(1.0), |v, _| Value::Array(vec![v]));
        let cases = [
            (
                Value::object([("token", deep.clone())]),
                Error::DepthLimit {
                    path: format!("$.token{}", "[0]".repeat(64)),
                },
            ),
            (
                Value::object([
                    ("a", Value::Null),
                    ("password", Value::object([("x", deep)])),
                ]),
                Error::DepthLimit {
                    path: format!("$.password.x{}", "[0]".repeat(63)),
                },
            ),
            (
                Value::object([("token", Value::str("a".repeat(MAX_BYTES)))]),
                Error::SizeLimit {
                    path: "$.token".into(),
                },
            ),
            (
                Value::object([("token", Value::Array(vec![Value::Null; MAX_NODES]))]),
                Error::NodeLimit {
                    path: "$.token".into(),
                },
            ),
            (
                Value::object([("api_key", Value::Array(vec![Value::Null; MAX_NODES - 2]))]),
                Error::CredentialField { path: "$".into() },
            ),
        ];
        for (value, error) in cases {
            assert_eq!(to_identity_canonical(&value), Err(error));
        }
    }

    /// Credential keys are checked as the walk reaches them, in canonical key order and
    /// depth first, together with lossy numbers: the first fault met is reported.
    #[test]
    fn credential_keys_are_checked_as_the_walk_meets_them() {
        for (text, error) in [
            (
                r#"{"a":[{"token":1}],"token":1}"#,
                Error::CredentialField {
                    path: "$.a[0]".into(),
                },
            ),
            (
                r#"{"a":[1,{"b":{"secret":2}}],"password":1}"#,
                Error::CredentialField {
                    path: "$.a[1].b".into(),
                },
            ),
            (
                r#"{"a":-0,"token":1}"#,
                Error::LossyNumber { path: "$.a".into() },
            ),
            (
                r#"{"token":{"a":-0}}"#,
                Error::CredentialField { path: "$".into() },
            ),
            (
                r#"{"1.5":{"token":1},"a":[9007199254740993]}"#,
                Error::CredentialField {
                    path: "$.1.5".into(),
                },
            ),
        ] {
            let v = parse(text).unwrap();
            assert_eq!(to_identity_canonical(&v), Err(error), "{text}");
        }
    }

    /// Two faulty siblings: the limits report the first in JavaScript's property order (array
    /// index keys ascending, then the order the keys were written in), as the reference walks
    /// them; the canonical order is only for the text.
    #[test]
    fn limits_walk_keys_in_javascript_property_order() {
        let deep = |leaf: &str| format!("{}{leaf}{}", "[".repeat(65), "]".repeat(65));
        let depth_path = |key: &str| format!("$.{key}{}", "[0]".repeat(64));
        for (text, key) in [
            (format!(r#"{{"b":{},"a":{}}}"#, deep("1"), deep("2")), "b"),
            (format!(r#"{{"a":{},"b":{}}}"#, deep("1"), deep("2")), "a"),
            (
                format!(
                    r#"{{"b":{},"10":{},"9":{}}}"#,
                    deep("1"),
                    deep("2"),
                    deep("3")
                ),
                "9",
            ),
            (
                format!(
                    r#"{{"x":{},"09":{},"4294967295":{}}}"#,
                    deep("1"),
                    deep("2"),
                    deep("3")
                ),
                "x",
            ),
        ] {
            let v = crate::canonical::parse_input(&text).unwrap();
            assert_eq!(
                to_canonical(&v),
                Err(Error::DepthLimit {
                    path: depth_path(key)
                }),
                "{text}"
            );
        }
        // Built in code, an object keeps the order its members were given in.
        let deep = (0..65).fold(Value::Null, |v, _| Value::Array(vec![v]));
        let v = Value::object([("z", deep.clone()), ("y", deep)]);
        assert_eq!(
            to_canonical(&v),
            Err(Error::DepthLimit {
                path: depth_path("z")
            })
        );
        // Where a running budget runs out depends on the order too: of 10,001 nodes, the
        // container walked second takes the count past the limit (it counts its children on
        // entry), whichever it is.
        let big = Value::Array(vec![Value::Null; 9_996]);
        let small = Value::Array(vec![Value::Null, Value::Null]);
        let v = Value::object([("b", big.clone()), ("a", small.clone())]);
        assert_eq!(
            to_canonical(&v),
            Err(Error::NodeLimit { path: "$.a".into() })
        );
        let v = Value::object([("a", small), ("b", big)]);
        assert_eq!(
            to_canonical(&v),
            Err(Error::NodeLimit { path: "$.b".into() })
        );
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
