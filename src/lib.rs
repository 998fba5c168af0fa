//! action-ledger: an immutable, privacy-bounded action ledger stored natively in Git.
//!
//! Automation that acts on GitHub (review bots, repair agents, CI jobs) records what it does as
//! events. This crate writes those events into a local spool, seals them into immutable JSONL
//! shards, publishes the shards into a Git repository (the *state repository*) as ordinary Git
//! objects with one commit and one compare-and-swap ref update, and proves any revision of that
//! repository consistent offline. Beside the ledger it keeps *execution finality* records: one
//! claim and one outcome per governed action. The bytes it writes for events, shards and bindings
//! are those of an existing TypeScript system (the *reference*); the conformance vectors and a
//! day of the reference's data under `testdata/` are reproduced byte for byte. What the
//! reference leaves open (the Git-native store, the layouts, compaction, where claims live, the
//! CLI) is this crate's own design.
//!
//! # Data flow
//!
//! ```text
//! record  ──> spool: one canonical JSON file per event, create-only        writer::record
//! seal    ──> seal record + shard parts (causal order, ≤ 1024 events,      writer::seal
//!             ≤ 2 MiB each)
//! publish ──> Git objects: shard blobs, reservations, completion markers,  publish, store
//!             edited trees, one commit on the tip it was built on, one
//!             compare-and-swap ref update (locally, or a leased push)
//! verify  ──> findings for a revision, or for a pushed range               verify
//! compact ──> monthly segments + manifest replacing hot shards, one commit compact
//! log     ──> the events of a revision in canonical order                  log, view
//! project ──> deterministic views folded from the events (status, commands,  project
//!             review history, notifications, evidence); a saved view is
//!             brought up to date from the shards a tree diff adds
//! claim / outcome / sweep ──> create-only records under finality/v1/,      finality
//!             the same commit discipline
//! serve   ──> the finality operations over HTTP, group-committed           server
//! ```
//!
//! Every stage is a pure function of its inputs and of the tip it builds on: replaying the
//! same input is a no-op (`unchanged`), and different content under an existing identity is a
//! conflict that writes nothing. The library never reads the clock or the environment; the
//! command line (`src/cli/`, private to the program) resolves them into values.
//!
//! # Example
//!
//! A job records an event, seals its spool and publishes it; the state repository then
//! verifies clean. Beside it, a governed action is created and claimed exactly once. The
//! environment and the clock are values the caller passes in (here a CI job's variables and
//! fixed instants): the library reads neither.
//!
//! ```
//! use action_ledger::{canonical, finality, publish, store, time::Timestamp, verify, writer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let spool_root = dir.path().join("job");
//! std::fs::create_dir_all(&spool_root)?;
//! let env: writer::record::Environment = [
//!     ("CLAWSWEEPER_ACTION_LEDGER_FORCE", "1"),
//!     ("CLAWSWEEPER_ACTION_LEDGER_PARTITION_DATE", "2026-01-15"),
//!     ("GITHUB_REPOSITORY", "openclaw/clawsweeper"),
//!     ("GITHUB_WORKFLOW", "ClawSweeper Review"),
//!     ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
//!     ("GITHUB_JOB", "review"),
//!     ("GITHUB_RUN_ID", "2234567890"),
//!     ("GITHUB_RUN_ATTEMPT", "1"),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_owned(), v.to_owned()))
//! .collect();
//! let now = Timestamp::from_iso("2026-01-15T10:00:00.000Z").expect("a timestamp");
//!
//! // record: one canonical event file in the job's spool.
//! let input = canonical::parse(
//!     r#"{"scope":"review","type":"review.item","component":"example","identity":"item-1",
//!         "subject":{"repository":"openclaw/openclaw","kind":"issue","number":1},
//!         "action":{"name":"review","status":"completed","retryable":false,"mutation":false}}"#,
//! )?;
//! let event = writer::record::record_action(&spool_root, &input, &env, now, &Default::default())?
//!     .expect("recording is enabled");
//!
//! // seal: the spool's shards, in causal order.
//! let spool = writer::spool::Spool::open(&spool_root)?;
//! writer::seal::seal(&spool, None, now, &Default::default())?;
//!
//! // publish: one commit, one compare-and-swap of refs/heads/main.
//! let state = store::Store::open_or_init_bare(&dir.path().join("state.git"), "refs/heads/main")?;
//! let signature = store::Signature {
//!     name: "action-ledger".into(),
//!     email: "action-ledger@example.invalid".into(),
//!     time_seconds: now.millis() / 1000,
//! };
//! let published = publish::publish(&state, &spool_root, &publish::Options::new(signature.clone()))?;
//! assert_eq!(published.status, publish::Status::Created);
//!
//! // verify: the revision is consistent, offline.
//! let report = verify::verify_revision(&state, published.commit.expect("a commit"))?;
//! assert!(report.is_clean(), "{:?} of event {}", report.findings, event.event_id.as_str());
//!
//! // claim: exactly one caller wins an attempt of a governed action.
//! let options = finality::Options::new(signature);
//! let act = canonical::parse(r#"{"kind":"shell","command":"make release"}"#)?;
//! let action = finality::NewAction {
//!     action_id: finality::ActionId::parse("act_release_1").expect("an id"),
//!     agent_id: "release-bot".into(),
//!     principal: "ci-deploy-key".into(),
//!     act: Some(act.clone()),
//!     guard_decision_id: Some("gd_1".into()),
//!     verdict: finality::Verdict::Allow,
//!     client_capabilities: vec![finality::EXECUTION_CLAIMS.into()],
//!     identity_verified: false,
//!     containment_ref: None,
//!     lifecycle: None,
//!     approval_wait_seconds: None,
//!     details: None,
//! };
//! finality::create_action(&state, &options, &action, now)?;
//! let request = |attempt: &str| finality::ClaimRequest {
//!     attempt_id: attempt.into(),
//!     agent_id: Some("release-bot".into()),
//!     principal: Some("ci-deploy-key".into()),
//!     act: Some(act.clone()),
//!     verified: false,
//! };
//! finality::claim(&state, &options, "act_release_1", &request("attempt-000000000001"), now)?;
//! let second = finality::claim(&state, &options, "act_release_1", &request("attempt-000000000002"), now);
//! assert!(second.is_err(), "a second attempt is refused");
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! From the bottom up, in the order of the library's imports (tests may reach anywhere): a
//! module uses only those above it in this list. One edge still runs up and is named here
//! until it is removed: [`writer::seal`] names the event type of [`live`]'s failure events,
//! while [`live`] writes them through [`writer::record`].
//!
//! - [`time`]: the one millisecond timestamp type, calendar dates and the reference's
//!   timestamp grammar.
//! - [`random`]: fresh random bytes and ids from the kernel, failing closed.
//! - [`progress`]: progress of long work, reported to an observer the caller passes in.
//! - [`finding`]: the rules a revision can break, findings and reports, shared by every checker.
//! - [`canonical`]: canonical JSON, the value model, encoder, strict parser and limits.
//! - [`privacy`]: the reference's field rules and confidential-identifier boundary, and the
//!   [`privacy::strict`] profile.
//! - [`identity`]: content-derived identities: repository normalization, slugs, digests (it
//!   uses [`privacy`]'s text rules and [`time`]'s dates).
//! - [`process`]: whether a process id names a live process, and its incarnation.
//! - [`event`]: the event record: validation, its typed [`event::Producer`], semantic digest,
//!   causal order.
//! - [`durable`]: the crash-safe write discipline for files inside a Git repository.
//! - [`ledger`]: the pure file formats: [`ledger::shard`], [`ledger::binding`],
//!   [`ledger::layout`], [`ledger::segment`].
//! - [`store`]: all Git access: objects, trees, [`store::pack`] writing, refs with
//!   compare-and-swap, snapshots, history, the one landing loop of every writer
//!   ([`store::land()`], local or remote), and the `git` transport in [`store::remote`].
//! - [`writer`]: the writer side, without Git: [`writer::files`] (handle-relative files),
//!   [`writer::lock`], [`writer::spool`], [`writer::record`], [`writer::interrupt`],
//!   [`writer::seal`].
//! - [`view`]: the ledger as readers see it, compacted shards present with their bytes.
//! - [`live`]: live projection: each recorded event posted to CrabFleet through a durable
//!   outbox beside the spool; a failed delivery becomes a `projection.failed` event.
//! - [`finality`]: execution finality: actions, the one claim, the one outcome, approvals, the
//!   sweep.
//! - [`publish`]: the publisher: validation, bindings, landing locally or on a remote.
//! - [`compact`]: monthly segments after the retention window.
//! - `server` (`src/server/`, private to the program): `serve`, the finality API over HTTP
//!   and the operators' dashboard, built on [`finality`].
//! - [`verify`]: offline verification of a revision or a push range, compacted months
//!   ([`compact`]) and finality records ([`finality`]) included.
//! - [`log`]: the events of a revision in canonical order, filtered, every shard read through
//!   [`verify`]'s checks.
//! - [`project`]: views folded from the events [`log`] hands out, bounded, the same bytes for
//!   the same events; a saved view is brought up to date from [`log::added_shards`].
//! - `cli` (`src/cli/`, private to the program, entered through [`run_process`]): the command
//!   line, the only place that reads the process's environment.
//!
//! [`formats`] lists every byte format the crate writes, with its version marker and the rule
//! for changing it.
//!
//! # The state repository at a glance
//!
//! ```text
//! ledger/v1/layout.json                                        the layout record (fanout only)
//! ledger/v1/events/YYYY/MM/DD/<repo>/<producer>/<run>-<attempt>-<job>-<d12>-part-<i>-of-<n>.jsonl
//! ledger/v1/import-bindings/producer-runs/<sha256>.json        one per producer run
//! ledger/v1/import-bindings/events/<event_id>.json             one per event identity
//! ledger/v1/import-bindings/shard-sets/<sha256>.json           the reservation of a shard set
//! ledger/v1/import-bindings/completed-shard-sets/<sha256>.json its completion marker
//! ledger/v1/segments/YYYY/MM/segment-NNNN.jsonl, manifest.json compacted months
//! finality/v1/layout.json                                     the finality layout
//! finality/v1/actions/a3/f0/<id>/action.json                   the binding of a governed action
//!                                           claim.json, outcome.json, approval.json,
//!                                           containment.json
//! finality/v1/decisions/a3/f0/<id>.json                       guard decisions of serve
//! finality/v1/pending/<day>/<hour>/<created ms>.<id>           the pending index (empty files)
//! ```
//!
//! The finality paths are those of the `hex2x2` layout (two two-hex-digit levels of
//! `sha256(id)`); repositories written before it are `nibble` (six one-hex-digit levels) or
//! `flat` (one level of two hex digits, no pending index) until `maintain` migrates them
//! ([`finality::layout`]).
//!
//! Shards are described in [`ledger::shard`], bindings in [`ledger::binding`], the `reference`
//! and `fanout` paths (the latter puts binding files under two hex-prefix levels) in
//! [`ledger::layout`], segments and manifests in [`ledger::segment`], the finality records in
//! [`finality`], and the spool a writer fills in [`writer::spool`]. Every file is canonical
//! JSON (or canonical JSON lines) with mode `100644`; nothing else may appear under
//! `ledger/v1/` or `finality/v1/`.
//!
//! # Guarantees
//!
//! - **Immutability.** A path, once written, keeps its bytes: identical bytes are `unchanged`,
//!   anything else is a conflict and nothing is written. History is never rewritten: even a
//!   compaction is an ordinary commit whose manifest proves every shard file it removes. The
//!   pre-receive hook ([`verify`] on the pushed range) refuses deletions, rewrites and invalid
//!   additions on a server, whoever pushes them.
//! - **Fail closed.** Bad input is refused with an error naming the file, field and rule, and
//!   changes nothing: a publication is validated in full, against the tip, before any object
//!   is written, and lands with one compare-and-swap; a moved ref is re-validated and rebuilt,
//!   a busy lock is a different error from a moved ref, and unreadable state is an error, not
//!   an empty ledger.
//! - **Crashes.** Every file a writer creates follows git's own order (temporary file, fsync,
//!   rename, directory fsync; objects before the ref), and success is reported only after all
//!   of it: a crash at any point leaves either the old tip or the new one, never a partial
//!   publication or a corrupt ref. See [`durable`] for the write discipline, [`store`] for
//!   stale ref locks and left-over temporary packs, and [`writer::spool`] for what a killed
//!   writer leaves in a spool.
//! - **Privacy.** Every durable text field passes the privacy boundary before it is written;
//!   a value the ledger refused is never in it, and one found in history is reported as
//!   exposed, since the ledger cannot take it back.
//! - **One winner.** Of any number of concurrent claimers of an action exactly one wins, and an
//!   action has at most one outcome: a report and the sweep race to exactly one.

pub mod canonical;
/// The command-line program as a function, the `action-ledger` binary's whole `main`: parses
/// `args` (the program name first), runs the command with `env` as its whole environment, and
/// returns the exit code. The CLI and `serve` are parts of the program, not of the library's
/// API: their modules are private.
pub use cli::{Env, run_process};
mod cli;
pub mod compact;
pub mod durable;
pub mod event;
pub mod finality;
pub mod finding;
pub mod formats;
pub mod identity;
pub mod ledger;
pub mod live;
pub mod log;
pub mod privacy;
pub mod process;
pub mod progress;
pub mod project;
pub mod publish;
pub mod random;
#[cfg(not(feature = "fuzzing"))]
mod server;
/// `serve`'s router and settings, public only to the fuzz targets (`scripts/fuzz/`, feature
/// `fuzzing`): not part of the library's API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod server;
pub mod store;
#[cfg(test)]
mod tests;
pub mod time;
pub mod verify;
pub mod view;
pub mod writer;
