//! Planning a publication against one tip: everything the batch would add, checked against the
//! snapshot, in the reference importer's order:
//!
//! 1. **History**: for every incoming event id, its identity binding if present (a different
//!    `semantic_sha256` is an identity conflict); then parent walks through incoming events first,
//!    else identity bindings, memoized, refusing a cycle. Each distinct binding read counts
//!    toward 262,144. Unknown parents end a walk (parents outside the ledger are allowed).
//! 2. **Bindings**: the producer-run, event identity and shard-set reservations and the
//!    completion markers ([`crate::ledger::binding`]); an existing file with other bytes is a
//!    conflict named by the binding's label.
//! 3. **Payloads**: an existing shard must hold identical or replay-equivalent bytes (the first
//!    writer's bytes win; a shard of a compacted month counts as present with its original
//!    bytes), else a payload conflict.
//!
//! The plan lists only what is new; an empty plan means the publication is unchanged. Its
//! [`Manifest`] lists every path of the batch whether new or not. The commit message is built
//! here too ([`commit_message`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use rayon::prelude::*;

use super::limits;
use super::validate::Batch;
use super::*;
use crate::event::Event;
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::binding::{self, Kind};
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self, Shard};
use crate::store::Snapshot;

/// Everything a batch would add, computed against one snapshot.
pub(super) struct Plan<'b> {
    pub(super) manifest: Manifest,
    /// New files (path, bytes), sorted by path. A shard's bytes are borrowed from the batch:
    /// a copy of every shard held through the commit's writing cost a publication of 10,000
    /// events 15 MiB.
    pub(super) additions: Vec<(String, Cow<'b, [u8]>)>,
}

