//! The strict table ([`RULES`]): each family, the public rule it comes from and its matcher,
//! with the address predicates of the host rules; and the rules a caller applies itself
//! ([`CallerRule`]).

use std::net::{Ipv4Addr, Ipv6Addr};

/// How a [`Rule`] recognises its family in one text.
#[derive(Clone, Copy, Debug)]
pub enum Matcher {
    /// A `regex` pattern that may match anywhere in the text. Three markers stand for token
    /// boundaries (the `regex` crate has no look-around): `<L>` is the start of the text or a
    /// character other than `[0-9A-Za-z]` before the token, `<R>` the end of the text or such a
    /// character after it, and `<R_>` the end or a character other than `[0-9A-Za-z_-]` (for
    /// tokens whose alphabet has `_` and `-`).
    Pattern(&'static str),
    /// A predicate on every IPv4 address in the text: dotted quads (`\b(?:\d{1,3}\.){3}\d{1,3}\b`,
    /// as the reference finds them) and the IPv4 hosts of URLs of any scheme, parsed as WHATWG
    /// parses an `http` host (so `http://0.0`, `http://0x0` and `gopher://0x7f.1` count too).
    Ipv4(fn(Ipv4Addr) -> bool),
    /// A predicate on the IPv4 hosts of URLs only, as [`Matcher::Ipv4`] finds them, not on
    /// dotted quads in running text: for the reference's own ranges, which its checks find in
    /// dotted quads and in special-scheme URLs but not behind other schemes.
    UrlIpv4(fn(Ipv4Addr) -> bool),
    /// A predicate on every IPv6 address in the text: maximal runs of `[0-9A-Fa-f:.]` with `::`
    /// or two colons that are not part of a longer word (so `clippy::x` is not a candidate), and
    /// the IPv6 hosts of URLs of any scheme.
    Ipv6(fn(Ipv6Addr) -> bool),
}

/// One entry of the strict table.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// What is recognised, in kebab case (`gitlab-token`, `nat64-private-ipv4`); several rules
    /// may share a family.
    pub family: &'static str,
    /// The public rule the entry comes from, as `<source>:<rule id>` (see the module docs).
    pub id: &'static str,
    /// Lowercase strings, one of which (compared case-insensitively) every match of a
    /// [`Matcher::Pattern`] contains, as gitleaks' `keywords`: a text with none of the table's
    /// keywords skips those patterns. Empty for a pattern without such a string (it then runs
    /// on every text) and for host rules.
    pub keywords: &'static [&'static str],
    /// How the family is recognised.
    pub matcher: Matcher,
}

const fn pattern(
    family: &'static str,
    id: &'static str,
    keywords: &'static [&'static str],
    source: &'static str,
) -> Rule {
    Rule {
        family,
        id,
        keywords,
        matcher: Matcher::Pattern(source),
    }
}

const fn ipv4(family: &'static str, id: &'static str, test: fn(Ipv4Addr) -> bool) -> Rule {
    Rule {
        family,
        id,
        keywords: &[],
        matcher: Matcher::Ipv4(test),
    }
}

const fn url_ipv4(family: &'static str, id: &'static str, test: fn(Ipv4Addr) -> bool) -> Rule {
    Rule {
        family,
        id,
        keywords: &[],
        matcher: Matcher::UrlIpv4(test),
    }
}

const fn ipv6(family: &'static str, id: &'static str, test: fn(Ipv6Addr) -> bool) -> Rule {
    Rule {
        family,
        id,
        keywords: &[],
        matcher: Matcher::Ipv6(test),
    }
}

