//! Claiming the blocks a read misses — taking over the background fetches
//! still queued that bring one of them — and serving the claim: the blocks
//! it owns through the tiers, those other readers fetch by waiting for
//! them.

use super::Engine;
use super::fetch::Fetch;
use crate::cache::{Block, Claim};
use crate::error::{ErrorKind, Result};
use crate::stats::Counters;
use crate::wait::Stop;

impl Engine {
    /// Fetches `missing` blocks (sorted), or waits for them if others are
    /// fetching them, in one round. Exactly those blocks are returned: the
    /// blocks of queued fetches it takes go to the cache only.
    pub(super) fn fetch_missing(&self, missing: &[u64], stop: &Stop) -> Result<Vec<(u64, Block)>> {
        let claim = self.claim_taking_queued(missing, Vec::new());
        self.fetch_claim(claim, |i| missing.binary_search(&i).is_ok(), stop)
    }

    /// Claims `needed` (sorted) and `optional` as [`BlockCache::claim`]
    /// does, with the blocks of every background fetch still queued that
    /// brings one of `needed` as optional too: this read makes those
    /// fetches, in its own round (see [`Queued`]).
    pub(super) fn claim_taking_queued(&self, needed: &[u64], mut optional: Vec<u64>) -> Claim {
        self.queued.take_fetches_of(needed, |taken| {
            // No more than the cache holds: the rest of the fetches is
            // dropped (it was a guess).
            let room = self.blocks_the_cache_holds() as usize;
            let room = room.saturating_sub(needed.len() + optional.len());
            let theirs: Vec<u64> = taken
                .into_iter()
                .filter(|i| needed.binary_search(i).is_err() && optional.binary_search(i).is_err())
                .take(room)
                .collect();
            if theirs.is_empty() {
                return self.cache.claim(&self.key, needed, &optional);
            }
            optional.extend_from_slice(&theirs);
            optional.sort_unstable();
            let mut claim = self.cache.claim(&self.key, needed, &optional);
            // The bytes between a guess's blocks are wanted by nobody.
            if theirs
                .iter()
                .any(|i| claim.owned().binary_search(i).is_ok())
            {
                claim.fill_no_gaps();
            }
            claim
        })
    }

    /// Fetches what `claim` owns and waits for what others fetch. Returns the
    /// blocks for which `is_needed` holds; a failure matters only if it hits
    /// one of those (a failed read-ahead costs nothing but its bytes).
    pub(super) fn fetch_claim(
        &self,
        claim: Claim,
        is_needed: impl Fn(u64) -> bool + Sync,
        stop: &Stop,
    ) -> Result<Vec<(u64, Block)>> {
        // A stopped read fetches nothing (its claim goes with it).
        stop.check()?;
        let mut fetch = Fetch::new(claim, &is_needed, stop.clone());
        let waited = match self.tiers.fill(&mut fetch) {
            Some(e) => Err(e),
            None => self.wait_for_others(&mut fetch),
        };
        // Waiting for a speculative fetch still under way is a round trip of
        // this read's own (the fetch itself is counted by nobody).
        if *waited.as_ref().unwrap_or(&false) {
            fetch.count_a_wait();
        }
        Counters::add(&self.counters.round_trips, fetch.round_trips.into());
        waited.map(|_| fetch.got)
    }

    /// Waits for the blocks of `claim` that other readers fetch. A block a
    /// speculative fetch failed to bring is fetched here. Returns whether
    /// this had to wait for a speculative fetch still under way.
    pub(super) fn wait_for_others(&self, fetch: &mut Fetch<'_>) -> Result<bool> {
        let mut waited_on_guess = false;
        for (i, pending) in fetch.claim.take_waiting() {
            let optional = pending.is_optional();
            waited_on_guess |= pending.costs_a_round(self.counters.round_mark());
            match pending.wait(&fetch.stop) {
                Ok(block) => fetch.got.push((i, block)),
                // This read was stopped: it fetches nothing more, and says
                // why (not what the other reader's fetch met).
                Err(_) if fetch.stop.is_stopped() => {
                    return fetch.stop.check().map(|()| false);
                }
                // A guess or a read-ahead that failed, or a read another
                // caller stopped, leaves its blocks to be fetched here.
                Err(e) if optional || e.kind() == ErrorKind::Interrupted => {
                    let stop = fetch.stop.clone();
                    fetch.got.extend(self.fetch_missing(&[i], &stop)?)
                }
                Err(e) => return Err(e.with_url(self.redacted_url())),
            }
        }
        Ok(waited_on_guess)
    }
}
