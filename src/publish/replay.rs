//! The unchanged-replay fast path: a sealed spool whose events are all already published, as
//! complete sets, is answered from the tip without validating a single event (see
//! [`sealed_replay`]). Anything short of that falls through to the full path, which reports the
//! precise refusal. The spool's files are read on the pool while this thread reads the tip.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;

use super::limits;
use super::source::SOURCE_LABEL;
use super::*;
use crate::canonical::{self, Value};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::binding::{self, Kind};
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self};
use crate::privacy::{self, Profile};
use crate::store::Snapshot;
use crate::writer::files::{EntryKind, Root};
use crate::writer::seal;
use crate::writer::spool::{self, Spool};

/// The fast path of an unchanged replay (issue 7): when `root` is a sealed spool whose every
/// event file is, byte for byte, a line of the shards its seals name in `snap`, and those sets
/// are complete (reservation listing exactly those shards, completion marker and producer-run
/// binding with the bytes the publisher writes, an identity binding for every event), the
/// publication would add nothing: its manifest is returned without validating a single event.
/// Anything else returns `None` and the full path (which reports the precise refusal) runs; so
/// does an event the `strict` profile refuses.
///
/// Sound because published lines were validated when they were published: bytes equal to them
/// are the same events, and a spool holding exactly the published events of its sealed producers
/// packs into exactly the published shards.
pub(super) fn sealed_replay(
    root: &Path,
    snap: &Snapshot<'_>,
    requested: Option<Layout>,
    privacy: Profile,
) -> Result<Option<Manifest>, Error> {
    let layout = match super::plan::detect_layout(snap) {
        Ok(layout::Detected::Existing(l)) if requested.is_none_or(|r| r == l) => l,
        _ => return Ok(None),
    };
    let Ok(handle) = Root::open(root, SOURCE_LABEL) else {
        return Ok(None);
    };
    if handle.entry_kind(spool::SPOOL_DIR)? != Some(EntryKind::Dir) {
        return Ok(None);
    }
    let seal_dir = format!("{}/_finalizations", spool::SPOOL_DIR);
    let Some(seals) = handle.list_dir(&seal_dir, spool::MAX_ENTRIES)? else {
        return Ok(None);
    };
    // No seal beside shard files: not a replay of a sealed spool (read_source_shards publishes
    // the shards).
    if seals.is_empty() && handle.entry_kind(shard::EVENTS_ROOT)? == Some(EntryKind::Dir) {
        return Ok(None);
    }
    // A spool that cannot be read here is left to the full path, which reads it again and
    // names the defect (so does the reader below).
    let Ok(spool) = Spool::from_root(handle) else {
        return Ok(None);
    };
    let Ok(names) = spool.event_names() else {
        return Ok(None);
    };
    let mut ids = Vec::with_capacity(names.len());
    for name in &names {
        let Some(id) = name
            .rsplit_once('/')
            .and_then(|(_, f)| f.strip_suffix(".json"))
            .and_then(Digest::parse)
        else {
            return Ok(None);
        };
        ids.push(id);
    }
    // The event files are read (and, under `strict`, scanned) on the pool while this thread
    // reads the tip (one thread's snapshot); whichever finds that this is no replay stops the
    // other.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let texts = read_and_scan(&spool, &names, privacy, &stop);
            if texts.is_none() {
                stop.store(true, Ordering::Relaxed);
            }
            texts
        });
        let tip = {
            // Stops the reader if this side unwinds; the scope joins it before the panic goes on.
            let _on_unwind = StopOnUnwind(&stop);
            published_sets(&spool, &seal_dir, seals, &ids, layout, snap, &stop)
        };
        if !matches!(tip, Ok(Some(_))) {
            stop.store(true, Ordering::Relaxed);
        }
        let texts = reader
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The tip decides first, whatever the reader met by then.
        let Some((mut manifest, contents)) = tip? else {
            return Ok(None);
        };
        let Some(texts) = texts else {
            return Ok(None);
        };
        // Every event file is one of the published lines and names its event, no two files are
        // alike, and there are as many distinct lines as files: the files are exactly the
        // published lines (so the strict scan of the files was the scan of the lines).
        let lines: HashSet<&str, foldhash::fast::RandomState> =
            contents.iter().flat_map(|c| c.lines()).collect();
        if lines.len() != texts.len() {
            return Ok(None);
        }
        let same = texts
            .par_iter()
            .zip(ids.par_iter())
            .map_init(String::new, |member, (text, id)| {
                member.clear();
                member.push_str("\"event_id\":\"");
                member.push_str(id.as_str());
                member.push('"');
                text.strip_suffix('\n')
                    .is_some_and(|line| lines.contains(line) && line.contains(member.as_str()))
            })
            .all(|same| same);
        let distinct: HashSet<&str, foldhash::fast::RandomState> =
            texts.iter().map(String::as_str).collect();
        if !same || distinct.len() != texts.len() {
            return Ok(None);
        }
        manifest.unchanged = manifest.event_paths.len();
        manifest.event_paths.sort();
        manifest.reservation_paths.sort();
        manifest.completion_paths.sort();
        manifest.set_paths();
        Ok(Some(manifest))
    })
}

