//! The conformance harness: runs every golden vector produced by the reference implementation.
//!
//! Reads every `*.json` vector file in `$CONFORMANCE_DIR` (default `testdata/conformance`: the
//! hand-picked vectors, the hand-written `empty.json` for jobs that recorded nothing, and the
//! random `fuzz-*.json` cases) and
//! dispatches each case by its shape: identity (`fn`/`args`), event writer (`call`), finalize /
//! direct shard write (`category`), import (`steps`). Inputs are read with their objects' key
//! order ([`read_ordered`]): the reference walks keys in JavaScript's property order, so with
//! several faults the order decides which one is reported. Ends by printing
//! `conformance: N passed, M failed, K skipped, S strict-only refusals` (over both privacy
//! profiles, each also on its own line) and fails when M > 0. A case is skipped only when its
//! input is one of the listed JavaScript-only value kinds ([`JS_ONLY_KINDS`]: a `$special` with
//! no JSON meaning, such as `undefined` or `bigint`, or a string with a lone UTF-16 surrogate);
//! each skip is listed by id with the reason. Anything else the harness does not know (a
//! `$special` kind, an identity `fn`, an event writer `api`, a case shape) is a failure, so that
//! a malformed or new vector cannot pass silently. Error cases must fail for the same reason:
//! our message must contain the reference message (with `<ROOT>`-style placeholders resolved to
//! paths).
//!
//! The vectors describe the reference, so every case runs twice: under the `reference` privacy
//! profile, which must give exactly the reference's outcome, and under the default `strict`
//! profile (writers, sealing and publishing with their default options; accepted direct-write
//! events checked against the strict rules). Strict applies its own rules after every check of
//! the reference, so where the reference refuses, strict must refuse with the reference's
//! message too. Where the reference accepts and strict refuses, the case is a *strict-only
//! refusal*, counted apart and listed by id with the rule, when the message names a strict-only
//! rule id ([`crate::privacy::strict::is_strict_rule_id`]); any other difference fails.

#![cfg(test)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::canonical::{self, Value};
use crate::event::{self, Event};
use crate::identity::{self, ShardIdentity};
use crate::ledger::binding;
use crate::ledger::layout::Layout;
use crate::ledger::shard;
use crate::privacy::Profile;
use crate::publish::{self, ExpectedProducer, Options};
use crate::store::{Signature, Store};
use crate::writer::record;
use crate::writer::seal;
use crate::writer::spool::{self, Spool};

mod projection;

enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
    /// The reference accepted and the strict profile refused by one of its own rules (named):
    /// expected, and counted apart.
    StrictOnly(String),
}

/// The outcome of a refusal where the reference accepted: a strict-only refusal when the
/// profile is strict and the message names a strict-only rule id
/// ([`privacy::strict::is_strict_rule_id`]), a failure otherwise.
fn refused_where_accepted(message: String, profile: Profile) -> Outcome {
    match strict_rule_named(&message) {
        Some(rule) if profile == Profile::Strict => Outcome::StrictOnly(rule),
        _ => Outcome::Fail(format!("refused ({message}), reference accepted")),
    }
}

/// The strict-only rule id a refusal names as `(<id>)`, if any.
fn strict_rule_named(message: &str) -> Option<String> {
    let re = regex::Regex::new(r"\(([a-z0-9-]+:[^\s()]+)\)").expect("regex");
    re.captures_iter(message)
        .map(|c| c[1].to_owned())
        .find(|id| crate::privacy::strict::is_strict_rule_id(id))
}

/// The `$special` kinds of the vectors that stand for JavaScript values with no JSON meaning,
/// each with the reason its cases are skipped: the ledger cannot be handed them. The list covers
/// every kind the mission names among refused identity inputs (non-JSON values: `undefined`,
/// functions, symbols, bigints; cycles; dates, maps and other class instances; array subclasses;
/// sparse or decorated arrays; accessor or non-enumerable properties; symbol keys). A kind not
/// listed here fails as a malformed vector.
const JS_ONLY_KINDS: &[(&str, &str)] = &[
    ("undefined", "`undefined` is a non-JSON value"),
    ("function", "a function is a non-JSON value"),
    ("symbol", "a symbol is a non-JSON value"),
    ("bigint", "a bigint is a non-JSON value"),
    ("cycle", "a cycle cannot be written in JSON"),
    ("date", "a Date is a class instance, which JSON cannot hold"),
    ("class_instance", "a class instance has no JSON form"),
    ("map", "a Map is a class instance, which JSON cannot hold"),
    ("set", "a Set is a class instance, which JSON cannot hold"),
    ("array_subclass", "an array class instance has no JSON form"),
    ("sparse_array", "a sparse array (holes) has no JSON form"),
    (
        "decorated_array",
        "an array with extra own properties has no JSON form",
    ),
    ("accessor_property", "an accessor property has no JSON form"),
    (
        "getter_property",
        "an accessor (getter) property has no JSON form",
    ),
    (
        "setter_property",
        "an accessor (setter) property has no JSON form",
    ),
    (
        "non_enumerable_property",
        "a non-enumerable property has no JSON form",
    ),
    ("symbol_key", "a symbol key has no JSON form"),
];

/// The skip reason of a listed JavaScript-only `$special` kind; none for any other kind.
fn js_only_reason(kind: &str) -> Option<&'static str> {
    JS_ONLY_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, reason)| *reason)
}

