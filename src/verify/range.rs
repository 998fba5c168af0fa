//! Verification of a push range (OLD to NEW): what the range adds, checked against what is
//! already published.

use super::*;

/// Verifies a push from `old` (`None` for a new ref) to `new` with the default [`Options`]
/// (strict privacy).
pub fn verify_range(store: &Store, old: Option<CommitId>, new: CommitId) -> Result<Report, Error> {
    verify_range_with(store, old, new, &Options::default())
}

/// Verifies a push from `old` (`None` for a new ref) to `new`.
pub fn verify_range_with(
    store: &Store,
    old: Option<CommitId>,
    new: CommitId,
    options: &Options,
) -> Result<Report, Error> {
    verify_range_observed(store, old, new, options, &crate::progress::Silent)
}

/// [`verify_range_with`], reporting to `progress` one `"shards"` stage whose total is the
/// shard files of every set the push touches, advanced as each set is checked, with its events.
///
/// # Errors
/// As [`verify_range_with`].
pub fn verify_range_observed(
    store: &Store,
    old: Option<CommitId>,
    new: CommitId,
    options: &Options,
    progress: &dyn crate::progress::Progress,
) -> Result<Report, Error> {
    let snap = store.snapshot(Some(new))?;
    let mut ctx = Ctx::new(&snap, options.privacy)?;
    if let Some(old) = old
        && !store.is_ancestor(old, new)?
    {
        ctx.finding(
            "",
            Rule::NotDescendant,
            format!("{} does not descend from {}", new.to_hex(), old.to_hex()),
        );
        return Ok(ctx.finish());
    }
    let mut touched: BTreeSet<String> = BTreeSet::new();
    let mut added_bindings: Vec<(String, Kind)> = Vec::new();
    let mut compaction = crate::compact::RangeChanges::default();
    // Entry modes: the roots as they are at NEW, and every entry the push adds or changes.
    let (ledger_roots, _) = check_root(&snap, LEDGER)?;
    let (finality_roots, _) = check_root(&snap, FINALITY)?;
    ctx.report.findings.extend(ledger_roots);
    ctx.report.findings.extend(finality_roots);
    ctx.report.findings.extend(check_upper_trees(&snap)?);
    let store::TreeDiff {
        changes,
        irregular,
        malformed,
    } = store.diff_with_modes(old, new, LEDGER)?;
    let store::TreeDiff {
        changes: finality_changes,
        irregular: irregular_finality,
        malformed: malformed_finality,
    } = store.diff_with_modes(old, new, FINALITY)?;
    for (path, mode) in irregular.iter().chain(&irregular_finality) {
        ctx.report.findings.push(entry_mode_finding(path, *mode));
    }
    for (path, defect) in malformed.into_iter().chain(malformed_finality) {
        ctx.report.findings.push(tree_defect_finding(&path, defect));
    }
    let added = changes
        .iter()
        .chain(&finality_changes)
        .filter_map(|c| match c {
            Change::Added(p) => Some(p.as_str()),
            _ => None,
        })
        .chain(
            irregular
                .iter()
                .chain(&irregular_finality)
                .map(|(p, _)| p.as_str()),
        );
    ctx.report.warnings = added_collisions(&store.snapshot(old)?, &snap, added)?;
    for change in changes {
        match change {
            Change::Modified(p) if crate::ledger::segment::is_manifest_path(&p) => {
                compaction.modified_manifests.push(p)
            }
            Change::Deleted(p) if shard::parse_path(&p).is_some() => {
                compaction.deleted_shards.push(p)
            }
            Change::Modified(p) => {
                ctx.finding(&p, Rule::Modified, "an existing ledger file was changed")
            }
            Change::Deleted(p) => {
                ctx.finding(&p, Rule::Deleted, "an existing ledger file was deleted")
            }
            Change::Added(p) => {
                if shard::parse_path(&p).is_some() {
                    touched.insert(set_key(&p));
                } else if p == layout::RECORD_PATH {
                    // A record added to a ledger that already has content changes its layout.
                    if ctx.layout == Layout::Fanout && store.snapshot(old)?.is_dir(LEDGER)? {
                        ctx.finding(
                            &p,
                            Rule::LayoutMixed,
                            "a layout record added to an existing reference-layout ledger",
                        );
                    }
                } else if let Some((kind, _, path_layout)) = binding::classify(&p) {
                    if path_layout == ctx.layout {
                        added_bindings.push((p, kind));
                    } else {
                        ctx.mixed(&p, path_layout);
                    }
                } else if crate::ledger::segment::parse_path(&p).is_some() {
                    compaction.added.push(p);
                } else {
                    ctx.finding(&p, Rule::UnknownPath, "not a shard or binding path");
                }
            }
        }
    }
    let proof = crate::compact::check_range(store, old, &ctx.view, &compaction)?;
    report_compaction(&mut ctx, proof.problems);
    touched.extend(proof.shards.iter().map(|p| set_key(p)));
    let added: HashSet<String> = added_bindings.iter().map(|(p, _)| p.clone()).collect();
    // Every touched set's members are listed before any is checked, so that the stage's total
    // is known from the start.
    let mut touched_sets = Vec::with_capacity(touched.len());
    for key in &touched {
        let dir = key.rsplit_once('/').map_or("", |(d, _)| d);
        let members: Vec<String> = ctx
            .view
            .shard_paths_unchecked(dir)?
            .into_iter()
            .filter(|p| shard::parse_path(p).is_some() && set_key(p) == *key)
            .collect();
        touched_sets.push(members);
    }
    progress.begin(
        "shards",
        Some(touched_sets.iter().map(|m| m.len() as u64).sum()),
    );
    let mut incoming = Vec::new();
    for members in &touched_sets {
        let before = (ctx.report.shards, ctx.report.events);
        incoming.extend(ctx.verify_set(members)?);
        progress.advance(
            (ctx.report.shards - before.0) as u64,
            (ctx.report.events - before.1) as u64,
        );
    }
    ctx.settle_events();
    // An added event whose binding was already there was published before.
    for id in &incoming {
        let path = Kind::Event.path(ctx.layout, id);
        let bound = match snap.exists(&path) {
            Err(store::Error::NotAFile { .. }) => false,
            other => other?,
        };
        if !added.contains(&path) && bound {
            let shard = ctx
                .events
                .position(&id.bytes())
                .map(|i| ctx.shard_paths[ctx.events.seen[i].shard as usize].clone());
            ctx.finding(
                &shard.unwrap_or(path),
                Rule::DuplicateEvent,
                format!("event {id} was already published"),
            );
        }
    }
    for (path, kind) in added_bindings {
        if !ctx.is_claimed(&path) {
            let (rule, detail) = orphan_rule(kind);
            ctx.finding(&path, rule, detail);
        }
    }
    let mut reads = 0usize;
    let starts: Vec<Key> = incoming.iter().map(Digest::bytes).collect();
    ctx.find_cycles(Some(&starts), |ctx, key| {
        reads += 1;
        if reads > 262_144 {
            return Ok(None);
        }
        let id = Digest::from_bytes(key);
        let path = Kind::Event.path(ctx.layout, &id);
        Ok(ctx
            .read(&path, binding::MAX_BYTES)?
            .and_then(|t| binding::parse_event(&t, &id))
            .map(|(_, parent)| parent.as_ref().map(Digest::bytes)))
    })?;
    let finality = crate::finality::verify_range(store, old, new)?;
    ctx.report.findings.extend(finality);
    // Ended only here: the binding and cycle checks after the shards are part of the same wait.
    progress.end();
    Ok(ctx.finish())
}
