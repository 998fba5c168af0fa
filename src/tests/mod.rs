//! Cross-module tests: the conformance vectors under `testdata/` and the canonical limits end to end.

pub(crate) mod boundary;
pub(crate) mod conformance;

/// The test harness's name of test `test` in the module whose `module_path!()` is `module`
/// (the crate name dropped), for a test that launches another test of this binary with
/// `--ignored --exact`.
pub(crate) fn name_of(module: &str, test: &str) -> String {
    let (_crate, path) = module
        .split_once("::")
        .expect("a test module is inside the crate");
    format!("{path}::{test}")
}
