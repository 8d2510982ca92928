//! The engine's side that only a layer knowing the file's layout uses,
//! through [`Extension`](crate::extension::Extension): guesses fetched on
//! the calling thread, exact ranges fetched without their blocks, a side
//! store put beside the blocks, what is cached from a position on (for
//! parsing what guesses brought), the facts that size its plans, and its
//! background work counted until it ends. Built whether or not a wing is:
//! the core of the engine never calls into it.

#![cfg_attr(not(feature = "extension"), allow(dead_code))]

use std::ops::Range;
use std::sync::Arc;

use super::Engine;
use super::background::BackgroundEnds;
use super::fetch::Guess;
use crate::cache::budget::MemoryBudget;
use crate::cache::{Keeper, SideStore};
use crate::engine::fanout::{Done, Next, fan_out};
use crate::engine::sink::Sink;
use crate::link::LinkEstimate;
use crate::stats::RoundMark;
use crate::wait::Stop;

/// What a side store is made from: the budget the side stores of the
/// files sharing the block cache take their bytes from, the file's disk
/// cache (what an earlier run kept) and its size.
pub(crate) struct SideStoreSetup<'e> {
    pub(crate) budget: Arc<MemoryBudget>,
    pub(crate) disk: Option<&'e dyn Keeper>,
    pub(crate) size: u64,
}

impl Engine {
    /// The file's side store of type `S`, made by `make` if the file has
    /// none yet; `None` if another layer put a store of another type.
    pub(crate) fn side_store<S: SideStore>(
        &self,
        make: impl FnOnce(SideStoreSetup<'_>) -> S,
    ) -> Option<&S> {
        let store = self.side_store.get_or_init(|| {
            Box::new(make(SideStoreSetup {
                budget: self.cache.side_stores_budget(),
                disk: self.tiers.keeper(),
                size: self.identity.size,
            }))
        });
        store.as_any().downcast_ref()
    }

    /// Whether every block covering `range` is cached (or the side store
    /// holds it).
    pub(crate) fn is_cached(&self, range: Range<u64>) -> bool {
        let in_store = |r| self.side_store.get().is_some_and(|s| s.holds(r));
        in_store(range.clone()) || self.missing([range]).next().is_none()
    }

    /// The file's size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.identity.size
    }

    /// Where the file's side store keeps its bytes across runs (its disk
    /// cache), if anywhere.
    pub(crate) fn keeper(&self) -> Option<&dyn Keeper> {
        self.tiers.keeper()
    }

    /// Where the count of the file's round trips stands now.
    pub(crate) fn round_mark(&self) -> RoundMark {
        self.counters.round_mark()
    }

    /// The link as guesses are sized by (see [`crate::link::LinkMeter::guess_estimate`]).
    pub(crate) fn guess_link_estimate(&self) -> Option<LinkEstimate> {
        self.link.guess_estimate()
    }

    /// Counts the file among those guessing on its line while the guard
    /// lives (see [`crate::link::LinkMeter::at_work`]).
    pub(crate) fn guessing_on_line(&self) -> crate::link::AtWork {
        self.link.at_work()
    }

    /// How many files guess on the file's line now.
    pub(crate) fn line_sharing(&self) -> u64 {
        self.link.sharing()
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
        // A closed file guesses nothing, and a close ends its guess.
        if self.closed.is_cancelled() {
            return 0;
        }
        let stop = Stop::here().watching(&self.closed);
        let (guess, claimed) = self.claim_guess(ranges, max_bytes, &stop);
        if let Some(mut guess) = guess {
            let _ends = self.background_started();
            self.fetch_guess(&mut guess, &stop);
        }
        claimed
    }

    /// Whether the file's blocks also go to a disk cache.
    pub(crate) fn has_disk_cache(&self) -> bool {
        self.tiers.has_store()
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
        stop: &Stop,
    ) -> (Option<Guess>, u64) {
        self.claim_blocks(self.guessable(ranges, max_bytes), stop)
    }

    /// As [`claim_guess`](Self::claim_guess), for `missing` (sorted blocks
    /// not cached).
    fn claim_blocks(&self, missing: Vec<u64>, stop: &Stop) -> (Option<Guess>, u64) {
        if missing.is_empty() {
            return (None, 0);
        }
        let mut guess = self.claim_guess_of(&missing, stop);
        let claimed: u64 = guess.claim.owned().iter().map(|&i| self.block_len(i)).sum();
        self.tiers.take_held(&mut guess);
        let left = (!guess.claim.owned().is_empty()).then_some(guess);
        (left, claimed)
    }

    /// The cached bytes from `pos` on, through consecutive cached blocks,
    /// at most `max` of them: empty if no block holding `pos` is cached.
    /// Counts no read: it is for parsing what guesses brought.
    pub(crate) fn cached_from(&self, pos: u64, max: usize) -> Vec<u8> {
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

    /// Reads from the disk cache the blocks of `ranges` it holds (claimed
    /// as a guess, so that no reader fetches them meanwhile), fetching
    /// nothing.
    pub(crate) fn take_from_disk(&self, ranges: impl IntoIterator<Item = Range<u64>>) {
        if self.tiers.has_store() {
            let (rest, _) = self.claim_guess(ranges, u64::MAX, &Stop::here());
            drop(rest);
        }
    }

    /// Fetches `ranges` exactly, without their blocks, on the calling
    /// thread, as background work: at most
    /// [`guess_concurrency`](Self::guess_concurrency) requests at once,
    /// within the read timeout. Each range goes to `deliver` with its bytes,
    /// or with none if its fetch failed (a guess's failure is its own:
    /// readers of those bytes meet it, if at all, themselves).
    pub(crate) fn fetch_exact(
        &self,
        ranges: Vec<Range<u64>>,
        mut deliver: impl FnMut(Range<u64>, Option<Vec<u8>>),
    ) {
        // A close ends the fetches (those it leaves undone are delivered
        // without bytes, as failed ones are).
        let stop = Stop::here()
            .watching(&self.closed)
            .until(self.read_deadline());
        let _ends = self.background_started();
        fan_out(
            ranges,
            self.options.guess_concurrency as usize,
            &stop,
            |range, stop| {
                let mut bytes = vec![0; (range.end - range.start) as usize];
                let result = self.fetch_range(range.clone(), &mut Sink::over(&mut bytes), stop);
                Done {
                    attempts: *result.as_ref().unwrap_or(&1),
                    outcome: (range, result.ok().map(|_| bytes)),
                }
            },
            |(range, bytes)| {
                deliver(range, bytes);
                Next::Continue
            },
        );
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
