//! Which byte spans a wave of metadata targets is fetched in, priced by the
//! link.
//!
//! A wave of no more spans than the connections it may use is fetched in
//! one round, so merging two of its targets saves no round trip of this
//! wave; a wave of more takes a round per connection's worth, and merging
//! the closest spans until a round's worth fewer remain saves one
//! ([`fit_lanes`]). What a span saves otherwise is a later round trip: metadata clusters (pynwb puts most object headers in the last few
//! MB, an icephys session in its first few, netCDF-C in one region), so the
//! bytes between two targets of one wave are likely to hold metadata the
//! parsers have not reached yet, or never will (structures no parser
//! follows). Filling a gap of `g` bytes costs `g / throughput` of transfer
//! time; it is worth it when that is no more than the round trip it is
//! likely to save, that is when `g` is at most the bandwidth-delay product.
//! On a fast link a whole cluster then arrives in one wave; at 25 MB/s and
//! 30 ms per request, only gaps under 750 kB are filled.
//!
//! The same price sizes the step of a stream of unforeseen metadata reads:
//! HDF5 reading through a region nothing pointed to is read ahead in spans
//! that start at one round trip's worth of bytes and double while the
//! reads stay inside.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use crate::hdf5::meta::Target;
use crate::link::LinkEstimate;

/// The bytes fetched past the last target of a span, as a share of the gap
/// worth filling: writers allocate a group's members after the group, so
/// the metadata a wave's targets point to next mostly lies just past them,
/// as likely metadata as the gaps between them.
pub(crate) fn ahead_of_cluster(gap: u64) -> u64 {
    gap / 2
}

/// The bytes fetched before the first target of a span, as a share of the
/// gap worth filling: a few structures (a local heap's data segment, a
/// header's continuation) go just before what points to them.
pub(crate) fn behind_cluster(gap: u64) -> u64 {
    gap / 8
}

/// The gap filled when the link is not known yet (or not considered): the
/// bytes one round trip carries at about 70 MB/s and 30 ms per request.
pub(crate) const UNKNOWN_LINK_GAP: u64 = 2 << 20;

/// The least gap worth filling, whatever the link: one block of HDF5's
/// usual size costs less than any round trip.
const LEAST_GAP: u64 = 64 << 10;

/// The most bytes a gap may hold, however fast the link: beyond it, a
/// cluster has ended. (With 32 MiB, a link measured at 1 GB/s filled 41 MB
/// of a pynwb file's raw data around its metadata, and the walk took 124 ms
/// instead of 83: the bytes cost the host's CPU, which the link's price
/// leaves out.)
const MOST_GAP: u64 = 4 << 20;

/// The largest gap between two targets of one wave worth fetching with
/// them: the bytes the link carries in one round trip (see the module's
/// documentation).
pub(crate) fn gap_worth_filling(link: Option<LinkEstimate>) -> u64 {
    link.map_or(UNKNOWN_LINK_GAP, |l| l.bandwidth_delay_product())
        .clamp(LEAST_GAP, MOST_GAP)
}

/// The largest gap worth filling for a file crawling on a line not
/// measured yet, with `sharing` files crawling on it at once: as likely a
/// slow line's survey as a fast one's, they share [`UNKNOWN_LINK_GAP`]
/// (at least [`LEAST_GAP`] each) until a wave or two has measured it.
pub(crate) fn unknown_line_gap(sharing: u64) -> u64 {
    (UNKNOWN_LINK_GAP / sharing.max(1)).max(LEAST_GAP)
}

/// The spans to fetch `targets` in: sorted, each covering targets whose
/// gaps are at most `max_gap`, the gaps between them, and `ahead` bytes
/// past its last target.
pub(crate) fn spans(targets: &[Range<u64>], max_gap: u64, ahead: u64) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = targets.iter().filter(|r| !r.is_empty()).cloned().collect();
    sorted.sort_unstable_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        let r = r.start..r.end.saturating_add(ahead);
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(max_gap) => {
                last.end = last.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

/// The rounds a wave of `count` requests takes on `lanes` connections.
pub(crate) fn rounds(count: usize, lanes: u64) -> u64 {
    (count as u64).div_ceil(lanes.max(1))
}

/// Merges neighbouring `spans` of one wave (sorted by start), the closest
/// first, so that the wave takes fewer rounds on `lanes` connections: a
/// wave of more requests than lanes takes a round per lane's worth, and
/// each merge leaves one request fewer. A round is saved only if enough
/// gaps can be merged to drop one; a merged span takes in at most `gap`
/// bytes of gaps (what a connection carries in one round trip, so that its
/// longer transfer still ends about when the round it saves would have),
/// and all merges at most `room` bytes. Spans that cannot save a round are
/// left as they are.
pub(crate) fn fit_lanes(
    spans: Vec<Range<u64>>,
    lanes: u64,
    gap: u64,
    room: u64,
) -> Vec<Range<u64>> {
    // Spans that overlap (a chunk-index node inside a widened cluster, say)
    // are one already.
    let mut disjoint: Vec<Range<u64>> = Vec::with_capacity(spans.len());
    for span in spans {
        match disjoint.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => disjoint.push(span),
        }
    }
    let merges = greedy_merges(&disjoint, lanes, gap, room);
    let mut merged = Merging::new(&disjoint);
    for _ in 0..merges {
        merged.next(gap);
    }
    merged.spans()
}

