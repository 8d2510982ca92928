//! Object headers (version 1, and version 2 with its `OCHK` continuation
//! blocks) and the messages in them that point elsewhere: continuation,
//! symbol table, data layout, link, link info and attribute info.

use super::cursor::Cursor;
use super::nodes::{chunk_node_len, group_lens};
use super::{Found, OBJECT_HEADER_READ, SMALL_HEADER, What};

/// The bytes of a fractal heap's header (without I/O filters: 146 with
/// 8-byte offsets and lengths).
const FRACTAL_HEAP_READ: u64 = 256;

const CONTINUATION: u16 = 0x0010;
const SYMBOL_TABLE: u16 = 0x0011;
const LAYOUT: u16 = 0x0008;
const LINK: u16 = 0x0006;
const LINK_INFO: u16 = 0x0002;
const ATTRIBUTE_INFO: u16 = 0x0015;
const ATTRIBUTE: u16 = 0x000C;

/// The datatype class of variable-length sequences and strings, whose
/// values live in global heap collections.
const VARIABLE_LENGTH: u8 = 9;

/// The bytes HDF5 reads of a global heap collection first (its least size).
const GLOBAL_HEAP_READ: u64 = 4096;

/// The most dimensions of a chunked layout (versions 1 to 3): HDF5's
/// largest rank, 32, plus one for the element. HDF5 refuses a layout of
/// more, and its chunk index's keys are sized by them: a larger count would
/// make nodes of the wrong size, of up to 255 dimensions' keys.
const MAX_LAYOUT_DIMS: u8 = 33;

/// A message's flags bit saying its data is a reference to a shared message.
const SHARED: u8 = 0x02;

/// A version 1 header's length: its 16-byte prefix and its first chunk.
#[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
pub(super) fn v1_len(c: &mut Cursor<'_>) -> Option<u64> {
    if c.u8()? != 1 {
        return None;
    }
    c.skip(7)?;
    Some(16 + u64::from(c.u32()?))
}

/// A version 2 header's length: its prefix, its first chunk and checksum.
#[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
pub(super) fn v2_len(c: &mut Cursor<'_>) -> Option<u64> {
    c.signature_and_version(2)?;
    let flags = c.u8()?;
    c.skip(if flags & 0x20 != 0 { 16 } else { 0 })?;
    c.skip(if flags & 0x10 != 0 { 4 } else { 0 })?;
    let chunk = c.uint(1 << (flags & 0x03))?;
    (c.position() as u64).checked_add(chunk)?.checked_add(4)
}

pub(super) fn v1(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    if c.u8()? != 1 {
        return None;
    }
    c.skip(1)?;
    let count = c.u16()?;
    c.skip(4)?; // reference count
    let chunk = usize::try_from(c.u32()?).ok()?;
    c.skip(4)?; // alignment of the messages to 8 bytes
    let end = c.position().saturating_add(chunk);
    v1_run(c, found, end, usize::from(count))
}

/// A version 1 continuation block: messages from its first byte on.
pub(super) fn v1_messages(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    v1_run(c, found, usize::MAX, usize::MAX)
}

/// Version 1 messages up to `end` (or the bytes' end), at most `count`.
fn v1_run(c: &mut Cursor<'_>, found: &mut Found, end: usize, count: usize) -> Option<()> {
    for _ in 0..count {
        if c.position().saturating_add(8) > end {
            break;
        }
        let kind = c.u16()?;
        let size = usize::from(c.u16()?);
        let flags = c.u8()?;
        c.skip(3)?;
        let data = c.take(size)?;
        if flags & SHARED == 0 {
            message(kind, data, c, found, What::ContinuationV1);
        }
    }
    Some(())
}

pub(super) fn v2(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    c.signature_and_version(2)?;
    let flags = c.u8()?;
    if flags & 0x20 != 0 {
        c.skip(16)?; // times
    }
    if flags & 0x10 != 0 {
        c.skip(4)?; // attribute storage phase change
    }
    let chunk = usize::try_from(c.uint(1 << (flags & 0x03))?).ok()?;
    let order = flags & 0x04 != 0;
    let end = c.position().saturating_add(chunk);
    v2_run(c, found, end, order)
}

/// An `OCHK` block. Whether its messages carry a creation order is said by
/// the header it continues; `expected` carries it.
pub(super) fn v2_continuation(
    c: &mut Cursor<'_>,
    expected: Option<What>,
    found: &mut Found,
) -> Option<()> {
    let order = matches!(expected, Some(What::ContinuationV2 { order: true }));
    c.skip(4)?;
    // The block ends with a checksum.
    let end = c.remaining().saturating_sub(4) + c.position();
    v2_run(c, found, end, order)
}

fn v2_run(c: &mut Cursor<'_>, found: &mut Found, end: usize, order: bool) -> Option<()> {
    let header = if order { 6 } else { 4 };
    while c.position().saturating_add(header) <= end {
        let kind = u16::from(c.u8()?);
        let size = usize::from(c.u16()?);
        let flags = c.u8()?;
        if order {
            c.skip(2)?;
        }
        let data = c.take(size)?;
        if flags & SHARED == 0 {
            message(kind, data, c, found, What::ContinuationV2 { order });
        }
    }
    Some(())
}

