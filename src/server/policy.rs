//! The guard policy of `serve`: an ordered list of rules, the first that matches decides, else
//! the default verdict.
//!
//! ```json
//! {
//!   "default": "allow",
//!   "rules": [
//!     {"id": "deploys", "action_type": "deploy", "verdict": "require_approval",
//!      "reason": "deploys need an operator"},
//!     {"id": "no-sql", "act_kind": "sql", "agent_id": "intern-bot", "verdict": "block"},
//!     {"id": "sandbox", "act_kind": "file", "verdict": "allow_contained",
//!      "containment_ref": "sandbox/main"}
//!   ]
//! }
//! ```
//!
//! A rule matches when every matcher it names (`action_type`, `act_kind` — the `kind` of the
//! act — and `agent_id`) equals the request's value exactly; a rule without matchers matches
//! everything. This is deliberately all there is: risk scores, signals, rate limits and the other
//! inputs of the reference's policy engine are out of scope.

use std::path::Path;

use crate::canonical::{self, Value};
use crate::finality::{MAX_ID_UNITS, Verdict};

/// Why a policy file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read the policy file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file breaks a rule.
    #[error("policy {path}: {field}: {reason}")]
    Invalid {
        /// The file.
        path: String,
        /// The field (`rules[2].verdict`, …).
        field: String,
        /// Which rule, and what to write instead.
        reason: String,
    },
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its id (recorded with every decision it makes); `rule-N` (1-based) when not given.
    pub id: String,
    /// Matches this action type only.
    pub action_type: Option<String>,
    /// Matches acts of this kind only (`shell`, `http`, `sql`, `file`, …).
    pub act_kind: Option<String>,
    /// Matches this agent only.
    pub agent_id: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why (shown to the caller, recorded with the decision).
    pub reason: Option<String>,
    /// For `allow_contained`: the containment the action runs in.
    pub containment_ref: Option<String>,
}

/// The policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The rules, in order.
    pub rules: Vec<Rule>,
    /// The verdict when no rule matches (not `allow_contained`, which needs a containment).
    pub default: Verdict,
}

impl Default for Policy {
    /// No rules; everything is allowed.
    fn default() -> Policy {
        Policy {
            rules: Vec::new(),
            default: Verdict::Allow,
        }
    }
}

/// What the policy decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The verdict.
    pub verdict: Verdict,
    /// The matching rule's id; `None` for the default.
    pub rule: Option<String>,
    /// The rule's reason, or a description of the default.
    pub reason: Option<String>,
    /// For `allow_contained`.
    pub containment_ref: Option<String>,
}

