//! Counters of the work a file has done: requests, round trips, bytes, cache use.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a file's counters, shared by all clones of a
/// [`RemoteFile`](crate::file::RemoteFile).
///
/// Count requests, not seconds: these numbers are repeatable where timings are not.
///
/// # Example
///
/// ```no_run
/// use remfile::RemoteFile;
///
/// let file = RemoteFile::open("https://example.com/data.bin")?;
/// let before = file.stats();
/// let mut buf = vec![0; 1 << 20];
/// file.read_exact_at(5 << 20, &mut buf)?;
/// let cost = file.stats().since(&before);
/// println!("{} requests in {} round trips", cost.requests, cost.round_trips);
/// # Ok::<(), remfile::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Every HTTP request sent: retries and redirect hops included, so it equals
    /// what the server counts.
    pub requests: u64,
    /// Sequential rounds of requests, as planned: requests sent concurrently
    /// for one read count once (a fetch of `n` parts on `c` connections
    /// counts `n / c` rounded up, plus its retries). A read that waits for a
    /// fetch started in the background
    /// ([`RemoteFile::prefetch_in_background`](crate::file::RemoteFile::prefetch_in_background))
    /// counts one round, unless the file's reads counted a round while that
    /// fetch was under way (the wait then overlapped it); the background
    /// fetch itself counts none, so this is how often readers waited for the
    /// network. It is counted, not timed: rounds seen from a server's log
    /// (requests sent before any answer of the current round came back) can
    /// differ where connections open slowly or answers come unevenly.
    pub round_trips: u64,
    /// Body bytes received from the server.
    pub bytes_fetched: u64,
    /// Bytes handed to the caller by reads.
    pub bytes_read: u64,
    /// Blocks a read found in the cache.
    pub cache_hits: u64,
    /// Blocks a read did not find in the cache (fetched by it, or by a
    /// concurrent reader it waited for).
    pub cache_misses: u64,
    /// Requests that repeated an earlier failed attempt.
    pub retries: u64,
    /// Blocks found in the [`DiskCache`](crate::disk::DiskCache) (after missing
    /// the memory cache).
    pub disk_hits: u64,
    /// Bytes of blocks read from the disk cache.
    pub disk_bytes_read: u64,
    /// Blocks a read waited for while another process sharing the
    /// [`DiskCache`](crate::disk::DiskCache) fetched them (each fetched once for
    /// all; one that did not come is fetched by the read itself).
    pub disk_waits: u64,
}

impl Stats {
    /// The counts accumulated since `earlier`, a snapshot of the same file.
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            requests: self.requests.saturating_sub(earlier.requests),
            round_trips: self.round_trips.saturating_sub(earlier.round_trips),
            bytes_fetched: self.bytes_fetched.saturating_sub(earlier.bytes_fetched),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            cache_hits: self.cache_hits.saturating_sub(earlier.cache_hits),
            cache_misses: self.cache_misses.saturating_sub(earlier.cache_misses),
            retries: self.retries.saturating_sub(earlier.retries),
            disk_hits: self.disk_hits.saturating_sub(earlier.disk_hits),
            disk_bytes_read: self.disk_bytes_read.saturating_sub(earlier.disk_bytes_read),
            disk_waits: self.disk_waits.saturating_sub(earlier.disk_waits),
        }
    }
}

/// Where a file's count of round trips stood when a speculative fetch
/// started: waiting for that fetch costs a reader a round of its own only
/// if no round was counted since (one was under way while it ran).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoundMark(pub(crate) u64);

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub round_trips: AtomicU64,
    pub bytes_fetched: AtomicU64,
    pub bytes_read: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub retries: AtomicU64,
    pub disk_hits: AtomicU64,
    pub disk_bytes_read: AtomicU64,
    pub disk_waits: AtomicU64,
    /// Each request, if the builder asked for them.
    pub trace: crate::trace::RequestTrace,
}

impl Counters {
    /// Where the count of round trips stands now.
    pub(crate) fn round_mark(&self) -> RoundMark {
        RoundMark(self.round_trips.load(Relaxed))
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn snapshot(&self) -> Stats {
        Stats {
            requests: self.requests.load(Relaxed),
            round_trips: self.round_trips.load(Relaxed),
            bytes_fetched: self.bytes_fetched.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            cache_hits: self.cache_hits.load(Relaxed),
            cache_misses: self.cache_misses.load(Relaxed),
            retries: self.retries.load(Relaxed),
            disk_hits: self.disk_hits.load(Relaxed),
            disk_bytes_read: self.disk_bytes_read.load(Relaxed),
            disk_waits: self.disk_waits.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_subtracts_each_counter() {
        let c = Counters::default();
        Counters::add(&c.requests, 3);
        let before = c.snapshot();
        Counters::add(&c.requests, 2);
        Counters::add(&c.bytes_read, 7);
        let d = c.snapshot().since(&before);
        assert_eq!(d.requests, 2);
        assert_eq!(d.bytes_read, 7);
        assert_eq!(d.round_trips, 0);
    }
}
