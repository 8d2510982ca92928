//! Pieces: small byte ranges fetched exactly, kept beside a file's blocks.
//!
//! A guess at metadata scattered through a file (an object header after
//! each sweep's data, one every few hundred KB) would cost a whole block per
//! target; a piece costs the target's own bytes. A reader whose range lies
//! inside one piece is served from it; any other read goes to the blocks as
//! before, so a piece is only ever a shortcut, never the only copy.
//!
//! Pieces never overlap: of a new range, only the bytes no piece holds or
//! is fetching are fetched, and a piece that arrives next to another joins
//! it, so a read across both is served whole. The files sharing a block
//! cache share one budget of bytes for their pieces ([`PiecesBudget`]),
//! however many are open, each piece weighing its bytes and its entry
//! ([`PIECE_ENTRY`]); past it, ranges are not taken (their readers fetch
//! blocks), and a closed file's pieces give their bytes back.

mod store;

use crate::wait::Stop;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Acquire, Ordering::Release};
use std::time::Instant;

use crate::cache::Served;
use crate::cache::budget::{MemoryBudget, btree_bytes};
use crate::stats::RoundMark;
use crate::sync::{Condvar, Mutex};

pub(crate) use store::{cached_from, found_at_open, guess, holds_or_fetches, keep_while_open};

/// A piece here: its first byte and its bytes.
pub(crate) type Here = (u64, Arc<[u8]>);

/// A file's pieces.
pub(crate) struct Pieces {
    state: Mutex<State>,
    arrived: Condvar,
    budget: Arc<PiecesBudget>,
    /// Whether a piece was ever claimed or put: until then a read looks no
    /// further, without the lock (a file no driver reads never has one).
    used: AtomicBool,
}

/// The bytes of pieces the files sharing one block cache may hold (here or
/// coming) together, each piece weighing its bytes and its entry
/// ([`PIECE_ENTRY`]).
pub(crate) type PiecesBudget = MemoryBudget;

/// What a piece weighs beside its bytes: its entry in its file's B-tree of
/// pieces, and the counts of its shared buffer. Without it, a budget of
/// bytes would let a wave of one-byte pieces take a hundred times as much.
pub(crate) const PIECE_ENTRY: u64 =
    btree_bytes(2, 8, size_of::<Piece>()) - btree_bytes(1, 8, size_of::<Piece>()) + 16;

impl Drop for Pieces {
    fn drop(&mut self) {
        self.budget.give(self.state.get_mut().bytes);
    }
}

#[derive(Default)]
struct State {
    /// Each piece by its first byte.
    by_start: BTreeMap<u64, Piece>,
    /// What the pieces here and coming weigh: their bytes and entries.
    bytes: u64,
    /// Counts the pieces that arrived (or were put here), so that a copy
    /// of them elsewhere (on disk) knows whether it is behind.
    arrivals: u64,
}

struct Piece {
    end: u64,
    bytes: Option<Arc<[u8]>>,
    /// While the piece is coming: the round trips the file's readers had
    /// counted when its fetch started, and whether a reader has waited for
    /// it yet (see [`Served::waited_a_round`]).
    started: RoundMark,
    waited: bool,
}

impl Pieces {
    /// A store whose pieces take their bytes from `budget`.
    pub(crate) fn new(budget: Arc<PiecesBudget>) -> Pieces {
        Pieces {
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
            budget,
            used: AtomicBool::new(false),
        }
    }

    /// The budget the pieces take their bytes from.
    pub(crate) fn budget(&self) -> &PiecesBudget {
        &self.budget
    }

    /// Joins the piece claimed at `start`, which holds `bytes` now, with
    /// its neighbours here; the entries that go give their weight back.
    fn join(&self, state: &mut State, start: u64, bytes: Vec<u8>) {
        let gone = state.join(start, bytes) * PIECE_ENTRY;
        state.bytes -= gone;
        self.budget.give(gone);
    }

