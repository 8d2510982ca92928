//! The GIL, as this package takes it and lets go of it.

use std::ffi::c_void;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use pyo3::ffi::PyThreadState;
use pyo3::{Python, pyfunction};

thread_local! {
    /// The thread state `outside` saved when it let go of the GIL on this
    /// thread (null if it did not): a look at signals takes the GIL back
    /// with it.
    pub(crate) static SAVED: std::cell::Cell<*mut pyo3::ffi::PyThreadState> =
        const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// This thread's flags, also while the process exits: HDF5 closes its
/// files from C's `exit`, after the main thread's thread-locals are gone
/// (then each reads as its default, and is set nowhere).
pub(crate) mod local {
    use std::cell::Cell;
    use std::thread::LocalKey;

    pub(crate) fn get<T: Copy + Default>(key: &'static LocalKey<Cell<T>>) -> T {
        key.try_with(Cell::get).unwrap_or_default()
    }

    /// Sets the flag; its value before.
    pub(crate) fn replace<T: Copy + Default>(key: &'static LocalKey<Cell<T>>, value: T) -> T {
        key.try_with(|c| c.replace(value)).unwrap_or_default()
    }
}

type Unchecked = unsafe extern "C" fn() -> *mut PyThreadState;

/// How this Python tells whether a thread holds the GIL.
struct Probe {
    /// `PyThreadState_GetUnchecked` (3.13+) or
    /// `_PyThreadState_UncheckedGet` (before).
    current: Option<Unchecked>,
    /// Whether it is this thread's own (3.12+: a thread-local); before,
    /// it is the state of whichever thread holds the GIL.
    per_thread: bool,
}

static PROBE: OnceLock<Probe> = OnceLock::new();

/// Whether the GIL may be let go of inside an HDF5 call h5py makes with
/// it held (see [`release_inside_hdf5`]).
static RELEASE_INSIDE_HDF5: AtomicBool = AtomicBool::new(false);

/// The address of the function `name` among the process's global
/// symbols (the interpreter's), if it has one: for what the limited API
/// PyO3 binds for abi3 modules leaves out.
fn global(name: &std::ffi::CStr) -> Option<*mut c_void> {
    // SAFETY: a look-up in the process's global symbols.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!f.is_null()).then_some(f)
}

/// Learns how to read the thread state on this Python (`version` is
/// `sys.version_info[:2]`).
pub(crate) fn init(version: (u32, u32)) {
    // SAFETY: both symbols have this signature.
    let found = |name| global(name).map(|f| unsafe { std::mem::transmute::<_, Unchecked>(f) });
    let current =
        found(c"PyThreadState_GetUnchecked").or_else(|| found(c"_PyThreadState_UncheckedGet"));
    let _ = PROBE.set(Probe {
        current,
        per_thread: version >= (3, 12),
    });
}

/// Whether this thread holds the GIL.
pub(crate) fn held() -> bool {
    let Some(probe) = PROBE.get() else {
        return false;
    };
    let Some(current) = probe.current else {
        // No way to tell: act as if not (a wait that keeps the GIL is
        // slow; a release without it is a crash).
        return false;
    };
    // SAFETY: reads the current thread state without a check.
    let state = unsafe { current() };
    if state.is_null() {
        return false;
    }
    if probe.per_thread {
        return true;
    }
    // SAFETY: no preconditions; this thread's state (main interpreter).
    state == unsafe { pyo3::ffi::PyGILState_GetThisThreadState() }
}

/// Decides, once h5py's HDF5 is known, whether the GIL may be let go
/// of inside its calls: only where that library is h5py's private copy
/// (as in h5py's wheels), which nothing calls but h5py, under its own
/// lock. A library shared with other packages (a system or conda HDF5,
/// which netCDF4 or PyTables may call with the GIL held and without
/// h5py's lock) could otherwise be entered by them while this thread
/// waits inside it — a deadlock with a thread-safe HDF5 (this thread
/// needs the GIL back to leave HDF5; theirs holds it, waiting for
/// HDF5), and two threads in HDF5 without one.
/// `REMFILE_RELEASE_GIL=always|never` overrides the choice.
pub(crate) fn decide_release(library_path: Option<&str>) -> bool {
    let private = library_path.is_some_and(|p| {
        p.contains("/h5py.libs/") || p.contains("/h5py/") || p.contains("/h5py/.dylibs/")
    });
    let release = match std::env::var("REMFILE_RELEASE_GIL").as_deref() {
        Ok("always") => true,
        Ok("never") => false,
        _ => private,
    };
    RELEASE_INSIDE_HDF5.store(release, Relaxed);
    release
}

/// See [`decide_release`].
pub(crate) fn release_inside_hdf5() -> bool {
    RELEASE_INSIDE_HDF5.load(Relaxed)
}

/// Runs `f` with the GIL, taken back with the state `outside` saved,
/// or as this thread holds it, or through `PyGILState_Ensure`; with the
/// cyclic garbage collector off, so that no finalizer (`__del__`) runs
/// inside an HDF5 call.
pub(crate) fn quietly<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
    attached(|py| without_collection(|_| f(py)))
}

/// Runs `f` with the GIL, taken as [`quietly`] takes it, the collector
/// as it is: for Python code outside HDF5 (a signal handler may run).
pub(crate) fn attached<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
    // SAFETY (for every `assume_attached` below): the GIL is held there.
    let f = |()| f(unsafe { Python::assume_attached() });
    let saved = local::get(&SAVED);
    if !saved.is_null() {
        // SAFETY: the state `outside` saved on this thread.
        unsafe { pyo3::ffi::PyEval_RestoreThread(saved) };
        local::replace(&SAVED, std::ptr::null_mut());
        let out = f(());
        // SAFETY: this thread holds the GIL again.
        local::replace(&SAVED, unsafe { pyo3::ffi::PyEval_SaveThread() });
        return out;
    }
    if held() {
        return f(());
    }
    // SAFETY: this thread does not hold the GIL; Ensure takes it with
    // its own state, and Release lets go of it as it found it.
    let taken = unsafe { pyo3::ffi::PyGILState_Ensure() };
    let out = f(());
    // SAFETY: the state Ensure returned, on the same thread.
    unsafe { pyo3::ffi::PyGILState_Release(taken) };
    out
}

/// Runs `f` (the GIL held) with the cyclic collector off.
fn without_collection<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
    type Switch = unsafe extern "C" fn() -> std::ffi::c_int;
    static SWITCHES: OnceLock<Option<(Switch, Switch)>> = OnceLock::new();
    let switches = SWITCHES.get_or_init(|| {
        // SAFETY: PyGC_Disable and PyGC_Enable (3.10+) both have this
        // signature.
        let found = |name| global(name).map(|f| unsafe { std::mem::transmute::<_, Switch>(f) });
        Some((found(c"PyGC_Disable")?, found(c"PyGC_Enable")?))
    });
    // SAFETY: the caller holds the GIL.
    let py = unsafe { Python::assume_attached() };
    let Some((disable, enable)) = switches else {
        return f(py);
    };
    // SAFETY: the GIL is held; the collector is put back as it was.
    let was_on = unsafe { disable() } != 0;
    let out = f(py);
    if was_on {
        // SAFETY: as above.
        unsafe { enable() };
    }
    out
}

/// Whether reads inside h5py's HDF5 calls let go of the GIL while they wait
/// (see the package's documentation).
#[pyfunction]
pub(crate) fn _releases_gil_inside_hdf5() -> bool {
    release_inside_hdf5()
}
