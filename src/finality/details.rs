//! The full action record: what a creator says about an action beyond its binding (the declared
//! goal, the act itself, the risk score, the systems touched, whether it is reversible, the
//! reasoning, the idempotency key, the assumptions, …), kept in `action.json` under the key
//! `details` so that an approver sees what they approve.
//!
//! # The fields
//!
//! Each field has the name and the rule of the reference's action row (DashClaw's
//! `validateActionRecord`), where the reference has one; [`FIELDS`] is the table every reader
//! and writer goes by:
//!
//! | field | rule |
//! |---|---|
//! | `declared_goal` | string, at most 2,000 characters |
//! | `reasoning`, `input_summary`, `output_summary` | string, at most 4,000 |
//! | `authorization_scope`, `trigger` | string, at most 1,000 |
//! | `agent_name` | string, at most 256 |
//! | `swarm_id`, `parent_action_id`, `session_id`, `recommendation_id`, `model` | string, at most 128 |
//! | `idempotency_key` | string, at most 256 |
//! | `recommendation_override_reason` | string, at most 500 |
//! | `systems_touched`, `side_effects` | array of at most 50 strings of at most 500 |
//! | `artifacts_created` | array of at most 100 strings of at most 500 |
//! | `assumptions` | array of at most [`MAX_ASSUMPTIONS`] strings of at most 2,000 (ours: the reference keeps assumptions in a table of their own, each at most 2,000) |
//! | `reversible`, `recommendation_applied` | boolean |
//! | `risk_score`, `confidence` | integer, 0 to 100 |
//! | `duration_ms` | integer, 0 to 2^53 − 1 (the reference sets no upper bound; this is JSON's exact integers) |
//! | `tokens_in`, `tokens_out` | integer, 0 to 10,000,000 (the reference clamps to this bound; we refuse beyond it) |
//! | `cost_estimate` | number, 0 to 10,000 (the same) |
//!
//! Characters are UTF-16 code units, as JavaScript's `length` counts them. `null` is the
//! absence of a field, as in the reference. A request that breaks a rule is refused with the
//! reference's message, which names the field and the rule ([`DetailError`]: `risk_score must be
//! <= 100`, `declared_goal exceeds max length of 2000`, `systems_touched[2] must be a string`);
//! nothing is written. Unlike the reference, `declared_goal` is not required (the ledger's
//! creations never required it) and the camelCase spellings (`riskScore`) are not read.
//!
//! # Redaction
//!
//! Every string (each item of an array too) is stored as [`clean_text`] leaves it: NUL removed,
//! the reference's secret shapes and the ledger's confidential identifiers replaced by
//! `[REDACTED]`, cut at the field's limit. The stored text is a fixed point of that cleaning,
//! and `verify` reports (`privacy`) one that is not.
//!
//! # The act
//!
//! The act is stored as hashed ([`scrub_act`]): `act_content_hash` is the
//! hash of exactly the stored `act`, and `verify` recomputes it (`finality-act-unbound`). When
//! the ledger's own redaction would change the scrubbed act further (a string holding a
//! confidential identifier such as a home path or a private address, or a secret shape outside
//! the fields the reference's scrub masks), the stored act is the redacted one and carries
//! `act_redacted: true`: its hash cannot be recomputed (the claim still binds the full act by
//! `act_content_hash`), and `verify` requires it to be a fixed point of the redaction that shows
//! a `[REDACTED]` (the act's redaction keeps NUL characters, so that it changes nothing it
//! does not show). An act with a confidential object key is not stored at all (`act_redacted:
//! true` without `act`). The stored act is at most [`MAX_ACT_BYTES`] of canonical JSON, and
//! the whole record at most [`MAX_RECORD_BYTES`](super::MAX_RECORD_BYTES); a bigger one is
//! refused at creation.
//!
//! # Bytes
//!
//! `details` holds only the fields given (no `null`s), in canonical order. Records written
//! before it existed have no `details` key and keep their bytes; a creation without details
//! (the CLI without `--details`, a containment promotion's grant) writes none either.

use std::collections::BTreeMap;
use std::fmt;

use super::act::scrub_act;
use super::redaction::{REDACTED, Security, clean_text, keys_confidential};
use crate::canonical::{self, Value};
use crate::privacy;

/// Largest stored act, in bytes of its canonical JSON.
pub const MAX_ACT_BYTES: usize = 64 * 1024;
/// Most assumptions an action may carry.
pub const MAX_ASSUMPTIONS: usize = 20;
/// Longest item of a string array, in UTF-16 code units (the reference's bound).
pub const MAX_ITEM_UNITS: usize = 500;

