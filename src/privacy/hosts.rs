//! Private hosts and URLs (the reference's `privateHost` and `privateUrl`): WHATWG host parsing,
//! Node's `net.isIP` shapes, and the private IPv4 and IPv6 ranges the reference knows.

use std::sync::LazyLock;

use regex::Regex;
use url::{Host, Url};

use super::*;

/// Node's `net.isIPv6` (lib/internal/net.js). It differs from the WHATWG IPv6 parser in
/// accepting a `%zone` suffix, which is why `private_host` can fail.
pub(super) static NODE_IPV6: LazyLock<Regex> = LazyLock::new(|| {
    let v4_seg = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
    let v4 = format!(r"(?:{v4_seg}\.){{3}}{v4_seg}");
    let v6 = "(?:[0-9a-fA-F]{1,4})";
    let source = format!(
        "^(?:\
         (?:{v6}:){{7}}(?:{v6}|:)|\
         (?:{v6}:){{6}}(?:{v4}|:{v6}|:)|\
         (?:{v6}:){{5}}(?::{v4}|(?::{v6}){{1,2}}|:)|\
         (?:{v6}:){{4}}(?:(?::{v6}){{0,1}}:{v4}|(?::{v6}){{1,3}}|:)|\
         (?:{v6}:){{3}}(?:(?::{v6}){{0,2}}:{v4}|(?::{v6}){{1,4}}|:)|\
         (?:{v6}:){{2}}(?:(?::{v6}){{0,3}}:{v4}|(?::{v6}){{1,5}}|:)|\
         (?:{v6}:){{1}}(?:(?::{v6}){{0,4}}:{v4}|(?::{v6}){{1,6}}|:)|\
         (?::(?:(?::{v6}){{0,5}}:{v4}|(?::{v6}){{1,7}}|:))\
         )(?:%[0-9a-zA-Z.:-]{{1,}})?$"
    );
    Regex::new(&source).expect("Node's IPv6 pattern is valid regex syntax")
});

/// privateHost step 5: `::a:b` or `::ffff:a:b`, an IPv4 address in two hex groups.
pub(super) static EMBEDDED_IPV4: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^::(?:ffff:)?([0-9a-f]{1,4}):([0-9a-f]{1,4})$")
        .expect("the embedded IPv4 pattern is valid regex syntax")
});

/// The reference's `privateHost`: whether `s` names a loopback, private,
/// link-local, unique-local or internal host. `s` may be bracketed and have trailing dots; an
/// IPv6 literal is first re-serialized as WHATWG does, and a dotted quad is read octet by octet
/// with JS `Number()` (so `0x7f.0.0.1` and `1e1.0.0.1` are private, while `127.1` and
/// `0177.0.0.1` are not: only [`private_url`]'s WHATWG parsing expands those).
///
/// Returns true where the reference throws (an IPv6 literal with a zone id).
pub fn private_host(s: &str) -> bool {
    try_private_host(s).unwrap_or(true)
}

/// The reference's `privateUrl`: whether `s` parses as a WHATWG URL that is a
/// `file:` URL, carries a username or password, or whose host is a [`private_host`]. WHATWG
/// host parsing canonicalizes IPv4 aliases first, so `http://127.1`, `http://0x7f.1`,
/// `http://2130706433` and `http://0177.0.0.1` are all private. Unparsable input is not private.
pub fn private_url(s: &str) -> bool {
    try_private_url(s).unwrap_or(true)
}

/// The reference threw where the Rust API wants an answer: WHATWG could not re-serialize an
/// address that Node's `net.isIP` called IPv6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReferenceThrows;

pub(super) fn try_private_url(s: &str) -> Result<bool, ReferenceThrows> {
    // Without a base, only text with a scheme (and so a ':') parses as a URL.
    if !s.contains(':') {
        return Ok(false);
    }
    let Ok(url) = Url::parse(s) else {
        return Ok(false);
    };
    if url.scheme() == "file"
        || !url.username().is_empty()
        || url.password().is_some_and(|password| !password.is_empty())
    {
        return Ok(true);
    }
    // Like Node's `hostname`, `host_str` keeps the brackets of an IPv6 host; privateHost drops them.
    try_private_host(url.host_str().unwrap_or(""))
}

