//! Structure-aware metadata prefetch: the state of one file's prefetch.
//!
//! Each piece of metadata HDF5 reads, and each piece the prefetch itself
//! fetched, is parsed ([`crate::hdf5::meta`]) for the addresses it points to.
//! Those join a frontier, which the file's crawl ([`super::crawl`]) fetches
//! in waves and parses in turn, breadth-first from the superblock: the
//! metadata graph arrives in about as many waves as it is deep, from the
//! moment the file is opened, whatever order HDF5 asks for it in. Metadata
//! reads nothing pointed to, which miss the cache, are read ahead as a
//! stream ([`Stream`]).
//!
//! Guesses cost bytes, never correctness: HDF5 still reads every byte it
//! needs through the cache. The bytes guessed are bounded by what HDF5 has
//! read so far plus 16 MiB, or more on a fast link
//! ([`super::spans::guess_budget`]).
//!
//! So do the tables the prefetch keeps (the addresses pointed to, the heaps
//! and trees, the frontier, the piece read last, the chunk index): each
//! takes what it allocates from the process's budget for crawl tables
//! ([`crate::process::CRAWL_MEMORY`]) before it grows, and one that cannot
//! stops growing. A target left out is only a guess not made.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use crate::sync::Mutex;

use super::chunk_ahead::{ChunkAhead, ChunkRead};
use super::reach::{self, LEAST_REACH, Reach};
use super::spans::Stream;
use crate::cache::budget::{Charge, MemoryBudget, room_for};
use crate::hdf5::meta::{self, Context, Found, MemType, Target, What};

/// The most addresses one file remembers as pointed to, whatever the
/// budget; past that, a file of more objects is walked with what is known.
const MAX_KNOWN: usize = 1 << 18;

/// What the prefetch has done, for `hdf5::DriverInfo`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefetchStats {
    /// Metadata reads HDF5 made at an address some earlier metadata pointed
    /// to (the prefetch saw them coming).
    pub predicted_reads: u64,
    /// Metadata reads HDF5 made elsewhere (the superblock's among them).
    pub unpredicted_reads: u64,
    /// Addresses fetched (or found cached) ahead of HDF5.
    pub targets: u64,
    /// Of those, how many HDF5 has read since: the rest were guesses it has
    /// not needed (yet).
    pub targets_read: u64,
    /// Bytes fetched in the background, in whole blocks.
    pub speculative_bytes: u64,
    /// Bytes of metadata HDF5 read.
    pub metadata_bytes: u64,
    /// Raw data reads of chunks the chunk index listed (see
    /// `hdf5::OpenOptions::chunk_read_ahead`).
    pub chunk_reads: u64,
    /// Bytes fetched ahead of those reads: the following chunks of a run.
    pub chunk_bytes_ahead: u64,
    /// Bytes the prefetch's tables hold now (the addresses pointed to, the
    /// chunk index…), of the budget all open files share
    /// (`remfile::process::CRAWL_MEMORY`).
    pub table_bytes: u64,
}

/// An address some metadata pointed to.
#[derive(Debug, Clone, Copy)]
struct Known {
    what: What,
    /// Whether HDF5 has read there since.
    read: bool,
    /// Its level in the metadata graph ([`super::reach`]).
    level: u16,
}

/// The most bytes of one piece of metadata kept for parsing.
pub(crate) const MAX_PIECE: usize = 1 << 16;

/// How many more bytes of metadata HDF5 reads before a crawl held for want
/// of allowance goes on: a few pieces, so that a held crawl is not woken by
/// every read.
const HELD_STEP: u64 = 8 << 10;

/// The bytes of a superblock with its root group's entry (HDF5 reads up to
/// this much of it first).
pub(crate) const SUPERBLOCK_READ: u64 = 256;

/// How HDF5's read of a piece of metadata went.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seen {
    /// Whether it had to wait for the network.
    pub missed: bool,
    /// The first step of a stream of unforeseen reads, in bytes.
    pub step: u64,
}

/// The piece of metadata HDF5 read last.
#[derive(Debug, Default)]
struct Last {
    mem: Option<MemType>,
    addr: u64,
    expected: Option<What>,
    bytes: Vec<u8>,
}

/// The prefetch state of one open file.
#[derive(Debug)]
pub(crate) struct Prefetcher {
    /// Whether to fetch what metadata points to (else metadata is parsed
    /// only for the chunk index).
    metadata: bool,
    /// The chunk index read so far and the run of chunks being read, if
    /// chunks are read ahead.
    chunks: Option<ChunkAhead>,
    /// The file's sizes and the fractal heaps, B-trees and arrays seen.
    context: Context,
    /// While positive, reads are noted but nothing is fetched ahead.
    paused: u32,
    /// The piece of metadata read last, which the next read may continue.
    last: Last,
    /// Addresses some metadata pointed to, and what is there.
    known: HashMap<u64, Known>,
    /// Targets found and not yet fetched and parsed, in the order found.
    frontier: VecDeque<Target>,
    /// The stream of metadata reads nothing pointed to, if any.
    stream: Option<Stream>,
    stats: PrefetchStats,
    /// The metadata HDF5 had read when the crawl last held targets for want
    /// of allowance, if it did and has not been woken since.
    held_at: Option<u64>,
    /// The deepest level of the graph HDF5 has read here.
    reach: u16,
    /// The reach of the batch that crawled the file ahead, if one did.
    batch_reach: Option<Arc<Reach>>,
    /// The largest budget a wave where bytes are cheap was granted.
    cheap_budget: u64,
    /// What a batch's crawl guessed of the file before HDF5 read any of it:
    /// its open's allowance does not pay for those guesses again.
    guessed_ahead: u64,
    /// What the tables above hold of the crawl's budget (the chunk
    /// index's own are its own).
    weights: Weights,
}

