//! Serving reads: from the side store or the memory cache when they hold
//! the bytes; else the blocks missing are claimed (with read-ahead, by the
//! plan) and fetched through the tiers; a large read with nothing cached
//! goes straight into the caller's buffer.

use std::ops::Range;

use super::Engine;
use super::fanout::{Done, Next, fan_out};
use super::fetch::{copy_out, cut};
use super::plan;
use super::sink::Sink;
use crate::cache::{Block, Served};
use crate::error::{Error, Result};
use crate::stats::Counters;
use crate::wait::Stop;

impl Engine {
    /// Fills `buf` with the bytes at `pos` if every block covering them is
    /// cached now (looked up once: no block can go between the look and
    /// the copy), or the side store holds them now; false, with nothing
    /// read, otherwise. `note`: the read counts for read-ahead (a vectored
    /// read's ranges do not).
    pub(crate) fn read_if_cached(&self, pos: u64, buf: &mut [u8], note: bool) -> bool {
        if buf.is_empty() {
            return true;
        }
        let served = self.copy_if_cached(pos, buf) || self.read_from_side_store(pos, buf, None);
        if served && note {
            self.note_read(pos, buf.len() as u64, false);
        }
        served
    }

    /// Copies the bytes at `pos` out of the cache if every block covering
    /// them is there (a small read inside one block, the common case,
    /// without an allocation).
    pub(super) fn copy_if_cached(&self, pos: u64, buf: &mut [u8]) -> bool {
        let len = buf.len() as u64;
        let bs = self.options.block_size;
        let needed = plan::blocks_covering(pos, len, bs);
        let count = needed.end - needed.start;
        if count == 1 {
            let Some(block) = self.cache.get(&self.key, needed.start) else {
                return false;
            };
            let offset = (pos - needed.start * bs) as usize;
            buf.copy_from_slice(&block[offset..offset + buf.len()]);
        } else {
            let mut blocks = Vec::with_capacity(count as usize);
            for i in needed.clone() {
                match self.cache.get(&self.key, i) {
                    Some(block) => blocks.push(block),
                    None => return false,
                }
            }
            copy_out(&blocks, needed.start * bs, pos, buf);
        }
        Counters::add(&self.counters.cache_hits, count);
        Counters::add(&self.counters.bytes_read, len);
        true
    }

