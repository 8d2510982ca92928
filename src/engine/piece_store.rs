//! The HDF5 driver's side store: the pieces its crawl fetched exactly
//! ([`Pieces`]), found on the file's disk cache at open, kept there while
//! the file is open (once they have grown enough to be worth the write)
//! and at close, never an older snapshot after a newer one, never by a
//! forked child.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use crate::cache::{Here, Pieces, PiecesBudget, Served, SideStore};
use crate::disk::DiskFile;
use crate::stats::RoundMark;
use crate::sync;

/// When a file's pieces are kept on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// The crawl has nothing left to fetch for now: more may come.
    WhileOpen,
    /// The file is closed: nothing more comes.
    AtClose,
}

/// A file's pieces, and what of them its disk cache holds.
pub(super) struct PieceStore {
    pieces: Pieces,
    /// The pieces as last kept; held while they are kept, so that an older
    /// snapshot never follows a newer one into the disk's queue.
    kept: sync::Mutex<Kept>,
    /// The process that opened the file: a forked child keeps no pieces
    /// (their lock, or the disk queue's, may be held for good by a thread
    /// of the parent).
    opened_in: sync::MadeIn,
    /// The bytes of pieces found on disk at open.
    found_at_open: u64,
}

impl PieceStore {
    /// A store whose pieces take their bytes from `budget`.
    pub(super) fn new(budget: Arc<PiecesBudget>) -> PieceStore {
        PieceStore {
            pieces: Pieces::new(budget),
            kept: Default::default(),
            opened_in: sync::MadeIn::here(),
            found_at_open: 0,
        }
    }

    /// Takes the pieces `disk` holds for a file of `size` bytes, and counts
    /// them as kept.
    pub(super) fn load(&mut self, disk: &DiskFile, size: u64) {
        self.pieces.put(disk.read_pieces(size));
        let (arrivals, here) = self.pieces.here();
        let kept = Kept::of(arrivals, &here);
        *self.kept.get_mut() = kept;
        self.found_at_open = kept.bytes;
    }

    /// The bytes of pieces found on disk when the file was opened.
    pub(super) fn found_at_open(&self) -> u64 {
        self.found_at_open
    }

    pub(super) fn pieces(&self) -> &Pieces {
        &self.pieces
    }

    /// Writes the pieces to `disk` if they have grown enough since they
    /// were last kept (see [`worth_keeping`]): the crawl has gone idle.
    pub(super) fn keep_while_open(&self, disk: &DiskFile) {
        self.keep(disk, Keep::WhileOpen);
    }

    fn keep(&self, disk: &DiskFile, when: Keep) {
        if self.opened_in.inherited() {
            return;
        }
        let mut kept = self.kept.lock();
        let (arrivals, here) = self.pieces.here();
        let now = Kept::of(arrivals, &here);
        if worth_keeping(*kept, now, when) {
            disk.write_pieces(here.iter().map(|(start, bytes)| (*start, &bytes[..])));
            *kept = now;
        }
    }
}

impl SideStore for PieceStore {
    fn holds(&self, range: Range<u64>) -> bool {
        self.pieces.holds(range)
    }

    fn read(&self, pos: u64, buf: &mut [u8], deadline: Instant, now: RoundMark) -> Served {
        self.pieces.read(pos, buf, deadline, now)
    }

    fn at_close(&self, disk: &DiskFile) {
        self.keep(disk, Keep::AtClose);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A file's pieces, as counted when kept on disk.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Kept {
    /// How many had arrived.
    arrivals: u64,
    bytes: u64,
}

impl Kept {
    /// The count of what [`Pieces::here`] gives.
    fn of(arrivals: u64, here: &[Here]) -> Kept {
        let bytes = here.iter().map(|(_, b)| b.len() as u64).sum();
        Kept { arrivals, bytes }
    }
}

/// Whether pieces `now` are worth writing over those `kept`: any change
/// at close; while open, only once they have grown by half (or were never
/// kept), so that a crawl going idle again and again rewrites at most
/// about three times the bytes it ends with, and a run that is killed loses
/// at most a third of them.
fn worth_keeping(kept: Kept, now: Kept, when: Keep) -> bool {
    if now.arrivals == kept.arrivals {
        return false;
    }
    match when {
        Keep::AtClose => true,
        Keep::WhileOpen => kept.arrivals == 0 || now.bytes >= kept.bytes + kept.bytes / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_kept_at_close_or_once_grown_by_half() {
        let kept = |arrivals, bytes| Kept { arrivals, bytes };
        let none = Kept::default();
        assert!(
            worth_keeping(none, kept(1, 10), Keep::WhileOpen),
            "never kept"
        );
        assert!(
            !worth_keeping(kept(3, 100), kept(3, 100), Keep::AtClose),
            "unchanged"
        );
        assert!(!worth_keeping(kept(3, 100), kept(4, 149), Keep::WhileOpen));
        assert!(worth_keeping(kept(3, 100), kept(4, 150), Keep::WhileOpen));
        assert!(worth_keeping(kept(3, 100), kept(4, 101), Keep::AtClose));
        // Idle again and again, by a byte each: rewrites stay a few times
        // the final bytes.
        let (mut on_disk, mut written) = (kept(1, 1000), 1000u64);
        for n in 2..100_000u64 {
            let now = kept(n, 1000 + n);
            if worth_keeping(on_disk, now, Keep::WhileOpen) {
                written += now.bytes;
                on_disk = now;
            }
        }
        assert!(written <= 3 * 101_000, "{written}");
    }
}
