//! Planning a compaction against one tip: which months are eligible (every instant of the month
//! lies before `now - retention_days`), which of their hot shards fold (exactly reproducible from
//! their lines), which are refused and stay hot (with the reason), and the segments and manifest
//! each folded month gets, cut back out and compared with the original bytes before anything is
//! written. At most [`Options::max_commit_bytes`](super::Options::max_commit_bytes) of shard bytes
//! are planned per commit.

use std::collections::BTreeMap;

use super::*;
use crate::identity::Digest;
use crate::ledger::segment::{self, Foldable, Month};
use crate::ledger::shard;
use crate::store::{self, Snapshot};
use crate::view::View;

/// What one commit does to one month.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonthFold {
    /// The month folded.
    pub month: Month,
    /// The manifest's generation after the fold (unchanged when only duplicates were removed).
    pub generation: u32,
    /// Hot shards folded into new segments.
    pub shards: usize,
    /// Events in them.
    pub events: u64,
    /// Their bytes.
    pub bytes: u64,
    /// New segment files (full paths).
    pub segments: Vec<String>,
    /// Hot shard files removed (the folded ones, plus hot copies the manifest already proved).
    pub removed: Vec<String>,
    /// sha256 of the new manifest file.
    pub manifest_sha256: Option<Digest>,
}

/// A hot shard that compaction leaves hot, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The shard left hot.
    pub path: String,
    /// Why it cannot be folded.
    pub reason: String,
}

/// Everything one compaction commit would write, computed against one snapshot.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The months folded, in order.
    pub months: Vec<MonthFold>,
    /// The shards left hot, with their reasons.
    pub refused: Vec<Refusal>,
    /// New files: segments and manifests.
    pub files: Vec<(String, Vec<u8>)>,
    /// Hot shard files removed.
    pub removals: Vec<String>,
    /// Eligible shards left for a further commit (over [`Options::max_commit_bytes`]).
    pub remaining: usize,
}

impl Plan {
    /// Whether the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.removals.is_empty()
    }
}

/// Plans one compaction commit on `snap` (see the module docs). Reads only the hot shards of
/// eligible months and their manifests.
///
/// # Errors
/// [`Error::View`] for an existing manifest that is not valid, [`Error::StraySegment`],
/// [`Error::Segment`], [`Error::Store`].
pub fn plan(snap: &Snapshot<'_>, options: &Options) -> Result<Plan, Error> {
    plan_observed(snap, options, &crate::progress::Silent)
}

