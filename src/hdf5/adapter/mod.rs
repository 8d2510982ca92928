//! The adapter over the [`hdf5`](https://docs.rs/hdf5-metno) crate: opening
//! remote files as its `File`s, their options, the driver registered with the
//! linked HDF5, the chunks a selection touches and many files' metadata at
//! once. Its items are the wing's public API (see [`crate::hdf5`]).

#![warn(clippy::undocumented_unsafe_blocks)]

mod chunks;
mod many;
mod register;

use std::ffi::{CString, c_void};
use std::fmt;
use std::sync::Arc;

/// The `hdf5` crate (published as `hdf5-metno`) that this module is built
/// on, re-exported so that its types are always the ones this module takes
/// and returns, whatever version a program's own dependency names. Reach
/// any of them here, or depend on the crate yourself:
/// `hdf5 = { package = "hdf5-metno", version = "0.15" }` (Cargo then builds
/// one copy, since only one may link libhdf5).
///
/// ```no_run
/// use remfile::hdf5::{self, hdf5_metno::Group};
///
/// let file = hdf5::open_url("https://example.com/data.h5")?;
/// let groups: Vec<Group> = file.groups()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub use ::hdf5 as hdf5_metno;
/// The types of this module's functions, from [`hdf5_metno`].
#[doc(no_inline)]
pub use ::hdf5::{Dataset, File};
/// The array crate the `hdf5` crate reads into (its version, re-exported):
/// [`read_hyperslab`] returns an [`ndarray::ArrayD`].
pub use ::ndarray;

use crate::file::RemoteFile;
use crate::hdf5::driver::callbacks::FaplInfo;
pub use crate::hdf5::driver::prefetch::PrefetchStats;
use crate::hdf5::driver::prefetch::Prefetcher;
use crate::hdf5::driver::source::{self, Source};
use crate::options::Builder;
pub use many::{PrefetchProgress, PrefetchedFiles, prefetch_files};

/// Options for opening a remote HDF5 file: HDF5's caches, and a hook for any
/// other file-access setting.
///
/// ```no_run
/// use remfile::hdf5::OpenOptions;
///
/// let file = OpenOptions::new()
///     .chunk_cache(12_421, 64 << 20, 1.0)
///     .metadata_cache_size(32 << 20)
///     .configure(|fapl| {
///         fapl.sieve_buf_size(1 << 20);
///     })
///     .open_url("https://example.com/data.nwb")?;
/// # Ok::<(), remfile::hdf5::OpenError>(())
/// ```
#[derive(Clone)]
pub struct OpenOptions {
    remote: Option<Builder>,
    metadata_prefetch: bool,
    chunk_read_ahead: bool,
    chunk_cache: Option<(usize, usize, f64)>,
    metadata_cache: Option<usize>,
    configure: Option<Arc<FaplHook>>,
    trace: bool,
}

/// The hook of [`OpenOptions::configure`].
type FaplHook = dyn Fn(&mut hdf5_metno::plist::FileAccessBuilder) + Send + Sync;

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("remote", &self.remote)
            .field("metadata_prefetch", &self.metadata_prefetch)
            .field("chunk_read_ahead", &self.chunk_read_ahead)
            .field("chunk_cache", &self.chunk_cache)
            .field("metadata_cache", &self.metadata_cache)
            .field("configure", &self.configure.as_ref().map(|_| "hook"))
            .finish()
    }
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            remote: None,
            metadata_prefetch: crate::hdf5::driver::config::METADATA_PREFETCH,
            chunk_read_ahead: crate::hdf5::driver::config::CHUNK_READ_AHEAD,
            chunk_cache: None,
            metadata_cache: None,
            configure: None,
            trace: false,
        }
    }
}

impl OpenOptions {
    /// HDF5's defaults, with the metadata prefetch and the chunk read-ahead
    /// on.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// Whether to fetch, in the background, the metadata that the metadata
    /// HDF5 reads points to (on by default). HDF5 reads the metadata of a
    /// file one piece at a time, each found through the last; the driver
    /// parses each piece as it passes (superblock, object headers, B-tree
    /// nodes, symbol tables, heaps) and fetches what it points to at once,
    /// so that opening and walking a file costs about as many round trips
    /// as the file is deep, not one per piece. A wrong guess costs bytes
    /// (at most what HDF5 has read plus 16 MiB), never correctness;
    /// [`driver_info`] shows what it did.
    ///
    /// ```no_run
    /// use remfile::hdf5::OpenOptions;
    ///
    /// // Only what HDF5 asks for: one request per piece of metadata missed.
    /// let file = OpenOptions::new()
    ///     .metadata_prefetch(false)
    ///     .open_url("https://example.com/data.nwb")?;
    /// # Ok::<(), remfile::hdf5::OpenError>(())
    /// ```
    pub fn metadata_prefetch(mut self, on: bool) -> Self {
        self.metadata_prefetch = on;
        self
    }

