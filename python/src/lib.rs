//! The native half of the `remfile_hdf5` Python package: a remote file
//! ([`Remote`], wrapped by the package's `RemoteFile`, an `io.RawIOBase`) and
//! the HDF5 driver bound to the HDF5 library h5py loaded (never to another
//! copy in the process: the netCDF4 wheel, conda and others bring their own).
//!
//! The Python package is the interface; this module is not (its names start
//! with an underscore where the package wraps them).

mod logs;

use std::ffi::{CString, c_void};
use std::sync::{Arc, OnceLock};

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use remfile::hdf5::driver::loader::{self, Control, FIRST_VERSION};
use remfile::hdf5::driver::{self, FileObjectCrawl, HostApi, config, hid_t};
use remfile::wait::sync::{MadeIn, Mutex};
use remfile::{Error, ErrorKind, RemoteFile, Stats, wait};

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
fn to_py(e: Error) -> PyErr {
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
fn take_stopped() -> Option<PyErr> {
    STOPPED.try_with(|s| s.borrow_mut().take()).ok().flatten()
}

thread_local! {
    static STOPPED: std::cell::RefCell<Option<PyErr>> = const { std::cell::RefCell::new(None) };
}

/// The thread Python runs signal handlers on (`threading.main_thread()`).
static MAIN_THREAD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn on_main_thread() -> bool {
    // SAFETY: pthread_self has no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    me == MAIN_THREAD.load(std::sync::atomic::Ordering::Relaxed)
}

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
struct PythonHost;

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

static HOST: PythonHost = PythonHost;

thread_local! {
    /// The thread state `outside` saved when it let go of the GIL on this
    /// thread (null if it did not): a look at signals takes the GIL back
    /// with it.
    static SAVED: std::cell::Cell<*mut pyo3::ffi::PyThreadState> =
        const { std::cell::Cell::new(std::ptr::null_mut()) };
    /// Whether this thread's read was asked for by the package's own
    /// methods (not by HDF5): then every signal handler may run.
    static FROM_PYTHON: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// How many waits inside HDF5 calls this thread is in.
    static INSIDE_HDF5: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// A SIGINT seen inside HDF5 whose handler is the program's own: raised
    /// again once the call returns.
    static SIGINT_AFTER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// This thread's flags, also while the process exits: HDF5 closes its
/// files from C's `exit`, after the main thread's thread-locals are gone
/// (then each reads as its default, and is set nowhere).
mod local {
    use std::cell::Cell;
    use std::thread::LocalKey;

    pub(super) fn get<T: Copy + Default>(key: &'static LocalKey<Cell<T>>) -> T {
        key.try_with(Cell::get).unwrap_or_default()
    }

    /// Sets the flag; its value before.
    pub(super) fn replace<T: Copy + Default>(key: &'static LocalKey<Cell<T>>, value: T) -> T {
        key.try_with(|c| c.replace(value)).unwrap_or_default()
    }
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
fn from_python<T: Send>(
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

/// The GIL, as this package takes it and lets go of it.
mod gil {
    use std::ffi::c_void;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    use pyo3::Python;
    use pyo3::ffi::PyThreadState;

    use super::SAVED;

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
    pub(super) fn init(version: (u32, u32)) {
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
    pub(super) fn held() -> bool {
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
    pub(super) fn decide_release(library_path: Option<&str>) -> bool {
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
    pub(super) fn release_inside_hdf5() -> bool {
        RELEASE_INSIDE_HDF5.load(Relaxed)
    }

    /// Runs `f` with the GIL, taken back with the state `outside` saved,
    /// or as this thread holds it, or through `PyGILState_Ensure`; with the
    /// cyclic garbage collector off, so that no finalizer (`__del__`) runs
    /// inside an HDF5 call.
    pub(super) fn quietly<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
        attached(|py| without_collection(|_| f(py)))
    }

    /// Runs `f` with the GIL, taken as [`quietly`] takes it, the collector
    /// as it is: for Python code outside HDF5 (a signal handler may run).
    pub(super) fn attached<T>(f: impl FnOnce(Python<'_>) -> T) -> T {
        // SAFETY (for every `assume_attached` below): the GIL is held there.
        let f = |()| f(unsafe { Python::assume_attached() });
        let saved = super::local::get(&SAVED);
        if !saved.is_null() {
            // SAFETY: the state `outside` saved on this thread.
            unsafe { pyo3::ffi::PyEval_RestoreThread(saved) };
            super::local::replace(&SAVED, std::ptr::null_mut());
            let out = f(());
            // SAFETY: this thread holds the GIL again.
            super::local::replace(&SAVED, unsafe { pyo3::ffi::PyEval_SaveThread() });
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
}

/// Returns the memory freed by a closed file to the system: glibc keeps
/// freed memory of its arenas (a file's blocks are freed by many threads)
/// until told.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn config_error(e: config::ConfigError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Parses the configuration string and checks its values' ranges, or says
/// what is wrong with it (the key first).
fn parse(options: &str) -> PyResult<config::Config> {
    let parsed = config::parse(options).map_err(config_error)?;
    driver::check(&parsed).map_err(config_error)?;
    Ok(parsed)
}

/// A new URL from `provider.get_url()`, run with the GIL (the thread that
/// asks waits without it); an error if the interpreter is ending or the
/// call raised (its message, which the crate does not show with a URL).
fn renewed_url(provider: &Provider) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    // Counted as a read from Python (counted first, then the exit looked
    // at: the exit hook sets the flag, then waits for the count): the exit
    // waits for a call under way, and none starts once it has begun (a
    // thread that attaches as the interpreter finalizes is aborted).
    let _counted = ReadFromPython::enter();
    if EXITING.load(std::sync::atomic::Ordering::SeqCst) {
        return Err("the interpreter is ending: no URL could be asked for".into());
    }
    let renewed = Python::try_attach(|py| {
        let Some(provider) = provider.lock().as_ref().map(|p| p.clone_ref(py)) else {
            return Err("the URL provider was collected".to_owned());
        };
        provider
            .bind(py)
            .call_method0("get_url")
            .and_then(|url| url.extract::<String>())
            .map_err(|e| {
                format!(
                    "get_url() failed: {}",
                    e.get_type(py)
                        .name()
                        .map_or_else(|_| "an exception".to_owned(), |n| n.to_string())
                )
            })
    });
    match renewed {
        Some(Ok(url)) => Ok(url),
        Some(Err(why)) => Err(why.into()),
        None => Err("the interpreter is ending: no URL could be asked for".into()),
    }
}

/// A file on an HTTP(S) server, read at positions; closed by `close`.
///
/// A forked child that inherits one neither reads through it nor closes
/// it: its connections are the parent's, and its locks and waits may belong
/// to parent threads that do not exist in the child.
#[pyclass(frozen, module = "remfile_hdf5._native")]
struct Remote {
    file: Mutex<Option<RemoteFile>>,
    url: String,
    size: u64,
    /// The process that opened it.
    made_in: MadeIn,
    /// Whether its `close` closes the file (else it is the driver's, which
    /// its HDF5 file closes, and `close` only lets go of this handle).
    owned: bool,
    /// The metadata crawl of an HDF5 file read through this file object
    /// (h5py given it), if the file's signature says it is one.
    crawl: Mutex<Option<Arc<FileObjectCrawl>>>,
    /// The object that renews the URL, if given: shown to Python's garbage
    /// collector (a provider whose method's globals hold this file is a
    /// cycle, which would otherwise keep a module's objects, open HDF5
    /// files among them, past the interpreter's end).
    provider: Provider,
}

/// A URL provider the file's requests and its Python object share; empty
/// once the collector broke a cycle through it.
type Provider = Arc<Mutex<Option<Py<PyAny>>>>;

impl Remote {
    /// `file`, which an open HDF5 file of the driver's reads.
    fn sharing(file: RemoteFile) -> Remote {
        Remote::new_in_process(file, false, false)
    }

    /// `file`, opened by this process if `owned` (else the driver's); its
    /// metadata crawled ahead of its reader if `crawl` and its first bytes
    /// say it is an HDF5 file.
    fn new_in_process(file: RemoteFile, owned: bool, crawl: bool) -> Remote {
        // A file object of an HDF5 file is read as the driver reads one:
        // its metadata crawled ahead of the reader. (The driver's own file
        // has its crawl.)
        let crawl = (owned && crawl)
            .then(|| FileObjectCrawl::start_if_hdf5(&file))
            .flatten()
            .map(Arc::new);
        Remote {
            provider: Provider::default(),
            crawl: Mutex::new(crawl),
            url: file.url().to_owned(),
            size: file.len(),
            file: Mutex::new(Some(file)),
            made_in: MadeIn::here(),
            owned,
        }
    }

    /// The file, unless closed (a clone: reads share its cache).
    fn file(&self) -> PyResult<RemoteFile> {
        if self.inherited() {
            return Err(PyValueError::new_err(
                "this remote file was opened by another process (before a fork): open it again",
            ));
        }
        self.file
            .lock()
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on closed file"))
    }

    /// Whether this process only inherited it.
    fn inherited(&self) -> bool {
        self.made_in.inherited()
    }

    /// Reads `buf.len()` bytes at `pos` of `file` (this one's), through
    /// the crawl if it has one.
    fn read_exact_at(&self, file: &RemoteFile, pos: u64, buf: &mut [u8]) -> remfile::Result<()> {
        let crawl = self.crawl.lock().clone();
        match crawl {
            Some(crawl) => crawl.read_exact_at(pos, buf),
            None => file.read_exact_at(pos, buf),
        }
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if self.inherited() {
            // Its destructor would wait on the parent's threads.
            std::mem::forget(self.file.get_mut().take());
            std::mem::forget(self.crawl.get_mut().take());
        }
    }
}

#[pymethods]
impl Remote {
    /// Opens `url` with the settings of the configuration string `options`
    /// (the driver's keys; those that only HDF5 files use are refused).
    ///
    /// `url_provider`, if given, is an object whose `get_url()` returns the
    /// file's URL anew (a presigned URL that expired): called, with the GIL,
    /// when the server refuses a URL that worked before.
    #[new]
    #[pyo3(signature = (url, options, url_provider = None))]
    fn new(
        py: Python<'_>,
        url: &str,
        options: &str,
        url_provider: Option<Py<PyAny>>,
    ) -> PyResult<Remote> {
        let parsed = parse(options)?;
        let hdf5_only = [
            ("chunk_read_ahead", !parsed.chunk_read_ahead()),
            ("stats", parsed.stats()),
            ("trace", parsed.trace()),
        ];
        if let Some((key, _)) = hdf5_only.iter().find(|(_, set)| *set) {
            return Err(PyValueError::new_err(format!(
                "`{key}` applies to HDF5 files only, not to a file object"
            )));
        }
        // The driver's defaults, so that one table of defaults holds for both.
        let mut builder = driver::builder(&parsed).map_err(config_error)?;
        let provider = Provider::new(Mutex::new(url_provider));
        if provider.lock().is_some() {
            let asked = Arc::clone(&provider);
            builder = builder.url_provider(move || renewed_url(&asked));
        }
        let file = from_python(py, || builder.open(url))?;
        let mut remote = Remote::new_in_process(file, true, parsed.metadata_prefetch());
        remote.provider = provider;
        Ok(remote)
    }

    /// The file's length in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// The URL without its query string or credentials.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        if let Some(provider) = self.provider.lock().as_ref() {
            visit.call(provider)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        // Dropped once the lock is let go of: its deallocation may run
        // Python code (a weak reference's callback) that switches threads.
        let provider = self.provider.lock().take();
        drop(provider);
    }

    /// The `ETag` the server gave the file, if it gave one.
    #[getter]
    fn etag(&self) -> PyResult<Option<String>> {
        Ok(self.file()?.etag().map(str::to_owned))
    }

    /// The `Last-Modified` date the server gave the file, if it gave one.
    #[getter]
    fn last_modified(&self) -> PyResult<Option<String>> {
        Ok(self.file()?.last_modified().map(str::to_owned))
    }

    /// Fetches the `(offset, length)` ranges into the file's cache,
    /// together (one round), as far as the cache holds them.
    fn _prefetch(&self, py: Python<'_>, ranges: Vec<(u64, u64)>) -> PyResult<()> {
        let mut wanted = Vec::with_capacity(ranges.len());
        for (offset, length) in ranges {
            let end = offset.checked_add(length).ok_or_else(|| {
                PyValueError::new_err(format!("a range of {length} bytes at {offset}"))
            })?;
            wanted.push(offset..end);
        }
        let file = self.file()?;
        from_python(py, || file.prefetch(wanted))
    }

    /// Fills the `n` bytes at `address` with the file's bytes at `pos`
    /// (inside the file), straight from the network or the cache: no
    /// second buffer. The caller keeps a writable buffer of at least `n`
    /// bytes at `address` exported (locked in place) for the whole call,
    /// and lets no other code touch it meanwhile.
    fn _read_into_address(
        &self,
        py: Python<'_>,
        pos: u64,
        address: usize,
        n: usize,
    ) -> PyResult<()> {
        let file = self.file()?;
        let end = pos.checked_add(n as u64).filter(|&end| end <= self.size);
        if end.is_none() {
            return Err(PyValueError::new_err(format!(
                "{n} bytes at {pos} lie past the end of the file ({} bytes)",
                self.size
            )));
        }
        if n == 0 {
            return Ok(());
        }
        if address == 0 {
            return Err(PyValueError::new_err("a null address"));
        }
        // SAFETY: the caller's promise above: `n` writable bytes at
        // `address`, which nothing else reads or writes during the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, n) };
        from_python(py, || self.read_exact_at(&file, pos, buf))
    }

    /// Up to `n` bytes at `pos` (fewer only at the end of the file).
    fn read_at<'py>(&self, py: Python<'py>, pos: u64, n: usize) -> PyResult<Bound<'py, PyBytes>> {
        let file = self.file()?;
        let n = n.min(usize::try_from(self.size.saturating_sub(pos)).unwrap_or(usize::MAX));
        // Straight into the new bytes object, which no other thread sees
        // before it is returned.
        PyBytes::new_with(py, n, |buf| {
            if buf.is_empty() {
                return Ok(());
            }
            from_python(py, || self.read_exact_at(&file, pos, buf))
        })
    }

    /// Closes the file: reads waiting on it in other threads stop at once
    /// (a `ValueError`, as for a closed file of Python's), then its
    /// connections are let go of and its disk-cache writes waited for,
    /// without holding the GIL. Reads after it are a `ValueError`.
    fn close(&self, py: Python<'_>) {
        if self.inherited() {
            return;
        }
        let file = self.file.lock().take();
        let crawl = self.crawl.lock().take();
        let owned = self.owned;
        py.detach(move || {
            // The crawl first, as the driver's close does: what it has in
            // flight for a disk cache lands there.
            if let Some(crawl) = crawl {
                crawl.close();
            }
            if let Some(file) = file.as_ref().filter(|_| owned) {
                // Every clone of it: the reads in flight hold clones.
                file.close();
            }
            drop(file);
            give_memory_back();
        });
    }

    /// The bytes of each `(start, end)` range, fetched together.
    fn read_ranges<'py>(
        &self,
        py: Python<'py>,
        ranges: Vec<(u64, u64)>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let file = self.file()?;
        let ranges: Vec<std::ops::Range<u64>> = ranges.into_iter().map(|(a, b)| a..b).collect();
        let parts = from_python(py, || file.read_ranges(&ranges))?;
        Ok(parts.iter().map(|p| PyBytes::new(py, p)).collect())
    }

    /// The file's statistics.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &self.file()?.stats())
    }

    /// Waits up to `seconds` for fetches started in the background to end.
    fn wait_for_background_fetches(&self, py: Python<'_>, seconds: f64) -> PyResult<bool> {
        if !(seconds >= 0.0 && seconds.is_finite()) {
            return Err(PyValueError::new_err(format!(
                "a timeout of {seconds} seconds"
            )));
        }
        let timeout = std::time::Duration::from_secs_f64(seconds.min(86_400.0));
        let file = self.file()?;
        let deadline = std::time::Instant::now() + timeout;
        // In steps, running signal handlers between them: Ctrl-C ends it.
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let step = left.min(wait::POLL);
            if py.detach(|| file.wait_for_background_fetches(step)) {
                return Ok(true);
            }
            py.check_signals()?;
            if left <= step {
                return Ok(false);
            }
        }
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requests", s.requests)?;
    d.set_item("round_trips", s.round_trips)?;
    d.set_item("bytes_fetched", s.bytes_fetched)?;
    d.set_item("bytes_read", s.bytes_read)?;
    d.set_item("cache_hits", s.cache_hits)?;
    d.set_item("cache_misses", s.cache_misses)?;
    d.set_item("retries", s.retries)?;
    d.set_item("disk_hits", s.disk_hits)?;
    d.set_item("disk_bytes_read", s.disk_bytes_read)?;
    d.set_item("disk_waits", s.disk_waits)?;
    Ok(d)
}

/// h5py's HDF5, once the driver is bound to it: its version, the driver's
/// id there, and the functions the package calls itself (the driver's own
/// are in [`HostApi`]).
struct Library {
    version: (u32, u32, u32),
    driver: hid_t,
    calls: Control,
}

/// The library the driver is bound to, once bound.
static LIBRARY: OnceLock<Library> = OnceLock::new();
/// Binding happens once; this keeps two threads from both trying.
static BINDING: Mutex<()> = Mutex::new(());

/// The metadata of many files being fetched at once, for the driver's
/// opens of them with the same options (see `remfile_hdf5.prefetch_files`).
#[pyclass(frozen, module = "remfile_hdf5._native")]
struct Files {
    batch: driver::many::Batch,
}

fn progress_dict<'py>(py: Python<'py>, p: &driver::many::Progress) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("files", p.files)?;
    out.set_item("crawled", p.crawled)?;
    out.set_item("opened", p.opened)?;
    out.set_item("failed", p.failed)?;
    out.set_item("dropped", p.dropped)?;
    out.set_item("pending", p.pending)?;
    out.set_item("waiting_for_opens", p.waiting_for_opens)?;
    out.set_item("bytes_ahead", p.bytes_ahead)?;
    Ok(out)
}

#[pymethods]
impl Files {
    /// Starts fetching the metadata of `urls`, opened with the settings of
    /// the configuration string `options`.
    #[new]
    fn new(urls: Vec<String>, options: &str) -> PyResult<Files> {
        let batch = driver::many::prefetch_files(urls, options).map_err(config_error)?;
        Ok(Files { batch })
    }

    /// How far the batch has gone.
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        progress_dict(py, &self.batch.progress())
    }

    /// Waits until the batch is settled, or `timeout` seconds (if given).
    fn wait<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => {
                Some(std::time::Duration::from_secs_f64(t.min(1e9)))
            }
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout must be a number of seconds >= 0, not {t}"
                )));
            }
        };
        let batch = self.batch.clone();
        let progress = from_python(py, move || batch.wait(timeout))?;
        progress_dict(py, &progress)
    }

    /// The files that failed here: `(url, message)` pairs.
    fn errors(&self) -> Vec<(String, String)> {
        self.batch
            .errors()
            .into_iter()
            .map(|(url, e)| (url, e.to_string()))
            .collect()
    }

    /// Stops the batch and lets go of the files it holds for their opens.
    fn cancel(&self) {
        self.batch.cancel();
    }
}

