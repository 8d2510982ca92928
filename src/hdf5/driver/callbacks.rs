//! The read-only virtual file driver: HDF5's callbacks, answered by a
//! [`RemoteFile`].
//!
//! HDF5 calls these functions with its global lock held, so they never wait on
//! a thread that calls HDF5. Every callback catches panics (unwinding into C
//! aborts) and reports failures on HDF5's error stack, where the caller's
//! `hdf5::Error` finds them.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_ulong, c_void};
use std::fmt;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::api::{self, Minor};
use super::chunk_ahead::ChunkRead;
use super::errno::with_errno;
use super::ffi::*;
use super::prefetch::Seen;
use super::source::Source;
use super::spans;
use crate::error::Error;
use crate::hdf5::meta::MemType;
use crate::hdf5::pieces;
use crate::wait;

/// The driver's part of a file access property list: one pointer, no padding
/// (HDF5 compares driver infos with `memcmp`).
#[repr(C)]
pub(crate) struct FaplInfo {
    pub reader: *const Source,
}

/// An open file: HDF5's public part first, then the driver's.
#[repr(C)]
struct DriverFile {
    base: H5FD_t,
    eoa: haddr_t,
    reader: Arc<Source>,
}

/// Largest address the driver accepts (that of `sec2`).
const MAXADDR: haddr_t = (1 << 63) - 1;

/// The driver's value in 1.14+: 256 to 511 are for drivers not registered
/// with The HDF Group.
const DRIVER_VALUE: c_int = 0x1F5;

/// What both class layouts hold: the driver's name, limits and callbacks.
const CORE: Core = Core {
    name: c"remfile".as_ptr(),
    maxaddr: MAXADDR,
    fc_degree: H5F_CLOSE_WEAK,
    terminate: None,
    sb_size: None,
    sb_encode: None,
    sb_decode: None,
    fapl_size: std::mem::size_of::<FaplInfo>(),
    fapl_get: Some(fapl_get),
    fapl_copy: Some(fapl_copy),
    fapl_free: Some(fapl_free),
    dxpl_size: 0,
    dxpl_copy: None,
    dxpl_free: None,
    open: Some(open),
    close: Some(close),
    cmp: Some(cmp),
    query: Some(query),
    get_type_map: None,
    alloc: None,
    free: None,
    get_eoa: Some(get_eoa),
    set_eoa: Some(set_eoa),
    get_eof: Some(get_eof),
    get_handle: Some(get_handle),
    read: Some(read),
    write: Some(write),
};

static CLASS_V1: ClassV1 = ClassV1 {
    core: CORE,
    unimplemented: Unimplemented::ALL,
    fl_map: FLMAP_DICHOTOMY,
};

static CLASS_V2: ClassV2 = ClassV2 {
    version: H5FD_CLASS_VERSION,
    value: DRIVER_VALUE,
    core: CORE,
    read_vector: Some(read_vector),
    write_vector: None,
    read_selection: None,
    write_selection: None,
    unimplemented: Unimplemented::ALL,
    del: None,
    ctl: None,
    fl_map: FLMAP_DICHOTOMY,
};

/// The driver's class in the layout HDF5 `version` reads: a static, alive
/// for the whole process as HDF5 requires.
pub fn class_for(version: (u32, u32, u32)) -> *const c_void {
    if version >= (1, 13, 2) {
        &CLASS_V2 as *const ClassV2 as *const c_void
    } else {
        &CLASS_V1 as *const ClassV1 as *const c_void
    }
}

/// Pushes `message` on HDF5's error stack, as the driver's error.
fn push_error(minor: Minor, message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    api::push_error(minor, &text);
}

/// Runs a callback body, turning a panic into an HDF5 error. A stop the
/// host asked for during it that no failure of the callback reported is
/// the host's to deliver once the library's call returns
/// ([`Host::stop_not_needed`](wait::Host::stop_not_needed)), never in a
/// later call.
fn guard<T>(failed: T, body: impl FnOnce() -> T) -> T {
    let out = guarded(failed, body);
    if let Some(host) = wait::host() {
        host.stop_not_needed();
    }
    out
}

fn guarded<T>(failed: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            push_error(Minor::Read, &format!("the remfile driver panicked: {what}"));
            failed
        }
    }
}

