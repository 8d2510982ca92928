//! Finding the HDF5 library a program loaded, and binding the driver to it:
//! the one binder of the plugin (`hdf5-plugin/`, loaded by that library)
//! and of the Python package (bound to h5py's library).
//!
//! A library is taken for HDF5 by the symbols it defines itself (`H5open`,
//! `H5get_libversion` and the others the driver calls), never by those of
//! its dependencies; the functions are called with the signatures HDF5
//! declares, as a program linking it would.

use std::ffi::{CStr, c_char, c_int, c_void};

use super::api::{DriverConfig, ErrorIds, HostApi, PushError};
use super::ffi::{herr_t, hid_t};

/// The first HDF5 version the driver serves: earlier ones cannot pass a
/// driver its configuration string (`H5Pget_driver_config_str`) nor load
/// one as a plugin.
pub const FIRST_VERSION: (u32, u32, u32) = (1, 14, 0);

/// An HDF5 library loaded in this process.
#[derive(Debug, Clone, Copy)]
pub struct Loaded {
    /// The base address of the object that defines it.
    pub base: usize,
    /// The functions the driver calls.
    pub api: HostApi,
    /// The functions a program calls to use the driver (`None` if one is
    /// missing).
    pub control: Option<Control>,
}

/// `H5FDregister`.
pub type Register = unsafe extern "C" fn(class: *const c_void) -> hid_t;
/// `H5FDis_driver_registered_by_name`.
pub type IsRegistered = unsafe extern "C" fn(name: *const c_char) -> c_int;
/// `H5Pset_driver_by_name`.
pub type SetDriverByName =
    unsafe extern "C" fn(fapl: hid_t, name: *const c_char, config: *const c_char) -> herr_t;
/// `H5Fget_access_plist`, `H5Pget_driver`.
pub type IdOf = unsafe extern "C" fn(id: hid_t) -> hid_t;
/// `H5Pclose`.
pub type Close = unsafe extern "C" fn(id: hid_t) -> herr_t;
/// `H5Pget_driver_info`.
pub type DriverInfo = unsafe extern "C" fn(fapl: hid_t) -> *const c_void;
/// `H5Fget_vfd_handle`.
pub type VfdHandle =
    unsafe extern "C" fn(file: hid_t, fapl: hid_t, out: *mut *mut c_void) -> herr_t;

/// The functions of a loaded HDF5 library that a program calls to register
/// the driver, set it on a file access property list and find the files it
/// reads. Calling them is the caller's to make safe, as with any HDF5
/// function: under the lock that serializes the library's calls (h5py's).
#[derive(Debug, Clone, Copy)]
pub struct Control {
    pub register: Register,
    pub is_registered: IsRegistered,
    pub set_driver_by_name: SetDriverByName,
    pub get_access_plist: IdOf,
    pub get_driver: IdOf,
    pub close_plist: Close,
    pub get_vfd_handle: VfdHandle,
    pub get_driver_info: DriverInfo,
}

/// The HDF5 library that the loaded object at `path` is or links (an h5py
/// extension module, say), if it is loaded and HDF5 is behind it.
pub fn behind(path: &CStr) -> Option<Loaded> {
    bound_at(path, None)
}

