//! [`RemoteFile`]: positioned and cursor reads served from the block cache, with
//! missing blocks fetched over HTTP.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::cache::BlockCache;
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::link::LinkEstimate;
use crate::options::Builder;
use crate::stats::Stats;
use crate::wait::{self, Cancel, Stop};

/// A file on an HTTP(S) server, read like a local file.
///
/// Open one with [`RemoteFile::open`] or, to change the defaults,
/// [`RemoteFile::builder`]. Reads go through a block cache: a read takes what
/// it can from the cache and fetches every missing block it needs in one
/// request per contiguous run (long runs are split into parts fetched
/// concurrently), plus a read-ahead window when it continues a sequential
/// stream.
///
/// * [`read_at`](RemoteFile::read_at) and
///   [`read_exact_at`](RemoteFile::read_exact_at) read at a position and take
///   `&self`, so one file can serve many threads.
/// * [`Read`] and [`Seek`] use a cursor of the file's own. They are
///   implemented for `&RemoteFile` too, on the same cursor, as std does for
///   `&File`: threads that share one `RemoteFile` and each read at the
///   cursor take turns on it only as far as each read goes (use `read_at`
///   for reads of their own).
/// * With the default `positioned-io` feature, `positioned_io::ReadAt` and
///   `positioned_io::Size` are implemented too.
///
/// Cloning is cheap: a clone shares the cache, the connections and the
/// statistics, and has its own cursor, starting where the original's was.
/// `RemoteFile` is `Send + Sync`.
///
/// A child process made by `fork` should open its files again rather than
/// read those it inherited: their connections are shared with the parent,
/// and their locks may be held for good by the parent's threads, which the
/// child does not have. (Files opened in the child, memory and disk caches
/// included, are the child's own.)
///
/// # Example
///
/// ```no_run
/// use std::io::{Read, Seek, SeekFrom};
/// use remfile::RemoteFile;
///
/// let mut file = RemoteFile::open("https://example.com/recording.nwb")?;
/// let mut magic = [0u8; 8];
/// file.read_exact_at(0, &mut magic)?;
///
/// file.seek(SeekFrom::End(-1024))?;
/// let mut tail = Vec::new();
/// file.read_to_end(&mut tail)?;
/// println!("{:?}", file.stats());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RemoteFile {
    engine: Arc<Engine>,
    /// The cursor of [`Read`] and [`Seek`]; atomic so that `&RemoteFile`
    /// reads at it too.
    pos: AtomicU64,
    /// What stops this handle's reads (see [`with_cancel`](RemoteFile::with_cancel)).
    cancel: Option<Cancel>,
}

impl Clone for RemoteFile {
    /// Shares the file's cache, connections and statistics; the clone's
    /// cursor starts where this one's is.
    fn clone(&self) -> RemoteFile {
        RemoteFile {
            engine: Arc::clone(&self.engine),
            pos: AtomicU64::new(self.pos.load(Relaxed)),
            cancel: self.cancel.clone(),
        }
    }
}

impl RemoteFile {
    /// Opens the file at `url` with the default options.
    ///
    /// Opening costs one request, which learns the size and validators and
    /// fetches the first block. See [`Builder`] for the defaults.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidUrl`] for a URL that is not `http` or `https`; the
    /// server's status as [`ErrorKind::HttpStatus`]; [`ErrorKind::RangeNotSupported`]
    /// if the server ignores byte ranges; network errors after retries.
    ///
    /// ```no_run
    /// let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// println!("{} bytes", file.len());
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn open(url: impl AsRef<str>) -> Result<RemoteFile> {
        Builder::default().open(url)
    }

    /// A builder to set options before opening; it can open many files.
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = remfile::RemoteFile::builder()
    ///     .block_size(256 * 1024)
    ///     .read_timeout(Duration::from_secs(60))
    ///     .header("Authorization", "Bearer token");
    /// ```
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn new(engine: Engine) -> RemoteFile {
        RemoteFile {
            engine: Arc::new(engine),
            pos: AtomicU64::new(0),
            cancel: None,
        }
    }

