//! Transport to a remote state repository through the `git` command.
//!
//! gix builds every object locally; it cannot push, so the `git` CLI moves objects and refs and
//! nothing else: `git ls-remote` reads the remote tip, `git fetch` brings its objects into the
//! local repository, and `git push --atomic --force-with-lease=<ref>:<expected>` lands a commit
//! only if the remote ref still holds the tip the commit was built on. The server's pre-receive
//! hook (`hooks/pre-receive`) may still refuse the push; that refusal is reported with the
//! hook's own lines.
//!
//! Credentials never need to be in the URL: `git` runs with the caller's environment and
//! configuration, so a credential helper, `GIT_ASKPASS`, an `http.extraHeader` (also through
//! `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>`) or an ssh key work as they do
//! for `git push`. A URL that does carry a user or a password is shown with them replaced by
//! `***` in every message ([`redact()`]), and so is any URL in git's own lines. A failure is
//! classified from git's messages ([`Cause`]: authentication, network, server) and its message
//! says what to do. Each `git` run may be given a time limit ([`Target::Remote::timeout`]);
//! past it, `git` and the helpers it started are killed and the step fails with
//! [`Error::TimedOut`].
//!
//! The loop that lands a commit through these steps (read the tip, build, push with a lease,
//! build again when the remote moved) is [`crate::store::land()`], the same loop as for a local
//! ref; this module is only the transport it uses, and the check it makes on each remote tip.
//!
//! # A rewritten remote
//!
//! A host without our hook lets anyone force-push the ledger ref. Building on such a tip would
//! silently drop whatever the old history held, so the cache remembers the last tip it built on
//! or landed, per remote and ref ([`confirmed_ref()`]: a ref of the cache named by a hash of the
//! [`redact()`]ed URL and the remote ref, so a rotated token keeps it and no credential is in
//! it). Each attempt of the landing loop checks that the remote tip descends from it
//! ([`check_not_rewritten()`], after the fetch, with the objects local) and otherwise fails
//! with [`Rewritten`] before the build step runs.
//! Another writer's fast-forward is no rewrite. [`accept_rewritten()`] (the CLI's
//! `--accept-rewritten-remote`) makes the remote's tip as it is now the remembered one after the
//! user checked it. A cache that remembers nothing (a fresh CI job) cannot tell: branch
//! protection on the host is the guard there.

mod many;

pub use many::{RefOutcome, RefUpdate, fetch_many, list_refs, push_many};

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::store::{self, CommitId, Store};

/// What kind of failure a `git` transport step met, as its messages tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The server did not accept the credentials git offered (or none were offered).
    Authentication,
    /// The connection could not be made, was reset, or stalled.
    Network,
    /// The server answered with an error (HTTP 5xx, a failed `receive-pack`).
    Server,
    /// Anything else (a missing repository, a malformed URL): git's own lines say.
    Other,
}

impl Cause {
    /// Classifies git's error output. Authentication is checked first: an HTTP 401 or 403 is
    /// also a server answer, and what the user must fix is the credential.
    pub fn of(stderr: &str) -> Cause {
        let text = stderr.to_ascii_lowercase();
        let any = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
        if any(&[
            "authentication failed",
            "could not read username",
            "could not read password",
            "returned error: 401",
            "returned error: 403",
            "http 401",
            "http 403",
            "permission denied (publickey",
            "invalid username or password",
            "invalid credentials",
        ]) {
            Cause::Authentication
        } else if any(&[
            "returned error: 5",
            "http 5",
            "internal server error",
            "bad gateway",
            "service unavailable",
            "unpack failed",
            "unpacker error",
            "remote: fatal",
        ]) {
            Cause::Server
        } else if any(&[
            "could not resolve",
            "failed to connect",
            "couldn't connect",
            "connection refused",
            "connection reset",
            "connection timed out",
            "operation timed out",
            "operation too slow",
            "timed out",
            "hung up unexpectedly",
            "early eof",
            "unexpected disconnect",
            "empty reply from server",
            "transfer closed",
            "broken pipe",
            "recv failure",
            "send failure",
            "rpc failed",
            "ssh: connect to host",
            "connection closed by",
            "kex_exchange_identification",
            "network is unreachable",
            "no route to host",
            // A stream that stopped midway: git notices a missing part of the protocol.
            "protocol error",
            "invalid packet",
            "bad packet",
            "bad band",
            "expected flush",
            "expected 'acknowledgments'",
            "expected 'packfile'",
            "end of file",
            "index-pack failed",
            "invalid index-pack output",
            "did not receive expected object",
            "unable to read",
            "short read",
            // `fetch` runs right after `ls-remote` saw the ref (and the hook denies deletions):
            // a ref missing from the answer is an answer cut short.
            "couldn't find remote ref",
        ]) {
            Cause::Network
        } else {
            Cause::Other
        }
    }

