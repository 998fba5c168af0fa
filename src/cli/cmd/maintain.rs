//! `maintain`: the finality layout's migration and the heavier pack consolidation, on demand.
//!
//! A repository whose finality records are in an older layout (`flat` or `nibble`) is first
//! migrated to the default layout, `hex2x2` ([`finality::migrate`]): one verified commit, records' bytes unchanged, one
//! compare-and-swap. The consolidation then packs what the migration wrote with the rest.
//!
//! Every landed commit (a publication, a compaction, a finality operation, a batch of `serve`)
//! rolls the smallest packs up geometrically, but never more than a bounded number of objects
//! (so that a commit costs in proportion to its own size, not to the repository's). Once the
//! packs outgrow that bound they accumulate again, one per publication; `maintain` runs the same roll-up without the bound, or with `--all` merges
//! every pack into one, at a time the operator chooses (a scheduled job, a quiet hour). It is
//! safe beside readers and publishers, and a kill leaves every object readable.
//!
//! With `--remote` it does none of that: it lands or refuses the remote's pending
//! publications ([`crate::publish::pending::land_all`]), the local repository serving as the
//! object cache.
//!
//! First it removes what killed writers left behind and no live process owns: the staging
//! directories of a first publication killed during the repository's creation
//! ([`crate::store::remove_stale_staging`], with the clock as "now") and temporary files in the
//! repository ([`Store::remove_stale_temp_files`]), each named on stderr (`debris_removed`
//! with `--json`).

use std::path::Path;

use crate::canonical::Value;
use crate::finality::{
    self,
    migrate::{MigrateError, Migrated},
};
use crate::store::{Rollup, Store};

use crate::cli::Env;
use crate::cli::output::{Failure, Printer, commit_value, line};
use crate::cli::settings::{signature, system_now};

/// Runs `maintain`.
pub(in crate::cli) fn run(
    out: &mut Printer,
    env: &Env,
    repo: &Path,
    ref_name: &str,
    all: bool,
    json: bool,
) -> Result<(), Failure> {
    let failed = |e: &dyn std::fmt::Display| {
        Failure::input(format!("cannot maintain {}: {e}", repo.display()))
    };
    let store = Store::open(repo).map_err(|e| failed(&e))?;
    // Debris of killed writers first: staging directories of a killed first publication beside
    // the repository, temporary files in it (only what no live process owns).
    let mut debris = crate::store::remove_stale_staging(repo, system_now());
    debris.extend(store.remove_stale_temp_files());
    for path in &debris {
        out.note(&format!(
            "removed {}, left by a killed writer",
            path.display()
        ));
    }
    let refusal = |e: &MigrateError| {
        Failure::classified(
            e.is_refusal(),
            format!("cannot maintain {}: {e}", repo.display()),
        )
    };
    // A repository that does not verify is not migrated, but its packs are still consolidated
    // (a scheduled maintain keeps it compact while someone repairs it); the refusal is the
    // command's result once that is done.
    let (migrated, unverified) =
        match finality::migrate::migrate(&store, ref_name, &signature(env)?) {
            Ok(m) => (Some(m), None),
            Err(e @ MigrateError::Unverified { .. }) => {
                out.note(
                    "the finality records cannot be migrated (the error below says why); \
                     consolidating the packs all the same",
                );
                (None, Some(refusal(&e)))
            }
            Err(e) => return Err(refusal(&e)),
        };
    let (layout, from, commit, records, entries) = match &migrated {
        Some(Migrated::AlreadyCurrent(l)) => (Value::str(l.name()), Value::Null, None, 0, 0),
        Some(Migrated::Empty) | None => (Value::Null, Value::Null, None, 0, 0),
        Some(Migrated::Moved {
            from,
            to,
            commit,
            records,
            pending,
        }) => (
            Value::str(to.name()),
            Value::str(from.name()),
            Some(*commit),
            *records,
            *pending,
        ),
    };
    if !json
        && let Some(Migrated::Moved {
            from, to, commit, ..
        }) = &migrated
    {
        out.data(&format!(
            "migrated the finality records from the {} to the {} layout at {commit}: \
             {records} record(s) moved with their bytes unchanged, {entries} pending-index \
             entr{} written",
            from.name(),
            to.name(),
            if entries == 1 { "y" } else { "ies" }
        ));
    }
    let rollup = if all { Rollup::All } else { Rollup::Maintain };
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
                ("layout", layout),
                ("migrated", Value::Bool(commit.is_some())),
                ("migrated_from", from),
                ("records_moved", Value::from(records as i64)),
                ("pending_entries", Value::from(entries as i64)),
                ("commit", commit_value(commit)),
                ("busy", Value::Bool(done.busy)),
                ("packs_before", Value::from(done.packs_before as i64)),
                ("packs_merged", Value::from(done.merged as i64)),
                ("packs_after", Value::from(packs_after as i64)),
                ("objects_written", Value::from(done.objects as i64)),
                ("bytes_written", Value::from(done.bytes as i64)),
                (
                    "multi_pack_index_objects",
                    done.multi_pack_index
                        .map_or(Value::Null, |n| Value::from(n as i64)),
                ),
                (
                    "debris_removed",
                    Value::Array(
                        debris
                            .iter()
                            .map(|p| Value::str(p.to_string_lossy().into_owned()))
                            .collect(),
                    ),
                ),
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
    if !json && let Some(objects) = done.multi_pack_index {
        out.data(&format!(
            "wrote a multi-pack index of {objects} objects over {packs_after} pack(s)"
        ));
    }
    unverified.map_or(Ok(()), Err)
}

/// The rounds `maintain --remote` pushes at most: far more than a backlog of a few thousand
/// pending publications needs (each round lands up to 128), bounded so that jobs landing at
/// the same moment cannot keep it running.
const MAX_ROUNDS: u32 = 256;

/// Runs `maintain --remote`: lands or refuses every pending publication of `url`.
pub(in crate::cli) fn land_pending(
    out: &mut Printer,
    env: &Env,
    repo: &Path,
    url: &str,
    ledger_ref: &str,
    json: bool,
) -> Result<(), Failure> {
    use crate::publish::{combine, pending};
    let (store, _) = Store::open_or_create_bare(repo, ledger_ref)
        .map_err(|e| Failure::input(format!("cannot open the cache {}: {e}", repo.display())))?;
    let remote = pending::Remote {
        url,
        ledger_ref,
        timeout: crate::cli::settings::remote_timeout(env)?,
    };
    let options = combine::Options::new(signature(env)?);
    let drained = pending::land_all(&store, remote, &options, MAX_ROUNDS).map_err(|e| {
        Failure::classified(
            e.is_refusal(),
            format!("cannot land the pending publications: {e}"),
        )
    })?;
    if json {
        out.data(&line(&Value::object([
            ("type", Value::str("maintain-remote")),
            ("landed", Value::from(drained.landed as i64)),
            ("already_landed", Value::from(drained.already as i64)),
            ("refused", Value::from(drained.refused as i64)),
            ("rounds", Value::from(i64::from(drained.rounds))),
            ("left", Value::from(drained.left as i64)),
        ])));
    } else {
        out.data(&format!(
            "pending publications: {} landed, {} already landed, {} refused in {} round(s); {} left",
            drained.landed, drained.already, drained.refused, drained.rounds, drained.left
        ));
    }
    Ok(())
}
