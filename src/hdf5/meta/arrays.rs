//! The chunk indexes of the latest format's chunked datasets with a fixed
//! (`FAHD`) or an unlimited dimension (`EAHD`): fixed and extensible
//! arrays of chunk addresses.
//!
//! A fixed array is a header and one data block, which a large array splits
//! into pages. An extensible array is a header, an index block holding its
//! first elements, the addresses of its first data blocks and those of its
//! super blocks; each super block holds the addresses of its data blocks,
//! which a large block splits into pages. The writer allocates blocks as
//! chunks are written, so they lie among the data, each a round trip of its
//! own unless the crawl finds them: HDF5 reads every one of them to count a
//! dataset's chunks or to find one.
//!
//! The block sizes follow from the header's parameters (HDF5's
//! `H5EA__hdr_init`): super block `u` has `2^(u/2)` data blocks of
//! `2^((u+1)/2)` times the least data block's elements; the index block
//! holds the data blocks of the first `2·log2(least pointers)` super
//! blocks. Every count taken from the file is bounded before it sizes
//! anything: blocks of more than [`MAX_TARGET_LEN`](super::MAX_TARGET_LEN)
//! bytes are cut there, and a block never lists more addresses than its
//! bytes hold.

use super::cursor::Cursor;
use super::{Found, What};

/// The bytes of a block's signature, version and client (array type).
const PREFIX: u64 = 6;

/// The bytes of a checksum.
const CHECKSUM: u64 = 4;

/// The most super blocks an array may have: one per bit of an element
/// index (HDF5 refuses more than 64 bits).
const MOST_SUPER_BLOCKS: u32 = 64;

/// What an array's header says, enough to read its blocks; remembered by
/// the header's address, which every block names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArrayIndex {
    Fixed(FixedArray),
    Extensible(ExtensibleArray),
}

#[cfg(any(test, feature = "fuzzing"))]
impl ArrayIndex {
    /// A fixed and (if the parameters are valid) an extensible array whose
    /// shapes `seed` picks, for the fuzz target.
    pub fn for_fuzzing(seed: u8) -> (ArrayIndex, Option<ArrayIndex>) {
        let fixed = FixedArray {
            element: 8 + (seed & 7),
            page_bits: seed & 15,
            elements: u64::from(seed) << (seed >> 4),
        };
        let extensible = ExtensibleArray::new(
            8 + (seed & 3),
            16 + (seed >> 3),
            seed & 7,
            1 << (seed & 3),
            2 << ((seed >> 2) & 3),
            1 + (seed >> 5),
        );
        (
            ArrayIndex::Fixed(fixed),
            extensible.map(ArrayIndex::Extensible),
        )
    }
}

/// A fixed array's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedArray {
    /// Bytes of an element (a chunk's address, and its size and filter
    /// mask if filtered).
    element: u8,
    /// Log2 of the elements of a page.
    page_bits: u8,
    elements: u64,
}

impl FixedArray {
    /// The elements of a page, if the data block is paged.
    fn page_elements(&self) -> Option<u64> {
        let page = 1u64.checked_shl(u32::from(self.page_bits))?;
        (self.elements > page).then_some(page)
    }

    /// Pages of the data block (0 if not paged).
    fn pages(&self) -> u64 {
        self.page_elements()
            .map_or(0, |page| self.elements.div_ceil(page))
    }

    /// The bytes of the data block's prefix: with the bitmap of the pages
    /// written if paged (what HDF5 reads of a paged block first), and its
    /// checksum.
    fn prefix_len(&self, offsets: u8) -> u64 {
        PREFIX + u64::from(offsets) + self.pages().div_ceil(8) + CHECKSUM
    }

    /// The bytes of the whole data block: HDF5 allocates a paged one's
    /// pages with its prefix, so they come with it, in one piece.
    fn data_block_len(&self, offsets: u8) -> u64 {
        self.elements
            .saturating_mul(u64::from(self.element))
            .saturating_add(self.pages().saturating_mul(CHECKSUM))
            .saturating_add(self.prefix_len(offsets))
    }
}