/// Sets the flag when dropped during a panic.
struct StopOnUnwind<'a>(&'a AtomicBool);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// The texts of the spool's event files `names`, read on all cores; `None` when one is gone or
/// cannot be read (the full path reads it again and names the defect), when `stop` is set, or
/// (under `strict`) when the strict profile refuses one. A published line
/// was checked with the profile of its publication, which may not have been `strict`, so the
/// full path would refuse such a batch even though it is present (check_privacy): let it say
/// what it refuses.
fn read_and_scan(
    spool: &Spool,
    names: &[String],
    privacy: Profile,
    stop: &AtomicBool,
) -> Option<Vec<String>> {
    let texts = spool
        .read_event_texts(names, || !stop.load(Ordering::Relaxed))
        .ok()?;
    let texts: Vec<String> = texts.into_iter().collect::<Option<_>>()?;
    let refused = privacy == Profile::Strict
        && texts
            .par_iter()
            .any(|t| stop.load(Ordering::Relaxed) || privacy::strict::refuses_line(t));
    (!refused).then_some(texts)
}

/// What the tip holds of the spool's sealed sets: for each seal, its reservation, its shards
/// (their contents returned, for comparing with the event files), completion marker and
/// producer-run binding with the bytes the publisher writes, as many lines as the seal counts;
/// and an identity binding for every event of `ids`. `None` as soon as anything differs or
/// `stop` is set.
fn published_sets(
    spool: &Spool,
    seal_dir: &str,
    seals: Vec<(String, EntryKind)>,
    ids: &[Digest],
    layout: Layout,
    snap: &Snapshot<'_>,
    stop: &AtomicBool,
) -> Result<Option<(Manifest, Vec<String>)>, Error> {
    // Through the view, so a shard of a compacted month reads as its original bytes.
    let view = crate::view::View::new(snap);
    let read_snap = |path: &str| -> Result<Option<String>, Error> {
        Ok(view
            .read(path, limits::MAX_FILE_BYTES as u64)?
            .and_then(|b| String::from_utf8(b).ok()))
    };
    let mut manifest = Manifest::default();
    let mut contents: Vec<String> = Vec::new();
    let mut expected_events = 0usize;
    for (name, _) in seals {
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some(text) = spool.handle().read_text(
            &format!("{seal_dir}/{name}"),
            seal::MAX_SEAL_BYTES,
            "action event producer finalization",
        )?
        else {
            return Ok(None);
        };
        let Some(id) = seal_identity(&text) else {
            return Ok(None);
        };
        let (res_path, _) = binding::shard_set(layout, &id.0, &[]);
        let Some(reservation) = read_snap(&res_path)? else {
            return Ok(None);
        };
        let Some(parts) = binding::parse_shard_set(&reservation, &id.0) else {
            return Ok(None);
        };
        let mut count = 0usize;
        for (path, _) in &parts {
            let Some(content) = read_snap(path)? else {
                return Ok(None);
            };
            count += content.lines().count();
            contents.push(content);
            manifest.event_paths.push(path.clone());
        }
        if count != id.1 {
            return Ok(None);
        }
        expected_events += count;
        let (comp_path, comp) = binding::completion(layout, &id.0, &reservation);
        let (run_path, run) = binding::producer_run(layout, &id.0);
        for (path, bytes) in [(&comp_path, &comp), (&run_path, &run)] {
            if read_snap(path)?.as_ref() != Some(bytes) {
                return Ok(None);
            }
        }
        manifest.reservation_paths.push(run_path);
        manifest.reservation_paths.push(res_path);
        manifest.completion_paths.push(comp_path);
    }
    if ids.len() != expected_events || stop.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let paths: Vec<String> = ids.iter().map(|id| Kind::Event.path(layout, id)).collect();
    let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
    if !snap.files_exist(&refs)?.into_iter().all(|e| e) {
        return Ok(None);
    }
    manifest.reservation_paths.extend(paths);
    Ok(Some((manifest, contents)))
}

