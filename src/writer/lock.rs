//! Lock files: the producer lock of a spool (and the same format for the import
//! lock), with the owner's PID and process incarnation so that a dead or reused owner is
//! reclaimed at once while a live owner is never evicted for age alone.
//!
//! A lock file is canonical JSON plus `\n` of
//! `{acquired_at_ms, nonce, pid, process_incarnation_sha256, schema, schema_version: 1}` (keys in
//! that canonical order), byte-compatible with the Node writer, so Rust and Node processes can
//! share lock files. `nonce` is a lowercase UUIDv4, `pid` ≥ 1, `acquired_at_ms` a safe integer
//! ≥ 0, the incarnation 64 lowercase hex digits; the file is read with a 1,024-byte cap and any
//! deviation (including non-canonical bytes) is [`Error::Invalid`].
//!
//! Process incarnation (Linux): sha256 hex of
//! `"linux\0" + trim(/proc/sys/kernel/random/boot_id) + "\0" + starttime` where `starttime` is
//! field 22 of `/proc/<pid>/stat` (counted after the last `)`); a zombie (`Z`) or dead (`X`)
//! process has none. A recorded owner is stale iff its pid is not alive (`kill(pid, 0)` fails
//! with anything but `EPERM`, or it is a zombie) or its incarnation now differs (the pid was
//! reused).
//!
//! Acquisition is a create-only write of the lock (files::Root::write_create_only); an existing
//! lock is read, and a stale one is removed by claim-and-remove (only if its content is still
//! what was read) and the write retried at once; a live one is polled until the wait runs out.
//! Release is claim-and-remove of exactly our content. If the process dies while holding a lock,
//! the file stays until the next acquirer finds its owner dead and reclaims it.
//!
//! Why our own code: the format is the Node writer's, shared with Node processes, and its
//! staleness rule (process liveness plus incarnation, never age) is part of it; advisory-lock
//! crates (`fd-lock`, `fs2`) use `flock`/`fcntl` locks, which a Node process cannot see, which
//! hold no owner to report, and which do not survive as a file that a later process can judge.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::canonical::{self, Value};
use crate::identity::Digest;
use crate::process::{pid_alive, process_incarnation};
use crate::time::Timestamp;
use crate::writer::files::{self, Root, Written};
use crate::writer::spool;

/// Schema of producer lock files.
pub const PRODUCER_LOCK_SCHEMA: &str = "clawsweeper.action-ledger-producer-lock";
/// Label of producer locks in messages.
pub const PRODUCER_LOCK_LABEL: &str = "action event producer lock";
/// Schema of the import (destination) lock.
pub const IMPORT_LOCK_SCHEMA: &str = "clawsweeper.action-ledger-import-lock";
/// Label of the import lock in messages.
pub const IMPORT_LOCK_LABEL: &str = "action event shard import lock";
/// Largest lock file read.
pub const MAX_LOCK_BYTES: u64 = 1024;

/// Why a lock could not be taken or released.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading, creating or claiming the lock file failed at the file layer (a link or
    /// non-regular file in its place, an I/O error).
    #[error(transparent)]
    File(#[from] files::Error),
    /// The lock file exists but is not a lock this format allows (a crash mid-write by another
    /// tool, a hand edit): no owner can be read from it, so it is never reclaimed on its own.
    #[error(
        "invalid {label}: {path}; no owner can be read from it: if no writer is running, remove the file and retry"
    )]
    Invalid {
        /// [`PRODUCER_LOCK_LABEL`] or [`IMPORT_LOCK_LABEL`].
        label: String,
        /// The lock file.
        path: std::path::PathBuf,
    },
    /// A live owner held the lock for the whole wait.
    #[error("{label} timed out after {waited_ms}ms")]
    TimedOut {
        /// [`PRODUCER_LOCK_LABEL`] or [`IMPORT_LOCK_LABEL`].
        label: String,
        /// How long this process waited, in milliseconds.
        waited_ms: u128,
    },
    /// On release the lock file no longer holds our content (someone removed or replaced it).
    #[error("refusing changed {label} lock file: {path}")]
    Changed {
        /// [`PRODUCER_LOCK_LABEL`] or [`IMPORT_LOCK_LABEL`].
        label: String,
        /// The lock file.
        path: std::path::PathBuf,
    },
    /// This process's own incarnation cannot be computed (no `/proc`?).
    #[error("unable to determine {label} process incarnation")]
    NoIncarnation {
        /// [`PRODUCER_LOCK_LABEL`] or [`IMPORT_LOCK_LABEL`].
        label: String,
    },
    /// A producer object could not be encoded canonically.
    #[error(transparent)]
    Producer(#[from] canonical::Error),
}

