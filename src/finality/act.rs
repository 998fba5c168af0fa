//! The act of an action: what it will do (`{"kind":"shell","command":…}`, an HTTP request, a
//! SQL statement, a file write), as the guard, the creation and the claim see it. The action
//! keeps its `act_content_hash`, and a claim must present an act with the same hash, so an
//! action created for one command cannot be claimed to run another. An action created with
//! details also stores the scrubbed act itself, the very text hashed, so that an approver sees
//! it and `verify` can recompute the hash ([`details`](super::details)).
//!
//! Before hashing, the act is scrubbed ([`scrub_act`]) the way the reference SDKs'
//! `runGoverned` / `run_governed` helpers scrub it on the client: secret headers dropped and
//! secret shapes masked ([`mask_secrets`]). Creation and claim hash the
//! scrubbed act, so a client that scrubbed differently is refused.
//!
//! # The hash
//!
//! `act_content_hash` is `"sha256:" + base64url_nopad(SHA-256(text))` (the `base64` crate's
//! URL-safe alphabet without padding), where `text` is the act written as the reference's
//! deterministic JSON: every string and every key NFC-normalised, object keys sorted by UTF-16
//! code units (JavaScript's default sort), strings and numbers as `JSON.stringify` writes them,
//! no whitespace, nesting at most 100 levels.
//!
//! # Why the act has its own writer
//!
//! Scalars go through the crate's canonical writer ([`canonical::to_canonical_unchecked`]), so
//! there is one string escaper and one number formatter. The walk over arrays and objects is
//! our own because the canonical writer cannot produce these bytes for every act:
//!
//! - canonical JSON sorts object keys by UTF-8 bytes (its objects are `BTreeMap<String, _>`),
//!   the act hash by UTF-16 code units; the two orders differ when keys mix characters above
//!   U+FFFF with characters in U+E000–U+FFFF (`"😀"` sorts before `"ｱ"` in UTF-16, after it
//!   in UTF-8; see the test `act_keys_sort_by_utf16_not_by_the_canonical_order`);
//! - keys are NFC-normalised first, and two keys that become equal make the act unhashable
//!   (`None`) rather than one silently kept;
//! - its depth limit is the reference's 100, not canonical JSON's 64.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};
use unicode_normalization::UnicodeNormalization;

use super::error::Error;
use super::redaction::mask_secrets;
use crate::canonical::{self, Value};

/// The client-side act scrub of the reference SDKs applied to an act: drops the `authorization`, `cookie` and `x-api-key`
/// headers of `request.headers` (any case) and masks secrets ([`mask_secrets`]) in `command`,
/// `statement`, `request.body_excerpt` and `file.content_excerpt`. Non-objects pass through;
/// the input is not changed.
pub fn scrub_act(act: &Value) -> Value {
    let Value::Object(map) = act else {
        return act.clone();
    };
    let mut map = map.clone();
    let mask = |v: Option<&mut Value>| {
        if let Some(Value::String(s)) = v {
            *s = mask_secrets(s).0;
        }
    };
    mask(map.get_mut("command"));
    mask(map.get_mut("statement"));
    if let Some(Value::Object(request)) = map.get_mut("request") {
        if let Some(Value::Object(headers)) = request.get_mut("headers") {
            headers.retain(|k, _| {
                !matches!(
                    k.to_ascii_lowercase().as_str(),
                    "authorization" | "cookie" | "x-api-key"
                )
            });
        }
        mask(request.get_mut("body_excerpt"));
    }
    if let Some(Value::Object(file)) = map.get_mut("file") {
        mask(file.get_mut("content_excerpt"));
    }
    Value::Object(map)
}

