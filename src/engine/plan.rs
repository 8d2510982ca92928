//! Which bytes to fetch: pure decisions, no I/O.
//!
//! A read first needs the blocks that cover it; that part is never negotiable
//! (fetching less than a read needs turns one large read into many round trips).
//! On top of that, the read-ahead ([`super::read_ahead`]) adds a window after
//! the read when the read continues a sequential stream. [`runs`] groups the blocks to fetch into contiguous runs, one
//! request each, [`split`] cuts a long run into parts fetched concurrently, and
//! [`parts`] does both for a whole fetch so that it takes one round when it can.

use std::ops::Range;

/// The blocks (by index) that cover `len` bytes at `pos`, for `len > 0`.
pub fn blocks_covering(pos: u64, len: u64, block_size: u64) -> Range<u64> {
    let first = pos / block_size;
    let last = (pos + len - 1) / block_size;
    first..last + 1
}

/// The blocks that lie wholly inside `bytes`, a range that runs to the end
/// of the file (so the file's last block, however short, is whole).
pub fn blocks_within(bytes: Range<u64>, block_size: u64) -> Range<u64> {
    bytes.start.div_ceil(block_size)..bytes.end.div_ceil(block_size)
}

/// The blocks (by index, ascending, each once) that cover all of `ranges`;
/// empty ranges cover none.
///
/// Lazy: the ranges are sorted (their number is the caller's), but their
/// blocks are produced one at a time, so that a caller can stop early and a
/// range of any length — one a file or a server named, say — costs no
/// memory for blocks nobody takes.
pub fn blocks_of(
    ranges: impl IntoIterator<Item = Range<u64>>,
    block_size: u64,
) -> impl Iterator<Item = u64> {
    let mut ranges: Vec<Range<u64>> = ranges.into_iter().filter(|r| r.end > r.start).collect();
    ranges.sort_unstable_by_key(|r| r.start);
    let mut next_free = 0u64;
    ranges.into_iter().flat_map(move |r| {
        let covering = blocks_covering(r.start, r.end - r.start, block_size);
        // Ranges sorted by start: a block already produced is below `next_free`.
        let from = covering.start.max(next_free);
        next_free = next_free.max(covering.end);
        from..covering.end.max(from)
    })
}

/// Groups sorted, distinct block indices into maximal contiguous runs.
pub fn runs(blocks: &[u64]) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for &b in blocks {
        match out.last_mut() {
            Some(run) if run.end == b => run.end += 1,
            _ => out.push(b..b + 1),
        }
    }
    out
}

/// Cuts a run (of blocks, or of bytes: any one unit) into at most
/// `max_parts` parts of at least `min_part` of that unit each, as equal as
/// possible, in order.
pub fn split(run: Range<u64>, max_parts: u64, min_part: u64) -> Vec<Range<u64>> {
    let len = run.end.saturating_sub(run.start);
    if len == 0 {
        return Vec::new();
    }
    let parts = (len / min_part.max(1)).clamp(1, max_parts.max(1));
    let (base, extra) = (len / parts, len % parts);
    let mut out = Vec::with_capacity(parts as usize);
    let mut start = run.start;
    for i in 0..parts {
        let size = base + u64::from(i < extra);
        out.push(start..start + size);
        start += size;
    }
    out
}

