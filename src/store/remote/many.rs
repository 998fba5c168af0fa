//! Several refs of a remote at once, for landing pending publications
//! ([`crate::publish::combine`]): list the refs under some patterns with one `git ls-remote`,
//! fetch several refspecs with one `git fetch`, and update several refs with one `git push`,
//! each with its own lease, atomically (`--atomic`: all or none) or not (each on its own).

use super::*;

/// One ref update of [`push_many`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefUpdate {
    /// The full ref name on the remote.
    pub ref_name: String,
    /// The commit it is to name; `None` deletes the ref.
    pub new: Option<CommitId>,
    /// The lease: what the ref must name on the remote for the update to happen (`None`: it
    /// must not exist).
    pub expected: Option<CommitId>,
}

/// What became of one [`RefUpdate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RefOutcome {
    /// The remote ref was updated (or already named the commit).
    Done,
    /// Its lease failed, or the server's ref lock was taken: the ref moved; read it again.
    Moved,
    /// Not attempted: another update of the same atomic push failed.
    NotAttempted,
    /// The server refused it (its hook or its `receive.*` rules): git's status line and the
    /// server's lines.
    Refused(String),
}

/// The refs of the remote that match `patterns` (as `git ls-remote` matches them: a full ref
/// name, or a pattern such as `refs/ledger/incoming/*`), with the commits they name, in the
/// order git lists them. `timeout` bounds the run.
///
/// # Errors
/// [`Error::Failed`] when git fails, [`Error::Unparsable`] for a line that is not
/// `<id>\t<ref>`, [`Error::TimedOut`].
pub fn list_refs(
    git_dir: &Path,
    url: &str,
    patterns: &[&str],
    timeout: Option<Duration>,
) -> Result<Vec<(String, CommitId)>, Error> {
    let mut args = vec!["ls-remote", "--", url];
    args.extend_from_slice(patterns);
    let out = run(git(git_dir, &args), "ls-remote", url, timeout)?;
    if !out.status.success() {
        return Err(failed("ls-remote", url, &out));
    }
    let mut refs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let unparsable = || Error::Unparsable {
            url: redact(url),
            line: line.to_owned(),
        };
        let (id, name) = line.split_once('\t').ok_or_else(unparsable)?;
        // A peeled tag (`<ref>^{}`) is not a ledger ref.
        if name.ends_with("^{}") {
            continue;
        }
        refs.push((
            name.to_owned(),
            CommitId::from_hex(id).map_err(|_| unparsable())?,
        ));
    }
    Ok(refs)
}

/// Fetches `refspecs` (`+<remote ref or pattern>:<local ref or pattern>`) from the remote in
/// one `git fetch`, pruning the local refs their patterns cover that the remote no longer has
/// (so the cache does not keep landed publications alive). `timeout` bounds the run.
///
/// # Errors
/// [`Error::Failed`], [`Error::TimedOut`].
pub fn fetch_many(
    git_dir: &Path,
    url: &str,
    refspecs: &[String],
    timeout: Option<Duration>,
) -> Result<(), Error> {
    let mut args = vec![
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--prune",
        "--",
        url,
    ];
    args.extend(refspecs.iter().map(String::as_str));
    let out = run(git(git_dir, &args), "fetch", url, timeout)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(failed("fetch", url, &out))
    }
}

