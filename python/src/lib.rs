//! The native half of the `remfile_hdf5` Python package: a remote file
//! ([`Remote`], wrapped by the package's `RemoteFile`, an `io.RawIOBase`) and
//! the HDF5 driver bound to the HDF5 library h5py loaded (never to another
//! copy in the process: the netCDF4 wheel, conda and others bring their own).
//!
//! The Python package is the interface; this module is not (its names start
//! with an underscore where the package wraps them).

mod batch;
mod binding;
mod errors;
mod gil;
mod host;
mod lifecycle;
mod logs;
mod options;
mod remote;

use pyo3::prelude::*;
use remfile::hdf5::driver;
use remfile::wait;

use batch::Files;
use host::HOST;
use lifecycle::MAIN_THREAD;
use remote::Remote;

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
    m.add_function(wrap_pyfunction!(binding::_bind_hdf5, m)?)?;
    m.add_function(wrap_pyfunction!(options::check_options, m)?)?;
    m.add_function(wrap_pyfunction!(options::option_keys, m)?)?;
    m.add_function(wrap_pyfunction!(binding::_set_driver, m)?)?;
    m.add_function(wrap_pyfunction!(binding::_file_stats, m)?)?;
    m.add_function(wrap_pyfunction!(binding::_remote_of_file, m)?)?;
    m.add_function(wrap_pyfunction!(binding::_explain, m)?)?;
    m.add_function(wrap_pyfunction!(binding::_driver_info_address, m)?)?;
    m.add_function(wrap_pyfunction!(binding::_hdf5_version, m)?)?;
    m.add_function(wrap_pyfunction!(lifecycle::_stop_everything, m)?)?;
    m.add_function(wrap_pyfunction!(lifecycle::_stop_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(lifecycle::_forked, m)?)?;
    m.add_function(wrap_pyfunction!(gil::_releases_gil_inside_hdf5, m)?)?;
    m.add_function(wrap_pyfunction!(host::_waiting_inside_hdf5, m)?)?;
    m.add_function(wrap_pyfunction!(host::_main_thread_waiting, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_keep_a_stop, m)?)?;
    m.add_function(wrap_pyfunction!(logs::_log_level, m)?)?;
    m.add_function(wrap_pyfunction!(logs::_log_take, m)?)?;
    m.add_function(wrap_pyfunction!(logs::_log_stop, m)?)?;
    logs::install();
    Ok(())
}
