//! The act of an action: what it will do (`{"kind":"shell","command":…}`, an HTTP request, a
//! SQL statement, a file write), as the guard, the creation and the claim see it. The act itself
//! is never stored; the action keeps its `act_content_hash`, and a claim must present an act
//! with the same hash, so an action created for one command cannot be claimed to run another.
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

/// Refuses an act that holds a number canonical JSON cannot write exactly (the canonical
/// module's lossy-number rule, [`canonical::is_lossy_number`]: `1e400`, `-1e400`, `-0`,
/// integers beyond ±(2^53−1)). Such a number has no text of its own in the act's canonical
/// form (`1e400` and `1e401` both become `Infinity`), so different acts would share one
/// [`act_content_hash`] and an action created for one could be claimed with another.
///
/// # Errors
/// [`Error::InvalidInput`] for field `act`, naming the number's path in the act (`$.n`,
/// `$.request.retries`, `$.args[2]`).
pub fn check_act(act: &Value) -> Result<(), Error> {
    match canonical::find_lossy_number(act) {
        None => Ok(()),
        Some(path) => Err(Error::InvalidInput {
            field: "act",
            reason: format!(
                "{path} is a lossy number (not finite, -0, or an integer beyond ±(2^53−1)), \
                 which canonical JSON cannot write exactly, so the act cannot be hashed: \
                 send it as a string"
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
