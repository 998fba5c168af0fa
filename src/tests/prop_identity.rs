//! Property tests of identity and shard-path derivation.
//!
//! - Identities are content-derived: the same identity written with its object keys in any
//!   order, and the same repository in any case or with surrounding blanks, give the same
//!   operation id, attempt id, idempotency key, event key and event id.
//! - Distinct inputs give distinct ids where the rules separate them: different identity
//!   content, a different normalized repository or a different scope.
//! - Shard paths: every path segment derived from any text is portable and bounded; the path of
//!   a generated shard identity parses back to its partition date and part; distinct identities
//!   get distinct paths (the digest prefix in the file name).
#![cfg(test)]

use proptest::prelude::*;

use crate::canonical::{self, Value};
use crate::identity::{self, ShardIdentity};
use crate::ledger::shard;

/// A leaf of a generated identity, written as JSON text.
fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>().prop_map(|s| serde_json::to_string(&s).expect("string")),
        (-1_000_000i64..1_000_000).prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        Just("null".to_owned()),
        prop::collection::vec("[a-z0-9]{0,6}", 0..4)
            .prop_map(|v| serde_json::to_string(&v).expect("array")),
    ]
}

/// An identity object as `(key, value text)` pairs with distinct keys, possibly one nested
/// object, in generation order.
type Members = Vec<(String, String)>;

fn members() -> impl Strategy<Value = Members> {
    let nested = prop::collection::btree_map("[a-z]{1,4}", leaf(), 1..4).prop_map(|m| {
        let body: Vec<String> = m
            .into_iter()
            .rev()
            .map(|(k, v)| format!("{}:{v}", serde_json::to_string(&k).expect("key")))
            .collect();
        format!("{{{}}}", body.join(","))
    });
    let value = prop_oneof![4 => leaf(), 1 => nested];
    prop::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,8}", value, 1..6)
        .prop_map(|m| m.into_iter().collect())
}

/// The JSON text of `members` in the order `order` picks (a permutation seed).
fn object_text(members: &Members, order: &[prop::sample::Index]) -> String {
    let mut items: Vec<&(String, String)> = members.iter().collect();
    for (i, pick) in order.iter().enumerate().take(items.len()) {
        let j = i + pick.index(items.len() - i);
        items.swap(i, j);
    }
    let body: Vec<String> = items
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).expect("key")))
        .collect();
    format!("{{{}}}", body.join(", "))
}

fn parse(text: &str) -> Value {
    canonical::parse(text).unwrap_or_else(|e| panic!("generated identity {text}: {e}"))
}

/// A valid repository `owner/name` in its normalized (lowercase) form.
fn repository() -> impl Strategy<Value = String> {
    "[a-z0-9_][a-z0-9_.-]{0,12}/[a-z0-9_][a-z0-9_.-]{0,12}"
}

/// A valid scope (`[A-Za-z0-9][A-Za-z0-9_.+-]*`, lowercase as stored).
fn scope() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_.+-]{0,16}"
}

/// `s` with some letters in upper case and blanks around it (what normalization undoes).
fn disguise(s: &str, mask: u64, pad: (usize, usize)) -> String {
    let body: String = s
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect();
    format!("{}{body}{}", " ".repeat(pad.0), "\t".repeat(pad.1))
}

