//! Every byte format this crate writes, in one place: where it lives, how its version is
//! marked, which module defines it, and the rule for changing it.
//!
//! This page is the index; the module each row names holds the detail (field by field, with
//! the source of each rule). Everything under `ledger/v1/` and `finality/v1/` of a state
//! repository is canonical JSON ([`crate::canonical`]: sorted keys, no whitespace, the
//! reference's number and string forms) or canonical JSON lines, stored with mode `100644`.
//!
//! # Formats of the reference
//!
//! These bytes are the reference's (the TypeScript system whose conformance vectors and corpus
//! are reproduced byte for byte under `testdata/`). They change only when the reference changes
//! them: a new reference version gets new vectors first, then code that reproduces them. A
//! field the reference does not write is never added here, not even an optional one.
//!
//! | Format | Where | Version marker | Defined in |
//! |---|---|---|---|
//! | Event record | spool `<repo dir>/<event_id>.json`, one line of a shard | `schema: "clawsweeper.state-ledger-event.v1"` | [`crate::event`] |
//! | Partition marker | spool `_partitions/<sha256>.txt` | none (`YYYY-MM-DD\n`) | [`crate::writer::spool`] |
//! | Seal (producer finalization) | spool `_finalizations/<sha256>.json` | `schema: "clawsweeper.action-ledger-producer-finalization"` | [`crate::writer::seal`] |
//! | Producer and import locks | spool `_locks/`, repository | `schema: "clawsweeper.action-ledger-producer-lock"`, `…-import-lock` | [`crate::writer::lock`] |
//! | Shard part | `ledger/v1/events/YYYY/MM/DD/<repo>/<producer>/…-part-<i>-of-<n>.jsonl` | the events' `schema`; the path | [`crate::ledger::shard`] |
//! | Producer-run binding | `ledger/v1/import-bindings/producer-runs/<sha256>.json` | `schema: "clawsweeper.action-ledger-import-producer-run"` | [`crate::ledger::binding`] |
//! | Event binding | `ledger/v1/import-bindings/events/<event_id>.json` | `schema: "clawsweeper.action-ledger-import-event"` | [`crate::ledger::binding`] |
//! | Shard-set reservation | `ledger/v1/import-bindings/shard-sets/<sha256>.json` | `schema: "clawsweeper.action-ledger-import-shard-set"` | [`crate::ledger::binding`] |
//! | Completion marker | `ledger/v1/import-bindings/completed-shard-sets/<sha256>.json` | `schema: "clawsweeper.action-ledger-import-shard-set-completion"` | [`crate::ledger::binding`] |
//! | CrabFleet request body | posted, and `crabfleet-outbox/<seq>.<event_id>.request` | the reference's wire shape | [`crate::live`] |
//! | DashClaw wire contract | `serve`'s HTTP answers | the contract's routes and codes | `src/server/` |
//!
//! # Formats of this crate
//!
//! These are this crate's own design. Each carries `schema` and `schema_version` (or a layout
//! record), and the rule is the same for all: a reader accepts every version that was ever
//! written, and verifies it as it was written; a writer never changes the bytes of a path once
//! written (immutability; the one exception is a month's segment manifest, which each
//! compaction replaces by the next `generation`, and which proves every file it retires), so a
//! new version is a new record kind or a new layout, announced by its marker, never an edit of
//! old files. A repository never mixes two layouts of one kind:
//! moving to a new one is one verified commit (`maintain`) that keeps every record's bytes.
//! The fixture repositories under `testdata/compat/` are written by earlier releases; every
//! release must verify them clean and read them byte for byte (`src/tests/compat.rs`).
//!
//! | Format | Where | Version marker | Defined in |
//! |---|---|---|---|
//! | Ledger layout record | `ledger/v1/layout.json` (`fanout` only; absent: `reference`) | `schema: "action-ledger.state-layout"`, `schema_version: 1` | [`crate::ledger::layout`] |
//! | Segment | `ledger/v1/segments/YYYY/MM/segment-NNNN.jsonl` | the manifest's | [`crate::ledger::segment`] |
//! | Segment manifest | `ledger/v1/segments/YYYY/MM/manifest.json` | `schema: "action-ledger.segment-manifest"`, `schema_version`, `generation` | [`crate::ledger::segment`] |
//! | Finality layout record | `finality/v1/layout.json` (`hex2x2` or `nibble`; absent: `flat`) | `schema: "action-ledger.finality-layout"` | [`crate::finality::layout`] |
//! | Action, claim, outcome | `finality/v1/actions/<fan-out>/<id>/{action,claim,outcome}.json` | `schema: "action-ledger.finality-{action,claim,outcome}"`, `schema_version: 1`; `action.json` may carry `details` (the full action record: goal, act, risk, …; written only when set, so older records keep their bytes) | [`crate::finality::records`], [`crate::finality::details`] |
//! | Operator approval | `finality/v1/actions/<fan-out>/<id>/approval.json` | `schema: "action-ledger.finality-approval"`; `decision` `approve`, `deny` or `expire` (the sweep's), an optional `reasoning` (redacted); `action.json` may carry `approval_wait_seconds` (both keys written only when set, so older records keep their bytes) | [`crate::finality::approval`] |
//! | Containment verdict | `finality/v1/actions/<fan-out>/<id>/containment.json` | `schema: "action-ledger.finality-containment"`; `verdict` `promote` or `discard`, `promotion_action_id` (the grant's, `null` for a discard), an optional `reasoning` (redacted) | [`crate::finality::containment`] |
//! | Guard decision | `finality/v1/decisions/<fan-out>/<id>.json` | `schema: "action-ledger.finality-decision"` | [`crate::finality::decision`] |
//! | Pending index entry | `finality/v1/pending/<day>/<hour>/<created ms>.<id>` (`hex2x2` and `nibble`) | the layout record; an empty file | [`crate::finality::pending`] |
//! | Sweep sightings | `<git dir>/action-ledger/sweep-observations-<hash>.json` (never in the ledger) | `schema: "action-ledger.sweep-observations"`, `schema_version: 1` | [`crate::finality::observations`] |
//! | Confirmed remote tips | `refs/action-ledger/confirmed/<sha256>` in a cache repository | the ref name | [`crate::store::remote`] |
//! | Outbox state files | `.clawsweeper-repair/crabfleet-outbox/*.{intent,sending,delivered,failed,void}` | the file suffix | [`crate::live::outbox`] |
//! | Packs and indexes | `objects/pack/` | Git's pack version 2 and index version 2 (`gitformat-pack(5)`) | [`crate::store::pack`] |
//! | `--json` output lines | the CLI's stdout | `"v": 1` and `"type"` on every line | `src/cli/` |
//! | Projection views (`project --json`) | the CLI's stdout (never in the ledger) | `schema: "action-ledger.project.<view>.v1"` (`status`, `commands`, `review-history`, `notifications`, `evidence`), with `revision` the commit folded at | [`crate::project`] |
//! | Saved projection views (`project --save`, `--from`) | the `--save` file (never in the ledger) | the version line `action-ledger.project.saved.v2`, then the view's document (its `schema` first) in postcard's wire format and a CRC-32; `--from` also reads the JSON document (saved form v1) | [`crate::project::saved`] |
//!
//! A `--json` line may gain fields within `"v": 1` (readers must ignore what they do not
//! know); removing or retyping a field, or changing what one means, raises `"v"`. A projection
//! view follows the same rule with its `schema` string (`….v1` → `….v2`), and `project --from`
//! refuses a saved view of another schema (fold it again instead).