/// Binds the driver to the HDF5 library that the already loaded shared
/// object at `path` (an h5py extension module) links, registers it there,
/// and returns that library's version.
#[pyfunction]
fn _bind_hdf5(path: &str) -> PyResult<(u32, u32, u32)> {
    let _once = BINDING.lock();
    if let Some(bound) = LIBRARY.get() {
        return Ok(bound.version);
    }
    let c_path = CString::new(path).map_err(|_| PyValueError::new_err("a path with a NUL"))?;
    let found = loader::behind(&c_path).ok_or_else(|| {
        PyRuntimeError::new_err(format!(
            "no HDF5 library behind {path} (is it loaded? import h5py first)"
        ))
    })?;
    let api: HostApi = found.api;
    let (a, b, c) = api.version();
    if api.version() < FIRST_VERSION {
        return Err(PyRuntimeError::new_err(format!(
            "h5py's HDF5 is {a}.{b}.{c}; the remfile driver needs HDF5 1.14 or later \
             (earlier versions cannot pass a driver its options): install an h5py built \
             with HDF5 1.14+ (any h5py wheel from PyPI since 3.11)"
        )));
    }
    let calls = found.control.ok_or_else(|| {
        PyRuntimeError::new_err(format!(
            "HDF5 {a}.{b}.{c} lacks a function the package calls to register the driver"
        ))
    })?;
    let installed = driver::install(api);
    if !installed.is_same_library(&api) {
        let (x, y, z) = installed.version();
        return Err(PyRuntimeError::new_err(format!(
            "the remfile driver already serves another HDF5 library ({x}.{y}.{z}) in this \
             process (loaded as a plugin before h5py); it cannot serve h5py's ({a}.{b}.{c}) too"
        )));
    }
    // SAFETY: h5py's HDF5 functions (the caller holds h5py's lock), with a
    // C string and the driver's class in that library's layout.
    let (registered, driver) = unsafe {
        let registered = (calls.is_registered)(c"remfile".as_ptr());
        let driver = if registered > 0 {
            -1
        } else {
            (calls.register)(driver::class_for(api.version()))
        };
        (registered, driver)
    };
    if registered > 0 {
        return Err(PyRuntimeError::new_err(
            "h5py's HDF5 has a remfile driver already: the HDF5 plugin, loaded through \
             HDF5_PLUGIN_PATH (HDF5_DRIVER=remfile loads it when h5py starts). Use one or the \
             other: unset HDF5_DRIVER and HDF5_PLUGIN_PATH to use this package's driver",
        ));
    }
    if driver < 0 {
        return Err(PyRuntimeError::new_err(format!(
            "HDF5 {a}.{b}.{c} refused to register the remfile driver"
        )));
    }
    gil::decide_release(file_of(calls.register as *const c_void).as_deref());
    let library = Library {
        version: api.version(),
        driver,
        calls,
    };
    Ok(LIBRARY.get_or_init(|| library).version)
}

