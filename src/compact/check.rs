//! Proving compactions, for `verify` and the pre-receive hook.
//!
//! [`check_revision`] checks every compacted month of a tree: its `manifest.json` against the
//! segment bytes (the sha256 of each segment and of each shard cut out of it, the replay digest,
//! the event count), and that nothing under the month is missing or extra. [`check_range`] is the
//! push rule: a shard file may be deleted only when the new tree's manifest lists it with the
//! sha256 of the deleted bytes and its segment reproduces them, and a replaced manifest must
//! extend the old one. Findings are [`Problem`]s; `verify` maps each [`ProblemKind`] to a rule.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::identity::Digest;
use crate::ledger::segment::{self, Manifest, Month};
use crate::ledger::shard;
use crate::store::{self, CommitId, Store};
use crate::view::{ManifestState, View};

/// The kind of a compaction finding; `verify` maps each to a stable rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProblemKind {
    /// `manifest.json` is not a valid canonical manifest.
    ManifestInvalid,
    /// A segment file's sha256, size or line count differs from its manifest entry.
    SegmentDigestMismatch,
    /// A shard entry's sha256, replay digest or event count differs from the bytes its line
    /// range holds.
    EntryMismatch,
    /// A segment the manifest lists is absent, or shorter than an entry's line range.
    CompactedMissing,
    /// A segment file no manifest lists, or a hot shard file the manifest also lists.
    CompactedExtra,
    /// A deleted shard whose bytes the new manifest's entry does not prove.
    DeletionUnproven,
    /// A replaced manifest that drops or changes what the old one proved.
    ManifestNotSuperset,
    /// A shard deleted with no manifest entry at all (an ordinary deletion).
    Deleted,
}

/// One compaction finding at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The path the problem is about.
    pub path: String,
    /// Which rule it breaks.
    pub kind: ProblemKind,
    /// What exactly is wrong.
    pub detail: String,
}

/// The result of checking compacted months.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    /// Every problem found, in path order.
    pub problems: Vec<Problem>,
    /// Compacted shard paths to verify as shards: for a revision, every path a valid manifest
    /// lists that is not hot; for a range, the listed paths new to the ledger (neither hot nor
    /// compacted before the range).
    pub shards: Vec<String>,
}

/// Checks every compacted month of a revision. `segment_files` are the tree's paths under
/// `ledger/v1/segments/` that [`segment::parse_path`] accepts; `is_hot` tells whether a shard
/// path is a file in the tree.
///
/// # Errors
/// [`store::Error`] when the tree cannot be read.
pub fn check_revision(
    view: &View<'_, '_>,
    segment_files: &[String],
    is_hot: impl Fn(&str) -> bool,
) -> Result<Checked, store::Error> {
    let mut months: BTreeMap<Month, BTreeSet<String>> = BTreeMap::new();
    for path in segment_files {
        if let Some(file) = segment::parse_path(path) {
            months.entry(file.month()).or_default().insert(path.clone());
        }
    }
    let mut out = Checked::default();
    for (month, files) in months {
        if let Some(m) = check_month(view, month, &files, None, &is_hot, &mut out.problems)? {
            out.shards.extend(
                m.shards
                    .iter()
                    .filter(|e| !is_hot(&e.path))
                    .map(|e| e.path.clone()),
            );
        }
    }
    Ok(out)
}

/// What a push range changed that concerns compaction (filled by `verify` from the diff).
#[derive(Clone, Debug, Default)]
pub struct RangeChanges {
    /// Deleted shard files.
    pub deleted_shards: Vec<String>,
    /// Replaced `manifest.json` files.
    pub modified_manifests: Vec<String>,
    /// Added files under `ledger/v1/segments/` that [`segment::parse_path`] accepts.
    pub added: Vec<String>,
}