pub(super) fn try_private_host(s: &str) -> Result<bool, ReferenceThrows> {
    let h = js_trim(s);
    let h = h.strip_prefix('[').unwrap_or(h);
    let h = h.strip_suffix(']').unwrap_or(h);
    let mut h = h.trim_end_matches('.').to_lowercase();
    if h.is_empty() {
        return Ok(false);
    }
    // Every IPv6 literal has a ':'.
    if h.contains(':') && NODE_IPV6.is_match(&h) {
        h = whatwg_ipv6(&h).ok_or(ReferenceThrows)?;
    }
    const INTERNAL_SUFFIXES: [&str; 7] = [
        ".local",
        ".localhost",
        ".internal",
        ".corp",
        ".lan",
        ".home",
        ".home.arpa",
    ];
    if h == "localhost"
        || INTERNAL_SUFFIXES.iter().any(|suffix| h.ends_with(suffix))
        || h.starts_with("internal.")
        || h.starts_with("intranet.")
    {
        return Ok(true);
    }
    if h == "::1" || is_unique_local_or_link_local(&h) {
        return Ok(true);
    }
    if h.starts_with("::")
        && let Some(groups) = EMBEDDED_IPV4.captures(&h)
        && let (Ok(high), Ok(low)) = (
            u16::from_str_radix(&groups[1], 16),
            u16::from_str_radix(&groups[2], 16),
        )
    {
        let dotted = format!("{}.{}.{}.{}", high >> 8, high & 0xff, low >> 8, low & 0xff);
        return try_private_host(&dotted);
    }
    Ok(is_private_dotted_ipv4(&h))
}

/// WHATWG's serialization of the IPv6 literal `h` (lowercase, RFC 5952 compression, embedded
/// IPv4 as two hex groups), or `None` where WHATWG refuses it, e.g. for a zone id.
pub(super) fn whatwg_ipv6(h: &str) -> Option<String> {
    match Host::parse(&format!("[{h}]")) {
        Ok(Host::Ipv6(address)) => {
            let bracketed = Host::<&str>::Ipv6(address).to_string();
            Some(
                bracketed
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
            )
        }
        _ => None,
    }
}

/// `^(?:fc|fd)[0-9a-f]{2}:` (fc00::/7) or `^fe[89ab][0-9a-f]:` (fe80::/10) on a lowercase host.
pub(super) fn is_unique_local_or_link_local(h: &str) -> bool {
    let b = h.as_bytes();
    let hex = |i: usize| {
        b.get(i)
            .is_some_and(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    };
    let colon = b.get(4) == Some(&b':');
    let unique_local = b.starts_with(b"fc") || b.starts_with(b"fd");
    let link_local = b.starts_with(b"fe") && matches!(b.get(2), Some(b'8' | b'9' | b'a' | b'b'));
    (unique_local && hex(2) && hex(3) && colon) || (link_local && hex(3) && colon)
}

/// privateHost step 6: exactly four `.`-separated parts, each a JS `Number()` that is an integer
/// in 0…255, in 10/8, 127/8, 100.64/10, 169.254/16, 192.168/16 or 172.16/12.
pub(super) fn is_private_dotted_ipv4(h: &str) -> bool {
    if h.bytes().filter(|&b| b == b'.').count() != 3 {
        return false;
    }
    let parts: Vec<&str> = h.split('.').collect();
    if parts.len() != 4 {
        return false;
    }
    let octets: Vec<f64> = parts.iter().map(|part| js_number(part)).collect();
    if !octets
        .iter()
        .all(|&n| n.is_finite() && n.fract() == 0.0 && (0.0..=255.0).contains(&n))
    {
        return false;
    }
    let (a, b) = (octets[0], octets[1]);
    a == 10.0
        || a == 127.0
        || (a == 100.0 && (64.0..=127.0).contains(&b))
        || (a == 169.0 && b == 254.0)
        || (a == 192.0 && b == 168.0)
        || (a == 172.0 && (16.0..=31.0).contains(&b))
}
