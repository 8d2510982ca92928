//! Where a response body goes: cache blocks, or a caller's buffer.

use crate::pool::BufferPool;

/// A destination for body bytes, filled in order: consecutive buffers of
/// `block_size` bytes (the last one shorter), each of which becomes a cache
/// block without a copy, or a caller's buffer. Bytes received survive a
/// failed attempt, which then resumes.
pub(crate) struct Sink<'a> {
    dest: Dest<'a>,
    /// How many bytes have arrived.
    pub filled: u64,
    /// How many bytes are expected.
    pub len: u64,
}

enum Dest<'a> {
    Blocks {
        block_size: usize,
        blocks: Vec<Vec<u8>>,
    },
    Slice(&'a mut [u8]),
}

impl<'a> Sink<'a> {
    pub fn new(len: u64, block_size: u64, buffers: Option<&BufferPool>) -> Sink<'a> {
        let mut blocks = Vec::new();
        let mut left = len;
        while left > 0 {
            let n = left.min(block_size);
            blocks.push(match buffers {
                Some(pool) => pool.take(n as usize),
                None => vec![0; n as usize],
            });
            left -= n;
        }
        Sink {
            dest: Dest::Blocks {
                block_size: block_size as usize,
                blocks,
            },
            filled: 0,
            len,
        }
    }

    /// A sink that fills `buf`.
    pub fn over(buf: &'a mut [u8]) -> Sink<'a> {
        Sink {
            len: buf.len() as u64,
            dest: Dest::Slice(buf),
            filled: 0,
        }
    }

    /// Where the next bytes go.
    pub fn spare(&mut self) -> &mut [u8] {
        match &mut self.dest {
            Dest::Blocks { block_size, blocks } => {
                let at = (self.filled / *block_size as u64) as usize;
                let off = (self.filled % *block_size as u64) as usize;
                &mut blocks[at][off..]
            }
            Dest::Slice(buf) => &mut buf[self.filled as usize..],
        }
    }

    pub fn is_full(&self) -> bool {
        self.filled == self.len
    }

    /// The filled blocks (none for a sink over a caller's buffer).
    pub fn into_blocks(self) -> Vec<Vec<u8>> {
        match self.dest {
            Dest::Blocks { blocks, .. } => blocks,
            Dest::Slice(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_fills_block_by_block() {
        let mut s = Sink::new(10, 4, None);
        assert_eq!(s.spare().len(), 4);
        s.spare()[..3].copy_from_slice(b"abc");
        s.filled = 3;
        assert_eq!(s.spare().len(), 1);
        s.spare()[0] = b'd';
        s.filled = 4;
        assert_eq!(s.spare().len(), 4);
        s.filled = 8;
        assert_eq!(s.spare().len(), 2);
        s.filled = 10;
        assert!(s.is_full());
        let blocks = s.into_blocks();
        assert_eq!(blocks.iter().map(Vec::len).collect::<Vec<_>>(), [4, 4, 2]);
        assert_eq!(&blocks[0], b"abcd");
    }
}
