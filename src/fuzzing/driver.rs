//! The whole HDF5 driver under attack: a file (mutated HDF5, mostly) served
//! from memory at a size of the input's choosing, opened through
//! [`crate::hdf5`] (the metadata crawl and the chunk read-ahead on or off),
//! walked — every group, dataset and attribute, the datasets' first bytes
//! read — and the same walk made by HDF5's own `sec2` driver on a copy of
//! the bytes. The harness fails (panics) if the driver panicked anywhere,
//! even where it caught the panic, if the two walks differ in anything
//! (values, errors, which objects there are), or if a byte the driver's
//! cache holds differs from the file's.
//!
//! Why a differential walk rather than a check inside the read path: it
//! needs no hook in the driver, it judges what a user sees (the values and
//! the errors), and HDF5's reading of the same bytes through its own driver
//! is the oracle for every read at once, wherever a wrong byte would land.
//! The cache's own bytes are checked against the file besides, so that a
//! wrong byte HDF5 happened not to use is found too.

// Reads of values of any type go through HDF5's C interface: the `hdf5`
// crate reads only types known at compile time.
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::hash_map::DefaultHasher;
use std::ffi::c_void;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdf5_sys::h5::hsize_t;
use hdf5_sys::h5i::hid_t;
use hdf5_sys::{h5a, h5d, h5p, h5s, h5t};

use super::memory_server::Served;
use crate::hdf5::hdf5_metno::{self as h5lib, Group, LinkType, LocationToken, LocationType};
use crate::hdf5::{self as remote_hdf5, OpenOptions};
use crate::{RemoteFile, RetryPolicy};

/// The most objects, links and attributes a walk visits: a step bound,
/// whatever loops or fan-out the file's structure has (the seeds have a few
/// hundred).
pub const MAX_STEPS: usize = 2000;

/// The most bytes read of one dataset or attribute (its first elements):
/// enough to cross several chunks of the seeds' datasets, so that the chunk
/// read-ahead runs, while a dataset that claims terabytes costs nothing.
pub const MAX_READ: u64 = 1 << 20;

/// The largest size served for which the reference walk runs: its copy is
/// a sparse file of that size, which the file system must allow (ext4's
/// limit is 16 TiB). Larger claims are walked through the driver alone.
pub const MAX_REFERENCE_LEN: u64 = 1 << 40;

/// The URL the file is opened at (no request leaves the process).
const URL: &str = "http://memory.invalid/fuzzed.h5";

/// How long the walk waits, after closing, for the fetches the driver
/// started in the background: they only ever read memory.
const BACKGROUND_WAIT: Duration = Duration::from_secs(10);

/// What one input asks for: the bytes, the size to claim, and the driver's
/// options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input<'a> {
    /// The size the server claims (at least the bytes' length).
    pub len: u64,
    /// Whether the metadata crawl runs.
    pub metadata_prefetch: bool,
    /// Whether runs of chunk reads fetch the following chunks.
    pub chunk_read_ahead: bool,
    /// Whether each dataset's read is preceded by
    /// [`crate::hdf5::prefetch_hyperslab`] of the same selection.
    pub prefetch_hyperslab: bool,
    /// The remote file's block size.
    pub block_size: u64,
    /// The file's bytes.
    pub file: &'a [u8],
}

/// The sizes an input may claim, beyond its bytes' own: a little more (a
/// truncated file), past 4 GiB (32-bit offsets overflow), 1 TiB, and 2^50
/// bytes (where every length clipped only to the file's size is huge).
fn claimed_len(kind: u8, file_len: u64) -> u64 {
    match kind % 8 {
        0..=3 => file_len,
        4 => file_len + (1 << 20),
        5 => file_len + (1 << 32),
        6 => 1 << 40,
        _ => 1 << 50,
    }
}

/// The block sizes an input may choose: the driver's default, small ones
/// (many blocks per structure) and one that divides nothing evenly.
const BLOCK_SIZES: [u64; 4] = [crate::hdf5::BLOCK_SIZE, 4096, 64 << 10, 12_345];

/// The two bytes before the file in an input: the size kind (see
/// `claimed_len`) and the option bits (metadata prefetch off, chunk
/// read-ahead off, hyperslab prefetch on, and two bits of block size).
pub const HEADER_LEN: usize = 2;

