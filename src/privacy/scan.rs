//! The confidential-identifier scan (the reference's `containsConfidentialIdentifier`): the 26
//! patterns of check A, the candidates of checks D and E, and the per-thread memory of results.

use std::sync::LazyLock;

use regex::{Regex, RegexSet};

use super::*;

/// One entry of the reference's `ACTION_EVENT_CONFIDENTIAL_IDENTIFIER_PATTERN_SOURCES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfidentialPattern {
    /// 1-based position in the reference list.
    pub id: u8,
    /// What the pattern is meant to catch; our wording, not the reference's.
    pub family: &'static str,
    /// The pattern in `regex` syntax. It matches exactly what the reference's JavaScript
    /// source (used without flags) matches; the JavaScript sources are kept as test vectors,
    /// and a test checks the two agree on every sample of this module.
    pub pattern: &'static str,
}

/// The 26 confidential identifier patterns of the reference (check A), in reference order.
///
/// Each is the reference's JavaScript pattern written in `regex` syntax, which differs from
/// JavaScript's in four places: `\s` is the ECMAScript whitespace set (`js_space!`), `\d`
/// is `[0-9]`, `\b` is the ASCII word boundary `(?-u:\b)`, and pattern 4's trailing
/// look-ahead `/(?!/)` (`regex` has no look-around) is `/(?:[^/]|$)`, which is sound because it
/// ends the pattern and the table is only asked whether a value matches, never where.
pub static CONFIDENTIAL_PATTERNS: [ConfidentialPattern; 26] = [
    ConfidentialPattern {
        id: 1,
        family: "posix private directory",
        pattern: r"/(?:[Uu][Ss][Ee][Rr][Ss]|[Hh][Oo][Mm][Ee]|[Pp][Rr][Ii][Vv][Aa][Tt][Ee]|[Tt][Mm][Pp])/",
    },
    ConfidentialPattern {
        id: 2,
        family: "windows users directory",
        pattern: r"\\[Uu][Ss][Ee][Rr][Ss]\\",
    },
    ConfidentialPattern {
        id: 3,
        family: "windows drive path",
        pattern: r"(?:^|[\\/])[A-Za-z]:[\\/]",
    },
    ConfidentialPattern {
        id: 4,
        family: "scheme-like prefix before an absolute path",
        pattern: r"(?:^|[^A-Za-z0-9+.-])[A-Za-z0-9_.@+-]+:(?:/(?:[^/]|$)|[A-Za-z]:/)",
    },
    ConfidentialPattern {
        id: 5,
        family: "percent-encoded octet",
        pattern: r"%[0-9A-Fa-f]{2}",
    },
    ConfidentialPattern {
        id: 6,
        family: "file url",
        pattern: r"(?:^|[^A-Za-z0-9+.-])[Ff][Ii][Ll][Ee]:",
    },
    ConfidentialPattern {
        id: 7,
        family: "url userinfo",
        pattern: concat!(
            r"(?:^|[^A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^",
            js_space!(),
            r"/@]+@"
        ),
    },
    ConfidentialPattern {
        id: 8,
        family: "userinfo without authority slashes",
        pattern: concat!(
            r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ss][Ss][Hh]|[Ww][Ss]?):(?://)?[^",
            js_space!(),
            r"/@]+@"
        ),
    },
    ConfidentialPattern {
        id: 9,
        family: "pem private key",
        pattern: r"BEGIN (?:RSA |EC |OPENSSH )?PRIVATE KEY",
    },
    ConfidentialPattern {
        id: 10,
        family: "github or openai style token",
        pattern: r"(?:[Gg][Hh][PpOoUuSsRr]_[A-Za-z0-9]{16,}|[Gg][Ii][Tt][Hh][Uu][Bb]_[Pp][Aa][Tt]_[A-Za-z0-9_]{16,}|[Ss][Kk]-[A-Za-z0-9_-]{16,})",
    },
    ConfidentialPattern {
        id: 11,
        family: "npm token",
        pattern: r"(?:^|[^A-Za-z0-9])[Nn][Pp][Mm]_[A-Za-z0-9]{36}(?:$|[^A-Za-z0-9])",
    },
    ConfidentialPattern {
        id: 12,
        family: "slack token",
        pattern: r"(?:^|[^A-Za-z0-9])[Xx][Oo][Xx][A-Za-z]-[A-Za-z0-9-]{10,}(?:$|[^A-Za-z0-9-])",
    },
    ConfidentialPattern {
        id: 13,
        family: "aws access key id",
        pattern: r"(?:^|[^A-Za-z0-9])(?:[Aa][Kk][Ii][Aa]|[Aa][Ss][Ii][Aa])[A-Za-z0-9]{16}(?:$|[^A-Za-z0-9])",
    },
    ConfidentialPattern {
        id: 14,
        family: "json web token",
        pattern: r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{16,}",
    },
    ConfidentialPattern {
        id: 15,
        family: "bearer, api key or cloudflare credential",
        pattern: concat!(
            r"(?:[Bb][Ee][Aa][Rr][Ee][Rr]|[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn]|[Aa][Pp][Ii][_-]?(?:[Kk][Ee][Yy]|[Tt][Oo][Kk][Ee][Nn])|[Aa][Cc][Cc][Ee][Ss][Ss][_-]?[Tt][Oo][Kk][Ee][Nn]|[Cc][Ll][Ii][Ee][Nn][Tt][_-]?[Ss][Ee][Cc][Rr][Ee][Tt]|[Cc][Ll][Oo][Uu][Dd][Ff][Ll][Aa][Rr][Ee][_-]?(?:[Aa][Pp][Ii][_-]?)?(?:[Kk][Ee][Yy]|[Tt][Oo][Kk][Ee][Nn]))(?:[",
            js_space!(),
            r"]+|%20|[",
            js_space!(),
            r"]*[:=_+\-][",
            js_space!(),
            r"]*)[A-Za-z0-9._~+\/-]{16,}={0,2}"
        ),
    },
    ConfidentialPattern {
        id: 16,
        family: "basic credentials",
        pattern: concat!(
            r"[Bb][Aa][Ss][Ii][Cc](?:[",
            js_space!(),
            r"]+|%20|[",
            js_space!(),
            r"]*[:+][",
            js_space!(),
            r"]*)(?:[A-Za-z0-9+/]{4}){1,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?(?:$|[^A-Za-z0-9+/=])"
        ),
    },
    ConfidentialPattern {
        id: 17,
        family: "e-mail address",
        pattern: r"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?",
    },
    ConfidentialPattern {
        id: 18,
        family: "internal host name",
        pattern: r"(?:^|[/:@])(?:[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|(?:[A-Za-z0-9-]+\.)+(?:[Ll][Oo][Cc][Aa][Ll]|[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|[Ii][Nn][Tt][Ee][Rr][Nn][Aa][Ll]|[Cc][Oo][Rr][Pp]|[Ll][Aa][Nn]|[Hh][Oo][Mm][Ee](?:\.[Aa][Rr][Pp][Aa])?)|(?:[Ii][Nn][Tt][Ee][Rr][Nn][Aa][Ll]|[Ii][Nn][Tt][Rr][Aa][Nn][Ee][Tt])\.(?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]+)\.*(?:$|[/:])",
    },
    ConfidentialPattern {
        id: 19,
        family: "private dotted ipv4",
        pattern: r"(?:^|[^0-9])(?:10(?:\.[0-9]{1,3}){3}|127(?:\.[0-9]{1,3}){3}|100\.(?:6[4-9]|[78][0-9]|9[0-9]|1[01][0-9]|12[0-7])(?:\.[0-9]{1,3}){2}|169\.254(?:\.[0-9]{1,3}){2}|192\.168(?:\.[0-9]{1,3}){2}|172\.(?:1[6-9]|2[0-9]|3[01])(?:\.[0-9]{1,3}){2})(?:$|[^0-9])",
    },
    ConfidentialPattern {
        id: 20,
        family: "dotted quad with a leading-zero octet",
        pattern: r"(?:^|[^0-9])(?:0[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+|[0-9]+\.0[0-9]+\.[0-9]+\.[0-9]+|[0-9]+\.[0-9]+\.0[0-9]+\.[0-9]+|[0-9]+\.[0-9]+\.[0-9]+\.0[0-9]+)(?:$|[^0-9])",
    },
    ConfidentialPattern {
        id: 21,
        family: "ipv6 loopback, mapped loopback, unique-local or link-local",
        pattern: r"(?:^|[\[/:@])(?:(?:::)(?:0{1,4}:){0,6}0*1|(?:0{1,4}:){1,6}:(?:0{1,4}:){0,6}0*1|(?:0{1,4}:){7}0*1|(?:(?:::)(?:[Ff]{4}:)?|(?:0{1,4}:){5}[Ff]{4}:|(?:0{1,4}:){6})7[fF][0-9A-Fa-f]{2}:[0-9A-Fa-f]{1,4}|(?:[Ff][CcDd][0-9A-Fa-f]{2}|[Ff][Ee][89AaBb][0-9A-Fa-f]):[0-9A-Fa-f:]+)(?:\]|$|[/:])",
    },
    ConfidentialPattern {
        id: 22,
        family: "ipv6-embedded private ipv4 in hex",
        pattern: r"(?:^|[\[/:@])(?:(?:::)(?:[Ff]{4}:)?|(?:0{1,4}:){5}[Ff]{4}:|(?:0{1,4}:){6})(?:[0]?[Aa][0-9A-Fa-f]{2}|64(?:4[0-9A-Fa-f]|[5-7][0-9A-Fa-f])|7[Ff][0-9A-Fa-f]{2}|[Aa]9[Ff][Ee]|[Aa][Cc]1[0-9A-Fa-f]|[Cc]0[Aa]8):[0-9A-Fa-f]{1,4}(?:\]|$|[/:])",
    },
    ConfidentialPattern {
        id: 23,
        family: "ipv6-embedded private ipv4 in hex, partially compressed",
        pattern: r"(?:^|[\[/:@])(?:(?:(?:0{1,4}:){0,3}0{1,4})?::[Ff]{4}:|(?:(?:0{1,4}:){0,4}0{1,4})?::)(?:[0]?[Aa][0-9A-Fa-f]{2}|64(?:4[0-9A-Fa-f]|[5-7][0-9A-Fa-f])|7[Ff][0-9A-Fa-f]{2}|[Aa]9[Ff][Ee]|[Aa][Cc]1[0-9A-Fa-f]|[Cc]0[Aa]8):[0-9A-Fa-f]{1,4}(?:\]|$|[/:])",
    },
    ConfidentialPattern {
        id: 24,
        family: "shorthand private ipv4 url",
        pattern: r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ww][Ss][Ss]?):/{0,2}(?:(?:10|127)(?:\.[0-9]+){1,2}|(?:100\.(?:6[4-9]|[78][0-9]|9[0-9]|1[01][0-9]|12[0-7])|169\.254|192\.168|172\.(?:1[6-9]|2[0-9]|3[01]))\.[0-9]+)(?:$|[/:])",
    },
    ConfidentialPattern {
        id: 25,
        family: "single-number host url",
        pattern: r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ww][Ss][Ss]?):/{0,2}(?:0[Xx][0-9A-Fa-f]+|0[0-7]+|[0-9]+)(?:$|[/:])",
    },
    ConfidentialPattern {
        id: 26,
        family: "mixed-radix host url",
        pattern: r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ww][Ss][Ss]?):/{0,2}(?:[A-Za-z0-9-]+\.)*(?:0[Xx][0-9A-Fa-f]+|0[0-9]+)(?:\.|[/:]|$)",
    },
];