    /// Whether a run of chunk reads fetches the chunks that follow (on by
    /// default): HDF5 reads a selection one chunk at a time, and a read of
    /// the chunk after the one read last fetches the next few chunks' exact
    /// bytes in the background, more at each step, never past the index's
    /// last chunk. Reads out of order fetch only their own bytes;
    /// [`driver_info`] shows what it did.
    ///
    /// ```no_run
    /// use remfile::hdf5::OpenOptions;
    ///
    /// // Only the chunks HDF5 asks for (random access to chunks, say).
    /// let file = OpenOptions::new()
    ///     .chunk_read_ahead(false)
    ///     .open_url("https://example.com/data.nwb")?;
    /// # Ok::<(), remfile::hdf5::OpenError>(())
    /// ```
    pub fn chunk_read_ahead(mut self, on: bool) -> Self {
        self.chunk_read_ahead = on;
        self
    }

    /// HDF5's raw data chunk cache, per dataset: `slots` hash slots (a prime
    /// about 100 times the number of chunks that fit), `bytes` in all, and the
    /// preemption weight `w0` (1.0 when chunks are read once).
    pub fn chunk_cache(mut self, slots: usize, bytes: usize, w0: f64) -> Self {
        self.chunk_cache = Some((slots, bytes, w0));
        self
    }

    /// The initial (and at least the largest) size of HDF5's metadata cache.
    pub fn metadata_cache_size(mut self, bytes: usize) -> Self {
        self.metadata_cache = Some(bytes);
        self
    }

    /// A hook that receives the file-access property list's builder, after
    /// the options above, for any other setting.
    pub fn configure(
        mut self,
        hook: impl Fn(&mut hdf5_metno::plist::FileAccessBuilder) + Send + Sync + 'static,
    ) -> Self {
        self.configure = Some(Arc::new(hook));
        self
    }

    /// The options with which [`open_url`](Self::open_url) opens the remote
    /// file; the default is [`builder()`], which suits HDF5. Start from it
    /// to keep its settings.
    ///
    /// ```no_run
    /// use remfile::hdf5::{self, OpenOptions};
    ///
    /// let file = OpenOptions::new()
    ///     .remote(hdf5::builder().header("Authorization", "Bearer token"))
    ///     .open_url("https://example.com/data.nwb")?;
    /// # Ok::<(), remfile::hdf5::OpenError>(())
    /// ```
    pub fn remote(mut self, builder: Builder) -> Self {
        self.remote = Some(builder);
        self
    }

    /// Keeps the file's requests and HDF5's reads, for
    /// [`explain_file`]: off by default. [`open_url`](Self::open_url) then
    /// opens the remote file with
    /// [`Builder::trace_requests`]; a file given to [`open`](Self::open)
    /// needs it already.
    pub fn trace(mut self, on: bool) -> Self {
        self.trace = on;
        self
    }

    /// Opens `url` as a [`RemoteFile`] (with the [`remote`](Self::remote)
    /// options), then as HDF5.
    pub fn open_url(&self, url: impl AsRef<str>) -> Result<File, OpenError> {
        let builder = self.remote.clone().unwrap_or_else(builder);
        let builder = if self.trace {
            builder.trace_requests(true)
        } else {
            builder
        };
        let remote = builder.open(url).map_err(OpenError::from_remote)?;
        self.open(remote)
    }

    /// Opens `file` as HDF5, read-only. The file (and its connections and
    /// cache) stays alive until the last HDF5 object using it is dropped.
    pub fn open(&self, file: RemoteFile) -> Result<File, OpenError> {
        let source = Source::new(file, self.metadata_prefetch, self.chunk_read_ahead);
        if self.trace {
            source.trace_reads();
        }
        self.open_reader(source)
    }

    /// Opens what `reader` reads as HDF5.
    fn open_reader(&self, reader: Arc<Source>) -> Result<File, OpenError> {
        let name = CString::new(reader.file.url().replace('\0', "")).unwrap_or_default();
        let result = hdf5_metno::sync::sync(|| self.open_locked(&reader, &name));
        result.map_err(|hdf5| {
            let remote = reader.last_error.lock().take();
            OpenError::new(hdf5, remote)
        })
    }