/// Knobs of lock acquisition.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long to wait for a live owner (default 10 s, the reference's deadline).
    pub wait: Duration,
    /// Sleep between attempts while a live owner holds the lock (default 5 ms).
    pub poll: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            wait: Duration::from_secs(10),
            poll: Duration::from_millis(5),
        }
    }
}

/// A held lock; released on drop (errors ignored there) or by [`Guard::release`].
#[derive(Debug)]
pub struct Guard<'a> {
    root: &'a Root,
    rel: String,
    label: String,
    content: String,
    held: bool,
}

impl Guard<'_> {
    /// Root-relative path of the lock file.
    pub fn relative_path(&self) -> &str {
        &self.rel
    }

    /// The exact bytes we wrote.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Releases the lock: claim-and-remove of exactly our content. A lock file that is gone or
    /// holds other content is [`Error::Changed`] (someone reclaimed or replaced our lock).
    pub fn release(mut self) -> Result<(), Error> {
        self.held = false;
        self.release_inner()
    }

    fn release_inner(&self) -> Result<(), Error> {
        if self.root.remove_if_content(&self.rel, &self.content)? {
            Ok(())
        } else {
            Err(Error::Changed {
                label: self.label.clone(),
                path: self.root.display_path(&self.rel),
            })
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.held {
            self.held = false;
            let _ = self.release_inner();
        }
    }
}

/// The owner recorded in a lock file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// When the owner took the lock (ms since the epoch, informational only).
    pub acquired_at_ms: i64,
    /// Lowercase UUIDv4 text (36 characters) that makes the content unique per acquisition.
    pub nonce: String,
    /// Process id of the owner (≥ 1).
    pub pid: u32,
    /// The owner's process incarnation digest ([`process_incarnation`]).
    pub incarnation: Digest,
}

/// The exact lock file bytes for an owner.
pub fn lock_content(owner: &Owner, schema: &str) -> String {
    let v = Value::object([
        ("acquired_at_ms", Value::from(owner.acquired_at_ms)),
        ("nonce", Value::str(&owner.nonce)),
        ("pid", Value::from(i64::from(owner.pid))),
        (
            "process_incarnation_sha256",
            Value::str(owner.incarnation.as_str()),
        ),
        ("schema", Value::str(schema)),
        ("schema_version", Value::from(1)),
    ]);
    format!("{}\n", canonical::to_canonical_unchecked(&v))
}

/// Strict parse of a lock file: exactly the six fields with their shapes, the given schema, and
/// canonical bytes plus one `\n`. `None` on any deviation.
pub fn parse_lock(text: &str, schema: &str) -> Option<Owner> {
    let body = text.strip_suffix('\n')?;
    let v = canonical::parse_canonical(body).ok()?;
    if v.as_object()?.len() != 6
        || v.get("schema")?.as_str()? != schema
        || v.get("schema_version")?.as_f64()? != 1.0
    {
        return None;
    }
    let nonce = v.get("nonce")?.as_str()?;
    let nonce_ok = nonce.len() == 36
        && nonce
            .bytes()
            .all(|b| matches!(b, b'a'..=b'f' | b'0'..=b'9' | b'-'));
    let pid = v.get("pid")?.as_safe_integer()?;
    let acquired_at_ms = v.get("acquired_at_ms")?.as_safe_integer()?;
    let incarnation = v.get("process_incarnation_sha256")?.as_str()?;
    if !nonce_ok || pid < 1 || pid > i64::from(u32::MAX) || acquired_at_ms < 0 {
        return None;
    }
    Some(Owner {
        acquired_at_ms,
        nonce: nonce.to_owned(),
        pid: pid as u32,
        incarnation: Digest::parse(incarnation)?,
    })
}