fn bound() -> PyResult<&'static Library> {
    LIBRARY
        .get()
        .ok_or_else(|| PyRuntimeError::new_err("the remfile driver is not bound to h5py's HDF5"))
}

/// Checks a configuration string: a `ValueError` naming the key that is
/// wrong, before HDF5 sees it.
#[pyfunction]
fn check_options(options: &str) -> PyResult<()> {
    parse(options).map(drop)
}

/// The keys a configuration string may hold, in the order the
/// documentation lists them: each one's name, the kind of its value, its
/// default (as the string writes it), what it sets, the other names it
/// answers to, the title of its group, and whether its value is a secret.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn option_keys() -> Vec<(
    &'static str,
    &'static str,
    Option<String>,
    &'static str,
    Vec<&'static str>,
    &'static str,
    bool,
)> {
    config::KEYS
        .iter()
        .map(|k| {
            (
                k.name,
                k.kind().name(),
                k.default_value(),
                k.help,
                k.aliases.to_vec(),
                k.group.title(),
                k.is_secret(),
            )
        })
        .collect()
}

/// Sets the driver, with the configuration string `options`, on the file
/// access property list `fapl` (an id of h5py's HDF5). The caller holds
/// h5py's lock (and no lock of the package's: see `_bind_h5py`).
#[pyfunction]
fn _set_driver(fapl: hid_t, options: &str) -> PyResult<()> {
    parse(options)?;
    let library = bound()?;
    let options = CString::new(options).map_err(|_| PyValueError::new_err("options with a NUL"))?;
    // SAFETY: the library's function, with C strings; HDF5 checks the id.
    let status =
        unsafe { (library.calls.set_driver_by_name)(fapl, c"remfile".as_ptr(), options.as_ptr()) };
    if status < 0 {
        return Err(PyRuntimeError::new_err(
            "HDF5 could not set the remfile driver on the file access property list",
        ));
    }
    Ok(())
}

