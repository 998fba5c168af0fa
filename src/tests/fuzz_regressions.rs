//! The fuzzers' regression inputs, replayed in `cargo test`.
//!
//! `scripts/fuzz.sh` runs the cargo-fuzz targets of `scripts/fuzz/`; every input that made one
//! fail is kept in `testdata/fuzz/<target>/` and replayed here through the same checks
//! (`scripts/fuzz/checks.rs`, included below), so a fixed fault stays fixed without nightly or
//! cargo-fuzz. The `serve` inputs are sent over a loopback connection to the real router; the
//! `verify` inputs become trees in a new repository each.
#![cfg(test)]
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate as al;

include!("../../scripts/fuzz/checks.rs");

/// The check of one target's input.
type Check = fn(&[u8]);

/// The fuzz targets, each with the check its inputs replay through.
const TARGETS: [(&str, Check); 5] = [
    ("canonical", check_canonical),
    ("event_line", check_event_line),
    ("shard", check_shard),
    ("spool", check_spool),
    ("verify", check_verify),
];

/// Every regression input of `target` (none when it has no directory yet).
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/fuzz")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Vec<u8>)> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_none_or(|x| x != "md"))
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a regression input");
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn fuzz_regressions_replay() {
    let mut replayed = 0;
    for (target, check) in TARGETS {
        for (path, bytes) in inputs(target) {
            let result = std::panic::catch_unwind(|| check(&bytes));
            assert!(result.is_ok(), "{target}: {} fails again", path.display());
            replayed += 1;
        }
    }
    // The kept inputs ship with the project: none found means the replay looked elsewhere.
    assert!(replayed > 0, "no regression input under testdata/fuzz/");
    eprintln!("replayed {replayed} regression inputs");
}

/// The `verify` target's decoder writes the tree it is given: the reference importer's tree of
/// one published event, encoded as plain files, verifies clean, so generated trees reach the
/// ledger checks rather than stopping at a tree the decoder built wrong.
#[test]
fn fuzz_verify_input_of_a_published_event_verifies_clean() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fuzz/verify/clean-single-event");
    let (_tmp, store, commit) = verify_tree(&std::fs::read(path).expect("the kept input"));
    let report = al::verify::verify_revision(&store, commit).expect("verify runs");
    assert!(report.is_clean(), "{:#?}", report.findings);
    assert_eq!((report.shards, report.events), (1, 1));
}

/// Sends `request` on one loopback connection to a server built like the fuzz target's and
/// returns everything it answered.
fn serve_once(rt: &tokio::runtime::Runtime, router: &axum::Router, request: &[u8]) -> Vec<u8> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    use tower::ServiceExt as _;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    let request = request.to_vec();
    let client = std::thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        // The server may answer and close before the whole request is written.
        let _ = s.write_all(&request);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    });
    rt.block_on(async {
        let (stream, _) = listener.accept().await.expect("accept");
        let service = router
            .clone()
            .map_request(|r: hyper::Request<hyper::body::Incoming>| r.map(axum::body::Body::new));
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .half_close(true)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let served = tokio::time::timeout(Duration::from_secs(10), conn).await;
        assert!(
            served.is_ok(),
            "a connection whose client finished must end"
        );
    });
    client.join().expect("the client thread")
}

#[test]
fn fuzz_regressions_replay_serve() {
    let requests = inputs("serve");
    assert!(
        !requests.is_empty(),
        "no serve input under testdata/fuzz/serve/"
    );
    let tmp = tempfile::tempdir().expect("temporary directory");
    let (app, handle) =
        al::server::api::App::start(serve_settings(tmp.path().join("state.git"))).expect("start");
    let router = al::server::api::router(app);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    for (path, bytes) in &requests {
        let answer = serve_once(&rt, &router, bytes);
        // Every kept request is complete: the server must answer it, not drop it.
        assert!(
            !answer.is_empty(),
            "serve: {} got no answer",
            path.display()
        );
        let result = std::panic::catch_unwind(|| check_serve_answers(&answer));
        assert!(result.is_ok(), "serve: {} fails again", path.display());
    }
    drop(router);
    handle.join();
}
