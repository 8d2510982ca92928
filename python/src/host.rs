//! The crate's network waits under Python ([`PythonHost`], the process's
//! [`wait::Host`]): which thread waits, where (inside an HDF5 call or in one
//! of the package's own methods), with or without the GIL, and what a signal
//! does to the wait.

use pyo3::prelude::*;
use remfile::{Error, wait};

use crate::errors::{STOPPED, take_stopped, to_py};
use crate::gil::{self, SAVED, local};
use crate::lifecycle::{ReadFromPython, on_main_thread};

/// The crate's network waits, as Python needs them: without the GIL where
/// that is safe, stopped by Ctrl-C, and failures through h5py raised as the
/// exceptions `RemoteFile` raises.
///
/// A wait runs on the thread that asked for the bytes; the GIL, if this
/// thread holds it, is let go of around the wait and taken back (with the
/// thread state saved then) for a look at signals every poll. Whether this
/// thread holds the GIL is read from the thread state itself
/// ([`gil::held`]), never from `PyGILState_Check`, which says "yes" to
/// every thread once the process has had a subinterpreter.
///
/// Inside HDF5 (a driver callback) no Python code runs: a SIGINT whose
/// handler is Python's default stops the wait with `KeyboardInterrupt`; any
/// other signal, and a SIGINT handler of the program's own, runs once the
/// HDF5 call has returned. Outside HDF5 (the package's own reads), every
/// handler runs as for any blocking call, and one that raises stops it.
///
/// Inside HDF5 the GIL is let go of only where no other code can enter that
/// HDF5 library meanwhile ([`gil::release_inside_hdf5`]).
pub(crate) struct PythonHost;

impl wait::Host for PythonHost {
    fn outside(&self, wait: &mut dyn FnMut()) {
        let inside_hdf5 = !local::get(&FROM_PYTHON);
        let _waiting = inside_hdf5.then(WaitingInsideHdf5::enter);
        let _main = on_main_thread().then(MainThreadWaiting::enter);
        let release = gil::held() && (!inside_hdf5 || gil::release_inside_hdf5());
        if !release {
            wait();
        } else {
            // SAFETY: this thread holds the GIL (read from its thread
            // state), and takes it back with the same state before anything
            // else of Python's runs on it. No PyO3 token lives across the
            // release: this is called from HDF5, under h5py's call, or from
            // a method of the package's that let PyO3 go first.
            let state = unsafe { pyo3::ffi::PyEval_SaveThread() };
            let outer = local::replace(&SAVED, state);
            wait();
            if !inside_hdf5 && !on_main_thread() && wait::everything_stopped() {
                park_until_the_process_ends();
            }
            let state = local::replace(&SAVED, outer);
            // SAFETY: the state saved above (or re-saved by a look at
            // signals), on the same thread.
            unsafe { pyo3::ffi::PyEval_RestoreThread(state) };
        }
        if local::replace(&SIGINT_AFTER, false) {
            // The program's own SIGINT handler runs once HDF5 returned.
            // SAFETY: callable from any thread, with or without the GIL.
            unsafe { PyErr_SetInterrupt() };
        }
        // A stop's exception is raised by the failure it causes (see
        // `to_py`, through `failed_under_a_library` for HDF5), or, if the read ended
        // well all the same (or its failure went unreported), once the
        // call returns (`stop_not_needed`, also at the end of each driver
        // callback): never by a later call.
    }

    fn stop_not_needed(&self) {
        if local::get(&FROM_PYTHON) {
            // The package's own method raises the handler's exception once
            // the read is done (see `from_python`).
            return;
        }
        let Some(raised) = take_stopped() else {
            return;
        };
        let interrupt =
            gil::quietly(|py| raised.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py));
        if interrupt {
            // The Ctrl-C arrives once this call returns.
            // SAFETY: callable from any thread, with or without the GIL.
            unsafe { PyErr_SetInterrupt() };
        }
    }

    fn stop_requested(&self) -> bool {
        if !on_main_thread() {
            // Python runs signal handlers on its main thread only.
            return false;
        }
        if local::get(&FROM_PYTHON) {
            return gil::attached(|py| match py.check_signals() {
                Ok(()) => false,
                Err(raised) => {
                    let _ = STOPPED.try_with(|s| *s.borrow_mut() = Some(raised));
                    true
                }
            });
        }
        gil::quietly(|py| {
            // SAFETY: the GIL is held here; SIGINT alone is looked at (and
            // its flag cleared): no handler runs.
            if unsafe { pyo3::ffi::PyOS_InterruptOccurred() } == 0 {
                return false;
            }
            if sigint_is_python_default(py) {
                let raised = pyo3::exceptions::PyKeyboardInterrupt::new_err(());
                let _ = STOPPED.try_with(|s| *s.borrow_mut() = Some(raised));
                true
            } else {
                local::replace(&SIGINT_AFTER, true);
                false
            }
        })
    }

    fn failed_under_a_library(&self, error: &Error) {
        // h5py reads datasets in `nogil` blocks: the exception is set on
        // this thread's state all the same (taking the GIL for it, as
        // Cython's own `nogil` functions do), and h5py, once it has the GIL
        // again, finds it set.
        gil::quietly(|py| {
            if let Some(raised) = take_stopped() {
                raised.restore(py);
                return;
            }
            if PyErr::occurred(py) {
                return;
            }
            to_py(error.clone()).restore(py);
        });
    }

    fn released(&self) {
        give_memory_back();
    }
}

