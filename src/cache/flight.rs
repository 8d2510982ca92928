//! Fetches in flight: a reader claims the missing blocks it will fetch, and
//! a second reader of a claimed block waits for the first one's outcome
//! instead of fetching it again. One claim can cover a whole run of blocks,
//! which per-key single-flight (moka's own) cannot.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::stats::RoundMark;
use crate::sync::{Condvar, Mutex};
use crate::wait::Stop;

use super::{Block, BlockCache, FileKey};
use crate::error::{Error, ErrorKind};

impl BlockCache {
    /// For each of `needed` (blocks the read must have), finds it cached, finds
    /// a fetch in flight to wait for, or claims it for this caller to fetch.
    /// Each of `optional` (read-ahead) is claimed only if neither cached nor in
    /// flight. All under one lock, so no block is claimed twice.
    pub(crate) fn claim(&self, file: &FileKey, needed: &[u64], optional: &[u64]) -> Claim {
        self.claim_as(file, needed, optional, None)
    }

    /// Claims those of `blocks` that are neither cached nor in flight, for a
    /// speculative fetch that no reader waits for yet. A reader that comes
    /// to need one of them waits for it and, should the speculation fail,
    /// fetches it itself: a failed guess never fails a read.
    /// `started` is where the file's round trips stand (see
    /// [`Pending::costs_a_round`]).
    pub(crate) fn claim_speculative(
        &self,
        file: &FileKey,
        blocks: &[u64],
        started: RoundMark,
    ) -> Claim {
        self.claim_as(file, &[], blocks, Some(started))
    }

    fn claim_as(
        &self,
        file: &FileKey,
        needed: &[u64],
        optional: &[u64],
        speculative: Option<RoundMark>,
    ) -> Claim {
        // The blocks of one speculative fetch arrive in one round trip.
        let wave = speculative.map(|started| {
            Arc::new(Wave {
                waited: AtomicBool::new(false),
                started,
                wanted: Arc::default(),
            })
        });
        let pending = |optional: bool| {
            Arc::new(Pending {
                wave: wave.clone(),
                optional,
                ..Pending::default()
            })
        };
        let mut claim = Claim {
            cache: self.clone(),
            file: *file,
            found: Vec::new(),
            waiting: Vec::new(),
            owned: Vec::new(),
            fills_gaps: speculative.is_none(),
            wanted: wave.as_ref().map(|w| Arc::clone(&w.wanted)),
        };
        let mut table = self.inner.in_flight.lock();
        for &index in needed {
            let key = (*file, index);
            // A fetcher inserts into the cache before leaving the table, so
            // looking again under the lock cannot miss a block just fetched.
            if let Some(block) = self.inner.blocks.get(&key) {
                claim.found.push((index, block));
            } else if let Some(p) = table.get(&key) {
                claim.waiting.push((index, p.clone()));
            } else {
                table.insert(key, pending(false));
                claim.owned.push(index);
            }
        }
        for &index in optional {
            let key = (*file, index);
            if !table.contains_key(&key) && !self.inner.blocks.contains_key(&key) {
                table.insert(key, pending(true));
                claim.owned.push(index);
            }
        }
        claim.owned.sort_unstable();
        claim
    }

    /// How many readers wait for the fetch of block `index` of `file` in
    /// flight now (0 if none is).
    #[cfg(test)]
    pub(crate) fn waiting_for(&self, file: &FileKey, index: u64) -> usize {
        let table = self.inner.in_flight.lock();
        table
            .get(&(*file, index))
            .map_or(0, |p| p.waiters.load(Ordering::Relaxed))
    }

    fn settle(&self, file: &FileKey, index: u64, outcome: Result<Block, Error>) {
        let key = (*file, index);
        if let Ok(block) = &outcome {
            self.inner.blocks.insert(key, block.clone());
        }
        let pending = self.inner.in_flight.lock().remove(&key);
        if let Some(p) = pending {
            *p.slot.lock() = Some(outcome);
            p.ready.notify_all();
        }
    }
}

/// A fetch in flight, which other readers of its blocks wait for.
#[derive(Default)]
pub(crate) struct Pending {
    slot: Mutex<Option<Result<Block, Error>>>,
    ready: Condvar,
    /// For a block claimed by a speculative fetch (see
    /// [`BlockCache::claim_speculative`]): that fetch.
    wave: Option<Arc<Wave>>,
    /// Whether the claim did not need it (read-ahead, a guess).
    optional: bool,
    /// Readers waiting for it now.
    waiters: std::sync::atomic::AtomicUsize,
}

/// One speculative fetch, as its waiters see it.
struct Wave {
    /// Whether a reader has waited for one of its blocks yet.
    waited: AtomicBool,
    /// Where the file's round trips stood when it started.
    started: RoundMark,
    /// Set when a reader comes to wait for one of its blocks: the fetch is
    /// a read's from then on (see [`Stop::wanted_by`]).
    wanted: Arc<AtomicBool>,
}

