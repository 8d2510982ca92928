//! The process's life around the package's reads: the reads of its own
//! methods counted, every read stopped (for good, or at the interpreter's
//! exit, then waited for to leave), and a forked child's state set anew.

use pyo3::prelude::*;
use remfile::wait;

use crate::logs;

/// The thread Python runs signal handlers on (`threading.main_thread()`).
pub(crate) static MAIN_THREAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn on_main_thread() -> bool {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    me == MAIN_THREAD.load(std::sync::atomic::Ordering::Relaxed)
}

/// In a forked child: the thread that forked is its main thread now
/// (Python runs signal handlers there), whichever thread it was.
#[pyfunction]
pub(crate) fn _forked() {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    MAIN_THREAD.store(me, std::sync::atomic::Ordering::Relaxed);
    // The reads other threads of the parent had under way are not here.
    READS_FROM_PYTHON.store(0, std::sync::atomic::Ordering::SeqCst);
    logs::forked();
}

/// Stops every read, open and background fetch of the process, now and
/// from now on.
#[pyfunction]
pub(crate) fn _stop_everything() {
    wait::stop_everything();
}

/// How many of the package's own reads (its methods') are under way in the
/// process; the exit hook waits for it to reach zero at [`READS_LEFT`].
static READS_FROM_PYTHON: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The gate the exit hook waits at for [`READS_FROM_PYTHON`] to reach zero.
static READS_LEFT: (std::sync::Mutex<()>, std::sync::Condvar) =
    (std::sync::Mutex::new(()), std::sync::Condvar::new());

/// The longest the exit hook waits for the reads its stop ended to leave
/// the package.
const READS_LEAVE_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Set by the exit hook: no URL provider is called from then on.
pub(crate) static EXITING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Counts a read of the package's own methods while it lives (until it
/// holds the GIL again).
pub(crate) struct ReadFromPython;

impl ReadFromPython {
    pub(crate) fn enter() -> ReadFromPython {
        READS_FROM_PYTHON.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ReadFromPython
    }
}

impl Drop for ReadFromPython {
    fn drop(&mut self) {
        if READS_FROM_PYTHON.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            // Under the gate's lock: a waiter between its look at the count
            // and its wait holds it, so the wake cannot come in between.
            let (gate, left) = &READS_LEFT;
            let _held = gate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            left.notify_all();
        }
    }
}

/// Waits, at most [`READS_LEAVE_AT_EXIT`], until no read of the package's
/// own methods is under way.
fn wait_for_reads_to_leave() {
    let under_way = || READS_FROM_PYTHON.load(std::sync::atomic::Ordering::SeqCst) > 0;
    if !under_way() {
        return;
    }
    let (gate, left) = &READS_LEFT;
    let held = gate
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = left.wait_timeout_while(held, READS_LEAVE_AT_EXIT, |_| under_way());
}

/// Stops every read, open and background fetch of the process, now and
/// from now on, but the reads of this thread (the package's `atexit` hook,
/// on the thread that runs the exit handlers: threads reading in the
/// background then leave h5py before the interpreter finalizes, and the
/// exit handlers that run after the hook still read).
///
/// Then waits (without the GIL) for the reads it stopped in other threads
/// to take the GIL back and leave: one that took it back only once the
/// interpreter finalizes would be ended by Python (`pthread_exit`) inside
/// the crate's frames, which crashed the exiting process now and then.
#[pyfunction]
pub(crate) fn _stop_at_exit(py: Python<'_>) {
    EXITING.store(true, std::sync::atomic::Ordering::SeqCst);
    wait::stop_everything_but_this_thread();
    py.detach(wait_for_reads_to_leave);
}