/// Takes the lock at `rel` below `root`: create-only write of our lock
/// file; an existing valid lock whose owner is stale is removed (claim-and-remove) and the write
/// retried at once; a live owner is waited for, polling every `options.poll`, until
/// `options.wait` has passed ([`Error::TimedOut`]). `now` is recorded as `acquired_at_ms`
/// (informational; staleness never depends on age).
///
/// Errors: [`Error::Invalid`] for an existing lock that is not a valid lock of `schema`,
/// [`Error::NoIncarnation`], [`Error::TimedOut`], [`Error::File`].
pub fn acquire<'a>(
    root: &'a Root,
    rel: &str,
    label: &str,
    schema: &str,
    now: Timestamp,
    options: &Options,
) -> Result<Guard<'a>, Error> {
    let deadline = Instant::now() + options.wait;
    let incarnation = own_incarnation().ok_or_else(|| Error::NoIncarnation {
        label: label.to_owned(),
    })?;
    let owner = Owner {
        acquired_at_ms: now.millis().clamp(0, canonical::MAX_SAFE_INTEGER as i64),
        nonce: files::uuid_v4()?,
        pid: std::process::id(),
        incarnation,
    };
    let content = lock_content(&owner, schema);
    let invalid = || Error::Invalid {
        label: label.to_owned(),
        path: root.display_path(rel),
    };
    loop {
        if root.write_create_only(rel, content.as_bytes(), label)? == Written::Created {
            return Ok(Guard {
                root,
                rel: rel.to_owned(),
                label: label.to_owned(),
                content,
                held: true,
            });
        }
        let existing = match root.read_text(rel, MAX_LOCK_BYTES, label) {
            Ok(Some(text)) => text,
            Ok(None) => continue, // released between our write and read: try again at once
            Err(files::Error::TooLarge { .. } | files::Error::Utf8 { .. }) => {
                return Err(invalid());
            }
            Err(e) => return Err(e.into()),
        };
        let current = parse_lock(&existing, schema).ok_or_else(invalid)?;
        if is_stale(&current) {
            // Only removes the lock we judged; a successor that replaced it meanwhile stays.
            root.remove_if_content(rel, &existing)?;
            continue;
        }
        if Instant::now() >= deadline {
            return Err(Error::TimedOut {
                label: label.to_owned(),
                waited_ms: options.wait.as_millis(),
            });
        }
        std::thread::sleep(options.poll);
    }
}