/// What each table of a [`Prefetcher`] holds of the crawl's budget.
#[derive(Debug)]
struct Weights {
    known: Charge,
    frontier: Charge,
    heaps: Charge,
    btrees: Charge,
    arrays: Charge,
    last: Charge,
}

/// A prefetch with a budget of its own, as large as the process's.
#[cfg(test)]
impl Default for Prefetcher {
    fn default() -> Prefetcher {
        let budget = crate::cache::budget::leaked(crate::process::CRAWL_MEMORY);
        Prefetcher::within(true, true, budget)
    }
}

impl Prefetcher {
    /// A prefetch of metadata (if `metadata`) and of the chunks that follow
    /// a run of chunk reads (if `chunks`), whose tables take their bytes
    /// from the process's budget for them.
    pub fn new(metadata: bool, chunks: bool) -> Prefetcher {
        Prefetcher::within(
            metadata,
            chunks,
            crate::hdf5::driver::caches::crawl_budget(),
        )
    }

    /// As [`new`](Self::new), the tables taking their bytes from `budget`.
    pub fn within(metadata: bool, chunks: bool, budget: &'static MemoryBudget) -> Prefetcher {
        Prefetcher {
            metadata,
            chunks: chunks.then(|| ChunkAhead::new(budget)),
            context: Context::default(),
            paused: 0,
            last: Last::default(),
            known: HashMap::new(),
            frontier: VecDeque::new(),
            stream: None,
            stats: PrefetchStats::default(),
            held_at: None,
            reach: 0,
            batch_reach: None,
            cheap_budget: 0,
            guessed_ahead: 0,
            weights: Weights {
                known: Charge::new(budget),
                frontier: Charge::new(budget),
                heaps: Charge::new(budget),
                btrees: Charge::new(budget),
                arrays: Charge::new(budget),
                last: Charge::new(budget),
            },
        }
    }

    /// The bytes the prefetch's tables hold of their budget.
    pub fn table_bytes(&self) -> u64 {
        let w = &self.weights;
        let own = [
            &w.known,
            &w.frontier,
            &w.heaps,
            &w.btrees,
            &w.arrays,
            &w.last,
        ];
        let chunks = self.chunks.as_ref().map_or(0, ChunkAhead::bytes);
        own.iter().map(|c| c.bytes()).sum::<u64>() + chunks
    }

    /// Adds `target` to the frontier, if it has room (the budget too).
    fn push(&mut self, target: Target) -> bool {
        let fits = self.frontier.len() < MAX_KNOWN
            && room_for(&mut self.frontier, 1, &mut self.weights.frontier, 0);
        if fits {
            self.frontier.push_back(target);
        }
        fits
    }

    /// Starts the crawl at the superblock (at the file's first byte, where
    /// files without a user block have it), before HDF5 asks for anything.
    /// Returns whether the frontier has new targets.
    pub fn start(&mut self) -> bool {
        self.metadata
            && self.push(Target {
                what: What::Superblock,
                bytes: 0..SUPERBLOCK_READ,
            })
    }

    /// Takes note of HDF5's read of a chunk's bytes, which `read` says, and
    /// returns the chunks to fetch ahead of it; `None` if the read is not
    /// of a chunk the index listed. `bounds` are the least and the most a
    /// step of a run asks for.
    pub fn on_chunk_read(
        &mut self,
        read: ChunkRead,
        bounds: (u64, u64),
    ) -> Option<Vec<Range<u64>>> {
        let chunks = self.chunks.as_mut()?;
        if !chunks.is_chunk(read.addr, read.len) {
            return None;
        }
        self.stats.chunk_reads += 1;
        if self.paused > 0 {
            return Some(Vec::new());
        }
        Some(chunks.on_read(read, bounds.0, bounds.1))
    }

    /// Counts bytes fetched ahead of chunk reads.
    pub fn fetched_chunks(&mut self, bytes: u64) {
        self.stats.chunk_bytes_ahead += bytes;
    }