    /// Takes the bytes of `ranges` that no piece holds or is fetching,
    /// as many as fit, marking them as coming, the file's readers having
    /// counted `rounds` round trips so far. Returns the ranges taken, which
    /// the caller must [`deliver`](Self::deliver) (or fail) each.
    pub(crate) fn claim(&self, ranges: &[Range<u64>], started: RoundMark) -> Vec<Range<u64>> {
        self.used.store(true, Release);
        let mut state = self.state.lock();
        let mut taken = Vec::new();
        for range in ranges {
            for gap in state.gaps_in(range.clone()) {
                let weight = gap.end - gap.start + PIECE_ENTRY;
                if !self.budget.take(weight) {
                    continue;
                }
                state.bytes += weight;
                state.by_start.insert(
                    gap.start,
                    Piece {
                        end: gap.end,
                        bytes: None,
                        started,
                        waited: false,
                    },
                );
                taken.push(gap);
            }
        }
        taken
    }

    /// Hands over the bytes of a claimed range, or `None` if its fetch
    /// failed (its readers then read blocks).
    pub(crate) fn deliver(&self, range: Range<u64>, bytes: Option<Vec<u8>>) {
        let mut state = self.state.lock();
        let claimed = state
            .by_start
            .get(&range.start)
            .is_some_and(|p| p.end == range.end && p.bytes.is_none());
        if claimed {
            match bytes.filter(|b| b.len() as u64 == range.end - range.start) {
                Some(bytes) => self.join(&mut state, range.start, bytes),
                None => {
                    state.by_start.remove(&range.start);
                    let weight = range.end - range.start + PIECE_ENTRY;
                    state.bytes -= weight;
                    self.budget.give(weight);
                }
            }
        }
        drop(state);
        self.arrived.notify_all();
    }

    /// Fills `buf` with the bytes at `pos` if the pieces hold them all,
    /// waiting until `deadline` for pieces still coming; `rounds` is the
    /// round trips the file's readers have counted now.
    pub(crate) fn read(
        &self,
        pos: u64,
        buf: &mut [u8],
        wait: Option<&Stop>,
        now: RoundMark,
    ) -> Served {
        if !self.used.load(Acquire) {
            return Served::NotHeld;
        }
        let deadline = wait.map_or_else(Instant::now, Stop::deadline);
        let end = pos.saturating_add(buf.len() as u64);
        let mut state = self.state.lock();
        let mut waited_a_round = false;
        let mut timed_out = false;
        loop {
            match state.cover(pos, end) {
                Cover::None => return Served::NotHeld,
                Cover::Here(start) => {
                    let bytes = state.by_start[&start].bytes.as_ref().expect("here");
                    let at = (pos - start) as usize;
                    buf.copy_from_slice(&bytes[at..at + buf.len()]);
                    return Served::Copied { waited_a_round };
                }
                // Looked at once more after the deadline: a piece delivered
                // as it passed is served.
                Cover::Coming(_) if timed_out => return Served::NotHeld,
                Cover::Coming(starts) => {
                    for start in starts {
                        let piece = state.by_start.get_mut(&start).expect("coming");
                        waited_a_round |= !piece.waited && piece.started == now;
                        piece.waited = true;
                    }
                }
            }
            let (waited, _) = self
                .arrived
                .wait_until(state, crate::wait::slice_end(deadline));
            // Asked with no lock held: asking may run a host's code (take
            // an interpreter's lock, run a signal handler that reads).
            drop(waited);
            if wait.is_some_and(Stop::should_stop) {
                // The read fetches the bytes itself, which fails at once.
                return Served::NotHeld;
            }
            state = self.state.lock();
            timed_out = Instant::now() >= deadline;
        }
    }

    /// The pieces here (not those coming), in order, and the count of
    /// arrivals they reflect.
    pub(crate) fn here(&self) -> (u64, Vec<Here>) {
        let state = self.state.lock();
        let here = state
            .by_start
            .iter()
            .filter_map(|(&start, p)| Some((start, Arc::clone(p.bytes.as_ref()?))))
            .collect();
        (state.arrivals, here)
    }

