//! Background fetches waiting for a worker, which whoever comes first
//! takes: the worker, or a reader that needs one of their blocks.
//!
//! A background fetch claims its blocks only when it starts, so that a
//! reader never waits for background work's turn in a queue shared by every
//! file of the process. But a reader that needs a block of a fetch still
//! queued should not fetch that block alone either: the worker would then
//! fetch the rest a moment later, and the reader's next read, of the block
//! after, would wait for that — two round trips where one would do. So the
//! reader takes the whole fetch, and claims its blocks as read-ahead of its
//! own, fetched in the same round: one round trip, whoever is faster. (A
//! read that queues a fetch of what follows it leaves its own blocks out
//! of that fetch, so that it does not take it.)

use std::sync::Arc;

use crate::process::workers::Closing;
use crate::sync::Mutex;

/// The fetches queued for background workers of one file.
#[derive(Default)]
pub(crate) struct Queued {
    /// Each fetch's blocks (sorted), and what stops it. Taking one and
    /// claiming its blocks happen under this lock, so that no reader looks
    /// between the two.
    fetches: Mutex<Vec<(Arc<[u64]>, Closing)>>,
}

impl Queued {
    /// Queues a fetch of `blocks` (sorted), which `closing` stops; the handle
    /// takes it later.
    pub(crate) fn push(&self, blocks: Vec<u64>, closing: Closing) -> Arc<[u64]> {
        let fetch: Arc<[u64]> = blocks.into();
        self.fetches.lock().push((Arc::clone(&fetch), closing));
        fetch
    }

    /// Takes `fetch` if nobody took it yet, and gives its blocks to `claim`
    /// before anybody else looks. Returns what `claim` returned.
    pub(crate) fn take<T>(&self, fetch: &Arc<[u64]>, claim: impl FnOnce(&[u64]) -> T) -> Option<T> {
        let mut fetches = self.fetches.lock();
        let at = fetches.iter().position(|(f, _)| Arc::ptr_eq(f, fetch))?;
        let (taken, _) = fetches.swap_remove(at);
        Some(claim(&taken))
    }

    /// Drops `fetch` if nobody took it yet: it makes no request.
    pub(crate) fn forget(&self, fetch: &Arc<[u64]>) {
        self.take(fetch, |_| ());
    }

    /// Drops every fetch nobody took yet (the file was closed).
    pub(crate) fn forget_all(&self) {
        self.fetches.lock().clear();
    }

    /// Takes every queued fetch that brings one of `needed` (sorted), and
    /// gives `claim` the blocks they bring (sorted, each once; empty if
    /// none) before anybody else looks. A fetch whose file was closed is
    /// dropped, not taken: it makes no request.
    pub(crate) fn take_fetches_of<T>(
        &self,
        needed: &[u64],
        claim: impl FnOnce(Vec<u64>) -> T,
    ) -> T {
        let mut fetches = self.fetches.lock();
        fetches.retain(|(_, closing)| !closing.is_closed());
        let mut taken = Vec::new();
        if !needed.is_empty() {
            fetches.retain(|(blocks, _)| {
                let brings = brings_any(blocks, needed);
                if brings {
                    taken.extend_from_slice(blocks);
                }
                !brings
            });
        }
        taken.sort_unstable();
        taken.dedup();
        claim(taken)
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

    fn taken(queued: &Queued, needed: &[u64]) -> Vec<u64> {
        queued.take_fetches_of(needed, |blocks| blocks)
    }

    #[test]
    fn a_fetch_is_taken_once_by_whoever_comes_first() {
        let queued = Queued::default();
        let fetch = queued.push(vec![4, 5, 6], Closing::default());
        let other = queued.push(vec![9], Closing::default());
        assert_eq!(taken(&queued, &[1, 5]), [4, 5, 6]);
        assert_eq!(queued.take(&fetch, |b| b.len()), None, "the reader took it");
        assert_eq!(queued.take(&other, |b| b.to_vec()), Some(vec![9]));
        assert!(taken(&queued, &[9]).is_empty());
    }

    #[test]
    fn a_reader_takes_only_the_fetches_that_bring_its_blocks() {
        let queued = Queued::default();
        for blocks in [vec![1, 3], vec![10, 20], vec![2, 3, 30]] {
            queued.push(blocks, Closing::default());
        }
        assert_eq!(taken(&queued, &[2, 20]), [2, 3, 10, 20, 30]);
        assert_eq!(taken(&queued, &[1, 2, 3]), [1, 3]);
        assert!(taken(&queued, &[]).is_empty());
    }

    #[test]
    fn a_closed_file_s_fetch_is_taken_by_nobody() {
        let queued = Queued::default();
        let closing = Closing::default();
        let fetch = queued.push(vec![1, 2], closing.clone());
        closing.close();
        assert!(taken(&queued, &[1]).is_empty());
        assert_eq!(queued.take(&fetch, |_| ()), None, "dropped");
        let forgotten = queued.push(vec![3], Closing::default());
        queued.forget(&forgotten);
        assert!(taken(&queued, &[3]).is_empty());
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