/// # Safety
/// `file` is a pointer this driver's `open` returned and `close` has not freed.
unsafe fn driver_file<'a>(file: *const H5FD_t) -> &'a DriverFile {
    // SAFETY: DriverFile starts with H5FD_t (repr(C)), and `file` points to
    // a live one, per the caller.
    unsafe { &*(file as *const DriverFile) }
}

unsafe extern "C" fn fapl_get(file: *mut H5FD_t) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        // SAFETY: HDF5 calls this on an open file of this driver.
        let f = unsafe { driver_file(file) };
        let info = FaplInfo {
            reader: Arc::into_raw(f.reader.clone()),
        };
        Box::into_raw(Box::new(info)).cast()
    })
}

unsafe extern "C" fn fapl_copy(old: *const c_void) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        // SAFETY: HDF5 passes an info this driver made (or the caller's
        // FaplInfo given to H5Pset_driver), whose reader is a live Arc.
        let reader = unsafe { (*(old as *const FaplInfo)).reader };
        // SAFETY: `reader` is a live Arc (above); the count taken here is
        // the new info's, given back by fapl_free.
        unsafe { Arc::increment_strong_count(reader) };
        Box::into_raw(Box::new(FaplInfo { reader })).cast()
    })
}

unsafe extern "C" fn fapl_free(info: *mut c_void) -> herr_t {
    guard(-1, || {
        // SAFETY: `info` came from fapl_copy or fapl_get, each a Box holding
        // one strong count of its reader, and HDF5 frees each info once.
        let info = unsafe { Box::from_raw(info as *mut FaplInfo) };
        // SAFETY: that count is given back here, once.
        release(unsafe { Arc::from_raw(info.reader) });
        0
    })
}

unsafe extern "C" fn open(
    name: *const c_char,
    flags: c_uint,
    fapl: hid_t,
    _maxaddr: haddr_t,
) -> *mut H5FD_t {
    guard(std::ptr::null_mut(), || {
        if flags & WRITE_FLAGS != 0 {
            push_error(
                Minor::CantOpen,
                "remote files are read-only: the remfile driver refuses write access",
            );
            return std::ptr::null_mut();
        }
        // SAFETY: HDF5 passes the file's name as a C string, and the fapl it
        // chose this driver from.
        let reader = match unsafe { reader_for(name, fapl) } {
            Ok(reader) => reader,
            Err(message) => {
                push_error(Minor::CantOpen, &message);
                return std::ptr::null_mut();
            }
        };
        let file = Box::new(DriverFile {
            // SAFETY: all-zero is a valid H5FD_t (integers and a null
            // pointer); HDF5 fills it in after open returns.
            base: unsafe { std::mem::zeroed() },
            eoa: 0,
            reader,
        });
        Box::into_raw(file).cast()
    })
}

/// What a file opened with `fapl` reads from: the reader in its driver info
/// (set by the `hdf5` module), or else a remote file opened at `name` with the
/// options of the fapl's driver configuration string (a plugin's).
///
/// # Safety
/// `name` is null or a C string; `fapl` is a file access property list that
/// names this driver.
unsafe fn reader_for(name: *const c_char, fapl: hid_t) -> Result<Arc<Source>, String> {
    let host = api::host().ok_or("the remfile driver has no HDF5 library")?;
    // SAFETY: HDF5 chose this driver from `fapl`, so its driver info, if
    // any, is a FaplInfo of this driver.
    let info = host
        .driver_info
        .map_or(std::ptr::null(), |get| unsafe { get(fapl) }
            as *const FaplInfo);
    if !info.is_null() {
        // SAFETY: a live FaplInfo of this driver, whose reader is a live
        // Arc; the count taken here is the open file's, given back when
        // `close` drops it.
        return Ok(unsafe {
            let reader = (*info).reader;
            Arc::increment_strong_count(reader);
            Arc::from_raw(reader)
        });
    }
    if name.is_null() {
        return Err("no file name to open".into());
    }
    // SAFETY: a C string, per the caller.
    let url = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    // SAFETY: as above.
    let config = unsafe { config_string(host, fapl) }?;
    super::source::open_source(&url, &config)
}

/// The fapl's driver configuration string ("" if none).
///
/// # Safety
/// `fapl` is a file access property list.
unsafe fn config_string(host: &api::HostApi, fapl: hid_t) -> Result<String, String> {
    let Some(get) = host.driver_config else {
        return Ok(String::new());
    };
    // SAFETY: a null buffer asks for the length only.
    let len = unsafe { get(fapl, std::ptr::null_mut(), 0) };
    let Ok(len) = usize::try_from(len) else {
        return Ok(String::new());
    };
    let mut buf = vec![0u8; len + 1];
    // SAFETY: a buffer of `len + 1` bytes, as the call says.
    let written = unsafe { get(fapl, buf.as_mut_ptr().cast(), buf.len()) };
    if written < 0 {
        return Err("could not read the driver configuration string".into());
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|_| "the driver configuration string is not UTF-8".into())
}

