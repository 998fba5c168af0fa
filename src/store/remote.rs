//! Transport to a remote state repository through the `git` command.
//!
//! gix builds every object locally; it cannot push, so the `git` CLI moves objects and refs and
//! nothing else: `git ls-remote` reads the remote tip, `git fetch` brings its objects into the
//! local repository, and `git push --atomic --force-with-lease=<ref>:<expected>` lands a commit
//! only if the remote ref still holds the tip the commit was built on. The server's pre-receive
//! hook (`hooks/pre-receive`) may still refuse the push; that refusal is reported with the
//! hook's own lines.
//!
//! [`transact()`] is the write loop of every writer that may land on a remote (publication,
//! compaction, the finality operations of the CLI and the group commits of `serve`): on a
//! [`Target::Local`] it is [`store::transact()`](crate::store::transact()) itself; on a
//! [`Target::Remote`] each attempt reads the remote tip, fetches it when its objects are not
//! cached yet, runs the build step on it and pushes the commit with a lease on that tip. A push
//! rejected because the remote moved backs off (25 ms doubling to 1.6 s, plus jitter: a push
//! round trip with the server's hook costs far more than a local ref update) and builds again,
//! within [`Policy::max_attempts`]; a refusal by the server's hook is final
//! ([`WriteError::Refused`]). There is no held-lock state on a remote: the server's ref lock
//! shows as a rejected lease, i.e. a moved ref.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::store::transact::{Landed, Policy, Step, TransactError};
use crate::store::{self, CommitId, Store};

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
            url: url.to_owned(),
            stderr,
        }),
    }
}

/// Where a writer lands its commits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The local repository's ref ([`Policy::ref_name`]), by compare-and-swap of the ref file.
    Local,
    /// A ref of a remote repository, by leased push; the local repository only caches objects.
    Remote {
        /// What `git` accepts as a remote: a URL or a path.
        url: String,
        /// The full ref name on the remote.
        ref_name: String,
    },
}

impl Target {
    /// The ref this target moves, as people read it: `local_ref` itself, or `<url> <ref>`.
    pub fn describe(&self, local_ref: &str) -> String {
        match self {
            Target::Local => local_ref.to_owned(),
            Target::Remote { url, ref_name } => format!("{url} {ref_name}"),
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
            Target::Remote { url, ref_name } => {
                let git_dir = store.git_dir();
                let tip = remote_tip(git_dir, url, ref_name)?;
                if let Some(commit) = tip
                    && store.snapshot(Some(commit)).is_err()
                {
                    fetch(git_dir, url, ref_name)?;
                }
                Ok(tip)
            }
        }
    }
}

/// Why the tip of a [`Target`] could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TipError {
    /// The local ref could not be read.
    #[error(transparent)]
    Store(store::Error),
    /// The remote could not be asked or fetched.
    #[error(transparent)]
    Transport(#[from] Error),
}

impl<E> From<TipError> for WriteError<E> {
    fn from(e: TipError) -> Self {
        match e {
            TipError::Store(e) => WriteError::Store(e),
            TipError::Transport(e) => WriteError::Transport(e),
        }
    }
}

