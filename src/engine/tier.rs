//! The tiers a fetch's blocks come from, below the memory cache that claims
//! them, composed in order: the file's block store (the disk cache, when it
//! has one), then the network. Each tier hands over the blocks it brings
//! and leaves the rest to the tiers below it; a block a tier below brought
//! is offered to the tiers above it, which keep it.
//!
//! The engine knows the tiers by this interface only: the disk cache
//! implements it in `disk/tier.rs`, with its protocol between processes
//! inside; the network tier is `engine/network.rs`; `engine/tiers.rs` puts
//! a file's in order.

use std::sync::Arc;
use std::time::Instant;

use super::fetch::Fetch;
use crate::cache::Keeper;
use crate::error::Error;

/// One place a file's blocks come from.
pub(crate) trait Tier: Send + Sync + 'static {
    /// Hands `fetch` the blocks it owns that this tier brings, asking
    /// `below` for the rest. Returns the first failure that hit a block
    /// the fetch's caller needs.
    fn fill(&self, fetch: &mut Fetch<'_>, below: Below<'_>) -> Option<Error>;

    /// Hands `fetch` the blocks it owns that this tier holds now, asking
    /// nothing below it (a guess's claim, before the guess's turn).
    fn take_held(&self, fetch: &mut Fetch<'_>) {
        let _ = fetch;
    }

    /// Keeps block `index`, which a tier below brought.
    fn keep(&self, index: u64, bytes: &[u8]) {
        let _ = (index, bytes);
    }

    /// Whether it holds block `index` now.
    fn holds(&self, index: u64) -> bool {
        let _ = index;
        false
    }

    /// The most bytes of blocks it holds (0: it holds none).
    fn capacity(&self) -> u64 {
        0
    }

    /// The server proved the file's version gone: what the tier holds of
    /// it is not to be served again.
    fn version_gone(&self) {}

    /// The file's last handle goes: waits until `deadline` for what it
    /// keeps to be kept.
    fn close(&self, deadline: Instant) {
        let _ = deadline;
    }

    /// Where a side store keeps its bytes across runs, if the tier keeps
    /// any.
    fn keeper(&self) -> Option<&dyn Keeper> {
        None
    }
}

/// The tiers below one, in order, and those above it.
#[derive(Clone, Copy)]
pub(crate) struct Below<'a> {
    tiers: &'a [Arc<dyn Tier>],
    /// Where the tier asking stands.
    at: usize,
}

impl<'a> Below<'a> {
    /// The tiers below `tiers[at]`, for it to ask.
    pub(crate) fn of(tiers: &'a [Arc<dyn Tier>], at: usize) -> Below<'a> {
        Below { tiers, at }
    }

    /// Asks the next tier down for the blocks `fetch` still owns.
    pub(crate) fn fill(self, fetch: &mut Fetch<'_>) -> Option<Error> {
        match self.tiers.get(self.at + 1) {
            Some(next) => next.fill(
                fetch,
                Below {
                    tiers: self.tiers,
                    at: self.at + 1,
                },
            ),
            None => None,
        }
    }

    /// Offers block `index`, which the tier asking brought, to the tiers
    /// above it.
    pub(crate) fn keep_above(&self, index: u64, bytes: &[u8]) {
        for tier in &self.tiers[..self.at] {
            tier.keep(index, bytes);
        }
    }

    /// Tells the tiers above the tier asking that the version is gone.
    pub(crate) fn version_gone_above(&self) {
        for tier in &self.tiers[..self.at] {
            tier.version_gone();
        }
    }
}
