//! The disk caches' last writes when the process ends by `exit` (returning
//! from `main`, `std::process::exit`, C's `exit`, the Python interpreter's
//! exit), which runs no destructor of a file still open: a handler,
//! registered once with the C library, writes every open cache's queue
//! and then deletes the fetch locks this process still holds, so that the
//! next run finds the blocks and no other process waits for this one.
//!
//! It runs while other threads may still run, and maybe in a child forked
//! from the process that registered it (whose writing thread is not
//! there): it takes every lock with a deadline, never waits past
//! [`AT_EXIT`] in all, and never lets a panic out into the C library.
//!
//! The one unsafe call outside HDF5's interface is here: no safe binding
//! of `atexit` exists in the crate's dependencies.

use std::sync::Once;
use std::time::{Duration, Instant};

use super::{lock, shared};

/// The longest the handler delays the end of the process: the queue holds
/// about a second's writing at most (see `writer::MAX_WAIT`), so this
/// leaves room for a slow disk.
pub(crate) const AT_EXIT: Duration = Duration::from_secs(5);

/// Registers the handler, once per process (a forked child inherits it).
pub(super) fn register() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        #[cfg(any(unix, windows))]
        #[allow(unsafe_code)]
        // SAFETY: `atexit` is the C library's, given a function that takes
        // and returns nothing and never unwinds.
        unsafe {
            if atexit(write_before_exit) != 0 {
                tracing::debug!("disk cache: no handler at exit; blocks queued then may be lost");
            }
        }
    });
}

#[cfg(any(unix, windows))]
#[allow(unsafe_code)]
unsafe extern "C" {
    fn atexit(handler: extern "C" fn()) -> std::ffi::c_int;
}

extern "C" fn write_before_exit() {
    // Reads still waiting end now, and the files closed after this (HDF5
    // closes its files from its own handler) share the process's one
    // bound on waiting for their writes.
    crate::wait::stop_everything();
    let _ = std::panic::catch_unwind(|| write_queues_and_release(Instant::now() + AT_EXIT));
}

/// The tables of caches and of locks are held for moments only: one not
/// had within this is held by a thread that does not exist (in a child
/// forked while a thread of its parent held it).
const TABLE_WAIT: Duration = Duration::from_millis(500);

/// Writes what every open cache has queued, then deletes the locks still
/// held, by `deadline`.
fn write_queues_and_release(deadline: Instant) {
    let table_wait = || deadline.min(Instant::now() + TABLE_WAIT);
    for cache in shared::all_open(table_wait()) {
        cache.writer.flush(deadline);
    }
    lock::release_all(table_wait());
}