/// How many of the closest-first merges of `spans` (disjoint, sorted) to
/// make: the most that end on a whole round fewer on `lanes` connections,
/// before a merge would take in more than `gap` bytes of gaps or all of
/// them more than `room`.
fn greedy_merges(spans: &[Range<u64>], lanes: u64, gap: u64, room: u64) -> usize {
    let lanes = lanes.max(1);
    let mut merging = Merging::new(spans);
    let (mut count, mut made, mut kept) = (spans.len(), 0, 0);
    let mut spent = 0u64;
    while rounds(count, lanes) > 1 {
        let Some(between) = merging.next(gap) else {
            break;
        };
        spent = spent.saturating_add(between);
        if spent > room {
            break;
        }
        count -= 1;
        made += 1;
        // Only a merge that drops a round is kept, with those before it.
        if (count as u64) % lanes == 0 {
            kept = made;
        }
    }
    kept
}

/// Spans merged with their neighbours one gap at a time, the smallest gap
/// first (the leftmost of equal ones), never one that would make a span
/// take in more than its share of gaps. Each gap is looked at once, from a
/// heap: a wave of any size costs `n log n`, not `n²`.
struct Merging<'a> {
    spans: &'a [Range<u64>],
    /// For each span, the first of the merged span it is part of (a
    /// union-find forest; only roots' entries below are meaningful).
    first: Vec<usize>,
    /// For a merged span (by its first span): where it ends, and the gap
    /// bytes it has taken in.
    end: Vec<u64>,
    taken: Vec<u64>,
    /// The gaps not yet merged or refused: (bytes, the span before it).
    gaps: BinaryHeap<Reverse<(u64, usize)>>,
}

impl<'a> Merging<'a> {
    fn new(spans: &'a [Range<u64>]) -> Self {
        let gaps = spans
            .windows(2)
            .enumerate()
            .map(|(i, pair)| Reverse((pair[1].start.saturating_sub(pair[0].end), i)))
            .collect();
        Merging {
            spans,
            first: (0..spans.len()).collect(),
            end: spans.iter().map(|s| s.end).collect(),
            taken: vec![0; spans.len()],
            gaps,
        }
    }

    fn root(&mut self, mut i: usize) -> usize {
        while self.first[i] != i {
            self.first[i] = self.first[self.first[i]];
            i = self.first[i];
        }
        i
    }

    /// Makes the next merge; returns the gap it took in, or `None` if no
    /// gap may be merged.
    fn next(&mut self, gap: u64) -> Option<u64> {
        while let Some(Reverse((between, before))) = self.gaps.pop() {
            // The span after a gap not yet merged starts a merged span.
            let (left, right) = (self.root(before), before + 1);
            let taken = self.taken[left]
                .saturating_add(between)
                .saturating_add(self.taken[right]);
            // Gaps taken in only grow: a merge refused now stays refused.
            if taken > gap {
                continue;
            }
            self.first[right] = left;
            self.end[left] = self.end[left].max(self.end[right]);
            self.taken[left] = taken;
            return Some(between);
        }
        None
    }

    fn spans(self) -> Vec<Range<u64>> {
        (0..self.spans.len())
            .filter(|&i| self.first[i] == i)
            .map(|i| self.spans[i].start..self.end[i])
            .collect()
    }
}

/// The least gap a wave fills when the budget cannot cover larger ones:
/// a page of a writer's metadata, which costs no time next to a round
/// trip on any link.
const LEAST_SHRUNK_GAP: u64 = 4 << 10;

/// The bytes fetched on each side of a target among raw data (a node or
/// block of a chunk index). HDF5 allocates small metadata from 2 KiB blocks
/// of its metadata aggregator, and a flush writes the structures it
/// allocated together side by side: an extensible array's index block, a
/// super block and the data blocks created with them, a B-tree node and
/// the sibling split from it. A few kB around a piece then bring the next
/// level of the index with it, for a transfer no link prices near a round
/// trip.
pub(crate) const BESIDE_PIECE: u64 = 4 << 10;

/// The bytes fetched behind and ahead of a piece of metadata HDF5 missed
/// where bytes are dear: [`BESIDE_PIECE`] behind, and ahead a sixteenth of
/// what a connection carries in a round trip (what HDF5 reads next is
/// often just past: a long header's rest, the heap after a node), from
/// [`BESIDE_PIECE`] to [`MOST_EXACT_AHEAD`].
pub(crate) fn exact_slack(link: Option<LinkEstimate>) -> (u64, u64) {
    let ahead = link.map_or(0, |l| l.bytes_per_round(1) / 16);
    (BESIDE_PIECE, ahead.clamp(BESIDE_PIECE, MOST_EXACT_AHEAD))
}

/// The most bytes fetched ahead of a piece HDF5 missed where bytes are
/// dear.
const MOST_EXACT_AHEAD: u64 = 64 << 10;