    /// What the user should do about a failure of this kind (empty for [`Cause::Other`]).
    pub fn advice(self) -> &'static str {
        match self {
            Cause::Authentication => {
                "authentication failed: the server did not accept the credentials git offered; \
                 give git a token that may push to this repository (a credential helper, \
                 GIT_ASKPASS or http.extraHeader; an ssh key for ssh URLs), then run the same \
                 command again"
            }
            Cause::Network => {
                "network failure: the connection could not be made, broke or stalled; a push \
                 either landed whole or not at all, so run the same command again once the \
                 server is reachable"
            }
            Cause::Server => {
                "server error: the server failed to handle the request; run the same command \
                 again later, and tell the server's operator if it persists"
            }
            Cause::Other => "",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cause::Authentication => "authentication",
            Cause::Network => "network",
            Cause::Server => "server",
            Cause::Other => "other",
        })
    }
}

/// Why a transport step failed. Every URL in it (and in git's lines) is [`redact()`]ed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `git` could not be started.
    #[error("cannot run git for {action} ({url}): {source}; is git installed?")]
    Spawn {
        /// The step (`ls-remote`, `fetch`, `push`).
        action: &'static str,
        /// The remote, redacted.
        url: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `git` failed for another reason than a moved ref or a refusal.
    #[error("git {action} {url} failed: {}", failure_text(*.cause, .stderr))]
    Failed {
        /// The step.
        action: &'static str,
        /// The remote, redacted.
        url: String,
        /// What kind of failure git's lines show.
        cause: Cause,
        /// What git printed, redacted.
        stderr: String,
    },
    /// `git` ran past its time limit and was stopped, with the helpers it started.
    #[error(
        "git {action} {url} did not finish within {} s and was stopped: {}; or raise the \
         remote timeout (ACTION_LEDGER_REMOTE_TIMEOUT for the command-line tool)",
        .limit.as_secs_f64(),
        Cause::Network.advice()
    )]
    TimedOut {
        /// The step.
        action: &'static str,
        /// The remote, redacted.
        url: String,
        /// The limit it ran past.
        limit: Duration,
    },
    #[error("git ls-remote {url} printed an unexpected line: {line}")]
    /// `git ls-remote` printed a line that is not `<id>\t<ref>`.
    Unparsable {
        /// The remote, redacted.
        url: String,
        /// The line.
        line: String,
    },
}

impl Error {
    /// The kind of failure: [`Cause::Network`] for a time limit, [`Cause::Other`] for a git
    /// that cannot be started or an unparsable answer.
    pub fn cause(&self) -> Cause {
        match self {
            Error::Failed { cause, .. } => *cause,
            Error::TimedOut { .. } => Cause::Network,
            Error::Spawn { .. } | Error::Unparsable { .. } => Cause::Other,
        }
    }

    /// Whether the remote may hold the commit all the same: a push whose connection broke,
    /// stalled or got an error answer may have been applied by the server before the answer
    /// was lost (the remote then holds the whole commit; running the writer again tells).
    /// Every other step, and a push the server did not authenticate, changed nothing.
    pub fn may_have_landed(&self) -> bool {
        match self {
            Error::Failed {
                action: "push",
                cause,
                ..
            } => *cause != Cause::Authentication,
            Error::TimedOut { action: "push", .. } => true,
            _ => false,
        }
    }
}