    /// Takes note of HDF5's read of `bytes` at `addr`, of memory type `mem`,
    /// in a file of `len` bytes, which `missed` the cache if it had to wait
    /// for the network. Returns whether the frontier has new targets.
    /// `step` is the first step of a stream of unforeseen reads (see
    /// [`Stream`]).
    pub fn on_read(&mut self, mem: MemType, addr: u64, bytes: &[u8], len: u64, seen: Seen) -> bool {
        if matches!(mem, MemType::RawData | MemType::GlobalHeap) {
            return false;
        }
        if self.ahead_of_open() {
            self.guessed_ahead = self.stats.speculative_bytes;
        }
        self.stats.metadata_bytes += bytes.len() as u64;
        let reach = self.reach;
        let predicted = self.note_piece(mem, addr, bytes);
        // HDF5 has reached a deeper level: the crawl may go there.
        let mut work = self.reach > reach && !self.frontier.is_empty();
        let room = self.frontier.len() < MAX_KNOWN;
        if !predicted && seen.missed && self.metadata && self.paused == 0 && room {
            if let Some(span) = Stream::on_unforeseen_miss(&mut self.stream, addr, seen.step, len) {
                work |= self.push(Target {
                    what: What::Unforeseen,
                    bytes: span,
                });
            }
        }
        let Last {
            addr,
            expected,
            bytes: kept,
            ..
        } = &self.last;
        // A piece the budget had no room to keep is parsed as it was read.
        let piece = if kept.is_empty() {
            &bytes[..bytes.len().min(MAX_PIECE)]
        } else {
            kept
        };
        let found = meta::pointers(piece, *addr, mem, *expected, &self.context);
        work |= self.absorb(*addr, found, len, false);
        // A crawl held for want of allowance goes on once HDF5 has read
        // a step's worth more.
        if let Some(at) = self.held_at {
            if self.stats.metadata_bytes >= at.saturating_add(HELD_STEP) {
                self.held_at = None;
                work |= !self.frontier.is_empty();
            }
        }
        work
    }

    /// The targets to fetch and parse next: the whole frontier, which
    /// starts afresh (the wave's targets are the crawl's working memory
    /// until it has fetched them).
    pub fn take_wave(&mut self) -> Vec<Target> {
        let wave = Vec::from(std::mem::take(&mut self.frontier));
        self.weights.frontier.set(0, 0);
        wave
    }

    /// Puts `targets` of a wave back on the frontier, as
    /// [`put_back`](Self::put_back) does, until HDF5 has read [`HELD_STEP`]
    /// more bytes of metadata: the wave had no allowance for them.
    pub fn hold(&mut self, targets: Vec<Target>) {
        self.put_back(targets);
        self.held_at = Some(self.stats.metadata_bytes);
    }

    /// Puts `targets` of a wave that was not fetched back on the frontier,
    /// as far as it has room.
    pub fn put_back(&mut self, targets: Vec<Target>) {
        for target in targets {
            if !self.push(target) {
                break;
            }
        }
    }

    /// How many bytes the structure at `target`, which starts with
    /// `bytes`, says it has, if it says so.
    pub fn declared_len(&self, target: &Target, bytes: &[u8]) -> Option<usize> {
        let len = meta::declared_len(bytes, target.what, &self.context)?;
        usize::try_from(len).ok()
    }

    /// Parses `bytes`, fetched at `target` by the crawl, in a file of `len`
    /// bytes. Returns whether the frontier has new targets.
    pub fn on_crawled(&mut self, target: &Target, bytes: &[u8], len: u64) -> bool {
        let addr = target.bytes.start;
        let found = meta::pointers(
            bytes,
            addr,
            MemType::Other,
            Some(target.what),
            &self.context,
        );
        let mut work = self.absorb(addr, found, len, true);
        // A structure longer than the bytes guessed for it is read again
        // whole, once.
        if let Some(whole) = meta::declared_len(bytes, target.what, &self.context) {
            let whole = whole.min(MAX_PIECE as u64);
            let end = addr.saturating_add(whole).min(len);
            if end > target.bytes.end && (bytes.len() as u64) < end - addr {
                work |= self.push(Target {
                    what: target.what,
                    bytes: addr..end,
                });
            }
        }
        work
    }

