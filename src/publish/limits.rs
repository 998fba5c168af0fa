//! Import limits: the reference importer's `ACTION_EVENT_SHARD_IMPORT_LIMITS`, checked while a
//! source is read and validated. A source past any of them is refused whole.

/// Deepest level below `ledger/v1/events` (files at `YYYY/MM/DD/repo/producer/file`).
pub const MAX_DEPTH: usize = 6;
/// Entries of one source directory.
pub const MAX_ENTRIES_PER_DIRECTORY: usize = 512;
/// Source directories traversed.
pub const MAX_DIRECTORIES: usize = 512;
/// Regular files of a source (all count, not only `*.jsonl`).
pub const MAX_FILES: usize = 256;
/// Bytes of one shard file (2 MiB).
pub const MAX_FILE_BYTES: usize = 2 * 1024 * 1024;
/// Lines of one shard file.
pub const MAX_FILE_LINES: usize = 2048;
/// Events of one shard file.
pub const MAX_FILE_EVENTS: usize = 1024;
/// Bytes of a whole batch (16 MiB).
pub const MAX_TOTAL_BYTES: usize = 16 * 1024 * 1024;
/// Events of a whole batch (256 files of 1,024).
pub const MAX_TOTAL_EVENTS: usize = 262_144;
/// Distinct event identity bindings read while planning.
pub const MAX_CAUSAL_BINDINGS: usize = 262_144;
/// Paths of one publication: every event binding plus four per shard.
pub const MAX_PUBLISH_PATHS: usize = 262_144 + 256 * 4;
/// Bytes of one binding file read from the ledger (1 MiB).
pub const MAX_BINDING_BYTES: u64 = 1024 * 1024;
