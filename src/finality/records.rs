//! The record files and their byte format.
//!
//! Every governed action has one directory, named by its id under a fan-out directory of the
//! first two hex digits of `sha256(action_id)`:
//!
//! ```text
//! finality/v1/actions/<sha256(id)[0:2]>/<id>/action.json     the binding
//! finality/v1/actions/<sha256(id)[0:2]>/<id>/claim.json      the one claim
//! finality/v1/actions/<sha256(id)[0:2]>/<id>/outcome.json    the one outcome
//! finality/v1/actions/<sha256(id)[0:2]>/<id>/approval.json   an operator's decision
//! ```
//!
//! Each file is the canonical JSON of one object (keys sorted, no whitespace, the crate's
//! canonical writer) followed by one `"\n"`, at most [`MAX_RECORD_BYTES`]. Every record carries
//! `schema` (its kind, e.g. [`ACTION_SCHEMA`]) and `schema_version` ([`SCHEMA_VERSION`]) and
//! exactly the keys listed on its type; absent values are `null`, never left out. Times are
//! UTC in exactly the form `YYYY-MM-DDTHH:MM:SS.mmmZ` ([`format_time`]). The readers
//! ([`parse_action`], [`parse_claim`], [`parse_outcome`]) refuse anything else with a
//! [`RecordError`] that names the field and the rule.
//!
//! `action.json` may also carry `details`, the full action record ([`Details`]: the goal, the
//! act, the risk, …), written only when set: records written before it keep their bytes. In
//! the same way `outcome.json` of a legacy close may carry `timestamp_end` (the closer's end
//! time) and `report` (its tokens, cost, model, duration, side effects and artifacts).
//!
//! `action.json` holds the *initial* lifecycle and `outcome.json` the lifecycle *after* the
//! outcome was written, so the state of an action is a pure function of its files (see
//! [`State`](super::State)).

use std::collections::BTreeMap;

use super::details::{self, DetailError, Details};
use super::ids::{ActionId, AttemptId, MAX_ID_UNITS};
use super::status::{Lifecycle, OutcomeStatus, Source, Verdict};
use crate::canonical::{self, Value};
use crate::identity::Digest;
use crate::privacy;
use crate::time::Timestamp;

/// `schema` of `action.json`.
pub const ACTION_SCHEMA: &str = "action-ledger.finality-action";
/// `schema` of `claim.json`.
pub const CLAIM_SCHEMA: &str = "action-ledger.finality-claim";
/// `schema` of `outcome.json`.
pub const OUTCOME_SCHEMA: &str = "action-ledger.finality-outcome";
/// `schema_version` of every finality record.
pub const SCHEMA_VERSION: i64 = 1;
/// The capability a creator must advertise for the action to be claimable (protocol 1).
pub const EXECUTION_CLAIMS: &str = "execution_claims";
/// Largest finality record the readers accept.
pub const MAX_RECORD_BYTES: u64 = 256 * 1024;
/// `summary` and `error_message` are truncated to this many UTF-16 code units.
pub const MAX_TEXT_UNITS: usize = 4000;
/// Largest `progress`, in bytes of its JSON.
pub const MAX_PROGRESS_BYTES: usize = 8 * 1024;

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of an instant (the only time format of the records).
pub fn format_time(at: Timestamp) -> String {
    at.to_iso_millis()
}

/// The instant of a time in exactly the [`format_time`] form; `None` otherwise.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    if s.len() != 24 || !s.ends_with('Z') || s.as_bytes()[19] != b'.' {
        return None;
    }
    let at = Timestamp::from_iso(s)?;
    (format_time(at) == s).then_some(at)
}

