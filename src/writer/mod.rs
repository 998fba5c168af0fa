//! The writer side: record events into a spool, seal it into shards (no Git here).

pub mod files;
pub mod interrupt;
pub mod lock;
pub mod record;
pub mod seal;
pub mod spool;