/// git's lines, led by what to do about them when the cause is known.
fn failure_text(cause: Cause, stderr: &str) -> String {
    match cause {
        Cause::Other => stderr.to_owned(),
        _ => format!("{}\n{stderr}", cause.advice()),
    }
}

/// `text` with the credentials of every URL in it replaced by `***`: the user and password
/// (`https://user:token@host/x` becomes `https://***@host/x`) and the value of every
/// credential-shaped query parameter (a name containing `token`, `secret`, `password`,
/// `passwd`, `pwd`, `key`, `sig`, `signature`, `credential`, `auth` or `session`:
/// `?access_token=abc&ref=x` becomes `?access_token=***&ref=x`). A token given in a URL must not
/// reach a message, a log, a JSON answer or a file. An ssh URL's user (`ssh://git@host/x`) is
/// not a secret and stays; its password, if any, does not.
///
/// This is the one redaction of the crate: every writer of messages that may hold a remote's
/// URL (errors, progress, `--json`, the server's log) goes through it.
pub fn redact(text: &str) -> String {
    static URL_USERINFO: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    static QUERY_CREDENTIAL: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = URL_USERINFO.get_or_init(|| {
        regex::Regex::new(r"(?i)\b([a-z][a-z0-9+.-]*)://([^/?#@\s'\x22]*)@").expect("valid regex")
    });
    let query = QUERY_CREDENTIAL.get_or_init(|| {
        regex::Regex::new(
            r"(?i)([?&;][a-z0-9_.\-\[\]]*(?:token|secret|password|passwd|pwd|key|sig|signature|credential|auth|session)[a-z0-9_.\-\[\]]*)=[^&#;\s'\x22]*",
        )
        .expect("valid regex")
    });
    let text = re.replace_all(text, |caps: &regex::Captures<'_>| {
        let scheme = &caps[1];
        let userinfo = &caps[2];
        let keep_user =
            scheme.eq_ignore_ascii_case("ssh") || scheme.eq_ignore_ascii_case("git+ssh");
        match userinfo.split_once(':') {
            Some((user, _)) if keep_user => format!("{scheme}://{user}:***@"),
            None if keep_user => format!("{scheme}://{userinfo}@"),
            _ => format!("{scheme}://***@"),
        }
    });
    query.replace_all(&text, "$1=***").into_owned()
}

fn git(git_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    cmd
}

/// Runs `cmd` to the end, or until `limit` passes: then `git` and everything it started (its
/// own process group: `git-remote-http`, `ssh`) are killed.
fn run(
    mut cmd: Command,
    action: &'static str,
    url: &str,
    limit: Option<Duration>,
) -> Result<Output, Error> {
    let spawn_error = |source| Error::Spawn {
        action,
        url: redact(url),
        source,
    };
    let Some(limit) = limit else {
        return cmd.stdin(Stdio::null()).output().map_err(spawn_error);
    };
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    // Both pipes are drained while git runs, so that a chatty git never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Ok(None) | Err(_) => {
                if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                // The readers end now: every writer of the pipes was in the killed group.
                let _ = (stdout.join(), stderr.join());
                return Err(Error::TimedOut {
                    action,
                    url: redact(url),
                    limit,
                });
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

fn stderr_of(out: &Output) -> String {
    redact(String::from_utf8_lossy(&out.stderr).trim())
}

fn failed(action: &'static str, url: &str, out: &Output) -> Error {
    let stderr = stderr_of(out);
    Error::Failed {
        action,
        url: redact(url),
        cause: Cause::of(&stderr),
        stderr,
    }
}

/// The commit `ref_name` names on the remote, `None` when the ref does not exist. `timeout`
/// bounds the `git ls-remote` run.
pub fn remote_tip(
    git_dir: &Path,
    url: &str,
    ref_name: &str,
    timeout: Option<Duration>,
) -> Result<Option<CommitId>, Error> {
    let out = run(
        git(git_dir, &["ls-remote", "--", url, ref_name]),
        "ls-remote",
        url,
        timeout,
    )?;
    if !out.status.success() {
        return Err(failed("ls-remote", url, &out));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (id, name) = line.split_once('\t').ok_or_else(|| Error::Unparsable {
            url: redact(url),
            line: line.to_owned(),
        })?;
        if name == ref_name {
            return CommitId::from_hex(id)
                .map(Some)
                .map_err(|_| Error::Unparsable {
                    url: redact(url),
                    line: line.to_owned(),
                });
        }
    }
    Ok(None)
}

/// Brings the objects of `ref_name` from the remote into the local repository (kept under
/// `refs/action-ledger/remote` so they are not garbage). `timeout` bounds the `git fetch` run.
pub fn fetch(
    git_dir: &Path,
    url: &str,
    ref_name: &str,
    timeout: Option<Duration>,
) -> Result<(), Error> {
    let spec = format!("+{ref_name}:refs/action-ledger/remote");
    let out = run(
        git(
            git_dir,
            // FETCH_HEAD would keep the URL (a query's credentials too) in the cache repository.
            &[
                "fetch",
                "--quiet",
                "--no-tags",
                "--no-write-fetch-head",
                "--",
                url,
                &spec,
            ],
        ),
        "fetch",
        url,
        timeout,
    )?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed("fetch", url, &out))
    }
}