/// The spans to fetch a wave in, within `allowed` bytes: `exact` targets
/// (chunk-index nodes, whose gaps are raw data) with [`BESIDE_PIECE`] bytes
/// on each side, `clustered` ones with the gaps between them filled up to
/// `gap` bytes (and [`ahead_of_cluster`] past each span, [`behind_cluster`]
/// before it), the gap halved until the spans fit, down to
/// [`LEAST_SHRUNK_GAP`], then none. Where a writer spread its metadata
/// among the data, the wave then still reads each small cluster whole (a
/// group's header with its members next to it), not each target alone.
///
/// Spans are priced as they will be fetched ([`cost`]: in whole blocks of
/// `block_size`, or as pieces), and filled gaps may take only half of
/// `allowed`: the waves after this one need room for their targets.
pub(crate) fn within_budget(
    clustered: &[Range<u64>],
    exact: &[Range<u64>],
    gap: u64,
    allowed: u64,
    block_size: u64,
) -> Vec<Range<u64>> {
    let beside: Vec<Range<u64>> = exact
        .iter()
        .filter(|r| !r.is_empty())
        .map(|r| r.start.saturating_sub(BESIDE_PIECE)..r.end.saturating_add(BESIDE_PIECE))
        .collect();
    let exact = spans(&beside, 0, 0);
    let with = |mut spans: Vec<Range<u64>>| {
        spans.extend(exact.iter().cloned());
        spans.sort_unstable_by_key(|s| s.start);
        spans
    };
    let mut gap = gap;
    loop {
        let behind = behind_cluster(gap);
        let widened: Vec<Range<u64>> = clustered
            .iter()
            .map(|r| r.start.saturating_sub(behind)..r.end)
            .collect();
        let wanted = with(spans(&widened, gap, ahead_of_cluster(gap)));
        if gap == 0 || cost(&wanted, block_size) <= allowed / 2 {
            return wanted;
        }
        gap = if gap / 2 >= LEAST_SHRUNK_GAP {
            gap / 2
        } else {
            0
        };
    }
}

/// How one wave of the crawl fetches the targets it does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WavePlan {
    /// The spans to fetch, sorted.
    pub spans: Vec<Range<u64>>,
    /// Whether they go as pieces ([`as_pieces`]) rather than whole blocks.
    pub as_pieces: bool,
    /// The most bytes the wave may fetch.
    pub allowed: u64,
}

/// Which of `targets` (in the order found) lie in the first `most` of
/// `spans` (sorted, disjoint) that the targets reach in that order: the
/// spans of the targets found first, as many as a wave takes.
pub(crate) fn first_found_spans(
    spans: &[Range<u64>],
    targets: &[Target],
    most: usize,
) -> Vec<bool> {
    let span_of = |t: &Target| {
        let at = spans.partition_point(|s| s.start <= t.bytes.start);
        at.checked_sub(1).filter(|&i| spans[i].end > t.bytes.start)
    };
    let mut chosen = std::collections::HashSet::new();
    for t in targets {
        if chosen.len() == most {
            break;
        }
        if let Some(i) = span_of(t) {
            chosen.insert(i);
        }
    }
    targets
        .iter()
        .map(|t| span_of(t).is_some_and(|i| chosen.contains(&i)))
        .collect()
}

/// The share of `allowed` that `part` bytes of `whole` take (all of it if
/// `whole` is empty).
pub(crate) fn share_of(allowed: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return allowed;
    }
    let share = u128::from(allowed) * u128::from(part.min(whole)) / u128::from(whole);
    u64::try_from(share).unwrap_or(allowed)
}

/// The spans a wave fetches its `missing` targets in: [`within_budget`]'s,
/// with the closest merged while that saves a round on `lanes` connections
/// ([`fit_lanes`]) and still fits. `gap` is the gap worth filling on the
/// link, `allowed` the bytes the wave may guess, `block_size` the cache's.
/// Where `bytes_dear`, the spans always go as pieces: a span rounded out to
/// whole blocks would fetch up to twice the bytes the wave priced.
pub(crate) fn plan_wave(
    missing: &[Target],
    gap: u64,
    lanes: u64,
    allowed: u64,
    block_size: u64,
    bytes_dear: bool,
) -> WavePlan {
    // Priced as pieces throughout: blocks of one byte cost their bytes.
    let block_size = if bytes_dear { 1 } else { block_size };
    // A chunk index's nodes lie among its chunks: the gaps between them
    // are raw data, never worth fetching with them.
    let (among_data, clustered): (Vec<&Target>, Vec<&Target>) =
        missing.iter().partition(|t| t.what.lies_among_raw_data());
    let ranges = |ts: Vec<&Target>| ts.iter().map(|t| t.bytes.clone()).collect::<Vec<_>>();
    let wanted = within_budget(
        &ranges(clustered),
        &ranges(among_data),
        gap,
        allowed,
        block_size,
    );
    // More spans than lanes take more than one round: merge the closest
    // while the gaps cost less than the round they save.
    let room = (allowed / 2).saturating_sub(cost(&wanted, block_size));
    let fitted = fit_lanes(wanted.clone(), lanes, gap, room);
    // Merging the sparse spans may turn the wave from pieces into whole
    // blocks, priced differently: kept only if it still fits.
    let spans = if cost(&fitted, block_size) <= allowed / 2 {
        fitted
    } else {
        wanted
    };
    WavePlan {
        as_pieces: bytes_dear || as_pieces(&spans, block_size),
        spans,
        allowed,
    }
}