/// Plans the requests that fetch `blocks` (sorted, distinct indices) with at
/// most `max_parts` requests in flight: ideally one round.
///
/// While there are more runs than requests can go at once, the two closest
/// runs are merged if at most `max_gap` blocks lie between them (refetching a
/// short gap costs less than waiting for a second round). If fewer runs than
/// `max_parts` remain, the spare requests split the longest runs, each part at
/// least `min_part` blocks. The returned parts may include gap blocks that
/// `blocks` does not list; they are in order and never overlap.
pub fn parts(blocks: &[u64], max_parts: u64, min_part: u64, max_gap: u64) -> Vec<Range<u64>> {
    let max_parts = max_parts.max(1) as usize;
    let min_part = min_part.max(1);
    let mut runs = runs(blocks);
    while runs.len() > max_parts {
        let Some((at, gap)) = runs
            .windows(2)
            .map(|w| w[1].start - w[0].end)
            .enumerate()
            .min_by_key(|&(_, gap)| gap)
        else {
            break;
        };
        if gap > max_gap {
            break;
        }
        runs[at].end = runs[at + 1].end;
        runs.remove(at + 1);
    }
    let mut counts = vec![1u64; runs.len()];
    for _ in runs.len()..max_parts {
        // The spare part goes to the run with the longest parts (on a tie, the
        // one whose parts stay longer after the split).
        let per_part = |i: usize, extra: u64| (len(&runs[i]), counts[i] + extra);
        let longer = |(la, na): (u64, u64), (lb, nb): (u64, u64)| {
            (u128::from(la) * u128::from(nb)).cmp(&(u128::from(lb) * u128::from(na)))
        };
        let best = (0..runs.len())
            .filter(|&i| len(&runs[i]) >= min_part * (counts[i] + 1))
            .max_by(|&a, &b| {
                longer(per_part(a, 0), per_part(b, 0))
                    .then(longer(per_part(a, 1), per_part(b, 1)))
                    .then(b.cmp(&a))
            });
        match best {
            Some(i) => counts[i] += 1,
            None => break,
        }
    }
    runs.into_iter()
        .zip(counts)
        .flat_map(|(run, n)| split(run, n, 1))
        .collect()
}

fn len(run: &Range<u64>) -> u64 {
    run.end - run.start
}

/// The byte range of a run of blocks, clamped to the file size.
pub fn byte_range(blocks: &Range<u64>, block_size: u64, size: u64) -> Range<u64> {
    let start = blocks.start.saturating_mul(block_size).min(size);
    let end = blocks.end.saturating_mul(block_size).min(size);
    start..end
}

/// The byte range of block `index`, clamped to the file size (the last
/// block of a file may be short).
pub fn block_bytes(index: u64, block_size: u64, size: u64) -> Range<u64> {
    byte_range(&(index..index + 1), block_size, size)
}

/// The length of block `index` (see [`block_bytes`]).
pub fn block_len(index: u64, block_size: u64, size: u64) -> u64 {
    let block = block_bytes(index, block_size, size);
    block.end - block.start
}

/// The byte runs of the read `pos..pos + len` that lie in blocks not
/// cached: `cached[k]` says whether block `pos / block_size + k` is. A long
/// read fetches these straight into its buffer and copies the rest out of
/// the cache, so that it never holds its bytes twice.
pub fn uncached_runs(pos: u64, len: u64, block_size: u64, cached: &[bool]) -> Vec<Range<u64>> {
    let end = pos + len;
    let first = pos / block_size;
    let mut runs: Vec<Range<u64>> = Vec::new();
    for (k, &here) in cached.iter().enumerate() {
        if here {
            continue;
        }
        let block = first + k as u64;
        let bytes = (block * block_size).max(pos)..((block + 1) * block_size).min(end);
        match runs.last_mut() {
            Some(last) if last.end == bytes.start => last.end = bytes.end,
            _ => runs.push(bytes),
        }
    }
    runs
}

/// `runs` (sorted, apart) joined across their smallest gaps until at most
/// `most` are left: a read that must fetch them in one round fetches the
/// bytes of those gaps again rather than make more requests than it has
/// lanes (a request costs a round trip; a gap's bytes, little).
pub fn joined_runs(runs: Vec<Range<u64>>, most: usize) -> Vec<Range<u64>> {
    let most = most.max(1);
    if runs.len() <= most {
        return runs;
    }
    let mut gaps: Vec<(u64, usize)> = runs
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1].start - w[0].end, i))
        .collect();
    gaps.sort_unstable();
    let mut closed = vec![false; runs.len()];
    for &(_, i) in &gaps[..runs.len() - most] {
        closed[i] = true;
    }
    let mut out: Vec<Range<u64>> = Vec::with_capacity(most);
    for (i, run) in runs.into_iter().enumerate() {
        match out.last_mut() {
            Some(last) if i > 0 && closed[i - 1] => last.end = run.end,
            _ => out.push(run),
        }
    }
    out
}

