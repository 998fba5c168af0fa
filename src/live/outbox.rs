//! The durable outbox: one live-projection request per file, so that a request survives the
//! `record` process that made it (the reference's queue lives in one Node process).
//!
//! # Files
//!
//! Under the spool root, beside (not inside) the event spool, in
//! `.clawsweeper-repair/crabfleet-outbox/` ([`DIR`]); every file is create-only (staging file,
//! then a link, as the spool's files), so a name never changes meaning once it exists:
//!
//! - `<seq>.<event_id>.request`: the exact request body to post ([`super::request_body`]);
//!   `seq` (ten digits) numbers the requests of the spool in the order they were made, so a
//!   drain posts them in record order and a replayed event (posted again, as in the reference)
//!   gets a new request. It holds no token: the endpoint and token come from the drain's
//!   configuration.
//! - `<seq>.<event_id>.sending`: the claim taken just before posting, holding the poster's pid.
//!   At most one process posts a request: the claim is create-only.
//! - `<seq>.<event_id>.delivered`: the post was answered 2xx. A later drain never posts it again.
//! - `<seq>.<event_id>.failed`: the `projection.failed` event is durable in the spool.
//!
//! Because the directory is outside `.clawsweeper-repair/action-events/`, the spool readers
//! (`seal`, `publish`'s spool input, the reference's readers) never see these files.
//!
//! # Crash rules
//!
//! A kill at any point leaves, for each request: a `.request` alone (pending: the next drain
//! posts it), a `.delivered` or `.failed` (done), or a `.sending` whose process is dead (the
//! post may or may not have reached CrabFleet). The last is not posted again, which would risk
//! a duplicate: the drain records a `projection.failed` event for it (retry from the durable
//! ledger). So a request is never lost and never posted twice; only a kill between an
//! acknowledgement and its `.delivered` mark can leave a failure record for a request that
//! CrabFleet did receive.

use crate::event::Event;
use crate::identity::Digest;
use crate::writer::files::{EntryKind, Root, Written};

use super::Error;

/// The outbox directory, relative to the spool root.
pub const DIR: &str = ".clawsweeper-repair/crabfleet-outbox";
/// Most entries the outbox directory may hold (four files per request).
pub const MAX_ENTRIES: usize = 4 * 65_536;
/// Largest request body read back: an event is at most 1 MiB, plus the envelope.
const MAX_BODY: u64 = 2 * 1024 * 1024;

/// One request of the outbox: `<seq>.<event_id>`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// The request's number in the spool (0, 1, ...), in the order requests were made.
    pub seq: u64,
    /// The source event's id.
    pub event_id: String,
}

impl Entry {
    /// The path of this request's file with `suffix` (`request`, `sending`, ...), relative to
    /// the spool root.
    pub fn path(&self, suffix: &str) -> String {
        format!("{DIR}/{:010}.{}.{suffix}", self.seq, self.event_id)
    }
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Not yet claimed: to post.
    Pending,
    /// Claimed by the process with this pid, not yet settled.
    Sending(u32),
    /// Delivered (2xx) or failure recorded.
    Done,
}

/// Adds a request for `event`: a new `<seq>.<event_id>.request`, `seq` one past the last
/// (a concurrent writer that took the number makes this one try the next).
pub fn enqueue(root: &Root, event: &Event) -> Result<Entry, Error> {
    let body = super::request_body(event);
    let id = event.event_id.as_str().to_owned();
    let mut seq = entries(root)?.last().map_or(0, |e| e.seq + 1);
    loop {
        let entry = Entry {
            seq,
            event_id: id.clone(),
        };
        let taken = root
            .list_dir(DIR, MAX_ENTRIES)?
            .into_iter()
            .flatten()
            .any(|(name, _)| name.starts_with(&format!("{seq:010}.")));
        if !taken {
            match root.write_create_only(
                &entry.path("request"),
                body.as_bytes(),
                "outbox request",
            )? {
                Written::Created => return Ok(entry),
                Written::Exists => {}
            }
        }
        seq += 1;
    }
}

/// The requests of the outbox, in the order they were made.
pub fn entries(root: &Root) -> Result<Vec<Entry>, Error> {
    let Some(list) = root.list_dir(DIR, MAX_ENTRIES)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, kind) in list {
        let Some(stem) = name.strip_suffix(".request") else {
            continue;
        };
        let malformed = |what: &str| Error::Outbox {
            path: root.display_path(&format!("{DIR}/{name}")),
            what: what.to_owned(),
        };
        if kind != EntryKind::File {
            return Err(malformed("not a regular file"));
        }
        let (seq, id) = stem.split_once('.').ok_or_else(|| malformed("name"))?;
        if Digest::parse(id).is_none() || seq.len() != 10 {
            return Err(malformed("name is not <seq>.<event_id>.request"));
        }
        let seq = seq.parse().map_err(|_| malformed("request number"))?;
        out.push(Entry {
            seq,
            event_id: id.to_owned(),
        });
    }
    out.sort();
    Ok(out)
}

/// The request body of `entry`.
pub fn body(root: &Root, entry: &Entry) -> Result<String, Error> {
    let rel = entry.path("request");
    root.read_text(&rel, MAX_BODY, "outbox request")?
        .ok_or_else(|| Error::Outbox {
            path: root.display_path(&rel),
            what: "missing".into(),
        })
}

/// Where `entry` stands.
pub fn state(root: &Root, entry: &Entry) -> Result<State, Error> {
    for done in ["delivered", "failed"] {
        if root.entry_kind(&entry.path(done))?.is_some() {
            return Ok(State::Done);
        }
    }
    match root.read_text(&entry.path("sending"), 64, "outbox claim")? {
        None => Ok(State::Pending),
        Some(text) => Ok(State::Sending(text.trim().parse().unwrap_or(0))),
    }
}

/// Claims `entry` for posting by process `pid`; `false` when another process claimed it.
pub fn claim(root: &Root, entry: &Entry, pid: u32) -> Result<bool, Error> {
    let w = root.write_create_only(
        &entry.path("sending"),
        pid.to_string().as_bytes(),
        "outbox claim",
    )?;
    Ok(w == Written::Created)
}

/// Marks `entry` delivered (the post was answered 2xx).
pub fn mark_delivered(root: &Root, entry: &Entry) -> Result<(), Error> {
    root.write_create_only(&entry.path("delivered"), b"", "outbox mark")?;
    Ok(())
}

/// Marks `entry` settled by a durable `projection.failed` event.
pub fn mark_failed(root: &Root, entry: &Entry) -> Result<(), Error> {
    root.write_create_only(&entry.path("failed"), b"", "outbox mark")?;
    Ok(())
}
