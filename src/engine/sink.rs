//! Where a response body goes: a caller's buffers, filled in order.

/// A destination for the bytes of one range: consecutive buffers (cache
/// blocks, or a caller's one buffer) filled in order, so each buffer holds
/// its part of the range without a copy. Bytes received survive a failed
/// attempt, which then resumes from the first missing one.
pub(crate) struct Sink<'a> {
    bufs: Vec<&'a mut [u8]>,
    /// The buffer being filled, and how far.
    at: usize,
    offset: usize,
    /// How many bytes have arrived.
    filled: u64,
    /// How many bytes are expected.
    len: u64,
}

impl<'a> Sink<'a> {
    /// A sink that fills `bufs`, one after the other.
    pub fn new(bufs: Vec<&'a mut [u8]>) -> Sink<'a> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        Sink {
            bufs,
            at: 0,
            offset: 0,
            filled: 0,
            len,
        }
    }

    /// A sink that fills `buf`.
    pub fn over(buf: &'a mut [u8]) -> Sink<'a> {
        Sink::new(vec![buf])
    }

    /// Where the next bytes go: empty once the sink is full.
    pub fn spare(&mut self) -> &mut [u8] {
        while self.at < self.bufs.len() && self.offset == self.bufs[self.at].len() {
            self.at += 1;
            self.offset = 0;
        }
        match self.bufs.get_mut(self.at) {
            Some(buf) => &mut buf[self.offset..],
            None => &mut [],
        }
    }

    /// Records that `n` bytes were written at the start of [`spare`](Self::spare).
    pub fn advance(&mut self, n: usize) {
        self.offset += n;
        self.filled += n as u64;
    }

    /// How many bytes have arrived.
    pub fn filled(&self) -> u64 {
        self.filled
    }

    /// How many bytes the sink takes in all.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_full(&self) -> bool {
        self.filled == self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_fills_its_buffers_in_order() {
        let (mut a, mut b, mut c) = ([0u8; 4], [0u8; 4], [0u8; 2]);
        let mut s = Sink::new(vec![&mut a, &mut b, &mut c]);
        assert_eq!(s.len(), 10);
        assert_eq!(s.spare().len(), 4);
        s.spare()[..3].copy_from_slice(b"abc");
        s.advance(3);
        assert_eq!(s.spare().len(), 1);
        s.spare()[0] = b'd';
        s.advance(1);
        assert_eq!(s.spare().len(), 4);
        s.spare().copy_from_slice(b"efgh");
        s.advance(4);
        assert_eq!(s.spare().len(), 2);
        s.spare().copy_from_slice(b"ij");
        s.advance(2);
        assert!(s.is_full());
        assert_eq!(s.filled(), 10);
        assert!(s.spare().is_empty());
        assert_eq!((&a, &b, &c), (b"abcd", b"efgh", b"ij"));
    }

    #[test]
    fn empty_buffers_are_skipped() {
        let (mut a, mut b) = ([0u8; 0], [0u8; 3]);
        let mut s = Sink::new(vec![&mut a, &mut b]);
        assert_eq!(s.spare().len(), 3);
    }
}
