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
//! export HDF5_DRIVER_CONFIG="cache_capacity=1GiB;stats=on"   # optional
//! python -c 'import h5py; print(list(h5py.File("https://example.com/f.nwb", "r")))'
//! ```
//!
//! The driver is the one `remfile::hdf5` registers: the same block cache,
//! read-ahead, metadata prefetch, chunk read-ahead, retries and errors. The
//! configuration string's keys are listed in `remfile::hdf5::driver::config::KEYS`, with what each sets.
//!
//! A program may load HDF5 privately (the h5py wheel loads its own copy under
//! a mangled name, without making its symbols global), so the plugin links
//! no HDF5 of its own: it takes HDF5's functions from the library that loads
//! it. A process can hold several HDF5s (the h5py and netCDF4 wheels bring
//! one each): the one loading the plugin is found from the caller's frame on
//! the stack, and every function is checked to lie in that library. If the
//! caller cannot be told and more than one HDF5 is loaded, the plugin
//! refuses to load rather than guess.

use std::ffi::{c_int, c_void};
use std::panic::catch_unwind;
use std::sync::OnceLock;

use remfile::hdf5::driver::loader::scan::{self, Found};
use remfile::hdf5::driver::loader::{FIRST_VERSION, object_of};
use remfile::hdf5::driver::{self, HostApi};

/// `H5PL_TYPE_VFD`.
const H5PL_TYPE_VFD: c_int = 2;

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
                    || matches!(scan::find(None), Found::One(only) if only.base == home),
                    |c| c == home,
                ) =>
            {
                driver::class_for(api.version())
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
        let (home, api) = match scan::find(caller) {
            Found::One(found) => (found.base, found.api),
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
        if api.version() < FIRST_VERSION {
            let (a, b, c) = api.version();
            eprintln!("remfile: HDF5 {a}.{b}.{c} cannot use driver plugins (1.14 or later can)");
            return None;
        }
        // An HDF5 program has no tracing subscriber: what the driver
        // reports (REMFILE_STATS, a disk cache it cannot use) goes to stderr.
        driver::print_reports_with(|line| eprintln!("{line}"));
        Some((home, driver::install(api)))
    })
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
        match object_of(ip - 1) {
            Some(base) if base == walk.own => NO_REASON,
            other => {
                walk.caller = other;
                END_OF_STACK
            }
        }
    }
    let mut walk = Walk {
        own: object_of(H5PLget_plugin_info as *const () as usize)?,
        frames: 0,
        caller: None,
    };
    // SAFETY: the callback only reads its context and writes the walk.
    unsafe { _Unwind_Backtrace(each, &mut walk as *mut Walk as *mut c_void) };
    walk.caller
}