/// What a push achieved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// The remote ref now holds the commit.
    Landed,
    /// The remote ref moved since the tip was read (lease failed): fetch and rebuild.
    Moved,
    /// The server refused the update (its hook or its receive.* rules); the lines say why.
    Refused(String),
}

/// Pushes `commit` to `ref_name` on the remote if the remote ref still holds `expected`
/// (`None`: must not exist), atomically. `timeout` bounds the `git push` run (and the
/// `git ls-remote` that tells a lost race from a refusal).
pub fn push(
    git_dir: &Path,
    url: &str,
    ref_name: &str,
    commit: CommitId,
    expected: Option<CommitId>,
    timeout: Option<Duration>,
) -> Result<PushOutcome, Error> {
    let lease = format!(
        "--force-with-lease={ref_name}:{}",
        expected.map(|c| c.to_hex()).unwrap_or_default()
    );
    let refspec = format!("{}:{ref_name}", commit.to_hex());
    let out = run(
        git(
            git_dir,
            &[
                "push",
                "--porcelain",
                "--atomic",
                &lease,
                "--",
                url,
                &refspec,
            ],
        ),
        "push",
        url,
        timeout,
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Porcelain status lines: `<flag>\t<from>:<to>\t<summary> (<reason>)`; `!` is a refusal.
    let line = stdout
        .lines()
        .find(|l| l.ends_with(ref_name) || l.contains(&format!(":{ref_name}\t")));
    let stderr = stderr_of(&out);
    match line {
        Some(l) if !l.starts_with('!') && out.status.success() => Ok(PushOutcome::Landed),
        Some(l)
            if l.contains("stale info")
                || l.contains("fetch first")
                || l.contains("non-fast-forward") =>
        {
            Ok(PushOutcome::Moved)
        }
        // The server checks the lease first and takes its ref lock later: a publisher that lost
        // the race in between is told "atomic transaction failed" or "cannot lock ref". Whether
        // the ref moved is what decides between a retry and a refusal.
        Some(_) if remote_tip(git_dir, url, ref_name, timeout)? != expected => {
            Ok(PushOutcome::Moved)
        }
        Some(l) => {
            let remote_lines: Vec<&str> = stderr
                .lines()
                .filter_map(|x| x.strip_prefix("remote: "))
                // git pads the server's lines with blanks (to overwrite progress output).
                .map(str::trim_end)
                .collect();
            Ok(PushOutcome::Refused(if remote_lines.is_empty() {
                l.to_owned()
            } else {
                format!("{}\n{}", l.trim(), remote_lines.join("\n"))
            }))
        }
        None => Err(Error::Failed {
            action: "push",
            url: redact(url),
            cause: Cause::of(&stderr),
            stderr,
        }),
    }
}

/// Where a writer lands its commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The local repository's ref (the writer's
    /// [`LandOptions::ref_name`](crate::store::LandOptions::ref_name)), by compare-and-swap of
    /// the ref file.
    Local,
    /// A ref of a remote repository, by leased push; the local repository only caches objects.
    Remote {
        /// What `git` accepts as a remote: a URL or a path.
        url: String,
        /// The full ref name on the remote.
        ref_name: String,
        /// The time limit of each `git` run (`ls-remote`, `fetch`, `push`); `None` waits as
        /// long as git does.
        timeout: Option<Duration>,
    },
}

