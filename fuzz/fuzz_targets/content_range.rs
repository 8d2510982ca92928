#![no_main]
//! `Content-Range` parsing: no panic, and what is accepted is consistent.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| remfile::fuzzing::content_range(data));