/// An extensible array's layout (its creation parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExtensibleArray {
    element: u8,
    /// Log2 of the most elements: sizes a block's offset in the array.
    max_bits: u8,
    /// Elements kept in the index block itself.
    index_elements: u8,
    /// Log2 of the least elements of a data block.
    data_min_bits: u8,
    /// Log2 of the least data block addresses of a super block.
    super_min_bits: u8,
    /// Log2 of the elements of a page.
    page_bits: u8,
}

impl ExtensibleArray {
    fn new(
        element: u8,
        max_bits: u8,
        index_elements: u8,
        data_min: u8,
        super_min: u8,
        page_bits: u8,
    ) -> Option<ExtensibleArray> {
        // HDF5's own checks: powers of two, a data block no larger than
        // the array, at most 64 bits of index.
        let powers = data_min.is_power_of_two() && super_min.is_power_of_two() && super_min > 1;
        let data_min_bits = data_min.checked_ilog2()? as u8;
        let fits = u32::from(max_bits) <= MOST_SUPER_BLOCKS && data_min_bits < max_bits;
        (powers && fits && element > 0).then_some(ExtensibleArray {
            element,
            max_bits,
            index_elements,
            data_min_bits,
            super_min_bits: super_min.ilog2() as u8,
            page_bits,
        })
    }

    /// Super blocks in all.
    fn super_blocks(&self) -> u32 {
        1 + u32::from(self.max_bits) - u32::from(self.data_min_bits)
    }

    /// Super blocks whose data blocks the index block points to directly.
    fn index_super_blocks(&self) -> u32 {
        (2 * u32::from(self.super_min_bits)).min(self.super_blocks())
    }

    /// Data blocks of super block `u`.
    fn data_blocks(u: u32) -> u64 {
        1u64 << (u / 2).min(63)
    }

    /// Elements of each data block of super block `u`.
    fn data_block_elements(&self, u: u32) -> u64 {
        1u64 << (u.div_ceil(2) + u32::from(self.data_min_bits)).min(63)
    }

    /// The first element of super block `u`.
    fn super_block_start(&self, u: u32) -> u64 {
        (0..u).fold(0u64, |start, v| {
            start.saturating_add(Self::data_blocks(v).saturating_mul(self.data_block_elements(v)))
        })
    }

    fn page_elements(&self) -> u64 {
        1u64 << u32::from(self.page_bits).min(63)
    }

    /// Pages of each data block of super block `u` (0 if not paged).
    fn pages(&self, u: u32) -> u64 {
        let elements = self.data_block_elements(u);
        if elements > self.page_elements() {
            elements / self.page_elements()
        } else {
            0
        }
    }

    /// Bytes of a block's offset in the array.
    fn offset_bytes(&self) -> u64 {
        u64::from(self.max_bits).div_ceil(8)
    }

    /// Bytes of a data block's prefix (with its checksum).
    fn data_prefix(&self, offsets: u8) -> u64 {
        PREFIX + u64::from(offsets) + self.offset_bytes() + CHECKSUM
    }

    /// Bytes of a page (with its checksum).
    fn page_len(&self) -> u64 {
        self.page_elements()
            .saturating_mul(u64::from(self.element))
            .saturating_add(CHECKSUM)
    }

    /// The bytes of a data block of super block `u`, with its pages if
    /// paged: HDF5 allocates them with the block's prefix (which is all it
    /// reads of a paged block first), so they come with it, in one piece.
    fn data_block_len(&self, u: u32, offsets: u8) -> u64 {
        self.data_block_elements(u)
            .saturating_mul(u64::from(self.element))
            .saturating_add(self.pages(u).saturating_mul(CHECKSUM))
            .saturating_add(self.data_prefix(offsets))
    }

    /// Bytes of the bitmap of written pages of each data block of super
    /// block `u`.
    fn page_bitmap(&self, u: u32) -> u64 {
        self.pages(u).div_ceil(8)
    }

    /// Bytes of super block `u`.
    fn super_block_len(&self, u: u32, offsets: u8) -> u64 {
        let per_block = self.page_bitmap(u).saturating_add(u64::from(offsets));
        (PREFIX + u64::from(offsets) + self.offset_bytes() + CHECKSUM)
            .saturating_add(Self::data_blocks(u).saturating_mul(per_block))
    }

    /// Data block addresses in the index block.
    fn index_data_blocks(&self) -> u64 {
        2 * ((1u64 << self.super_min_bits) - 1)
    }