/// The strict table: every family the strict profile refuses beyond the reference. Adding a
/// family is adding an entry. Lengths and alphabets follow the cited rule; boundaries are ours.
pub static RULES: &[Rule] = &[
    // Code hosting and CI.
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-pat",
        &["glpat-"],
        r"<L>glpat-[0-9A-Za-z_-]{20,}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-ptt",
        &["glptt-"],
        r"<L>glptt-[0-9a-f]{40}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-rrt",
        &["gr1348941"],
        r"<L>GR1348941[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-runner-authentication-token",
        &["glrt-"],
        r"<L>glrt-[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-deploy-token",
        &["gldt-"],
        r"<L>gldt-[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-cicd-job-token",
        &["glcbt-"],
        r"<L>glcbt-[0-9A-Za-z]{1,5}_[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-feed-token",
        &["glft-"],
        r"<L>glft-[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-incoming-mail-token",
        &["glimt-"],
        r"<L>glimt-[0-9A-Za-z_-]{25}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-kubernetes-agent-token",
        &["glagent-"],
        r"<L>glagent-[0-9A-Za-z_-]{50}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-oauth-app-secret",
        &["gloas-"],
        r"<L>gloas-[0-9A-Za-z_-]{64}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-scim-token",
        &["glsoat-"],
        r"<L>glsoat-[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "gitlab-token",
        "gitleaks:gitlab-feature-flag-client-token",
        &["glffct-"],
        r"<L>glffct-[0-9A-Za-z_-]{20}",
    ),
    pattern(
        "atlassian-token",
        "gitleaks:atlassian-api-token",
        &["atatt3"],
        r"<L>ATATT3[0-9A-Za-z_=-]{186}",
    ),
    pattern(
        "postman-token",
        "gitleaks:postman-api-token",
        &["pmak-"],
        r"<L>PMAK-[0-9A-Fa-f]{24}-[0-9A-Fa-f]{34}<R>",
    ),
    pattern(
        "sourcegraph-token",
        "gitleaks:sourcegraph-access-token",
        &["sgp_"],
        r"<L>sgp_(?:[0-9A-Fa-f]{16}_|local_)?[0-9A-Fa-f]{40}<R>",
    ),
    pattern(
        "harness-token",
        "gitleaks:harness-api-key",
        &["pat.", "sat."],
        r"<L>(?:pat|sat)\.[0-9A-Za-z_-]{22}\.[0-9A-Za-z]{24}\.[0-9A-Za-z]{20}<R>",
    ),
    pattern(
        "octopus-deploy-key",
        "gitleaks:octopus-deploy-api-key",
        &["api-"],
        r"<L>API-[0-9A-Z]{26}<R>",
    ),
    pattern(
        "readme-token",
        "gitleaks:readme-api-token",
        &["rdme_"],
        r"<L>rdme_[0-9a-z]{70}<R>",
    ),
    pattern(
        "linear-token",
        "gitleaks:linear-api-key",
        &["lin_api_"],
        r"<L>lin_api_[0-9A-Za-z]{40}<R>",
    ),
    pattern(
        "notion-token",
        "gitleaks:notion-api-token",
        &["ntn_"],
        r"<L>ntn_[0-9]{11}[0-9A-Za-z]{35}<R>",
    ),
    pattern(
        "frameio-token",
        "gitleaks:frameio-api-token",
        &["fio-u-"],
        r"<L>fio-u-[0-9A-Za-z_=-]{64}",
    ),
    // Package registries.
    pattern(
        "pypi-token",
        "gitleaks:pypi-upload-token",
        &["pypi-ageichlwas5vcmc"],
        r"<L>pypi-AgEIcHlwaS5vcmc[0-9A-Za-z_-]{50,}",
    ),
    pattern(
        "rubygems-token",
        "gitleaks:rubygems-api-token",
        &["rubygems_"],
        r"<L>rubygems_[0-9a-f]{48}<R>",
    ),
    pattern(
        "clojars-token",
        "gitleaks:clojars-api-token",
        &["clojars_"],
        r"<L>(?i:CLOJARS)_[0-9a-z]{60}<R>",
    ),
    pattern(
        "artifactory-token",
        "gitleaks:artifactory-api-key",
        &["akcp"],
        r"<L>AKCp[0-9A-Za-z]{69}<R>",
    ),
    pattern(
        "artifactory-token",
        "gitleaks:artifactory-reference-token",
        &["cmvmd"],
        r"<L>cmVmd[0-9A-Za-z]{59}<R>",
    ),
    // Cloud providers and infrastructure.
    pattern(
        "aws-key-id",
        "gitleaks:aws-access-token",
        &[
            "a3t", "akia", "asia", "abia", "acca", "agpa", "aida", "aroa", "aipa", "anpa", "anva",
            "apka",
        ],
        r"<L>(?:A3T[0-9A-Z]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[0-9A-Z]{16}<R>",
    ),
    pattern(
        "google-api-key",
        "gitleaks:gcp-api-key",
        &["aiza"],
        r"<L>AIza[0-9A-Za-z_-]{35}<R_>",
    ),
    pattern(
        "alibaba-key-id",
        "gitleaks:alibaba-access-key-id",
        &["ltai"],
        r"<L>LTAI[0-9A-Za-z]{20}<R>",
    ),
    pattern(
        "digitalocean-token",
        "gitleaks:digitalocean-pat",
        &["dop_v1_"],
        r"<L>dop_v1_[0-9a-f]{64}<R>",
    ),
    pattern(
        "digitalocean-token",
        "gitleaks:digitalocean-access-token",
        &["doo_v1_"],
        r"<L>doo_v1_[0-9a-f]{64}<R>",
    ),
    pattern(
        "digitalocean-token",
        "gitleaks:digitalocean-refresh-token",
        &["dor_v1_"],
        r"<L>dor_v1_[0-9a-f]{64}<R>",
    ),
    pattern(
        "vault-token",
        "gitleaks:vault-service-token",
        &["hvs."],
        r"<L>hvs\.[0-9A-Za-z_-]{90,120}<R_>",
    ),
    pattern(
        "vault-token",
        "gitleaks:vault-batch-token",
        &["hvb."],
        r"<L>hvb\.[0-9A-Za-z_-]{138,300}<R_>",
    ),
    pattern(
        "terraform-token",
        "gitleaks:hashicorp-tf-api-token",
        &["atlasv1"],
        r"<L>[0-9A-Za-z]{14}\.atlasv1\.[0-9A-Za-z_=-]{60,70}",
    ),
    pattern(
        "databricks-token",
        "gitleaks:databricks-api-token",
        &["dapi"],
        r"<L>dapi[0-9a-f]{32}(?:-[0-9])?<R>",
    ),
    pattern(
        "cloudflare-origin-ca-key",
        "gitleaks:cloudflare-origin-ca-key",
        &["v1.0-"],
        r"<L>v1\.0-[0-9a-f]{24}-[0-9a-f]{146}",
    ),
    pattern(
        "heroku-token",
        "gitleaks:heroku-api-key-v2",
        &["hrku-aa"],
        r"<L>HRKU-AA[0-9A-Za-z_-]{58}<R_>",
    ),
    pattern(
        "flyio-token",
        "gitleaks:flyio-access-token",
        &["fo1_", "fm1", "fm2_"],
        r"<L>(?:fo1_[0-9A-Za-z_-]{43}<R_>|fm1[ar]_[0-9A-Za-z+/]{100,}|fm2_[0-9A-Za-z+/]{100,})",
    ),
    pattern(
        "doppler-token",
        "gitleaks:doppler-api-token",
        &["dp.pt."],
        r"<L>dp\.pt\.[0-9A-Za-z]{43}",
    ),
    pattern(
        "pulumi-token",
        "gitleaks:pulumi-api-token",
        &["pul-"],
        r"<L>pul-[0-9a-f]{40}<R>",
    ),
    pattern(
        "planetscale-token",
        "gitleaks:planetscale-api-token",
        &["pscale_tkn_"],
        r"<L>pscale_tkn_[0-9A-Za-z_=.-]{32,64}",
    ),
    pattern(
        "planetscale-token",
        "gitleaks:planetscale-oauth-token",
        &["pscale_oauth_"],
        r"<L>pscale_oauth_[0-9A-Za-z_=.-]{32,64}",
    ),
    pattern(
        "planetscale-token",
        "gitleaks:planetscale-password",
        &["pscale_pw_"],
        r"<L>pscale_pw_[0-9A-Za-z_=.-]{32,64}",
    ),
    pattern(
        "scalingo-token",
        "gitleaks:scalingo-api-token",
        &["tk-us-"],
        r"<L>tk-us-[0-9A-Za-z_-]{48}<R_>",
    ),
    pattern(
        "dynatrace-token",
        "gitleaks:dynatrace-api-token",
        &["dt0c01."],
        r"<L>dt0c01\.[0-9A-Za-z]{24}\.[0-9A-Za-z]{64}",
    ),
    pattern(
        "grafana-token",
        "gitleaks:grafana-cloud-api-token",
        &["glc_"],
        r"<L>glc_[0-9A-Za-z+/]{32,400}",
    ),
    pattern(
        "grafana-token",
        "gitleaks:grafana-service-account-token",
        &["glsa_"],
        r"<L>glsa_[0-9A-Za-z]{32}_[0-9A-Fa-f]{8}<R>",
    ),
    pattern(
        "grafana-token",
        "gitleaks:grafana-api-key",
        &["eyjrijoi"],
        r"<L>eyJrIjoi[0-9A-Za-z]{70,400}",
    ),
    pattern(
        "new-relic-key",
        "gitleaks:new-relic-user-api-key",
        &["nrak-"],
        r"<L>NRAK-[0-9A-Za-z]{27}<R>",
    ),
    pattern(
        "new-relic-key",
        "gitleaks:new-relic-browser-api-token",
        &["nrjs-"],
        r"<L>NRJS-[0-9a-f]{19}<R>",
    ),
    pattern(
        "new-relic-key",
        "gitleaks:new-relic-insert-key",
        &["nrii-"],
        r"<L>NRII-[0-9A-Za-z-]{32}<R>",
    ),
    pattern(
        "sentry-token",
        "gitleaks:sentry-user-token",
        &["sntryu_"],
        r"<L>sntryu_[0-9a-f]{64}<R>",
    ),
    pattern(
        "sentry-token",
        "gitleaks:sentry-org-token",
        &["sntrys_"],
        r"<L>sntrys_eyJpYXQiO[0-9A-Za-z+/=_]{20,}",
    ),
    pattern(
        "infracost-token",
        "gitleaks:infracost-api-token",
        &["ico-"],
        r"<L>ico-[0-9A-Za-z]{32}<R>",
    ),
    pattern(
        "prefect-token",
        "gitleaks:prefect-api-token",
        &["pnu_"],
        r"<L>pnu_[0-9A-Za-z]{36}<R>",
    ),
    pattern(
        "settlemint-token",
        "gitleaks:settlemint-personal-access-token",
        &["sm_pat_"],
        r"<L>sm_pat_[0-9A-Za-z]{16}<R>",
    ),
    pattern(
        "settlemint-token",
        "gitleaks:settlemint-application-access-token",
        &["sm_aat_"],
        r"<L>sm_aat_[0-9A-Za-z]{16}<R>",
    ),
    pattern(
        "settlemint-token",
        "gitleaks:settlemint-service-access-token",
        &["sm_sat_"],
        r"<L>sm_sat_[0-9A-Za-z]{16}<R>",
    ),
    pattern(
        "onepassword-secret-key",
        "gitleaks:1password-secret-key",
        &["a3-"],
        r"<L>A3-[0-9A-Z]{6}-(?:[0-9A-Z]{11}|[0-9A-Z]{6}-[0-9A-Z]{5})-[0-9A-Z]{5}-[0-9A-Z]{5}-[0-9A-Z]{5}<R>",
    ),
    pattern(
        "age-secret-key",
        "gitleaks:age-secret-key",
        &["age-secret-key-1"],
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
    ),
    pattern(
        "maxmind-license-key",
        "gitleaks:maxmind-license-key",
        &["_mmk"],
        r"<L>[0-9A-Za-z]{6}_[0-9A-Za-z]{29}_mmk<R>",
    ),
    pattern(
        "adobe-client-secret",
        "gitleaks:adobe-client-secret",
        &["p8e-"],
        r"<L>p8e-[0-9A-Za-z]{32}<R>",
    ),
    // Payments and commerce.
    pattern(
        "stripe-key",
        "gitleaks:stripe-access-token",
        &[
            "sk_test_", "sk_live_", "sk_prod_", "rk_test_", "rk_live_", "rk_prod_",
        ],
        r"<L>(?:sk|rk)_(?:test|live|prod)_[0-9A-Za-z]{10,99}<R>",
    ),
    pattern(
        "square-token",
        "gitleaks:square-access-token",
        &["eaaa", "sq0atp-"],
        r"<L>(?:EAAA|sq0atp-)[0-9A-Za-z_-]{22,60}<R_>",
    ),
    pattern(
        "square-token",
        "detect-secrets:SquareOAuthDetector",
        &["sq0csp-"],
        r"<L>sq0csp-[0-9A-Za-z_-]{43}<R_>",
    ),
    pattern(
        "shopify-token",
        "gitleaks:shopify-access-token",
        &["shpat_"],
        r"<L>shpat_[0-9A-Fa-f]{32}<R>",
    ),
    pattern(
        "shopify-token",
        "gitleaks:shopify-custom-access-token",
        &["shpca_"],
        r"<L>shpca_[0-9A-Fa-f]{32}<R>",
    ),
    pattern(
        "shopify-token",
        "gitleaks:shopify-private-app-access-token",
        &["shppa_"],
        r"<L>shppa_[0-9A-Fa-f]{32}<R>",
    ),
    pattern(
        "shopify-token",
        "gitleaks:shopify-shared-secret",
        &["shpss_"],
        r"<L>shpss_[0-9A-Fa-f]{32}<R>",
    ),
    pattern(
        "shippo-token",
        "gitleaks:shippo-api-token",
        &["shippo_"],
        r"<L>shippo_(?:live|test)_[0-9A-Fa-f]{40}<R>",
    ),
    pattern(
        "duffel-token",
        "gitleaks:duffel-api-token",
        &["duffel_"],
        r"<L>duffel_(?:test|live)_[0-9A-Za-z_=-]{43}",
    ),
    pattern(
        "easypost-token",
        "gitleaks:easypost-api-token",
        &["ezak"],
        r"<L>EZAK[0-9A-Za-z]{54}<R>",
    ),
    pattern(
        "easypost-token",
        "gitleaks:easypost-test-api-token",
        &["eztk"],
        r"<L>EZTK[0-9A-Za-z]{54}<R>",
    ),
    pattern(
        "facebook-token",
        "gitleaks:facebook-page-access-token",
        &["eaam", "eaac"],
        r"<L>EAA[MC][0-9A-Za-z]{100,}",
    ),
    // AI services.
    pattern(
        "huggingface-token",
        "gitleaks:huggingface-access-token",
        &["hf_"],
        r"<L>hf_[A-Za-z]{34}<R>",
    ),
    pattern(
        "huggingface-token",
        "gitleaks:huggingface-organization-api-token",
        &["api_org_"],
        r"<L>api_org_[A-Za-z]{34}<R>",
    ),
    pattern(
        "perplexity-key",
        "gitleaks:perplexity-api-key",
        &["pplx-"],
        r"<L>pplx-[0-9A-Za-z]{48}<R>",
    ),
    // Messaging and e-mail.
    pattern(
        "slack-app-token",
        "gitleaks:slack-app-token",
        &["xapp-"],
        r"<L>(?i:xapp)-[0-9]-[0-9A-Za-z]+-[0-9]+-[0-9A-Za-z]+",
    ),
    pattern(
        "slack-webhook",
        "gitleaks:slack-webhook-url",
        &["hooks.slack.com"],
        r"(?i:hooks\.slack\.com)/(?:services|workflows|triggers)/[0-9A-Za-z+/]{43,56}",
    ),
    pattern(
        "discord-webhook",
        "trufflehog:DiscordWebhook",
        &["discord"],
        r"(?i:discord(?:app)?\.com)/api/(?:v[0-9]+/)?webhooks/[0-9]{17,20}/[0-9A-Za-z_-]{60,68}",
    ),
    pattern(
        "discord-bot-token",
        "detect-secrets:DiscordBotTokenDetector",
        &[],
        r"<L>[MNO][0-9A-Za-z_-]{23}\.[0-9A-Za-z_-]{6}\.[0-9A-Za-z_-]{27}",
    ),
    pattern(
        "telegram-bot-token",
        "gitleaks:telegram-bot-api-token",
        &[":a"],
        r"<L>[0-9]{5,16}:A[0-9A-Za-z_-]{34}<R_>",
    ),
    pattern(
        "twilio-key",
        "gitleaks:twilio-api-key",
        &["sk"],
        r"<L>SK[0-9A-Fa-f]{32}<R>",
    ),
    pattern(
        "sendgrid-key",
        "gitleaks:sendgrid-api-token",
        &["sg."],
        r"<L>SG\.[0-9A-Za-z=_.-]{66}(?:$|[^0-9A-Za-z=_.-])",
    ),
    pattern(
        "sendinblue-key",
        "gitleaks:sendinblue-api-token",
        &["xkeysib-"],
        r"<L>xkeysib-[0-9a-f]{64}-[0-9A-Za-z]{16}<R>",
    ),
    pattern(
        "mailchimp-key",
        "detect-secrets:MailchimpDetector",
        &["-us"],
        r"<L>[0-9a-z]{32}-us[0-9]{1,2}<R>",
    ),
    // Tokens of any issuer.
    pattern(
        "unsigned-jwt",
        "gitleaks:jwt",
        &["eyj"],
        r"(?:^|[^0-9A-Za-z_-])eyJ[0-9A-Za-z_-]{7,}\.(?:eyJ|eyA|e30)[0-9A-Za-z_-]*\.",
    ),
    pattern(
        "base64-jwt",
        "gitleaks:jwt-base64",
        &["zxlk"],
        r"<L>ZXlK(?:aGJHY2lPaU|MGVYQWlPaUp|amRIa2lPaU|cmFXUWlP)[0-9A-Za-z+/_-]{40,}",
    ),
    pattern(
        "private-key",
        "gitleaks:private-key",
        &["private key"],
        r"BEGIN[ 0-9A-Z_-]{0,100}PRIVATE KEY",
    ),
    // Hosts.
    pattern(
        "loopback-dns-name",
        "ssrf:loopback-dns-name",
        &["localtest.me", "lvh.me", "vcap.me", "localhost.direct"],
        r"(?i)(?:^|[^0-9a-z.-])(?:[0-9a-z-]+\.)*(?:localtest\.me|lvh\.me|vcap\.me|localhost\.direct)\.?(?:$|[^0-9a-z.-])",
    ),
    pattern(
        "wildcard-ip-dns-name",
        "ssrf:wildcard-ip-dns-name",
        &["nip.io", "sslip.io", "xip.io"],
        r"(?i)(?:^|[^0-9a-z.-])(?:[0-9a-z-]+\.)*(?:nip\.io|sslip\.io|xip\.io)\.?(?:$|[^0-9a-z.-])",
    ),
    ipv4("this-network-ipv4", "iana:0.0.0.0/8", is_this_network),
    ipv4("ietf-protocol-ipv4", "iana:192.0.0.0/24", is_ietf_protocol),
    ipv4("benchmarking-ipv4", "iana:198.18.0.0/15", is_benchmarking),
    ipv4(
        "cloud-metadata-ipv4",
        "azure:wireserver-168.63.129.16",
        is_azure_wireserver,
    ),
    // The reference's own private ranges: it finds them in dotted quads and in the hosts of
    // special-scheme URLs, but not behind other schemes (`gopher://127.1`, `redis://0x7f.1`),
    // whose hosts WHATWG leaves opaque.
    url_ipv4("loopback-ipv4", "iana:127.0.0.0/8", is_loopback_v4),
    url_ipv4("private-ipv4", "iana:10.0.0.0/8", is_private_10),
    url_ipv4("private-ipv4", "iana:172.16.0.0/12", is_private_172),
    url_ipv4("private-ipv4", "iana:192.168.0.0/16", is_private_192),
    url_ipv4(
        "shared-address-ipv4",
        "iana:100.64.0.0/10",
        is_shared_address,
    ),
    url_ipv4("link-local-ipv4", "iana:169.254.0.0/16", is_link_local_v4),
    ipv6("unspecified-ipv6", "iana:::/128", is_unspecified),
    ipv6("nat64-private-ipv4", "iana:64:ff9b::/96", is_nat64_private),
    ipv6("nat64-local-use", "iana:64:ff9b:1::/48", is_nat64_local_use),
    ipv6("6to4-private-ipv4", "iana:2002::/16", is_6to4_private),
    ipv6(
        "ipv4-embedded-private",
        "iana:::ffff:0:0/96",
        is_embedded_private,
    ),
    ipv6("site-local-ipv6", "iana:fec0::/10", is_site_local),
];