    /// Puts `pieces` here (kept from an earlier run: each is where it says
    /// and none overlaps another), as far as there is room and no piece
    /// here or coming overlaps them.
    pub(crate) fn put(&self, pieces: Vec<(u64, Vec<u8>)>) {
        self.used.store(true, Release);
        let mut state = self.state.lock();
        for (start, bytes) in pieces {
            let range = start..start.saturating_add(bytes.len() as u64);
            let len = range.end - range.start;
            let fits = |weight| self.budget.take(weight);
            if len == 0
                || state.gaps_in(range.clone()) != [range.clone()]
                || !fits(len + PIECE_ENTRY)
            {
                continue;
            }
            state.bytes += len + PIECE_ENTRY;
            state.by_start.insert(
                start,
                Piece {
                    end: range.end,
                    bytes: None,
                    started: RoundMark::default(),
                    waited: false,
                },
            );
            self.join(&mut state, start, bytes);
        }
        drop(state);
        self.arrived.notify_all();
    }

    /// Whether one piece here holds all of `range`.
    pub(crate) fn holds(&self, range: Range<u64>) -> bool {
        matches!(
            self.state.lock().cover(range.start, range.end),
            Cover::Here(_)
        )
    }

    /// Whether pieces here or coming hold all of `range`: a read of it
    /// waits for them rather than fetching it again.
    pub(crate) fn holds_or_fetches(&self, range: Range<u64>) -> bool {
        !matches!(self.state.lock().cover(range.start, range.end), Cover::None)
    }

    /// The bytes from `pos` to the end of the piece holding it, at most
    /// `max`: empty if no piece here holds `pos`.
    pub(crate) fn bytes_from(&self, pos: u64, max: usize) -> Vec<u8> {
        let state = self.state.lock();
        let Some((&start, piece)) = state.by_start.range(..=pos).next_back() else {
            return Vec::new();
        };
        match &piece.bytes {
            Some(bytes) if piece.end > pos => {
                let at = (pos - start) as usize;
                bytes[at..bytes.len().min(at.saturating_add(max))].to_vec()
            }
            _ => Vec::new(),
        }
    }
}

/// How the pieces cover a range.
enum Cover {
    /// Not all of it.
    None,
    /// All of it, in the piece that starts there.
    Here(u64),
    /// All of it, in pieces one after the other, some still coming (those
    /// that start there); once they arrive, they are one piece.
    Coming(Vec<u64>),
}

impl State {
    /// How the pieces cover `pos..end`.
    fn cover(&self, pos: u64, end: u64) -> Cover {
        let Some((&first, _)) = self.by_start.range(..=pos).next_back() else {
            return Cover::None;
        };
        let mut coming = Vec::new();
        let (mut reached, mut pieces) = (first, 0);
        for (&start, piece) in self.by_start.range(first..) {
            if start != reached || reached >= end.max(pos + 1) {
                break;
            }
            if piece.bytes.is_none() {
                coming.push(start);
            }
            reached = piece.end;
            pieces += 1;
        }
        if reached < end || reached <= pos {
            return Cover::None;
        }
        match (coming.is_empty(), pieces) {
            (true, 1) => Cover::Here(first),
            // Pieces here next to each other are joined on arrival.
            (true, _) => Cover::None,
            (false, _) => Cover::Coming(coming),
        }
    }

    /// The parts of `range` no piece holds or is fetching.
    fn gaps_in(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        let mut at = range.start;
        let first = self
            .by_start
            .range(..=range.start)
            .next_back()
            .map_or(range.start, |(&s, _)| s);
        for (&start, piece) in self.by_start.range(first..range.end) {
            if start > at {
                gaps.push(at..start);
            }
            at = at.max(piece.end);
        }
        if at < range.end {
            gaps.push(at..range.end);
        }
        gaps
    }

