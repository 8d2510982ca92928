//! The block cache, and the table of fetches in flight that keeps concurrent
//! readers from fetching the same block twice.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Instant;

use moka::policy::EvictionPolicy;
use parking_lot::{Condvar, Mutex};

use crate::error::{Error, ErrorKind};
use crate::pool::BufferPool;

/// The most bytes of evicted blocks' buffers kept for reuse (and at most a
/// quarter of the cache's capacity).
const MAX_POOL_BYTES: u64 = 64 << 20;

/// One block of a file. Each block owns its own buffer, so evicting one frees it
/// (slices of one shared response buffer would keep the whole response alive).
pub(crate) type Block = Arc<Vec<u8>>;

/// Identifies one version of one file (URL, validator and size) by a 128-bit
/// keyed hash of them, so that looking a block up hashes two integers, not a
/// URL. The keys are random per cache, so no one can aim for a collision.
pub(crate) type FileKey = u128;

type Key = (FileKey, u64);

/// An in-memory cache of file blocks, bounded in bytes, that several
/// [`RemoteFile`](crate::RemoteFile)s can share.
///
/// Every file has a cache: by default a private one of the builder's
/// [`cache_capacity`](crate::Builder::cache_capacity). A program that opens
/// hundreds of files can give them one `BlockCache` instead, so they share one
/// memory budget. Blocks are keyed by URL, validator (ETag or `Last-Modified`)
/// and size, so two opens of the same unchanged file share blocks, and a changed
/// file never receives its old version's bytes. Eviction is least recently used.
///
/// Cloning is cheap and yields a handle to the same cache.
///
/// # Example
///
/// ```no_run
/// use remfile::{BlockCache, RemoteFile};
///
/// let cache = BlockCache::new(512 << 20); // 512 MiB for all files together
/// let builder = RemoteFile::builder().cache(cache.clone());
/// let a = builder.open("https://example.com/a.nwb")?;
/// let b = builder.open("https://example.com/b.nwb")?;
/// println!("cached: {} bytes", cache.weighted_size());
/// # Ok::<(), remfile::Error>(())
/// ```
#[derive(Clone)]
pub struct BlockCache {
    inner: Arc<Inner>,
}

struct Inner {
    blocks: moka::sync::Cache<Key, Block>,
    /// Buffers of evicted blocks, for new ones.
    pool: Arc<BufferPool>,
    /// Two independently keyed hashers for [`FileKey`]s.
    key_hashers: (RandomState, RandomState),
    capacity: u64,
    in_flight: Mutex<HashMap<Key, Arc<Pending>>>,
}

