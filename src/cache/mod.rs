//! The block cache: blocks of many files in one memory budget ([`BlockCache`]),
//! the table of fetches in flight that keeps concurrent readers from fetching
//! a block twice ([`flight`]), the evicted buffers new blocks reuse
//! ([`pool`]), what a file may keep beside its blocks ([`side_store`]), and
//! the budgets of memory that side stores and the HDF5 driver's crawl
//! tables take from ([`budget`], with what only a wing asks of the cache:
//! `for_extension`).

mod flight;
pub(crate) mod for_extension;
mod pool;
mod side_store;

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Arc;

use crate::sync::Mutex;
use moka::policy::EvictionPolicy;

pub(crate) use self::flight::{Claim, Pending};
pub(crate) use self::for_extension::budget;
use self::for_extension::budget::MemoryBudget;
pub(crate) use self::pool::BufferPool;
pub(crate) use self::side_store::{Keeper, Served, SideStore};

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
/// [`RemoteFile`](crate::file::RemoteFile)s can share.
///
/// Every file has a cache: by default a private one of the builder's
/// [`cache_capacity`](crate::options::Builder::cache_capacity). A program that opens
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
    /// What the side stores of all the cache's files may hold together.
    side_stores: Arc<MemoryBudget>,
}

/// The most bytes the side stores of one cache's files keep together: a
/// quarter of its capacity, at most 64 MiB (some 100,000 HDF5 object
/// headers).
fn side_stores_capacity(cache_capacity: u64) -> u64 {
    (cache_capacity / 4).min(64 << 20)
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
                side_stores: Arc::new(MemoryBudget::new(side_stores_capacity(capacity_bytes))),
            }),
        }
    }

    /// The capacity in bytes given to [`new`](BlockCache::new).
    pub fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// The bytes of blocks held now. The cache counts inserts and evictions
    /// in batches; this runs the pending ones first
    /// ([`run_pending_tasks`](BlockCache::run_pending_tasks)), so the figure
    /// is exact when it is returned.
    pub fn weighted_size(&self) -> u64 {
        self.inner.blocks.run_pending_tasks();
        self.inner.blocks.weighted_size()
    }

    /// The number of blocks held now (exact, as
    /// [`weighted_size`](BlockCache::weighted_size)).
    pub fn block_count(&self) -> u64 {
        self.inner.blocks.run_pending_tasks();
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

    /// Where fetches take their block buffers from.
    pub(crate) fn buffers(&self) -> &BufferPool {
        &self.inner.pool
    }

    /// The key of the file version that `identity` describes (its URL,
    /// validators and size, say): equal identities give equal keys.
    pub(crate) fn file_key<K: Hash + ?Sized>(&self, identity: &K) -> FileKey {
        let (a, b) = &self.inner.key_hashers;
        (u128::from(a.hash_one(identity)) << 64) | u128::from(b.hash_one(identity))
    }

    pub(crate) fn get(&self, file: &FileKey, index: u64) -> Option<Block> {
        self.inner.blocks.get(&(*file, index))
    }

    pub(crate) fn insert(&self, file: &FileKey, index: u64, block: Block) {
        self.inner.blocks.insert((*file, index), block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