    /// Makes the piece claimed at `start` hold `bytes`, joined with the
    /// pieces here just before and just after it; returns how many entries
    /// that joined into it.
    fn join(&mut self, start: u64, bytes: Vec<u8>) -> u64 {
        let mut joined_entries = 0;
        let mut first = start;
        let mut joined = bytes;
        let before = self.by_start.range(..start).next_back();
        if let Some((&s, p)) = before.filter(|(_, p)| p.end == start && p.bytes.is_some()) {
            let mut whole = p.bytes.as_ref().expect("here").to_vec();
            whole.extend_from_slice(&joined);
            joined = whole;
            self.by_start.remove(&start);
            first = s;
            joined_entries += 1;
        }
        let end = first + joined.len() as u64;
        let after = self.by_start.get(&end).filter(|p| p.bytes.is_some());
        if let Some(next) = after.and_then(|p| p.bytes.clone()) {
            joined.extend_from_slice(&next);
            self.by_start.remove(&end);
            joined_entries += 1;
        }
        let end = first + joined.len() as u64;
        let piece = self.by_start.get_mut(&first).expect("claimed or joined");
        piece.end = end;
        piece.bytes = Some(Arc::from(joined));
        self.arrivals += 1;
        joined_entries
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)] // one range, as a list of them
mod tests {
    use super::*;
    use std::time::Duration;

    /// What a piece weighs beside its bytes.
    const E: u64 = PIECE_ENTRY;

    fn store(capacity: u64) -> Pieces {
        Pieces::new(Arc::new(PiecesBudget::new(capacity)))
    }

    #[test]
    fn files_sharing_a_budget_hold_at_most_it_and_a_closed_file_gives_back() {
        let budget = Arc::new(PiecesBudget::new(100 + 2 * E));
        let a = Pieces::new(Arc::clone(&budget));
        let b = Pieces::new(Arc::clone(&budget));
        assert_eq!(a.claim(&[0..60], RoundMark(0)), [0..60]);
        assert!(
            b.claim(&[0..60], RoundMark(0)).is_empty(),
            "the other file took it"
        );
        assert_eq!(b.claim(&[0..40], RoundMark(0)), [0..40]);
        assert!(!budget.has_room(1));
        // A failed fetch gives its bytes back, and so does a closed file.
        b.deliver(0..40, None);
        assert_eq!(budget.used(), 60 + E);
        a.deliver(0..60, Some(vec![1; 60]));
        drop(a);
        assert_eq!(budget.used(), 0);
        b.put(vec![(0, vec![2; 100])]);
        assert!(b.holds(0..100));
        assert_eq!(budget.used(), 100 + E);
    }

    #[test]
    fn a_piece_weighs_its_entry_until_it_joins_a_neighbour() {
        assert!((64..=256).contains(&E), "{E}");
        let budget = Arc::new(PiecesBudget::new(1 << 20));
        let pieces = Pieces::new(Arc::clone(&budget));
        // A wave of one-byte pieces weighs their entries, not one byte each.
        let ones: Vec<Range<u64>> = (0..100).map(|i| i * 10..i * 10 + 1).collect();
        assert_eq!(pieces.claim(&ones, RoundMark(0)).len(), 100);
        assert_eq!(budget.used(), 100 * (1 + E));
        drop(pieces);
        assert_eq!(budget.used(), 0);
        let pieces = Pieces::new(Arc::clone(&budget));
        pieces.claim(&[0..10, 10..20, 20..30], RoundMark(0));
        assert_eq!(budget.used(), 30 + 3 * E);
        pieces.deliver(0..10, Some(vec![0; 10]));
        pieces.deliver(20..30, Some(vec![2; 10]));
        pieces.deliver(10..20, Some(vec![1; 10]));
        assert!(pieces.holds(0..30));
        assert_eq!(budget.used(), 30 + E, "one entry left");
    }

    fn soon() -> Stop {
        Stop::here().until(Instant::now() + Duration::from_secs(5))
    }

