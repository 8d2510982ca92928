//! The driver bound to h5py's HDF5 library, and what the package asks that
//! library about its open files: the driver set on an access property list,
//! a file's statistics, the account of its reads, the remote file it is read
//! from.

use std::ffi::{CString, c_void};
use std::sync::OnceLock;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use remfile::hdf5::driver::loader::{self, Control, FIRST_VERSION};
use remfile::hdf5::driver::{self, HostApi, hid_t};
use remfile::wait::sync::Mutex;

use crate::gil;
use crate::options::parse;
use crate::remote::{Remote, stats_dict};

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

/// Binds the driver to the HDF5 library that the already loaded shared
/// object at `path` (an h5py extension module) links, registers it there,
/// and returns that library's version.
#[pyfunction]
pub(crate) fn _bind_hdf5(path: &str) -> PyResult<(u32, u32, u32)> {
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

/// Sets the driver, with the configuration string `options`, on the file
/// access property list `fapl` (an id of h5py's HDF5). The caller holds
/// h5py's lock (and no lock of the package's: see `_bind_h5py`).
#[pyfunction]
pub(crate) fn _set_driver(fapl: hid_t, options: &str) -> PyResult<()> {
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
pub(crate) fn _file_stats<'py>(
    py: Python<'py>,
    file: hid_t,
) -> PyResult<Option<Bound<'py, PyDict>>> {
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
pub(crate) fn _driver_info_address(file: hid_t) -> PyResult<usize> {
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
pub(crate) fn _explain<'py>(py: Python<'py>, file: hid_t) -> PyResult<Option<Bound<'py, PyDict>>> {
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
pub(crate) fn _remote_of_file(file: hid_t) -> PyResult<Option<Remote>> {
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
pub(crate) fn _hdf5_version() -> Option<(u32, u32, u32)> {
    LIBRARY.get().map(|l| l.version)
}
