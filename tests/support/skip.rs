//! Tests that need a tool (nginx, s3s-fs, a Python with h5py) are ignored,
//! with the reason and the command that runs them, so that `cargo test`
//! lists them as not run; asked for (`--ignored`), a missing tool fails
//! the test ([`needed`]). A test that needs what the system may not permit
//! (another user, a PID namespace) says `SKIPPED` and passes ([`missing`]);
//! under `CI=true` it fails instead, so a missing install step cannot pass
//! unnoticed.

/// Fails the test that was asked to run without `what`, saying how to get it.
pub fn needed(what: &str) -> ! {
    panic!("{what}, which this test needs: `bash .ci/run` installs it and runs every test")
}

/// Reports that `what` is missing here, or panics under `CI=true`.
pub fn missing(what: &str) {
    let msg = format!(
        "SKIPPED: {what}, so the tests that need it pass without running \
         (`bash .ci/run` installs it and runs every test)"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}; under CI=true this is a failure");
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{msg}");
    });
}
