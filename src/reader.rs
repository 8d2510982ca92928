//! How a read is served: from the cache, by a plan of what to fetch, and by
//! the fetches themselves — several parts at once, straight into the caller's
//! buffer for large uncached reads. [`RemoteFile`](crate::RemoteFile) is the
//! public face of the [`Shared`] state here.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::cache::{Block, BlockCache, Claim, FileKey};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{Identity, Transport};
use crate::link::LinkMeter;
use crate::plan::{self, ReadAhead};
use crate::stats::Counters;

/// What [`Shared`] is built from, decided by the builder.
pub(crate) struct Parts {
    pub transport: Transport,
    pub identity: Identity,
    pub first_block: Vec<u8>,
    /// Blocks from the end of the file, fetched at open.
    pub tail_blocks: Vec<(u64, Vec<u8>)>,
    pub cache: BlockCache,
    pub key: FileKey,
    pub block_size: u64,
    pub read_ahead: ReadAhead,
    pub max_concurrency: u64,
    pub split_size: u64,
    pub coalesce_gap: Option<u64>,
    pub link: Arc<LinkMeter>,
    pub bypass_min: u64,
    pub read_timeout: Duration,
    pub counters: Arc<Counters>,
}

/// The state all clones of a file share, and how reads are served from it.
pub(crate) struct Shared {
    pub(crate) transport: Transport,
    pub(crate) identity: Identity,
    pub(crate) cache: BlockCache,
    pub(crate) key: FileKey,
    pub(crate) block_size: u64,
    pub(crate) read_ahead: Mutex<ReadAhead>,
    pub(crate) max_concurrency: u64,
    pub(crate) split_size: u64,
    pub(crate) coalesce_gap: Option<u64>,
    pub(crate) link: Arc<LinkMeter>,
    /// Reads at least this long, with nothing cached, skip the cache.
    pub(crate) bypass_min: u64,
    pub(crate) read_timeout: Duration,
    pub(crate) counters: Arc<Counters>,
}

impl Shared {
    pub(crate) fn new(p: Parts) -> Shared {
        if !p.first_block.is_empty() {
            p.cache.insert(&p.key, 0, Arc::new(p.first_block));
        }
        for (index, block) in p.tail_blocks {
            if index > 0 {
                p.cache.insert(&p.key, index, Arc::new(block));
            }
        }
        Shared {
            transport: p.transport,
            identity: p.identity,
            cache: p.cache,
            key: p.key,
            block_size: p.block_size,
            read_ahead: Mutex::new(p.read_ahead),
            max_concurrency: p.max_concurrency,
            split_size: p.split_size,
            coalesce_gap: p.coalesce_gap,
            link: p.link,
            bypass_min: p.bypass_min,
            read_timeout: p.read_timeout,
            counters: p.counters,
        }
    }

    fn link_sizes(&self) -> plan::LinkSizes {
        let bdp = self.link.estimate().map(|e| e.bandwidth_delay_product());
        plan::link_sizes(bdp, self.block_size, self.split_size, self.coalesce_gap)
    }

