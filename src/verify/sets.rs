//! The checks of one shard set against the ledger: its reservation, completion marker and
//! producer-run binding (bytes recomputed and compared), every event's identity binding and
//! parent edge, duplicate events, broken sets and the reserved sets of a revision.

use super::*;

impl Ctx<'_, '_> {
    /// Verifies one shard set (all files sharing a set key); returns its events' ids.
    pub(super) fn verify_set(&mut self, paths: &[String]) -> Result<Vec<Digest>, Error> {
        let mut prepared = Vec::with_capacity(paths.len());
        for path in paths {
            let read = self.read_shard(path)?;
            prepared.push(prepare(path, &read, self.layout, self.privacy));
        }
        self.check_set(paths, prepared)
    }

    /// The checks of one shard set that need the whole ledger's state, on its shards prepared
    /// by [`prepare`] (in the order of `paths`); returns its events' ids.
    pub(super) fn check_set(
        &mut self,
        paths: &[String],
        prepared: Vec<Prepared>,
    ) -> Result<Vec<Digest>, Error> {
        self.check_set_keeping(paths, prepared).map(|(ids, _)| ids)
    }

    /// [`Ctx::check_set`], also handing back the shards that passed their checks on their own
    /// (in the order of `paths`; all of them when none broke), for a reader that hands their
    /// events out ([`super::LogGate`]).
    pub(super) fn check_set_keeping(
        &mut self,
        paths: &[String],
        prepared: Vec<Prepared>,
    ) -> Result<(Vec<Digest>, Vec<Shard>), Error> {
        // A set can come without members: a push names a shard path that the tree does not
        // reach as a file (an entry name holding a '/' is one such path; its malformed tree is
        // reported where the tree is read). There is nothing of it to check.
        if paths.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut shards = Vec::with_capacity(paths.len());
        let mut binding_ids = Vec::with_capacity(paths.len());
        let mut replays = Vec::with_capacity(paths.len());
        for (path, p) in paths.iter().zip(prepared) {
            self.report.shards += 1;
            self.report.events += p.events;
            for detail in p.strict {
                self.finding(path, Rule::PrivacyStrict, detail);
            }
            match p.outcome {
                Outcome::Absent => {}
                Outcome::Broken(rule, detail) => self.finding(path, rule, detail),
                Outcome::Good(shard, ids, replay) => {
                    shards.push(shard);
                    binding_ids.push(ids);
                    replays.push(replay);
                }
            }
        }
        if shards.len() != paths.len() {
            self.claim_broken(paths)?;
            return Ok((Vec::new(), shards));
        }
        // Identity and path.
        let mut identity: Option<ShardIdentity> = None;
        let mut misplaced = None;
        for s in &shards {
            let (date, part) = shard::parse_path(&s.path).expect("classified as a shard");
            let id = match s.events[0].shard_identity(&date).normalized() {
                Ok(id) => id,
                Err(e) => {
                    misplaced = Some((s.path.clone(), e.to_string()));
                    break;
                }
            };
            match shard::relative_path(&id, part) {
                Ok(expected) if expected == s.path => {}
                Ok(expected) => {
                    misplaced = Some((
                        s.path.clone(),
                        format!("the events' identity gives {expected}"),
                    ));
                    break;
                }
                Err(e) => {
                    misplaced = Some((s.path.clone(), e.to_string()));
                    break;
                }
            }
            identity = Some(id);
        }
        if let Some((path, detail)) = misplaced {
            self.finding(&path, Rule::ShardPath, detail);
            self.claim_broken(paths)?;
            return Ok((Vec::new(), shards));
        }
        let id = identity.expect("at least one shard");
        // Parts.
        let parts: Vec<Option<shard::Part>> = shards
            .iter()
            .map(|s| shard::parse_path(&s.path).and_then(|(_, p)| p))
            .collect();
        let numbered = parts.iter().flatten().count();
        let first = &shards[0].path;
        let findings_before = self.report.findings.len();
        if numbered == 0 && shards.len() > 1 {
            self.finding(first, Rule::PartsIncomplete, "repeated unnumbered shards");
        } else if numbered != 0 && numbered != shards.len() {
            self.finding(
                first,
                Rule::PartsIncomplete,
                "numbered and unnumbered shards mixed",
            );
        } else if numbered != 0 {
            let count = parts[0].map_or(0, |p| p.1);
            let mut indices: Vec<u32> = parts.iter().flatten().map(|p| p.0).collect();
            indices.sort_unstable();
            let complete = parts.iter().flatten().all(|p| p.1 == count)
                && indices == (1..=count).collect::<Vec<_>>();
            if !complete {
                self.finding(
                    first,
                    Rule::PartsIncomplete,
                    format!("parts {indices:?} of {count}"),
                );
            } else if count == 1 {
                // One part whose events are already in exact canonical causal order (checked
                // above, with its bytes equal to their lines): greedy packing leaves it whole
                // exactly when it is within both part limits. Repacking would only re-derive it.
                let s = &shards[0];
                if s.events.len() > shard::MAX_EVENTS || s.content.len() > shard::MAX_BYTES {
                    self.finding(
                        first,
                        Rule::PartsNotDeterministic,
                        "the parts are not the deterministic packing of their events",
                    );
                }
            } else {
                let all: Vec<Event> = shards
                    .iter()
                    .flat_map(|s| s.events.iter().cloned())
                    .collect();
                let same = event::sort_causally(all)
                    .map_err(shard::Error::from)
                    .and_then(|sorted| shard::pack(&id, sorted))
                    .is_ok_and(|repacked| {
                        repacked.len() == shards.len()
                            && repacked
                                .iter()
                                .zip(&shards)
                                .all(|(r, s)| r.path == s.path && r.content == s.content)
                    });
                if !same {
                    self.finding(
                        first,
                        Rule::PartsNotDeterministic,
                        "the parts are not the deterministic packing of their events",
                    );
                }
            }
        }
        if self.report.findings.len() != findings_before {
            // The bindings describe the correct packing; comparing them would repeat the finding.
            self.claim_broken(paths)?;
            return Ok((Vec::new(), shards));
        }
        // Set bindings.
        let parts: Vec<(&str, Digest)> = shards
            .iter()
            .zip(replays)
            .map(|(s, replay)| (s.path.as_str(), replay))
            .collect();
        let (res_path, res_expected) = binding::shard_set_of(self.layout, &id, &parts);
        self.claim(&res_path);
        self.report.bindings += 1;
        let reservation = self.binding_id(&res_path)?;
        let (comp_path, _) = binding::completion(self.layout, &id, "");
        match reservation {
            None => self.finding(
                &res_path,
                Rule::ReservationMissing,
                format!("no shard-set reservation for {first}"),
            ),
            Some(found) if found != BlobId::of(res_expected.as_bytes())? => {
                let text = self.read_binding(found, &res_path)?;
                let rule = if binding::parse_shard_set(&text, &id).is_some() {
                    Rule::ReservationMismatch
                } else {
                    Rule::ReservationInvalid
                };
                self.finding(
                    &res_path,
                    rule,
                    format!("does not list exactly the parts of {first} with their replay digests"),
                );
            }
            Some(_) => {}
        }
        if reservation.is_some() {
            // Against the reservation the publisher writes, so that one forged file is one finding.
            let (_, expected) = binding::completion(self.layout, &id, &res_expected);
            self.expect_binding(
                &comp_path,
                &expected,
                Rule::CompletionMissing,
                Rule::CompletionInvalid,
                "the completion marker (without it the set is invisible)",
            )?;
        } else {
            // Missing reservation already reported; a completion beside it is part of that defect.
            self.claim(&comp_path);
        }
        let (run_path, run_expected) = binding::producer_run(self.layout, &id);
        self.expect_binding(
            &run_path,
            &run_expected,
            Rule::ProducerRunMissing,
            Rule::ProducerRunMismatch,
            "the producer-run binding",
        )?;
        // Event bindings and global bookkeeping.
        let mut ids = Vec::new();
        for (s, binding_ids) in shards.iter().zip(&binding_ids) {
            let index = self.shard_paths.len() as u32;
            self.shard_paths.push(s.path.clone());
            for (e, id) in s.events.iter().zip(binding_ids) {
                let expected = match id {
                    Some(id) => *id,
                    None => BlobId::of(binding::event(self.layout, e).1.as_bytes())?,
                };
                let path = Kind::Event.path(self.layout, &e.event_id);
                self.expect_binding_id(
                    &path,
                    expected,
                    Rule::EventBindingMissing,
                    Rule::EventBindingMismatch,
                    "the event identity binding",
                )?;
                self.events.push(Seen {
                    id: e.event_id.bytes(),
                    parent: e.parent_event_id.as_ref().map(Digest::bytes),
                    shard: index,
                });
                ids.push(e.event_id.clone());
            }
        }
        Ok((ids, shards))
    }

