#![no_main]
//! The HDF5 metadata parsers: no panic, bounded and well-formed findings on any bytes.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| remfile::fuzzing::hdf5_metadata(data));
