//! Fuzz target `serve`: raw request bytes written to one in-memory connection served by the
//! real router (HTTP/1 parsing, routing, extractors, handlers, the writer thread and a state
//! repository in a temporary directory). See `check_serve_answers` in ../checks.rs.
#![no_main]
#![allow(dead_code)]

use std::sync::OnceLock;
use std::time::Duration;

use action_ledger as al;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt as _;

include!("../checks.rs");

struct Fixture {
    _tmp: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    _handle: al::server::writer::Handle,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("temporary directory");
        let settings = serve_settings(tmp.path().join("state.git"));
        let (app, handle) = al::server::api::App::start(settings).expect("server starts");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        Fixture {
            router: al::server::api::router(app),
            _tmp: tmp,
            rt,
            _handle: handle,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let response = f.rt.block_on(async {
        let (mut client, server_end) = tokio::io::duplex(1 << 20);
        let service = f
            .router
            .clone()
            .map_request(|r: hyper::Request<hyper::body::Incoming>| r.map(axum::body::Body::new));
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .half_close(true)
            .serve_connection(TokioIo::new(server_end), TowerToHyperService::new(service));
        client.write_all(data).await.expect("write request");
        client.shutdown().await.expect("end of request");
        let served = tokio::time::timeout(Duration::from_secs(10), conn).await;
        assert!(served.is_ok(), "a connection whose client finished must end");
        let mut out = Vec::new();
        client.read_to_end(&mut out).await.expect("read response");
        out
    });
    check_serve_answers(&response);
});
