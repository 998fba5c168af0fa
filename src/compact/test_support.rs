//! Helpers shared by compaction's unit tests (a store with the day1 corpus published, and
//! the verify findings of a revision); the store and signature also serve the model test of
//! publish and compaction (`tests::model_ledger`).

#![cfg(test)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::compact::*;
use crate::identity::Digest;
use crate::ledger::segment::{self, Manifest, Month};
use crate::publish;
use crate::store::{CommitId, Signature, Store};
use crate::verify::Report;
use crate::view::View;

pub(crate) const MAIN: &str = "refs/heads/main";

/// 2026-05-01T00:00:00Z: with a retention of one day, March 2026 is eligible.
pub(super) const MAY_FIRST: i64 = 1_777_593_600;

pub(crate) fn sig() -> Signature {
    Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_773_100_800,
    }
}

pub(super) fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(super) use crate::tests::day1_job as job;

pub(crate) fn new_store(dir: &Path) -> Store {
    Store::open_or_init_bare(&dir.join("state.git"), MAIN).unwrap()
}

pub(super) fn publish_job(store: &Store, prefix: &str) -> publish::Publication {
    publish::publish(store, &job(prefix), &publish::Options::new(sig())).unwrap()
}

/// Small segments, so that two day1 jobs fill several.
pub(super) fn options() -> Options {
    let mut o = Options::new(sig(), MAY_FIRST);
    o.retention_days = 1;
    o.segment_caps = segment::Caps {
        bytes: 256 * 1024,
        lines: segment::MAX_SEGMENT_LINES,
    };
    o
}

/// The canonical event lines of a revision, as `log --json` prints them.
pub(super) fn log_lines(store: &Store, commit: Option<CommitId>) -> Vec<String> {
    let snap = store.snapshot(commit).unwrap();
    let view = View::new(&snap);
    let mut lines = Vec::new();
    crate::log::stream(&view, &crate::log::Filter::default(), &mut |e| {
        lines.push(e.json.to_owned());
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    lines
}

/// The same lines straight from the jobs' shard files: every shard in path order.
pub(super) fn expected_lines(jobs: &[&str]) -> Vec<String> {
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for j in jobs {
        let root = job(j);
        for e in walkdir::WalkDir::new(&root) {
            let e = e.unwrap();
            if e.file_type().is_file() {
                let rel = e.path().strip_prefix(&root).unwrap().to_string_lossy();
                files.push((rel.into_owned(), e.path().to_owned()));
            }
        }
    }
    files.sort();
    files
        .iter()
        .flat_map(|(_, p)| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

pub(super) fn rules(report: &Report) -> BTreeSet<&'static str> {
    report.findings.iter().map(|f| f.rule.code()).collect()
}

pub(super) fn assert_clean(report: &Report) {
    assert!(report.is_clean(), "{:#?}", report.findings);
}

/// Day1 jobs 001 and 002 published (P) and compacted (C).
pub(super) struct Base {
    pub(super) _dir: tempfile::TempDir,
    pub(super) store: Store,
    pub(super) before: CommitId,
    pub(super) after: CommitId,
}

pub(super) fn base() -> Base {
    let dir = tempfile::tempdir().unwrap();
    let store = new_store(dir.path());
    publish_job(&store, "001");
    let before = publish_job(&store, "002").commit.unwrap();
    let c = compact(&store, &options()).unwrap();
    assert_eq!(c.status, Status::Created);
    Base {
        _dir: dir,
        after: c.tip.unwrap(),
        store,
        before,
    }
}

/// Edits on top of the compaction commit: files to put and paths to remove.
pub(super) type Edits = (Vec<(String, Vec<u8>)>, Vec<String>);

pub(super) fn mutate(b: &Base, name: &str) -> Edits {
    let snap = b.store.snapshot(Some(b.after)).unwrap();
    let view = View::new(&snap);
    let march = Month::of_date("2026-03").unwrap();
    let m = view.manifest(march).unwrap().unwrap();
    let segment = |i: usize| {
        let path = march.segment_path(&m.segments[i].name);
        let bytes = snap.read(&path, u64::MAX).unwrap().unwrap();
        (path, bytes)
    };
    let with_manifest = |edit: &dyn Fn(&mut Manifest)| {
        let mut forged = (*m).clone();
        edit(&mut forged);
        (march.manifest_path(), forged.to_text().into_bytes())
    };
    let last = m.segments.len() - 1;
    match name {
        "tamper_segment_byte" => {
            let (path, bytes) = segment(0);
            let text = String::from_utf8(bytes).unwrap();
            let text = text.replacen("\"schema_version\":1", "\"schema_version\":2", 1);
            (vec![(path, text.into_bytes())], vec![])
        }
        "forge_entry_sha256" => (
            vec![with_manifest(&|f| {
                f.shards[0].sha256 = Digest::of("forged")
            })],
            vec![],
        ),
        "forge_entry_replay" => (
            vec![with_manifest(&|f| {
                f.shards[1].replay_sha256 = Digest::of("forged")
            })],
            vec![],
        ),
        "remove_last_segment" => (vec![], vec![segment(last).0]),
        "add_unlisted_segment" => (
            vec![(
                march.segment_path(&segment::segment_name(m.segments.len() as u32 + 1)),
                segment(0).1,
            )],
            vec![],
        ),
        "restore_a_compacted_shard" => {
            let path = m.shards[0].path.clone();
            let bytes = view.read(&path, u64::MAX).unwrap().unwrap();
            (vec![(path, bytes)], vec![])
        }
        "manifest_not_canonical" => {
            let text = m
                .to_text()
                .replacen("{\"generation\":", "{ \"generation\":", 1);
            (vec![(march.manifest_path(), text.into_bytes())], vec![])
        }
        "manifest_drops_last_segment" => (
            vec![with_manifest(&|f| {
                let dropped = f.segments.pop().unwrap().name;
                f.shards.retain(|e| e.segment != dropped);
                f.generation += 1;
            })],
            vec![],
        ),
        "stray_file" => (
            vec![(
                "ledger/v1/segments/2026/03/notes.txt".into(),
                b"hello\n".to_vec(),
            )],
            vec![],
        ),
        other => panic!("unknown mutation {other} in testdata/compact/cases.json"),
    }
}
