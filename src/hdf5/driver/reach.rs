//! How deep a crawl may go where bytes are dear: as deep as HDF5 has read.
//!
//! A file's metadata is a graph of levels, two to a group's depth: the
//! root group's object header is level 2 and the structures that list its
//! members (B-tree, symbol nodes, local heap, or a fractal heap of links)
//! level 3; its members' headers are level 4 and what lists theirs level 5,
//! and so on. What else a header points to (its continuation blocks, its
//! attributes' heap) is of the header's level, but a dataset's chunk index
//! is a level below it: reading values goes deeper than reading attributes.
//! A survey that reads the attributes of the root's members two levels
//! down reads levels 2 to 6 and no further, where a full walk reads them
//! all.
//!
//! Where bytes are cheap the crawl fetches the whole graph ahead of HDF5.
//! Where they are dear it fetches the levels HDF5 has reached (the root's
//! members listed at least): once HDF5 reads one structure of a level,
//! every structure of that level comes in the crawl's next waves, and the
//! first of the next level HDF5 asks for opens that one. A survey then
//! fetches about what it reads, and a walk that goes deeper takes about a
//! round a level more.
//!
//! A [`Batch`](super::many::Batch) crawls files before any open reads them:
//! its files share one [`Reach`], raised by whichever of them HDF5 reads, so
//! a file crawled ahead goes as deep as the opens before it read. Until the
//! first open of the batch has closed (and so shown how deep it went), a
//! file crawled ahead waits for the reach to rise, at most
//! [`FIRST_OPEN_WAIT`]; from then on the reach is the shallowest any closed
//! open read.

use std::time::{Duration, Instant};

use crate::hdf5::meta::What;
use crate::sync::{Condvar, Mutex};

/// The least reach: the root group's header and the structures that list
/// its members, which nearly every use of a file reads.
pub(crate) const LEAST_REACH: u16 = 3;

/// The longest a file crawled ahead by a batch waits for the batch's first
/// open to show how deep it reads; then its crawl ends where it got to (its
/// own open goes on with it).
pub(crate) const FIRST_OPEN_WAIT: Duration = Duration::from_secs(10);

/// Whether `what` is the first structure that lists a group's members.
fn lists_members(what: What) -> bool {
    matches!(
        what,
        What::GroupNode | What::LocalHeap | What::FractalHeap { links: true }
    )
}

/// The level of a structure `what` found in a piece of `parent`'s level and
/// kind (`None`: the superblock, or a piece nothing pointed to, whose
/// pointers are taken as the root's).
pub(crate) fn child_level(parent: u16, parent_what: Option<What>, what: What) -> u16 {
    let header = parent & !1;
    let Some(parent_what) = parent_what else {
        return match what {
            What::ObjectHeader => 2,
            w if lists_members(w) => 3,
            _ => parent,
        };
    };
    match what {
        // A member, listed by its group's structures or linked from a
        // header: a group deeper than the header above.
        What::ObjectHeader => header.saturating_add(2),
        // A symbol node's entry caches its member group's B-tree and heap.
        w if lists_members(w) && parent_what == What::SymbolNode => header.saturating_add(3),
        w if lists_members(w) && parent & 1 == 0 => parent.saturating_add(1),
        // A dataset's chunk index is read by what reads its values, which
        // goes deeper than what reads its header's attributes.
        w if w.lies_among_raw_data() && parent & 1 == 0 => parent.saturating_add(1),
        _ => parent,
    }
}

/// The deepest level the files of a batch have been read to, shared by
/// their crawls.
#[derive(Debug, Default)]
pub(crate) struct Reach {
    state: Mutex<Shared>,
    changed: Condvar,
}

#[derive(Debug, Default, Clone, Copy)]
struct Shared {
    level: u16,
    /// An open of the batch has closed: the level is what a whole open read.
    settled: bool,
    /// Bumped by [`Reach::wake`]: waiters look again for a stop.
    wakes: u64,
}

/// What a crawl that waits for the reach learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// The level rose to this.
    Rose(u16),
    /// It will not rise for this crawl: settled, stopped or out of time.
    Done,
}

impl Reach {
    /// The deepest level read so far.
    pub fn level(&self) -> u16 {
        self.state.lock().level
    }

    /// HDF5 read a structure of `level` in one of the files.
    pub fn raise(&self, level: u16) {
        let mut state = self.state.lock();
        if !state.settled && level > state.level {
            state.level = level;
            drop(state);
            self.changed.notify_all();
        }
    }

