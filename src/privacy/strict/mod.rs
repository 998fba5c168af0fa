//! The `strict` privacy profile: credential and private-host shapes that the reference's boundary
//! ([`super`]) lets through.
//!
//! The reference's rules are kept exactly as they are (the [`Profile::Reference`] profile); the
//! strict profile is an *additional* pass over a value that already passed them. It walks every
//! string and object key of an event's stored line ([`scan_line`], [`first_in_line`]) and tests
//! each text against one declarative table, [`RULES`]: a family, the id of the public rule it
//! comes from, and a matcher. Because every event the strict profile accepts is one the reference accepts,
//! compatibility is preserved; the strict profile only refuses more.
//!
//! Sources of the table (each entry names its rule):
//! - `gitleaks:<id>`: the default gitleaks configuration (`config/gitleaks.toml`);
//! - `trufflehog:<Detector>` and `detect-secrets:<Plugin>`: those scanners' detectors, where
//!   gitleaks has none;
//! - `iana:<prefix>`: the IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890,
//!   RFC 6052, RFC 3056, RFC 8215, RFC 4291), for hosts the reference does not treat as private,
//!   and for the reference's own private IPv4 ranges where it does not see them (the host of a
//!   URL whose scheme WHATWG does not know, such as `gopher://127.1`);
//! - `ssrf:<name>`: host names that public SSRF bypass lists use to reach loopback or any
//!   address through public DNS.
//!
//! Only shapes that can be stored matter: ledger text is machine text
//! (`[A-Za-z0-9][A-Za-z0-9_.:/@+-]*`), a relative path, a github.com run URL, a hex digest or a
//! timestamp, so the families left out for that reason are listed once, after the catalogue
//! (the PEM header rule stays as a cheap guard). Families the reference already covers
//! (GitHub `gh?_`/`github_pat_`, `sk-` keys such as OpenAI and Anthropic, npm, Slack `xox?-`,
//! `AKIA`/`ASIA`, signed JWTs, e-mail, RFC 1918 and loopback hosts) are not repeated.
//!
//! Patterns are anchored to token boundaries (see [`Rule::matcher`]) so that near-misses (model
//! names, versions, hex ids, ordinary words) stay accepted. All patterns are compiled once into
//! one [`regex::RegexSet`]; a text that matches none of them costs one pass of the set's DFA.
//! Host rules run only on the address candidates found in the text (dotted quads, IPv6
//! literals, and the host of every `scheme://authority`, whatever the scheme, parsed as WHATWG
//! parses an `http` host). Nothing here does I/O.
//!
//! # Where it applies
//!
//! `record` and `seal` refuse and write nothing; `publish` refuses the source and leaves the ref
//! unchanged; all three exit 1 and name the field path (`$.subject.subject_id`), the family and
//! the rule id, never the value (a shard path that holds it is withheld). `verify` reports strict
//! hits already in history as `privacy-strict` findings (the value must be treated as exposed:
//! revoke or rotate a credential; the ledger is immutable and keeps the event), and the
//! pre-receive hook refuses a push that adds one. The conformance vectors pass under both
//! profiles, and the day1 corpus publishes to the same bytes under both;
//! `testdata/privacy/strict-rejected.jsonl` and `near-miss.jsonl` are checked in every field
//! kind under both profiles.
//!
//! # The rule catalogue
//!
//! Every family and rule id of [`RULES`] (a test checks that this table names each one; adding
//! a family is adding an entry to [`RULES`] and a line here), by the sources listed above, with
//! Azure's documented platform address (`azure:`).
//!
//! | family | rule ids | shape |
//! |---|---|---|
//! | gitlab-token | gitleaks:gitlab-pat, gitleaks:gitlab-ptt, gitleaks:gitlab-rrt, gitleaks:gitlab-runner-authentication-token, gitleaks:gitlab-deploy-token, gitleaks:gitlab-cicd-job-token, gitleaks:gitlab-feed-token, gitleaks:gitlab-incoming-mail-token, gitleaks:gitlab-kubernetes-agent-token, gitleaks:gitlab-oauth-app-secret, gitleaks:gitlab-scim-token, gitleaks:gitlab-feature-flag-client-token | `glpat-`, `glptt-`, `GR1348941`, `glrt-`, `gldt-`, `glcbt-`, `glft-`, `glimt-`, `glagent-`, `gloas-`, `glsoat-`, `glffct-` tokens |
//! | atlassian-token | gitleaks:atlassian-api-token | `ATATT3…` |
//! | postman-token | gitleaks:postman-api-token | `PMAK-<24 hex>-<34 hex>` |
//! | sourcegraph-token | gitleaks:sourcegraph-access-token | `sgp_…` |
//! | harness-token | gitleaks:harness-api-key | `pat.` / `sat.` three-part keys |
//! | octopus-deploy-key | gitleaks:octopus-deploy-api-key | `API-` + 26 |
//! | readme-token, linear-token, notion-token, frameio-token | gitleaks:readme-api-token, gitleaks:linear-api-key, gitleaks:notion-api-token, gitleaks:frameio-api-token | `rdme_`, `lin_api_`, `ntn_`, `fio-u-` |
//! | pypi-token, rubygems-token, clojars-token | gitleaks:pypi-upload-token, gitleaks:rubygems-api-token, gitleaks:clojars-api-token | `pypi-AgEIcHlwaS5vcmc…`, `rubygems_`, `CLOJARS_` |
//! | artifactory-token | gitleaks:artifactory-api-key, gitleaks:artifactory-reference-token | `AKCp…`, `cmVmd…` |
//! | aws-key-id | gitleaks:aws-access-token | `ABIA`, `ACCA`, `A3T?`, `AGPA`, `AIDA`, `AROA`, `AIPA`, `ANPA`, `ANVA`, `APKA` + 16 (the reference has `AKIA`/`ASIA` only) |
//! | google-api-key | gitleaks:gcp-api-key | `AIza` + 35 |
//! | alibaba-key-id | gitleaks:alibaba-access-key-id | `LTAI` + 20 |
//! | digitalocean-token | gitleaks:digitalocean-pat, gitleaks:digitalocean-access-token, gitleaks:digitalocean-refresh-token | `dop_v1_`, `doo_v1_`, `dor_v1_` |
//! | vault-token | gitleaks:vault-service-token, gitleaks:vault-batch-token | `hvs.`, `hvb.` |
//! | terraform-token | gitleaks:hashicorp-tf-api-token | `….atlasv1.…` |
//! | databricks-token | gitleaks:databricks-api-token | `dapi` + 32 hex |
//! | cloudflare-origin-ca-key | gitleaks:cloudflare-origin-ca-key | `v1.0-<24 hex>-<146 hex>` |
//! | heroku-token, flyio-token, doppler-token, pulumi-token | gitleaks:heroku-api-key-v2, gitleaks:flyio-access-token, gitleaks:doppler-api-token, gitleaks:pulumi-api-token | `HRKU-AA`, `fo1_`/`fm1a_`/`fm1r_`/`fm2_`, `dp.pt.`, `pul-` |
//! | planetscale-token | gitleaks:planetscale-api-token, gitleaks:planetscale-oauth-token, gitleaks:planetscale-password | `pscale_tkn_`, `pscale_oauth_`, `pscale_pw_` |
//! | scalingo-token, dynatrace-token | gitleaks:scalingo-api-token, gitleaks:dynatrace-api-token | `tk-us-`, `dt0c01.` |
//! | grafana-token | gitleaks:grafana-cloud-api-token, gitleaks:grafana-service-account-token, gitleaks:grafana-api-key | `glc_`, `glsa_`, `eyJrIjoi` |
//! | new-relic-key | gitleaks:new-relic-user-api-key, gitleaks:new-relic-browser-api-token, gitleaks:new-relic-insert-key | `NRAK-`, `NRJS-`, `NRII-` |
//! | sentry-token | gitleaks:sentry-user-token, gitleaks:sentry-org-token | `sntryu_`, `sntrys_` |
//! | infracost-token, prefect-token | gitleaks:infracost-api-token, gitleaks:prefect-api-token | `ico-`, `pnu_` |
//! | settlemint-token | gitleaks:settlemint-personal-access-token, gitleaks:settlemint-application-access-token, gitleaks:settlemint-service-access-token | `sm_pat_`, `sm_aat_`, `sm_sat_` |
//! | onepassword-secret-key, age-secret-key | gitleaks:1password-secret-key, gitleaks:age-secret-key | `A3-…`, `AGE-SECRET-KEY-1…` |
//! | maxmind-license-key, adobe-client-secret | gitleaks:maxmind-license-key, gitleaks:adobe-client-secret | `…_mmk`, `p8e-` |
//! | stripe-key | gitleaks:stripe-access-token | `sk_`/`rk_` + `live`/`test`/`prod` (the reference's `sk-` rule wants a hyphen) |
//! | square-token | gitleaks:square-access-token, detect-secrets:SquareOAuthDetector | `EAAA`, `sq0atp-`, `sq0csp-` |
//! | shopify-token | gitleaks:shopify-access-token, gitleaks:shopify-custom-access-token, gitleaks:shopify-private-app-access-token, gitleaks:shopify-shared-secret | `shpat_`, `shpca_`, `shppa_`, `shpss_` |
//! | shippo-token, duffel-token, easypost-token, facebook-token | gitleaks:shippo-api-token, gitleaks:duffel-api-token, gitleaks:easypost-api-token, gitleaks:easypost-test-api-token, gitleaks:facebook-page-access-token | `shippo_`, `duffel_`, `EZAK`/`EZTK`, `EAAM`/`EAAC` |
//! | huggingface-token | gitleaks:huggingface-access-token, gitleaks:huggingface-organization-api-token | `hf_` + 34 letters, `api_org_` + 34 letters |
//! | perplexity-key | gitleaks:perplexity-api-key | `pplx-` |
//! | slack-app-token | gitleaks:slack-app-token | `xapp-<n>-…` |
//! | slack-webhook | gitleaks:slack-webhook-url | `hooks.slack.com/services/…` (also `workflows/`, `triggers/`) |
//! | discord-webhook | trufflehog:DiscordWebhook | `discord.com/api/webhooks/<id>/<token>` |
//! | discord-bot-token | detect-secrets:DiscordBotTokenDetector | three-part bot tokens |
//! | telegram-bot-token | gitleaks:telegram-bot-api-token | `<digits>:A…` |
//! | twilio-key | gitleaks:twilio-api-key | `SK` + 32 hex |
//! | sendgrid-key, sendinblue-key, mailchimp-key | gitleaks:sendgrid-api-token, gitleaks:sendinblue-api-token, detect-secrets:MailchimpDetector | `SG.…`, `xkeysib-`, `<32>-us<n>` |
//! | unsigned-jwt | gitleaks:jwt | JWTs with an empty or short signature (`alg: none`); the reference wants 16 or more signature characters |
//! | base64-jwt | gitleaks:jwt-base64 | base64 of a JWT (`ZXlK…`) |
//! | private-key | gitleaks:private-key | PEM headers the reference misses (a guard: machine text cannot hold them) |
//! | loopback-dns-name | ssrf:loopback-dns-name | `localtest.me`, `lvh.me`, `vcap.me`, `localhost.direct` and their subdomains |
//! | wildcard-ip-dns-name | ssrf:wildcard-ip-dns-name | `nip.io`, `sslip.io`, `xip.io` names |
//! | this-network-ipv4 | iana:0.0.0.0/8 | `0.0.0.0`, `0.x.y.z`, `http://0.0` |
//! | ietf-protocol-ipv4 | iana:192.0.0.0/24 | e.g. `192.0.0.192` |
//! | benchmarking-ipv4 | iana:198.18.0.0/15 | `198.18.x.y`, `198.19.x.y` |
//! | cloud-metadata-ipv4 | azure:wireserver-168.63.129.16 | Azure's platform address |
//! | loopback-ipv4, private-ipv4, shared-address-ipv4, link-local-ipv4 | iana:127.0.0.0/8, iana:10.0.0.0/8, iana:172.16.0.0/12, iana:192.168.0.0/16, iana:100.64.0.0/10, iana:169.254.0.0/16 | the reference's own ranges as the host of a URL whose scheme WHATWG leaves opaque (`gopher://127.1`, `redis://0x7f.1:6379`, `dict://2130706433`) |
//! | unspecified-ipv6 | iana:::/128 | `0::`, `[::]` |
//! | nat64-private-ipv4 | iana:64:ff9b::/96 | NAT64 around a private IPv4 (`64:ff9b::a00:1`) |
//! | nat64-local-use | iana:64:ff9b:1::/48 | local-use NAT64 |
//! | 6to4-private-ipv4 | iana:2002::/16 | 6to4 of a private IPv4 (`2002:a00:1::1`) |
//! | ipv4-embedded-private | iana:::ffff:0:0/96 | IPv4-mapped, -compatible and -translated forms of private IPv4 (`::ffff:0:a00:1`) |
//! | site-local-ipv6 | iana:fec0::/10 | deprecated site-local |
//! | confidential-producer-part | ledger:producer-part-confidential | the reference's own confidential scan on each producer part before they are joined ([`PRODUCER_PART_RULE`], applied by the writer, not in [`RULES`]) |
//!
//! Not in the table, on purpose: families whose every value needs a character ledger text cannot
//! hold (space, `=`, `~`, `?`, `&`, `%`: Azure storage and SAS keys, Azure AD client secrets,
//! `key=value` assignments, PEM blocks); families whose shape is ordinary text without a fixed
//! prefix and need a context keyword (gitleaks' generic and `<service>…=` rules, high-entropy
//! strings, Twilio account SIDs, legacy Vault `s.` tokens); and Teredo addresses (their IPv4 is
//! obfuscated). The run URL (`evidence[].run_url`) is not scanned by the reference; the strict pass
//! scans it like every other string. The host after every `://`, whatever the scheme (`gopher`,
//! `dict`, `ldap`, `redis`, `smb`, `mongodb`, unknown ones), is read as an `http` host: userinfo and
//! port dropped, every IPv4 alias form (`127.1`, `0177.1`, `0x7f.1`, `2130706433`) resolved,
//! bracketed IPv6 parsed, names mapped, then tested against the host rules above.
//!
//! Cost: the strict pass's CPU per event of the day1 corpus, beside the reference's validation
//! of the same event, is measured by
//! `cargo test --release --lib strict_pass_cost -- --ignored --nocapture`.
//!
//! Layout: this module is the engine (the profile, findings, the compiled table and the text
//! and host scans); `rules` holds the table, `walk` the walk of a stored line.