pub(super) static CONFIDENTIAL_SET: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new(CONFIDENTIAL_PATTERNS.iter().map(|pattern| pattern.pattern))
        .expect("every confidential pattern is valid regex syntax")
});

/// Check D's dotted-quad candidates (the reference's `\b(?:\d{1,3}\.){3}\d{1,3}\b`, global).
pub(super) static IPV4_CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?-u:\b)(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?-u:\b)")
        .expect("the IPv4 candidate pattern is valid regex syntax")
});

/// Check D's bracketed IPv6 candidates (the reference's `\[[0-9a-f:]+\]`, global and
/// case-insensitive).
pub(super) static IPV6_CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\[[0-9a-f:]+\]").expect("the IPv6 candidate pattern is valid regex syntax")
});

/// Check E's URL candidates (the reference's `\b[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s"'<>]+`,
/// global).
pub(super) static URL_CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?-u:\b)[A-Za-z][A-Za-z0-9+.-]*:\/\/[^",
        js_space!(),
        r#""'<>]+"#
    ))
    .expect("the URL candidate pattern is valid regex syntax")
});

/// Whether `value` contains a confidential identifier: true if any of the
/// 26 [`CONFIDENTIAL_PATTERNS`] matches anywhere (A), the whole value is a [`private_url`] (B) or
/// a [`private_host`] (C), a dotted-quad or bracketed-IPv6 substring is a private host (D), or a
/// `scheme://…` substring is a private URL (E).
///
/// Where the reference throws instead of answering (an IPv6 literal with a zone id, see
/// [`Error::InvalidUrl`]) this returns true: the reference rejects such values either way.
pub fn contains_confidential_identifier(value: &str) -> bool {
    scan(value).unwrap_or(true)
}

