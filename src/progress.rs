//! Progress of long work (a log over many shards, a publish or seal of many sources), reported
//! to an observer the caller passes in. The library never prints and never reads the clock for
//! it: the observer decides what to show and when (the CLI draws a bar on a terminal, a plain
//! line now and then in a CI log, nothing with `-q`).

/// Receives progress as work goes; every method has a do-nothing default. `Sync`, since work
/// spread across threads may report from any of them.
pub trait Progress: Sync {
    /// A stage of `total` units (`None`: not known in advance) named by `unit` (`"shards"`,
    /// `"sources"`, `"spools"`) begins.
    fn begin(&self, unit: &'static str, total: Option<u64>) {
        let _ = (unit, total);
    }
    /// `units` more units of the stage are done, holding `events` events.
    fn advance(&self, units: u64, events: u64) {
        let _ = (units, events);
    }
    /// The stage is over.
    fn end(&self) {}
}

/// The observer that shows nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Silent;

impl Progress for Silent {}
