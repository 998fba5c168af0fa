//! Writing a built event into the spool under its producer's lock: the seal check, the
//! partition marker and the create-only event file.

use std::path::PathBuf;

use crate::canonical;
use crate::event::{self, Event};
use crate::identity::Digest;
use crate::privacy;
use crate::time::Timestamp;
use crate::writer::files::{Root, Written};
use crate::writer::lock;
use crate::writer::seal;
use crate::writer::spool;

use super::Error;
use super::producer::partition_calendar_date;

/// Whether a write created the event's file or found the same event (replay-equal) already
/// recorded, in which case nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The event file was created.
    Recorded,
    /// The event was already recorded; its existing file (and `recorded_at`) won.
    Unchanged,
}

/// Step 5 of the module's check order without the lock and without writing: the seal, the
/// partition marker and an existing event file.
pub(super) fn check_spool(root: &Root, candidate: &Event, date: &str) -> Result<(), Error> {
    let producer_digest = spool::producer_digest(&candidate.producer().to_value());
    check_not_sealed(root, candidate, &producer_digest)?;
    check_marker(root, &producer_digest, date)?;
    let rel = spool::event_relative_path(candidate);
    match read_event_file(root, &rel)? {
        Some(existing) => compare_existing(root.display_path(&rel), existing, candidate).map(drop),
        None => Ok(()),
    }
}

/// Writes a built event into the spool at `root` on partition `date` under its producer's lock
///; `now` goes into the lock file. Returns the persisted event
/// and whether it was written now.
pub fn write_event(
    root: &Root,
    candidate: &Event,
    date: &str,
    now: Timestamp,
) -> Result<(Event, Outcome), Error> {
    let guards = lock::acquire_producers(
        root,
        &[candidate.producer().to_value()],
        now,
        &lock::Options::default(),
    )?;
    let written = write_locked(root, candidate, date)?;
    lock::release_all(guards)?;
    Ok(written)
}

/// [`write_event`] for a caller that already holds the producer's lock: seal check, partition
/// marker, create-only event file; an existing file must be replay-equal.
pub fn write_event_locked(root: &Root, candidate: &Event, date: &str) -> Result<Event, Error> {
    write_locked(root, candidate, date).map(|(e, _)| e)
}

fn write_locked(root: &Root, candidate: &Event, date: &str) -> Result<(Event, Outcome), Error> {
    let producer_digest = spool::producer_digest(&candidate.producer().to_value());
    check_not_sealed(root, candidate, &producer_digest)?;
    ensure_marker(root, &producer_digest, date)?;
    let rel = spool::event_relative_path(candidate);
    let path = root.display_path(&rel);
    let unchanged = |e: Event| (e, Outcome::Unchanged);
    if let Some(existing) = read_event_file(root, &rel)? {
        return compare_existing(path, existing, candidate).map(unchanged);
    }
    let body = format!("{}\n", candidate.json);
    match root.write_create_only(&rel, body.as_bytes(), "action event")? {
        Written::Created => Ok((candidate.clone(), Outcome::Recorded)),
        Written::Exists => {
            let existing = read_event_file(root, &rel)?.ok_or_else(|| Error::Conflict {
                path: path.clone(),
                existing: Digest::of(""),
                candidate: candidate.semantic_sha256.clone(),
            })?;
            compare_existing(path, existing, candidate).map(unchanged)
        }
    }
}

fn read_event_file(root: &Root, rel: &str) -> Result<Option<Event>, Error> {
    let path = root.display_path(rel);
    let Some(text) = root.read_text(rel, spool::MAX_EVENT_FILE_BYTES, "action event")? else {
        return Ok(None);
    };
    let line = text
        .strip_suffix('\n')
        .filter(|l| !l.contains('\n') && !l.ends_with('\r'))
        .ok_or_else(|| {
            Error::Event(event::Error::NotCanonical {
                origin: path.display().to_string(),
            })
        })?;
    Ok(Some(Event::parse_line(line, &path.display().to_string())?))
}

fn compare_existing(path: PathBuf, existing: Event, candidate: &Event) -> Result<Event, Error> {
    if existing.replay_json() == candidate.replay_json() {
        Ok(existing)
    } else {
        Err(Error::Conflict {
            path,
            existing: existing.semantic_sha256,
            candidate: candidate.semantic_sha256.clone(),
        })
    }
}

/// `assertWorkflowProducerAcceptsEvent`: a sealed producer accepts only an exact replay
/// of an event whose file already exists.
fn check_not_sealed(root: &Root, candidate: &Event, producer: &Digest) -> Result<(), Error> {
    let seal_rel = spool::seal_relative_path(producer);
    let seal_path = root.display_path(&seal_rel);
    let Some(text) = root.read_text(
        &seal_rel,
        seal::MAX_SEAL_BYTES,
        "action event producer finalization",
    )?
    else {
        return Ok(());
    };
    if !seal::is_valid_seal(&text, &candidate.producer().to_value()) {
        return Err(Error::InvalidSeal(seal_path));
    }
    if root
        .read_text(
            &spool::event_relative_path(candidate),
            canonical::MAX_BYTES as u64,
            "action event spool entry",
        )?
        .is_some()
    {
        return Ok(());
    }
    Err(Error::AlreadyFinalized)
}

/// `ensureWorkflowPartitionDateValue`: create-only marker `YYYY-MM-DD\n`; an existing marker
/// must hold the same date.
/// The partition marker of `producer`, when there is one, must hold `date`; reads only.
fn check_marker(root: &Root, producer: &Digest, date: &str) -> Result<(), Error> {
    match read_marker(root, producer)? {
        Some(text) => marker_holds(&text, date),
        None => Ok(()),
    }
}

fn read_marker(root: &Root, producer: &Digest) -> Result<Option<String>, Error> {
    Ok(root.read_text(
        &spool::marker_relative_path(producer),
        spool::MAX_MARKER_BYTES,
        "action event partition marker",
    )?)
}

fn marker_holds(text: &str, date: &str) -> Result<(), Error> {
    let recorded =
        partition_calendar_date(privacy::js_trim(text), "action event partition marker")?;
    if recorded != date {
        return Err(Error::MarkerConflict {
            recorded,
            expected: date.to_owned(),
        });
    }
    Ok(())
}

fn ensure_marker(root: &Root, producer: &Digest, date: &str) -> Result<(), Error> {
    if let Some(text) = read_marker(root, producer)? {
        return marker_holds(&text, date);
    }
    match root.write_create_only(
        &spool::marker_relative_path(producer),
        format!("{date}\n").as_bytes(),
        "action event partition marker",
    )? {
        Written::Created => Ok(()),
        Written::Exists => marker_holds(&read_marker(root, producer)?.unwrap_or_default(), date),
    }
}
