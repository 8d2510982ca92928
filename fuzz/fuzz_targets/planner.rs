#![no_main]
//! The read planner: blocks, read-ahead, runs and parts keep their invariants.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| remfile::fuzzing::planner(data));
