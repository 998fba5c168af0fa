//! Transport to a remote state repository through the `git` command.
//!
//! gix builds every object locally; it cannot push, so the `git` CLI moves objects and refs and
//! nothing else: `git ls-remote` reads the remote tip, `git fetch` brings its objects into the
//! local repository, and `git push --atomic --force-with-lease=<ref>:<expected>` lands a commit
//! only if the remote ref still holds the tip the commit was built on. The server's pre-receive
//! hook (`hooks/pre-receive`) may still refuse the push; that refusal is reported with the
//! hook's own lines.

use std::path::Path;
use std::process::{Command, Output};

use crate::store::CommitId;

/// Why a transport step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `git` could not be started.
    #[error("cannot run git for {action} ({url}): {source}; is git installed?")]
    Spawn {
        /// The step (`ls-remote`, `fetch`, `push`).
        action: &'static str,
        /// The remote.
        url: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    #[error("git {action} {url} failed: {stderr}")]
    /// `git` failed for another reason than a moved ref or a refusal.
    Failed {
        /// The step.
        action: &'static str,
        /// The remote.
        url: String,
        /// What git printed.
        stderr: String,
    },
    #[error("git ls-remote {url} printed an unexpected line: {line}")]
    /// `git ls-remote` printed a line that is not `<id>\t<ref>`.
    Unparsable {
        /// The remote.
        url: String,
        /// The line.
        line: String,
    },
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

fn git(git_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir")
        .arg(git_dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C");
    cmd
}

fn run(mut cmd: Command, action: &'static str, url: &str) -> Result<Output, Error> {
    cmd.output().map_err(|source| Error::Spawn {
        action,
        url: url.to_owned(),
        source,
    })
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// The commit `ref_name` names on the remote, `None` when the ref does not exist.
pub fn remote_tip(git_dir: &Path, url: &str, ref_name: &str) -> Result<Option<CommitId>, Error> {
    let out = run(
        git(git_dir, &["ls-remote", "--", url, ref_name]),
        "ls-remote",
        url,
    )?;
    if !out.status.success() {
        return Err(Error::Failed {
            action: "ls-remote",
            url: url.to_owned(),
            stderr: stderr_of(&out),
        });
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (id, name) = line.split_once('\t').ok_or_else(|| Error::Unparsable {
            url: url.to_owned(),
            line: line.to_owned(),
        })?;
        if name == ref_name {
            return CommitId::from_hex(id)
                .map(Some)
                .map_err(|_| Error::Unparsable {
                    url: url.to_owned(),
                    line: line.to_owned(),
                });
        }
    }
    Ok(None)
}

/// Brings the objects of `ref_name` from the remote into the local repository (kept under
/// `refs/action-ledger/remote` so they are not garbage).
pub fn fetch(git_dir: &Path, url: &str, ref_name: &str) -> Result<(), Error> {
    let spec = format!("+{ref_name}:refs/action-ledger/remote");
    let out = run(
        git(
            git_dir,
            &["fetch", "--quiet", "--no-tags", "--", url, &spec],
        ),
        "fetch",
        url,
    )?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Failed {
            action: "fetch",
            url: url.to_owned(),
            stderr: stderr_of(&out),
        })
    }
}

/// Pushes `commit` to `ref_name` on the remote if the remote ref still holds `expected`
/// (`None`: must not exist), atomically.
pub fn push(
    git_dir: &Path,
    url: &str,
    ref_name: &str,
    commit: CommitId,
    expected: Option<CommitId>,
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
        Some(_) if remote_tip(git_dir, url, ref_name)? != expected => Ok(PushOutcome::Moved),
        Some(l) => {
            let remote_lines: Vec<&str> = stderr
                .lines()
                .filter_map(|x| x.strip_prefix("remote: "))
                .collect();
            Ok(PushOutcome::Refused(if remote_lines.is_empty() {
                l.to_owned()
            } else {
                format!("{}\n{}", l.trim(), remote_lines.join("\n"))
            }))
        }
        None => Err(Error::Failed {
            action: "push",
            url: url.to_owned(),
            stderr,
        }),
    }
}
