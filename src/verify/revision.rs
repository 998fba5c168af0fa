//! Verification of a whole revision.

use super::*;

/// Verifies the whole ledger at `commit` with the default [`Options`] (strict privacy).
pub fn verify_revision(store: &Store, commit: CommitId) -> Result<Report, Error> {
    verify_revision_with(store, commit, &Options::default())
}

/// Verifies the whole ledger at `commit`.
pub fn verify_revision_with(
    store: &Store,
    commit: CommitId,
    options: &Options,
) -> Result<Report, Error> {
    verify_revision_observed(store, commit, options, &crate::progress::Silent)
}

/// [`verify_revision_with`], reporting to `progress` one `"shards"` stage whose total is every
/// shard file to check (hot and compacted), advanced as each batch of shards is checked, with
/// its events.
///
/// # Errors
/// As [`verify_revision_with`].
pub fn verify_revision_observed(
    store: &Store,
    commit: CommitId,
    options: &Options,
    progress: &dyn crate::progress::Progress,
) -> Result<Report, Error> {
    let snap = store.snapshot(Some(commit))?;
    let mut ctx = Ctx::new(&snap, options.privacy)?;
    let mut sets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Bindings as (kind, digest, content id): 53 bytes each instead of a path string, so that a
    // ledger of a million events is not held as a million paths; the path is rebuilt where it
    // is reported.
    let mut bindings: Vec<(Kind, Key, [u8; 20])> = Vec::new();
    let mut segment_files: Vec<String> = Vec::new();
    ctx.report.findings.extend(check_upper_trees(&snap)?);
    let (findings, walk_ledger) = check_root(&snap, LEDGER)?;
    ctx.report.findings.extend(findings);
    let mut malformed: Vec<Finding> = Vec::new();
    let mut walk = |visit: &mut dyn FnMut(&store::Walked<'_>)| {
        if walk_ledger {
            snap.for_each_entry_checked(LEDGER, visit, |path, defect| {
                malformed.push(tree_defect_finding(path, defect));
            })
        } else {
            Ok(())
        }
    };
    let mut siblings = Siblings::default();
    walk(&mut |entry| {
        siblings.visit(entry);
        if entry.mode.is_dir() {
            return;
        }
        if !entry.mode.is_regular_file() {
            ctx.report
                .findings
                .push(entry_mode_finding(entry.path, entry.mode));
        }
        // A submodule has no bytes: its path is reported above and holds no shard or binding.
        let Some(id) = entry.blob else {
            return;
        };
        let path = entry.path;
        if shard::parse_path(path).is_some() {
            sets.entry(set_key(path)).or_default().push(path.to_owned());
            ctx.shard_ids
                .entry(path.to_owned())
                .and_modify(|seen| *seen = None)
                .or_insert(Some(id));
        } else if path == layout::RECORD_PATH {
            // Checked by `Ctx::new`.
        } else if let Some((kind, digest, path_layout)) = binding::classify(path) {
            if path_layout == ctx.layout {
                bindings.push((kind, digest.bytes(), id.bytes()));
            } else {
                ctx.mixed(path, path_layout);
            }
        } else if crate::ledger::segment::parse_path(path).is_some() {
            segment_files.push(path.to_owned());
        } else {
            ctx.finding(path, Rule::UnknownPath, "not a shard or binding path");
        }
    })?;
    ctx.report.findings.append(&mut malformed);
    bindings.sort_unstable_by_key(|b| (b.0, b.1));
    bindings.shrink_to_fit();
    ctx.index = Some(BindingIndex {
        claimed: vec![false; bindings.len()],
        entries: bindings,
    });
    // The walk's order is the trees' and is not sorted: parts are compared in path order.
    for members in sets.values_mut() {
        members.sort_unstable();
    }
    segment_files.sort_unstable();
    check_compacted(&mut ctx, &mut sets, &segment_files)?;
    let all: Vec<&Vec<String>> = sets.values().collect();
    progress.begin("shards", Some(all.iter().map(|m| m.len() as u64).sum()));
    check_sets_pipelined(&mut ctx, &all, progress)?;
    ctx.claim_reserved_sets(&sets)?;
    let index = ctx.index.take().expect("set above");
    for ((kind, key, _), claimed) in index.entries.iter().zip(&index.claimed) {
        if !claimed {
            let (rule, detail) = orphan_rule(*kind);
            let path = kind.path(ctx.layout, &Digest::from_bytes(key));
            ctx.finding(&path, rule, detail);
        }
    }
    drop(index);
    ctx.settle_events();
    // Parents outside the ledger end a walk.
    ctx.find_cycles(None, |_, _| Ok(None))?;
    let (findings, walk_finality) = check_root(&snap, FINALITY)?;
    ctx.report.findings.extend(findings);
    if walk_finality {
        // One walk of the finality tree serves the entry checks here and the records'.
        let mut malformed = Vec::new();
        let mut modes = Vec::new();
        let finality = crate::finality::verify_observed(
            &snap,
            &mut |entry| {
                siblings.visit(entry);
                if !entry.mode.is_dir() && !entry.mode.is_regular_file() {
                    modes.push(entry_mode_finding(entry.path, entry.mode));
                }
            },
            &mut |path, defect| malformed.push(tree_defect_finding(path, defect)),
        )?;
        ctx.report.findings.append(&mut modes);
        ctx.report.findings.append(&mut malformed);
        ctx.report.findings.extend(finality);
    }
    ctx.report.warnings = siblings.finish();
    // Ended only here: the checks after the shards (orphans, cycles, finality) are part of the
    // same wait.
    progress.end();
    Ok(ctx.finish())
}