/// Texts up to this many bytes are remembered per thread with the result of a pure check of
/// them ([`scan`], [`strict::scan_text`]): ledger text repeats (member names, producer and
/// subject fields, kinds, labels), and a lookup costs far less than the regex searches and URL
/// parses of a scan.
pub(super) const REMEMBER_MAX_LEN: usize = 128;

/// Remembered texts per thread before the memory starts over (at most about 600 KiB).
pub(super) const REMEMBER_MAX_ENTRIES: usize = 4096;

/// A per-thread memory of a pure check of short texts (see [`remembered`]). Hashed with
/// foldhash (randomly seeded): SipHash cost more than the lookups it serves, and the memory is
/// small and starts over when full.
pub(super) type Remembered<T> =
    std::cell::RefCell<std::collections::HashMap<Box<str>, T, foldhash::fast::RandomState>>;

/// `check(text)`, from `memory` when the text is short and was checked on this thread before.
pub(super) fn remembered<T: Copy + 'static>(
    memory: &'static std::thread::LocalKey<Remembered<T>>,
    text: &str,
    check: impl Fn(&str) -> T,
) -> T {
    if text.len() > REMEMBER_MAX_LEN {
        return check(text);
    }
    memory.with(|memory| {
        if let Some(&hit) = memory.borrow().get(text) {
            return hit;
        }
        let hit = check(text);
        let mut memory = memory.borrow_mut();
        if memory.len() >= REMEMBER_MAX_ENTRIES {
            memory.clear();
        }
        memory.insert(text.into(), hit);
        hit
    })
}

