//! One block cache per capacity for the files the HDF5 driver opens, so
//! that the memory of a process holding many files open stays within one
//! budget rather than one per file; and one budget for the tables their
//! metadata crawls keep ([`crate::process::CRAWL_MEMORY`]).
//!
//! The table holds weak handles: a cache no open file uses any more is let
//! go of (its memory with it), and made afresh by the next open. A forked
//! child makes its own: the parent's cache's locks may be held there by
//! threads the child does not have.

use std::collections::BTreeMap;

use crate::cache::BlockCache;
use crate::cache::budget::MemoryBudget;
use crate::cache::for_extension::WeakBlockCache;
use crate::sync::{ProcessLocal, start_afresh};

static CACHES: ProcessLocal<BTreeMap<u64, WeakBlockCache>> =
    ProcessLocal::new(BTreeMap::new(), start_afresh);

/// What the crawl tables of every open driver file take from. A count with
/// no lock: a forked child goes on from its parent's, which counts the
/// tables it copied.
static CRAWL_TABLES: MemoryBudget = MemoryBudget::new(crate::process::CRAWL_MEMORY);

/// The budget the crawl tables of the process's driver files share.
pub(crate) fn crawl_budget() -> &'static MemoryBudget {
    &CRAWL_TABLES
}

/// The bytes the crawl tables of the process's open driver files hold now.
pub(crate) fn crawl_bytes() -> u64 {
    CRAWL_TABLES.used()
}

/// The process's shared cache of `capacity` bytes.
pub(crate) fn of_capacity(capacity: u64) -> BlockCache {
    let Some(mut caches) = CACHES.lock() else {
        return BlockCache::new(capacity);
    };
    caches.retain(|_, cache| cache.upgrade().is_some());
    if let Some(cache) = caches.get(&capacity).and_then(WeakBlockCache::upgrade) {
        return cache;
    }
    let cache = BlockCache::new(capacity);
    caches.insert(capacity, cache.downgrade());
    cache
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_of_one_capacity_share_a_cache_until_none_uses_it() {
        let capacity = 3 * 1024 * 1024 + 17;
        let a = of_capacity(capacity);
        let b = of_capacity(capacity);
        assert!(a.is_the_same_cache(&b));
        assert!(!a.is_the_same_cache(&of_capacity(capacity + 1)));
        drop((a, b));
        let c = of_capacity(capacity);
        let d = of_capacity(capacity);
        assert!(c.is_the_same_cache(&d), "made again, and shared again");
    }

    #[test]
    fn a_files_crawl_tables_count_in_the_process_budget() {
        // Other tests' files count too: the figure is at least this one's.
        let mut prefetch = super::super::prefetch::Prefetcher::new(true, true);
        assert!(prefetch.start());
        let held = prefetch.table_bytes();
        assert!(held > 0);
        assert!(crawl_bytes() >= held);
        assert!(crawl_bytes() <= crate::process::CRAWL_MEMORY);
        assert!(std::ptr::eq(crawl_budget(), &CRAWL_TABLES));
    }
}
