//! Content-derived identities: repository normalization and slugs, event scopes
//! and keys, operation / attempt / idempotency ids, event ids, shard identities and their digests.
//!
//! Every id is a lowercase hex SHA-256 of canonical text; the exact text hashed is part of the
//! format, so each derivation names its shape.
//!
//! # Check order
//!
//! Each derivation checks its inputs in the reference's order and returns the first failure,
//! with the reference's message:
//!
//! 1. [`operation_id`]: the repository ([`normalize_repository`]: required, control
//!    characters, shape), then the operation as a scope ([`event_scope`]), then the identity as
//!    identity canonical JSON (the order in [`crate::canonical`]: limits, then lossy numbers and
//!    credential keys in one walk);
//! 2. [`attempt_id`]: the operation id ([`required_sha256`]), then the identity;
//! 3. [`idempotency_key`]: the identity;
//! 4. [`event_key`]: the scope, then the identity;
//! 5. [`event_id`]: the repository, then the event key ([`required_event_key`]): its text
//!    checks (required, control characters, at most 193 characters), its shape, then its scope;
//! 6. a scope ([`event_scope`]): required, control characters, at most 128 characters, the
//!    pattern `^[A-Za-z0-9][A-Za-z0-9_.+-]*$`, then the confidential scan.

use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::canonical::{self, Value};
use crate::privacy;

/// A lowercase 64-hex SHA-256 digest (event ids, semantic digests, replay digests, binding ids).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

impl Digest {
    /// SHA-256 of `bytes`.
    pub fn of(bytes: impl AsRef<[u8]>) -> Digest {
        Digest(hex::encode(Sha256::digest(bytes.as_ref())))
    }

    /// Accepts exactly `^[a-f0-9]{64}$` (no trimming, no case folding: stored form).
    pub fn parse(s: &str) -> Option<Digest> {
        is_hex64(s).then(|| Digest(s.to_owned()))
    }