/// The shard identity and event count a seal record names (`None` unless it is a canonical
/// seal whose producer normalizes).
fn seal_identity(text: &str) -> Option<(ShardIdentity, usize)> {
    let v = canonical::parse_canonical(text.strip_suffix('\n')?).ok()?;
    let p = v.get("producer")?;
    if !seal::is_valid_seal(text, p) {
        return None;
    }
    let f = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
    let id = ShardIdentity {
        repository: f("repository")?,
        sha: f("sha")?,
        producer: f("component")?,
        workflow: f("workflow")?,
        job: f("job")?,
        run_id: f("run_id")?,
        run_attempt: p.get("run_attempt")?.as_safe_integer()?,
        partition_date: v.get("partition_date")?.as_str()?.to_owned(),
    }
    .normalized()
    .ok()?;
    let count = usize::try_from(v.get("event_count")?.as_safe_integer()?).ok()?;
    Some((id, count))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::test_support::*;

    #[test]
    fn replay_is_unchanged_and_makes_no_commit() {
        let (_dir, store) = crate::tests::scratch_store();
        let options = Options::new(sig());
        let first = publish(&store, &day1("001"), &options).unwrap();
        assert_eq!(first.status, Status::Created);
        assert_eq!(first.manifest.created, 4);
        let again = publish(&store, &day1("001"), &options).unwrap();
        assert_eq!(again.status, Status::Unchanged);
        assert_eq!(again.commit, first.commit);
        assert_eq!((again.manifest.created, again.manifest.unchanged), (0, 4));
        assert_eq!(again.manifest.paths, first.manifest.paths);
    }

    const CLEAN: [&str; 3] = ["first.signal", "second.signal", "third.signal"];
    const SECRET: &str = "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh";

    /// A sealed spool at `dir` with one event per signal, published under the reference
    /// profile into a new store; the store, its tip's manifest and the event files' paths.
    fn published(
        dir: &Path,
        signals: &[&str],
    ) -> (
        tempfile::TempDir,
        crate::store::Store,
        Manifest,
        Vec<PathBuf>,
    ) {
        crate::tests::sealed_spool_with_learning_signals(dir, signals);
        let (tmp, store) = crate::tests::scratch_store();
        let mut options = Options::new(sig());
        options.privacy = Profile::Reference;
        let first = publish(&store, dir, &options).unwrap();
        assert_eq!(first.status, Status::Created);
        let files = files_in(dir, |p| {
            p.starts_with(spool::SPOOL_DIR) && p.ends_with(".json") && !p.contains("/_")
        });
        assert_eq!(files.len(), signals.len(), "{files:?}");
        let files = files.into_iter().map(|f| dir.join(f)).collect();
        (tmp, store, first.manifest, files)
    }

    fn fast_path(store: &crate::store::Store, dir: &Path, privacy: Profile) -> Option<Manifest> {
        let tip = store.tip("refs/heads/main").unwrap();
        let snap = store.snapshot(tip).unwrap();
        sealed_replay(dir, &snap, None, privacy).unwrap()
    }

    /// A sealed spool published whole is answered from the tip, with the manifest of an
    /// unchanged publication, under either profile when no event has a strict hit.
    #[test]
    fn a_sealed_spool_published_whole_is_answered_from_the_tip() {
        let dir = tempfile::tempdir().unwrap();
        let (_tmp, store, first, _) = published(dir.path(), &CLEAN);
        for privacy in [Profile::Strict, Profile::Reference] {
            let m = fast_path(&store, dir.path(), privacy).expect("a replay");
            assert_eq!(m.paths, first.paths);
            assert_eq!((m.created, m.unchanged), (0, first.created));
        }
        let again = publish(&store, dir.path(), &Options::new(sig())).unwrap();
        assert_eq!(again.status, Status::Unchanged);
    }

    /// Anything short of the published events, byte for byte and all of them, goes to the full
    /// path: an event file respelled, one gone, one added from another spool; and the full
    /// path gives its answer.
    #[test]
    fn a_spool_that_differs_from_the_published_events_takes_the_full_path() {
        let dir = tempfile::tempdir().unwrap();
        let (_tmp, store, _, files) = published(dir.path(), &CLEAN);
        let text = std::fs::read_to_string(&files[1]).unwrap();
        // The same event, respelled: no longer one of the published lines.
        std::fs::write(&files[1], text.replacen(':', ": ", 1)).unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_none());
        assert!(publish(&store, dir.path(), &Options::new(sig())).is_err());
        std::fs::write(&files[1], &text).unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_some());
        std::fs::remove_file(&files[1]).unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_none());
        std::fs::write(&files[1], &text).unwrap();
        // Two files that hold each other's event: every line is there, but under another name.
        let other_text = std::fs::read_to_string(&files[2]).unwrap();
        std::fs::write(&files[1], &other_text).unwrap();
        std::fs::write(&files[2], &text).unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_none());
        std::fs::write(&files[2], &other_text).unwrap();
        std::fs::write(&files[1], &text).unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_some());
        // An event of another spool of the same producer run beside the published ones.
        let other = tempfile::tempdir().unwrap();
        crate::tests::sealed_spool_with_learning_signals(other.path(), &["fourth.signal"; 4]);
        let extra = files_in(other.path(), |p| p.ends_with(".json") && !p.contains("/_"))
            .into_iter()
            .find(|p| p.starts_with(spool::SPOOL_DIR))
            .unwrap();
        std::fs::copy(other.path().join(&extra), dir.path().join(&extra)).unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_none());
        // A spool of the same run with other events: the published set differs.
        assert!(fast_path(&store, other.path(), Profile::Strict).is_none());
        assert!(publish(&store, other.path(), &Options::new(sig())).is_err());
    }

    /// In the reference layout every event binding lies in one directory: the fast path
    /// answers a spool of many events there too, and a binding gone sends it to the full path.
    #[test]
    fn a_replay_in_the_reference_layout_is_answered_from_the_tip() {
        let dir = tempfile::tempdir().unwrap();
        let signals: Vec<String> = (0..60).map(|i| format!("signal.{i}")).collect();
        let signals: Vec<&str> = signals.iter().map(String::as_str).collect();
        let ids = crate::tests::sealed_spool_with_learning_signals(dir.path(), &signals);
        let (_tmp, store) = crate::tests::scratch_store();
        let mut options = Options::new(sig());
        options.layout = Some(Layout::Reference);
        let first = publish(&store, dir.path(), &options).unwrap();
        assert_eq!(first.status, Status::Created);
        let m = fast_path(&store, dir.path(), Profile::Strict).expect("a replay");
        assert_eq!(m.paths, first.manifest.paths);
        let events = Kind::Event.path(Layout::Reference, &ids[0]);
        let events = events.rsplit_once('/').unwrap().0;
        let tip = store.tip("refs/heads/main").unwrap();
        let listed = store.snapshot(tip).unwrap().list_files(events).unwrap();
        assert_eq!(listed.len(), 60, "{events}");
        // The same ledger without one of its event bindings.
        let gone = Kind::Event.path(Layout::Reference, &ids[17]);
        let without = store
            .write_commit_with(
                tip,
                &[] as &[(String, &[u8])],
                &[gone],
                false,
                "drop\n",
                &sig(),
            )
            .unwrap();
        store
            .update_ref("refs/heads/main", tip, without, "test")
            .unwrap();
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_none());
    }

    /// A batch published under the reference profile with an event the strict rules refuse:
    /// its replay is unchanged under `reference`, and refused under `strict` by the full path,
    /// which names the event.
    #[test]
    fn a_strict_hit_is_refused_even_when_published() {
        let dir = tempfile::tempdir().unwrap();
        let (_tmp, store, first, _) = published(dir.path(), &[CLEAN[0], SECRET, CLEAN[1]]);
        let m = fast_path(&store, dir.path(), Profile::Reference).expect("a replay");
        assert_eq!(m.paths, first.paths);
        assert!(fast_path(&store, dir.path(), Profile::Strict).is_none());
        let tip = store.tip("refs/heads/main").unwrap();
        let err = publish(&store, dir.path(), &Options::new(sig())).unwrap_err();
        assert!(matches!(err, Error::StrictPrivacy { .. }), "{err}");
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip);
    }
}
