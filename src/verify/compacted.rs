//! Compacted months: each manifest checked against its segments, and the compacted shards
//! added to the sets to verify (read through the view like hot ones).

use super::*;

/// Checks the compacted months of a revision and adds their compacted shards to
/// `sets`, so that they are verified like hot ones (read through the view).
pub(super) fn check_compacted(
    ctx: &mut Ctx<'_, '_>,
    sets: &mut BTreeMap<String, Vec<String>>,
    segment_files: &[String],
) -> Result<(), Error> {
    if segment_files.is_empty() {
        return Ok(());
    }
    let checked = {
        let hot = |p: &str| {
            sets.get(&set_key(p))
                .is_some_and(|m| m.iter().any(|x| x == p))
        };
        crate::compact::check_revision(&ctx.view, segment_files, hot)?
    };
    report_compaction(ctx, checked.problems);
    for path in checked.shards {
        let members = sets.entry(set_key(&path)).or_default();
        members.push(path);
        members.sort_unstable();
    }
    Ok(())
}

/// Reports compaction problems under their rules.
pub(super) fn report_compaction(ctx: &mut Ctx<'_, '_>, problems: Vec<crate::compact::Problem>) {
    use crate::compact::ProblemKind as K;
    for p in problems {
        let rule = match p.kind {
            K::ManifestInvalid => Rule::ManifestInvalid,
            K::SegmentDigestMismatch => Rule::SegmentDigestMismatch,
            K::EntryMismatch => Rule::ManifestEntryMismatch,
            K::CompactedMissing => Rule::CompactedMissing,
            K::CompactedExtra => Rule::CompactedExtra,
            K::DeletionUnproven => Rule::DeletionUnproven,
            K::ManifestNotSuperset => Rule::ManifestNotSuperset,
            K::Deleted => Rule::Deleted,
        };
        ctx.finding(&p.path, rule, p.detail);
    }
}