/// Producer locks for persisted producer objects: deduplicated
/// and sorted ascending by canonical JSON (byte order; producers are ASCII machine text, where
/// this equals the reference's UTF-16 order), acquired nested in that order at
/// `.clawsweeper-repair/action-events/_locks/<sha256(canonical producer)>.lock`, so two
/// processes locking overlapping sets never deadlock. On failure the locks already taken are
/// released before the error is returned.
pub fn acquire_producers<'a>(
    root: &'a Root,
    producers: &[Value],
    now: Timestamp,
    options: &Options,
) -> Result<Vec<Guard<'a>>, Error> {
    let mut keys = producers
        .iter()
        .map(canonical::to_canonical)
        .collect::<Result<Vec<String>, _>>()?;
    keys.sort();
    keys.dedup();
    let mut guards = Vec::with_capacity(keys.len());
    for key in keys {
        let rel = spool::lock_relative_path(&Digest::of(&key));
        match acquire(
            root,
            &rel,
            PRODUCER_LOCK_LABEL,
            PRODUCER_LOCK_SCHEMA,
            now,
            options,
        ) {
            Ok(g) => guards.push(g),
            Err(e) => {
                // Release in reverse order of acquisition; the first error is what matters.
                while let Some(g) = guards.pop() {
                    let _ = g.release();
                }
                return Err(e);
            }
        }
    }
    // A writer killed while creating or releasing its lock left the lock's staging file
    // (`<digest>.lock.<pid>.<uuid>.tmp` or `.reclaim`); nothing ever reads one, and a live
    // writer's is kept.
    // Clearing them here is best effort: debris must not refuse a lock that was taken.
    if let Some((dir, _)) = guards
        .first()
        .and_then(|g| g.relative_path().rsplit_once('/'))
    {
        let _ = root.remove_dead_staging(dir, spool::MAX_ENTRIES);
    }
    Ok(guards)
}

/// Releases nested guards in reverse order; the first failure is returned after all were tried.
pub fn release_all(mut guards: Vec<Guard<'_>>) -> Result<(), Error> {
    let mut first = Ok(());
    while let Some(g) = guards.pop() {
        if let Err(e) = g.release()
            && first.is_ok()
        {
            first = Err(e);
        }
    }
    first
}

fn own_incarnation() -> Option<Digest> {
    // The reference caches its own value forever: it cannot change while we run.
    static OWN: OnceLock<Option<Digest>> = OnceLock::new();
    OWN.get_or_init(|| process_incarnation(std::process::id()))
        .clone()
}