/// `action.json`: the binding a claim is checked against.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// The action id (also the directory name).
    pub action_id: ActionId,
    /// The agent that may claim it.
    pub agent_id: String,
    /// The principal that created it (`created_by`); only it may claim.
    pub created_by: String,
    /// [`act_content_hash`](super::act_content_hash) of the scrubbed act at creation; `None` when there was no act.
    pub act_content_hash: Option<String>,
    /// The guard decision that authorised it; a claim needs one.
    pub guard_decision_id: Option<String>,
    /// That decision's verdict.
    pub guard_verdict: Verdict,
    /// The containment ref of a contained action (needed by `allow_contained`).
    pub containment_ref: Option<String>,
    /// Whether the creator's identity was verified; then only a verified caller may claim.
    pub identity_verified: bool,
    /// `Some(1)` when the creator advertised `execution_claims`; `None` (legacy) is never
    /// claimable.
    pub execution_protocol: Option<i64>,
    /// The initial lifecycle.
    pub lifecycle: Lifecycle,
    /// Creation time; the sweep measures from it.
    pub created_at: Timestamp,
    /// How long the creator said it would wait for an operator's approval, in seconds
    /// (`approval_wait_seconds`, normalised by [`approval_wait_seconds`](super::approval::approval_wait_seconds));
    /// `None`: the sweeper's default. The key is written only when set, so records written
    /// before it existed keep their bytes.
    pub approval_wait_seconds: Option<u32>,
    /// What the creator said about the action beyond its binding (goal, act, risk, systems,
    /// …; [`Details`]), stored redacted under the key `details`; `None` for records written
    /// before it existed and creations without details: the key is written only when set.
    pub details: Option<Details>,
}

/// `claim.json`: the one claim of an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The claimed action.
    pub action_id: ActionId,
    /// The winning attempt id.
    pub attempt_id: AttemptId,
    /// `sha256` of the exact `action.json` bytes the claim was checked against.
    pub binding_sha256: Digest,
    /// Claim time.
    pub claimed_at: Timestamp,
    /// The guard decision that authorised the claim (`execution_guard_decision_id`).
    pub guard_decision_id: String,
}

/// `outcome.json`: the one outcome of an action and the lifecycle it closed.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The action.
    pub action_id: ActionId,
    /// Never [`OutcomeStatus::Pending`].
    pub status: OutcomeStatus,
    /// Outcome time.
    pub outcome_at: Timestamp,
    /// Redacted, at most [`MAX_TEXT_UNITS`].
    pub summary: Option<String>,
    /// Redacted, at most [`MAX_TEXT_UNITS`].
    pub error_message: Option<String>,
    /// A JSON object (redacted string values) of at most [`MAX_PROGRESS_BYTES`] as given.
    pub progress: Option<Value>,
    /// The attempt that reported it, when the reporter named one (it must be the claim's).
    pub attempt_id: Option<AttemptId>,
    /// The lifecycle after this outcome.
    pub lifecycle: Lifecycle,
    /// Which path wrote it.
    pub source: Source,
    /// The end time the closer sent (a legacy close's `timestamp_end`, kept to the millisecond
    /// in UTC as the reference's `timestamptz` keeps it); `outcome_at` stays the server's
    /// time. Written only when set, so records without it keep their bytes.
    pub timestamp_end: Option<Timestamp>,
    /// What a legacy close reported beyond its texts: the fields of
    /// [`REPORT_FIELDS`](super::details::REPORT_FIELDS) (tokens, cost, model, duration, side
    /// effects, artifacts), checked and redacted as an action's details are, stored under the
    /// key `report`. Written only when a field was sent.
    pub report: Option<Details>,
}

/// `null` or the string.
pub(super) fn opt_str(v: &Option<String>) -> Value {
    v.as_ref().map_or(Value::Null, |s| Value::str(s.as_str()))
}

/// The bytes of a record file: canonical JSON and `"\n"`.
pub(super) fn record_bytes(value: &Value) -> Vec<u8> {
    let mut text = canonical::to_canonical_unchecked(value);
    text.push('\n');
    text.into_bytes()
}

