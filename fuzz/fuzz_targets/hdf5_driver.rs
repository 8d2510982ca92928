#![no_main]
//! The whole HDF5 driver over an in-memory server: open, the metadata crawl,
//! the chunk read-ahead, a walk of every object and reads of datasets, on
//! mutated HDF5 files served at sizes up to 2^50 bytes, compared with HDF5's
//! own driver on the same bytes (see `remfile_testkit::fuzz::hdf5_driver`).

use libfuzzer_sys::{fuzz_mutator, fuzz_target};

use remfile_testkit::fuzz::{HEADER_LEN, hdf5_driver, mutate_metadata};

fuzz_target!(|data: &[u8]| hdf5_driver(data));

// Half the mutations libFuzzer's own (bytes anywhere, lengths change), half
// aimed at the fields of HDF5's structures and at the claimed size.
fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    if seed % 2 == 0 || size <= HEADER_LEN {
        libfuzzer_sys::fuzzer_mutate(data, size, max_size)
    } else {
        mutate_metadata(&mut data[..size], HEADER_LEN, seed / 2);
        size
    }
});