proptest! {
    #![proptest_config(super::prop_support::config(128))]

    /// The ids of an identity do not depend on the order its keys were written in, nor on the
    /// case and blanks of the repository.
    #[test]
    fn ids_are_stable_under_key_order_and_repository_form(
        m in members(),
        order_a in prop::collection::vec(any::<prop::sample::Index>(), 8),
        order_b in prop::collection::vec(any::<prop::sample::Index>(), 8),
        repo in repository(),
        mask in any::<u64>(),
        pad in (0usize..3, 0usize..3),
        scope in scope(),
    ) {
        let a = parse(&object_text(&m, &order_a));
        let b = parse(&object_text(&m, &order_b));
        let shown = disguise(&repo, mask, pad);
        prop_assert_eq!(identity::idempotency_key(&a)?, identity::idempotency_key(&b)?);
        let op_a = identity::operation_id(&repo, &scope, &a)?;
        let op_b = identity::operation_id(&shown, &scope, &b)?;
        prop_assert_eq!(&op_a, &op_b);
        prop_assert_eq!(
            identity::attempt_id(op_a.as_str(), &a)?,
            identity::attempt_id(&op_b.as_str().to_uppercase(), &b)?
        );
        let key_a = identity::event_key(&scope, &a)?;
        prop_assert_eq!(&key_a, &identity::event_key(&scope, &b)?);
        prop_assert_eq!(
            identity::event_id(&repo, &key_a)?,
            identity::event_id(&shown, &format!(" {key_a} "))?
        );
    }

    /// Different identity content, repositories or scopes give different ids.
    #[test]
    fn distinct_inputs_give_distinct_ids(
        ma in members(),
        mb in members(),
        repo_a in repository(),
        repo_b in repository(),
        scope_a in scope(),
        scope_b in scope(),
    ) {
        let order: Vec<prop::sample::Index> = Vec::new();
        let a = parse(&object_text(&ma, &order));
        let b = parse(&object_text(&mb, &order));
        let same_content =
            canonical::to_identity_canonical(&a)? == canonical::to_identity_canonical(&b)?;
        prop_assert_eq!(
            same_content,
            identity::idempotency_key(&a)? == identity::idempotency_key(&b)?
        );
        let op = |repo: &str, scope: &str, v: &Value| identity::operation_id(repo, scope, v);
        let base = op(&repo_a, &scope_a, &a)?;
        if !same_content {
            prop_assert_ne!(&base, &op(&repo_a, &scope_a, &b)?);
            prop_assert_ne!(
                identity::event_key(&scope_a, &a)?,
                identity::event_key(&scope_a, &b)?
            );
        }
        if repo_a != repo_b {
            prop_assert_ne!(&base, &op(&repo_b, &scope_a, &a)?);
            let key = identity::event_key(&scope_a, &a)?;
            prop_assert_ne!(
                identity::event_id(&repo_a, &key)?,
                identity::event_id(&repo_b, &key)?
            );
        }
        if scope_a != scope_b {
            prop_assert_ne!(&base, &op(&repo_a, &scope_b, &a)?);
        }
        // Attempts of one operation differ by identity; the same identity under two operations
        // gives two attempts.
        let other = op(&repo_b, &scope_b, &a)?;
        if other != base {
            prop_assert_ne!(
                identity::attempt_id(base.as_str(), &a)?,
                identity::attempt_id(other.as_str(), &a)?
            );
        }
    }

    /// Every segment derived from any text is portable (`[A-Za-z0-9_.-]+`), not `.` or `..`,
    /// within its bound, not a Windows device name and not dot-terminated.
    #[test]
    fn path_segments_are_portable_and_bounded(
        text in prop_oneof![
            any::<String>(),
            "[A-Za-z0-9 ./:_-]{0,200}",
            prop::sample::select(vec![
                "con", "CON.txt", "aux", "nul.", "com1", "LPT9.x", "..", ".", "...", "a.", "-",
                "--a--", "prn..", "_con",
            ]).prop_map(str::to_owned),
        ],
        max in prop::sample::select(vec![64usize, 120]),
    ) {
        let portable = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        };
        let safe = shard::safe_path_segment(&text);
        prop_assert!(portable(&safe), "safe segment {safe:?} of {text:?}");
        let bounded = shard::bounded_path_segment(&text, max);
        prop_assert!(portable(&bounded), "bounded segment {bounded:?} of {text:?}");
        prop_assert!(bounded.len() <= max, "{bounded:?} longer than {max}");
        prop_assert!(!bounded.ends_with('.'), "{bounded:?} ends with a dot");
        let stem = bounded.split('.').next().unwrap_or("").to_ascii_uppercase();
        let device = matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL")
            || (stem.len() == 4
                && (stem.starts_with("COM") || stem.starts_with("LPT"))
                && (b'1'..=b'9').contains(&stem.as_bytes()[3]));
        prop_assert!(!device, "{bounded:?} is a device name");
        // Deterministic, and two texts with the same safe form but different content do not
        // share a hashed segment by accident of truncation alone.
        prop_assert_eq!(&bounded, &shard::bounded_path_segment(&text, max));
    }
}