    /// Fills `buf` with the bytes at `pos`; the range lies inside the file.
    pub(crate) fn read_into(&self, pos: u64, buf: &mut [u8], stop: &Stop) -> Result<()> {
        let stop = &stop.until(self.read_deadline());
        let len = buf.len() as u64;
        let bs = self.options.block_size;
        let needed = plan::blocks_covering(pos, len, bs);
        // (What the caches held when the caller looked it served itself:
        // see `read_if_cached`. Pieces still coming are waited for here.)
        if self.read_from_side_store(pos, buf, Some(stop)) {
            self.note_read(pos, len, false);
            return Ok(());
        }
        let mut have: Vec<Option<Block>> = needed
            .clone()
            .map(|i| self.cache.get(&self.key, i))
            .collect();
        // With a disk cache the blocks go to disk (and other processes
        // wait for them there): only a file without one reads past the
        // cache.
        let bypass = !self.tiers.has_store() && len >= self.options.bypass_min;
        if bypass && have.iter().any(Option::is_none) {
            return self.read_direct(pos, buf, &have, stop);
        }
        let missing: Vec<u64> = needed
            .clone()
            .zip(&have)
            .filter_map(|(i, b)| b.is_none().then_some(i))
            .collect();
        let c = &self.counters;
        Counters::add(&c.cache_hits, (have.len() - missing.len()) as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        let ahead = self.note_read(pos, len, !missing.is_empty());
        if !missing.is_empty() {
            let ahead_end = (pos + len).saturating_add(ahead).min(self.identity.size);
            let optional: Vec<u64> = (needed.end..ahead_end.div_ceil(bs)).collect();
            let claim = self.claim_taking_queued(&missing, optional);
            for (i, block) in self.fetch_claim(claim, |i| needed.contains(&i), stop)? {
                have[(i - needed.start) as usize] = Some(block);
            }
        }
        let blocks = have
            .iter()
            .map(|b| b.as_ref().expect("every needed block is present"));
        copy_out(blocks, needed.start * bs, pos, buf);
        Counters::add(&c.bytes_read, len);
        Ok(())
    }

    /// Serves a read from the side store, if it holds the bytes (waiting
    /// by `wait` for those it was promised, if given). False unless it
    /// holds them all.
    pub(super) fn read_from_side_store(
        &self,
        pos: u64,
        buf: &mut [u8],
        wait: Option<&Stop>,
    ) -> bool {
        let Some(store) = self.side_store.get() else {
            return false;
        };
        let range = pos..pos + buf.len() as u64;
        // Without a wait, only bytes here now: a piece still coming is
        // neither waited for nor marked as waited for.
        if wait.is_none() && !store.holds(range) {
            return false;
        }
        let rounds_so_far = self.counters.round_mark();
        let Served::Copied { waited_a_round } = store.read(pos, buf, wait, rounds_so_far) else {
            return false;
        };
        let c = &self.counters;
        Counters::add(&c.round_trips, waited_a_round.into());
        Counters::add(&c.cache_hits, 1);
        Counters::add(&c.bytes_read, buf.len() as u64);
        true
    }

    /// Fetches the bytes at `pos` that `have` (the blocks covering them)
    /// lacks straight into `buf`, in concurrent parts of one round, and
    /// copies the others out of the cache: a large transfer then costs no
    /// block buffers (its bytes are held once, in `buf`), no copy out of
    /// them and no eviction of what the cache holds.
    pub(super) fn read_direct(
        &self,
        pos: u64,
        buf: &mut [u8],
        have: &[Option<Block>],
        stop: &Stop,
    ) -> Result<()> {
        stop.check()?;
        let len = buf.len() as u64;
        let bs = self.options.block_size;
        // The stream goes on from here, but this read needs no read-ahead.
        self.note_read(pos, len, false);
        let first = pos / bs;
        for (k, block) in have.iter().enumerate() {
            if let Some(block) = block {
                let start = (first + k as u64) * bs;
                let bytes = start.max(pos)..(start + bs).min(pos + len);
                buf[(bytes.start - pos) as usize..(bytes.end - pos) as usize].copy_from_slice(
                    &block[(bytes.start - start) as usize..(bytes.end - start) as usize],
                );
            }
        }
        let cached: Vec<bool> = have.iter().map(Option::is_some).collect();
        let hits = cached.iter().filter(|&&c| c).count() as u64;
        Counters::add(&self.counters.cache_hits, hits);
        Counters::add(&self.counters.cache_misses, cached.len() as u64 - hits);
        let min_part = self.link_sizes().min_part_blocks.saturating_mul(bs);
        let lanes = self.options.max_concurrency;
        // No more runs than lanes: one round, cached blocks between close
        // runs fetched again.
        let runs = plan::joined_runs(plan::uncached_runs(pos, len, bs, &cached), lanes as usize);
        let lens: Vec<u64> = runs.iter().map(|r| r.end - r.start).collect();
        let parts: Vec<Range<u64>> = runs
            .into_iter()
            .zip(plan::parts_per_run(&lens, lanes, min_part))
            .flat_map(|(run, n)| plan::split(run, n, min_part))
            .collect();
        // The first failure in the order of the parts, as a sequential read
        // would have met it.
        let mut failure: Option<(usize, Error)> = None;
        let rounds = fan_out(
            cut(buf, pos, parts).into_iter().enumerate().collect(),
            self.options.max_concurrency as usize,
            stop,
            |(n, (range, piece)), stop| {
                let result = self.fetch_range(range, &mut Sink::over(piece), stop);
                Done {
                    attempts: *result.as_ref().unwrap_or(&1),
                    outcome: result.err().map(|e| (n, e)),
                }
            },
            |failed| {
                if let Some((n, e)) = failed {
                    if failure.as_ref().is_none_or(|(first, _)| n < *first) {
                        failure = Some((n, e));
                    }
                }
                Next::Continue
            },
        );
        Counters::add(&self.counters.round_trips, rounds.into());
        if let Some((_, e)) = failure {
            return Err(e);
        }
        Counters::add(&self.counters.bytes_read, len);
        Ok(())
    }

    /// Fills every `(pos, buf)` (each inside the file), fetching all their
    /// missing blocks in one round.
    pub(crate) fn read_many(&self, reads: &mut [(u64, &mut [u8])], stop: &Stop) -> Result<()> {
        let stop = &stop.until(self.read_deadline());
        // A read a piece holds is served from it, as `read_into` serves one:
        // the blocks may never have been fetched.
        let mut reads: Vec<(u64, &mut [u8])> = reads
            .iter_mut()
            .filter_map(|(pos, buf)| {
                let served = !buf.is_empty() && self.read_from_side_store(*pos, buf, Some(stop));
                (!served).then_some((*pos, &mut **buf))
            })
            .collect();
        let bs = self.options.block_size;
        let ranges = reads.iter().map(|(pos, buf)| *pos..*pos + buf.len() as u64);
        // As many blocks as the callers' buffers cover: bounded by them.
        let needed: Vec<u64> = plan::blocks_of(ranges, bs).collect();
        let (mut blocks, missing) = self.look_up(&needed);
        let c = &self.counters;
        Counters::add(&c.cache_hits, blocks.len() as u64);
        Counters::add(&c.cache_misses, missing.len() as u64);
        if !missing.is_empty() {
            blocks.extend(self.fetch_missing(&missing, stop)?);
            blocks.sort_unstable_by_key(|(i, _)| *i);
        }
        for (pos, buf) in reads.iter_mut() {
            if buf.is_empty() {
                continue;
            }
            let covering = plan::blocks_covering(*pos, buf.len() as u64, bs);
            let at = blocks.partition_point(|(i, _)| *i < covering.start);
            let run = &blocks[at..at + (covering.end - covering.start) as usize];
            copy_out(run.iter().map(|(_, b)| b), covering.start * bs, *pos, buf);
            Counters::add(&c.bytes_read, buf.len() as u64);
        }
        Ok(())
    }

    /// Makes sure the blocks covering `ranges` are fetched: as many as the
    /// caches hold (more would not stay), in rounds of at most what the
    /// memory cache holds, so that memory stays within its budget. Without
    /// a disk cache that is one round; with one, as many blocks as the disk
    /// holds.
    pub(crate) fn prefetch(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        stop: &Stop,
    ) -> Result<()> {
        let fetch = self.blocks_the_cache_holds();
        let most = (self.tiers.capacity() / self.options.block_size).max(fetch);
        let mut missing = self
            .missing(ranges)
            .take(usize::try_from(most).unwrap_or(usize::MAX));
        // The first round's blocks come to memory, from disk if they are
        // there; after it, blocks on disk are left there (reading them into
        // memory would only evict the first round's).
        let on_disk = |i: &u64| self.tiers.holds(*i);
        let mut first = true;
        loop {
            let next: Vec<u64> = missing
                .by_ref()
                .filter(|i| first || !on_disk(i))
                .take(fetch as usize)
                .collect();
            if next.is_empty() {
                return Ok(());
            }
            first = false;
            // Each round is a read of its own, with its own time.
            self.fetch_missing(&next, &stop.until(self.read_deadline()))?;
        }
    }

    /// The cached blocks among `needed`, and the indices of the others.
    pub(super) fn look_up(&self, needed: &[u64]) -> (Vec<(u64, Block)>, Vec<u64>) {
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
}