    fn open_locked(&self, reader: &Arc<Source>, name: &CString) -> hdf5_metno::Result<File> {
        let id = register::driver_id().map_err(|e| hdf5_metno::Error::from(e.to_string()))?;
        let mut builder = hdf5_metno::plist::FileAccess::build();
        if let Some((slots, bytes, w0)) = self.chunk_cache {
            builder.chunk_cache(slots, bytes, w0);
        }
        if let Some(bytes) = self.metadata_cache {
            let mut mdc = hdf5_metno::plist::FileAccess::try_new()?.get_mdc_config()?;
            mdc.set_initial_size = true;
            mdc.initial_size = bytes;
            mdc.max_size = mdc.max_size.max(bytes);
            mdc.min_size = mdc.min_size.min(bytes);
            builder.mdc_config(&mdc);
        }
        if let Some(hook) = &self.configure {
            hook(&mut builder);
        }
        let fapl = builder.finish()?;
        let info = FaplInfo {
            reader: Arc::as_ptr(reader),
        };
        // SAFETY: `info` is this driver's info; HDF5 copies it with fapl_copy,
        // which takes its own reference on the reader.
        let set = unsafe {
            hdf5_sys::h5p::H5Pset_driver(fapl.id(), id, &info as *const FaplInfo as *const c_void)
        };
        if set < 0 {
            return Err(hdf5_metno::Error::query()?);
        }
        // SAFETY: a valid name and property list; the lock is held.
        let fid = unsafe { hdf5_sys::h5f::H5Fopen(name.as_ptr(), 0, fapl.id()) };
        if fid < 0 {
            return Err(hdf5_metno::Error::query()?);
        }
        // SAFETY: a new file id, owned from here by the returned File.
        unsafe { hdf5_metno::from_id::<File>(fid) }
    }
}

/// Opens `file` as an HDF5 file, read-only, with [`OpenOptions`]' defaults.
///
/// ```no_run
/// let remote = remfile::hdf5::builder()
///     .cache_capacity(2 << 30)
///     .open("https://example.com/data.nwb")?;
/// let file = remfile::hdf5::open(remote.clone())?;
/// println!("{} groups; {:?}", file.groups()?.len(), remote.stats());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn open(file: RemoteFile) -> Result<File, OpenError> {
    OpenOptions::new().open(file)
}

/// How much of the end of the file [`open_url`] fetches beside the
/// superblock (see [`builder()`]).
pub const OPEN_TAIL: u64 = crate::hdf5::driver::config::OPEN_TAIL;

/// The block size of [`builder()`].
pub const BLOCK_SIZE: u64 = crate::hdf5::driver::config::BLOCK_SIZE;

/// The most connections a remote HDF5 file keeps (the crate's default is
/// 16): the metadata crawl fetches metadata spread among the data in small
/// pieces, many at once.
pub const CONNECTIONS: u64 = crate::hdf5::driver::config::CONNECTIONS;

/// The options [`open_url`] opens remote files with: [`RemoteFile::builder`]
/// with an [`open_tail`](Builder::open_tail) of [`OPEN_TAIL`], a
/// [`block_size`](Builder::block_size) of [`BLOCK_SIZE`] and up to
/// [`CONNECTIONS`] [connections](Builder::max_connections). Start from it to
/// add options of your own (headers, a shared cache…).
///
/// HDF5 writers often leave the root group's header and much other metadata
/// at the end of the file, which the tail fetches beside the superblock. The
/// rest of the metadata lies in small pieces scattered over the file (a
/// chunk index's nodes among the chunks, say), each fetched as a whole block:
/// blocks smaller than the crate's default fetch a fifth of the bytes for
/// the same round trips. Raw data is fetched by the chunk, whatever the
/// block size.
///
/// ```no_run
/// use remfile::hdf5;
///
/// let remote = hdf5::builder()
///     .header("Authorization", "Bearer token")
///     .open("https://example.com/data.nwb")?;
/// let file = hdf5::open(remote)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn builder() -> Builder {
    crate::hdf5::driver::config::hdf5_builder()
}

/// Opens the HDF5 file at `url`, read-only, with the defaults of
/// [`OpenOptions`]: the superblock and the last [`OPEN_TAIL`] bytes are
/// fetched at the same time.
///
/// ```no_run
/// let file = remfile::hdf5::open_url("https://example.com/data.h5")?;
/// # Ok::<(), remfile::hdf5::OpenError>(())
/// ```
pub fn open_url(url: impl AsRef<str>) -> Result<File, OpenError> {
    OpenOptions::new().open_url(url)
}