/// The bytes fetching `spans` costs: their own if they go as pieces (see
/// [`as_pieces`]), else those of the blocks of `block_size` covering them.
pub(crate) fn cost(spans: &[Range<u64>], block_size: u64) -> u64 {
    if as_pieces(spans, block_size) {
        return total(spans);
    }
    let bs = block_size.max(1);
    spans
        .iter()
        .map(|s| (s.end.div_ceil(bs) - s.start / bs).saturating_mul(bs))
        .sum()
}

/// The bytes `spans` cover.
pub(crate) fn total(spans: &[Range<u64>]) -> u64 {
    spans.iter().map(|s| s.end - s.start).sum()
}

/// Whether a wave's spans go as pieces (each its own bytes, beside the
/// block cache) rather than in whole blocks of `block_size`: when any span
/// would cost more than twice its bytes in blocks — a target alone among
/// raw data, where a block is mostly bytes nobody wants, and a wave of
/// hundreds of them would cost hundreds of blocks. The wave's other spans
/// go with them, so that it stays one round of one kind of request.
pub(crate) fn as_pieces(spans: &[Range<u64>], block_size: u64) -> bool {
    let bs = block_size.max(1);
    spans.iter().any(|s| {
        let blocks = s.end.div_ceil(bs) - s.start / bs;
        blocks.saturating_mul(bs) > (s.end - s.start).saturating_mul(2)
    })
}

/// The least bytes guessed beyond the metadata HDF5 has read where bytes
/// are cheap (or the link unknown).
pub(crate) const LEAST_BUDGET: u64 = 16 << 20;

/// The least bytes guessed beyond the metadata HDF5 has read on a line
/// whose bytes are dear: a few pages of a writer's metadata.
const LEAST_DEAR_BUDGET: u64 = 256 << 10;

/// The rounds of every connection the guesses beyond what HDF5 has read may
/// take, on a link whose speed is known.
const BUDGET_ROUNDS: u64 = 4;

/// The bytes of guesses each byte of metadata HDF5 reads allows where bytes
/// are dear, beyond the budget: a reader walking a level of many small
/// pieces (a session's hundreds of sweeps, each header after its data)
/// keeps the crawl that far ahead of it, so that it seldom waits.
pub(crate) const DEAR_GUESSES_PER_READ: u64 = 64;

/// The gap between two targets of a wave filled where bytes are dear: a
/// writer's structures allocated together (a group's header, its heap and
/// tree) lie this close; anything farther apart has raw data between.
pub(crate) const DEAR_GAP: u64 = 16 << 10;

/// The largest gap between a wave's targets worth filling where bytes are
/// dear: half of what the file's share of the line (shared by the files
/// `sharing` it) carries in a round trip on one connection, so that a gap
/// filled costs half the round it may save; at least [`DEAR_GAP`] (a
/// writer's cluster), at most the gap worth filling where bytes are cheap.
/// A walk of one file on a 25 MB/s line then takes a level's neighbours
/// with it, and a survey of dozens of files on a 12.5 MB/s line only its
/// clusters.
pub(crate) fn dear_gap(link: Option<LinkEstimate>, sharing: u64) -> u64 {
    let share = link.map_or(0, |l| l.bytes_per_round(1)) / 2 / sharing.max(1);
    share.clamp(DEAR_GAP, gap_worth_filling(link).max(DEAR_GAP))
}

/// The window a target's piece is widened to where bytes are dear: HDF5
/// allocates small metadata in blocks of 2 KiB (its metadata aggregator's
/// default), so what a group's header points to (its heap, its tree, its
/// next continuation) most often lies in the same few KiB. Fetched with it,
/// those cost no round of their own.
pub(crate) const DEAR_WINDOW: u64 = 4 << 10;

/// `bytes` widened to the windows of `window` bytes (aligned to it) it
/// touches, so that targets near each other come in one piece and a
/// window fetched once holds the next target found in it.
pub(crate) fn widened(bytes: Range<u64>, window: u64) -> Range<u64> {
    let window = window.max(1);
    let start = bytes.start - bytes.start % window;
    let end = bytes.end.div_ceil(window).saturating_mul(window);
    start..end.max(bytes.end)
}

/// The rounds of the line the guesses beyond what HDF5 has read may take
/// where bytes are dear: enough to stay a level or two ahead of a reader.
const DEAR_BUDGET_ROUNDS: u64 = 2;

/// The part of a round of the line that levels HDF5 has not reached may
/// take in one wave (see [`room_beyond_reach`]): the reader may never go
/// there (a survey reads the top two levels and moves on).
const ROOM_BEYOND_REACH_SHARE: u64 = 2;

/// The bytes of levels HDF5 has not reached yet that one wave may fetch
/// where bytes are dear: half a round of what the line carries on `lanes`
/// connections, shared by the files `sharing` it. Fetched later, those
/// levels would cost a round each; fetched now, their bytes cost half of
/// one (a walk of one file on a 25 MB/s line takes its levels a few at a
/// time; a survey of many files on a slow line shares so little that the
/// levels wait for their reader).
pub(crate) fn room_beyond_reach(link: Option<LinkEstimate>, lanes: u64, sharing: u64) -> u64 {
    link.map_or(0, |l| l.bytes_per_round(lanes)) / ROOM_BEYOND_REACH_SHARE / sharing.max(1)
}

