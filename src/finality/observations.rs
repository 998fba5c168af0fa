//! A sweeper's memory of when, on its own clock, it first saw each action pending
//! ([`Observations`], the two-phase rule of [`super::sweep`](mod@super::sweep)), and the file
//! that keeps it between runs.
//!
//! The file lives in the local repository's git directory, never in the ledger:
//! `action-ledger/sweep-observations-<16 hex>.json`, one per target (the hex digits are the
//! first 8 bytes of the SHA-256 of `local\0<ref>` or `remote\0<url>\0<ref>`, so no URL or
//! credential appears in the name). The CLI's `sweep` and `action create` and `serve` on the
//! same repository and target share it, so they share sightings. It is replaced atomically
//! ([`crate::durable::replace_file`]); two writers racing on it lose at most the sightings of
//! one of them, which delays a sweep by one timeout and never brings one forward. Its content
//! is canonical JSON plus a newline: `{"schema":"action-ledger.sweep-observations",
//! "schema_version":1,"seen":{"<action id>":"<time>"}}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::ids::ActionId;
use crate::canonical::{self, Value};
use crate::store::remote::Target;
use crate::time::Timestamp;

/// `schema` of a serialised [`Observations`].
pub const OBSERVATIONS_SCHEMA: &str = "action-ledger.sweep-observations";

/// Why serialised [`Observations`] could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "sweep observations are not valid ({reason}): remove the file; the next sweep observes again, delaying sweeps by one timeout"
)]
pub struct ObservationsError {
    /// What is wrong.
    pub reason: String,
}

/// A sweeper's memory: when, on its own clock, it first saw each action pending. The sweep adds
/// the actions it sees for the first time and forgets those no longer pending; an action is
/// swept only once [`timed_out`](super::sweep::timed_out) since its sighting. Lost or empty, it delays sweeps by one
/// timeout and never advances one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observations {
    seen: BTreeMap<ActionId, Timestamp>,
}

impl Observations {
    /// No sightings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that this sweeper's own process created (or saw) action `id` at `at` on the
    /// sweeper's clock. An earlier sighting is kept.
    pub fn witness(&mut self, id: ActionId, at: Timestamp) {
        let e = self.seen.entry(id).or_insert(at);
        *e = (*e).min(at);
    }

    /// The sighting of `id` at `now`: the remembered one, or `now` when there is none. A
    /// remembered sighting in the sweeper's future (its clock stepped back) is moved to `now`.
    pub fn observe(&mut self, id: &ActionId, now: Timestamp) -> Timestamp {
        let e = self.seen.entry(id.clone()).or_insert(now);
        *e = (*e).min(now);
        *e
    }

    /// When `id` was first seen, if it was.
    pub fn first_seen(&self, id: &ActionId) -> Option<Timestamp> {
        self.seen.get(id).copied()
    }

    /// Forgets `id` (settled here: it can no longer be swept).
    pub fn forget(&mut self, id: &ActionId) {
        self.seen.remove(id);
    }

    /// Forgets every action `keep` refuses (those no longer pending).
    pub fn retain(&mut self, mut keep: impl FnMut(&ActionId) -> bool) {
        self.seen.retain(|id, _| keep(id));
    }

    /// How many actions are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Adds the sightings of `other`, keeping the earlier of two.
    pub fn merge(&mut self, other: &Observations) {
        for (id, at) in &other.seen {
            self.witness(id.clone(), *at);
        }
    }

    /// Canonical JSON plus `"\n"`: `{"schema","schema_version":1,"seen":{id: time}}`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let seen = Value::object(
            self.seen
                .iter()
                .map(|(id, at)| (id.as_str().to_owned(), Value::str(super::format_time(*at)))),
        );
        let v = Value::object([
            ("schema", Value::str(OBSERVATIONS_SCHEMA)),
            ("schema_version", Value::from(1)),
            ("seen", seen),
        ]);
        let mut out = canonical::to_canonical_unchecked(&v).into_bytes();
        out.push(b'\n');
        out
    }

    /// Reads what [`Observations::to_bytes`] wrote.
    ///
    /// # Errors
    /// [`ObservationsError`] naming the first rule broken.
    pub fn parse(bytes: &[u8]) -> Result<Self, ObservationsError> {
        let bad = |reason: &str| ObservationsError {
            reason: reason.to_owned(),
        };
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
        let v = canonical::parse(text).map_err(|_| bad("not JSON"))?;
        let m = v.as_object().ok_or_else(|| bad("not an object"))?;
        if m.get("schema").and_then(Value::as_str) != Some(OBSERVATIONS_SCHEMA)
            || m.get("schema_version").and_then(Value::as_f64) != Some(1.0)
        {
            return Err(bad(
                "schema must be action-ledger.sweep-observations version 1",
            ));
        }
        let seen = m
            .get("seen")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("seen must be an object"))?;
        let mut out = Observations::new();
        for (id, at) in seen {
            let id = ActionId::parse(id).ok_or_else(|| bad("seen: a key is not an action id"))?;
            let at = at
                .as_str()
                .and_then(super::parse_time)
                .ok_or_else(|| bad("seen: a value is not a time"))?;
            out.witness(id, at);
        }
        Ok(out)
    }
}

