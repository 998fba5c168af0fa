//! The views over `testdata/`: the small curated event set against its expected documents,
//! the day1 corpus published and folded (snapshots), and the properties: the same events give
//! the same bytes in any order and grouping, compacted or not, and an increment equals a full
//! refold.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;
use crate::canonical;
use crate::publish;
use crate::store::Signature;

/// An event record with the fields the views read (not a valid ledger event: the views are
/// folded from records directly here). Subject `example-org/widgets#7`.
pub(crate) fn event(
    event_type: &str,
    status: &str,
    operation: &str,
    attempt: &str,
    at: &str,
    seq: u64,
) -> serde_json::Value {
    serde_json::json!({
        "event_id": format!("{operation}-{attempt}-{seq}-{event_type}-{status}-{at}"),
        "event_type": event_type,
        "operation_id": operation,
        "attempt_id": attempt,
        "parent_event_id": null,
        "occurred_at": at,
        "phase_seq": seq,
        "action": {"name": event_type, "status": status, "mutation": false, "retryable": false},
        "producer": {"repository": "example-org/widgets", "workflow": "review.yml",
            "job": "review", "run_id": "42", "run_attempt": 1, "component": "test"},
        "subject": {"repository": "example-org/widgets", "kind": "issue", "number": 7},
    })
}

/// `v` with member `key` set to `value`.
pub(crate) fn with(
    mut v: serde_json::Value,
    key: &str,
    value: serde_json::Value,
) -> serde_json::Value {
    v[key] = value;
    v
}

/// A view folded from records, finished (as written).
pub(crate) fn fold<'a, P: Projection>(
    events: impl IntoIterator<Item = &'a serde_json::Value>,
    entries: u32,
) -> Document<P> {
    let mut doc = Document::<P>::new(FilterDoc::default(), Limits { entries });
    for e in events {
        doc.add(&canonical::parse(&e.to_string()).unwrap());
    }
    doc.to_json();
    doc
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/project")
}

/// The document bytes of `kind` folded from canonical event lines, at revision `revision`.
fn render_lines(kind: Kind, lines: &[&str], entries: u32, revision: &str) -> String {
    fn go<P: Projection>(lines: &[&str], entries: u32, revision: &str) -> String {
        let mut doc = Document::<P>::new(FilterDoc::default(), Limits { entries });
        for l in lines {
            doc.add(&canonical::parse(l).unwrap());
        }
        doc.revision = revision.to_owned();
        doc.to_json()
    }
    match kind {
        Kind::Status => go::<status::Status>(lines, entries, revision),
        Kind::Commands => go::<commands::Commands>(lines, entries, revision),
        Kind::ReviewHistory => go::<review_history::ReviewHistory>(lines, entries, revision),
        Kind::Notifications => go::<notifications::Notifications>(lines, entries, revision),
        Kind::Evidence => go::<evidence::Evidence>(lines, entries, revision),
    }
}

/// `testdata/project/small/events.jsonl` (real day1 events: two commands, a notification
/// that was retried, a reviewed subject with a retry, a review that cites its report) gives
/// `expected/<view>.json`, in file
/// order and reversed. `ACTION_LEDGER_BLESS=1` rewrites the expected files.
#[test]
fn the_small_event_set_gives_the_expected_documents() {
    let dir = testdata().join("small");
    let text = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let reversed: Vec<&str> = lines.iter().rev().copied().collect();
    for kind in Kind::ALL {
        let got = render_lines(kind, &lines, 3, "small");
        assert_eq!(got, render_lines(kind, &reversed, 3, "small"), "{kind:?}");
        let file = dir.join("expected").join(format!("{}.json", kind.name()));
        if std::env::var_os("ACTION_LEDGER_BLESS").is_some() {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &got).unwrap();
        }
        let want = std::fs::read_to_string(&file).unwrap();
        assert_eq!(got, want, "{}", file.display());
    }
    let md = {
        let mut doc = Document::<review_history::ReviewHistory>::new(
            FilterDoc::default(),
            Limits { entries: 3 },
        );
        for l in &lines {
            doc.add(&canonical::parse(l).unwrap());
        }
        doc.view.markdown()
    };
    insta::assert_snapshot!("small_review_history_markdown", md);
}

fn sig() -> Signature {
    Signature {
        name: "action-ledger".into(),
        email: "action-ledger@invalid".into(),
        time_seconds: 1_773_100_800,
    }
}

fn day1_jobs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1/shards");
    let mut jobs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    jobs.sort();
    jobs
}