/// Gives back a count of `reader`, except in a process that only inherited
/// it: dropping the last count there would stop, wait for and free what the
/// parent's threads own (locks they may hold for good in this process), so
/// the child keeps it, unused.
fn release(reader: Arc<Source>) {
    if reader.inherited() {
        std::mem::forget(reader);
    }
}

/// What a read of a file this process inherited says.
const INHERITED: &str = "this remote file was opened by another process, before a fork: open it \
    again in this one (it must not share the other's connections)";

/// How long closing a file waits for its guesses still in flight.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Ends the guesses of a file being closed. Where what they bring goes to a
/// disk cache, for the next run, the crawl may finish first (never for
/// longer than [`CLOSE_WAIT`], nor past the process's exit bound): a crawl
/// cut short would leave the next run's to fetch what this one did not.
/// Then guesses and the crawl send no further request; those still under
/// way end on their own, or, with no disk cache, at once (wanted by nobody).
pub(crate) fn stop_guessing(source: &Source) {
    let to_disk = source.file.extension().has_disk_cache();
    if to_disk {
        source.file.wait_for_background_fetches(CLOSE_WAIT);
    }
    if let Some(crawler) = &source.crawler {
        crawler.stop();
    }
    // A batch's files crawled ahead go as deep as this open went.
    let batch = source.prefetch.as_ref().and_then(|p| {
        let p = p.lock();
        p.batch_reach().map(|b| (Arc::clone(b), p.own_reach()))
    });
    if let Some((reach, read)) = batch {
        reach.settle(read);
    }
    source.closing.close();
    if !to_disk {
        source.closing.cancel();
    }
}

unsafe extern "C" fn close(file: *mut H5FD_t) -> herr_t {
    guard(-1, || {
        // SAFETY: `file` came from `open` (a Box), and HDF5 closes each file
        // it opened once.
        let file = unsafe { Box::from_raw(file as *mut DriverFile) };
        if file.reader.inherited() {
            // Nothing of it is this process's to stop or wait for.
            std::mem::forget(file);
            return 0;
        }
        // Closing waits (for guesses, for disk writes) without holding an
        // interpreter's lock.
        wait::outside(move || {
            stop_guessing(&file.reader);
            drop(file);
        });
        if let Some(host) = wait::host() {
            host.released();
        }
        0
    })
}

unsafe extern "C" fn cmp(a: *const H5FD_t, b: *const H5FD_t) -> c_int {
    // Each open is its own file to HDF5; an order is all it needs.
    (a as usize).cmp(&(b as usize)) as c_int
}

unsafe extern "C" fn query(_file: *const H5FD_t, flags: *mut c_ulong) -> herr_t {
    if !flags.is_null() {
        // SAFETY: a non-null out-parameter HDF5 gives.
        unsafe {
            *flags = H5FD_FEAT_AGGREGATE_METADATA
                | H5FD_FEAT_ACCUMULATE_METADATA
                | H5FD_FEAT_DATA_SIEVE
                | H5FD_FEAT_AGGREGATE_SMALLDATA
        };
    }
    0
}

unsafe extern "C" fn get_eoa(file: *const H5FD_t, _kind: H5FD_mem_t) -> haddr_t {
    // SAFETY: HDF5 calls this on an open file of this driver.
    unsafe { driver_file(file) }.eoa
}

unsafe extern "C" fn set_eoa(file: *mut H5FD_t, _kind: H5FD_mem_t, addr: haddr_t) -> herr_t {
    // SAFETY: an open file of this driver, which HDF5 does not share across
    // threads while it holds its lock.
    unsafe { (*(file as *mut DriverFile)).eoa = addr };
    0
}

unsafe extern "C" fn get_eof(file: *const H5FD_t, _kind: H5FD_mem_t) -> haddr_t {
    // SAFETY: HDF5 calls this on an open file of this driver.
    unsafe { driver_file(file) }.reader.file.len()
}

