//! The superblock, version 1 B-tree nodes, symbol table nodes and local
//! heaps.

use super::cursor::Cursor;
use super::{ChunkLeaf, Found, Geometry, MAX_TARGETS, OBJECT_HEADER_READ, What};

/// The prefix of a local heap: signature, version, sizes and address.
fn local_heap_len(g: &Geometry) -> u64 {
    8 + 2 * u64::from(g.lengths) + u64::from(g.offsets)
}

/// How many bytes HDF5 reads of a local heap at first (its speculative
/// read: the header and, where the writer put it next, the data segment).
const LOCAL_HEAP_READ: u64 = 512;

/// A symbol table node with room for all its entries.
fn symbol_node_len(g: &Geometry) -> u64 {
    8 + 2 * u64::from(g.group_leaf_k) * entry_len(g)
}

/// A symbol table entry: name offset, header address, cache type, reserved,
/// scratch pad.
fn entry_len(g: &Geometry) -> u64 {
    2 * u64::from(g.offsets) + 24
}

/// A version 1 B-tree node with room for `2k` children and keys of `key`
/// bytes.
fn btree_len(g: &Geometry, k: u16, key: u64) -> u64 {
    let two_k = 2 * u64::from(k);
    8 + 2 * u64::from(g.offsets) + (two_k + 1) * key + two_k * u64::from(g.offsets)
}

/// The key of a chunk B-tree node: chunk size, filter mask, one offset per
/// dimension.
fn chunk_key_len(dims: u8) -> u64 {
    8 + 8 * u64::from(dims)
}

pub(super) fn superblock(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    c.skip(8)?;
    let version = c.u8()?;
    let mut g = Geometry::default();
    if version <= 1 {
        c.skip(4)?; // free-space, root entry and shared-header versions, reserved
        g.offsets = c.u8()?;
        g.lengths = c.u8()?;
        c.skip(1)?;
        g.group_leaf_k = c.u16()?;
        g.group_internal_k = c.u16()?;
        c.skip(4)?; // consistency flags
        if version == 1 {
            g.chunk_k = c.u16()?;
            c.skip(2)?;
        }
    } else if version <= 3 {
        g.offsets = c.u8()?;
        g.lengths = c.u8()?;
        c.skip(1)?;
    } else {
        return None;
    }
    let sizes_ok = |n: u8| matches!(n, 2 | 4 | 8);
    if !sizes_ok(g.offsets) || !sizes_ok(g.lengths) || g.group_leaf_k == 0 {
        return None;
    }
    c.geometry = g;
    g.base = c.addr()?.unwrap_or(0);
    c.geometry = g;
    found.geometry = Some(g);
    if version <= 1 {
        c.skip(3 * usize::from(g.offsets))?; // free space, end of file, driver
        entry(c, found)
    } else {
        let extension = c.addr()?;
        c.skip(usize::from(g.offsets))?; // end of file
        let root = c.addr()?;
        found.add(What::ObjectHeader, root, OBJECT_HEADER_READ);
        found.add(What::ObjectHeader, extension, OBJECT_HEADER_READ);
        Some(())
    }
}

/// A symbol table entry (the root group's, in the superblock, or a member's,
/// in a symbol table node): the member's object header and, for a group
/// whose entry caches them, its B-tree and local heap.
fn entry(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    let g = c.geometry;
    c.skip(usize::from(g.offsets))?; // link name offset
    let header = c.addr()?;
    let cache_type = c.u32()?;
    c.skip(4)?;
    let scratch = c.position();
    found.add(What::ObjectHeader, header, OBJECT_HEADER_READ);
    if cache_type == 1 {
        let (btree_len, heap_len) = group_lens(&g);
        found.add(What::GroupNode, c.addr()?, btree_len);
        found.add(What::LocalHeap, c.addr()?, heap_len);
    }
    c.seek(scratch + 16)
}

pub(super) fn symbol_node(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    c.signature_and_version(1)?;
    c.skip(1)?;
    let count = c.u16()?;
    for _ in 0..count {
        entry(c, found)?;
    }
    Some(())
}

pub(super) fn local_heap(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    c.signature_and_version(0)?;
    c.skip(3)?;
    let size = c.length()?;
    c.length()?; // free list
    let data = c.addr()?;
    found.add(What::HeapData, data, size);
    Some(())
}

pub(super) fn btree_v1(
    c: &mut Cursor<'_>,
    expected: Option<What>,
    found: &mut Found,
) -> Option<()> {
    let g = c.geometry;
    c.skip(4)?;
    let node_type = c.u8()?;
    let level = c.u8()?;
    let entries = c.u16()?;
    c.skip(usize::from(g.offsets))?; // left sibling
    let right = c.addr()?;
    if let (1, Some(What::ChunkNode { dims }), 0) = (node_type, expected, level) {
        return chunk_leaf(c, dims, entries, right, found);
    }
    let (key, child, child_len) = match (node_type, expected) {
        (0, _) => {
            let key = u64::from(g.lengths);
            if level > 0 {
                (key, What::GroupNode, btree_len(&g, g.group_internal_k, key))
            } else {
                (key, What::SymbolNode, symbol_node_len(&g))
            }
        }
        // The children of a chunk index's leaves are chunks: raw data.
        (1, Some(What::ChunkNode { dims })) if level > 0 => {
            let key = chunk_key_len(dims);
            (key, What::ChunkNode { dims }, btree_len(&g, g.chunk_k, key))
        }
        _ => return None,
    };
    let key = usize::try_from(key).ok()?;
    for _ in 0..entries {
        c.skip(key)?;
        let addr = c.addr()?;
        found.add(child, addr, child_len);
    }
    Some(())
}

/// A chunk index's leaf: where its chunks are stored, in the index's order,
/// and the next leaf; HDF5 reads the chunks themselves as raw data.
fn chunk_leaf(
    c: &mut Cursor<'_>,
    dims: u8,
    entries: u16,
    right: Option<u64>,
    found: &mut Found,
) -> Option<()> {
    let rest = usize::try_from(chunk_key_len(dims) - 4).ok()?;
    let mut chunks = Vec::with_capacity(usize::from(entries).min(MAX_TARGETS));
    for _ in 0..entries.min(MAX_TARGETS as u16) {
        let stored = u64::from(c.u32()?);
        c.skip(rest)?;
        let addr = c.addr()?;
        // HDF5 stores no chunk of no bytes: such an entry is damage, and a
        // run of chunks that never grows would never end.
        if stored == 0 {
            continue;
        }
        let Some(end) = addr.and_then(|a| a.checked_add(stored)) else {
            continue;
        };
        chunks.push(end - stored..end);
    }
    found.chunks = Some(ChunkLeaf {
        chunks,
        next_leaf: right,
    });
    Some(())
}

/// The bytes HDF5 reads of a chunk B-tree node of a layout with `dims`
/// dimensions, for the layout message that names its root.
pub(super) fn chunk_node_len(g: &Geometry, dims: u8) -> u64 {
    btree_len(g, g.chunk_k, chunk_key_len(dims))
}

/// The bytes HDF5 reads of a group B-tree node and of a local heap, for the
/// symbol table message that names them.
pub(super) fn group_lens(g: &Geometry) -> (u64, u64) {
    (
        btree_len(g, g.group_internal_k, u64::from(g.lengths)),
        local_heap_len(g).max(LOCAL_HEAP_READ),
    )
}
