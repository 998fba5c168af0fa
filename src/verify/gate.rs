//! The gate of a reader that hands the ledger's events out (`log`): `verify`'s own checks of
//! each shard set, so that no event is presented from a shard `verify` refuses.

use super::*;

/// `verify`'s checks of the shard sets a reader hands out ([`crate::log`]), run set by set as
/// the reader goes: each shard on its own ([`check_shard`]: canonical lines, valid events in
/// causal order, one producer), its entry (a plain `100644` file, [`Rule::EntryMode`]), and its
/// set against the ledger as a push range checks it (the path its events' identity gives
/// [`Rule::ShardPath`], complete and deterministically packed parts, the reservation,
/// completion marker and producer-run binding the publisher writes, every event's binding).
/// The same code as [`verify_revision`] runs, under the `reference` privacy profile (the strict
/// families are findings about values, not about whether the set is ledger data).
///
/// Checks that need the whole ledger (bindings without shards, an event id in two sets, cycles
/// across sets) are `verify`'s alone: they do not make a set's events other than published.
pub struct LogGate<'s, 'r> {
    ctx: Ctx<'s, 'r>,
}

/// One shard as [`LogGate::check`] returns it: its events in file order, or the rule it (or
/// its set) breaks with the detail.
pub type GateResult = Result<Vec<Event>, (Rule, String)>;

impl<'s, 'r> LogGate<'s, 'r> {
    /// A gate over `snap`, in the layout its ledger records.
    ///
    /// # Errors
    /// [`Error::Store`] when the layout record cannot be read.
    pub fn new(snap: &'s Snapshot<'r>) -> Result<Self, Error> {
        Ok(LogGate {
            ctx: Ctx::new(snap, Profile::Reference)?,
        })
    }

    /// Checks a batch of shards, given in path order with their text as read (or why it is not
    /// text); every set they belong to must be whole in the batch (see [`set_key`]). Shards are
    /// checked on their own on all cores, then set by set on this thread. Returns one result
    /// per shard, in the order given: a shard of a set that breaks a rule is refused with that
    /// rule even when the finding is about a sibling or a binding (its detail names the path).
    ///
    /// # Errors
    /// [`Error::Store`] when a binding or tree cannot be read.
    pub fn check(
        &mut self,
        batch: Vec<(String, Result<String, shard::Error>)>,
    ) -> Result<Vec<GateResult>, Error> {
        let (paths, reads): (Vec<String>, Vec<ShardRead>) =
            batch.into_iter().map(|(p, text)| (p, Some(text))).unzip();
        let items: Vec<(&str, ShardRead)> = paths.iter().map(String::as_str).zip(reads).collect();
        let prepared = prepare_all(&items, self.ctx.layout, self.ctx.privacy);
        drop(items);
        let mut out = Vec::with_capacity(paths.len());
        let mut prepared = prepared.into_iter();
        let mut at = 0;
        while at < paths.len() {
            let key = set_key(&paths[at]);
            let end = paths[at..]
                .iter()
                .position(|p| set_key(p) != key)
                .map_or(paths.len(), |n| at + n);
            let members = &paths[at..end];
            let set: Vec<Prepared> = prepared.by_ref().take(members.len()).collect();
            out.extend(self.check_one_set(members, set)?);
            at = end;
        }
        // Only the set's own findings matter here: what was gathered for the ledger-wide
        // checks is dropped, so that memory follows the batch, not the ledger.
        self.ctx.events = Events::default();
        self.ctx.shard_paths.clear();
        self.ctx.claimed.clear();
        self.ctx.report.findings.clear();
        Ok(out)
    }

    /// One whole set: entry modes, then [`Ctx::check_set_keeping`].
    fn check_one_set(
        &mut self,
        paths: &[String],
        set: Vec<Prepared>,
    ) -> Result<Vec<GateResult>, Error> {
        // Each member's own refusal, before the set's checks consume the preparation.
        let own: Vec<Option<(Rule, String)>> = set
            .iter()
            .map(|p| match &p.outcome {
                Outcome::Broken(rule, detail) => Some((*rule, detail.clone())),
                _ => None,
            })
            .collect();
        let before = self.ctx.report.findings.len();
        for path in paths {
            if let Some(mode) = self.ctx.view.snapshot().mode(path)?
                && !mode.is_regular_file()
            {
                self.ctx
                    .report
                    .findings
                    .push(entry_mode_finding(path, mode));
            }
        }
        let (_, shards) = self.ctx.check_set_keeping(paths, set)?;
        let found: Vec<Finding> = self.ctx.report.findings.drain(before..).collect();
        let first = found
            .first()
            .map(|f| (f.rule, f.path.clone(), f.detail.clone()));
        let mut shards = shards.into_iter().peekable();
        let mut out = Vec::with_capacity(paths.len());
        for (path, own) in paths.iter().zip(own) {
            let events = match shards.peek() {
                Some(s) if own.is_none() && s.path == *path => {
                    shards.next().map(|s| s.events).unwrap_or_default()
                }
                _ => Vec::new(),
            };
            out.push(match (own, &first) {
                (Some(refusal), _) => Err(refusal),
                (None, Some((rule, at, detail))) if at == path => Err((*rule, detail.clone())),
                (None, Some((rule, at, detail))) => Err((*rule, format!("{at}: {detail}"))),
                (None, None) => Ok(events),
            });
        }
        Ok(out)
    }
}
