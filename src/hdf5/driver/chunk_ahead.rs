//! Read-ahead along a chunk index: pure decisions, no I/O.
//!
//! HDF5 reads a selection of a chunked dataset one chunk at a time, in the
//! chunk index's order. The index's leaves (parsed from the bytes HDF5 read,
//! [`crate::hdf5::meta`]) say where each chunk is stored and how long it is —
//! compressed chunks are not all the same length — so a read of the chunk
//! that follows the last one read fetches the next few chunks' exact
//! extents ahead of HDF5, as a stream of chunks rather than of bytes: never
//! past the chunks the index lists, never a byte between them, and nothing
//! for a read that does not continue a run (random access costs no extra
//! bytes).
//!
//! A chunk larger than HDF5's chunk cache is not read whole: HDF5 reads the
//! bytes a selection needs straight from the file, a strided selection (one
//! column of a row-major chunk, say) through its sieve buffer in pieces one
//! after another. Two such pieces in a row that miss make a stream through
//! the chunk: the rest of it comes in one fetch (random access inside a
//! chunk costs at most the rest of that chunk), and once the stream has
//! crossed into a next chunk, the chunks after it come too, so a column
//! across many chunks takes a few rounds rather than one per piece.
//!
//! The index a file's crawl learns is weighed against the process's budget
//! for crawl tables ([`crate::process::CRAWL_MEMORY`]): a leaf whose chunks
//! do not fit is left out (its chunks are read without read-ahead), and
//! the indexes of all files together leave a quarter of the budget to the
//! tables every file's walk needs ([`crate::process::CRAWL_CHUNK_MEMORY`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Range;

use crate::cache::budget::{Charge, MemoryBudget, Table, btree_bytes, room_for};
use crate::hdf5::meta::ChunkLeaf;

/// A run reads ahead at least this many chunks of the size of the one just
/// read: HDF5 asks for them one by one, so each not fetched ahead would cost
/// a round trip.
pub(crate) const CHUNKS_AHEAD: u64 = 4;

/// A read of the chunk read last that starts at most this far past the end
/// of the one before (or at most its own length) follows it: HDF5 1.10
/// reads a column of a chunk it does not cache an element at a time, a row
/// apart.
const STREAM_GAP: u64 = 64 * 1024;

/// The most chunks remembered of one file, whatever the budget; past that,
/// chunks of further leaves are read without read-ahead.
const MAX_CHUNKS: usize = 1 << 20;

/// The bytes of a budget of `capacity` that chunk indexes leave to the
/// other tables: a quarter.
pub(crate) fn chunk_reserve(capacity: u64) -> u64 {
    capacity - capacity / 4 * 3
}

/// What the index of `chunks` chunks listed in `leaves` leaves weighs at
/// most, as [`ChunkAhead`] keeps it: each chunk its place in its leaf's
/// list and its entry in the map by address; each leaf its place among the
/// leaves and in the map of them by address, both at their emptiest (just
/// grown to twice what they hold).
#[cfg(test)]
fn index_bytes(chunks: usize, leaves: usize) -> u64 {
    let lists = Vec::<Range<u64>>::weigh(chunks);
    let by_address = btree_bytes(chunks, size_of::<u64>(), size_of::<Place>());
    let room = leaves.saturating_mul(2);
    let leaf_tables = Vec::<ChunkLeaf>::weigh(room) + HashMap::<u64, u32>::weigh(room);
    lists + by_address + leaf_tables
}

/// One read HDF5 made of a chunk's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkRead {
    pub addr: u64,
    pub len: u64,
    /// Whether some of the bytes were neither cached nor being fetched.
    pub missed: bool,
}

/// Where a chunk is listed: its leaf (its position among the leaves) and
/// its position there. Four bytes each: a leaf lists at most
/// [`crate::hdf5::meta::MAX_TARGETS`] chunks, and a file at most
/// [`MAX_CHUNKS`] in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Place {
    leaf: u32,
    index: u32,
}

/// The run of chunks HDF5 is reading in the index's order.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// The chunk read last.
    last: Place,
    /// Where the last read of it ended.
    last_end: u64,
    /// How far into it the run has asked for its rest (0: not at all).
    rest_asked_to: u64,
    /// Whether the run went on from one chunk into the next.
    crossed: bool,
    /// The first chunk not yet asked for (`None`: the index ends there, or
    /// its next leaf is not known).
    next_to_fetch: Option<Place>,
    /// The bytes the last step asked for ahead (0 before the first).
    window: u64,
}

/// The chunk index as far as HDF5 has read it, and the run being read.
#[derive(Debug)]
pub(crate) struct ChunkAhead {
    /// The leaves known, none empty.
    leaves: Vec<ChunkLeaf>,
    /// Each leaf's position in `leaves` by its address.
    leaf_at: HashMap<u64, u32>,
    /// Chunks by their first byte: where they are listed.
    chunks: BTreeMap<u64, Place>,
    run: Option<Run>,
    /// The chunks (by first byte) the run asked for that HDF5 has not read.
    asked: BTreeSet<u64>,
    weights: Weights,
}

