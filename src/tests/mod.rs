//! Cross-module tests: the conformance vectors under `testdata/`, the canonical limits end to
//! end, property tests (`prop_*`), model-based tests (`model_*`) and the replay of the fuzzers'
//! regression inputs (`fuzz_regressions`).

pub(crate) mod boundary;
pub(crate) mod conformance;
pub(crate) mod fuzz_regressions;
pub(crate) mod model_finality;
pub(crate) mod prop_identity;
pub(crate) mod prop_privacy;
pub(crate) mod prop_shard;
pub(crate) mod prop_support;

/// The test harness's name of test `test` in the module whose `module_path!()` is `module`
/// (the crate name dropped), for a test that launches another test of this binary with
/// `--ignored --exact`.
pub(crate) fn name_of(module: &str, test: &str) -> String {
    let (_crate, path) = module
        .split_once("::")
        .expect("a test module is inside the crate");
    format!("{path}::{test}")
}
