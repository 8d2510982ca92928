//! Tests that need a tool (nginx, s3s-fs, a Python with h5py) are ignored,
//! with the reason and the command that runs them, so that `cargo test`
//! lists them as not run; asked for (`--ignored`), a missing tool fails
//! the test ([`needed`]).

/// Fails the test that was asked to run without `what`, saying how to get it.
pub fn needed(what: &str) -> ! {
    panic!("{what}, which this test needs: `bash .ci/run` installs it and runs every test")
}
