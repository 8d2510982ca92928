//! The HDF5 functions the driver calls, as a table: the `hdf5` module fills
//! it from the library it links; a plugin, from the library that loaded it
//! (a program may hold HDF5 privately, so a plugin cannot link its own).

use std::ffi::{c_char, c_uint, c_void};
use std::sync::OnceLock;

use super::ffi::{herr_t, hid_t};

/// `H5Epush2`.
pub(crate) type PushError = unsafe extern "C" fn(
    stack: hid_t,
    file: *const c_char,
    func: *const c_char,
    line: c_uint,
    class: hid_t,
    major: hid_t,
    minor: hid_t,
    format: *const c_char,
    ...
) -> herr_t;

/// `H5Pget_driver_info`.
pub(crate) type DriverInfo = unsafe extern "C" fn(fapl: hid_t) -> *mut c_void;

/// `H5Pget_driver_config_str` (HDF5 1.14 and later).
pub(crate) type DriverConfig =
    unsafe extern "C" fn(fapl: hid_t, buf: *mut c_char, size: usize) -> isize;

/// Where the library keeps the error class and codes the driver reports
/// with (`H5E_ERR_CLS_g` and others): addresses, read when an error is
/// pushed (the library sets them when it starts).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorIds {
    /// `H5E_ERR_CLS_g`.
    pub(crate) class: *const hid_t,
    /// `H5E_VFL_g`, the major code.
    pub(crate) vfl: *const hid_t,
    /// `H5E_READERROR_g`.
    pub(crate) read: *const hid_t,
    /// `H5E_CANTOPENFILE_g`.
    pub(crate) cant_open: *const hid_t,
    /// `H5E_UNSUPPORTED_g`.
    pub(crate) unsupported: *const hid_t,
}

/// The HDF5 library the driver serves: its version and the functions the
/// driver calls.
#[derive(Debug, Clone, Copy)]
pub struct HostApi {
    /// `(major, minor, release)`, which decides the layout of the driver's
    /// class.
    pub(crate) version: (u32, u32, u32),
    /// `H5Epush2`.
    pub(crate) push_error: PushError,
    /// The error class and codes.
    pub(crate) error_ids: ErrorIds,
    /// `H5Pget_driver_info`, where the driver's reader comes in the fapl
    /// (the `hdf5` module's way; a plugin's is the configuration string).
    pub(crate) driver_info: Option<DriverInfo>,
    /// `H5Pget_driver_config_str`; absent before HDF5 1.14.
    pub(crate) driver_config: Option<DriverConfig>,
}

impl HostApi {
    /// The library's version, `(major, minor, release)`.
    pub fn version(&self) -> (u32, u32, u32) {
        self.version
    }

    /// Whether `other` is the table of the same library (the same error
    /// class, which each library of a process keeps at its own address).
    pub fn is_same_library(&self, other: &HostApi) -> bool {
        std::ptr::eq(self.error_ids.class, other.error_ids.class)
    }
}

// SAFETY: the table holds function pointers and addresses of the library's
// globals, valid for the whole process and read only under HDF5's lock.
unsafe impl Send for HostApi {}
// SAFETY: as above.
unsafe impl Sync for HostApi {}

static HOST: OnceLock<HostApi> = OnceLock::new();

/// Makes `api` the library the driver calls; the first call wins (one
/// process holds one HDF5 for the driver). Returns the table in force.
pub fn install(api: HostApi) -> &'static HostApi {
    HOST.get_or_init(|| api)
}

/// The library the driver calls, once [`install`]ed.
pub(crate) fn host() -> Option<&'static HostApi> {
    HOST.get()
}

/// Which error code a driver error carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Minor {
    Read,
    CantOpen,
    Unsupported,
}

/// Pushes `message` on HDF5's error stack as the driver's error; nothing if
/// no library is installed (no HDF5 call can be under way then).
pub(crate) fn push_error(minor: Minor, message: &std::ffi::CStr) {
    let Some(host) = host() else {
        return;
    };
    let ids = host.error_ids;
    let minor = match minor {
        Minor::Read => ids.read,
        Minor::CantOpen => ids.cant_open,
        Minor::Unsupported => ids.unsupported,
    };
    // SAFETY: the ids point to the library's globals, set by the time it
    // calls the driver; the format is "%s" and its one argument a valid C
    // string.
    unsafe {
        (host.push_error)(
            0, // H5E_DEFAULT
            c"remfile".as_ptr(),
            c"remfile driver".as_ptr(),
            line!(),
            *ids.class,
            *ids.vfl,
            *minor,
            c"%s".as_ptr(),
            message.as_ptr(),
        );
    }
}