/// The act a shell command stands for: `{"command": <argv, POSIX-quoted and space-joined>,
/// "kind": "shell"}`. `run` claims with this act, so an action created for one command cannot
/// be claimed to run another.
pub fn shell_act(argv: &[String]) -> Value {
    let quoted: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    Value::object([
        ("kind", Value::str("shell")),
        ("command", Value::str(quoted.join(" "))),
    ])
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

/// `act_content_hash`: `"sha256:" + base64url_nopad(SHA-256(canonical(act)))`, where the
/// canonical form NFC-normalises every string and key, sorts keys by UTF-16 code units and
/// writes strings and numbers as `JSON.stringify` does, without whitespace. `None` when the act
/// is missing or not an object, nested deeper than 100 levels, or has two keys that are equal
/// after normalisation (where the reference would silently keep one).
///
/// Hash the *scrubbed* act ([`scrub_act`]): the claim recomputes the hash from its own act.
pub fn act_content_hash(act: Option<&Value>) -> Option<String> {
    let act = act?;
    if !matches!(act, Value::Object(_)) {
        return None;
    }
    let mut text = String::new();
    write_act(&mut text, act, 0)?;
    Some(format!(
        "sha256:{}",
        URL_SAFE_NO_PAD.encode(Sha256::digest(text.as_bytes()))
    ))
}

/// Refuses an act that [`act_content_hash`] cannot hash one to one: one whose hash would be
/// missing or shared with a different act, so that an action created for one act could be
/// claimed with another (or with none). In the order checked:
///
/// - an act that is not a JSON object (it has no hash, as a missing act has none);
/// - a number canonical JSON cannot write exactly (the canonical module's lossy-number rule,
///   [`canonical::is_lossy_number`]: `1e400`, `-1e400`, `-0`, integers beyond ±(2^53−1)):
///   `1e400` and `1e401` both become `Infinity`;
/// - then, walking keys in canonical order: nesting deeper than 100 levels (no hash); an
///   object with two keys equal after NFC normalisation (`"é"` and `"e\u{301}"`: the hash
///   would keep one); a key or string not in NFC (the hash normalises it, so `"café"` written
///   with a combining accent would share the hash of the precomposed one).
///
/// A number written with more digits than a double holds (`1e-400` for `0`) reads as the same
/// value as the shorter text, so it cannot be seen here: acts read from text are also checked
/// by [`check_act_text`].
///
/// # Errors
/// [`Error::InvalidInput`] for field `act`, naming the path in the act (`$.n`,
/// `$.request.retries`, `$.args[2]`).
pub fn check_act(act: &Value) -> Result<(), Error> {
    let invalid = |reason: String| {
        Err(Error::InvalidInput {
            field: "act",
            reason,
        })
    };
    if !matches!(act, Value::Object(_)) {
        return invalid(
            "$ must be a JSON object: any other act has no hash, so it would match a claim \
             without an act"
                .into(),
        );
    }
    if let Some(path) = canonical::find_lossy_number(act) {
        return invalid(format!(
            "{path} is a lossy number (not finite, -0, or an integer beyond ±(2^53−1)), \
             which canonical JSON cannot write exactly, so the act cannot be hashed: \
             send it as a string"
        ));
    }
    let mut path = String::from("$");
    match unhashable(act, 0, &mut path) {
        Some(reason) => invalid(reason),
        None => Ok(()),
    }
}

/// The first fault of `value` (at `depth`, at `path`) that makes the act hash fail or normalise
/// it into another act's text; see [`check_act`].
fn unhashable(value: &Value, depth: usize, path: &mut String) -> Option<String> {
    if depth > 100 {
        return Some(format!(
            "{path} is nested deeper than 100 levels, which the act hash does not write, so \
             the act cannot be hashed"
        ));
    }
    let not_nfc = |what: &str, s: &str, path: &str| {
        format!(
            "{what} {} at {path} is not in Unicode normalisation form C; the act hash \
             normalises it to {}, so another act would share its hash: send it NFC-normalised",
            escaped(s),
            escaped(&s.nfc().collect::<String>())
        )
    };
    match value {
        Value::String(s) if !unicode_normalization::is_nfc(s) => {
            Some(not_nfc("the string", s, path))
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| {
            let len = path.len();
            let _ = std::fmt::Write::write_fmt(path, format_args!("[{i}]"));
            let found = unhashable(item, depth + 1, path);
            path.truncate(len);
            found
        }),
        Value::Object(map) => {
            let mut seen: std::collections::BTreeMap<String, &str> = Default::default();
            for k in map.keys() {
                if let Some(first) = seen.insert(k.nfc().collect(), k) {
                    return Some(format!(
                        "{path} has two keys equal after Unicode NFC normalisation ({} and {}), \
                         which the act hash writes as one key, so the act cannot be hashed: \
                         keep one",
                        escaped(first),
                        escaped(k)
                    ));
                }
            }
            map.iter().find_map(|(k, v)| {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                let found = if unicode_normalization::is_nfc(k) {
                    unhashable(v, depth + 1, path)
                } else {
                    Some(not_nfc("the key", k, &path[..len]))
                };
                path.truncate(len);
                found
            })
        }
        _ => None,
    }
}

/// `s` as a JSON string with every character outside printable ASCII escaped (`"e\u0301"`),
/// so a message shows which code points differ.
fn escaped(s: &str) -> String {
    let mut out = String::from("\"");
    for unit in s.encode_utf16() {
        match unit {
            0x20..=0x7e if unit != u16::from(b'"') && unit != u16::from(b'\\') => {
                out.push(char::from(unit as u8));
            }
            _ => out.push_str(&format!("\\u{unit:04x}")),
        }
    }
    out.push('"');
    out
}

/// [`check_act`]'s rule for number *text*, which a parsed [`Value`] no longer holds: refuses
/// an act, the JSON value at `pointer` (a JSON Pointer: `""` for the whole text, `"/act"` for
/// the member of a request body) in `text`, that holds a number written with more digits than
/// a double holds (`1e-400` reads as `0`, `1.00000000000000000001` as `1`). Its hash would be
/// the hash of every act whose number rounds the same way. Texts that only write the value
/// differently (`1.0`, `1E0`) are exact. Call it on text that [`canonical::parse`] accepted.
///
/// # Errors
/// [`Error::InvalidInput`] for field `act`, naming the number's path in the act.
pub fn check_act_text(text: &str, pointer: &str) -> Result<(), Error> {
    match canonical::find_inexact_number(text, pointer) {
        None => Ok(()),
        Some(path) => Err(Error::InvalidInput {
            field: "act",
            reason: format!(
                "{path} is written with more digits than a double holds, so it reads as the \
                 same number as other texts and the act cannot be hashed one to one: send the \
                 number as JavaScript writes it, or as a string"
            ),
        }),
    }
}

fn write_act(out: &mut String, value: &Value, depth: usize) -> Option<()> {
    if depth > 100 {
        return None;
    }
    match value {
        Value::String(s) => {
            out.push_str(&canonical::to_canonical_unchecked(&Value::String(
                s.nfc().collect(),
            )));
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_act(out, item, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(String, &Value)> =
                map.iter().map(|(k, v)| (k.nfc().collect(), v)).collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            if entries.windows(2).any(|w| w[0].0 == w[1].0) {
                return None;
            }
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&canonical::to_canonical_unchecked(&Value::str(k.as_str())));
                out.push(':');
                write_act(out, v, depth + 1)?;
            }
            out.push('}');
        }
        Value::Number(n) if *n == 0.0 => out.push('0'),
        other => out.push_str(&canonical::to_canonical_unchecked(other)),
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;

    /// The act hash orders keys by UTF-16 code units, the canonical writer by UTF-8 bytes: for
    /// keys mixing a character above U+FFFF with one in U+E000–U+FFFF the two texts differ, so
    /// the act cannot be written by the canonical writer alone. Both keys also pass through NFC
    /// unchanged, so nothing else explains the difference.
    #[test]
    fn act_keys_sort_by_utf16_not_by_the_canonical_order() {
        let act = Value::object([("\u{FF71}", Value::from(2)), ("\u{1F600}", Value::from(1))]);
        let mut text = String::new();
        write_act(&mut text, &act, 0).unwrap();
        assert_eq!(text, "{\"\u{1F600}\":1,\"\u{FF71}\":2}");
        assert_eq!(
            canonical::to_canonical_unchecked(&act),
            "{\"\u{FF71}\":2,\"\u{1F600}\":1}"
        );
        // Without such keys the two writers agree byte for byte (one string and number writer).
        let plain = default_act();
        let mut text = String::new();
        write_act(&mut text, &plain, 0).unwrap();
        assert_eq!(text, canonical::to_canonical_unchecked(&plain));
        assert_eq!(
            act_content_hash(Some(&plain)).unwrap(),
            format!(
                "sha256:{}",
                URL_SAFE_NO_PAD.encode(Sha256::digest(
                    canonical::to_canonical_unchecked(&plain).as_bytes()
                ))
            )
        );
    }
    use crate::finality::*;

    /// A lossy number anywhere in an act is refused by create and claim before anything is
    /// read or written, naming its path; it would otherwise be hashed as a stand-in text shared
    /// by other acts (`1e400` and `1e401` are both `Infinity`).
    #[test]
    fn lossy_numbers_in_an_act_are_refused_with_their_path() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let parse = |t: &str| canonical::parse(t).unwrap();
        let (a, b) = (parse(r#"{"n":1e400}"#), parse(r#"{"n":1e401}"#));
        assert_eq!(act_content_hash(Some(&a)), act_content_hash(Some(&b)));
        for (text, path) in [
            (r#"{"kind":"shell","n":1e400}"#, "$.n"),
            (r#"{"kind":"shell","n":-1e400}"#, "$.n"),
            (
                r#"{"kind":"http","request":{"retries":1e401}}"#,
                "$.request.retries",
            ),
            (r#"{"args":["x",1,-0],"kind":"shell"}"#, "$.args[2]"),
            (r#"{"kind":"shell","n":9007199254740993}"#, "$.n"),
            (
                r#"{"kind":"shell","deep":[{"a":[1e21]}]}"#,
                "$.deep[0].a[0]",
            ),
        ] {
            let act = parse(text);
            let want = format!(
                "invalid act: {path} is a lossy number (not finite, -0, or an integer beyond \
                 ±(2^53−1)), which canonical JSON cannot write exactly, so the act cannot be \
                 hashed: send it as a string"
            );
            assert_eq!(check_act(&act).unwrap_err().to_string(), want, "{text}");
            let mut n = new_action("act_lossy");
            n.act = Some(act.clone());
            let e = create_action(&store, &opts, &n, at(BASE)).unwrap_err();
            assert_eq!((e.code(), e.to_string()), ("INVALID_INPUT", want.clone()));
            let mut r = request(ATTEMPT);
            r.act = Some(act);
            let e = claim(&store, &opts, "act_lossy", &r, at(BASE)).unwrap_err();
            assert_eq!((e.code(), e.to_string()), ("INVALID_INPUT", want));
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            None,
            "nothing written"
        );
        assert_eq!(
            check_act(&parse(r#"{"n":[0,0.1,-2.5e-300,9007199254740991]}"#)).ok(),
            Some(())
        );
    }

    /// Every act the hash cannot take one to one (no hash, or another act's hash) is refused by
    /// create and claim before anything is read or written, naming its path; the refused act
    /// does collide (or fails to hash), so each refusal guards a real ambiguity.
    #[test]
    fn acts_the_hash_cannot_take_one_to_one_are_refused_with_their_path() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let parse = |t: &str| canonical::parse(t).unwrap();
        let deep = (0..101).fold(Value::from(1), |v, _| Value::Array(vec![v]));
        let too_deep = format!(
            "$.deep{} is nested deeper than 100 levels",
            "[0]".repeat(100)
        );
        let cases: Vec<(Value, Option<Value>, &str)> = vec![
            (
                parse(r#"{"kind":"shell","command":"ls","\u00e9":1,"e\u0301":2}"#),
                None,
                r#"$ has two keys equal after Unicode NFC normalisation ("e\u0301" and "\u00e9")"#,
            ),
            (
                parse(r#"{"kind":"sql","q":{"a":[{"\u212b":1,"\u00c5":2}]}}"#),
                None,
                r#"$.q.a[0] has two keys equal after Unicode NFC normalisation ("\u00c5" and "\u212b")"#,
            ),
            (
                parse(r#"{"kind":"shell","command":"rm cafe\u0301"}"#),
                Some(parse(r#"{"kind":"shell","command":"rm caf\u00e9"}"#)),
                r#"the string "rm cafe\u0301" at $.command is not in Unicode normalisation form C; the act hash normalises it to "rm caf\u00e9""#,
            ),
            (
                parse(r#"{"kind":"shell","args":[{"e\u0301":1}]}"#),
                Some(parse(r#"{"kind":"shell","args":[{"\u00e9":1}]}"#)),
                r#"the key "e\u0301" at $.args[0] is not in Unicode normalisation form C"#,
            ),
            (parse("[1,2]"), Some(Value::Null), "$ must be a JSON object"),
            (
                Value::str("ls"),
                Some(Value::Null),
                "$ must be a JSON object",
            ),
            (
                Value::object([("kind", Value::str("shell")), ("deep", deep)]),
                None,
                &too_deep,
            ),
        ];
        for (act, twin, want) in cases {
            match twin {
                None => assert_eq!(act_content_hash(Some(&act)), None, "{want}"),
                Some(Value::Null) => assert_eq!(act_content_hash(Some(&act)), None, "{want}"),
                Some(twin) => assert_eq!(
                    act_content_hash(Some(&act)),
                    act_content_hash(Some(&twin)),
                    "{want}"
                ),
            }
            let e = check_act(&act).unwrap_err().to_string();
            assert!(e.starts_with(&format!("invalid act: {want}")), "{e}");
            let mut n = new_action("act_unhashable");
            n.act = Some(act.clone());
            let e = create_action(&store, &opts, &n, at(BASE)).unwrap_err();
            assert_eq!(e.code(), "INVALID_INPUT", "{want}");
            let mut r = request(ATTEMPT);
            r.act = Some(act);
            let e = claim(&store, &opts, "act_unhashable", &r, at(BASE)).unwrap_err();
            assert_eq!(e.code(), "INVALID_INPUT", "{want}");
        }
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            None,
            "nothing written"
        );
        // Numbers written with more digits than a double holds read as another text's value.
        for (text, path) in [
            (r#"{"kind":"shell","n":1e-400}"#, "$.n"),
            (r#"{"kind":"shell","n":1.00000000000000000001}"#, "$.n"),
            (
                r#"{"kind":"shell","x":[{"y":0.10000000000000001}]}"#,
                "$.x[0].y",
            ),
        ] {
            let e = check_act_text(text, "").unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("invalid act: {path} is written with more digits")),
                "{e}"
            );
            let body = format!(r#"{{"act":{text},"n":1e-400}}"#);
            assert_eq!(check_act_text(&body, "/act").unwrap_err().to_string(), e);
        }
        for exact in [r#"{"n":0}"#, r#"{"n":0.0}"#, r#"{"n":1E0}"#, r#"{"n":0.1}"#] {
            assert_eq!(check_act_text(exact, "").ok(), Some(()), "{exact}");
        }
        // NFC text, distinct keys, depth 100: hashed as before.
        let ok = parse(r#"{"kind":"shell","command":"rm caf\u00e9","\u00c5":1,"A":2}"#);
        assert_eq!(check_act(&ok).ok(), Some(()));
        assert!(act_content_hash(Some(&ok)).is_some());
    }

    #[test]
    fn shell_acts_quote_their_arguments() {
        let act = shell_act(&[
            "echo".into(),
            "hello world".into(),
            "it's".into(),
            "".into(),
        ]);
        assert_eq!(
            act.get("command").and_then(Value::as_str),
            Some("echo 'hello world' 'it'\\''s' ''")
        );
    }
}
