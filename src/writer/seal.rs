//! Sealing (finalization) of a spool: per producer, the canonical causal order of its
//! events, a create-only seal record that fixes the event count and replay digest, and the
//! deterministic shard parts.
//!
//! Seal file `_finalizations/<sha256(producer)>.json`: canonical JSON plus `\n` of
//! `{event_count, partition_date, producer, replay_sha256, schema, schema_version: 1}`. A seal is
//! never rewritten: sealing again must reproduce it byte for byte, otherwise events arrived after
//! the seal (`action event producer finalization conflicts with late spool events`).
//!
//! If the process dies mid-seal, some seals (and output shards) exist and others do not; running
//! `seal` again completes the set, because every file is create-only and reproduced identically.

use std::collections::HashMap;
use std::path::PathBuf;

use rayon::prelude::*;

use crate::canonical::{self, Value};
use crate::event::{self, Event};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::shard::{self, Shard};
use crate::privacy::strict::Finding;
use crate::privacy::{self, Profile};
use crate::time::Timestamp;
use crate::writer::files::{self, Root, Written};
use crate::writer::lock;
use crate::writer::spool::{self, Spool};

/// Schema string of the seal record.
pub const SCHEMA: &str = "clawsweeper.action-ledger-producer-finalization";
/// Largest seal file.
pub const MAX_SEAL_BYTES: u64 = 1024 * 1024;

/// Why sealing or reading a sealed spool failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the spool failed.
    #[error(transparent)]
    Spool(#[from] spool::Error),
    /// Building the shard parts failed (conflicting duplicates, limits, causal cycle).
    #[error(transparent)]
    Shard(#[from] shard::Error),
    /// Writing a seal or shard file, or reading one back, failed at the file layer.
    #[error(transparent)]
    File(#[from] files::Error),
    /// The producer lock could not be taken or released.
    #[error(transparent)]
    Lock(#[from] lock::Error),
    /// A producer has events but no partition marker, so its partition date is unknown; the
    /// events were not written by `record`, or the marker was removed.
    #[error("action event partition marker is missing for producer {producer}: {path}")]
    MissingMarker {
        /// The producer, as its canonical JSON.
        producer: String,
        /// Where the marker should be.
        path: PathBuf,
    },
    /// A seal file exists but is not a valid seal for its producer (bad JSON, wrong schema or
    /// producer); it is never overwritten, so inspect and remove it by hand.
    #[error("invalid action event producer finalization: {0}")]
    InvalidSeal(PathBuf),
    /// A valid seal exists but the producer's current events give a different one: events
    /// arrived (or were removed) after sealing. A seal is never rewritten.
    #[error("action event producer finalization conflicts with late spool events: {0}")]
    LateEvents(PathBuf),
    /// Publishing needs every producer sealed, and this one has no seal file; run `seal`
    /// first ([`Error::LateEvents`] when a seal exists but no longer matches).
    #[error(
        "spool {root} is not sealed (producer {producer} has no seal); run `action-ledger seal {root}` first"
    )]
    Unsealed {
        /// The spool root.
        root: PathBuf,
        /// The producer's component.
        producer: String,
    },
    /// A seal (path carried) whose producer has no events left in the spool.
    #[error(
        "seal {0} has no events in the spool: events of a sealed producer were removed; the spool cannot be published"
    )]
    OrphanSeal(PathBuf),
    /// A shard file already exists at the output path with content that is not equivalent
    /// to the sealed events (see [`shard::existing_is_equivalent`]).
    #[error(
        "action event shard conflict at {path}: existing content differs from the sealed events"
    )]
    ShardConflict {
        /// The existing shard file.
        path: PathBuf,
    },
    /// The strict privacy profile found a value of one of its families in a spooled event;
    /// nothing was sealed.
    #[error(
        "action event {event_id} ({path}): {finding}, which the strict privacy profile refuses; nothing was sealed: delete that file and record the event without the value (revoke or rotate it if it is a credential), or seal with --privacy reference"
    )]
    StrictPrivacy {
        /// The spool file of the event.
        path: PathBuf,
        /// The event's id.
        event_id: Digest,
        /// What the strict profile found, and where in the event.
        finding: privacy::strict::Finding,
    },
}

impl Error {
    /// True when sealing ran and refused (exit 1 in the CLI): late events, a conflicting
    /// shard file, an unsealed spool, or a strict-privacy finding.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Error::LateEvents(_)
                | Error::ShardConflict { .. }
                | Error::Unsealed { .. }
                | Error::StrictPrivacy { .. }
        )
    }
}