    #[test]
    fn a_read_inside_a_piece_is_served_from_it() {
        let pieces = store(1 << 20);
        assert_eq!(
            pieces.claim(&[100..200, 1000..1010], RoundMark(0)),
            [100..200, 1000..1010]
        );
        pieces.deliver(100..200, Some((0..100).collect()));
        let mut buf = [0; 10];
        assert_eq!(
            pieces.read(150, &mut buf, Some(&soon()), RoundMark(0)),
            Served::Copied {
                waited_a_round: false
            }
        );
        assert_eq!(buf, [50, 51, 52, 53, 54, 55, 56, 57, 58, 59]);
        assert!(pieces.holds(100..200));
        assert!(!pieces.holds(100..201), "past its end");
        assert!(!pieces.holds(1000..1010), "still coming");
        let mut past = [0; 60];
        assert_eq!(
            pieces.read(150, &mut past, Some(&soon()), RoundMark(0)),
            Served::NotHeld
        );
        assert_eq!(pieces.bytes_from(190, 100), (90..100).collect::<Vec<u8>>());
        assert!(pieces.bytes_from(200, 100).is_empty());
        assert!(pieces.bytes_from(50, 100).is_empty());
    }

    /// A read HDF5 missed inside pieces still coming waits for them: the
    /// driver fetches no slack around it (a round of its own after theirs).
    #[test]
    fn pieces_coming_hold_what_they_fetch_and_no_more() {
        let pieces = store(1 << 20);
        pieces.claim(&[100..200, 200..300], RoundMark(0));
        assert!(pieces.holds_or_fetches(150..250), "coming, side by side");
        assert!(!pieces.holds(150..160), "not here yet");
        assert!(!pieces.holds_or_fetches(250..310), "past the last");
        assert!(!pieces.holds_or_fetches(50..120), "before the first");
        pieces.deliver(100..200, Some(vec![0; 100]));
        assert!(pieces.holds_or_fetches(100..300), "one here, one coming");
        pieces.deliver(200..300, None);
        assert!(
            !pieces.holds_or_fetches(150..250),
            "a failed one holds nothing"
        );
        assert!(pieces.holds_or_fetches(100..200));
    }

    #[test]
    fn a_failed_or_short_piece_serves_nothing_and_frees_its_room() {
        let pieces = store(100 + E);
        assert_eq!(
            pieces.claim(&[0..60, 100..160], RoundMark(0)),
            vec![0..60],
            "room for one"
        );
        pieces.deliver(0..60, Some(vec![1; 59]));
        assert_eq!(
            pieces.read(0, &mut [0; 4], Some(&soon()), RoundMark(0)),
            Served::NotHeld
        );
        assert_eq!(pieces.claim(&[100..160], RoundMark(0)), vec![100..160]);
        pieces.deliver(100..160, None);
        assert!(!pieces.holds(100..101));
    }

    #[test]
    fn only_bytes_no_piece_holds_are_fetched_and_neighbours_join() {
        let pieces = store(1 << 20);
        assert_eq!(pieces.claim(&[100..200], RoundMark(0)), vec![100..200]);
        // A longer read of a header: only its rest, while the first part
        // is still coming.
        assert_eq!(
            pieces.claim(&[100..400, 150..160], RoundMark(0)),
            vec![200..400]
        );
        assert_eq!(pieces.claim(&[50..450], RoundMark(0)), [50..100, 400..450]);
        pieces.deliver(200..400, Some(vec![2; 200]));
        pieces.deliver(50..100, Some(vec![0; 50]));
        assert!(!pieces.holds(150..250), "a part still coming");
        pieces.deliver(100..200, Some(vec![1; 100]));
        assert!(pieces.holds(50..400));
        assert!(!pieces.holds(50..401));
        let mut buf = [9; 4];
        assert!(matches!(
            pieces.read(198, &mut buf, Some(&soon()), RoundMark(0)),
            Served::Copied { .. }
        ));
        assert_eq!(buf, [1, 1, 2, 2]);
        // The last part failed: the rest still serves what it holds.
        pieces.deliver(400..450, None);
        assert!(pieces.holds(50..400) && !pieces.holds(390..410));
        assert_eq!(pieces.claim(&[0..500], RoundMark(0)), [0..50, 400..500]);
    }

