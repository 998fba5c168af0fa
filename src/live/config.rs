//! The live-projection configuration: the `CLAWSWEEPER_CRABFLEET_*` variables, checked in the
//! reference's order (ledger-runtime §9, "What the reference really does").
//!
//! The caller captures the environment ([`crate::writer::record::Environment`]); nothing here
//! reads it. The agent token is kept in a [`Token`], whose `Debug` and `Display` never show it.

use url::Url;

use crate::writer::record::Environment;

/// `CLAWSWEEPER_CRABFLEET_SESSION_ID`: the interactive session the events are posted to.
pub const SESSION_ID: &str = "CLAWSWEEPER_CRABFLEET_SESSION_ID";
/// `CLAWSWEEPER_CRABFLEET_AGENT_TOKEN`: the bearer token (a secret: never printed).
pub const AGENT_TOKEN: &str = "CLAWSWEEPER_CRABFLEET_AGENT_TOKEN";
/// `CLAWSWEEPER_CRABFLEET_WORK_STATE_URL`: the session's registered work-state URL; its base
/// must equal [`URL`]'s.
pub const WORK_STATE_URL: &str = "CLAWSWEEPER_CRABFLEET_WORK_STATE_URL";
/// `CLAWSWEEPER_CRABFLEET_URL`: the CrabFleet base URL (default [`DEFAULT_URL`] when unset).
pub const URL: &str = "CLAWSWEEPER_CRABFLEET_URL";
/// `CLAWSWEEPER_CRABFLEET_TIMEOUT_MS`: per-request timeout in milliseconds, an integer in
/// 1..=60000 parsed as JavaScript's `Number` (`"1e3"` is 1000), default [`DEFAULT_TIMEOUT_MS`].
pub const TIMEOUT_MS: &str = "CLAWSWEEPER_CRABFLEET_TIMEOUT_MS";
/// The base URL used when [`URL`] is unset (an empty value is an error, not the default).
pub const DEFAULT_URL: &str = "https://crabfleet.openclaw.ai";
/// The per-request timeout when [`TIMEOUT_MS`] is unset, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// The largest accepted timeout, in milliseconds (for requests and for the flush deadline).
pub const MAX_TIMEOUT_MS: u64 = 60_000;

/// The agent token: a secret. Its `Debug`/`Display` print `<redacted>`; only
/// [`Token::bearer`] reveals it, to build the `authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The `authorization` header value, `Bearer <token>`.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A valid configuration: where and how to post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `<base>/api/agent/interactive-sessions/<encodeURIComponent(session)>/events`.
    pub endpoint: String,
    /// The bearer token.
    pub token: Token,
    /// Per-request timeout, milliseconds (1..=60000); also how long a request may wait queued.
    pub timeout_ms: u64,
}

/// Why a configuration is invalid. The messages are the reference's; none holds a value of a
/// variable (the token in particular). The ledger records only that the configuration was
/// invalid (a redacted `projection.failed` event), never which rule failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Exactly one of [`SESSION_ID`] and [`AGENT_TOKEN`] is set (after trimming).
    #[error("CrabFleet projection requires both session ID and agent token")]
    PartialCredentials,
    /// [`WORK_STATE_URL`] is unset or blank.
    #[error("CrabFleet projection requires registered work-state provenance")]
    MissingWorkState,
    /// [`WORK_STATE_URL`] does not parse, is not HTTPS, or has userinfo, a query or a fragment.
    #[error("CLAWSWEEPER_CRABFLEET_WORK_STATE_URL must be a credential-free HTTPS URL")]
    WorkStateUrl,
    /// [`WORK_STATE_URL`]'s path does not end with
    /// `/api/agent/interactive-sessions/<encodeURIComponent(session)>/work-state`.
    #[error("CrabFleet work-state URL does not match the registered session")]
    WorkStateSession,
    /// [`URL`] does not parse, is not HTTPS, or has userinfo, a query or a fragment.
    #[error("CLAWSWEEPER_CRABFLEET_URL must be a credential-free HTTPS URL")]
    BaseUrl,
    /// The two normalised bases (origin plus path without trailing slashes) differ.
    #[error("CrabFleet projection base does not match registered session provenance")]
    BaseMismatch,
    /// [`TIMEOUT_MS`] is not an integer in 1..=60000.
    #[error("CLAWSWEEPER_CRABFLEET_TIMEOUT_MS must be an integer between 1 and 60000")]
    Timeout,
}