/// Pushes `updates` in one `git push`, each with its own lease
/// (`--force-with-lease=<ref>:<expected>`); `atomic` makes it all or none (`--atomic`).
/// Returns one outcome per update, in order. Commits must be in the local repository.
///
/// # Errors
/// [`Error::Failed`] when git reports nothing about some update (the connection failed: the
/// push may or may not have happened, see [`Error::may_have_landed`]), [`Error::TimedOut`].
pub fn push_many(
    git_dir: &Path,
    url: &str,
    updates: &[RefUpdate],
    atomic: bool,
    timeout: Option<Duration>,
) -> Result<Vec<RefOutcome>, Error> {
    let mut args: Vec<String> = vec!["push".into(), "--porcelain".into()];
    if atomic {
        args.push("--atomic".into());
    }
    for u in updates {
        args.push(format!(
            "--force-with-lease={}:{}",
            u.ref_name,
            u.expected.map(|c| c.to_hex()).unwrap_or_default()
        ));
    }
    args.push("--".into());
    args.push(url.to_owned());
    for u in updates {
        args.push(format!(
            "{}:{}",
            u.new.map(|c| c.to_hex()).unwrap_or_default(),
            u.ref_name
        ));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(git(git_dir, &refs), "push", url, timeout)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = stderr_of(&out);
    let remote_lines: Vec<&str> = stderr
        .lines()
        .filter_map(|x| x.strip_prefix("remote: "))
        .map(str::trim_end)
        .collect();
    // Porcelain status lines: `<flag>\t<from>:<to>\t<summary> (<reason>)`.
    let status = |ref_name: &str| {
        stdout.lines().find_map(|l| {
            let mut fields = l.split('\t');
            let (flag, spec, summary) = (fields.next()?, fields.next()?, fields.next()?);
            let (_, to) = spec.split_once(':')?;
            (to == ref_name).then_some((flag, summary))
        })
    };
    updates
        .iter()
        .map(|u| match status(&u.ref_name) {
            Some((flag, _)) if flag != "!" => Ok(RefOutcome::Done),
            Some((_, summary)) if summary.contains("atomic push failed") => {
                Ok(RefOutcome::NotAttempted)
            }
            // The server checks leases first and takes its ref locks later: a pusher that lost
            // the race in between is told its transaction failed or a lock was taken. Landers
            // build the same combined commit, so two of them may push the same new objects at
            // once, and the server's move of the second copy out of quarantine fails: the
            // first one landed them, read again.
            Some((_, summary))
                if [
                    "stale info",
                    "fetch first",
                    "non-fast-forward",
                    "already exists",
                    "atomic transaction failed",
                    "failed to update ref",
                    "failed to lock",
                    "cannot lock ref",
                    "unable to migrate objects",
                ]
                .iter()
                .any(|r| summary.contains(r)) =>
            {
                Ok(RefOutcome::Moved)
            }
            Some((_, summary)) => Ok(RefOutcome::Refused(if remote_lines.is_empty() {
                summary.to_owned()
            } else {
                format!("{summary}\n{}", remote_lines.join("\n"))
            })),
            None => Err(Error::Failed {
                action: "push",
                url: redact(url),
                cause: Cause::of(&stderr),
                stderr: stderr.clone(),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{MAIN, files, sig};

    fn incoming(key: &str) -> String {
        format!("refs/ledger/incoming/{key}")
    }

    /// An atomic push of a ledger update, a new incoming ref and a deletion lands all of them
    /// or, when one lease fails, none; a non-atomic push lands what it can.
    #[test]
    fn leased_updates_land_all_or_none_when_atomic() {
        let tmp = tempfile::tempdir().unwrap();
        let remote_dir = tmp.path().join("remote.git");
        let remote = Store::open_or_init_bare(&remote_dir, MAIN).unwrap();
        let url = remote_dir.display().to_string();
        let cache = Store::open_or_init_bare(&tmp.path().join("c.git"), MAIN).unwrap();
        let t = Some(Duration::from_secs(60));
        let c1 = cache
            .write_commit(None, &files(&[("a", "1\n")]), "one\n", &sig())
            .unwrap();
        let c2 = cache
            .write_commit(Some(c1), &files(&[("b", "2\n")]), "two\n", &sig())
            .unwrap();
        let p = cache
            .write_commit(Some(c1), &files(&[("p", "3\n")]), "p\n", &sig())
            .unwrap();
        let up = |ref_name: String, new, expected| RefUpdate {
            ref_name,
            new,
            expected,
        };
        // Not atomic: the ledger ref is created, the incoming ref too.
        let out = push_many(
            cache.git_dir(),
            &url,
            &[
                up(MAIN.into(), Some(c1), None),
                up(incoming("k"), Some(p), None),
            ],
            false,
            t,
        )
        .unwrap();
        assert_eq!(out, vec![RefOutcome::Done, RefOutcome::Done]);
        let listed =
            list_refs(cache.git_dir(), &url, &[MAIN, "refs/ledger/incoming/*"], t).unwrap();
        assert_eq!(
            listed,
            vec![(MAIN.to_owned(), c1), (incoming("k"), p)],
            "git lists refs sorted"
        );

        // Atomic with a stale lease on the ledger ref: nothing happens.
        let out = push_many(
            cache.git_dir(),
            &url,
            &[
                up(MAIN.into(), Some(c2), Some(p)),
                up(incoming("k"), None, Some(p)),
            ],
            true,
            t,
        )
        .unwrap();
        assert_eq!(out[0], RefOutcome::Moved, "{out:?}");
        assert!(
            matches!(out[1], RefOutcome::NotAttempted | RefOutcome::Moved),
            "{out:?}"
        );
        assert_eq!(remote.tip(MAIN).unwrap(), Some(c1));
        assert_eq!(remote.tip(&incoming("k")).unwrap(), Some(p));

        // Atomic with good leases: the ledger moves and the incoming ref goes, together.
        let out = push_many(
            cache.git_dir(),
            &url,
            &[
                up(MAIN.into(), Some(c2), Some(c1)),
                up(incoming("k"), None, Some(p)),
                up(incoming("n"), Some(p), None),
            ],
            true,
            t,
        )
        .unwrap();
        assert_eq!(out, vec![RefOutcome::Done; 3]);
        assert_eq!(remote.tip(MAIN).unwrap(), Some(c2));
        assert_eq!(remote.tip(&incoming("k")).unwrap(), None);

        // A ref that must not exist but does: moved.
        let out = push_many(
            cache.git_dir(),
            &url,
            &[up(incoming("n"), Some(c2), None)],
            true,
            t,
        )
        .unwrap();
        assert_eq!(out, vec![RefOutcome::Moved]);

        // Fetching the incoming namespace brings its commits and prunes what is gone.
        let other = Store::open_or_init_bare(&tmp.path().join("o.git"), MAIN).unwrap();
        let spec = "+refs/ledger/incoming/*:refs/action-ledger/incoming/*".to_owned();
        fetch_many(other.git_dir(), &url, std::slice::from_ref(&spec), t).unwrap();
        assert_eq!(other.tip("refs/action-ledger/incoming/n").unwrap(), Some(p));
        push_many(
            cache.git_dir(),
            &url,
            &[up(incoming("n"), None, Some(p))],
            true,
            t,
        )
        .unwrap();
        fetch_many(other.git_dir(), &url, &[spec], t).unwrap();
        assert_eq!(other.tip("refs/action-ledger/incoming/n").unwrap(), None);
    }
}
