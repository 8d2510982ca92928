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
use std::time::{Duration, Instant};

use crate::sync::Mutex;

use super::Inner;

/// The caches open, by the process that opened them and their directory's
/// resolved path.
static CACHES: Mutex<BTreeMap<(u32, PathBuf), Weak<Inner>>> = Mutex::new(BTreeMap::new());

/// How long an open waits for the table: it is held only to look up or
/// insert, so this is reached only in a child forked while another thread
/// held it (which never lets go there).
const TABLE_WAIT: Duration = Duration::from_secs(2);

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
    let Some(mut caches) = CACHES.try_lock_until(Instant::now() + TABLE_WAIT) else {
        return made;
    };
    let me = std::process::id();
    // Entries of the process this one was forked from stay unused here.
    caches.retain(|(pid, _), cache| *pid == me && cache.strong_count() > 0);
    let key = (me, dir);
    if let Some(cache) = caches.get(&key).and_then(Weak::upgrade) {
        // Another thread opened it meanwhile: one cache still.
        drop(caches);
        lower_capacity(&cache, capacity);
        return cache;
    }
    caches.insert(key, Arc::downgrade(&made));
    made
}

/// The cache of `dir` open in this process, if one is, its capacity
/// lowered to `capacity` if that is smaller.
fn find(dir: &Path, capacity: u64) -> Option<Arc<Inner>> {
    let key = (std::process::id(), dir.to_path_buf());
    let cache = CACHES
        .try_lock_until(Instant::now() + TABLE_WAIT)?
        .get(&key)?
        .upgrade()?;
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
    let me = std::process::id();
    CACHES
        .try_lock_until(deadline)
        .map(|caches| {
            caches
                .iter()
                .filter(|((pid, _), _)| *pid == me)
                .filter_map(|(_, cache)| cache.upgrade())
                .collect()
        })
        .unwrap_or_default()
}