unsafe extern "C" fn get_handle(
    file: *mut H5FD_t,
    _fapl: hid_t,
    handle: *mut *mut c_void,
) -> herr_t {
    if handle.is_null() {
        return -1;
    }
    // SAFETY: an open file of this driver and a non-null out-parameter.
    unsafe { *handle = super::source::handle_of(&driver_file(file).reader) };
    0
}

/// Why the driver could not serve a read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The bytes asked for run past the end of the space HDF5 allocated.
    PastAllocated { addr: u64, size: u64, eoa: u64 },
    /// Fetching bytes of the remote file failed.
    Remote { what: Wanted, error: Error },
}

/// What a failed remote read asked for.
#[derive(Debug)]
pub(crate) enum Wanted {
    Bytes(Range<u64>),
    /// This many ranges of a vector read.
    Ranges(usize),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::PastAllocated { addr, size, eoa } => write!(
                f,
                "read of {size} bytes at {addr} lies past the end of allocated space ({eoa})"
            ),
            ReadError::Remote {
                what: Wanted::Bytes(r),
                error,
            } => write!(
                f,
                "remote read of bytes {}-{} failed: {error}",
                r.start,
                r.end - 1
            ),
            ReadError::Remote {
                what: Wanted::Ranges(n),
                error,
            } => write!(f, "remote vector read of {n} ranges failed: {error}"),
        }
    }
}

impl ReadError {
    /// Puts the error on HDF5's error stack, and keeps a remote failure for
    /// the caller's `hdf5::OpenError`.
    fn report(self, source: &Source, prefix: &str) {
        let message = format!("{prefix}{self}");
        match self {
            ReadError::Remote { error, .. } => {
                push_error(Minor::Read, &with_errno(message, &error));
                if let Some(host) = wait::host() {
                    host.failed_under_a_library(&error);
                }
                *source.last_error.lock() = Some(error);
            }
            ReadError::PastAllocated { .. } => push_error(Minor::Read, &message),
        }
    }
}

/// Reads `buf.len()` bytes at `addr`: bytes past the end of the file (but
/// within the allocated space) read as zeros, as HDF5 expects.
fn read_into(f: &DriverFile, addr: haddr_t, buf: &mut [u8]) -> Result<(), ReadError> {
    let size = buf.len() as u64;
    let inside = inside_file(f, addr, buf)?;
    if !inside.is_empty() {
        f.reader
            .file
            .read_exact_at(addr, inside)
            .map_err(remote_failure(addr, size))?;
    }
    Ok(())
}

/// The driver's error for a remote read of `len` bytes at `addr` that failed.
fn remote_failure(addr: u64, len: u64) -> impl FnOnce(Error) -> ReadError {
    move |error| ReadError::Remote {
        what: Wanted::Bytes(addr..addr + len),
        error,
    }
}

/// Reads raw data: a read of a chunk the chunk index listed fetches only
/// its own bytes, and the chunks after it if it continues a run of them
/// (in the background, so this read does not wait for them); any other
/// read is an ordinary one, with the file's sequential read-ahead.
/// The consecutive small reads of raw data fetched as pieces where bytes
/// are dear before the read-ahead takes over: a stream.
const STREAM_READS: u64 = 4;

fn read_raw(f: &DriverFile, addr: haddr_t, buf: &mut [u8]) -> Result<(), ReadError> {
    let source = &f.reader;
    let len = buf.len() as u64;
    let end = addr.saturating_add(len);
    // A small read of raw data that no long stream leads to (a small
    // dataset, a few values) comes as a piece where bytes are dear, not as
    // blocks with a read-ahead; a stream's further reads are read ahead.
    let run = if source.raw_end.swap(end, Relaxed) == addr {
        source.raw_run.fetch_add(1, Relaxed) + 1
    } else {
        source.raw_run.store(0, Relaxed);
        0
    };
    let small = len < source.file.block_size() && run < STREAM_READS;
    if small && !source.file.extension().is_cached(addr..end) {
        fetch_exactly_where_bytes_are_dear(source, addr..end);
    }
    if !chunks_ahead_of(source, addr, len) {
        return read_into(f, addr, buf);
    }
    let inside = inside_file(f, addr, buf)?;
    source
        .file
        .read_vectored_at(&mut [(addr, inside)])
        .map_err(remote_failure(addr, len))
}

