//! What plain `cargo test` leaves out, listed as ignored tests whose reason
//! says how to run it.
#![cfg(not(feature = "hdf5"))]

#[test]
#[ignore = "the HDF5 driver tests (tests/hdf5.rs, tests/hdf5_release.rs) need the `hdf5` \
            feature and libhdf5-dev: `cargo test --features hdf5`, or `bash .ci/run` for everything"]
fn hdf5_driver_tests() {
    panic!("this build has no `hdf5` feature: run `cargo test --features hdf5`");
}
