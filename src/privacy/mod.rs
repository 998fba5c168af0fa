//! Privacy validation of the ledger's free-text fields.
//!
//! Every string that the ledger stores verbatim passes through one of four gates:
//! [`machine_text`] (identifiers, names, attribute keys and values), [`relative_data_path`]
//! (`record_path`, `report_path`), [`public_run_url`] (`run_url`) or the plain
//! [`bounded_text`] step they share. All of them reject, with the reference's message texts,
//! anything that [`contains_confidential_identifier`] flags: private paths, credentials,
//! e-mail addresses, private or internal hosts and URLs.
//!
//! Compatibility with the TypeScript reference is accept/reject-exact, so the JavaScript
//! primitives it relies on are emulated rather than replaced by their Rust look-alikes:
//! `String.prototype.trim` ([`js_trim`]), UTF-16 lengths ([`utf16_len`]), regex `\s`/`\b`/`\d`,
//! `Number(string)`, Node's `net.isIP`, and the WHATWG URL parser (the `url` crate implements
//! the same algorithm as Node's `new URL`). Nothing here does I/O.
//!
//! # The reference's families
//!
//! The scan ([`contains_confidential_identifier`]) runs five checks in the reference's order
//! and stops at the first hit:
//!
//! - **A**, the 26 [`CONFIDENTIAL_PATTERNS`], one per family: private directories (POSIX
//!   `/users/`, `/home/`, `/private/`, `/tmp/`; Windows `\Users\` and drive paths), a
//!   scheme-like prefix before an absolute path, percent-encoded octets, `file:` URLs, URL
//!   userinfo (with or without `//`), PEM private key headers, GitHub `gh?_`/`github_pat_` and
//!   `sk-` tokens (OpenAI, Anthropic), npm tokens, Slack `xox?-` tokens, AWS `AKIA`/`ASIA` key
//!   ids, signed JWTs, bearer / API key / access token / client secret / Cloudflare credential
//!   assignments, `Basic` credentials, e-mail addresses, internal host names (`localhost`,
//!   `.local`, `.internal`, `.corp`, `.lan`, `.home.arpa`, `intranet.`), private dotted IPv4
//!   (RFC 1918, loopback, link-local, CGNAT), dotted quads with a leading-zero octet, IPv6
//!   loopback, unique-local and link-local literals, IPv6-embedded private IPv4 in hex, and
//!   URLs whose host is a shorthand, single-number or mixed-radix private IPv4.
//! - **B**, the whole value as a URL ([`private_url`]): a `file:` URL, userinfo, or a private
//!   host after WHATWG host parsing.
//! - **C**, the whole value as a host ([`private_host`]).
//! - **D**, every dotted quad and bracketed IPv6 literal in the text, as a host.
//! - **E**, every `scheme://…` substring, as a URL.
//!
//! # The strict profile
//!
//! These are the rules of the `reference` profile. The default `strict` profile adds the
//! credential and private-host families of [`strict::RULES`] as a second pass over values that
//! passed them ([`Profile`], [`strict`], whose module docs list every family and rule id).

/// The ECMAScript WhiteSpace + LineTerminator set (what a JavaScript `\s` matches, and what
/// `String.prototype.trim` removes), as the members of a `regex` character class. Unlike
/// Unicode `White_Space` it has U+FEFF and lacks U+0085, so `regex`'s own `\s` does not serve.
macro_rules! js_space {
    () => {
        r"\t\n\x0B\x0C\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}"
    };
}

mod hosts;
mod js;
mod scan;
pub mod strict;

use hosts::*;
pub use hosts::{private_host, private_url};
pub use js::{js_number, js_trim, utf16_len};
use scan::*;
pub use scan::{CONFIDENTIAL_PATTERNS, ConfidentialPattern, contains_confidential_identifier};

pub use strict::Profile;

use std::sync::LazyLock;

use regex::Regex;
use url::Url;

/// Rejections of a text field; `label` names the field as the reference does (for example
/// `action event producer job`), and the messages are the reference's texts.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Empty after JS trim.
    #[error("{label} is required")]
    Required {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// A UTF-16 code unit ≤ 0x1F or = 0x7F.
    #[error("{label} contains control characters")]
    ControlCharacters {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// More than `max` UTF-16 code units after trim.
    #[error("{label} exceeds {max} characters")]
    TooLong {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
        /// The field's limit, in UTF-16 code units.
        max: usize,
    },
    /// The confidential-identifier scan flagged the value.
    #[error("{label} contains a confidential identifier")]
    Confidential {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// Not `^[A-Za-z0-9][A-Za-z0-9_.:/@+\-]*$`.
    #[error("{label} must be machine-readable text")]
    NotMachineText {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// Not a namespaced path of portable segments.
    #[error("{label} must be a namespaced repository-relative data path using portable segments")]
    NotRelativeDataPath {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// Run URL with `?`/`#`, a scheme other than https, userinfo, an explicit non-default port,
    /// a query or a fragment.
    #[error("{label} must be a credential-free HTTPS URL")]
    NotCredentialFreeHttps {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// Run URL whose host is not `github.com` or whose path is not
    /// `/<owner>/<repo>/actions/runs/<digits>`.
    #[error("{label} must identify a public github.com Actions run")]
    NotGithubActionsRun {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
    /// The WHATWG parser refused a URL. The reference lets Node's `TypeError` escape here, whose
    /// message is `Invalid URL`; ours starts with that text and then names the field. Besides unparsable run URLs this is also what [`machine_text`] returns where the
    /// reference's confidential-identifier scan throws: for an IPv6 literal with a zone id (`fe80::1%eth0`), which
    /// Node's `net.isIP` accepts and `new URL` refuses.
    #[error("Invalid URL: {label} must be a valid URL")]
    InvalidUrl {
        /// The field as the reference names it, e.g. `action event producer job`.
        label: String,
    },
}

/// The run URL's path shape, checked on the WHATWG-normalized pathname.
static RUN_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/actions/runs/[0-9]+$")
        .expect("the run path pattern is valid regex syntax")
});

/// The namespaces a relative data path may start with.
const DATA_PATH_NAMESPACES: [&str; 8] = [
    ".artifacts",
    "artifacts",
    "jobs",
    "ledger",
    "logs",
    "notifications",
    "records",
    "results",
];

/// Longest relative data path, in UTF-16 code units.
const MAX_DATA_PATH_LEN: usize = 512;

/// Longest segment of a relative data path (`[A-Za-z0-9_](?:…{0,253}…)?`).
const MAX_DATA_PATH_SEGMENT_LEN: usize = 255;

/// Machine text: the trimmed value, if it is non-empty, free of control
/// characters, at most `max_len` UTF-16 code units (256 for most fields, 128 for workflow and
/// job), free of confidential identifiers and of the form `^[A-Za-z0-9][A-Za-z0-9_.:/@+\-]*$`.
/// The checks run in that order and the first failure is returned.
pub fn machine_text(value: &str, label: &str, max_len: usize) -> Result<String, Error> {
    machine_text_of(value, label, max_len).map(str::to_owned)
}

/// Whether `value` is machine text in the form [`machine_text`] returns (already trimmed):
/// `machine_text(value, _, max_len) == Ok(value)`, decided without a copy. A stored record must
/// hold its fields in their normalized form, so this is the whole check of a stored field.
pub fn is_stored_machine_text(value: &str, max_len: usize) -> bool {
    machine_text_of(value, "", max_len).is_ok_and(|text| text.len() == value.len())
}

/// [`machine_text`] as the slice of `value` it keeps.
fn machine_text_of<'a>(value: &'a str, label: &str, max_len: usize) -> Result<&'a str, Error> {
    let text = bounded_text_of(value, label, max_len)?;
    reject_confidential(text, label)?;
    if !is_machine_text(text) {
        return Err(Error::NotMachineText {
            label: label.to_owned(),
        });
    }
    Ok(text)
}

/// The reference's `boundedText`: the JS-trimmed value, if it is non-empty
/// ([`Error::Required`]), has no UTF-16 code unit ≤ 0x1F or = 0x7F
/// ([`Error::ControlCharacters`]) and is at most `max_len` UTF-16 code units long
/// ([`Error::TooLong`]).
pub fn bounded_text(value: &str, label: &str, max_len: usize) -> Result<String, Error> {
    bounded_text_of(value, label, max_len).map(str::to_owned)
}

/// [`bounded_text`] as the slice of `value` it keeps.
fn bounded_text_of<'a>(value: &'a str, label: &str, max_len: usize) -> Result<&'a str, Error> {
    let text = required_text(value, label)?;
    if utf16_len(text) > max_len {
        return Err(Error::TooLong {
            label: label.to_owned(),
            max: max_len,
        });
    }
    Ok(text)
}