/// How many parts each of the runs of `lens` bytes is split into, so that
/// all of them together are at most `lanes` (one round) — every run one at
/// least — and the longest parts are as short as they can be, none shorter
/// than `min_part` unless its run is.
pub fn parts_per_run(lens: &[u64], lanes: u64, min_part: u64) -> Vec<u64> {
    let mut parts = vec![1u64; lens.len()];
    let mut spare = lanes.saturating_sub(lens.len() as u64);
    while spare > 0 {
        // The run whose parts are longest, if splitting it further leaves
        // parts of at least `min_part`.
        let next = (0..lens.len())
            .filter(|&i| lens[i] / (parts[i] + 1) >= min_part.max(1))
            .max_by_key(|&i| lens[i].div_ceil(parts[i]));
        let Some(i) = next else { break };
        parts[i] += 1;
        spare -= 1;
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parts_go_to_the_longest_runs_within_the_lanes() {
        assert_eq!(parts_per_run(&[970, 10, 10, 10], 4, 1), [1, 1, 1, 1]);
        assert_eq!(parts_per_run(&[970, 10, 10], 6, 1), [4, 1, 1]);
        assert_eq!(parts_per_run(&[400], 4, 150), [2]);
        assert_eq!(parts_per_run(&[400], 4, 1), [4]);
        assert_eq!(parts_per_run(&[], 4, 1), Vec::<u64>::new());
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn runs_are_joined_across_their_smallest_gaps() {
        let runs = vec![0..10, 12..20, 50..60, 61..70];
        assert_eq!(joined_runs(runs.clone(), 4), runs);
        assert_eq!(joined_runs(runs.clone(), 3), [0..10, 12..20, 50..70]);
        assert_eq!(joined_runs(runs.clone(), 2), [0..20, 50..70]);
        assert_eq!(joined_runs(runs.clone(), 1), [0..70]);
        assert_eq!(joined_runs(runs, 0), [0..70]);
        assert!(joined_runs(Vec::new(), 3).is_empty());
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn uncached_runs_are_the_reads_bytes_in_missing_blocks_merged() {
        // A read from 5 to 35 over blocks of 10: blocks 0..4.
        assert_eq!(uncached_runs(5, 30, 10, &[false; 4]), [5..35]);
        assert_eq!(
            uncached_runs(5, 30, 10, &[true, false, false, true]),
            [10..30]
        );
        assert_eq!(
            uncached_runs(5, 30, 10, &[false, true, false, true]),
            [5..10, 20..30]
        );
        assert!(uncached_runs(5, 30, 10, &[true; 4]).is_empty());
    }

    #[test]
    fn blocks_within_a_tail_are_whole() {
        assert_eq!(blocks_within(3..10, 4), 1..3);
        assert_eq!(blocks_within(4..10, 4), 1..3);
        assert_eq!(blocks_within(9..10, 4), 3..3, "a partial block is left");
        assert_eq!(blocks_within(0..8, 4), 0..2);
    }

    #[test]
    fn blocks_of_several_ranges_are_sorted_and_distinct() {
        let (empty_start, empty_end) = (50, 40);
        let ranges = [25..31, 0..5, 28..29, empty_start..empty_end, 7..7];
        assert_eq!(blocks_of(ranges, 10).collect::<Vec<_>>(), [0, 2, 3]);
        assert_eq!(blocks_of([], 10).count(), 0);
        let nested = [0..100, 10..20, 95..130, 200..201];
        assert_eq!(
            blocks_of(nested, 10).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20]
        );
    }

    #[test]
    fn blocks_of_a_huge_range_cost_only_those_taken() {
        // 2^40 blocks: collecting them would need 8 TiB.
        let huge = [0..1 << 50, 4096..1 << 49];
        let first: Vec<u64> = blocks_of(huge, 1024).take(3).collect();
        assert_eq!(first, [0, 1, 2]);
    }

    #[test]
    fn runs_group_contiguous_blocks() {
        assert_eq!(runs(&[]), Vec::<Range<u64>>::new());
        assert_eq!(runs(&[3]), vec![3..4]);
        assert_eq!(runs(&[1, 2, 3, 7, 8, 10]), vec![1..4, 7..9, 10..11]);
    }

    #[test]
    fn split_makes_equal_parts_of_at_least_the_minimum() {
        assert_eq!(split(0..23, 4, 4), vec![0..6, 6..12, 12..18, 18..23]);
        assert_eq!(split(5..8, 4, 4), vec![5..8]);
        assert_eq!(split(0..8, 4, 4), vec![0..4, 4..8]);
        assert_eq!(split(0..8, 1, 1), vec![0..8]);
        assert_eq!(split(0..0, 4, 4), Vec::<Range<u64>>::new());
    }

    #[test]
    fn parts_share_the_requests_among_runs_for_one_round() {
        // One long run: split as before.
        assert_eq!(
            parts(&(0..23).collect::<Vec<_>>(), 4, 4, 0),
            split(0..23, 4, 4)
        );
        // Two runs of 8 and 16 blocks with 4 requests: 1 + 3 parts, not 2 + 4.
        let blocks: Vec<u64> = (0..8).chain(9..25).collect();
        assert_eq!(parts(&blocks, 4, 4, 0), vec![0..8, 9..15, 15..20, 20..25]);
        // Short runs are never split below the minimum part.
        assert_eq!(parts(&[1, 2, 5], 4, 4, 0), vec![1..3, 5..6]);
    }

    #[test]
    fn parts_merge_the_closest_runs_only_when_there_are_too_many() {
        let blocks = [0, 2, 3, 7, 20];
        // Enough requests: nothing merged, no gap fetched.
        assert_eq!(parts(&blocks, 4, 1, 10), vec![0..1, 2..4, 7..8, 20..21]);
        // Two requests: the one-block gap goes first, then the three-block one.
        assert_eq!(parts(&blocks, 2, 1, 10), vec![0..8, 20..21]);
        // Gaps longer than allowed are never fetched; the extra runs queue.
        assert_eq!(parts(&blocks, 2, 1, 1), vec![0..4, 7..8, 20..21]);
    }

    #[test]
    fn byte_ranges_are_clamped_to_the_size() {
        assert_eq!(byte_range(&(2..4), 10, 35), 20..35);
        assert_eq!(byte_range(&(0..1), 10, 5), 0..5);
        assert_eq!((block_len(3, 10, 35), block_len(0, 10, 5)), (5, 5));
    }

    proptest! {
        #[test]
        fn split_covers_the_run_exactly(start in 0u64..1000, len in 0u64..500,
                                        parts in 1u64..10, min in 1u64..50) {
            let got = split(start..start + len, parts, min);
            prop_assert!(got.len() as u64 <= parts);
            let mut at = start;
            for p in &got {
                prop_assert_eq!(p.start, at);
                prop_assert!(p.end > p.start);
                if got.len() > 1 { prop_assert!(p.end - p.start >= min); }
                at = p.end;
            }
            prop_assert_eq!(at, start + len);
        }

        #[test]
        fn parts_cover_every_block_in_order(mut blocks in proptest::collection::vec(0u64..400, 0..60),
                                            max_parts in 1u64..9, min in 1u64..20, gap in 0u64..30) {
            blocks.sort_unstable();
            blocks.dedup();
            let got = parts(&blocks, max_parts, min, gap);
            let mut end = 0;
            for p in &got {
                prop_assert!(p.end > p.start);
                prop_assert!(p.start >= end, "in order, no overlap");
                end = p.end;
            }
            for b in &blocks {
                prop_assert!(got.iter().any(|p| p.contains(b)));
            }
            let fetched: u64 = got.iter().map(len).sum();
            let run_count = runs(&blocks).len() as u64;
            // Gap blocks are fetched only to save requests.
            prop_assert!(fetched == blocks.len() as u64 || run_count > max_parts);
            prop_assert!(got.len() as u64 <= max_parts.max(run_count));
        }

        #[test]
        fn blocks_covering_covers_exactly(pos in 0u64..10_000, len in 1u64..10_000, bs in 1u64..5000) {
            let b = blocks_covering(pos, len, bs);
            prop_assert!(b.start * bs <= pos);
            prop_assert!(b.end * bs >= pos + len);
            prop_assert!((b.start + 1) * bs > pos);
            prop_assert!((b.end - 1) * bs < pos + len);
        }

    }
}