/// The rule of one detail field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FieldRule {
    /// A string of at most this many UTF-16 code units.
    Text(usize),
    /// An array of at most `items` strings of at most `units` UTF-16 code units each.
    List {
        /// Most items.
        items: usize,
        /// Longest item.
        units: usize,
    },
    /// A boolean.
    Bool,
    /// An integer of `min` to `max`.
    Integer {
        /// Smallest value.
        min: i64,
        /// Largest value.
        max: i64,
    },
    /// A finite number of `min` to `max`.
    Number {
        /// Smallest value.
        min: f64,
        /// Largest value.
        max: f64,
    },
}

/// One detail field: its name (the reference's column) and its rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Field {
    /// The key in a request body, in `details` and in the action row.
    pub name: &'static str,
    /// What its value must be.
    pub rule: FieldRule,
}

const fn text(name: &'static str, units: usize) -> Field {
    Field {
        name,
        rule: FieldRule::Text(units),
    }
}

const fn list(name: &'static str, items: usize, units: usize) -> Field {
    Field {
        name,
        rule: FieldRule::List { items, units },
    }
}

const fn integer(name: &'static str, min: i64, max: i64) -> Field {
    Field {
        name,
        rule: FieldRule::Integer { min, max },
    }
}

/// Every detail field, in the order of the reference's row.
pub const FIELDS: &[Field] = &[
    text("agent_name", 256),
    text("swarm_id", 128),
    text("parent_action_id", 128),
    text("declared_goal", 2000),
    text("reasoning", 4000),
    text("authorization_scope", 1000),
    text("trigger", 1000),
    list("systems_touched", 50, MAX_ITEM_UNITS),
    text("input_summary", 4000),
    Field {
        name: "reversible",
        rule: FieldRule::Bool,
    },
    integer("risk_score", 0, 100),
    integer("confidence", 0, 100),
    text("recommendation_id", 128),
    Field {
        name: "recommendation_applied",
        rule: FieldRule::Bool,
    },
    text("recommendation_override_reason", 500),
    text("output_summary", 4000),
    list("side_effects", 50, MAX_ITEM_UNITS),
    list("artifacts_created", 100, MAX_ITEM_UNITS),
    integer("duration_ms", 0, MAX_SAFE_INTEGER),
    integer("tokens_in", 0, 10_000_000),
    integer("tokens_out", 0, 10_000_000),
    Field {
        name: "cost_estimate",
        rule: FieldRule::Number {
            min: 0.0,
            max: 10_000.0,
        },
    },
    text("model", 128),
    text("idempotency_key", 256),
    text("session_id", 128),
    list("assumptions", MAX_ASSUMPTIONS, 2000),
];

/// The largest integer JSON carries exactly (2^53 − 1): the bound of `duration_ms`.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// The fields of [`FIELDS`] that a legacy close keeps as its report (in `outcome.json`, see
/// [`super::records::Outcome::report`]): the reference's outcome fields (`OUTCOME_FIELDS` of
/// its `validateActionOutcome`) other than `status`, `output_summary`, `error_message` and
/// `timestamp_end`, which the outcome record holds in keys of its own.
pub const REPORT_FIELDS: &[&str] = &[
    "side_effects",
    "artifacts_created",
    "duration_ms",
    "cost_estimate",
    "tokens_in",
    "tokens_out",
    "model",
];

/// The field named `name`, if it is one.
pub fn field(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// A detail that breaks its rule: the field (with the index of an array item) and the rule, in
/// the reference's words (`risk_score must be <= 100`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} {rule}")]
pub struct DetailError {
    /// The field, with `[i]` for an item of an array.
    pub field: String,
    /// The rule it breaks (`must be an integer`, `exceeds max length of 2000`).
    pub rule: String,
}

fn broken(field: impl Into<String>, rule: impl Into<String>) -> DetailError {
    DetailError {
        field: field.into(),
        rule: rule.into(),
    }
}

/// Whether `value` keeps `rule`; the first break otherwise. `name` names the field.
pub fn check_field(name: &str, rule: FieldRule, value: &Value) -> Result<(), DetailError> {
    match rule {
        FieldRule::Text(max) => match value {
            Value::String(s) if privacy::utf16_len(s) > max => {
                Err(broken(name, format!("exceeds max length of {max}")))
            }
            Value::String(_) => Ok(()),
            _ => Err(broken(name, "must be a string")),
        },
        FieldRule::List { items, units } => {
            let Value::Array(values) = value else {
                return Err(broken(name, "must be an array"));
            };
            if values.len() > items {
                return Err(broken(name, format!("exceeds max items of {items}")));
            }
            for (i, item) in values.iter().enumerate() {
                match item {
                    Value::String(s) if privacy::utf16_len(s) > units => {
                        return Err(broken(
                            format!("{name}[{i}]"),
                            format!("exceeds max length of {units}"),
                        ));
                    }
                    Value::String(_) => {}
                    _ => return Err(broken(format!("{name}[{i}]"), "must be a string")),
                }
            }
            Ok(())
        }
        FieldRule::Bool => match value {
            Value::Bool(_) => Ok(()),
            _ => Err(broken(name, "must be a boolean")),
        },
        FieldRule::Integer { min, max } => {
            let Some(n) = value.as_f64().filter(|n| n.is_finite() && n.fract() == 0.0) else {
                return Err(broken(name, "must be an integer"));
            };
            if n < min as f64 {
                Err(broken(name, format!("must be >= {min}")))
            } else if n > max as f64 {
                Err(broken(name, format!("must be <= {max}")))
            } else {
                Ok(())
            }
        }
        FieldRule::Number { min, max } => {
            let Some(n) = value.as_f64().filter(|n| n.is_finite()) else {
                return Err(broken(name, "must be a number"));
            };
            if n < min {
                Err(broken(name, format!("must be >= {min}")))
            } else if n > max {
                Err(broken(name, format!("must be <= {max}")))
            } else {
                Ok(())
            }
        }
    }
}

/// The details of an action: the fields of [`FIELDS`] that were given, and the act as stored.
///
/// Built from a request with [`Details::from_request`] (the act is added at creation, from the
/// action's own act); stored by [`Details::stored`]; read back from a record by
/// [`Details::from_record`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    fields: BTreeMap<String, Value>,
    act: Option<Value>,
    act_redacted: bool,
}

