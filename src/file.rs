//! [`RemoteFile`]: positioned and cursor reads served from the block cache, with
//! missing blocks fetched over HTTP.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::builder::Builder;
use crate::cache::{Block, BlockCache, Claim, FileKey};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{Identity, Transport};
use crate::link::{LinkEstimate, LinkMeter};
use crate::plan::{self, ReadAhead};
use crate::stats::{Counters, Stats};

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
/// * [`Read`] and [`Seek`] use a cursor of the file's own.
/// * With the default `positioned-io` feature, `positioned_io::ReadAt` and
///   `positioned_io::Size` are implemented too.
///
/// Cloning is cheap: a clone shares the cache, the connections and the
/// statistics, and has its own cursor, starting where the original's was.
/// `RemoteFile` is `Send + Sync`.
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
    shared: Arc<Shared>,
    pos: u64,
}

impl Clone for RemoteFile {
    fn clone(&self) -> Self {
        RemoteFile {
            shared: Arc::clone(&self.shared),
            pos: self.pos,
        }
    }
}

/// What [`Shared`] is built from, decided by the builder.
pub(crate) struct Parts {
    pub transport: Transport,
    pub identity: Identity,
    pub first_block: Vec<u8>,
    /// Blocks from the end of the file, fetched at open.
    pub tail_blocks: Vec<(u64, Vec<u8>)>,
    pub cache: BlockCache,
    pub key: FileKey,
    pub block_size: u64,
    pub read_ahead: ReadAhead,
    pub max_concurrency: u64,
    pub split_size: u64,
    pub coalesce_gap: Option<u64>,
    pub link: Arc<LinkMeter>,
    pub bypass_min: u64,
    pub read_timeout: Duration,
    pub counters: Arc<Counters>,
}

struct Shared {
    transport: Transport,
    identity: Identity,
    cache: BlockCache,
    key: FileKey,
    block_size: u64,
    read_ahead: Mutex<ReadAhead>,
    max_concurrency: u64,
    split_size: u64,
    coalesce_gap: Option<u64>,
    link: Arc<LinkMeter>,
    /// Reads at least this long, with nothing cached, skip the cache.
    bypass_min: u64,
    read_timeout: Duration,
    counters: Arc<Counters>,
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

    pub(crate) fn from_parts(p: Parts) -> RemoteFile {
        if !p.first_block.is_empty() {
            p.cache.insert(&p.key, 0, Arc::new(p.first_block));
        }
        for (index, block) in p.tail_blocks {
            if index > 0 {
                p.cache.insert(&p.key, index, Arc::new(block));
            }
        }
        RemoteFile {
            shared: Arc::new(Shared {
                transport: p.transport,
                identity: p.identity,
                cache: p.cache,
                key: p.key,
                block_size: p.block_size,
                read_ahead: Mutex::new(p.read_ahead),
                max_concurrency: p.max_concurrency,
                split_size: p.split_size,
                coalesce_gap: p.coalesce_gap,
                link: p.link,
                bypass_min: p.bypass_min,
                read_timeout: p.read_timeout,
                counters: p.counters,
            }),
            pos: 0,
        }
    }

    /// The file's size in bytes, as the server reported it at open.
    pub fn len(&self) -> u64 {
        self.shared.identity.size
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The URL given at open, without its query string, fragment or
    /// credentials (fit for logs).
    pub fn url(&self) -> &str {
        self.shared.transport.redacted_url()
    }

    /// The `ETag` the server sent at open, if any. With a strong ETag every
    /// request carries `If-Match`; in every case a response with another ETag
    /// fails with [`ErrorKind::RemoteChanged`].
    pub fn etag(&self) -> Option<&str> {
        self.shared.identity.etag.as_deref()
    }

    /// The `Last-Modified` date the server sent at open, if any.
    pub fn last_modified(&self) -> Option<&str> {
        self.shared.identity.last_modified.as_deref()
    }

    /// The block size in bytes.
    pub fn block_size(&self) -> u64 {
        self.shared.block_size
    }

    /// The cache this file reads through (possibly shared with other files).
    pub fn cache(&self) -> &BlockCache {
        &self.shared.cache
    }

    /// The counters of this file and all its clones.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
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
        let size = self.len();
        if buf.is_empty() || pos >= size {
            return Ok(0);
        }
        let len = buf
            .len()
            .min(usize::try_from(size - pos).unwrap_or(usize::MAX));
        self.shared.read_into(pos, &mut buf[..len])?;
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
        self.check_within(pos, buf.len())?;
        if !buf.is_empty() {
            self.shared.read_into(pos, buf)?;
        }
        Ok(())
    }