/// Checks the compaction part of a push from `old` to the tree of `view`: each touched month's
/// new manifest and new segments, the superset rule for a replaced manifest, and that every
/// deleted shard is proven by an entry whose segment reproduces the deleted bytes.
///
/// # Errors
/// [`store::Error`] when a tree cannot be read.
pub fn check_range(
    store: &Store,
    old: Option<CommitId>,
    view: &View<'_, '_>,
    changes: &RangeChanges,
) -> Result<Checked, store::Error> {
    let old_snap = store.snapshot(old)?;
    let old_view = View::new(&old_snap);
    let new_snap = view.snapshot();
    let mut touched: BTreeMap<Month, BTreeSet<String>> = BTreeMap::new();
    for p in &changes.deleted_shards {
        if let Some(m) = Month::of_shard(p) {
            touched.entry(m).or_default();
        }
    }
    let modified: HashSet<&str> = changes
        .modified_manifests
        .iter()
        .map(String::as_str)
        .collect();
    for p in changes.modified_manifests.iter().chain(&changes.added) {
        if let Some(file) = segment::parse_path(p) {
            let files = touched.entry(file.month()).or_default();
            if changes.added.contains(p) {
                files.insert(p.clone());
            }
        }
    }
    let deleted: HashSet<&str> = changes.deleted_shards.iter().map(String::as_str).collect();
    let is_hot = |p: &str| new_snap.exists(p).unwrap_or(false);
    let mut out = Checked::default();
    for (month, files) in touched {
        let manifest_path = month.manifest_path();
        let old_state = old_view.manifest_state(month)?;
        let since = match (&old_state, modified.contains(manifest_path.as_str())) {
            (ManifestState::Valid(old), false) => Some(old.clone()),
            (ManifestState::Valid(old), true) => match view.manifest_state(month)? {
                ManifestState::Valid(new) => match new.extends(old) {
                    Ok(()) => Some(old.clone()),
                    Err(why) => {
                        out.problems.push(Problem {
                            path: manifest_path.clone(),
                            kind: ProblemKind::ManifestNotSuperset,
                            detail: format!("the replaced manifest is not a superset: {why}"),
                        });
                        None
                    }
                },
                // The new manifest's own finding is reported by check_month.
                _ => None,
            },
            (ManifestState::Invalid(_), true) => {
                out.problems.push(Problem {
                    path: manifest_path.clone(),
                    kind: ProblemKind::ManifestNotSuperset,
                    detail: "the replaced manifest was not valid, so nothing proves the replacement keeps what it listed".into(),
                });
                None
            }
            _ => None,
        };
        let new = check_month(
            view,
            month,
            &files,
            since.as_deref(),
            &is_hot,
            &mut out.problems,
        )?;
        let mut proofs = Vec::new();
        for path in changes
            .deleted_shards
            .iter()
            .filter(|p| Month::of_shard(p) == Some(month))
        {
            let entry = new.as_deref().and_then(|m| m.entry(path));
            let Some(entry) = entry else {
                proofs.push(Problem {
                    path: path.clone(),
                    kind: ProblemKind::Deleted,
                    detail: "an existing ledger file was deleted".into(),
                });
                continue;
            };
            let old_bytes = match old_snap.read(path, shard::MAX_BYTES as u64) {
                Ok(b) => b,
                Err(store::Error::TooLarge { .. }) => None,
                Err(e) => return Err(e),
            };
            // Proven: the entry names the deleted bytes, and its segment reproduces them.
            let same_bytes = old_bytes.is_some_and(|b| Digest::of(&b) == entry.sha256);
            let reproduced = view
                .cut(month, entry)?
                .is_some_and(|b| Digest::of(&b) == entry.sha256);
            if !same_bytes || !reproduced {
                proofs.push(Problem {
                    path: path.clone(),
                    kind: ProblemKind::DeletionUnproven,
                    detail: format!(
                        "deleted, but the entry in {manifest_path} does not prove its exact bytes"
                    ),
                });
            }
        }
        out.problems.extend(proofs);
        if let Some(new) = new {
            for e in &new.shards {
                let listed_before =
                    matches!(&old_state, ManifestState::Valid(m) if m.entry(&e.path).is_some());
                if !listed_before
                    && !deleted.contains(e.path.as_str())
                    && !old_snap.exists(&e.path)?
                {
                    out.shards.push(e.path.clone());
                }
            }
        }
    }
    Ok(out)
}

