//! Background fetches waiting for a worker, which whoever comes first
//! takes: the worker, or a reader that needs one of their blocks.
//!
//! A background fetch claims its blocks only when it starts, so that a
//! reader never waits for background work's turn in a queue shared by every
//! file of the process. But a reader that needs a block of a fetch still
//! queued should not fetch that block alone either: the worker would then
//! fetch the rest a moment later, and the reader's next read, of the block
//! after, would wait for that — two round trips where one would do. So the
//! reader takes the whole fetch and makes it itself, in the same round as
//! its own blocks: one round trip, whoever is faster.

use std::sync::Arc;

use parking_lot::Mutex;

/// The fetches queued for background workers of one file.
#[derive(Default)]
pub(crate) struct Queued {
    /// Each fetch's blocks (sorted). Taking one and claiming its blocks
    /// happen under this lock, so that no reader looks between the two.
    fetches: Mutex<Vec<Arc<[u64]>>>,
}

impl Queued {
    /// Queues a fetch of `blocks` (sorted); the handle takes it later.
    pub(crate) fn push(&self, blocks: Vec<u64>) -> Arc<[u64]> {
        let fetch: Arc<[u64]> = blocks.into();
        self.fetches.lock().push(Arc::clone(&fetch));
        fetch
    }

    /// Takes `fetch` if nobody took it yet, and gives its blocks to `claim`
    /// before anybody else looks. Returns what `claim` returned.
    pub(crate) fn take<T>(&self, fetch: &Arc<[u64]>, claim: impl FnOnce(&[u64]) -> T) -> Option<T> {
        let mut fetches = self.fetches.lock();
        let at = fetches.iter().position(|f| Arc::ptr_eq(f, fetch))?;
        let taken = fetches.swap_remove(at);
        Some(claim(&taken))
    }

    /// Takes every queued fetch that brings one of `needed` (sorted), and
    /// gives each one's blocks to `claim` before anybody else looks.
    pub(crate) fn take_bringing<T>(
        &self,
        needed: &[u64],
        mut claim: impl FnMut(&[u64]) -> T,
    ) -> Vec<T> {
        let mut fetches = self.fetches.lock();
        if fetches.is_empty() || needed.is_empty() {
            return Vec::new();
        }
        let mut taken = Vec::new();
        let mut at = 0;
        while at < fetches.len() {
            if brings_any(&fetches[at], needed) {
                let fetch = fetches.swap_remove(at);
                taken.push(claim(&fetch));
            } else {
                at += 1;
            }
        }
        taken
    }
}

/// Whether `blocks` and `needed` (both sorted) share a block: a walk
/// through the shorter, searching the longer.
fn brings_any(blocks: &[u64], needed: &[u64]) -> bool {
    let (short, long) = if blocks.len() <= needed.len() {
        (blocks, needed)
    } else {
        (needed, blocks)
    };
    match (short.first(), short.last(), long.first(), long.last()) {
        (Some(&a), Some(&b), Some(&c), Some(&d)) if b >= c && a <= d => {
            short.iter().any(|i| long.binary_search(i).is_ok())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_is_taken_once_by_whoever_comes_first() {
        let queued = Queued::default();
        let fetch = queued.push(vec![4, 5, 6]);
        let other = queued.push(vec![9]);
        assert_eq!(
            queued.take_bringing(&[1, 5], |b| b.to_vec()),
            [vec![4, 5, 6]]
        );
        assert_eq!(queued.take(&fetch, |b| b.len()), None, "the reader took it");
        assert_eq!(queued.take(&other, |b| b.to_vec()), Some(vec![9]));
        assert!(queued.take_bringing(&[9], |b| b.to_vec()).is_empty());
    }

    #[test]
    fn a_reader_takes_only_the_fetches_that_bring_its_blocks() {
        let queued = Queued::default();
        for blocks in [vec![1, 3], vec![10, 20], vec![2, 30]] {
            queued.push(blocks);
        }
        let mut taken = queued.take_bringing(&[2, 20], |b| b.to_vec());
        taken.sort();
        assert_eq!(taken, [vec![2, 30], vec![10, 20]]);
        assert_eq!(
            queued.take_bringing(&[1, 2, 3], |b| b.to_vec()),
            [vec![1, 3]]
        );
    }

    #[test]
    fn blocks_are_shared_only_where_one_is_in_both() {
        assert!(brings_any(&[1, 5, 9], &[9]));
        assert!(brings_any(&[7], &[1, 7, 100]));
        assert!(!brings_any(&[1, 5, 9], &[2, 6, 8]));
        assert!(!brings_any(&[1, 2], &[3, 4]));
        assert!(!brings_any(&[], &[1]));
    }
}
