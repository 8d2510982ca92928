//! What the driver has to tell a person (a file's statistics at close, a
//! disk cache it cannot use): a `tracing` event always, and printed where
//! the program's front end asks for it. The plugin and the Python package
//! print to standard error (an HDF5 program has no subscriber); a Rust
//! program subscribes to `tracing` as it likes.

use std::sync::OnceLock;

static PRINTER: OnceLock<fn(&str)> = OnceLock::new();

/// Prints what the driver reports with `printer` from now on (the first
/// printer set stays).
///
/// ```
/// remfile::hdf5::driver::print_reports_with(|line| eprintln!("{line}"));
/// ```
pub fn print_reports_with(printer: fn(&str)) {
    let _ = PRINTER.set(printer);
}

/// Reports `line`: a `tracing` event at `level`, printed if a front end
/// asked.
pub(crate) fn report(level: tracing::Level, line: &str) {
    match level {
        tracing::Level::WARN | tracing::Level::ERROR => tracing::warn!("{line}"),
        _ => tracing::info!("{line}"),
    }
    if let Some(print) = PRINTER.get() {
        print(line);
    }
}
