//! The live-projection vectors (`projection_*.json`): each case's steps run through the code of
//! `record` and `seal` ([`live::after_record`], [`live::deliver::drain`],
//! [`live::finalize::finalize`]) against a local HTTPS stand-in answering as the case's
//! `server` spec says, with the case's pinned clocks. Compared: every spool file the reference
//! writes, byte for byte; every output file; the last flush's result; the requests the
//! stand-in received (method, path, `authorization`, `content-type`, exact body); the
//! configuration verdict (`config_probe`).
//!
//! The one named difference: our durable outbox (`.clawsweeper-repair/crabfleet-outbox/`, see
//! [`live::outbox`]) is not a file the reference writes, so it is left out of the spool
//! comparison. Snapshots and arrival order are not compared (not part of the contract).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value as Json;

use super::{Outcome, items, json_to_value, read_tree, refused_where_accepted, to_value};
use crate::canonical::{self, Value};
use crate::live::{self, config::Verdict};
use crate::privacy::Profile;
use crate::tests::crabfleet::{Answer, Captured, StandIn};
use crate::time::Timestamp;
use crate::writer::files::Root;
use crate::writer::{interrupt, record, seal, spool::Spool};

/// The answer a vector's `{status, headers?, body?, delay_ms?}` or `{hang: true}` describes.
fn answer(spec: &Json) -> Answer {
    if spec["hang"].as_bool() == Some(true) {
        return Answer::Hang;
    }
    Answer::Status {
        status: spec["status"].as_u64().unwrap_or(200) as u16,
        headers: spec["headers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
            .collect(),
        body: spec["body"].as_str().unwrap_or("").to_owned(),
        delay_ms: spec["delay_ms"].as_u64().unwrap_or(0),
    }
}

/// Whether a rule's `match` holds for a request.
fn matches(rule: &Json, req: &Captured) -> bool {
    let event: Json = serde_json::from_str(&req.body)
        .ok()
        .map(|b: Json| b["payload"]["event"].clone())
        .unwrap_or(Json::Null);
    rule.as_object().into_iter().flatten().all(|(k, want)| {
        let got = match k.as_str() {
            "path" => Json::String(req.path.clone()),
            "event_type" => event["event_type"].clone(),
            "status" => event["action"]["status"].clone(),
            "subject_number" => event["subject"]["number"].clone(),
            _ => return false,
        };
        got == *want
    })
}

fn start_server(spec: &Json) -> Result<StandIn, String> {
    let default = answer(&spec["default"]);
    let mut rules = Vec::new();
    for r in items(&spec["rules"]) {
        for k in r["match"].as_object().into_iter().flatten().map(|(k, _)| k) {
            if !["path", "event_type", "status", "subject_number"].contains(&k.as_str()) {
                return Err(format!("unknown server rule key {k}"));
            }
        }
        rules.push((r["match"].clone(), answer(&r["respond"])));
    }
    Ok(StandIn::start(Arc::new(move |req: &Captured| {
        rules
            .iter()
            .find(|(m, _)| matches(m, req))
            .map_or_else(|| default.clone(), |(_, a)| a.clone())
    })))
}

fn env_of(step: &Json, subst: &dyn Fn(&str) -> String) -> record::Environment {
    step["env"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), subst(v.as_str().unwrap_or(""))))
        .collect()
}

fn map_files(files: &Json) -> BTreeMap<String, String> {
    files
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
        .collect()
}

/// Runs one projection case under `profile`.
pub(super) fn run(case: &Json, ordered: &Value, profile: Profile) -> Outcome {
    match run_inner(case, ordered, profile) {
        Ok(o) => o,
        Err(m) => Outcome::Fail(m),
    }
}