/// Whether the read of `len` bytes at `addr` is of a chunk a chunk index
/// the crawl read lists; if it is, the chunks after it are fetched ahead in
/// the background (the reader's read itself is the caller's).
pub(crate) fn chunks_ahead_of(source: &Source, addr: u64, len: u64) -> bool {
    let Some(prefetch) = &source.prefetch else {
        return false;
    };
    let extension = source.file.extension();
    let read = ChunkRead {
        addr,
        len,
        missed: !extension.is_cached(addr..addr.saturating_add(len)),
    };
    let bounds = extension.read_ahead_bounds();
    let Some(ahead) = prefetch.lock().on_chunk_read(read, bounds) else {
        return false;
    };
    if !ahead.is_empty() {
        // Bounded here too: the step is whatever the index said.
        let fetched = extension.prefetch_in_background_until_closed(
            ahead,
            bounds.1,
            &source.closing,
            addr..addr.saturating_add(len),
        );
        prefetch.lock().fetched_chunks(fetched);
    }
    true
}

/// The part of `buf`, read at `addr`, that lies inside the file; the rest
/// (allocated space past the end of the file, which reads as zeros) is
/// zeroed. An error if `buf` runs past the end of allocated space.
fn inside_file<'b>(
    f: &DriverFile,
    addr: haddr_t,
    buf: &'b mut [u8],
) -> Result<&'b mut [u8], ReadError> {
    let size = buf.len() as u64;
    let end =
        addr.checked_add(size)
            .filter(|&end| end <= f.eoa)
            .ok_or(ReadError::PastAllocated {
                addr,
                size,
                eoa: f.eoa,
            })?;
    let present = (f.reader.file.len().min(end).saturating_sub(addr)) as usize;
    let (inside, beyond) = buf.split_at_mut(present);
    beyond.fill(0);
    Ok(inside)
}

unsafe extern "C" fn read(
    file: *mut H5FD_t,
    kind: H5FD_mem_t,
    _dxpl: hid_t,
    addr: haddr_t,
    size: usize,
    buf: *mut c_void,
) -> herr_t {
    guard(-1, || {
        // SAFETY: HDF5 calls this on an open file of this driver.
        let f = unsafe { driver_file(file) };
        f.reader.read_calls.fetch_add(1, Relaxed);
        if size == 0 {
            return 0;
        }
        if f.reader.inherited() {
            push_error(Minor::Read, INHERITED);
            return -1;
        }
        // SAFETY: HDF5 gives a buffer of `size` bytes, which it does not
        // touch until the callback returns.
        let buf = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) };
        let mem = MemType::from_c(kind);
        let (read, missed) = match mem {
            MemType::RawData => (read_raw(f, addr, buf), false),
            _ => {
                let end = addr.saturating_add(size as u64);
                let missed =
                    f.reader.prefetch.is_some() && !f.reader.file.extension().is_cached(addr..end);
                if missed {
                    fetch_exactly_where_bytes_are_dear(&f.reader, addr..end);
                }
                (read_into(f, addr, buf), missed)
            }
        };
        match read {
            Ok(()) => {
                f.reader.note_read(mem, addr, size as u64);
                if mem == MemType::Superblock && addr == 0 {
                    note_a_missing_signature(&f.reader, buf);
                }
                look_ahead(&f.reader, mem, addr, buf, missed);
                0
            }
            Err(e) => {
                e.report(&f.reader, "");
                -1
            }
        }
    })
}

/// Fetches the metadata HDF5 missed at `wanted`, on a link whose bytes are
/// dear, as a piece of its own bytes with a little on each side
/// ([`spans::exact_slack`]) rather than in whole blocks: scattered metadata
/// would cost a block each. A failure costs nothing here: the read that
/// follows reads blocks and meets it. Nothing is fetched where the crawl's
/// pieces already bring it: the read waits for them, and a fetch of the
/// slack around it would cost a round of its own after theirs.
pub(crate) fn fetch_exactly_where_bytes_are_dear(source: &Source, wanted: std::ops::Range<u64>) {
    let extension = source.file.extension();
    let link = extension.guess_link_estimate();
    if !spans::bytes_are_dear(link) || pieces::holds_or_fetches(extension, wanted.clone()) {
        return;
    }
    let (behind, slack) = spans::exact_slack(link);
    let mut ahead = slack;
    let mut beside = Vec::new();
    if let Some(prefetch) = &source.prefetch {
        let prefetch = prefetch.lock();
        // Past a chunk index's node lies data: no slack beyond the window.
        if prefetch
            .what_at(wanted.start)
            .is_some_and(|w| w.lies_among_raw_data())
        {
            ahead = behind;
        }
        // What the crawl found beside it and has not fetched yet comes in
        // the same round (the nearest, within the lanes and as many bytes
        // as the slack's): HDF5 reads it next.
        let lanes = usize::try_from(extension.guess_concurrency()).unwrap_or(1);
        beside = prefetch.beside_miss(wanted.start, lanes.saturating_sub(1), slack);
    }
    let span = wanted.start.saturating_sub(behind)..wanted.end.saturating_add(ahead);
    let spans = std::iter::once(span)
        .chain(
            beside
                .into_iter()
                .map(|r| spans::widened(r, spans::DEAR_WINDOW)),
        )
        .collect();
    pieces::guess(extension, spans, u64::MAX);
}