impl Details {
    /// The detail fields of a request body (other members are not looked at; `null` is
    /// absent). Every field that breaks its rule is reported, in the order of [`FIELDS`].
    ///
    /// # Errors
    /// The [`DetailError`]s of the fields that break their rules.
    pub fn from_request(body: &BTreeMap<String, Value>) -> Result<Details, Vec<DetailError>> {
        Details::from_request_fields(body, FIELDS.iter())
    }

    /// As [`Details::from_request`], reading only the fields of [`REPORT_FIELDS`]: a legacy
    /// close's report.
    ///
    /// # Errors
    /// The [`DetailError`]s of the fields that break their rules.
    pub fn report_from_request(
        body: &BTreeMap<String, Value>,
    ) -> Result<Details, Vec<DetailError>> {
        Details::from_request_fields(body, FIELDS.iter().filter(|f| is_report_field(f.name)))
    }

    fn from_request_fields<'a>(
        body: &BTreeMap<String, Value>,
        wanted: impl Iterator<Item = &'a Field>,
    ) -> Result<Details, Vec<DetailError>> {
        let mut errors = Vec::new();
        let mut fields = BTreeMap::new();
        for f in wanted {
            match body.get(f.name) {
                None | Some(Value::Null) => {}
                Some(v) => match check_field(f.name, f.rule, v) {
                    Ok(()) => {
                        fields.insert(f.name.to_owned(), v.clone());
                    }
                    Err(e) => errors.push(e),
                },
            }
        }
        if errors.is_empty() {
            Ok(Details {
                fields,
                act: None,
                act_redacted: false,
            })
        } else {
            Err(errors)
        }
    }

    /// The value of field `name`, when it was given.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.get(name)
    }

    /// A string field.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }

    /// The items of a string-array field (empty when absent).
    pub fn list(&self, name: &str) -> Vec<&str> {
        self.get(name)
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// `risk_score`, when given.
    pub fn risk_score(&self) -> Option<i64> {
        self.get("risk_score").and_then(Value::as_safe_integer)
    }

    /// `reversible`, when given.
    pub fn reversible(&self) -> Option<bool> {
        self.get("reversible").and_then(Value::as_bool)
    }

    /// The stored act, when it was stored.
    pub fn act(&self) -> Option<&Value> {
        self.act.as_ref()
    }

    /// Whether the stored act is the redacted one (or was not stored for a confidential key),
    /// so that its hash cannot be recomputed from it.
    pub fn act_redacted(&self) -> bool {
        self.act_redacted
    }

    /// Whether no field is given and no act is stored.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty() && self.act.is_none() && !self.act_redacted
    }

    /// The names of the fields given, in canonical order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }

    /// `self` with each field of `over` set to `over`'s value: an action's details as a
    /// legacy close's report updated them, as the reference's `PATCH` updates its row.
    pub fn overlaid(&self, over: &Details) -> Details {
        let mut out = self.clone();
        for (k, v) in &over.fields {
            out.fields.insert(k.clone(), v.clone());
        }
        out
    }

    /// Sets a field (not checked here: [`Details::stored`] checks every field).
    pub fn set(&mut self, name: &str, value: Value) {
        self.fields.insert(name.to_owned(), value);
    }

    /// The form stored for an action whose act is `act`: every field checked against its
    /// rule and every string cleaned ([`clean_text`], at the field's limit); the act scrubbed
    /// as it is hashed, then redacted (see the module docs). What redaction found is added to
    /// `security`.
    ///
    /// # Errors
    /// A field that is not one of [`FIELDS`] or breaks its rule; an act over
    /// [`MAX_ACT_BYTES`] or beyond canonical JSON's limits.
    pub fn stored(
        &self,
        act: Option<&Value>,
        security: &mut Security,
    ) -> Result<Details, DetailError> {
        let mut fields = BTreeMap::new();
        for (name, value) in &self.fields {
            let f = field(name).ok_or_else(|| broken(name.as_str(), "is not a detail field"))?;
            check_field(f.name, f.rule, value)?;
            let cleaned = match (f.rule, value) {
                (FieldRule::Text(max), Value::String(s)) => {
                    Value::String(clean_text(s, max, security))
                }
                (FieldRule::List { units, .. }, Value::Array(items)) => Value::Array(
                    items
                        .iter()
                        .map(|i| match i {
                            Value::String(s) => Value::String(clean_text(s, units, security)),
                            other => other.clone(),
                        })
                        .collect(),
                ),
                (FieldRule::Integer { .. }, Value::Number(n)) => Value::Number(*n + 0.0),
                (_, other) => other.clone(),
            };
            fields.insert(name.clone(), cleaned);
        }
        let (act, act_redacted) = match act {
            None => (None, false),
            Some(act) => {
                // What the scrub and the redaction replace is counted once, on the act as
                // sent (the scrub's own masks are the reference's secret shapes).
                redact_act(act, security);
                let scrubbed = scrub_act(act);
                if keys_confidential(&scrubbed) {
                    security.findings += 1;
                    security.categories.insert("confidential_identifier");
                    (None, true)
                } else {
                    let cleaned = redact_act(&scrubbed, &mut Security::default());
                    let redacted = cleaned != scrubbed;
                    (Some(cleaned), redacted)
                }
            }
        };
        if let Some(a) = &act {
            canonical::check(a).map_err(|e| broken("act", format!("cannot be stored: {e}")))?;
            let bytes = canonical::to_canonical_unchecked(a).len();
            if bytes > MAX_ACT_BYTES {
                return Err(broken(
                    "act",
                    format!(
                        "exceeds max size of {MAX_ACT_BYTES} bytes of canonical JSON ({bytes})"
                    ),
                ));
            }
        }
        Ok(Details {
            fields,
            act,
            act_redacted,
        })
    }

    /// The `details` object of `action.json`: the fields given, `act` when stored and
    /// `act_redacted: true` when redacted.
    pub fn to_value(&self) -> Value {
        let mut map = self.fields.clone();
        if let Some(a) = &self.act {
            map.insert("act".into(), a.clone());
        }
        if self.act_redacted {
            map.insert("act_redacted".into(), Value::Bool(true));
        }
        Value::Object(map.into())
    }

    /// Reads the `details` object of a record: only [`FIELDS`], `act` (an object) and
    /// `act_redacted` (only `true`), each keeping its rule. Redaction and the act's hash are
    /// `verify`'s ([`Details::problems`]).
    ///
    /// # Errors
    /// The first rule broken.
    pub fn from_record(value: &Value) -> Result<Details, DetailError> {
        let Value::Object(map) = value else {
            return Err(broken("details", "must be an object"));
        };
        let mut details = Details::default();
        for (k, v) in map {
            match k.as_str() {
                "act" => match v {
                    Value::Object(_) => details.act = Some(v.clone()),
                    _ => return Err(broken("act", "must be an object")),
                },
                "act_redacted" => match v {
                    Value::Bool(true) => details.act_redacted = true,
                    _ => return Err(broken("act_redacted", "must be true when present")),
                },
                name => {
                    let f = field(name).ok_or_else(|| broken(name, "is not a detail field"))?;
                    check_field(f.name, f.rule, v)?;
                    if let FieldRule::Text(_) | FieldRule::List { .. } = f.rule
                        && text_values(v).any(|s| s.contains('\0'))
                    {
                        return Err(broken(name, "must not contain NUL"));
                    }
                    details.fields.insert(name.to_owned(), v.clone());
                }
            }
        }
        if let Some(a) = &details.act {
            let bytes = canonical::to_canonical_unchecked(a).len();
            if bytes > MAX_ACT_BYTES {
                return Err(broken(
                    "act",
                    format!("exceeds max size of {MAX_ACT_BYTES} bytes of canonical JSON"),
                ));
            }
        }
        Ok(details)
    }

    /// What `verify` finds wrong with stored details of an action whose act hash is
    /// `act_content_hash`: the act not bound to its hash ([`Problem::ActUnbound`]) and text the
    /// redaction would still change ([`Problem::Unredacted`]).
    pub fn problems(&self, act_content_hash: Option<&str>) -> Vec<Problem> {
        let mut out = Vec::new();
        match (&self.act, self.act_redacted) {
            (Some(act), false) => {
                if super::act_content_hash(Some(act)).as_deref() != act_content_hash {
                    out.push(Problem::ActUnbound(
                        "the stored act does not hash to act_content_hash",
                    ));
                }
            }
            (Some(act), true) => {
                if !text_values(act).any(|s| s.contains(REDACTED)) {
                    out.push(Problem::ActUnbound(
                        "act_redacted is set but the stored act shows no [REDACTED]",
                    ));
                }
            }
            (None, _) => {}
        }
        if (self.act.is_some() || self.act_redacted) && act_content_hash.is_none() {
            out.push(Problem::ActUnbound(
                "an act is stored for an action without act_content_hash",
            ));
        }
        let mut security = Security::default();
        if let Some(act) = &self.act
            && (redact_act(act, &mut security) != *act || keys_confidential(act))
        {
            out.push(Problem::Unredacted("act"));
        }
        for f in FIELDS {
            let Some(v) = self.fields.get(f.name) else {
                continue;
            };
            let max = match f.rule {
                FieldRule::Text(max) => max,
                FieldRule::List { units, .. } => units,
                _ => continue,
            };
            if text_values(v).any(|s| clean_text(s, max, &mut security) != s) {
                out.push(Problem::Unredacted(f.name));
            }
        }
        out
    }
}