    /// A handle to the same file (a clone: same cache, connections,
    /// statistics and cursor position) whose reads stop when `cancel` is
    /// cancelled or its deadline passes: each wait of a read ends within
    /// [`wait::POLL`], the read fails with [`ErrorKind::Interrupted`] (or
    /// [`ErrorKind::Timeout`] at the cancel's deadline) and lets go of what
    /// it held — the next read of the same bytes, through any handle,
    /// fetches them at once. Its clones watch the same cancel (and any it
    /// watched already).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use remfile::{RemoteFile, wait::Cancel};
    ///
    /// let file = RemoteFile::open("https://example.com/data.bin")?;
    /// // At most 10 s for this read, whatever the read timeout.
    /// let hurried = file.with_cancel(Cancel::after(Duration::from_secs(10)));
    /// let mut buf = vec![0u8; 1 << 20];
    /// hurried.read_exact_at(0, &mut buf)?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn with_cancel(&self, cancel: Cancel) -> RemoteFile {
        let cancel = match &self.cancel {
            Some(mine) => Cancel::of_either([mine.clone(), cancel]),
            None => cancel,
        };
        RemoteFile {
            cancel: Some(cancel),
            ..self.clone()
        }
    }

    /// Runs `work`, which may wait for the network, as the host wants (see
    /// [`wait`]), with the stop it waits by: made here, where the read
    /// begins, from this handle's cancel, the file's close and what the
    /// caller declared ([`Cancel::run`]).
    fn waiting<T>(&self, work: impl FnOnce(&Stop) -> Result<T>) -> Result<T> {
        let mut read = self.engine.stop_for_read(&Stop::here())?;
        if let Some(cancel) = &self.cancel {
            read = read.watching(cancel);
        }
        // Declared around the host's wait, which makes the read's stop from
        // it: a stop the host asks for, the file's close and the handle's
        // cancel all end the read, and tell the host its stop was not
        // needed if the read ended well all the same.
        read.in_scope(|| wait::blocking(work))
    }

    /// Closes the file, for this handle and every clone of it, as closing a
    /// file descriptor shared by threads does: reads waiting for the network
    /// on it stop at once (within [`wait::POLL`]), letting go of their
    /// connections and their claims on blocks, and fail with
    /// [`ErrorKind::Closed`]; every later read fails so too, without a
    /// request; its background fetches stop. Other files, those sharing its
    /// cache too, are untouched, and the blocks it fetched stay in the
    /// caches for them. Closing twice does nothing more.
    ///
    /// Dropping the last handle lets go of the file too, but only once
    /// every read in flight returned: `close` is for a program that must
    /// end reads other threads are waiting in (a user who closed a
    /// document, a server shutting down).
    ///
    /// ```no_run
    /// use remfile::{ErrorKind, RemoteFile};
    ///
    /// let file = RemoteFile::open("https://example.com/data.bin")?;
    /// let reader = file.clone();
    /// let waiting = std::thread::spawn(move || reader.read_exact_at(0, &mut vec![0; 64 << 20]));
    /// file.close();
    /// if let Err(e) = waiting.join().unwrap() {
    ///     assert_eq!(e.kind(), ErrorKind::Closed);
    /// }
    /// assert_eq!(file.read_exact_at(0, &mut [0; 8]).unwrap_err().kind(), ErrorKind::Closed);
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn close(&self) {
        self.engine.close();
    }

    /// Whether the file was closed ([`close`](RemoteFile::close)).
    pub fn is_closed(&self) -> bool {
        self.engine.check_open().is_err()
    }

    /// The file's size in bytes, as the server reported it at open.
    pub fn len(&self) -> u64 {
        self.engine.identity().size
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The URL given at open, without its query string, fragment or
    /// credentials (fit for logs).
    pub fn url(&self) -> &str {
        self.engine.redacted_url()
    }

    /// The `ETag` the server sent at open, if any. With a strong ETag every
    /// request carries `If-Match`; in every case a response with another ETag
    /// fails with [`ErrorKind::RemoteChanged`].
    pub fn etag(&self) -> Option<&str> {
        self.engine.identity().etag.as_deref()
    }

    /// The `Last-Modified` date the server sent at open, if any.
    pub fn last_modified(&self) -> Option<&str> {
        self.engine.identity().last_modified.as_deref()
    }

    /// The block size in bytes.
    pub fn block_size(&self) -> u64 {
        self.engine.block_size()
    }

    /// The cache this file reads through (possibly shared with other files).
    pub fn cache(&self) -> &BlockCache {
        self.engine.cache()
    }

    /// The counters of this file and all its clones.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// Every request this file and its clones sent, in the order answered,
    /// if it was opened with [`Builder::trace_requests`] (else none): the
    /// bytes each asked for, its status, and when it was sent and answered
    /// (from the start of the open). [`trace::rounds`](crate::trace::rounds)
    /// says which went in the same round trip. At most
    /// [`MOST_TRACED`](crate::trace::MOST_TRACED) are kept.
    ///
    /// ```no_run
    /// let file = remfile::RemoteFile::builder()
    ///     .trace_requests(true)
    ///     .open("https://example.com/data.h5")?;
    /// file.read_at(1 << 20, &mut [0; 100])?;
    /// let requests = file.traced_requests();
    /// let rounds = remfile::trace::rounds(&requests);
    /// for (r, round) in requests.iter().zip(rounds) {
    ///     println!("round {round}: bytes {} -> {:?}", r.requested, r.status);
    /// }
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn traced_requests(&self) -> Vec<crate::trace::TracedRequest> {
        self.engine.traced_requests().0
    }

    /// The requests kept, and how many more the file sent past the bound.
    #[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
    pub(crate) fn traced_requests_counted(&self) -> (Vec<crate::trace::TracedRequest>, u64) {
        self.engine.traced_requests()
    }

    /// The time since the file's open, on the clock of its trace.
    #[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
    pub(crate) fn trace_elapsed(&self) -> std::time::Duration {
        self.engine.trace_elapsed()
    }

    /// Reads up to `buf.len()` bytes at `pos`; returns how many were read.
    ///
    /// Fewer bytes than asked are returned only at the end of the file, and 0
    /// at or past it, without a request.
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// let mut buf = [0u8; 4096];
    /// let n = file.read_at(1 << 20, &mut buf)?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn read_at(&self, pos: u64, buf: &mut [u8]) -> Result<usize> {
        // A closed file fails every read, even one of nothing or at its end.
        self.engine.check_open()?;
        let size = self.len();
        if buf.is_empty() || pos >= size {
            return Ok(0);
        }
        let len = buf
            .len()
            .min(usize::try_from(size - pos).unwrap_or(usize::MAX));
        self.read_into(pos, &mut buf[..len])?;
        Ok(len)
    }

    /// Reads exactly `buf.len()` bytes at `pos`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnexpectedEof`] if the file ends before, without a request;
    /// otherwise as [`read_at`](RemoteFile::read_at).
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// let mut signature = [0u8; 8];
    /// file.read_exact_at(0, &mut signature)?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn read_exact_at(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.engine.check_open()?;
        self.check_within(pos, buf.len())?;
        if !buf.is_empty() {
            self.read_into(pos, buf)?;
        }
        Ok(())
    }

    /// Fills `buf` (inside the file) with the bytes at `pos`, straight
    /// into it, on this thread; a read that must wait runs as the host
    /// wants waits run (see [`wait`]).
    fn read_into(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.engine.check_open()?;
        if self.engine.read_if_cached(pos, buf, true) {
            return Ok(());
        }
        self.waiting(|stop| self.engine.read_into(pos, buf, stop))
    }

    /// As [`read_into`](Self::read_into), for several reads at once.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        self.engine.check_open()?;
        let mut left: Vec<(u64, &mut [u8])> = Vec::new();
        for (pos, buf) in reads.iter_mut() {
            if !self.engine.read_if_cached(*pos, buf, false) {
                left.push((*pos, &mut **buf));
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        self.waiting(|stop| self.engine.read_many(&mut left, stop))
    }

    /// Reads several ranges at once: each `(pos, buf)` is filled exactly, as
    /// by [`read_exact_at`](RemoteFile::read_exact_at), and all their missing
    /// blocks are fetched together — one round trip for any number of ranges
    /// (up to [`max_concurrent_requests`](Builder::max_concurrent_requests)
    /// requests, neighbouring runs merged as
    /// [`coalesce_gap`](Builder::coalesce_gap) allows). No read-ahead is added:
    /// the caller said what it needs. (A range the HDF5 driver's metadata
    /// prefetch is still bringing as a piece is waited for first.)
    ///
    /// The bytes are copied from the fetched blocks directly, so this works
    /// with a cache smaller than the ranges (unlike [`prefetch`](RemoteFile::prefetch)
    /// followed by reads).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::UnexpectedEof`] if any range runs past the end of the file,
    /// before any request; otherwise as [`read_at`](RemoteFile::read_at).
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// let (mut a, mut b) = (vec![0u8; 4096], vec![0u8; 100_000]);
    /// file.read_vectored_at(&mut [(1 << 20, &mut a[..]), (900 << 20, &mut b[..])])?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn read_vectored_at(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        for (pos, buf) in reads.iter() {
            self.check_within(*pos, buf.len())?;
        }
        self.read_many(reads)
    }

    /// Reads the byte `ranges` at once, as [`read_vectored_at`](RemoteFile::read_vectored_at)
    /// does, into new buffers.
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// let parts = file.read_ranges(&[0..512, 10_000_000..10_004_096])?;
    /// assert_eq!(parts[1].len(), 4096);
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn read_ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Vec<u8>>> {
        let mut bufs: Vec<Vec<u8>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            // As everywhere in Rust, a range that ends before it starts is empty.
            let len = usize::try_from(r.end.saturating_sub(r.start)).unwrap_or(usize::MAX);
            self.check_within(r.start, len)?;
            bufs.push(vec![0; len]);
        }
        let mut reads: Vec<(u64, &mut [u8])> = ranges
            .iter()
            .zip(bufs.iter_mut())
            .map(|(r, b)| (r.start, &mut b[..]))
            .collect();
        self.read_many(&mut reads)?;
        Ok(bufs)
    }

    /// An [`ErrorKind::UnexpectedEof`] error unless `len` bytes at `pos` lie
    /// inside the file.
    fn check_within(&self, pos: u64, len: usize) -> Result<()> {
        let end = pos.checked_add(len as u64);
        if end.is_none_or(|end| end > self.len()) {
            return Err(Error::new(
                ErrorKind::UnexpectedEof,
                format!(
                    "cannot read {len} bytes at {pos}: the file has {} bytes",
                    self.len()
                ),
            )
            .with_url(self.url()));
        }
        Ok(())
    }

    /// Fetches the blocks covering `ranges` that are not cached yet, in one
    /// round: one request per contiguous run of missing blocks, up to
    /// [`max_concurrent_requests`](Builder::max_concurrent_requests) at once.
    ///
    /// Use it when the positions of several upcoming reads are known (the
    /// chunks of a dataset slice, say): the reads then hit the cache instead
    /// of costing a round trip each. Parts of ranges past the end of the file
    /// are ignored. The blocks go to the cache, so they stay only while it has
    /// room for them: at most as many blocks as the memory cache holds are
    /// fetched (one round), or, with a [disk cache](Builder::disk_cache), as
    /// many as the disk holds, in rounds of what the memory cache holds (so
    /// a prefetch warms the disk cache without holding more in memory).
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// file.prefetch([10_000_000..12_000_000, 40_000_000..40_004_096])?;
    /// let mut buf = vec![0u8; 2_000_000];
    /// file.read_exact_at(10_000_000, &mut buf)?; // no request
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn prefetch(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<()> {
        self.waiting(|stop| self.engine.prefetch(ranges, stop))
    }

    /// Queues a fetch of the blocks covering `ranges` that are neither
    /// cached nor being fetched, at most `max_bytes` of them, for the
    /// process's background workers, and returns at once with the bytes
    /// missing now.
    ///
    /// For guesses: where a caller expects to read next but is not sure
    /// (the children of a tree node it just read, say). A read that comes to
    /// need one of those blocks once the fetch is under way waits for it
    /// rather than fetching it again, and counts one round trip if it had to
    /// wait; one that comes before a worker took the fetch takes it and
    /// fetches its blocks with its own, in one round trip (a read never
    /// waits for background work's turn). A guess that fails costs only its
    /// bytes: the read then fetches the block itself. Parts of ranges past
    /// the end of the file are ignored.
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// let started = file.prefetch_in_background([40 << 20..41 << 20, 90 << 20..90_010_000], 8 << 20);
    /// // … parse what is at hand meanwhile …
    /// let mut node = vec![0u8; 4096];
    /// file.read_exact_at(40 << 20, &mut node)?; // waits for the fetch under way, if need be
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn prefetch_in_background(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
    ) -> u64 {
        self.engine
            .prefetch_in_background(ranges, max_bytes, None, 0..0)
    }

    /// Waits until the fetches started by
    /// [`prefetch_in_background`](RemoteFile::prefetch_in_background) (by
    /// this file or any clone, and by the HDF5 driver's metadata prefetch,
    /// whose crawl counts from the moment it has work until it has none)
    /// have ended, for at most `timeout`; returns whether they have. For
    /// measurements: [`stats`](RemoteFile::stats) then counts all of them.
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// file.prefetch_in_background([0..1 << 20], 1 << 20);
    /// file.wait_for_background_fetches(std::time::Duration::from_secs(30));
    /// println!("{:?}", file.stats());
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn wait_for_background_fetches(&self, timeout: std::time::Duration) -> bool {
        let deadline = wait::within_exit_bound(crate::wait::deadline::after(timeout));
        wait::outside(|| self.engine.wait_for_background(deadline))
    }

    /// What is known of the link to the server (see [`Builder::link`]):
    /// `None` before a response has shown it, or with [`Link::Ignored`](crate::link::Link::Ignored).
    ///
    /// ```no_run
    /// let file = remfile::RemoteFile::open("https://example.com/data.bin")?;
    /// if let Some(link) = file.link_estimate() {
    ///     println!("{:?} away, {} MB/s", link.round_trip, link.bytes_per_second / 1_000_000);
    /// }
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn link_estimate(&self) -> Option<LinkEstimate> {
        self.engine.link_estimate()
    }
}