/// `0.0.0.0/8`, "this network": `0.0.0.0` reaches the local host on common stacks.
fn is_this_network(a: Ipv4Addr) -> bool {
    a.octets()[0] == 0
}

/// `192.0.0.0/24`, IETF protocol assignments (not globally reachable; includes cloud metadata
/// addresses such as `192.0.0.192`).
fn is_ietf_protocol(a: Ipv4Addr) -> bool {
    let [a, b, c, _] = a.octets();
    (a, b, c) == (192, 0, 0)
}

/// `198.18.0.0/15`, benchmarking networks (not globally reachable).
fn is_benchmarking(a: Ipv4Addr) -> bool {
    let [a, b, _, _] = a.octets();
    a == 198 && (b == 18 || b == 19)
}

/// `168.63.129.16`, Azure's platform (wire server and DNS) address, reachable only from inside
/// Azure and a common SSRF target.
fn is_azure_wireserver(a: Ipv4Addr) -> bool {
    a == Ipv4Addr::new(168, 63, 129, 16)
}

/// `127.0.0.0/8`, loopback.
fn is_loopback_v4(a: Ipv4Addr) -> bool {
    a.octets()[0] == 127
}

/// `10.0.0.0/8`, private-use (RFC 1918).
fn is_private_10(a: Ipv4Addr) -> bool {
    a.octets()[0] == 10
}