    /// An open of one of the files closed.
    ///
    /// Its HDF5 read as deep as `read` (its own reach): the level from then
    /// on is the shallowest a closed open read, so that one file read
    /// deeper than the others (an odd layout, a look further in) does not
    /// send every crawl ahead of its open that deep. A file read deeper
    /// than that is crawled further by its own open as HDF5 reads it.
    pub fn settle(&self, read: u16) {
        let mut state = self.state.lock();
        let read = read.max(LEAST_REACH);
        state.level = if state.settled {
            state.level.min(read)
        } else {
            read
        };
        state.settled = true;
        drop(state);
        self.changed.notify_all();
    }

    /// Wakes the crawls waiting, to look for a stop.
    pub fn wake(&self) {
        self.state.lock().wakes += 1;
        self.changed.notify_all();
    }

    /// Waits until the level rises above `above`, the reach settles,
    /// `stopped` says so (looked at on every [`wake`](Self::wake)), or
    /// `deadline`.
    pub fn wait_above(&self, above: u16, deadline: Instant, stopped: impl Fn() -> bool) -> Waited {
        let mut state = self.state.lock();
        loop {
            if state.level > above {
                return Waited::Rose(state.level);
            }
            if state.settled || stopped() || Instant::now() >= deadline {
                return Waited::Done;
            }
            let wakes = state.wakes;
            let (next, _) = self.changed.wait_until(state, deadline);
            state = next;
            if state.wakes != wakes && stopped() {
                return Waited::Done;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

    #[test]
    fn a_group_is_two_levels_its_header_and_what_lists_its_members() {
        use What::*;
        // The superblock points to the root's header, and caches its
        // B-tree and heap.
        assert_eq!(child_level(0, None, ObjectHeader), 2);
        assert_eq!(child_level(0, None, GroupNode), 3);
        assert_eq!(child_level(0, None, LocalHeap), 3);
        // A header's member lists; its own parts keep its level.
        assert_eq!(child_level(2, Some(ObjectHeader), GroupNode), 3);
        assert_eq!(
            child_level(2, Some(ObjectHeader), FractalHeap { links: true }),
            3
        );
        assert_eq!(
            child_level(2, Some(ObjectHeader), FractalHeap { links: false }),
            2
        );
        assert_eq!(child_level(2, Some(ObjectHeader), ContinuationV1), 2);
        assert_eq!(child_level(2, Some(ObjectHeader), ChunkNode { dims: 2 }), 3);
        assert_eq!(
            child_level(3, Some(ChunkNode { dims: 2 }), ChunkNode { dims: 2 }),
            3
        );
        assert_eq!(child_level(4, Some(ObjectHeader), ArrayIndex), 5);
        // Within a list, the list's level; its entries' headers one deeper.
        assert_eq!(child_level(3, Some(GroupNode), SymbolNode), 3);
        assert_eq!(child_level(3, Some(GroupNode), GroupNode), 3);
        assert_eq!(child_level(3, Some(LocalHeap), HeapData), 3);
        assert_eq!(child_level(3, Some(SymbolNode), ObjectHeader), 4);
        // A symbol node caches its member group's lists: the member's.
        assert_eq!(child_level(3, Some(SymbolNode), GroupNode), 5);
        assert_eq!(child_level(3, Some(SymbolNode), LocalHeap), 5);
        // Links kept in a header point to headers a group deeper.
        assert_eq!(child_level(4, Some(ObjectHeader), ObjectHeader), 6);
        assert_eq!(
            child_level(u16::MAX, Some(SymbolNode), ObjectHeader),
            u16::MAX
        );
    }

    #[test]
    fn a_waiting_crawl_wakes_when_the_level_rises_settles_or_stops() {
        let far = Instant::now() + Duration::from_secs(600);
        let reach = Arc::new(Reach::default());
        reach.raise(2);
        assert_eq!(reach.wait_above(1, far, || false), Waited::Rose(2));

        let waiter = {
            let reach = Arc::clone(&reach);
            std::thread::spawn(move || reach.wait_above(2, far, || false))
        };
        reach.raise(1);
        reach.raise(3);
        assert_eq!(waiter.join().unwrap(), Waited::Rose(3));

        let stop = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (reach, stop) = (Arc::clone(&reach), Arc::clone(&stop));
            std::thread::spawn(move || reach.wait_above(3, far, || stop.load(SeqCst)))
        };
        stop.store(true, SeqCst);
        reach.wake();
        assert_eq!(waiter.join().unwrap(), Waited::Done);

        reach.settle(6);
        assert_eq!(reach.wait_above(6, far, || false), Waited::Done);
        assert_eq!(reach.level(), 6, "what the closed open read");
        reach.raise(9);
        assert_eq!(reach.level(), 6, "settled: reads no longer raise it");
        reach.settle(10);
        assert_eq!(reach.level(), 6, "the shallowest closed open's");
        reach.settle(4);
        assert_eq!(reach.level(), 4);
        let past = Instant::now();
        let fresh = Reach::default();
        assert_eq!(fresh.wait_above(0, past, || false), Waited::Done);
    }
}
