//! Block buffers recycled from evicted blocks.
//!
//! A file streamed through a cache smaller than itself allocates a fresh
//! buffer for every block it fetches and frees one for every block evicted.
//! Fresh large allocations come from the kernel as untouched pages, and the
//! first write to each page faults: for a download that cost more CPU than
//! receiving the bytes. Recycling evicted blocks' buffers avoids it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::sync::Mutex;

/// Buffers of evicted blocks, each still holding its old (initialised) bytes,
/// up to a bound in bytes. A buffer is reused only once nothing else holds
/// it (the cache hands an evicted block over while it still holds it, and a
/// reader may be copying from it).
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Arc<Vec<u8>>>>,
    held: AtomicU64,
    max_bytes: u64,
}

impl BufferPool {
    pub fn new(max_bytes: u64) -> BufferPool {
        BufferPool {
            free: Mutex::new(Vec::new()),
            held: AtomicU64::new(0),
            max_bytes,
        }
    }

    /// A buffer of `len` bytes (their values unspecified): a recycled one of
    /// about that length if there is one, else a new zeroed one.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let recycled = {
            let mut free = self.free.lock();
            // At most a quarter longer, so the cache's weights stay honest.
            free.iter_mut()
                .rposition(|b| {
                    b.len() >= len && b.len() - len <= len / 4 && Arc::get_mut(b).is_some()
                })
                .and_then(|i| Arc::into_inner(free.swap_remove(i)))
        };
        match recycled {
            Some(mut buf) => {
                self.held.fetch_sub(buf.len() as u64, Relaxed);
                // Shortening keeps the bytes initialised: no zeroing, no fault.
                buf.truncate(len);
                buf
            }
            None => vec![0; len],
        }
    }

    /// Keeps `buf` for a later [`take`](Self::take) if the pool has room.
    pub fn give(&self, buf: Arc<Vec<u8>>) {
        let len = buf.len() as u64;
        if len == 0 || self.held.load(Relaxed) + len > self.max_bytes {
            return;
        }
        self.held.fetch_add(len, Relaxed);
        self.free.lock().push(buf);
    }

    /// The bytes of the buffers kept.
    #[cfg(test)]
    pub fn held(&self) -> u64 {
        self.held.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_is_taken_again_for_a_similar_length() {
        let pool = BufferPool::new(100);
        pool.give(Arc::new(vec![7; 40]));
        assert_eq!(pool.held(), 40);
        let buf = pool.take(35);
        assert_eq!((buf.len(), pool.held()), (35, 0));
        assert_eq!(buf[0], 7, "recycled, not zeroed");
        // Nothing fits: a fresh zeroed buffer.
        pool.give(Arc::new(vec![7; 40]));
        assert_eq!(pool.take(20), vec![0; 20], "twice as long is too long");
        assert_eq!(pool.take(41), vec![0; 41]);
        assert_eq!(pool.held(), 40);
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound() {
        let pool = BufferPool::new(100);
        pool.give(Arc::new(vec![1; 60]));
        pool.give(Arc::new(vec![1; 60]));
        assert_eq!(pool.held(), 60);
        pool.give(Arc::default());
        assert_eq!(pool.held(), 60);
    }

    #[test]
    fn a_buffer_still_held_elsewhere_is_not_reused() {
        let pool = BufferPool::new(100);
        let block = Arc::new(vec![7; 40]);
        pool.give(block.clone());
        assert_eq!(pool.take(40), vec![0; 40], "a reader still has it");
        drop(block);
        assert_eq!(pool.take(40), vec![7; 40]);
    }
}