/// What the tables of a [`ChunkAhead`] hold of the crawl's budget.
#[derive(Debug)]
struct Weights {
    leaves: Charge,
    leaf_at: Charge,
    /// The leaves' lists of chunks and the map of chunks by address.
    chunks: Charge,
    /// The bytes of the leaves' lists.
    lists: u64,
    asked: Charge,
    /// The bytes of the budget left to other tables.
    reserve: u64,
}

/// An index with a budget of its own, as large as the process's.
#[cfg(test)]
impl Default for ChunkAhead {
    fn default() -> ChunkAhead {
        ChunkAhead::new(crate::cache::budget::leaked(crate::process::CRAWL_MEMORY))
    }
}

impl ChunkAhead {
    /// An index whose tables take their bytes from `budget`.
    pub fn new(budget: &'static MemoryBudget) -> ChunkAhead {
        ChunkAhead {
            leaves: Vec::new(),
            leaf_at: HashMap::new(),
            chunks: BTreeMap::new(),
            run: None,
            asked: BTreeSet::new(),
            weights: Weights {
                leaves: Charge::new(budget),
                leaf_at: Charge::new(budget),
                chunks: Charge::new(budget),
                lists: 0,
                asked: Charge::new(budget),
                reserve: chunk_reserve(budget.capacity()),
            },
        }
    }

    /// The bytes its tables hold of the budget.
    pub fn bytes(&self) -> u64 {
        let w = &self.weights;
        w.leaves.bytes() + w.leaf_at.bytes() + w.chunks.bytes() + w.asked.bytes()
    }

    /// Takes note of a leaf of a chunk index, read at `addr`, if its chunks
    /// fit in the budget. A leaf that lists a chunk of no bytes (no index
    /// HDF5 writes does) is damaged or hostile and left out: its chunks are
    /// read without read-ahead. So is one of no chunks, which has none to
    /// read ahead.
    pub fn add_leaf(&mut self, addr: u64, mut leaf: ChunkLeaf) {
        if self.leaf_at.contains_key(&addr)
            || leaf.chunks.is_empty()
            || self.chunks.len() + leaf.chunks.len() > MAX_CHUNKS
            || leaf.chunks.iter().any(|c| c.end <= c.start)
        {
            return;
        }
        if leaf.next_leaf == Some(addr) {
            leaf.next_leaf = None;
        }
        leaf.chunks.shrink_to_fit();
        let w = &mut self.weights;
        // The leaf's list and an entry for each of its chunks, or nothing.
        let list = Vec::<Range<u64>>::weigh(leaf.chunks.capacity());
        let entries = btree_bytes(
            self.chunks.len() + leaf.chunks.len(),
            size_of::<u64>(),
            size_of::<Place>(),
        );
        let fits = room_for(&mut self.leaves, 1, &mut w.leaves, w.reserve)
            && room_for(&mut self.leaf_at, 1, &mut w.leaf_at, w.reserve)
            && w.chunks.set(w.lists + list + entries, w.reserve);
        if !fits {
            return;
        }
        let id = self.leaves.len() as u32;
        for (index, chunk) in leaf.chunks.iter().enumerate() {
            let place = Place {
                leaf: id,
                index: index as u32,
            };
            self.chunks.insert(chunk.start, place);
        }
        // Chunks some leaf listed already took no entry of their own.
        w.lists += list;
        let entries = btree_bytes(self.chunks.len(), size_of::<u64>(), size_of::<Place>());
        w.chunks.set(w.lists + entries, 0);
        self.leaf_at.insert(addr, id);
        self.leaves.push(leaf);
    }

    /// Whether a read of `len` bytes at `addr` lies inside one known chunk.
    pub fn is_chunk(&self, addr: u64, len: u64) -> bool {
        self.chunk_at(addr)
            .is_some_and(|(bytes, _)| addr.saturating_add(len) <= bytes.end)
    }