/// The configuration verdict for one environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Neither session nor token set (after trimming): no projection, nothing else read.
    Disabled,
    /// A configuration error: each recorded event gets a `projection.failed` event.
    Invalid(ConfigError),
    /// Post each recorded event.
    Valid(Config),
}

/// JavaScript's `encodeURIComponent`: everything but `A-Z a-z 0-9 - _ . ! ~ * ' ( )` is
/// percent-encoded as UTF-8.
pub fn encode_uri_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An HTTPS URL without userinfo, query or fragment (an empty `?` or `#` passes, as in WHATWG
/// where they leave `search` and `hash` empty).
fn credential_free_https(text: &str) -> Option<Url> {
    let url = Url::parse(text).ok()?;
    let ok = url.scheme() == "https"
        && url.username().is_empty()
        && url.password().is_none()
        && url.query().is_none_or(str::is_empty)
        && url.fragment().is_none_or(str::is_empty);
    ok.then_some(url)
}

/// `origin + pathname` without trailing slashes.
fn base_of(url: &Url, path: &str) -> String {
    format!(
        "{}{}",
        url.origin().ascii_serialization(),
        path.trim_end_matches('/')
    )
}

/// The verdict for `env`, in the reference's check order: enablement (trimmed session or token
/// non-empty), both present, the work-state URL (present, HTTPS and credential-free, then its
/// session suffix), the base URL (HTTPS and credential-free), the bases equal, the timeout.
pub fn verdict(env: &Environment) -> Verdict {
    match check(env) {
        Ok(Some(c)) => Verdict::Valid(c),
        Ok(None) => Verdict::Disabled,
        Err(e) => Verdict::Invalid(e),
    }
}

fn check(env: &Environment) -> Result<Option<Config>, ConfigError> {
    let get = |k: &str| env.get(k).map(String::as_str);
    let trimmed = |k: &str| crate::privacy::js_trim(get(k).unwrap_or(""));
    let session = trimmed(SESSION_ID);
    let token = trimmed(AGENT_TOKEN);
    if session.is_empty() && token.is_empty() {
        return Ok(None);
    }
    if session.is_empty() || token.is_empty() {
        return Err(ConfigError::PartialCredentials);
    }
    let work_state = trimmed(WORK_STATE_URL);
    if work_state.is_empty() {
        return Err(ConfigError::MissingWorkState);
    }
    let work_url = credential_free_https(work_state).ok_or(ConfigError::WorkStateUrl)?;
    let route = format!(
        "/api/agent/interactive-sessions/{}",
        encode_uri_component(session)
    );
    let suffix = format!("{route}/work-state");
    let work_path = work_url
        .path()
        .strip_suffix(&suffix)
        .ok_or(ConfigError::WorkStateSession)?;
    let work_base = base_of(&work_url, work_path);
    let base_text = get(URL).map(crate::privacy::js_trim).unwrap_or(DEFAULT_URL);
    let base_url = credential_free_https(base_text).ok_or(ConfigError::BaseUrl)?;
    let base = base_of(&base_url, base_url.path());
    if base != work_base {
        return Err(ConfigError::BaseMismatch);
    }
    let timeout_ms = match get(TIMEOUT_MS) {
        None => DEFAULT_TIMEOUT_MS,
        Some(t) => timeout_number(t).ok_or(ConfigError::Timeout)?,
    };
    Ok(Some(Config {
        endpoint: format!("{base}{route}/events"),
        token: Token(token.to_owned()),
        timeout_ms,
    }))
}

/// A millisecond count parsed as JavaScript's `Number`, when it is an integer in 1..=60000.
pub fn timeout_number(text: &str) -> Option<u64> {
    let n = crate::privacy::js_number(text);
    (n.fract() == 0.0 && (1.0..=MAX_TIMEOUT_MS as f64).contains(&n)).then_some(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    const WS: &str = "https://cf.example/api/agent/interactive-sessions/s-1/work-state";

    fn valid() -> Vec<(&'static str, &'static str)> {
        vec![
            (SESSION_ID, "s-1"),
            (AGENT_TOKEN, "tok-secret-123"),
            (WORK_STATE_URL, WS),
            (URL, "https://cf.example"),
        ]
    }

    fn with(over: &[(&'static str, &'static str)]) -> Verdict {
        let mut e = env(&valid());
        for (k, v) in over {
            e.insert((*k).to_owned(), (*v).to_owned());
        }
        verdict(&e)
    }

    #[test]
    fn disabled_valid_and_each_error() {
        assert_eq!(verdict(&env(&[])), Verdict::Disabled);
        assert_eq!(
            verdict(&env(&[(SESSION_ID, " "), (AGENT_TOKEN, "\t"), (URL, "x")])),
            Verdict::Disabled
        );
        let Verdict::Valid(c) = with(&[]) else {
            panic!("valid")
        };
        assert_eq!(
            c.endpoint,
            "https://cf.example/api/agent/interactive-sessions/s-1/events"
        );
        assert_eq!(c.timeout_ms, 10_000);
        use ConfigError as E;
        let cases: &[(&[(&str, &str)], E)] = &[
            (&[(SESSION_ID, "")], E::PartialCredentials),
            (&[(AGENT_TOKEN, "  ")], E::PartialCredentials),
            (&[(WORK_STATE_URL, "")], E::MissingWorkState),
            (
                &[(
                    WORK_STATE_URL,
                    "http://cf.example/api/agent/interactive-sessions/s-1/work-state",
                )],
                E::WorkStateUrl,
            ),
            (
                &[(
                    WORK_STATE_URL,
                    "https://u:p@cf.example/api/agent/interactive-sessions/s-1/work-state",
                )],
                E::WorkStateUrl,
            ),
            (
                &[(
                    WORK_STATE_URL,
                    "https://cf.example/api/agent/interactive-sessions/s-1/work-state?a=1",
                )],
                E::WorkStateUrl,
            ),
            (
                &[(
                    WORK_STATE_URL,
                    "https://cf.example/api/agent/interactive-sessions/s-1/work-state#f",
                )],
                E::WorkStateUrl,
            ),
            (&[(WORK_STATE_URL, "not a url")], E::WorkStateUrl),
            (
                &[(
                    WORK_STATE_URL,
                    "https://cf.example/api/agent/interactive-sessions/s-2/work-state",
                )],
                E::WorkStateSession,
            ),
            (&[(URL, "")], E::BaseUrl),
            (&[(URL, "http://cf.example")], E::BaseUrl),
            (&[(URL, "https://cf.example/other")], E::BaseMismatch),
            (&[(TIMEOUT_MS, "0")], E::Timeout),
            (&[(TIMEOUT_MS, "60001")], E::Timeout),
            (&[(TIMEOUT_MS, "1.5")], E::Timeout),
            (&[(TIMEOUT_MS, "abc")], E::Timeout),
            (&[(TIMEOUT_MS, "")], E::Timeout),
        ];
        for (over, want) in cases {
            assert_eq!(with(over), Verdict::Invalid(want.clone()), "{over:?}");
        }
        let mut e = env(&valid());
        e.remove(URL);
        assert_eq!(verdict(&e), Verdict::Invalid(E::BaseMismatch));
        assert!(matches!(with(&[(TIMEOUT_MS, "1e3")]), Verdict::Valid(c) if c.timeout_ms == 1000));
        assert!(matches!(
            with(&[(URL, "HTTPS://CF.example/")]),
            Verdict::Valid(_)
        ));
    }

    #[test]
    fn the_token_never_shows() {
        let v = with(&[]);
        let shown = format!("{v:?}");
        assert!(!shown.contains("tok-secret-123"), "{shown}");
        for e in [ConfigError::PartialCredentials, ConfigError::Timeout] {
            assert!(!e.to_string().contains("tok-secret"));
        }
    }

    #[test]
    fn encodes_like_javascript() {
        assert_eq!(encode_uri_component("sess 1/x"), "sess%201%2Fx");
        assert_eq!(
            encode_uri_component("a-b_c.d!e~f*g'h(i)j"),
            "a-b_c.d!e~f*g'h(i)j"
        );
        assert_eq!(encode_uri_component("é"), "%C3%A9");
    }
}
