//! The driver registered with the HDF5 library this crate links: the table
//! of its functions the driver calls, and the driver's id.

use std::ffi::c_void;
use std::fmt;
use std::sync::OnceLock;

use crate::hdf5::driver::{self, ErrorIds, HostApi, hid_t};

/// The linked library's version, `(major, minor, release)`.
pub(crate) fn library_version() -> (u32, u32, u32) {
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: plain out-parameters.
    unsafe { hdf5_sys::h5::H5get_libversion(&mut major, &mut minor, &mut release) };
    (major, minor, release)
}

/// The linked library's functions. Its driver info carries the reader, so
/// the configuration string (a plugin's way) is not needed.
fn linked_api() -> HostApi {
    HostApi {
        version: library_version(),
        push_error: hdf5_sys::h5e::H5Epush2,
        error_ids: ErrorIds {
            class: hdf5_sys::h5e::H5E_ERR_CLS,
            vfl: hdf5_sys::h5e::H5E_VFL,
            read: hdf5_sys::h5e::H5E_READERROR,
            cant_open: hdf5_sys::h5e::H5E_CANTOPENFILE,
            unsupported: hdf5_sys::h5e::H5E_UNSUPPORTED,
        },
        driver_info: Some(hdf5_sys::h5p::H5Pget_driver_info),
        driver_config: None,
    }
}

/// HDF5 refused to register the driver.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RegisterError {
    version: (u32, u32, u32),
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, b, c) = self.version;
        write!(
            f,
            "could not register the remfile driver with HDF5 {a}.{b}.{c}"
        )
    }
}

/// Registers the driver once per process; returns its id. Call with the
/// HDF5 lock held.
pub(crate) fn driver_id() -> Result<hid_t, RegisterError> {
    static ID: OnceLock<hid_t> = OnceLock::new();
    if let Some(&id) = ID.get() {
        return Ok(id);
    }
    let version = driver::install(linked_api()).version;
    let class: *const c_void = driver::class_for(version);
    // SAFETY: the class is a static of the layout this library version
    // reads, alive for the whole process as HDF5 requires.
    let id = unsafe { hdf5_sys::h5fd::H5FDregister(class.cast()) };
    if id < 0 {
        return Err(RegisterError { version });
    }
    Ok(*ID.get_or_init(|| id))
}