/// Whether `name` is one of [`REPORT_FIELDS`].
pub fn is_report_field(name: &str) -> bool {
    REPORT_FIELDS.contains(&name)
}

/// The detail columns of the reference's action row for an action with `details` (`None`:
/// a record written before details existed, or without them): every field of [`FIELDS`] by
/// its name, as stored, `null` when not given (an array field `[]`, as the reference's row
/// never holds `null` there), then `act` (the stored act or `null`) and `act_redacted`. No
/// default is invented: `reversible` is `null`, not the reference's `true`, when the creator
/// did not say.
pub fn row_fields(details: Option<&Details>) -> Vec<(&'static str, Value)> {
    let mut out: Vec<(&'static str, Value)> = FIELDS
        .iter()
        .map(|f| {
            let v = details.and_then(|d| d.get(f.name)).cloned();
            let v = match (v, f.rule) {
                (Some(v), _) => v,
                (None, FieldRule::List { .. }) => Value::Array(Vec::new()),
                (None, _) => Value::Null,
            };
            (f.name, v)
        })
        .collect();
    out.push((
        "act",
        details
            .and_then(Details::act)
            .cloned()
            .unwrap_or(Value::Null),
    ));
    out.push((
        "act_redacted",
        Value::Bool(details.is_some_and(Details::act_redacted)),
    ));
    out
}

/// What `verify` finds wrong with stored [`Details`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The stored act is not bound to `act_content_hash` (rule `finality-act-unbound`).
    ActUnbound(&'static str),
    /// The field holds text the redaction would change (rule `privacy`).
    Unredacted(&'static str),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::ActUnbound(why) => f.write_str(why),
            Problem::Unredacted(field) => write!(
                f,
                "details.{field} holds an unredacted secret or confidential identifier"
            ),
        }
    }
}