impl Target {
    /// The ref this target moves, as people read it: `local_ref` itself, or `<url> <ref>` with
    /// the URL [`redact()`]ed.
    pub fn describe(&self, local_ref: &str) -> String {
        match self {
            Target::Local => local_ref.to_owned(),
            Target::Remote { url, ref_name, .. } => format!("{} {ref_name}", redact(url)),
        }
    }

    /// The tip of the target's ref (`None` when it does not exist yet); for a remote, its
    /// objects are fetched into `store` when they are not there already.
    ///
    /// # Errors
    /// [`TipError::Store`] when the local ref cannot be read, [`TipError::Transport`] when the
    /// remote cannot be asked or fetched.
    pub fn tip(&self, store: &Store, local_ref: &str) -> Result<Option<CommitId>, TipError> {
        match self {
            Target::Local => store.tip(local_ref).map_err(TipError::Store),
            Target::Remote {
                url,
                ref_name,
                timeout,
            } => {
                let git_dir = store.git_dir();
                let tip = remote_tip(git_dir, url, ref_name, *timeout)?;
                if let Some(commit) = tip
                    && store.snapshot(Some(commit)).is_err()
                {
                    fetch(git_dir, url, ref_name, *timeout)?;
                }
                Ok(tip)
            }
        }
    }
}

/// Why the tip of a [`Target`] could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TipError {
    /// The local ref could not be read.
    #[error(transparent)]
    Store(store::Error),
    /// The remote could not be asked or fetched.
    #[error(transparent)]
    Transport(#[from] Error),
}

/// A remote ref whose history was rewritten under this writer: it holds `tip` (or nothing),
/// which does not descend from `confirmed`, the tip this cache last built on or landed there.
/// Building on it would silently drop whatever the old history held that the new one lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{remote} was rewritten: it holds {}, which does not descend from {confirmed}, the tip this \
     cache last confirmed there; nothing was written. Check the new history against the old one \
     on a clone of the remote (`action-ledger verify --range {confirmed}..{}` shows what the \
     new tip holds on top of the old one, and `git log {}..{confirmed}` what it dropped); to \
     build on it anyway, run again with --accept-rewritten-remote",
    tip.map_or_else(|| "no commit (the ref was deleted)".to_owned(), |t| t.to_string()),
    tip.map_or_else(|| "TIP".to_owned(), |t| t.to_string()),
    tip.map_or_else(|| "TIP".to_owned(), |t| t.to_string()),
)]
pub struct Rewritten {
    /// The remote and its ref, as people read them (the URL [`redact()`]ed).
    pub remote: String,
    /// The tip this cache last confirmed on the remote ref.
    pub confirmed: CommitId,
    /// What the remote ref holds now (`None`: it was deleted).
    pub tip: Option<CommitId>,
}

/// The ref of the cache repository that holds the tip last confirmed on `ref_name` of `url`:
/// `refs/action-ledger/confirmed/<sha256 of the redacted URL, a newline and the ref>`. The URL
/// is redacted first, so a rotated token keeps the record and no credential reaches a ref name.
pub fn confirmed_ref(url: &str, ref_name: &str) -> String {
    use sha2::{Digest as _, Sha256};
    let key = Sha256::digest(format!("{}\n{ref_name}", redact(url)).as_bytes());
    format!("refs/action-ledger/confirmed/{}", hex::encode(key))
}