/// One message's data: what it points to, if anything. A continuation
/// block is `continuation` (of the header's version).
fn message(kind: u16, data: &[u8], outer: &Cursor<'_>, found: &mut Found, continuation: What) {
    let mut c = Cursor::new(data, outer.geometry);
    let _ = match kind {
        CONTINUATION => continued(&mut c, found, continuation),
        SYMBOL_TABLE => symbol_table(&mut c, found),
        LAYOUT => layout(&mut c, found),
        LINK => link(&mut c, found),
        LINK_INFO | ATTRIBUTE_INFO => index_info(kind, &mut c, found),
        ATTRIBUTE => attribute(&mut c, found),
        _ => None,
    };
}

/// A continuation message: where the header goes on, and how long that is.
fn continued(c: &mut Cursor<'_>, found: &mut Found, what: What) -> Option<()> {
    let addr = c.addr()?;
    found.add(what, addr, c.length()?);
    Some(())
}

/// A symbol table message: an old-style group's B-tree and local heap.
fn symbol_table(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    let (btree_len, heap_len) = group_lens(&c.geometry);
    found.add(What::GroupNode, c.addr()?, btree_len);
    found.add(What::LocalHeap, c.addr()?, heap_len);
    Some(())
}

/// A data layout message: the root of a chunked dataset's index.
fn layout(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    let version = c.u8()?;
    match version {
        1 | 2 => {
            let dims = c.u8()?;
            let class = c.u8()?;
            c.skip(5)?;
            if class == 2 && dims <= MAX_LAYOUT_DIMS {
                let len = chunk_node_len(&c.geometry, dims);
                found.add(What::ChunkNode { dims }, c.addr()?, len);
            }
        }
        3 if c.u8()? == 2 => {
            let dims = c.u8()?;
            if dims > MAX_LAYOUT_DIMS {
                return None;
            }
            let len = chunk_node_len(&c.geometry, dims);
            found.add(What::ChunkNode { dims }, c.addr()?, len);
        }
        // Version 5 differs only in how filtered chunks' sizes are kept.
        4 | 5 => {
            if c.u8()? != 2 {
                return None;
            }
            c.skip(1)?; // flags
            let dims = usize::from(c.u8()?);
            let encoded = usize::from(c.u8()?);
            c.skip(dims.checked_mul(encoded)?)?;
            // Fixed array, extensible array and version 2 B-tree indexes;
            // a single chunk or an implicit index is raw data.
            let (info, what) = match c.u8()? {
                3 => (1, What::ArrayHeader),
                4 => (5, What::ArrayHeader),
                5 => (6, What::BTree2Header),
                _ => return None,
            };
            c.skip(info)?;
            found.add(what, c.addr()?, SMALL_HEADER);
        }
        _ => {}
    }
    Some(())
}

/// A link message (in an object header, or an object of a fractal heap of
/// links): a hard link's object header. Reads the whole message.
pub(super) fn link(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    if c.u8()? != 1 {
        return None;
    }
    let flags = c.u8()?;
    let link_type = if flags & 0x08 != 0 { c.u8()? } else { 0 };
    if flags & 0x04 != 0 {
        c.skip(8)?; // creation order
    }
    if flags & 0x10 != 0 {
        c.skip(1)?; // character set
    }
    let name_len = usize::try_from(c.uint(1 << (flags & 0x03))?).ok()?;
    if name_len == 0 {
        return None;
    }
    c.skip(name_len)?;
    if link_type == 0 {
        found.add(What::ObjectHeader, c.addr()?, OBJECT_HEADER_READ);
    } else {
        // A soft, external or user-defined link: a length, then its value.
        let len = usize::from(c.u16()?);
        c.skip(len)?;
    }
    Some(())
}

/// A link info or attribute info message: the dense storage's fractal heap
/// and name index (and creation order index, if any).
fn index_info(kind: u16, c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    if c.u8()? != 0 {
        return None;
    }
    let flags = c.u8()?;
    if flags & 0x01 != 0 {
        c.skip(if kind == LINK_INFO { 8 } else { 2 })?; // most creation index
    }
    let links = kind == LINK_INFO;
    found.add(What::FractalHeap { links }, c.addr()?, FRACTAL_HEAP_READ);
    found.add(What::BTree2Header, c.addr()?, SMALL_HEADER);
    if flags & 0x02 != 0 {
        found.add(What::BTree2Header, c.addr()?, SMALL_HEADER);
    }
    Some(())
}

/// An attribute message: if its values are of variable length (strings,
/// say: NWB's and netCDF's text attributes, dimension lists), the global
/// heap collections that hold them. Each value is a length, a collection's
/// address and an index in it.
fn attribute(c: &mut Cursor<'_>, found: &mut Found) -> Option<()> {
    let version = c.u8()?;
    let flags = c.u8()?;
    let name = usize::from(c.u16()?);
    let datatype = usize::from(c.u16()?);
    let dataspace = usize::from(c.u16()?);
    // A shared datatype or dataspace is described elsewhere.
    if flags & 0x03 != 0 {
        return None;
    }
    let padded = |n: usize| if version == 1 { n.div_ceil(8) * 8 } else { n };
    if version == 3 {
        c.skip(1)?; // name encoding
    } else if version != 1 && version != 2 {
        return None;
    }
    c.skip(padded(name))?;
    let class = c.take(padded(datatype))?.first()? & 0x0f;
    c.skip(padded(dataspace))?;
    if class != VARIABLE_LENGTH {
        return None;
    }
    let mut last = None;
    while c.remaining() > 0 {
        c.skip(4)?; // the value's length
        let collection = c.addr()?;
        c.skip(4)?; // its index in the collection
        // Values of one attribute share their collection, mostly.
        if collection != last && collection != Some(0) {
            found.add(What::GlobalHeap, collection, GLOBAL_HEAP_READ);
            last = collection;
        }
    }
    Some(())
}