/// The ledger's redaction of an act's strings: [`clean_text`] (without a length limit) of
/// each run between NUL characters, which are kept (an act's NUL is no secret, and removing it
/// would change the act without showing a `[REDACTED]`). A fixed point, as `clean_text` is.
fn redact_act(value: &Value, security: &mut Security) -> Value {
    match value {
        Value::String(s) => Value::String(
            s.split('\0')
                .map(|piece| clean_text(piece, usize::MAX, security))
                .collect::<Vec<_>>()
                .join("\0"),
        ),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| redact_act(v, security)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), redact_act(v, security)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Every string in `value`, depth first.
fn text_values(value: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match value {
        Value::String(s) => Box::new(std::iter::once(s.as_str())),
        Value::Array(items) => Box::new(items.iter().flat_map(text_values)),
        Value::Object(map) => Box::new(map.values().flat_map(text_values)),
        _ => Box::new(std::iter::empty()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;
    use crate::finality::*;
    use crate::finding::Rule;
    use proptest::prelude::*;

    fn body(text: &str) -> BTreeMap<String, Value> {
        canonical::parse(text).unwrap().as_object().unwrap().clone()
    }

    /// Each kind of rule refuses what breaks it with the reference's message, naming the field
    /// (and the item); every broken field is reported, in the table's order; `null` is absent.
    #[test]
    fn requests_breaking_a_rule_are_refused_naming_the_field_and_the_rule() {
        let long = |n: usize| format!("\"{}\"", "x".repeat(n));
        let cases: Vec<(String, &str)> = vec![
            (
                r#"{"declared_goal":7}"#.into(),
                "declared_goal must be a string",
            ),
            (
                format!(r#"{{"declared_goal":{}}}"#, long(2001)),
                "declared_goal exceeds max length of 2000",
            ),
            (
                format!(r#"{{"reasoning":{}}}"#, long(4001)),
                "reasoning exceeds max length of 4000",
            ),
            (
                r#"{"risk_score":"high"}"#.into(),
                "risk_score must be an integer",
            ),
            (
                r#"{"risk_score":50.5}"#.into(),
                "risk_score must be an integer",
            ),
            (r#"{"risk_score":101}"#.into(), "risk_score must be <= 100"),
            (r#"{"risk_score":-1}"#.into(), "risk_score must be >= 0"),
            (r#"{"confidence":1000}"#.into(), "confidence must be <= 100"),
            (
                r#"{"reversible":"yes"}"#.into(),
                "reversible must be a boolean",
            ),
            (r#"{"reversible":1}"#.into(), "reversible must be a boolean"),
            (
                r#"{"systems_touched":"github"}"#.into(),
                "systems_touched must be an array",
            ),
            (
                r#"{"systems_touched":["github",3]}"#.into(),
                "systems_touched[1] must be a string",
            ),
            (
                format!(r#"{{"systems_touched":["a",{}]}}"#, long(501)),
                "systems_touched[1] exceeds max length of 500",
            ),
            (
                format!(r#"{{"systems_touched":[{}]}}"#, vec!["\"s\""; 51].join(",")),
                "systems_touched exceeds max items of 50",
            ),
            (
                format!(r#"{{"assumptions":[{}]}}"#, vec!["\"a\""; 21].join(",")),
                "assumptions exceeds max items of 20",
            ),
            (
                format!(r#"{{"idempotency_key":{}}}"#, long(257)),
                "idempotency_key exceeds max length of 256",
            ),
            (
                r#"{"cost_estimate":"1"}"#.into(),
                "cost_estimate must be a number",
            ),
            (
                r#"{"cost_estimate":10000.5}"#.into(),
                "cost_estimate must be <= 10000",
            ),
            (
                r#"{"tokens_in":10000001}"#.into(),
                "tokens_in must be <= 10000000",
            ),
        ];
        for (text, want) in cases {
            let errors = Details::from_request(&body(&text)).unwrap_err();
            let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
            assert_eq!(got, vec![want.to_owned()], "{text}");
        }
        // Characters are UTF-16 code units: 1,000 emoji are 2,000 units, one more is over.
        let emoji = |n: usize| format!(r#"{{"declared_goal":"{}"}}"#, "😀".repeat(n));
        assert!(Details::from_request(&body(&emoji(1000))).is_ok());
        assert!(Details::from_request(&body(&emoji(1001))).is_err());
        let all = Details::from_request(&body(
            r#"{"risk_score":101,"declared_goal":1,"reversible":null,"other":"kept out"}"#,
        ))
        .unwrap_err();
        assert_eq!(
            all.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "declared_goal must be a string",
                "risk_score must be <= 100"
            ]
        );
        let ok = Details::from_request(&body(
            r#"{"declared_goal":"ship it","risk_score":0,"reversible":false,"systems_touched":[],"action_type":"deploy"}"#,
        ))
        .unwrap();
        assert_eq!(ok.text("declared_goal"), Some("ship it"));
        assert_eq!((ok.risk_score(), ok.reversible()), (Some(0), Some(false)));
        assert_eq!(ok.get("action_type"), None, "not a detail field");
    }

    fn full() -> Details {
        Details::from_request(&body(
            r#"{"declared_goal":"rotate the key token=hunter22","risk_score":80,
                "systems_touched":["github","/home/alice/secrets"],"reversible":false,
                "reasoning":"the old one leaked","idempotency_key":"idem-1",
                "assumptions":["staging is clear"]}"#,
        ))
        .unwrap()
    }

    /// A created action keeps its details and act, redacted, and reads them back; its record
    /// round-trips through the parser, the act hashes to act_content_hash, and verify is clean.
    #[test]
    fn details_are_stored_redacted_and_read_back() {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let mut n = new_action(ACTION);
        n.act = Some(Value::object([
            ("kind", Value::str("shell")),
            ("command", Value::str("deploy --token=abcdef123456 prod")),
        ]));
        n.details = Some(full());
        let written = create_action(&store, &opts, &n, at(BASE)).unwrap();
        let d = written.value.details.clone().unwrap();
        assert_eq!(
            d.text("declared_goal"),
            Some("rotate the key token=[REDACTED]")
        );
        assert_eq!(d.list("systems_touched"), ["github", "[REDACTED]"]);
        assert_eq!(d.risk_score(), Some(80));
        assert_eq!(d.reversible(), Some(false));
        assert_eq!(
            d.act()
                .and_then(|a| a.get("command"))
                .and_then(Value::as_str),
            Some("deploy --token=[REDACTED] prod")
        );
        assert!(!d.act_redacted(), "the reference's scrub alone masked it");
        assert_eq!(
            act_content_hash(d.act()),
            written.value.act_content_hash,
            "bound to its hash"
        );
        let state = show(&store, "refs/heads/main", ACTION).unwrap();
        assert_eq!(state.action, written.value);
        let id = ActionId::parse(ACTION).unwrap();
        assert_eq!(
            parse_action(&state.action.to_bytes(), &id).unwrap(),
            state.action
        );
        let text = String::from_utf8(state.action.to_bytes()).unwrap();
        assert!(
            !text.contains("hunter22") && !text.contains("abcdef123456") && !text.contains("alice")
        );
        let tip = store.tip("refs/heads/main").unwrap();
        assert_eq!(verify(&store.snapshot(tip).unwrap()).unwrap(), vec![]);
        // A retry with other details is another binding.
        let mut other = n.clone();
        other
            .details
            .as_mut()
            .unwrap()
            .set("risk_score", Value::from(81));
        assert_eq!(
            create_action(&store, &opts, &other, at(BASE))
                .unwrap_err()
                .code(),
            "ACTION_EXISTS"
        );
        assert_eq!(
            create_action(&store, &opts, &n, at(BASE)).unwrap().commit,
            None
        );
    }

    /// An act the ledger's own redaction changes beyond the reference's scrub is stored
    /// redacted and flagged; one with a confidential key is not stored; an act over the size
    /// limit is refused and nothing is written.
    #[test]
    fn acts_are_redacted_flagged_or_refused() {
        // What the reference's scrub masks is counted, though the stored act is the hashed one.
        let mut sec = Security::default();
        let masked = Value::object([
            ("kind", Value::str("shell")),
            ("command", Value::str("deploy token=abc123")),
        ]);
        let d = Details::default().stored(Some(&masked), &mut sec).unwrap();
        assert!(!d.act_redacted());
        assert_eq!(
            (
                sec.findings,
                sec.categories.iter().copied().collect::<Vec<_>>()
            ),
            (1, vec!["secret"])
        );
        let mut sec = Security::default();
        let act = Value::object([
            ("kind", Value::str("http")),
            ("url", Value::str("http://10.0.0.7:8080/deploy")),
        ]);
        let d = Details::default().stored(Some(&act), &mut sec).unwrap();
        assert!(d.act_redacted());
        assert_eq!(
            d.act().and_then(|a| a.get("url")).and_then(Value::as_str),
            Some(REDACTED)
        );
        assert_eq!(
            sec.categories.iter().copied().collect::<Vec<_>>(),
            ["confidential_identifier"]
        );
        let keyed = Value::object([("/home/alice/x", Value::str("v"))]);
        let d = Details::default().stored(Some(&keyed), &mut sec).unwrap();
        assert_eq!((d.act(), d.act_redacted()), (None, true));
        assert_eq!(d.problems(Some("sha256:x")), vec![]);
        let big = Value::object([
            ("kind", Value::str("file")),
            ("blob", Value::str("a".repeat(MAX_ACT_BYTES))),
        ]);
        let e = Details::default().stored(Some(&big), &mut sec).unwrap_err();
        assert_eq!(e.field, "act");
        assert!(e.rule.starts_with("exceeds max size of 65536 bytes"), "{e}");
        let (_dir, store) = repo();
        let mut n = new_action(ACTION);
        n.act = Some(big);
        n.details = Some(Details::default());
        let e = create_action(&store, &options("refs/heads/main"), &n, at(BASE)).unwrap_err();
        assert_eq!(e.code(), "INVALID_INPUT");
        assert_eq!(
            store.tip("refs/heads/main").unwrap(),
            None,
            "nothing written"
        );
    }

    /// Plants `action.json` of `ACTION` as `edit` leaves the record of a created action with
    /// details; returns the rules verify reports.
    fn planted_rules(edit: impl FnOnce(&mut BTreeMap<String, Value>)) -> Vec<Rule> {
        let (_dir, store) = repo();
        let opts = options("refs/heads/main");
        let mut n = new_action("act_seed");
        n.details = Some(full());
        let seed = create_action(&store, &opts, &n, at(BASE)).unwrap().value;
        let mut value = seed.to_value();
        let Value::Object(map) = &mut value else {
            unreachable!()
        };
        let mut m: BTreeMap<String, Value> =
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        m.insert("action_id".into(), Value::str(ACTION));
        edit(&mut m);
        let bytes = super::super::records::record_bytes(&Value::Object(m.into()));
        let tip = store.tip("refs/heads/main").unwrap();
        let layout = crate::finality::layout::detect(&store.snapshot(tip).unwrap())
            .unwrap()
            .layout;
        let id = ActionId::parse(ACTION).unwrap();
        let path = layout.record_path(&id, RecordKind::Action);
        let index = crate::finality::pending::entry_path(&id, at(BASE));
        let commit = store
            .write_commit_with(
                tip,
                &[(path, bytes), (index, Vec::new())],
                &[],
                true,
                "plant",
                &sig(),
            )
            .unwrap();
        let snap = store.snapshot(Some(commit)).unwrap();
        let mut rules: Vec<Rule> = verify(&snap).unwrap().into_iter().map(|f| f.rule).collect();
        rules.dedup();
        // The pre-receive hook's check of the push that adds it finds the same.
        let report = crate::verify::verify_range(&store, tip, commit).unwrap();
        let mut pushed: Vec<Rule> = report.findings.iter().map(|f| f.rule).collect();
        pushed.dedup();
        assert_eq!(pushed, rules, "the hook's range check");
        rules
    }

    fn details_of(m: &mut BTreeMap<String, Value>) -> &mut BTreeMap<String, Value> {
        match m.get_mut("details") {
            Some(Value::Object(d)) => d,
            _ => unreachable!(),
        }
    }

    /// Records whose details break a rule, whose act is not bound to its hash, or whose text
    /// is unredacted are reported with their rules (so the hook refuses them); an untouched
    /// copy is clean.
    #[test]
    fn verify_reports_details_breaking_their_rules() {
        assert_eq!(planted_rules(|_| {}), vec![]);
        type Edit = fn(&mut BTreeMap<String, Value>);
        let cases: [(&str, Edit, Rule); 9] = [
            (
                "risk out of range",
                |m| {
                    details_of(m).insert("risk_score".into(), Value::from(101));
                },
                Rule::FinalityDetailInvalid,
            ),
            (
                "unknown field",
                |m| {
                    details_of(m).insert("mood".into(), Value::str("x"));
                },
                Rule::FinalityDetailInvalid,
            ),
            (
                "goal too long",
                |m| {
                    details_of(m).insert("declared_goal".into(), Value::str("g".repeat(2001)));
                },
                Rule::FinalityDetailInvalid,
            ),
            (
                "act_redacted false",
                |m| {
                    details_of(m).insert("act_redacted".into(), Value::Bool(false));
                },
                Rule::FinalityDetailInvalid,
            ),
            (
                "details not an object",
                |m| {
                    m.insert("details".into(), Value::Array(vec![]));
                },
                Rule::FinalityDetailInvalid,
            ),
            (
                "another act",
                |m| {
                    details_of(m).insert(
                        "act".into(),
                        Value::object([
                            ("kind", Value::str("shell")),
                            ("command", Value::str("rm -rf /")),
                        ]),
                    );
                },
                Rule::FinalityActUnbound,
            ),
            (
                "redacted flag without a redaction",
                |m| {
                    details_of(m).insert("act_redacted".into(), Value::Bool(true));
                },
                Rule::FinalityActUnbound,
            ),
            (
                "act without a hash",
                |m| {
                    m.insert("act_content_hash".into(), Value::Null);
                },
                Rule::FinalityActUnbound,
            ),
            (
                "unredacted goal",
                |m| {
                    details_of(m)
                        .insert("declared_goal".into(), Value::str("use password=hunter22"));
                },
                Rule::Privacy,
            ),
        ];
        for (what, edit, rule) in cases {
            assert_eq!(planted_rules(edit), vec![rule], "{what}");
        }
    }

    proptest! {
        #![proptest_config(crate::tests::prop_support::config(64))]

        /// Whatever text a creator sends within the limits, the stored details keep every
        /// rule, are a fixed point of the redaction (verify finds nothing) and round-trip
        /// through the record's parser.
        #[test]
        fn stored_details_keep_their_rules_and_are_fixed_points(
            goal in "(token=[a-z0-9]{1,8} |Bearer [a-z]{3,9} |/home/[a-z]{1,5} |10\\.0\\.0\\.[0-9] |[a-zA-Z ]{0,12}|\u{0}){0,12}",
            systems in proptest::collection::vec("[a-z/\\.0-9]{0,20}", 0..5),
            risk in 0i64..=100,
            reversible in any::<bool>(),
        ) {
            let mut d = Details::default();
            d.set("declared_goal", Value::str(goal.as_str()));
            d.set("systems_touched", Value::Array(systems.iter().map(|s| Value::str(s.as_str())).collect()));
            d.set("risk_score", Value::from(risk));
            d.set("reversible", Value::Bool(reversible));
            let act = Value::object([("kind", Value::str("shell")), ("command", Value::str(goal.as_str()))]);
            let stored = d.stored(Some(&act), &mut Security::default()).unwrap();
            let hash = act_content_hash(Some(&scrub_act(&act)));
            prop_assert_eq!(stored.problems(hash.as_deref()), vec![]);
            let back = Details::from_record(&stored.to_value()).unwrap();
            prop_assert_eq!(&back, &stored);
            let again = stored.stored(None, &mut Security::default()).unwrap();
            prop_assert_eq!(again.text("declared_goal"), stored.text("declared_goal"));
        }
    }
}