impl Pending {
    /// Whether a speculative fetch claimed the block.
    #[cfg(test)]
    pub(crate) fn is_speculative(&self) -> bool {
        self.wave.is_some()
    }

    /// Whether the fetch that claimed the block did not need it (a guess,
    /// or read-ahead): its failure is no reason to fail a reader that does.
    pub(crate) fn is_optional(&self) -> bool {
        self.optional
    }

    /// Whether waiting for this block now costs the waiter a round trip of
    /// its own, the file's round trips standing at `now`: the
    /// block is a speculative fetch's, still under way, no reader has
    /// waited for any block of that fetch yet (once one has, waiting for
    /// the rest is waiting for the same round's bytes), and no round was
    /// counted since it started (it was under way during that round, so
    /// what is left of it is less than one).
    pub(crate) fn costs_a_round(&self, now: RoundMark) -> bool {
        let unsettled = self.slot.lock().is_none();
        self.wave.as_ref().is_some_and(|wave| {
            unsettled && wave.started == now && !wave.waited.swap(true, Ordering::Relaxed)
        })
    }

    /// Waits for the fetch's outcome until the deadline of `stop`, or until
    /// the work it stops is stopped (then its error).
    pub(crate) fn wait(&self, stop: &Stop) -> Result<Block, Error> {
        let deadline = stop.deadline();
        let _waiting = crate::sync::Waiting::new(&self.waiters);
        if let Some(wave) = &self.wave {
            wave.wanted.store(true, Ordering::Relaxed);
        }
        loop {
            let slot = self.slot.lock();
            if let Some(outcome) = slot.as_ref() {
                return outcome.clone();
            }
            let (slot, _) = self
                .ready
                .wait_until(slot, crate::wait::slice_end(deadline));
            if let Some(outcome) = slot.as_ref() {
                return outcome.clone();
            }
            // Asked with no lock held: asking may run a host's code (take
            // an interpreter's lock, run a signal handler that reads).
            drop(slot);
            stop.check()?;
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    "timed out waiting for another reader's fetch of the same block",
                ));
            }
        }
    }
}

/// The outcome of [`BlockCache::claim`]. Blocks still owned when it is dropped
/// (the fetch failed or panicked) are released with an error, so waiters
/// never wait forever.
pub(crate) struct Claim {
    cache: BlockCache,
    file: FileKey,
    /// Needed blocks that turned out to be cached after all.
    found: Vec<(u64, Block)>,
    /// Needed blocks another reader is fetching.
    waiting: Vec<(u64, Arc<Pending>)>,
    /// Blocks this reader must fetch, sorted (and kept so as they are
    /// delivered).
    owned: Vec<u64>,
    /// Whether a fetch of its blocks may also fetch the cached blocks
    /// between them, to save requests.
    fills_gaps: bool,
    /// A speculative claim's flag that a reader waits for its blocks.
    wanted: Option<Arc<AtomicBool>>,
}

impl Claim {
    /// The blocks this reader must fetch and has not delivered, sorted.
    pub fn owned(&self) -> &[u64] {
        &self.owned
    }

    /// The needed blocks that turned out to be cached after all (once).
    pub fn take_found(&mut self) -> Vec<(u64, Block)> {
        std::mem::take(&mut self.found)
    }

    /// The needed blocks another reader is fetching (once).
    pub fn take_waiting(&mut self) -> Vec<(u64, Arc<Pending>)> {
        std::mem::take(&mut self.waiting)
    }

    /// Whether a fetch of its blocks may also fetch the blocks between them
    /// (a speculative claim's may not).
    pub fn fills_gaps(&self) -> bool {
        self.fills_gaps
    }

    /// For a speculative claim: the flag set once a reader waits for one
    /// of its blocks.
    pub fn wanted(&self) -> Option<Arc<AtomicBool>> {
        self.wanted.clone()
    }

    /// Keeps a fetch of its blocks to their own bytes: some were another
    /// fetch's, whose gaps are wanted by nobody.
    pub fn fill_no_gaps(&mut self) {
        self.fills_gaps = false;
    }

    /// Delivers a fetched block: into the cache, and to its waiters.
    pub fn fulfil(&mut self, index: u64, block: Block) {
        if let Ok(at) = self.owned.binary_search(&index) {
            self.owned.remove(at);
            self.cache.settle(&self.file, index, Ok(block));
        }
    }

    /// Reports a failed fetch of `index` to its waiters; `stopped`: the
    /// fetch's own reader was stopped.
    pub fn fail(&mut self, index: u64, error: &Error, stopped: bool) {
        if let Ok(at) = self.owned.binary_search(&index) {
            self.owned.remove(at);
            // A fetch its own reader stopped (a Ctrl-C, a cancel's
            // deadline) failed for that reader alone: its waiters fetch the
            // block themselves.
            let told = if stopped { gave_up() } else { error.clone() };
            self.cache.settle(&self.file, index, Err(told));
        }
    }
}