/// Relative data path, for `subject.record_path` and
/// `evidence[].report_path`: [`bounded_text`] with a 512 limit, one leading `./` removed, then
/// a namespace (`.artifacts`, `artifacts`, `jobs`, `ledger`, `logs`, `notifications`,
/// `records`, `results`) followed by one or more `/`-separated portable segments, else
/// [`Error::NotRelativeDataPath`]; finally the confidential scan ([`Error::Confidential`], e.g.
/// `records/tmp/x`, `records/a@b`). Returns the path without the `./`.
pub fn relative_data_path(value: &str, label: &str) -> Result<String, Error> {
    relative_data_path_of(value, label).map(str::to_owned)
}

/// Whether `value` is a relative data path in the form [`relative_data_path`] returns (trimmed,
/// no leading `./`): `relative_data_path(value, _) == Ok(value)`, decided without a copy.
pub fn is_stored_relative_data_path(value: &str) -> bool {
    relative_data_path_of(value, "").is_ok_and(|path| path.len() == value.len())
}

/// [`relative_data_path`] as the slice of `value` it keeps.
fn relative_data_path_of<'a>(value: &'a str, label: &str) -> Result<&'a str, Error> {
    let text = bounded_text_of(value, label, MAX_DATA_PATH_LEN)?;
    let path = text.strip_prefix("./").unwrap_or(text);
    if !is_relative_data_path(path) {
        return Err(Error::NotRelativeDataPath {
            label: label.to_owned(),
        });
    }
    reject_confidential(path, label)?;
    Ok(path)
}

/// Public run URL, only for `evidence[].run_url`: the trimmed value must be
/// non-empty and free of control characters (no length limit), contain no `?` or `#`, parse as
/// a WHATWG URL ([`Error::InvalidUrl`]), be `https` without userinfo, explicit non-default port,
/// query or fragment ([`Error::NotCredentialFreeHttps`]), and have host `github.com` and a
/// normalized path `/<owner>/<repo>/actions/runs/<digits>`
/// ([`Error::NotGithubActionsRun`]). Returns the WHATWG href, so case, `:443`, backslashes and
/// dot segments come back normalized. No confidential scan applies to this field.
pub fn public_run_url(value: &str, label: &str) -> Result<String, Error> {
    let text = required_text(value, label)?;
    let not_credential_free = || Error::NotCredentialFreeHttps {
        label: label.to_owned(),
    };
    // Checked on the raw text because WHATWG serializes an empty query or fragment as "".
    if text.contains(['?', '#']) {
        return Err(not_credential_free());
    }
    let url = Url::parse(text).map_err(|_| Error::InvalidUrl {
        label: label.to_owned(),
    })?;
    if url.scheme() != "https"
        || !url.username().is_empty()
        || url.password().is_some_and(|password| !password.is_empty())
        || url.port().is_some()
        || url.query().is_some_and(|query| !query.is_empty())
        || url.fragment().is_some_and(|fragment| !fragment.is_empty())
    {
        return Err(not_credential_free());
    }
    if url.host_str() != Some("github.com") || !RUN_PATH.is_match(url.path()) {
        return Err(Error::NotGithubActionsRun {
            label: label.to_owned(),
        });
    }
    Ok(url.into())
}

/// Trim, required, control characters: the steps every gate starts with.
fn required_text<'a>(value: &'a str, label: &str) -> Result<&'a str, Error> {
    let text = js_trim(value);
    if text.is_empty() {
        return Err(Error::Required {
            label: label.to_owned(),
        });
    }
    // Lone surrogates cannot occur in a `str`, so code units ≤ 0x1F are exactly these chars.
    if text.chars().any(|c| c <= '\u{1F}' || c == '\u{7F}') {
        return Err(Error::ControlCharacters {
            label: label.to_owned(),
        });
    }
    Ok(text)
}