/// The first bytes of every HDF5 file without a user block.
pub(crate) const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Leaves a note on HDF5's error stack when the file does not begin with
/// HDF5's signature: if HDF5 then finds none further on (after a user
/// block), its error ("file signature not found") comes with what the file
/// is instead (an HTML page, say) at the bottom of the stack, where h5py
/// looks for details. If HDF5 finds one, the call succeeds and nobody reads
/// the note.
fn note_a_missing_signature(source: &Source, first: &[u8]) {
    if first.len() < SIGNATURE.len() || first.starts_with(SIGNATURE) {
        return;
    }
    // The open fetched the first block: more than the 8 bytes HDF5 reads.
    let mut start = pieces::cached_from(source.file.extension(), 0, 48);
    if start.len() < first.len() {
        start = first[..first.len().min(48)].to_vec();
    }
    let start = crate::http::redact::printable_excerpt(&start, 48);
    push_error(
        Minor::CantOpen,
        &format!(
            "{} is not an HDF5 file: it does not begin with HDF5's signature \
             (its first bytes read \"{start}\")",
            source.file.url()
        ),
    );
}

/// Hands the metadata HDF5 just read (if the prefetch is on) to the
/// prefetch, whose crawl then fetches what it points to. Never waits for
/// the network.
pub(crate) fn look_ahead(source: &Source, mem: MemType, addr: haddr_t, bytes: &[u8], missed: bool) {
    let Some(prefetch) = &source.prefetch else {
        return;
    };
    // A stream of unforeseen misses starts with a round's worth of the
    // link, or, where bytes are dear, with a cluster's (it doubles as it
    // goes on).
    let step = if !missed {
        0
    } else if spans::bytes_are_dear(source.file.extension().guess_link_estimate()) {
        spans::DEAR_GAP
    } else {
        spans::gap_worth_filling(source.file.link_estimate())
    };
    let seen = Seen { missed, step };
    let work = prefetch
        .lock()
        .on_read(mem, addr, bytes, source.file.len(), seen);
    if let (true, Some(crawler)) = (work, &source.crawler) {
        crawler.wake();
    }
}

/// The entries of a vector read as `(address, buffer)`, a size of 0 meaning
/// "as the previous one" for the rest of the vector (HDF5's convention).
///
/// # Safety
/// `addrs`, `sizes` and `bufs` point to `count` entries each, and each
/// buffer to as many bytes as its entry's size, untouched by HDF5 until the
/// callback returns.
unsafe fn vector_entries<'a>(
    count: u32,
    addrs: *const haddr_t,
    sizes: *const usize,
    bufs: *const *mut c_void,
) -> Vec<(haddr_t, &'a mut [u8])> {
    let n = count as usize;
    // SAFETY: arrays of `count` entries, per the caller.
    let (addrs, sizes, bufs) = unsafe {
        (
            std::slice::from_raw_parts(addrs, n),
            std::slice::from_raw_parts(sizes, n),
            std::slice::from_raw_parts(bufs, n),
        )
    };
    let mut size = 0;
    let mut entries = Vec::with_capacity(n);
    for ((&addr, &s), &buf) in addrs.iter().zip(sizes).zip(bufs) {
        if s != 0 {
            size = s;
        }
        if size > 0 {
            // SAFETY: a buffer of `size` bytes, per the caller.
            entries.push((addr, unsafe {
                std::slice::from_raw_parts_mut(buf as *mut u8, size)
            }));
        }
    }
    entries
}