/// Machine text of the shard identity's fields, with the awkward path cases mixed in.
fn field(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => proptest::string::string_regex(&format!("[A-Za-z0-9][A-Za-z0-9_.+-]{{0,{}}}", max.min(40)))
            .expect("a valid pattern"),
        1 => prop::sample::select(vec!["con", "AUX.yml", "job.", "a..", "COM1", "x-y_z.1"])
            .prop_map(str::to_owned),
        1 => (1usize..=max).prop_map(|n| "j".repeat(n)),
    ]
}

fn shard_identity() -> impl Strategy<Value = ShardIdentity> {
    (
        repository(),
        "[0-9a-f]{40}",
        field(120),
        field(128),
        field(128),
        "[0-9]{1,12}",
        1i64..10_000,
        (1i32..=9999, 1u8..=12, 1u8..=28),
    )
        .prop_map(
            |(repository, sha, producer, workflow, job, run_id, run_attempt, (y, m, d))| {
                ShardIdentity {
                    repository,
                    sha,
                    producer,
                    workflow,
                    job,
                    run_id,
                    run_attempt,
                    partition_date: format!("{y:04}-{m:02}-{d:02}"),
                }
            },
        )
}

proptest! {
    #![proptest_config(super::prop_support::config(256))]

    /// A generated shard identity's path parses back to its date and part, stays under the
    /// events root with portable segments, and its digest is that of its canonical object read
    /// back in any key order.
    #[test]
    fn shard_paths_round_trip(
        id in shard_identity(),
        (index, count) in (1u32..=999_999).prop_flat_map(|c| (1..=c, Just(c))),
    ) {
        // A generated field the privacy rules refuse (rare) is not a shard identity.
        let Ok(id) = id.normalized() else { return Err(TestCaseError::reject("not normalizable")) };
        for part in [None, Some((index, count))] {
            let path = shard::relative_path(&id, part)?;
            prop_assert_eq!(
                shard::parse_path(&path),
                Some((id.partition_date.clone(), part)),
                "{}", path
            );
        }
        // The digest is of the canonical object: the same object written in reverse key order
        // reads back to the same digest.
        let canonical_text = canonical::to_canonical(&id.to_value())?;
        let obj = canonical::parse(&canonical_text)?;
        let reversed: Vec<String> = obj
            .as_object()
            .expect("object")
            .iter()
            .rev()
            .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).expect("key"),
                canonical::to_canonical(v).expect("value")))
            .collect();
        let again = canonical::parse(&format!("{{{}}}", reversed.join(",")))?;
        prop_assert_eq!(
            identity::Digest::of(canonical::to_canonical(&again)?),
            id.digest()
        );
    }

    /// Distinct shard identities get distinct digests and so distinct paths, part for part;
    /// run digests differ exactly when something other than the partition date differs.
    #[test]
    fn distinct_shard_identities_get_distinct_paths(
        a in shard_identity(),
        b in shard_identity(),
        date_only in any::<bool>(),
    ) {
        let (Ok(a), Ok(mut b)) = (a.normalized(), b.normalized()) else {
            return Err(TestCaseError::reject("not normalizable"));
        };
        if date_only {
            b = ShardIdentity { partition_date: b.partition_date.clone(), ..a.clone() };
        }
        prop_assume!(a != b);
        prop_assert_ne!(a.digest(), b.digest());
        prop_assert_ne!(
            shard::relative_path(&a, Some((1, 1)))?,
            shard::relative_path(&b, Some((1, 1)))?
        );
        let same_run = ShardIdentity { partition_date: a.partition_date.clone(), ..b.clone() } == a;
        prop_assert_eq!(same_run, a.run_digest() == b.run_digest());
    }
}