    /// Claims the bindings of a set that could not be verified, as far as its bytes allow (event
    /// ids from lines that are JSON; set bindings from the first line's producer and the path's
    /// date), so that one broken shard is one finding rather than a cascade of orphans.
    pub(super) fn claim_broken(&mut self, paths: &[String]) -> Result<(), Error> {
        let mut identity = None;
        for path in paths {
            // Lossy and past the shard cap (bounded): a shard refused for its size or bytes still
            // names the events whose bindings belong to it.
            let text = match self.view.read_unchecked(path, CLAIM_READ_MAX) {
                Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Ok(None) | Err(store::Error::TooLarge { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            for line in text.lines() {
                let Ok(v) = crate::canonical::parse(line) else {
                    continue;
                };
                if let Some(id) = v
                    .get("event_id")
                    .and_then(|x| x.as_str())
                    .and_then(Digest::parse)
                {
                    self.claim_key(Kind::Event, id.bytes());
                }
                if identity.is_none()
                    && let (Some(p), Some((date, _))) = (v.get("producer"), shard::parse_path(path))
                {
                    let f = |k: &str| p.get(k).and_then(|x| x.as_str()).unwrap_or("").to_owned();
                    identity = ShardIdentity {
                        repository: f("repository"),
                        sha: f("sha"),
                        producer: f("component"),
                        workflow: f("workflow"),
                        job: f("job"),
                        run_id: f("run_id"),
                        run_attempt: p
                            .get("run_attempt")
                            .and_then(|x| x.as_safe_integer())
                            .unwrap_or(0),
                        partition_date: date,
                    }
                    .normalized()
                    .ok();
                }
            }
        }
        if let Some(id) = identity {
            let (res, _) = binding::shard_set(self.layout, &id, &[]);
            let (comp, _) = binding::completion(self.layout, &id, "");
            let (run, _) = binding::producer_run(self.layout, &id);
            for path in [res, comp, run] {
                self.claim(&path);
            }
        }
        Ok(())
    }

    /// A reservation that lists a shard present in the tree belongs to that (broken) set, and so
    /// do its completion marker and producer-run binding: claim them so that the broken set is
    /// reported once, not again as orphans.
    pub(super) fn claim_reserved_sets(
        &mut self,
        sets: &BTreeMap<String, Vec<String>>,
    ) -> Result<(), Error> {
        let Some(index) = &self.index else {
            return Ok(());
        };
        let unclaimed: Vec<(Key, BlobId)> = index
            .entries
            .iter()
            .zip(&index.claimed)
            .filter(|((kind, _, _), claimed)| *kind == Kind::ShardSet && !**claimed)
            .map(|((_, key, id), _)| (*key, BlobId::from_bytes(id)))
            .collect();
        for (key, blob) in unclaimed {
            let path = Kind::ShardSet.path(self.layout, &Digest::from_bytes(&key));
            let text = self.read_binding(blob, &path)?;
            let Ok(v) = crate::canonical::parse(text.trim_end()) else {
                continue;
            };
            let listed = v
                .get("shards")
                .and_then(|s| s.as_array())
                .unwrap_or(&[])
                .iter()
                .filter_map(|e| e.get("path").and_then(|p| p.as_str()))
                .any(|p| sets.contains_key(&set_key(p)));
            if !listed {
                continue;
            }
            self.claim_key(Kind::ShardSet, key);
            self.claim_key(Kind::Completion, key);
            if let Some(crate::canonical::Value::Object(mut producer)) = v.get("producer").cloned()
            {
                producer.remove("partitionDate");
                let run = Digest::of(crate::canonical::to_canonical_unchecked(
                    &crate::canonical::Value::Object(producer),
                ));
                self.claim_key(Kind::ProducerRun, run.bytes());
            }
        }
        Ok(())
    }
}