/// Why a [`transact()`] did not land.
#[derive(Debug, thiserror::Error)]
pub enum WriteError<E> {
    /// The build step failed; nothing was landed by this call.
    #[error(transparent)]
    Build(E),
    /// Every one of `attempts` builds lost the race to another writer: retry later, or raise
    /// the attempt budget.
    #[error("{ref_name} kept moving: gave up after {attempts} attempts")]
    Contention {
        /// The ref that kept moving (`<url> <ref>` for a remote).
        ref_name: String,
        /// Builds run.
        attempts: u32,
    },
    /// Another local writer held the ref's lock for longer than [`Policy::lock_wait`]; if no
    /// writer is running, the named lock file is stale and may be removed.
    #[error("{ref_name} is locked by another writer ({})", lock.display())]
    RefLocked {
        /// The ref.
        ref_name: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// Reading the local tip or writing the local ref failed.
    #[error(transparent)]
    Store(store::Error),
    /// Talking to the remote failed (`git ls-remote`, `fetch` or `push`): nothing landed.
    #[error(transparent)]
    Transport(Error),
    /// The remote refused the push (its pre-receive hook or its `receive.*` rules); the text is
    /// git's status line and the hook's lines. Final: building again would be refused again.
    #[error("the remote refused the push:\n{0}")]
    Refused(String),
}

impl<E> From<TransactError<E>> for WriteError<E> {
    fn from(e: TransactError<E>) -> Self {
        match e {
            TransactError::Build(e) => WriteError::Build(e),
            TransactError::Contention { ref_name, attempts } => {
                WriteError::Contention { ref_name, attempts }
            }
            TransactError::RefLocked { ref_name, lock } => WriteError::RefLocked { ref_name, lock },
            TransactError::Store(e) => WriteError::Store(e),
        }
    }
}

/// Runs `build` on the tip of `target` and lands the commit it returns, building again on the
/// new tip when another writer moved the ref (see the module docs): locally this is
/// [`store::transact()`](crate::store::transact()); on a remote the tip is read with
/// `git ls-remote`, fetched, and the commit pushed with a lease on it. `build` gets the tip
/// (`None` when the ref does not exist yet) and the attempt number, starting at 1.
///
/// # Errors
/// [`WriteError::Build`] from `build`; [`WriteError::Contention`] after
/// `policy.max_attempts` lost races; [`WriteError::RefLocked`] when a local lock stays held;
/// [`WriteError::Store`] for the local repository, [`WriteError::Transport`] for the remote;
/// [`WriteError::Refused`] when the remote's hook refuses the push.
///
/// After a commit lands, unless `policy.roll_up` is off, the local repository's packs are rolled up
/// ([`Rollup::Geometric`](store::Rollup::Geometric), at most [`store::PUBLISH_ROLLUP_MAX`]
/// objects), so that every writer (publish, compact, the finality operations and `serve`'s
/// batches) keeps the packs logarithmic in the number of its commits. The commit has landed
/// whatever happens there: a roll-up that cannot run now (another one holds its lock, or it
/// fails) is left to the next commit or to `maintain`, which reports its errors.
pub fn transact<T, E>(
    store: &Store,
    target: &Target,
    policy: &Policy<'_>,
    build: impl FnMut(Option<CommitId>, u32) -> Result<Step<T>, E>,
) -> Result<Landed<T>, WriteError<E>> {
    let landed = land(store, target, policy, build)?;
    if landed.commit.is_some() && policy.roll_up {
        store.roll_up_after_commit();
    }
    Ok(landed)
}

/// [`transact()`] without the roll-up.
fn land<T, E>(
    store: &Store,
    target: &Target,
    policy: &Policy<'_>,
    mut build: impl FnMut(Option<CommitId>, u32) -> Result<Step<T>, E>,
) -> Result<Landed<T>, WriteError<E>> {
    let (url, ref_name) = match target {
        Target::Local => return store::transact(store, policy, build).map_err(WriteError::from),
        Target::Remote { url, ref_name } => (url, ref_name),
    };
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let tip = target.tip(store, policy.ref_name)?;
        let (commit, value) = match build(tip, attempts).map_err(WriteError::Build)? {
            Step::Settled(value) => {
                return Ok(Landed {
                    value,
                    commit: None,
                    attempts,
                });
            }
            Step::Commit { commit, value, .. } => (commit, value),
        };
        match push(store.git_dir(), url, ref_name, commit, tip).map_err(WriteError::Transport)? {
            PushOutcome::Landed => {
                return Ok(Landed {
                    value,
                    commit: Some(commit),
                    attempts,
                });
            }
            PushOutcome::Moved if attempts < policy.max_attempts => {
                store::transact::jittered_sleep(25 << attempts.min(6));
            }
            PushOutcome::Moved => {
                return Err(WriteError::Contention {
                    ref_name: target.describe(policy.ref_name),
                    attempts,
                });
            }
            PushOutcome::Refused(why) => return Err(WriteError::Refused(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{MAIN, files, sig};
    use std::time::Duration;

    const POLICY: Policy<'static> = Policy {
        ref_name: MAIN,
        max_attempts: 4,
        lock_wait: Duration::from_secs(1),
        roll_up: true,
    };

    /// A bare remote and two caches (two machines) that write to it.
    fn setup() -> (tempfile::TempDir, Target, Store, Store) {
        let tmp = tempfile::tempdir().unwrap();
        let remote = tmp.path().join("remote.git");
        Store::open_or_init_bare(&remote, MAIN).unwrap();
        let a = Store::open_or_init_bare(&tmp.path().join("a.git"), MAIN).unwrap();
        let b = Store::open_or_init_bare(&tmp.path().join("b.git"), MAIN).unwrap();
        let target = Target::Remote {
            url: remote.display().to_string(),
            ref_name: MAIN.to_owned(),
        };
        (tmp, target, a, b)
    }

    /// A build step adding `path` on the tip it is given.
    fn adding<'s>(
        store: &'s Store,
        path: &'s str,
    ) -> impl FnMut(Option<CommitId>, u32) -> Result<Step<Option<CommitId>>, store::Error> + 's
    {
        move |tip, _| {
            let commit = store.write_commit(tip, &files(&[(path, "x\n")]), "add\n", &sig())?;
            Ok(Step::Commit {
                commit,
                reflog: "add".to_owned(),
                value: tip,
            })
        }
    }

    /// A writer whose tip went stale while it built is told the remote moved, fetches the
    /// other machine's commit and builds again on it; nothing is lost, the history is linear.
    #[test]
    fn a_moved_remote_is_fetched_and_built_on_again() {
        let (tmp, target, a, b) = setup();
        let first = transact(&a, &target, &POLICY, adding(&a, "one")).unwrap();
        assert_eq!((first.attempts, first.value), (1, None));
        let mut raced = false;
        let mut inner = adding(&b, "two");
        let second = transact(&b, &target, &POLICY, |tip, attempt| {
            if !raced {
                // Machine A lands in between B's read of the tip and B's push.
                raced = true;
                transact(&a, &target, &POLICY, adding(&a, "three")).unwrap();
            }
            inner(tip, attempt)
        })
        .unwrap();
        assert_eq!(second.attempts, 2, "one lost race, one rebuild");
        let remote = Store::open(&tmp.path().join("remote.git")).unwrap();
        let tip = remote.tip(MAIN).unwrap().unwrap();
        assert_eq!(Some(tip), second.commit);
        let snap = remote.snapshot(Some(tip)).unwrap();
        for path in ["one", "two", "three"] {
            assert!(snap.exists(path).unwrap(), "{path}");
        }
        assert_eq!(remote.parents(tip).unwrap(), vec![second.value.unwrap()]);
        // The caches' own refs never moved.
        assert_eq!(a.tip(MAIN).unwrap(), None);
        assert_eq!(b.tip(MAIN).unwrap(), None);
    }

    /// A refusal by the remote's hook is final (one attempt), carries the hook's lines without
    /// git's padding, and leaves the remote as it was; a build that settles pushes nothing.
    #[test]
    fn a_hook_refusal_is_final_and_a_settled_build_pushes_nothing() {
        use std::os::unix::fs::PermissionsExt;
        let (tmp, target, a, _) = setup();
        transact(&a, &target, &POLICY, adding(&a, "one")).unwrap();
        let remote = Store::open(&tmp.path().join("remote.git")).unwrap();
        let before = remote.tip(MAIN).unwrap();
        let hook = tmp.path().join("remote.git/hooks/pre-receive");
        std::fs::create_dir_all(hook.parent().unwrap()).unwrap();
        std::fs::write(
            &hook,
            "#!/bin/sh\necho 'no: closed for maintenance' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut builds = 0;
        let mut inner = adding(&a, "two");
        let refused = transact(&a, &target, &POLICY, |tip, n| {
            builds += 1;
            inner(tip, n)
        })
        .unwrap_err();
        match refused {
            WriteError::Refused(why) => {
                assert!(why.ends_with("\nno: closed for maintenance"), "{why:?}");
                assert!(why.contains("pre-receive hook declined"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(builds, 1);
        assert_eq!(remote.tip(MAIN).unwrap(), before);
        let settled = transact(&a, &target, &POLICY, |tip, _| {
            Ok::<_, store::Error>(Step::Settled(tip))
        })
        .unwrap();
        assert_eq!((settled.commit, settled.value), (None, before));
        // An unreachable remote is a transport error, never a refusal or contention.
        let missing = Target::Remote {
            url: tmp.path().join("missing.git").display().to_string(),
            ref_name: MAIN.to_owned(),
        };
        assert!(matches!(
            transact(&a, &missing, &POLICY, adding(&a, "x")),
            Err(WriteError::Transport(Error::Failed {
                action: "ls-remote",
                ..
            }))
        ));
    }
}