    /// Records HDF5's read (inside a known chunk, see
    /// [`is_chunk`](Self::is_chunk)) and returns the chunks to fetch ahead of
    /// it, by the module's rule: a run's step is at first [`CHUNKS_AHEAD`]
    /// chunks' worth, then twice the last, never less than `floor` (the
    /// link's bandwidth-delay product, say) nor more than `max`; a missed
    /// piece that follows the last within [`STREAM_GAP`] asks for the rest of
    /// its chunk. Only a read that `missed`, or one of a chunk the run asked
    /// for, asks for more.
    pub fn on_read(&mut self, read: ChunkRead, floor: u64, max: u64) -> Vec<Range<u64>> {
        let ChunkRead { addr, len, missed } = read;
        let Some((bytes, place)) = self.chunk_at(addr) else {
            self.end_run();
            return Vec::new();
        };
        let end = addr.saturating_add(len);
        let asked = self.asked.remove(&bytes.start);
        if asked {
            let left = btree_bytes(self.asked.len(), size_of::<u64>(), 0);
            self.weights.asked.set(left, 0);
        }
        match self.run {
            // More of the chunk read last: a piece that follows the last one
            // closely and missed is a stream through a chunk HDF5 reads in
            // pieces (see the module's docs).
            Some(run) if run.last == place => {
                let follows = addr >= run.last_end && addr - run.last_end <= len.max(STREAM_GAP);
                let mut run = Run {
                    last_end: run.last_end.max(end),
                    ..run
                };
                let ahead = if missed && follows && end > run.rest_asked_to {
                    let may_ask = run.crossed;
                    self.ahead_of(&mut run, Some(end), may_ask, (floor, max))
                } else {
                    Vec::new()
                };
                self.run = Some(run);
                ahead
            }
            Some(run) if self.after(run.last) == Some(place) => {
                // A read from the start of a chunk not asked for that stops
                // short: where a row-major selection ends, or the first piece
                // of a chunk HDF5 reads in pieces. Nothing is asked for until
                // a second piece shows which.
                if addr == bytes.start && end < bytes.end && !asked {
                    return self.step(run, place, (end, false), (floor, max), false);
                }
                let may_ask = missed || asked;
                self.step(run, place, (end, missed), (floor, max), may_ask)
            }
            // From inside a chunk to its end: a selection that goes on into
            // the chunks after this one, which come along with it.
            _ if addr > bytes.start && end == bytes.end && missed => {
                let mut run = self.start_run(place, end);
                let ahead = self.ask(&mut run, bytes.end - bytes.start, (floor, max), Vec::new());
                self.run = Some(run);
                ahead
            }
            _ => {
                self.start_run(place, end);
                Vec::new()
            }
        }
    }

    /// Ends the run there is and starts one at the chunk at `place`, read up
    /// to `end`.
    fn start_run(&mut self, place: Place, end: u64) -> Run {
        self.end_run();
        let run = Run {
            last: place,
            last_end: end,
            rest_asked_to: 0,
            crossed: false,
            next_to_fetch: self.after(place),
            window: 0,
        };
        self.run = Some(run);
        run
    }

    /// Continues `run` into the chunk at `place` with a read up to `end`,
    /// and returns what to fetch ahead (if `may_ask`). A read that `missed`
    /// and stops short of the chunk's end is a piece of it, whose rest is
    /// asked for too (a selection that ends there reads from the chunk's
    /// start, which the caller passes as not missed).
    fn step(
        &mut self,
        run: Run,
        place: Place,
        (end, missed): (u64, bool),
        bounds: (u64, u64),
        may_ask: bool,
    ) -> Vec<Range<u64>> {
        let mut run = Run {
            last: place,
            last_end: end,
            rest_asked_to: 0,
            crossed: true,
            next_to_fetch: match run.next_to_fetch {
                Some(p) if p == place => self.after(place),
                other => other,
            },
            ..run
        };
        let ahead = self.ahead_of(&mut run, missed.then_some(end), may_ask, bounds);
        self.run = Some(run);
        ahead
    }

    /// What to fetch ahead of a read of the chunk `run` read last: the rest
    /// of the chunk from `rest_from` on, if given (at most `max` bytes of
    /// it: a read further on asks for more), and, if `may_ask` and the run
    /// has reached the last chunk it asked for, its next step.
    fn ahead_of(
        &mut self,
        run: &mut Run,
        rest_from: Option<u64>,
        may_ask: bool,
        (floor, max): (u64, u64),
    ) -> Vec<Range<u64>> {
        let Some(chunk) = self.chunk(run.last) else {
            return Vec::new();
        };
        let max = max.max(1);
        let rest = rest_from
            .map(|from| from..chunk.end.min(from.saturating_add(max)))
            .filter(|rest| !rest.is_empty());
        if let Some(rest) = &rest {
            run.rest_asked_to = rest.end;
        }
        let reached_the_end = may_ask
            && rest.as_ref().is_none_or(|rest| rest.end == chunk.end)
            && run.next_to_fetch.is_some()
            && run.next_to_fetch == self.after(run.last);
        let ahead: Vec<Range<u64>> = rest.into_iter().collect();
        if reached_the_end {
            self.ask(run, chunk.end - chunk.start, (floor, max), ahead)
        } else {
            ahead
        }
    }