    /// Reads several ranges at once: each `(pos, buf)` is filled exactly, as
    /// by [`read_exact_at`](RemoteFile::read_exact_at), and all their missing
    /// blocks are fetched together — one round trip for any number of ranges
    /// (up to [`max_concurrent_requests`](Builder::max_concurrent_requests)
    /// requests, neighbouring runs merged as
    /// [`coalesce_gap`](Builder::coalesce_gap) allows). No read-ahead is added:
    /// the caller said what it needs.
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
        self.shared.read_many(reads)
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
        self.shared.read_many(&mut reads)?;
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
    /// room for them.
    ///
    /// ```no_run
    /// # let file = remfile::RemoteFile::open("https://example.com/data.h5")?;
    /// file.prefetch([10_000_000..12_000_000, 40_000_000..40_004_096])?;
    /// let mut buf = vec![0u8; 2_000_000];
    /// file.read_exact_at(10_000_000, &mut buf)?; // no request
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn prefetch(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<()> {
        self.shared.prefetch(ranges)
    }

    /// What is known of the link to the server (see [`Builder::link`]):
    /// `None` before a response has shown it, or with [`Link::Ignored`](crate::Link::Ignored).
    ///
    /// ```no_run
    /// let file = remfile::RemoteFile::open("https://example.com/data.bin")?;
    /// if let Some(link) = file.link_estimate() {
    ///     println!("{:?} away, {} MB/s", link.round_trip, link.bytes_per_second / 1_000_000);
    /// }
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn link_estimate(&self) -> Option<LinkEstimate> {
        self.shared.link.estimate()
    }
}

impl Shared {
    fn link_sizes(&self) -> plan::LinkSizes {
        let bdp = self.link.estimate().map(|e| e.bandwidth_delay_product());
        plan::link_sizes(bdp, self.block_size, self.split_size, self.coalesce_gap)
    }

