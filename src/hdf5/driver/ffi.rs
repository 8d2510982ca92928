//! `#[repr(C)]` mirrors of HDF5's virtual file driver structs.
//!
//! The sys crate's `H5FD_class_t` and `H5FD_t` do not match the C layout of any
//! HDF5 version, so the driver declares its own. `H5FD_class_t` comes in two
//! layouts, chosen at run time from the library's version:
//!
//! * up to 1.13.1 ([`ClassV1`], 280 bytes on x86-64);
//! * from 1.13.2 on ([`ClassV2`], 336 bytes): a `version` and a `value` come
//!   first, and the vector and selection callbacks and `del` and `ctl` are new.
//!
//! Enumerations (memory type, close degree) are taken as plain C ints.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};

/// `haddr_t`: a file address.
pub type haddr_t = u64;
/// `herr_t`: negative on failure.
pub type herr_t = i32;
/// `hsize_t`.
pub type hsize_t = u64;
/// `hid_t`: an identifier (64 bits since HDF5 1.10).
pub type hid_t = i64;

/// `H5FD_mem_t`, an `enum` in C.
pub type H5FD_mem_t = c_int;
/// `hbool_t`: C99 `bool` in every build this crate supports.
pub type hbool_t = u8;

pub const H5FD_MEM_NTYPES: usize = 7;
pub const H5FD_MEM_SUPER: H5FD_mem_t = 1;
pub const H5FD_MEM_DRAW: H5FD_mem_t = 3;
/// Raw data in its own free list, all metadata in another (as `sec2` does).
pub const FLMAP_DICHOTOMY: [H5FD_mem_t; H5FD_MEM_NTYPES] = [
    H5FD_MEM_SUPER,
    H5FD_MEM_SUPER,
    H5FD_MEM_SUPER,
    H5FD_MEM_DRAW,
    H5FD_MEM_DRAW,
    H5FD_MEM_SUPER,
    H5FD_MEM_SUPER,
];

pub const H5F_CLOSE_WEAK: c_int = 1;

pub const H5F_ACC_RDWR: c_uint = 0x0001;
pub const H5F_ACC_TRUNC: c_uint = 0x0002;
pub const H5F_ACC_EXCL: c_uint = 0x0004;
pub const H5F_ACC_CREAT: c_uint = 0x0010;
pub const H5F_ACC_SWMR_WRITE: c_uint = 0x0020;
/// Every flag that asks for write access.
pub const WRITE_FLAGS: c_uint =
    H5F_ACC_RDWR | H5F_ACC_TRUNC | H5F_ACC_EXCL | H5F_ACC_CREAT | H5F_ACC_SWMR_WRITE;

pub const H5FD_FEAT_AGGREGATE_METADATA: c_ulong = 0x0001;
pub const H5FD_FEAT_ACCUMULATE_METADATA: c_ulong = 0x0002 | 0x0004;
pub const H5FD_FEAT_DATA_SIEVE: c_ulong = 0x0008;
pub const H5FD_FEAT_AGGREGATE_SMALLDATA: c_ulong = 0x0010;

/// The version of [`ClassV2`] (`H5FD_CLASS_VERSION`).
pub const H5FD_CLASS_VERSION: c_uint = 1;

/// The public part of an open file, which HDF5 fills in after `open`; the
/// driver's own fields follow it in memory.
#[repr(C)]
pub struct H5FD_t {
    pub driver_id: hid_t,
    pub cls: *const c_void,
    pub fileno: c_ulong,
    pub access_flags: c_uint,
    pub feature_flags: c_ulong,
    pub maxaddr: haddr_t,
    pub base_addr: haddr_t,
    pub threshold: hsize_t,
    pub alignment: hsize_t,
    pub paged_aggr: hbool_t,
}

pub type TerminateFn = unsafe extern "C" fn() -> herr_t;
pub type FaplGetFn = unsafe extern "C" fn(*mut H5FD_t) -> *mut c_void;
pub type FaplCopyFn = unsafe extern "C" fn(*const c_void) -> *mut c_void;
pub type FaplFreeFn = unsafe extern "C" fn(*mut c_void) -> herr_t;
pub type OpenFn = unsafe extern "C" fn(*const c_char, c_uint, hid_t, haddr_t) -> *mut H5FD_t;
pub type CloseFn = unsafe extern "C" fn(*mut H5FD_t) -> herr_t;
pub type CmpFn = unsafe extern "C" fn(*const H5FD_t, *const H5FD_t) -> c_int;
pub type QueryFn = unsafe extern "C" fn(*const H5FD_t, *mut c_ulong) -> herr_t;
pub type GetEoaFn = unsafe extern "C" fn(*const H5FD_t, H5FD_mem_t) -> haddr_t;
pub type SetEoaFn = unsafe extern "C" fn(*mut H5FD_t, H5FD_mem_t, haddr_t) -> herr_t;
pub type GetHandleFn = unsafe extern "C" fn(*mut H5FD_t, hid_t, *mut *mut c_void) -> herr_t;
pub type ReadFn =
    unsafe extern "C" fn(*mut H5FD_t, H5FD_mem_t, hid_t, haddr_t, usize, *mut c_void) -> herr_t;