    /// The next step of `run`: the chunks from its first not asked for, up
    /// to its grown window (the first step's from chunks of `chunk_len`),
    /// after the ranges `ahead` the step asks for already (which count
    /// towards it).
    fn ask(
        &mut self,
        run: &mut Run,
        chunk_len: u64,
        (floor, max): (u64, u64),
        mut ahead: Vec<Range<u64>>,
    ) -> Vec<Range<u64>> {
        run.window = if run.window == 0 {
            chunk_len.saturating_mul(CHUNKS_AHEAD).max(floor)
        } else {
            run.window.saturating_mul(2)
        }
        .min(max.max(1));
        let mut asked: u64 = ahead.iter().map(|r| r.end - r.start).sum();
        // Leaves whose siblings lead back to one another would go round for
        // ever: each chunk is asked for once a step.
        let mut visited = HashSet::new();
        while let Some(p) = run.next_to_fetch.filter(|_| asked < run.window) {
            if !visited.insert(p) {
                break;
            }
            let Some(bytes) = self.chunk(p) else { break };
            // Never more than a step may ask for, whatever length a damaged
            // or hostile index gives a chunk: HDF5 reads such a chunk itself.
            if asked + (bytes.end - bytes.start) > max.max(1) {
                break;
            }
            // A chunk asked for is remembered until HDF5 reads it: one the
            // budget has no room to remember is not asked for. The run's
            // chunks are given back as they are read, so they may take
            // from the quarter the indexes leave (an index that filled its
            // share still reads ahead).
            let more = btree_bytes(self.asked.len() + 1, size_of::<u64>(), 0);
            if !self.asked.contains(&bytes.start) {
                if !self.weights.asked.set(more, 0) {
                    break;
                }
                self.asked.insert(bytes.start);
            }
            asked += bytes.end - bytes.start;
            match ahead.last_mut() {
                Some(last) if last.end == bytes.start => last.end = bytes.end,
                _ => ahead.push(bytes),
            }
            run.next_to_fetch = self.after(p);
        }
        ahead
    }

    fn end_run(&mut self) {
        self.run = None;
        self.asked.clear();
        self.weights.asked.set(0, 0);
    }

    /// The chunk containing `addr`, and where it is listed.
    fn chunk_at(&self, addr: u64) -> Option<(Range<u64>, Place)> {
        let (_, &place) = self.chunks.range(..=addr).next_back()?;
        let bytes = self.chunk(place)?;
        (addr < bytes.end).then_some((bytes, place))
    }

    /// The chunk listed after `place`, if its leaf is known.
    fn after(&self, place: Place) -> Option<Place> {
        let leaf = self.leaves.get(place.leaf as usize)?;
        if (place.index as usize) + 1 < leaf.chunks.len() {
            return Some(Place {
                index: place.index + 1,
                ..place
            });
        }
        let next = *self.leaf_at.get(&leaf.next_leaf?)?;
        // Every leaf kept lists a chunk.
        Some(Place {
            leaf: next,
            index: 0,
        })
    }

    fn chunk(&self, place: Place) -> Option<Range<u64>> {
        self.leaves
            .get(place.leaf as usize)?
            .chunks
            .get(place.index as usize)
            .cloned()
    }
}