/// The elements of `v` when it is an array; none when the vector leaves it out.
fn items(v: &Json) -> impl Iterator<Item = &Json> {
    v.as_array().into_iter().flatten()
}

/// Why a vector value cannot be turned into a ledger value.
#[derive(Debug, thiserror::Error)]
enum Unusable {
    /// A listed JavaScript-only kind (or a lone UTF-16 surrogate): the case is skipped.
    #[error("{0}")]
    JsOnly(String),
    /// The harness does not understand the vector: the case fails.
    #[error("malformed vector value: {0}")]
    Malformed(String),
}

impl From<&str> for Unusable {
    fn from(what: &str) -> Unusable {
        Unusable::Malformed(what.to_owned())
    }
}

/// The outcome of a case whose input cannot be used.
fn unusable(u: Unusable) -> Outcome {
    match u {
        Unusable::JsOnly(reason) => Outcome::Skip(reason),
        malformed => Outcome::Fail(malformed.to_string()),
    }
}

/// Converts a vector value, read with its key order ([`read_ordered`]), to a ledger value. The
/// order matters: the reference walks an object's keys in JavaScript's property order, which
/// decides which of several faults it reports.
fn to_value(j: &Value) -> Result<Value, Unusable> {
    Ok(match j {
        Value::Array(a) => Value::Array(a.iter().map(to_value).collect::<Result<_, _>>()?),
        Value::Object(o) => match o.get("$special").and_then(Value::as_str) {
            None => {
                let members = match o.js_order() {
                    Some(members) => members,
                    None => o.iter().map(|(k, v)| (k.as_str(), v)).collect(),
                };
                Value::Object(
                    members
                        .into_iter()
                        .map(|(k, v)| Ok((k.to_owned(), to_value(v)?)))
                        .collect::<Result<_, Unusable>>()?,
                )
            }
            Some(kind) => special(kind, j)?,
        },
        scalar => scalar.clone(),
    })
}

/// A vector value with its key order: the vector files are read twice, by `serde_json` to find
/// things (it sorts keys) and by the ledger's own reader, which keeps them.
fn read_ordered(text: &str) -> Value {
    canonical::parse_document(text).expect("vector JSON")
}

/// [`to_value`] of a value found through `serde_json` (where key order does not matter: the
/// events a reference output holds).
fn json_to_value(j: &Json) -> Result<Value, Unusable> {
    to_value(&read_ordered(&j.to_string()))
}

fn utf16(units: Option<&Value>) -> Result<String, Unusable> {
    let units: Vec<u16> = units
        .and_then(Value::as_array)
        .ok_or("utf16 units")?
        .iter()
        .map(|u| u.as_f64().unwrap_or(0.0) as u16)
        .collect();
    String::from_utf16(&units)
        .map_err(|_| Unusable::JsOnly("lone UTF-16 surrogate (JS-only string)".to_owned()))
}

fn special(kind: &str, o: &Value) -> Result<Value, Unusable> {
    let field = |k: &str| o.get(k).unwrap_or(&Value::Null);
    let count = || field("count").as_f64().unwrap_or(0.0) as usize;
    let depth = || field("depth").as_f64().unwrap_or(0.0) as usize;
    Ok(match kind {
        "negative_zero" => Value::Number(-0.0),
        "nan" => Value::Number(f64::NAN),
        "infinity" => Value::Number(f64::INFINITY),
        "negative_infinity" => Value::Number(f64::NEG_INFINITY),
        "string_utf16" => Value::String(utf16(o.get("units"))?),
        "string_repeat" => Value::String(field("text").as_str().unwrap_or("").repeat(count())),
        "array_fill" => Value::Array(vec![to_value(field("value"))?; count()]),
        "nested_arrays" => {
            let mut v = to_value(field("leaf"))?;
            for _ in 0..depth() {
                v = Value::Array(vec![v]);
            }
            v
        }
        "nested_objects" => {
            let key = field("key").as_str().unwrap_or("key").to_owned();
            let mut v = to_value(field("leaf"))?;
            for _ in 0..depth() {
                v = Value::object([(key.clone(), v)]);
            }
            v
        }
        "object_entries" => {
            // Entries in insertion order, as the reference built the object.
            let mut members = Vec::new();
            for entry in field("entries").as_array().ok_or("entries")? {
                let pair = entry.as_array().ok_or("entry")?;
                let key = match pair.first() {
                    Some(Value::String(s)) => s.clone(),
                    Some(k @ Value::Object(_)) => utf16(k.get("utf16")).map_err(|e| match e {
                        Unusable::JsOnly(_) => Unusable::JsOnly(
                            "object key with a lone UTF-16 surrogate (JS-only)".to_owned(),
                        ),
                        malformed => malformed,
                    })?,
                    _ => return Err("object key".into()),
                };
                members.push((key, to_value(pair.get(1).unwrap_or(&Value::Null))?));
            }
            Value::Object(members.into_iter().collect())
        }
        other if js_only_reason(other).is_some() => {
            let reason = js_only_reason(other).unwrap_or_default();
            return Err(Unusable::JsOnly(format!(
                "JavaScript-only value kind `{other}`: {reason}"
            )));
        }
        other => {
            return Err(Unusable::Malformed(format!(
                "unknown $special kind `{other}`"
            )));
        }
    })
}

