//! remfile as an HDF5 virtual file driver plugin.
//!
//! HDF5 1.14 and later load file drivers by name from plugin libraries on
//! `HDF5_PLUGIN_PATH`. With this library there, a program selects the driver
//! with `H5Pset_driver_by_name(fapl, "remfile", config)`, or any program
//! with the environment alone:
//!
//! ```sh
//! export HDF5_PLUGIN_PATH=/path/to/target/release   # holds libremfile_hdf5.so
//! export HDF5_DRIVER=remfile
//! export HDF5_DRIVER_CONFIG="cache=1GiB;stats=on"   # optional
//! python -c 'import h5py; print(list(h5py.File("https://example.com/f.nwb", "r")))'
//! ```
//!
//! The driver is the one `remfile::hdf5` registers: the same block cache,
//! read-ahead, metadata prefetch, chunk read-ahead, retries and errors. The
//! configuration string's keys are listed in `remfile::vfd::config::KEYS`, with what each sets.
//!
//! A program may load HDF5 privately (the h5py wheel loads its own copy under
//! a mangled name, without making its symbols global), so the plugin links
//! no HDF5 of its own: it takes HDF5's functions from the library that loads
//! it. A process can hold several HDF5s (the h5py and netCDF4 wheels bring
//! one each): the one loading the plugin is found from the caller's frame on
//! the stack, and every function is checked to lie in that library. If the
//! caller cannot be told and more than one HDF5 is loaded, the plugin
//! refuses to load rather than guess.

use std::ffi::{CStr, CString, c_int, c_void};
use std::panic::catch_unwind;
use std::sync::OnceLock;

use remfile::vfd::{self, HostApi};

/// `H5PL_TYPE_VFD`.
const H5PL_TYPE_VFD: c_int = 2;

/// The first HDF5 version that loads driver plugins.
const FIRST_VERSION: (u32, u32, u32) = (1, 14, 0);

/// What kind of plugin this is: a virtual file driver.
#[unsafe(no_mangle)]
pub extern "C" fn H5PLget_plugin_type() -> c_int {
    H5PL_TYPE_VFD
}

/// The driver's class, in the layout of the HDF5 that loads it; null (which
/// HDF5 reports as a failed load) if no HDF5 1.14+ is found in the process,
/// or if the one loading it is not the one the driver is bound to.
#[unsafe(no_mangle)]
pub extern "C" fn H5PLget_plugin_info() -> *const c_void {
    catch_unwind(|| {
        let caller = caller_object();
        match host(caller) {
            Some((home, api))
                if caller.map_or_else(
                    || matches!(find_hdf5(None), Found::One(only, _) if only == home),
                    |c| c == home,
                ) =>
            {
                vfd::class_for(api.version)
            }
            Some(_) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "remfile: the driver is bound to the first HDF5 library of this process that \
                         loaded it; another HDF5 library in the process cannot use it"
                    )
                });
                std::ptr::null()
            }
            None => std::ptr::null(),
        }
    })
    .unwrap_or(std::ptr::null())
}