impl Input<'_> {
    /// Reads an input: [`HEADER_LEN`] bytes of choices, then the file.
    pub fn decode(data: &[u8]) -> Option<Input<'_>> {
        let [kind, flags, file @ ..] = data else {
            return None;
        };
        Some(Input {
            len: claimed_len(*kind, file.len() as u64),
            metadata_prefetch: flags & 1 == 0,
            chunk_read_ahead: flags & 2 == 0,
            prefetch_hyperslab: flags & 4 != 0,
            block_size: BLOCK_SIZES[usize::from(flags >> 3 & 3)],
            file,
        })
    }
}

/// Runs the driver over `data` (an [`Input`]) and panics if it panicked,
/// disagreed with HDF5's own driver, or cached a wrong byte.
pub fn hdf5_driver(data: &[u8]) {
    let _ = hdf5_driver_walk(data);
}

/// As [`hdf5_driver`], and returns the walk: a line per object, link and
/// attribute (empty for an input too short to decode).
pub fn hdf5_driver_walk(data: &[u8]) -> Vec<String> {
    let Some(input) = Input::decode(data) else {
        return Vec::new();
    };
    count_panics();
    h5lib::silence_errors(true);
    let before = caught_panics();
    if std::env::var_os(REFERENCE_ONLY).is_some() {
        assert!(
            input.len <= MAX_REFERENCE_LEN,
            "{REFERENCE_ONLY}: the input claims more than the reference walk's sparse copy \
             can be; set its first byte to 6 to claim 1 TiB"
        );
        return walk_local(&input);
    }
    let served = Served::new(input.file, input.len);
    let through_driver = walk_remote(&served, &input);
    assert_eq!(
        caught_panics(),
        before,
        "the driver panicked (and caught it) on this input"
    );
    if input.len <= MAX_REFERENCE_LEN {
        let reference = walk_local(&input);
        if through_driver != reference {
            let diff = first_difference(&through_driver, &reference);
            panic!("the driver's walk differs from HDF5's own: {diff}");
        }
    }
    through_driver
}

/// Set in the environment, the walk is HDF5's own alone (no driver): to
/// tell whether a crash the fuzzer found is HDF5's.
pub const REFERENCE_ONLY: &str = "REMFILE_FUZZ_REFERENCE_ONLY";

/// Where two walks part, for the report.
fn first_difference(ours: &[String], theirs: &[String]) -> String {
    let at = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    format!(
        "at line {at}: driver {:?}, sec2 {:?} ({} and {} lines)",
        ours.get(at),
        theirs.get(at),
        ours.len(),
        theirs.len()
    )
}

/// Panics seen by the hook, caught or not.
static PANICS: AtomicU64 = AtomicU64::new(0);

/// Chains a hook that counts every panic, in any thread, before the one
/// there was (which prints it, or under libFuzzer aborts).
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn caught_panics() -> u64 {
    PANICS.load(Ordering::SeqCst)
}

/// Opens and walks the served file through the driver; then checks the
/// cache's bytes against the file's.
fn walk_remote(served: &Served, input: &Input<'_>) -> Vec<String> {
    let opened = remote_hdf5::builder()
        .agent(served.agent())
        .block_size(input.block_size)
        .cache_capacity(64 << 20)
        .retry_policy(RetryPolicy::never())
        .open(URL);
    let remote = match opened {
        Ok(remote) => remote,
        // Only an empty file is refused before HDF5 sees it; HDF5 refuses
        // that too.
        Err(_) => return vec![OPEN_FAILED.to_owned()],
    };
    assert_eq!(remote.len(), served.len(), "the size the server claimed");
    let options = OpenOptions::new()
        .metadata_prefetch(input.metadata_prefetch)
        .chunk_read_ahead(input.chunk_read_ahead);
    let walk = match options.open(remote.clone()) {
        Ok(file) => walk(&file, input.prefetch_hyperslab),
        Err(_) => vec![OPEN_FAILED.to_owned()],
    };
    assert!(
        remote.wait_for_background_fetches(BACKGROUND_WAIT),
        "background fetches still running {BACKGROUND_WAIT:?} after the walk"
    );
    check_cached_bytes(&remote, served);
    walk
}