/// Where the sightings for `target` (and, for a local target, `ref_name`) are kept in the
/// repository whose git directory is `git_dir`.
pub fn file_path(git_dir: &Path, ref_name: &str, target: &Target) -> PathBuf {
    let key = match target {
        Target::Local => format!("local\0{ref_name}"),
        Target::Remote { url, ref_name, .. } => format!("remote\0{url}\0{ref_name}"),
    };
    let digest = hex::encode(&Sha256::digest(key.as_bytes())[..8]);
    git_dir
        .join("action-ledger")
        .join(format!("sweep-observations-{digest}.json"))
}

/// Why the sightings file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file exists but could not be read.
    #[error("cannot read them ({0}): sweeps wait one more timeout")]
    Io(std::io::ErrorKind),
    /// The file holds something else.
    #[error(transparent)]
    Invalid(#[from] ObservationsError),
}

/// The sightings kept at `path`; none when the file does not exist.
///
/// # Errors
/// [`LoadError`]: the caller says so and goes on with none (a delay, never an early sweep).
pub fn load(path: &Path) -> Result<Observations, LoadError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Observations::parse(&bytes)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Observations::new()),
        Err(e) => Err(LoadError::Io(e.kind())),
    }
}

/// Replaces the file at `path` with `observations`, creating its directory.
///
/// # Errors
/// The I/O error; the caller says so and goes on (a lost sighting only delays a sweep).
pub fn save(path: &Path, observations: &Observations) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::durable::replace_file(path, &observations.to_bytes(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::finality::test_support::*;

    /// The sightings' bytes round-trip; every broken rule is refused by name.
    #[test]
    fn observations_round_trip_and_refuse_bad_bytes() {
        let mut o = witnessed("act_a", at(BASE));
        o.witness(
            ActionId::parse("act_b").unwrap(),
            at(BASE).saturating_add_millis(1),
        );
        let bytes = o.to_bytes();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            "{\"schema\":\"action-ledger.sweep-observations\",\"schema_version\":1,\"seen\":{\"act_a\":\"2026-03-01T12:00:00.000Z\",\"act_b\":\"2026-03-01T12:00:00.001Z\"}}\n"
        );
        assert_eq!(Observations::parse(&bytes).unwrap(), o);
        for (bad, why) in [
            (&b"\xff"[..], "not UTF-8"),
            (b"{", "not JSON"),
            (b"[]", "not an object"),
            (b"{\"schema\":\"x\",\"schema_version\":1,\"seen\":{}}", "schema must"),
            (
                b"{\"schema\":\"action-ledger.sweep-observations\",\"schema_version\":1}",
                "seen must be an object",
            ),
            (
                b"{\"schema\":\"action-ledger.sweep-observations\",\"schema_version\":1,\"seen\":{\"a b\":\"2026-03-01T12:00:00.000Z\"}}",
                "not an action id",
            ),
            (
                b"{\"schema\":\"action-ledger.sweep-observations\",\"schema_version\":1,\"seen\":{\"act_a\":\"soon\"}}",
                "not a time",
            ),
        ] {
            let e = Observations::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    /// The file: absent is empty, saved is loaded back, a bad one is an error naming the rule;
    /// the name holds no URL and differs per target and ref.
    #[test]
    fn the_file_round_trips_and_names_no_url() {
        let dir = tempfile::tempdir().unwrap();
        let remote = Target::Remote {
            url: "https://user:secret@host/o/r.git".into(),
            ref_name: "refs/heads/main".into(),
            timeout: None,
        };
        let local = file_path(dir.path(), "refs/heads/main", &Target::Local);
        let other = file_path(dir.path(), "refs/heads/other", &Target::Local);
        let far = file_path(dir.path(), "refs/heads/main", &remote);
        assert!(local != other && local != far && other != far);
        assert!(!far.display().to_string().contains("secret"));
        assert!(load(&local).unwrap().is_empty());
        let o = witnessed("act_a", at(BASE));
        save(&local, &o).unwrap();
        assert_eq!(load(&local).unwrap(), o);
        std::fs::write(&local, b"{").unwrap();
        assert!(load(&local).unwrap_err().to_string().contains("not JSON"));
    }
}