impl fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.inner.capacity)
            .field("weighted_size", &self.inner.blocks.weighted_size())
            .finish()
    }
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` bytes of blocks.
    ///
    /// A read larger than the capacity still succeeds: its blocks are handed
    /// to the reader directly, and the cache keeps what fits.
    pub fn new(capacity_bytes: u64) -> BlockCache {
        let pool = Arc::new(BufferPool::new((capacity_bytes / 4).min(MAX_POOL_BYTES)));
        let recycle = pool.clone();
        let blocks = moka::sync::Cache::builder()
            .max_capacity(capacity_bytes)
            // TinyLFU refuses fresh read-ahead blocks when the cache is full of
            // older, more frequent keys; LRU admits them.
            .eviction_policy(EvictionPolicy::lru())
            .weigher(|_: &Key, block: &Block| u32::try_from(block.len()).unwrap_or(u32::MAX))
            .eviction_listener(move |_, block: Block, _| recycle.give(block))
            .build();
        BlockCache {
            inner: Arc::new(Inner {
                pool,
                blocks,
                key_hashers: (RandomState::new(), RandomState::new()),
                capacity: capacity_bytes,
                in_flight: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The capacity in bytes given to [`new`](BlockCache::new).
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// The bytes of blocks currently held. Eviction runs lazily, so this can
    /// briefly exceed the capacity; call
    /// [`run_pending_tasks`](BlockCache::run_pending_tasks) first for an exact
    /// figure.
    pub fn weighted_size(&self) -> u64 {
        self.inner.blocks.weighted_size()
    }

    /// The number of blocks currently held (see
    /// [`weighted_size`](BlockCache::weighted_size) on laziness).
    pub fn block_count(&self) -> u64 {
        self.inner.blocks.entry_count()
    }

    /// Runs the cache's pending maintenance (evictions) now.
    pub fn run_pending_tasks(&self) {
        self.inner.blocks.run_pending_tasks();
    }

    /// Drops every cached block.
    pub fn clear(&self) {
        self.inner.blocks.invalidate_all();
    }

    /// The key of a file version described by `identity`.
    /// Where fetches take their block buffers from.
    pub(crate) fn buffers(&self) -> &BufferPool {
        &self.inner.pool
    }

    pub(crate) fn file_key(&self, identity: &str) -> FileKey {
        let (a, b) = &self.inner.key_hashers;
        (u128::from(a.hash_one(identity)) << 64) | u128::from(b.hash_one(identity))
    }

    pub(crate) fn get(&self, file: &FileKey, index: u64) -> Option<Block> {
        self.inner.blocks.get(&(*file, index))
    }

    pub(crate) fn insert(&self, file: &FileKey, index: u64, block: Block) {
        self.inner.blocks.insert((*file, index), block);
    }

    /// For each of `needed` (blocks the read must have), finds it cached, finds
    /// a fetch in flight to wait for, or claims it for this caller to fetch.
    /// Each of `optional` (read-ahead) is claimed only if neither cached nor in
    /// flight. All under one lock, so no block is claimed twice.
    pub(crate) fn claim(&self, file: &FileKey, needed: &[u64], optional: &[u64]) -> Claim {
        let mut claim = Claim {
            cache: self.clone(),
            file: *file,
            found: Vec::new(),
            waiting: Vec::new(),
            owned: Vec::new(),
        };
        let mut table = self.inner.in_flight.lock();
        for &index in needed {
            let key = (*file, index);
            // A fetcher inserts into the cache before leaving the table, so
            // looking again under the lock cannot miss a block just fetched.
            if let Some(block) = self.inner.blocks.get(&key) {
                claim.found.push((index, block));
            } else if let Some(p) = table.get(&key) {
                claim.waiting.push((index, p.clone()));
            } else {
                table.insert(key, Arc::new(Pending::default()));
                claim.owned.push(index);
            }
        }
        for &index in optional {
            let key = (*file, index);
            if !table.contains_key(&key) && !self.inner.blocks.contains_key(&key) {
                table.insert(key, Arc::new(Pending::default()));
                claim.owned.push(index);
            }
        }
        claim.owned.sort_unstable();
        claim
    }

    fn settle(&self, file: &FileKey, index: u64, outcome: Result<Block, Error>) {
        let key = (*file, index);
        if let Ok(block) = &outcome {
            self.inner.blocks.insert(key, block.clone());
        }
        let pending = self.inner.in_flight.lock().remove(&key);
        if let Some(p) = pending {
            *p.slot.lock() = Some(outcome);
            p.ready.notify_all();
        }
    }
}

/// A fetch in flight, which other readers of its blocks wait for.
#[derive(Default)]
pub(crate) struct Pending {
    slot: Mutex<Option<Result<Block, Error>>>,
    ready: Condvar,
}

impl Pending {
    /// Waits for the fetch's outcome until `deadline`.
    pub(crate) fn wait(&self, deadline: Instant) -> Result<Block, Error> {
        let mut slot = self.slot.lock();
        loop {
            if let Some(outcome) = slot.as_ref() {
                return outcome.clone();
            }
            if self.ready.wait_until(&mut slot, deadline).timed_out() && slot.is_none() {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "timed out waiting for another reader's fetch of the same block",
                ));
            }
        }
    }
}

/// The outcome of [`BlockCache::claim`]. Blocks still owned when it is dropped
/// (the fetch failed or panicked) are released with an error, so waiters
/// never wait forever.
pub(crate) struct Claim {
    cache: BlockCache,
    file: FileKey,
    /// Needed blocks that turned out to be cached after all.
    pub found: Vec<(u64, Block)>,
    /// Needed blocks another reader is fetching.
    pub waiting: Vec<(u64, Arc<Pending>)>,
    /// Blocks this reader must fetch, sorted.
    pub owned: Vec<u64>,
}

impl Claim {
    /// Delivers a fetched block: into the cache, and to its waiters.
    pub fn fulfil(&mut self, index: u64, block: Block) {
        if let Some(at) = self.owned.iter().position(|&i| i == index) {
            self.owned.swap_remove(at);
            self.cache.settle(&self.file, index, Ok(block));
        }
    }

    /// Reports a failed fetch of `index` to its waiters.
    pub fn fail(&mut self, index: u64, error: &Error) {
        if let Some(at) = self.owned.iter().position(|&i| i == index) {
            self.owned.swap_remove(at);
            self.cache.settle(&self.file, index, Err(error.clone()));
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        let error = Error::new(ErrorKind::Network, "the reader fetching this block gave up");
        for index in std::mem::take(&mut self.owned) {
            self.cache.settle(&self.file, index, Err(error.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_block_is_claimed_once_and_others_wait_for_it() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        let mut first = cache.claim(&f, &[1, 2], &[3]);
        assert_eq!(first.owned, [1, 2, 3]);
        let second = cache.claim(&f, &[2, 3], &[4]);
        assert!(second.owned == [4]);
        assert_eq!(
            second.waiting.iter().map(|w| w.0).collect::<Vec<_>>(),
            [2, 3]
        );
        let waiter = second.waiting[0].1.clone();
        let t = std::thread::spawn(move || waiter.wait(Instant::now() + Duration::from_secs(10)));
        first.fulfil(2, Arc::new(vec![7; 4]));
        assert_eq!(*t.join().unwrap().unwrap(), vec![7; 4]);
        assert_eq!(cache.get(&f, 2).as_deref(), Some(&vec![7; 4]));
    }

    #[test]
    fn a_dropped_claim_releases_waiters_with_an_error() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        let first = cache.claim(&f, &[1], &[]);
        let second = cache.claim(&f, &[1], &[]);
        drop(first);
        let got = second.waiting[0]
            .1
            .wait(Instant::now() + Duration::from_secs(10));
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Network);
        assert_eq!(cache.claim(&f, &[1], &[]).owned, [1], "claimable again");
    }

    #[test]
    fn optional_blocks_skip_cached_and_in_flight_ones() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        cache.insert(&f, 5, Arc::new(vec![0; 8]));
        let _held = cache.claim(&f, &[6], &[]);
        let c = cache.claim(&f, &[], &[4, 5, 6, 7]);
        assert_eq!(c.owned, [4, 7]);
        let c2 = cache.claim(&f, &[5], &[]);
        assert_eq!(c2.found.len(), 1);
    }

    #[test]
    fn files_do_not_share_blocks() {
        let cache = BlockCache::new(1 << 20);
        cache.insert(&cache.file_key("a"), 0, Arc::new(vec![1]));
        assert!(cache.get(&cache.file_key("b"), 0).is_none());
        assert_eq!(cache.file_key("a"), cache.file_key("a"));
        assert_ne!(cache.file_key("a"), cache.file_key("b"));
    }

    #[test]
    fn the_cache_stays_within_its_capacity() {
        let cache = BlockCache::new(10_000);
        let f = cache.file_key("f");
        for i in 0..100 {
            cache.insert(&f, i, Arc::new(vec![0; 1000]));
        }
        cache.run_pending_tasks();
        assert!(cache.weighted_size() <= 10_000, "{}", cache.weighted_size());
        assert!(cache.get(&f, 99).is_some(), "LRU keeps the newest");
    }
}
