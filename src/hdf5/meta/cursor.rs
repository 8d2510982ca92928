//! Reading little-endian fields of HDF5 metadata, never past the bytes.

use super::Geometry;

/// A position in a byte string. Every read is checked: past the end it
/// gives `None` and reads nothing.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    pub geometry: Geometry,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8], geometry: Geometry) -> Cursor<'a> {
        Cursor {
            bytes,
            at: 0,
            geometry,
        }
    }

    /// The first four bytes, without moving.
    pub fn peek_signature(&self) -> Option<[u8; 4]> {
        self.bytes.get(..4)?.try_into().ok()
    }

    /// Steps over a structure's four-byte signature; `None` unless the
    /// version byte after it is `version` (a later version's layout is
    /// unknown).
    pub fn signature_and_version(&mut self, version: u8) -> Option<()> {
        self.skip(4)?;
        (self.u8()? == version).then_some(())
    }

    pub fn position(&self) -> usize {
        self.at
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    pub fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    /// Moves to `at` (at most the end).
    pub fn seek(&mut self, at: usize) -> Option<()> {
        (at <= self.bytes.len()).then(|| self.at = at)
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let got = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(got)
    }

    /// An unsigned integer of `n` bytes (1 to 8).
    pub fn uint(&mut self, n: usize) -> Option<u64> {
        if !(1..=8).contains(&n) {
            return None;
        }
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(self.take(n)?);
        Some(u64::from_le_bytes(buf))
    }

    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        self.uint(2).map(|v| v as u16)
    }

    pub fn u32(&mut self) -> Option<u32> {
        self.uint(4).map(|v| v as u32)
    }

    /// A file address, made absolute (HDF5's addresses count from the
    /// base address): `Some(None)` for the undefined address (all ones) or
    /// one that overflows.
    pub fn addr(&mut self) -> Option<Option<u64>> {
        let n = usize::from(self.geometry.offsets);
        let v = self.uint(n)?;
        let undefined = if n == 8 { u64::MAX } else { (1 << (8 * n)) - 1 };
        Some(
            (v != undefined)
                .then(|| v.checked_add(self.geometry.base))
                .flatten(),
        )
    }

    /// An object size ("length").
    pub fn length(&mut self) -> Option<u64> {
        self.uint(usize::from(self.geometry.lengths))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end() {
        let mut c = Cursor::new(&[1, 0, 2, 0, 0, 0, 9], Geometry::default());
        assert_eq!(c.u16(), Some(1));
        assert_eq!(c.u32(), Some(2));
        assert_eq!(c.u16(), None, "one byte left");
        assert_eq!(c.remaining(), 1);
        assert_eq!(c.u8(), Some(9));
        assert_eq!(c.u8(), None);
        assert_eq!(c.uint(9), None);
    }

    #[test]
    fn the_undefined_address_is_none() {
        let g = Geometry {
            offsets: 4,
            ..Geometry::default()
        };
        let mut c = Cursor::new(&[0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0], g);
        assert_eq!(c.addr(), Some(None));
        assert_eq!(c.addr(), Some(Some(7)));
        assert_eq!(c.addr(), None);
        let mut c = Cursor::new(&[0xff; 8], Geometry::default());
        assert_eq!(c.addr(), Some(None));
    }
}