    /// Takes in what the piece at `addr` said: the file's sizes, heaps,
    /// trees and arrays to read later pieces with, a chunk index's leaf, and targets,
    /// which join the frontier if they are new (`crawled`: found by the
    /// crawl, which a pause does not stop). Returns whether any did.
    fn absorb(&mut self, addr: u64, mut found: Found, len: u64, crawled: bool) -> bool {
        if let (Some(leaf), Some(chunks)) = (found.chunks.take(), self.chunks.as_mut()) {
            chunks.add_leaf(addr, leaf);
        }
        if let Some(g) = found.geometry {
            self.context.geometry = g;
        }
        let c = &self.context;
        if c.heaps.len() + c.btrees.len() + c.arrays.len() < MAX_KNOWN {
            let (heaps, btrees) = (&mut self.context.heaps, &mut self.context.btrees);
            let arrays = &mut self.context.arrays;
            let w = &mut self.weights;
            if let Some(heap) = found.heap {
                if heaps.contains_key(&addr) || room_for(heaps, 1, &mut w.heaps, 0) {
                    heaps.insert(addr, heap);
                }
            }
            if let Some(tree) = found.btree {
                if btrees.contains_key(&addr) || room_for(btrees, 1, &mut w.btrees, 0) {
                    btrees.insert(addr, tree);
                }
            }
            if let Some(array) = found.array {
                if arrays.contains_key(&addr) || room_for(arrays, 1, &mut w.arrays, 0) {
                    arrays.insert(addr, array);
                }
            }
        }
        // Without fetching ahead, what metadata points to is still noted:
        // a chunk index's nodes are read by what points to them.
        let fetch = self.metadata && (self.paused == 0 || crawled);
        // Paused, what is noted would never be fetched.
        let note = fetch || !self.metadata;
        let mut work = false;
        let parent = self.known.get(&addr).map(|k| (k.level, k.what));
        for target in found.targets {
            let bytes = target.bytes.start..target.bytes.end.min(len);
            let full = self.known.len() >= MAX_KNOWN || self.frontier.len() >= MAX_KNOWN;
            if !note || bytes.is_empty() || full {
                continue;
            }
            // A new address needs room in both tables, or is left out.
            if !self.known.contains_key(&bytes.start) {
                let w = &mut self.weights;
                let room = room_for(&mut self.known, 1, &mut w.known, 0)
                    && (!fetch || room_for(&mut self.frontier, 1, &mut w.frontier, 0));
                if !room {
                    continue;
                }
            }
            let (level_above, above) = parent.map_or((0, None), |(l, w)| (l, Some(w)));
            let level = reach::child_level(level_above, above, target.what);
            if let Some(known) = self.known.get_mut(&bytes.start) {
                // Found again from a shallower place: it is of that level.
                known.level = known.level.min(level);
                continue;
            }
            let known = Known {
                what: target.what,
                read: false,
                level,
            };
            if self.known.insert(bytes.start, known).is_none() && fetch {
                self.stats.targets += 1;
                self.frontier.push_back(Target {
                    what: target.what,
                    bytes,
                });
                work = true;
            }
        }
        work
    }

    /// How many more bytes may be guessed now: `budget`
    /// ([`super::spans::guess_budget`]) beyond what HDF5 has read (and
    /// beyond what a batch guessed before the file's open), each
    /// byte it read allowing `per_read` bytes of guesses (a reader that
    /// walks on through a level of many small pieces keeps the crawl that
    /// many times its reads ahead).
    pub fn allowance(&self, budget: u64, per_read: u64) -> u64 {
        let guessed = self
            .stats
            .speculative_bytes
            .saturating_sub(self.guessed_ahead);
        (self.stats.metadata_bytes.saturating_mul(per_read.max(1)))
            .saturating_add(budget)
            .saturating_sub(guessed)
    }

    /// The budget of a wave where bytes are cheap: `budget`, or the largest
    /// an earlier such wave was granted. The estimate a budget is priced by
    /// swings by a few times from one wave to the next, and a crawl that
    /// spent what a larger one granted would otherwise stop short of the
    /// reader until it had read the difference (a file whose metadata lies
    /// among its data then read it all miss by miss).
    pub fn cheap_budget(&mut self, budget: u64) -> u64 {
        self.cheap_budget = self.cheap_budget.max(budget);
        self.cheap_budget
    }

    /// Makes `last` the piece of metadata a read
    /// belongs to. HDF5 reads some structures in parts — a superblock field
    /// by field, a long object header's first 512 bytes and then the rest —
    /// so a read that starts where the last one (of the same type) ended
    /// continues its piece, unless something pointed to it or it opens with
    /// a signature; otherwise it starts one.
    ///
    /// The piece is kept as far as the budget has room: one it has none
    /// for is parsed as it was read, and the next read starts a piece.
    fn note_piece(&mut self, mem: MemType, addr: u64, bytes: &[u8]) -> bool {
        let last = &mut self.last;
        let weight = &mut self.weights.last;
        // A structure some piece pointed to, or one that opens with its
        // signature, starts a piece of its own however close it lies.
        let starts_one = self.known.contains_key(&addr) || meta::has_signature(bytes);
        let continues = !starts_one
            && last.mem == Some(mem)
            && last.addr.checked_add(last.bytes.len() as u64) == Some(addr)
            && last.bytes.len() + bytes.len() <= MAX_PIECE
            && room_for(&mut last.bytes, bytes.len(), weight, 0);
        if continues {
            last.bytes.extend_from_slice(bytes);
            return true;
        }
        let expected = match self.known.get_mut(&addr) {
            Some(known) => {
                self.stats.targets_read += u64::from(!known.read);
                known.read = true;
                if known.level > self.reach {
                    self.reach = known.level;
                    if let Some(batch) = &self.batch_reach {
                        batch.raise(known.level);
                    }
                }
                self.stats.predicted_reads += 1;
                Some(known.what)
            }
            None => {
                self.stats.unpredicted_reads += 1;
                tracing::trace!(
                    ?mem,
                    addr,
                    len = bytes.len(),
                    "a metadata read nothing pointed to"
                );
                None
            }
        };
        // The last piece's buffer goes: a long header's should not stay.
        let piece = &bytes[..bytes.len().min(MAX_PIECE)];
        let mut kept = Vec::new();
        weight.set(0, 0);
        let room = room_for(&mut kept, piece.len(), weight, 0);
        if room {
            kept.extend_from_slice(piece);
        }
        *last = Last {
            mem: room.then_some(mem),
            addr,
            expected,
            bytes: kept,
        };
        expected.is_some()
    }