    /// The 64 lowercase hex characters, as stored in records and paths.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 32 raw bytes (for compact in-memory keys).
    pub fn bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        hex::decode_to_slice(&self.0, &mut out).expect("a Digest holds 64 lowercase hex digits");
        out
    }

    /// The digest with these raw bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Digest {
        Digest(hex::encode(bytes))
    }

    /// The first `n` hex characters (12 for path digests).
    pub fn prefix(&self, n: usize) -> &str {
        &self.0[..n]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `^[a-f0-9]{64}$`.
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Errors of identity derivations; texts are the reference's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository is empty after JS trim.
    #[error("action event repository is required")]
    RepositoryRequired,
    /// The repository holds a UTF-16 unit at or below 0x1F, or 0x7F.
    #[error("action event repository contains control characters")]
    RepositoryControl,
    /// The repository (carried as given) is not `owner/name` in the reference's `requiredRepo`
    /// shape after lowercasing; pass the GitHub `owner/name` form, without a host or URL.
    #[error("invalid action event repository: {0}")]
    InvalidRepository(String),
    /// The event scope is empty after JS trim.
    #[error("action event scope is required")]
    ScopeRequired,
    /// The event scope holds a UTF-16 unit at or below 0x1F, or 0x7F.
    #[error("action event scope contains control characters")]
    ScopeControl,
    /// The event scope is longer than 128 UTF-16 code units.
    #[error("action event scope exceeds 128 characters")]
    ScopeTooLong,
    /// The event scope is not `^[A-Za-z0-9][A-Za-z0-9_.+-]*$` (no `/`, `:` or spaces).
    #[error("action event scope must be machine-readable text")]
    ScopeNotMachineText,
    /// The confidential-identifier scan flagged the scope (an e-mail address, IP address,
    /// token...); scopes are public, so choose a scope that names a kind of work instead.
    #[error("action event scope contains a confidential identifier")]
    ScopeConfidential,
    /// A stored event key is not `<scope>:<64 hex>` with a valid scope, as
    /// [`event_key`] writes it.
    #[error("action event key must be generated from a machine-readable scope and digest")]
    InvalidEventKey,
    /// A digest field is not exactly 64 lowercase hex characters ([`is_hex64`]).
    #[error("{label} must be a lowercase SHA-256 digest")]
    NotSha256 {
        /// The field as the reference names it in the message, e.g. `action event shard run attempt`.
        label: String,
    },
    /// A field that counts from 1 (run attempt, phase sequence) is not a safe integer ≥ 1.
    #[error("{label} must be a positive integer")]
    NotPositiveInteger {
        /// The field as the reference names it in the message, e.g. `action event shard run attempt`.
        label: String,
    },
    /// A date is not a real `YYYY-MM-DD` proleptic-Gregorian date with year ≥ 1.
    #[error("{label} must be an ISO calendar date")]
    NotCalendarDate {
        /// The field as the reference names it in the message, e.g. `action event shard run attempt`.
        label: String,
    },
    /// The identity value could not be written as canonical JSON for hashing (limits or a
    /// number canonical JSON refuses).
    #[error(transparent)]
    Canonical(#[from] canonical::Error),
    /// A text field of the identity failed a privacy text rule.
    #[error(transparent)]
    Field(#[from] privacy::Error),
}

fn has_control(s: &str) -> bool {
    s.encode_utf16().any(|u| u <= 31 || u == 127)
}

/// `requiredRepo`: JS trim, required, no control characters, lowercase, then
/// `^[a-z0-9_][a-z0-9_.-]*/[a-z0-9_][a-z0-9_.-]*$`.
pub fn normalize_repository(raw: &str) -> Result<String, Error> {
    let trimmed = privacy::js_trim(raw);
    if trimmed.is_empty() {
        return Err(Error::RepositoryRequired);
    }
    if has_control(trimmed) {
        return Err(Error::RepositoryControl);
    }
    let repo = trimmed.to_lowercase();
    if !is_repository_shape(&repo) {
        return Err(Error::InvalidRepository(raw.to_owned()));
    }
    Ok(repo)
}

/// Whether `raw` is a repository in the form [`normalize_repository`] returns (trimmed,
/// lowercase): `normalize_repository(raw) == Ok(raw)`, decided without a copy. The pattern's
/// characters hold no whitespace, control or uppercase character, so the shape alone decides.
pub fn is_stored_repository(raw: &str) -> bool {
    is_repository_shape(raw)
}

/// `^[a-z0-9_][a-z0-9_.-]*/[a-z0-9_][a-z0-9_.-]*$`.
fn is_repository_shape(repo: &str) -> bool {
    repo.split_once('/').is_some_and(|(owner, name)| {
        let part = |p: &str| {
            let b = p.as_bytes();
            !b.is_empty()
                && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit() || b[0] == b'_')
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_.-".contains(&c))
        };
        part(owner) && part(name)
    })
}

/// `slugForRepo`: every maximal run of characters outside `[A-Za-z0-9_.-]` becomes one `-`.
pub fn slug_for_repo(repo: &str) -> String {
    replace_runs(
        repo,
        |c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'),
        "-",
    )
}

/// `s` with every maximal run of characters that `keep` refuses replaced by one `with`: the
/// reference's slug rule, which paths, repository slugs and machine identifiers share.
pub fn replace_runs(s: &str, keep: impl Fn(char) -> bool, with: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_run = false;
    for c in s.chars() {
        if keep(c) {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push_str(with);
            in_run = true;
        }
    }
    out
}

/// `eventScope`: trimmed, ≤128 UTF-16 units, `^[A-Za-z0-9][A-Za-z0-9_.+-]*$`, and free of
/// confidential identifiers.
pub fn event_scope(raw: &str) -> Result<String, Error> {
    let s = privacy::js_trim(raw);
    if s.is_empty() {
        return Err(Error::ScopeRequired);
    }
    if has_control(s) {
        return Err(Error::ScopeControl);
    }
    if privacy::utf16_len(s) > 128 {
        return Err(Error::ScopeTooLong);
    }
    let b = s.as_bytes();
    let pattern = b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"_.+-".contains(&c));
    if !pattern {
        return Err(Error::ScopeNotMachineText);
    }
    if privacy::contains_confidential_identifier(s) {
        return Err(Error::ScopeConfidential);
    }
    Ok(s.to_owned())
}

