//! One disk cache per directory in a process: every open of a directory
//! (by any of its names) shares the first's queue, writing thread and
//! count of bytes, instead of scanning the directory and queuing blocks of
//! its own. The table holds weak handles: a directory no file uses any
//! more is let go of, and opened afresh (scanned again) next time. A child
//! forked from the process opens caches of its own: the parent's queue and
//! writing thread are not the child's, and their locks may be held for
//! good there by threads the child does not have.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::sync::{ProcessLocal, start_afresh};

use super::Inner;

/// The caches this process opened, by their directory's resolved path.
static CACHES: ProcessLocal<BTreeMap<PathBuf, Weak<Inner>>> =
    ProcessLocal::new(BTreeMap::new(), start_afresh);

/// The cache of directory `dir` (resolved), the one already open in this
/// process if there is one, else made by `make`. Of the capacities the
/// opens of one directory give, the smallest holds: no one who set a bound
/// for the directory sees it exceeded.
pub(super) fn open(dir: PathBuf, capacity: u64, make: impl FnOnce(PathBuf) -> Inner) -> Arc<Inner> {
    if let Some(cache) = find(&dir, capacity) {
        return cache;
    }
    // Made (a scan of the directory) without the table's lock.
    let made = Arc::new(make(dir.clone()));
    let Some(mut caches) = CACHES.lock() else {
        return made;
    };
    caches.retain(|_, cache| cache.strong_count() > 0);
    if let Some(cache) = caches.get(&dir).and_then(Weak::upgrade) {
        // Another thread opened it meanwhile: one cache still.
        drop(caches);
        lower_capacity(&cache, capacity);
        return cache;
    }
    caches.insert(dir, Arc::downgrade(&made));
    made
}

/// The cache of `dir` open in this process, if one is, its capacity
/// lowered to `capacity` if that is smaller.
fn find(dir: &Path, capacity: u64) -> Option<Arc<Inner>> {
    let cache = CACHES.with(|caches| caches.get(dir).and_then(Weak::upgrade))??;
    lower_capacity(&cache, capacity);
    Some(cache)
}

fn lower_capacity(cache: &Inner, capacity: u64) {
    let was = cache.capacity.fetch_min(capacity, Relaxed);
    if capacity < was {
        tracing::debug!(dir = %cache.dir.display(), was, now = capacity, "disk cache: a smaller capacity for a directory already open");
    }
}

/// The caches this process opened, if the table can be had by `deadline`
/// (a thread may have held its lock when this process was forked).
pub(super) fn all_open(deadline: Instant) -> Vec<Arc<Inner>> {
    CACHES
        .lock_within(deadline.saturating_duration_since(Instant::now()))
        .map(|caches| caches.values().filter_map(Weak::upgrade).collect())
        .unwrap_or_default()
}