fn publish_all(store: &Store, jobs: &[PathBuf]) -> CommitId {
    let options = publish::Options::new(sig());
    let mut tip = None;
    for job in jobs {
        if let Some(c) = publish::publish(store, job, &options).unwrap().commit {
            tip = Some(c);
        }
    }
    tip.unwrap()
}

/// Every view of a revision, its revision member blanked (to compare two revisions).
fn all_views(store: &Store, commit: CommitId, entries: u32) -> Vec<String> {
    let filter = log::Filter::default();
    Kind::ALL
        .into_iter()
        .map(|kind| {
            let r = project(
                store,
                &Request {
                    kind,
                    commit,
                    filter: &filter,
                    limits: Limits { entries },
                    from: None,
                },
            )
            .unwrap();
            r.json.replace(&commit.to_hex(), "REVISION")
        })
        .collect()
}

/// The day1 corpus published in job order, folded: a summary of each view as a snapshot; and
/// the same bytes when jobs are published in reverse order.
#[test]
fn day1_views() {
    let jobs = day1_jobs();
    let (_d1, forward) = crate::tests::scratch_store();
    let tip = publish_all(&forward, &jobs);
    let views = all_views(&forward, tip, DEFAULT_ENTRIES);
    let mut summary = String::new();
    for (kind, json) in Kind::ALL.iter().zip(&views) {
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        let body = v["view"].as_object().unwrap();
        let keys: Vec<String> = body
            .iter()
            .map(|(k, m)| format!("{k}={}", m.as_object().map_or(0, |o| o.len())))
            .collect();
        summary.push_str(&format!(
            "{}: schema={} events={} truncated={} {} bytes={}\n",
            kind.name(),
            v["schema"].as_str().unwrap(),
            v["events"],
            v["truncated"],
            keys.join(" "),
            json.len()
        ));
    }
    insta::assert_snapshot!("day1_views", summary);
    // Publication order: eight jobs (a rerun among them) published the other way round.
    let (_d2, backward) = crate::tests::scratch_store();
    let rev: Vec<PathBuf> = jobs[..8].iter().rev().cloned().collect();
    let tip2 = publish_all(&backward, &rev);
    let (_d3, ahead) = crate::tests::scratch_store();
    let tip3 = publish_all(&ahead, &jobs[..8]);
    assert_eq!(all_views(&backward, tip2, 3), all_views(&ahead, tip3, 3));
}

/// An increment over publications and a compaction equals a full refold, and a compacted
/// ledger folds to the same bytes as before compaction; a checkpoint that is not an ancestor
/// is refused.
#[test]
fn increments_and_compaction_give_the_full_fold() {
    let jobs = day1_jobs();
    let (_dir, store) = crate::tests::scratch_store();
    let first = publish_all(&store, &jobs[..3]);
    let filter = log::Filter::default();
    let limits = Limits { entries: 4 };
    // Each view saved in the saved form and as the JSON document (saved form v1), which
    // `from` reads as well.
    let saved: Vec<(Vec<u8>, String)> = Kind::ALL
        .into_iter()
        .map(|kind| {
            let mut bytes = Vec::new();
            let r = super::project_saving(
                &store,
                &Request {
                    kind,
                    commit: first,
                    filter: &filter,
                    limits,
                    from: None,
                },
                super::Forms::ALL,
                None,
                &mut bytes,
            )
            .unwrap();
            assert!(bytes.starts_with(super::saved::VERSION_LINE));
            (bytes, r.json)
        })
        .collect();
    let second = publish_all(&store, &jobs[3..6]);
    let mut options = crate::compact::Options::new(sig(), 1_777_593_600);
    options.retention_days = 1;
    let compacted = crate::compact::compact(&store, &options).unwrap();
    let third = store.resolve_ledger("refs/heads/main").unwrap();
    assert_ne!(third, second, "{compacted:?}");
    let fourth = publish_all(&store, &jobs[6..8]);
    let full_second = all_views(&store, second, 4);
    assert_eq!(all_views(&store, third, 4), full_second, "compacted vs not");
    for (kind, (bytes, text)) in Kind::ALL.into_iter().zip(&saved) {
        let from = |file: &str, saved: &[u8]| {
            let request = Request {
                kind,
                commit: fourth,
                filter: &filter,
                limits: Limits::default(),
                from: Some((file, saved)),
            };
            project(&store, &request).unwrap()
        };
        let from_json = from("saved.json", text.as_bytes());
        let r = from("saved", bytes);
        assert_eq!(r, from_json, "{kind:?}: the two saved forms");
        let full = project(
            &store,
            &Request {
                kind,
                commit: fourth,
                filter: &filter,
                limits,
                from: None,
            },
        )
        .unwrap();
        assert_eq!(r.json, full.json, "{kind:?}");
        assert!(
            r.folded > 0
                && r.folded
                    < serde_json::from_str::<serde_json::Value>(&full.json).unwrap()["events"]
                        .as_u64()
                        .unwrap()
        );
    }
    // The other way round: the checkpoint does not descend.
    let later = project(
        &store,
        &Request {
            kind: Kind::Status,
            commit: fourth,
            filter: &filter,
            limits,
            from: None,
        },
    )
    .unwrap()
    .json;
    let e = project(
        &store,
        &Request {
            kind: Kind::Status,
            commit: first,
            filter: &filter,
            limits,
            from: Some(("later.json", later.as_bytes())),
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::NotDescendant { .. }), "{e}");
    // A file of another view is refused, naming the file.
    let e = project(
        &store,
        &Request {
            kind: Kind::Commands,
            commit: fourth,
            filter: &filter,
            limits,
            from: Some(("later.json", later.as_bytes())),
        },
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with("later.json: its schema is"),
        "{e}"
    );
}

