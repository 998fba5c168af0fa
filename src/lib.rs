//! action-ledger: an immutable, privacy-bounded action ledger stored natively in Git.
//!
//! Modules follow the data flow of `design.md` §2 (record → spool → seal → shard → publish →
//! verify); dependencies point one way: `cli → publish → {seal, shard, spool, store} →
//! {event, privacy, identity} → canonical`.

pub mod canonical;
pub mod event;
pub mod identity;
pub mod privacy;
pub mod files;
pub mod seal;
pub mod shard;
pub mod spool;
