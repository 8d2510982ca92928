//! The newer structures: fractal heaps (where dense groups keep their links
//! and dense objects their attributes) and version 2 B-trees (a dense
//! group's or object's index of names and of creation orders, a chunk
//! index of a dataset with more than one unlimited dimension).

use super::cursor::Cursor;
use super::object_header::link;
use super::{Found, SMALL_HEADER, What};

/// What a fractal heap's header says about its blocks: enough to read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FractalHeap {
    /// Whether it holds links (whose targets are worth fetching) rather
    /// than attributes.
    pub links: bool,
    /// Blocks in a row of an indirect block.
    pub width: u16,
    pub start_block: u64,
    /// Rows of an indirect block that hold direct blocks.
    pub direct_rows: u16,
    /// Bytes of a block offset.
    pub offset_bytes: u8,
    /// Whether direct blocks carry a checksum.
    pub checksummed: bool,
    /// Whether direct blocks are filtered (compressed): their children
    /// entries are longer, and their contents cannot be read as they are.
    pub filtered: bool,
}

impl FractalHeap {
    /// The size of a direct block in row `row`.
    fn direct_size(&self, row: u16) -> u64 {
        match row {
            0 => self.start_block,
            r => self
                .start_block
                .saturating_mul(1u64 << u32::from(r - 1).min(62)),
        }
    }

    /// The bytes of an indirect block of `rows` rows.
    fn indirect_len(&self, rows: u16, offsets: u8, lengths: u8) -> u64 {
        let entry = u64::from(offsets)
            + if self.filtered {
                u64::from(lengths) + 4
            } else {
                0
            };
        let entries = u64::from(rows) * u64::from(self.width);
        5 + u64::from(offsets) + u64::from(self.offset_bytes) + entries * entry + 4
    }
}

/// A fractal heap header (`FRHP`): its root block, and how to read its
/// blocks (returned, to be remembered by address).
pub(super) fn header(c: &mut Cursor<'_>, links: bool, found: &mut Found) -> Option<FractalHeap> {
    let g = c.geometry;
    c.signature_and_version(0)?;
    c.skip(2)?; // heap ID length
    let filter_len = c.u16()?;
    let flags = c.u8()?;
    c.skip(4)?; // largest managed object
    c.length()?; // next huge object ID
    let huge = c.addr()?;
    c.length()?; // free space
    let free_space = c.addr()?;
    for _ in 0..8 {
        c.length()?; // managed, allocated and iterator offsets; object counts and sizes
    }
    let width = c.u16()?;
    let start_block = c.length()?;
    let max_direct = c.length()?;
    let max_heap_bits = c.u16()?;
    c.skip(2)?; // starting rows of the root indirect block
    let root = c.addr()?;
    let rows = c.u16()?;
    if width == 0
        || !start_block.is_power_of_two()
        || !max_direct.is_power_of_two()
        || max_direct < start_block
    {
        return None;
    }
    let heap = FractalHeap {
        links,
        width,
        start_block,
        direct_rows: u16::try_from(max_direct.ilog2() - start_block.ilog2() + 2).ok()?,
        offset_bytes: u8::try_from(max_heap_bits.div_ceil(8)).ok()?,
        checksummed: flags & 0x02 != 0,
        filtered: filter_len > 0,
    };
    // What HDF5 reads besides to tell the heap's size (an object's info
    // with the sizes of its metadata, as h5py's walks ask): the B-tree of
    // objects too large for a block, and the free-space manager's header.
    found.add(What::BTree2Header, huge, SMALL_HEADER);
    let free_space_len = 18 + 7 * u64::from(g.lengths) + u64::from(g.offsets);
    found.add(What::FreeSpace, free_space, free_space_len);
    if rows == 0 {
        found.add(What::HeapDirect, root, start_block);
    } else {
        let len = heap.indirect_len(rows, g.offsets, g.lengths);
        found.add(What::HeapIndirect { rows }, root, len);
    }
    Some(heap)
}

/// A fractal heap indirect block (`FHIB`) of `rows` rows: its child blocks.
pub(super) fn indirect(
    c: &mut Cursor<'_>,
    heap: &FractalHeap,
    rows: u16,
    found: &mut Found,
) -> Option<()> {
    let g = c.geometry;
    c.skip(5)?;
    c.addr()?; // the heap's header
    c.skip(usize::from(heap.offset_bytes))?;
    let log_width = heap.width.checked_ilog2()? as u16;
    for row in 0..rows {
        for _ in 0..heap.width {
            let child = c.addr()?;
            if row < heap.direct_rows {
                if heap.filtered {
                    c.length()?;
                    c.skip(4)?;
                }
                found.add(What::HeapDirect, child, heap.direct_size(row));
            } else {
                let child_rows = row.saturating_sub(log_width);
                let len = heap.indirect_len(child_rows, g.offsets, g.lengths);
                found.add(What::HeapIndirect { rows: child_rows }, child, len);
            }
        }
    }
    Some(())
}