/// Stale iff the owner is not alive, or a fresh incarnation for its pid is computable and differs
/// from the recorded one (the pid now names another process). Age never matters.
fn is_stale(owner: &Owner) -> bool {
    if !pid_alive(owner.pid) {
        return true;
    }
    process_incarnation(owner.pid).is_some_and(|now| now != owner.incarnation)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL: &str = PRODUCER_LOCK_LABEL;
    const SCHEMA: &str = PRODUCER_LOCK_SCHEMA;
    const REL: &str = ".clawsweeper-repair/action-events/_locks/x.lock";

    fn quick() -> Options {
        Options {
            wait: Duration::from_millis(300),
            poll: Duration::from_millis(5),
        }
    }

    /// The test lock at [`REL`], taken at `at_ms` with the [`quick`] wait.
    fn take(root: &Root, at_ms: i64) -> Result<Guard<'_>, Error> {
        acquire(
            root,
            REL,
            LABEL,
            SCHEMA,
            crate::time::Timestamp::from_millis(at_ms),
            &quick(),
        )
    }

    fn plant(root: &Root, owner: &Owner) -> String {
        let content = lock_content(owner, SCHEMA);
        assert_eq!(
            root.write_create_only(REL, content.as_bytes(), LABEL)
                .unwrap(),
            Written::Created
        );
        content
    }

    fn owner(pid: u32, incarnation: Digest) -> Owner {
        Owner {
            acquired_at_ms: 0,
            nonce: files::uuid_v4().unwrap(),
            pid,
            incarnation,
        }
    }

    fn setup() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path(), "test root").unwrap();
        (dir, root)
    }

    #[test]
    fn content_is_canonical_and_parses_back() {
        let o = Owner {
            acquired_at_ms: 1_768_480_496_000,
            nonce: "0b0e4c1e-3a57-4d38-9b0c-2f0e8f6d2a11".into(),
            pid: 4242,
            incarnation: Digest::of("x"),
        };
        let text = lock_content(&o, SCHEMA);
        assert_eq!(
            text,
            format!(
                "{{\"acquired_at_ms\":1768480496000,\"nonce\":\"0b0e4c1e-3a57-4d38-9b0c-2f0e8f6d2a11\",\"pid\":4242,\"process_incarnation_sha256\":\"{}\",\"schema\":\"clawsweeper.action-ledger-producer-lock\",\"schema_version\":1}}\n",
                Digest::of("x")
            )
        );
        assert_eq!(parse_lock(&text, SCHEMA), Some(o.clone()));
        assert_eq!(parse_lock(&text, IMPORT_LOCK_SCHEMA), None);
        for bad in [
            text.replace("\":", "\": "),
            text.trim_end().to_owned(),
            format!("{text}\n"),
            text.replace("4242", "0"),
            text.replace("4242", "4242.5"),
            text.replace("\"schema_version\":1", "\"schema_version\":2"),
            text.replace("0b0e4c1e", "0B0E4C1E"),
            text.replace("1768480496000", "-1"),
            text.replace(",\"pid\":4242", ""),
        ] {
            assert_eq!(parse_lock(&bad, SCHEMA), None, "{bad}");
        }
    }

    #[test]
    fn own_incarnation_is_stable_and_exists() {
        let me = std::process::id();
        let a = process_incarnation(me).unwrap();
        assert_eq!(process_incarnation(me), Some(a));
        assert!(pid_alive(me));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
    }

    #[test]
    fn acquire_and_release_leave_nothing() {
        let (_dir, root) = setup();
        let g = take(&root, 7).unwrap();
        let owner = parse_lock(
            &root.read_text(REL, MAX_LOCK_BYTES, LABEL).unwrap().unwrap(),
            SCHEMA,
        )
        .unwrap();
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(owner.acquired_at_ms, 7);
        g.release().unwrap();
        assert_eq!(root.read_text(REL, MAX_LOCK_BYTES, LABEL).unwrap(), None);
        {
            let _g = take(&root, 8).unwrap();
        }
        let dir = ".clawsweeper-repair/action-events/_locks";
        assert_eq!(root.list_dir(dir, 10).unwrap().unwrap(), vec![]);
    }

    /// A lock of a process that has exited is reclaimed at once, whatever its age: with no
    /// time to wait at all, the acquisition still succeeds (a live owner would time out).
    #[test]
    fn dead_owner_is_reclaimed_at_once() {
        let (_dir, root) = setup();
        let pid = crate::tests::dead_pid();
        assert!(!pid_alive(pid));
        plant(&root, &owner(pid, Digest::of("gone")));
        let no_wait = Options {
            wait: Duration::ZERO,
            ..quick()
        };
        let g = acquire(
            &root,
            REL,
            LABEL,
            SCHEMA,
            crate::time::Timestamp::from_millis(1),
            &no_wait,
        )
        .unwrap();
        g.release().unwrap();
    }

    /// A live pid whose incarnation differs from the recorded one is a reused pid: reclaimed.
    #[test]
    fn reused_pid_is_reclaimed() {
        let (_dir, root) = setup();
        plant(&root, &owner(std::process::id(), Digest::of("earlier")));
        let g = take(&root, 1).unwrap();
        g.release().unwrap();
    }

    /// A live owner is waited for and then the acquisition times out with a clear message; an
    /// ancient `acquired_at_ms` does not make it stale. Once the owner exits, the lock is
    /// reclaimed.
    #[test]
    fn live_owner_is_waited_on_then_times_out() {
        let (_dir, root) = setup();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let incarnation = process_incarnation(pid).unwrap();
        plant(&root, &owner(pid, incarnation));
        let planted = root.read_text(REL, MAX_LOCK_BYTES, LABEL).unwrap();
        let started = Instant::now();
        let err = take(&root, 1).unwrap_err();
        let waited = started.elapsed();
        assert!(matches!(err, Error::TimedOut { .. }));
        assert_eq!(
            err.to_string(),
            "action event producer lock timed out after 300ms"
        );
        // The whole configured wait is spent (the deadline is on the monotonic clock, so this
        // lower bound cannot flake; no upper bound is asserted), and the live owner's lock is
        // left exactly as it was.
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert_eq!(root.read_text(REL, MAX_LOCK_BYTES, LABEL).unwrap(), planted);
        child.kill().unwrap();
        child.wait().unwrap();
        take(&root, 1).unwrap().release().unwrap();
    }

    /// A lock held by another thread of this process (same pid, same incarnation) is live.
    #[test]
    fn held_by_another_thread_times_out_then_succeeds_after_release() {
        let (_dir, root) = setup();
        let held = take(&root, 1).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let err = take(&root, 2).unwrap_err();
                assert!(matches!(err, Error::TimedOut { waited_ms: 300, .. }));
            });
        });
        let waiting = Options {
            wait: Duration::from_secs(5),
            poll: Duration::from_millis(5),
        };
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                acquire(
                    &root,
                    REL,
                    LABEL,
                    SCHEMA,
                    crate::time::Timestamp::from_millis(3),
                    &waiting,
                )
                .map(Guard::release)
            });
            std::thread::sleep(Duration::from_millis(50));
            held.release().unwrap();
            t.join().unwrap().unwrap().unwrap();
        });
    }

    /// Every kind of malformed lock is refused with the way out: remove the file when no writer
    /// is running (non-canonical bytes, empty, truncated, not JSON, another schema, a zero pid,
    /// over the size cap, not UTF-8).
    #[test]
    fn malformed_locks_say_they_may_be_removed() {
        let valid = lock_content(&owner(1, Digest::of("x")), SCHEMA);
        let mut contents: Vec<Vec<u8>> = vec![
            valid.replace(":1,", ": 1,").into_bytes(),
            Vec::new(),
            valid.as_bytes()[..valid.len() / 2].to_vec(),
            b"not a lock\n".to_vec(),
            lock_content(&owner(1, Digest::of("x")), IMPORT_LOCK_SCHEMA).into_bytes(),
            valid.replace("\"pid\":1,", "\"pid\":0,").into_bytes(),
            "x".repeat(2000).into_bytes(),
            vec![0xff, 0xfe, b'{', b'}'],
        ];
        for (i, content) in contents.drain(..).enumerate() {
            let (_dir, root) = setup();
            root.write_create_only(REL, &content, LABEL).unwrap();
            let err = take(&root, 1).unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{i}: {err}");
            let path = root.display_path(REL);
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid action event producer lock: {}; no owner can be read from it: if no writer is running, remove the file and retry",
                    path.display()
                ),
                "{i}"
            );
        }
    }

    #[test]
    fn invalid_lock_files_are_refused() {
        let (_dir, root) = setup();
        let text = lock_content(&owner(1, Digest::of("x")), SCHEMA).replace(":1,", ": 1,");
        root.write_create_only(REL, text.as_bytes(), LABEL).unwrap();
        let err = take(&root, 1).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("invalid action event producer lock: ")
        );
        let (_dir2, root2) = setup();
        root2
            .write_create_only(REL, "x".repeat(2000).as_bytes(), LABEL)
            .unwrap();
        assert!(matches!(take(&root2, 1), Err(Error::Invalid { .. })));
    }

    #[test]
    fn release_of_a_replaced_lock_is_refused() {
        let (_dir, root) = setup();
        let g = take(&root, 1).unwrap();
        assert!(root.remove_if_content(REL, g.content()).unwrap());
        let other = plant(
            &root,
            &owner(std::process::id(), own_incarnation().unwrap()),
        );
        let err = g.release().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "refusing changed action event producer lock lock file: {}",
                root.display_path(REL).display()
            )
        );
        assert_eq!(
            root.read_text(REL, MAX_LOCK_BYTES, LABEL)
                .unwrap()
                .as_deref(),
            Some(other.as_str()),
            "the successor's lock stays"
        );
    }

    #[test]
    fn producers_are_deduplicated_sorted_and_released() {
        let (_dir, root) = setup();
        let p = |job: &str| Value::object([("job", Value::str(job)), ("run_id", Value::str("1"))]);
        let producers = [p("zeta"), p("alpha"), p("zeta"), p("mid")];
        let guards = acquire_producers(
            &root,
            &producers,
            crate::time::Timestamp::from_millis(5),
            &quick(),
        )
        .unwrap();
        let mut keys: Vec<String> = [p("alpha"), p("mid"), p("zeta")]
            .iter()
            .map(canonical::to_canonical_unchecked)
            .collect();
        keys.sort();
        let expected: Vec<String> = keys
            .iter()
            .map(|k| spool::lock_relative_path(&Digest::of(k)))
            .collect();
        let got: Vec<&str> = guards.iter().map(Guard::relative_path).collect();
        assert_eq!(got, expected);
        let dir = ".clawsweeper-repair/action-events/_locks";
        assert_eq!(root.list_dir(dir, 10).unwrap().unwrap().len(), 3);
        release_all(guards).unwrap();
        assert_eq!(root.list_dir(dir, 10).unwrap().unwrap(), vec![]);
    }

    /// A writer killed while creating or releasing its lock left
    /// `<digest>.lock.<pid>.<uuid>.tmp` or `.reclaim` in `_locks` (found by `crash.sh seal`):
    /// the next acquisition removes the staging files of dead writers and keeps a live one's.
    #[test]
    fn acquisition_removes_the_lock_staging_files_of_dead_writers() {
        let (dir, root) = setup();
        let locks = dir.path().join(".clawsweeper-repair/action-events/_locks");
        std::fs::create_dir_all(&locks).unwrap();
        let dead_pid = crate::tests::dead_pid();
        let uuid = "0b1c9f4e-52a6-4c1e-9d3a-7f0e2b8c6d15";
        let lock = format!("{}.lock", "c".repeat(64));
        // A killed creator's staging file and a killed releaser's claimed lock.
        let stale = [
            format!("{lock}.{dead_pid}.{uuid}.tmp"),
            format!("{lock}.{dead_pid}.{uuid}.reclaim"),
        ];
        let live = format!("{lock}.{}.{uuid}.tmp", std::process::id());
        for name in stale.iter().chain([&live]) {
            std::fs::write(locks.join(name), "partial").unwrap();
        }
        let p = Value::object([("job", Value::str("j"))]);
        let guards = acquire_producers(
            &root,
            &[p],
            crate::time::Timestamp::from_millis(5),
            &quick(),
        )
        .unwrap();
        for name in &stale {
            assert!(!locks.join(name).exists(), "{name} was left");
        }
        assert!(
            locks.join(&live).exists(),
            "a live writer's staging file was removed"
        );
        release_all(guards).unwrap();
    }

    /// When a later producer lock cannot be taken, the earlier ones are released.
    #[test]
    fn failed_nested_acquisition_releases_earlier_locks() {
        let (_dir, root) = setup();
        let p = |job: &str| Value::object([("job", Value::str(job))]);
        let blocked =
            spool::lock_relative_path(&Digest::of(canonical::to_canonical_unchecked(&p("b"))));
        let holder = acquire(
            &root,
            &blocked,
            LABEL,
            SCHEMA,
            crate::time::Timestamp::from_millis(1),
            &quick(),
        )
        .unwrap();
        let err = acquire_producers(
            &root,
            &[p("b"), p("a")],
            crate::time::Timestamp::from_millis(1),
            &quick(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::TimedOut { .. }));
        let dir = ".clawsweeper-repair/action-events/_locks";
        let left = root.list_dir(dir, 10).unwrap().unwrap();
        assert_eq!(left.len(), 1, "only the holder's lock remains: {left:?}");
        holder.release().unwrap();
    }
}
