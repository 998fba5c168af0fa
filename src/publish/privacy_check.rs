//! The privacy gate: under the `strict` profile (the default), a batch holding an event that the
//! strict rules refuse ([`crate::privacy::strict`]) is refused whole, after every check of the
//! reference (the batch's and those against the tip) and before anything is written, naming the
//! shard, the event, the field and the rule (never the value). The strict rules ran on each
//! record when the lines were parsed (on all cores, [`Batch::strict`]); only the report waits,
//! so that a batch the reference refuses is refused for the reference's reason. The first
//! refusal in shard order is reported.

use super::validate::Batch;
use super::*;
use crate::privacy::Profile;

/// The first event of `batch` that `profile` refuses beyond the reference's rules (those were
/// checked when the shards were parsed), as [`Error::StrictPrivacy`] naming the shard, the
/// event, the field path, the family and the rule. [`Profile::Reference`] refuses nothing.
pub fn check_privacy(batch: &Batch, profile: Profile) -> Result<(), Error> {
    if profile == Profile::Reference || batch.strict.is_empty() {
        return Ok(());
    }
    for s in &batch.shards {
        if let Some(e) = s
            .events
            .iter()
            .find(|e| batch.strict.contains_key(&e.event_id))
        {
            return Err(Error::StrictPrivacy {
                path: s.path.clone(),
                event_id: e.event_id.clone(),
                finding: batch.strict[&e.event_id].clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::test_support::*;

    /// The day1 corpus passes the default strict profile: no event of the 24 jobs has a strict
    /// hit, and the first jobs publish with the reference's manifests
    /// (expected-import-results.json). scripts/e2e.sh publishes all 24 with the binary's
    /// default (strict) and compares the tree with expected-state/ byte for byte.
    #[test]
    fn day1_publishes_unchanged_under_strict() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/corpus/day1");
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(corpus.join("expected-import-results.json")).unwrap(),
        )
        .unwrap();
        let (_dir, store) = crate::tests::scratch_store();
        let mut options = Options::new(sig());
        // The reference's manifests name reference-layout paths.
        options.layout = Some(Layout::Reference);
        assert_eq!(options.privacy, Profile::Strict);
        let jobs = expected.as_array().unwrap();
        assert_eq!(jobs.len(), 24);
        let mut events = 0;
        for (i, job) in jobs.iter().enumerate() {
            let source = corpus.join(job["source"].as_str().unwrap());
            let batch = validate_batch(&read_source(&source, None).unwrap(), None).unwrap();
            for e in batch.shards.iter().flat_map(|s| &s.events) {
                assert_eq!(privacy::strict::scan(&e.record()), [], "{}", e.event_id);
                events += 1;
            }
            check_privacy(&batch, options.privacy).unwrap();
            if i >= 3 {
                continue;
            }
            let p = publish_batch(&store, &batch, &options).unwrap();
            assert_eq!(p.status, Status::Created);
            let want = canonical::to_canonical_unchecked(
                &canonical::parse(&job["result"].to_string()).unwrap(),
            );
            let got = canonical::to_canonical_unchecked(
                &canonical::parse(&p.manifest.to_json()).unwrap(),
            );
            assert_eq!(got, want, "{}", job["job"]);
        }
        assert_eq!(events, 5091);
    }

    /// A batch with one strict hit is refused before anything is written, whatever the rest of
    /// the batch, whether it comes from shard files or a sealed spool; `--privacy reference`
    /// publishes it.
    #[test]
    fn a_strict_hit_refuses_the_batch_and_reference_publishes_it() {
        let (_dir, store) = crate::tests::scratch_store();
        let spool = tempfile::tempdir().unwrap();
        let secret = "hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh";
        let hit = crate::tests::sealed_spool_with_learning_signal(spool.path(), secret);
        let files = read_source(&spool.path().join("out"), None).unwrap();
        let refused = |batch: &Batch| {
            let err = publish_batch(&store, batch, &Options::new(sig())).unwrap_err();
            let Error::StrictPrivacy {
                path,
                event_id,
                finding,
            } = &err
            else {
                panic!("{err}")
            };
            assert_eq!(event_id, &hit);
            assert!(err.to_string().contains(path.as_str()), "{err}");
            let rule = (finding.path.clone(), finding.family, finding.rule);
            (path.clone(), rule)
        };
        let from_files = validate_batch(&files, None).unwrap();
        assert_eq!(from_files.strict.len(), 1);
        let (path, rule) = refused(&from_files);
        assert_eq!(
            (rule.0.as_str(), rule.1, rule.2),
            (
                "$.learning.signal",
                "huggingface-token",
                "gitleaks:huggingface-access-token"
            )
        );
        assert!(from_files.shards.iter().any(|s| s.path == path));
        let sealed = read_source_shards(spool.path(), None).unwrap();
        let from_spool = validate_source(sealed, None).unwrap();
        assert_eq!(refused(&from_spool), (path, rule));
        // Either way a batch holds each line once: its events' lines are ranges of its shards.
        for batch in [&from_files, &from_spool] {
            assert!(
                batch
                    .shards
                    .iter()
                    .all(|s| { s.events.iter().all(|e| e.json.is_within(&s.content)) })
            );
        }
        assert_eq!(store.tip("refs/heads/main").unwrap(), None);
        assert_eq!(
            check_privacy(&from_files, Profile::Reference).map_err(|e| e.to_string()),
            Ok(())
        );
        let Err(Error::StrictPrivacy {
            event_id, finding, ..
        }) = check_privacy(&from_files, Profile::Strict)
        else {
            panic!("refused under strict")
        };
        // A path that holds the refused value (producer fields are part of it) is not printed.
        let withheld = Error::StrictPrivacy {
            path: "ledger/v1/events/2026/03/10/o-r/hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh.x.y/1-1-j.jsonl"
                .into(),
            event_id: event_id.clone(),
            finding: finding.clone(),
        };
        assert!(
            withheld.to_string().starts_with(
                "action event shard (path withheld: it holds the refused value): event "
            ),
            "{withheld}"
        );
        assert!(!withheld.to_string().contains("hf_ABCD"));
    }

    /// The strict rules come after the checks against the ledger: a batch that conflicts with
    /// what the ledger holds is refused for the conflict under both profiles, although strict
    /// would refuse one of its events (the reference's reason comes first).
    #[test]
    fn a_conflict_with_the_ledger_comes_before_a_strict_hit() {
        let (_dir, store) = crate::tests::scratch_store();
        let first = tempfile::tempdir().unwrap();
        crate::tests::sealed_spool_with_learning_signals(first.path(), &["x1"]);
        let mut reference = Options::new(sig());
        reference.privacy = Profile::Reference;
        publish(&store, &first.path().join("out"), &reference).unwrap();
        // The same producer run again: item 1 with another signal (a strict hit), and item 2.
        let second = tempfile::tempdir().unwrap();
        crate::tests::sealed_spool_with_learning_signals(
            second.path(),
            &["hf_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh", "x2"],
        );
        let tip = store.tip("refs/heads/main").unwrap();
        let refusal = |privacy| {
            let mut options = Options::new(sig());
            options.privacy = privacy;
            publish(&store, &second.path().join("out"), &options)
                .unwrap_err()
                .to_string()
        };
        let conflict = refusal(Profile::Reference);
        assert!(conflict.contains("conflict"), "{conflict}");
        assert_eq!(refusal(Profile::Strict), conflict);
        assert_eq!(store.tip("refs/heads/main").unwrap(), tip);
    }
}