/// `compare` names every differing path, ignores the fold's own members, and is empty for a
/// document against itself.
#[test]
fn compare_names_the_paths_that_differ() {
    let fold: serde_json::Value = serde_json::json!({"schema":"s","revision":"r","events":3,
        "view":{"lanes":{"a b":{"status":"completed","attempts":2}},"list":[1,2]}});
    assert!(compare(&fold, &fold).is_empty());
    let legacy = serde_json::json!({"schema":"s","revision":"other","events":9,
        "view":{"lanes":{"a b":{"status":"failed","attempts":2.0,"extra":true}},"list":[1]}});
    let got: Vec<String> = compare(&legacy, &fold)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        got,
        [
            r#"$.view.lanes["a b"].extra: legacy true, fold (absent)"#,
            r#"$.view.lanes["a b"].status: legacy "failed", fold "completed""#,
            "$.view.list[1]: legacy (absent), fold 2",
        ]
    );
    // A bare view (no schema): compared with the fold's view.
    let bare =
        serde_json::json!({"lanes":{"a b":{"status":"completed","attempts":2}},"list":[1,3]});
    let got: Vec<String> = compare(&bare, &fold)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(got, ["$.view.list[1]: legacy 3, fold 2"]);
}

/// The canonical event lines of a few day1 jobs (a review, commands, a delivery, a repair).
fn sample_lines() -> &'static [String] {
    static LINES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    LINES.get_or_init(|| {
        let mut out = Vec::new();
        for prefix in ["002", "008", "011", "016"] {
            let files = crate::tests::files_under(&crate::tests::day1_job(prefix));
            for bytes in files.values() {
                out.extend(
                    String::from_utf8(bytes.clone())
                        .unwrap()
                        .lines()
                        .map(str::to_owned),
                );
            }
        }
        out
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any subset of real events, in any order, split anywhere into a saved view and an
    /// increment (the saved document parsed back), gives the bytes of the full fold in
    /// canonical order, for every view and a small bound.
    #[test]
    fn same_events_same_bytes(
        seed in any::<u64>(),
        keep_every in 1usize..4,
        cut in 0usize..=100,
        entries in 1u32..6,
    ) {
        let all = sample_lines();
        let chosen: Vec<&str> = all.iter().step_by(keep_every).map(String::as_str).collect();
        let mut shuffled = chosen.clone();
        // A deterministic shuffle from the seed (Fisher-Yates on a xorshift stream).
        let mut x = seed | 1;
        for i in (1..shuffled.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let at = shuffled.len() * cut / 100;
        for kind in Kind::ALL {
            let full = render_lines(kind, &chosen, entries, "r");
            prop_assert_eq!(&render_lines(kind, &shuffled, entries, "r"), &full);
            prop_assert_eq!(&resumed(kind, &shuffled[..at], &shuffled[at..], entries), &full);
        }
    }
}

/// Folds `first`, writes and parses the document back, folds `rest` into it.
fn resumed(kind: Kind, first: &[&str], rest: &[&str], entries: u32) -> String {
    fn go<P: Projection>(first: &[&str], rest: &[&str], entries: u32) -> String {
        let mut doc = Document::<P>::new(FilterDoc::default(), Limits { entries });
        for l in first {
            doc.add(&canonical::parse(l).unwrap());
        }
        doc.revision = "r".into();
        let mut bytes = Vec::new();
        doc.write_saved(&mut bytes).unwrap();
        let mut doc = Document::<P>::read_saved(&bytes, "saved").unwrap();
        for l in rest {
            doc.add(&canonical::parse(l).unwrap());
        }
        doc.to_json()
    }
    match kind {
        Kind::Status => go::<status::Status>(first, rest, entries),
        Kind::Commands => go::<commands::Commands>(first, rest, entries),
        Kind::ReviewHistory => go::<review_history::ReviewHistory>(first, rest, entries),
        Kind::Notifications => go::<notifications::Notifications>(first, rest, entries),
        Kind::Evidence => go::<evidence::Evidence>(first, rest, entries),
    }
}

/// The smaller day1 jobs (a repair and its rerun, reviews, commands, deliveries).
const SMALL_JOBS: [&str; 6] = ["008", "010", "017", "002", "019", "005"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// Jobs published in two orders, one of the ledgers compacted, and a view saved part way
    /// through one of them and brought up to date: every view has the same bytes (revision
    /// aside) in all three.
    #[test]
    fn publication_order_compaction_and_increments_agree(
        order in Just(SMALL_JOBS.to_vec()).prop_shuffle(),
        take in 2usize..=4,
        cut in 1usize..4,
        entries in 1u32..4,
    ) {
        let jobs: Vec<PathBuf> = order[..take].iter().map(|p| crate::tests::day1_job(p)).collect();
        let cut = cut.min(take - 1);
        let filter = log::Filter::default();
        let limits = Limits { entries };
        let (_a, one) = crate::tests::scratch_store();
        let checkpoint = publish_all(&one, &jobs[..cut]);
        let saved: Vec<Vec<u8>> = Kind::ALL
            .into_iter()
            .map(|kind| {
                let request = Request { kind, commit: checkpoint, filter: &filter, limits, from: None };
                let mut bytes = Vec::new();
                super::project_saving(&one, &request, Forms::ALL, None, &mut bytes).unwrap();
                bytes
            })
            .collect();
        let tip = publish_all(&one, &jobs[cut..]);
        let (_b, two) = crate::tests::scratch_store();
        let reversed: Vec<PathBuf> = jobs.iter().rev().cloned().collect();
        publish_all(&two, &reversed);
        let mut options = crate::compact::Options::new(sig(), 1_777_593_600);
        options.retention_days = 1;
        crate::compact::compact(&two, &options).unwrap();
        let compacted = two.resolve_ledger("refs/heads/main").unwrap();
        let full = all_views(&one, tip, entries);
        prop_assert_eq!(&all_views(&two, compacted, entries), &full);
        for ((kind, text), want) in Kind::ALL.into_iter().zip(&saved).zip(&full) {
            let request = Request { kind, commit: tip, filter: &filter, limits, from: Some(("saved", text.as_slice())) };
            let got = project(&one, &request).unwrap().json.replace(&tip.to_hex(), "REVISION");
            prop_assert_eq!(&got, want);
        }
    }
}

/// `log::added_shards` lists what each range of commits added, hot or compacted since, and
/// nothing for a compaction alone (its shards were there before).
#[test]
fn added_shards_follow_publications_across_a_compaction() {
    let shards = |prefix: &str| -> Vec<String> {
        crate::tests::files_under(&crate::tests::day1_job(prefix))
            .into_keys()
            .filter(|p| p.starts_with("ledger/v1/events/"))
            .collect()
    };
    let (_dir, store) = crate::tests::scratch_store();
    let a = publish_all(&store, &[crate::tests::day1_job("008")]);
    let b = publish_all(&store, &[crate::tests::day1_job("010")]);
    let mut options = crate::compact::Options::new(sig(), 1_777_593_600);
    options.retention_days = 1;
    crate::compact::compact(&store, &options).unwrap();
    let c = store.resolve_ledger("refs/heads/main").unwrap();
    let d = publish_all(&store, &[crate::tests::day1_job("017")]);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(log::added_shards(&store, a, b).unwrap(), shards("010"));
    assert_eq!(
        log::added_shards(&store, b, c).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(log::added_shards(&store, c, d).unwrap(), shards("017"));
    assert_eq!(
        log::added_shards(&store, a, d).unwrap(),
        sorted([shards("010"), shards("017")].concat())
    );
    assert_eq!(
        log::added_shards(&store, d, d).unwrap(),
        Vec::<String>::new()
    );
}

/// A `--from` file that is not a saved view of this kind is refused with why: not JSON, no
/// schema (not an object, or a schema that is not a string), another view's schema, or this
/// schema with a body that is not this view's.
#[test]
fn a_saved_view_is_read_only_when_it_is_one_of_this_kind() {
    let why = |text: &str| match Document::<status::Status>::parse(text, "v.json") {
        Err(Error::Document { file, reason }) => {
            assert_eq!(file, "v.json");
            reason
        }
        other => panic!("{text}: {other:?}"),
    };
    for (text, want) in [
        ("", "not JSON"),
        ("{\"schema\":", "not JSON"),
        ("{\"schema\":\"x\"} trailing", "not JSON"),
        ("[1,2]", "no `schema` member"),
        ("\"action-ledger.project.status.v1\"", "no `schema` member"),
        ("{\"schema\":7}", "no `schema` member"),
        ("{\"view\":{}}", "no `schema` member"),
        (
            "{\"schema\":\"action-ledger.project.commands.v1\"}",
            "its schema is action-ledger.project.commands.v1, not action-ledger.project.status.v1",
        ),
        (
            "{\"schema\":\"action-ledger.project.status.v1\",\"view\":[]}",
            "not a status view",
        ),
    ] {
        let reason = why(text);
        assert!(reason.contains(want), "{text}: {reason}");
    }
    // A saved one reads back equal.
    let mut doc = Document::<status::Status>::new(FilterDoc::default(), Limits { entries: 3 });
    doc.revision = "r".into();
    let text = doc.to_json();
    assert_eq!(
        Document::<status::Status>::parse(&text, "v.json")
            .unwrap()
            .to_json(),
        text
    );
}

/// The saved form reads back to the same document, and `read_saved` reads the JSON document
/// too; another view's file, another version of the form, a damaged file and a member that
/// breaks the form's rules are refused, naming the file, the field and the rule.
#[test]
fn the_saved_form_is_read_back_or_refused_with_why() {
    let lines = sample_lines();
    let mut doc = Document::<status::Status>::new(FilterDoc::default(), Limits { entries: 3 });
    for l in lines {
        doc.add(&canonical::parse(l).unwrap());
    }
    doc.revision = "r".into();
    let mut bytes = Vec::new();
    doc.write_saved(&mut bytes).unwrap();
    let json = doc.to_json();
    let read = |b: &[u8]| Document::<status::Status>::read_saved(b, "v.saved");
    assert_eq!(read(&bytes).unwrap().to_json(), json);
    assert_eq!(read(json.as_bytes()).unwrap().to_json(), json);
    assert!(bytes.len() < json.len(), "{} {}", bytes.len(), json.len());

    let mut other = Document::<commands::Commands>::new(FilterDoc::default(), Limits::default());
    let mut other_bytes = Vec::new();
    other.write_saved(&mut other_bytes).unwrap();
    let e = read(&other_bytes).unwrap_err();
    assert!(
        e.to_string().starts_with(
            "v.saved: its schema is action-ledger.project.commands.v1, not \
             action-ledger.project.status.v1"
        ),
        "{e}"
    );
    let refused = |b: &[u8]| match read(b) {
        Err(Error::Saved { file, field, rule }) => {
            assert_eq!(file, "v.saved");
            let e = read(b).unwrap_err().to_string();
            assert!(e.ends_with(": fold the view again without --from"), "{e}");
            (field, rule)
        }
        other => panic!("{other:?}"),
    };
    let v3 = [
        b"action-ledger.project.saved.v3\n".as_slice(),
        &bytes[saved::VERSION_LINE.len()..],
    ]
    .concat();
    let (field, rule) = refused(&v3);
    assert_eq!(field, "version line");
    assert!(
        rule.contains("\"v3\" is not one this version reads"),
        "{rule}"
    );
    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x20;
    assert_eq!(refused(&damaged).0, "checksum");
    assert_eq!(refused(&bytes[..bytes.len() - 1]).0, "checksum");
    // A body whose checksum is right but whose `limits.entries` is over 32 bits.
    let mut forged = Vec::new();
    #[derive(serde::Serialize)]
    struct Forged<'a> {
        schema: &'a str,
        revision: &'a str,
        filter: FilterDoc,
        limits: u64,
    }
    saved::write(
        &Forged {
            schema: status::Status::SCHEMA,
            revision: "r",
            filter: FilterDoc::default(),
            limits: u64::from(u32::MAX) + 1,
        },
        &mut forged,
    )
    .unwrap();
    let (field, rule) = refused(&forged);
    assert_eq!(field, "member [3][0]", "limits.entries, by position");
    assert!(rule.contains("varint"), "{rule}");
}