/// The bytes the file's cache gives back (all of the file's own bytes and
/// some zeros past them, fetched again where evicted) equal the served
/// ones.
fn check_cached_bytes(remote: &RemoteFile, served: &Served) {
    let end = served.len().min(served.given_len() + (64 << 10));
    let mut pos = 0;
    let mut got = vec![0u8; 1 << 20];
    let mut expected = vec![0u8; 1 << 20];
    while pos < end {
        let n = (end - pos).min(got.len() as u64) as usize;
        remote
            .read_exact_at(pos, &mut got[..n])
            .expect("a read from memory");
        served.copy_at(pos, &mut expected[..n]);
        assert!(
            got[..n] == expected[..n],
            "the cache gave wrong bytes in {pos}..{}",
            pos + n as u64
        );
        pos += n as u64;
    }
}

/// Opens a sparse copy of the input's file with HDF5's `sec2` driver and
/// walks it.
fn walk_local(input: &Input<'_>) -> Vec<String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "remfile-fuzz-{}-{}.h5",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let copy = (|| {
        let mut f = std::fs::File::create(&path)?;
        f.write_all(input.file)?;
        f.set_len(input.len)
    })();
    copy.expect("a sparse copy of the input in the temporary directory");
    let walked = match h5lib::File::open(&path) {
        Ok(file) => walk(&file, false),
        Err(_) => vec![OPEN_FAILED.to_owned()],
    };
    let _ = std::fs::remove_file(&path);
    walked
}

const OPEN_FAILED: &str = "open: error";

/// Describes every object reachable by hard links from the root, depth
/// first, at most [`MAX_STEPS`] of them: kind, name, attributes, and for
/// datasets and attributes the type, shape and a hash of the values read.
/// With `prefetch`, each dataset's selection is prefetched first (the file
/// is the driver's).
fn walk(file: &h5lib::File, prefetch: bool) -> Vec<String> {
    let mut out = vec!["open: ok".to_owned()];
    let root: Group = (**file).clone();
    let mut seen: Vec<LocationToken> = Vec::new();
    if let Ok(info) = root.loc_info() {
        seen.push(info.token);
    }
    let mut steps = 0;
    let mut stack = vec![(0usize, root)];
    let mut next_id = 1;
    while let Some((id, group)) = stack.pop() {
        attributes(&group, id, &mut out, &mut steps);
        let mut links = Vec::new();
        let listed = group.iter_visit_default(|name, info| {
            if links.len() < MAX_STEPS {
                links.push((name.to_owned(), info.link_type));
            }
            Ok(())
        });
        if listed.is_err() {
            out.push(format!("{id}: links error"));
        }
        for (name, link_type) in links {
            steps += 1;
            if steps > MAX_STEPS {
                out.push("step bound".to_owned());
                return out;
            }
            let shown: String = name.chars().take(64).collect();
            if link_type != LinkType::Hard {
                out.push(format!("{id}/{shown:?}: {link_type:?} link"));
                continue;
            }
            let Ok(info) = group.loc_info_by_name(&name) else {
                out.push(format!("{id}/{shown:?}: info error"));
                continue;
            };
            if seen.contains(&info.token) {
                out.push(format!("{id}/{shown:?}: seen"));
                continue;
            }
            seen.push(info.token);
            let child = next_id;
            next_id += 1;
            out.push(format!("{id}/{shown:?} = {child}: {:?}", info.loc_type));
            match info.loc_type {
                LocationType::Group => match group.group(&name) {
                    Ok(g) => stack.push((child, g)),
                    Err(_) => out.push(format!("{child}: open error")),
                },
                LocationType::Dataset => match group.dataset(&name) {
                    Ok(ds) => {
                        attributes(&ds, child, &mut out, &mut steps);
                        if prefetch {
                            prefetch_selection(&ds);
                        }
                        let read = chunk_bytes(&ds).is_none_or(|b| b <= MAX_CHUNK);
                        let described = describe(ds.id(), Kind::Dataset, read);
                        out.push(format!("{child}: {described}"));
                    }
                    Err(_) => out.push(format!("{child}: open error")),
                },
                _ => {}
            }
        }
    }
    out
}