/// `requiredSha256`: trim + lowercase, then `^[a-f0-9]{64}$`, else "`label` must be a lowercase
/// SHA-256 digest".
pub fn required_sha256(raw: &str, label: &str) -> Result<Digest, Error> {
    let s = privacy::js_trim(raw).to_lowercase();
    Digest::parse(&s).ok_or_else(|| Error::NotSha256 {
        label: label.to_owned(),
    })
}

fn identity_digest(value: &Value) -> Result<Digest, Error> {
    Ok(Digest::of(canonical::to_identity_canonical(value)?))
}

/// `actionOperationId`: sha256 of
/// `{"identity":<identity>,"operation":<scope>,"repository":<repo>}` in identity canonical form.
pub fn operation_id(repository: &str, operation: &str, identity: &Value) -> Result<Digest, Error> {
    let repository = normalize_repository(repository)?;
    let operation = event_scope(operation)?;
    identity_digest(&Value::object([
        ("identity", identity.clone()),
        ("operation", Value::String(operation)),
        ("repository", Value::String(repository)),
    ]))
}

/// `actionAttemptId`: sha256 of `{"identity":<identity>,"operation_id":<hex64>}`.
pub fn attempt_id(operation_id: &str, identity: &Value) -> Result<Digest, Error> {
    let op = required_sha256(operation_id, "action operation id")?;
    identity_digest(&Value::object([
        ("identity", identity.clone()),
        ("operation_id", Value::String(op.0)),
    ]))
}

/// `actionIdempotencyKey`: sha256 of the identity canonical form of `identity`.
pub fn idempotency_key(identity: &Value) -> Result<Digest, Error> {
    identity_digest(identity)
}

/// `actionEventKey`: `<scope>:<sha256(identity canonical JSON)>`.
pub fn event_key(scope: &str, identity: &Value) -> Result<String, Error> {
    let scope = event_scope(scope)?;
    Ok(format!("{scope}:{}", identity_digest(identity)?))
}

/// Longest event key, in UTF-16 code units: a 128-unit scope, `:` and 64 hex digits.
pub const MAX_EVENT_KEY_LEN: usize = 193;

/// `requiredEventKey`, its checks in the reference's order (the first failure is returned):
///
/// 1. the text checks of a bounded text ([`privacy::bounded_text`]), labelled
///    `action event key`: JS-trimmed non-empty (`is required`), no control character
///    (`contains control characters`), at most [`MAX_EVENT_KEY_LEN`] UTF-16 units
///    (`exceeds 193 characters`);
/// 2. the shape `^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}:[a-f0-9]{64}$`
///    ([`Error::InvalidEventKey`]);
/// 3. the scope before the first `:` passes [`event_scope`] (its confidential scan).
pub fn required_event_key(raw: &str) -> Result<String, Error> {
    let key = privacy::bounded_text(raw, "action event key", MAX_EVENT_KEY_LEN)?;
    let Some((scope, digest)) = key.split_once(':') else {
        return Err(Error::InvalidEventKey);
    };
    let sb = scope.as_bytes();
    let shape = !sb.is_empty()
        && sb.len() <= 128
        && sb[0].is_ascii_alphanumeric()
        && sb
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || b"_.+-".contains(&c))
        && is_hex64(digest);
    if !shape {
        return Err(Error::InvalidEventKey);
    }
    event_scope(scope)?;
    Ok(key)
}

/// `actionEventId`: sha256 of `<normalized repository>\n<event key>`.
pub fn event_id(repository: &str, event_key: &str) -> Result<Digest, Error> {
    let repository = normalize_repository(repository)?;
    let key = required_event_key(event_key)?;
    Ok(Digest::of(format!("{repository}\n{key}")))
}

/// `requiredPositiveInteger`: a safe integer ≥ 1.
pub fn positive_integer(value: &Value, label: &str) -> Result<i64, Error> {
    match value.as_safe_integer() {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(Error::NotPositiveInteger {
            label: label.to_owned(),
        }),
    }
}

