//! Verification of a state repository revision: proves from a fresh
//! clone, offline, that the ledger is complete, canonical and conflict-free, and reports every
//! finding (path, rule, detail) instead of stopping at the first.
//!
//! Whole revision ([`verify_revision`]): every path under `ledger/v1/` is a known kind, and
//! every entry there and under `finality/v1/` a `100644` file or a directory
//! ([`Rule::EntryMode`]); shards are canonical, causally ordered, at the path their identity
//! gives, complete and deterministically packed; each shard set has the exact reservation,
//! completion marker and producer-run binding the publisher writes (bytes recomputed and
//! compared); every event has its identity binding with its semantic digest and parent edge; no
//! event id appears twice; no binding is left without its shard; causal edges are acyclic across
//! the whole ledger; every event passes the privacy rules (they are part of event validation).
//!
//! Push range ([`verify_range`]): NEW descends from OLD; no existing path under `ledger/v1/` is
//! modified or deleted; no added or changed entry is other than a `100644` file or a directory;
//! every shard set touched by the range is verified as above; added bindings must belong to an
//! added set; an added event must not already be bound; parent walks through published history
//! must not close a cycle. It reads only the changed subtrees, the touched sets and the bindings
//! those need.
//!
//! Warnings ([`Report::warnings`]) do not make a report unclean: sibling names that a
//! case-insensitive file system folds into one ([`Rule::CaseCollision`]), over the whole tree or,
//! for a push, the pairs it brings.
//!
//! Privacy profile ([`Options::privacy`], default strict): besides the reference's rules, which
//! are part of event validation ([`Rule::Privacy`]), every event of a verified set is checked
//! against [`privacy::strict::RULES`]; each hit is a [`Rule::PrivacyStrict`] finding naming the
//! event, the field path and the family. In history such a value cannot be removed (the ledger
//! is immutable), so the finding says to treat it as exposed; in a push range it refuses the
//! push. Under the `reference` profile these findings are not reported.
//!
//! Compacted months: shards are read through [`crate::view`], so a compacted shard
//! is verified like a hot one, from the bytes its segment holds; [`crate::compact`] checks each
//! manifest against its segments, and in a range lets a shard file be deleted only when the new
//! manifest proves its exact bytes, and a manifest be replaced only by a superset.
//!
//! Cost (whole revision): one walk of the tree lists every file with its object id; a binding
//! is checked by comparing that id with the id of the bytes the publisher would write
//! ([`BlobId::of`]), so no binding blob is read and no binding path is looked up. Shards are read
//! in batches on this thread (the snapshot is not shared) and parsed, privacy-scanned and hashed
//! on all cores while the next batch is read; the set-level checks run in order on this thread.
//!
//! Progress: [`verify_revision_observed`] and [`verify_range_observed`] report the shards
//! checked, with their events, to a [`crate::progress::Progress`] observer, as each batch (a
//! whole revision) or set (a push range) is done; the observer decides what to show.
//!
//! Memory: across the ledger only each binding's (kind, digest, object id) and each event's id,
//! parent and shard index are kept (for orphans, duplicates and cycles), not the events; at most
//! three batches of shards are in flight; pack pages mapped by gix are released after each batch
//! ([`Store::release_mapped_packs`]), and a process that verifies may allow itself
//! [`MAPPED_BUDGET`] of them between releases ([`store::set_mapped_budget`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::event::{self, Event, FieldError};
use crate::identity::{Digest, ShardIdentity};
use crate::ledger::binding::{self, Kind};
use crate::ledger::layout::{self, Layout};
use crate::ledger::shard::{self, Shard};
use crate::privacy::{self, Profile};
use crate::store::{self, BlobId, Change, CommitId, Snapshot, Store};

pub use crate::finding::{Finding, Report, Rule};

/// The resident file-backed memory (mapped pack and index pages) that `verify` allows itself
/// between releases ([`store::set_mapped_budget`]): a whole-repository walk touches most pages
/// once, and under the store's default ([`store::MAPPED_BUDGET`]) it released them every few
/// dozen objects, refaulting each large folio it touched again. 128 MiB is half of `verify`'s
/// memory goal at a million actions (256 MiB), leaving the other half to its heap.
pub const MAPPED_BUDGET: u64 = 128 << 20;

/// Knobs of a verification.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// The privacy profile (default [`Profile::Strict`]): whether [`Rule::PrivacyStrict`]
    /// findings are reported.
    pub privacy: Profile,
}

/// Verification could not run (the repository or revision cannot be read).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Git repository or an object in it could not be read; the inner error names the
    /// object or ref.
    #[error(transparent)]
    Store(#[from] store::Error),
}

const LEDGER: &str = "ledger/v1";
const FINALITY: &str = crate::finality::ROOT;

/// How much of a broken shard is read to find the bindings it accounts for (four times the
/// shard cap), so that one broken shard is one finding and not a cascade of orphans.
const CLAIM_READ_MAX: u64 = 4 * shard::MAX_BYTES as u64;

/// A digest as 32 raw bytes.
type Key = [u8; 32];

/// The set a shard path belongs to: its directory and file stem without the part suffix
/// (`-part-NNNN-of-NNNN`). The parts of one set share it; [`LogGate::check`] wants whole sets.
pub fn set_key(path: &str) -> String {
    let stem = path.strip_suffix(".jsonl").unwrap_or(path);
    match stem.len().checked_sub(22) {
        Some(at) if stem[at..].starts_with("-part-") => stem[..at].to_owned(),
        _ => stem.to_owned(),
    }
}

fn is_privacy(e: &shard::Error) -> bool {
    matches!(
        e,
        shard::Error::Event(event::Error::Field {
            error: FieldError::Text(
                privacy::Error::Confidential { .. }
                    | privacy::Error::NotRelativeDataPath { .. }
                    | privacy::Error::NotCredentialFreeHttps { .. }
                    | privacy::Error::NotGithubActionsRun { .. }
                    | privacy::Error::InvalidUrl { .. }
            ),
            ..
        })
    )
}

mod compacted;
mod ctx;
mod gate;
mod range;
mod revision;
mod sets;
mod shards;
#[cfg(test)]
mod tests;
mod tree;

use compacted::*;
use ctx::*;
pub use gate::{GateResult, LogGate};
pub use range::{verify_range, verify_range_observed, verify_range_with};
pub use revision::{verify_revision, verify_revision_observed, verify_revision_with};
use shards::*;
pub use shards::{ShardCheck, check_shard, shard_refusal};
use tree::*;