unsafe extern "C" fn read_vector(
    file: *mut H5FD_t,
    _dxpl: hid_t,
    count: u32,
    _types: *mut H5FD_mem_t,
    addrs: *mut haddr_t,
    sizes: *mut usize,
    bufs: *mut *mut c_void,
) -> herr_t {
    guard(-1, || {
        // SAFETY: HDF5 calls this on an open file of this driver.
        let f = unsafe { driver_file(file) };
        f.reader.vector_calls.fetch_add(1, Relaxed);
        if count == 0 {
            return 0;
        }
        if f.reader.inherited() {
            push_error(Minor::Read, INHERITED);
            return -1;
        }
        // SAFETY: HDF5 gives arrays of `count` entries and a buffer of each
        // entry's size.
        let entries = unsafe { vector_entries(count, addrs, sizes, bufs) };
        match read_entries(f, entries, count as usize) {
            Ok(()) => 0,
            Err(e) => {
                e.report(&f.reader, "vector ");
                -1
            }
        }
    })
}

/// Checks every entry of a vector read first, then fetches all their blocks
/// in one round and copies each entry's bytes out of them.
fn read_entries(
    f: &DriverFile,
    entries: Vec<(haddr_t, &mut [u8])>,
    count: usize,
) -> Result<(), ReadError> {
    let mut reads: Vec<(u64, &mut [u8])> = Vec::with_capacity(entries.len());
    for (addr, buf) in entries {
        let inside = inside_file(f, addr, buf)?;
        if !inside.is_empty() {
            reads.push((addr, inside));
        }
    }
    f.reader
        .file
        .read_vectored_at(&mut reads)
        .map_err(|error| ReadError::Remote {
            what: Wanted::Ranges(count),
            error,
        })
}