thread_local! {
    static SCANNED: Remembered<Result<bool, ReferenceThrows>> = Remembered::default();
}

/// [`scan`], remembered for short texts.
pub(super) fn scan_remembered(text: &str) -> Result<bool, ReferenceThrows> {
    remembered(&SCANNED, text, scan)
}

/// The confidential-identifier scan in the reference's order, stopping at the first hit: the order decides whether a value
/// that is both flagged and unserializable is reported as confidential or as thrown.
pub(super) fn scan(value: &str) -> Result<bool, ReferenceThrows> {
    if CONFIDENTIAL_SET.is_match(value) || try_private_url(value)? || try_private_host(value)? {
        return Ok(true);
    }
    // Each candidate pattern needs a character that most values lack: test for it before
    // running the regex (a plain byte search is far cheaper than a regex search).
    if value.contains('.') {
        for candidate in IPV4_CANDIDATE.find_iter(value) {
            if try_private_host(candidate.as_str())? {
                return Ok(true);
            }
        }
    }
    if value.contains('[') {
        for candidate in IPV6_CANDIDATE.find_iter(value) {
            if try_private_host(candidate.as_str())? {
                return Ok(true);
            }
        }
    }
    if value.contains("://") {
        for candidate in URL_CANDIDATE.find_iter(value) {
            if try_private_url(candidate.as_str())? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
