//! Property tests of the privacy scanners: the reference's confidential-identifier scan and the
//! strict profile's table.
//!
//! - Any text, of any characters, gets an answer and never a panic.
//! - Generated members of every secret family are refused: each [`strict::RULES`] pattern and
//!   each of the reference's [`CONFIDENTIAL_PATTERNS`] is turned into a generator of texts it
//!   matches, and every such text (alone or inside machine text) is refused by the scanner that
//!   owns the rule; the host rules are checked on generated addresses.
//! - Long crafted inputs (thousands of almost-matching prefixes) take time linear in their
//!   length: the scan of a 32 times longer input must cost well under the 1,024 times a
//!   quadratic scan would take (the ratio of two measurements, not an absolute time).
#![cfg(test)]

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::string::string_regex;

use crate::canonical::Value;
use crate::privacy::strict::{self, Matcher, Profile};
use crate::privacy::{CONFIDENTIAL_PATTERNS, contains_confidential_identifier};

/// A generator-friendly form of a scanner pattern: the token-boundary markers of the strict
/// table dropped (a generated token stands alone, so both boundaries hold), and start/end
/// alternatives reduced to their character branch.
fn generatable(source: &str) -> String {
    source
        .replace("<L>", "")
        .replace("<R_>", "")
        .replace("<R>", "")
        .replace("(?:^|", "(?:")
        .replace("|$)", ")")
        .replace("(?:$|", "(?:")
        .replace("|$|", "|")
        .replace("(?-u:\\b)", "")
}

/// The ASCII-only generator of `source`, or `None` when the pattern uses syntax the
/// generator does not support (look-around). Non-ASCII classes are narrowed to ASCII so that the
/// generated member is a text a writer could store.
fn generator(source: &str) -> Option<BoxedStrategy<String>> {
    let ascii = format!("(?-u){}", generatable(source));
    string_regex(&ascii)
        .ok()
        .or_else(|| string_regex(&generatable(source)).ok())
        .map(|s| s.boxed())
}

/// The strict table's pattern rules with a generator (the index into [`strict::RULES`]).
fn strict_generators() -> Vec<(usize, BoxedStrategy<String>)> {
    strict::RULES
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| match rule.matcher {
            Matcher::Pattern(source) => generator(source).map(|g| (i, g)),
            _ => None,
        })
        .collect()
}