/// The statistics of the open HDF5 file `file` (an id of h5py's HDF5), or
/// `None` if it is not read through the driver. The caller holds h5py's
/// lock.
#[pyfunction]
fn _file_stats<'py>(py: Python<'py>, file: hid_t) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(handle) = driver_handle(file)? else {
        return Ok(None);
    };
    let Some(counters) = driver::counters_of_handle(handle) else {
        return Ok(None);
    };
    let d = stats_dict(py, &counters.remote.stats())?;
    d.set_item("hdf5_reads", counters.read_calls + counters.vector_calls)?;
    let p = counters.prefetch;
    d.set_item("metadata_reads_foreseen", p.predicted_reads)?;
    d.set_item("metadata_reads", p.predicted_reads + p.unpredicted_reads)?;
    d.set_item("metadata_bytes", p.metadata_bytes)?;
    d.set_item("prefetch_bytes", p.speculative_bytes)?;
    d.set_item("chunk_reads", p.chunk_reads)?;
    Ok(Some(d))
}

/// The driver information on the access property list of the open HDF5
/// file `file`, as an address (h5py's file-object driver keeps its file
/// object there); 0 if none. The caller holds h5py's lock.
#[pyfunction]
fn _driver_info_address(file: hid_t) -> PyResult<usize> {
    let library = bound()?;
    // The address is only compared, never followed.
    let info = access_plist_of(library, file, library.calls.get_driver_info);
    Ok(info.map_or(0, |p| p as usize))
}