    /// Bytes of the index block.
    fn index_block_len(&self, offsets: u8) -> u64 {
        let addresses =
            self.index_data_blocks() + u64::from(self.super_blocks() - self.index_super_blocks());
        PREFIX
            + u64::from(offsets)
            + u64::from(self.index_elements) * u64::from(self.element)
            + addresses * u64::from(offsets)
            + CHECKSUM
    }

    /// The super block whose first element is `start`.
    fn super_block_at(&self, start: u64) -> Option<u32> {
        (0..self.super_blocks()).find(|&u| self.super_block_start(u) == start)
    }
}

/// A fixed array (`FAHD`) or extensible array (`EAHD`) header: its data or
/// index block, and how to read its blocks (returned, to be remembered by
/// the header's address).
pub(super) fn header(
    c: &mut Cursor<'_>,
    extensible: bool,
    found: &mut Found,
) -> Option<ArrayIndex> {
    let offsets = c.geometry.offsets;
    c.signature_and_version(0)?;
    c.skip(1)?; // client
    if extensible {
        let element = c.u8()?;
        let max_bits = c.u8()?;
        let index_elements = c.u8()?;
        let data_min = c.u8()?;
        let super_min = c.u8()?;
        let page_bits = c.u8()?;
        for _ in 0..6 {
            c.length()?; // statistics
        }
        let index = c.addr()?;
        let array = ExtensibleArray::new(
            element,
            max_bits,
            index_elements,
            data_min,
            super_min,
            page_bits,
        )?;
        found.add(What::ArrayIndex, index, array.index_block_len(offsets));
        Some(ArrayIndex::Extensible(array))
    } else {
        let element = c.u8()?;
        let page_bits = c.u8()?;
        let elements = c.length()?;
        let data = c.addr()?;
        if element == 0 {
            return None;
        }
        let array = FixedArray {
            element,
            page_bits,
            elements,
        };
        found.add(What::ArrayData, data, array.data_block_len(offsets));
        Some(ArrayIndex::Fixed(array))
    }
}

/// The address of the array header a block (`FADB`, `EAIB`, `EASB`,
/// `EADB`) belongs to, which follows its prefix.
pub(super) fn owner(c: &mut Cursor<'_>) -> Option<u64> {
    c.skip(PREFIX as usize)?;
    c.addr()?
}

/// Steps over a block's signature, version, client and owner's address.
fn past_owner(c: &mut Cursor<'_>) -> Option<()> {
    c.signature_and_version(0)?;
    c.skip(1)?;
    c.addr().map(drop)
}

/// A fixed array's data block (`FADB`): if paged, the pages written.
pub(super) fn fixed_data_block(
    c: &mut Cursor<'_>,
    array: &FixedArray,
    at: u64,
    found: &mut Found,
) -> Option<()> {
    let offsets = c.geometry.offsets;
    past_owner(c)?;
    let page = array.page_elements()?;
    let pages = array.pages();
    let bitmap = c.take(usize::try_from(pages.div_ceil(8)).ok()?)?;
    let page_len = page * u64::from(array.element) + CHECKSUM;
    let first = at.checked_add(array.prefix_len(offsets))?;
    for p in written(bitmap, 0, pages) {
        // The last page holds what is left.
        let elements = (array.elements - p * page).min(page);
        let addr = first.checked_add(p.checked_mul(page_len)?);
        found.add(
            What::ArrayPage,
            addr,
            elements * u64::from(array.element) + CHECKSUM,
        );
    }
    Some(())
}

/// The pages of `pages` whose bit, from bit `first` on, is set in `bitmap`
/// (HDF5's bit order: bit 0 is the most significant of the first byte); no
/// more than a wave takes.
fn written(bitmap: &[u8], first: u64, pages: u64) -> impl Iterator<Item = u64> + '_ {
    let bits = (bitmap.len() as u64).saturating_mul(8);
    (0..pages.min(bits.saturating_sub(first)))
        .filter(move |&p| {
            let bit = first + p;
            bitmap[(bit / 8) as usize] & (0x80 >> (bit % 8)) != 0
        })
        .take(super::MAX_TARGETS)
}

