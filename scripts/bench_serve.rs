//! Load generator for `action-ledger serve` (compiled with `rustc` by `scripts/bench-serve.sh`;
//! not a test).
//!
//! `CLIENTS` threads each run `CYCLES` governed cycles over one keep-alive HTTP/1.1 connection:
//! `POST /api/guard?record=true` (a fresh idempotency key), `PATCH /api/actions/{id}` (the
//! claim), `POST /api/actions/{id}/outcome` (`completed`). Every answer must be the expected
//! one (200 and `claimed:true`); anything else is counted as an error. Prints one JSON object:
//! cycles, actions created, operations per second committed, p50/p99 latencies per request kind
//! in milliseconds, and the first action created by the first client (`first_action_id`).
//!
//! With `pending` (used by `scripts/bench-serve-scale.sh` to make stale actions), each
//! "cycle" is the guard alone: the action is created and left with its outcome pending.
//!
//! Usage: `bench_serve URL API_KEY CLIENTS CYCLES [pending]`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

struct Conn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    host: String,
    key: String,
}

impl Conn {
    fn open(host: &str, key: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(host)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            host: host.to_owned(),
            key: key.to_owned(),
        })
    }

    /// One request; the status and the body.
    fn call(&mut self, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nx-api-key: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            self.host,
            self.key,
            body.len()
        );
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body.as_bytes())?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0u8; length];
        self.reader.read_exact(&mut buf)?;
        Ok((status, String::from_utf8_lossy(&buf).into_owned()))
    }
}

fn field<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    let start = body.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = body[start..].find('"')? + start;
    Some(&body[start..end])
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[derive(Default)]
struct Stats {
    guard: Vec<f64>,
    claim: Vec<f64>,
    outcome: Vec<f64>,
    cycle: Vec<f64>,
    errors: usize,
    first_error: Option<String>,
    first_action: Option<String>,
    created: usize,
}

fn client(host: &str, key: &str, id: usize, cycles: usize, run: &str, pending: bool) -> Stats {
    let mut stats = Stats::default();
    let mut conn = match Conn::open(host, key) {
        Ok(c) => c,
        Err(e) => {
            stats.errors = cycles;
            stats.first_error = Some(e.to_string());
            return stats;
        }
    };
    let act = r#"{"kind":"shell","command":"./deploy.sh prod"}"#;
    for n in 0..cycles {
        let err = |stats: &mut Stats, what: String| {
            stats.errors += 1;
            stats.first_error.get_or_insert(what);
        };
        let guard = format!(
            r#"{{"action_type":"build","declared_goal":"bench","agent_id":"bench-agent","act":{act},"client_capabilities":["execution_claims"],"idempotency_key":"{run}-{id}-{n}"}}"#
        );
        let cycle = Instant::now();
        let t = Instant::now();
        let (status, body) = match conn.call("POST", "/api/guard?record=true", &guard) {
            Ok(r) => r,
            Err(e) => {
                err(&mut stats, e.to_string());
                break;
            }
        };
        stats.guard.push(t.elapsed().as_secs_f64() * 1000.0);
        let Some(action_id) = field(&body, "action_id").filter(|_| status == 200) else {
            err(&mut stats, format!("guard {status} {body}"));
            continue;
        };
        let action_id = action_id.to_owned();
        stats.first_action.get_or_insert_with(|| action_id.clone());
        stats.created += 1;
        if pending {
            stats.cycle.push(cycle.elapsed().as_secs_f64() * 1000.0);
            continue;
        }
        let claim = format!(
            r#"{{"claim_execution":true,"attempt_id":"attempt-{run}-{id}-{n}","agent_id":"bench-agent","act":{act}}}"#
        );
        let t = Instant::now();
        match conn.call("PATCH", &format!("/api/actions/{action_id}"), &claim) {
            Ok((200, body)) if body.contains("\"claimed\":true") => {
                stats.claim.push(t.elapsed().as_secs_f64() * 1000.0)
            }
            Ok((s, body)) => {
                err(&mut stats, format!("claim {s} {body}"));
                continue;
            }
            Err(e) => {
                err(&mut stats, e.to_string());
                break;
            }
        }
        let t = Instant::now();
        match conn.call(
            "POST",
            &format!("/api/actions/{action_id}/outcome"),
            r#"{"status":"completed"}"#,
        ) {
            Ok((200, _)) => {
                stats.outcome.push(t.elapsed().as_secs_f64() * 1000.0);
                stats.cycle.push(cycle.elapsed().as_secs_f64() * 1000.0);
            }
            Ok((s, body)) => err(&mut stats, format!("outcome {s} {body}")),
            Err(e) => {
                err(&mut stats, e.to_string());
                break;
            }
        }
    }
    stats
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let pending = args.len() == 6 && args[5] == "pending";
    if args.len() != 5 && !pending {
        eprintln!("usage: bench_serve URL API_KEY CLIENTS CYCLES [pending]");
        std::process::exit(2);
    }
    let host = args[1]
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let key = args[2].clone();
    let clients: usize = args[3].parse().expect("CLIENTS is a number");
    let cycles: usize = args[4].parse().expect("CYCLES is a number");
    let run = format!(
        "r{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let start = Instant::now();
    let handles: Vec<_> = (0..clients)
        .map(|id| {
            let (host, key, run) = (host.clone(), key.clone(), run.clone());
            std::thread::spawn(move || client(&host, &key, id, cycles, &run, pending))
        })
        .collect();
    let mut all = Stats::default();
    for h in handles {
        let s = h.join().expect("a client thread");
        all.guard.extend(s.guard);
        all.claim.extend(s.claim);
        all.outcome.extend(s.outcome);
        all.cycle.extend(s.cycle);
        all.errors += s.errors;
        all.created += s.created;
        if all.first_error.is_none() {
            all.first_error = s.first_error;
        }
        if all.first_action.is_none() {
            all.first_action = s.first_action;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for v in [
        &mut all.guard,
        &mut all.claim,
        &mut all.outcome,
        &mut all.cycle,
    ] {
        v.sort_by(f64::total_cmp);
    }
    let ops = all.guard.len() + all.claim.len() + all.outcome.len();
    let p = |v: &[f64]| {
        format!(
            "{{\"p50\":{:.2},\"p99\":{:.2}}}",
            percentile(v, 0.5),
            percentile(v, 0.99)
        )
    };
    println!(
        "{{\"clients\":{clients},\"cycles\":{},\"actions\":{},\"seconds\":{secs:.2},\"cycles_per_s\":{:.0},\"ops_per_s\":{:.0},\"guard_ms\":{},\"claim_ms\":{},\"outcome_ms\":{},\"cycle_ms\":{},\"errors\":{},\"first_error\":{:?},\"first_action_id\":{:?}}}",
        all.outcome.len(),
        all.created,
        all.cycle.len() as f64 / secs,
        ops as f64 / secs,
        p(&all.guard),
        p(&all.claim),
        p(&all.outcome),
        p(&all.cycle),
        all.errors,
        all.first_error.unwrap_or_default(),
        all.first_action.unwrap_or_default()
    );
}
