//! A side store: bytes a file keeps beside its blocks, put there by
//! whoever knows more of the file's layout than the blocks do (the HDF5
//! driver keeps the exact metadata ranges its crawl fetched). The engine
//! reads through it and tells it when the file closes; it never looks
//! inside.

#![cfg_attr(not(feature = "extension"), allow(dead_code))]

use std::any::Any;
use std::ops::Range;

use crate::stats::RoundMark;
use crate::wait::Stop;

/// What a file may keep beside its blocks. A read the store cannot serve
/// whole goes to the blocks, so a store is only ever a shortcut, never the
/// only copy of a byte.
pub(crate) trait SideStore: Send + Sync + 'static {
    /// Whether the store holds every byte of `range` now.
    fn holds(&self, range: Range<u64>) -> bool;

    /// Fills `buf` with the bytes at `pos` if the store holds them all,
    /// waiting by `wait` (if given) for bytes it has been promised;
    /// `rounds_so_far` is the round trips the file's readers have counted.
    fn read(
        &self,
        pos: u64,
        buf: &mut [u8],
        wait: Option<&Stop>,
        rounds_so_far: RoundMark,
    ) -> Served;

    /// The file closes (its last handle is dropped): keeps in `keeper` (the
    /// disk cache) what the next run should find there.
    fn at_close(&self, keeper: &dyn Keeper);

    /// The store as its own type, for the layer that put it there.
    fn as_any(&self) -> &dyn Any;
}

/// How a read from a side store went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// The store does not hold the whole range (or the bytes it was
    /// promised did not come).
    NotHeld,
    /// Copied from the store; `waited_a_round` if the reader waited for
    /// bytes whose fetch no counted round overlapped, and no reader waited
    /// for them before (the same rule as a guessed block's).
    Copied { waited_a_round: bool },
}

/// Where a side store keeps its bytes across runs: the file's disk cache.
pub(crate) trait Keeper: Send + Sync {
    /// The pieces kept for a file of `size` bytes (each inside it).
    fn read_pieces(&self, size: u64) -> Vec<(u64, Vec<u8>)>;

    /// Keeps `pieces` (each a start and its bytes), in place of those kept
    /// before.
    fn write_pieces(&self, pieces: &mut dyn Iterator<Item = (u64, &[u8])>);
}
