//! The disk cache as a tier of a file's blocks (see
//! [`crate::engine::tier`]): blocks it holds are handed over without a
//! request; the rest are fetched below it, once across the processes that
//! share the cache — the blocks another process is fetching are waited for
//! on disk, after this process's own — and every block fetched below is
//! written here.

use std::sync::Arc;
use std::time::Instant;

use super::{Claimed, DiskFile};
use crate::cache::Keeper;
use crate::engine::fetch::Fetch;
use crate::engine::plan;
use crate::engine::tier::{Below, Tier};
use crate::error::Error;
use crate::stats::Counters;

/// How many times a fetch claims the blocks other processes let go of
/// unwritten before it fetches them whoever holds them: a holder that fails
/// again and again costs a few waits, never a read.
const CLAIM_ROUNDS: usize = 4;

/// A file's blocks on disk, as a tier.
pub(crate) struct DiskTier {
    file: DiskFile,
    block_size: u64,
    size: u64,
    counters: Arc<Counters>,
}

impl DiskTier {
    /// The tier of `file`'s blocks, of a file of `size` bytes in blocks of
    /// `block_size`, counting its hits and waits in `counters`.
    pub(crate) fn new(file: DiskFile, block_size: u64, size: u64, counters: Arc<Counters>) -> Self {
        DiskTier {
            file,
            block_size,
            size,
            counters,
        }
    }

    /// The length of block `index` (the file's last may be short).
    fn block_len(&self, index: u64) -> u64 {
        plan::block_len(index, self.block_size, self.size)
    }

    /// Hands block `index`, read from disk, to the fetch.
    fn hand_over(&self, fetch: &mut Fetch<'_>, index: u64, bytes: Vec<u8>) {
        Counters::add(&self.counters.disk_hits, 1);
        Counters::add(&self.counters.disk_bytes_read, bytes.len() as u64);
        fetch.hand_out(index, Arc::new(bytes));
    }
}

impl Tier for DiskTier {
    fn fill(&self, fetch: &mut Fetch<'_>, below: Below<'_>) -> Option<Error> {
        self.take_held(fetch);
        let mut waited = false;
        for _ in 0..CLAIM_ROUNDS {
            // One fetch per block across processes: blocks another process
            // is fetching are waited for on disk, after this process's own.
            let Claimed {
                locks,
                mine,
                mut theirs,
            } = self.file.claim_fetches(fetch.claim.owned());
            for index in mine {
                // Another process may have written it and let go of its lock
                // since the disk was asked: look once more.
                if let Some(bytes) = self.file.read(index, self.block_len(index)) {
                    self.hand_over(fetch, index, bytes);
                }
            }
            theirs.sort_unstable();
            fetch.left_to_others = theirs;
            let failure = below.fill(fetch);
            let theirs = std::mem::take(&mut fetch.left_to_others);
            self.file.release_after_writes(locks);
            if failure.is_some() || theirs.is_empty() {
                if waited {
                    fetch.count_a_wait();
                }
                return failure;
            }
            let theirs: Vec<(u64, u64)> = theirs.iter().map(|&i| (i, self.block_len(i))).collect();
            Counters::add(&self.counters.disk_waits, theirs.len() as u64);
            let stop = fetch.stop.clone();
            let out_of_time = self.file.wait_for_all(&theirs, &stop, |index, bytes| {
                waited = true;
                self.hand_over(fetch, index, bytes);
            });
            // A block its fetcher let go of unwritten (it ended, or its
            // fetch failed) is claimed again rather than fetched here at
            // once: every process that waited for it would fetch it too.
            if out_of_time || fetch.claim.owned().is_empty() {
                break;
            }
        }
        if waited {
            fetch.count_a_wait();
        }
        // What the other processes did not bring in time, this one fetches.
        below.fill(fetch)
    }

    /// Hands over the blocks the fetch owns that the disk holds (which
    /// then need no request), once per fetch.
    fn take_held(&self, fetch: &mut Fetch<'_>) {
        if std::mem::replace(&mut fetch.store_asked, true) {
            return;
        }
        for index in fetch.claim.owned().to_vec() {
            if let Some(bytes) = self.file.read(index, self.block_len(index)) {
                self.hand_over(fetch, index, bytes);
            }
        }
    }

    fn keep(&self, index: u64, bytes: &[u8]) {
        self.file.write(index, bytes);
    }

    fn holds(&self, index: u64) -> bool {
        self.file.holds(index)
    }

    fn capacity(&self) -> u64 {
        self.file.capacity()
    }

    fn version_gone(&self) {
        self.file.forget_version();
    }

    fn close(&self, deadline: Instant) {
        self.file.flush(deadline);
    }

    fn keeper(&self) -> Option<&dyn Keeper> {
        Some(&self.file)
    }
}

impl Keeper for DiskFile {
    fn read_pieces(&self, size: u64) -> Vec<(u64, Vec<u8>)> {
        DiskFile::read_pieces(self, size)
    }

    fn write_pieces(&self, pieces: &mut dyn Iterator<Item = (u64, &[u8])>) {
        DiskFile::write_pieces(self, pieces);
    }
}