fn message_matches(ours: &str, theirs: &str) -> bool {
    ours == theirs || ours.contains(theirs)
}

fn expect_error(ours: String, expected: &Json, subst: &[(&str, String)]) -> Outcome {
    let mut theirs = expected["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    for (k, v) in subst {
        theirs = theirs.replace(k, v);
    }
    if message_matches(&ours, &theirs) {
        Outcome::Pass
    } else {
        Outcome::Fail(format!(
            "error differs:\n    ours:   {ours}\n    theirs: {theirs}"
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// identity.json

fn run_identity(case: &Json, ordered: &Value) -> Outcome {
    let args: Vec<Value> = match ordered
        .get("args")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(to_value).collect::<Result<Vec<_>, _>>())
    {
        Some(Ok(a)) => a,
        Some(Err(u)) => return unusable(u),
        None => return Outcome::Fail("no args".into()),
    };
    let s = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or("").to_owned();
    let f = case["fn"].as_str().unwrap_or("");
    let result: Result<(String, Option<String>), String> = match f {
        "actionIdempotencyKey" => identity::idempotency_key(&args[0])
            .map(|d| {
                (
                    d.to_string(),
                    canonical::to_identity_canonical(&args[0]).ok(),
                )
            })
            .map_err(|e| e.to_string()),
        "actionOperationId" => identity::operation_id(&s(0), &s(1), &args[2])
            .map(|d| (d.to_string(), None))
            .map_err(|e| e.to_string()),
        "actionAttemptId" => identity::attempt_id(&s(0), &args[1])
            .map(|d| (d.to_string(), None))
            .map_err(|e| e.to_string()),
        "actionEventKey" => identity::event_key(&s(0), &args[1])
            .map(|k| (k, None))
            .map_err(|e| e.to_string()),
        "actionEventId" => identity::event_id(&s(0), &s(1))
            .map(|d| (d.to_string(), None))
            .map_err(|e| e.to_string()),
        "actionLedgerJson" => canonical::to_canonical(&args[0])
            .map(|t| (t, None))
            .map_err(|e| e.to_string()),
        other => return Outcome::Fail(format!("unknown fn {other:?}")),
    };
    let expected = &case["expected"];
    match (result, expected["ok"].as_bool() == Some(true)) {
        (Ok((out, hashed)), true) => {
            if expected["output"].as_str() != Some(out.as_str()) {
                return Outcome::Fail(format!("output {out} != {}", expected["output"]));
            }
            if let (Some(h), Some(theirs)) = (hashed, expected["hashed_canonical_json"].as_str())
                && !theirs.starts_with("elided")
                && h != theirs
            {
                return Outcome::Fail(format!("hashed text {h} != {theirs}"));
            }
            Outcome::Pass
        }
        (Err(e), false) => expect_error(e, expected, &[]),
        (Ok((out, _)), false) => {
            Outcome::Fail(format!("accepted (output {out}), reference refused"))
        }
        (Err(e), true) => Outcome::Fail(format!("refused ({e}), reference accepted")),
    }
}

// ---------------------------------------------------------------------------------------------
// events.json

/// Epoch milliseconds of an ISO timestamp such as `2026-01-15T12:34:56.789Z`.
fn epoch_ms(iso: &str) -> i64 {
    let secs = event::timestamp_epoch_seconds(iso).expect("vector clock");
    let frac = iso
        .split_once('.')
        .map(|(_, f)| f.trim_end_matches('Z'))
        .unwrap_or("");
    let ms: i64 = format!("{frac:0<3}")[..3].parse().unwrap_or(0);
    secs * 1000 + ms
}

/// Why an event writer call did not return an event.
#[derive(Debug, thiserror::Error)]
enum CallError {
    /// The call's input cannot be used ([`to_value`]).
    #[error("{0}")]
    Input(Unusable),
    /// The vector names an `api` the harness does not know: a failure.
    #[error("unknown api {0}")]
    UnknownApi(String),
    /// The writer refused the call, with its message.
    #[error("{0}")]
    Refused(String),
}

/// Runs one writer call; `input` is the call's `input`, read with its key order.
fn run_call(
    root: &Path,
    call: &Json,
    input: &Value,
    profile: Profile,
) -> Result<Option<Event>, CallError> {
    let input = to_value(input).map_err(CallError::Input)?;
    let env: record::Environment = call["env"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
        .collect();
    let now = epoch_ms(call["now"].as_str().unwrap_or("1970-01-01T00:00:00Z"));
    let options = record::Options { privacy: profile };
    let record = match call["api"].as_str() {
        Some("recordWorkflowPhaseEvent") => record::record_phase,
        Some("recordWorkflowActionEvent") => record::record_action,
        other => return Err(CallError::UnknownApi(format!("{other:?}"))),
    };
    let now = crate::time::Timestamp::from_millis(now);
    record(root, &input, &env, now, &options).map_err(|e| CallError::Refused(e.to_string()))
}

fn run_events(case: &Json, ordered: &Value, profile: Profile) -> Outcome {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = crate::writer::files::absolute_root(tmp.path()).expect("root");
    fn input(call: Option<&Value>) -> &Value {
        call.and_then(|c| c.get("input")).unwrap_or(&Value::Null)
    }
    let priors = ordered.get("prior_calls").and_then(Value::as_array);
    for (i, prior) in items(&case["prior_calls"]).enumerate() {
        let ordered_prior = priors.and_then(|p| p.get(i));
        if let Err(e) = run_call(&root, prior, input(ordered_prior), profile) {
            return Outcome::Fail(format!("prior call {i} failed: {e}"));
        }
    }
    let before = read_tree(&root);
    let result = run_call(&root, &case["call"], input(ordered.get("call")), profile);
    let after = read_tree(&root);
    let expected = &case["expected"];
    let root_text = root.display().to_string();
    match (result, expected["ok"].as_bool() == Some(true)) {
        (Err(CallError::Input(u)), _) => unusable(u),
        (Err(e @ CallError::UnknownApi(_)), _) => Outcome::Fail(e.to_string()),
        (Ok(event), true) => {
            let want = &expected["returned_event"];
            match (&event, want.is_null()) {
                (None, true) => {}
                (Some(ev), false) => {
                    let theirs = match json_to_value(want).map(|v| canonical::to_canonical(&v)) {
                        Ok(Ok(t)) => t,
                        _ => return Outcome::Fail("bad returned_event".into()),
                    };
                    if ev.json != theirs {
                        return Outcome::Fail(format!(
                            "event differs:\n    ours:   {}\n    theirs: {theirs}",
                            ev.json
                        ));
                    }
                }
                _ => {
                    return Outcome::Fail(format!(
                        "returned {:?}, expected {want}",
                        event.map(|e| e.json)
                    ));
                }
            }
            if let Err(e) =
                compare_trees("spool", &after, &expected_files(&expected["spool_files"]))
            {
                return Outcome::Fail(e);
            }
            let changed: Vec<&String> = after
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(*v))
                .map(|(k, _)| k)
                .collect();
            let want: Vec<&str> = items(&expected["new_or_changed_files"])
                .filter_map(Json::as_str)
                .collect();
            if changed.iter().map(|s| s.as_str()).ne(want.iter().copied()) {
                return Outcome::Fail(format!("changed files {changed:?} != {want:?}"));
            }
            Outcome::Pass
        }
        (Err(CallError::Refused(e)), false) => {
            if let Outcome::Fail(m) = expect_error(e, expected, &[("<ROOT>", root_text)]) {
                return Outcome::Fail(m);
            }
            // A refusal changes nothing, and leaves exactly the listed files.
            if after != before {
                return Outcome::Fail("a refused call changed the spool".into());
            }
            let want: Vec<&str> = items(&expected["spool_files_after"])
                .filter_map(|f| f.as_str().or_else(|| f["path"].as_str()))
                .collect();
            if after.keys().map(|s| s.as_str()).ne(want.iter().copied()) {
                return Outcome::Fail(format!(
                    "files after refusal {:?} != {want:?}",
                    after.keys()
                ));
            }
            Outcome::Pass
        }
        (Ok(_), false) => Outcome::Fail("recorded, reference refused".into()),
        (Err(CallError::Refused(e)), true) => refused_where_accepted(e, profile),
    }
}

// ---------------------------------------------------------------------------------------------
// shards.json

fn write_files(root: &Path, files: &[Json]) {
    for f in files {
        let p = root.join(f["path"].as_str().expect("path"));
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, f["bytes"].as_str().expect("bytes")).expect("write");
    }
}

fn read_tree(root: &Path) -> BTreeMap<String, String> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.path()
                    .strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned(),
                std::fs::read_to_string(e.path()).expect("utf-8 file"),
            )
        })
        .collect()
}