/// How many bytes may be guessed beyond the metadata HDF5 has read: what
/// [`BUDGET_ROUNDS`] rounds of `lanes` connections carry as far as the line
/// they share carries it ([`LinkEstimate::bytes_per_round`]; a fast link
/// then fetches the metadata of a file whose writer spread it among the
/// data), at most [`MOST_BUDGET`] — and never more than the share of half
/// the block cache's `cache_capacity` of each of the files `sharing` the
/// line, whose blocks the guesses would otherwise evict as they came. At
/// least [`LEAST_BUDGET`] where bytes are cheap (on a
/// line not measured yet, shared by the files `sharing` it); on a
/// line whose bytes are dear ([`bytes_are_dear`]) the guesses then stay
/// [`DEAR_BUDGET_ROUNDS`] rounds' worth ahead of the reader, and grow as it reads: a survey
/// that reads a file's top levels fetches little more than those. There,
/// the files `sharing` the line (crawling on it at once) share the rounds'
/// bytes too.
pub(crate) fn guess_budget(
    link: Option<LinkEstimate>,
    lanes: u64,
    cache_capacity: u64,
    sharing: u64,
) -> u64 {
    let carried = link.map_or(0, |l| l.bytes_per_round(lanes));
    let (least, rounds, share) = if bytes_are_dear(link) {
        (LEAST_DEAR_BUDGET, DEAR_BUDGET_ROUNDS, sharing.max(1))
    } else if link.is_none() {
        // Many files crawling at once on a line not measured yet are as
        // likely a slow line's survey as a fast one's: they share the
        // least budget until it is measured (a wave or two).
        let shared = (LEAST_BUDGET / sharing.max(1)).max(LEAST_DEAR_BUDGET);
        (shared, BUDGET_ROUNDS, 1)
    } else {
        (LEAST_BUDGET, BUDGET_ROUNDS, 1)
    };
    // The half of the cache is shared by the files guessing at once, on
    // any line: sixteen crawls of a batch, each with half of it, evicted
    // each other's blocks (and the files' first blocks, read again at
    // their opens).
    let half = cache_capacity / 2;
    let cache_share = (half / sharing.max(1)).max(LEAST_DEAR_BUDGET).min(half);
    (carried.saturating_mul(rounds) / share)
        .clamp(least.min(cache_share), MOST_BUDGET)
        .min(cache_share)
}

/// Whether the link's bytes are dear (see
/// [`LinkEstimate::bytes_are_dear`]); unknown, they are not.
pub(crate) fn bytes_are_dear(link: Option<LinkEstimate>) -> bool {
    link.is_some_and(|l| l.bytes_are_dear())
}

/// The most bytes guessed beyond what HDF5 read, however fast the link: a
/// budget near the block cache's size (256 MiB by default) would evict what
/// it fetched.
pub(crate) const MOST_BUDGET: u64 = 128 << 20;

/// A stream of metadata reads that nothing pointed to: where it has been
/// read ahead to, and how far the next step goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stream {
    /// The bytes read ahead so far.
    pub covered: Range<u64>,
    /// The length of the next span.
    pub step: u64,
}

/// The most a stream's step grows to.
const MOST_STEP: u64 = 16 << 20;