/// `172.16.0.0/12`, private-use (RFC 1918).
fn is_private_172(a: Ipv4Addr) -> bool {
    let [a, b, _, _] = a.octets();
    a == 172 && (16..=31).contains(&b)
}

/// `192.168.0.0/16`, private-use (RFC 1918).
fn is_private_192(a: Ipv4Addr) -> bool {
    let [a, b, _, _] = a.octets();
    a == 192 && b == 168
}

/// `100.64.0.0/10`, shared address space (RFC 6598, carrier-grade NAT).
fn is_shared_address(a: Ipv4Addr) -> bool {
    let [a, b, _, _] = a.octets();
    a == 100 && (64..=127).contains(&b)
}

/// `169.254.0.0/16`, link-local (cloud metadata services live here).
fn is_link_local_v4(a: Ipv4Addr) -> bool {
    let [a, b, _, _] = a.octets();
    a == 169 && b == 254
}

/// Private in the strict profile: an IPv4 rule of the table holds (the reference's `privateHost`
/// ranges are among them).
fn is_private_v4(a: Ipv4Addr) -> bool {
    RULES.iter().any(|r| match r.matcher {
        Matcher::Ipv4(test) | Matcher::UrlIpv4(test) => test(a),
        _ => false,
    })
}

/// The IPv4 address in the last 32 bits.
fn low_v4(a: Ipv6Addr) -> Ipv4Addr {
    let s = a.segments();
    Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8)
}