fn reject_confidential(text: &str, label: &str) -> Result<(), Error> {
    match scan_remembered(text) {
        Ok(false) => Ok(()),
        Ok(true) => Err(Error::Confidential {
            label: label.to_owned(),
        }),
        Err(ReferenceThrows) => Err(Error::InvalidUrl {
            label: label.to_owned(),
        }),
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9_.:/@+\-]*$` (the reference's machine text pattern).
fn is_machine_text(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.:/@+-".contains(c))
}

/// The reference's relative data path pattern, matched segment by segment because its
/// device-name guard is a negative look-ahead that `regex` cannot express.
fn is_relative_data_path(path: &str) -> bool {
    let mut segments = path.split('/');
    let namespace_ok = segments
        .next()
        .is_some_and(|namespace| DATA_PATH_NAMESPACES.contains(&namespace));
    let mut children = 0usize;
    for segment in segments {
        if !is_portable_segment(segment) {
            return false;
        }
        children += 1;
    }
    namespace_ok && children > 0
}

/// `[A-Za-z0-9_](?:[A-Za-z0-9._+@\-]{0,253}[A-Za-z0-9_+@\-])?`, not starting with a Windows
/// device name followed by `.` or the segment's end.
fn is_portable_segment(segment: &str) -> bool {
    let b = segment.as_bytes();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return false;
    };
    b.len() <= MAX_DATA_PATH_SEGMENT_LEN
        && (first.is_ascii_alphanumeric() || first == b'_')
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"._+@-".contains(c))
        && (b.len() == 1 || last != b'.')
        && !starts_with_device_name(b)
}

/// The look-ahead `(?!(?:CON|PRN|AUX|NUL|COM[1-9]|LPT[1-9])(?:\.|/|$))`, any ASCII case, for
/// one segment: the segment's end stands for both `/` and the end of the path.
fn starts_with_device_name(segment: &[u8]) -> bool {
    let stem = |name: &[u8]| {
        segment.len() >= name.len() && segment[..name.len()].eq_ignore_ascii_case(name)
    };
    let stem_len = if [b"con", b"prn", b"aux", b"nul"]
        .iter()
        .any(|name| stem(*name))
    {
        3
    } else if (stem(b"com") || stem(b"lpt")) && matches!(segment.get(3), Some(b'1'..=b'9')) {
        4
    } else {
        return false;
    };
    matches!(segment.get(stem_len), None | Some(b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ids of the table patterns that match `value`.
    fn pattern_hits(value: &str) -> Vec<u8> {
        CONFIDENTIAL_SET
            .matches(value)
            .iter()
            .map(|index| CONFIDENTIAL_PATTERNS[index].id)
            .collect()
    }

    fn machine(value: &str) -> Result<String, Error> {
        machine_text(value, "x", 256)
    }

    #[test]
    fn pattern_table_is_numbered_in_reference_order() {
        let ids: Vec<u8> = CONFIDENTIAL_PATTERNS.iter().map(|p| p.id).collect();
        assert_eq!(ids, (1..=26).collect::<Vec<u8>>());
    }

    /// The test oracle for the hand-written patterns: a mechanical translation of a JavaScript
    /// regex source (no `u` flag) to `regex` syntax with the same matches:
    /// `\s` becomes the JS whitespace set, `\d` becomes `[0-9]`, `\b` becomes the ASCII word
    /// boundary, and pattern #4's trailing `/(?!/)` becomes `/(?:[^/]|$)`. The last rewrite is only
    /// sound because the look-ahead ends its pattern and the table is only used to ask whether a
    /// value matches, never where.
    fn js_to_regex(js: &str) -> String {
        let js = js.replace("/(?!/)", "/(?:[^/]|$)");
        let mut out = String::with_capacity(js.len() + 64);
        let mut in_class = false;
        let mut chars = js.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    let Some(escaped) = chars.next() else {
                        out.push('\\');
                        break;
                    };
                    match (escaped, in_class) {
                        ('s', true) => out.push_str(js_space!()),
                        ('s', false) => {
                            out.push('[');
                            out.push_str(js_space!());
                            out.push(']');
                        }
                        ('d', true) => out.push_str("0-9"),
                        ('d', false) => out.push_str("[0-9]"),
                        ('b', false) => out.push_str(r"(?-u:\b)"),
                        _ => {
                            out.push('\\');
                            out.push(escaped);
                        }
                    }
                }
                '[' if !in_class => {
                    in_class = true;
                    out.push(c);
                }
                ']' if in_class => {
                    in_class = false;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        out
    }

    /// The reference's `ACTION_EVENT_CONFIDENTIAL_IDENTIFIER_PATTERN_SOURCES`, verbatim (used
    /// without flags), by id.
    const REFERENCE_SOURCES: [(u8, &str); 26] = [
        (
            1,
            r"/(?:[Uu][Ss][Ee][Rr][Ss]|[Hh][Oo][Mm][Ee]|[Pp][Rr][Ii][Vv][Aa][Tt][Ee]|[Tt][Mm][Pp])/",
        ),
        (2, r"\\[Uu][Ss][Ee][Rr][Ss]\\"),
        (3, r"(?:^|[\\/])[A-Za-z]:[\\/]"),
        (
            4,
            r"(?:^|[^A-Za-z0-9+.-])[A-Za-z0-9_.@+-]+:(?:/(?!/)|[A-Za-z]:/)",
        ),
        (5, r"%[0-9A-Fa-f]{2}"),
        (6, r"(?:^|[^A-Za-z0-9+.-])[Ff][Ii][Ll][Ee]:"),
        (
            7,
            r"(?:^|[^A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^\s/@]+@",
        ),
        (
            8,
            r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ss][Ss][Hh]|[Ww][Ss]?):(?://)?[^\s/@]+@",
        ),
        (9, r"BEGIN (?:RSA |EC |OPENSSH )?PRIVATE KEY"),
        (
            10,
            r"(?:[Gg][Hh][PpOoUuSsRr]_[A-Za-z0-9]{16,}|[Gg][Ii][Tt][Hh][Uu][Bb]_[Pp][Aa][Tt]_[A-Za-z0-9_]{16,}|[Ss][Kk]-[A-Za-z0-9_-]{16,})",
        ),
        (
            11,
            r"(?:^|[^A-Za-z0-9])[Nn][Pp][Mm]_[A-Za-z0-9]{36}(?:$|[^A-Za-z0-9])",
        ),
        (
            12,
            r"(?:^|[^A-Za-z0-9])[Xx][Oo][Xx][A-Za-z]-[A-Za-z0-9-]{10,}(?:$|[^A-Za-z0-9-])",
        ),
        (
            13,
            r"(?:^|[^A-Za-z0-9])(?:[Aa][Kk][Ii][Aa]|[Aa][Ss][Ii][Aa])[A-Za-z0-9]{16}(?:$|[^A-Za-z0-9])",
        ),
        (
            14,
            r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{16,}",
        ),
        (
            15,
            r"(?:[Bb][Ee][Aa][Rr][Ee][Rr]|[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn]|[Aa][Pp][Ii][_-]?(?:[Kk][Ee][Yy]|[Tt][Oo][Kk][Ee][Nn])|[Aa][Cc][Cc][Ee][Ss][Ss][_-]?[Tt][Oo][Kk][Ee][Nn]|[Cc][Ll][Ii][Ee][Nn][Tt][_-]?[Ss][Ee][Cc][Rr][Ee][Tt]|[Cc][Ll][Oo][Uu][Dd][Ff][Ll][Aa][Rr][Ee][_-]?(?:[Aa][Pp][Ii][_-]?)?(?:[Kk][Ee][Yy]|[Tt][Oo][Kk][Ee][Nn]))(?:\s+|%20|\s*[:=_+\-]\s*)[A-Za-z0-9._~+\/-]{16,}={0,2}",
        ),
        (
            16,
            r"[Bb][Aa][Ss][Ii][Cc](?:\s+|%20|\s*[:+]\s*)(?:[A-Za-z0-9+/]{4}){1,}(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?(?:$|[^A-Za-z0-9+/=])",
        ),
        (
            17,
            r"[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?",
        ),
        (
            18,
            r"(?:^|[/:@])(?:[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|(?:[A-Za-z0-9-]+\.)+(?:[Ll][Oo][Cc][Aa][Ll]|[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|[Ii][Nn][Tt][Ee][Rr][Nn][Aa][Ll]|[Cc][Oo][Rr][Pp]|[Ll][Aa][Nn]|[Hh][Oo][Mm][Ee](?:\.[Aa][Rr][Pp][Aa])?)|(?:[Ii][Nn][Tt][Ee][Rr][Nn][Aa][Ll]|[Ii][Nn][Tt][Rr][Aa][Nn][Ee][Tt])\.(?:[A-Za-z0-9-]+\.)*[A-Za-z0-9-]+)\.*(?:$|[/:])",
        ),
        (
            19,
            r"(?:^|[^0-9])(?:10(?:\.[0-9]{1,3}){3}|127(?:\.[0-9]{1,3}){3}|100\.(?:6[4-9]|[78][0-9]|9[0-9]|1[01][0-9]|12[0-7])(?:\.[0-9]{1,3}){2}|169\.254(?:\.[0-9]{1,3}){2}|192\.168(?:\.[0-9]{1,3}){2}|172\.(?:1[6-9]|2[0-9]|3[01])(?:\.[0-9]{1,3}){2})(?:$|[^0-9])",
        ),
        (
            20,
            r"(?:^|[^0-9])(?:0[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+|[0-9]+\.0[0-9]+\.[0-9]+\.[0-9]+|[0-9]+\.[0-9]+\.0[0-9]+\.[0-9]+|[0-9]+\.[0-9]+\.[0-9]+\.0[0-9]+)(?:$|[^0-9])",
        ),
        (
            21,
            r"(?:^|[\[/:@])(?:(?:::)(?:0{1,4}:){0,6}0*1|(?:0{1,4}:){1,6}:(?:0{1,4}:){0,6}0*1|(?:0{1,4}:){7}0*1|(?:(?:::)(?:[Ff]{4}:)?|(?:0{1,4}:){5}[Ff]{4}:|(?:0{1,4}:){6})7[fF][0-9A-Fa-f]{2}:[0-9A-Fa-f]{1,4}|(?:[Ff][CcDd][0-9A-Fa-f]{2}|[Ff][Ee][89AaBb][0-9A-Fa-f]):[0-9A-Fa-f:]+)(?:\]|$|[/:])",
        ),
        (
            22,
            r"(?:^|[\[/:@])(?:(?:::)(?:[Ff]{4}:)?|(?:0{1,4}:){5}[Ff]{4}:|(?:0{1,4}:){6})(?:[0]?[Aa][0-9A-Fa-f]{2}|64(?:4[0-9A-Fa-f]|[5-7][0-9A-Fa-f])|7[Ff][0-9A-Fa-f]{2}|[Aa]9[Ff][Ee]|[Aa][Cc]1[0-9A-Fa-f]|[Cc]0[Aa]8):[0-9A-Fa-f]{1,4}(?:\]|$|[/:])",
        ),
        (
            23,
            r"(?:^|[\[/:@])(?:(?:(?:0{1,4}:){0,3}0{1,4})?::[Ff]{4}:|(?:(?:0{1,4}:){0,4}0{1,4})?::)(?:[0]?[Aa][0-9A-Fa-f]{2}|64(?:4[0-9A-Fa-f]|[5-7][0-9A-Fa-f])|7[Ff][0-9A-Fa-f]{2}|[Aa]9[Ff][Ee]|[Aa][Cc]1[0-9A-Fa-f]|[Cc]0[Aa]8):[0-9A-Fa-f]{1,4}(?:\]|$|[/:])",
        ),
        (
            24,
            r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ww][Ss][Ss]?):/{0,2}(?:(?:10|127)(?:\.[0-9]+){1,2}|(?:100\.(?:6[4-9]|[78][0-9]|9[0-9]|1[01][0-9]|12[0-7])|169\.254|192\.168|172\.(?:1[6-9]|2[0-9]|3[01]))\.[0-9]+)(?:$|[/:])",
        ),
        (
            25,
            r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ww][Ss][Ss]?):/{0,2}(?:0[Xx][0-9A-Fa-f]+|0[0-7]+|[0-9]+)(?:$|[/:])",
        ),
        (
            26,
            r"(?:^|[^A-Za-z0-9+.-])(?:[Hh][Tt][Tt][Pp][Ss]?|[Ff][Tt][Pp]|[Ww][Ss][Ss]?):/{0,2}(?:[A-Za-z0-9-]+\.)*(?:0[Xx][0-9A-Fa-f]+|0[0-9]+)(?:\.|[/:]|$)",
        ),
    ];

    /// The reference's candidate patterns (checks D and E), verbatim, with the flags they are
    /// used with, and ours.
    fn candidate_sources() -> [(&'static str, &'static str, &'static Regex); 3] {
        [
            (r"\b(?:\d{1,3}\.){3}\d{1,3}\b", "", &IPV4_CANDIDATE),
            (r"\[[0-9a-f:]+\]", "(?i)", &IPV6_CANDIDATE),
            (
                r#"\b[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s"'<>]+"#,
                "",
                &URL_CANDIDATE,
            ),
        ]
    }

    /// Every value the tests of this module use, plus values aimed at the places where the two
    /// syntaxes differ (`\s`, `\d`, `\b`, the look-ahead of pattern 4).
    fn samples() -> Vec<String> {
        let mut all: Vec<String> = FAMILY_SAMPLES
            .iter()
            .flat_map(|(_, hit, miss)| [hit.to_string(), miss.to_string()])
            .chain(MORE_SAMPLES.iter().map(|(v, _)| v.to_string()))
            .collect();
        for value in [
            "Bearer\u{FEFF}abcdefghijklmnop",
            "Bearer\u{85}abcdefghijklmnop",
            "Bearer\u{3000}abcdefghijklmnop",
            "basic\u{A0}abcd",
            "basic\u{2028}abcd",
            "https://a\u{A0}b@c",
            "https://a\u{85}b@c",
            "http:a\u{2009}b@c",
            "x ١٢٧.0.0.1 y",
            "é1.2.3.4",
            "_1.2.3.4_",
            "a1.2.3.4",
            "1.2.3.4é",
            "[FE80::1]",
            "[fe80::1]x",
            "ΩX://h/",
            "see https://u@h/ and",
            "é-https://localhost/",
            "s3://bucket",
            "s3:/",
            "s3:/b",
            "s3://",
            "x:C:/y",
        ] {
            all.push(value.to_owned());
        }
        all
    }

    /// Each hand-written pattern matches exactly what the reference's JavaScript source
    /// matches, on every sample; each candidate pattern also finds the same spans.
    #[test]
    fn patterns_match_what_the_javascript_sources_match() {
        let samples = samples();
        for (pattern, (id, js)) in CONFIDENTIAL_PATTERNS.iter().zip(REFERENCE_SOURCES) {
            assert_eq!(pattern.id, id);
            let ours = Regex::new(pattern.pattern).unwrap();
            let theirs = Regex::new(&js_to_regex(js)).unwrap();
            for sample in &samples {
                assert_eq!(
                    ours.is_match(sample),
                    theirs.is_match(sample),
                    "#{id} on {sample:?}"
                );
            }
        }
        for (js, flags, ours) in candidate_sources() {
            let theirs = Regex::new(&format!("{flags}{}", js_to_regex(js))).unwrap();
            for sample in &samples {
                let spans = |r: &Regex| r.find_iter(sample).map(|m| m.range()).collect::<Vec<_>>();
                assert_eq!(spans(ours), spans(&theirs), "{js} on {sample:?}");
            }
        }
    }

    #[test]
    fn patterns_need_no_look_around() {
        for pattern in &CONFIDENTIAL_PATTERNS {
            for look_around in ["(?=", "(?!", "(?<=", "(?<!"] {
                assert!(!pattern.pattern.contains(look_around), "#{}", pattern.id);
            }
        }
    }

    #[test]
    fn translation_rewrites_only_js_specific_syntax() {
        let space = js_space!();
        assert_eq!(
            js_to_regex(r"a\sb[^\s/]\d[\d]\b\.\\"),
            format!(r"a[{space}]b[^{space}/][0-9][0-9](?-u:\b)\.\\")
        );
        assert_eq!(js_to_regex("x:(?:/(?!/)|y)"), "x:(?:/(?:[^/]|$)|y)");
    }

    /// One sample per family that its pattern must flag and one it must not.
    const FAMILY_SAMPLES: [(u8, &str, &str); 26] = [
        (1, "logs/tmp/x", "logs/tmpx/y"),
        (2, r"C:\Users\alice", r"C:\Userss\x"),
        (3, "D:/data", "ab:/data"),
        (4, "s3:/bucket/key", "https://github.com/o/r"),
        (5, "a%2Fb", "a%2Gb"),
        (6, "x file:y", "my-file:x"),
        (7, "https://user:pw@github.com/x", "https://github.com/@x"),
        (8, "ssh:git@github.com", "git:git@github.com"),
        (9, "BEGIN OPENSSH PRIVATE KEY", "begin private key"),
        (10, "ghp_ABCDEFGHIJKLMNOP", "ghp_ABCDEFGHIJKLMNO"),
        (
            11,
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789a",
        ),
        (12, "xoxb-1234567890-abcdef", "xoxb-123456789"),
        (13, "AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOPQ"),
        (
            14,
            "eyJhbGciOi.eyJzdWIiOi.abcdefghijklmnop",
            "eyJhbGciOi.eyJzdWIiOi.abcdefghijklmno",
        ),
        (
            15,
            "Bearer:abcdefghijklmnopqrstuvwxyz",
            "Bearer:abcdefghijklmno",
        ),
        (16, "basic abcd", "Basic:abcde"),
        (17, "a@b", "a@-b"),
        (18, "router.home.arpa", "printer.localdomain"),
        (19, "host-10.1.2.3", "110.1.2.3"),
        (20, "1.2.3.04", "10.20.30.40"),
        (21, "fe80::1", "2001:db8::1"),
        (22, "::ffff:a00:1", "::ffff:808:808"),
        (23, "0:0::ffff:c0a8:1", "0:0::ffff:808:808"),
        (24, "ws:10.1.2", "http://1270.1"),
        (25, "http://2130706433", "http://2130706433x"),
        (26, "http://a.017.1", "http://example.com"),
    ];

    /// One value per family that its pattern must flag and one that it must not (outcomes
    /// checked against the reference's JavaScript regexes).
    #[test]
    fn every_family_flags_its_sample_and_spares_its_near_miss() {
        for (id, hit, miss) in FAMILY_SAMPLES {
            assert!(pattern_hits(hit).contains(&id), "#{id} should flag {hit:?}");
            assert!(contains_confidential_identifier(hit), "{hit:?}");
            assert!(
                !pattern_hits(miss).contains(&id),
                "#{id} should spare {miss:?}"
            );
        }
    }

    /// Values and the ids of every pattern that flags them.
    const MORE_SAMPLES: &[(&str, &[u8])] = &[
        // #4's look-ahead also holds at the end of the value.
        ("x:/", &[3, 4]),
        ("name:C:/x", &[4]),
        ("FILE:x", &[6]),
        ("profile:x", &[]),
        ("github_pat_ABCDEFGHIJKLMNOP_qrstuvwxyz", &[10]),
        ("sk-ABCDEFGHIJKLMNOPQRSTUV", &[10]),
        // The reference flags any "sk-" followed by 16 token characters, even inside a word.
        ("task-review-runner-default", &[10]),
        ("xnpm_abcdefghijklmnopqrstuvwxyz0123456789", &[]),
        ("axoxb-1234567890", &[]),
        ("api_key=abcdefghijklmnopqrstuvwxyz", &[15]),
        ("cloudflare-api-token abcdefghijklmnop", &[15]),
        ("Bearer%20abcdefghijklmnop", &[5, 15]),
        ("Basic:dXNlcjpwYXNzd29yZA==", &[16]),
        ("basically", &[]),
        ("localhost", &[18]),
        ("localhost-x", &[]),
        ("mylocalhost", &[]),
        ("svc.corp:443", &[18]),
        ("x@intranet.site", &[17, 18]),
        ("172.32.0.1", &[]),
        ("100.128.0.1", &[]),
        ("[::1]", &[21]),
        ("0:0:0:0:0:0:0:1", &[21]),
        ("::ffff:7f00:1", &[21, 22, 23]),
        ("https://0x7f000001/", &[25, 26]),
    ];

    #[test]
    fn more_pattern_hits_and_misses() {
        for (value, ids) in MORE_SAMPLES {
            assert_eq!(pattern_hits(value), *ids, "{value:?}");
        }
    }

    #[test]
    fn checks_beyond_the_table_catch_what_the_patterns_miss() {
        // C: the whole value is a private host once JS Number() reads its octets.
        // B: WHATWG maps full-width digits to ASCII before reading the IPv4 address.
        // E: a URL inside the text, whose IDNA-mapped host is localhost.
        for value in [
            "0x7f.0.0.1",
            "1e1.0.0.1",
            "http://１０.０.０.１",
            "see https://ｌｏｃａｌｈｏｓｔ/",
        ] {
            assert_eq!(pattern_hits(value), Vec::<u8>::new(), "{value:?}");
            assert!(contains_confidential_identifier(value), "{value:?}");
        }
    }

    #[test]
    fn public_values_are_not_confidential() {
        for value in [
            "8.8.8.8",
            "1.2.3.4",
            "v1.2.3.4",
            "11.0.0.1",
            "192.169.1.1",
            "172.32.0.1",
            "https://github.com/o/r",
            "https://github.com:443/o/r",
            "http://example.com/x",
            "https://github.com/openclaw/clawsweeper/actions/runs/1234567890",
            "gpt-5.1-codex",
            "deadbeefcafebabe",
            "0123456789abcdef0123456789abcdef01234567",
            "token_count",
            "review.item",
            "cluster:dup-17",
            "sha256:abc",
            "2026-01-15T10:00:00Z",
            "2001:db8::1",
            "[2001:db8::1]",
            "foo://127.1",
            "sk-short",
            "Review-Runner-v2-c69aea3c755d.__run_2.pass-1-a91caaeac8ea",
        ] {
            assert!(!contains_confidential_identifier(value), "{value:?}");
        }
    }

    #[test]
    fn private_host_follows_the_reference_quirks() {
        let cases = [
            ("localhost", true),
            ("localhost.", true),
            (" localhost ", true),
            ("svc.internal.", true),
            ("printer.local", true),
            ("router.home.arpa", true),
            ("internal.example.com", true),
            ("intranet.example.com", true),
            ("example.com", false),
            ("db.lan.example.com", false),
            ("[::1]", true),
            ("fc00::", true),
            ("fd12:3456::1", true),
            ("fe80::", true),
            ("FE80::1", true),
            ("fec0::1", false),
            ("2001:db8::1", false),
            ("[::ffff:127.0.0.1]", true),
            ("::ffff:10.0.0.1", true),
            ("::ffff:a9fe:a9fe", true),
            ("::7f00:1", true),
            ("::ffff:808:808", false),
            ("127.0.0.1", true),
            ("10.20.30.40", true),
            ("100.64.1.1", true),
            ("169.254.169.254", true),
            ("172.16.5.4", true),
            ("192.168.0.1", true),
            ("8.8.8.8", false),
            ("1.2.3.4", false),
            // Octets are read with JS Number(): hex, exponent and sign count, leading zeros are
            // decimal, and there is no WHATWG shorthand expansion.
            ("0x7f.0.0.1", true),
            ("1e1.0.0.1", true),
            ("+10.0.0.1", true),
            ("10 .0.0.1", true),
            ("10.0.0.1e0", true),
            ("010.0.0.1", true),
            ("0177.0.0.1", false),
            ("127.1", false),
            ("0x.0.0.1", false),
            ("Infinity.0.0.1", false),
            ("10.0.0.256", false),
            ("10.0.0", false),
            ("", false),
            ("[]", false),
            // Node's net.isIP accepts the zone id and WHATWG refuses it: the reference throws.
            ("fe80::1%eth0", true),
        ];
        for (host, private) in cases {
            assert_eq!(private_host(host), private, "{host:?}");
        }
        assert_eq!(try_private_host("[fe80::1%eth0]"), Err(ReferenceThrows));
        assert_eq!(try_private_host("::1%lo"), Err(ReferenceThrows));
    }

    #[test]
    fn private_url_uses_whatwg_host_parsing() {
        let cases = [
            ("http://127.1", true),
            ("http://0x7f.1/", true),
            ("http://2130706433/", true),
            ("http://0177.0.0.1/", true),
            ("http:localhost:8080", true),
            ("http://[::ffff:127.0.0.1]/", true),
            ("http://[fc00::]/", true),
            ("http://[fe80::1]/", true),
            ("https://svc.internal/", true),
            ("http://localhost./", true),
            ("https://u@github.com/", true),
            ("https://:pw@github.com/", true),
            ("file:///etc/passwd", true),
            ("FILE:x", true),
            ("ws:10.1.2", true),
            ("https://github.com/o/r", false),
            ("http://8.8.8.8/", false),
            ("http://[2001:db8::1]/", false),
            // Non-special schemes keep an opaque host, so no IPv4 shorthand expansion.
            ("foo://127.1", false),
            ("printer.local", false),
            ("not a url", false),
        ];
        for (url, private) in cases {
            assert_eq!(private_url(url), private, "{url:?}");
        }
    }

    #[test]
    fn js_number_follows_string_to_number() {
        let cases = [
            ("", 0.0),
            (" \u{FEFF}", 0.0),
            ("010", 10.0),
            ("0x0a", 10.0),
            ("0X1F", 31.0),
            ("0o17", 15.0),
            ("0b101", 5.0),
            ("1e1", 10.0),
            ("1E+1", 10.0),
            ("25e-1", 2.5),
            ("+5", 5.0),
            (" 7\n", 7.0),
            (".5", 0.5),
            ("5.", 5.0),
        ];
        for (text, number) in cases {
            assert_eq!(js_number(text), number, "{text:?}");
        }
        assert_eq!(js_number("-0").to_bits(), (-0.0f64).to_bits());
        assert_eq!(js_number("Infinity"), f64::INFINITY);
        assert_eq!(js_number("-Infinity"), f64::NEG_INFINITY);
        for text in [
            "0x", "-0x1", "1_000", "inf", "nan", "e5", ".", "1e", "0x1g", "\u{85}1",
        ] {
            assert!(js_number(text).is_nan(), "{text:?}");
        }
    }

    #[test]
    fn js_trim_uses_the_ecmascript_whitespace_set() {
        assert_eq!(js_trim("\u{FEFF}\u{A0}\u{3000} a b\t\u{2028}"), "a b");
        assert_eq!(js_trim("\u{85}a\u{85}"), "\u{85}a\u{85}");
        assert_eq!(js_trim("\u{200B}a"), "\u{200B}a");
        assert_eq!(
            js_trim("\u{B}\u{C}\r\na\u{1680}\u{200A}\u{202F}\u{205F}\u{2029}"),
            "a"
        );
    }

    #[test]
    fn utf16_len_counts_code_units() {
        assert_eq!(utf16_len(""), 0);
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("é"), 1);
        assert_eq!(utf16_len("😀"), 2);
    }

    #[test]
    fn messages_are_the_reference_texts() {
        let label = || "action event producer job".to_owned();
        let cases = [
            (
                Error::Required { label: label() },
                "action event producer job is required",
            ),
            (
                Error::ControlCharacters { label: label() },
                "action event producer job contains control characters",
            ),
            (
                Error::TooLong {
                    label: label(),
                    max: 128,
                },
                "action event producer job exceeds 128 characters",
            ),
            (
                Error::Confidential { label: label() },
                "action event producer job contains a confidential identifier",
            ),
            (
                Error::NotMachineText { label: label() },
                "action event producer job must be machine-readable text",
            ),
            (
                Error::NotRelativeDataPath { label: label() },
                "action event producer job must be a namespaced repository-relative data path using portable segments",
            ),
            (
                Error::NotCredentialFreeHttps { label: label() },
                "action event producer job must be a credential-free HTTPS URL",
            ),
            (
                Error::NotGithubActionsRun { label: label() },
                "action event producer job must identify a public github.com Actions run",
            ),
            (
                Error::InvalidUrl { label: label() },
                "Invalid URL: action event producer job must be a valid URL",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }

    /// conformance/events.json, category `reject_privacy`: `subject.subjectId` values.
    #[test]
    fn conformance_subject_ids_are_confidential() {
        for value in [
            "alice@example.com",
            "host-10.1.2.3",
            "172.16.5.4",
            "127.0.0.1",
            "100.64.1.1",
            "169.254.169.254",
            "010.0.0.1",
            "http:localhost:8080",
            "printer.local",
            "svc.corp:443",
            "router.home.arpa",
            "[::1]",
            "fd12:3456::1",
            "::ffff:10.0.0.1",
            "a%2Fb",
            "/home/alice/.ssh",
            "s3:/bucket/key",
            "https://user:pw@github.com/x",
            "github_pat_ABCDEFGHIJKLMNOP_qrstuvwxyz",
            "sk-ABCDEFGHIJKLMNOPQRSTUV",
            "xoxb-1234567890-abcdef",
            "AKIAABCDEFGHIJKLMNOP",
            "Bearer:abcdefghijklmnopqrstuvwxyz",
            "api_key=abcdefghijklmnopqrstuvwxyz",
            "Basic:dXNlcjpwYXNzd29yZA==",
        ] {
            let error = machine_text(value, "action event subject id", 256).unwrap_err();
            assert_eq!(
                error.to_string(),
                "action event subject id contains a confidential identifier",
                "{value:?}"
            );
        }
    }

    /// conformance/events.json, category `reject_privacy`: the other machine-text fields.
    #[test]
    fn conformance_machine_text_fields_are_confidential() {
        let cases = [
            (
                "ops@example.org",
                "action event attribute model",
                256,
                "action event attribute model contains a confidential identifier",
            ),
            (
                "job@example.com",
                "action event producer job",
                128,
                "action event producer job contains a confidential identifier",
            ),
            (
                "bob@example.com",
                "field",
                256,
                "field contains a confidential identifier",
            ),
        ];
        for (value, label, max_len, message) in cases {
            let error = machine_text(value, label, max_len).unwrap_err();
            assert_eq!(error.to_string(), message);
        }
    }

    /// Stored values of the accepted conformance events (`phase_event`, `action_event`).
    #[test]
    fn conformance_machine_text_values_are_accepted() {
        for value in [
            "review-shard-3",
            "PR_kwDOAbc123",
            "cluster:dup-17",
            "deadbeefcafebabe",
            "gpt-5.1-codex",
            "high",
            "review/item",
            "b-model",
            "snap-2026-01-15",
            "dup-v2",
            "duplicate_detected",
            "review.item",
            "review-runner.run-review.default",
            "Review-Runner-v2-c69aea3c755d.__run_2.pass-1-a91caaeac8ea",
            "ClawSweeper-Review-4fcad526aa0c",
            "sweep.yml",
            "0123456789abcdef0123456789abcdef01234567",
            "1234567890",
            "https://github.com/openclaw/openclaw",
        ] {
            assert_eq!(machine(value), Ok(value.to_owned()), "{value:?}");
        }
    }

    #[test]
    fn machine_text_checks_in_reference_order() {
        let x = || "x".to_owned();
        assert_eq!(machine("  \u{FEFF}"), Err(Error::Required { label: x() }));
        assert_eq!(machine("\u{FEFF} a.b \u{3000}"), Ok("a.b".to_owned()));
        // U+0085 is neither JS whitespace nor a control character by the reference's test.
        assert_eq!(
            machine("\u{85}a"),
            Err(Error::NotMachineText { label: x() })
        );
        assert_eq!(
            machine(&format!("a\u{7F}{}", "b".repeat(300))),
            Err(Error::ControlCharacters { label: x() })
        );
        assert_eq!(machine(&"a".repeat(256)), Ok("a".repeat(256)));
        assert_eq!(
            machine(&format!("{}@x", "a".repeat(255))),
            Err(Error::TooLong {
                label: x(),
                max: 256
            })
        );
        // 127 + 2 UTF-16 units: too long, although only 128 chars.
        assert_eq!(
            machine_text(&format!("{}😀", "a".repeat(127)), "x", 128),
            Err(Error::TooLong {
                label: x(),
                max: 128
            })
        );
        assert_eq!(
            machine("alice@example.com is here"),
            Err(Error::Confidential { label: x() })
        );
        assert_eq!(machine("a b"), Err(Error::NotMachineText { label: x() }));
        assert_eq!(machine("-a"), Err(Error::NotMachineText { label: x() }));
        assert_eq!(
            machine("fe80::1%eth0"),
            Err(Error::InvalidUrl { label: x() })
        );
    }

    #[test]
    fn relative_data_paths() {
        let label = "action event subject record path";
        let accepted = [
            (
                "./records/openclaw/items/42.md",
                "records/openclaw/items/42.md",
            ),
            ("results/review/42.json", "results/review/42.json"),
            (".artifacts/review/42.log", ".artifacts/review/42.log"),
            (" ./records/x ", "records/x"),
            ("records/console", "records/console"),
            ("records/com10", "records/com10"),
            ("records/_x", "records/_x"),
            ("records/x-", "records/x-"),
            ("records/a+b", "records/a+b"),
            ("notifications/a/b/c", "notifications/a/b/c"),
        ];
        for (value, stored) in accepted {
            assert_eq!(
                relative_data_path(value, label),
                Ok(stored.to_owned()),
                "{value:?}"
            );
        }
        let long_segment = format!("records/{}", "A".repeat(255));
        assert_eq!(
            relative_data_path(&long_segment, label),
            Ok(long_segment.clone())
        );

        let malformed = [
            "/home/alice/records/x.md",
            "records/../secrets",
            "records/CON.txt",
            "records/a%20b",
            "records/con",
            "records/con.json",
            "records/Nul",
            "records/COM1",
            "records/lpt9.x",
            "records/x/aux",
            "././records/x",
            "records//x",
            "records/.hidden",
            "records/x.",
            "records/-x",
            "records",
            "records/",
            "Records/x",
            "records\\x",
            "tmp/x",
            "records/é",
        ];
        for value in malformed {
            assert_eq!(
                relative_data_path(value, label).unwrap_err().to_string(),
                format!(
                    "{label} must be a namespaced repository-relative data path using portable segments"
                ),
                "{value:?}"
            );
        }
        let too_long_segment = format!("records/{}", "A".repeat(256));
        assert!(matches!(
            relative_data_path(&too_long_segment, label),
            Err(Error::NotRelativeDataPath { .. })
        ));
        assert!(matches!(
            relative_data_path(&format!("records/{}", "a/".repeat(300)), label),
            Err(Error::TooLong { max: 512, .. })
        ));

        for value in [
            "records/tmp/x",
            "records/a@b",
            "logs/x/home/y",
            "records/x.local",
        ] {
            assert_eq!(
                relative_data_path(value, label).unwrap_err().to_string(),
                format!("{label} contains a confidential identifier"),
                "{value:?}"
            );
        }
    }

    #[test]
    fn public_run_urls() {
        let label = "action event evidence run URL";
        let accepted = [
            (
                "https://github.com/openclaw/clawsweeper/actions/runs/1234567890",
                "https://github.com/openclaw/clawsweeper/actions/runs/1234567890",
            ),
            (
                " HTTPS://GITHUB.COM:443/o/r/actions/runs/1 ",
                "https://github.com/o/r/actions/runs/1",
            ),
            (
                r"https://github.com\o\r\actions\runs\1",
                "https://github.com/o/r/actions/runs/1",
            ),
            (
                "https://github.com/o/r/actions/x/../runs/1",
                "https://github.com/o/r/actions/runs/1",
            ),
            (
                "https://:@github.com/o/r/actions/runs/1",
                "https://github.com/o/r/actions/runs/1",
            ),
        ];
        for (value, href) in accepted {
            assert_eq!(
                public_run_url(value, label),
                Ok(href.to_owned()),
                "{value:?}"
            );
        }

        let credential_free = format!("{label} must be a credential-free HTTPS URL");
        for value in [
            "https://github.com/openclaw/x/actions/runs/1?token=abc",
            "https://github.com/o/r/actions/runs/1?",
            "https://github.com/o/r/actions/runs/1#",
            "https://u:p@github.com/openclaw/x/actions/runs/1",
            "https://u@github.com/o/r/actions/runs/1",
            "http://github.com/openclaw/x/actions/runs/1",
            "https://github.com:8443/openclaw/x/actions/runs/1",
            "https://github.com:444/o/r/actions/runs/1",
            "github.com:/o/r/actions/runs/1",
        ] {
            assert_eq!(
                public_run_url(value, label).unwrap_err().to_string(),
                credential_free,
                "{value:?}"
            );
        }

        let not_github = format!("{label} must identify a public github.com Actions run");
        for value in [
            "https://example.com/openclaw/x/actions/runs/1",
            "https://github.com./o/r/actions/runs/1",
            "https://www.github.com/o/r/actions/runs/1",
            "https://github.com/o/r/actions/runs/",
            "https://github.com/o/r/actions/runs/1/",
            "https://github.com/o/r/actions/runs/%31",
            "https://github.com/o/r/ACTIONS/runs/1",
            "https://github.com/o%2Fr/actions/runs/1",
        ] {
            assert_eq!(
                public_run_url(value, label).unwrap_err().to_string(),
                not_github,
                "{value:?}"
            );
        }

        assert_eq!(
            public_run_url("not a url", label),
            Err(Error::InvalidUrl {
                label: label.to_owned()
            })
        );
        assert_eq!(
            public_run_url(" \u{FEFF}", label),
            Err(Error::Required {
                label: label.to_owned()
            })
        );
        assert_eq!(
            public_run_url("https://github.com/o/r/actions/runs/1\n2", label),
            Err(Error::ControlCharacters {
                label: label.to_owned()
            })
        );
    }

    #[test]
    fn bounded_text_has_no_content_rules() {
        assert_eq!(bounded_text(" a@b c ", "x", 5), Ok("a@b c".to_owned()));
        assert_eq!(
            bounded_text("abcdef", "x", 5),
            Err(Error::TooLong {
                label: "x".to_owned(),
                max: 5
            })
        );
    }
}