impl Action {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        let mut value = Value::object([
            ("schema", Value::str(ACTION_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("agent_id", Value::str(self.agent_id.as_str())),
            ("created_by", Value::str(self.created_by.as_str())),
            ("act_content_hash", opt_str(&self.act_content_hash)),
            ("guard_decision_id", opt_str(&self.guard_decision_id)),
            ("guard_verdict", Value::str(self.guard_verdict.as_str())),
            ("containment_ref", opt_str(&self.containment_ref)),
            ("identity_verified", Value::Bool(self.identity_verified)),
            (
                "execution_protocol",
                self.execution_protocol.map_or(Value::Null, Value::from),
            ),
            ("lifecycle", Value::str(self.lifecycle.as_str())),
            ("created_at", Value::str(format_time(self.created_at))),
        ]);
        if let (Some(wait), Value::Object(map)) = (self.approval_wait_seconds, &mut value) {
            map.insert("approval_wait_seconds".into(), Value::from(i64::from(wait)));
        }
        if let (Some(details), Value::Object(map)) = (&self.details, &mut value) {
            map.insert("details".into(), details.to_value());
        }
        value
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

impl Claim {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        Value::object([
            ("schema", Value::str(CLAIM_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("attempt_id", Value::str(self.attempt_id.as_str())),
            ("binding_sha256", Value::str(self.binding_sha256.as_str())),
            ("claimed_at", Value::str(format_time(self.claimed_at))),
            (
                "guard_decision_id",
                Value::str(self.guard_decision_id.as_str()),
            ),
        ])
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

impl Outcome {
    /// The record as a JSON value (keys as in the file).
    pub fn to_value(&self) -> Value {
        let mut value = Value::object([
            ("schema", Value::str(OUTCOME_SCHEMA)),
            ("schema_version", Value::from(SCHEMA_VERSION)),
            ("action_id", Value::str(self.action_id.as_str())),
            ("status", Value::str(self.status.as_str())),
            ("outcome_at", Value::str(format_time(self.outcome_at))),
            ("summary", opt_str(&self.summary)),
            ("error_message", opt_str(&self.error_message)),
            ("progress", self.progress.clone().unwrap_or(Value::Null)),
            (
                "attempt_id",
                self.attempt_id
                    .as_ref()
                    .map_or(Value::Null, |a| Value::str(a.as_str())),
            ),
            ("lifecycle", Value::str(self.lifecycle.as_str())),
            ("source", Value::str(self.source.as_str())),
        ]);
        if let Value::Object(map) = &mut value {
            if let Some(end) = self.timestamp_end {
                map.insert("timestamp_end".into(), Value::str(format_time(end)));
            }
            if let Some(report) = &self.report {
                map.insert("report".into(), report.to_value());
            }
        }
        value
    }

    /// The file bytes: canonical JSON and `"\n"`.
    pub fn to_bytes(&self) -> Vec<u8> {
        record_bytes(&self.to_value())
    }
}

/// Reads a record file: UTF-8, canonical JSON object, one trailing `"\n"`.
pub(super) fn record_value(bytes: &[u8]) -> Result<Value, RecordError> {
    let text = std::str::from_utf8(bytes).map_err(|_| RecordError::NotUtf8)?;
    let body = text.strip_suffix('\n').ok_or(RecordError::NoNewline)?;
    let value = canonical::parse_canonical(body).map_err(|e| RecordError::NotCanonical {
        reason: e.to_string(),
    })?;
    if !matches!(value, Value::Object(_)) {
        return Err(RecordError::NotAnObject);
    }
    Ok(value)
}

/// Field access with an exact key set.
pub(super) struct Fields<'a>(pub(super) &'a BTreeMap<String, Value>);

impl<'a> Fields<'a> {
    /// The fields of `value`, which must be an object with exactly `keys` plus `schema` (equal
    /// to `schema`) and `schema_version` ([`SCHEMA_VERSION`]).
    pub(super) fn new(
        value: &'a Value,
        schema: &'static str,
        keys: &[&str],
    ) -> Result<Fields<'a>, RecordError> {
        Fields::with_optional(value, schema, keys, &[])
    }

    /// As [`Fields::new`], where each of `optional` may also be present (keys added after a
    /// record's first version, written only when set).
    pub(super) fn with_optional(
        value: &'a Value,
        schema: &'static str,
        keys: &[&str],
        optional: &[&str],
    ) -> Result<Fields<'a>, RecordError> {
        let map = value.as_object().ok_or(RecordError::NotAnObject)?;
        let mut want: Vec<&str> = keys.to_vec();
        want.extend(["schema", "schema_version"]);
        want.extend(optional.iter().filter(|k| map.contains_key(**k)));
        want.sort_unstable();
        let have: Vec<&str> = map.keys().map(String::as_str).collect();
        if have != want {
            return Err(RecordError::Fields {
                have: have.into_iter().map(str::to_owned).collect(),
                want: want.into_iter().map(str::to_owned).collect(),
            });
        }
        let f = Fields(map);
        if f.str("schema")? != schema {
            return Err(RecordError::Schema { expected: schema });
        }
        if map.get("schema_version").and_then(Value::as_safe_integer) != Some(SCHEMA_VERSION) {
            return Err(RecordError::SchemaVersion);
        }
        Ok(f)
    }

    /// A string field.
    pub(super) fn str(&self, key: &'static str) -> Result<&'a str, RecordError> {
        self.0
            .get(key)
            .and_then(Value::as_str)
            .ok_or(RecordError::NotString { field: key })
    }

    /// A string-or-null field.
    pub(super) fn opt_str(&self, key: &'static str) -> Result<Option<&'a str>, RecordError> {
        match self.0.get(key) {
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            _ => Err(RecordError::NotStringOrNull { field: key }),
        }
    }

    /// A boolean field.
    pub(super) fn bool(&self, key: &'static str) -> Result<bool, RecordError> {
        self.0
            .get(key)
            .and_then(Value::as_bool)
            .ok_or(RecordError::NotBool { field: key })
    }

    /// A time field, in the [`format_time`] form.
    pub(super) fn time(&self, key: &'static str) -> Result<Timestamp, RecordError> {
        parse_time(self.str(key)?).ok_or(RecordError::NotTime { field: key })
    }

    /// A string field read by `parse`.
    pub(super) fn parsed<T>(
        &self,
        key: &'static str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> Result<T, RecordError> {
        let s = self.str(key)?;
        parse(s).ok_or_else(|| RecordError::Invalid {
            field: key,
            value: s.to_owned(),
        })
    }

    /// The record's own id in field `key`, which must be `id`, the id its path names; `owner`
    /// says what names it (`directory's`, `path's`) in the [`RecordError::NotItsPath`] refusal.
    pub(super) fn own_id(
        &self,
        key: &'static str,
        id: &ActionId,
        owner: &'static str,
    ) -> Result<ActionId, RecordError> {
        let own = self.parsed(key, ActionId::parse)?;
        if own != *id {
            return Err(RecordError::NotItsPath {
                field: key,
                id: own,
                owner,
            });
        }
        Ok(own)
    }

    /// An id field of the machine-text shape. Its confidential scan is left
    /// to [`verify`]: it compiles the privacy patterns, which every read would pay for.
    pub(super) fn id_text(&self, key: &'static str) -> Result<Option<String>, RecordError> {
        match self.opt_str(key)? {
            None => Ok(None),
            Some(s) if is_machine_shaped(s) => Ok(Some(s.to_owned())),
            Some(_) => Err(RecordError::NotMachineText { field: key }),
        }
    }

    /// An id field of the machine-text shape that may not be null.
    pub(super) fn id(&self, key: &'static str) -> Result<String, RecordError> {
        self.id_text(key)?.ok_or(RecordError::Null { field: key })
    }

    /// A free-text field or null: at most [`MAX_TEXT_UNITS`] UTF-16 units and no NUL, the
    /// limits every text a finality record carries shares.
    pub(super) fn opt_text(&self, key: &'static str) -> Result<Option<&'a str>, RecordError> {
        let v = self.opt_str(key)?;
        if v.is_some_and(|s| privacy::utf16_len(s) > MAX_TEXT_UNITS || s.contains('\0')) {
            return Err(RecordError::Text { field: key });
        }
        Ok(v)
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$`, at most [`MAX_ID_UNITS`] long.
pub(super) fn is_machine_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() <= MAX_ID_UNITS
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.:/@+-".contains(c))
}

/// Parses `action.json` bytes; `id` is the directory's action id.
///
/// # Errors
/// The first rule the file breaks ([`RecordError`]).
pub fn parse_action(bytes: &[u8], id: &ActionId) -> Result<Action, RecordError> {
    let value = record_value(bytes)?;
    let f = Fields::with_optional(
        &value,
        ACTION_SCHEMA,
        &[
            "act_content_hash",
            "action_id",
            "agent_id",
            "containment_ref",
            "created_at",
            "created_by",
            "execution_protocol",
            "guard_decision_id",
            "guard_verdict",
            "identity_verified",
            "lifecycle",
        ],
        &["approval_wait_seconds", "details"],
    )?;
    let action_id = f.own_id("action_id", id, "directory's")?;
    let act_content_hash = match f.opt_str("act_content_hash")? {
        None => None,
        Some(h) => {
            let ok = h.strip_prefix("sha256:").is_some_and(|b| {
                b.len() == 43
                    && b.bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
            });
            if !ok {
                return Err(RecordError::ActHash);
            }
            Some(h.to_owned())
        }
    };
    let execution_protocol = match f.0.get("execution_protocol") {
        Some(Value::Null) => None,
        Some(v) if v.as_safe_integer() == Some(1) => Some(1),
        _ => return Err(RecordError::Protocol),
    };
    let lifecycle = f.parsed("lifecycle", Lifecycle::parse)?;
    if !lifecycle.is_client_settable() {
        return Err(RecordError::InitialLifecycle { lifecycle });
    }
    Ok(Action {
        action_id,
        agent_id: f.id("agent_id")?,
        created_by: f.id("created_by")?,
        act_content_hash,
        guard_decision_id: f.id_text("guard_decision_id")?,
        guard_verdict: f.parsed("guard_verdict", Verdict::parse)?,
        containment_ref: f.id_text("containment_ref")?,
        identity_verified: f.bool("identity_verified")?,
        execution_protocol,
        lifecycle,
        created_at: f.time("created_at")?,
        approval_wait_seconds: match f.0.get("approval_wait_seconds") {
            None => None,
            Some(v) => Some(
                v.as_safe_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| super::approval::APPROVAL_WAIT_SECONDS.contains(n))
                    .ok_or(RecordError::ApprovalWait)?,
            ),
        },
        details: match f.0.get("details") {
            None => None,
            Some(v) => Some(Details::from_record(v).map_err(RecordError::Detail)?),
        },
    })
}

/// Parses `claim.json` bytes; `id` is the directory's action id.
///
/// # Errors
/// The first rule the file breaks ([`RecordError`]).
pub fn parse_claim(bytes: &[u8], id: &ActionId) -> Result<Claim, RecordError> {
    let value = record_value(bytes)?;
    let f = Fields::new(
        &value,
        CLAIM_SCHEMA,
        &[
            "action_id",
            "attempt_id",
            "binding_sha256",
            "claimed_at",
            "guard_decision_id",
        ],
    )?;
    let action_id = f.own_id("action_id", id, "directory's")?;
    Ok(Claim {
        action_id,
        attempt_id: f.parsed("attempt_id", AttemptId::parse)?,
        binding_sha256: f.parsed("binding_sha256", Digest::parse)?,
        claimed_at: f.time("claimed_at")?,
        guard_decision_id: f.id("guard_decision_id")?,
    })
}

/// Parses `outcome.json` bytes; `id` is the directory's action id. Checks the shape and the
/// limits, not the consistency with the action (see [`verify`](fn@super::verify)).
///
/// # Errors
/// The first rule the file breaks ([`RecordError`]).
pub fn parse_outcome(bytes: &[u8], id: &ActionId) -> Result<Outcome, RecordError> {
    let value = record_value(bytes)?;
    let f = Fields::with_optional(
        &value,
        OUTCOME_SCHEMA,
        &[
            "action_id",
            "attempt_id",
            "error_message",
            "lifecycle",
            "outcome_at",
            "progress",
            "source",
            "status",
            "summary",
        ],
        &["report", "timestamp_end"],
    )?;
    let action_id = f.own_id("action_id", id, "directory's")?;
    let status = f.parsed("status", OutcomeStatus::parse)?;
    if status == OutcomeStatus::Pending {
        return Err(RecordError::PendingWritten);
    }
    let text = |key| Ok::<_, RecordError>(f.opt_text(key)?.map(str::to_owned));
    let progress = match f.0.get("progress") {
        Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        _ => return Err(RecordError::Progress),
    };
    let attempt_id = match f.opt_str("attempt_id")? {
        None => None,
        Some(s) => Some(AttemptId::parse(s).ok_or(RecordError::InvalidOptional {
            field: "attempt_id",
        })?),
    };
    Ok(Outcome {
        action_id,
        status,
        outcome_at: f.time("outcome_at")?,
        summary: text("summary")?,
        error_message: text("error_message")?,
        progress,
        attempt_id,
        lifecycle: f.parsed("lifecycle", Lifecycle::parse)?,
        source: f.parsed("source", Source::parse)?,
        timestamp_end: match f.0.get("timestamp_end") {
            None => None,
            Some(_) => Some(f.time("timestamp_end")?),
        },
        report: match f.0.get("report") {
            None => None,
            Some(v) => Some(parse_report(v)?),
        },
    })
}

/// The `report` of `outcome.json`: a non-empty object of
/// [`REPORT_FIELDS`](super::details::REPORT_FIELDS), each keeping its rule.
fn parse_report(value: &Value) -> Result<Details, RecordError> {
    let report = Details::from_record(value).map_err(RecordError::Detail)?;
    let act = (report.act().is_some() || report.act_redacted()).then_some("act");
    if let Some(name) = act.or_else(|| report.names().find(|n| !details::is_report_field(n))) {
        return Err(RecordError::Detail(DetailError {
            field: name.to_owned(),
            rule: "is not a field of a close's report".into(),
        }));
    }
    if report.is_empty() {
        return Err(RecordError::Detail(DetailError {
            field: "report".into(),
            rule: "must hold a field when present".into(),
        }));
    }
    Ok(report)
}

/// Why a record file is not a valid finality record: the field and the rule it breaks. The
/// messages are those `verify` reports as finding details and [`Error::Corrupt`](super::Error::Corrupt) as its reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The bytes are not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// The file does not end with its one `"\n"`.
    #[error("does not end with a newline")]
    NoNewline,
    /// The text is not canonical JSON (the canonical reader's message).
    #[error("{reason}")]
    NotCanonical {
        /// What the canonical reader refused.
        reason: String,
    },
    /// The JSON value is not an object.
    #[error("not a JSON object")]
    NotAnObject,
    /// The object's keys are not exactly the record's.
    #[error("fields are {have:?}, expected {want:?}")]
    Fields {
        /// The keys present, sorted.
        have: Vec<String>,
        /// The keys of the record, sorted.
        want: Vec<String>,
    },
    /// `schema` names another record kind.
    #[error("schema is not {expected}")]
    Schema {
        /// The record's schema.
        expected: &'static str,
    },
    /// `schema_version` is not [`SCHEMA_VERSION`].
    #[error("schema_version is not {}", SCHEMA_VERSION)]
    SchemaVersion,
    /// A required string field is missing or not a string.
    #[error("{field} is not a string")]
    NotString {
        /// The field.
        field: &'static str,
    },
    /// An optional string field is neither a string nor `null`.
    #[error("{field} is not a string or null")]
    NotStringOrNull {
        /// The field.
        field: &'static str,
    },
    /// A boolean field is not a boolean.
    #[error("{field} is not a boolean")]
    NotBool {
        /// The field.
        field: &'static str,
    },
    /// A time field is not exactly `YYYY-MM-DDTHH:MM:SS.mmmZ` (a real UTC date).
    #[error("{field} is not YYYY-MM-DDTHH:MM:SS.mmmZ")]
    NotTime {
        /// The field.
        field: &'static str,
    },
    /// A field holds a string that is not one of its values (an id of the wrong shape, an
    /// unknown status, …).
    #[error("{field} {value:?} is not valid")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// An optional field whose value, when set, is not valid (the value is not repeated).
    #[error("{field} is not valid")]
    InvalidOptional {
        /// The field.
        field: &'static str,
    },
    /// An id field is not machine text (`^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$`) of at most
    /// [`MAX_ID_UNITS`] characters.
    #[error("{field} is not machine text of at most {} characters", MAX_ID_UNITS)]
    NotMachineText {
        /// The field.
        field: &'static str,
    },
    /// A required field is `null`.
    #[error("{field} is null")]
    Null {
        /// The field.
        field: &'static str,
    },
    /// The record's own id is not the one its path names.
    #[error("{field} {id} is not its {owner}")]
    NotItsPath {
        /// The id field (`action_id`, `decision_id`).
        field: &'static str,
        /// The id in the record.
        id: ActionId,
        /// What names it: `directory's` (an action directory) or `path's` (a decision file).
        owner: &'static str,
    },
    /// `act_content_hash` is not `sha256:` and 43 base64url characters.
    #[error("act_content_hash is not sha256:<base64url>")]
    ActHash,
    /// `execution_protocol` is neither 1 nor `null`.
    #[error("execution_protocol is not 1 or null")]
    Protocol,
    /// `action.json` holds a lifecycle only the server sets (`unknown`, `expired`).
    #[error("lifecycle {lifecycle} cannot be an initial lifecycle")]
    InitialLifecycle {
        /// The lifecycle found.
        lifecycle: Lifecycle,
    },
    /// `outcome.json` holds status `pending`, which is the absence of the file.
    #[error("status pending is never written")]
    PendingWritten,
    /// A free-text field is over [`MAX_TEXT_UNITS`] UTF-16 code units or
    /// holds NUL, so it was not stored by the redaction that truncates and cleans it.
    #[error("{field} is longer than {} characters or contains NUL", MAX_TEXT_UNITS)]
    Text {
        /// The field.
        field: &'static str,
    },
    /// `progress` is neither an object nor `null`.
    #[error("progress is not an object or null")]
    Progress,
    /// `approval.json`'s lifecycle is not the one its decision leads to.
    #[error("lifecycle {lifecycle} is not the one {decision} leads to ({expected})")]
    ApprovalLifecycle {
        /// The lifecycle found.
        lifecycle: Lifecycle,
        /// The decision (`approve`, `deny`).
        decision: &'static str,
        /// The lifecycle it leads to.
        expected: Lifecycle,
    },
    /// `action.json`'s `approval_wait_seconds` is not an integer of 5 to 86400.
    #[error("approval_wait_seconds is not an integer of 5 to 86400 (seconds)")]
    ApprovalWait,
    /// `action.json`'s `details` break a field's rule ([`Details::from_record`]); `verify`
    /// reports it as `finality-detail-invalid`.
    #[error("details: {0}")]
    Detail(DetailError),
    /// A decision record's `containment_ref` is set for a verdict other than
    /// `allow_contained`, or missing for it.
    #[error("containment_ref is set exactly for allow_contained")]
    ContainmentRef,
    /// `containment.json`'s `promotion_action_id` is not the grant id its verdict calls for:
    /// the one [`promotion_action_id`](super::containment::promotion_action_id) derives for a
    /// promotion, `null` for a discard.
    #[error("promotion_action_id is not the promotion grant's id (null for a discard)")]
    PromotionId,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;

    #[test]
    fn records_round_trip_through_their_parsers() {
        let (_dir, store, opts, a) = repo_with_action();
        assert!(a.commit.is_some());
        // Replaying the identical creation is a no-op; another binding under the id is refused.
        let again = create_action(&store, &opts, &new_action(ACTION), at(BASE)).unwrap();
        assert_eq!(again.commit, None);
        let mut other = new_action(ACTION);
        other.agent_id = "agent-b".into();
        assert!(matches!(
            create_action(&store, &opts, &other, at(BASE)),
            Err(Error::ActionExists { .. })
        ));
        claim(
            &store,
            &opts,
            ACTION,
            &request(ATTEMPT),
            at(BASE).saturating_add_millis(5),
        )
        .unwrap();
        let report = OutcomeReport {
            status: "partial".into(),
            summary: Some("half".into()),
            progress: Some(Value::object([("step", Value::from(2))])),
            attempt_id: Some(ATTEMPT.into()),
            ..OutcomeReport::default()
        };
        report_outcome(
            &store,
            &opts,
            ACTION,
            &report,
            &Settler::Operator,
            at(BASE).saturating_add_millis(9),
        )
        .unwrap();
        let state = show(&store, "refs/heads/main", ACTION).unwrap();
        let id = ActionId::parse(ACTION).unwrap();
        assert_eq!(
            parse_action(&state.action.to_bytes(), &id).unwrap(),
            state.action
        );
        let c = state.claim.clone().unwrap();
        assert_eq!(parse_claim(&c.to_bytes(), &id).unwrap(), c);
        let o = state.outcome.clone().unwrap();
        assert_eq!(parse_outcome(&o.to_bytes(), &id).unwrap(), o);
        assert_eq!(
            String::from_utf8(state.action.to_bytes()).unwrap(),
            "{\"act_content_hash\":\"sha256:-hGhiaKrt0YkI2srGCDO7s_6hMPXEN-TXaGDGysUM8w\",\"action_id\":\"act_case\",\"agent_id\":\"agent-a\",\"containment_ref\":null,\"created_at\":\"2026-03-01T12:00:00.000Z\",\"created_by\":\"principal-a\",\"execution_protocol\":1,\"guard_decision_id\":\"gd_1\",\"guard_verdict\":\"allow\",\"identity_verified\":false,\"lifecycle\":\"running\",\"schema\":\"action-ledger.finality-action\",\"schema_version\":1}\n"
        );
        assert_eq!(c.binding_sha256, Digest::of(state.action.to_bytes()));
        assert_eq!(
            String::from_utf8(o.to_bytes()).unwrap(),
            "{\"action_id\":\"act_case\",\"attempt_id\":\"attempt-0000000001\",\"error_message\":null,\"lifecycle\":\"failed\",\"outcome_at\":\"2026-03-01T12:00:00.009Z\",\"progress\":{\"step\":2},\"schema\":\"action-ledger.finality-outcome\",\"schema_version\":1,\"source\":\"outcome\",\"status\":\"partial\",\"summary\":\"half\"}\n"
        );
    }

    /// A legacy close's `timestamp_end` and report are written only when sent, round-trip
    /// through the parser, and read back as DashClaw's row shows them; the parser refuses a
    /// report holding a field a close does not report, an act, or nothing, and a
    /// `timestamp_end` not in the records' one time form (issue 45).
    #[test]
    fn a_close_report_round_trips_and_its_rules_are_kept() {
        let (_dir, store, opts, _) = repo_with_action();
        let report = report_of(
            r#"{"tokens_in":1200,"tokens_out":34,"cost_estimate":0.5,"model":"m","duration_ms":9,"side_effects":["a"],"artifacts_created":["b"],"declared_goal":"not a report field"}"#,
        );
        assert_eq!(
            report.names().collect::<Vec<_>>(),
            [
                "artifacts_created",
                "cost_estimate",
                "duration_ms",
                "model",
                "side_effects",
                "tokens_in",
                "tokens_out"
            ],
            "only the report's fields are read"
        );
        let sent = CloseReport {
            timestamp_end: Timestamp::from_iso("2026-03-01T12:00:00.5+00:00"),
            report: Some(report),
            ..CloseReport::default()
        };
        close_as_operator(&store, &opts, &sent).unwrap();
        let state = show(&store, "refs/heads/main", ACTION).unwrap();
        let o = state.outcome.clone().unwrap();
        let id = ActionId::parse(ACTION).unwrap();
        assert_eq!(parse_outcome(&o.to_bytes(), &id).unwrap(), o);
        let text = String::from_utf8(o.to_bytes()).unwrap();
        assert!(
            text.contains(r#""report":{"artifacts_created":["b"],"cost_estimate":0.5,"duration_ms":9,"model":"m","side_effects":["a"],"tokens_in":1200,"tokens_out":34}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""timestamp_end":"2026-03-01T12:00:00.500Z""#),
            "{text}"
        );
        let with = |key: &str, value: &str| {
            let mut v = o.to_value();
            if let Value::Object(m) = &mut v {
                m.insert(key.into(), crate::canonical::parse(value).unwrap());
            }
            parse_outcome(&record_bytes(&v), &id)
        };
        for (key, value, want) in [
            (
                "report",
                r#"{"declared_goal":"x"}"#,
                "declared_goal is not a field of a close's report",
            ),
            (
                "report",
                r#"{"act":{"kind":"x"}}"#,
                "act is not a field of a close's report",
            ),
            ("report", "{}", "report must hold a field when present"),
            ("report", r#"{"tokens_in":-1}"#, "tokens_in must be >= 0"),
            ("report", "[]", "details must be an object"),
            (
                "timestamp_end",
                r#""2026-03-01T12:00:00Z""#,
                "timestamp_end",
            ),
            ("timestamp_end", "null", "timestamp_end"),
        ] {
            let e = with(key, value).unwrap_err().to_string();
            assert!(e.contains(want), "{key}={value}: {e}");
        }
    }
}
