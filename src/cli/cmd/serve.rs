//! `serve`: the execution-finality HTTP API over the state repository.
//!
//! Resolves the settings the server takes (keys from `--api-keys` and
//! `$ACTION_LEDGER_API_KEY` with `$ACTION_LEDGER_PRINCIPAL`, the policy, the cron secret from
//! `$ACTION_LEDGER_CRON_SECRET`, the clock, the landing target) and refuses to start on
//! contradictory or unsafe settings (no key without `--insecure-no-auth`, which is allowed on a
//! loopback address only). SIGINT or SIGTERM stop it after the requests in flight.

use crate::canonical::Value;
use crate::finality;

use crate::cli::Env;
use crate::cli::output::{Failure, Printer, line};
use crate::cli::settings::{absolute_url, remote_timeout, serve_clock, signature};

use crate::cli::args::ServeArgs;

/// Runs `serve` until a signal stops it.
pub(in crate::cli) fn run(out: &mut Printer, env: &Env, a: ServeArgs) -> Result<(), Failure> {
    use crate::server::{self, auth::Keys, policy::Policy};
    use std::net::ToSocketAddrs;
    let mut keys = match &a.api_keys {
        Some(path) => Keys::load(path).map_err(Failure::input)?,
        None => Keys::new(),
    };
    if let Some(key) = env.get("ACTION_LEDGER_API_KEY").filter(|k| !k.is_empty()) {
        let principal = env
            .get("ACTION_LEDGER_PRINCIPAL")
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                Failure::input(
                    "ACTION_LEDGER_API_KEY is set without ACTION_LEDGER_PRINCIPAL: name the key's principal",
                )
            })?;
        keys.add_clear(key, principal, false)
            .map_err(|e| Failure::input(format!("ACTION_LEDGER_API_KEY: {e}")))?;
    }
    let addr = a
        .listen
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            Failure::input(format!(
                "--listen {}: not an address (HOST:PORT, e.g. 127.0.0.1:8787)",
                a.listen
            ))
        })?;
    match (keys.is_empty(), a.insecure_no_auth) {
        (true, false) => {
            return Err(Failure::input(
                "no API key configured: give --api-keys FILE or ACTION_LEDGER_API_KEY with ACTION_LEDGER_PRINCIPAL (for a loopback development server only: --insecure-no-auth)",
            ));
        }
        (true, true) if !server::is_loopback(&addr) => {
            return Err(Failure::input(format!(
                "--insecure-no-auth is only allowed on a loopback address, not {addr}"
            )));
        }
        (false, true) => {
            return Err(Failure::input(
                "--insecure-no-auth contradicts the configured API keys: drop one of them",
            ));
        }
        _ => {}
    }
    let policy = match &a.policy {
        Some(path) => Policy::load(path).map_err(Failure::input)?,
        None => Policy::default(),
    };
    let mut options = finality::Options::new(signature(env)?);
    options.ref_name = a.ref_name.clone();
    options.max_attempts = 32;
    let target = match &a.remote {
        Some(url) => finality::batch::Target::Remote {
            url: absolute_url(url),
            ref_name: a.remote_ref.clone().unwrap_or_else(|| a.ref_name.clone()),
            timeout: remote_timeout(env)?,
        },
        None => finality::batch::Target::Local,
    };
    let quiet = out.quiet;
    let settings = server::Settings {
        repo: a.repo.clone(),
        options,
        target,
        keys,
        insecure_no_auth: a.insecure_no_auth,
        policy,
        cron_secret: env
            .get("ACTION_LEDGER_CRON_SECRET")
            .filter(|s| !s.is_empty())
            .cloned(),
        timeout_minutes: a.timeout_minutes,
        sweep_every: (a.sweep_every > 0)
            .then(|| std::time::Duration::from_secs(u64::from(a.sweep_every) * 60)),
        max_batch: a.max_batch as usize,
        batch_linger: std::time::Duration::from_millis(5),
        client_timeout: std::time::Duration::from_secs(30),
        clock: serve_clock(env)?,
        // Straight to file descriptor 2: `main` holds the lock of `std::io::stderr` for the whole
        // run, so `eprintln!` from the server's threads would wait for it forever. Every line is
        // redacted here, whatever wrote it: no credential of a remote URL reaches the log.
        log: std::sync::Arc::new(move |line: &str| {
            if !quiet {
                use std::os::fd::AsFd as _;
                let line = crate::store::remote::redact(line);
                let _ =
                    rustix::io::write(std::io::stderr().as_fd(), format!("{line}\n").as_bytes());
            }
        }),
    };
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| Failure::input(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Failure::input(format!("cannot listen on {addr}: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::input(format!("cannot start the async runtime: {e}")))?;
    if a.accept_rewritten_remote {
        let store =
            crate::store::Store::open_or_init_bare(&settings.repo, &a.ref_name).map_err(|e| {
                Failure::input(format!(
                    "cannot open state repository {}: {e}",
                    settings.repo.display()
                ))
            })?;
        super::super::settings::accept_rewritten(&store, &settings.target, &a.ref_name)?;
    }
    // Opening the repository and starting the writer are Git work: done here, before serving.
    let started = server::start(settings).map_err(Failure::input)?;
    let url = format!("http://{bound}");
    let (insecure, json) = (a.insecure_no_auth, a.json);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Failure::input(format!("cannot listen on {bound}: {e}")))?;
        if insecure {
            out.note("warning: serving WITHOUT authentication (--insecure-no-auth): every caller is the operator `anonymous`");
        }
        out.note(&format!("listening on {url}"));
        if json {
            out.data(&line(&Value::object([
                ("type", Value::str("listening")),
                ("url", Value::str(url.as_str())),
            ])));
        }
        server::serve(started, listener, server::shutdown_signal())
            .await
            .map_err(Failure::input)
    })?;
    out.note("stopped");
    Ok(())
}