    /// Fills `buf` with the bytes at `pos`; the range lies inside the file.
    fn read_into(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        let needed = plan::blocks_covering(pos, len, self.block_size);
        if needed.end - needed.start == 1 {
            // The common case of a small cached read, without allocations.
            if let Some(block) = self.cache.get(&self.key, needed.start) {
                let offset = (pos - needed.start * self.block_size) as usize;
                buf.copy_from_slice(&block[offset..offset + buf.len()]);
                self.read_ahead.lock().on_read(pos, len, false, 0);
                Counters::add(&self.counters.cache_hits, 1);
                Counters::add(&self.counters.bytes_read, len);
                return Ok(());
            }
        }
        let mut have: Vec<Option<Block>> = needed
            .clone()
            .map(|i| self.cache.get(&self.key, i))
            .collect();
        if len >= self.bypass_min && have.iter().all(Option::is_none) {
            return self.read_direct(pos, buf);
        }
        let missing: Vec<u64> = needed
            .clone()
            .zip(&have)
            .filter(|(_, b)| b.is_none())
            .map(|(i, _)| i)
            .collect();
        let c = &self.counters;
        Counters::add(&c.cache_hits, (have.len() - missing.len()) as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        let floor = if missing.is_empty() {
            0
        } else {
            self.link_sizes().ahead_floor
        };
        let ahead = self
            .read_ahead
            .lock()
            .on_read(pos, len, !missing.is_empty(), floor);
        if !missing.is_empty() {
            let ahead_end = (pos + len).saturating_add(ahead).min(self.identity.size);
            let optional: Vec<u64> = (needed.end..ahead_end.div_ceil(self.block_size)).collect();
            let claim = self.cache.claim(&self.key, &missing, &optional);
            for (i, block) in self.complete(claim, |i| needed.contains(&i))? {
                have[(i - needed.start) as usize] = Some(block);
            }
        }
        copy_out(
            &have,
            needed.start * self.block_size,
            pos,
            buf,
            self.block_size,
        );
        Counters::add(&c.bytes_read, len);
        Ok(())
    }

    /// Fetches the bytes at `pos` straight into `buf`, in concurrent parts of
    /// one round, without the cache: a large transfer then costs no block
    /// buffers, no copy out of them and no eviction of what the cache holds.
    fn read_direct(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        // The stream goes on from here, but this read needs no read-ahead.
        self.read_ahead.lock().on_read(pos, len, false, 0);
        let blocks = plan::blocks_covering(pos, len, self.block_size);
        Counters::add(&self.counters.cache_misses, blocks.end - blocks.start);
        let min_part = self.link_sizes().min_part.saturating_mul(self.block_size);
        let parts = plan::split(pos..pos + len, self.max_concurrency, min_part);
        let deadline = Instant::now() + self.read_timeout;
        let mut pieces: Vec<(Range<u64>, &mut [u8])> = Vec::with_capacity(parts.len());
        let mut rest = buf;
        for part in parts {
            let (piece, after) = rest.split_at_mut((part.end - part.start) as usize);
            pieces.push((part, piece));
            rest = after;
        }
        let fetch = |(part, piece): (Range<u64>, &mut [u8])| {
            self.transport
                .fetch_into(part, piece, &self.identity, deadline)
        };
        let results: Vec<Result<u32>> = std::thread::scope(|s| {
            let mut pieces = pieces.into_iter();
            let first = pieces.next();
            let handles: Vec<_> = pieces.map(|p| s.spawn(move || fetch(p))).collect();
            let mut out: Vec<Result<u32>> = first.into_iter().map(fetch).collect();
            out.extend(handles.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::new(ErrorKind::Network, "a fetch thread panicked"))
                })
            }));
            out
        });
        let rounds = results.iter().map(|r| *r.as_ref().unwrap_or(&1)).max();
        Counters::add(&self.counters.round_trips, rounds.unwrap_or(0).into());
        for result in results {
            result?;
        }
        Counters::add(&self.counters.bytes_read, len);
        Ok(())
    }

    /// Fills every `(pos, buf)` (each inside the file), fetching all their
    /// missing blocks in one round.
    fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        let mut needed: Vec<u64> = reads
            .iter()
            .filter(|(_, buf)| !buf.is_empty())
            .flat_map(|(pos, buf)| plan::blocks_covering(*pos, buf.len() as u64, self.block_size))
            .collect();
        needed.sort_unstable();
        needed.dedup();
        let mut blocks: Vec<(u64, Block)> = Vec::with_capacity(needed.len());
        let mut missing = Vec::new();
        for &i in &needed {
            match self.cache.get(&self.key, i) {
                Some(block) => blocks.push((i, block)),
                None => missing.push(i),
            }
        }
        let c = &self.counters;
        Counters::add(&c.cache_hits, blocks.len() as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        if !missing.is_empty() {
            let claim = self.cache.claim(&self.key, &missing, &[]);
            blocks.extend(self.complete(claim, |_| true)?);
            blocks.sort_unstable_by_key(|(i, _)| *i);
        }
        for (pos, buf) in reads.iter_mut() {
            if buf.is_empty() {
                continue;
            }
            let covering = plan::blocks_covering(*pos, buf.len() as u64, self.block_size);
            let at = blocks.partition_point(|(i, _)| *i < covering.start);
            let have: Vec<Option<Block>> = blocks
                [at..at + (covering.end - covering.start) as usize]
                .iter()
                .map(|(_, b)| Some(b.clone()))
                .collect();
            copy_out(
                &have,
                covering.start * self.block_size,
                *pos,
                buf,
                self.block_size,
            );
            Counters::add(&c.bytes_read, buf.len() as u64);
        }
        Ok(())
    }

    /// Fetches what `claim` owns and waits for what others fetch. Returns the
    /// blocks for which `is_needed` holds; a failure matters only if it hits
    /// one of those (a failed read-ahead costs nothing but its bytes).
    fn complete(
        &self,
        mut claim: Claim,
        is_needed: impl Fn(u64) -> bool,
    ) -> Result<Vec<(u64, Block)>> {
        let mut got = std::mem::take(&mut claim.found);
        let deadline = Instant::now() + self.read_timeout;
        let owned = claim.owned.clone();
        let sizes = self.link_sizes();
        let parts = plan::parts(&owned, self.max_concurrency, sizes.min_part, sizes.max_gap);
        let mut failure = None;
        let mut delivered = 0;
        let rounds = self.fetch_parts(&parts, deadline, |part, result| {
            delivered += 1;
            match result {
                Ok(blocks) => {
                    // Gap blocks fetched to save a request are cached or
                    // fetched by others already: only owned ones are kept.
                    for (i, data) in part.clone().zip(blocks) {
                        if owned.binary_search(&i).is_err() {
                            continue;
                        }
                        let block = Arc::new(data);
                        if is_needed(i) {
                            got.push((i, block.clone()));
                        }
                        claim.fulfil(i, block);
                    }
                    false
                }
                Err(e) => {
                    for i in part.clone() {
                        claim.fail(i, &e);
                    }
                    let fatal = part
                        .clone()
                        .any(|i| owned.binary_search(&i).is_ok() && is_needed(i));
                    if fatal && failure.is_none() {
                        failure = Some(e);
                    }
                    fatal
                }
            }
        });
        Counters::add(&self.counters.round_trips, rounds.into());
        if let Some(e) = failure {
            return Err(e);
        }
        if delivered < parts.len() {
            return Err(Error::new(ErrorKind::Network, "a fetch thread panicked")
                .with_url(self.transport.redacted_url()));
        }
        for (i, pending) in std::mem::take(&mut claim.waiting) {
            let block = pending
                .wait(deadline)
                .map_err(|e| e.with_url(self.transport.redacted_url()))?;
            got.push((i, block));
        }
        Ok(got)
    }

    /// Makes sure the blocks covering `ranges` are fetched, all missing runs
    /// at once.
    fn prefetch(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<()> {
        let size = self.identity.size;
        let mut blocks: Vec<u64> = ranges
            .into_iter()
            .map(|r| r.start.min(size)..r.end.min(size))
            .filter(|r| r.end > r.start)
            .flat_map(|r| plan::blocks_covering(r.start, r.end - r.start, self.block_size))
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        blocks.retain(|&i| self.cache.get(&self.key, i).is_none());
        if !blocks.is_empty() {
            let claim = self.cache.claim(&self.key, &blocks, &[]);
            self.complete(claim, |_| true)?;
        }
        Ok(())
    }

    /// Fetches `parts`, at most `max_concurrency` at a time, each on the next
    /// free worker, and hands every result to `on_done` on this thread as it
    /// arrives (so waiting readers get their blocks early). `on_done` returns
    /// true to stop: parts not started yet are then not fetched. Returns the
    /// round trips as planned (one per `max_concurrency` parts, not per
    /// worker, which would depend on timing) plus the most retries of a part.
    fn fetch_parts(
        &self,
        parts: &[Range<u64>],
        deadline: Instant,
        mut on_done: impl FnMut(&Range<u64>, Result<Vec<Vec<u8>>>) -> bool,
    ) -> u32 {
        let fetch = |part: &Range<u64>| {
            let bytes = plan::byte_range(part, self.block_size, self.identity.size);
            self.transport.fetch(
                bytes,
                self.block_size,
                &self.identity,
                deadline,
                self.cache.buffers(),
            )
        };
        let attempts = |r: &Result<(Vec<Vec<u8>>, u32)>| r.as_ref().map_or(1, |(_, n)| *n);
        if parts.is_empty() {
            return 0;
        }
        if let [only] = parts {
            let result = fetch(only);
            let rounds = attempts(&result);
            on_done(only, result.map(|(blocks, _)| blocks));
            return rounds;
        }
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let workers = (self.max_concurrency as usize).min(parts.len());
        let (sender, results) = mpsc::channel();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let sender = sender.clone();
                    let (next, stop, fetch) = (&next, &stop, &fetch);
                    s.spawn(move || {
                        // The most attempts one part took: a worker that
                        // takes several parts does not make more rounds.
                        let mut most_attempts = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let Some(part) = parts.get(next.fetch_add(1, Ordering::Relaxed)) else {
                                break;
                            };
                            let result = fetch(part);
                            most_attempts = most_attempts.max(attempts(&result));
                            if sender.send((part, result)).is_err() {
                                break;
                            }
                        }
                        most_attempts
                    })
                })
                .collect();
            drop(sender);
            for (part, result) in results {
                if on_done(part, result.map(|(blocks, _)| blocks)) {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            let most_attempts = handles
                .into_iter()
                .filter_map(|h| h.join().ok())
                .max()
                .unwrap_or(1);
            parts.len().div_ceil(workers) as u32 - 1 + most_attempts
        })
    }
}