/// `::`, the unspecified address: like `0.0.0.0`, it reaches the local host on common stacks.
fn is_unspecified(a: Ipv6Addr) -> bool {
    a.is_unspecified()
}

/// `64:ff9b::/96` (RFC 6052 well-known NAT64 prefix) around a private IPv4 address: a NAT64
/// gateway translates it to that address.
fn is_nat64_private(a: Ipv6Addr) -> bool {
    a.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && is_private_v4(low_v4(a))
}

/// `64:ff9b:1::/48` (RFC 8215), the local-use NAT64 prefix: by definition inside a private
/// network.
fn is_nat64_local_use(a: Ipv6Addr) -> bool {
    a.segments()[..3] == [0x64, 0xff9b, 1]
}

/// `2002::/16` (RFC 3056 6to4) whose embedded IPv4 address (bits 16–47) is private.
fn is_6to4_private(a: Ipv6Addr) -> bool {
    let s = a.segments();
    s[0] == 0x2002
        && is_private_v4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ))
}

/// IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`) and IPv4-translated
/// (`::ffff:0:0:0/96`, RFC 2765) addresses of a private IPv4 address. The reference catches
/// the mapped and compatible forms of its own ranges; the translated form and the strict ranges
/// (for example `::ffff:0.0.0.0`) it lets through.
fn is_embedded_private(a: Ipv6Addr) -> bool {
    let s = a.segments();
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    let compatible = s[..6] == [0; 6];
    let translated = s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0;
    (mapped || compatible || translated) && is_private_v4(low_v4(a))
}