mod rules;
mod walk;

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::LazyLock;

use regex::{Regex, RegexSet};
use url::{Host, Url};

pub use rules::{CallerRule, Matcher, PRODUCER_PART_RULE, RULES, Rule, is_strict_rule_id};
#[cfg(test)]
pub use walk::{first, scan};
pub use walk::{first_in_line, refuses_line, scan_line};

/// Which privacy rules apply to the ledger's durable text.
///
/// `Reference` is the TypeScript reference's boundary, exactly: use it to
/// reproduce the reference byte for byte on old data. `Strict` (the default) is the reference's
/// boundary plus the [`RULES`] table. Every command that writes or checks events takes the
/// profile (`--privacy reference|strict`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    /// The reference's rules only.
    Reference,
    /// The reference's rules and the [`RULES`] table.
    #[default]
    Strict,
}

impl Profile {
    /// The name used on the command line: `reference` or `strict`.
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Reference => "reference",
            Profile::Strict => "strict",
        }
    }

    /// Whether this profile refuses the value of the JSON text `line` (a stored event's line)
    /// beyond the reference's rules: under [`Profile::Strict`] the first [`Finding`] of
    /// [`first_in_line`], under [`Profile::Reference`] always `Ok`. The value is expected to
    /// have passed the reference's rules already.
    pub fn check_line(self, line: &str) -> Result<(), Finding> {
        match self {
            Profile::Reference => Ok(()),
            Profile::Strict => first_in_line(line).map_or(Ok(()), Err),
        }
    }

    /// [`Profile::check_line`] for one text that lands in the ledger only after a transformation the
    /// event walk cannot see through (for example a producer part joined into a composed
    /// identifier). `path` names the text in the finding.
    pub fn check_text(self, text: &str, path: &str) -> Result<(), Finding> {
        match self {
            Profile::Reference => Ok(()),
            Profile::Strict => match scan_text(text) {
                Some(rule) => Err(Finding::new(path.to_owned(), false, rule)),
                None => Ok(()),
            },
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A profile name other than `reference` or `strict`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown privacy profile {0:?}: use `strict` (the default) or `reference`")]
pub struct UnknownProfile(pub String);

impl FromStr for Profile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Profile, UnknownProfile> {
        match s {
            "reference" => Ok(Profile::Reference),
            "strict" => Ok(Profile::Strict),
            other => Err(UnknownProfile(other.to_owned())),
        }
    }
}

/// A strict hit at one place of a value. It never contains the text that matched: `path` names
/// where it is, `family` and `rule` what it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{} matches {family} ({rule})", if *.key { "a key of " } else { "" }, .path)]
pub struct Finding {
    /// JSONPath-like location (`$.subject.subject_id`, `$.evidence[0].report_path`), or the
    /// name a caller gave a text checked on its own ([`Profile::check_text`]).
    pub path: String,
    /// The hit is an object key of `path`, not its value.
    pub key: bool,
    /// [`Rule::family`] of the first rule that matched.
    pub family: &'static str,
    /// [`Rule::id`] of that rule.
    pub rule: &'static str,
}

impl Finding {
    fn new(path: String, key: bool, rule: &'static Rule) -> Finding {
        Finding {
            path,
            key,
            family: rule.family,
            rule: rule.id,
        }
    }

    /// A hit of a [`CallerRule`] on the text named `path`.
    pub fn of(path: String, rule: &CallerRule) -> Finding {
        Finding {
            path,
            key: false,
            family: rule.family,
            rule: rule.id,
        }
    }
}

/// The compiled table: the keywords, the patterns that have keywords, those that do not, and
/// the host rules by kind.
struct Compiled {
    /// Every keyword of the table, case-insensitively: a literal search, far cheaper than the
    /// patterns.
    keywords: Regex,
    /// `keywords` or any keywordless pattern: a text that does not match cannot match a pattern.
    gate: Regex,
    /// Patterns with keywords, run only on a text that has a keyword.
    keyed: RegexSet,
    /// Index in [`RULES`] of each pattern of `keyed`.
    keyed_rules: Vec<usize>,
    /// Patterns without keywords, run on every text.
    always: RegexSet,
    /// Index in [`RULES`] of each pattern of `always`.
    always_rules: Vec<usize>,
    ipv4_rules: Vec<&'static Rule>,
    ipv6_rules: Vec<&'static Rule>,
}

/// Expands the boundary markers of [`Matcher::Pattern`].
fn expand(source: &str) -> String {
    source
        .replace("<L>", "(?:^|[^0-9A-Za-z])")
        .replace("<R_>", "(?:$|[^0-9A-Za-z_-])")
        .replace("<R>", "(?:$|[^0-9A-Za-z])")
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let (mut keyed, mut keyed_rules, mut always, mut always_rules) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut keywords = Vec::new();
    let mut ipv4_rules = Vec::new();
    let mut ipv6_rules = Vec::new();
    for (i, rule) in RULES.iter().enumerate() {
        match rule.matcher {
            Matcher::Pattern(source) if rule.keywords.is_empty() => {
                always.push(expand(source));
                always_rules.push(i);
            }
            Matcher::Pattern(source) => {
                keyed.push(expand(source));
                keyed_rules.push(i);
                keywords.extend(rule.keywords.iter().map(|k| regex::escape(k)));
            }
            Matcher::Ipv4(_) | Matcher::UrlIpv4(_) => ipv4_rules.push(rule),
            Matcher::Ipv6(_) => ipv6_rules.push(rule),
        }
    }
    keywords.sort();
    keywords.dedup();
    let keywords = format!("(?i:{})", keywords.join("|"));
    let gate = std::iter::once(keywords.clone())
        .chain(always.iter().cloned())
        .collect::<Vec<_>>()
        .join("|");
    Compiled {
        keywords: Regex::new(&keywords).expect("the keywords are escaped literals"),
        gate: Regex::new(&gate).expect("every strict pattern is valid regex syntax"),
        keyed: RegexSet::new(keyed).expect("every strict pattern is valid regex syntax"),
        keyed_rules,
        always: RegexSet::new(always).expect("every strict pattern is valid regex syntax"),
        always_rules,
        ipv4_rules,
        ipv6_rules,
    }
});

