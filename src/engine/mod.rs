//! The read engine: how a read is served. It looks the read's blocks up in
//! the memory cache, adds read-ahead by the [`plan`], claims what is
//! missing (so that concurrent readers fetch each block once), brings the
//! claimed blocks through the file's [`tier`]s — the disk cache, if it has
//! one, then the network, in concurrent parts through the
//! [`fanout`](crate::engine::fanout) pool — and assembles the bytes out of
//! the blocks. Large reads that miss the cache fetch what it lacks straight
//! into the caller's buffer. All hit and miss accounting happens here.
//! [`RemoteFile`](crate::file::RemoteFile) is its public face.
//!
//! | module | its one job |
//! |---|---|
//! | `mod.rs` | the engine's state, its open and close, and the facts its parts share |
//! | `serve` | serving a read: side store, memory cache, claim, copy out; reads straight into a buffer; many reads in one round |
//! | `claim` | claiming a read's missing blocks (taking queued background fetches over), and serving the claim |
//! | `background` | background fetches queued for the process's workers |
//! | `tier`, `tiers` | the tiers below the memory cache behind one interface; a file's, in order |
//! | `network` | the last tier: blocks and ranges from the [`RangeSource`] |
//! | `fetch` | one fetch of a claim's blocks and what it costs; buffer helpers |
//! | `plan`, `read_ahead` | what to fetch, as pure functions; the read-ahead's streams |
//! | `fanout` | one pool of concurrent fetches, and the one definition of a round trip |
//! | `queued` | background fetches a reader may take over |
//! | `range_source`, `sink` | the seam a transport implements: a range of one version, into a sink |
//! | `for_extension` | what only a layer that knows the file's layout asks for (through [`Extension`](crate::extension::Extension)) |
//! | `tests`, `memory_source` | the engine over an in-memory source, with gates |

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use crate::cache::{BlockCache, FileKey, SideStore};
use crate::error::{ErrorKind, Result};
use crate::identity::Identity;
use crate::link::{LinkEstimate, LinkMeter};
use crate::stats::{Counters, Stats};
use crate::sync;
use crate::wait::Stop;
use network::Network;
use queued::Queued;
use range_source::RangeSource;
use read_ahead::ReadAhead;
use sink::Sink;
use tier::Tier;
use tiers::Tiers;

mod background;
mod claim;
pub(crate) mod fanout;
pub(crate) mod fetch;
mod for_extension;
pub(crate) mod link_sizes;
#[cfg(test)]
pub(crate) mod memory_source;
mod network;
pub(crate) mod plan;
mod queued;
pub(crate) mod range_source;
pub(crate) mod read_ahead;
mod serve;
pub(crate) mod sink;
#[cfg(test)]
pub(crate) mod tests;
pub(crate) mod tier;
mod tiers;

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

/// The longest the last handle of a file waits, when dropped, for its
/// blocks still to be written to the disk cache.
const DISK_FLUSH_AT_DROP: Duration = Duration::from_secs(10);

/// The state all clones of a file share, and how reads are served from it.
pub(crate) struct Engine {
    identity: Identity,
    cache: BlockCache,
    key: FileKey,
    /// Where the blocks the memory cache lacks come from, in order: the
    /// disk cache (if the file has one), then the network.
    tiers: Tiers,
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

impl Drop for Engine {
    fn drop(&mut self) {
        // A program that ends after reading leaves its blocks on disk for
        // the next run (they are written in the background).
        if self.tiers.has_store() {
            if let (Some(store), Some(keeper)) = (self.side_store.get(), self.tiers.keeper()) {
                store.at_close(keeper);
            }
            self.tiers.close(crate::wait::within_exit_bound(
                Instant::now() + DISK_FLUSH_AT_DROP,
            ));
        }
    }
}

impl Engine {
    pub(crate) fn new(
        source: impl RangeSource,
        identity: Identity,
        (cache, key, store): (BlockCache, FileKey, Option<Arc<dyn Tier>>),
        options: ReadOptions,
        link: Arc<LinkMeter>,
        counters: Arc<Counters>,
    ) -> Engine {
        let network = Network::new(
            Box::new(source),
            identity.clone(),
            options,
            Arc::clone(&link),
            cache.clone(),
        );
        Engine {
            tiers: Tiers::new(store, network),
            identity,
            key,
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
            true => Err(crate::wait::closed().with_url(self.redacted_url())),
            false => Ok(()),
        }
    }

    /// `stop`, for a read of this file: stopped by the file's close too;
    /// an [`ErrorKind::Closed`] error if the file is closed already.
    pub(crate) fn stop_for_read(&self, stop: &Stop) -> Result<Stop> {
        self.check_open()?;
        Ok(stop.watching(&self.closed))
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
            self.tiers.keep(index, &bytes);
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
        self.tiers.network().redacted_url()
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

    fn link_sizes(&self) -> link_sizes::LinkSizes {
        self.tiers.network().link_sizes()
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

    /// The deadline of a read starting now: the one every wait and fetch
    /// of that read is held to ([`Builder::read_timeout`](crate::options::Builder::read_timeout)).
    fn read_deadline(&self) -> Instant {
        crate::wait::deadline::after(self.options.read_timeout)
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
        plan::block_len(index, self.options.block_size, self.identity.size)
    }

    /// Fills `sink` with `range` of the file's version, from the network.
    /// A server that proves the version gone (a `412`, another validator or
    /// size) makes the tiers forget it, so that the next open reads the
    /// file's new version rather than fail on every block they lack.
    fn fetch_range(&self, range: Range<u64>, sink: &mut Sink<'_>, stop: &Stop) -> Result<u32> {
        let result = self.tiers.network().fetch_range(range, sink, stop);
        if result
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::RemoteChanged)
        {
            self.tiers.version_gone();
        }
        result
    }
}