/// `fec0::/10`, the deprecated site-local prefix (RFC 3879), still routed inside some
/// networks; the reference accepts it.
fn is_site_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfec0
}

/// A strict-only rule outside [`RULES`]: not a shape of one text, but the reference's own scan
/// applied where the reference cannot see a value, by the caller that can
/// ([`PRODUCER_PART_RULE`]). Its refusals name its id like any other strict rule.
#[derive(Clone, Copy, Debug)]
pub struct CallerRule {
    /// As [`Rule::family`].
    pub family: &'static str,
    /// As [`Rule::id`]; the source `ledger:` marks a rule of this project.
    pub id: &'static str,
}

/// The reference's confidential-identifier scan on each producer part (workflow, component,
/// step, invocation) before the parts are joined into `<component>.<step>.<invocation>`: the
/// reference scans only the joined text, in which `localhost` or `x.home.` no longer matches
/// (`localhost.run-review.default`), so it stores them.
pub const PRODUCER_PART_RULE: CallerRule = CallerRule {
    family: "confidential-producer-part",
    id: "ledger:producer-part-confidential",
};

/// Whether `id` names a strict-only rule: one of [`RULES`] or [`PRODUCER_PART_RULE`]. A
/// refusal that names one is the strict profile's own; any other refusal is the reference's.
pub fn is_strict_rule_id(id: &str) -> bool {
    id == PRODUCER_PART_RULE.id || RULES.iter().any(|r| r.id == id)
}