/// Checks one month: its manifest, the segments and entries not already proven by `since` (all
/// when `None`), segment files in `files` that the manifest does not list, and hot shards that
/// are also listed. Returns the manifest when it is valid.
fn check_month(
    view: &View<'_, '_>,
    month: Month,
    files: &BTreeSet<String>,
    since: Option<&Manifest>,
    is_hot: &impl Fn(&str) -> bool,
    problems: &mut Vec<Problem>,
) -> Result<Option<std::rc::Rc<Manifest>>, store::Error> {
    let mut problem = |path: &str, kind, detail: String| {
        problems.push(Problem {
            path: path.to_owned(),
            kind,
            detail,
        })
    };
    let manifest_path = month.manifest_path();
    let m = match view.manifest_state(month)? {
        ManifestState::Valid(m) => m,
        ManifestState::Absent => {
            for f in files {
                problem(
                    f,
                    ProblemKind::CompactedExtra,
                    format!("a segment file without {manifest_path}"),
                );
            }
            return Ok(None);
        }
        ManifestState::Invalid(e) => {
            let detail = match e {
                segment::Error::InvalidManifest { reason, .. } => reason,
                other => other.to_string(),
            };
            problem(&manifest_path, ProblemKind::ManifestInvalid, detail);
            return Ok(None);
        }
    };
    for f in files {
        if let Some(segment::SegmentFile::Segment(_, index)) = segment::parse_path(f)
            && index as usize > m.segments.len()
        {
            problem(
                f,
                ProblemKind::CompactedExtra,
                format!("a segment file that {manifest_path} does not list"),
            );
        }
    }
    let mut broken: HashSet<&str> = HashSet::new();
    for (i, s) in m.segments.iter().enumerate() {
        if since.is_some_and(|old| old.segments.get(i) == Some(s)) {
            continue;
        }
        let path = month.segment_path(&s.name);
        match view.segment(month, &s.name) {
            Ok(None) => {
                problem(
                    &path,
                    ProblemKind::CompactedMissing,
                    format!("listed by {manifest_path} but missing"),
                );
                broken.insert(&s.name);
            }
            Err(store::Error::TooLarge { max, .. }) => {
                problem(
                    &path,
                    ProblemKind::SegmentDigestMismatch,
                    format!("larger than the {max}-byte segment cap"),
                );
                broken.insert(&s.name);
            }
            Err(e) => return Err(e),
            Ok(Some(lines)) => {
                let sha = Digest::of(lines.bytes());
                if sha != s.sha256
                    || lines.bytes().len() as u64 != s.bytes
                    || lines.count() != s.lines as usize
                {
                    problem(
                        &path,
                        ProblemKind::SegmentDigestMismatch,
                        format!(
                            "sha256 {sha}, {} bytes, {} lines; {manifest_path} lists sha256 {}, {} bytes, {} lines",
                            lines.bytes().len(),
                            lines.count(),
                            s.sha256,
                            s.bytes,
                            s.lines
                        ),
                    );
                }
            }
        }
    }
    for e in &m.shards {
        if since.is_some_and(|old| old.entry(&e.path) == Some(e)) {
            continue;
        }
        if is_hot(&e.path) {
            problem(
                &e.path,
                ProblemKind::CompactedExtra,
                format!("a hot shard file that {manifest_path} also lists"),
            );
        }
        if broken.contains(e.segment.as_str()) {
            continue;
        }
        let range = format!(
            "{} lines {}..{}",
            e.segment,
            e.first_line,
            e.first_line + e.lines - 1
        );
        let Some(bytes) = view.cut(month, e)? else {
            problem(
                &e.path,
                ProblemKind::CompactedMissing,
                format!("{range} are not in the segment"),
            );
            continue;
        };
        let sha = Digest::of(&bytes);
        if sha != e.sha256 {
            problem(
                &e.path,
                ProblemKind::EntryMismatch,
                format!(
                    "{range} have sha256 {sha}; {manifest_path} lists {}",
                    e.sha256
                ),
            );
            continue;
        }
        // Lines that are not canonical events are reported by the shard checks.
        if let Some((events, replay)) = replay_of_lines(&bytes)
            && (events != e.events as usize || replay != e.replay_sha256)
        {
            problem(
                &e.path,
                ProblemKind::EntryMismatch,
                format!(
                    "{range} hold {events} events with replay digest {replay}; {manifest_path} lists {} events with {}",
                    e.events, e.replay_sha256
                ),
            );
        }
    }
    Ok(Some(m))
}