/// What the driver knows of an open file: see [`driver_info`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DriverInfo {
    /// The remote file the HDF5 file reads from (a clone: its
    /// [`stats`](RemoteFile::stats) are the file's).
    pub remote: RemoteFile,
    /// How many read callbacks HDF5 made.
    pub read_calls: u64,
    /// How many vector read callbacks HDF5 made (HDF5 1.14 and later).
    pub vector_calls: u64,
    /// What the metadata prefetch did (all zero when it is off).
    pub prefetch: PrefetchStats,
}

/// The remote file behind an HDF5 file opened by this module, with the
/// driver's counters; `None` for a file opened otherwise.
///
/// ```no_run
/// let file = remfile::hdf5::open_url("https://example.com/data.h5")?;
/// let info = remfile::hdf5::driver_info(&file).unwrap();
/// println!("{} HDF5 reads, {} HTTP requests", info.read_calls, info.remote.stats().requests);
/// # Ok::<(), remfile::hdf5::OpenError>(())
/// ```
pub fn driver_info(file: &File) -> Option<DriverInfo> {
    let counters = source_of(file)?.counters();
    Some(DriverInfo {
        remote: counters.remote,
        read_calls: counters.read_calls,
        vector_calls: counters.vector_calls,
        prefetch: counters.prefetch,
    })
}

/// An account of `file`'s reads so far, round trip by round trip: the
/// requests of each round, the structures they brought and what the file's
/// author could change (see [`crate::hdf5::explain`]). `None` unless the
/// file was opened with [`OpenOptions::trace`] (or, through the plugin or
/// Python, the driver's `trace=on`).
///
/// ```no_run
/// let file = remfile::hdf5::OpenOptions::new()
///     .trace(true)
///     .open_url("https://example.com/data.h5")?;
/// for name in file.member_names()? {
///     let _ = file.group(&name);
/// }
/// print!("{}", remfile::hdf5::explain_file(&file).unwrap());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn explain_file(file: &File) -> Option<crate::hdf5::explain::Explanation> {
    source_of(file)?.explanation()
}

/// What the driver reads `file` from, if this module opened it.
fn source_of(file: &File) -> Option<Arc<Source>> {
    hdf5_metno::sync::sync(|| {
        let ours = register::driver_id().ok()?;
        // SAFETY: a valid file id; the plist is closed again below.
        let driver = unsafe {
            let fapl = hdf5_sys::h5f::H5Fget_access_plist(file.id());
            if fapl < 0 {
                return None;
            }
            let driver = hdf5_sys::h5p::H5Pget_driver(fapl);
            hdf5_sys::h5p::H5Pclose(fapl);
            driver
        };
        if driver != ours {
            return None;
        }
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid file id and out-parameter.
        let found = unsafe {
            hdf5_sys::h5f::H5Fget_vfd_handle(file.id(), hdf5_sys::h5p::H5P_DEFAULT, &mut handle)
        };
        (found >= 0).then(|| crate::hdf5::driver::source::source_of_handle(handle))?
    })
}

/// Fetches, in one round of concurrent requests, every stored chunk of
/// `dataset` that the hyperslab `ranges` (one range of element indices per
/// dimension) touches, so that reading the hyperslab next costs no round trip
/// per chunk. Chunk addresses come from HDF5's chunk index
/// (`H5Dget_chunk_info_by_coord`). Returns the number of stored chunks the
/// hyperslab touches; those past what the caches hold are not fetched (see
/// [`RemoteFile::prefetch`](crate::file::RemoteFile::prefetch)). Contiguous and
/// compact datasets return 0 and are left to the block cache and
/// read-ahead.
///
/// ```no_run
/// use remfile::hdf5;
///
/// let file = hdf5::open_url("https://example.com/sub-01_ecephys.nwb")?;
/// let data = file.dataset("acquisition/ElectricalSeries/data")?;
/// hdf5::prefetch_hyperslab(&data, &[1_000_000..1_180_000, 0..64])?;
/// let slice = data.read_slice_2d::<i16, _>((1_000_000..1_180_000, ..))?; // from the cache
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// An `hdf5::Error` if the dataset is not from a file this module opened,
/// `ranges` does not match its rank or extent, the hyperslab spans more than
/// a million chunks, or a fetch fails (its message then names the cause).
pub fn prefetch_hyperslab(
    dataset: &Dataset,
    ranges: &[std::ops::Range<u64>],
) -> hdf5_metno::Result<usize> {
    let refused = |e: chunks::SpanError| hdf5_metno::Error::from(e.to_string());
    let source = source_of(&dataset.file()?).ok_or_else(|| {
        hdf5_metno::Error::from("the dataset is not from a file opened by remfile::hdf5")
    })?;
    let shape: Vec<u64> = dataset.shape().iter().map(|&n| n as u64).collect();
    let Some(chunk) = dataset.chunk() else {
        chunks::check_hyperslab(ranges, &shape).map_err(refused)?;
        return Ok(0);
    };
    let chunk: Vec<u64> = chunk.iter().map(|&c| c as u64).collect();
    let span = chunks::ChunkSpan::new(ranges, &shape, &chunk).map_err(refused)?;
    // The look-up knows what it needs: the metadata prefetch would only add
    // the chunk index's other nodes.
    let _quiet = source.prefetch.as_deref().map(Prefetcher::pause);
    let stored = hdf5_metno::sync::sync(|| chunks::stored_chunks(dataset, span.offsets()))?;
    let count = stored.len();
    source
        .file
        .prefetch(stored)
        .map_err(|e| hdf5_metno::Error::from(format!("prefetching {count} chunks failed: {e}")))?;
    Ok(count)
}