/// The most bytes of one chunk of a dataset whose values are read: HDF5
/// allocates a whole chunk to read any of it, as long as the layout says
/// (up to 4 GiB), through either driver. The seeds' chunks are 1 MiB at
/// most.
const MAX_CHUNK: u64 = 16 << 20;

/// The bytes of one chunk of `ds`, if it is chunked (`Some(u64::MAX)` past
/// that).
fn chunk_bytes(ds: &h5lib::Dataset) -> Option<u64> {
    let chunk = ds.chunk()?;
    let size = ds.dtype().map_or(1, |t| t.size() as u64);
    Some(
        chunk
            .iter()
            .try_fold(size, |acc, &n| acc.checked_mul(n as u64))
            .unwrap_or(u64::MAX),
    )
}

/// Describes the attributes of `loc` (object `id`).
fn attributes(loc: &h5lib::Location, id: usize, out: &mut Vec<String>, steps: &mut usize) {
    let Ok(names) = loc.attr_names() else {
        out.push(format!("{id}: attributes error"));
        return;
    };
    for name in names {
        *steps += 1;
        if *steps > MAX_STEPS {
            return;
        }
        let shown: String = name.chars().take(64).collect();
        let described = match loc.attr(&name) {
            Ok(a) => describe(a.id(), Kind::Attribute, true),
            Err(_) => "open error".to_owned(),
        };
        out.push(format!("{id}@{shown:?}: {described}"));
    }
}

/// Fetches the selection [`describe`] reads, as a user of
/// [`crate::hdf5::prefetch_hyperslab`] would first; its outcome is not part
/// of the walk (HDF5's own driver has no such call), only that it returns.
fn prefetch_selection(ds: &h5lib::Dataset) {
    let shape: Vec<u64> = ds.shape().iter().map(|&n| n as u64).collect();
    let Some(size) = ds.dtype().ok().map(|t| t.size() as u64) else {
        return;
    };
    let counts = selection(&shape, size.max(1));
    let ranges: Vec<std::ops::Range<u64>> = counts.iter().map(|&c| 0..c).collect();
    let _ = remote_hdf5::prefetch_hyperslab(ds, &ranges);
}

/// Counts of a selection from the origin of a dataset of `shape`, of
/// elements of `size` bytes, that reads at most [`MAX_READ`] bytes: the
/// whole dataset if it fits, else fewer along the leading dimensions.
pub(crate) fn selection(shape: &[u64], size: u64) -> Vec<u64> {
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dataset,
    Attribute,
}

/// HDF5 identifiers closed when dropped.
struct Id(hid_t, unsafe extern "C" fn(hid_t) -> hdf5_sys::h5::herr_t);

impl Drop for Id {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: an identifier this walk opened, closed once.
            unsafe { (self.1)(self.0) };
        }
    }
}

/// A dataset's or attribute's type, shape and values (a hash of the bytes
/// read of them).
/// With `read` false, only the type and shape.
fn describe(obj: hid_t, kind: Kind, read: bool) -> String {
    h5lib::sync::sync(|| {
        // SAFETY: `obj` is an open dataset or attribute (per `kind`) and the
        // lock is held; every identifier opened is closed by `Id`, and the
        // buffer is as long as the selection's elements.
        unsafe { describe_locked(obj, kind, read) }
    })
}