/// One producer's share of a spool, ready to seal or publish.
#[derive(Clone, Debug)]
pub struct ProducerRun {
    /// The persisted producer object (snake_case).
    pub producer: Value,
    /// sha256 of its canonical JSON.
    pub producer_digest: Digest,
    /// Normalized shard identity (producer plus partition date).
    pub identity: ShardIdentity,
    /// Events in canonical causal order.
    pub events: Vec<Event>,
    /// Exact seal file bytes.
    pub seal: String,
    /// The first strict-profile finding of each of its events that has one, by event id,
    /// found while the spool was read ([`Spool::read_all_scanned`]; empty when none has).
    pub strict: HashMap<Digest, Finding>,
}

impl ProducerRun {
    /// The shard parts of this run.
    pub fn shards(&self) -> Result<Vec<Shard>, Error> {
        Ok(shard::pack(&self.identity, self.events.clone())?)
    }

    /// [`ProducerRun::shards`], consuming the run (its events move into the shards).
    ///
    /// # Errors
    /// As [`ProducerRun::shards`].
    pub fn into_shards(self) -> Result<Vec<Shard>, Error> {
        Ok(shard::pack(&self.identity, self.events)?)
    }

    /// Spool-relative path of the seal.
    pub fn seal_relative_path(&self) -> String {
        spool::seal_relative_path(&self.producer_digest)
    }
}

/// Groups the spool's events by producer (in first appearance of the comparator-sorted spool,
/// as the reference does), orders each group causally and derives its seal.
pub fn plan(spool: &Spool) -> Result<Vec<ProducerRun>, Error> {
    let (events, mut found) = spool.read_all_scanned()?;
    let mut groups: Vec<(String, Vec<Event>)> = Vec::new();
    // Group index by key: a spool may hold hundreds of producers. Events read by one thread
    // share their producer's tree, so a tree already met gives its group without encoding it
    // again (the address only identifies a tree that is still alive: every event is kept).
    let mut index: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut by_tree: std::collections::HashMap<*const crate::event::Producer, usize> =
        std::collections::HashMap::new();
    for e in events {
        let tree: *const crate::event::Producer = e.producer();
        let i = match by_tree.get(&tree) {
            Some(&i) => i,
            None => {
                let key = e.producer().canonical();
                let i = *index.entry(key.clone()).or_insert_with(|| {
                    groups.push((key, Vec::new()));
                    groups.len() - 1
                });
                by_tree.insert(tree, i);
                i
            }
        };
        groups[i].1.push(e);
    }
    // Each producer's run on all cores (its causal order and replay digest are most of the
    // cost); the first error in the spool's order is the one reported, as before.
    let built: Vec<Result<ProducerRun, Error>> = groups
        .into_par_iter()
        .map(|(key, events)| producer_run(spool, key, events))
        .collect();
    let mut runs = Vec::with_capacity(built.len());
    for run in built {
        let mut run = run?;
        if !found.is_empty() {
            let of_run = |e: &Event| found.remove_entry(&e.event_id);
            run.strict = run.events.iter().filter_map(of_run).collect();
        }
        runs.push(run);
    }
    Ok(runs)
}

/// The run of one producer of `spool` (its canonical text `key`) from its `events`, without
/// its strict findings (the caller's).
fn producer_run(spool: &Spool, key: String, events: Vec<Event>) -> Result<ProducerRun, Error> {
    let producer = events[0].producer().to_value();
    let digest = Digest::of(&key);
    let date = spool
        .partition_date(&digest)?
        .ok_or_else(|| Error::MissingMarker {
            producer: key.clone(),
            path: spool
                .handle()
                .display_path(&spool::marker_relative_path(&digest)),
        })?;
    let identity = events[0]
        .shard_identity(&date)
        .normalized()
        .map_err(shard::Error::from)?;
    let events = shard::normalize_events(&identity, events, shard::MAX_SET_EVENTS)?;
    let record = Value::object([
        ("event_count", Value::from(events.len() as i64)),
        ("partition_date", Value::str(&date)),
        ("producer", producer.clone()),
        (
            "replay_sha256",
            Value::str(event::replay_digest(&events).as_str()),
        ),
        ("schema", Value::str(SCHEMA)),
        ("schema_version", Value::from(1)),
    ]);
    Ok(ProducerRun {
        strict: HashMap::new(),
        seal: format!("{}\n", canonical::to_canonical_unchecked(&record)),
        producer,
        producer_digest: digest,
        identity,
        events,
    })
}