    /// Adds nothing HDF5 reads to what is fetched ahead until the guard
    /// returned is dropped (the crawl goes on with what it already had): for
    /// callers that know exactly what HDF5 is about to read.
    #[cfg_attr(not(feature = "hdf5"), allow(dead_code))]
    pub fn pause(prefetcher: &Mutex<Prefetcher>) -> Paused<'_> {
        prefetcher.lock().paused += 1;
        Paused(prefetcher)
    }

    /// The deepest level the crawl may fetch where bytes are dear: the
    /// deepest HDF5 has read here or, for a file a batch crawled, in any
    /// of the batch's files (the root's at least).
    pub fn reach(&self) -> u16 {
        let batch = self.batch_reach.as_ref().map_or(0, |b| b.level());
        self.reach.max(batch).max(LEAST_REACH)
    }

    /// Splits off the targets of `wave` (keeping their order) of a level
    /// deeper than [`reach`](Self::reach), and returns them.
    pub fn beyond_reach(&self, wave: &mut Vec<Target>) -> Vec<Target> {
        let reach = self.reach();
        let (within, beyond) = std::mem::take(wave)
            .into_iter()
            .partition(|t| self.level_of(t) <= reach);
        *wave = within;
        beyond
    }

    /// The level of the graph `target` lies at, as far as the crawl knows
    /// (0 if it does not).
    pub fn level_of(&self, target: &Target) -> u16 {
        self.known.get(&target.bytes.start).map_or(0, |k| k.level)
    }

    /// What the crawl knows lies at `addr`, if it does.
    pub fn what_at(&self, addr: u64) -> Option<What> {
        self.known.get(&addr).map(|k| k.what)
    }

    /// The targets waiting on the frontier beside the one at `addr` that
    /// HDF5 is about to read and missed: of its kind and level, the nearest
    /// in the file first, at most `most` of them and `most_bytes` together.
    /// HDF5 reads them next (the other nodes of the index it walks, the
    /// other members of the group it lists): fetched with the miss, they
    /// come in its round, not in one each after it. Empty if the crawl did
    /// not know `addr`.
    pub fn beside_miss(&self, addr: u64, most: usize, most_bytes: u64) -> Vec<Range<u64>> {
        let Some(missed) = self.known.get(&addr).filter(|k| !k.read) else {
            return Vec::new();
        };
        let kind = std::mem::discriminant(&missed.what);
        let mut beside: Vec<&Target> = self
            .frontier
            .iter()
            .filter(|t| t.bytes.start != addr && std::mem::discriminant(&t.what) == kind)
            .filter(|t| {
                self.known
                    .get(&t.bytes.start)
                    .is_some_and(|k| !k.read && k.level == missed.level)
            })
            .collect();
        beside.sort_by_key(|t| t.bytes.start.abs_diff(addr));
        let mut bytes = 0u64;
        beside
            .into_iter()
            .take(most)
            .take_while(|t| {
                bytes = bytes.saturating_add(t.bytes.end - t.bytes.start);
                bytes <= most_bytes
            })
            .map(|t| t.bytes.clone())
            .collect()
    }

    /// Whether the frontier holds targets deeper than the reach.
    pub fn holds_deeper(&self) -> bool {
        let reach = self.reach();
        self.frontier.iter().any(|t| self.level_of(t) > reach)
    }

    /// The deepest level HDF5 has read of this file itself.
    pub fn own_reach(&self) -> u16 {
        self.reach
    }

    /// Whether a batch crawls the file before HDF5 has read any of it.
    pub fn ahead_of_open(&self) -> bool {
        self.batch_reach.is_some() && self.stats.metadata_bytes == 0
    }

    /// Makes the file one of a batch's, whose files share `reach`.
    pub fn join_batch(&mut self, reach: Arc<Reach>) {
        self.batch_reach = Some(reach);
    }

    /// The reach of the batch the file is one of, if any.
    pub fn batch_reach(&self) -> Option<&Arc<Reach>> {
        self.batch_reach.as_ref()
    }

    /// Counts bytes a background fetch started.
    pub fn fetched(&mut self, bytes: u64) {
        self.stats.speculative_bytes += bytes;
    }

    pub fn stats(&self) -> PrefetchStats {
        PrefetchStats {
            table_bytes: self.table_bytes(),
            ..self.stats
        }
    }
}

