//! The data-driven contract cases of `testdata/finality/cases.json`, each a sequence of
//! operations on a fresh repository with the result each step must give.
#![cfg(test)]

use std::collections::BTreeSet;
use std::path::Path;

use crate::canonical::{self, Value};
use crate::finality::test_support::*;
use crate::finality::*;
use crate::store::Store;

/// Expands `{"$repeat": s, "times": n}` anywhere in a case value.
fn expand(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.contains_key("$repeat") => {
            let s = m["$repeat"].as_str().unwrap();
            let n = m["times"].as_safe_integer().unwrap() as usize;
            Value::str(s.repeat(n))
        }
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), expand(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(expand).collect()),
        other => other.clone(),
    }
}

fn opt_string(v: Option<&Value>) -> Option<Option<String>> {
    v.map(|v| v.as_str().map(str::to_owned))
}

fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "NaN" => f64::NAN,
        Value::String(s) if s == "Infinity" => f64::INFINITY,
        other => other.as_f64().unwrap(),
    }
}

fn ok(v: Value) -> Result<Value, Error> {
    Ok(v)
}

fn reported(r: Result<Written<Reported>, Error>) -> Result<Value, Error> {
    let r = r?.value;
    let Value::Object(mut m) = r.view.to_value() else {
        unreachable!()
    };
    m.insert("lifecycle".into(), Value::str(r.outcome.lifecycle.as_str()));
    m.insert("source".into(), Value::str(r.outcome.source.as_str()));
    m.insert(
        "attempt_id".into(),
        r.outcome
            .attempt_id
            .as_ref()
            .map_or(Value::Null, |a| Value::str(a.as_str())),
    );
    m.insert("security".into(), r.security.to_value());
    ok(Value::Object(m))
}

thread_local! {
    /// The sweeper's sightings per repository: the harness is one writer whose clock is right,
    /// which witnesses the actions it creates, so a sweep times them from their creation.
    static SEEN: std::cell::RefCell<std::collections::HashMap<std::path::PathBuf, Observations>> =
        std::cell::RefCell::default();
}