pub type WriteFn =
    unsafe extern "C" fn(*mut H5FD_t, H5FD_mem_t, hid_t, haddr_t, usize, *const c_void) -> herr_t;
pub type ReadVectorFn = unsafe extern "C" fn(
    *mut H5FD_t,
    hid_t,
    u32,
    *mut H5FD_mem_t,
    *mut haddr_t,
    *mut usize,
    *mut *mut c_void,
) -> herr_t;

/// A callback slot the driver leaves empty (HDF5 checks for NULL).
pub type Unused = Option<unsafe extern "C" fn()>;

/// The callbacks and settings both layouts of `H5FD_class_t` share, in their
/// order: from `name` to `write`. Nested in a `#[repr(C)]` class, it lays out
/// as if its fields stood there one by one (its first field is a pointer, so
/// it starts aligned; it ends with one, so it has no trailing padding).
#[repr(C)]
pub struct Core {
    pub name: *const c_char,
    pub maxaddr: haddr_t,
    pub fc_degree: c_int,
    pub terminate: Option<TerminateFn>,
    pub sb_size: Unused,
    pub sb_encode: Unused,
    pub sb_decode: Unused,
    pub fapl_size: usize,
    pub fapl_get: Option<FaplGetFn>,
    pub fapl_copy: Option<FaplCopyFn>,
    pub fapl_free: Option<FaplFreeFn>,
    pub dxpl_size: usize,
    pub dxpl_copy: Unused,
    pub dxpl_free: Unused,
    pub open: Option<OpenFn>,
    pub close: Option<CloseFn>,
    pub cmp: Option<CmpFn>,
    pub query: Option<QueryFn>,
    pub get_type_map: Unused,
    pub alloc: Unused,
    pub free: Unused,
    pub get_eoa: Option<GetEoaFn>,
    pub set_eoa: Option<SetEoaFn>,
    pub get_eof: Option<GetEoaFn>,
    pub get_handle: Option<GetHandleFn>,
    pub read: Option<ReadFn>,
    pub write: Option<WriteFn>,
}

/// `flush`, `truncate`, `lock` and `unlock`, which a read-only driver leaves
/// empty.
#[repr(C)]
pub struct Unimplemented {
    pub flush: Unused,
    pub truncate: Unused,
    pub lock: Unused,
    pub unlock: Unused,
}

impl Unimplemented {
    pub const ALL: Unimplemented = Unimplemented {
        flush: None,
        truncate: None,
        lock: None,
        unlock: None,
    };
}

/// `H5FD_class_t` of HDF5 1.10 to 1.13.1.
#[repr(C)]
pub struct ClassV1 {
    pub core: Core,
    pub unimplemented: Unimplemented,
    pub fl_map: [H5FD_mem_t; H5FD_MEM_NTYPES],
}

/// `H5FD_class_t` of HDF5 1.13.2 and later (1.14, 2.x).
#[repr(C)]
pub struct ClassV2 {
    pub version: c_uint,
    pub value: c_int,
    pub core: Core,
    pub read_vector: Option<ReadVectorFn>,
    pub write_vector: Unused,
    pub read_selection: Unused,
    pub write_selection: Unused,
    pub unimplemented: Unimplemented,
    pub del: Unused,
    pub ctl: Unused,
    pub fl_map: [H5FD_mem_t; H5FD_MEM_NTYPES],
}

// SAFETY: a class holds pointers only to static strings and to functions,
// and is never written after it is made: sharing it between threads is safe.
unsafe impl Sync for ClassV1 {}
// SAFETY: as for `ClassV1`.
unsafe impl Sync for ClassV2 {}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_headers() {
        assert_eq!(std::mem::size_of::<H5FD_t>(), 80);
        assert_eq!(std::mem::size_of::<ClassV1>(), 280);
        assert_eq!(std::mem::size_of::<ClassV2>(), 336);
        assert_eq!(std::mem::offset_of!(ClassV1, core.read), 200);
        assert_eq!(std::mem::offset_of!(ClassV2, core.name), 8);
        assert_eq!(std::mem::offset_of!(ClassV2, core.read), 208);
        assert_eq!(std::mem::offset_of!(ClassV2, read_vector), 224);
        assert_eq!(std::mem::offset_of!(ClassV2, unimplemented.flush), 256);
        assert_eq!(std::mem::offset_of!(ClassV2, fl_map), 304);
        assert_eq!(std::mem::offset_of!(ClassV1, fl_map), 248);
    }
}