/// Keeps a thread whose read the interpreter's exit stopped (the
/// package's `atexit` hook) out of Python for good. Taking the GIL back
/// could find the interpreter finalizing, and Python then ends the thread
/// with `pthread_exit`, whose forced unwinding through the crate's frames
/// crashed the exiting process now and then. The thread holds nothing of
/// the crate's here (its read is over) and nothing of h5py's (it was not
/// inside an HDF5 call, which the hook waits for instead); the process's
/// exit ends it.
fn park_until_the_process_ends() -> ! {
    loop {
        std::thread::park();
    }
}

pub(crate) static HOST: PythonHost = PythonHost;

thread_local! {
    /// Whether this thread's read was asked for by the package's own
    /// methods (not by HDF5): then every signal handler may run.
    static FROM_PYTHON: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// How many waits inside HDF5 calls this thread is in.
    static INSIDE_HDF5: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// A SIGINT seen inside HDF5 whose handler is the program's own: raised
    /// again once the call returns.
    static SIGINT_AFTER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as waiting inside an HDF5 call while it lives.
struct WaitingInsideHdf5;

impl WaitingInsideHdf5 {
    fn enter() -> WaitingInsideHdf5 {
        local::replace(&INSIDE_HDF5, local::get(&INSIDE_HDF5) + 1);
        WaitingInsideHdf5
    }
}

impl Drop for WaitingInsideHdf5 {
    fn drop(&mut self) {
        local::replace(&INSIDE_HDF5, local::get(&INSIDE_HDF5).saturating_sub(1));
    }
}

/// How many waits the main thread is in now.
static MAIN_THREAD_WAITS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Counts a wait of the main thread while it lives.
struct MainThreadWaiting;

impl MainThreadWaiting {
    fn enter() -> MainThreadWaiting {
        MAIN_THREAD_WAITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        MainThreadWaiting
    }
}

impl Drop for MainThreadWaiting {
    fn drop(&mut self) {
        MAIN_THREAD_WAITS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs `read`, a read (or open) one of the package's own methods asks
/// for, without the GIL and with every signal handler allowed to run (see
/// `PythonHost`). Its error as Python's; or the exception a signal handler
/// raised meanwhile, even if the read then ended well (a handler's
/// exception ends the blocking call, as for any of Python's own).
///
/// A stop kept on this thread from before the call belongs to an earlier
/// one, and is let go of: only a stop asked for during this call is its
/// exception (and none outlives it).
pub(crate) fn from_python<T: Send>(
    py: Python<'_>,
    read: impl FnOnce() -> Result<T, Error> + Send,
) -> PyResult<T> {
    drop(take_stopped());
    let outer = local::replace(&FROM_PYTHON, true);
    let outcome = {
        let _counted = ReadFromPython::enter();
        py.detach(read)
    };
    local::replace(&FROM_PYTHON, outer);
    let value = outcome.map_err(to_py)?;
    match take_stopped() {
        Some(raised) => Err(raised),
        None => Ok(value),
    }
}

/// Whether SIGINT's handler is Python's own (`signal.default_int_handler`,
/// which raises `KeyboardInterrupt`).
fn sigint_is_python_default(py: Python<'_>) -> bool {
    let Ok(signal) = py.import("signal") else {
        return true;
    };
    let handler = signal.call_method1("getsignal", (libc::SIGINT,));
    let default = signal.getattr("default_int_handler");
    match (handler, default) {
        (Ok(h), Ok(d)) => h.is(&d),
        _ => true,
    }
}

unsafe extern "C" {
    /// Simulates a SIGINT's arrival: its handler runs at the interpreter's
    /// next look (stable ABI).
    fn PyErr_SetInterrupt();
}

/// Returns the memory freed by a closed file to the system: glibc keeps
/// freed memory of its arenas (a file's blocks are freed by many threads)
/// until told.
pub(crate) fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether this thread is waiting inside an HDF5 call now (for tests: no
/// Python code should ever see `True`).
#[pyfunction]
pub(crate) fn _waiting_inside_hdf5() -> bool {
    local::get(&INSIDE_HDF5) > 0
}

/// Whether Python's main thread is waiting for the network in the package
/// now (for tests: a signal sent then arrives during the wait).
#[pyfunction]
pub(crate) fn _main_thread_waiting() -> bool {
    MAIN_THREAD_WAITS.load(std::sync::atomic::Ordering::SeqCst) > 0
}