/// What [`seal`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Seals written now.
    pub sealed: usize,
    /// Seals that already existed with identical bytes.
    pub already_sealed: usize,
    /// Sorted shard paths of all producers (written to the output root when one was given).
    pub shard_paths: Vec<String>,
    /// Shard files created in the output root.
    pub shards_created: usize,
}

/// Label of an output root (the directory `seal --output` writes shards into).
pub const OUTPUT_ROOT_LABEL: &str = "action event output root";

/// Knobs of [`seal`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// How long to wait for producer locks held by live writers (default 10 s).
    pub lock: lock::Options,
    /// The privacy profile (default [`Profile::Strict`]): under strict, a spool with an event
    /// that [`privacy::strict::RULES`] refuses is not sealed at all ([`Error::StrictPrivacy`]).
    pub privacy: Profile,
    /// Pass 1 of two-pass finalization (ledger-runtime §7.2 step 1b): leave out the producers
    /// whose events are all `projection.failed` (default `false`: seal every producer).
    pub skip_projection_failure_only: bool,
}

/// Whether every event of `run` is a live-projection failure (§7.2 step 1b).
pub fn is_projection_failure_only(run: &ProducerRun) -> bool {
    run.events
        .iter()
        .all(|e| e.event_type() == crate::live::FAILURE_TYPE)
}

/// [`plan`], without the producers [`Options::skip_projection_failure_only`] leaves out.
fn plan_selected(spool: &Spool, options: &Options) -> Result<Vec<ProducerRun>, Error> {
    let mut runs = plan(spool)?;
    if options.skip_projection_failure_only {
        runs.retain(|r| !is_projection_failure_only(r));
    }
    Ok(runs)
}

/// The first event of `runs` that `profile` refuses beyond the reference's rules (under
/// [`Profile::Strict`], the findings gathered when the spool was read, [`ProducerRun::strict`]).
fn check_privacy(spool: &Spool, runs: &[ProducerRun], profile: Profile) -> Result<(), Error> {
    if profile == Profile::Reference {
        return Ok(());
    }
    for r in runs {
        if let Some(e) = r.events.iter().find(|e| r.strict.contains_key(&e.event_id)) {
            return Err(Error::StrictPrivacy {
                path: spool.handle().display_path(&spool::event_relative_path(e)),
                event_id: e.event_id.clone(),
                finding: r.strict[&e.event_id].clone(),
            });
        }
    }
    Ok(())
}

/// Seals every producer of the spool (create-only seal files, written through the spool's
/// opened root) and, with `output`, writes the shard parts below that opened root as the
/// reference's finalize does (existing shards must be identical or replay-equivalent).
///
/// Sealing: the spool is read, the locks of all its producers are taken (sorted, nested),
/// and the spool is checked again under the locks, so a concurrent `record` either lands before
/// the seal or finds the seal and is refused. The check lists the event file names: event files
/// are create-only and never change once named, so an unchanged listing means the events read
/// before locking are exactly the events under the lock; otherwise the spool is read again, and
/// a producer that appeared meanwhile is added to the set and the locks taken again. `now`
/// goes into the lock files only.
///
/// Under [`Profile::Strict`] (`options.privacy`) every event is checked against
/// [`privacy::strict::RULES`] after the reference's checks (of the spool, then of the seals and
/// shards already written), and one hit refuses the whole spool before anything is written
/// ([`Error::StrictPrivacy`]).
///
/// What remains if the process dies: seals and shards already written (create-only, complete),
/// lock files whose owner is dead (the next writer reclaims them at once).
pub fn seal(
    spool: &Spool,
    output: Option<&Root>,
    now: Timestamp,
    options: &Options,
) -> Result<SealReport, Error> {
    let mut names = spool.event_names()?;
    let mut runs = plan_selected(spool, options)?;
    let mut producers: Vec<Value> = Vec::new();
    let guards = loop {
        for r in &runs {
            if !producers.contains(&r.producer) {
                producers.push(r.producer.clone());
            }
        }
        let guards = lock::acquire_producers(spool.handle(), &producers, now, &options.lock)?;
        let now = spool.event_names()?;
        if now == names {
            break guards;
        }
        names = now;
        runs = plan_selected(spool, options)?;
        if runs.iter().all(|r| producers.contains(&r.producer)) {
            break guards;
        }
        lock::release_all(guards)?;
    };
    // A seal killed mid-write left its staging file; under the locks no live sealer of these
    // producers can be writing one, and a staging file of a live process is kept anyway.
    spool.handle().remove_dead_staging(
        &format!("{}/_finalizations", spool::SPOOL_DIR),
        spool::MAX_ENTRIES,
    )?;
    // Checked on the events read under the locks: exactly what would be sealed. The
    // reference's checks of what is already there come first, so that a spool the reference
    // refuses is refused for its reason under either profile.
    if options.privacy == Profile::Strict {
        check_existing(spool, output, &runs)?;
    }
    check_privacy(spool, &runs, options.privacy)?;
    let report = write_sealed(spool, output, &runs)?;
    lock::release_all(guards)?;
    Ok(report)
}

