//! The engine's side that only the HDF5 driver uses, through
//! [`Extension`](crate::extension::Extension): its guesses fetched on the
//! calling thread, exact pieces of metadata (the side store), what is
//! cached from a position on (for parsing what guesses brought), the
//! facts that size its plans, and its background work counted until it
//! ends. The core of the engine (`mod.rs`) never calls into it.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use super::piece_store::PieceStore;
use super::{BackgroundEnds, Engine, Guess};
use crate::engine::fanout::{Done, Next, fan_out};
use crate::http::Sink;
use crate::link::LinkEstimate;

impl Engine {
    /// Gives the file the driver's side store: the pieces its crawl fetches
    /// exactly (the metadata no block holds), with those an earlier run
    /// kept on disk. Without it, the driver's pieces are fetched as blocks.
    pub(crate) fn with_piece_store(mut self) -> Engine {
        let mut store = PieceStore::new(self.cache.pieces_budget());
        if let Some(disk) = &self.disk {
            store.load(disk, self.identity.size);
        }
        self.side_store = Some(Box::new(store));
        self
    }

    /// The driver's store. Every file a driver build opens has one (see
    /// `open`): a missing one, or one of another type, is a bug that would
    /// only show as the driver's pieces fetched as blocks, so debug builds
    /// stop there.
    fn piece_store(&self) -> Option<&PieceStore> {
        let store = self
            .side_store
            .as_ref()
            .and_then(|s| s.as_any().downcast_ref());
        debug_assert!(store.is_some(), "a file without the driver's side store");
        store
    }

    /// The bytes of pieces found on disk when the file was opened.
    pub(crate) fn pieces_from_disk(&self) -> u64 {
        self.piece_store().map_or(0, PieceStore::found_at_open)
    }

    /// Keeps the file's pieces on its disk cache, if it has one and they
    /// have grown enough since they were last kept: the next run finds
    /// them there even if this one is killed.
    pub(crate) fn keep_pieces(&self) {
        if let (Some(disk), Some(store)) = (&self.disk, self.piece_store()) {
            store.keep_while_open(disk);
        }
    }

    /// The link as guesses are sized by (see [`crate::link::LinkMeter::guess_estimate`]).
    pub(crate) fn guess_link_estimate(&self) -> Option<LinkEstimate> {
        self.link.guess_estimate()
    }

    /// The most requests a guess has in flight.
    pub(crate) fn guess_concurrency(&self) -> u64 {
        self.options.guess_concurrency
    }

    /// The least and the most bytes a sequential stream reads ahead.
    pub(crate) fn read_ahead_bounds(&self) -> (u64, u64) {
        (
            self.link_sizes().ahead_floor_bytes,
            self.options.read_ahead_max,
        )
    }

    /// As [`prefetch_in_background`](Self::prefetch_in_background), on
    /// the calling thread: returns when the fetch has ended (for a thread
    /// whose work is guessing).
    pub(crate) fn prefetch_here(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
    ) -> u64 {
        let (guess, claimed) = self.claim_guess(ranges, max_bytes);
        if let Some(mut guess) = guess {
            let _ends = self.background_started();
            self.fetch_guess(&mut guess);
        }
        claimed
    }

    /// Whether the file's blocks also go to a disk cache.
    pub(crate) fn has_disk_cache(&self) -> bool {
        self.disk.is_some()
    }

    /// Claims the missing blocks of `ranges` as a guess, at most
    /// `max_bytes` of them, and hands over those the disk cache holds at
    /// once (a reader that came to need one would otherwise wait for the
    /// network's turn). Returns the claim, if blocks are left to fetch, and
    /// the bytes claimed.
    fn claim_guess(
        &self,
        ranges: impl IntoIterator<Item = Range<u64>>,
        max_bytes: u64,
    ) -> (Option<Guess>, u64) {
        self.claim_blocks(self.guessable(ranges, max_bytes))
    }

    /// As [`claim_guess`](Self::claim_guess), for `missing` (sorted blocks
    /// not cached).
    fn claim_blocks(&self, missing: Vec<u64>) -> (Option<Guess>, u64) {
        if missing.is_empty() {
            return (None, 0);
        }
        let mut guess = self.claim_guess_of(&missing);
        let claimed: u64 = guess.claim.owned().iter().map(|&i| self.block_len(i)).sum();
        self.fetch_from_disk(&mut guess);
        let left = (!guess.claim.owned().is_empty()).then_some(guess);
        (left, claimed)
    }

