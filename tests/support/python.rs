//! The Python the tests run writers and readers with: `REMFILE_PLUGIN_PYTHON`,
//! else the virtual environment `bash .ci/run` makes in `target/plugin-venv`.

use std::path::PathBuf;
use std::process::Command;

/// A Python that imports every one of `modules`, or `None` with a note that
/// the caller's tests are skipped; under `CI=true` a missing one fails.
pub fn with_modules(modules: &[&str]) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("REMFILE_PLUGIN_PYTHON").map(PathBuf::from),
        Some(root.join("target/plugin-venv/bin/python")),
    ];
    let import = format!("import {}", modules.join(", "));
    let found = candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", &import])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        let msg = format!(
            "SKIPPED: no Python with {} (target/plugin-venv), so these tests pass without \
             running (`bash .ci/run` makes one)",
            modules.join(", ")
        );
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{msg}; under CI=true this is a failure");
        }
        eprintln!("{msg}");
    }
    found
}