#[cfg(test)]
// One range of chunks is the expected answer, not a mistaken `Vec` of them.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A leaf at 0 of `n` chunks of `len` bytes each, stored one after the
    /// other from 1 MiB on.
    fn index(n: u64, len: u64) -> ChunkAhead {
        let mut ahead = ChunkAhead::default();
        let chunks = (0..n).map(|i| MIB + i * len..MIB + (i + 1) * len).collect();
        ahead.add_leaf(
            0,
            ChunkLeaf {
                chunks,
                next_leaf: None,
            },
        );
        ahead
    }

    fn chunk(i: u64, len: u64) -> u64 {
        MIB + i * len
    }

    fn miss(addr: u64, len: u64) -> ChunkRead {
        ChunkRead {
            addr,
            len,
            missed: true,
        }
    }

    fn hit(addr: u64, len: u64) -> ChunkRead {
        ChunkRead {
            missed: false,
            ..miss(addr, len)
        }
    }

    /// Runs `f` on another thread and fails if it has not returned within
    /// ten seconds (a loop that never ends would hang the test run).
    fn ends<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(f()));
        result
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("did not end")
    }

    #[test]
    fn a_leaf_that_is_its_own_sibling_ends_each_step() {
        let ahead = ends(|| {
            let mut a = ChunkAhead::default();
            let leaf = |chunks| ChunkLeaf {
                chunks,
                next_leaf: Some(0),
            };
            // One of no bytes, which would never fill a window.
            a.add_leaf(0, leaf(vec![MIB..MIB + 100, MIB + 100..MIB + 100]));
            assert!(
                !a.is_chunk(MIB, 100),
                "a leaf with an empty chunk is left out"
            );
            // Two leaves naming each other, one byte a chunk.
            a.add_leaf(0, leaf(vec![MIB..MIB + 1]));
            a.add_leaf(
                10,
                ChunkLeaf {
                    chunks: vec![2 * MIB..2 * MIB + 1],
                    next_leaf: Some(0),
                },
            );
            let first = a.leaf_at[&0] as usize;
            a.leaves[first].next_leaf = Some(10);
            a.on_read(miss(MIB, 1), 0, 64 * MIB);
            a.on_read(miss(2 * MIB, 1), 0, 64 * MIB)
        });
        assert_eq!(
            ahead,
            [MIB..MIB + 1, 2 * MIB..2 * MIB + 1],
            "each chunk once"
        );
    }

    #[test]
    fn a_leaf_naming_itself_has_no_sibling() {
        let mut a = ChunkAhead::default();
        a.add_leaf(
            0,
            ChunkLeaf {
                chunks: vec![MIB..MIB + 10],
                next_leaf: Some(0),
            },
        );
        let ahead = ends(move || a.on_read(miss(MIB + 5, 5), 0, 64 * MIB));
        assert!(ahead.is_empty());
    }

    #[test]
    fn chunks_cached_already_are_read_without_fetching_past_them() {
        let len = MIB;
        let mut a = index(100, len);
        // A selection's chunks fetched beforehand, all of them.
        for i in 10..20 {
            assert!(a.on_read(hit(chunk(i, len), len), 0, 64 * MIB).is_empty());
        }
        // A run that asked for its chunks goes on asking when it reaches
        // the last, though that one is cached by then.
        a.on_read(miss(chunk(30, len), len), 0, 64 * MIB);
        assert_eq!(a.on_read(miss(chunk(31, len), len), 0, 64 * MIB).len(), 1);
        for i in 32..35 {
            assert!(a.on_read(hit(chunk(i, len), len), 0, 64 * MIB).is_empty());
        }
        let ahead = a.on_read(hit(chunk(35, len), len), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(36, len)..chunk(44, len)]);
    }

    #[test]
    fn a_chunk_longer_than_a_step_may_ask_for_is_never_asked_for() {
        let len = MIB;
        let mut chunks: Vec<Range<u64>> =
            (0..4).map(|i| MIB + i * len..MIB + (i + 1) * len).collect();
        // An index that says the next chunk is a terabyte long.
        chunks.push(5 * MIB..5 * MIB + (1 << 40));
        let mut a = ChunkAhead::default();
        a.add_leaf(
            0,
            ChunkLeaf {
                chunks,
                next_leaf: None,
            },
        );
        a.on_read(miss(chunk(0, len), len), 0, 64 * MIB);
        let ahead = a.on_read(miss(chunk(1, len), len), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(2, len)..chunk(4, len)]);
        assert!(a.on_read(hit(chunk(2, len), len), 0, 64 * MIB).is_empty());
        assert!(a.on_read(miss(chunk(3, len), len), 0, 64 * MIB).is_empty());
    }

    #[test]
    fn a_random_chunk_read_fetches_nothing_ahead() {
        let len = 2 * MIB;
        let mut a = index(100, len);
        for i in [7, 50, 3, 99, 20] {
            assert!(a.is_chunk(chunk(i, len), len));
            assert!(a.on_read(miss(chunk(i, len), len), 0, 64 * MIB).is_empty());
        }
        // Nor does a small read inside a chunk, or one outside the index.
        assert!(
            a.on_read(miss(chunk(5, len) + 100, 4096), 0, 64 * MIB)
                .is_empty()
        );
        assert!(!a.is_chunk(0, 4096));
        assert!(!a.is_chunk(chunk(99, len) + 1, len), "runs past the chunk");
    }

    #[test]
    fn a_run_fetches_the_following_chunks_exactly_in_growing_steps() {
        let len = 900_000;
        let mut a = index(100, len);
        assert!(a.on_read(miss(chunk(10, len), len), 0, 64 * MIB).is_empty());
        // The second chunk of a run: four chunks ahead, in one range.
        let ahead = a.on_read(miss(chunk(11, len), len), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(12, len)..chunk(16, len)]);
        for i in 12..15 {
            assert!(a.on_read(miss(chunk(i, len), len), 0, 64 * MIB).is_empty());
            // Reads within the chunk read last change nothing.
            assert!(
                a.on_read(miss(chunk(i, len) + 10, 10), 0, 64 * MIB)
                    .is_empty()
            );
        }
        // The last chunk asked for: twice as much, from where the last
        // step ended.
        let ahead = a.on_read(miss(chunk(15, len), len), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(16, len)..chunk(24, len)]);
        // A jump elsewhere ends the run.
        assert!(a.on_read(miss(chunk(60, len), len), 0, 64 * MIB).is_empty());
        assert!(a.on_read(miss(chunk(61, len), len), 0, 64 * MIB).len() == 1);
    }

    #[test]
    fn a_short_read_of_the_start_of_a_chunk_not_asked_for_asks_for_nothing() {
        let len = MIB;
        let mut a = index(100, len);
        a.on_read(miss(chunk(0, len), len), 0, 64 * MIB);
        a.on_read(miss(chunk(1, len), len), 0, 64 * MIB);
        // A row-major selection that ends inside the next chunk.
        assert!(
            a.on_read(miss(chunk(6, len), len), 0, 64 * MIB).is_empty(),
            "a new run"
        );
        assert!(a.on_read(miss(chunk(7, len), 4096), 0, 64 * MIB).is_empty());
        // Of a chunk asked for, it goes on with the run.
        let mut a = index(100, len);
        a.on_read(miss(chunk(0, len), len), 0, 64 * MIB);
        assert_eq!(a.on_read(miss(chunk(1, len), len), 0, 64 * MIB).len(), 1);
        for i in 2..5 {
            assert!(a.on_read(hit(chunk(i, len), 4096), 0, 64 * MIB).is_empty());
        }
        let ahead = a.on_read(hit(chunk(5, len), 4096), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(6, len)..chunk(14, len)]);
    }

    /// Reads one column (`column` bytes into rows of `row` bytes) of chunks
    /// `chunks`, from `first_row` of the first, each `width` bytes at a
    /// time, as HDF5 reads a chunk it does not cache (1.10: an element at a
    /// time; newer: through its sieve buffer). A read that misses fetches
    /// its 128 KiB blocks, as the engine does; returns the reads that
    /// missed (round trips) and the ranges fetched ahead.
    fn read_column(
        a: &mut ChunkAhead,
        (chunks, len): (Range<u64>, u64),
        (row, column, width, first_row): (u64, u64, u64, u64),
        max: u64,
    ) -> (u64, Vec<Range<u64>>) {
        const BLOCK: u64 = 128 * 1024;
        let mut cached: Vec<Range<u64>> = Vec::new();
        let mut ahead = Vec::new();
        let mut rounds = 0;
        for i in chunks.clone() {
            let skip = if i == chunks.start {
                first_row * row
            } else {
                0
            };
            let mut at = chunk(i, len) + skip + column;
            while at < chunk(i + 1, len) {
                let n = width.min(chunk(i + 1, len) - at);
                let missed = !cached.iter().any(|c| c.start <= at && at + n <= c.end);
                if missed {
                    rounds += 1;
                    cached.push(at / BLOCK * BLOCK..(at + n).div_ceil(BLOCK) * BLOCK);
                }
                let asked = a.on_read(
                    ChunkRead {
                        addr: at,
                        len: n,
                        missed,
                    },
                    0,
                    max,
                );
                assert!(asked.iter().all(|r| r.end - r.start <= max), "{asked:?}");
                cached.extend(asked.iter().cloned());
                ahead.extend(asked);
                at += if width == 2 { row } else { width };
            }
        }
        (rounds, ahead)
    }

    #[test]
    fn a_column_of_chunks_read_in_pieces_streams_through_them() {
        let len = 2 * MIB;
        // An element at a time (HDF5 1.10), from inside chunk 3 to the end.
        let mut a = index(10, len);
        let (rounds, ahead) = read_column(&mut a, (3..10, len), (128, 10, 2, 576), 64 * MIB);
        assert_eq!(rounds, 3, "two blocks of the first chunk, one of the next");
        // The rest from the end of the first element past the first block.
        let first = chunk(3, len) + 576 * 128 + 10;
        let block_end = (first / (128 * 1024) + 1) * (128 * 1024);
        let second = first + (block_end - first).div_ceil(128) * 128;
        assert_eq!(
            ahead,
            [
                second + 2..chunk(4, len),
                chunk(4, len) + 12..chunk(9, len),
                chunk(9, len)..chunk(10, len)
            ],
            "the rest of the chunk; in the next, its rest and four chunks' worth \
             after it; then the next step"
        );
        // Through a sieve buffer of 64 KiB (each piece from the column's
        // next byte), from the start of each chunk, under a lower cap, in a
        // run that has crossed into a chunk already.
        let mut a = index(40, len);
        a.on_read(miss(chunk(0, len), len), 0, 64 * MIB);
        let (rounds, ahead) = read_column(&mut a, (1..40, len), (128, 0, 65536, 0), 16 * MIB);
        assert_eq!(rounds, 2, "then a stream");
        let bytes: u64 = ahead.iter().map(|r| r.end - r.start).sum();
        // All but the first block and the piece read after it.
        let read = 128 * 1024 + 64 * 1024;
        assert_eq!(
            bytes,
            chunk(40, len) - chunk(1, len) - read,
            "each byte once"
        );
    }

    #[test]
    fn close_misses_inside_one_chunk_cost_at_most_its_rest() {
        let len = 2 * MIB;
        let mut a = index(10, len);
        // One channel of a chunk, from inside it to its end: a stream that
        // never crosses into the next chunk.
        let (rounds, ahead) = read_column(&mut a, (3..4, len), (128, 10, 2, 900), 64 * MIB);
        assert_eq!(rounds, 2);
        assert_eq!(ahead.len(), 1);
        assert!(ahead[0].end == chunk(4, len), "{ahead:?}: no chunk past it");
    }

    #[test]
    fn pieces_far_apart_in_a_chunk_ask_for_nothing() {
        let len = 8 * MIB;
        let mut a = index(10, len);
        for at in [100, 3 * MIB, 5 * MIB, 5 * MIB + 200_000] {
            let ahead = a.on_read(miss(chunk(2, len) + at, 4096), 0, 64 * MIB);
            assert!(ahead.is_empty(), "{at}");
        }
        // Going back does not make a stream either.
        a.on_read(miss(chunk(2, len) + 7 * MIB, 4096), 0, 64 * MIB);
        let ahead = a.on_read(miss(chunk(2, len) + 7 * MIB - 2048, 4096), 0, 64 * MIB);
        assert!(ahead.is_empty());
    }

    #[test]
    fn the_rest_of_a_chunk_longer_than_a_step_comes_a_step_at_a_time() {
        let len = 100 * MIB;
        let mut a = index(3, len);
        a.on_read(miss(chunk(1, len), MIB), 0, 16 * MIB);
        let ahead = a.on_read(miss(chunk(1, len) + MIB, MIB), 0, 16 * MIB);
        assert_eq!(ahead, [chunk(1, len) + 2 * MIB..chunk(1, len) + 18 * MIB]);
        for at in 2..18 {
            assert!(
                a.on_read(hit(chunk(1, len) + at * MIB, MIB), 0, 16 * MIB)
                    .is_empty()
            );
        }
        let ahead = a.on_read(miss(chunk(1, len) + 18 * MIB, MIB), 0, 16 * MIB);
        assert_eq!(ahead, [chunk(1, len) + 19 * MIB..chunk(1, len) + 35 * MIB]);
    }

    #[test]
    fn a_read_to_the_end_of_a_chunk_from_inside_it_fetches_the_next() {
        let len = 2 * MIB;
        let mut a = index(10, len);
        let ahead = a.on_read(miss(chunk(3, len) + 5000, len - 5000), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(4, len)..chunk(8, len)]);
        // The next reads continue the run and find their chunks asked for.
        for i in 4..7 {
            assert!(a.on_read(hit(chunk(i, len), len), 0, 64 * MIB).is_empty());
        }
        let ahead = a.on_read(hit(chunk(7, len), len), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(8, len)..chunk(10, len)], "to the index's end");
    }

    #[test]
    fn read_ahead_stops_at_the_index_end_and_its_floor_and_cap_hold() {
        let len = MIB;
        let mut a = index(6, len);
        a.on_read(miss(chunk(0, len), len), 0, 64 * MIB);
        // The floor asks for more than four chunks; the index has five more.
        let ahead = a.on_read(miss(chunk(1, len), len), 100 * MIB, 64 * MIB);
        assert_eq!(ahead, [chunk(2, len)..chunk(6, len)]);
        assert!(a.on_read(miss(chunk(2, len), len), 0, 64 * MIB).is_empty());
        let mut a = index(20, len);
        a.on_read(miss(chunk(0, len), len), 0, 2 * MIB);
        let ahead = a.on_read(miss(chunk(1, len), len), 0, 2 * MIB);
        assert_eq!(ahead, [chunk(2, len)..chunk(4, len)], "the cap");
    }

    #[test]
    fn a_run_goes_on_into_the_next_leaf() {
        let len = MIB;
        let mut a = ChunkAhead::default();
        let leaf = |first: u64, next| ChunkLeaf {
            chunks: (first..first + 2)
                .map(|i| chunk(i, len)..chunk(i + 1, len))
                .collect(),
            next_leaf: next,
        };
        a.add_leaf(500, leaf(0, Some(900)));
        a.add_leaf(900, leaf(2, None));
        a.on_read(miss(chunk(0, len), len), 0, 64 * MIB);
        let ahead = a.on_read(miss(chunk(1, len), len), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(2, len)..chunk(4, len)]);
    }

    /// `count` leaves of `per_leaf` chunks of 16 bytes each, one after the
    /// other from 1 MiB on, each leaf naming the next: an index as a crawl
    /// finds it.
    fn leaves(count: u64, per_leaf: u64) -> impl Iterator<Item = (u64, ChunkLeaf)> {
        (0..count).map(move |l| {
            let first = l * per_leaf;
            let chunks = (first..first + per_leaf).map(|i| chunk(i, 16)..chunk(i + 1, 16));
            let next_leaf = (l + 1 < count).then_some((l + 1) * 4096);
            let chunks = chunks.collect();
            (l * 4096, ChunkLeaf { chunks, next_leaf })
        })
    }

    #[test]
    fn an_index_weighs_about_sixty_bytes_a_chunk() {
        // A million chunks in leaves of 64 (HDF5's default of 2K entries).
        let per_chunk = index_bytes(1 << 20, 1 << 14) as f64 / (1 << 20) as f64;
        eprintln!("{per_chunk} bytes a chunk");
        assert!((58.0..62.0).contains(&per_chunk), "{per_chunk}");
        let mut a = ChunkAhead::default();
        for (addr, leaf) in leaves(100, 64) {
            a.add_leaf(addr, leaf);
        }
        assert_eq!(a.chunks.len(), 6400);
        assert!(a.bytes() <= index_bytes(6400, 100), "{}", a.bytes());
        assert!(a.bytes() >= index_bytes(6400, 100) / 10 * 9);
        // A leaf read twice, or listing nothing, adds nothing.
        let before = a.bytes();
        let (addr, leaf) = leaves(1, 64).next().unwrap();
        a.add_leaf(addr, leaf);
        let empty = ChunkLeaf {
            chunks: Vec::new(),
            next_leaf: None,
        };
        a.add_leaf(1, empty);
        assert_eq!(a.bytes(), before);
    }

    #[test]
    fn a_million_chunks_stop_at_the_indexes_share_of_the_budget() {
        use crate::process::{CRAWL_CHUNK_MEMORY, CRAWL_MEMORY};
        assert_eq!(
            chunk_reserve(CRAWL_MEMORY),
            CRAWL_MEMORY - CRAWL_CHUNK_MEMORY
        );
        let budget = crate::cache::budget::leaked(CRAWL_MEMORY);
        let mut a = ChunkAhead::new(budget);
        for (addr, leaf) in leaves(1 << 14, 64) {
            a.add_leaf(addr, leaf);
        }
        assert_eq!(budget.used(), a.bytes());
        assert!(a.bytes() <= CRAWL_CHUNK_MEMORY, "{}", a.bytes());
        let kept = a.chunks.len();
        eprintln!("{kept} of 2^20 chunks kept in {} bytes", a.bytes());
        assert!((800_000..1 << 20).contains(&kept), "{kept}");
        // Within a leaf of the share: the index stopped where it was full.
        assert!(a.bytes() + 64 * 60 + (64 << 10) > CRAWL_CHUNK_MEMORY);
        // The chunks kept read ahead, even with the share full; those left
        // out are not known as chunks, and HDF5 reads them as it asks.
        assert!(a.on_read(miss(chunk(0, 16), 16), 0, 64 * MIB).is_empty());
        let ahead = a.on_read(miss(chunk(1, 16), 16), 0, 64 * MIB);
        assert_eq!(ahead, [chunk(2, 16)..chunk(6, 16)]);
        assert!(!a.is_chunk(chunk((1 << 20) - 1, 16), 16));
        drop(a);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn files_sharing_the_budget_hold_at_most_it_and_a_closed_one_gives_back() {
        let budget = crate::cache::budget::leaked(4 << 20);
        let files: Vec<ChunkAhead> = (0..8)
            .map(|_| {
                let mut a = ChunkAhead::new(budget);
                for (addr, leaf) in leaves(400, 64) {
                    a.add_leaf(addr, leaf);
                }
                a
            })
            .collect();
        let total: u64 = files.iter().map(ChunkAhead::bytes).sum();
        assert_eq!(total, budget.used());
        assert!(total <= 3 << 20, "the indexes' share: {total}");
        let counts: Vec<usize> = files.iter().map(|a| a.chunks.len()).collect();
        assert_eq!(counts[..2], [25_600, 25_600], "{counts:?}");
        assert!(counts[2] < 25_600 && counts[7] == 0, "{counts:?}");
        drop(files);
        assert_eq!(budget.used(), 0);
        let mut again = ChunkAhead::new(budget);
        for (addr, leaf) in leaves(400, 64) {
            again.add_leaf(addr, leaf);
        }
        assert_eq!(again.chunks.len(), 25_600);
    }

    #[test]
    fn a_run_remembers_what_it_asked_for_only_within_the_budget() {
        let budget = crate::cache::budget::leaked(1 << 20);
        let mut a = ChunkAhead::new(budget);
        for (addr, leaf) in leaves(10, 64) {
            a.add_leaf(addr, leaf);
        }
        assert_eq!(a.chunks.len(), 640);
        // Other files took all but 2,000 bytes: room for 75 chunks asked.
        let mut others = Charge::new(budget);
        assert!(others.set(budget.capacity() - budget.used() - 2_000, 0));
        a.on_read(miss(chunk(0, 16), 16), 0, 64 * MIB);
        // Four chunks' worth, or what the floor asks for: 600 chunks.
        let ahead = a.on_read(miss(chunk(1, 16), 16), 600 * 16, 64 * MIB);
        let asked: u64 = ahead.iter().map(|r| r.end - r.start).sum();
        assert_eq!(asked, 75 * 16);
        assert_eq!(a.asked.len(), 75);
        assert!(budget.used() <= budget.capacity());
        // A jump elsewhere ends the run and gives its chunks back.
        let held = a.bytes();
        a.on_read(miss(chunk(500, 16), 16), 0, 64 * MIB);
        assert!(a.asked.is_empty() && a.bytes() < held);
    }
}