unsafe extern "C" fn write(
    _file: *mut H5FD_t,
    _kind: H5FD_mem_t,
    _dxpl: hid_t,
    _addr: haddr_t,
    _size: usize,
    _buf: *const c_void,
) -> herr_t {
    push_error(
        Minor::Unsupported,
        "remote files are read-only: the remfile driver cannot write",
    );
    -1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory_source::MemorySource;
    use crate::error::ErrorKind;
    use crate::open::open_over;

    fn test_data(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8)
            .collect()
    }

    fn driver_file(data: &[u8], eoa: u64) -> (Box<DriverFile>, Arc<MemorySource>) {
        let source = MemorySource::new(data.to_vec());
        let remote = open_over(
            &crate::file::RemoteFile::builder().block_size(4096),
            Arc::clone(&source),
        );
        let file = Box::new(DriverFile {
            // SAFETY: all-zero is a valid H5FD_t.
            base: unsafe { std::mem::zeroed() },
            eoa,
            reader: Source::new(remote, false, false),
        });
        (file, source)
    }

    #[test]
    fn a_handle_finds_its_file_only_while_the_file_is_open() {
        use super::super::source::{counters_of_handle, handles_handed_out, remote_of_handle};
        let (mut file, _source) = driver_file(b"0123456789", 10);
        let before = handles_handed_out();
        let ptr = &mut *file as *mut DriverFile as *mut H5FD_t;
        let mut handle = std::ptr::null_mut();
        // SAFETY: a driver file of this module and an out-parameter.
        assert_eq!(unsafe { get_handle(ptr, 0, &mut handle) }, 0);
        assert_eq!(remote_of_handle(handle).map(|r| r.len()), Some(10));
        assert!(counters_of_handle(handle).is_some());
        assert_eq!(handles_handed_out(), before + 1);
        // A forged handle, or one whose file is gone, finds nothing.
        assert!(remote_of_handle(8usize as *const c_void).is_none());
        drop(file);
        assert_eq!(handles_handed_out(), before, "forgotten with its file");
        assert!(remote_of_handle(handle).is_none());
        assert!(counters_of_handle(handle).is_none());
    }

    #[test]
    fn a_vector_read_fetches_all_ranges_in_one_round() {
        let data = test_data(100_000, 3);
        let (mut file, source) = driver_file(&data, 120_000);
        let ptr = &mut *file as *mut DriverFile as *mut H5FD_t;
        let before = file.reader.file.stats();
        let mut addrs: Vec<haddr_t> = vec![10_000, 50_000, 99_990, 70_000];
        // 0 repeats the previous size; the third range runs past the end of
        // the file (into allocated space) and reads zeros there.
        let mut sizes: Vec<usize> = vec![300, 0, 20, 5000];
        let mut types = vec![H5FD_MEM_DRAW; 4];
        let mut out: Vec<Vec<u8>> = vec![vec![1; 300], vec![1; 300], vec![1; 20], vec![1; 5000]];
        let mut bufs: Vec<*mut c_void> = out.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
        let mut vector_read = |count: u32| {
            // SAFETY: a driver file of this module, and arrays of 4 entries
            // with buffers of their sizes.
            unsafe {
                read_vector(
                    ptr,
                    0,
                    count,
                    types.as_mut_ptr(),
                    addrs.as_mut_ptr(),
                    sizes.as_mut_ptr(),
                    bufs.as_mut_ptr(),
                )
            }
        };
        let status = vector_read(4);
        assert_eq!(status, 0);
        assert_eq!(out[0], data[10_000..10_300]);
        assert_eq!(out[1], data[50_000..50_300]);
        assert_eq!(out[2][..10], data[99_990..]);
        assert_eq!(out[2][10..], [0; 10]);
        assert_eq!(out[3], data[70_000..75_000]);
        let cost = file.reader.file.stats().since(&before);
        assert_eq!(cost.round_trips, 1, "{cost:?}");
        assert_eq!(source.asked().len() as u64, cost.requests);
        assert_eq!(file.reader.vector_calls.load(Relaxed), 1);
        // Nothing new to fetch the second time.
        assert_eq!(vector_read(1), 0);
        assert_eq!(
            file.reader.file.stats().since(&before).requests,
            cost.requests
        );
    }

    #[test]
    fn guessed_pieces_cost_their_own_bytes_and_serve_reads_inside_them() {
        let data = test_data(1 << 20, 5);
        let source = MemorySource::new(data.clone());
        let remote = open_over(
            &crate::file::RemoteFile::builder().block_size(128 << 10),
            Arc::clone(&source),
        );
        // Two headers alone among raw data, and one the source fails.
        source.fail_at(500_000, ErrorKind::HttpStatus(500));
        let wanted = vec![300_000..300_512, 500_000..500_100, 700_000..700_600];
        let fetched = pieces::guess(remote.extension(), wanted.clone(), u64::MAX);
        assert_eq!(fetched, 1212);
        let mut asked = source.asked();
        asked.sort_unstable_by_key(|r| r.start);
        asked.dedup();
        assert_eq!(
            asked,
            [300_000..300_512, 500_000..500_100, 700_000..700_600],
            "each its own bytes, no block"
        );
        source.heal();
        let guessed = source.asked().len();
        assert!(
            remote.extension().is_cached(300_000..300_512)
                && remote.extension().is_cached(700_100..700_600)
        );
        assert!(
            !remote.extension().is_cached(500_000..500_100),
            "the failed one"
        );
        let held = vec![wanted[0].clone(), wanted[2].clone()];
        assert_eq!(
            pieces::guess(remote.extension(), held, u64::MAX),
            0,
            "nothing twice"
        );
        let mut header = vec![0; 400];
        remote.read_exact_at(700_150, &mut header).unwrap();
        assert_eq!(header, data[700_150..700_550]);
        assert_eq!(source.asked().len(), guessed, "served by the piece");
        // A read past a piece's end, or where a piece failed, reads blocks.
        let mut past = vec![0; 600];
        remote.read_exact_at(300_000, &mut past).unwrap();
        assert_eq!(past, data[300_000..300_600]);
        remote.read_exact_at(500_000, &mut header).unwrap();
        assert_eq!(header, data[500_000..500_400]);
        assert!(source.asked().len() > guessed);
        // The allowance bounds what is fetched.
        let one_header = std::iter::once(900_000..900_512).collect();
        assert_eq!(pieces::guess(remote.extension(), one_header, 511), 0);
    }

    #[test]
    fn reads_zero_fill_past_eof_and_refuse_past_eoa() {
        let data = test_data(10_000, 4);
        let (file, _source) = driver_file(&data, 12_000);
        let mut buf = vec![7u8; 3000];
        read_into(&file, 8_000, &mut buf).unwrap();
        assert_eq!(buf[..2000], data[8000..]);
        assert_eq!(buf[2000..], [0; 1000]);
        let e = read_into(&file, 11_000, &mut buf).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::PastAllocated {
                    addr: 11_000,
                    size: 3000,
                    eoa: 12_000
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("past the end of allocated space"),
            "{e}"
        );
        let e = read_into(&file, u64::MAX - 5, &mut buf).unwrap_err();
        assert!(matches!(e, ReadError::PastAllocated { .. }), "{e}");
    }
}