/// Reads the hyperslab `ranges` (one range of element indices per
/// dimension) of `dataset`, after fetching every chunk it touches in one
/// round ([`prefetch_hyperslab`]): the selection is known in advance, so it
/// costs the chunk index's look-up and one round of concurrent requests for
/// exactly the chunks it needs, where a plain `read_slice` lets HDF5 ask for
/// the chunks one by one and the [chunk read-ahead](OpenOptions::chunk_read_ahead)
/// guess how far the selection goes. Use it for a slice of a chunked
/// dataset; the chunks must fit in the cache (see
/// [`Builder::cache_capacity`]).
///
/// ```no_run
/// use remfile::hdf5;
///
/// let file = hdf5::open_url("https://example.com/sub-01_ecephys.nwb")?;
/// let data = file.dataset("acquisition/ElectricalSeries/data")?;
/// let slice = hdf5::read_hyperslab::<i16>(&data, &[1_000_000..1_180_000, 0..64])?;
/// assert_eq!(slice.shape(), &[180_000, 64]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// As [`prefetch_hyperslab`], and as the `hdf5` crate's `read_slice`.
pub fn read_hyperslab<T: hdf5_metno::H5Type>(
    dataset: &Dataset,
    ranges: &[std::ops::Range<u64>],
) -> hdf5_metno::Result<ndarray::ArrayD<T>> {
    prefetch_hyperslab(dataset, ranges)?;
    let slab: Vec<hdf5_metno::SliceOrIndex> = ranges
        .iter()
        .map(|r| {
            let to_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            hdf5_metno::SliceOrIndex::from(to_usize(r.start)..to_usize(r.end))
        })
        .collect();
    dataset.read_slice(hdf5_metno::Hyperslab::from(slab))
}

/// How many remote files the driver holds open now, across all HDF5 files.
/// It drops to zero once every HDF5 object of every file is dropped.
pub fn open_remote_files() -> usize {
    source::live_readers()
}

/// The version of the linked HDF5 library, `(major, minor, release)`.
pub fn library_version() -> (u32, u32, u32) {
    hdf5_metno::sync::sync(register::library_version)
}

/// Why a remote HDF5 file could not be opened: HDF5's message, and the
/// remote read's error if a read failed.
#[derive(Debug, Clone)]
pub struct OpenError {
    message: String,
    remote: Option<crate::error::Error>,
    hdf5: Option<hdf5_metno::Error>,
}

impl OpenError {
    fn new(hdf5: hdf5_metno::Error, remote: Option<crate::error::Error>) -> OpenError {
        let message = match &remote {
            Some(r) => format!("cannot open as HDF5: {r} (HDF5: {hdf5})"),
            None => format!("cannot open as HDF5: {hdf5}"),
        };
        OpenError {
            message,
            remote,
            hdf5: Some(hdf5),
        }
    }

    fn from_remote(e: crate::error::Error) -> OpenError {
        OpenError {
            message: format!("cannot open: {e}"),
            remote: Some(e),
            hdf5: None,
        }
    }

    /// The error of the remote read that failed, if one did (a network error,
    /// an HTTP status…), with its [`kind`](crate::error::Error::kind).
    pub fn remote(&self) -> Option<&crate::error::Error> {
        self.remote.as_ref()
    }

    /// HDF5's own error, if HDF5 was reached.
    pub fn hdf5(&self) -> Option<&hdf5_metno::Error> {
        self.hdf5.as_ref()
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match (&self.remote, &self.hdf5) {
            (Some(r), _) => Some(r),
            (None, Some(h)) => Some(h),
            (None, None) => None,
        }
    }
}

impl From<OpenError> for std::io::Error {
    fn from(e: OpenError) -> std::io::Error {
        match e.remote {
            Some(remote) => remote.into(),
            None => std::io::Error::other(e),
        }
    }
}
