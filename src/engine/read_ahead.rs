//! The read-ahead of one file, a pure decision: a window after a read that
//! continues a sequential stream, doubling on every further sequential miss
//! up to a maximum, for a few interleaved streams at once.

/// How many interleaved sequential streams are tracked at once.
pub const MAX_STREAMS: usize = 8;

/// A sequential miss reads ahead at least this many reads of its own size.
pub const READS_AHEAD: u64 = 4;

/// The read-ahead state of one file: a few recent sequential streams.
#[derive(Debug, Clone)]
pub struct ReadAhead {
    min: u64,
    max: u64,
    streams: Vec<Stream>,
    clock: u64,
}

#[derive(Debug, Clone, Copy)]
struct Stream {
    /// Where the stream's last read ended: the next sequential read starts here.
    next: u64,
    /// How much to read ahead at the stream's next miss.
    window: u64,
    last_used: u64,
}

impl ReadAhead {
    /// A read-ahead whose window starts at `min` bytes and grows to `max`.
    pub fn new(min: u64, max: u64) -> ReadAhead {
        ReadAhead {
            min: min.min(max),
            max,
            streams: Vec::with_capacity(MAX_STREAMS),
            clock: 0,
        }
    }

    /// Records a read of `len` bytes at `pos` and returns how many bytes to
    /// read ahead after it.
    ///
    /// `missed` says whether the read needs any block that is not cached; only
    /// a miss triggers read-ahead, so cached reads never grow the window. A read
    /// that starts where a tracked stream ended continues that stream, reading
    /// ahead at least `floor` bytes (the link's bandwidth-delay product, say);
    /// any other read starts a new stream (replacing the least recently used
    /// one) with no read-ahead, so random access costs no extra bytes.
    pub fn on_read(&mut self, pos: u64, len: u64, missed: bool, floor: u64) -> u64 {
        self.clock += 1;
        let end = pos.saturating_add(len);
        if let Some(s) = self.streams.iter_mut().find(|s| s.next == pos && len > 0) {
            s.next = end;
            s.last_used = self.clock;
            if !missed {
                return 0;
            }
            // Size-aware: a stream of large reads (HDF5 chunks, say) reads
            // ahead at least a few of them at once.
            let grown = s.window.max(len.saturating_mul(READS_AHEAD)).min(self.max);
            // The floor keeps a stream at the link's speed from its first
            // miss on, but does not feed the doubling: a stream that stops
            // soon after wastes at most the floor.
            s.window = grown.saturating_mul(2).min(self.max);
            return grown.max(floor).min(self.max);
        }
        let fresh = Stream {
            next: end,
            window: self.min,
            last_used: self.clock,
        };
        if self.streams.len() < MAX_STREAMS {
            self.streams.push(fresh);
        } else if let Some(oldest) = self.streams.iter_mut().min_by_key(|s| s.last_used) {
            *oldest = fresh;
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sequential_misses_double_the_window_up_to_the_maximum() {
        let mut ra = ReadAhead::new(MIB, 8 * MIB);
        assert_eq!(
            ra.on_read(0, 100, true, 0),
            0,
            "a new stream reads no further"
        );
        let mut pos = 100;
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(ra.on_read(pos, 100, true, 0));
            pos += 100;
        }
        assert_eq!(seen, [MIB, 2 * MIB, 4 * MIB, 8 * MIB, 8 * MIB, 8 * MIB]);
    }

    #[test]
    fn cache_hits_neither_read_ahead_nor_grow_the_window() {
        let mut ra = ReadAhead::new(MIB, 8 * MIB);
        ra.on_read(0, 10, false, 0);
        for i in 1..100 {
            assert_eq!(ra.on_read(i * 10, 10, false, 0), 0);
        }
        assert_eq!(ra.on_read(1000, 10, true, 0), MIB);
    }

    #[test]
    fn large_sequential_reads_read_ahead_several_of_themselves() {
        let mut ra = ReadAhead::new(MIB, 64 * MIB);
        let chunk = 2 * MIB;
        ra.on_read(0, chunk, true, 0);
        assert_eq!(ra.on_read(chunk, chunk, true, 0), 4 * chunk);
        assert_eq!(ra.on_read(2 * chunk, chunk, true, 0), 16 * MIB);
        assert_eq!(ra.on_read(3 * chunk, chunk, true, 0), 32 * MIB);
        assert_eq!(ra.on_read(4 * chunk, chunk, true, 0), 64 * MIB);
        assert_eq!(ra.on_read(5 * chunk, chunk, true, 0), 64 * MIB, "capped");
    }

    #[test]
    fn random_reads_never_read_ahead() {
        let mut ra = ReadAhead::new(MIB, 8 * MIB);
        for pos in [5000, 100, 90_000, 7, 123_456] {
            assert_eq!(ra.on_read(pos, 10, true, 0), 0);
        }
    }

    #[test]
    fn interleaved_streams_each_keep_their_window() {
        let mut ra = ReadAhead::new(MIB, 64 * MIB);
        let starts = [0, 1 << 30, 2 << 30];
        for &s in &starts {
            ra.on_read(s, 10, true, 0);
        }
        for round in 1..5u64 {
            for &s in &starts {
                let got = ra.on_read(s + round * 10, 10, true, 0);
                assert_eq!(got, MIB << (round - 1), "stream at {s}, round {round}");
            }
        }
    }

    #[test]
    fn the_least_recently_used_stream_is_forgotten() {
        let mut ra = ReadAhead::new(MIB, 64 * MIB);
        ra.on_read(0, 10, true, 0);
        for i in 1..=MAX_STREAMS as u64 {
            ra.on_read(i << 30, 10, true, 0);
        }
        assert_eq!(ra.on_read(10, 10, true, 0), 0, "stream 0 was replaced");
        assert_eq!(
            ra.on_read((MAX_STREAMS as u64) << 30 | 10, 10, true, 0),
            MIB
        );
    }

    #[test]
    fn a_sequential_miss_reads_ahead_at_least_the_floor() {
        let mut ra = ReadAhead::new(MIB, 64 * MIB);
        ra.on_read(0, 100, true, 10 * MIB);
        assert_eq!(ra.on_read(100, 100, true, 10 * MIB), 10 * MIB);
        assert_eq!(ra.on_read(5000, 100, true, 10 * MIB), 0, "a new stream");
        assert_eq!(ra.on_read(200, 100, true, 100 * MIB), 64 * MIB, "capped");
    }

    proptest! {
        #[test]
        fn read_ahead_stays_within_bounds(reads in proptest::collection::vec((0u64..1000, 1u64..100, any::<bool>()), 1..200)) {
            let mut ra = ReadAhead::new(64, 4096);
            for (pos, len, missed) in reads {
                let got = ra.on_read(pos, len, missed, 0);
                prop_assert!(got <= 4096);
                if !missed { prop_assert_eq!(got, 0); }
            }
        }
    }
}