/// The reference's dotted-quad candidates.
static IPV4_CANDIDATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?-u:\b)(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?-u:\b)")
        .expect("the IPv4 candidate pattern is valid regex syntax")
});

/// The first rule of [`RULES`] that `text` matches: the first matching pattern in table order,
/// else the first host rule that holds for an address in the text.
pub fn scan_text(text: &str) -> Option<&'static Rule> {
    let compiled = &*COMPILED;
    if let Some(rule) = first_pattern(compiled, text) {
        return Some(rule);
    }
    scan_hosts(compiled, text)
}

thread_local! {
    static SCANNED: super::Remembered<Option<&'static Rule>> = super::Remembered::default();
}

/// [`scan_text`], remembered for short texts (member names and many values repeat).
fn scan_text_remembered(text: &str) -> Option<&'static Rule> {
    super::remembered(&SCANNED, text, scan_text)
}

fn first_pattern(compiled: &Compiled, text: &str) -> Option<&'static Rule> {
    let first = |set: &RegexSet, rules: &[usize]| {
        set.is_match(text)
            .then(|| set.matches(text).iter().next().map(|i| rules[i]))
            .flatten()
    };
    // One search decides for almost every text: a keyword or a keywordless pattern.
    if !compiled.gate.is_match(text) {
        return None;
    }
    let keyed = if compiled.keywords.is_match(text) {
        first(&compiled.keyed, &compiled.keyed_rules)
    } else {
        None
    };
    let always = first(&compiled.always, &compiled.always_rules);
    keyed.into_iter().chain(always).min().map(|i| &RULES[i])
}

