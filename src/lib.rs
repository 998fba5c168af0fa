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
//! claim / outcome / sweep ──> create-only records under finality/v1/,      finality
//!             the same commit discipline
//! serve   ──> the finality operations over HTTP, group-committed           server
//! ```
//!
//! Every stage is a pure function of its inputs and of the tip it builds on: replaying the
//! same input is a no-op (`unchanged`), and different content under an existing identity is a
//! conflict that writes nothing. The library never reads the clock or the environment; the
//! [`cli`] resolves them into values.
//!
//! # Modules
//!
//! The list goes from the bottom up: a module uses those above it. Where one still reaches up,
//! it is named here until the edge is removed: `privacy::strict` walks [`event`] records;
//! [`durable`] and [`store`] use each other; [`view`] and [`publish`] share the tree reader;
//! [`publish`] runs [`verify`]'s rules before it lands; [`verify`] checks compacted months
//! ([`compact`]) and finality records ([`finality`]); [`compact`] reads through [`log`];
//! [`writer`] hands each recorded event to [`live`].
//!
//! - [`canonical`]: canonical JSON, the value model, encoder, strict parser and limits.
//! - [`identity`]: content-derived identities: repository normalization, slugs, digests.
//! - [`finding`]: the rules a revision can break, findings and reports, shared by every checker.
//! - [`process`]: whether a process id names a live process, and its incarnation.
//! - [`time`]: the one millisecond timestamp type and the reference's timestamp grammar.
//! - [`durable`]: the crash-safe write discipline for files inside a Git repository.
//! - [`progress`]: progress of long work, reported to an observer the caller passes in.
//! - [`privacy`]: the reference's field rules and confidential-identifier boundary, and the
//!   [`privacy::strict`] profile.
//! - [`event`]: the event record: validation, semantic digest, causal order.
//! - [`ledger`]: the pure file formats: [`ledger::shard`], [`ledger::binding`],
//!   [`ledger::layout`], [`ledger::segment`].
//! - [`writer`]: the writer side, without Git: [`writer::files`] (handle-relative files),
//!   [`writer::lock`], [`writer::spool`], [`writer::record`], [`writer::interrupt`],
//!   [`writer::seal`].
//! - [`live`]: live projection: each recorded event posted to CrabFleet through a durable
//!   outbox beside the spool; a failed delivery becomes a `projection.failed` event.
//! - [`store`]: all Git access: objects, trees, [`store::pack`] writing, refs with
//!   compare-and-swap, snapshots, history, and the `git` transport in [`store::remote`].
//! - [`view`]: the ledger as readers see it, compacted shards present with their bytes.
//! - [`publish`]: the publisher: validation, bindings, landing locally or on a remote.
//! - [`verify`]: offline verification of a revision or a push range.
//! - [`compact`]: monthly segments after the retention window.
//! - [`log`]: the events of a revision in canonical order, filtered.
//! - [`finality`]: execution finality: actions, the one claim, the one outcome, the sweep.
//! - [`server`]: `serve`, the finality API over HTTP.
//! - [`cli`]: the command line, the only place that reads the process's environment.
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
//! finality/v1/actions/<sha256(id)[0:2]>/<id>/action.json       the binding of a governed action
//!                                           claim.json, outcome.json, approval.json
//! finality/v1/decisions/<sha256(id)[0:2]>/<id>.json            guard decisions of serve
//! ```
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
pub mod cli;
pub mod compact;
pub mod durable;
pub mod event;
pub mod finality;
pub mod finding;
pub mod identity;
pub mod ledger;
pub mod live;
pub mod log;
pub mod privacy;
pub mod process;
pub mod progress;
pub mod publish;
pub mod server;
pub mod store;
#[cfg(test)]
mod tests;
pub mod time;
pub mod verify;
pub mod view;
pub mod writer;
