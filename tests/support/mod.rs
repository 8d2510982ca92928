//! What only some integration tests use beside the kit they share with the
//! benchmarks and fuzz targets (`remfile_testkit`: the servers, the request
//! parser, the builder for tests): the Python environment, and the rule for
//! skipping a test whose server binary is missing. The files beside this
//! one (HDF5 files, nginx, s3s-fs, TLS, the plugin's build) are included by
//! the tests that use them.
#![allow(dead_code)]

pub mod python;
pub mod skip;
