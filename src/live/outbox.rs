//! The durable outbox: one live-projection request per file, so that a request survives the
//! `record` process that made it (the reference's queue lives in one Node process).
//!
//! # Files
//!
//! Under the spool root, beside (not inside) the event spool, in
//! `.clawsweeper-repair/crabfleet-outbox/` ([`DIR`]); every file is create-only (staging file,
//! then a link, as the spool's files), so a name never changes meaning once it exists:
//!
//! - `<seq>.<event_id>.intent`: written by `record` just before the event itself, holding the
//!   writer's pid, what the event is owed (`request`: a post; `failure`: the configuration was
//!   invalid, a `projection.failed` event) and the event file's spool-relative path. It takes
//!   the request's number, so the `.request` written once the event is durable has the same
//!   stem.
//! - `<seq>.<event_id>.request`: the exact request body to post ([`super::request_body`]);
//!   `seq` (ten digits) numbers the requests of the spool in the order they were made, so a
//!   drain posts them in record order and a replayed event (posted again, as in the reference)
//!   gets a new request. It holds no token: the endpoint and token come from the drain's
//!   configuration.
//! - `<seq>.<event_id>.sending`: the claim taken just before posting, holding the poster's pid.
//!   At most one process posts a request: the claim is create-only.
//! - `<seq>.<event_id>.delivered`: the post was answered 2xx. A later drain never posts it again.
//! - `<seq>.<event_id>.failed`: the `projection.failed` event is durable in the spool.
//! - `<seq>.<event_id>.void`: an intent whose writer died before its event was durable (or
//!   whose event was refused): nothing to post.
//!
//! Because the directory is outside `.clawsweeper-repair/action-events/`, the spool readers
//! (`seal`, `publish`'s spool input, the reference's readers) never see these files.
//!
//! # Crash rules
//!
//! A kill at any point leaves, for each request: an `.intent` alone (the writer died between
//! the intent and the request: a drain that finds the writer dead writes the request from the
//! durable event, or records the owed failure, or marks it `.void` when the event never became
//! durable), a `.request` alone (pending: the next drain
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

/// What an intent says ([`reserve`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    /// The writer's pid.
    pub pid: u32,
    /// `true`: the event is owed a `projection.failed` event (invalid configuration); `false`:
    /// a post.
    pub failure: bool,
    /// The event file's spool-relative path.
    pub event_path: String,
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Only the intent exists: its writer is still running, or died before writing the
    /// request (or the failure).
    Reserved(Intent),
    /// Not yet claimed: to post.
    Pending,
    /// Claimed by the process with this pid, not yet settled.
    Sending(u32),
    /// Delivered (2xx), failure recorded, or void.
    Done,
}

/// Adds a request for `event`: a new `<seq>.<event_id>.request`, `seq` one past the last
/// (a concurrent writer that took the number makes this one try the next).
pub fn enqueue(root: &Root, event: &Event) -> Result<Entry, Error> {
    let body = super::request_body(event);
    create_next(root, event.event_id.as_str(), "request", body.as_bytes())
}

/// Reserves the next number for `candidate` before it is written: a new
/// `<seq>.<event_id>.intent` (module docs) for writer `pid`; `failure` when the event is owed
/// a `projection.failed` event rather than a post. [`fulfil`] or [`void`] settles it.
pub fn reserve(root: &Root, candidate: &Event, pid: u32, failure: bool) -> Result<Entry, Error> {
    let text = format!(
        "{pid}\n{}\n{}\n",
        if failure { "failure" } else { "request" },
        crate::writer::spool::event_relative_path(candidate)
    );
    create_next(root, candidate.event_id.as_str(), "intent", text.as_bytes())
}

/// Writes the request of a reserved `entry` for the durable `event` (create-only: a request
/// already written by a drain for a dead writer is kept).
pub fn fulfil(root: &Root, entry: &Entry, event: &Event) -> Result<(), Error> {
    let body = super::request_body(event);
    root.write_create_only(&entry.path("request"), body.as_bytes(), "outbox request")?;
    Ok(())
}

/// Marks a reserved `entry` void: its event was not written (refused, or its writer died).
pub fn void(root: &Root, entry: &Entry) -> Result<(), Error> {
    root.write_create_only(&entry.path("void"), b"", "outbox mark")?;
    Ok(())
}

/// The intent of `entry`, when it has one.
pub fn intent(root: &Root, entry: &Entry) -> Result<Option<Intent>, Error> {
    let rel = entry.path("intent");
    let Some(text) = root.read_text(&rel, 4096, "outbox intent")? else {
        return Ok(None);
    };
    let malformed = || Error::Outbox {
        path: root.display_path(&rel),
        what: "not <pid>, request|failure, event path".into(),
    };
    let mut lines = text.lines();
    let pid = lines
        .next()
        .and_then(|l| l.parse().ok())
        .ok_or_else(malformed)?;
    let failure = match lines.next() {
        Some("request") => false,
        Some("failure") => true,
        _ => return Err(malformed()),
    };
    let event_path = lines.next().ok_or_else(malformed)?.to_owned();
    if !event_path.starts_with(crate::writer::spool::SPOOL_DIR) || event_path.contains("..") {
        return Err(malformed());
    }
    Ok(Some(Intent {
        pid,
        failure,
        event_path,
    }))
}

/// `<seq>.<id>.<suffix>` at the first free number past the last.
fn create_next(root: &Root, id: &str, suffix: &str, bytes: &[u8]) -> Result<Entry, Error> {
    let id = id.to_owned();
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
            match root.write_create_only(&entry.path(suffix), bytes, "outbox request")? {
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
        let Some(stem) = name
            .strip_suffix(".request")
            .or_else(|| name.strip_suffix(".intent"))
        else {
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
    // A stem with both an intent and a request is one entry.
    out.dedup();
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
    for done in ["delivered", "failed", "void"] {
        if root.entry_kind(&entry.path(done))?.is_some() {
            return Ok(State::Done);
        }
    }
    if root.entry_kind(&entry.path("request"))?.is_none()
        && let Some(intent) = intent(root, entry)?
    {
        return Ok(State::Reserved(intent));
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