    /// The cached bytes from `pos` on, through consecutive cached blocks
    /// (or else through the piece holding `pos`), at most `max` of them:
    /// empty if neither holds `pos`. Counts no read: it is for parsing what
    /// guesses brought.
    pub(crate) fn cached_from(&self, pos: u64, max: usize) -> Vec<u8> {
        let from_blocks = self.cached_in_blocks_from(pos, max);
        if from_blocks.is_empty() {
            let store = self.piece_store();
            return store.map_or_else(Vec::new, |s| s.pieces().bytes_from(pos, max));
        }
        from_blocks
    }

    fn cached_in_blocks_from(&self, pos: u64, max: usize) -> Vec<u8> {
        let bs = self.options.block_size;
        let end = pos.saturating_add(max as u64).min(self.identity.size);
        let mut out = Vec::new();
        let mut at = pos;
        while at < end {
            let index = at / bs;
            let Some(block) = self.cache.get(&self.key, index) else {
                break;
            };
            let offset = (at - index * bs) as usize;
            let take = (block.len().saturating_sub(offset) as u64).min(end - at) as usize;
            if take == 0 {
                break;
            }
            out.extend_from_slice(&block[offset..offset + take]);
            at += take as u64;
        }
        out
    }

    /// Fetches `ranges` exactly, as pieces, on the calling thread: at most
    /// `max_bytes` of them, those of the file's blocks in memory or on disk
    /// excepted, in one round of at most
    /// [`guess_concurrency`](Self::guess_concurrency) requests at once.
    /// Returns the bytes fetched. A failure costs the guess only: readers
    /// of those bytes read blocks and meet it themselves. If the pieces'
    /// budget, which the files sharing the cache share, has no room for
    /// them, they are fetched as blocks ([`prefetch_here`](Self::prefetch_here)),
    /// which the cache evicts as it must.
    pub(crate) fn guess_pieces(&self, ranges: Vec<Range<u64>>, max_bytes: u64) -> u64 {
        let size = self.identity.size;
        let mut wanted: Vec<Range<u64>> = ranges
            .into_iter()
            .map(|r| r.start.min(size)..r.end.min(size))
            .filter(|r| !r.is_empty() && !self.is_cached(r.clone()))
            .collect();
        if self.disk.is_some() && !wanted.is_empty() {
            // Blocks on disk cost no request: whatever they hold is read
            // from there, and only what they do not hold is fetched.
            let (rest, _) = self.claim_guess(wanted.iter().cloned(), u64::MAX);
            drop(rest);
            wanted.retain(|r| !self.is_cached(r.clone()));
        }
        let mut total = 0u64;
        wanted.retain(|r| {
            total = total.saturating_add(r.end - r.start);
            total <= max_bytes
        });
        let bytes: u64 = wanted.iter().map(|r| r.end - r.start).sum();
        let Some(pieces) = self
            .piece_store()
            .map(PieceStore::pieces)
            .filter(|p| p.budget().has_room(bytes))
        else {
            return self.prefetch_here(wanted, max_bytes);
        };
        let started = self.counters.round_mark();
        let taken = pieces.claim(&wanted, started);
        if taken.is_empty() {
            return 0;
        }
        let fetched = taken.iter().map(|r| r.end - r.start).sum();
        let deadline = Instant::now() + self.options.read_timeout;
        let _ends = self.background_started();
        fan_out(
            taken,
            self.options.guess_concurrency as usize,
            |range| {
                let mut bytes = vec![0; (range.end - range.start) as usize];
                let result = self.transport.fetch(
                    range.clone(),
                    &mut Sink::over(&mut bytes),
                    &self.identity,
                    deadline,
                );
                Done {
                    attempts: *result.as_ref().unwrap_or(&1),
                    outcome: (range, result.ok().map(|_| bytes)),
                }
            },
            |(range, bytes)| {
                pieces.deliver(range, bytes);
                Next::Continue
            },
        );
        fetched
    }

    /// Counts background work that is not one fetch (the HDF5 driver's
    /// crawl, from the moment it has work until it has none) for as long
    /// as the returned guard lives: [`wait_for_background`](Self::wait_for_background)
    /// waits for it too, so a measurement never reads the statistics
    /// between two of its waves.
    pub(crate) fn background_work(self: &Arc<Self>) -> BackgroundWork {
        *self.background.lock() += 1;
        BackgroundWork {
            engine: Arc::clone(self),
        }
    }

    /// Counts one background fetch, until the returned guard is dropped.
    fn background_started(&self) -> BackgroundEnds<'_> {
        *self.background.lock() += 1;
        BackgroundEnds(self)
    }
}

/// Background work under way until dropped: see [`Engine::background_work`].
pub(crate) struct BackgroundWork {
    engine: Arc<Engine>,
}

impl Drop for BackgroundWork {
    fn drop(&mut self) {
        self.engine.background_ended();
    }
}
