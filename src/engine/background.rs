//! Background fetches: guesses and read-ahead queued for the process's
//! workers (a reader that needs one of their blocks takes the whole fetch
//! over), and the count of background work under way.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use super::Engine;
use super::fetch::{Fetch, Guess, nobody_needs};
use super::plan;
use crate::process::workers::{self, Priority};
use crate::wait::Stop;

impl Engine {
    /// Fetches the missing blocks of `ranges`, at most `max_bytes` of them,
    /// on one of the process's background workers (stopped by `closing`),
    /// and returns the bytes missing when asked; no reader
    /// waits for them unless it comes to need one. The fetch counts its
    /// requests and bytes, but no round trip: a reader that waits for one of
    /// its blocks counts that. The blocks covering `leaving` are left out:
    /// a read about to follow fetches them (were they in the fetch, that
    /// read would take it from the queue and wait for all of it).
    pub(crate) fn prefetch_in_background(
        self: &Arc<Self>,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
        closing: Option<&workers::Closing>,
        leaving: Range<u64>,
    ) -> u64 {
        if self.closed.is_cancelled() {
            return 0;
        }
        let mut missing = self.guessable(ranges, max_bytes);
        if !leaving.is_empty() {
            let bs = self.options.block_size;
            let left = plan::blocks_covering(leaving.start, leaving.end - leaving.start, bs);
            missing.retain(|i| !left.contains(i));
        }
        if missing.is_empty() {
            return 0;
        }
        let missing_bytes = missing.iter().map(|&i| self.block_len(i)).sum();
        // The blocks are claimed when the fetch is taken from the queue, not
        // now: a reader never waits for background work's turn. A reader
        // that needs one first takes the whole fetch (see `Queued`). A file
        // let go of, or closed, before its turn fetches nothing.
        let closing = closing.cloned().unwrap_or_default();
        let fetch = self.queued.push(missing, closing.clone());
        let job = Arc::clone(&fetch);
        let engine = Arc::downgrade(self);
        *self.background.lock() += 1;
        let queued = workers::submit(Priority::ReadAhead, move || {
            if let Some(engine) = engine.upgrade() {
                let _ends = BackgroundEnds(&engine);
                if closing.is_closed() || engine.closed.is_cancelled() {
                    engine.queued.forget(&job);
                } else {
                    engine.run_queued(&job, &closing.stop().watching(&engine.closed));
                }
            }
        });
        if let Err(job) = queued {
            drop(job);
            self.queued.forget(&fetch);
            self.background_ended();
            return 0;
        }
        missing_bytes
    }

    /// Queues a background fetch of the missing blocks of `ranges` as
    /// [`prefetch_in_background`](Self::prefetch_in_background) does, but
    /// for no worker: [`run_queued`](Self::run_queued) is the worker.
    #[cfg(test)]
    pub(crate) fn queue_for_no_worker(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
    ) -> Arc<[u64]> {
        let blocks = self.guessable(ranges, u64::MAX);
        self.queued.push(blocks, workers::Closing::default())
    }

    /// Makes the queued background fetch of `blocks`, unless a reader took
    /// it: claims those still missing, as a guess, and fetches them.
    pub(crate) fn run_queued(&self, blocks: &Arc<[u64]>, stop: &Stop) {
        if let Some(mut guess) = self.queued.take(blocks, |b| self.claim_guess_of(b, stop)) {
            self.tiers.take_held(&mut guess);
            self.fetch_guess(&mut guess, stop);
        }
    }

    /// Fetches what a guess claimed and the disk did not have (it was asked
    /// when the claim was made), by `stop`, with the time of a read from now.
    pub(super) fn fetch_guess(&self, guess: &mut Guess, stop: &Stop) {
        // A reader that comes to wait for its blocks makes it a read's.
        let wanted = guess.claim.wanted();
        guess.stop = stop.until(self.read_deadline()).wanted_by(wanted);
        self.tiers.fill(guess);
    }

    /// The missing blocks of `ranges` a guess of at most `max_bytes` (and
    /// of no more than the cache holds) takes, sorted.
    pub(super) fn guessable(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
    ) -> Vec<u64> {
        let most = (max_bytes / self.options.block_size).min(self.blocks_the_cache_holds());
        self.missing_blocks(ranges, most)
    }

    /// A guess claiming those of `blocks` (sorted) neither cached nor in
    /// flight; it asks the disk nothing yet.
    pub(super) fn claim_guess_of(&self, blocks: &[u64], stop: &Stop) -> Guess {
        let started = self.counters.round_mark();
        let claim = self.cache.claim_speculative(&self.key, blocks, started);
        Fetch::new(claim, &nobody_needs, stop.until(self.read_deadline()))
    }

    pub(super) fn background_ended(&self) {
        *self.background.lock() -= 1;
        self.background_done.notify_all();
    }

    /// Waits until no background fetch is under way, or `deadline`; returns
    /// whether none is.
    pub(crate) fn wait_for_background(&self, deadline: Instant) -> bool {
        let mut running = self.background.lock();
        while *running > 0 {
            let (waited, timed_out) = self.background_done.wait_until(running, deadline);
            if timed_out {
                return *waited == 0;
            }
            running = waited;
        }
        true
    }
}

/// Ends one background fetch when dropped (a panic in the fetch too).
pub(super) struct BackgroundEnds<'a>(pub(super) &'a Engine);

impl Drop for BackgroundEnds<'_> {
    fn drop(&mut self) {
        self.0.background_ended();
    }
}