    #[test]
    fn pieces_put_back_serve_reads_and_never_overlap_others() {
        let first = store(1 << 20);
        first.claim(&[100..200, 300..310], RoundMark(0));
        first.deliver(100..200, Some((0..100).collect()));
        let (arrivals, here) = first.here();
        assert_eq!(arrivals, 1);
        assert_eq!(here.len(), 1, "only the pieces that came");
        let later = store(150 + 3 * E);
        later.claim(&[190..195], RoundMark(0));
        let kept: Vec<(u64, Vec<u8>)> = here.iter().map(|(s, b)| (*s, b.to_vec())).collect();
        // One overlaps a piece coming; one does not fit; one of no bytes.
        later.put(kept);
        later.put(vec![(0, vec![1; 10]), (1000, vec![2; 200]), (5000, vec![])]);
        assert!(!later.holds(100..101), "overlapped one coming");
        let mut buf = [0; 4];
        assert!(matches!(
            later.read(3, &mut buf, Some(&soon()), RoundMark(0)),
            Served::Copied { .. }
        ));
        assert_eq!(buf, [1; 4]);
        assert!(!later.holds(1000..1001) && !later.holds(5000..5001));
        assert_eq!(
            later.claim(&[0..20], RoundMark(0)),
            [10..20],
            "only what it lacks"
        );
        assert_eq!(later.here().0, 1);
    }

    /// Returns once a reader waits for the piece at `start`.
    fn reader_waits_for(pieces: &Pieces, start: u64) {
        remfile_testkit::time::eventually("a reader waits", Duration::from_secs(30), || {
            let state = pieces.state.lock();
            state.by_start.get(&start).is_some_and(|p| p.waited)
        });
    }

    #[test]
    fn a_read_across_a_piece_still_coming_waits_for_it() {
        let pieces = Arc::new(store(1 << 20));
        pieces.claim(&[0..10], RoundMark(0));
        pieces.deliver(0..10, Some(vec![1; 10]));
        pieces.claim(&[10..20], RoundMark(0));
        let deliver = {
            let pieces = Arc::clone(&pieces);
            std::thread::spawn(move || {
                reader_waits_for(&pieces, 10);
                pieces.deliver(10..20, Some(vec![2; 10]));
            })
        };
        let mut buf = [0; 4];
        let served = pieces.read(8, &mut buf, Some(&soon()), RoundMark(0));
        deliver.join().unwrap();
        assert!(matches!(served, Served::Copied { .. }));
        assert_eq!(buf, [1, 1, 2, 2]);
    }

    #[test]
    fn waiting_for_a_piece_costs_one_round_unless_a_round_overlapped_it() {
        let wait = |rounds_now: u64| {
            let pieces = Arc::new(store(1 << 20));
            pieces.claim(&[0..10], RoundMark(5));
            let deliver = {
                let pieces = Arc::clone(&pieces);
                std::thread::spawn(move || {
                    reader_waits_for(&pieces, 0);
                    pieces.deliver(0..10, Some(vec![1; 10]));
                })
            };
            let mut buf = [0; 10];
            let served = pieces.read(0, &mut buf, Some(&soon()), RoundMark(rounds_now));
            deliver.join().unwrap();
            assert_eq!(buf, [1; 10]);
            served
        };
        let cost = |waited_a_round| Served::Copied { waited_a_round };
        assert_eq!(wait(5), cost(true));
        assert_eq!(wait(6), cost(false), "a round was counted meanwhile");
        let pieces = store(1 << 20);
        pieces.claim(&[0..10], RoundMark(5));
        assert_eq!(
            pieces.read(
                0,
                &mut [0; 10],
                Some(&Stop::here().until(Instant::now())),
                RoundMark(5)
            ),
            Served::NotHeld,
            "timed out: the reader reads blocks"
        );
    }
}