/// Runs one step; returns the result as a JSON value to match `expect` against.
fn step(store: &Store, path: &Path, s: &Value) -> Result<Value, Error> {
    let op = s.get("op").and_then(Value::as_str).unwrap();
    let now = s.get("at").and_then(Value::as_str).map_or(at(BASE), at);
    let action = s.get("action").and_then(Value::as_str).unwrap_or(ACTION);
    let ref_name = s
        .get("ref")
        .and_then(Value::as_str)
        .unwrap_or("refs/heads/main");
    let opts = options(ref_name);
    let with = s
        .get("with")
        .cloned()
        .unwrap_or(Value::object::<String>([]));
    let attempt = s
        .get("attempt_id")
        .and_then(Value::as_str)
        .unwrap_or(ATTEMPT);
    let field = |k: &str| s.get(k).and_then(Value::as_str).map(str::to_owned);
    match op {
        "create" => {
            let mut n = new_action(action);
            if let Some(v) = opt_string(with.get("agent_id")) {
                n.agent_id = v.unwrap();
            }
            if let Some(v) = opt_string(with.get("principal")) {
                n.principal = v.unwrap();
            }
            if let Some(v) = with.get("act") {
                n.act = (v != &Value::Null).then(|| v.clone());
            }
            if let Some(v) = opt_string(with.get("guard_decision_id")) {
                n.guard_decision_id = v;
            }
            if let Some(v) = with.get("verdict").and_then(Value::as_str) {
                n.verdict = Verdict::parse(v).unwrap();
            }
            if let Some(v) = with.get("capabilities").and_then(Value::as_array) {
                n.client_capabilities = v.iter().map(|c| c.as_str().unwrap().to_owned()).collect();
            }
            if let Some(v) = with.get("identity_verified").and_then(Value::as_bool) {
                n.identity_verified = v;
            }
            if let Some(v) = opt_string(with.get("containment_ref")) {
                n.containment_ref = v;
            }
            if let Some(v) = with.get("lifecycle").and_then(Value::as_str) {
                n.lifecycle = Some(Lifecycle::parse(v).unwrap());
            }
            let created = create_action(store, &opts, &n, now)?.value;
            SEEN.with(|m| {
                m.borrow_mut()
                    .entry(path.to_owned())
                    .or_default()
                    .witness(created.action_id.clone(), now);
            });
            ok(created.to_value())
        }
        "claim" => {
            let mut r = request(attempt);
            if let Some(v) = opt_string(with.get("agent_id")) {
                r.agent_id = v;
            }
            if let Some(v) = opt_string(with.get("principal")) {
                r.principal = v;
            }
            if let Some(v) = with.get("act") {
                r.act = (v != &Value::Null).then(|| v.clone());
            }
            if let Some(v) = with.get("verified").and_then(Value::as_bool) {
                r.verified = v;
            }
            ok(claim(store, &opts, action, &r, now)?.value.to_value())
        }
        "claim_body" => {
            let r = ClaimRequest::from_body(
                &s.get("body").cloned().unwrap(),
                Some("principal-a"),
                false,
            )?;
            ok(claim(store, &opts, action, &r, now)?.value.to_value())
        }
        "claim_race" => {
            let n = s.get("n").and_then(Value::as_safe_integer).unwrap() as usize;
            let barrier = std::sync::Barrier::new(n);
            let results: Vec<Result<Written<Claim>, Error>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..n)
                    .map(|i| {
                        let barrier = &barrier;
                        let opts = &opts;
                        scope.spawn(move || {
                            let store = Store::open(path).unwrap();
                            barrier.wait();
                            claim(
                                store_ref(&store),
                                opts,
                                action,
                                &request(&format!("race-attempt-{i:06}")),
                                now,
                            )
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let winners = results.iter().filter(|r| r.is_ok()).count();
            let conflicts = results
                .iter()
                .filter(|r| matches!(r, Err(Error::ClaimConflict { .. })))
                .count();
            ok(Value::object([
                ("winners", Value::from(winners as i64)),
                ("conflicts", Value::from(conflicts as i64)),
            ]))
        }
        "outcome" => {
            let report = OutcomeReport {
                status: field("status").unwrap(),
                summary: field("summary"),
                error_message: field("error_message"),
                progress: s.get("progress").cloned(),
                attempt_id: field("attempt_id"),
            };
            reported(report_outcome(
                store,
                &opts,
                action,
                &report,
                &Settler::Operator,
                now,
            ))
        }
        "close" => reported(close(
            store,
            &opts,
            action,
            &field("status").unwrap(),
            &CloseReport::summary(field("summary").as_deref()),
            &Settler::Operator,
            now,
        )),
        "sweep" => {
            let timeout = s.get("timeout").map_or(15.0, number);
            let mut seen = SEEN.with(|m| m.borrow().get(path).cloned().unwrap_or_default());
            let r = sweep(store, &opts, timeout, now, &mut seen);
            SEEN.with(|m| m.borrow_mut().insert(path.to_owned(), seen));
            let r = r?.value;
            ok(Value::object([
                (
                    "swept",
                    Value::Array(
                        r.swept
                            .iter()
                            .map(|w| Value::str(w.action_id.as_str()))
                            .collect(),
                    ),
                ),
                (
                    "lifecycles",
                    Value::object(
                        r.swept
                            .iter()
                            .map(|w| (w.action_id.as_str(), Value::str(w.lifecycle.as_str()))),
                    ),
                ),
                ("timeout_minutes", Value::from(i64::from(r.timeout_minutes))),
                (
                    "expired",
                    Value::Array(r.expired.iter().map(|id| Value::str(id.as_str())).collect()),
                ),
            ]))
        }
        "get" => ok(get_outcome(store, ref_name, action, now)?.to_value()),
        "state" => {
            let st = show(store, ref_name, action)?;
            ok(Value::object([
                ("lifecycle", Value::str(st.lifecycle().as_str())),
                ("outcome", Value::str(st.outcome_status().as_str())),
                ("claimed", Value::Bool(st.claim.is_some())),
                (
                    "attempt_id",
                    st.claim
                        .as_ref()
                        .map_or(Value::Null, |c| Value::str(c.attempt_id.as_str())),
                ),
            ]))
        }
        "timeout" => ok(Value::object([(
            "minutes",
            Value::from(i64::from(timeout_minutes(number(s.get("input").unwrap())))),
        )])),
        "act_hash" => ok(Value::object([(
            "hash",
            act_content_hash(s.get("act")).map_or(Value::Null, Value::str),
        )])),
        "scrub" => ok(Value::object([("act", scrub_act(s.get("act").unwrap()))])),
        "plant" | "plant_claim" | "unplant" => {
            let id = ActionId::parse(action).unwrap();
            let tip = store.tip(ref_name)?;
            let detected = crate::finality::layout::detect(&store.snapshot(tip)?).unwrap();
            let layout = detected.layout;
            let before = crate::finality::read_state(&store.snapshot(tip)?, &id)
                .ok()
                .flatten();
            let entry = |st: &Option<State>| {
                st.as_ref()
                    .map(|st| pending::entry_path(&id, st.action.created_at))
            };
            let fill = |p: String| {
                p.replace("{dir}", &layout.action_dir(&id))
                    .replace("{entry}", &entry(&before).unwrap_or_default())
            };
            let mut files = Vec::new();
            let mut removals = Vec::new();
            if op == "unplant" {
                removals.push(fill(field("path").unwrap()));
            } else if op == "plant" {
                files.push((
                    fill(field("path").unwrap()),
                    field("text").unwrap().into_bytes(),
                ));
            } else {
                let st = show(store, ref_name, action)?;
                let c = Claim {
                    action_id: id.clone(),
                    attempt_id: AttemptId::parse(attempt).unwrap(),
                    binding_sha256: st.action_sha256,
                    claimed_at: now,
                    guard_decision_id: "gd_1".into(),
                };
                files.push((layout.record_path(&id, RecordKind::Claim), c.to_bytes()));
            }
            if detected.fresh
                && let Some(record) = layout.record()
            {
                files.push((
                    crate::finality::layout::RECORD_PATH.into(),
                    record.into_bytes(),
                ));
            }
            let commit = store.write_commit_with(tip, &files, &removals, true, "plant", &sig())?;
            store.update_ref(ref_name, tip, commit, "plant")?;
            // The index follows the planted records, as a writer keeps it, unless the step
            // tampers with the index itself.
            if layout.has_pending_index() && s.get("raw").is_none() && op != "unplant" {
                let snap = store.snapshot(Some(commit))?;
                if let Ok(after) = crate::finality::read_state(&snap, &id) {
                    let want = after
                        .as_ref()
                        .filter(|st| pending::indexed(st))
                        .map(|st| pending::entry_path(&id, st.action.created_at));
                    let had = entry(&before).filter(|p| snap.exists(p).unwrap_or(false));
                    if want != had {
                        let put: Vec<(String, Vec<u8>)> =
                            want.into_iter().map(|p| (p, Vec::new())).collect();
                        let drop: Vec<String> = had.into_iter().collect();
                        let fixed = store.write_commit_with(
                            Some(commit),
                            &put,
                            &drop,
                            true,
                            "index",
                            &sig(),
                        )?;
                        store.update_ref(ref_name, Some(commit), fixed, "index")?;
                    }
                }
            }
            ok(Value::Null)
        }
        "verify" => {
            let snap = store.snapshot(store.tip(ref_name)?)?;
            let rules: BTreeSet<&str> = verify(&snap)?.iter().map(|f| f.rule.code()).collect();
            ok(Value::object([(
                "rules",
                Value::Array(rules.into_iter().map(Value::str).collect()),
            )]))
        }
        other => panic!("unknown op {other}"),
    }
}

fn store_ref(s: &Store) -> &Store {
    s
}

/// Whether `actual` has every member of `expect` (objects: a subset; anything else: equal).
fn matches(expect: &Value, actual: &Value) -> bool {
    match (expect, actual) {
        (Value::Object(e), Value::Object(a)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|x| matches(v, x))),
        (e, a) => e == a,
    }
}

/// Every case of testdata/finality/cases.json (the reference's finality test scenarios, restated).
#[test]
fn contract_cases() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/finality/cases.json");
    let doc = canonical::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = doc.get("cases").and_then(Value::as_array).unwrap();
    assert!(cases.len() >= 30, "at least 30 cases");
    let mut ids = BTreeSet::new();
    let mut failures = Vec::new();
    for case in cases {
        let id = case.get("id").and_then(Value::as_str).unwrap();
        assert!(ids.insert(id), "duplicate case id {id}");
        let (dir, store) = repo();
        let repo_path = dir.path().join("state.git");
        for (i, s) in case
            .get("steps")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .enumerate()
        {
            let s = expand(s);
            let result = step(&store, &repo_path, &s);
            let Some(expect) = s.get("expect") else {
                if let Err(e) = result {
                    failures.push(format!("{id} step {i}: unexpected error {}: {e}", e.code()));
                }
                continue;
            };
            let problem = match (&result, expect.get("error").and_then(Value::as_str)) {
                (Err(e), Some(code)) => {
                    let status = expect.get("current_status").and_then(Value::as_str);
                    (e.code() != code || (status.is_some() && e.current_status() != status))
                        .then(|| format!("got {} ({:?}): {e}", e.code(), e.current_status()))
                }
                (Err(e), None) => Some(format!("unexpected error {}: {e}", e.code())),
                (Ok(v), Some(code)) => Some(format!(
                    "expected {code}, got {}",
                    canonical::to_canonical_unchecked(v)
                )),
                (Ok(v), None) => (!matches(expect, v)).then(|| {
                    format!(
                        "expected {}\n      got {}",
                        canonical::to_canonical_unchecked(expect),
                        canonical::to_canonical_unchecked(v)
                    )
                }),
            };
            if let Some(p) = problem {
                failures.push(format!(
                    "{id} step {i} ({}): {p}",
                    s.get("op").and_then(Value::as_str).unwrap()
                ));
            }
        }
        // Whatever the operations wrote verifies clean, unless the case planted a defect.
        let planted = case
            .get("steps")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .any(|s| {
                s.get("op")
                    .and_then(Value::as_str)
                    .is_some_and(|o| o.starts_with("plant") || o == "unplant")
            });
        if !planted && let Ok(Some(tip)) = store.tip("refs/heads/main") {
            let snap = store.snapshot(Some(tip)).unwrap();
            let findings = verify(&snap).unwrap();
            if !findings.is_empty() {
                failures.push(format!(
                    "{id}: the written records do not verify: {findings:?}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}