/// Why [`check_not_rewritten`] refuses to build on a remote tip.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteCheckError {
    /// The cache's record could not be read.
    #[error(transparent)]
    Store(store::Error),
    /// The remote ref does not descend from the tip this cache last confirmed there.
    #[error(transparent)]
    Rewritten(Rewritten),
}

/// The check the landing loop ([`crate::store::land()`]) makes on each remote tip before it
/// builds, also made by writers that move several refs ([`crate::publish::pending`]): `tip`
/// (the remote `ref_name`'s commit, its objects local) must descend from the tip this cache last
/// confirmed on `ref_name` of `url` ([`confirmed_ref()`]); nothing confirmed yet accepts any
/// tip. Another writer's fast-forward is no rewrite.
///
/// # Errors
/// [`RewriteCheckError::Rewritten`] naming both commits, [`RewriteCheckError::Store`] when the
/// record or the ancestry cannot be read.
pub fn check_not_rewritten(
    store: &Store,
    url: &str,
    ref_name: &str,
    tip: Option<CommitId>,
) -> Result<(), RewriteCheckError> {
    let Some(confirmed) = store
        .tip(&confirmed_ref(url, ref_name))
        .map_err(RewriteCheckError::Store)?
    else {
        return Ok(());
    };
    let descends = match tip {
        None => false,
        Some(t) => store
            .is_ancestor(confirmed, t)
            .map_err(RewriteCheckError::Store)?,
    };
    if descends {
        return Ok(());
    }
    Err(RewriteCheckError::Rewritten(Rewritten {
        remote: format!("{} {ref_name}", redact(url)),
        confirmed,
        tip,
    }))
}

/// Records `commit` as the tip confirmed on `ref_name` of `url`, as the landing loop does after
/// building on or landing a tip. Best effort: the commit has landed (or was built on) whatever
/// happens here; a record that cannot be written leaves the older one, which `commit` descends
/// from.
pub fn record_confirmed(store: &Store, url: &str, ref_name: &str, commit: CommitId) {
    let record = confirmed_ref(url, ref_name);
    let current = store.tip(&record).ok().flatten();
    if current == Some(commit) {
        return;
    }
    let _ = store.update_ref(
        &record,
        current,
        commit,
        "action-ledger: confirmed remote tip",
    );
}

