//! `serve`: the execution-finality HTTP API over the state repository.
//!
//! Resolves the settings the server takes (keys from `--api-keys` and
//! `$ACTION_LEDGER_API_KEY` with `$ACTION_LEDGER_PRINCIPAL`, the policy, the cron secret from
//! `$ACTION_LEDGER_CRON_SECRET`, the clock, the landing target) and refuses to start on
//! contradictory or unsafe settings (no key without `--insecure-no-auth`, which is allowed on a
//! loopback address only). SIGINT or SIGTERM stop it after the requests in flight. SIGHUP reads
//! the keys file and the policy file again ([`keys_and_policy`], the server's reload source):
//! the key of the environment, read once at start, is kept. With `--webhooks FILE`, the webhooks
//! file is read at start (a malformed one refuses the start) and again on each SIGHUP
//! ([`crate::server::webhooks`]).

use crate::canonical::Value;
use crate::finality;

use crate::cli::Env;
use crate::cli::output::{Failure, Printer, line};
use crate::cli::settings::{absolute_url, remote_timeout, serve_clock, signature};

use crate::cli::args::ServeArgs;

/// The keys (`--api-keys`, plus the key of the environment resolved at start) and the policy
/// (`--policy`, else allow everything), read from their files now. The error names the file and
/// the rule it breaks (never a key: the keys file holds digests, and a key of the environment is
/// never quoted).
fn keys_and_policy(
    api_keys: Option<&std::path::Path>,
    env_key: Option<&(String, String)>,
    policy: Option<&std::path::Path>,
) -> Result<crate::server::Access, String> {
    use crate::server::{auth::Keys, policy::Policy};
    let mut keys = match api_keys {
        Some(path) => Keys::load(path).map_err(|e| e.to_string())?,
        None => Keys::new(),
    };
    if let Some((key, principal)) = env_key {
        keys.add_clear(key, principal, false)
            .map_err(|e| format!("ACTION_LEDGER_API_KEY: {e}"))?;
    }
    let policy = match policy {
        Some(path) => Policy::load(path).map_err(|e| e.to_string())?,
        None => Policy::default(),
    };
    Ok(crate::server::Access { keys, policy })
}

/// Runs `serve` until a signal stops it.
pub(in crate::cli) fn run(out: &mut Printer, env: &Env, a: ServeArgs) -> Result<(), Failure> {
    use crate::server;
    use std::net::ToSocketAddrs;
    let env_key = match env.get("ACTION_LEDGER_API_KEY").filter(|k| !k.is_empty()) {
        Some(key) => {
            let principal = env
                .get("ACTION_LEDGER_PRINCIPAL")
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    Failure::input(
                        "ACTION_LEDGER_API_KEY is set without ACTION_LEDGER_PRINCIPAL: name the key's principal",
                    )
                })?;
            Some((key.clone(), principal.clone()))
        }
        None => None,
    };
    let (keys_path, policy_path) = (a.api_keys.clone(), a.policy.clone());
    let reload: server::Reload = std::sync::Arc::new(move || {
        keys_and_policy(
            keys_path.as_deref(),
            env_key.as_ref(),
            policy_path.as_deref(),
        )
    });
    let server::Access { keys, policy } = reload().map_err(Failure::input)?;
    // The webhooks file: refused at start when malformed (naming the file, field and rule,
    // never a secret), read again on SIGHUP.
    let webhooks = match a.webhooks.clone() {
        Some(path) => {
            let config =
                server::webhooks::Config::load(&path).map_err(|e| Failure::input(e.to_string()))?;
            let source: server::webhooks::Source = std::sync::Arc::new(move || {
                server::webhooks::Config::load(&path).map_err(|e| e.to_string())
            });
            Some(server::webhooks::Setup {
                config,
                reload: Some(source),
            })
        }
        None => None,
    };
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
    let mut options = finality::Options::new(signature(env)?);
    options.ref_name = a.ref_name.clone();
    options.max_attempts = 32;
    options.target = match &a.remote {
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
        keys,
        insecure_no_auth: a.insecure_no_auth,
        policy,
        reload: Some(reload),
        cron_secret: env
            .get("ACTION_LEDGER_CRON_SECRET")
            .filter(|s| !s.is_empty())
            .cloned(),
        timeout_minutes: a.timeout_minutes,
        approval_expiry: crate::finality::ApprovalExpiry {
            default_wait_seconds: a.approval_timeout,
            grace_seconds: a.approval_grace,
        },
        sweep_every: (a.sweep_every > 0)
            .then(|| std::time::Duration::from_secs(u64::from(a.sweep_every) * 60)),
        max_batch: a.max_batch as usize,
        batch_linger: std::time::Duration::from_millis(5),
        client_timeout: std::time::Duration::from_secs(30),
        max_streams: a.max_streams as usize,
        webhooks,
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
        super::super::settings::accept_rewritten(&store, &settings.options.target, &a.ref_name)?;
    }
    // Opening the repository and starting the writer are Git work: done here, before serving.
    let mut started = server::start(settings).map_err(Failure::input)?;
    let url = format!("http://{bound}");
    let (insecure, json) = (a.insecure_no_auth, a.json);
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| Failure::input(format!("cannot listen on {bound}: {e}")))?;
        // Before the announcement: a SIGHUP sent as soon as it is read reloads, never stops.
        started.take_hangup().map_err(Failure::input)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(key: &str) -> String {
        hex::encode(crate::server::auth::sha256(key.as_bytes()))
    }

    #[test]
    fn the_reload_source_reads_the_files_again_and_keeps_the_key_of_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let (keys, policy) = (dir.path().join("keys"), dir.path().join("policy.json"));
        std::fs::write(&keys, format!("bot {}\n", digest("k1"))).unwrap();
        let env_key = ("k-env-secret".to_owned(), "env-bot".to_owned());
        let read = || keys_and_policy(Some(&keys), Some(&env_key), Some(&policy));
        std::fs::write(&policy, r#"{"default":"allow"}"#).unwrap();
        let a = read().unwrap();
        assert_eq!(a.keys.len(), 2);
        assert!(a.keys.authenticate(b"k1").is_some());

        std::fs::write(&keys, format!("bot2 {} operator\n", digest("k2"))).unwrap();
        std::fs::write(&policy, r#"{"default":"block"}"#).unwrap();
        let a = read().unwrap();
        assert!(a.keys.authenticate(b"k1").is_none());
        assert!(a.keys.authenticate(b"k2").unwrap().operator);
        assert_eq!(
            a.keys.authenticate(b"k-env-secret").unwrap().principal,
            "env-bot"
        );
        assert_eq!(a.policy.default, crate::finality::Verdict::Block);

        // The key of the environment now also in the file: refused, without quoting it.
        std::fs::write(&keys, format!("bot2 {}\n", digest("k-env-secret"))).unwrap();
        let e = read().unwrap_err();
        assert!(e.starts_with("ACTION_LEDGER_API_KEY: "), "{e}");
        assert!(!e.contains("k-env-secret"), "{e}");

        std::fs::write(&keys, format!("bot {}\n", digest("k1"))).unwrap();
        std::fs::write(&policy, "{").unwrap();
        let e = read().unwrap_err();
        assert!(e.contains(&policy.display().to_string()), "{e}");
        // Without files: the key of the environment and the default policy.
        let a = keys_and_policy(None, Some(&env_key), None).unwrap();
        assert_eq!(a.keys.len(), 1);
        assert!(a.policy.rules.is_empty());
    }
}