/// What `ask` says of the access property list of the open HDF5 file
/// `file` (taken, then closed again); `None` if HDF5 gives none. The caller
/// holds h5py's lock.
fn access_plist_of<T>(
    library: &Library,
    file: hid_t,
    ask: unsafe extern "C" fn(hid_t) -> T,
) -> Option<T> {
    // SAFETY: the library's functions; HDF5 checks the ids, and the plist
    // taken is closed again.
    unsafe {
        let fapl = (library.calls.get_access_plist)(file);
        if fapl < 0 {
            return None;
        }
        let answer = ask(fapl);
        (library.calls.close_plist)(fapl);
        Some(answer)
    }
}

/// The account of the open HDF5 file `file`'s reads, round by round, as
/// data (its text under `"text"`); `None` unless the driver reads it with
/// `trace=on`. The caller holds h5py's lock.
#[pyfunction]
fn _explain<'py>(py: Python<'py>, file: hid_t) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(handle) = driver_handle(file)? else {
        return Ok(None);
    };
    let Some(e) = driver::explanation_of_handle(handle) else {
        return Ok(None);
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let tallies =
        |t: &std::collections::BTreeMap<remfile::hdf5::explain::Structure, (u64, u64)>| {
            let d = PyDict::new(py);
            for (s, (n, bytes)) in t {
                d.set_item(s.name(), (*n, *bytes))?;
            }
            Ok::<_, PyErr>(d)
        };
    let out = PyDict::new(py);
    out.set_item("text", e.to_string())?;
    out.set_item("size", e.size)?;
    out.set_item("metadata_rounds", e.metadata_rounds)?;
    out.set_item("metadata_read", e.metadata_read)?;
    out.set_item("raw_read", e.raw_read)?;
    out.set_item("metadata_places", e.metadata_places)?;
    out.set_item("not_fetched", tallies(&e.not_fetched)?)?;
    let rounds = pyo3::types::PyList::empty(py);
    for round in &e.rounds {
        let requests = pyo3::types::PyList::empty(py);
        for r in &round.requests {
            let d = PyDict::new(py);
            d.set_item("range", r.requested.to_string())?;
            d.set_item("status", r.status)?;
            d.set_item("bytes", r.body_len)?;
            d.set_item("sent_ms", ms(r.sent))?;
            d.set_item("answered_ms", ms(r.answered))?;
            requests.append(d)?;
        }
        let d = PyDict::new(py);
        d.set_item("requests", requests)?;
        d.set_item("bytes", round.bytes)?;
        d.set_item("start_ms", ms(round.span.start))?;
        d.set_item("end_ms", ms(round.span.end))?;
        d.set_item("brought", tallies(&round.brought)?)?;
        rounds.append(d)?;
    }
    out.set_item("rounds", rounds)?;
    let advice = pyo3::types::PyList::empty(py);
    for a in &e.advice {
        let d = PyDict::new(py);
        d.set_item("change", &a.change)?;
        d.set_item("because", &a.because)?;
        d.set_item("rounds_saved", a.rounds_saved)?;
        advice.append(d)?;
    }
    out.set_item("advice", advice)?;
    Ok(Some(out))
}