fn write_sealed(
    spool: &Spool,
    output: Option<&Root>,
    runs: &[ProducerRun],
) -> Result<SealReport, Error> {
    let mut report = SealReport::default();
    for run in runs {
        let rel = run.seal_relative_path();
        match spool.handle().write_create_only(
            &rel,
            run.seal.as_bytes(),
            "action event producer finalization",
        )? {
            Written::Created => report.sealed += 1,
            Written::Exists => {
                check_existing_seal(spool, run)?;
                report.already_sealed += 1;
            }
        }
        for s in run.shards()? {
            if let Some(out) = output {
                match out.write_create_only(&s.path, s.content.as_bytes(), "action event shard")? {
                    Written::Created => report.shards_created += 1,
                    Written::Exists => {
                        let existing = out
                            .read_text(&s.path, shard::MAX_BYTES as u64, "action event shard")?
                            .unwrap_or_default();
                        if !shard::existing_is_equivalent(&existing, &s)? {
                            return Err(Error::ShardConflict {
                                path: out.display_path(&s.path),
                            });
                        }
                    }
                }
            }
            report.shard_paths.push(s.path);
        }
    }
    report.shard_paths.sort();
    Ok(report)
}

/// The checks [`write_sealed`] makes of files that already exist, without writing: an existing
/// seal must be the run's, an existing shard identical or replay-equivalent.
fn check_existing(spool: &Spool, output: Option<&Root>, runs: &[ProducerRun]) -> Result<(), Error> {
    for run in runs {
        if let Some(text) = read_seal(spool, run)? {
            check_seal_text(spool, run, &text)?;
        }
        let Some(out) = output else { continue };
        for s in run.shards()? {
            if let Some(existing) =
                out.read_text(&s.path, shard::MAX_BYTES as u64, "action event shard")?
                && !shard::existing_is_equivalent(&existing, &s)?
            {
                return Err(Error::ShardConflict {
                    path: out.display_path(&s.path),
                });
            }
        }
    }
    Ok(())
}

fn check_existing_seal(spool: &Spool, run: &ProducerRun) -> Result<(), Error> {
    match read_seal(spool, run)? {
        Some(text) => check_seal_text(spool, run, &text),
        None => Err(Error::InvalidSeal(
            spool.handle().display_path(&run.seal_relative_path()),
        )),
    }
}

/// The text of `run`'s seal file, if there is one.
fn read_seal(spool: &Spool, run: &ProducerRun) -> Result<Option<String>, Error> {
    Ok(spool.handle().read_text(
        &run.seal_relative_path(),
        MAX_SEAL_BYTES,
        "action event producer finalization",
    )?)
}

/// An existing seal `text` must be exactly `run`'s seal: a valid seal of the producer with
/// other contents means events came after it ([`Error::LateEvents`]).
fn check_seal_text(spool: &Spool, run: &ProducerRun, text: &str) -> Result<(), Error> {
    let path = || spool.handle().display_path(&run.seal_relative_path());
    if text == run.seal {
        Ok(())
    } else if is_valid_seal(text, &run.producer) {
        Err(Error::LateEvents(path()))
    } else {
        Err(Error::InvalidSeal(path()))
    }
}

/// Seal validation on read: canonical, exact schema and version, the expected
/// producer, a calendar partition date, `event_count` ≥ 1, a hex64 replay digest, no other keys.
pub fn is_valid_seal(text: &str, producer: &Value) -> bool {
    let Some(body) = text.strip_suffix('\n') else {
        return false;
    };
    let Ok(v) = canonical::parse_canonical(body) else {
        return false;
    };
    let Some(map) = v.as_object() else {
        return false;
    };
    map.len() == 6
        && v.get("schema").and_then(Value::as_str) == Some(SCHEMA)
        && v.get("schema_version").and_then(Value::as_f64) == Some(1.0)
        && v.get("producer") == Some(producer)
        && v.get("partition_date")
            .and_then(Value::as_str)
            .is_some_and(|d| crate::identity::calendar_date(d, "seal").is_ok_and(|n| n == d))
        && v.get("event_count")
            .and_then(Value::as_safe_integer)
            .is_some_and(|n| n >= 1)
        && v.get("replay_sha256")
            .and_then(Value::as_str)
            .is_some_and(crate::identity::is_hex64)
}

