//! The ledger's file formats: shards, bindings, the partition layout and monthly segments.

pub mod binding;
pub mod layout;
pub mod segment;
pub mod shard;
