//! action-ledger: an immutable, privacy-bounded action ledger stored natively in Git.

pub mod canonical;
pub mod cli;
pub mod compact;
pub mod durable;
pub mod event;
pub mod finality;
pub mod finding;
pub mod identity;
pub mod ledger;
pub mod log;
pub mod parallel;
pub mod privacy;
pub mod process;
pub mod publish;
pub mod server;
pub mod store;
#[cfg(test)]
mod tests;
pub mod time;
pub mod verify;
pub mod view;
pub mod writer;
