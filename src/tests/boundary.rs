//! Events at the canonical limits, driven through every stage as a user runs them.
//!
//! The limits (canonical module docs: depth 64, 10,000 values, an estimated 1 MiB with every
//! number counted as 24 bytes) decide once, at `record`: an event they accept must pass `seal`,
//! `publish` (of the spool and of the shard files), `verify`, `log` and `compact` (and `verify`
//! and `log` again on the compacted ledger); one they refuse is refused by `record`, naming the
//! limit and the path, and leaves no event file behind.
//!
//! Each member builds its input so that the limited value sits exactly on the limit (accepted)
//! or one unit past it (refused). The size estimate is restated here ([`estimate`]) from the
//! rule, independently of the encoder, and the padding is computed from it.

#![cfg(test)]

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use crate::canonical::Value;
use crate::cli::{self, Env};
use crate::event::{ATTRIBUTE_KEYS, AttributeKind};
use crate::writer::record;

/// Largest accepted size estimate.
const MAX_BYTES: usize = 1024 * 1024;
/// Deepest accepted value (the root has depth 0).
const MAX_DEPTH: usize = 64;
/// Most accepted values.
const MAX_NODES: usize = 10_000;

/// The size estimate of the rule: null 4, boolean 5, number 24, a string its escaped JSON text
/// with quotes, a container 2 plus a comma between items, an object key its escaped text plus 2.
pub(crate) fn estimate(v: &Value) -> usize {
    let text = |s: &str| serde_json::to_string(s).expect("string").len();
    match v {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 24,
        Value::String(s) => text(s),
        Value::Array(a) => 2 + a.len().saturating_sub(1) + a.iter().map(estimate).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, v)| text(k) + 2 + estimate(v))
                .sum::<usize>()
        }
    }
}

fn to_value(j: &Json) -> Value {
    match j {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => Value::Number(n.as_f64().expect("number")),
        Json::String(s) => Value::String(s.clone()),
        Json::Array(a) => Value::Array(a.iter().map(to_value).collect()),
        Json::Object(o) => Value::object(o.iter().map(|(k, v)| (k.clone(), to_value(v)))),
    }
}

/// The writer environment of a CI job (the CLI tests' own).
fn env() -> Env {
    cli::tests::writer_env()
}

fn run_url(owner_len: usize, run: usize) -> String {
    format!(
        "https://github.com/{}/r/actions/runs/{run}",
        "a".repeat(owner_len.max(1))
    )
}

/// How an input reaches its limit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fill {
    /// One evidence run URL carries the padding (the example).
    OneRunUrl,
    /// 64 evidence entries share the padding.
    ManyRunUrls,
    /// Every integer attribute with 64 values (each number estimated at 24 bytes, written as
    /// one digit), the rest in one run URL.
    Numbers,
    /// Every text attribute with 64 values of 256 characters, the rest in one run URL.
    TextAttributes,
}

/// The allowlisted attribute keys of one kind.
fn keys(kind: AttributeKind) -> impl Iterator<Item = &'static str> {
    ATTRIBUTE_KEYS
        .iter()
        .filter(move |(_, k)| *k == kind)
        .map(|(name, _)| *name)
}

/// A generic-API input whose event grows by exactly one estimated byte per unit of `pad`.
fn input(fill: Fill, pad: usize, identity: Json) -> Json {
    let mut evidence = Vec::new();
    let mut attributes = serde_json::Map::new();
    match fill {
        Fill::OneRunUrl => evidence.push(json!({"kind": "run", "runUrl": run_url(1 + pad, 1)})),
        Fill::ManyRunUrls => {
            for i in 0..64 {
                let share = pad / 64 + usize::from(i < pad % 64);
                evidence.push(json!({"kind": "run", "runUrl": run_url(1 + share, 1000 + i)}));
            }
        }
        Fill::Numbers => {
            for key in keys(AttributeKind::NonNegativeInteger) {
                attributes.insert(key.into(), json!(vec![7; 64]));
            }
            evidence.push(json!({"kind": "run", "runUrl": run_url(1 + pad, 1)}));
        }
        Fill::TextAttributes => {
            for (i, key) in keys(AttributeKind::MachineText).enumerate() {
                let values: Vec<String> = (0..64)
                    .map(|j| format!("{i:02}{j:02}{}", "x".repeat(252)))
                    .collect();
                attributes.insert(key.into(), json!(values));
            }
            evidence.push(json!({"kind": "run", "runUrl": run_url(1 + pad, 1)}));
        }
    }
    let mut input = json!({
        "scope": "review",
        "type": "review.item",
        "component": "limits",
        "identity": identity,
        "subject": {"repository": "openclaw/openclaw", "kind": "issue", "number": 7},
        "action": {"name": "review", "status": "completed", "retryable": false, "mutation": false},
        "evidence": evidence,
    });
    if !attributes.is_empty() {
        input["attributes"] = Json::Object(attributes);
    }
    input
}