/// Copies the bytes at `pos` from consecutive blocks, the first starting at
/// `first_start`, into `buf`.
fn copy_out(blocks: &[Option<Block>], first_start: u64, pos: u64, buf: &mut [u8], block_size: u64) {
    let mut written = 0usize;
    let mut skip = (pos - first_start) as usize;
    for block in blocks {
        let block = block.as_ref().expect("every needed block is present");
        let take = (block.len() - skip).min(buf.len() - written);
        buf[written..written + take].copy_from_slice(&block[skip..skip + take]);
        written += take;
        skip = 0;
        debug_assert!(block.len() as u64 <= block_size);
    }
    debug_assert_eq!(written, buf.len());
}

impl fmt::Debug for RemoteFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteFile")
            .field("url", &self.url())
            .field("len", &self.len())
            .field("etag", &self.etag())
            .field("block_size", &self.shared.block_size)
            .field("position", &self.pos)
            .finish()
    }
}

impl Read for RemoteFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(self.pos, buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RemoteFile {
    /// Moves the cursor; seeking past the end is allowed (reads there return
    /// 0), seeking before the start is an `InvalidInput` error.
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let target = match to {
            SeekFrom::Start(n) => Some(n),
            SeekFrom::End(delta) => self.len().checked_add_signed(delta),
            SeekFrom::Current(delta) => self.pos.checked_add_signed(delta),
        };
        match target {
            Some(n) => {
                self.pos = n;
                Ok(n)
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek to a negative or overflowing position",
            )),
        }
    }

    fn stream_position(&mut self) -> io::Result<u64> {
        Ok(self.pos)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_out_spans_blocks() {
        let blocks = vec![
            Some(Arc::new(b"abcd".to_vec())),
            Some(Arc::new(b"efgh".to_vec())),
            Some(Arc::new(b"ij".to_vec())),
        ];
        let mut buf = [0u8; 7];
        copy_out(&blocks, 4, 6, &mut buf, 4);
        assert_eq!(&buf, b"cdefghi");
    }

    #[test]
    fn remote_file_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone>() {}
        check::<RemoteFile>();
        check::<Error>();
    }
}