/// What the waiters of a block are told when its fetcher stopped or gave
/// up: `Interrupted`, on which they fetch it themselves.
fn gave_up() -> Error {
    Error::new(
        ErrorKind::Interrupted,
        "the reader fetching this block stopped",
    )
}

impl Drop for Claim {
    fn drop(&mut self) {
        let error = gave_up();
        for index in std::mem::take(&mut self.owned) {
            self.cache.settle(&self.file, index, Err(error.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon() -> Stop {
        Stop::here().until(Instant::now() + Duration::from_secs(10))
    }
    use std::time::Duration;

    #[test]
    fn a_block_is_claimed_once_and_others_wait_for_it() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        let mut first = cache.claim(&f, &[1, 2], &[3]);
        assert_eq!(first.owned, [1, 2, 3]);
        let second = cache.claim(&f, &[2, 3], &[4]);
        assert!(second.owned == [4]);
        assert_eq!(
            second.waiting.iter().map(|w| w.0).collect::<Vec<_>>(),
            [2, 3]
        );
        let waiter = second.waiting[0].1.clone();
        let t = std::thread::spawn(move || waiter.wait(&soon()));
        first.fulfil(2, Arc::new(vec![7; 4]));
        assert_eq!(*t.join().unwrap().unwrap(), vec![7; 4]);
        assert_eq!(cache.get(&f, 2).as_deref(), Some(&vec![7; 4]));
    }

    #[test]
    fn a_dropped_claim_releases_waiters_with_an_error() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        let first = cache.claim(&f, &[1], &[]);
        let second = cache.claim(&f, &[1], &[]);
        drop(first);
        let got = second.waiting[0].1.wait(&soon());
        // Interrupted: the waiter fetches the block itself.
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Interrupted);
        assert_eq!(cache.claim(&f, &[1], &[]).owned, [1], "claimable again");
    }

    #[test]
    fn speculative_claims_take_only_what_nobody_has() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        cache.insert(&f, 1, Arc::new(vec![0; 8]));
        let _held = cache.claim(&f, &[2], &[]);
        let guess = cache.claim_speculative(&f, &[1, 2, 3], RoundMark(0));
        assert_eq!(guess.owned, [3]);
        let reader = cache.claim(&f, &[2, 3], &[]);
        let speculative: Vec<bool> = reader
            .waiting
            .iter()
            .map(|(_, p)| p.is_speculative())
            .collect();
        assert_eq!(speculative, [false, true]);
        drop(guess);
        let got = reader.waiting[1]
            .1
            .wait(&Stop::here().until(Instant::now()));
        assert!(got.is_err(), "released with an error");
    }

    #[test]
    fn waiting_for_a_speculative_fetch_costs_one_round_per_fetch() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        let guess = cache.claim_speculative(&f, &[1, 2, 3], RoundMark(0));
        let other = cache.claim_speculative(&f, &[4], RoundMark(0));
        let first = cache.claim(&f, &[1], &[]);
        assert!(first.waiting[0].1.costs_a_round(RoundMark(0)));
        // The same fetch's other blocks come in the same round.
        let second = cache.claim(&f, &[2], &[]);
        assert!(!second.waiting[0].1.costs_a_round(RoundMark(0)));
        // Another fetch's is a round of its own; a settled one costs none.
        let fourth = cache.claim(&f, &[4], &[]);
        assert!(fourth.waiting[0].1.costs_a_round(RoundMark(0)));
        drop((guess, other));
        let mut done = cache.claim_speculative(&f, &[10], RoundMark(0));
        let late = cache.claim(&f, &[10], &[]);
        done.fulfil(10, Arc::new(vec![0; 8]));
        assert!(!late.waiting[0].1.costs_a_round(RoundMark(0)));
        // A fetch under way while a reader counted a round of its own
        // overlapped that round: what is left of it is no round.
        let overlapped = cache.claim_speculative(&f, &[11], RoundMark(0));
        let after = cache.claim(&f, &[11], &[]);
        assert!(!after.waiting[0].1.costs_a_round(RoundMark(1)));
        drop(overlapped);
        // A reader's own claim is never a guess.
        let held = cache.claim(&f, &[7], &[]);
        let waiter = cache.claim(&f, &[7], &[]);
        assert!(!waiter.waiting[0].1.costs_a_round(RoundMark(0)));
        drop(held);
    }

    #[test]
    fn optional_blocks_skip_cached_and_in_flight_ones() {
        let cache = BlockCache::new(1 << 20);
        let f = cache.file_key("f");
        cache.insert(&f, 5, Arc::new(vec![0; 8]));
        let _held = cache.claim(&f, &[6], &[]);
        let c = cache.claim(&f, &[], &[4, 5, 6, 7]);
        assert_eq!(c.owned, [4, 7]);
        let c2 = cache.claim(&f, &[5], &[]);
        assert_eq!(c2.found.len(), 1);
    }
}
