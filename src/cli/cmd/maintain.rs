//! `maintain`: the heavier pack consolidation, on demand.
//!
//! Every landed commit (a publication, a compaction, a finality operation, a batch of `serve`)
//! rolls the smallest packs up geometrically, but never more than a bounded number of objects
//! (so that a commit costs in proportion to its own size, not to the repository's). Once the
//! packs outgrow that bound they accumulate again, one per publication; `maintain` runs the same roll-up without the bound, or with `--all` merges
//! every pack into one, at a time the operator chooses (a scheduled job, a quiet hour). It is
//! safe beside readers and publishers, and a kill leaves every object readable.

use std::path::Path;

use crate::canonical::Value;
use crate::store::{Rollup, Store};

use crate::cli::output::{Failure, Printer, line};

/// Runs `maintain`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    repo: &Path,
    all: bool,
    json: bool,
) -> Result<(), Failure> {
    let failed = |e: &dyn std::fmt::Display| Failure {
        code: 2,
        message: format!("cannot maintain {}: {e}", repo.display()),
    };
    let store = Store::open(repo).map_err(|e| failed(&e))?;
    let rollup = if all {
        Rollup::All
    } else {
        Rollup::Geometric {
            max_objects: u64::MAX,
        }
    };
    let done = store.consolidate_packs(rollup).map_err(|e| failed(&e))?;
    let packs_after = if done.merged == 0 {
        done.packs_before
    } else {
        done.packs_before - done.merged + 1
    };
    if json {
        out.data(&line(&Value::Object(
            [
                ("type", Value::String("maintain".into())),
                ("busy", Value::Bool(done.busy)),
                ("packs_before", Value::from(done.packs_before as i64)),
                ("packs_merged", Value::from(done.merged as i64)),
                ("packs_after", Value::from(packs_after as i64)),
                ("objects_written", Value::from(done.objects as i64)),
                ("bytes_written", Value::from(done.bytes as i64)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        )));
    } else if done.busy {
        out.data("another consolidation is running; nothing done");
    } else if done.merged == 0 {
        out.data(&format!(
            "{} pack(s); nothing to consolidate",
            done.packs_before
        ));
    } else {
        out.data(&format!(
            "merged {} of {} pack(s) into one ({} objects, {} bytes); {} pack(s) now",
            done.merged, done.packs_before, done.objects, done.bytes, packs_after
        ));
    }
    Ok(())
}
