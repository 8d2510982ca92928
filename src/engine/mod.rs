//! The read engine: how a read is served. It looks the read's blocks up in
//! the cache, adds read-ahead by the [`plan`], claims what is missing (so
//! that concurrent readers fetch each block once), fetches the claimed blocks
//! in concurrent parts through the [`fanout`](crate::engine::fanout) pool, and
//! assembles the bytes out of the blocks. Large reads that miss the cache
//! fetch what it lacks straight into the caller's buffer. All hit and miss
//! accounting happens here. [`RemoteFile`](crate::file::RemoteFile) is its public
//! face.
//!
//! - `mod.rs`: the engine and the core's reads, fetches and background
//!   fetches;
//! - [`fetch`]: one fetch of a claim's blocks, and the buffer helpers;
//! - `for_extension`: what only a layer that knows the file's layout asks
//!   for (cache probes, guesses on the calling thread, exact ranges, a side
//!   store), reached through [`Extension`](crate::extension::Extension);
//! - `tests`: the engine over an in-memory source.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use crate::cache::{Block, BlockCache, Claim, FileKey, Served, SideStore};
use crate::disk::{Claimed, DiskFile};
use crate::error::{Error, ErrorKind, Result};
use crate::http::Sink;
use crate::identity::Identity;
use crate::link::{LinkEstimate, LinkMeter};
use crate::process::workers::{self, Priority};
use crate::stats::{Counters, Stats};
use crate::sync;
use fanout::{Done, Next, fan_out};
use plan::ReadAhead;
use queued::Queued;
use range_source::RangeSource;

pub(crate) mod fanout;
mod fetch;
#[cfg(feature = "extension")]
mod for_extension;
#[cfg(test)]
pub(crate) mod memory_source;
pub(crate) mod plan;
mod queued;
pub(crate) mod range_source;
#[cfg(test)]
pub(crate) mod tests;

use fetch::{Fetch, Guess, copy_out, cut, nobody_needs};
#[cfg(feature = "extension")]
pub(crate) use for_extension::{BackgroundWork, SideStoreSetup};

/// How the engine sizes its fetches: the builder's options, checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadOptions {
    pub block_size: u64,
    pub read_ahead_min: u64,
    pub read_ahead_max: u64,
    /// The most requests one read has in flight.
    pub max_concurrency: u64,
    /// The most requests one guess has in flight: a wave of metadata
    /// targets spread through a file is one round only if they all go at
    /// once; the connections one read may use are left to reads.
    pub guess_concurrency: u64,
    pub split_size: u64,
    pub coalesce_gap: Option<u64>,
    /// Reads at least this long, with nothing cached, skip the cache.
    pub bypass_min: u64,
    /// The overall deadline of one read.
    pub read_timeout: Duration,
}

/// How many times a fetch claims the blocks other processes let go of
/// unwritten before it fetches them whoever holds them: a holder that fails
/// again and again costs a few waits, never a read.
const CLAIM_ROUNDS: usize = 4;

/// The longest the last handle of a file waits, when dropped, for its
/// blocks still to be written to the disk cache.
const DISK_FLUSH_AT_DROP: Duration = Duration::from_secs(10);

/// The state all clones of a file share, and how reads are served from it.
pub(crate) struct Engine {
    transport: Box<dyn RangeSource>,
    identity: Identity,
    cache: BlockCache,
    key: FileKey,
    /// The file's blocks on disk, if it has a disk cache.
    disk: Option<DiskFile>,
    options: ReadOptions,
    read_ahead: Mutex<ReadAhead>,
    link: Arc<LinkMeter>,
    counters: Arc<Counters>,
    /// What a layer that knows the file's layout keeps beside the blocks,
    /// once it put a store here (through the extension API): a read looks
    /// at it before fetching blocks.
    side_store: std::sync::OnceLock<Box<dyn SideStore>>,
    /// Background fetches waiting for a worker (a reader that needs one of
    /// their blocks takes them).
    queued: Queued,
    /// Background fetches under way, and their end.
    background: sync::Mutex<usize>,
    background_done: sync::Condvar,
    /// Cancelled when the file is closed: every read and background fetch
    /// of it watches this.
    closed: crate::wait::Cancel,
}

/// A fetched run of blocks, or why it failed.
type Fetched = (Range<u64>, Result<Vec<Vec<u8>>>);

impl Drop for Engine {
    fn drop(&mut self) {
        // A program that ends after reading leaves its blocks on disk for
        // the next run (they are written in the background).
        if let Some(disk) = &self.disk {
            if let Some(store) = self.side_store.get() {
                store.at_close(disk);
            }
            disk.flush(crate::wait::within_exit_bound(
                Instant::now() + DISK_FLUSH_AT_DROP,
            ));
        }
    }
}

