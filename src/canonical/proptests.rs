//! Property tests: the reader and the writer agree with a model written plainly here, from
//! `serde_json` (the grammar) and the JavaScript rules (`JSON.stringify` escapes, UTF-8 key
//! order, `Number.prototype.toString`), on generated values and texts.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// A generated value: objects as member lists with distinct keys, numbers finite and exact.
#[derive(Clone, Debug)]
enum M {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<M>),
    Obj(Vec<(String, M)>),
}

/// ECMAScript `Number.prototype.toString` (ECMA-262, Number::toString), from the shortest
/// round-trip digits that Rust's `{:e}` gives, with the spec's tie rule applied on top: when
/// `x` lies exactly halfway between the two shortest candidates, JavaScript takes the even one
/// (`-1768136825210606.25` is `-1768136825210606.2` in JavaScript; Rust writes `.3`).
fn js_number(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if x < 0.0 {
        return format!("-{}", js_number(-x));
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap();
    let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // x rounded to 40 digits past the shortest ones. A tie is a 5 there followed only by zeros;
    // a value whose exact expansion runs longer has a nonzero digit there, and is no tie.
    let exact = format!("{:.*e}", digits.len() + 40, x);
    let (exact_mantissa, exact_exp) = exact.split_once('e').unwrap();
    let exact_digits: String = exact_mantissa.chars().filter(|c| *c != '.').collect();
    let (low, rest) = exact_digits.split_at(digits.len());
    let tie = exact_exp == exp && rest.starts_with('5') && rest[1..].bytes().all(|b| b == b'0');
    if tie && (low.as_bytes()[low.len() - 1] - b'0').is_multiple_of(2) {
        digits = low.to_owned();
    }
    let k = digits.len() as i64;
    let n = exp.parse::<i64>().unwrap() + 1;
    if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let sign = if e < 0 { '-' } else { '+' };
        let rest = if k == 1 {
            String::new()
        } else {
            format!(".{}", &digits[1..])
        };
        format!("{}{rest}e{sign}{}", &digits[..1], e.abs())
    }
}

/// `JSON.stringify` of a string.
fn js_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The canonical text of `m`: no whitespace, keys in UTF-8 byte order.
fn model_text(m: &M) -> String {
    match m {
        M::Null => "null".into(),
        M::Bool(b) => b.to_string(),
        M::Num(n) => js_number(*n),
        M::Str(s) => js_string(s),
        M::Arr(items) => format!(
            "[{}]",
            items.iter().map(model_text).collect::<Vec<_>>().join(",")
        ),
        M::Obj(members) => {
            let mut sorted: Vec<&(String, M)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            let parts: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{}", js_string(k), model_text(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// The same value with `serde_json` writing the scalars (its number and escape forms), spaces
/// around the punctuation and members in generated order: valid JSON that is not canonical
/// whenever it differs from [`model_text`].
fn serde_text(m: &M) -> String {
    match m {
        M::Null => "null".into(),
        M::Bool(b) => b.to_string(),
        M::Num(n) => serde_json::Number::from_f64(*n).unwrap().to_string(),
        M::Str(s) => serde_json::to_string(s).unwrap(),
        M::Arr(items) => format!(
            "[ {} ]",
            items.iter().map(serde_text).collect::<Vec<_>>().join(" , ")
        ),
        M::Obj(members) => {
            let parts: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{} : {}", serde_json::to_string(k).unwrap(), serde_text(v)))
                .collect();
            format!("{{ {} }}", parts.join(" , "))
        }
    }
}

/// The value the reader must give for `m`.
fn model_value(m: &M) -> Value {
    match m {
        M::Null => Value::Null,
        M::Bool(b) => Value::Bool(*b),
        M::Num(n) => Value::Number(*n),
        M::Str(s) => Value::String(s.clone()),
        M::Arr(items) => Value::Array(items.iter().map(model_value).collect()),
        M::Obj(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), model_value(v)))
                .collect::<BTreeMap<_, _>>()
                .into(),
        ),
    }
}

