//! Which byte spans a wave of metadata targets is fetched in, priced by the
//! link.
//!
//! Every target of a wave is fetched in the same round, so merging two
//! targets saves no round trip of this wave. What a span saves is a later
//! one: metadata clusters (pynwb puts most object headers in the last few
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

use std::ops::Range;

use crate::LinkEstimate;

/// The bytes fetched past the last target of a span, as a share of the gap
/// worth filling: writers allocate a group's members after the group, so
/// the metadata a wave's targets point to next mostly lies just past them,
/// as likely metadata as the gaps between them.
pub(crate) fn ahead_of_cluster(gap: u64) -> u64 {
    gap / 2
}

/// The gap filled when the link is not known yet (or not considered): the
/// bytes one round trip carries at about 70 MB/s and 30 ms per request.
pub(crate) const UNKNOWN_LINK_GAP: u64 = 2 << 20;

/// The least gap worth filling, whatever the link: one block of HDF5's
/// usual size costs less than any round trip.
const LEAST_GAP: u64 = 64 << 10;

/// The most bytes a gap may hold, however fast the link: beyond it, a
/// cluster has ended.
const MOST_GAP: u64 = 32 << 20;

/// The largest gap between two targets of one wave worth fetching with
/// them: the bytes the link carries in one round trip (see the module's
/// documentation).
pub(crate) fn gap_worth_filling(link: Option<LinkEstimate>) -> u64 {
    link.map_or(UNKNOWN_LINK_GAP, |l| l.bandwidth_delay_product())
        .clamp(LEAST_GAP, MOST_GAP)
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

/// The bytes `spans` cover.
pub(crate) fn total(spans: &[Range<u64>]) -> u64 {
    spans.iter().map(|s| s.end - s.start).sum()
}

/// The least bytes guessed beyond the metadata HDF5 has read, whatever the
/// link.
pub(crate) const LEAST_BUDGET: u64 = 16 << 20;

/// The rounds of every connection the guesses beyond what HDF5 has read may
/// take, on a link whose speed is known.
const BUDGET_ROUNDS: u64 = 4;

/// How many bytes may be guessed beyond the metadata HDF5 has read: what
/// [`BUDGET_ROUNDS`] rounds of `lanes` connections carry (a fast link then
/// fetches the metadata of a file whose writer spread it among the data),
/// at least [`LEAST_BUDGET`] and at most [`MOST_BUDGET`].
pub(crate) fn guess_budget(link: Option<LinkEstimate>, lanes: u64) -> u64 {
    let carried = link.map_or(0, |l| l.bandwidth_delay_product());
    carried
        .saturating_mul(BUDGET_ROUNDS * lanes)
        .clamp(LEAST_BUDGET, MOST_BUDGET)
}

/// The most bytes guessed beyond what HDF5 read, however fast the link: a
/// budget near the block cache's size (256 MiB by default) would evict what
/// it fetched.
const MOST_BUDGET: u64 = 128 << 20;

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
mod tests {
    use std::time::Duration;

    use super::*;

    fn estimate(rtt_ms: u64, bytes_per_second: u64) -> Option<LinkEstimate> {
        Some(LinkEstimate {
            round_trip: Duration::from_millis(rtt_ms),
            bytes_per_second,
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
    fn the_budget_grows_with_the_link() {
        assert_eq!(guess_budget(None, 16), LEAST_BUDGET);
        // 30 ms at 25 MB/s: 750 kB a round, 16 connections, 4 rounds.
        assert_eq!(guess_budget(estimate(30, 25_000_000), 16), 48_000_000);
        assert_eq!(guess_budget(estimate(30, 1_000_000), 16), LEAST_BUDGET);
        assert_eq!(guess_budget(estimate(1000, u64::MAX), 16), MOST_BUDGET);
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
}