/// The producer runs of a spool that must already be sealed: every producer needs a seal equal
/// to the one its current events produce (else [`Error::Unsealed`] or [`Error::LateEvents`]).
pub fn sealed_runs(spool: &Spool) -> Result<Vec<ProducerRun>, Error> {
    sealed_runs_selected(spool, &Options::default())
}

/// [`sealed_runs`] for the producers `options` selects: with
/// [`Options::skip_projection_failure_only`], the producers whose events are all
/// `projection.failed` may be unsealed (pass 1 of the publisher's two-pass finalization,
/// [`crate::live::finalize::finalize_sealed`]); only the selected runs are returned.
pub fn sealed_runs_selected(spool: &Spool, options: &Options) -> Result<Vec<ProducerRun>, Error> {
    let all = plan(spool)?;
    let selected =
        |r: &ProducerRun| !(options.skip_projection_failure_only && is_projection_failure_only(r));
    for run in all.iter().filter(|r| selected(r)) {
        let Some(text) = read_seal(spool, run)? else {
            return Err(Error::Unsealed {
                root: spool.root().to_owned(),
                producer: run.identity.producer.clone(),
            });
        };
        check_seal_text(spool, run, &text)?;
    }
    // A seal whose producer has no events left means a whole producer's events were removed.
    let dir = format!("{}/_finalizations", spool::SPOOL_DIR);
    let names = spool
        .handle()
        .list_dir(&dir, spool::MAX_ENTRIES)?
        .unwrap_or_default();
    for (name, _) in names {
        let Some(digest) = name.strip_suffix(".json").and_then(Digest::parse) else {
            continue;
        };
        if !all.iter().any(|r| r.producer_digest == digest) {
            return Err(Error::OrphanSeal(spool.root().join(&dir).join(name)));
        }
    }
    Ok(all.into_iter().filter(|r| selected(r)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{copy_files, files_under, fixture_spool};
    use std::path::Path;

    /// The producers' runs are built on all cores, but of several faulty producers the one
    /// reported is always the first in the spool's order: a corpus spool of six producers
    /// without any partition marker names the first event's producer, every time.
    #[test]
    fn of_several_faulty_producers_the_first_in_spool_order_is_reported() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "testdata/corpus/day1/spools/024-openclaw-openclaw-route-command-r13550944436-a1",
        );
        let copy = tempfile::tempdir().unwrap();
        let markers = std::cell::Cell::new(0);
        copy_files(&corpus, copy.path(), |rel, _| {
            let marker = rel.contains("/_partitions/");
            markers.set(markers.get() + usize::from(marker));
            !marker
        });
        assert_eq!(markers.get(), 6);
        let spool = Spool::open(copy.path()).unwrap();
        let (events, _) = spool.read_all_scanned().unwrap();
        let first = events[0].producer().canonical();
        for _ in 0..16 {
            match plan(&spool) {
                Err(Error::MissingMarker { producer, .. }) => assert_eq!(producer, first),
                other => panic!("{:?}", other.map(|r| r.len())),
            }
        }
    }

    /// Every sealed spool of the day1 corpus reproduces the reference's finalize output byte for
    /// byte, and its existing seals (the reference's) are recognized as identical.
    #[test]
    fn corpus_spools_reproduce_reference_shards() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1");
        let mut jobs: Vec<_> = std::fs::read_dir(corpus.join("spools"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        jobs.sort();
        assert_eq!(jobs.len(), 24);
        for job in jobs {
            let src = corpus.join("spools").join(&job);
            let copy = tempfile::tempdir().unwrap();
            copy_files(&src, copy.path(), |_, _| true);
            let out = tempfile::tempdir().unwrap();
            let spool = Spool::open(copy.path()).unwrap();
            let out_root = Root::open(out.path(), OUTPUT_ROOT_LABEL).unwrap();
            let report = seal(
                &spool,
                Some(&out_root),
                crate::time::Timestamp::from_millis(0),
                &Options::default(),
            )
            .unwrap();
            assert_eq!(report.sealed, 0, "{job}: reference seals must match");
            assert!(report.already_sealed > 0);
            assert_eq!(
                files_under(out.path()),
                files_under(&corpus.join("shards").join(&job)),
                "{job}"
            );
            assert_eq!(
                files_under(copy.path()),
                files_under(&src),
                "{job}: spool unchanged"
            );
        }
    }

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    /// Seals `root` on another thread and fails the test if that takes more than a second.
    fn seal_within_a_second(root: &Path) -> Result<SealReport, String> {
        let root = root.to_owned();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = Spool::open(&root).map_err(Error::from).and_then(|s| {
                seal(
                    &s,
                    None,
                    crate::time::Timestamp::from_millis(0),
                    &Options::default(),
                )
            });
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        rx.recv_timeout(std::time::Duration::from_secs(1))
            .expect("seal blocked on a special file instead of failing closed")
    }

    /// A FIFO planted in a repository directory, at the partition marker or at the producer lock
    /// makes `seal` fail closed at once with a message naming it; nothing hangs.
    #[test]
    fn fifo_in_the_spool_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        fixture_spool(dir.path());
        let spool = Spool::open(dir.path()).unwrap();
        let event = spool.read_all().unwrap().remove(0);
        let digest = spool::producer_digest(&event.producer().to_value());
        let event_rel = spool::event_relative_path(&event);

        let fifo = dir.path().join(&event_rel).with_file_name("planted.json");
        mkfifo(&fifo);
        let err = seal_within_a_second(dir.path()).unwrap_err();
        assert_eq!(
            err,
            format!(
                "refusing unsafe action event spool entry: {}",
                fifo.display()
            )
        );
        std::fs::remove_file(&fifo).unwrap();

        let marker = dir.path().join(spool::marker_relative_path(&digest));
        std::fs::remove_file(&marker).unwrap();
        mkfifo(&marker);
        let err = seal_within_a_second(dir.path()).unwrap_err();
        assert_eq!(
            err,
            format!(
                "refusing symbolic link or non-regular file for action event partition marker: {}",
                marker.display()
            )
        );
        std::fs::remove_file(&marker).unwrap();
        fixture_spool(dir.path());

        let lock = dir.path().join(spool::lock_relative_path(&digest));
        std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
        mkfifo(&lock);
        let err = seal_within_a_second(dir.path()).unwrap_err();
        assert!(
            err.starts_with(
                "refusing symbolic link or non-regular file for action event producer lock"
            ),
            "{err}"
        );
        std::fs::remove_file(&lock).unwrap();

        assert_eq!(seal_within_a_second(dir.path()).unwrap().sealed, 1);
    }

    /// A seal killed between creating its record's staging file and linking it left
    /// `<record>.<pid>.<uuid>.tmp`: the next seal removes the staging files of dead writers (and
    /// keeps a live one's), then seals as usual.
    #[test]
    fn seal_removes_the_staging_files_of_dead_sealers() {
        let dir = tempfile::tempdir().unwrap();
        fixture_spool(dir.path());
        let fin = dir.path().join(spool::SPOOL_DIR).join("_finalizations");
        std::fs::create_dir_all(&fin).unwrap();
        let dead_pid = crate::tests::dead_pid();
        let uuid = "0b1c9f4e-52a6-4c1e-9d3a-7f0e2b8c6d15";
        let record = format!("{}.json", "a".repeat(64));
        let stale = [
            format!("{record}.{dead_pid}.{uuid}.tmp"),
            format!("other.json.{dead_pid}.{uuid}.tmp"),
        ];
        let live = format!("{record}.{}.{uuid}.tmp", std::process::id());
        let not_staging = [
            format!("{record}.x.{uuid}.tmp"),
            format!("{record}.{dead_pid}.tmp"),
        ];
        for name in stale.iter().chain([&live]).chain(&not_staging) {
            std::fs::write(fin.join(name), "partial").unwrap();
        }
        assert_eq!(seal_within_a_second(dir.path()).unwrap().sealed, 1);
        for name in &stale {
            assert!(!fin.join(name).exists(), "{name} was left");
        }
        for name in [&live].into_iter().chain(&not_staging) {
            assert!(fin.join(name).exists(), "{name} was removed");
        }
    }

    /// Seal takes the producer locks: a live holder makes it wait and time out, nothing sealed.
    #[test]
    fn seal_waits_for_a_held_producer_lock() {
        let dir = tempfile::tempdir().unwrap();
        fixture_spool(dir.path());
        let spool = Spool::open(dir.path()).unwrap();
        let producer = spool.read_all().unwrap()[0].producer().to_value();
        let options = Options {
            lock: lock::Options {
                wait: std::time::Duration::from_millis(300),
                poll: std::time::Duration::from_millis(5),
            },
            ..Options::default()
        };
        let held = lock::acquire_producers(
            spool.handle(),
            &[producer],
            crate::time::Timestamp::from_millis(1),
            &options.lock,
        )
        .unwrap();
        let err = seal(
            &spool,
            None,
            crate::time::Timestamp::from_millis(2),
            &options,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "action event producer lock timed out after 300ms"
        );
        assert_eq!(
            files_under(dir.path())
                .keys()
                .filter(|k| k.contains("_finalizations"))
                .count(),
            0
        );
        lock::release_all(held).unwrap();
        assert_eq!(
            seal(
                &spool,
                None,
                crate::time::Timestamp::from_millis(3),
                &options
            )
            .unwrap()
            .sealed,
            1
        );
        assert_eq!(
            files_under(dir.path())
                .keys()
                .filter(|k| k.contains("_locks"))
                .count(),
            0
        );
    }

    /// While `seal` runs, a thread keeps swapping the spool root, its `.clawsweeper-repair`
    /// directory, the output root and the output's `ledger` directory with links to outside
    /// directories of the same layout. Whatever seal returns, no byte lands outside.
    #[test]
    fn swaps_during_seal_never_write_outside() {
        use std::os::fd::OwnedFd;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        // Exchanges two names inside one directory handle (RENAME_EXCHANGE), so the swapper
        // itself never follows a link it planted.
        let exchange = |dir: &OwnedFd, a: &str, b: &str| {
            rustix::fs::renameat_with(dir, a, dir, b, rustix::fs::RenameFlags::EXCHANGE).is_ok()
        };
        let open_dir = |p: &Path| {
            rustix::fs::open(
                p,
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
                rustix::fs::Mode::empty(),
            )
            .unwrap()
        };
        let base = tempfile::tempdir().unwrap();
        // Learn the shard paths once, to give the outside output the same directories.
        let probe = base.path().join("probe");
        fixture_spool(&probe);
        let probe_out = Root::open_or_create(&base.path().join("probe-out"), "t").unwrap();
        let report = seal(
            &Spool::open(&probe).unwrap(),
            Some(&probe_out),
            crate::time::Timestamp::from_millis(0),
            &Options::default(),
        )
        .unwrap();
        let outside = base.path().join("outside");
        for entry in walkdir::WalkDir::new(&probe) {
            let entry = entry.unwrap();
            if entry.file_type().is_dir() {
                let rel = entry.path().strip_prefix(&probe).unwrap();
                std::fs::create_dir_all(outside.join("spool").join(rel)).unwrap();
                // The same tree one level up, for a followed `.clawsweeper-repair` link.
                if let Ok(rest) = rel.strip_prefix(".clawsweeper-repair") {
                    std::fs::create_dir_all(outside.join("repair").join(rest)).unwrap();
                }
            }
        }
        for p in &report.shard_paths {
            let parent = Path::new(p).parent().unwrap();
            std::fs::create_dir_all(outside.join("out").join(parent)).unwrap();
            std::fs::create_dir_all(
                outside
                    .join("ledger")
                    .join(parent.strip_prefix("ledger").unwrap()),
            )
            .unwrap();
        }
        // A lock left behind by an interrupted release would otherwise be waited on for 10 s.
        let quick = Options {
            lock: lock::Options {
                wait: std::time::Duration::from_millis(100),
                poll: std::time::Duration::from_millis(1),
            },
            ..Options::default()
        };
        let (mut ok, mut refused) = (0, 0);
        for round in 0..20 {
            let work = base.path().join(format!("round{round}"));
            let (spool_dir, out_dir) = (work.join("spool"), work.join("out"));
            fixture_spool(&spool_dir);
            std::fs::create_dir_all(out_dir.join("ledger")).unwrap();
            // Even rounds swap only the two roots: seal must succeed through its handles. Odd
            // rounds also swap directories below them: seal may fail, but only by refusing.
            let roots_only = round % 2 == 0;
            // (parent directory, real name, link name, link target)
            let swaps: Vec<_> = [
                (&work, "spool", outside.join("spool")),
                (&work, "out", outside.join("out")),
                (&spool_dir, ".clawsweeper-repair", outside.join("repair")),
                (&out_dir, "ledger", outside.join("ledger")),
            ]
            .into_iter()
            .take(if roots_only { 2 } else { 4 })
            .map(|(parent, name, target)| {
                let link = format!("{name}-link");
                std::os::unix::fs::symlink(target, parent.join(&link)).unwrap();
                (open_dir(parent), name, link)
            })
            .collect();
            let spool = Spool::open(&spool_dir).unwrap();
            let out = Root::open(&out_dir, OUTPUT_ROOT_LABEL).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let started = Arc::new(AtomicBool::new(false));
            let swapper = {
                let stop = stop.clone();
                let started = started.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for (dir, name, link) in &swaps {
                            n += u64::from(exchange(dir, name, link));
                        }
                        started.store(n > 0, Ordering::Relaxed);
                        std::thread::yield_now();
                    }
                    n
                })
            };
            // On a loaded machine the seal could finish before the swapper first runs.
            while !started.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            let result = seal(
                &spool,
                Some(&out),
                crate::time::Timestamp::from_millis(0),
                &quick,
            );
            stop.store(true, Ordering::Relaxed);
            assert!(swapper.join().unwrap() > 0);
            let leaked: Vec<String> = files_under(&outside).into_keys().collect();
            assert_eq!(leaked, Vec::<String>::new(), "round {round}");
            match result {
                Ok(_) if !roots_only => ok += 1,
                Ok(report) => {
                    ok += 1;
                    // The roots may be left swapped: read back through the handles.
                    let run = &plan(&spool).unwrap()[0];
                    let seal_rel = run.seal_relative_path();
                    let sealed = spool.handle().read_text(&seal_rel, MAX_SEAL_BYTES, "t");
                    assert_eq!(sealed.unwrap().as_deref(), Some(run.seal.as_str()));
                    for p in &report.shard_paths {
                        assert!(
                            out.read_text(p, shard::MAX_BYTES as u64, "t")
                                .unwrap()
                                .is_some()
                        );
                    }
                }
                Err(e) if roots_only => panic!("round {round}: {e}"),
                Err(e) => {
                    refused += 1;
                    let text = e.to_string();
                    assert!(text.contains("refusing"), "round {round}: {text}");
                }
            }
        }
        assert!(ok >= 10, "every roots-only round succeeds");
        assert!(refused > 0, "no swap below the roots was ever refused");
        assert_eq!(ok + refused, 20);
    }

    /// Under the strict profile a spool holding an event the strict rules refuse is not sealed
    /// (the finding was gathered while the spool was read), naming the event's file; the
    /// reference profile seals it.
    #[test]
    fn a_strict_hit_refuses_the_seal() {
        let dir = tempfile::tempdir().unwrap();
        let hit = crate::tests::sealed_spool_with_learning_signal(
            dir.path(),
            "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh",
        );
        let spool = Spool::open(dir.path()).unwrap();
        let now = Timestamp::from_millis(0);
        let err = seal(&spool, None, now, &Options::default()).unwrap_err();
        let file = format!("{}.json", hit.as_str());
        assert!(
            matches!(&err, Error::StrictPrivacy { path, event_id, finding }
                if event_id == &hit && path.ends_with(&file) && finding.path == "$.learning.signal"),
            "{err}"
        );
        assert_eq!(plan(&spool).unwrap()[0].strict.len(), 1);
        let reference = Options {
            privacy: Profile::Reference,
            ..Default::default()
        };
        assert_eq!(
            seal(&spool, None, now, &reference).unwrap().already_sealed,
            1
        );
    }

    /// The strict rules come after the reference's checks of what is already written: a
    /// broken output shard is reported as the reference reports it under both profiles,
    /// although strict would refuse the spool's event too.
    #[test]
    fn a_broken_output_shard_comes_before_a_strict_hit() {
        let dir = tempfile::tempdir().unwrap();
        crate::tests::sealed_spool_with_learning_signal(
            dir.path(),
            "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh",
        );
        let out_dir = dir.path().join("out");
        let shard = walkdir::WalkDir::new(&out_dir)
            .into_iter()
            .map(Result::unwrap)
            .find(|e| e.file_type().is_file())
            .unwrap();
        std::fs::write(shard.path(), "{}\n").unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let out = Root::open(&out_dir, "output").unwrap();
        let refusal = |privacy| {
            let options = Options {
                privacy,
                ..Default::default()
            };
            seal(&spool, Some(&out), Timestamp::from_millis(0), &options)
                .unwrap_err()
                .to_string()
        };
        let reference = refusal(Profile::Reference);
        assert!(
            reference.contains("shard content is not canonical"),
            "{reference}"
        );
        assert_eq!(refusal(Profile::Strict), reference);
    }
}