/// The first IPv4 rule that holds for `a`; [`Matcher::UrlIpv4`] rules only for a URL's host.
fn v4_hit(compiled: &Compiled, a: Ipv4Addr, url_host: bool) -> Option<&'static Rule> {
    compiled
        .ipv4_rules
        .iter()
        .copied()
        .find(|r| match r.matcher {
            Matcher::Ipv4(test) => test(a),
            Matcher::UrlIpv4(test) => url_host && test(a),
            _ => false,
        })
}

fn v6_hit(compiled: &Compiled, a: Ipv6Addr) -> Option<&'static Rule> {
    compiled
        .ipv6_rules
        .iter()
        .copied()
        .find(|r| match r.matcher {
            Matcher::Ipv6(test) => test(a),
            _ => false,
        })
}

fn scan_hosts(compiled: &Compiled, text: &str) -> Option<&'static Rule> {
    let bytes = text.as_bytes();
    // Cheap gates: most ledger text has neither three dots nor a colon.
    let has_colon = bytes.contains(&b':');
    if bytes.iter().filter(|&&b| b == b'.').count() >= 3 {
        for candidate in IPV4_CANDIDATE.find_iter(text) {
            if let Ok(a) = candidate.as_str().parse::<Ipv4Addr>()
                && let Some(rule) = v4_hit(compiled, a, false)
            {
                return Some(rule);
            }
        }
    }
    if !has_colon {
        return None;
    }
    for candidate in ipv6_candidates(text) {
        if let Some(rule) = v6_hit(compiled, candidate) {
            return Some(rule);
        }
    }
    // A special URL without `//` (`http:0.0`) has a host too.
    if is_special_url(text)
        && let Ok(url) = Url::parse(text)
        && let Some(hit) = url.host().and_then(|h| host_hit(compiled, &h, text))
    {
        return Some(hit);
    }
    // Every `://`, whatever precedes it: a scheme glued to a word (`x_gopher://`) or no scheme
    // at all still names the host a client would reach.
    for (at, _) in text.match_indices("://") {
        if let Some((raw, host)) = authority_host(&text[at + 3..])
            && let Some(hit) = host_hit(compiled, &host, raw)
        {
            return Some(hit);
        }
    }
    None
}

