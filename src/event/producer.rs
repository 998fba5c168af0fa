//! The producer of an event ([`Producer`]): the job that recorded it, as the event's
//! `producer` object persists it (snake_case keys).

use crate::canonical::{self, Value};

/// Who recorded an event: the persisted `producer` object, typed. Validation guarantees every
/// member (machine text, a normalized repository, a positive `run_attempt`), so a stored event
/// always has one; [`Producer::to_value`] gives the object back byte for byte.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Producer {
    /// `component`: `<component>.<step>.<invocation>` as the writer composed it.
    pub component: String,
    /// `job`: `GITHUB_JOB`.
    pub job: String,
    /// `repository`: the normalized `owner/name`.
    pub repository: String,
    /// `run_attempt`: `GITHUB_RUN_ATTEMPT`, at least 1.
    pub run_attempt: i64,
    /// `run_id`: `GITHUB_RUN_ID`.
    pub run_id: String,
    /// `sha`: `GITHUB_SHA`.
    pub sha: String,
    /// `workflow`: the workflow part.
    pub workflow: String,
}

impl Producer {
    /// The persisted object (snake_case keys), as the event's line holds it.
    pub fn to_value(&self) -> Value {
        Value::object([
            ("component", Value::str(&self.component)),
            ("job", Value::str(&self.job)),
            ("repository", Value::str(&self.repository)),
            ("run_attempt", Value::from(self.run_attempt)),
            ("run_id", Value::str(&self.run_id)),
            ("sha", Value::str(&self.sha)),
            ("workflow", Value::str(&self.workflow)),
        ])
    }

    /// The producer in the writer-input shape that [`crate::event::create`] takes (camelCase:
    /// `repository, sha, workflow, job, runId, runAttempt, component`).
    pub fn writer_input(&self) -> Value {
        Value::object([
            ("component", Value::str(&self.component)),
            ("job", Value::str(&self.job)),
            ("repository", Value::str(&self.repository)),
            ("runAttempt", Value::from(self.run_attempt)),
            ("runId", Value::str(&self.run_id)),
            ("sha", Value::str(&self.sha)),
            ("workflow", Value::str(&self.workflow)),
        ])
    }

    /// The persisted object's canonical JSON: the key that groups a spool's events by
    /// producer.
    pub fn canonical(&self) -> String {
        canonical::to_canonical_unchecked(&self.to_value())
    }

    /// The producer of a validated record's `producer` object; `None` when a member is missing
    /// or of another type (validation refuses such a record first).
    pub(super) fn from_value(v: &Value) -> Option<Producer> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(Producer {
            component: text("component")?,
            job: text("job")?,
            repository: text("repository")?,
            run_attempt: v.get("run_attempt").and_then(Value::as_safe_integer)?,
            run_id: text("run_id")?,
            sha: text("sha")?,
            workflow: text("workflow")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_producer_gives_back_its_object_byte_for_byte() {
        let text = r#"{"component":"review.run.default","job":"review","repository":"openclaw/openclaw","run_attempt":2,"run_id":"123","sha":"abc","workflow":"review.yml"}"#;
        let v = canonical::parse(text).unwrap();
        let p = Producer::from_value(&v).unwrap();
        assert_eq!(p.run_attempt, 2);
        assert_eq!(p.canonical(), text);
        assert_eq!(
            canonical::to_canonical_unchecked(&p.writer_input()),
            r#"{"component":"review.run.default","job":"review","repository":"openclaw/openclaw","runAttempt":2,"runId":"123","sha":"abc","workflow":"review.yml"}"#
        );
        let Value::Object(mut m) = v else { panic!() };
        m.insert("run_attempt".into(), Value::str("2"));
        assert_eq!(Producer::from_value(&Value::Object(m)), None);
    }
}
