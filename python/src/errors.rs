//! Failures as Python sees them: the crate's errors as the exceptions of
//! their kind, a configuration string's as a `ValueError`, and the exception
//! a signal handler raised during a wait, kept on its thread until the call
//! that waited raises it.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use remfile::hdf5::driver::{self, config};
use remfile::{Error, ErrorKind};

/// A remote error as the Python exception of its kind, with `errno`,
/// `strerror` and `filename` (the URL without its query string) set: a
/// missing file is a `FileNotFoundError`, a refusal a `PermissionError`, a
/// timeout a `TimeoutError`, a refused connection a
/// `ConnectionRefusedError` (Python picks the subclass from the error
/// number, as for local files); a malformed URL or option a `ValueError`;
/// a read of a closed file (closed before it, or while it waited) the
/// `ValueError` Python's own files raise; a wait stopped by a signal, the
/// exception the signal's handler raised (`KeyboardInterrupt` for Ctrl-C);
/// one stopped otherwise (the process is ending) an `OSError` with
/// `ECANCELED`.
pub(crate) fn to_py(e: Error) -> PyErr {
    // A signal handler's exception, raised during the wait, is the call's
    // whatever the read then failed with.
    if let Some(raised) = take_stopped() {
        return raised;
    }
    // An OSError shows its filename (the URL) after the message: once.
    let os_message = || e.message_without_url();
    match e.kind() {
        ErrorKind::InvalidUrl | ErrorKind::InvalidConfig => PyValueError::new_err(e.to_string()),
        ErrorKind::Closed => PyValueError::new_err("I/O operation on closed file"),
        // Not EINTR: Python's io retries a read that fails with it (PEP
        // 475), and a stop is for good.
        ErrorKind::Interrupted => {
            PyOSError::new_err((libc::ECANCELED, os_message(), e.url().map(str::to_owned)))
        }
        _ => {
            let errno = driver::errno_of(&e).unwrap_or(libc::EIO);
            PyOSError::new_err((errno, os_message(), e.url().map(str::to_owned)))
        }
    }
}

/// The exception a signal handler raised during a wait on this thread,
/// kept until the wait has unwound.
pub(crate) fn take_stopped() -> Option<PyErr> {
    STOPPED.try_with(|s| s.borrow_mut().take()).ok().flatten()
}

thread_local! {
    pub(crate) static STOPPED: std::cell::RefCell<Option<PyErr>> =
        const { std::cell::RefCell::new(None) };
}

pub(crate) fn config_error(e: config::ConfigError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Keeps a `KeyboardInterrupt` on this thread as a stopped wait whose
/// failure no one reported would (for tests: no later call may raise it).
#[pyfunction]
pub(crate) fn _keep_a_stop() {
    let raised = pyo3::exceptions::PyKeyboardInterrupt::new_err(());
    let _ = STOPPED.try_with(|s| *s.borrow_mut() = Some(raised));
}