impl Engine {
    pub(crate) fn new(
        transport: impl RangeSource,
        identity: Identity,
        (cache, key, disk): (BlockCache, FileKey, Option<DiskFile>),
        options: ReadOptions,
        link: Arc<LinkMeter>,
        counters: Arc<Counters>,
    ) -> Engine {
        Engine {
            transport: Box::new(transport),
            identity,
            key,
            disk,
            read_ahead: Mutex::new(ReadAhead::new(
                options.read_ahead_min,
                options.read_ahead_max,
            )),
            side_store: std::sync::OnceLock::new(),
            cache,
            options,
            link,
            counters,
            queued: Queued::default(),
            background: sync::Mutex::new(0),
            background_done: sync::Condvar::new(),
            closed: crate::wait::Cancel::closing(),
        }
    }

    /// Closes the file for every handle: its reads in flight stop within a
    /// poll (letting go of their claims and connections) and fail with
    /// [`ErrorKind::Closed`], as every later read does; its background
    /// fetches stop and those queued are dropped. The blocks fetched so
    /// far stay in the caches, for other files over the same URL.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        self.queued.forget_all();
    }

    /// An [`ErrorKind::Closed`] error once the file is closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        match self.closed.is_cancelled() {
            true => Err(crate::wait::closed().with_url(self.transport.redacted_url())),
            false => Ok(()),
        }
    }

    /// Runs `work` (a read of this file) watching the file's close, beside
    /// what it watches already.
    pub(crate) fn unless_closed<T>(&self, work: impl FnOnce() -> Result<T>) -> Result<T> {
        self.check_open()?;
        self.closed.run(work)
    }

    /// Caches block `index`, fetched while opening the file, if it is as
    /// long as that block of the file is now (a block of another version
    /// of the file never enters either cache).
    pub(crate) fn seed(&self, index: u64, bytes: Vec<u8>) {
        let whole = bytes.len() as u64 == self.block_len(index);
        if !whole {
            tracing::debug!(
                index,
                len = bytes.len(),
                "a block fetched at open is not the file's block now; not cached"
            );
        }
        if whole && !bytes.is_empty() {
            if let Some(disk) = &self.disk {
                disk.write(index, &bytes);
            }
            self.cache.insert(&self.key, index, Arc::new(bytes));
        }
    }

    /// How many readers wait for another's fetch of block `index` now.
    #[cfg(test)]
    pub(crate) fn waiting_for(&self, index: u64) -> usize {
        self.cache.waiting_for(&self.key, index)
    }

    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    pub(crate) fn redacted_url(&self) -> &str {
        self.transport.redacted_url()
    }

    pub(crate) fn block_size(&self) -> u64 {
        self.options.block_size
    }

    pub(crate) fn cache(&self) -> &BlockCache {
        &self.cache
    }

    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// The time since the file's trace started (its open).
    pub fn trace_elapsed(&self) -> std::time::Duration {
        self.counters.trace.elapsed()
    }

    /// The requests the file sent, if it keeps them, and how many more it
    /// sent past the trace's bound.
    pub fn traced_requests(&self) -> (Vec<crate::trace::TracedRequest>, u64) {
        self.counters.trace.requests()
    }

    pub(crate) fn link_estimate(&self) -> Option<LinkEstimate> {
        self.link.estimate()
    }

    fn link_sizes(&self) -> plan::LinkSizes {
        let o = &self.options;
        let bdp = self.link.estimate().map(|e| e.bandwidth_delay_product());
        plan::link_sizes(bdp, o.block_size, o.split_size, o.coalesce_gap)
    }

    /// Records a read with the read-ahead and returns how far to read ahead
    /// after it: only a read that `missed` a block reads ahead.
    fn note_read(&self, pos: u64, len: u64, missed: bool) -> u64 {
        let floor = if missed {
            self.link_sizes().ahead_floor_bytes
        } else {
            0
        };
        self.read_ahead.lock().on_read(pos, len, missed, floor)
    }

    /// Fills `buf` with the bytes at `pos` if every block covering them is
    /// cached now (looked up once: no block can go between the look and
    /// the copy), or the side store holds them now; false, with nothing
    /// read, otherwise. `note`: the read counts for read-ahead (a vectored
    /// read's ranges do not).
    pub(crate) fn read_if_cached(&self, pos: u64, buf: &mut [u8], note: bool) -> bool {
        if buf.is_empty() {
            return true;
        }
        let served = self.copy_if_cached(pos, buf) || self.read_from_side_store(pos, buf, None);
        if served && note {
            self.note_read(pos, buf.len() as u64, false);
        }
        served
    }

    /// Copies the bytes at `pos` out of the cache if every block covering
    /// them is there (a small read inside one block, the common case,
    /// without an allocation).
    fn copy_if_cached(&self, pos: u64, buf: &mut [u8]) -> bool {
        let len = buf.len() as u64;
        let bs = self.options.block_size;
        let needed = plan::blocks_covering(pos, len, bs);
        let count = needed.end - needed.start;
        if count == 1 {
            let Some(block) = self.cache.get(&self.key, needed.start) else {
                return false;
            };
            let offset = (pos - needed.start * bs) as usize;
            buf.copy_from_slice(&block[offset..offset + buf.len()]);
        } else {
            let mut blocks = Vec::with_capacity(count as usize);
            for i in needed.clone() {
                match self.cache.get(&self.key, i) {
                    Some(block) => blocks.push(block),
                    None => return false,
                }
            }
            copy_out(&blocks, needed.start * bs, pos, buf);
        }
        Counters::add(&self.counters.cache_hits, count);
        Counters::add(&self.counters.bytes_read, len);
        true
    }

    /// Whether every block covering `range` is cached (or the side store
    /// holds it).
    #[cfg(feature = "extension")]
    pub(crate) fn is_cached(&self, range: Range<u64>) -> bool {
        let in_store = |r| self.side_store.get().is_some_and(|s| s.holds(r));
        in_store(range.clone()) || self.missing([range]).next().is_none()
    }

    /// The deadline of a read starting now: the one every wait and fetch
    /// of that read is held to ([`Builder::read_timeout`](crate::options::Builder::read_timeout)).
    fn read_deadline(&self) -> Instant {
        crate::wait::deadline::after(self.options.read_timeout)
    }

    /// Fills `buf` with the bytes at `pos`; the range lies inside the file.
    pub(crate) fn read_into(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let deadline = self.read_deadline();
        let len = buf.len() as u64;
        let bs = self.options.block_size;
        let needed = plan::blocks_covering(pos, len, bs);
        // (What the caches held when the caller looked it served itself:
        // see `read_if_cached`. Pieces still coming are waited for here.)
        if self.read_from_side_store(pos, buf, Some(deadline)) {
            self.note_read(pos, len, false);
            return Ok(());
        }
        let mut have: Vec<Option<Block>> = needed
            .clone()
            .map(|i| self.cache.get(&self.key, i))
            .collect();
        // With a disk cache the blocks go to disk (and other processes
        // wait for them there): only a file without one reads past the
        // cache.
        let bypass = self.disk.is_none() && len >= self.options.bypass_min;
        if bypass && have.iter().any(Option::is_none) {
            return self.read_direct(pos, buf, &have, deadline);
        }
        let missing: Vec<u64> = needed
            .clone()
            .zip(&have)
            .filter_map(|(i, b)| b.is_none().then_some(i))
            .collect();
        let c = &self.counters;
        Counters::add(&c.cache_hits, (have.len() - missing.len()) as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        let ahead = self.note_read(pos, len, !missing.is_empty());
        if !missing.is_empty() {
            let ahead_end = (pos + len).saturating_add(ahead).min(self.identity.size);
            let optional: Vec<u64> = (needed.end..ahead_end.div_ceil(bs)).collect();
            let claim = self.claim_taking_queued(&missing, optional);
            for (i, block) in self.fetch_claim(claim, |i| needed.contains(&i), deadline)? {
                have[(i - needed.start) as usize] = Some(block);
            }
        }
        let blocks = have
            .iter()
            .map(|b| b.as_ref().expect("every needed block is present"));
        copy_out(blocks, needed.start * bs, pos, buf);
        Counters::add(&c.bytes_read, len);
        Ok(())
    }

    /// Serves a read from the side store, if it holds the bytes (waiting
    /// until `wait` for those it was promised, if given). False unless it
    /// holds them all.
    fn read_from_side_store(&self, pos: u64, buf: &mut [u8], wait: Option<Instant>) -> bool {
        let Some(store) = self.side_store.get() else {
            return false;
        };
        let range = pos..pos + buf.len() as u64;
        // Without a wait, only bytes here now: a piece still coming is
        // neither waited for nor marked as waited for.
        if wait.is_none() && !store.holds(range) {
            return false;
        }
        let deadline = wait.unwrap_or_else(Instant::now);
        let rounds_so_far = self.counters.round_mark();
        let Served::Copied { waited_a_round } = store.read(pos, buf, deadline, rounds_so_far)
        else {
            return false;
        };
        let c = &self.counters;
        Counters::add(&c.round_trips, waited_a_round.into());
        Counters::add(&c.cache_hits, 1);
        Counters::add(&c.bytes_read, buf.len() as u64);
        true
    }

    /// Fetches the bytes at `pos` that `have` (the blocks covering them)
    /// lacks straight into `buf`, in concurrent parts of one round, and
    /// copies the others out of the cache: a large transfer then costs no
    /// block buffers (its bytes are held once, in `buf`), no copy out of
    /// them and no eviction of what the cache holds.
    fn read_direct(
        &self,
        pos: u64,
        buf: &mut [u8],
        have: &[Option<Block>],
        deadline: Instant,
    ) -> Result<()> {
        crate::wait::check_stopped()?;
        let len = buf.len() as u64;
        let bs = self.options.block_size;
        // The stream goes on from here, but this read needs no read-ahead.
        self.note_read(pos, len, false);
        let first = pos / bs;
        for (k, block) in have.iter().enumerate() {
            if let Some(block) = block {
                let start = (first + k as u64) * bs;
                let bytes = start.max(pos)..(start + bs).min(pos + len);
                buf[(bytes.start - pos) as usize..(bytes.end - pos) as usize].copy_from_slice(
                    &block[(bytes.start - start) as usize..(bytes.end - start) as usize],
                );
            }
        }
        let cached: Vec<bool> = have.iter().map(Option::is_some).collect();
        let hits = cached.iter().filter(|&&c| c).count() as u64;
        Counters::add(&self.counters.cache_hits, hits);
        Counters::add(&self.counters.cache_misses, cached.len() as u64 - hits);
        let min_part = self.link_sizes().min_part_blocks.saturating_mul(bs);
        let lanes = self.options.max_concurrency;
        // No more runs than lanes: one round, cached blocks between close
        // runs fetched again.
        let runs = plan::joined_runs(plan::uncached_runs(pos, len, bs, &cached), lanes as usize);
        let lens: Vec<u64> = runs.iter().map(|r| r.end - r.start).collect();
        let parts: Vec<Range<u64>> = runs
            .into_iter()
            .zip(plan::parts_per_run(&lens, lanes, min_part))
            .flat_map(|(run, n)| plan::split(run, n, min_part))
            .collect();
        // The first failure in the order of the parts, as a sequential read
        // would have met it.
        let mut failure: Option<(usize, Error)> = None;
        let rounds = fan_out(
            cut(buf, pos, parts).into_iter().enumerate().collect(),
            self.options.max_concurrency as usize,
            |(n, (range, piece))| {
                let result = self.fetch_range(range, &mut Sink::over(piece), deadline);
                Done {
                    attempts: *result.as_ref().unwrap_or(&1),
                    outcome: result.err().map(|e| (n, e)),
                }
            },
            |failed| {
                if let Some((n, e)) = failed {
                    if failure.as_ref().is_none_or(|(first, _)| n < *first) {
                        failure = Some((n, e));
                    }
                }
                Next::Continue
            },
        );
        Counters::add(&self.counters.round_trips, rounds.into());
        if let Some((_, e)) = failure {
            return Err(e);
        }
        Counters::add(&self.counters.bytes_read, len);
        Ok(())
    }

    /// Fills every `(pos, buf)` (each inside the file), fetching all their
    /// missing blocks in one round.
    pub(crate) fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        let deadline = self.read_deadline();
        // A read a piece holds is served from it, as `read_into` serves one:
        // the blocks may never have been fetched.
        let mut reads: Vec<(u64, &mut [u8])> = reads
            .iter_mut()
            .filter_map(|(pos, buf)| {
                let served =
                    !buf.is_empty() && self.read_from_side_store(*pos, buf, Some(deadline));
                (!served).then_some((*pos, &mut **buf))
            })
            .collect();
        let bs = self.options.block_size;
        let ranges = reads.iter().map(|(pos, buf)| *pos..*pos + buf.len() as u64);
        // As many blocks as the callers' buffers cover: bounded by them.
        let needed: Vec<u64> = plan::blocks_of(ranges, bs).collect();
        let (mut blocks, missing) = self.look_up(&needed);
        let c = &self.counters;
        Counters::add(&c.cache_hits, blocks.len() as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        if !missing.is_empty() {
            blocks.extend(self.fetch_missing(&missing, deadline)?);
            blocks.sort_unstable_by_key(|(i, _)| *i);
        }
        for (pos, buf) in reads.iter_mut() {
            if buf.is_empty() {
                continue;
            }
            let covering = plan::blocks_covering(*pos, buf.len() as u64, bs);
            let at = blocks.partition_point(|(i, _)| *i < covering.start);
            let run = &blocks[at..at + (covering.end - covering.start) as usize];
            copy_out(run.iter().map(|(_, b)| b), covering.start * bs, *pos, buf);
            Counters::add(&c.bytes_read, buf.len() as u64);
        }
        Ok(())
    }

    /// Makes sure the blocks covering `ranges` are fetched: as many as the
    /// caches hold (more would not stay), in rounds of at most what the
    /// memory cache holds, so that memory stays within its budget. Without
    /// a disk cache that is one round; with one, as many blocks as the disk
    /// holds.
    pub(crate) fn prefetch(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<()> {
        let fetch = self.blocks_the_cache_holds();
        let most = match &self.disk {
            Some(disk) => (disk.capacity() / self.options.block_size).max(fetch),
            None => fetch,
        };
        let mut missing = self
            .missing(ranges)
            .take(usize::try_from(most).unwrap_or(usize::MAX));
        // The first round's blocks come to memory, from disk if they are
        // there; after it, blocks on disk are left there (reading them into
        // memory would only evict the first round's).
        let on_disk = |i: &u64| self.disk.as_ref().is_some_and(|d| d.holds(*i));
        let mut first = true;
        loop {
            let next: Vec<u64> = missing
                .by_ref()
                .filter(|i| first || !on_disk(i))
                .take(fetch as usize)
                .collect();
            if next.is_empty() {
                return Ok(());
            }
            first = false;
            // Each round is a read of its own, with its own time.
            self.fetch_missing(&next, self.read_deadline())?;
        }
    }

    /// How many of the file's blocks the memory cache can hold at once (at
    /// least one): the most a round that fetches ahead of any read is worth.
    fn blocks_the_cache_holds(&self) -> u64 {
        (self.cache.capacity() / self.options.block_size).max(1)
    }

    /// The first `most` blocks covering `ranges` (their parts inside the
    /// file) that are not cached, sorted.
    fn missing_blocks(&self, ranges: impl IntoIterator<Item = Range<u64>>, most: u64) -> Vec<u64> {
        self.missing(ranges)
            .take(usize::try_from(most).unwrap_or(usize::MAX))
            .collect()
    }

    /// The blocks covering `ranges` (their parts inside the file) that are
    /// not cached, in order, each looked up when it is taken: ranges of any
    /// length cost only the blocks looked at.
    fn missing(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> impl Iterator<Item = u64> {
        let size = self.identity.size;
        let inside = ranges
            .into_iter()
            .map(move |r| r.start.min(size)..r.end.min(size));
        plan::blocks_of(inside, self.options.block_size).filter(|&i| self.is_missing(i))
    }

    /// Whether block `index` is not cached.
    fn is_missing(&self, index: u64) -> bool {
        self.cache.get(&self.key, index).is_none()
    }

    /// The length of block `index` (the file's last may be short).
    fn block_len(&self, index: u64) -> u64 {
        let block = plan::block_bytes(index, self.options.block_size, self.identity.size);
        block.end - block.start
    }

    /// The cached blocks among `needed`, and the indices of the others.
    fn look_up(&self, needed: &[u64]) -> (Vec<(u64, Block)>, Vec<u64>) {
        let mut found = Vec::with_capacity(needed.len());
        let mut missing = Vec::new();
        for &i in needed {
            match self.cache.get(&self.key, i) {
                Some(block) => found.push((i, block)),
                None => missing.push(i),
            }
        }
        (found, missing)
    }

    /// Fetches `missing` blocks (sorted), or waits for them if others are
    /// fetching them, in one round. Exactly those blocks are returned: the
    /// blocks of queued fetches it takes go to the cache only.
    fn fetch_missing(&self, missing: &[u64], deadline: Instant) -> Result<Vec<(u64, Block)>> {
        let claim = self.claim_taking_queued(missing, Vec::new());
        self.fetch_claim(claim, |i| missing.binary_search(&i).is_ok(), deadline)
    }

    /// Claims `needed` (sorted) and `optional` as [`BlockCache::claim`]
    /// does, with the blocks of every background fetch still queued that
    /// brings one of `needed` as optional too: this read makes those
    /// fetches, in its own round (see [`Queued`]).
    fn claim_taking_queued(&self, needed: &[u64], mut optional: Vec<u64>) -> Claim {
        self.queued.take_fetches_of(needed, |taken| {
            // No more than the cache holds: the rest of the fetches is
            // dropped (it was a guess).
            let room = self.blocks_the_cache_holds() as usize;
            let room = room.saturating_sub(needed.len() + optional.len());
            let theirs: Vec<u64> = taken
                .into_iter()
                .filter(|i| needed.binary_search(i).is_err() && optional.binary_search(i).is_err())
                .take(room)
                .collect();
            if theirs.is_empty() {
                return self.cache.claim(&self.key, needed, &optional);
            }
            optional.extend_from_slice(&theirs);
            optional.sort_unstable();
            let mut claim = self.cache.claim(&self.key, needed, &optional);
            // The bytes between a guess's blocks are wanted by nobody.
            if theirs
                .iter()
                .any(|i| claim.owned().binary_search(i).is_ok())
            {
                claim.fill_no_gaps();
            }
            claim
        })
    }

    /// Fetches what `claim` owns and waits for what others fetch. Returns the
    /// blocks for which `is_needed` holds; a failure matters only if it hits
    /// one of those (a failed read-ahead costs nothing but its bytes).
    fn fetch_claim(
        &self,
        claim: Claim,
        is_needed: impl Fn(u64) -> bool,
        deadline: Instant,
    ) -> Result<Vec<(u64, Block)>> {
        // A stopped read fetches nothing (its claim goes with it).
        crate::wait::check_stopped()?;
        let mut fetch = Fetch::new(claim, is_needed, deadline);
        let waited = match self.fetch_owned(&mut fetch) {
            Some(e) => Err(e),
            None => self.wait_for_others(&mut fetch),
        };
        // Waiting for a speculative fetch still under way is a round trip of
        // this read's own (the fetch itself is counted by nobody).
        if *waited.as_ref().unwrap_or(&false) {
            fetch.count_a_wait();
        }
        Counters::add(&self.counters.round_trips, fetch.round_trips.into());
        waited.map(|_| fetch.got)
    }

    /// Fetches the blocks `claim` owns — from the disk cache, else in one
    /// round of concurrent parts — handing each to the cache and its waiters
    /// as it arrives (and the needed ones to `got`), recording the round
    /// trips it takes. Returns the first failure that hit a needed block
    /// (which stops parts not yet started).
    fn fetch_owned(&self, fetch: &mut Fetch<impl Fn(u64) -> bool>) -> Option<Error> {
        self.fetch_from_disk(fetch);
        self.fetch_not_on_disk(fetch)
    }

    /// As [`fetch_owned`](Self::fetch_owned), for blocks the disk cache was
    /// already asked for.
    fn fetch_not_on_disk(&self, fetch: &mut Fetch<impl Fn(u64) -> bool>) -> Option<Error> {
        let Some(disk) = &self.disk else {
            return self.fetch_network(fetch, &[]);
        };
        let mut waited = false;
        for _ in 0..CLAIM_ROUNDS {
            // One fetch per block across processes: blocks another process
            // is fetching are waited for on disk, after this process's own.
            let Claimed {
                locks,
                mine,
                mut theirs,
            } = disk.claim_fetches(fetch.claim.owned());
            for index in mine {
                // Another process may have written it and let go of its lock
                // since the disk was asked: look once more.
                if let Some(bytes) = disk.read(index, self.block_len(index)) {
                    self.hand_over(fetch, index, bytes);
                }
            }
            theirs.sort_unstable();
            let failure = self.fetch_network(fetch, &theirs);
            disk.release_after_writes(locks);
            if failure.is_some() || theirs.is_empty() {
                if waited {
                    fetch.count_a_wait();
                }
                return failure;
            }
            let theirs: Vec<(u64, u64)> = theirs.iter().map(|&i| (i, self.block_len(i))).collect();
            Counters::add(&self.counters.disk_waits, theirs.len() as u64);
            let out_of_time = disk.wait_for_all(&theirs, fetch.deadline, |index, bytes| {
                waited = true;
                self.hand_over(fetch, index, bytes);
            });
            // A block its fetcher let go of unwritten (it ended, or its
            // fetch failed) is claimed again rather than fetched here at
            // once: every process that waited for it would fetch it too.
            if out_of_time || fetch.claim.owned().is_empty() {
                break;
            }
        }
        if waited {
            fetch.count_a_wait();
        }
        // What the other processes did not bring in time, this one fetches.
        self.fetch_network(fetch, &[])
    }

    /// Fetches the blocks `claim` still owns, but `skip` (sorted), in one
    /// round of concurrent parts (see [`fetch_owned`](Self::fetch_owned)).
    fn fetch_network(
        &self,
        fetch: &mut Fetch<impl Fn(u64) -> bool>,
        skip: &[u64],
    ) -> Option<Error> {
        let owned: Vec<u64> = fetch
            .claim
            .owned()
            .iter()
            .copied()
            .filter(|i| skip.binary_search(i).is_err())
            .collect();
        if owned.is_empty() {
            return None;
        }
        let sizes = self.link_sizes();
        // A guess fills no gap: the bytes between guessed blocks are
        // wanted by nobody, and no reader waits for the requests it saves;
        // its runs go at once, as many as a guess may have in flight. So
        // does a read that took a guess from the queue. Nor does a fetch around
        // blocks another process is fetching fill gaps: they are theirs.
        let guessed = !fetch.claim.fills_gaps();
        let max_gap = if guessed || !skip.is_empty() {
            0
        } else {
            sizes.max_gap_blocks
        };
        let lanes = if guessed {
            self.options.guess_concurrency
        } else {
            self.options.max_concurrency
        };
        let parts = plan::parts(&owned, lanes, sizes.min_part_blocks, max_gap);
        let mut failure = None;
        let deadline = fetch.deadline;
        let round_trips = fan_out(
            parts,
            lanes as usize,
            |part| self.fetch_blocks(part, deadline),
            |(part, result)| match fetch.settle_part(&owned, part, result) {
                Some(e) => {
                    failure.get_or_insert(e);
                    Next::Stop
                }
                None => Next::Continue,
            },
        );
        fetch.count_rounds(round_trips);
        failure
    }

    /// Hands over the blocks of `claim` that the disk cache holds (which
    /// then need no request).
    fn fetch_from_disk(&self, fetch: &mut Fetch<impl Fn(u64) -> bool>) {
        let Some(disk) = &self.disk else {
            return;
        };
        for index in fetch.claim.owned().to_vec() {
            if let Some(bytes) = disk.read(index, self.block_len(index)) {
                self.hand_over(fetch, index, bytes);
            }
        }
    }

    /// Hands block `index`, read from disk, to the fetch.
    fn hand_over(&self, fetch: &mut Fetch<impl Fn(u64) -> bool>, index: u64, bytes: Vec<u8>) {
        Counters::add(&self.counters.disk_hits, 1);
        Counters::add(&self.counters.disk_bytes_read, bytes.len() as u64);
        fetch.hand_out(index, Arc::new(bytes));
    }

    /// Waits for the blocks of `claim` that other readers fetch. A block a
    /// speculative fetch failed to bring is fetched here. Returns whether
    /// this had to wait for a speculative fetch still under way.
    fn wait_for_others(&self, fetch: &mut Fetch<impl Fn(u64) -> bool>) -> Result<bool> {
        let mut waited_on_guess = false;
        for (i, pending) in fetch.claim.take_waiting() {
            let optional = pending.is_optional();
            waited_on_guess |= pending.costs_a_round(self.counters.round_mark());
            match pending.wait(fetch.deadline) {
                Ok(block) => fetch.got.push((i, block)),
                // This read was stopped: it fetches nothing more, and says
                // why (not what the other reader's fetch met).
                Err(_) if crate::wait::was_stopped() => {
                    return crate::wait::check_stopped().map(|()| false);
                }
                // A guess or a read-ahead that failed, or a read another
                // caller stopped, leaves its blocks to be fetched here.
                Err(e) if optional || e.kind() == ErrorKind::Interrupted => {
                    fetch.got.extend(self.fetch_missing(&[i], fetch.deadline)?)
                }
                Err(e) => return Err(e.with_url(self.transport.redacted_url())),
            }
        }
        Ok(waited_on_guess)
    }

    /// Fetches the missing blocks of `ranges`, at most `max_bytes` of them,
    /// on one of the process's background workers (stopped by `closing`),
    /// and returns the bytes missing when asked; no reader
    /// waits for them unless it comes to need one. The fetch counts its
    /// requests and bytes, but no round trip: a reader that waits for one of
    /// its blocks counts that. The blocks covering `leaving` are left out:
    /// a read about to follow fetches them (were they in the fetch, that
    /// read would take it from the queue and wait for all of it).
    pub(crate) fn prefetch_in_background(
        self: &Arc<Self>,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
        closing: Option<&workers::Closing>,
        leaving: Range<u64>,
    ) -> u64 {
        if self.closed.is_cancelled() {
            return 0;
        }
        let mut missing = self.guessable(ranges, max_bytes);
        if !leaving.is_empty() {
            let bs = self.options.block_size;
            let left = plan::blocks_covering(leaving.start, leaving.end - leaving.start, bs);
            missing.retain(|i| !left.contains(i));
        }
        if missing.is_empty() {
            return 0;
        }
        let missing_bytes = missing.iter().map(|&i| self.block_len(i)).sum();
        // The blocks are claimed when the fetch is taken from the queue, not
        // now: a reader never waits for background work's turn. A reader
        // that needs one first takes the whole fetch (see `Queued`). A file
        // let go of, or closed, before its turn fetches nothing.
        let closing = closing.cloned().unwrap_or_default();
        let fetch = self.queued.push(missing, closing.clone());
        let job = Arc::clone(&fetch);
        let engine = Arc::downgrade(self);
        *self.background.lock() += 1;
        let queued = workers::submit(Priority::ReadAhead, move || {
            if let Some(engine) = engine.upgrade() {
                let _ends = BackgroundEnds(&engine);
                if closing.is_closed() || engine.closed.is_cancelled() {
                    engine.queued.forget(&job);
                } else {
                    closing.run(|| engine.closed.run(|| engine.run_queued(&job)));
                }
            }
        });
        if let Err(job) = queued {
            drop(job);
            self.queued.forget(&fetch);
            self.background_ended();
            return 0;
        }
        missing_bytes
    }

    /// Queues a background fetch of the missing blocks of `ranges` as
    /// [`prefetch_in_background`](Self::prefetch_in_background) does, but
    /// for no worker: [`run_queued`](Self::run_queued) is the worker.
    #[cfg(test)]
    pub(crate) fn queue_for_no_worker(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
    ) -> Arc<[u64]> {
        let blocks = self.guessable(ranges, u64::MAX);
        self.queued.push(blocks, workers::Closing::default())
    }

    /// Makes the queued background fetch of `blocks`, unless a reader took
    /// it: claims those still missing, as a guess, and fetches them.
    pub(crate) fn run_queued(&self, blocks: &Arc<[u64]>) {
        if let Some(mut guess) = self.queued.take(blocks, |b| self.claim_guess_of(b)) {
            self.fetch_from_disk(&mut guess);
            self.fetch_guess(&mut guess);
        }
    }

    /// Fetches what a guess claimed and the disk did not have (it was asked
    /// when the claim was made), with the time of a read from now.
    fn fetch_guess(&self, guess: &mut Guess) {
        guess.deadline = self.read_deadline();
        // A reader that comes to wait for its blocks makes it a read's.
        let wanted = guess.claim.wanted();
        workers::wanted_by_readers(wanted, || self.fetch_not_on_disk(guess));
    }

    /// The missing blocks of `ranges` a guess of at most `max_bytes` (and
    /// of no more than the cache holds) takes, sorted.
    fn guessable(&self, ranges: impl IntoIterator<Item = Range<u64>>, max_bytes: u64) -> Vec<u64> {
        let most = (max_bytes / self.options.block_size).min(self.blocks_the_cache_holds());
        self.missing_blocks(ranges, most)
    }

    /// A guess claiming those of `blocks` (sorted) neither cached nor in
    /// flight; it asks the disk nothing yet.
    fn claim_guess_of(&self, blocks: &[u64]) -> Guess {
        let started = self.counters.round_mark();
        let claim = self.cache.claim_speculative(&self.key, blocks, started);
        Fetch::new(claim, nobody_needs as fn(u64) -> bool, self.read_deadline())
    }

    fn background_ended(&self) {
        *self.background.lock() -= 1;
        self.background_done.notify_all();
    }

    /// Waits until no background fetch is under way, or `deadline`; returns
    /// whether none is.
    pub(crate) fn wait_for_background(&self, deadline: Instant) -> bool {
        let mut running = self.background.lock();
        while *running > 0 {
            let (waited, timed_out) = self.background_done.wait_until(running, deadline);
            if timed_out {
                return *waited == 0;
            }
            running = waited;
        }
        true
    }

    /// Fills `sink` with `range` of the file's version, from the network.
    /// A server that proves the version gone (a `412`, another validator or
    /// size) makes the disk forget it, so that the next open reads the
    /// file's new version rather than fail on every block it lacks.
    fn fetch_range(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        deadline: Instant,
    ) -> Result<u32> {
        let result = self.transport.fetch(range, sink, &self.identity, deadline);
        if let (Err(e), Some(disk)) = (&result, &self.disk) {
            if e.kind() == ErrorKind::RemoteChanged {
                disk.forget_version();
            }
        }
        result
    }

    /// Fetches the run of blocks `part` into buffers of their own (recycled
    /// from evicted blocks where possible).
    fn fetch_blocks(&self, part: Range<u64>, deadline: Instant) -> Done<Fetched> {
        let (bs, size) = (self.options.block_size, self.identity.size);
        let mut buffers: Vec<Vec<u8>> = part
            .clone()
            .map(|i| self.cache.buffers().take(self.block_len(i) as usize))
            .collect();
        let bytes = plan::byte_range(&part, bs, size);
        let mut sink = Sink::new(buffers.iter_mut().map(|b| &mut b[..]).collect());
        let result = self.fetch_range(bytes, &mut sink, deadline);
        if let (Some(disk), Ok(_)) = (&self.disk, &result) {
            for (index, block) in part.clone().zip(&buffers) {
                disk.write(index, block);
            }
        }
        Done {
            attempts: *result.as_ref().unwrap_or(&1),
            outcome: (part, result.map(|_| buffers)),
        }
    }
}

/// Ends one background fetch when dropped (a panic in the fetch too).
pub(super) struct BackgroundEnds<'a>(&'a Engine);

impl Drop for BackgroundEnds<'_> {
    fn drop(&mut self) {
        self.0.background_ended();
    }
}