/// Event count and replay digest of shard bytes whose lines are canonical JSON, without the full
/// event validation (the shard checks of `verify` do that once): for a valid event, the parsed
/// canonical line is its record, and its replay JSON drops `recorded_at`, and `occurred_at`
/// unless `occurred_at_source` is `"source"` ([`crate::event::Event::replay_json`]). It is only
/// called on bytes whose sha256 the manifest lists; lines that are not canonical events are the
/// shard checks' finding. `None` when a line is not a JSON object or the bytes are not
/// newline-terminated lines.
fn replay_of_lines(bytes: &[u8]) -> Option<(usize, Digest)> {
    use crate::canonical::{self, Value};
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix('\n')?;
    let mut replay = String::with_capacity(text.len());
    let mut count = 0;
    for line in text.split('\n') {
        let Value::Object(mut record) = canonical::parse(line).ok()? else {
            return None;
        };
        record.remove("recorded_at");
        if record.get("occurred_at_source").and_then(Value::as_str) != Some("source") {
            record.remove("occurred_at");
        }
        replay.push_str(&canonical::to_canonical_unchecked(&Value::Object(record)));
        replay.push('\n');
        count += 1;
    }
    Some((count, Digest::of(replay)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{self, Value};
    use crate::compact::test_support::*;
    use std::collections::BTreeSet;

    use crate::compact::*;

    use crate::ledger::shard;

    use crate::publish;
    use crate::verify::{self};
    use crate::view::View;

    #[test]
    fn readers_refuse_damaged_segments() {
        let b = base();
        let edits = mutate(&b, "tamper_segment_byte");
        let t = b
            .store
            .write_commit_with(Some(b.after), &edits.0, &edits.1, true, "t\n", &sig())
            .unwrap();
        let snap = b.store.snapshot(Some(t)).unwrap();
        let view = View::new(&snap);
        let err = crate::log::stream(&view, &crate::log::Filter::default(), &mut |_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap_err();
        assert!(err.to_string().contains("do not have the sha256"), "{err}");
        drop(snap);
        b.store.update_ref(MAIN, Some(b.after), t, "t").unwrap();
        let err =
            publish::publish(&b.store, &job("001"), &publish::Options::new(sig())).unwrap_err();
        assert!(matches!(err, publish::Error::Compacted(_)), "{err}");
        // Compaction reads manifests, not old segments: with nothing hot it has nothing to do.
        assert_eq!(
            compact(&b.store, &options()).unwrap().status,
            Status::Unchanged
        );
    }

    /// Every broken compaction of testdata/compact/cases.json is reported with exactly its rules,
    /// as a revision, as a forged compaction pushed on the ledger before it, and pushed on top of
    /// a good compaction.
    #[test]
    fn broken_compactions_are_reported_by_rule() {
        let b = base();
        let text =
            std::fs::read_to_string(manifest_dir().join("testdata/compact/cases.json")).unwrap();
        let doc = canonical::parse(&text).unwrap();
        let cases = doc.get("cases").and_then(Value::as_array).unwrap();
        let mut failures = Vec::new();
        for case in cases {
            let id = case.get("id").and_then(Value::as_str).unwrap();
            let (put, remove) = mutate(&b, case.get("mutation").and_then(Value::as_str).unwrap());
            let t = b
                .store
                .write_commit_with(Some(b.after), &put, &remove, true, id, &sig())
                .unwrap();
            let want = |key: &str| -> BTreeSet<&str> {
                case.get(key)
                    .and_then(Value::as_array)
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect()
            };
            let checks = [
                ("expect", verify::verify_revision(&b.store, t).unwrap()),
                (
                    "expect_range",
                    verify::verify_range(&b.store, Some(b.before), t).unwrap(),
                ),
                (
                    "expect_push",
                    verify::verify_range(&b.store, Some(b.after), t).unwrap(),
                ),
            ];
            for (key, report) in checks {
                if rules(&report) != want(key) {
                    failures.push(format!(
                        "{id} {key}: want {:?}, got {:#?}",
                        want(key),
                        report.findings
                    ));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn replay_of_lines_matches_the_event_replay_digest() {
        let files = publish::read_source(&job("002"), None).unwrap();
        for f in files {
            let events = shard::parse_content(&f.content, &f.path).unwrap();
            assert_eq!(
                replay_of_lines(f.content.as_bytes()),
                Some((events.len(), crate::event::replay_digest(&events)))
            );
        }
        assert_eq!(replay_of_lines(b"[1]\n"), None);
        assert_eq!(replay_of_lines(b"{\"a\":1}"), None);
    }
}
