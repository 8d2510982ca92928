//! A dataset's or attribute's line in the walk: its type, shape, and a hash
//! of the values read of it, read through HDF5's C interface (the `hdf5`
//! crate reads only types known at compile time).
#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::hash_map::DefaultHasher;
use std::ffi::c_void;
use std::hash::{Hash, Hasher};

use hdf5_sys::h5::{herr_t, hsize_t};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::{h5a, h5d, h5p, h5s, h5t};
use remfile::hdf5::hdf5_metno as h5lib;

/// The most bytes read of one dataset or attribute (its first elements):
/// enough to cross several chunks of the seeds' datasets, so that the chunk
/// read-ahead runs, while a dataset that claims terabytes costs nothing.
pub const MAX_READ: u64 = 1 << 20;

/// What is described.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dataset,
    Attribute,
}

/// HDF5 identifiers closed when dropped.
struct Id(hid_t, unsafe extern "C" fn(hid_t) -> herr_t);

impl Drop for Id {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: an identifier this walk opened, closed once.
            unsafe { (self.1)(self.0) };
        }
    }
}

/// A dataset's or attribute's type and dataspace, open.
struct Layout {
    dtype: Id,
    space: Id,
    /// The type's class (`H5T_class_t`).
    class: i32,
    /// The size of one element.
    size: u64,
    rank: i32,
    shape: Vec<u64>,
}

/// A dataset's or attribute's type, shape and values (a hash of the bytes
/// read of them). With `read` false, only the type and shape.
pub(super) fn describe(obj: hid_t, kind: Kind, read: bool) -> String {
    h5lib::sync::sync(|| {
        // SAFETY: `obj` is an open dataset or attribute (per `kind`) and the
        // lock is held.
        unsafe { describe_locked(obj, kind, read) }
    })
}

/// [`describe`] with HDF5's lock held.
///
/// # Safety
///
/// `obj` is an open dataset or attribute (per `kind`); the HDF5 lock is
/// held.
unsafe fn describe_locked(obj: hid_t, kind: Kind, read: bool) -> String {
    // SAFETY: as the function's.
    let layout = match unsafe { layout(obj, kind) } {
        Ok(layout) => layout,
        Err(text) => return text,
    };
    let (class, size, shape) = (layout.class, layout.size, &layout.shape);
    let mut text = format!("class {class} size {size} shape {shape:?}");
    // SAFETY: `layout.space` is open.
    let points = unsafe { h5s::H5Sget_simple_extent_npoints(layout.space.0) };
    if points <= 0 || layout.size == 0 || layout.size > MAX_READ || !read {
        return text;
    }
    // SAFETY: as the function's; `layout` is `obj`'s.
    text.push_str(&unsafe { values(obj, kind, &layout) });
    text
}

/// Opens the type and dataspace of `obj` and reads its element size and
/// shape; the walk's text for it if any of that fails.
///
/// # Safety
///
/// As [`describe_locked`]'s.
unsafe fn layout(obj: hid_t, kind: Kind) -> Result<Layout, String> {
    // SAFETY: as the function's; what is opened is closed by `Id`, and the
    // shape's buffer is as long as the rank HDF5 gave.
    unsafe {
        let (dtype, space) = match kind {
            Kind::Dataset => (h5d::H5Dget_type(obj), h5d::H5Dget_space(obj)),
            Kind::Attribute => (h5a::H5Aget_type(obj), h5a::H5Aget_space(obj)),
        };
        let dtype = Id(dtype, h5t::H5Tclose);
        let space = Id(space, h5s::H5Sclose);
        if dtype.0 < 0 || space.0 < 0 {
            return Err("type or space error".to_owned());
        }
        let size = h5t::H5Tget_size(dtype.0) as u64;
        let class = h5t::H5Tget_class(dtype.0) as i32;
        let rank = h5s::H5Sget_simple_extent_ndims(space.0);
        if !(0..=32).contains(&rank) {
            return Err(format!("class {class} size {size} rank error"));
        }
        let mut shape = vec![0 as hsize_t; rank as usize];
        if h5s::H5Sget_simple_extent_dims(space.0, shape.as_mut_ptr(), std::ptr::null_mut()) < 0 {
            return Err(format!("class {class} size {size} shape error"));
        }
        Ok(Layout {
            dtype,
            space,
            class,
            size,
            rank,
            shape,
        })
    }
}

/// What the walk says of `obj`'s values, after its type and shape: a hash
/// of the leading ones, or why they were not read.
///
/// # Safety
///
/// As [`describe_locked`]'s; `layout` is `obj`'s.
unsafe fn values(obj: hid_t, kind: Kind, layout: &Layout) -> String {
    // HDF5 1.10 allocates (and clears) what each variable-length value's
    // stored length says, through either driver: gigabytes for a damaged
    // one. Their types and shapes are compared, not values.
    // SAFETY: `layout.dtype` is open; the lock is held.
    if unsafe { has_variable_length(layout.dtype.0, 0) } {
        return " variable-length, not read".to_owned();
    }
    let counts = match kind {
        Kind::Dataset => selection(&layout.shape, layout.size),
        Kind::Attribute => layout.shape.clone(),
    };
    let elements = counts.iter().product::<u64>().max(1);
    let Some(bytes) = elements.checked_mul(layout.size).filter(|&b| b <= MAX_READ) else {
        return " not read".to_owned();
    };
    let mut buf = vec![0u64; bytes.div_ceil(8) as usize];
    // SAFETY: as the function's; `buf` holds `bytes`, the selection's.
    let read = unsafe { read_into(obj, kind, layout, &counts, buf.as_mut_ptr().cast()) };
    if let Err(failed) = read {
        return format!(" {failed}");
    }
    // SAFETY: `buf` holds at least `bytes` bytes, all initialised.
    let raw = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), bytes as usize) };
    let mut hash = DefaultHasher::new();
    raw.hash(&mut hash);
    format!(" values {:016x}", hash.finish())
}

