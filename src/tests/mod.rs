//! Cross-module tests: the conformance vectors under `testdata/` and the canonical limits end to end.

pub(crate) mod boundary;
pub(crate) mod conformance;