/// The base address of the loaded object that holds the address `addr`,
/// if any.
pub fn object_of(addr: usize) -> Option<usize> {
    if addr == 0 {
        return None;
    }
    // SAFETY: all-zero is a valid Dl_info (null pointers).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and fills `info`; any
    // address may be asked about.
    let known = unsafe { libc::dladdr(addr as *const c_void, &mut info) } != 0;
    (known && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

/// The HDF5 library behind the loaded object at `path` (empty: the program
/// itself), if it is defined at `base` where one is given.
fn bound_at(path: &CStr, base: Option<usize>) -> Option<Loaded> {
    // SAFETY: RTLD_NOLOAD only looks up an object already loaded (no code
    // of it runs); a null name is the program itself.
    let handle = unsafe {
        let name = if path.to_bytes().is_empty() {
            std::ptr::null()
        } else {
            path.as_ptr()
        };
        libc::dlopen(name, libc::RTLD_NOLOAD | libc::RTLD_LAZY)
    };
    if handle.is_null() {
        return None;
    }
    let symbol = |name: &CStr| {
        // SAFETY: a handle just returned by dlopen, and a C string.
        unsafe { libc::dlsym(handle, name.as_ptr()) }
    };
    let home = object_of(symbol(c"H5open") as usize).filter(|&h| base.is_none_or(|b| b == h));
    let loaded = home.and_then(|home| {
        // Only the symbols the object defining `H5open` defines: a
        // handle's look-up also finds those of its dependencies.
        let own = |name: &CStr| {
            let found = symbol(name);
            if object_of(found as usize) == Some(home) {
                found
            } else {
                std::ptr::null_mut()
            }
        };
        // SAFETY: each symbol taken is the library's own, of the name HDF5
        // declares it under.
        let api = unsafe { api_of(own) }?;
        // SAFETY: as above.
        let control = unsafe { control_of(own) };
        Some(Loaded {
            base: home,
            api,
            control,
        })
    });
    // The object stays loaded by whoever loaded it: the handle only counted
    // one more use.
    // SAFETY: a handle from dlopen, closed once; no symbol of it is held
    // past its object's own lifetime (it is never unloaded while HDF5 runs).
    unsafe { libc::dlclose(handle) };
    loaded
}

/// The driver's table of the HDF5 library whose symbols `lookup` finds
/// (null for a name it does not export), or `None` if it is not HDF5. A
/// loaded library's fapl carries a configuration string, never a reader,
/// so [`driver_info`](HostApi::driver_info) is left out.
///
/// # Safety
/// Each non-null pointer `lookup` returns is the library's symbol of
/// that name: the function or global of the type HDF5 declares.
unsafe fn api_of(lookup: impl Fn(&CStr) -> *mut c_void) -> Option<HostApi> {
    type Version = unsafe extern "C" fn(*mut u32, *mut u32, *mut u32) -> c_int;
    let get = |name: &CStr| Some(lookup(name)).filter(|p| !p.is_null());
    let id = |name: &CStr| get(name).map(|p| p as *const hid_t);
    let error_ids = ErrorIds {
        class: id(c"H5E_ERR_CLS_g")?,
        vfl: id(c"H5E_VFL_g")?,
        read: id(c"H5E_READERROR_g")?,
        cant_open: id(c"H5E_CANTOPENFILE_g")?,
        unsupported: id(c"H5E_UNSUPPORTED_g")?,
    };
    // SAFETY: per the caller, each pointer is the HDF5 function of that
    // name, whose C signature the pointer type spells.
    unsafe {
        let version: Version = std::mem::transmute(get(c"H5get_libversion")?);
        let (mut major, mut minor, mut release) = (0, 0, 0);
        version(&mut major, &mut minor, &mut release);
        Some(HostApi {
            version: (major, minor, release),
            push_error: std::mem::transmute::<*mut c_void, PushError>(get(c"H5Epush2")?),
            error_ids,
            driver_info: None,
            driver_config: get(c"H5Pget_driver_config_str")
                .map(|p| std::mem::transmute::<*mut c_void, DriverConfig>(p)),
        })
    }
}

/// The program-facing functions among the symbols `lookup` finds.
///
/// # Safety
/// Each non-null pointer `lookup` returns is the library's function of
/// that name, of the signature HDF5 declares.
unsafe fn control_of(lookup: impl Fn(&CStr) -> *mut c_void) -> Option<Control> {
    let get = |name: &CStr| Some(lookup(name)).filter(|p| !p.is_null());
    // SAFETY: per the caller, each pointer is the HDF5 function of that
    // name, whose C signature the type spells.
    unsafe {
        Some(Control {
            register: std::mem::transmute::<*mut c_void, Register>(get(c"H5FDregister")?),
            is_registered: std::mem::transmute::<*mut c_void, IsRegistered>(get(
                c"H5FDis_driver_registered_by_name",
            )?),
            set_driver_by_name: std::mem::transmute::<*mut c_void, SetDriverByName>(get(
                c"H5Pset_driver_by_name",
            )?),
            get_access_plist: std::mem::transmute::<*mut c_void, IdOf>(get(
                c"H5Fget_access_plist",
            )?),
            get_driver: std::mem::transmute::<*mut c_void, IdOf>(get(c"H5Pget_driver")?),
            close_plist: std::mem::transmute::<*mut c_void, Close>(get(c"H5Pclose")?),
            get_vfd_handle: std::mem::transmute::<*mut c_void, VfdHandle>(get(
                c"H5Fget_vfd_handle",
            )?),
            get_driver_info: std::mem::transmute::<*mut c_void, DriverInfo>(get(
                c"H5Pget_driver_info",
            )?),
        })
    }
}

#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd"
))]
pub mod scan {
    //! The loaded objects, where the loader can list them
    //! (`dl_iterate_phdr`: Linux and the BSDs).

    use std::ffi::{CStr, CString, c_int, c_void};

    use super::{Loaded, bound_at};

    /// What [`find`] found.
    #[derive(Debug)]
    pub enum Found {
        One(Loaded),
        None,
        /// This many, with nothing to choose by.
        Several(usize),
    }

    /// Finds the HDF5 library defined by the loaded object at `base` (the
    /// library that called a plugin), or the only one loaded if `base` is
    /// `None`.
    pub fn find(base: Option<usize>) -> Found {
        let mut found: Vec<Loaded> = Vec::new();
        for path in loaded_objects() {
            let Some(loaded) = bound_at(&path, base) else {
                continue;
            };
            if found.iter().any(|f| f.base == loaded.base) {
                continue;
            }
            if base.is_some() {
                return Found::One(loaded);
            }
            found.push(loaded);
        }
        match found.len() {
            0 => Found::None,
            1 => Found::One(found[0]),
            n => Found::Several(n),
        }
    }

    /// The loaded objects' paths (the program's own first, as an empty name).
    fn loaded_objects() -> Vec<CString> {
        unsafe extern "C" fn each(
            info: *mut libc::dl_phdr_info,
            _: usize,
            out: *mut c_void,
        ) -> c_int {
            // SAFETY: the loader passes a valid info, and `out` is the vector
            // below, borrowed for the call.
            let (info, out) = unsafe { (&*info, &mut *(out as *mut Vec<CString>)) };
            if !info.dlpi_name.is_null() {
                // SAFETY: a C string the loader owns, valid during the call.
                out.push(unsafe { CStr::from_ptr(info.dlpi_name) }.to_owned());
            }
            0
        }
        let mut out: Vec<CString> = Vec::new();
        // SAFETY: the callback only reads its info and pushes to `out`.
        unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut Vec<CString> as *mut c_void) };
        out
    }
}
