//! One file per command. Each takes the printer, the environment where it needs it, and its
//! resolved flags, and returns `Ok` or the [`Failure`](super::output::Failure) that carries
//! its exit code.

pub(super) mod action;
pub(super) mod compact;
pub(super) mod completions;
pub(super) mod hooks;
pub(super) mod log;
pub(super) mod maintain;
pub(super) mod man;
pub(super) mod project;
pub(super) mod publish;
pub(super) mod record;
pub(super) mod run;
pub(super) mod seal;
pub(super) mod serve;
pub(super) mod sweep;
pub(super) mod verify;
