//! Redaction of free text: the secret shapes masked in an act and in an outcome, and the
//! cleaning of an outcome's `summary`, `error_message` and `progress` before they are stored.
//!
//! # Where the secret shapes come from
//!
//! [`mask_secrets`] applies the reference runtime's own five rules: the act scrub of its SDK
//! helpers (`runGoverned` / `run_governed`) and the server's redaction of outcome text. They
//! are NOT the ledger's privacy rules ([`crate::privacy`], the scanner families of the event
//! ledger): the act hash depends on exactly these masks (a different mask is a different hash,
//! and the claim of an action created by a reference client would be refused), so they are
//! kept as the reference has them, in Rust regex syntax:
//!
//! | shape | masked as |
//! |---|---|
//! | `password=`, `passwd=`, `token=`, `secret=`, `api_key=`/`api-key=`/`apikey=` values (any case) | `token=[REDACTED]` |
//! | `Bearer <token>` (any case) | `Bearer [REDACTED]` |
//! | `oc_live_…` | `[REDACTED]` |
//! | `sk-` and 10 or more token characters | `[REDACTED]` |
//! | `ghp_` and 20 or more letters or digits | `[REDACTED]` |
//!
//! An outcome's text is also cleared of the ledger's confidential identifiers
//! ([`privacy::contains_confidential_identifier`]: home paths, private addresses, …), word by
//! word, and truncated to [`MAX_TEXT_UNITS`](super::MAX_TEXT_UNITS) UTF-16 code units; what was found is counted in a
//! [`Security`] block.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

use crate::canonical::Value;
use crate::privacy;

/// The text that replaces a secret or confidential identifier.
pub const REDACTED: &str = "[REDACTED]";

static SECRET_PATTERNS: LazyLock<[(Regex, &'static str); 5]> = LazyLock::new(|| {
    let re = |s: &str| Regex::new(s).expect("secret pattern compiles");
    [
        (
            re(r"(?i)\b(password|passwd|token|secret|api[_-]?key)=([^\s&]+)"),
            "${1}=",
        ),
        (re(r"(?i)\b(bearer)\s+([A-Za-z0-9._~+/=-]+)"), "${1} "),
        (re(r"()(oc_live_[A-Za-z0-9_-]+)"), ""),
        (re(r"()\b(sk-[A-Za-z0-9_-]{10,})"), ""),
        (re(r"()\b(ghp_[A-Za-z0-9]{20,})"), ""),
    ]
});

/// Masks the reference's five secret shapes (see the module doc) in `text`: `password=`/`token=`/`secret=`/`api_key=`
/// values, `Bearer` tokens, `oc_live_…`, `sk-…` (10+ characters) and `ghp_…` (20+ characters)
/// become `[REDACTED]`. Returns the masked text and the number of masks applied. Pure and
/// idempotent.
pub fn mask_secrets(text: &str) -> (String, usize) {
    // Every pattern needs one of these; most texts have none, and then the patterns (slow to
    // compile in a debug build) are not needed at all.
    let lower = text.to_ascii_lowercase();
    if !["=", "bearer", "oc_live_", "sk-", "ghp_"]
        .iter()
        .any(|t| lower.contains(t))
    {
        return (text.to_owned(), 0);
    }
    let mut out = text.to_owned();
    let mut count = 0;
    for (re, prefix) in SECRET_PATTERNS.iter() {
        let replaced = re.replace_all(&out, |c: &regex::Captures<'_>| {
            let value = &c[2];
            // Already masked (or a prefix of the mask left by truncation): keep.
            if REDACTED.starts_with(value) {
                return c[0].to_owned();
            }
            count += 1;
            let mut expanded = String::new();
            c.expand(prefix, &mut expanded);
            expanded + REDACTED
        });
        out = replaced.into_owned();
    }
    (out, count)
}

/// What the redaction of an outcome's free text found (the `security` block of an outcome answer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// Secrets and confidential identifiers replaced by `[REDACTED]`.
    pub findings: usize,
    /// Their kinds: `secret` ([`mask_secrets`]) and `confidential_identifier` (the ledger's
    /// confidential identifiers, [`privacy::contains_confidential_identifier`]).
    pub categories: BTreeSet<&'static str>,
}

impl Security {
    /// Whether nothing was redacted.
    pub fn is_clean(&self) -> bool {
        self.findings == 0
    }

    /// `{"categories":[…],"clean":…,"findings_count":…}`.
    pub fn to_value(&self) -> Value {
        Value::object([
            ("clean", Value::Bool(self.is_clean())),
            ("findings_count", Value::from(self.findings as i64)),
            (
                "categories",
                Value::Array(self.categories.iter().map(|c| Value::str(*c)).collect()),
            ),
        ])
    }
}

static WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\S+").expect("word pattern"));

fn redact_once(text: &str, security: &mut Security) -> String {
    let (masked, secrets) = mask_secrets(text);
    if secrets > 0 {
        security.findings += secrets;
        security.categories.insert("secret");
    }
    let mut confidential = 0;
    let words = WORD.replace_all(&masked, |c: &regex::Captures<'_>| {
        if privacy::contains_confidential_identifier(&c[0]) {
            confidential += 1;
            REDACTED.to_owned()
        } else {
            c[0].to_owned()
        }
    });
    let mut out = words.into_owned();
    // A value can be confidential only as a whole (spanning whitespace): drop all of it.
    if privacy::contains_confidential_identifier(&out) {
        confidential += 1;
        out = REDACTED.to_owned();
    }
    if confidential > 0 {
        security.findings += confidential;
        security.categories.insert("confidential_identifier");
    }
    out
}

fn truncate_units(text: &str, max: usize) -> String {
    let mut units = 0;
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        if units + c.len_utf16() > max {
            end = i;
            break;
        }
        units += c.len_utf16();
    }
    text[..end].to_owned()
}

/// Whether `text` says nothing: empty, or only whitespace and characters that show nothing
/// (zero-width spaces and joiners, U+FEFF, the soft hyphen, direction marks and isolates, the
/// Hangul fillers, the braille blank). A required reason made of them is missing.
pub fn is_blank(text: &str) -> bool {
    text.chars().all(|c| {
        c.is_whitespace()
            || matches!(
                c,
                '\u{00AD}'
                    | '\u{034F}'
                    | '\u{061C}'
                    | '\u{115F}'
                    | '\u{1160}'
                    | '\u{17B4}'
                    | '\u{17B5}'
                    | '\u{180B}'..='\u{180F}'
                    | '\u{200B}'..='\u{200F}'
                    | '\u{202A}'..='\u{202E}'
                    | '\u{2060}'..='\u{206F}'
                    | '\u{2800}'
                    | '\u{3164}'
                    | '\u{FE00}'..='\u{FE0F}'
                    | '\u{FEFF}'
                    | '\u{FFA0}'
            )
    })
}

/// The stored form of a `summary` or `error_message`: NUL characters removed, secrets and
/// confidential identifiers replaced by `[REDACTED]`, truncated to `max_units` UTF-16 code units
/// (never rejected). The result is a fixed point: cleaning it again changes nothing
/// (`verify` relies on that).
pub fn clean_text(text: &str, max_units: usize, security: &mut Security) -> String {
    let mut current = text.replace('\0', "");
    for _ in 0..4 {
        let next = truncate_units(&redact_once(&current, security), max_units);
        if next == current {
            return current;
        }
        current = next;
    }
    REDACTED.to_owned()
}

pub(super) fn clean_value(value: &Value, security: &mut Security) -> Value {
    match value {
        Value::String(s) => Value::String(clean_text(s, usize::MAX, security)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| clean_value(v, security)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), clean_value(v, security)))
                .collect(),
        ),
        other => other.clone(),
    }
}

pub(super) fn keys_confidential(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().any(keys_confidential),
        Value::Object(map) => map.iter().any(|(k, v)| {
            k.contains('\0') || privacy::contains_confidential_identifier(k) || keys_confidential(v)
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::*;

    #[test]
    fn redaction_is_a_fixed_point() {
        let samples = [
            "token=oc_live_fixture and password=hunter2",
            "Bearer abc.def and sk-abcdefghijklmnopq",
            "see /home/alice/x and 10.0.0.7 or http://localhost:8080/a",
            "plain words only",
            &format!("{}token=abcdef", "x".repeat(3990)),
            &format!("{} ghp_abcdefghijklmnopqrstuvwxyz", "y".repeat(3985)),
        ];
        for s in samples {
            let mut sec = Security::default();
            let once = clean_text(s, MAX_TEXT_UNITS, &mut sec);
            let mut again = Security::default();
            assert_eq!(clean_text(&once, MAX_TEXT_UNITS, &mut again), once, "{s}");
            assert!(again.is_clean(), "{s}: {once}");
            assert!(privacy::utf16_len(&once) <= MAX_TEXT_UNITS);
        }
        let mut sec = Security::default();
        assert_eq!(
            clean_text("plain words only", 4000, &mut sec),
            "plain words only"
        );
        assert!(sec.is_clean());
        // Truncation never splits a surrogate pair.
        assert_eq!(truncate_units("a😀b", 2), "a");
        assert_eq!(truncate_units("a😀b", 3), "a😀");
    }
}
