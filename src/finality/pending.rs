//! The pending index of the `hex2x2` and `nibble` layouts (its paths are the same in both): one empty file per action the sweep may reconcile,
//! bucketed by creation time, so that a sweep reads the names of what is pending, not the
//! records of everything that exists.
//!
//! ```text
//! finality/v1/pending/<YYYY-MM-DD>/<HH>/<created_at epoch ms, 13 digits>.<action_id>
//! ```
//!
//! The day and hour are those of `created_at` in UTC. An entry exists exactly when its action
//! is [`indexed`]: it has no outcome and its lifecycle is not one the sweep leaves alone
//! (`completed`, `failed`, `cancelled`, `blocked`; see [`mod@super::sweep`]). The entry's time is
//! the action's `created_at`. Entries are empty files (every entry shares the empty blob), and
//! git keeps no empty trees, so a bucket whose actions all closed disappears: the index holds
//! what is pending, not what exists.
//!
//! The one planner ([`super::batch`]) writes the index in the same commit as the records that
//! change it, after each operation, from the action's state before and after; it refuses an
//! operation on an action whose entry disagrees with its records ([`Error::PendingIndex`](super::Error::PendingIndex)), so a bad
//! index is never built on. `verify` checks the index against the records in both directions:
//! `finality-pending-missing` (an indexed action without its entry),
//! `finality-pending-extra` (an entry whose action is not indexed, or does not exist) and
//! `finality-pending-time` (an entry whose time is not its action's `created_at`).
//!
//! The `flat` layout has no index (its sweep walks every action); `maintain` builds it when it
//! migrates a `flat` repository.

use super::ids::ActionId;
use super::records::format_time;
use super::state::State;
use crate::store::{self, Snapshot};
use crate::time::Timestamp;

/// Directory of the pending index.
pub const PENDING: &str = "finality/v1/pending";

/// Whether an action in `state` has an entry: no outcome, and a lifecycle the sweep may close.
pub fn indexed(state: &State) -> bool {
    state.outcome.is_none() && !state.lifecycle().is_sweep_excluded()
}

/// The bucket directory of a creation time: `finality/v1/pending/<YYYY-MM-DD>/<HH>`.
fn bucket(created_at: Timestamp) -> String {
    let t = format_time(created_at);
    format!("{PENDING}/{}/{}", &t[..10], &t[11..13])
}

/// The path of the entry of action `id` created at `created_at`.
pub fn entry_path(id: &ActionId, created_at: Timestamp) -> String {
    format!(
        "{}/{:013}.{}",
        bucket(created_at),
        created_at.millis(),
        id.as_str()
    )
}

/// The action id and time of an entry path; `None` unless the path is exactly the one
/// [`entry_path`] gives for them (bucket, digits and id).
pub fn parse_entry(path: &str) -> Option<(ActionId, Timestamp)> {
    let name = path.rsplit('/').next()?;
    let (ms, id) = name.split_once('.')?;
    let id = ActionId::parse(id)?;
    let at = Timestamp::from_millis(ms.parse::<i64>().ok()?);
    (entry_path(&id, at) == path).then_some((id, at))
}

/// One pending-index entry: the action, its creation time and the entry's path.
pub type Entry = (ActionId, Timestamp, String);

/// The entries created before `cutoff`, oldest first, with their paths, reading only the
/// buckets that can hold such entries (and, of those, the names). `stop` is asked before each
/// bucket; `None` when it said to stop. Names that are not entries are left to `verify`.
///
/// # Errors
/// [`store::Error`] when the snapshot cannot be read.
pub fn entries_before(
    snap: &Snapshot<'_>,
    cutoff: Timestamp,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Vec<Entry>>, store::Error> {
    entries(snap, Some(cutoff), stop)
}

/// Every entry, oldest first, with its path (the names only: no record is read). The sweep
/// reads them all, because it times an action from when it first saw it on its own clock, not
/// from its `created_at` ([`super::sweep`](mod@super::sweep)). As [`entries_before`] otherwise.
///
/// # Errors
/// [`store::Error`] when the snapshot cannot be read.
pub fn all_entries(
    snap: &Snapshot<'_>,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Vec<Entry>>, store::Error> {
    entries(snap, None, stop)
}

fn entries(
    snap: &Snapshot<'_>,
    cutoff: Option<Timestamp>,
    stop: &dyn Fn() -> bool,
) -> Result<Option<Vec<Entry>>, store::Error> {
    let last = cutoff.map(format_time);
    let last = last.as_deref().map(|t| (&t[..10], &t[11..13]));
    let mut out = Vec::new();
    let mut days = snap.entry_names(PENDING)?;
    days.sort_unstable();
    for day in days {
        if last.is_some_and(|(last_day, _)| day.as_str() > last_day) {
            break;
        }
        let day_dir = format!("{PENDING}/{day}");
        let mut hours = snap.entry_names(&day_dir)?;
        hours.sort_unstable();
        for hour in hours {
            if last
                .is_some_and(|(last_day, last_hour)| day == last_day && hour.as_str() > last_hour)
            {
                break;
            }
            let dir = format!("{day_dir}/{hour}");
            if stop() {
                return Ok(None);
            }
            let mut names = snap.entry_names(&dir)?;
            names.sort_unstable();
            for name in names {
                let path = format!("{dir}/{name}");
                if let Some((id, at)) = parse_entry(&path)
                    && cutoff.is_none_or(|c| at < c)
                {
                    out.push((id, at, path));
                }
            }
        }
    }
    out.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_only_at_their_bucket() {
        let id = ActionId::parse("act_case").unwrap();
        let at = Timestamp::from_millis(1_772_366_400_123);
        let p = entry_path(&id, at);
        assert_eq!(
            p,
            "finality/v1/pending/2026-03-01/12/1772366400123.act_case"
        );
        assert_eq!(parse_entry(&p), Some((id.clone(), at)));
        for bad in [
            "finality/v1/pending/2026-03-01/13/1772366400123.act_case",
            "finality/v1/pending/2026-03-02/12/1772366400123.act_case",
            "finality/v1/pending/2026-03-01/12/01772366400123.act_case",
            "finality/v1/pending/2026-03-01/12/1772366400123.act.case",
            "finality/v1/pending/2026-03-01/12/1772366400123",
            "finality/v1/pending/2026-03-01/1772366400123.act_case",
        ] {
            assert_eq!(parse_entry(bad), None, "{bad}");
        }
    }
}