/// The padding at which the event's size estimate is exactly [`MAX_BYTES`].
fn pad_at_limit(fill: Fill) -> usize {
    let env = env();
    let event = |pad| {
        record::build_action_event(
            &to_value(&input(fill, pad, json!("size"))),
            &env,
            crate::time::Timestamp::from_millis(0),
        )
        .expect("a small event")
    };
    let base = estimate(&event(0).record());
    assert_eq!(
        estimate(&event(1).record()),
        base + 1,
        "{fill:?} grows by one"
    );
    MAX_BYTES - base
}

/// Every way of reaching the size limit.
pub(crate) const FILLS: [Fill; 4] = [
    Fill::OneRunUrl,
    Fill::ManyRunUrls,
    Fill::Numbers,
    Fill::TextAttributes,
];

/// The event (built as `record` builds it, at the epoch) whose size estimate is `over` bytes
/// past the limit (0: exactly at it).
pub(crate) fn event_past_limit(
    fill: Fill,
    over: usize,
) -> Result<crate::event::Event, record::Error> {
    let input = input(fill, pad_at_limit(fill) + over, json!("size"));
    record::build_action_event(
        &to_value(&input),
        &env(),
        crate::time::Timestamp::from_millis(0),
    )
}

/// A value nested `depth` levels below its root (`[[...[leaf]...]]`).
fn nested(depth: usize) -> Json {
    let mut v = json!("leaf");
    for _ in 0..depth {
        v = json!([v]);
    }
    v
}

/// An array holding `nodes` values in all (itself included).
fn wide(nodes: usize) -> Json {
    json!(vec![0; nodes - 1])
}

/// Runs the CLI in-process; returns the exit code, stdout and stderr.
fn cli(args: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv =
        std::iter::once("action-ledger".to_owned()).chain(args.iter().map(|a| a.to_string()));
    let code = cli::run(argv, &env(), &mut std::io::empty(), &mut out, &mut err);
    (
        code,
        String::from_utf8(out).expect("utf-8"),
        String::from_utf8(err).expect("utf-8"),
    )
}

fn ok(args: &[&str]) -> String {
    let (code, out, err) = cli(args);
    assert_eq!(code, 0, "{args:?} failed: {err}");
    out
}

/// Every event file of a spool, as lines without their newline (none without a spool directory).
fn spool_lines(spool: &Path) -> Vec<String> {
    let dir = spool.join(crate::writer::spool::SPOOL_DIR);
    if !dir.exists() {
        return Vec::new();
    }
    let mut lines: Vec<String> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.expect("entry"))
        .filter(|e| {
            e.file_type().is_file()
                && e.path().extension().is_some_and(|x| x == "json")
                && !e.path().to_string_lossy().contains("/_")
        })
        .map(|e| {
            std::fs::read_to_string(e.path())
                .expect("event file")
                .trim_end_matches('\n')
                .to_owned()
        })
        .collect();
    lines.sort();
    lines
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Records every input (and the first one again: unchanged), then drives the spool through
/// seal, publish (spool and shard files), verify, log, compact, verify and log; every event must
/// come out of `log` byte for byte.
/// Returns what `seal` printed.
fn through_every_stage(name: &str, inputs: &[Json]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = crate::writer::files::absolute_root(dir.path()).expect("root");
    let p = |s: &str| -> PathBuf { root.join(s) };
    let s = |s: &str| p(s).display().to_string();
    std::fs::create_dir_all(p("spool")).expect("spool");
    for (i, input) in inputs.iter().enumerate() {
        let file = p(&format!("input-{i}.json"));
        std::fs::write(&file, serde_json::to_string(input).expect("json")).expect("input");
        let (code, _, err) = cli(&[
            "record",
            "--spool",
            &s("spool"),
            "--input",
            &file.display().to_string(),
        ]);
        assert_eq!(code, 0, "{name}: record of input {i} refused: {err}");
    }
    let events = spool_lines(&p("spool"));
    assert_eq!(
        events.len(),
        inputs.len(),
        "{name}: one event file per input"
    );
    // Recording the first input again reads its event back: the same event, nothing written.
    let (code, _, err) = cli(&[
        "record",
        "--spool",
        &s("spool"),
        "--input",
        &p("input-0.json").display().to_string(),
    ]);
    assert!(code == 0 && err.starts_with("unchanged: "), "{name}: {err}");
    assert_eq!(spool_lines(&p("spool")), events, "{name}: a replay wrote");

    let sealed = ok(&["seal", "--paths", "--output", &s("out"), &s("spool")]);
    assert!(sealed.contains("ledger/v1/events/"), "{name}: {sealed}");
    ok(&["publish", "--repo", &s("state.git"), &s("spool")]);
    ok(&["publish", "--repo", &s("shards.git"), &s("out")]);
    for repo in ["state.git", "shards.git"] {
        ok(&["verify", "--repo", &s(repo)]);
        let log = ok(&["log", "--json", "--repo", &s(repo)]);
        assert_eq!(sorted_lines(&log), events, "{name}: log of {repo}");
    }
    let compacted = ok(&[
        "compact",
        "--json",
        "--repo",
        &s("state.git"),
        "--now",
        "2026-06-01",
        "--retention-days",
        "30",
    ]);
    assert!(
        compacted.contains("\"status\":\"created\""),
        "{name}: {compacted}"
    );
    ok(&["verify", "--repo", &s("state.git")]);
    let log = ok(&["log", "--json", "--repo", &s("state.git")]);
    assert_eq!(sorted_lines(&log), events, "{name}: log after compaction");
    sealed
}