    /// Fills `buf` with the bytes at `pos`; the range lies inside the file.
    pub(crate) fn read_into(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        let needed = plan::blocks_covering(pos, len, self.block_size);
        if needed.end - needed.start == 1 {
            // The common case of a small cached read, without allocations.
            if let Some(block) = self.cache.get(&self.key, needed.start) {
                let offset = (pos - needed.start * self.block_size) as usize;
                buf.copy_from_slice(&block[offset..offset + buf.len()]);
                self.read_ahead.lock().on_read(pos, len, false, 0);
                Counters::add(&self.counters.cache_hits, 1);
                Counters::add(&self.counters.bytes_read, len);
                return Ok(());
            }
        }
        let mut have: Vec<Option<Block>> = needed
            .clone()
            .map(|i| self.cache.get(&self.key, i))
            .collect();
        if len >= self.bypass_min && have.iter().all(Option::is_none) {
            return self.read_direct(pos, buf);
        }
        let missing: Vec<u64> = needed
            .clone()
            .zip(&have)
            .filter(|(_, b)| b.is_none())
            .map(|(i, _)| i)
            .collect();
        let c = &self.counters;
        Counters::add(&c.cache_hits, (have.len() - missing.len()) as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        let floor = if missing.is_empty() {
            0
        } else {
            self.link_sizes().ahead_floor
        };
        let ahead = self
            .read_ahead
            .lock()
            .on_read(pos, len, !missing.is_empty(), floor);
        if !missing.is_empty() {
            let ahead_end = (pos + len).saturating_add(ahead).min(self.identity.size);
            let optional: Vec<u64> = (needed.end..ahead_end.div_ceil(self.block_size)).collect();
            let claim = self.cache.claim(&self.key, &missing, &optional);
            for (i, block) in self.complete(claim, |i| needed.contains(&i))? {
                have[(i - needed.start) as usize] = Some(block);
            }
        }
        copy_out(
            have.iter()
                .map(|b| b.as_ref().expect("every needed block is present")),
            needed.start * self.block_size,
            pos,
            buf,
            self.block_size,
        );
        Counters::add(&c.bytes_read, len);
        Ok(())
    }

    /// Fetches the bytes at `pos` straight into `buf`, in concurrent parts of
    /// one round, without the cache: a large transfer then costs no block
    /// buffers, no copy out of them and no eviction of what the cache holds.
    fn read_direct(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len() as u64;
        // The stream goes on from here, but this read needs no read-ahead.
        self.read_ahead.lock().on_read(pos, len, false, 0);
        let blocks = plan::blocks_covering(pos, len, self.block_size);
        Counters::add(&self.counters.cache_misses, blocks.end - blocks.start);
        let min_part = self.link_sizes().min_part.saturating_mul(self.block_size);
        let parts = plan::split(pos..pos + len, self.max_concurrency, min_part);
        let deadline = Instant::now() + self.read_timeout;
        let mut pieces: Vec<(Range<u64>, &mut [u8])> = Vec::with_capacity(parts.len());
        let mut rest = buf;
        for part in parts {
            let (piece, after) = rest.split_at_mut((part.end - part.start) as usize);
            pieces.push((part, piece));
            rest = after;
        }
        let fetch = |(part, piece): (Range<u64>, &mut [u8])| {
            self.transport
                .fetch_into(part, piece, &self.identity, deadline)
        };
        let results: Vec<Result<u32>> = std::thread::scope(|s| {
            let mut pieces = pieces.into_iter();
            let first = pieces.next();
            let handles: Vec<_> = pieces.map(|p| s.spawn(move || fetch(p))).collect();
            let mut out: Vec<Result<u32>> = first.into_iter().map(fetch).collect();
            out.extend(handles.into_iter().map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::new(ErrorKind::Network, "a fetch thread panicked"))
                })
            }));
            out
        });
        let rounds = results.iter().map(|r| *r.as_ref().unwrap_or(&1)).max();
        Counters::add(&self.counters.round_trips, rounds.unwrap_or(0).into());
        for result in results {
            result?;
        }
        Counters::add(&self.counters.bytes_read, len);
        Ok(())
    }

    /// Fills every `(pos, buf)` (each inside the file), fetching all their
    /// missing blocks in one round.
    pub(crate) fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Result<()> {
        let ranges = reads.iter().map(|(pos, buf)| *pos..*pos + buf.len() as u64);
        let needed = plan::blocks_of(ranges, self.block_size);
        let (mut blocks, missing) = self.look_up(&needed);
        let c = &self.counters;
        Counters::add(&c.cache_hits, blocks.len() as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        if !missing.is_empty() {
            blocks.extend(self.fetch_missing(&missing)?);
            blocks.sort_unstable_by_key(|(i, _)| *i);
        }
        for (pos, buf) in reads.iter_mut() {
            if buf.is_empty() {
                continue;
            }
            let covering = plan::blocks_covering(*pos, buf.len() as u64, self.block_size);
            let at = blocks.partition_point(|(i, _)| *i < covering.start);
            let run = &blocks[at..at + (covering.end - covering.start) as usize];
            copy_out(
                run.iter().map(|(_, block)| block),
                covering.start * self.block_size,
                *pos,
                buf,
                self.block_size,
            );
            Counters::add(&c.bytes_read, buf.len() as u64);
        }
        Ok(())
    }

    /// The cached blocks among `needed`, and the indices of the others.
    fn look_up(&self, needed: &[u64]) -> (Vec<(u64, Block)>, Vec<u64>) {
        let mut found = Vec::with_capacity(needed.len());
        let mut missing = Vec::new();
        for &i in needed {
            match self.cache.get(&self.key, i) {
                Some(block) => found.push((i, block)),
                None => missing.push(i),
            }
        }
        (found, missing)
    }

    /// Fetches `missing` blocks (or waits for them, if others are fetching
    /// them) in one round.
    fn fetch_missing(&self, missing: &[u64]) -> Result<Vec<(u64, Block)>> {
        let claim = self.cache.claim(&self.key, missing, &[]);
        self.complete(claim, |_| true)
    }

    /// Fetches what `claim` owns and waits for what others fetch. Returns the
    /// blocks for which `is_needed` holds; a failure matters only if it hits
    /// one of those (a failed read-ahead costs nothing but its bytes).
    fn complete(
        &self,
        mut claim: Claim,
        is_needed: impl Fn(u64) -> bool,
    ) -> Result<Vec<(u64, Block)>> {
        let mut got = std::mem::take(&mut claim.found);
        let deadline = Instant::now() + self.read_timeout;
        let owned = claim.owned.clone();
        let sizes = self.link_sizes();
        let parts = plan::parts(&owned, self.max_concurrency, sizes.min_part, sizes.max_gap);
        let mut failure = None;
        let mut delivered = 0;
        let rounds = self.fetch_parts(&parts, deadline, |part, result| {
            delivered += 1;
            match result {
                Ok(blocks) => {
                    // Gap blocks fetched to save a request are cached or
                    // fetched by others already: only owned ones are kept.
                    for (i, data) in part.clone().zip(blocks) {
                        if owned.binary_search(&i).is_err() {
                            continue;
                        }
                        let block = Arc::new(data);
                        if is_needed(i) {
                            got.push((i, block.clone()));
                        }
                        claim.fulfil(i, block);
                    }
                    false
                }
                Err(e) => {
                    for i in part.clone() {
                        claim.fail(i, &e);
                    }
                    let fatal = part
                        .clone()
                        .any(|i| owned.binary_search(&i).is_ok() && is_needed(i));
                    if fatal && failure.is_none() {
                        failure = Some(e);
                    }
                    fatal
                }
            }
        });
        Counters::add(&self.counters.round_trips, rounds.into());
        if let Some(e) = failure {
            return Err(e);
        }
        if delivered < parts.len() {
            return Err(Error::new(ErrorKind::Network, "a fetch thread panicked")
                .with_url(self.transport.redacted_url()));
        }
        for (i, pending) in std::mem::take(&mut claim.waiting) {
            let block = pending
                .wait(deadline)
                .map_err(|e| e.with_url(self.transport.redacted_url()))?;
            got.push((i, block));
        }
        Ok(got)
    }

    /// Makes sure the blocks covering `ranges` are fetched, all missing runs
    /// at once.
    pub(crate) fn prefetch(&self, ranges: impl IntoIterator<Item = Range<u64>>) -> Result<()> {
        let size = self.identity.size;
        let inside = ranges
            .into_iter()
            .map(|r| r.start.min(size)..r.end.min(size));
        let (_, missing) = self.look_up(&plan::blocks_of(inside, self.block_size));
        if !missing.is_empty() {
            self.fetch_missing(&missing)?;
        }
        Ok(())
    }

    /// Fetches `parts`, at most `max_concurrency` at a time, each on the next
    /// free worker, and hands every result to `on_done` on this thread as it
    /// arrives (so waiting readers get their blocks early). `on_done` returns
    /// true to stop: parts not started yet are then not fetched. Returns the
    /// round trips as planned (one per `max_concurrency` parts, not per
    /// worker, which would depend on timing) plus the most retries of a part.
    fn fetch_parts(
        &self,
        parts: &[Range<u64>],
        deadline: Instant,
        mut on_done: impl FnMut(&Range<u64>, Result<Vec<Vec<u8>>>) -> bool,
    ) -> u32 {
        let fetch = |part: &Range<u64>| {
            let bytes = plan::byte_range(part, self.block_size, self.identity.size);
            self.transport.fetch(
                bytes,
                self.block_size,
                &self.identity,
                deadline,
                self.cache.buffers(),
            )
        };
        let attempts = |r: &Result<(Vec<Vec<u8>>, u32)>| r.as_ref().map_or(1, |(_, n)| *n);
        if parts.is_empty() {
            return 0;
        }
        if let [only] = parts {
            let result = fetch(only);
            let rounds = attempts(&result);
            on_done(only, result.map(|(blocks, _)| blocks));
            return rounds;
        }
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let workers = (self.max_concurrency as usize).min(parts.len());
        let (sender, results) = mpsc::channel();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let sender = sender.clone();
                    let (next, stop, fetch) = (&next, &stop, &fetch);
                    s.spawn(move || {
                        // The most attempts one part took: a worker that
                        // takes several parts does not make more rounds.
                        let mut most_attempts = 0;
                        while !stop.load(Ordering::Relaxed) {
                            let Some(part) = parts.get(next.fetch_add(1, Ordering::Relaxed)) else {
                                break;
                            };
                            let result = fetch(part);
                            most_attempts = most_attempts.max(attempts(&result));
                            if sender.send((part, result)).is_err() {
                                break;
                            }
                        }
                        most_attempts
                    })
                })
                .collect();
            drop(sender);
            for (part, result) in results {
                if on_done(part, result.map(|(blocks, _)| blocks)) {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            let most_attempts = handles
                .into_iter()
                .filter_map(|h| h.join().ok())
                .max()
                .unwrap_or(1);
            parts.len().div_ceil(workers) as u32 - 1 + most_attempts
        })
    }
}

/// Copies the bytes at `pos` from consecutive blocks, the first starting at
/// `first_start`, into `buf`.
fn copy_out<'a>(
    blocks: impl IntoIterator<Item = &'a Block>,
    first_start: u64,
    pos: u64,
    buf: &mut [u8],
    block_size: u64,
) {
    let mut written = 0usize;
    let mut skip = (pos - first_start) as usize;
    for block in blocks {
        let take = (block.len() - skip).min(buf.len() - written);
        buf[written..written + take].copy_from_slice(&block[skip..skip + take]);
        written += take;
        skip = 0;
        debug_assert!(block.len() as u64 <= block_size);
    }
    debug_assert_eq!(written, buf.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_out_spans_blocks() {
        let blocks = [
            Arc::new(b"abcd".to_vec()),
            Arc::new(b"efgh".to_vec()),
            Arc::new(b"ij".to_vec()),
        ];
        let mut buf = [0u8; 7];
        copy_out(&blocks, 4, 6, &mut buf, 4);
        assert_eq!(&buf, b"cdefghi");
    }
}