/// Accepts the remote ref of `target` as it is now (the CLI's `--accept-rewritten-remote`):
/// its tip becomes the confirmed one, whether or not it descends from the tip confirmed before,
/// and the next writer builds on it. The user has checked the rewritten history. A remote ref
/// that does not exist clears the record. Returns the accepted tip; a [`Target::Local`] is
/// left alone (`None`).
///
/// # Errors
/// [`TipError::Transport`] when the remote cannot be asked or fetched; [`TipError::Store`]
/// when the record cannot be written.
pub fn accept_rewritten(
    store: &Store,
    target: &Target,
    local_ref: &str,
) -> Result<Option<CommitId>, TipError> {
    let Target::Remote { url, ref_name, .. } = target else {
        return Ok(None);
    };
    let record = confirmed_ref(url, ref_name);
    let tip = target.tip(store, local_ref)?;
    let current = store.tip(&record).map_err(TipError::Store)?;
    match tip {
        Some(t) => store
            .update_ref(
                &record,
                current,
                t,
                "action-ledger: accepted rewritten remote",
            )
            .map_err(TipError::Store)?,
        None => store.delete_ref(&record).map_err(TipError::Store)?,
    }
    Ok(tip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{MAIN, files, sig};
    use std::time::Duration;

    /// git's messages for each kind of failure (as git 2.39 to 2.47 print them over HTTP, ssh
    /// and `git://`) are classified, and the advice names the way out.
    #[test]
    fn failures_are_classified_from_gits_lines() {
        for (line, cause) in [
            (
                "fatal: Authentication failed for 'http://127.0.0.1:1/x.git/'",
                Cause::Authentication,
            ),
            (
                "fatal: could not read Username for 'https://h': terminal prompts disabled",
                Cause::Authentication,
            ),
            (
                "fatal: unable to access 'http://h/x.git/': The requested URL returned error: 403",
                Cause::Authentication,
            ),
            (
                "git@h: Permission denied (publickey).\nfatal: Could not read from remote repository.",
                Cause::Authentication,
            ),
            (
                "fatal: unable to access 'http://h/x.git/': The requested URL returned error: 500",
                Cause::Server,
            ),
            (
                "error: RPC failed; HTTP 502 curl 22 The requested URL returned error: 502",
                Cause::Server,
            ),
            (
                "fatal: unable to access 'http://h/': Failed to connect to h port 1: Connection refused",
                Cause::Network,
            ),
            (
                "error: RPC failed; curl 18 transfer closed with outstanding read data remaining",
                Cause::Network,
            ),
            ("fatal: the remote end hung up unexpectedly", Cause::Network),
            ("fatal: expected flush after ref listing", Cause::Network),
            ("fatal: expected 'packfile'", Cause::Network),
            (
                "error: RPC failed; curl 28 Operation too slow. Less than 1 bytes/sec",
                Cause::Network,
            ),
            (
                "ssh: connect to host h port 22: Connection refused",
                Cause::Network,
            ),
            (
                "fatal: '/x/missing.git' does not appear to be a git repository",
                Cause::Other,
            ),
        ] {
            assert_eq!(Cause::of(line), cause, "{line}");
        }
        assert!(Cause::Authentication.advice().contains("GIT_ASKPASS"));
        assert!(
            Cause::Network
                .advice()
                .contains("run the same command again")
        );
        let e = Error::Failed {
            action: "push",
            url: "http://h/x.git".into(),
            cause: Cause::Server,
            stderr: "error: 500".into(),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "git push http://h/x.git failed: {}\nerror: 500",
                Cause::Server.advice()
            )
        );
    }

    /// The user and password of a URL never reach a message; an ssh user (not a secret) does,
    /// its password does not; text without credentials is unchanged.
    #[test]
    fn credentials_in_urls_are_redacted() {
        for (text, shown) in [
            (
                "https://x-access-token:ghs_SECRET@git.example.org/o/r.git",
                "https://***@git.example.org/o/r.git",
            ),
            (
                "fatal: unable to access 'http://tok3n@127.0.0.1:80/x.git/': 401",
                "fatal: unable to access 'http://***@127.0.0.1:80/x.git/': 401",
            ),
            ("ssh://git@host:22/x.git", "ssh://git@host:22/x.git"),
            ("ssh://git:pw@host/x.git", "ssh://git:***@host/x.git"),
            (
                "git@host:o/r.git and /srv/a@b/x.git",
                "git@host:o/r.git and /srv/a@b/x.git",
            ),
            (
                "a: http://h/x.git b: HTTP://u:p@h/",
                "a: http://h/x.git b: HTTP://***@h/",
            ),
            // A token as the user alone (GitHub's personal access tokens are given so).
            (
                "https://ghp_SECRET@github.com/o/r.git",
                "https://***@github.com/o/r.git",
            ),
            // Credential-shaped query parameters, also where git appended its own path.
            (
                "https://h/r.git?access_token=SECRET&ref=main",
                "https://h/r.git?access_token=***&ref=main",
            ),
            (
                "fatal: unable to access 'https://h/r.git?private_token=SECRET/': 401",
                "fatal: unable to access 'https://h/r.git?private_token=***': 401",
            ),
            (
                "https://s3/x?X-Amz-Credential=AKIA1&X-Amz-Signature=SECRET&X-Amz-Security-Token=T&a=1",
                "https://s3/x?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Security-Token=***&a=1",
            ),
            (
                "https://h/r.git?sig=SECRET;api_key=SECRET2#frag",
                "https://h/r.git?sig=***;api_key=***#frag",
            ),
            (
                "https://h/r.git?ref=main&page=2",
                "https://h/r.git?ref=main&page=2",
            ),
        ] {
            assert_eq!(redact(text), shown, "{text}");
        }
        let target = Target::Remote {
            url: "https://u:SECRET@h/x.git".into(),
            ref_name: MAIN.into(),
            timeout: None,
        };
        assert!(!target.describe(MAIN).contains("SECRET"));
    }

    /// A git run past its limit is stopped with everything it started (a helper holding the
    /// output pipes open included), and reported as a time-out, a network cause.
    #[test]
    fn a_run_past_its_limit_is_stopped_with_its_helpers() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 600 & sleep 600"]);
        let e = run(
            cmd,
            "push",
            "https://u:SECRET@h/x.git",
            Some(Duration::from_millis(200)),
        )
        .unwrap_err();
        assert!(matches!(e, Error::TimedOut { action: "push", .. }), "{e:?}");
        assert_eq!(e.cause(), Cause::Network);
        let text = e.to_string();
        assert!(
            !text.contains("SECRET") && text.contains("ACTION_LEDGER_REMOTE_TIMEOUT"),
            "{text}"
        );
        // Within its limit, a run's output and status come back whole.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let out = run(cmd, "fetch", "h", Some(Duration::from_secs(60))).unwrap();
        assert_eq!(
            (out.stdout.as_slice(), out.stderr.as_slice()),
            (&b"out\n"[..], &b"err\n"[..])
        );
        assert_eq!(out.status.code(), Some(3));
    }

    /// A URL whose query carries a credential (a directory named so, for `file://`) is fetched
    /// from without leaving it anywhere in the cache repository (git's FETCH_HEAD would keep
    /// the URL), and failures name it redacted.
    #[test]
    fn a_fetch_leaves_no_credential_of_its_url_in_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let remote_dir = tmp.path().join("remote.git?access_token=SECRET43");
        let remote = Store::open_or_init_bare(&remote_dir, MAIN).unwrap();
        let c = remote
            .write_commit(None, &files(&[("a", "x\n")]), "m\n", &sig())
            .unwrap();
        remote.update_ref(MAIN, None, c, "m").unwrap();
        let cache_dir = tmp.path().join("cache.git");
        let cache = Store::open_or_init_bare(&cache_dir, MAIN).unwrap();
        let url = format!("file://{}", remote_dir.display());
        assert_eq!(
            remote_tip(cache.git_dir(), &url, MAIN, None).unwrap(),
            Some(c)
        );
        fetch(cache.git_dir(), &url, MAIN, None).unwrap();
        let mut stack = vec![cache_dir.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let bytes = std::fs::read(&path).unwrap();
                    assert!(
                        !bytes.windows(8).any(|w| w == b"SECRET43"),
                        "{} holds the credential",
                        path.display()
                    );
                }
            }
        }
        let missing = format!("{url}-missing");
        let e = fetch(cache.git_dir(), &missing, MAIN, None).unwrap_err();
        assert!(!e.to_string().contains("SECRET43"), "{e}");
    }

    /// The record of a confirmed tip is keyed by the redacted URL and the ref: a rotated token
    /// keeps it, another ref or host does not share it, and no credential is in its name.
    #[test]
    fn the_confirmed_record_survives_a_rotated_token() {
        let one = confirmed_ref("https://x-access-token:OLD@h/o/r.git", MAIN);
        assert_eq!(
            one,
            confirmed_ref("https://x-access-token:NEW@h/o/r.git", MAIN)
        );
        assert_eq!(
            confirmed_ref("https://h/o/r.git?access_token=OLD", MAIN),
            confirmed_ref("https://h/o/r.git?access_token=NEW", MAIN)
        );
        assert_ne!(one, confirmed_ref("https://h/o/r.git", "refs/heads/other"));
        assert_ne!(one, confirmed_ref("https://h2/o/r.git", MAIN));
        assert!(!one.contains("OLD") && one.starts_with("refs/action-ledger/confirmed/"));
    }
}
