//! A CrabFleet stand-in for the tests: an HTTPS server on 127.0.0.1 with a certificate made at
//! test time (a CA and a leaf for `127.0.0.1`, by `rcgen`), answering each request as its spec
//! says: a status (optionally after a delay), never, or by dropping the connection. It records
//! every request (method, path, headers, exact body) and the most requests held at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

/// How the stand-in answers one request.
#[derive(Clone, Debug)]
pub(crate) enum Answer {
    /// An HTTP answer, after `delay_ms`.
    Status {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
        delay_ms: u64,
    },
    /// Read the request, never answer.
    Hang,
    /// Read the request, then close the connection without answering.
    Reset,
}

impl Answer {
    pub(crate) fn status(status: u16) -> Answer {
        Answer::Status {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay_ms: 0,
        }
    }
}

/// A request as the stand-in received it.
#[derive(Clone, Debug)]
pub(crate) struct Captured {
    pub method: String,
    pub path: String,
    /// Header names lowercased, in wire order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Captured {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Chooses the answer for a request.
pub(crate) type Responder = Arc<dyn Fn(&Captured) -> Answer + Send + Sync>;

/// A running stand-in; stopped when dropped.
pub(crate) struct StandIn {
    pub port: u16,
    /// The CA certificate (PEM) to trust.
    pub ca_pem: Vec<u8>,
    pub requests: Arc<Mutex<Vec<Captured>>>,
    pub max_in_flight: Arc<AtomicUsize>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn tls_config() -> (Arc<rustls::ServerConfig>, Vec<u8>) {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "action-ledger test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let leaf_key = rcgen::KeyPair::generate().expect("leaf key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("leaf params");
    let leaf_cert = leaf
        .signed_by(&leaf_key, &ca_cert, &ca_key)
        .expect("leaf cert");
    // The ring provider: the one the client side (reqwest) is built with too.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf_cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .expect("server config");
    (Arc::new(config), ca_cert.pem().into_bytes())
}

impl StandIn {
    /// Starts a stand-in answering with `responder`.
    pub(crate) fn start(responder: Responder) -> StandIn {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (config, ca_pem) = tls_config();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        {
            let requests = requests.clone();
            let max_in_flight = max_in_flight.clone();
            runtime.spawn(async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    let acceptor = acceptor.clone();
                    let responder = responder.clone();
                    let requests = requests.clone();
                    let in_flight = in_flight.clone();
                    let max_in_flight = max_in_flight.clone();
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let Some(req) = read_request(&mut tls).await else {
                            return;
                        };
                        requests.lock().expect("requests").push(req.clone());
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max_in_flight.fetch_max(now, Ordering::SeqCst);
                        match responder(&req) {
                            Answer::Hang => std::future::pending::<()>().await,
                            Answer::Reset => {}
                            Answer::Status {
                                status,
                                headers,
                                body,
                                delay_ms,
                            } => {
                                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                                let mut head = format!(
                                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                                    body.len()
                                );
                                for (k, v) in headers {
                                    head.push_str(&format!("{k}: {v}\r\n"));
                                }
                                head.push_str("\r\n");
                                head.push_str(&body);
                                let _ = tls.write_all(head.as_bytes()).await;
                                let _ = tls.shutdown().await;
                            }
                        }
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
        }
        StandIn {
            port,
            ca_pem,
            requests,
            max_in_flight,
            runtime: Some(runtime),
        }
    }

    /// The requests received so far.
    pub(crate) fn captured(&self) -> Vec<Captured> {
        self.requests.lock().expect("requests").clone()
    }
}

async fn read_request<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Captured> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_owned();
    let path = first.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Captured {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