/// `record` refuses the input with a message containing `rule`, and writes no event file.
fn refused_at_record(name: &str, input: &Json, rule: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = crate::writer::files::absolute_root(dir.path()).expect("root");
    let file = root.join("input.json");
    std::fs::write(&file, serde_json::to_string(input).expect("json")).expect("input");
    let spool = root.join("spool");
    std::fs::create_dir_all(&spool).expect("spool");
    let (code, _, err) = cli(&[
        "record",
        "--spool",
        &spool.display().to_string(),
        "--input",
        &file.display().to_string(),
    ]);
    assert_eq!(code, 2, "{name}: record accepted it: {err}");
    assert!(err.contains(rule), "{name}: {err}");
    assert!(
        spool_lines(&spool).is_empty(),
        "{name}: an event was written"
    );
}

/// The size estimate: exactly 1 MiB passes every stage, one byte more is refused at record,
/// for one long string, many strings, many numbers (estimated 24 bytes, written as 1) and
/// many text attributes; and the example (a 900,000 character run URL owner).
#[test]
fn size_limit_decides_at_record_for_every_stage() {
    let size_rule = "exceeds canonical JSON size limit 1048576 bytes at $.";
    for fill in FILLS {
        let pad = pad_at_limit(fill);
        let at = input(fill, pad, json!("size"));
        let event = record::build_action_event(
            &to_value(&at),
            &env(),
            crate::time::Timestamp::from_millis(0),
        )
        .expect("at the limit");
        assert_eq!(estimate(&event.record()), MAX_BYTES, "{fill:?}");
        through_every_stage(&format!("{fill:?} at the limit"), &[at]);
        refused_at_record(
            &format!("{fill:?} one byte over"),
            &input(fill, pad + 1, json!("size")),
            size_rule,
        );
    }
    let mut example = input(Fill::OneRunUrl, 0, json!("example"));
    example["evidence"][0]["runUrl"] = json!(format!(
        "https://github.com/{}/r/actions/runs/1",
        "a".repeat(900_000)
    ));
    through_every_stage("the issue's example", &[example]);
}

/// Three events at the size limit from one producer: an event's line is shorter than its
/// estimate (numbers and object commas are estimated high), so two of them still share one
/// 2 MiB shard part and the third starts another; all of them pass every stage.
#[test]
fn events_at_the_size_limit_pack_into_shard_parts() {
    let pad = pad_at_limit(Fill::OneRunUrl);
    let inputs: Vec<Json> = ["a", "b", "c"]
        .iter()
        .map(|id| input(Fill::OneRunUrl, pad, json!(id)))
        .collect();
    let sealed = through_every_stage("three events at the limit", &inputs);
    assert_eq!(sealed.matches("-part-").count(), 2, "{sealed}");
}

/// Depth and value count apply to the values the writer hashes (the identities): at the limit
/// the record passes every stage, one past it is refused at record. `identity` is hashed one
/// level down (in the event key object), `idempotencyIdentity` at its own root.
#[test]
fn depth_and_node_limits_decide_at_record_for_every_stage() {
    let base = |identity: Json| input(Fill::OneRunUrl, 0, identity);
    let with_idempotency = |v: Json| {
        let mut i = base(json!("nodes"));
        i["idempotencyIdentity"] = v;
        i
    };
    through_every_stage(
        "identity at depth 64 in the event key",
        &[base(nested(MAX_DEPTH - 1))],
    );
    refused_at_record(
        "identity at depth 65 in the event key",
        &base(nested(MAX_DEPTH)),
        "exceeds canonical JSON depth limit 64 at $.identity",
    );
    through_every_stage(
        "idempotency identity at depth 64",
        &[with_idempotency(nested(MAX_DEPTH))],
    );
    refused_at_record(
        "idempotency identity at depth 65",
        &with_idempotency(nested(MAX_DEPTH + 1)),
        "exceeds canonical JSON depth limit 64 at $",
    );
    through_every_stage(
        "idempotency identity of 10,000 values",
        &[with_idempotency(wide(MAX_NODES))],
    );
    refused_at_record(
        "idempotency identity of 10,001 values",
        &with_idempotency(wide(MAX_NODES + 1)),
        "exceeds canonical JSON node limit 10000 at $",
    );
}
