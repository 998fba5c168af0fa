//! The unchanged-replay fast path: a sealed spool whose events are all already published, as
//! complete sets, is answered from the tip without validating a single event (see
//! [`sealed_replay`]). Anything short of that falls through to the full path, which reports the
//! precise refusal.

use std::collections::HashSet;
use std::path::Path;

use rayon::prelude::*;

use super::limits;
use super::privacy_check::any_strict_hit;
use super::source::SOURCE_LABEL;
use super::*;
use crate::canonical::{self, Value};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::binding::{self, Kind};
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self};
use crate::privacy::Profile;
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
        let Some(text) = handle.read_text(
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
    // Every event file of the spool is one of those lines, and there are exactly as many.
    let lines: HashSet<&str> = contents.iter().flat_map(|c| c.lines()).collect();
    let spool = Spool::from_root(handle)?;
    let names = spool.event_names()?;
    if names.len() != expected_events || lines.len() != expected_events {
        return Ok(None);
    }
    // Read and compare on all cores; the snapshot (one thread's) looks up the bindings after.
    let texts = spool.read_event_texts(&names)?;
    let ids: Option<Vec<Digest>> = names
        .par_iter()
        .zip(texts.par_iter())
        .map(|(name, text)| {
            let id = name
                .rsplit_once('/')
                .and_then(|(_, f)| f.strip_suffix(".json"))
                .and_then(Digest::parse)?;
            let line = text.as_deref().and_then(|t| t.strip_suffix('\n'))?;
            (lines.contains(line) && line.contains(&format!("\"event_id\":\"{id}\""))).then_some(id)
        })
        .collect();
    let Some(ids) = ids else {
        return Ok(None);
    };
    drop(texts);
    for id in &ids {
        let path = Kind::Event.path(layout, id);
        if !snap.exists(&path)? {
            return Ok(None);
        }
        manifest.reservation_paths.push(path);
    }
    // The spool's lines are exactly `lines` now (as many distinct files as lines, each one of
    // them). The strict profile refuses such a batch even when it is present (check_privacy):
    // scan them on all cores, and let the full path say what it refuses.
    if privacy == Profile::Strict && any_strict_hit(&lines) {
        return Ok(None);
    }
    manifest.unchanged = manifest.event_paths.len();
    manifest.event_paths.sort();
    manifest.reservation_paths.sort();
    manifest.completion_paths.sort();
    manifest.set_paths();
    Ok(Some(manifest))
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
}