/// The reference importer's destination transaction against `snap`: history, bindings, payloads.
pub(super) fn plan<'b>(
    batch: &'b Batch,
    snap: &Snapshot<'_>,
    requested: Option<Layout>,
) -> Result<Plan<'b>, Error> {
    let (layout, new_ledger) = layout::choose(detect_layout(snap)?, requested)?;
    let incoming: HashMap<&Digest, &Event> = batch
        .shards
        .iter()
        .flat_map(|s| &s.events)
        .map(|e| (&e.event_id, e))
        .collect();

    // 1. History: identity conflicts, then parent walks through incoming events and bindings.
    let mut durable: HashMap<Digest, Option<(Digest, Option<Digest>)>> = HashMap::new();
    let read_binding = |id: &Digest,
                        durable: &mut HashMap<Digest, Option<(Digest, Option<Digest>)>>|
     -> Result<Option<(Digest, Option<Digest>)>, Error> {
        if let Some(b) = durable.get(id) {
            return Ok(b.clone());
        }
        if durable.len() >= limits::MAX_CAUSAL_BINDINGS {
            return Err(Error::BindingLimit);
        }
        // A point lookup: O(depth) trees read, whatever the size of the ledger.
        let path = Kind::Event.path(layout, id);
        let b = match snap.read(&path, limits::MAX_BINDING_BYTES)? {
            Some(text) => {
                let text =
                    String::from_utf8(text).map_err(|_| Error::InvalidEventBinding(id.clone()))?;
                Some(
                    binding::parse_event(&text, id)
                        .ok_or_else(|| Error::InvalidEventBinding(id.clone()))?,
                )
            }
            None => None,
        };
        durable.insert(id.clone(), b.clone());
        Ok(b)
    };
    let ordered: Vec<&Event> = batch.shards.iter().flat_map(|s| &s.events).collect();
    for e in &ordered {
        if let Some((semantic, _)) = read_binding(&e.event_id, &mut durable)?
            && semantic != e.semantic_sha256
        {
            return Err(Error::IdentityConflict(e.event_id.clone()));
        }
    }
    let mut resolved: HashSet<Digest> = HashSet::new();
    for e in &ordered {
        let mut on_walk: Vec<Digest> = Vec::new();
        let mut walk_set: HashSet<Digest> = HashSet::new();
        let mut current = Some(e.event_id.clone());
        while let Some(id) = current {
            if resolved.contains(&id) {
                break;
            }
            if !walk_set.insert(id.clone()) {
                return Err(Error::HistoryCycle(id));
            }
            on_walk.push(id.clone());
            current = match incoming.get(&id) {
                Some(ev) => ev.parent_event_id.clone(),
                None => read_binding(&id, &mut durable)?.and_then(|(_, p)| p),
            };
        }
        resolved.extend(on_walk);
    }

    // 2. Bindings, exactly as `binding` writes them; their texts (a digest each) are made on
    // all cores, while the lookups below need this thread's snapshot.
    let mut sets: BTreeMap<&ShardIdentity, Vec<&Shard>> = BTreeMap::new();
    for (s, id) in batch.shards.iter().zip(&batch.identities) {
        sets.entry(id).or_default().push(s);
    }
    let events: Vec<(String, String)> = batch
        .shards
        .par_iter()
        .flat_map_iter(|s| s.events.iter().map(|e| binding::event(layout, e)))
        .collect();
    let sets: Vec<_> = sets.into_iter().collect();
    let set_bindings: Vec<_> = sets
        .par_iter()
        .map(|(id, shards)| {
            let run = binding::producer_run(layout, id);
            let (res_path, reservation) = binding::shard_set(layout, id, shards);
            let completion = binding::completion(layout, id, &reservation);
            (run, (res_path, reservation), completion)
        })
        .collect();
    let mut reservations: BTreeMap<String, (String, Kind)> = BTreeMap::new();
    let mut completions: BTreeMap<String, (String, Kind)> = BTreeMap::new();
    for (path, text) in events {
        reservations.insert(path, (text, Kind::Event));
    }
    for ((run_path, run), (res_path, reservation), (comp_path, completion)) in set_bindings {
        reservations.insert(run_path, (run, Kind::ProducerRun));
        reservations.insert(res_path, (reservation, Kind::ShardSet));
        completions.insert(comp_path, (completion, Kind::Completion));
    }
    let mut additions: Vec<(String, Cow<'b, [u8]>)> = Vec::new();
    for (path, (bytes, kind)) in reservations.iter().chain(&completions) {
        // Event bindings read in step 1 are in the tree cache; this is a lookup, not a listing.
        match snap.read(path, limits::MAX_BINDING_BYTES)? {
            Some(cur) if cur == bytes.as_bytes() => {}
            Some(_) => {
                return Err(Error::BindingConflict {
                    label: kind.label(),
                    path: path.clone(),
                });
            }
            None => additions.push((path.clone(), Cow::Owned(bytes.clone().into_bytes()))),
        }
    }

    // 3. Payloads (a compacted shard path is present with its original bytes).
    let view = crate::view::View::new(snap);
    let mut manifest = Manifest::default();
    // Written once, with the first publication of events into a new ledger.
    if let Some(record) = layout
        .record()
        .filter(|_| new_ledger && !batch.shards.is_empty())
    {
        additions.push((
            layout::RECORD_PATH.to_owned(),
            Cow::Owned(record.into_bytes()),
        ));
    }
    for s in &batch.shards {
        match view.read(&s.path, limits::MAX_FILE_BYTES as u64)? {
            None => {
                manifest.created += 1;
                additions.push((s.path.clone(), Cow::Borrowed(s.content.as_bytes())));
            }
            Some(cur) => {
                let cur =
                    String::from_utf8(cur).map_err(|_| Error::PayloadConflict(s.path.clone()))?;
                let equivalent = shard::existing_is_equivalent(&cur, s)
                    .map_err(|_| Error::PayloadConflict(s.path.clone()))?;
                if !equivalent {
                    return Err(Error::PayloadConflict(s.path.clone()));
                }
                manifest.unchanged += 1;
            }
        }
    }
    additions.sort_by(|a, b| a.0.cmp(&b.0));

    manifest.event_paths = batch.shards.iter().map(|s| s.path.clone()).collect();
    manifest.event_paths.sort();
    manifest.reservation_paths = reservations.into_keys().collect();
    manifest.completion_paths = completions.into_keys().collect();
    manifest.set_paths();
    if manifest.paths.len() > limits::MAX_PUBLISH_PATHS {
        return Err(Error::PathLimit);
    }
    Ok(Plan {
        manifest,
        additions,
    })
}