/// An extensible array's index block (`EAIB`): its data blocks and super
/// blocks.
pub(super) fn index_block(
    c: &mut Cursor<'_>,
    array: &ExtensibleArray,
    found: &mut Found,
) -> Option<()> {
    let offsets = c.geometry.offsets;
    past_owner(c)?;
    c.skip(usize::from(array.index_elements) * usize::from(array.element))?;
    for u in 0..array.index_super_blocks() {
        for _ in 0..ExtensibleArray::data_blocks(u) {
            found.add(What::ArrayData, c.addr()?, array.data_block_len(u, offsets));
        }
    }
    for u in array.index_super_blocks()..array.super_blocks() {
        found.add(
            What::ArraySuper,
            c.addr()?,
            array.super_block_len(u, offsets),
        );
    }
    Some(())
}

/// An extensible array's super block (`EASB`): its data blocks, and of a
/// paged one the pages written.
pub(super) fn super_block(
    c: &mut Cursor<'_>,
    array: &ExtensibleArray,
    found: &mut Found,
) -> Option<()> {
    let offsets = c.geometry.offsets;
    past_owner(c)?;
    let start = c.uint(array.offset_bytes() as usize)?;
    let u = array.super_block_at(start)?;
    let blocks = ExtensibleArray::data_blocks(u);
    let pages = array.pages(u);
    // The bitmaps of all data blocks, then their addresses; a count the
    // bytes cannot hold ends the parse. The bits run on from one data
    // block to the next (HDF5 sizes the bitmap in whole bytes per block).
    let bitmap_len = usize::try_from(blocks.checked_mul(array.page_bitmap(u))?).ok()?;
    let bitmaps = c.take(bitmap_len)?;
    for d in 0..blocks {
        let addr = c.addr()?;
        found.add(What::ArrayData, addr, array.data_block_len(u, offsets));
        let (Some(addr), true) = (addr, pages > 0) else {
            continue;
        };
        let first = addr.checked_add(array.data_prefix(offsets))?;
        for p in written(bitmaps, d.saturating_mul(pages), pages) {
            let page = first.checked_add(p.checked_mul(array.page_len())?);
            found.add(What::ArrayPage, page, array.page_len());
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HDF5's defaults for a chunk index: 32 bits, 4 elements in the index
    /// block, data blocks of 16 elements at least, super blocks of 4
    /// pointers at least, pages of 1024 elements.
    fn defaults(element: u8) -> ExtensibleArray {
        ExtensibleArray::new(element, 32, 4, 16, 4, 10).unwrap()
    }

    #[test]
    fn the_block_sizes_follow_hdf5s_table() {
        let a = defaults(8);
        assert_eq!(a.super_blocks(), 29);
        assert_eq!(a.index_super_blocks(), 4);
        assert_eq!(a.index_data_blocks(), 6);
        let blocks: Vec<u64> = (0..6).map(ExtensibleArray::data_blocks).collect();
        assert_eq!(blocks, [1, 1, 2, 2, 4, 4]);
        let elements: Vec<u64> = (0..6).map(|u| a.data_block_elements(u)).collect();
        assert_eq!(elements, [16, 32, 32, 64, 64, 128]);
        let starts: Vec<u64> = (0..6).map(|u| a.super_block_start(u)).collect();
        assert_eq!(starts, [0, 16, 48, 112, 240, 496]);
        assert_eq!(a.super_block_at(240), Some(4));
        assert_eq!(a.super_block_at(241), None);
        // Paged from 2048 elements a block on: super block 13's.
        assert_eq!(a.pages(12), 0);
        assert_eq!(a.pages(13), 2);
        // Prefix 6, owner 8, offset 4, checksum 4; 4 elements, 6 + 25
        // addresses.
        assert_eq!(a.data_prefix(8), 22);
        assert_eq!(a.index_block_len(8), 6 + 8 + 32 + 31 * 8 + 4);
        assert_eq!(a.super_block_len(4, 8), 22 + 4 * 8);
        assert_eq!(a.super_block_len(13, 8), 22 + 64 * (1 + 8));
    }

    #[test]
    fn parameters_hdf5_refuses_are_refused() {
        assert!(ExtensibleArray::new(8, 32, 4, 0, 4, 10).is_none());
        assert!(ExtensibleArray::new(8, 32, 4, 12, 4, 10).is_none());
        assert!(ExtensibleArray::new(8, 32, 4, 16, 1, 10).is_none());
        assert!(ExtensibleArray::new(8, 65, 4, 16, 4, 10).is_none());
        assert!(ExtensibleArray::new(8, 4, 4, 16, 4, 10).is_none());
        assert!(ExtensibleArray::new(0, 32, 4, 16, 4, 10).is_none());
        // The largest HDF5 accepts sizes nothing past 64 bits.
        let a = ExtensibleArray::new(255, 64, 255, 128, 128, 255).unwrap();
        assert_eq!(a.super_blocks(), 58);
        for u in 0..a.super_blocks() {
            let _ = (a.super_block_len(u, 8), a.data_block_len(u, 8), a.pages(u));
        }
        assert_eq!(a.super_block_at(u64::MAX), None);
    }

    #[test]
    fn the_written_pages_are_read_from_the_bitmap() {
        let pages: Vec<u64> = written(&[0b1010_0000, 0b0000_0001], 0, 16).collect();
        assert_eq!(pages, [0, 2, 15]);
        // Bits past the page count are not pages.
        let pages: Vec<u64> = written(&[0xff], 0, 3).collect();
        assert_eq!(pages, [0, 1, 2]);
        // A later block's pages start at its own bit.
        let pages: Vec<u64> = written(&[0b0000_0110], 4, 4).collect();
        assert_eq!(pages, [1, 2]);
        assert_eq!(written(&[0xff; 4], 0, u64::MAX).count(), 32);
        assert_eq!(written(&[0xff; 4], u64::MAX, u64::MAX).count(), 0);
    }

    use super::super::{Context, MAX_TARGET_LEN, MAX_TARGETS, MemType, Target, pointers};

    const UNDEF: u64 = u64::MAX;

    fn le(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn targets(bytes: &[u8], at: u64, what: What, context: &Context) -> Vec<(What, u64, u64)> {
        let f = pointers(bytes, at, MemType::Other, Some(what), context);
        f.targets
            .iter()
            .map(|t: &Target| (t.what, t.bytes.start, t.bytes.end - t.bytes.start))
            .collect()
    }

    /// An extensible array header of HDF5's defaults for 8-byte elements
    /// (unfiltered chunk addresses), its index block at `index`.
    fn eahd(index: u64) -> Vec<u8> {
        let mut b = le(&[b"EAHD", &[0, 0, 8, 32, 4, 16, 4, 10]]);
        for _ in 0..6 {
            b.extend_from_slice(&7u64.to_le_bytes());
        }
        b.extend_from_slice(&index.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b
    }

    /// A context that knows the array of [`eahd`] at 1000.
    fn context() -> Context {
        let mut context = Context::default();
        let f = pointers(
            &eahd(5000),
            1000,
            MemType::Other,
            Some(What::ArrayHeader),
            &context,
        );
        context
            .arrays
            .insert(1000, f.array.expect("the array's layout"));
        context
    }

    #[test]
    fn an_extensible_array_header_points_to_its_index_block() {
        let context = context();
        assert!(matches!(context.arrays[&1000], ArrayIndex::Extensible(_)));
        let f = pointers(
            &eahd(5000),
            1000,
            MemType::Other,
            Some(What::ArrayHeader),
            &context,
        );
        assert_eq!(
            targets(&eahd(5000), 1000, What::ArrayHeader, &context),
            [(What::ArrayIndex, 5000, 6 + 8 + 32 + 31 * 8 + 4)]
        );
        assert!(f.array.is_some());
        // Parameters HDF5 would refuse give no layout and no target.
        let mut bad = eahd(5000);
        bad[9] = 0; // no bits of index
        assert!(targets(&bad, 1000, What::ArrayHeader, &context).is_empty());
    }

    /// An index block of the array at 1000: its 4 elements, data blocks
    /// `data` (6) and super blocks `supers` (25).
    fn eaib(data: [u64; 6], supers: &[u64]) -> Vec<u8> {
        let mut b = le(&[b"EAIB", &[0, 0], &1000u64.to_le_bytes(), &[0xab; 32]]);
        for a in data.iter().chain(supers) {
            b.extend_from_slice(&a.to_le_bytes());
        }
        b.extend_from_slice(&[0; 4]);
        b
    }

    #[test]
    fn an_index_block_points_to_its_data_blocks_and_super_blocks() {
        let mut supers = vec![UNDEF; 25];
        supers[0] = 90_000;
        supers[1] = 95_000;
        let bytes = eaib([10_000, 20_000, 30_000, 40_000, 50_000, UNDEF], &supers);
        // Data blocks of 16, 32, 32, 32 and 64 elements (super blocks 0 to
        // 3's; the sixth is not written yet), each after a 22-byte prefix;
        // super blocks 4 and 5, of 4 data blocks' addresses each.
        assert_eq!(
            targets(&bytes, 5000, What::ArrayIndex, &context()),
            [
                (What::ArrayData, 10_000, 22 + 16 * 8),
                (What::ArrayData, 20_000, 22 + 32 * 8),
                (What::ArrayData, 30_000, 22 + 32 * 8),
                (What::ArrayData, 40_000, 22 + 32 * 8),
                (What::ArrayData, 50_000, 22 + 64 * 8),
                (What::ArraySuper, 90_000, 22 + 4 * 8),
                (What::ArraySuper, 95_000, 22 + 4 * 8),
            ]
        );
        // A block of an array nothing described is not read.
        assert!(targets(&bytes, 5000, What::ArrayIndex, &Context::default()).is_empty());
    }

    #[test]
    fn a_super_block_of_paged_data_blocks_points_to_the_pages_written() {
        let a = defaults(8);
        // Super block 13: 64 data blocks of 2,048 elements, 2 pages each,
        // a byte of bitmap each; the bits run on from block to block.
        let (u, blocks) = (13, 64);
        let mut bitmaps = vec![0u8; blocks];
        bitmaps[0] = 0b0110_0000; // block 0's second page, block 1's first
        let mut bytes = le(&[b"EASB", &[0, 0], &1000u64.to_le_bytes()]);
        bytes.extend_from_slice(&(a.super_block_start(u) as u32).to_le_bytes());
        bytes.extend_from_slice(&bitmaps);
        bytes.extend_from_slice(&1_000_000u64.to_le_bytes());
        bytes.extend_from_slice(&2_000_000u64.to_le_bytes());
        for _ in 2..blocks {
            bytes.extend_from_slice(&UNDEF.to_le_bytes());
        }
        bytes.extend_from_slice(&[0; 4]);
        let (page, block) = (1024 * 8 + 4, 22 + 2048 * 8 + 2 * 4);
        assert_eq!(
            targets(&bytes, 500_000, What::ArraySuper, &context()),
            [
                (What::ArrayData, 1_000_000, block),
                (What::ArrayPage, 1_000_000 + 22 + page, page),
                (What::ArrayData, 2_000_000, block),
                (What::ArrayPage, 2_000_000 + 22, page),
            ]
        );
        // An offset no super block starts at is not a super block.
        bytes[14] ^= 1;
        assert!(targets(&bytes, 500_000, What::ArraySuper, &context()).is_empty());
    }

    #[test]
    fn a_paged_fixed_array_comes_whole_and_points_to_its_pages() {
        // 2,500 elements of 8 bytes in pages of 1,024: three pages, the
        // last of 452 elements.
        let fahd = le(&[
            b"FAHD",
            &[0, 0, 8, 10],
            &2500u64.to_le_bytes(),
            &70_000u64.to_le_bytes(),
            &[0; 4],
        ]);
        let mut context = Context::default();
        let f = pointers(
            &fahd,
            1000,
            MemType::Other,
            Some(What::ArrayHeader),
            &context,
        );
        let prefix = 6 + 8 + 1 + 4;
        assert_eq!(
            targets(&fahd, 1000, What::ArrayHeader, &context),
            [(What::ArrayData, 70_000, prefix + 2500 * 8 + 3 * 4)]
        );
        context.arrays.insert(1000, f.array.unwrap());
        let fadb = le(&[
            b"FADB",
            &[0, 0],
            &1000u64.to_le_bytes(),
            &[0b1010_0000],
            &[0; 4],
        ]);
        let page = 1024 * 8 + 4;
        assert_eq!(
            targets(&fadb, 70_000, What::ArrayData, &context),
            [
                (What::ArrayPage, 70_000 + prefix, page),
                (What::ArrayPage, 70_000 + prefix + 2 * page, 452 * 8 + 4),
            ]
        );
    }

    /// Whatever a block says, what it yields is bounded and well formed.
    fn assert_bounded(bytes: &[u8], what: What, context: &Context) {
        let f = pointers(bytes, 7, MemType::Other, Some(what), context);
        assert!(f.targets.len() <= MAX_TARGETS);
        for t in &f.targets {
            assert!(!t.bytes.is_empty() && t.bytes.end - t.bytes.start <= MAX_TARGET_LEN);
        }
    }

    #[test]
    fn cut_short_blocks_yield_what_their_bytes_hold() {
        let mut supers = vec![UNDEF; 25];
        supers[0] = 90_000;
        let whole = eaib([10_000, 20_000, 30_000, 40_000, 50_000, 60_000], &supers);
        let all = targets(&whole, 5000, What::ArrayIndex, &context());
        for n in 0..whole.len() {
            let some = targets(&whole[..n], 5000, What::ArrayIndex, &context());
            assert!(all.starts_with(&some), "{n} bytes");
        }
        for n in 0..eahd(5000).len() {
            assert_bounded(&eahd(5000)[..n], What::ArrayHeader, &context());
        }
    }

    #[test]
    fn the_largest_counts_a_header_may_give_are_bounded() {
        // A header of the largest parameters HDF5 allows, the most elements
        // in its index block; a fixed array of 2^64 - 1 elements of 255
        // bytes, unpaged or in pages of one element.
        let mut huge = eahd(5000);
        huge[6..12].copy_from_slice(&[255, 64, 255, 128, 128, 255]);
        assert_bounded(&huge, What::ArrayHeader, &context());
        let mut context = context();
        let f = pointers(
            &huge,
            1000,
            MemType::Other,
            Some(What::ArrayHeader),
            &context,
        );
        context.arrays.insert(1000, f.array.unwrap());
        // Its last super block claims 2^28 data blocks: no more are read
        // than the bytes hold, nor a bitmap they cannot.
        let a = ExtensibleArray::new(255, 64, 255, 128, 128, 255).unwrap();
        let last = a.super_blocks() - 1;
        let mut easb = le(&[b"EASB", &[0, 0], &1000u64.to_le_bytes()]);
        easb.extend_from_slice(&a.super_block_start(last).to_le_bytes());
        easb.extend_from_slice(&[0x11; 4096]);
        assert_bounded(&easb, What::ArraySuper, &context);
        let mut eaib = le(&[b"EAIB", &[0, 0], &1000u64.to_le_bytes()]);
        eaib.extend_from_slice(&[0x22; 1 << 16]);
        assert_bounded(&eaib, What::ArrayIndex, &context);
        for page_bits in [0, 10, 64, 255] {
            let fahd = le(&[
                b"FAHD",
                &[0, 0, 255, page_bits],
                &u64::MAX.to_le_bytes(),
                &70_000u64.to_le_bytes(),
                &[0; 4],
            ]);
            assert_bounded(&fahd, What::ArrayHeader, &Context::default());
            let f = pointers(
                &fahd,
                1000,
                MemType::Other,
                Some(What::ArrayHeader),
                &Context::default(),
            );
            context.arrays.insert(1000, f.array.unwrap());
            let mut fadb = le(&[b"FADB", &[0, 0], &1000u64.to_le_bytes()]);
            fadb.extend_from_slice(&[0xff; 1 << 16]);
            assert_bounded(&fadb, What::ArrayData, &context);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_block_is_safe(
            kind in 0usize..4,
            seed: u8,
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096),
        ) {
            let mut context = Context::default();
            let (fixed, extensible) = ArrayIndex::for_fuzzing(seed);
            context.arrays.insert(1000, extensible.unwrap_or(fixed));
            let (sig, what): (&[u8; 4], What) = [
                (b"EAIB", What::ArrayIndex),
                (b"EASB", What::ArraySuper),
                (b"FADB", What::ArrayData),
                (b"EAHD", What::ArrayHeader),
            ][kind];
            let bytes = le(&[sig, &[0, 0], &1000u64.to_le_bytes(), &body]);
            assert_bounded(&bytes, what, &context);
        }
    }
}