impl fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteFile")
            .field("url", &self.url())
            .field("len", &self.len())
            .field("etag", &self.etag())
            .field("block_size", &self.engine.block_size())
            .field("position", &self.pos.load(Relaxed))
            .finish()
    }
}

impl Read for RemoteFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Read for &RemoteFile {
    /// Reads at the cursor and moves it past what was read.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let at = self.pos.load(Relaxed);
        let n = self.read_at(at, buf)?;
        self.pos.store(at + n as u64, Relaxed);
        Ok(n)
    }
}

impl Seek for RemoteFile {
    /// Moves the cursor; seeking past the end is allowed (reads there return
    /// 0), seeking before the start is an `InvalidInput` error.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        (&*self).seek(to)
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos.load(Relaxed))
    }
}

impl Seek for &RemoteFile {
    /// As [`RemoteFile`]'s.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(delta) => self.len().checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.load(Relaxed).checked_add_signed(delta),
        };
        match target {
            Some(n) => {
                self.pos.store(n, Relaxed);
                Ok(n)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek to a negative or overflowing position",
            )),
        }
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos.load(Relaxed))
    }
}

#[cfg(feature = "positioned-io")]
#[cfg_attr(docsrs, doc(cfg(feature = "positioned-io")))]
impl positioned_io::ReadAt for RemoteFile {
    fn read_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
        Ok(RemoteFile::read_at(self, pos, buf)?)
    }

    fn read_exact_at(&self, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        Ok(RemoteFile::read_exact_at(self, pos, buf)?)
    }
}

#[cfg(feature = "positioned-io")]
#[cfg_attr(docsrs, doc(cfg(feature = "positioned-io")))]
impl positioned_io::Size for RemoteFile {
    fn size(&self) -> io::Result<Option<u64>> {
        Ok(Some(self.len()))
    }
}

impl RemoteFile {
    /// What serves the file's reads: for the extension seam, and tests.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_file_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone>() {}
        check::<RemoteFile>();
        check::<Error>();
    }
}
