//! Import limits (runtime §8.1).

pub const MAX_DEPTH: usize = 6;
pub const MAX_ENTRIES_PER_DIRECTORY: usize = 512;
pub const MAX_DIRECTORIES: usize = 512;
pub const MAX_FILES: usize = 256;
pub const MAX_FILE_BYTES: usize = 2 * 1024 * 1024;
pub const MAX_FILE_LINES: usize = 2048;
pub const MAX_FILE_EVENTS: usize = 1024;
pub const MAX_TOTAL_BYTES: usize = 16 * 1024 * 1024;
pub const MAX_TOTAL_EVENTS: usize = 262_144;
pub const MAX_CAUSAL_BINDINGS: usize = 262_144;
pub const MAX_PUBLISH_PATHS: usize = 262_144 + 256 * 4;
pub const MAX_BINDING_BYTES: u64 = 1024 * 1024;
