//! The HDF5 driver's side store: the pieces its crawl fetched exactly
//! ([`Pieces`]), found on the file's disk cache at open, kept there while
//! the file is open (once they have grown enough to be worth the write)
//! and at close, never an older snapshot after a newer one, never by a
//! forked child.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

use super::{Here, Pieces, PiecesBudget};
use crate::cache::{Keeper, Served, SideStore};
use crate::extension::Extension;
use crate::stats::RoundMark;
use crate::sync;
use crate::wait::Stop;

/// The file's store, made the first time the driver asks (with the pieces
/// an earlier run kept on the file's disk cache). `None` only if another
/// layer put a store of its own beside the file's blocks.
fn store(file: Extension<'_>) -> Option<&PieceStore> {
    file.side_store(|setup| {
        let mut store = PieceStore::new(setup.budget);
        if let Some(disk) = setup.disk {
            store.load(disk, setup.size);
        }
        store
    })
}

/// The bytes of pieces found on the file's disk cache when its store was
/// made.
pub(crate) fn found_at_open(file: Extension<'_>) -> u64 {
    store(file).map_or(0, |s| s.found_at_open)
}

/// Keeps the file's pieces on its disk cache, if it has one and they have
/// grown enough since they were last kept: the next run finds them there
/// even if this one is killed.
pub(crate) fn keep_while_open(file: Extension<'_>) {
    if let (Some(disk), Some(store)) = (file.keeper(), store(file)) {
        store.keep(disk, Keep::WhileOpen);
    }
}

/// The cached bytes from `pos` on, through consecutive cached blocks (or
/// else through the piece holding `pos`), at most `max` of them: empty if
/// neither holds `pos`. Counts no read: it is for parsing what guesses
/// brought.
pub(crate) fn cached_from(file: Extension<'_>, pos: u64, max: usize) -> Vec<u8> {
    let from_blocks = file.cached_from(pos, max);
    if from_blocks.is_empty() {
        return store(file).map_or_else(Vec::new, |s| s.pieces.bytes_from(pos, max));
    }
    from_blocks
}

/// Whether the file's pieces, here or still coming, hold all of `range`.
pub(crate) fn holds_or_fetches(file: Extension<'_>, range: Range<u64>) -> bool {
    store(file).is_some_and(|s| s.pieces.holds_or_fetches(range))
}

/// Fetches `ranges` exactly, as pieces, on the calling thread: at most
/// `max_bytes` of them, those of the file's blocks in memory or on disk
/// excepted, in one round of at most the file's guess concurrency.
/// Returns the bytes fetched. A failure costs the guess only: readers of
/// those bytes read blocks and meet it themselves. If the pieces' budget,
/// which the files sharing the block cache share, has no room for them,
/// they are fetched as blocks, which the cache evicts as it must.
pub(crate) fn guess(file: Extension<'_>, ranges: Vec<Range<u64>>, max_bytes: u64) -> u64 {
    let size = file.size();
    let mut wanted: Vec<Range<u64>> = ranges
        .into_iter()
        .map(|r| r.start.min(size)..r.end.min(size))
        .filter(|r| !r.is_empty() && !file.is_cached(r.clone()))
        .collect();
    if file.has_disk_cache() && !wanted.is_empty() {
        // Blocks on disk cost no request: whatever they hold is read from
        // there, and only what they do not hold is fetched.
        file.take_from_disk(wanted.iter().cloned());
        wanted.retain(|r| !file.is_cached(r.clone()));
    }
    let mut total = 0u64;
    wanted.retain(|r| {
        total = total.saturating_add(r.end - r.start);
        total <= max_bytes
    });
    let bytes: u64 = wanted.iter().map(|r| r.end - r.start).sum();
    let Some(pieces) = store(file)
        .map(|s| &s.pieces)
        .filter(|p| p.budget().has_room(bytes))
    else {
        return file.prefetch_here(wanted, max_bytes);
    };
    let taken = pieces.claim(&wanted, file.round_mark());
    let fetched = taken.iter().map(|r| r.end - r.start).sum();
    if !taken.is_empty() {
        file.fetch_exact(taken, |range, bytes| pieces.deliver(range, bytes));
    }
    fetched
}

/// When a file's pieces are kept on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// The crawl has nothing left to fetch for now: more may come.
    WhileOpen,
    /// The file is closed: nothing more comes.
    AtClose,
}

/// A file's pieces, and what of them its disk cache holds.
struct PieceStore {
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
    fn new(budget: Arc<PiecesBudget>) -> PieceStore {
        PieceStore {
            pieces: Pieces::new(budget),
            kept: Default::default(),
            opened_in: sync::MadeIn::here(),
            found_at_open: 0,
        }
    }

    /// Takes the pieces `disk` keeps for a file of `size` bytes, and counts
    /// them as kept.
    fn load(&mut self, disk: &dyn Keeper, size: u64) {
        self.pieces.put(disk.read_pieces(size));
        let (arrivals, here) = self.pieces.here();
        let kept = Kept::of(arrivals, &here);
        *self.kept.get_mut() = kept;
        self.found_at_open = kept.bytes;
    }

    fn keep(&self, disk: &dyn Keeper, when: Keep) {
        if self.opened_in.inherited() {
            return;
        }
        let mut kept = self.kept.lock();
        let (arrivals, here) = self.pieces.here();
        let now = Kept::of(arrivals, &here);
        if worth_keeping(*kept, now, when) {
            disk.write_pieces(&mut here.iter().map(|(start, bytes)| (*start, &bytes[..])));
            *kept = now;
        }
    }
}

impl SideStore for PieceStore {
    fn holds(&self, range: Range<u64>) -> bool {
        self.pieces.holds(range)
    }

    fn read(
        &self,
        pos: u64,
        buf: &mut [u8],
        wait: Option<&Stop>,
        rounds_so_far: RoundMark,
    ) -> Served {
        self.pieces.read(pos, buf, wait, rounds_so_far)
    }

    fn at_close(&self, disk: &dyn Keeper) {
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
    use std::sync::Arc;

    use super::*;
    use crate::engine::tests::{BLOCK, TempDisk, asked_by_position, file_over, read};
    use crate::open::open_over;

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

    /// The driver's side store, through the extension API: pieces serve reads, reach
    /// the disk when the file closes and come back from there at the next open.
    #[test]
    fn pieces_serve_reads_and_are_kept_on_disk_when_the_file_closes() {
        let disk = TempDisk::new("pieces");
        let (bytes, source, file) = file_over(16, &disk.builder());
        let open = || open_over(&disk.builder(), Arc::clone(&source));
        let pieces = [1000..1100, 5 * BLOCK + 7..5 * BLOCK + 57];
        assert_eq!(found_at_open(file.extension()), 0);
        assert_eq!(guess(file.extension(), pieces.to_vec(), u64::MAX), 150);
        let asked = asked_by_position(&source);
        assert_eq!(asked, pieces, "exactly the pieces, no block");
        for r in &pieces {
            assert!(file.extension().is_cached(r.clone()));
            let got = read(&file, r.start, (r.end - r.start) as usize).unwrap();
            assert!(got == bytes[r.start as usize..r.end as usize]);
        }
        assert_eq!(source.asked().len(), 2, "the reads took nothing more");
        drop(file);
        let file = open();
        assert_eq!(found_at_open(file.extension()), 150);
        let got = read(&file, 1010, 80).unwrap();
        assert!(got == bytes[1010..1090]);
        assert_eq!(source.asked().len(), 2, "the pieces came from disk");
    }
}
