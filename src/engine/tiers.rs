//! A file's tiers put in order: its block store (the disk cache, if it has
//! one), then the network, always last.

use std::sync::Arc;
use std::time::Instant;

use super::fetch::Fetch;
use super::network::Network;
use super::tier::{Below, Tier};
use crate::cache::Keeper;
use crate::error::Error;

/// A file's tiers, in order: its block store (if it has one), then the
/// network, always last.
pub(crate) struct Tiers {
    tiers: Vec<Arc<dyn Tier>>,
    network: Arc<Network>,
}

impl Tiers {
    pub(crate) fn new(store: Option<Arc<dyn Tier>>, network: Network) -> Tiers {
        let network = Arc::new(network);
        let mut tiers: Vec<Arc<dyn Tier>> = store.into_iter().collect();
        tiers.push(network.clone());
        Tiers { tiers, network }
    }

    /// Brings the blocks `fetch` owns, from the first tier down.
    pub(crate) fn fill(&self, fetch: &mut Fetch<'_>) -> Option<Error> {
        self.tiers[0].fill(fetch, Below::of(&self.tiers, 0))
    }

    /// Hands `fetch` the blocks it owns that a tier holds now, without a
    /// request.
    pub(crate) fn take_held(&self, fetch: &mut Fetch<'_>) {
        for tier in &self.tiers {
            tier.take_held(fetch);
        }
    }

    /// The network, the last tier: ranges fetched straight into a caller's
    /// buffer go there.
    pub(crate) fn network(&self) -> &Network {
        &self.network
    }

    /// Whether a tier other than the network keeps blocks (a disk cache).
    pub(crate) fn has_store(&self) -> bool {
        self.tiers.len() > 1
    }

    /// Keeps block `index` (fetched at open) in every tier that keeps
    /// blocks.
    pub(crate) fn keep(&self, index: u64, bytes: &[u8]) {
        for tier in &self.tiers {
            tier.keep(index, bytes);
        }
    }

    /// Whether a tier other than the network holds block `index` now.
    pub(crate) fn holds(&self, index: u64) -> bool {
        self.tiers.iter().any(|t| t.holds(index))
    }

    /// The most bytes of blocks the tiers hold.
    pub(crate) fn capacity(&self) -> u64 {
        self.tiers.iter().map(|t| t.capacity()).max().unwrap_or(0)
    }

    /// The server proved the file's version gone.
    pub(crate) fn version_gone(&self) {
        for tier in &self.tiers {
            tier.version_gone();
        }
    }

    /// Where a side store keeps its bytes across runs, if anywhere.
    pub(crate) fn keeper(&self) -> Option<&dyn Keeper> {
        self.tiers.iter().find_map(|t| t.keeper())
    }

    /// The file's last handle goes: what the tiers keep is kept, within
    /// `deadline`.
    pub(crate) fn close(&self, deadline: Instant) {
        for tier in &self.tiers {
            tier.close(deadline);
        }
    }
}