/// A fractal heap direct block (`FHDB`): for a heap of links, the object
/// headers they point to. Objects lie back to back from the block's header
/// on; the first that does not read as a link ends the search.
pub(super) fn direct(c: &mut Cursor<'_>, heap: &FractalHeap, found: &mut Found) -> Option<()> {
    if !heap.links || heap.filtered {
        return None;
    }
    c.skip(5)?;
    c.addr()?; // the heap's header
    c.skip(usize::from(heap.offset_bytes))?;
    if heap.checksummed {
        c.skip(4)?;
    }
    while link(c, found).is_some() {}
    Some(())
}

/// What a version 2 B-tree's header says about its nodes: enough to read
/// its internal nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BTree2 {
    node_size: u32,
    record_size: u16,
    /// Bytes of a child's record count.
    count_bytes: u8,
    /// Bytes of the total record count below a child, by the child's
    /// level (0 for leaves, which have no such field).
    total_bytes: [u8; MAX_BTREE_DEPTH],
    /// Whether its records are chunks (types 10 and 11): a chunk index,
    /// whose nodes the writer allocates among the chunks.
    chunks: bool,
}

/// The deepest version 2 B-tree followed (HDF5's are a few levels deep).
const MAX_BTREE_DEPTH: usize = 8;

/// The bytes of a node's signature, version, type and checksum.
const NODE_PREFIX: u64 = 10;

/// The bytes needed to encode the count `n`, as HDF5 sizes them.
fn width_of(n: u64) -> u8 {
    (n.max(1).ilog2() / 8 + 1) as u8
}

impl BTree2 {
    /// The layout of a tree of nodes of `node_size` bytes holding records
    /// of `record_size` bytes, `depth` levels deep (HDF5's own arithmetic).
    fn new(
        node_size: u32,
        record_size: u16,
        depth: u16,
        offsets: u8,
        chunks: bool,
    ) -> Option<BTree2> {
        let (size, record) = (u64::from(node_size), u64::from(record_size));
        if record == 0 || usize::from(depth) >= MAX_BTREE_DEPTH {
            return None;
        }
        let leaf_records = size.checked_sub(NODE_PREFIX)? / record;
        let count_bytes = width_of(leaf_records);
        let mut total_bytes = [0; MAX_BTREE_DEPTH];
        let mut below = leaf_records; // the most records under a node of the level below
        for level in 1..=usize::from(depth) {
            let pointer =
                u64::from(offsets) + u64::from(count_bytes) + u64::from(total_bytes[level - 1]);
            let records = size.checked_sub(NODE_PREFIX + pointer)? / (record + pointer);
            below = records
                .checked_add(1)?
                .checked_mul(below)?
                .checked_add(records)?;
            total_bytes[level] = width_of(below);
        }
        Some(BTree2 {
            node_size,
            record_size,
            count_bytes,
            total_bytes,
            chunks,
        })
    }
}

#[cfg(any(test, feature = "fuzzing"))]
impl BTree2 {
    /// A small tree whose shape `seed` picks, for the fuzz target.
    pub fn for_fuzzing(seed: u8) -> Option<BTree2> {
        BTree2::new(
            64 << (seed & 7),
            1 + u16::from(seed >> 3),
            u16::from(seed & 3),
            8,
            seed & 0x80 != 0,
        )
    }
}

/// A version 2 B-tree header (`BTHD`): its root node, and how to read its
/// internal nodes (returned, to be remembered by the header's address).
pub(super) fn btree_header(c: &mut Cursor<'_>, at: u64, found: &mut Found) -> Option<BTree2> {
    c.signature_and_version(0)?;
    // Records of types 10 and 11 are chunks (unfiltered, filtered).
    let chunks = matches!(c.u8()?, 10 | 11);
    let node_size = c.u32()?;
    let record_size = c.u16()?;
    let depth = c.u16()?;
    c.skip(2)?; // split and merge percents
    let root = c.addr()?;
    let records = c.u16()?;
    let tree = BTree2::new(node_size, record_size, depth, c.geometry.offsets, chunks)?;
    let what = What::BTree2Node {
        header: at,
        level: depth,
        records,
        chunks,
    };
    found.add(what, root, u64::from(node_size));
    Some(tree)
}

/// A version 2 B-tree internal node (`BTIN`) at `level` holding `records`
/// records: its children. Leaves hold records only (for a group's name
/// index, the heap IDs of links whose heap is fetched already).
pub(super) fn btree_internal(
    c: &mut Cursor<'_>,
    tree: &BTree2,
    (header, level, records): (u64, u16, u16),
    found: &mut Found,
) -> Option<()> {
    if level == 0 {
        return None;
    }
    c.signature_and_version(0)?;
    c.skip(1)?; // type
    c.skip(usize::from(records).checked_mul(usize::from(tree.record_size))?)?;
    let total = *tree.total_bytes.get(usize::from(level - 1))?;
    for _ in 0..=records {
        let child = c.addr()?;
        let child_records = u16::try_from(c.uint(usize::from(tree.count_bytes))?).ok()?;
        if total > 0 {
            c.uint(usize::from(total))?;
        }
        let what = What::BTree2Node {
            header,
            level: level - 1,
            records: child_records,
            chunks: tree.chunks,
        };
        found.add(what, child, u64::from(tree.node_size));
    }
    Some(())
}