#[test]
fn every_pattern_family_has_a_generator() {
    // The generator covers the table: a rule it cannot generate is not tested below, so their
    // number is bounded (look-around-free patterns always generate).
    let patterns = strict::RULES
        .iter()
        .filter(|r| matches!(r.matcher, Matcher::Pattern(_)))
        .count();
    let generated = strict_generators().len();
    assert!(
        generated * 10 >= patterns * 9,
        "only {generated} of {patterns} strict patterns could be generated"
    );
    let missing: Vec<(u8, String)> = CONFIDENTIAL_PATTERNS
        .iter()
        .filter(|p| generator(p.pattern).is_none())
        .map(|p| {
            (
                p.id,
                string_regex(&generatable(p.pattern))
                    .err()
                    .map(|e| e.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        missing.is_empty(),
        "reference patterns without a generator: {missing:?}"
    );
}

/// Context a member may appear in: alone, or after and before machine-text separators.
fn in_context() -> impl Strategy<Value = (String, String)> {
    let around = prop::sample::select(vec!["", " ", ".", "/", ":", "@", "x ", "id:", "a/b/"]);
    let after = prop::sample::select(vec!["", " ", ".json", "/", " tail", ":"]);
    (around, after).prop_map(|(a, b)| (a.to_owned(), b.to_owned()))
}

proptest! {
    #![proptest_config(super::prop_support::config(64))]

    /// Any text gets an answer from both scanners and the strict walk, never a panic.
    #[test]
    fn any_text_gets_an_answer(text in any::<String>()) {
        let _ = contains_confidential_identifier(&text);
        let _ = strict::scan_text(&text);
        let _ = Profile::Strict.check_line(&crate::canonical::to_canonical_unchecked(
            &Value::object([(text.as_str(), Value::str(&text))]),
        ));
    }

    /// Texts over the alphabets the patterns are made of (the near-misses most likely to
    /// confuse a scanner), never a panic.
    #[test]
    fn pattern_alphabet_texts_get_an_answer(
        text in "[a-zA-Z0-9_.:/@%+\\[\\]\\\\-]{0,200}",
    ) {
        let _ = contains_confidential_identifier(&text);
        let _ = strict::scan_text(&text);
    }
}

#[test]
fn generated_members_of_every_strict_family_are_refused() {
    let mut runner = proptest::test_runner::TestRunner::new(super::prop_support::config(24));
    for (i, generator) in strict_generators() {
        let rule = &strict::RULES[i];
        runner
            .run(&(generator, in_context()), |(member, (before, after))| {
                for text in [member.clone(), format!("{before}{member}{after}")] {
                    let hit = strict::scan_text(&text);
                    prop_assert!(
                        hit.is_some(),
                        "{} ({}) member {text:?} not refused",
                        rule.family,
                        rule.id
                    );
                }
                let value = Value::object([("subject_id", Value::str(&member))]);
                prop_assert!(
                    Profile::Strict
                        .check_line(&crate::canonical::to_canonical_unchecked(&value))
                        .is_err()
                );
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{}: {e}", rule.id));
    }
}

#[test]
fn generated_members_of_every_reference_pattern_are_refused() {
    let mut runner = proptest::test_runner::TestRunner::new(super::prop_support::config(48));
    for pattern in &CONFIDENTIAL_PATTERNS {
        let generator = generator(pattern.pattern).expect("checked above");
        runner
            .run(&(generator, in_context()), |(member, (before, _))| {
                // A leading separator keeps the `(?:^|[^...])` branch true.
                for text in [member.clone(), format!("{before} {member}")] {
                    prop_assert!(
                        contains_confidential_identifier(&text),
                        "pattern {} ({}) member {text:?} not refused",
                        pattern.id,
                        pattern.family
                    );
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("pattern {}: {e}", pattern.id));
    }
}

/// Addresses biased towards the special-purpose ranges (first octets and first segments the
/// registries name), with uniform ones mixed in.
fn ipv4_address() -> impl Strategy<Value = Ipv4Addr> {
    let special = prop::sample::select(vec![
        0u8, 10, 100, 127, 169, 172, 192, 198, 203, 224, 233, 239, 240, 255,
    ]);
    prop_oneof![
        any::<u32>().prop_map(Ipv4Addr::from),
        (special, any::<[u8; 3]>()).prop_map(|(a, [b, c, d])| Ipv4Addr::new(a, b, c, d)),
    ]
}

fn ipv6_address() -> impl Strategy<Value = Ipv6Addr> {
    let special = prop::sample::select(vec![
        0u16, 0x64, 0x100, 0x2001, 0x2002, 0x3fff, 0x5f00, 0xfc00, 0xfd00, 0xfe80, 0xfec0, 0xff02,
    ]);
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from),
        (special.clone(), any::<[u16; 7]>()).prop_map(|(a, rest)| {
            let mut s = [0u16; 8];
            s[0] = a;
            s[1..].copy_from_slice(&rest);
            Ipv6Addr::from(s)
        }),
        (special, any::<[u8; 4]>(), 0usize..6).prop_map(|(a, v4, zeros)| {
            // Embedded IPv4 with runs of zero segments (NAT64, mapped, compatible forms).
            let mut s = [0u16; 8];
            s[0] = a;
            if zeros < 5 {
                s[5] = if zeros == 0 { 0xffff } else { 0 };
            }
            s[6] = u16::from_be_bytes([v4[0], v4[1]]);
            s[7] = u16::from_be_bytes([v4[2], v4[3]]);
            Ipv6Addr::from(s)
        }),
    ]
}

proptest! {
    #![proptest_config(super::prop_support::config(512))]

    /// Every generated IPv4 address a host rule holds for is refused, as a dotted quad where
    /// the rule covers running text and as a URL host always.
    #[test]
    fn strict_ipv4_rules_refuse_their_addresses(addr in ipv4_address()) {
        for rule in strict::RULES {
            let (test, in_text) = match rule.matcher {
                Matcher::Ipv4(test) => (test, true),
                Matcher::UrlIpv4(test) => (test, false),
                _ => continue,
            };
            if !test(addr) {
                continue;
            }
            let url = format!("https://{addr}/x");
            prop_assert!(strict::scan_text(&url).is_some(), "{} {url}", rule.id);
            if in_text {
                let text = format!("host {addr}");
                prop_assert!(strict::scan_text(&text).is_some(), "{} {text}", rule.id);
            }
        }
    }

    /// Every generated IPv6 address a host rule holds for is refused, as a literal and as a
    /// bracketed URL host.
    #[test]
    fn strict_ipv6_rules_refuse_their_addresses(addr in ipv6_address()) {
        for rule in strict::RULES {
            let Matcher::Ipv6(test) = rule.matcher else {
                continue;
            };
            if !test(addr) {
                continue;
            }
            for text in [addr.to_string(), format!("https://[{addr}]/x")] {
                prop_assert!(strict::scan_text(&text).is_some(), "{} {text}", rule.id);
            }
        }
    }
}

/// Crafted texts of `n` repetitions of a near-miss unit: each unit starts a candidate match
/// that fails late, the input shape that makes a backtracking scanner quadratic.
fn crafted(unit: &str, n: usize) -> String {
    unit.repeat(n)
}

/// The near-miss units: prefixes of secret tokens, URL schemes, address candidates, paths.
const UNITS: &[&str] = &[
    "glpat-",
    "eyJabcdefgh.",
    "https://",
    "a://",
    "1.1.1.",
    "[::",
    "%4",
    "http://0",
    "C:\\",
    "a@",
];

/// The least time of a few scans of `text` with `scan` (the least is the measurement least
/// disturbed by other work on the machine; the first run also warms the lazily built automata).
fn least_time(text: &str, scan: fn(&str)) -> Duration {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            scan(std::hint::black_box(text));
            start.elapsed()
        })
        .min()
        .expect("three runs")
}

fn reference_scan(text: &str) {
    std::hint::black_box(contains_confidential_identifier(text));
}

fn strict_scan(text: &str) {
    std::hint::black_box(strict::scan_text(text));
}

/// How much longer `scan` takes on `unit` repeated to `FACTOR` times `SMALL` bytes than to
/// `SMALL` bytes: about `FACTOR` for a linear scan, its square for a quadratic one.
fn growth<const SMALL: usize, const FACTOR: usize>(unit: &str, scan: fn(&str)) -> f64 {
    let small = crafted(unit, SMALL / unit.len());
    let large = crafted(unit, FACTOR * SMALL / unit.len());
    let t_small = least_time(&small, scan).max(Duration::from_micros(50));
    let t_large = least_time(&large, scan);
    t_large.as_secs_f64() / t_small.as_secs_f64()
}

/// The bound on [`growth`] for 32 times the input: half the growth of a quadratic scan
/// (1,024), well above a linear one (32) — a ratio of two measurements, not a wall-clock limit.
/// The margin covers the one-time regime change of the regex engines' lazy automata between
/// 16 KiB and 64 KiB (slower per byte past it, linear on either side) and a loaded machine.
const MAX_GROWTH: f64 = 512.0;

#[test]
fn long_crafted_inputs_scan_in_linear_time() {
    let mut worst = (0.0f64, "", "");
    for unit in UNITS {
        for (name, scan) in [
            ("reference", reference_scan as fn(&str)),
            ("strict", strict_scan),
        ] {
            let g = growth::<4_000, 32>(unit, scan);
            if g > worst.0 {
                worst = (g, unit, name);
            }
            assert!(
                g < MAX_GROWTH,
                "the {name} scan of {unit:?} repeated grows {g:.1} times for 32 times the input"
            );
        }
    }
    eprintln!(
        "worst growth for 32 times the input: {:.1} ({} scan of {:?})",
        worst.0, worst.2, worst.1
    );
}

/// Runs of hex digits and single colons (`C:C:C:…`, `a:b:…`): every suffix after a single
/// colon is an IPv6 candidate of the strict scan; parsing each over the rest of the run made the
/// scan quadratic on a long `C:` run until candidates longer than any address
/// text were skipped.
#[test]
fn hex_colon_runs_scan_in_linear_time() {
    for unit in ["C:", "a:b:", "0:1.", "f:"] {
        let g = growth::<500, 32>(unit, strict_scan);
        assert!(
            g < MAX_GROWTH,
            "the strict scan of {unit:?} repeated grows {g:.1} times for 32 times the input"
        );
    }
}