/// [`plan`], reporting to `progress` one `"shards"` stage whose total is the hot shards of the
/// eligible months, advanced as each is read (or left for a further commit), with the events
/// of those that fold.
///
/// # Errors
/// As [`plan`].
pub fn plan_observed(
    snap: &Snapshot<'_>,
    options: &Options,
    progress: &dyn crate::progress::Progress,
) -> Result<Plan, Error> {
    let view = View::new(snap);
    let mut by_month: BTreeMap<Month, Vec<String>> = BTreeMap::new();
    for path in snap.list_files_for_write(shard::EVENTS_ROOT)? {
        if let Some(month) = Month::of_shard(&path)
            && options.is_eligible(month)
        {
            by_month.entry(month).or_default().push(path);
        }
    }
    progress.begin(
        "shards",
        Some(by_month.values().map(|p| p.len() as u64).sum()),
    );
    let mut plan = Plan::default();
    let mut budget = options.max_commit_bytes;
    let mut folded_any = false;
    for (month, paths) in by_month {
        let existing = view.manifest(month)?;
        let mut foldable: Vec<Foldable> = Vec::new();
        let mut proven: Vec<String> = Vec::new();
        for path in paths {
            let folded_before = foldable.len();
            'shard: {
                if folded_any && budget == 0 {
                    // Left for the next commit; not read now.
                    plan.remaining += 1;
                    break 'shard;
                }
                let refuse = |reason: String| Refusal {
                    path: path.clone(),
                    reason,
                };
                let bytes = match snap.read(&path, shard::MAX_BYTES as u64) {
                    Ok(Some(b)) => b,
                    Ok(None) => break 'shard,
                    Err(store::Error::TooLarge { max, .. }) => {
                        plan.refused
                            .push(refuse(format!("it is larger than {max} bytes")));
                        break 'shard;
                    }
                    Err(e) => return Err(e.into()),
                };
                if let Some(entry) = existing.as_deref().and_then(|m| m.entry(&path)) {
                    if Digest::of(&bytes) == entry.sha256 {
                        proven.push(path);
                    } else {
                        plan.refused.push(refuse(
                            "the month's manifest already lists other bytes under this path".into(),
                        ));
                    }
                    break 'shard;
                }
                let Ok(text) = String::from_utf8(bytes) else {
                    plan.refused.push(refuse("it is not UTF-8".into()));
                    break 'shard;
                };
                let size = text.len() as u64;
                if folded_any && size > budget {
                    plan.remaining += 1;
                    break 'shard;
                }
                match Foldable::new(&path, text) {
                    Ok(f) => {
                        budget = budget.saturating_sub(size);
                        folded_any = true;
                        foldable.push(f);
                    }
                    Err(segment::Error::NotFoldable { reason, .. }) => {
                        plan.refused.push(refuse(reason));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            // Every eligible shard is a unit, whatever became of it; its events count once
            // it folds.
            let events = foldable[folded_before..]
                .iter()
                .map(|f| u64::from(f.events))
                .sum();
            progress.advance(1, events);
        }
        if foldable.is_empty() && proven.is_empty() {
            continue;
        }
        let mut fold = MonthFold {
            month,
            generation: existing.as_ref().map_or(0, |m| m.generation),
            shards: foldable.len(),
            events: foldable.iter().map(|f| u64::from(f.events)).sum(),
            bytes: foldable.iter().map(|f| f.content.len() as u64).sum(),
            segments: Vec::new(),
            removed: Vec::new(),
            manifest_sha256: None,
        };
        if !foldable.is_empty() {
            let segment::Folded { manifest, files } =
                segment::fold(month, existing.as_deref(), &foldable, options.segment_caps)?;
            for (path, _) in &files {
                if snap.exists(path)? {
                    return Err(Error::StraySegment { path: path.clone() });
                }
            }
            let text = manifest.to_text();
            if text.len() as u64 > segment::MAX_MANIFEST_BYTES {
                return Err(segment::Error::InvalidManifest {
                    path: month.manifest_path(),
                    reason: format!(
                        "it would be larger than the {}-byte cap readers accept",
                        segment::MAX_MANIFEST_BYTES
                    ),
                }
                .into());
            }
            fold.generation = manifest.generation;
            fold.manifest_sha256 = Some(Digest::of(&text));
            fold.segments = files.iter().map(|(p, _)| p.clone()).collect();
            plan.files.extend(files);
            plan.files.push((month.manifest_path(), text.into_bytes()));
        }
        fold.removed = foldable.into_iter().map(|f| f.path).chain(proven).collect();
        fold.removed.sort();
        plan.removals.extend(fold.removed.iter().cloned());
        plan.months.push(fold);
    }
    progress.end();
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::compact::test_support::*;

    use crate::ledger::segment::Month;

    #[test]
    fn eligibility_is_whole_months_before_the_window() {
        let march = Month::of_date("2026-03").unwrap();
        let april_first = march.next().start_epoch_seconds();
        let mut o = Options::new(sig(), april_first);
        o.retention_days = 0;
        assert!(o.is_eligible(march), "ended exactly at now");
        assert!(!o.is_eligible(march.next()));
        o.retention_days = 1;
        assert!(!o.is_eligible(march), "the window reaches into March");
        o.now_seconds += 86_400;
        assert!(o.is_eligible(march));
        let plan = {
            let dir = tempfile::tempdir().unwrap();
            let store = new_store(dir.path());
            publish_job(&store, "008");
            let tip = store.tip(MAIN).unwrap();
            let snap = store.snapshot(tip).unwrap();
            let mut early = options();
            early.now_seconds = april_first;
            plan(&snap, &early).unwrap()
        };
        assert!(
            plan.is_empty(),
            "March is inside a one-day window on April 1"
        );
    }
}
