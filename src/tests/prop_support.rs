//! What the property and model-based tests share: their configuration.
#![cfg(test)]

use proptest::test_runner::Config;

/// The configuration of a property: `PROPTEST_CASES` cases when set (for long runs), else
/// `default_cases`; failing cases are not persisted (no test writes into the checkout: a failure
/// prints its minimal case and seed instead).
pub(crate) fn config(default_cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}
