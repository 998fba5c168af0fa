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
//! The act is stored as hashed ([`scrub_act`](super::scrub_act)): `act_content_hash` is the
//! hash of exactly the stored `act`, and `verify` recomputes it (`finality-act-unbound`). When
//! the ledger's own redaction would change the scrubbed act further (a string holding a
//! confidential identifier such as a home path or a private address, or a secret shape outside
//! the fields the reference's scrub masks), the stored act is the redacted one and carries
//! `act_redacted: true`: its hash cannot be recomputed (the claim still binds the full act by
//! `act_content_hash`), and `verify` requires it to be a fixed point of the redaction that shows
//! a `[REDACTED]`. An act with a confidential object key is not stored at all (`act_redacted:
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
use super::redaction::{REDACTED, Security, clean_text, clean_value, keys_confidential};
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
        let mut errors = Vec::new();
        let mut fields = BTreeMap::new();
        for f in FIELDS {
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
                let scrubbed = scrub_act(act);
                if keys_confidential(&scrubbed) {
                    security.findings += 1;
                    security.categories.insert("confidential_identifier");
                    (None, true)
                } else {
                    let cleaned = clean_value(&scrubbed, security);
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
            && (clean_value(act, &mut security) != *act || keys_confidential(act))
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
        details.and_then(Details::act).cloned().unwrap_or(Value::Null),
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

/// Every string in `value`, depth first.
fn text_values(value: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match value {
        Value::String(s) => Box::new(std::iter::once(s.as_str())),
        Value::Array(items) => Box::new(items.iter().flat_map(text_values)),
        Value::Object(map) => Box::new(map.values().flat_map(text_values)),
        _ => Box::new(std::iter::empty()),
    }
}