/// The remote file the driver reads the open HDF5 file `file` (an id of
/// h5py's HDF5) from, sharing its caches; `None` if the driver does not
/// read it. The caller holds h5py's lock, and lets go of it before reading
/// through what this returns (a wait for the network under it would hold
/// up every other thread's h5py).
#[pyfunction]
fn _remote_of_file(file: hid_t) -> PyResult<Option<Remote>> {
    let Some(handle) = driver_handle(file)? else {
        return Ok(None);
    };
    Ok(driver::remote_of_handle(handle).map(Remote::sharing))
}

/// The driver's handle of the open HDF5 file `file`, if the driver reads
/// it. The caller holds h5py's lock.
fn driver_handle(file: hid_t) -> PyResult<Option<*mut c_void>> {
    let library = bound()?;
    if access_plist_of(library, file, library.calls.get_driver) != Some(library.driver) {
        return Ok(None);
    }
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: an open file of this driver (checked above), whose handle the
    // driver gives.
    let found = unsafe { (library.calls.get_vfd_handle)(file, 0, &mut handle) };
    Ok((found >= 0 && !handle.is_null()).then_some(handle))
}

/// In a forked child: the thread that forked is its main thread now
/// (Python runs signal handlers there), whichever thread it was.
#[pyfunction]
fn _forked() {
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
fn _stop_everything() {
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
static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Counts a read of the package's own methods while it lives (until it
/// holds the GIL again).
struct ReadFromPython;

impl ReadFromPython {
    fn enter() -> ReadFromPython {
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
fn _stop_at_exit(py: Python<'_>) {
    EXITING.store(true, std::sync::atomic::Ordering::SeqCst);
    wait::stop_everything_but_this_thread();
    py.detach(wait_for_reads_to_leave);
}

/// Whether this thread is waiting inside an HDF5 call now (for tests: no
/// Python code should ever see `True`).
#[pyfunction]
fn _waiting_inside_hdf5() -> bool {
    local::get(&INSIDE_HDF5) > 0
}

/// Whether Python's main thread is waiting for the network in the package
/// now (for tests: a signal sent then arrives during the wait).
#[pyfunction]
fn _main_thread_waiting() -> bool {
    MAIN_THREAD_WAITS.load(std::sync::atomic::Ordering::SeqCst) > 0
}

/// Keeps a `KeyboardInterrupt` on this thread as a stopped wait whose
/// failure no one reported would (for tests: no later call may raise it).
#[pyfunction]
fn _keep_a_stop() {
    let raised = pyo3::exceptions::PyKeyboardInterrupt::new_err(());
    let _ = STOPPED.try_with(|s| *s.borrow_mut() = Some(raised));
}

/// Whether reads inside h5py's HDF5 calls let go of the GIL while they wait
/// (see the package's documentation).
#[pyfunction]
fn _releases_gil_inside_hdf5() -> bool {
    gil::release_inside_hdf5()
}

/// The file the function at `address` was loaded from.
fn file_of(address: *const c_void) -> Option<String> {
    // SAFETY: Dl_info is plain data; zeroes are a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address in a loaded object.
    let found = unsafe { libc::dladdr(address, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a C string of the loader's.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(name.to_string_lossy().into_owned())
}

/// HDF5's version as h5py's library reports it, once bound.
#[pyfunction]
fn _hdf5_version() -> Option<(u32, u32, u32)> {
    LIBRARY.get().map(|l| l.version)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // What the driver reports (stats=on, a disk cache it cannot use) goes to
    // the process's standard error, as the plugin's does.
    driver::print_reports_with(|line| eprintln!("{line}"));
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let main = m
        .py()
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract::<u64>()?;
    MAIN_THREAD.store(main, std::sync::atomic::Ordering::Relaxed);
    let version_info = m.py().import("sys")?.getattr("version_info")?;
    let version: (u32, u32) = (
        version_info.getattr("major")?.extract()?,
        version_info.getattr("minor")?.extract()?,
    );
    gil::init(version);
    wait::set_host(&HOST);
    m.add_class::<Remote>()?;
    m.add_class::<Files>()?;
    m.add_function(wrap_pyfunction!(_bind_hdf5, m)?)?;
    m.add_function(wrap_pyfunction!(check_options, m)?)?;
    m.add_function(wrap_pyfunction!(option_keys, m)?)?;
    m.add_function(wrap_pyfunction!(_set_driver, m)?)?;
    m.add_function(wrap_pyfunction!(_file_stats, m)?)?;
    m.add_function(wrap_pyfunction!(_remote_of_file, m)?)?;
    m.add_function(wrap_pyfunction!(_explain, m)?)?;
    m.add_function(wrap_pyfunction!(_driver_info_address, m)?)?;
    m.add_function(wrap_pyfunction!(_hdf5_version, m)?)?;
    m.add_function(wrap_pyfunction!(_stop_everything, m)?)?;
    m.add_function(wrap_pyfunction!(_stop_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(_forked, m)?)?;
    m.add_function(wrap_pyfunction!(_releases_gil_inside_hdf5, m)?)?;
    m.add_function(wrap_pyfunction!(_waiting_inside_hdf5, m)?)?;
    m.add_function(wrap_pyfunction!(_main_thread_waiting, m)?)?;
    m.add_function(wrap_pyfunction!(_keep_a_stop, m)?)?;
    m.add_function(wrap_pyfunction!(logs::_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(logs::_log_take, m)?)?;
    m.add_function(wrap_pyfunction!(logs::_log_stop, m)?)?;
    logs::install();
    Ok(())
}