/// `requiredCalendarDate`: trimmed `YYYY-MM-DD`, year ≥ 1, a real proleptic-Gregorian date.
pub fn calendar_date(raw: &str, label: &str) -> Result<String, Error> {
    let s = privacy::js_trim(raw);
    let err = || Error::NotCalendarDate {
        label: label.to_owned(),
    };
    crate::time::CalendarDate::parse(s)
        .map(|_| s.to_owned())
        .ok_or_else(err)
}

/// The identity of one producer run's shard set. The serialized form uses
/// camelCase keys: `job, partitionDate, producer, repository, runAttempt, runId, sha, workflow`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardIdentity {
    /// The subject repository, normalized `owner/name` (lowercase).
    pub repository: String,
    /// The commit the producer ran on (machine text, at most 256 UTF-16 units).
    pub sha: String,
    /// The events' `producer.component`.
    pub producer: String,
    /// The CI workflow name (machine text, at most 128 units).
    pub workflow: String,
    /// The CI job name (machine text, at most 128 units).
    pub job: String,
    /// The CI run id (machine text, at most 256 units; digits for GitHub Actions).
    pub run_id: String,
    /// The CI run attempt, from 1; a re-run is a new attempt and a new shard set.
    pub run_attempt: i64,
    /// The UTC calendar day the run belongs to, `YYYY-MM-DD`; it picks the shard path.
    pub partition_date: String,
}

impl ShardIdentity {
    /// Normalizes and validates every field (repository rule, machine text 256/128, positive
    /// run attempt, calendar date).
    pub fn normalized(&self) -> Result<ShardIdentity, Error> {
        Ok(ShardIdentity {
            repository: normalize_repository(&self.repository)?,
            sha: privacy::machine_text(&self.sha, "action event shard sha", 256)?,
            producer: privacy::machine_text(&self.producer, "action event shard producer", 256)?,
            workflow: privacy::machine_text(&self.workflow, "action event shard workflow", 128)?,
            job: privacy::machine_text(&self.job, "action event shard job", 128)?,
            run_id: privacy::machine_text(&self.run_id, "action event shard run id", 256)?,
            run_attempt: positive_integer(
                &Value::from(self.run_attempt),
                "action event shard run attempt",
            )?,
            partition_date: calendar_date(
                &self.partition_date,
                "action event shard partition date",
            )?,
        })
    }

    /// The canonical object of all eight fields.
    pub fn to_value(&self) -> Value {
        let mut v = self.run_value();
        if let Value::Object(m) = &mut v {
            m.insert("partitionDate".into(), Value::str(&self.partition_date));
        }
        v
    }

    /// The producer-run object: the identity without `partitionDate`.
    pub fn run_value(&self) -> Value {
        Value::object([
            ("job", Value::str(&self.job)),
            ("producer", Value::str(&self.producer)),
            ("repository", Value::str(&self.repository)),
            ("runAttempt", Value::from(self.run_attempt)),
            ("runId", Value::str(&self.run_id)),
            ("sha", Value::str(&self.sha)),
            ("workflow", Value::str(&self.workflow)),
        ])
    }

    /// sha256 of the canonical identity: its first 12 hex name shard files, all 64 name the
    /// shard-set reservation and completion marker.
    pub fn digest(&self) -> Digest {
        Digest::of(canonical::to_canonical_unchecked(&self.to_value()))
    }

    /// sha256 of the canonical producer-run object (names the producer-run binding).
    pub fn run_digest(&self) -> Digest {
        Digest::of(canonical::to_canonical_unchecked(&self.run_value()))
    }
}

