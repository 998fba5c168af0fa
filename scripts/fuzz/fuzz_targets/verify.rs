//! Fuzz target `verify`: see `check_verify` in ../checks.rs.
#![no_main]
#![allow(dead_code)]

use action_ledger as al;
use libfuzzer_sys::fuzz_target;

include!("../checks.rs");

fuzz_target!(|data: &[u8]| check_verify(data));
