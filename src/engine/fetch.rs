//! One fetch of a claim's blocks, and how fetched bytes are cut into and
//! copied out of the caller's buffer: the engine decides where blocks come
//! from, a [`Fetch`] takes them and counts what they cost.

use std::ops::Range;
use std::sync::Arc;

use crate::cache::{Block, Claim};
use crate::error::{Error, Result};
use crate::wait::Stop;

/// One fetch of a claim's blocks: the claim, which of its blocks the caller
/// needs (handed back as they come, after those the claim found cached),
/// when it gives up, and what it has cost. The engine orders where the
/// blocks come from (memory, disk, network); the fetch takes them and
/// records the round trips they cost, which a read counts once, at its end
/// (no count is passed from call to call).
pub(crate) struct Fetch<'n> {
    pub(crate) claim: Claim,
    is_needed: &'n (dyn Fn(u64) -> bool + Sync),
    pub(super) got: Vec<(u64, Block)>,
    /// What the fetch may wait for: its deadline, its stops, its lane.
    pub(crate) stop: Stop,
    /// The round trips it has cost so far (requests in sequence, waits of
    /// its own), counted into the file's once when it ends.
    pub(super) round_trips: u32,
    /// Owned blocks a tier left to others (another process fetches them):
    /// the tiers below it fetch around them (sorted).
    pub(crate) left_to_others: Vec<u64>,
    /// Whether the block store was asked already for what it holds.
    pub(crate) store_asked: bool,
}

/// A fetch no caller waits on: a guess fetched ahead.
pub(super) type Guess = Fetch<'static>;

pub(super) fn nobody_needs(_: u64) -> bool {
    false
}

impl<'n> Fetch<'n> {
    pub(super) fn new(
        mut claim: Claim,
        is_needed: &'n (dyn Fn(u64) -> bool + Sync),
        stop: Stop,
    ) -> Fetch<'n> {
        let got = claim.take_found();
        Fetch {
            claim,
            is_needed,
            got,
            stop,
            round_trips: 0,
            left_to_others: Vec::new(),
            store_asked: false,
        }
    }

    /// Records `n` more round trips, one after another.
    pub(crate) fn count_rounds(&mut self, n: u32) {
        self.round_trips += n;
    }

    /// Records a wait of its own (for another's fetch): a round trip, unless
    /// one was counted already, which the wait overlapped.
    pub(crate) fn count_a_wait(&mut self) {
        self.round_trips = self.round_trips.max(1);
    }

    /// Gives block `index` to the cache and its waiters, and to the caller
    /// if it needs it.
    pub(crate) fn hand_out(&mut self, index: u64, block: Block) {
        if (self.is_needed)(index) {
            self.got.push((index, block.clone()));
        }
        self.claim.fulfil(index, block);
    }

    /// Takes the outcome of fetching `part`: its `owned` blocks (sorted; gap
    /// blocks fetched to save a request are cached or fetched by others
    /// already), or the failure, which goes to their waiters. Returns the
    /// failure if it hit a needed block.
    pub(crate) fn settle_part(
        &mut self,
        owned: &[u64],
        part: Range<u64>,
        result: Result<Vec<Vec<u8>>>,
    ) -> Option<Error> {
        let is_owned = |i: &u64| owned.binary_search(i).is_ok();
        match result {
            Ok(blocks) => {
                for (i, data) in part.zip(blocks).filter(|(i, _)| is_owned(i)) {
                    self.hand_out(i, Arc::new(data));
                }
                None
            }
            Err(e) => {
                let stopped = self.stop.is_stopped();
                for i in part.clone() {
                    self.claim.fail(i, &e, stopped);
                }
                part.clone()
                    .any(|i| is_owned(&i) && (self.is_needed)(i))
                    .then_some(e)
            }
        }
    }
}

/// Cuts `buf`, which holds the bytes from `pos` on, into one piece per range
/// of `parts` (consecutive, starting at `pos`).
pub(super) fn cut(
    buf: &mut [u8],
    pos: u64,
    parts: Vec<Range<u64>>,
) -> Vec<(Range<u64>, &mut [u8])> {
    let mut pieces = Vec::with_capacity(parts.len());
    let mut rest = buf;
    let mut at = pos;
    for part in parts {
        // Parts are in order; the bytes between them are skipped.
        let (_, from) = rest.split_at_mut((part.start - at) as usize);
        let (piece, after) = from.split_at_mut((part.end - part.start) as usize);
        at = part.end;
        pieces.push((part, piece));
        rest = after;
    }
    pieces
}

/// Copies the bytes at `pos` from consecutive blocks, the first starting at
/// `first_start`, into `buf`.
pub(super) fn copy_out<'a>(
    blocks: impl IntoIterator<Item = &'a Block>,
    first_start: u64,
    pos: u64,
    buf: &mut [u8],
) {
    let mut written = 0usize;
    let mut skip = (pos - first_start) as usize;
    for block in blocks {
        let take = (block.len() - skip).min(buf.len() - written);
        buf[written..written + take].copy_from_slice(&block[skip..skip + take]);
        written += take;
        skip = 0;
    }
    debug_assert_eq!(written, buf.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_out_spans_blocks() {
        let blocks = [
            Arc::new(b"abcd".to_vec()),
            Arc::new(b"efgh".to_vec()),
            Arc::new(b"ij".to_vec()),
        ];
        let mut buf = [0u8; 7];
        copy_out(&blocks, 4, 6, &mut buf);
        assert_eq!(&buf, b"cdefghi");
    }

    #[test]
    fn cut_gives_each_part_its_piece() {
        let mut buf = *b"abcdefghij";
        let pieces = cut(&mut buf, 100, vec![100..103, 103..107, 107..110]);
        let got: Vec<(Range<u64>, &[u8])> = pieces.into_iter().map(|(r, p)| (r, &*p)).collect();
        assert_eq!(
            got,
            [
                (100..103, &b"abc"[..]),
                (103..107, b"defg"),
                (107..110, b"hij")
            ]
        );
    }
}
