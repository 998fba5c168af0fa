//! action-ledger: an immutable, privacy-bounded action ledger stored natively in Git.
//!
//! Modules follow the data flow of `design.md` §2 (record → spool → seal → shard → publish →
//! verify → compact); dependencies point one way: `cli → {publish, verify, compact, log} →
//! {view, seal, shard, segment, spool, store} → {event, privacy, identity} → canonical`.

pub mod binding;
mod boundary;
pub mod canonical;
pub mod cli;
pub mod compact;
mod conformance;
pub mod durable;
pub mod event;
pub mod files;
pub mod finality;
pub mod identity;
pub mod interrupt;
pub mod layout;
pub mod lock;
pub mod log;
pub mod pack;
pub mod parallel;
pub mod privacy;
pub mod publish;
pub mod record;
pub mod remote;
pub mod seal;
pub mod segment;
pub mod server;
pub mod shard;
pub mod spool;
pub mod store;
pub mod verify;
pub mod view;
