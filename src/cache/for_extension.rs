//! What only a layer that knows a file's layout asks of the block cache,
//! through the extension seam: a handle on a cache that does not keep it
//! alive (the HDF5 driver shares one cache per capacity), the budget the
//! side stores of its files share, and budgets of memory of its own
//! ([`budget`]). Built whether or not a wing is: the core never calls it.
#![cfg_attr(not(feature = "extension"), allow(dead_code))]

pub(crate) mod budget;

use std::sync::Arc;

use super::{BlockCache, Inner};
use budget::MemoryBudget;

/// A handle on a [`BlockCache`] that does not keep it alive.
#[derive(Clone)]
pub(crate) struct WeakBlockCache(std::sync::Weak<Inner>);

impl WeakBlockCache {
    pub(crate) fn upgrade(&self) -> Option<BlockCache> {
        self.0.upgrade().map(|inner| BlockCache { inner })
    }
}

impl BlockCache {
    pub(crate) fn downgrade(&self) -> WeakBlockCache {
        WeakBlockCache(Arc::downgrade(&self.inner))
    }

    /// Whether both handles are of one cache.
    #[cfg(test)]
    pub(crate) fn is_the_same_cache(&self, other: &BlockCache) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The budget the side stores of the cache's files share.
    pub(crate) fn side_stores_budget(&self) -> Arc<MemoryBudget> {
        Arc::clone(&self.inner.side_stores)
    }
}