/// Resumes the prefetch when dropped; see [`Prefetcher::pause`].
#[cfg_attr(not(feature = "hdf5"), allow(dead_code))]
pub(crate) struct Paused<'a>(&'a Mutex<Prefetcher>);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.lock().paused -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::spans::LEAST_BUDGET as SLACK;
    use super::*;
    use crate::cache::budget::Charge;

    fn read(p: &mut Prefetcher, mem: MemType, addr: u64, bytes: &[u8], len: u64) -> Vec<Target> {
        p.on_read(mem, addr, bytes, len, Seen::default());
        p.take_wave()
    }

    fn starts(wave: &[Target]) -> Vec<u64> {
        wave.iter().map(|t| t.bytes.start).collect()
    }

    #[test]
    fn each_address_is_asked_for_once_and_inside_the_file() {
        let mut p = Prefetcher::default();
        // A group B-tree leaf with two symbol table nodes, one past the end.
        let mut node = b"TREE\x00\x00\x02\x00".to_vec();
        node.extend_from_slice(&[0xff; 16]);
        for (key, child) in [(0u64, 1000u64), (8, 5_000_000)] {
            node.extend_from_slice(&key.to_le_bytes());
            node.extend_from_slice(&child.to_le_bytes());
        }
        node.extend_from_slice(&16u64.to_le_bytes());
        let next = read(&mut p, MemType::BTree, 136, &node, 4096);
        // A symbol table node; the other lies outside the file.
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].bytes, 1000..1328);
        assert_eq!(p.allowance(SLACK, 1), node.len() as u64 + SLACK);
        assert!(
            read(&mut p, MemType::BTree, 136, &node, 4096).is_empty(),
            "asked for already"
        );
        p.fetched(SLACK);
        read(&mut p, MemType::BTree, 1000, b"SNOD", 4096);
        assert_eq!(p.allowance(SLACK, 1), 2 * node.len() as u64 + 4);
        let s = p.stats();
        assert_eq!(
            (s.predicted_reads, s.unpredicted_reads, s.targets),
            (1, 2, 1)
        );
    }

    #[test]
    fn a_held_crawl_goes_on_once_hdf5_has_read_a_step_more() {
        let mut p = Prefetcher::default();
        assert!(p.start());
        let wave = p.take_wave();
        assert_eq!(starts(&wave), [0]);
        // No allowance for it: held, and the frontier keeps it.
        p.hold(wave);
        let mut seen = Vec::new();
        let filler = vec![0u8; 1024];
        // Reads short of the step do not wake the crawl; the one that
        // completes it does, once.
        for i in 0..(HELD_STEP / 1024) {
            seen.push(p.on_read(
                MemType::Other,
                10_000 + i * 4096,
                &filler,
                1 << 20,
                Seen::default(),
            ));
        }
        let woken: Vec<usize> = (0..seen.len()).filter(|&i| seen[i]).collect();
        assert_eq!(woken, [seen.len() - 1], "{seen:?}");
        assert!(!p.on_read(MemType::Other, 90_000, &filler, 1 << 20, Seen::default()));
        assert_eq!(
            starts(&p.take_wave()),
            [0],
            "the held target is still there"
        );
        // Each byte read allows `per_read` bytes of guesses.
        assert_eq!(p.allowance(100, 4), 4 * (HELD_STEP + 1024) + 100);
        p.fetched(50);
        assert_eq!(p.allowance(100, 1), HELD_STEP + 1024 + 50);
    }

    #[test]
    fn a_cheap_waves_budget_never_shrinks_below_one_granted() {
        let mut p = Prefetcher::default();
        assert_eq!(p.cheap_budget(36 << 20), 36 << 20);
        p.fetched(29 << 20);
        // A lower estimate later leaves the crawl what it had left.
        let budget = p.cheap_budget(16 << 20);
        assert_eq!(budget, 36 << 20);
        assert_eq!(p.allowance(budget, 1), 7 << 20);
        assert_eq!(p.cheap_budget(48 << 20), 48 << 20);
    }

    #[test]
    fn an_open_does_not_pay_again_for_what_a_batch_guessed_before_it() {
        let mut p = Prefetcher::default();
        p.join_batch(Arc::new(Reach::default()));
        p.fetched(20 << 20);
        assert!(p.ahead_of_open());
        assert_eq!(p.allowance(16 << 20, 1), 0, "spent ahead of the open");
        p.on_read(MemType::Other, 0, &[0u8; 100], 1 << 30, Seen::default());
        assert!(!p.ahead_of_open());
        assert_eq!(p.allowance(16 << 20, 1), (16 << 20) + 100);
        p.fetched(1000);
        assert_eq!(p.allowance(16 << 20, 1), (16 << 20) + 100 - 1000);
    }

    #[test]
    fn what_the_crawl_fetched_is_parsed_for_the_next_wave() {
        let mut p = Prefetcher::default();
        // A symbol table node the crawl fetched, naming two object headers.
        let mut snod = b"SNOD\x01\x00\x02\x00".to_vec();
        for header in [2000u64, 3000] {
            snod.extend_from_slice(&0u64.to_le_bytes());
            snod.extend_from_slice(&header.to_le_bytes());
            snod.extend_from_slice(&[0; 24]);
        }
        let target = Target {
            what: What::SymbolNode,
            bytes: 1000..1328,
        };
        assert!(p.on_crawled(&target, &snod, 1 << 20));
        assert_eq!(starts(&p.take_wave()), [2000, 3000]);
        // A version 1 object header longer than the 512 bytes guessed for
        // it is fetched again, whole, once.
        let mut header = vec![1, 0, 0, 0, 1, 0, 0, 0];
        header.extend_from_slice(&2000u32.to_le_bytes());
        header.extend_from_slice(&[0; 500]);
        let guessed = Target {
            what: What::ObjectHeader,
            bytes: 2000..2512,
        };
        assert!(p.on_crawled(&guessed, &header, 1 << 20));
        let again = p.take_wave();
        assert_eq!(again[0].bytes, 2000..4016);
        assert!(!p.on_crawled(&again[0], &header, 1 << 20));
        // Already known: HDF5's own read of the node adds nothing.
        assert!(read(&mut p, MemType::BTree, 1000, &snod, 1 << 20).is_empty());
    }

    /// HDF5 missing one member of a group it lists pulls in the members
    /// the crawl found beside it (and had not fetched), not those it read.
    #[test]
    fn a_miss_brings_the_targets_found_beside_it() {
        let mut p = Prefetcher::default();
        let mut snod = b"SNOD\x01\x00\x03\x00".to_vec();
        for header in [2000u64, 3000, 4000] {
            snod.extend_from_slice(&0u64.to_le_bytes());
            snod.extend_from_slice(&header.to_le_bytes());
            snod.extend_from_slice(&[0; 24]);
        }
        let node = Target {
            what: What::SymbolNode,
            bytes: 1000..1328,
        };
        assert!(p.on_crawled(&node, &snod, 1 << 20));
        let ends = |r: Vec<Range<u64>>| r.into_iter().map(|r| r.start).collect::<Vec<_>>();
        assert_eq!(ends(p.beside_miss(2000, 8, 1 << 20)), [3000, 4000]);
        assert_eq!(
            ends(p.beside_miss(2000, 1, 1 << 20)),
            [3000],
            "at most as many as asked"
        );
        assert_eq!(
            ends(p.beside_miss(2000, 8, 600)),
            [3000],
            "at most as many bytes"
        );
        assert_eq!(
            ends(p.beside_miss(4000, 8, 1 << 20)),
            [3000, 2000],
            "the nearest first"
        );
        assert!(
            p.beside_miss(2500, 8, 1 << 20).is_empty(),
            "a read nothing pointed to"
        );
        assert!(
            p.beside_miss(1000, 8, 1 << 20).is_empty(),
            "nothing of its kind beside"
        );
        assert!(
            p.what_at(2000).is_some_and(|w| !w.lies_among_raw_data()),
            "a header lies among metadata"
        );
        p.on_read(
            MemType::ObjectHeader,
            3000,
            &[1; 16],
            1 << 20,
            Seen::default(),
        );
        assert_eq!(
            ends(p.beside_miss(2000, 8, 1 << 20)),
            [4000],
            "HDF5 read one"
        );
    }

    #[test]
    fn an_unforeseen_read_that_missed_starts_a_stream() {
        let mut p = Prefetcher::default();
        let seen = Seen {
            missed: true,
            step: 4096,
        };
        assert!(p.on_read(MemType::ObjectHeader, 10_000, &[0; 64], 1 << 20, seen));
        let wave = p.take_wave();
        assert_eq!(wave[0].what, What::Unforeseen);
        assert_eq!(wave[0].bytes, 10_000..14_096);
        // A hit starts nothing.
        let hit = Seen {
            missed: false,
            ..seen
        };
        assert!(!p.on_read(MemType::ObjectHeader, 50_000, &[0; 64], 1 << 20, hit));
    }

    #[test]
    fn a_paused_prefetch_fetches_nothing_ahead() {
        let p = Mutex::new(Prefetcher::default());
        let heap = b"HEAP\x00\x00\x00\x00\x58\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\x00\x10\x00\x00\x00\x00\x00\x00";
        {
            let _quiet = Prefetcher::pause(&p);
            assert!(read(&mut p.lock(), MemType::LocalHeap, 0, heap, 1 << 20).is_empty());
        }
        let next = read(&mut p.lock(), MemType::LocalHeap, 0, heap, 1 << 20);
        assert_eq!(next.len(), 1, "the heap's data, once resumed");
    }

    #[test]
    fn a_structure_read_in_parts_is_read_whole() {
        let mut p = Prefetcher::default();
        // A version 2 superblock, as HDF5 reads it: its signature, its first
        // 16 bytes, then the rest from byte 16 on.
        let mut superblock = b"\x89HDF\r\n\x1a\n\x02\x08\x08\x00".to_vec();
        for field in [0u64, u64::MAX, 1 << 20, 48] {
            superblock.extend_from_slice(&field.to_le_bytes());
        }
        superblock.extend_from_slice(&[0; 4]);
        let len = 1 << 20;
        assert!(read(&mut p, MemType::Superblock, 0, &superblock[..8], len).is_empty());
        assert!(read(&mut p, MemType::Superblock, 0, &superblock[..16], len).is_empty());
        let next = read(&mut p, MemType::Superblock, 16, &superblock[16..], len);
        assert_eq!(starts(&next), [48], "the root group's header");
        // A read of something pointed to starts a piece of its own, even
        // where the last one ended.
        read(&mut p, MemType::ObjectHeader, 48, &[0; 16], len);
        assert_eq!(p.stats().predicted_reads, 1);
        assert_eq!(
            p.stats().unpredicted_reads,
            2,
            "the first two reads of the superblock"
        );
    }

    #[test]
    fn raw_data_is_not_parsed() {
        let mut p = Prefetcher::default();
        assert!(read(&mut p, MemType::RawData, 0, b"TREE\x00\x00\x01\x00", 4096).is_empty());
        assert_eq!(p.stats().metadata_bytes, 0);
    }

    /// What a crawl finds in a group of `count` members: their object
    /// headers, from `first` on.
    fn members(first: u64, count: u64) -> Found {
        let targets = (0..count).map(|i| Target {
            what: What::ObjectHeader,
            bytes: first + i * 1024..first + i * 1024 + 512,
        });
        Found {
            targets: targets.collect(),
            ..Found::default()
        }
    }

    #[test]
    fn a_file_of_many_objects_stops_noting_addresses_at_its_budget() {
        let budget = crate::cache::budget::leaked(1 << 20);
        let mut p = Prefetcher::within(true, true, budget);
        // A hundred groups of a thousand members each, as the crawl finds
        // them: each new address is noted and joins the frontier.
        for group in 0..100 {
            p.absorb(group, members(group << 30, 1000), 1 << 40, true);
            assert_eq!(budget.used(), p.table_bytes());
            assert!(budget.used() <= 1 << 20);
        }
        let known = p.known.len();
        assert!((5_000..100_000).contains(&known), "{known}");
        assert_eq!(p.frontier.len(), known);
        // The wave taken is the crawl's now: the frontier's bytes go back,
        // for another file's addresses.
        let held = p.table_bytes();
        assert_eq!(p.take_wave().len(), known);
        assert!(p.table_bytes() < held);
        let mut other = Prefetcher::within(true, true, budget);
        other.absorb(0, members(0, 1000), 1 << 40, true);
        assert!(!other.known.is_empty());
        assert!(budget.used() <= 1 << 20);
        drop((p, other));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn files_sharing_the_budget_hold_at_most_it() {
        let budget = crate::cache::budget::leaked(4 << 20);
        let files: Vec<Prefetcher> = (0..10)
            .map(|_| {
                let mut p = Prefetcher::within(true, true, budget);
                for group in 0..10 {
                    p.absorb(group, members(group << 30, 1000), 1 << 40, true);
                }
                p
            })
            .collect();
        let total: u64 = files.iter().map(Prefetcher::table_bytes).sum();
        assert_eq!(total, budget.used());
        assert!(total <= 4 << 20, "{total}");
        let known: Vec<usize> = files.iter().map(|p| p.known.len()).collect();
        assert_eq!(known[0], 10_000, "{known:?}");
        assert!(known[9] < 10_000, "{known:?}");
        drop(files);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_read_the_budget_cannot_keep_is_parsed_as_it_came() {
        let budget = crate::cache::budget::leaked(10_000);
        // Only noting what metadata points to: no frontier to fill.
        let mut p = Prefetcher::within(false, false, budget);
        let node = |child: u64| {
            let mut node = b"TREE\x00\x00\x01\x00".to_vec();
            node.extend_from_slice(&[0xff; 16]);
            node.extend_from_slice(&0u64.to_le_bytes());
            node.extend_from_slice(&child.to_le_bytes());
            node.extend_from_slice(&8u64.to_le_bytes());
            node
        };
        read(&mut p, MemType::BTree, 136, &node(1000), 1 << 20);
        assert!(p.known.contains_key(&1000));
        // Other files took the rest: the next piece, longer than the last,
        // cannot be kept, but what it points to is still noted (the table
        // has room for it).
        let mut others = Charge::new(budget);
        assert!(others.set(budget.capacity() - budget.used(), 0));
        let mut longer = node(2000);
        longer.resize(400, 0);
        read(&mut p, MemType::BTree, 4096, &longer, 1 << 20);
        assert!(p.last.bytes.is_empty() && p.last.mem.is_none());
        assert!(p.known.contains_key(&2000));
        assert!(budget.used() <= budget.capacity());
        // With no room at all (the last piece's bytes taken too), the
        // prefetch does not even start: HDF5 reads what it needs itself.
        assert!(others.set(others.bytes() + budget.capacity() - budget.used(), 0));
        let mut starved = Prefetcher::within(true, true, budget);
        assert!(!starved.start());
        assert!(read(&mut starved, MemType::BTree, 136, &node(1000), 1 << 20).is_empty());
        assert_eq!(starved.table_bytes(), 0);
    }
}