fn id_text(value: &str, field: &str) -> Result<String, String> {
    match crate::privacy::machine_text(value, field, MAX_ID_UNITS) {
        Ok(t) if t == value => Ok(t),
        Ok(_) => Err("has surrounding whitespace".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Policy {
    /// Parses a policy document (`path` only names it in errors).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the field: not a JSON object, unknown keys, a verdict that is
    /// not `allow`, `warn`, `block`, `require_approval` or `allow_contained`, an
    /// `allow_contained` rule without `containment_ref` (or a `containment_ref` on another
    /// verdict), a matcher or id that is not privacy-safe machine text, duplicate rule ids, an
    /// `allow_contained` default.
    pub fn parse(text: &str, path: &str) -> Result<Policy, Error> {
        let invalid = |field: String, reason: String| Error::Invalid {
            path: path.to_owned(),
            field,
            reason,
        };
        let value =
            canonical::parse(text).map_err(|e| invalid("(document)".into(), e.to_string()))?;
        let map = value
            .as_object()
            .ok_or_else(|| invalid("(document)".into(), "must be a JSON object".into()))?;
        if let Some(k) = map
            .keys()
            .find(|k| !matches!(k.as_str(), "default" | "rules"))
        {
            return Err(invalid(
                k.clone(),
                "unknown key (expected default, rules)".into(),
            ));
        }
        let verdict_of = |v: &Value, field: String| -> Result<Verdict, Error> {
            v.as_str().and_then(Verdict::parse).ok_or_else(|| {
                invalid(
                    field,
                    "must be one of allow, warn, block, require_approval, allow_contained".into(),
                )
            })
        };
        let default = match map.get("default") {
            None => Verdict::Allow,
            Some(v) => verdict_of(v, "default".into())?,
        };
        if default == Verdict::AllowContained {
            return Err(invalid(
                "default".into(),
                "allow_contained needs a containment_ref: give it in a rule".into(),
            ));
        }
        let mut rules = Vec::new();
        let list = match map.get("rules") {
            None => &[][..],
            Some(v) => v
                .as_array()
                .ok_or_else(|| invalid("rules".into(), "must be an array".into()))?,
        };
        for (i, r) in list.iter().enumerate() {
            let at = |k: &str| format!("rules[{i}].{k}");
            let m = r
                .as_object()
                .ok_or_else(|| invalid(format!("rules[{i}]"), "must be an object".into()))?;
            const KEYS: [&str; 7] = [
                "id",
                "action_type",
                "act_kind",
                "agent_id",
                "verdict",
                "reason",
                "containment_ref",
            ];
            if let Some(k) = m.keys().find(|k| !KEYS.contains(&k.as_str())) {
                return Err(invalid(
                    at(k),
                    format!("unknown key (expected {})", KEYS.join(", ")),
                ));
            }
            let text = |k: &str, machine: bool| -> Result<Option<String>, Error> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) if machine => {
                        id_text(s, k).map(Some).map_err(|e| invalid(at(k), e))
                    }
                    Some(Value::String(s)) => {
                        let mut sec = crate::finality::Security::default();
                        let clean = crate::finality::clean_text(
                            s,
                            crate::finality::MAX_TEXT_UNITS,
                            &mut sec,
                        );
                        if clean != *s {
                            return Err(invalid(at(k), "must hold no secret or confidential identifier and be at most 4000 characters".into()));
                        }
                        Ok(Some(clean))
                    }
                    Some(_) => Err(invalid(at(k), "must be a string".into())),
                }
            };
            let verdict = verdict_of(
                m.get("verdict")
                    .ok_or_else(|| invalid(at("verdict"), "is required".into()))?,
                at("verdict"),
            )?;
            let containment_ref = text("containment_ref", true)?;
            if (verdict == Verdict::AllowContained) != containment_ref.is_some() {
                return Err(invalid(
                    at("containment_ref"),
                    "is required for allow_contained and only allowed there".into(),
                ));
            }
            let id = text("id", true)?.unwrap_or_else(|| format!("rule-{}", i + 1));
            if rules.iter().any(|x: &Rule| x.id == id) {
                return Err(invalid(at("id"), format!("{id:?} is used twice")));
            }
            rules.push(Rule {
                id,
                action_type: text("action_type", true)?,
                act_kind: text("act_kind", true)?,
                agent_id: text("agent_id", true)?,
                verdict,
                reason: text("reason", false)?,
                containment_ref,
            });
        }
        Ok(Policy { rules, default })
    }

    /// Reads a policy file ([`Policy::parse`]).
    ///
    /// # Errors
    /// [`Error::Read`] and those of [`Policy::parse`].
    pub fn load(path: &Path) -> Result<Policy, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Policy::parse(&text, &path.display().to_string())
    }

    /// The decision for a request.
    pub fn evaluate(
        &self,
        action_type: Option<&str>,
        act_kind: Option<&str>,
        agent_id: Option<&str>,
    ) -> Evaluation {
        let matches = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|w| Some(w) == have)
        };
        for r in &self.rules {
            if matches(&r.action_type, action_type)
                && matches(&r.act_kind, act_kind)
                && matches(&r.agent_id, agent_id)
            {
                return Evaluation {
                    verdict: r.verdict,
                    rule: Some(r.id.clone()),
                    reason: r.reason.clone(),
                    containment_ref: r.containment_ref.clone(),
                };
            }
        }
        Evaluation {
            verdict: self.default,
            rule: None,
            reason: Some(format!("no rule matched: default {}", self.default)),
            containment_ref: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_rule_decides() {
        let p = Policy::parse(
            r#"{"default":"warn","rules":[
                {"id":"deploys","action_type":"deploy","verdict":"require_approval","reason":"needs an operator"},
                {"act_kind":"sql","agent_id":"intern","verdict":"block"},
                {"act_kind":"file","verdict":"allow_contained","containment_ref":"sandbox/main"}]}"#,
            "p.json",
        )
        .unwrap();
        let e = p.evaluate(Some("deploy"), Some("shell"), Some("a"));
        assert_eq!(e.verdict, Verdict::RequireApproval);
        assert_eq!(e.rule.as_deref(), Some("deploys"));
        assert_eq!(
            p.evaluate(Some("query"), Some("sql"), Some("intern"))
                .rule
                .as_deref(),
            Some("rule-2")
        );
        // Every matcher must hold.
        assert_eq!(
            p.evaluate(Some("query"), Some("sql"), Some("senior"))
                .verdict,
            Verdict::Warn
        );
        let c = p.evaluate(None, Some("file"), None);
        assert_eq!(c.containment_ref.as_deref(), Some("sandbox/main"));
        assert_eq!(p.evaluate(None, None, None).rule, None);
        assert_eq!(
            Policy::default().evaluate(None, None, None).verdict,
            Verdict::Allow
        );
    }

    #[test]
    fn refuses_bad_documents_naming_the_field() {
        let cases = [
            ("[]", "(document)"),
            ("{", "(document)"),
            (r#"{"defaults":"allow"}"#, "defaults"),
            (r#"{"default":"maybe"}"#, "default"),
            (r#"{"default":"allow_contained"}"#, "default"),
            (r#"{"rules":{}}"#, "rules"),
            (
                r#"{"rules":[{"verdict":"allow","action":"x"}]}"#,
                "rules[0].action",
            ),
            (r#"{"rules":[{}]}"#, "rules[0].verdict"),
            (
                r#"{"rules":[{"verdict":"allow_contained"}]}"#,
                "rules[0].containment_ref",
            ),
            (
                r#"{"rules":[{"verdict":"allow","containment_ref":"x"}]}"#,
                "rules[0].containment_ref",
            ),
            (
                r#"{"rules":[{"verdict":"allow","action_type":"two words"}]}"#,
                "rules[0].action_type",
            ),
            (
                r#"{"rules":[{"verdict":"allow","agent_id":7}]}"#,
                "rules[0].agent_id",
            ),
            (
                r#"{"rules":[{"verdict":"allow","reason":"token=abcdef0123456789"}]}"#,
                "rules[0].reason",
            ),
            (
                r#"{"rules":[{"id":"a","verdict":"allow"},{"id":"a","verdict":"block"}]}"#,
                "rules[1].id",
            ),
        ];
        for (text, field) in cases {
            let e = Policy::parse(text, "p.json").unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("policy p.json: {field}:")),
                "{text}: {e}"
            );
        }
    }
}