/// Numbers canonical JSON writes exactly: safe integers, fractions, tiny and huge
/// non-integers, subnormals.
fn number() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-9_007_199_254_740_991i64..=9_007_199_254_740_991).prop_map(|n| n as f64),
        (-1000i64..1000).prop_map(|n| n as f64),
        any::<f64>(),
        (-1e6f64..1e6),
        (1u32..1000, -330i32..-300).prop_map(|(m, e)| format!("{m}e{e}").parse().unwrap()),
    ]
    .prop_filter("exact", |n| !is_lossy_number(*n))
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_]{0,8}",
        any::<String>(),
        "[\"\\\\\u{0}-\u{1f}\u{7f}\u{2028}é😀/]{0,6}",
    ]
}

fn value() -> impl Strategy<Value = M> {
    let leaf = prop_oneof![
        Just(M::Null),
        any::<bool>().prop_map(M::Bool),
        number().prop_map(M::Num),
        text().prop_map(M::Str),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(M::Arr),
            prop::collection::btree_map(text(), inner, 0..6)
                .prop_map(|m| M::Obj(m.into_iter().rev().collect())),
        ]
    })
}

/// What `serde_json` reads from `text`, when it reads it, with numbers as doubles.
fn serde_value(text: &str) -> Option<Value> {
    fn conv(v: serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            // `Number(text)`: one correctly rounded conversion of the decimal text.
            serde_json::Value::Number(n) => Value::Number(n.to_string().parse().unwrap()),
            serde_json::Value::String(s) => Value::String(s),
            serde_json::Value::Array(a) => Value::Array(a.into_iter().map(conv).collect()),
            serde_json::Value::Object(o) => {
                Value::Object(o.into_iter().map(|(k, v)| (k, conv(v))).collect())
            }
        }
    }
    serde_json::from_str(text).ok().map(conv)
}