fn expected_files(files: &Json) -> BTreeMap<String, String> {
    items(files)
        .map(|f| {
            (
                f["path"].as_str().unwrap_or("").to_owned(),
                f["bytes"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn compare_trees(
    what: &str,
    ours: &BTreeMap<String, String>,
    theirs: &BTreeMap<String, String>,
) -> Result<(), String> {
    if ours.keys().ne(theirs.keys()) {
        let extra: Vec<_> = ours.keys().filter(|k| !theirs.contains_key(*k)).collect();
        let missing: Vec<_> = theirs.keys().filter(|k| !ours.contains_key(*k)).collect();
        return Err(format!("{what}: extra {extra:?}, missing {missing:?}"));
    }
    for (k, v) in ours {
        if theirs[k] != *v {
            return Err(format!("{what}: bytes differ at {k}"));
        }
    }
    Ok(())
}

fn run_finalize(case: &Json, profile: Profile) -> Outcome {
    let expected = &case["expected"];
    let spool_dir = tempfile::tempdir().expect("tempdir");
    let out_dir = tempfile::tempdir().expect("tempdir");
    let before = expected["spool_files_before"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    write_files(spool_dir.path(), &before);
    // Directories a case needs that no file implies (an empty spool directory).
    for dir in items(&expected["spool_directories_before"]) {
        std::fs::create_dir_all(spool_dir.path().join(dir.as_str().expect("directory")))
            .expect("mkdir");
    }
    if expected["spool_event_files_elided"].as_bool() == Some(true) {
        // Each spool event file is exactly one output shard line plus a newline.
        for f in items(&expected["output_files"]) {
            for line in f["bytes"].as_str().unwrap_or("").lines() {
                let e = match Event::parse_line(line, "vector") {
                    Ok(e) => e,
                    Err(err) => return Outcome::Fail(format!("vector line refused: {err}")),
                };
                let p = spool_dir.path().join(spool::event_relative_path(&e));
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(p, format!("{line}\n")).expect("write");
            }
        }
    }
    let spool = match Spool::open(spool_dir.path()) {
        Ok(s) => s,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let reserved = |p: &str| p.contains("/_partitions/") || p.contains("/_finalizations/");
    let events_before: BTreeMap<_, _> = read_tree(spool_dir.path())
        .into_iter()
        .filter(|(k, _)| !reserved(k))
        .collect();
    for (i, flush) in items(&expected["flush_results"]).enumerate() {
        let out_root =
            match crate::writer::files::Root::open(out_dir.path(), seal::OUTPUT_ROOT_LABEL) {
                Ok(r) => r,
                Err(e) => return Outcome::Fail(e.to_string()),
            };
        let options = seal::Options {
            privacy: profile,
            ..seal::Options::default()
        };
        let report = match seal::seal(
            &spool,
            Some(&out_root),
            crate::time::Timestamp::from_millis(0),
            &options,
        ) {
            Ok(r) => r,
            Err(e) => {
                return match refused_where_accepted(e.to_string(), profile) {
                    Outcome::Fail(m) => Outcome::Fail(format!("flush {i}: {m}")),
                    other => other,
                };
            }
        };
        let want: Vec<String> = items(flush)
            .map(|p| p.as_str().unwrap_or("").to_owned())
            .collect();
        if report.shard_paths != want {
            return Outcome::Fail(format!(
                "flush {i}: paths {:?} != {want:?}",
                report.shard_paths
            ));
        }
    }
    if let Err(e) = compare_trees(
        "output",
        &read_tree(out_dir.path()),
        &expected_files(&expected["output_files"]),
    ) {
        return Outcome::Fail(e);
    }
    // Finalize writes seals only: every other spool file is as it was.
    let events_after: BTreeMap<_, _> = read_tree(spool_dir.path())
        .into_iter()
        .filter(|(k, _)| !reserved(k))
        .collect();
    if let Err(e) = compare_trees("spool events", &events_after, &events_before) {
        return Outcome::Fail(e);
    }
    let ours: BTreeMap<_, _> = read_tree(spool_dir.path())
        .into_iter()
        .filter(|(k, _)| reserved(k))
        .collect();
    let theirs: BTreeMap<_, _> = expected_files(&expected["spool_files_after"])
        .into_iter()
        .filter(|(k, _)| reserved(k))
        .collect();
    match compare_trees("spool", &ours, &theirs) {
        Ok(()) => Outcome::Pass,
        Err(e) => Outcome::Fail(e),
    }
}

fn run_direct_write(case: &Json, profile: Profile) -> Outcome {
    let input = &case["input"];
    let id = &input["identity"];
    let identity = ShardIdentity {
        repository: id["repository"].as_str().unwrap_or("").into(),
        sha: id["sha"].as_str().unwrap_or("").into(),
        producer: id["producer"].as_str().unwrap_or("").into(),
        workflow: id["workflow"].as_str().unwrap_or("").into(),
        job: id["job"].as_str().unwrap_or("").into(),
        run_id: id["runId"].as_str().unwrap_or("").into(),
        run_attempt: id["runAttempt"].as_i64().unwrap_or(0),
        partition_date: id["partitionDate"].as_str().unwrap_or("").into(),
    };
    let result = (|| -> Result<shard::Shard, String> {
        let mut events = Vec::new();
        for (i, e) in items(&input["events"]).enumerate() {
            let v = json_to_value(e).map_err(|u| u.to_string())?;
            let event = event::validate(&v, &format!("events[{i}]")).map_err(|e| e.to_string())?;
            profile
                .check_line(&crate::canonical::to_canonical_unchecked(&v))
                .map_err(|f| format!("events[{i}]: the strict profile refuses {f}"))?;
            events.push(event);
        }
        shard::single(&identity, events).map_err(|e| e.to_string())
    })();
    let expected = &case["expected"];
    match (result, expected["ok"].as_bool() == Some(true)) {
        (Ok(s), true) => {
            let ours = BTreeMap::from([(s.path.clone(), s.content.to_string())]);
            if let Err(e) =
                compare_trees("output", &ours, &expected_files(&expected["output_files"]))
            {
                return Outcome::Fail(e);
            }
            let r = &expected["result"];
            if r["relativePath"].as_str() != Some(s.path.as_str())
                || r["eventCount"].as_u64() != Some(s.events.len() as u64)
                || r["sha256"].as_str() != Some(identity::Digest::of(s.content.as_bytes()).as_str())
            {
                return Outcome::Fail(format!("result differs: {r}"));
            }
            Outcome::Pass
        }
        (Err(e), false) => expect_error(e, expected, &[]),
        (Ok(_), false) => Outcome::Fail("accepted, reference refused".into()),
        (Err(e), true) => refused_where_accepted(e, profile),
    }
}

// ---------------------------------------------------------------------------------------------
// import.json

fn snapshot_files(store: &Store, ref_name: &str) -> BTreeMap<String, String> {
    let tip = store.tip(ref_name).expect("tip");
    let snap = store.snapshot(tip).expect("snapshot");
    snap.list_files("")
        .expect("list")
        .into_iter()
        .map(|p| {
            let bytes = snap.read(&p, u64::MAX).expect("read").expect("present");
            (p, String::from_utf8(bytes).expect("utf-8"))
        })
        .collect()
}

/// A fanout tree seen as the reference would write it: binding paths moved back to the flat
/// directories and the layout record dropped (after checking it is there and every binding is at
/// its fanout path). The identity for the reference layout.
fn as_reference(
    layout: Layout,
    files: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    if layout == Layout::Reference {
        return Ok(files);
    }
    let mut out = BTreeMap::new();
    let mut recorded = false;
    for (path, bytes) in files {
        if path == crate::ledger::layout::RECORD_PATH {
            if Some(&bytes) != Layout::Fanout.record().as_ref() {
                return Err(format!("layout record {bytes:?}"));
            }
            recorded = true;
            continue;
        }
        out.insert(reference_path(&path)?, bytes);
    }
    if !recorded && out.keys().any(|p| p.starts_with("ledger/v1/")) {
        return Err("a fanout ledger without its layout record".into());
    }
    Ok(out)
}

/// `path` with a fanout binding path replaced by its reference path; an error for a binding path
/// in the reference form (a fanout repository never holds one).
fn reference_path(path: &str) -> Result<String, String> {
    match binding::classify(path) {
        Some((kind, digest, Layout::Fanout)) => Ok(kind.path(Layout::Reference, &digest)),
        Some((_, _, Layout::Reference)) => Err(format!("reference binding path {path} in fanout")),
        None => Ok(path.to_owned()),
    }
}

/// Every fanout binding path inside `text` replaced by its reference path (for error messages).
fn reference_text(text: &str) -> String {
    let re = regex::Regex::new(
        r"ledger/v1/import-bindings/[a-z-]+/[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{64}\.json",
    )
    .expect("regex");
    re.replace_all(text, |c: &regex::Captures<'_>| {
        reference_path(&c[0]).unwrap_or_else(|e| e)
    })
    .into_owned()
}

fn run_import(
    case: &Json,
    finalize_outputs: &HashMap<String, Vec<Json>>,
    profile: Profile,
    layout: Layout,
) -> Outcome {
    let repo = tempfile::tempdir().expect("tempdir");
    let store =
        Store::open_or_init_bare(&repo.path().join("state.git"), "refs/heads/main").expect("init");
    let mut options_base = Options::new(Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_768_480_496,
    });
    options_base.layout = Some(layout);
    options_base.privacy = profile;
    let sources = tempfile::tempdir().expect("tempdir");
    let mut source_paths: HashMap<String, PathBuf> = HashMap::new();
    for (name, files) in case["source_trees"].as_object().into_iter().flatten() {
        let root = sources.path().join(name);
        std::fs::create_dir_all(&root).expect("mkdir");
        for f in items(files) {
            let path = f["path"].as_str().unwrap_or("");
            let bytes = match f["bytes"].as_str() {
                Some(b) => b.to_owned(),
                None => {
                    let from = f["bytes_from_finalize_case"].as_str().unwrap_or("");
                    let Some(found) = finalize_outputs
                        .get(from)
                        .and_then(|files| files.iter().find(|o| o["path"].as_str() == Some(path)))
                    else {
                        return Outcome::Fail(format!("no bytes for {path} in {from}"));
                    };
                    found["bytes"].as_str().unwrap_or("").to_owned()
                }
            };
            if f["sha256"]
                .as_str()
                .is_some_and(|d| d != identity::Digest::of(&bytes).as_str())
            {
                return Outcome::Fail(format!("vector digest mismatch for {path}"));
            }
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, bytes).expect("write");
        }
        source_paths.insert(name.clone(), root);
    }
    let mut source_bytes: HashMap<String, String> = HashMap::new();
    for root in source_paths.values() {
        source_bytes.extend(read_tree(root));
    }
    for (i, step) in items(&case["steps"]).enumerate() {
        let mut options = options_base.clone();
        let o = &step["options"];
        if let Some(x) = o.get("expectedProducer") {
            options.expected_producer = Some(ExpectedProducer {
                repository: x["repository"].as_str().unwrap_or("").into(),
                sha: x["sha"].as_str().unwrap_or("").into(),
                workflow: x["workflow"].as_str().unwrap_or("").into(),
                job: x["job"].as_str().unwrap_or("").into(),
                run_id: x["runId"].as_str().unwrap_or("").into(),
                run_attempt: x["runAttempt"].as_i64().unwrap_or(0),
            });
        }
        if let Some(paths) = o.get("expectedEventPaths").and_then(Json::as_array) {
            options.expected_event_paths = Some(
                paths
                    .iter()
                    .map(|p| p.as_str().unwrap_or("").to_owned())
                    .collect(),
            );
        }
        let name = step["source"].as_str().unwrap_or("");
        let before_tip = store.tip("refs/heads/main").expect("tip");
        let fail = |m: String| Outcome::Fail(format!("step {i} ({}): {m}", layout.name()));
        let before = match as_reference(layout, snapshot_files(&store, "refs/heads/main")) {
            Ok(files) => files,
            Err(e) => return fail(e),
        };
        let result = publish::publish(&store, &source_paths[name], &options);
        let after = match as_reference(layout, snapshot_files(&store, "refs/heads/main")) {
            Ok(files) => files,
            Err(e) => return fail(e),
        };
        let expected = &step["expected"];
        match (result, expected["ok"].as_bool() == Some(true)) {
            (Ok(p), true) => {
                let r = &expected["result"];
                let list = |k: &str| -> Vec<String> {
                    r[k].as_array()
                        .into_iter()
                        .flatten()
                        .map(|p| p.as_str().unwrap_or("").to_owned())
                        .collect()
                };
                let mut m = p.manifest.clone();
                for list in [
                    &mut m.reservation_paths,
                    &mut m.completion_paths,
                    &mut m.paths,
                ] {
                    for path in list.iter_mut().filter(|_| layout == Layout::Fanout) {
                        match reference_path(path) {
                            Ok(r) => *path = r,
                            Err(e) => return fail(e),
                        }
                    }
                    list.sort();
                }
                let same = r["created"].as_u64() == Some(m.created as u64)
                    && r["unchanged"].as_u64() == Some(m.unchanged as u64)
                    && list("eventPaths") == m.event_paths
                    && list("reservationPaths") == m.reservation_paths
                    && list("completionPaths") == m.completion_paths
                    && list("paths") == m.paths;
                if !same {
                    return fail(format!("manifest differs: {}", m.to_json()));
                }
                let theirs: BTreeMap<String, String> = items(&expected["destination_files"])
                    .map(|f| {
                        let path = f["path"].as_str().unwrap_or("").to_owned();
                        let bytes = match f["bytes"].as_str() {
                            Some(b) => b.to_owned(),
                            None => source_bytes.get(&path).cloned().unwrap_or_default(),
                        };
                        (path, bytes)
                    })
                    .collect();
                if let Err(e) = compare_trees("destination", &after, &theirs) {
                    return fail(e);
                }
                let new: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
                let want: Vec<&str> = items(&expected["new_files"])
                    .filter_map(Json::as_str)
                    .collect();
                if new.iter().map(|s| s.as_str()).ne(want.iter().copied()) {
                    return fail(format!("new files {new:?} != {want:?}"));
                }
                // A step that adds no file makes no commit (not even a layout record).
                if want.is_empty() && store.tip("refs/heads/main").expect("tip") != before_tip {
                    return fail("the ref moved on a step that adds no file".into());
                }
            }
            (Err(e), false) => {
                if let Outcome::Fail(m) =
                    expect_error(reference_text(&e.to_string()), expected, &[])
                {
                    return fail(m);
                }
                if store.tip("refs/heads/main").expect("tip") != before_tip {
                    return fail("ref moved on a refused publication".into());
                }
                let want: Vec<&str> = items(&expected["destination_files_after"])
                    .filter_map(Json::as_str)
                    .collect();
                if after.keys().map(|s| s.as_str()).ne(want.iter().copied()) {
                    return fail(format!(
                        "files after refusal {:?} != {want:?}",
                        after.keys()
                    ));
                }
            }
            (Ok(p), false) => {
                return fail(format!(
                    "accepted ({}), reference refused",
                    p.manifest.to_json()
                ));
            }
            // The later steps build on this one: a strict-only refusal ends the case.
            (Err(e), true) => {
                return match refused_where_accepted(e.to_string(), profile) {
                    Outcome::Fail(m) => fail(m),
                    other => other,
                };
            }
        }
    }
    Outcome::Pass
}

// ---------------------------------------------------------------------------------------------

fn vector_dir() -> PathBuf {
    match std::env::var_os("CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/conformance"),
    }
}

#[test]
fn conformance_vectors() {
    let dir = vector_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read CONFORMANCE_DIR {}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    // Each case three ways: its file, the case found through `serde_json`, and the case with its
    // key order ([`read_ordered`]).
    let mut cases: Vec<(String, Json, Value)> = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("vector file");
        let doc: Json = serde_json::from_str(&text).expect("vector JSON");
        let ordered = read_ordered(&text);
        let ordered = ordered
            .get("cases")
            .and_then(Value::as_array)
            .unwrap_or_default();
        let name = f.file_name().expect("name").to_string_lossy().into_owned();
        for (i, c) in items(&doc["cases"]).enumerate() {
            let o = ordered.get(i).cloned().unwrap_or(Value::Null);
            cases.push((name.clone(), c.clone(), o));
        }
    }
    let finalize_outputs: HashMap<String, Vec<Json>> = cases
        .iter()
        .filter(|(_, c, _)| c["category"] == "finalize")
        .map(|(_, c, _)| {
            (
                c["id"].as_str().unwrap_or("").to_owned(),
                c["expected"]["output_files"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert!(!cases.is_empty(), "no vectors in {}", dir.display());
    let mut all = Tally::default();
    for profile in [Profile::Reference, Profile::Strict] {
        let mut tally = Tally::default();
        for (file, case, ordered) in &cases {
            let id = case["id"].as_str().unwrap_or("?");
            let outcome = if file.starts_with("projection_") {
                projection::run(case, ordered, profile)
            } else if case.get("fn").is_some() {
                run_identity(case, ordered)
            } else if case.get("steps").is_some() {
                // Both layouts: the reference's bytes, and fanout differing only by binding
                // paths and the layout record.
                match run_import(case, &finalize_outputs, profile, Layout::Reference) {
                    Outcome::Pass => run_import(case, &finalize_outputs, profile, Layout::Fanout),
                    other => other,
                }
            } else if case["category"] == "finalize" {
                run_finalize(case, profile)
            } else if case["category"] == "direct_write" {
                run_direct_write(case, profile)
            } else if case.get("call").is_some() {
                run_events(case, ordered, profile)
            } else {
                Outcome::Fail("unknown case shape".into())
            };
            match outcome {
                Outcome::Pass => tally.passed += 1,
                Outcome::Fail(m) => {
                    tally.failed += 1;
                    println!("FAIL ({profile}) {file} {id}: {m}");
                }
                Outcome::Skip(reason) => {
                    tally.skipped += 1;
                    println!("skip ({profile}) {file} {id}: {reason}");
                }
                Outcome::StrictOnly(rule) => {
                    tally.strict_only += 1;
                    println!("strict-only ({profile}) {file} {id}: refused by {rule}");
                }
            }
        }
        println!("conformance ({profile}): {tally}");
        all.add(&tally);
    }
    println!("conformance: {all}");
    assert_eq!(all.failed, 0, "conformance failures (see FAIL lines above)");
}

/// Counts of a conformance run.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
    /// Cases the reference accepts and the strict profile refuses by a strict-only rule.
    strict_only: usize,
}

impl Tally {
    fn add(&mut self, other: &Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        self.strict_only += other.strict_only;
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} skipped, {} strict-only refusals",
            self.passed, self.failed, self.skipped, self.strict_only
        )
    }
}

/// What the harness does not know fails; only the listed JavaScript-only kinds skip.
#[test]
fn unknown_vector_shapes_fail_and_only_javascript_kinds_skip() {
    let fails = |o: Outcome| matches!(o, Outcome::Fail(_));
    let skips = |o: Outcome| matches!(o, Outcome::Skip(_));
    let case = |text: &str| -> Json { serde_json::from_str(text).unwrap() };
    let run_identity = |c: &Json| run_identity(c, &read_ordered(&c.to_string()));
    let ok = r#""expected":{"ok":true,"output":"x"}"#;
    assert!(fails(run_identity(&case(&format!(
        r#"{{"fn":"actionSomethingNew","args":[{{}}],{ok}}}"#
    )))));
    assert!(fails(run_identity(&case(&format!(
        r#"{{"args":[{{}}],{ok}}}"#
    )))));
    for unknown in ["future_kind", "dates", "Undefined", ""] {
        assert!(fails(run_identity(&case(&format!(
            r#"{{"fn":"actionLedgerJson","args":[{{"$special":"{unknown}"}}],{ok}}}"#
        )))));
    }
    // Every kind the mission lists among refused identity inputs skips, with its reason, and
    // also when it sits deep inside an act.
    for kind in [
        "undefined",
        "function",
        "symbol",
        "bigint",
        "cycle",
        "date",
        "class_instance",
        "map",
        "array_subclass",
        "sparse_array",
        "decorated_array",
        "accessor_property",
        "getter_property",
        "non_enumerable_property",
        "symbol_key",
    ] {
        let reason = js_only_reason(kind).expect("listed");
        for arg in [
            format!(r#"{{"$special":"{kind}"}}"#),
            format!(r#"{{"a":[1,{{"b":{{"$special":"{kind}"}}}}]}}"#),
        ] {
            match run_identity(&case(&format!(
                r#"{{"fn":"actionLedgerJson","args":[{arg}],{ok}}}"#
            ))) {
                Outcome::Skip(why) => assert!(why.contains(reason), "{kind}: {why}"),
                _ => panic!("{kind} must skip"),
            }
        }
    }
    assert!(skips(run_identity(&case(&format!(
        r#"{{"fn":"actionLedgerJson","args":[{{"$special":"string_utf16","units":[55296]}}],{ok}}}"#
    )))));
    for profile in [Profile::Reference, Profile::Strict] {
        for api in [r#""api":"recordSomethingNew","#, ""] {
            let text = format!(r#"{{"call":{{{api}"input":{{}}}},"expected":{{"ok":false}}}}"#);
            let c = case(&text);
            let ordered = read_ordered(&text);
            assert!(fails(run_events(&c, &ordered, profile)), "{text}");
        }
    }
}

/// A refusal where the reference accepted is a strict-only refusal only under strict and only
/// when it names a strict-only rule id; anything else fails.
#[test]
fn strict_only_refusals_must_name_a_strict_rule() {
    let strict_only = |o: Outcome| matches!(o, Outcome::StrictOnly(_));
    let fails = |o: Outcome| matches!(o, Outcome::Fail(_));
    let by_rule = "action event $.producer.job matches ipv4-embedded-private (iana:::ffff:0:0/96), which the strict privacy profile refuses".to_owned();
    let by_part = "action event producer part component matches confidential-producer-part (ledger:producer-part-confidential), which the strict privacy profile refuses".to_owned();
    assert!(strict_only(refused_where_accepted(
        by_rule.clone(),
        Profile::Strict
    )));
    assert!(strict_only(refused_where_accepted(
        by_part,
        Profile::Strict
    )));
    assert!(fails(refused_where_accepted(by_rule, Profile::Reference)));
    for other in [
        "action event producer component contains a confidential identifier",
        "action event $.x matches something (gitleaks:no-such-rule)",
    ] {
        assert!(fails(refused_where_accepted(
            other.to_owned(),
            Profile::Strict
        )));
    }
}