#[cfg(test)]
impl ShardIdentity {
    /// The worked example of the shard digest and path tests (`openclaw/clawsweeper`, run 123,
    /// attempt 2, job `review`, 2026-07-12).
    pub(crate) fn worked_example() -> ShardIdentity {
        ShardIdentity {
            repository: "openclaw/clawsweeper".into(),
            sha: "a".repeat(40),
            producer: "review.process.default".into(),
            workflow: "sweep.yml".into(),
            job: "review".into(),
            run_id: "123".into(),
            run_attempt: 2,
            partition_date: "2026-07-12".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_digests() {
        let id = ShardIdentity::worked_example();
        assert_eq!(
            id.digest().as_str(),
            "f64c7bbdc35c1719bf666116b86a7975bde6cb3aefd9d1d716f8ffed6c7d63d6"
        );
        assert_eq!(
            id.run_digest().as_str(),
            "8b56d49522f16c294c9adf507f1a7ef9357a616fe30bbe9be6a1ad43131b1716"
        );
        assert_eq!(
            slug_for_repo("openclaw/clawsweeper"),
            "openclaw-clawsweeper"
        );
        assert_eq!(
            Digest::of("openclaw/clawsweeper").prefix(12),
            "51dc767358d3"
        );
    }

    #[test]
    fn repository_rules() {
        assert_eq!(normalize_repository(" OpenClaw/X ").unwrap(), "openclaw/x");
        assert_eq!(normalize_repository("  "), Err(Error::RepositoryRequired));
        assert_eq!(
            normalize_repository("a/b\u{7}"),
            Err(Error::RepositoryControl)
        );
        assert!(matches!(
            normalize_repository("a/b/c"),
            Err(Error::InvalidRepository(_))
        ));
        assert!(matches!(
            normalize_repository("-x/y"),
            Err(Error::InvalidRepository(_))
        ));
        assert_eq!(slug_for_repo("a//b c"), "a-b-c");
    }

    #[test]
    fn event_key_and_id() {
        let key = event_key("user.example.com", &Value::object::<&str>([])).unwrap();
        assert_eq!(
            key,
            "user.example.com:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(
            event_key("a/b", &Value::Null),
            Err(Error::ScopeNotMachineText)
        );
        let k = format!("review.item:{}", "b".repeat(64));
        assert_eq!(
            event_id("OpenClaw/ClawSweeper", &k).unwrap().as_str(),
            "6a0dc595b7e028c7fe76e3a71cfbff91d7ab5bac4d55faa9af973a50034c5927"
        );
        assert_eq!(
            event_id("openclaw/clawsweeper", "review.item:abc"),
            Err(Error::InvalidEventKey)
        );
    }

    /// An event key gets a bounded text's checks, with their messages, before its shape is
    /// looked at: blank, control characters and length are reported as such, in that order.
    #[test]
    fn event_key_text_checks_come_before_its_shape() {
        let digest = "b".repeat(64);
        let longest = format!("{}:{digest}", "a".repeat(128));
        assert_eq!(privacy::utf16_len(&longest), MAX_EVENT_KEY_LEN);
        assert!(event_id("o/r", &longest).is_ok());
        for (key, message) in [
            (
                "a\u{1}".to_owned(),
                "action event key contains control characters",
            ),
            (
                format!("s:{digest}\u{7f}"),
                "action event key contains control characters",
            ),
            ("   ".to_owned(), "action event key is required"),
            (
                "\u{feff}\u{3000}".to_owned(),
                "action event key is required",
            ),
            (
                format!("{}:{digest}", "a".repeat(129)),
                "action event key exceeds 193 characters",
            ),
            ("x".repeat(194), "action event key exceeds 193 characters"),
            (
                format!("\u{1}{}", "x".repeat(200)),
                "action event key contains control characters",
            ),
            (
                "review.item:abc".to_owned(),
                "action event key must be generated from a machine-readable scope and digest",
            ),
        ] {
            assert_eq!(
                event_id("o/r", &key).unwrap_err().to_string(),
                message,
                "{key:?}"
            );
        }
        // Trimmed first, as the reference's text checks do.
        assert_eq!(
            event_id("o/r", &format!(" {longest}\n")),
            event_id("o/r", &longest)
        );
    }

    #[test]
    fn calendar_dates() {
        assert!(calendar_date("2024-02-29", "d").is_ok());
        assert!(calendar_date("2023-02-29", "d").is_err());
        assert!(calendar_date("1900-02-29", "d").is_err());
        assert!(calendar_date("2000-02-29", "d").is_ok());
        assert!(calendar_date("0000-01-01", "d").is_err());
        assert!(calendar_date("2024-1-01", "d").is_err());
    }
}