/// The first host rule that holds for a parsed URL host; `raw` is the host's text before
/// parsing.
fn host_hit<S: AsRef<str>>(
    compiled: &Compiled,
    host: &Host<S>,
    raw: &str,
) -> Option<&'static Rule> {
    match host {
        Host::Ipv4(a) => v4_hit(compiled, *a, true),
        Host::Ipv6(a) => v6_hit(compiled, *a),
        // WHATWG maps the host (IDNA, case), so look at the mapped name too.
        Host::Domain(d) if d.as_ref() != raw => first_pattern(compiled, d.as_ref()),
        Host::Domain(_) => None,
    }
}

/// The host of the authority at the start of `rest` (the text after a `://`), parsed as WHATWG
/// parses the host of an `http` URL whatever the scheme: for a scheme WHATWG does not know
/// (`gopher`, `redis`, `ldap`, …) it leaves the host opaque, so `127.1`, `0177.1`, `0x7f.1` and
/// `2130706433` would never be read as the address they reach. As for `http`, further slashes
/// and backslashes are skipped, the authority ends at `/`, `\`, `?`, `#`, whitespace, a quote
/// or `<>` (where the reference's URL candidates end), userinfo ends at its last `@`, and a
/// port (valid or not) is dropped. Returns the host's text and the parsed host; `None` when
/// there is no host or it does not parse.
fn authority_host(rest: &str) -> Option<(&str, Host<String>)> {
    let rest = rest.trim_start_matches(['/', '\\']);
    let end = rest
        .find(|c: char| "/\\?#\"'<>".contains(c) || c.is_whitespace())
        .unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let raw = if host_port.starts_with('[') {
        host_port.find(']').map_or(host_port, |i| &host_port[..=i])
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if raw.is_empty() {
        return None;
    }
    Host::parse(raw).ok().map(|host| (raw, host))
}

/// Whether the whole text starts with a special WHATWG scheme (`http:`, `https:`, `ws:`,
/// `wss:`, `ftp:`), whose host WHATWG parses as an address even without `//`.
fn is_special_url(text: &str) -> bool {
    let Some((scheme, _)) = text.split_once(':') else {
        return false;
    };
    ["http", "https", "ws", "wss", "ftp"]
        .iter()
        .any(|s| scheme.eq_ignore_ascii_case(s))
}

/// The longest text `Ipv6Addr` parses: six groups of four hex digits and a dotted IPv4
/// address (`ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`).
const MAX_IPV6_TEXT: usize = 45;

/// IPv6 literals in `text`: maximal runs of `[0-9A-Fa-f:.]` that hold `::` or two colons and
/// parse (after dropping dots at the ends, or a trailing `:port`-like group). A run glued to a
/// letter or digit on the left (`bind:0::` gives the run `d:0::`), or that does not parse as a
/// whole, is also tried from after each of its single colons (`0::`); a run glued on the right
/// is not a candidate (so `clippy::x` is none).
fn ipv6_candidates(text: &str) -> impl Iterator<Item = Ipv6Addr> + '_ {
    let bytes = text.as_bytes();
    let in_run = |b: u8| b.is_ascii_hexdigit() || b == b':' || b == b'.';
    let glued = |at: Option<&u8>| at.is_some_and(u8::is_ascii_alphanumeric);
    let parse = |run: &str| -> Option<Ipv6Addr> {
        let colons = run.bytes().filter(|&b| b == b':').count();
        if colons < 2 && !run.contains("::") {
            return None;
        }
        run.parse::<Ipv6Addr>().ok().or_else(|| {
            run.rsplit_once(':')
                .and_then(|(head, _)| head.parse::<Ipv6Addr>().ok())
        })
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !in_run(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && in_run(bytes[i]) {
            i += 1;
        }
        // Dots at either end separate the run from a neighbouring word (`0::.run-review`).
        let raw = &text[start..i];
        let run = raw.trim_start_matches('.');
        let trimmed = run.trim_end_matches('.');
        if trimmed.len() == run.len() && glued(bytes.get(i)) {
            continue;
        }
        let left_glued =
            run.len() == raw.len() && glued(start.checked_sub(1).and_then(|p| bytes.get(p)));
        let whole = if left_glued { None } else { parse(trimmed) };
        if let Some(a) = whole {
            found.push(a);
            continue;
        }
        let tb = trimmed.as_bytes();
        let last_colon = trimmed.rfind(':');
        for k in 1..tb.len() {
            let after_single_colon =
                tb[k - 1] == b':' && tb[k] != b':' && (k < 2 || tb[k - 2] != b':');
            let double_colon = tb[k] == b':' && tb.get(k + 1) == Some(&b':') && tb[k - 1] != b':';
            // `parse` reads the suffix, or the suffix up to its last colon: neither can be an
            // address when both are longer than any address text, and skipping them keeps the
            // scan linear in a long run of hex digits and colons.
            let head_fits = last_colon.is_some_and(|l| l >= k && l - k <= MAX_IPV6_TEXT);
            if tb.len() - k > MAX_IPV6_TEXT && !head_fits {
                continue;
            }
            if (after_single_colon || double_colon)
                && let Some(a) = parse(&trimmed[k..])
            {
                found.push(a);
                break;
            }
        }
    }
    found.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{NUMBER_TOKEN, Value};

    fn family(text: &str) -> Option<&'static str> {
        scan_text(text).map(|r| r.family)
    }

    /// Cost of the strict pass per event, on the day1 corpus (5,091 events), next to the
    /// reference's validation of the same lines (CPU time, best of 5 runs each, as the machine
    /// is shared). Run in release:
    /// `cargo test --release --lib strict_pass_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement; run in release"]
    fn strict_pass_cost() {
        let shards = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/corpus/day1/expected-state/ledger/v1/events");
        let mut lines = Vec::new();
        for entry in walkdir::WalkDir::new(shards) {
            let entry = entry.unwrap();
            if entry.file_type().is_file() {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                lines.extend(text.lines().map(str::to_owned));
            }
        }
        // CPU time of this thread (Linux schedstat), so that other work on the machine does not
        // count; wall-clock time where it cannot be read.
        let cpu = || -> Option<std::time::Duration> {
            let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
            let ns = text.split_whitespace().next()?.parse().ok()?;
            Some(std::time::Duration::from_nanos(ns))
        };
        let best = |f: &mut dyn FnMut()| {
            (0..5)
                .map(|_| {
                    let (wall, start) = (std::time::Instant::now(), cpu());
                    f();
                    match (start, cpu()) {
                        (Some(a), Some(b)) => b - a,
                        _ => wall.elapsed(),
                    }
                })
                .min()
                .unwrap()
        };
        let mut events = Vec::new();
        let validate = best(&mut || {
            events = lines
                .iter()
                .map(|l| crate::event::Event::parse_line(l, "bench").unwrap())
                .collect();
        });
        let records: Vec<Value> = events.iter().map(crate::event::Event::record).collect();
        let mut texts = Vec::new();
        for r in &records {
            collect_texts(r, &mut texts);
        }
        assert!(records.iter().all(|r| first(r).is_none()));
        let strict = best(&mut || {
            for r in &records {
                std::hint::black_box(scan(std::hint::black_box(r)));
            }
        });
        let per_text = best(&mut || {
            for t in &texts {
                std::hint::black_box(scan_text(std::hint::black_box(t)));
            }
        });
        let n = events.len() as f64;
        println!(
            "strict pass: {} events, {} strings and keys each on average; {:.2} µs/event \
             (texts alone, without the walk: {:.2} µs/event, {:.0} ns per text); reference validation \
             (parse + validate) {:.2} µs/event",
            events.len(),
            texts.len() / events.len(),
            strict.as_secs_f64() * 1e6 / n,
            per_text.as_secs_f64() * 1e6 / n,
            per_text.as_secs_f64() * 1e9 / texts.len() as f64,
            validate.as_secs_f64() * 1e6 / n,
        );
    }

    fn collect_texts<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|x| collect_texts(x, out)),
            Value::Object(m) => {
                for (k, x) in m {
                    out.push(k);
                    collect_texts(x, out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_pattern_compiles_and_ids_name_a_source() {
        assert_eq!(
            COMPILED.keyed.len()
                + COMPILED.always.len()
                + COMPILED.ipv4_rules.len()
                + COMPILED.ipv6_rules.len(),
            RULES.len()
        );
        for rule in RULES {
            let (source, name) = rule.id.split_once(':').expect("source:rule");
            assert!(
                [
                    "gitleaks",
                    "trufflehog",
                    "detect-secrets",
                    "iana",
                    "ssrf",
                    "azure"
                ]
                .contains(&source),
                "{}",
                rule.id
            );
            assert!(!name.is_empty(), "{}", rule.id);
            assert!(
                rule.family
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{}",
                rule.family
            );
            if let Matcher::Pattern(p) = rule.matcher {
                assert!(Regex::new(&expand(p)).is_ok(), "{}", rule.id);
            }
        }
    }

    /// Every rule of the table is live: some value of testdata/privacy/strict-rejected.jsonl,
    /// or of the few samples here for shapes that machine text cannot hold, is reported with
    /// that rule first. A keyword that does not occur in its pattern's matches would show here.
    #[test]
    fn every_rule_fires_on_a_sample() {
        let corpus = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("testdata/privacy/strict-rejected.jsonl"),
        )
        .unwrap();
        let mut samples: Vec<String> = corpus
            .lines()
            .map(|l| {
                let v = crate::canonical::parse(l).unwrap();
                v.get("value").and_then(Value::as_str).unwrap().to_owned()
            })
            .collect();
        samples.extend(
            [
                "-----BEGIN DSA PRIVATE KEY-----",
                &format!("fm1r_{}", "Ab+/".repeat(26)),
                &format!("sk_prod_{}", "a".repeat(12)),
                &format!("EAAM{}", "b1".repeat(52)),
                "xapp-1-A0-1-b",
                &format!(
                    "sat.{}.{}.{}",
                    "c".repeat(22),
                    "d".repeat(24),
                    "e".repeat(20)
                ),
            ]
            .map(str::to_owned),
        );
        let hit: std::collections::BTreeSet<&str> = samples
            .iter()
            .filter_map(|t| scan_text(t))
            .map(|r| r.id)
            .collect();
        let dead: Vec<&str> = RULES
            .iter()
            .map(|r| r.id)
            .filter(|id| !hit.contains(id))
            .collect();
        assert!(dead.is_empty(), "rules no sample reaches: {dead:?}");
        for rule in RULES {
            for k in rule.keywords {
                assert_eq!(k.to_lowercase(), *k, "{}", rule.id);
            }
        }
    }

    /// The module docs' catalogue names every family and rule id of [`RULES`].
    #[test]
    fn readme_lists_every_rule() {
        let docs: String = include_str!("mod.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let table = &docs[docs
            .find("# The rule catalogue")
            .expect("a catalogue section")..];
        for rule in RULES {
            assert!(table.contains(rule.id), "the module docs lack {}", rule.id);
            assert!(
                table.contains(rule.family),
                "the module docs lack {}",
                rule.family
            );
        }
    }

    #[test]
    fn profile_names() {
        assert_eq!(Profile::default(), Profile::Strict);
        for p in [Profile::Reference, Profile::Strict] {
            assert_eq!(p.as_str().parse::<Profile>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(
            "lenient".parse::<Profile>().unwrap_err().to_string(),
            "unknown privacy profile \"lenient\": use `strict` (the default) or `reference`"
        );
    }

    #[test]
    fn hosts_beyond_the_reference() {
        let cases = [
            ("0.0.0.0", Some("this-network-ipv4")),
            ("0.0.0.0:8080", Some("this-network-ipv4")),
            ("http://0.0.0.0/x", Some("this-network-ipv4")),
            ("http://0.0/", Some("this-network-ipv4")),
            ("0.12.34.56", Some("this-network-ipv4")),
            ("192.0.0.192", Some("ietf-protocol-ipv4")),
            ("198.19.4.5", Some("benchmarking-ipv4")),
            ("168.63.129.16", Some("cloud-metadata-ipv4")),
            ("[::]:8080", Some("unspecified-ipv6")),
            ("::", Some("unspecified-ipv6")),
            ("http://[::]/", Some("unspecified-ipv6")),
            ("64:ff9b::10.0.0.1", Some("nat64-private-ipv4")),
            ("64:ff9b::a00:1", Some("nat64-private-ipv4")),
            ("[64:ff9b::c0a8:101]", Some("nat64-private-ipv4")),
            ("https://[64:ff9b::7f00:1]/x", Some("nat64-private-ipv4")),
            ("64:ff9b:1::1", Some("nat64-local-use")),
            ("2002:a00:1::1", Some("6to4-private-ipv4")),
            ("2002:c0a8:101::", Some("6to4-private-ipv4")),
            ("::ffff:0.0.0.0", Some("this-network-ipv4")),
            ("::ffff:0:0", Some("ipv4-embedded-private")),
            ("::ffff:c612:1", Some("ipv4-embedded-private")),
            ("::ffff:0:10.0.0.1", Some("ipv4-embedded-private")),
            ("fec0::1", Some("site-local-ipv6")),
            ("api.localtest.me", Some("loopback-dns-name")),
            ("http://LVH.ME:3000/", Some("loopback-dns-name")),
            ("10-0-0-1.nip.io", Some("wildcard-ip-dns-name")),
            // Near misses.
            ("v0.1.2.3", None),
            ("1.0.0.0.1", None),
            ("0.1.2", None),
            ("8.8.8.8", None),
            ("198.20.0.1", None),
            ("192.0.2.1", None),
            ("64:ff9b::808:808", None),
            ("2002:808:808::1", None),
            ("2001:db8::1", None),
            ("clippy::needless_borrow", None),
            ("bind:0::", Some("unspecified-ipv6")),
            ("0::.run-review.default", Some("unspecified-ipv6")),
            ("ff:0::", None),
            ("x:64:ff9b::a00:1", Some("nat64-private-ipv4")),
            ("cluster:dup-17", None),
            ("2026-01-15T10:00:00.123Z", None),
            (
                "workflow.attempt:7cd3863d8426b22d483336d35d0e94139e5c7288865a96ea469b3c644859efd2",
                None,
            ),
            ("evil-lvh.me", None),
            ("lvh.me.example.com", None),
            ("https://github.com/openclaw/clawsweeper", None),
        ];
        for (text, want) in cases {
            assert_eq!(family(text), want, "{text:?}");
        }
    }

    /// The host after any `://` is read as an `http` host, whatever the scheme: the forms that
    /// machine text cannot hold (brackets, userinfo the reference already refuses, non-ASCII
    /// names) are here; the others are in testdata/privacy/strict-rejected.jsonl.
    #[test]
    fn hosts_behind_any_scheme() {
        let cases = [
            // Bracketed IPv6, mapped, translated, NAT64 and 6to4 forms.
            ("gopher://[64:ff9b::7f00:1]:70/", Some("nat64-private-ipv4")),
            ("redis://[64:ff9b::a00:1]:6379", Some("nat64-private-ipv4")),
            ("ldap://[::ffff:0:7f00:1]/", Some("ipv4-embedded-private")),
            (
                "mongodb://[::ffff:a9fe:a9fe]/",
                Some("ipv4-embedded-private"),
            ),
            ("smb://[2002:c0a8:101::1]/share", Some("6to4-private-ipv4")),
            ("dict://[::]/", Some("unspecified-ipv6")),
            ("x-custom://[fec0::1]/", Some("site-local-ipv6")),
            // Userinfo before the host, and a port that does not parse.
            ("gopher://user@127.1:70/", Some("loopback-ipv4")),
            ("redis://:secret@0x7f.1:6379/", Some("loopback-ipv4")),
            ("mongodb://a@b@2130706433/", Some("loopback-ipv4")),
            ("redis://10.1:99999/", Some("private-ipv4")),
            ("ws://198.18.1:99999/", Some("benchmarking-ipv4")),
            // Backslashes and extra slashes, as an http URL reads them.
            ("gopher://\\127.1\\x", Some("loopback-ipv4")),
            ("ldap:////0x7f.1/", Some("loopback-ipv4")),
            // Names are mapped (full-width letters, an ideographic full stop) as for http.
            (
                "gopher://\u{ff4c}\u{ff56}\u{ff48}.\u{ff4d}\u{ff45}/",
                Some("loopback-dns-name"),
            ),
            (
                "redis://10-0-0-1.nip\u{3002}io/",
                Some("wildcard-ip-dns-name"),
            ),
            // The reference's ranges count only as a URL's host: in running text the reference
            // finds them itself, and other rules keep their precedence.
            ("64:ff9b::10.0.0.1", Some("nat64-private-ipv4")),
            ("10.0.0.1", None),
            // Near misses: public hosts behind the same schemes.
            ("gopher://[2606:4700:4700::1111]/", None),
            ("redis://user@8.8/", None),
            ("smb://134744072/", None),
            ("ldap://0x7e.1/", None),
            ("mongodb://db.example.com:27017/", None),
            ("dict://dict.org/", None),
            ("gopher://", None),
            ("gopher://:70/", None),
        ];
        for (text, want) in cases {
            assert_eq!(family(text), want, "{text:?}");
        }
    }

    #[test]
    fn walker_names_paths_and_never_the_value() {
        let value = crate::canonical::parse(
            r#"{"a":{"b":["x","glpat-ABCDEFGHIJKLMNOPQRST"]},"c d":"http://0.0.0.0/","e":"ok"}"#,
        )
        .unwrap();
        let found = scan(&value);
        assert_eq!(
            found
                .iter()
                .map(|f| (f.path.as_str(), f.family, f.rule))
                .collect::<Vec<_>>(),
            [
                ("$.a.b[1]", "gitlab-token", "gitleaks:gitlab-pat"),
                ("$[\"c d\"]", "this-network-ipv4", "iana:0.0.0.0/8"),
            ]
        );
        assert_eq!(first(&value).as_ref(), found.first());
        assert_eq!(
            found[0].to_string(),
            "$.a.b[1] matches gitlab-token (gitleaks:gitlab-pat)"
        );
        let keyed = crate::canonical::parse(
            r#"{"m":{"AIzaSyA1234567890abcdefghijklmnopqrstuv":{"glpat-ABCDEFGHIJKLMNOPQRST":1}}}"#,
        )
        .unwrap();
        let found = scan(&keyed);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].to_string(),
            "a key of $.m matches google-api-key (gitleaks:gcp-api-key)"
        );
        let line = crate::canonical::to_canonical_unchecked(&keyed);
        assert_eq!(Profile::Reference.check_line(&line), Ok(()));
        assert_eq!(Profile::Strict.check_line(&line), Err(found[0].clone()));
        assert!(Profile::Strict.check_text("::", "component").is_err());
        assert_eq!(Profile::Reference.check_text("::", "component"), Ok(()));
    }

    /// The walk of a line and the walk of its tree agree: same findings, same paths, same
    /// order, and the same first hit; escaped keys and strings, numbers beyond 64-bit integers
    /// (handed over by `serde_json` as a one-member map) and an ordinary member under that map's
    /// key included.
    #[test]
    fn the_walk_of_a_line_is_the_walk_of_its_tree() {
        use proptest::prelude::*;
        assert!(
            scan_text(NUMBER_TOKEN).is_none(),
            "the walk of a line assumes so"
        );
        let texts = [
            "ok",
            "glpat-ABCDEFGHIJKLMNOPQRST",
            "http://0.0.0.0/",
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "a\"b\\c\n",
            "c d",
            "é😀",
            NUMBER_TOKEN,
            "x.glpat-ABCDEFGHIJKLMNOPQRST\u{1}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop::sample::select(vec![0.5, 1e300, -7.0, 18_446_744_073_709_551_616.0, 3.0])
                .prop_map(Value::Number),
            prop::sample::select(texts.to_vec()).prop_map(Value::str),
        ];
        let tree = leaf.prop_recursive(4, 40, 5, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(texts.to_vec()).prop_map(str::to_owned),
                    inner,
                    0..5,
                )
                .prop_map(|m| Value::Object(m.into())),
            ]
        });
        let mut runner =
            proptest::test_runner::TestRunner::new(crate::tests::prop_support::config(512));
        runner
            .run(&tree, |value| {
                let text = crate::canonical::to_canonical_unchecked(&value);
                let tree = crate::canonical::parse(&text).unwrap();
                prop_assert_eq!(scan_line(&text), scan(&tree), "{}", text);
                prop_assert_eq!(first_in_line(&text), first(&tree), "{}", text);
                prop_assert_eq!(refuses_line(&text), first(&tree).is_some(), "{}", text);
                Ok(())
            })
            .unwrap();
        // The walks name a path through every kind of step.
        let text =
            r#"{"a":{"b":["x","glpat-ABCDEFGHIJKLMNOPQRST"]},"c d":"http://0.0.0.0/","e":0.5}"#;
        let found = scan_line(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[1].path, "$[\"c d\"]");
    }

    /// A text that is not one JSON value is refused, whatever it holds: a cut, trailing bytes,
    /// a second value, bare text. A repeated key is walked in each member, so its hit is seen.
    #[test]
    fn a_line_that_is_not_one_json_value_is_refused() {
        let clean = r#"{"a":["x",1],"b":{"c":"ok"}}"#;
        assert!(!refuses_line(clean));
        assert!(
            !refuses_line(&format!("{clean}\n")),
            "JSON's own whitespace is JSON"
        );
        for text in [
            &clean[..clean.len() - 1],
            &format!("{clean}x"),
            &format!("{clean}{clean}"),
            "",
            "ok",
            "{\"a\":}",
        ] {
            assert!(refuses_line(text), "{text:?}");
        }
        assert!(refuses_line(
            r#"{"a":"glpat-ABCDEFGHIJKLMNOPQRST","a":"ok"}"#
        ));
        assert!(refuses_line(
            r#"{"a":"ok","a":"glpat-ABCDEFGHIJKLMNOPQRST"}"#
        ));
    }
}