unsafe fn describe_locked(obj: hid_t, kind: Kind, read: bool) -> String {
    // SAFETY: as `describe`.
    unsafe {
        let (dtype, space) = match kind {
            Kind::Dataset => (h5d::H5Dget_type(obj), h5d::H5Dget_space(obj)),
            Kind::Attribute => (h5a::H5Aget_type(obj), h5a::H5Aget_space(obj)),
        };
        let dtype = Id(dtype, h5t::H5Tclose);
        let space = Id(space, h5s::H5Sclose);
        if dtype.0 < 0 || space.0 < 0 {
            return "type or space error".to_owned();
        }
        let size = h5t::H5Tget_size(dtype.0) as u64;
        let class = h5t::H5Tget_class(dtype.0) as i32;
        let rank = h5s::H5Sget_simple_extent_ndims(space.0);
        if !(0..=32).contains(&rank) {
            return format!("class {class} size {size} rank error");
        }
        let mut shape = vec![0 as hsize_t; rank as usize];
        if h5s::H5Sget_simple_extent_dims(space.0, shape.as_mut_ptr(), std::ptr::null_mut()) < 0 {
            return format!("class {class} size {size} shape error");
        }
        let shape: Vec<u64> = shape.into_iter().collect();
        let mut text = format!("class {class} size {size} shape {shape:?}");
        let points = h5s::H5Sget_simple_extent_npoints(space.0);
        if points <= 0 || size == 0 || size > MAX_READ || !read {
            return text;
        }
        // HDF5 1.10 allocates (and clears) what each variable-length
        // value's stored length says, through either driver: gigabytes for
        // a damaged one. Their types and shapes are compared, not values.
        if has_variable_length(dtype.0, 0) {
            text.push_str(" variable-length, not read");
            return text;
        }
        let counts = match kind {
            Kind::Dataset => selection(&shape, size),
            Kind::Attribute => shape.clone(),
        };
        let elements = counts.iter().product::<u64>().max(1);
        let Some(bytes) = elements.checked_mul(size).filter(|&b| b <= MAX_READ) else {
            text.push_str(" not read");
            return text;
        };
        let mut buf = vec![0u64; bytes.div_ceil(8) as usize];
        let ptr = buf.as_mut_ptr().cast::<c_void>();
        let mem_space = if rank == 0 {
            Id(h5s::H5Screate(h5s::H5S_class_t::H5S_SCALAR), h5s::H5Sclose)
        } else {
            let dims: Vec<hsize_t> = counts.iter().map(|&c| c as hsize_t).collect();
            Id(
                h5s::H5Screate_simple(rank, dims.as_ptr(), std::ptr::null()),
                h5s::H5Sclose,
            )
        };
        if mem_space.0 < 0 {
            text.push_str(" memory space error");
            return text;
        }
        let status = match kind {
            Kind::Dataset => {
                if rank > 0 {
                    let start = vec![0 as hsize_t; rank as usize];
                    let count: Vec<hsize_t> = counts.iter().map(|&c| c as hsize_t).collect();
                    let selected = h5s::H5Sselect_hyperslab(
                        space.0,
                        h5s::H5S_seloper_t::H5S_SELECT_SET,
                        start.as_ptr(),
                        std::ptr::null(),
                        count.as_ptr(),
                        std::ptr::null(),
                    );
                    if selected < 0 {
                        text.push_str(" selection error");
                        return text;
                    }
                }
                h5d::H5Dread(obj, dtype.0, mem_space.0, space.0, h5p::H5P_DEFAULT, ptr)
            }
            Kind::Attribute => h5a::H5Aread(obj, dtype.0, ptr),
        };
        if status < 0 {
            text.push_str(" read error");
            return text;
        }
        let mut hash = DefaultHasher::new();
        let raw = std::slice::from_raw_parts(ptr.cast::<u8>(), bytes as usize);
        raw.hash(&mut hash);
        text.push_str(&format!(" values {:016x}", hash.finish()));
        text
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

/// The size of [`selection`]'s bytes, for tests.
#[cfg(test)]
fn selection_bytes(shape: &[u64], size: u64) -> u64 {
    selection(shape, size).iter().product::<u64>() * size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_chooses_size_and_options() {
        let data = [7, 0b0001_1101, b'a', b'b'];
        let input = Input::decode(&data).unwrap();
        assert_eq!(input.len, 1 << 50);
        assert!(!input.metadata_prefetch);
        assert!(input.chunk_read_ahead);
        assert!(input.prefetch_hyperslab);
        assert_eq!(input.block_size, BLOCK_SIZES[3]);
        assert_eq!(input.file, b"ab");
        assert_eq!(Input::decode(&[0, 0]).unwrap().len, 0);
        assert_eq!(Input::decode(&[4, 0, 1]).unwrap().len, 1 + (1 << 20));
        assert!(Input::decode(&[0]).is_none());
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
