//! The knobs and the answer of every finality write. The write path itself is the batch
//! planner's ([`batch::run`](super::batch::run) for one operation, [`batch::land`](super::batch::land)
//! for many): plan on the tip, write one commit, land it with one compare-and-swap of the ledger
//! ref through the store's landing loop ([`crate::store::land()`]), and plan again from scratch
//! on the new tip when another writer moved the ref.

use crate::store::CommitId;

/// Knobs of every finality operation: the store's landing options ([`LandOptions`]: the ledger
/// ref, signature, attempt budget, lock wait, target and who rolls the packs up); required
/// inputs are parameters. `serve`'s writer lands with [`RollUp::Caller`] and rolls up on a
/// thread of its own; every other writer leaves the default, [`RollUp::AfterCommit`].
///
/// [`LandOptions`]: crate::store::LandOptions
/// [`RollUp::Caller`]: crate::store::RollUp::Caller
/// [`RollUp::AfterCommit`]: crate::store::RollUp::AfterCommit
pub type Options = crate::store::LandOptions;

/// What an operation landed.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<T> {
    /// The record written (or found, for a replayed creation).
    pub value: T,
    /// The new tip; `None` when nothing had to be written.
    pub commit: Option<CommitId>,
    /// Snapshots planned (1 unless the ref moved).
    pub attempts: u32,
}