/// Reads the selection from the origin of `counts` elements (a dataset's)
/// or all of them (an attribute's) into `ptr`; what failed if anything did.
///
/// # Safety
///
/// As [`values`]'; `ptr` has room for the selection's bytes.
unsafe fn read_into(
    obj: hid_t,
    kind: Kind,
    layout: &Layout,
    counts: &[u64],
    ptr: *mut c_void,
) -> Result<(), &'static str> {
    // SAFETY: as the function's; every identifier opened is closed by `Id`,
    // and the arrays passed are `rank` long.
    unsafe {
        let dims: Vec<hsize_t> = counts.iter().map(|&c| c as hsize_t).collect();
        let mem_space = if layout.rank == 0 {
            Id(h5s::H5Screate(h5s::H5S_class_t::H5S_SCALAR), h5s::H5Sclose)
        } else {
            let space = h5s::H5Screate_simple(layout.rank, dims.as_ptr(), std::ptr::null());
            Id(space, h5s::H5Sclose)
        };
        if mem_space.0 < 0 {
            return Err("memory space error");
        }
        let status = match kind {
            Kind::Dataset => {
                if layout.rank > 0 {
                    let start = vec![0 as hsize_t; dims.len()];
                    let selected = h5s::H5Sselect_hyperslab(
                        layout.space.0,
                        h5s::H5S_seloper_t::H5S_SELECT_SET,
                        start.as_ptr(),
                        std::ptr::null(),
                        dims.as_ptr(),
                        std::ptr::null(),
                    );
                    if selected < 0 {
                        return Err("selection error");
                    }
                }
                let (dtype, space) = (layout.dtype.0, layout.space.0);
                h5d::H5Dread(obj, dtype, mem_space.0, space, h5p::H5P_DEFAULT, ptr)
            }
            Kind::Attribute => h5a::H5Aread(obj, layout.dtype.0, ptr),
        };
        if status < 0 {
            return Err("read error");
        }
        Ok(())
    }
}

/// Whether values of type `t` hold variable-length sequences or strings,
/// anywhere in them (HDF5's own `H5Tdetect_class` misses variable-length
/// strings). `depth`: how deep in nested types this one is (bounded: a
/// file's types are a few levels deep).
///
/// # Safety
///
/// `t` is an open datatype; the HDF5 lock is held.
unsafe fn has_variable_length(t: hid_t, depth: u32) -> bool {
    use h5t::H5T_class_t::{H5T_ARRAY, H5T_COMPOUND, H5T_STRING, H5T_VLEN};
    if depth > 8 {
        return true;
    }
    // SAFETY: as the function's; each type opened is closed by `Id`.
    unsafe {
        match h5t::H5Tget_class(t) {
            H5T_VLEN => true,
            H5T_STRING => h5t::H5Tis_variable_str(t) != 0,
            H5T_ARRAY => {
                let base = Id(h5t::H5Tget_super(t), h5t::H5Tclose);
                base.0 < 0 || has_variable_length(base.0, depth + 1)
            }
            H5T_COMPOUND => {
                let n = h5t::H5Tget_nmembers(t);
                n < 0
                    || (0..n as u32).any(|i| {
                        let member = Id(h5t::H5Tget_member_type(t, i), h5t::H5Tclose);
                        member.0 < 0 || has_variable_length(member.0, depth + 1)
                    })
            }
            _ => false,
        }
    }
}

/// Counts of a selection from the origin of a dataset of `shape`, of
/// elements of `size` bytes, that reads at most [`MAX_READ`] bytes: the
/// whole dataset if it fits, else fewer along the leading dimensions.
pub(super) fn selection(shape: &[u64], size: u64) -> Vec<u64> {
    let mut counts = shape.to_vec();
    let bytes = |c: &[u64], skip: Option<usize>| {
        c.iter()
            .enumerate()
            .filter(|&(i, _)| Some(i) != skip)
            .try_fold(size, |acc, (_, &n)| acc.checked_mul(n))
            .unwrap_or(u64::MAX)
    };
    for dim in 0..counts.len() {
        if bytes(&counts, None) <= MAX_READ {
            break;
        }
        let others = bytes(&counts, Some(dim));
        counts[dim] = counts[dim].min((MAX_READ / others.max(1)).max(1));
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of [`selection`]'s bytes.
    fn selection_bytes(shape: &[u64], size: u64) -> u64 {
        selection(shape, size).iter().product::<u64>() * size
    }

    #[test]
    fn a_selection_reads_at_most_max_read() {
        assert_eq!(selection(&[10, 10], 8), [10, 10], "all of a small one");
        assert_eq!(selection(&[], 8), Vec::<u64>::new());
        assert!(selection_bytes(&[1 << 40, 64], 2) <= MAX_READ);
        assert_eq!(selection(&[1 << 40, 64], 2)[1], 64, "whole rows");
        assert_eq!(selection(&[3, 1 << 40], 8), [1, MAX_READ / 8]);
        assert!(selection_bytes(&[u64::MAX, u64::MAX, 7], 1 << 19) <= MAX_READ);
        assert_eq!(selection(&[0, 1 << 40], 8)[0], 0);
    }
}