/// The HDF5 library the driver calls (by its object's base address), found
/// once, from the first `caller` that loads the plugin: the driver's
/// callbacks call one library's functions, so one library of a process can
/// use it.
fn host(caller: Option<usize>) -> Option<(usize, &'static HostApi)> {
    static HOST: OnceLock<Option<(usize, &'static HostApi)>> = OnceLock::new();
    *HOST.get_or_init(|| {
        let (home, api) = match find_hdf5(caller) {
            Found::One(home, api) => (home, api),
            Found::None => {
                eprintln!(
                    "remfile: no HDF5 library that exports its functions was found in this \
                     process (a program that links HDF5 statically must export them, with \
                     -rdynamic); the driver is not loaded"
                );
                return None;
            }
            Found::Several(n) => {
                eprintln!(
                    "remfile: {n} HDF5 libraries are loaded and the one loading the driver could \
                     not be told; the driver is not loaded"
                );
                return None;
            }
        };
        if api.version < FIRST_VERSION {
            let (a, b, c) = api.version;
            eprintln!("remfile: HDF5 {a}.{b}.{c} cannot use driver plugins (1.14 or later can)");
            return None;
        }
        Some((home, vfd::install(api)))
    })
}

/// The loaded libraries' paths (the program's own first, as an empty name).
fn loaded_objects() -> Vec<CString> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, out: *mut c_void) -> c_int {
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

/// A symbol of an already loaded object, or null.
///
/// # Safety
/// `handle` is a handle from `dlopen`.
unsafe fn symbol(handle: *mut c_void, name: &CStr) -> *mut c_void {
    // SAFETY: per the caller, and `name` is a C string.
    unsafe { libc::dlsym(handle, name.as_ptr()) }
}

/// What [`find_hdf5`] found.
enum Found {
    /// The library (by its base address) and its functions.
    One(usize, HostApi),
    None,
    /// This many, with no caller to choose by.
    Several(usize),
}

/// Finds the HDF5 library at `caller` (the object's base address) among the
/// loaded objects, or the only one loaded if the caller is not known, and
/// takes the functions and error codes the driver needs from it.
fn find_hdf5(caller: Option<usize>) -> Found {
    let mut found: Vec<(usize, HostApi)> = Vec::new();
    for path in loaded_objects() {
        // SAFETY: RTLD_NOLOAD only looks up an object already loaded; an
        // empty name is the program itself.
        let handle = unsafe {
            let name = if path.as_bytes().is_empty() {
                std::ptr::null()
            } else {
                path.as_ptr()
            };
            libc::dlopen(name, libc::RTLD_NOLOAD | libc::RTLD_LAZY)
        };
        if handle.is_null() {
            continue;
        }
        // SAFETY: a handle just returned by dlopen.
        let home = object_of(unsafe { symbol(handle, c"H5open") });
        let api = home
            .filter(|&h| caller.is_none_or(|c| c == h) && found.iter().all(|(b, _)| *b != h))
            // SAFETY: a handle just returned by dlopen; each symbol, if
            // found, is the library's function or global of the type HDF5
            // declares, and only those of the object that defines `H5open`
            // are taken.
            .and_then(|h| unsafe { api_of(handle, h) }.map(|api| (h, api)));
        // The objects stay loaded by whoever loaded them: the handle only
        // counted one more use.
        // SAFETY: a handle from dlopen, closed once, no symbol of it held
        // past its object's own lifetime.
        unsafe { libc::dlclose(handle) };
        if let Some((home, api)) = api {
            if caller.is_some() {
                return Found::One(home, api);
            }
            found.push((home, api));
        }
    }
    match found.len() {
        0 => Found::None,
        1 => found
            .pop()
            .map_or(Found::None, |(home, api)| Found::One(home, api)),
        n => Found::Several(n),
    }
}

/// The base address of the loaded object that holds `addr`, if any.
fn object_of(addr: *const c_void) -> Option<usize> {
    if addr.is_null() {
        return None;
    }
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    let known = unsafe { libc::dladdr(addr, &mut info) } != 0;
    (known && !info.dli_fbase.is_null()).then_some(info.dli_fbase as usize)
}

/// The object (by base address) of the first frame on this thread's stack
/// that is not this plugin's: the library that called into it. `None` if
/// the stack cannot be walked there.
fn caller_object() -> Option<usize> {
    type Trace = extern "C" fn(*mut c_void, *mut c_void) -> c_int;
    unsafe extern "C" {
        // The unwinder's interface (libgcc_s, which Rust's standard library
        // links for unwinding), as the Itanium C++ ABI defines it.
        fn _Unwind_Backtrace(trace: Trace, arg: *mut c_void) -> c_int;
        fn _Unwind_GetIP(context: *mut c_void) -> usize;
    }
    struct Walk {
        own: usize,
        frames: usize,
        caller: Option<usize>,
    }
    extern "C" fn each(context: *mut c_void, arg: *mut c_void) -> c_int {
        const NO_REASON: c_int = 0;
        const END_OF_STACK: c_int = 5;
        // SAFETY: `arg` is the walk below, borrowed for the call; the
        // context is the unwinder's, valid during the call.
        let (walk, ip) = unsafe { (&mut *(arg as *mut Walk), _Unwind_GetIP(context)) };
        walk.frames += 1;
        if ip == 0 || walk.frames > 64 {
            return END_OF_STACK;
        }
        // The return address may be one past the call's last byte.
        match object_of((ip - 1) as *const c_void) {
            Some(base) if base == walk.own => NO_REASON,
            other => {
                walk.caller = other;
                END_OF_STACK
            }
        }
    }
    let mut walk = Walk {
        own: object_of(H5PLget_plugin_info as *const c_void)?,
        frames: 0,
        caller: None,
    };
    // SAFETY: the callback only reads its context and writes the walk.
    unsafe { _Unwind_Backtrace(each, &mut walk as *mut Walk as *mut c_void) };
    walk.caller
}

/// The driver's table from the library behind `handle`, if it is HDF5,
/// every symbol taken from the object at `home` (a library's handle also
/// finds its dependencies' symbols).
///
/// # Safety
/// `handle` is a handle from `dlopen`.
unsafe fn api_of(handle: *mut c_void, home: usize) -> Option<HostApi> {
    // SAFETY: per the caller; a symbol found by name is the library's
    // function or global of that name.
    unsafe {
        HostApi::from_symbols(|name| {
            let found = symbol(handle, name);
            if object_of(found) == Some(home) {
                found
            } else {
                std::ptr::null_mut()
            }
        })
    }
}