/// The publication commit's message: a subject naming who produced the batch, then the
/// machine-readable trailer (see the module docs of `publish`).
///
/// The subject names the producer repository, workflow, run id and attempt and job of the
/// batch's first shard (in path order) and, when the source holds several
/// runs or jobs, how many more; then the counts of shards, events and new files. Control
/// characters become spaces, so the subject stays one line whatever a workflow is called.
/// Nothing parses the subject: the trailer is what verify and people check against.
pub(super) fn commit_message(plan: &Plan, batch: &Batch) -> String {
    let run = |i: &'_ crate::identity::ShardIdentity| {
        (
            i.repository.clone(),
            i.workflow.clone(),
            i.run_id.clone(),
            i.run_attempt,
            i.job.clone(),
        )
    };
    let runs: HashSet<_> = batch.identities.iter().map(run).collect();
    // The first run is that of the first shard (shards are in path order).
    let who = match batch.identities.first().map(run) {
        None => "no producer".to_owned(),
        Some((repository, workflow, run_id, attempt, job)) => {
            let first = format!("{repository} {workflow} run {run_id}/{attempt} job {job}");
            match runs.len() {
                1 => first,
                n => format!("{first} and {} other job run(s)", n - 1),
            }
        }
    };
    let events: usize = batch.shards.iter().map(|s| s.events.len()).sum();
    let subject = format!(
        "ledger: {who}: {} shard(s), {events} event(s), {} new file(s)",
        plan.manifest.event_paths.len(),
        plan.additions.len(),
    )
    .chars()
    .map(|c| if c.is_control() { ' ' } else { c })
    .collect::<String>();
    format!(
        "{subject}\n\nLedger-Manifest-Sha256: {}\n",
        Digest::of(plan.manifest.to_json())
    )
}

/// The layout of the tree `snap` reads ([`layout::detect_from`]): two lookups, no listing.
///
/// # Errors
/// [`Error::Layout`] for a record this version does not know; [`Error::Store`] when the tree
/// cannot be read.
pub(super) fn detect_layout(snap: &Snapshot<'_>) -> Result<layout::Detected, Error> {
    let record = match snap.read(layout::RECORD_PATH, layout::MAX_RECORD_BYTES) {
        Ok(Some(bytes)) => layout::RecordRead::Bytes(bytes),
        Ok(None) => layout::RecordRead::Absent,
        Err(store::Error::TooLarge { .. }) => layout::RecordRead::TooLarge,
        Err(e) => return Err(e.into()),
    };
    let ledger_exists = record == layout::RecordRead::Absent && snap.is_dir(layout::LEDGER_ROOT)?;
    Ok(layout::detect_from(record, ledger_exists)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::test_support::*;

    #[test]
    fn a_different_set_under_a_published_run_is_refused_and_the_ref_stays() {
        let (_dir, store) = crate::tests::scratch_store();
        let options = Options::new(sig());
        let first = publish(&store, &day1("001"), &options).unwrap();
        // The same producer run with one event fewer: a different shard set, same identity.
        let files = read_source(&day1("001"), None).unwrap();
        let mut f = files[0].clone();
        let lines: Vec<&str> = f.content.lines().collect();
        f.content = format!("{}\n", lines[..lines.len() - 1].join("\n"));
        let batch = validate_batch(&[f], None).unwrap();
        let err = publish_batch(&store, &batch, &options).unwrap_err();
        assert!(
            matches!(
                err,
                Error::BindingConflict { .. } | Error::PayloadConflict(_)
            ),
            "{err}"
        );
        assert_eq!(store.tip("refs/heads/main").unwrap(), first.commit);
    }
}