proptest! {
    #![proptest_config(crate::tests::prop_support::config(512))]

    /// The model's canonical text reads back as the value, is proven canonical, and is what
    /// the writer writes.
    #[test]
    fn canonical_text_round_trips(m in value()) {
        let text = model_text(&m);
        let want = model_value(&m);
        prop_assert_eq!(parse_canonical(&text), Ok(want.clone()));
        prop_assert_eq!(to_canonical(&want), Ok(text));
    }

    /// Leaving top-level members out of an object's canonical text by scanning the text gives
    /// the bytes the writer gives leaving them out of the tree, whatever the members hold
    /// (nested objects, escaped quotes and backslashes in keys and strings).
    #[test]
    fn members_left_out_of_the_text_equal_those_left_out_of_the_tree(
        members in prop::collection::btree_map(text(), value(), 0..8),
        extra in prop::collection::vec(("[a-z_]{1,12}", value()), 0..3),
        keep in any::<prop::sample::Index>(),
    ) {
        let mut all: Vec<(String, M)> = members.into_iter().collect();
        all.extend(extra.iter().cloned());
        let tree = model_value(&M::Obj(all.clone()));
        let Value::Object(map) = &tree else { unreachable!() };
        // Skip the generated plain keys, and one of the others when it is plain.
        let mut skip: Vec<String> = extra.iter().map(|(k, _)| k.clone()).collect();
        if !map.is_empty() {
            let k = map.keys().nth(keep.index(map.len())).unwrap();
            if k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                skip.push(k.clone());
            }
        }
        let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
        let text = to_canonical_unchecked(&tree);
        let (mut by_text, mut by_tree) = (String::new(), String::new());
        write_canonical_text_without(&mut by_text, &text, &skip);
        write_canonical_without(&mut by_tree, &tree, &skip);
        prop_assert_eq!(by_text, by_tree);
    }

    /// Valid JSON that is not the canonical text (whitespace, member order, number and escape
    /// forms) reads as the same value and is refused as not canonical.
    #[test]
    fn other_texts_of_a_value_are_refused(m in value(), escape in any::<bool>()) {
        let canonical = model_text(&m);
        let mut text = serde_text(&m);
        // Write the first character of the first string as a `\u` escape.
        if escape
            && let Some(at) = text.find('"')
            && let Some(c) = text[at + 1..].chars().next().filter(|c| *c != '"' && *c != '\\')
        {
            let mut units = [0u16; 2];
            let escaped: String = c
                .encode_utf16(&mut units)
                .iter()
                .map(|u| format!("\\u{u:04X}"))
                .collect();
            text.replace_range(at + 1..at + 1 + c.len_utf8(), &escaped);
        }
        prop_assert_eq!(parse(&text), Ok(model_value(&m)));
        if text != canonical {
            prop_assert_eq!(parse_canonical(&text), Err(Error::NotCanonical));
        }
    }

    /// A repeated key (also when written escaped) is refused; without it the object reads.
    #[test]
    fn duplicate_keys_are_refused(m in value(), key in text(), escaped in any::<bool>()) {
        let inner = model_text(&m);
        let second = if escaped {
            key.encode_utf16().map(|u| format!("\\u{u:04x}")).collect::<String>()
        } else {
            js_string(&key)[1..js_string(&key).len() - 1].to_owned()
        };
        let text = format!("{{{}:{inner},\"{second}\":null}}", js_string(&key));
        prop_assert!(
            matches!(parse(&text), Err(Error::DuplicateKey { key: ref k }) if *k == key),
            "{:?}", parse(&text)
        );
        let single = format!("{{{}:{inner}}}", js_string(&key));
        prop_assert!(parse(&single).is_ok());
    }

    /// No text makes the reader panic, and on JSON-like text it accepts exactly what
    /// `serde_json` accepts (these texts are too small for the limits; a repeated key is
    /// the only other refusal), with the same value.
    #[test]
    fn reader_agrees_with_serde_json_on_any_text(
        text in prop_oneof![
            any::<String>(),
            "[\\[\\]{}\",:0-9a-fA-Fu.eE+\\- \\\\tnrl]{0,24}",
            value().prop_map(|m| model_text(&m)).prop_flat_map(|t| {
                let len = t.len();
                (Just(t), 0..=len, any::<u8>())
            }).prop_map(|(t, at, b)| {
                let mut bytes = t.into_bytes();
                let b = [b'"', b',', b'}', b']', b'\\', b'0', b' ', b'e', b'-', b':'][b as usize % 10];
                bytes.insert(at, b);
                String::from_utf8(bytes).unwrap_or_default()
            }),
        ]
    ) {
        let ours = parse(&text);
        match (&ours, serde_value(&text)) {
            (Ok(v), Some(theirs)) => prop_assert_eq!(v, &theirs),
            (Err(Error::DuplicateKey { .. }), Some(_)) => {}
            (Err(Error::Syntax { offset, .. }), None) => prop_assert!(*offset <= text.len()),
            (ours, theirs) => prop_assert!(false, "ours {:?}, serde_json {:?}", ours, theirs),
        }
    }
}

/// The model itself, on the texts ECMAScript gives (`String(x)`).
#[test]
// The halfway cases are written as their exact values, more digits than the shortest.
#[allow(clippy::excessive_precision)]
fn model_numbers_are_javascripts() {
    for (x, js) in [
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (0.000001, "0.000001"),
        (123.456, "123.456"),
        (-1.5e-300, "-1.5e-300"),
        (5e-324, "5e-324"),
        (100.0, "100"),
        (1.2345e22, "1.2345e+22"),
        // Exactly halfway between the two shortest candidates: the even one (node 20).
        (-1768136825210606.25, "-1768136825210606.2"),
        (1125899906842624.25, "1125899906842624.2"),
        (1125899906842624.75, "1125899906842624.8"),
        (4503599627370497.5, "4503599627370498"),
    ] {
        assert_eq!(js_number(x), js, "{x}");
        if !is_lossy_number(x) {
            assert_eq!(to_canonical(&Value::Number(x)).as_deref(), Ok(js), "{x}");
        }
    }
}