fn run_inner(case: &Json, ordered: &Value, profile: Profile) -> Result<Outcome, String> {
    for s in items(&case["steps"]) {
        if s.get("root").is_some_and(|r| !r.is_null() && r != "<ROOT>") {
            return Err("multi-root cases are not supported by this harness yet".into());
        }
    }
    let server = match &case["server"] {
        Json::Null => None,
        spec => Some(start_server(spec)?),
    };
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let port = server.as_ref().map_or(0, |s| s.port);
    let spool_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let out_dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root_path =
        crate::writer::files::absolute_root(spool_dir.path()).map_err(|e| e.to_string())?;
    let out_path =
        crate::writer::files::absolute_root(out_dir.path()).map_err(|e| e.to_string())?;
    let subst = |s: &str| {
        s.replace("{PORT}", &port.to_string())
            .replace("{CLOSED_PORT}", &closed_port.to_string())
            .replace("<ROOT>", &root_path.display().to_string())
            .replace("<OUTPUT_ROOT>", &out_path.display().to_string())
    };
    let wall_text = case["wall_clock"]["pinned_new_Date"]
        .as_str()
        .ok_or("no wall_clock.pinned_new_Date")?;
    let wall_at = Timestamp::from_millis(super::epoch_ms(wall_text));
    let wall = move || wall_at;
    let projector = live::deliver::Projector::new(server.as_ref().map(|s| s.ca_pem.as_slice()))
        .map_err(|e| e.to_string())?;
    let pid = std::process::id();
    let root =
        Root::open(&root_path, crate::writer::spool::ROOT_LABEL).map_err(|e| e.to_string())?;
    let ordered_steps = ordered.get("steps").and_then(Value::as_array);
    let mut last_verdict = Verdict::Disabled;
    let mut first_env: Option<record::Environment> = None;
    let mut last_flush: Option<Json> = None;
    for (i, step) in items(&case["steps"]).enumerate() {
        let env = env_of(step, &subst);
        match step["kind"].as_str() {
            Some("record") => {
                first_env.get_or_insert_with(|| env.clone());
                let input = ordered_steps
                    .and_then(|s| s.get(i))
                    .and_then(|s| s.get("input"))
                    .ok_or("record step without input")?;
                let input = to_value(input).map_err(|e| e.to_string())?;
                let now =
                    Timestamp::from_millis(super::epoch_ms(step["now"].as_str().unwrap_or("")));
                let options = record::Options { privacy: profile };
                let result = match step["api"].as_str() {
                    Some("recordWorkflowPhaseEvent") => {
                        record::record_phase_outcome(&root_path, &input, &env, now, &options)
                    }
                    Some("recordWorkflowActionEvent") => {
                        record::record_action_outcome(&root_path, &input, &env, now, &options)
                    }
                    other => return Err(format!("unknown api {other:?}")),
                };
                let verdict = live::config::verdict(&env);
                match (result, step.get("error")) {
                    (Ok(got), None) => {
                        let want = &step["returned_event"];
                        match (&got, want.is_null()) {
                            (None, true) => {}
                            (Some((ev, _)), false) => {
                                let theirs = json_to_value(want)
                                    .ok()
                                    .and_then(|v| canonical::to_canonical(&v).ok())
                                    .ok_or("bad returned_event")?;
                                if *ev.json != *theirs {
                                    return Err(format!("step {i}: event differs"));
                                }
                            }
                            _ => return Err(format!("step {i}: returned {}", got.is_some())),
                        }
                        if let Some((ev, _)) = got {
                            live::after_record(&root, &ev, &verdict, wall())
                                .map_err(|e| format!("step {i}: {e}"))?;
                        }
                    }
                    (Err(e), Some(want)) => {
                        let msg = want["message"].as_str().unwrap_or("");
                        if !e.to_string().contains(&subst(msg)) {
                            return Err(format!("step {i}: error {e} != {msg}"));
                        }
                    }
                    (Err(e), None) => {
                        return Ok(match refused_where_accepted(e.to_string(), profile) {
                            Outcome::Fail(m) => Outcome::Fail(format!("step {i}: {m}")),
                            other => other,
                        });
                    }
                    (Ok(_), Some(_)) => {
                        return Err(format!("step {i}: recorded, reference refused"));
                    }
                }
                last_verdict = verdict;
            }
            Some("interrupt") => {
                let reason = step["reasonCode"]
                    .as_str()
                    .and_then(interrupt::Reason::parse)
                    .ok_or("interrupt reasonCode")?;
                let now =
                    Timestamp::from_millis(super::epoch_ms(step["now"].as_str().unwrap_or("")));
                let written = interrupt::interrupt_open_attempts_events(&root_path, reason, now)
                    .map_err(|e| format!("step {i}: {e}"))?;
                if Some(written.len() as u64) != step["returned"].as_u64() {
                    return Err(format!("step {i}: interrupted {} events", written.len()));
                }
                let verdict = live::config::verdict(&env);
                for ev in &written {
                    live::after_record(&root, ev, &verdict, wall())
                        .map_err(|e| format!("step {i}: {e}"))?;
                }
            }
            Some("idle") => {
                let ms = step["ms"].as_u64().ok_or("idle ms")?;
                live::deliver::drain(
                    Some(&projector),
                    &root,
                    &last_verdict,
                    std::time::Duration::from_millis(ms),
                    pid,
                    &wall,
                )
                .map_err(|e| format!("step {i}: {e}"))?;
            }
            Some("flush") => {
                let spool = Spool::open(&root_path).map_err(|e| e.to_string())?;
                let out =
                    Root::open(&out_path, seal::OUTPUT_ROOT_LABEL).map_err(|e| e.to_string())?;
                let verdict = live::config::verdict(&env);
                let drain = live::finalize::Drain {
                    verdict: &verdict,
                    projector: Some(&projector),
                    flush_timeout_ms: step["options"]["projectionFlushTimeoutMs"].as_f64(),
                    pid,
                    wall: &wall,
                };
                let options = seal::Options {
                    privacy: profile,
                    ..seal::Options::default()
                };
                let got = live::finalize::finalize(&spool, Some(&out), wall(), &options, &drain);
                let want = &step["result"];
                match (got, want["ok"].as_bool() == Some(true)) {
                    (Ok((report, _)), true) => {
                        let paths: Vec<String> = items(&want["paths"])
                            .map(|p| p.as_str().unwrap_or("").to_owned())
                            .collect();
                        if report.shard_paths != paths {
                            return Err(format!(
                                "step {i}: paths {:?} != {paths:?}",
                                report.shard_paths
                            ));
                        }
                    }
                    (Err(e), false) => {
                        let msg = want["error"]["message"].as_str().unwrap_or("");
                        if !e.to_string().contains(msg) {
                            return Err(format!("step {i}: error {e} != {msg}"));
                        }
                    }
                    (Err(e), true) => {
                        return Ok(match refused_where_accepted(e.to_string(), profile) {
                            Outcome::Fail(m) => Outcome::Fail(format!("step {i}: {m}")),
                            other => other,
                        });
                    }
                    (Ok(_), false) => return Err(format!("step {i}: flushed, reference failed")),
                }
                last_flush = Some(step.clone());
            }
            Some("snapshot") => {}
            other => return Err(format!("unknown step kind {other:?}")),
        }
    }
    let expected = &case["expected"];
    // The finalization result is the last flush's, checked above.
    if !expected["finalization_result"].is_null() && last_flush.is_none() {
        return Err("expected a flush".into());
    }
    let ours: BTreeMap<String, String> = read_tree(&root_path)
        .into_iter()
        .filter(|(k, _)| !k.starts_with(&format!("{}/", live::outbox::DIR)))
        .collect();
    let theirs = map_files(&expected["spool_files"]);
    super::compare_trees("spool", &ours, &theirs).map_err(|e| {
        let differing = ours.iter().rfind(|(k, v)| theirs.get(*k) != Some(*v));
        match differing {
            Some((k, v)) => format!(
                "{e}\n    ours:   {v}    theirs: {}",
                theirs.get(k).map_or("-", |t| t)
            ),
            None => e,
        }
    })?;
    super::compare_trees(
        "output",
        &read_tree(&out_path),
        &map_files(&expected["output_files"]),
    )?;
    // Requests: sorted by eventKey then path, as the vectors list them.
    let key = |body: &str, path: &str| {
        let k = serde_json::from_str::<Json>(body)
            .ok()
            .and_then(|b| b["eventKey"].as_str().map(str::to_owned))
            .unwrap_or_default();
        (k, path.to_owned())
    };
    let mut got: Vec<Captured> = server.as_ref().map(StandIn::captured).unwrap_or_default();
    got.sort_by_key(|r| key(&r.body, &r.path));
    let want: Vec<&Json> = items(&case["requests"]).collect();
    if got.len() != want.len() {
        return Err(format!("{} requests, reference {}", got.len(), want.len()));
    }
    for (g, w) in got.iter().zip(want) {
        let header = |name: &str| {
            items(&w["raw_headers"])
                .find(|h| h[0] == name)
                .and_then(|h| h[1].as_str())
                .map(subst)
        };
        let url = w["url"].as_str().unwrap_or("");
        if g.method != w["method"].as_str().unwrap_or("")
            || g.path != url
            || g.header("authorization").map(str::to_owned) != header("authorization")
            || g.header("content-type").map(str::to_owned) != header("content-type")
            || g.body != w["body"].as_str().unwrap_or("")
        {
            return Err(format!("request to {url} differs"));
        }
    }
    // The configuration verdict.
    let probe = &case["config_probe"];
    if !probe.is_null() {
        let env = first_env.ok_or("config_probe without a record step")?;
        let ok = match (live::config::verdict(&env), probe["outcome"].as_str()) {
            (Verdict::Disabled, Some("disabled")) => true,
            (Verdict::Invalid(e), Some("invalid")) => {
                e.to_string() == probe["error"]["message"].as_str().unwrap_or("")
            }
            (Verdict::Valid(c), Some("valid")) => {
                c.endpoint == subst(probe["endpoint_url"].as_str().unwrap_or(""))
            }
            _ => false,
        };
        if !ok {
            return Err(format!("config verdict differs from {probe}"));
        }
    }
    Ok(Outcome::Pass)
}
