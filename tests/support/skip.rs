//! The rule for a test whose tools are missing here: it says `SKIPPED` (once
//! per test binary, past the harness's capture, so `cargo test` shows it) and
//! passes; under `CI=true` it fails instead, so a missing install step
//! cannot pass unnoticed.

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
