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

/// What an observer was told, in order: the tests' view of a stage.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    Begin(&'static str, Option<u64>),
    Advance(u64, u64),
    End,
}

/// An observer that keeps every call, for tests that check what work reports.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct Recording(std::sync::Mutex<Vec<Seen>>);

#[cfg(test)]
impl Recording {
    /// The calls so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.0.lock().expect("not poisoned").clone()
    }

    /// The units and events of every advance, summed.
    pub(crate) fn advanced(&self) -> (u64, u64) {
        self.seen().iter().fold((0, 0), |(u, e), s| match s {
            Seen::Advance(du, de) => (u + du, e + de),
            _ => (u, e),
        })
    }
}

#[cfg(test)]
impl Progress for Recording {
    fn begin(&self, unit: &'static str, total: Option<u64>) {
        self.0
            .lock()
            .expect("not poisoned")
            .push(Seen::Begin(unit, total));
    }
    fn advance(&self, units: u64, events: u64) {
        self.0
            .lock()
            .expect("not poisoned")
            .push(Seen::Advance(units, events));
    }
    fn end(&self) {
        self.0.lock().expect("not poisoned").push(Seen::End);
    }
}