impl Stream {
    /// What to read ahead after a metadata read at `addr` that nothing
    /// pointed to and that had to wait for the network, in a file of `len`
    /// bytes; `first_step` is the price of one round trip in bytes
    /// ([`gap_worth_filling`]). A read inside or just past the stream's
    /// span continues it with a step twice as long; any other starts a new
    /// stream there.
    pub fn on_unforeseen_miss(
        stream: &mut Option<Stream>,
        addr: u64,
        first_step: u64,
        len: u64,
    ) -> Option<Range<u64>> {
        let continues = stream.as_ref().is_some_and(|s| {
            s.covered.start <= addr && addr <= s.covered.end.saturating_add(s.step)
        });
        let (fresh, next) = match stream.take() {
            Some(s) if continues => {
                let start = s.covered.end.max(addr);
                let step = (s.step * 2).min(MOST_STEP.max(s.step));
                let end = start.saturating_add(step).min(len);
                (
                    start..end,
                    Stream {
                        covered: s.covered.start..end,
                        step,
                    },
                )
            }
            _ => {
                let end = addr.saturating_add(first_step).min(len);
                (
                    addr..end,
                    Stream {
                        covered: addr..end,
                        step: first_step,
                    },
                )
            }
        };
        *stream = Some(next);
        (!fresh.is_empty()).then_some(fresh)
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range, as a list of them
mod tests {
    #[test]
    fn a_dear_target_is_widened_to_the_windows_it_touches() {
        use super::widened;
        assert_eq!(widened(5000..5100, 4096), 4096..8192);
        assert_eq!(widened(4096..8192, 4096), 4096..8192);
        assert_eq!(widened(8000..8300, 4096), 4096..12288);
        assert_eq!(widened(0..1, 4096), 0..4096);
        assert_eq!(widened(10..20, 0), 10..20);
        assert_eq!(widened(u64::MAX - 5..u64::MAX, 4096).end, u64::MAX);
    }

    /// The first form of [`fit_lanes`], quadratic: the model it must agree with.
    fn fit_lanes_by_rescanning(
        spans: Vec<Range<u64>>,
        lanes: u64,
        gap: u64,
        room: u64,
    ) -> Vec<Range<u64>> {
        // Each span with the gap bytes it has taken in; spans that overlap (a
        // chunk-index node inside a widened cluster, say) are one already.
        let mut current: Vec<(Range<u64>, u64)> = Vec::with_capacity(spans.len());
        for span in spans {
            match current.last_mut() {
                Some((last, _)) if span.start <= last.end => last.end = last.end.max(span.end),
                _ => current.push((span, 0)),
            }
        }
        let mut room = room;
        while rounds(current.len(), lanes) > 1 {
            let target = (rounds(current.len(), lanes) - 1) * lanes.max(1);
            let mut trial = current.clone();
            let mut spent = 0u64;
            while trial.len() as u64 > target {
                let best = (0..trial.len() - 1)
                    .map(|i| {
                        let between = trial[i + 1].0.start.saturating_sub(trial[i].0.end);
                        (between, i, trial[i].1 + between + trial[i + 1].1)
                    })
                    .filter(|&(_, _, taken)| taken <= gap)
                    .min();
                let Some((between, i, taken)) = best else {
                    return current.into_iter().map(|(s, _)| s).collect();
                };
                spent += between;
                if spent > room {
                    return current.into_iter().map(|(s, _)| s).collect();
                }
                let next = trial.remove(i + 1);
                trial[i] = (trial[i].0.start..trial[i].0.end.max(next.0.end), taken);
            }
            room -= spent;
            current = trial;
        }
        current.into_iter().map(|(s, _)| s).collect()
    }

    use std::time::Duration;

    use super::*;
    use crate::hdf5::meta::What;

    fn estimate(rtt_ms: u64, bytes_per_second: u64) -> Option<LinkEstimate> {
        Some(LinkEstimate {
            round_trip: Duration::from_millis(rtt_ms),
            bytes_per_second,
            line_bytes_per_second: None,
        })
    }

    #[test]
    fn a_fast_link_fetches_a_cluster_whole_and_a_slow_one_only_small_gaps() {
        // Object headers a few hundred kB apart in the last MB of a file,
        // and a chunk-index node far away.
        let targets = [
            900_000_000..900_000_512,
            900_300_000..900_300_512,
            901_200_000..901_200_512,
            500_000_000..500_004_096,
        ];
        // 30 ms at 500 MB/s: 15 MB a round trip.
        let fast = spans(&targets, gap_worth_filling(estimate(30, 500_000_000)), 0);
        assert_eq!(
            fast,
            vec![500_000_000..500_004_096, 900_000_000..901_200_512]
        );
        // 30 ms at 25 MB/s: 750 kB a round trip: the 300 kB gap only.
        let slow = spans(&targets, gap_worth_filling(estimate(30, 25_000_000)), 0);
        assert_eq!(
            slow,
            vec![
                500_000_000..500_004_096,
                900_000_000..900_300_512,
                901_200_000..901_200_512
            ]
        );
        // 100 ms at 2 MB/s: 200 kB; no gap here is that small.
        let slower = spans(&targets, gap_worth_filling(estimate(100, 2_000_000)), 0);
        assert_eq!(slower.len(), 4);
    }

    #[test]
    fn the_gap_is_bounded_both_ways_and_known_without_a_link() {
        assert_eq!(gap_worth_filling(None), UNKNOWN_LINK_GAP);
        assert_eq!(gap_worth_filling(estimate(1, 1_000)), LEAST_GAP);
        assert_eq!(gap_worth_filling(estimate(500, 10_000_000_000)), MOST_GAP);
    }

    #[test]
    fn files_on_an_unknown_line_share_its_gap() {
        assert_eq!(unknown_line_gap(1), UNKNOWN_LINK_GAP);
        assert_eq!(unknown_line_gap(0), UNKNOWN_LINK_GAP);
        assert_eq!(unknown_line_gap(4), UNKNOWN_LINK_GAP / 4);
        assert_eq!(unknown_line_gap(1000), LEAST_GAP);
    }

    #[test]
    fn where_bytes_are_dear_a_wave_goes_as_pieces_of_its_own_bytes() {
        let block = 128 << 10;
        // A cluster just across a block boundary: two blocks for 150 kB.
        let t = |start: u64, len: u64| Target {
            what: What::Unforeseen,
            bytes: start..start + len,
        };
        let missing = [t(block - 75_000, 70_000), t(block + 1_000, 70_000)];
        let cheap = plan_wave(&missing, 64 << 10, 4, 1 << 20, block, false);
        assert!(!cheap.as_pieces, "{:?}", cheap.spans);
        assert_eq!(cost(&cheap.spans, block), 2 * block);
        let dear = plan_wave(&missing, 64 << 10, 4, 1 << 20, block, true);
        assert!(dear.as_pieces);
        assert_eq!(dear.spans, cheap.spans, "the same spans");
        assert!(total(&dear.spans) < cost(&cheap.spans, block) * 3 / 4);
    }

    #[test]
    fn a_wave_past_its_rounds_keeps_the_spans_found_first_and_their_share() {
        assert_eq!(share_of(1000, 1, 4), 250);
        let t = |start: u64| Target {
            what: What::Unforeseen,
            bytes: start..start + 10,
        };
        let spans = [0..100, 200..300, 400..500];
        let found = [t(450), t(10), t(250), t(50), t(460)];
        assert_eq!(
            first_found_spans(&spans, &found, 2),
            [true, true, false, true, true],
            "the spans of the two targets found first, all of their targets"
        );
        assert_eq!(first_found_spans(&spans, &found, 3), [true; 5]);
        assert_eq!(
            first_found_spans(&spans, &[t(150)], 1),
            [false],
            "in no span"
        );
        assert_eq!(share_of(u64::MAX, 3, 3), u64::MAX);
        assert_eq!(share_of(1000, 0, 0), 1000);
    }

    #[test]
    fn the_budget_grows_with_the_link() {
        const CACHE: u64 = 256 << 20;
        assert_eq!(guess_budget(None, 16, CACHE, 1), LEAST_BUDGET);
        // Files crawling at once on an unknown line share it.
        assert_eq!(guess_budget(None, 16, CACHE, 4), LEAST_BUDGET / 4);
        assert_eq!(guess_budget(None, 16, CACHE, 1000), LEAST_DEAR_BUDGET);
        // 30 ms at 25 MB/s: 750 kB a round, 16 connections, 4 rounds.
        assert_eq!(
            guess_budget(estimate(30, 25_000_000), 16, CACHE, 1),
            48_000_000
        );
        // The files guessing at once share half of the cache, however
        // cheap the line.
        assert_eq!(
            guess_budget(estimate(30, 125_000_000), 64, CACHE, 16),
            CACHE / 2 / 16
        );
        // 30 ms at 1 MB/s: 30 kB a round, however many connections (one
        // line carries them all): bytes are dear, the least such budget.
        let shared = |rtt_ms, bps| {
            estimate(rtt_ms, bps).map(|mut l| {
                l.line_bytes_per_second = Some(bps);
                l
            })
        };
        // Half a round of the line, shared by the files on it.
        assert_eq!(room_beyond_reach(shared(30, 12_500_000), 64, 1), 187_500);
        assert_eq!(room_beyond_reach(shared(30, 12_500_000), 64, 36), 5_208);
        assert_eq!(room_beyond_reach(None, 64, 1), 0);
        assert_eq!(dear_gap(shared(30, 12_500_000), 1), 187_500);
        assert_eq!(dear_gap(shared(30, 12_500_000), 36), DEAR_GAP);
        assert_eq!(dear_gap(None, 1), DEAR_GAP);
        assert_eq!(
            guess_budget(shared(30, 1_000_000), 16, CACHE, 1),
            LEAST_DEAR_BUDGET
        );
        // 12.5 MB/s shared: 375 kB a round, two rounds.
        assert_eq!(guess_budget(shared(30, 12_500_000), 64, CACHE, 1), 750_000);
        // 125 MB/s shared: cheap, as before.
        assert_eq!(
            guess_budget(shared(30, 125_000_000), 64, CACHE, 8),
            LEAST_BUDGET
        );
        assert!(!bytes_are_dear(None));
        // Files crawling on one dear line at once share its rounds.
        assert_eq!(guess_budget(shared(30, 12_500_000), 64, CACHE, 2), 375_000);
        assert_eq!(
            guess_budget(shared(30, 12_500_000), 64, CACHE, 16),
            LEAST_DEAR_BUDGET
        );
        assert_eq!(
            guess_budget(estimate(1000, u64::MAX), 16, CACHE, 1),
            MOST_BUDGET
        );
        // A small cache: half of it, whatever the link.
        assert_eq!(guess_budget(None, 16, 16 << 20, 1), 8 << 20);
        assert_eq!(
            guess_budget(estimate(1000, u64::MAX), 16, 64 << 20, 1),
            32 << 20
        );
    }

    #[test]
    fn a_small_budget_shrinks_the_gaps_filled_before_dropping_them() {
        // Sweeps 800 kB apart, each a header with its members a few kB on.
        let clustered: Vec<Range<u64>> = (0..100u64)
            .flat_map(|i| {
                let at = i * 800_000;
                [at..at + 512, at + 3_000..at + 3_512]
            })
            .collect();
        let node = [50_000_000..50_002_096];
        let block = 128 << 10;
        // A budget for all: one span.
        let all = within_budget(&clustered, &node, 2 << 20, u64::MAX, block);
        assert_eq!(all.len(), 2);
        // 20 MB: each sweep's cluster whole, with a little after it, in
        // at most half the budget.
        let some = within_budget(&clustered, &node, 2 << 20, 20_000_000, block);
        assert_eq!(some.len(), 101);
        assert!(cost(&some, block) <= 10_000_000, "{}", cost(&some, block));
        assert!(some.iter().all(|s| s.end - s.start >= 2_096));
        // Too little for any gap: every target alone, the node always,
        // with the few kB beside it.
        let none = within_budget(&clustered, &node, 2 << 20, 1000, block);
        assert_eq!(none.len(), 201);
        let beside = node[0].start - BESIDE_PIECE..node[0].end + BESIDE_PIECE;
        assert!(none.contains(&beside));
    }

    #[test]
    fn spans_are_priced_as_they_are_fetched() {
        let block = 100;
        // Dense: whole blocks, the partly covered ones too.
        assert_eq!(cost(&[50..250], block), 300);
        // One span alone among raw data: the wave goes as pieces.
        assert_eq!(cost(&[50..250, 1000..1010], block), 210);
    }

    #[test]
    fn a_target_alone_among_raw_data_is_fetched_as_a_piece() {
        let block = 128 << 10;
        // A cluster of headers fills its blocks: blocks.
        assert!(!as_pieces(
            &[0..300_000, 1 << 20..(1 << 20) + 100_000],
            block
        ));
        // One header among a sweep's data: a piece, and the wave with it.
        assert!(as_pieces(&[0..300_000, 900_000..900_512], block));
        // A span across a block boundary costs two blocks.
        assert!(as_pieces(&[block - 50_000..block + 50_000], block));
        assert!(!as_pieces(&[], block));
    }

    #[test]
    fn overlapping_and_touching_targets_merge_and_empty_ones_vanish() {
        let merged = spans(&[10..20, 15..30, 30..40, 50..50, 60..70], 0, 0);
        assert_eq!(merged, vec![10..40, 60..70]);
        // Reading on past each span's end joins spans that come within it.
        let ahead = spans(&[10..20, 30..40, 100..110], 5, 25);
        assert_eq!(ahead, vec![10..65, 100..135]);
    }

    #[test]
    fn a_stream_of_unforeseen_reads_doubles_its_step_while_it_stays_inside() {
        let mut s = None;
        let first = Stream::on_unforeseen_miss(&mut s, 1000, 100, 10_000);
        assert_eq!(first, Some(1000..1100));
        // A read just past the span continues the stream: twice the step.
        let second = Stream::on_unforeseen_miss(&mut s, 1150, 100, 10_000);
        assert_eq!(second, Some(1150..1350));
        let third = Stream::on_unforeseen_miss(&mut s, 1300, 100, 10_000);
        assert_eq!(third, Some(1350..1750));
        // Far away: a new stream, of the first step again.
        let elsewhere = Stream::on_unforeseen_miss(&mut s, 8000, 100, 10_000);
        assert_eq!(elsewhere, Some(8000..8100));
        // The end of the file bounds it.
        let end = Stream::on_unforeseen_miss(&mut s, 9990, 100, 10_000);
        assert_eq!(end, Some(9990..10_000));
    }

    #[test]
    fn fit_lanes_agrees_with_its_model() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..2000 {
            let n = next() % 40;
            let mut at = 0u64;
            let spans: Vec<Range<u64>> = (0..n)
                .map(|_| {
                    // Some overlap or touch; some gaps are equal.
                    let start = at.saturating_sub(next() % 3)
                        + [0, 5, 5, 100, 1000][next() as usize % 5] * (next() % 4);
                    at = start + next() % 500 + 1;
                    start..at
                })
                .collect();
            let lanes = next() % 6 + 1;
            let gap = [0, 10, 600, 5000, u64::MAX][next() as usize % 5];
            let room = [0, 50, 2000, u64::MAX][next() as usize % 4];
            assert_eq!(
                fit_lanes(spans.clone(), lanes, gap, room),
                fit_lanes_by_rescanning(spans.clone(), lanes, gap, room),
                "case {case}: {spans:?} on {lanes} lanes, gap {gap}, room {room}"
            );
        }
    }

    #[test]
    fn a_wave_of_any_size_looks_at_each_gap_once() {
        // A chunk index can name a quarter of a million nodes in one wave.
        let spans: Vec<Range<u64>> = (0..262_144u64).map(|i| i * 100..i * 100 + 10).collect();
        let mut merging = Merging::new(&spans);
        let mut merges = 0;
        while merging.next(u64::MAX).is_some() {
            merges += 1;
        }
        assert_eq!(merges, spans.len() - 1);
        assert!(merging.gaps.is_empty());
        assert_eq!(fit_lanes(spans, 4, u64::MAX, u64::MAX).len(), 4);
    }

    #[test]
    fn a_wave_is_merged_to_fit_the_lanes_closest_gaps_first() {
        // Five spans on two lanes: three rounds. One merge makes it two,
        // two more make it one (two spans on two lanes), the closest first.
        let spans = vec![0..10, 20..30, 1000..1010, 1015..1020, 5000..5010];
        assert_eq!(rounds(spans.len(), 2), 3);
        let merged = fit_lanes(spans.clone(), 2, 10_000, 10_000);
        assert_eq!(merged, [0..1020, 5000..5010]);
        // No gap of at most 4 bytes: nothing to merge.
        assert_eq!(fit_lanes(spans.clone(), 2, 4, 10_000), spans);
        // A merged span may take in at most 970 bytes of gaps: the closest
        // gap saves the third round; the second would need two more merges,
        // and the second of them would take in too much.
        let one_saved = [0..10, 20..30, 1000..1020, 5000..5010];
        assert_eq!(fit_lanes(spans.clone(), 2, 970, 10_000), one_saved);
        // So does room for only 15 bytes of gaps in all.
        assert_eq!(fit_lanes(spans.clone(), 2, 10_000, 15), one_saved);
        // Already one round: untouched.
        assert_eq!(fit_lanes(spans.clone(), 8, 10_000, 10_000), spans);
        // A span inside another is part of it: no byte of either is lost.
        let inside = vec![0..3000, 2000..2100, 9000..9010];
        assert_eq!(fit_lanes(inside.clone(), 1, 10_000, 10_000), [0..9010]);
        assert_eq!(fit_lanes(inside, 8, 10_000, 10_000), [0..3000, 9000..9010]);
    }
}
