//! Where HDF5 will read next: pure parsers from the bytes of one piece of
//! HDF5 metadata to the addresses of the metadata it points to.
//!
//! Opening an HDF5 file and walking its groups is a chain of dependent
//! reads, which HDF5 makes one at a time. But each piece it reads says where
//! the next ones are: the superblock names the root group's object header,
//! an object header its continuation blocks, its group's B-tree and heap and
//! its dataset's chunk index, a B-tree node its children, a symbol table node
//! the object headers of the group's members. Fetching those while HDF5 is
//! still parsing the current piece makes a walk cost about as many round
//! trips as the file is deep, not as it is wide.
//!
//! The parsers here read superblocks of versions 0 to 3, object headers of
//! versions 1 and 2 (with their continuation blocks), and the structures of
//! both file formats: of the earliest (what h5py and pynwb write by
//! default), version 1 B-tree nodes of groups and of chunk indexes, symbol
//! table nodes and local heaps; of the latest, fractal heaps (the links of
//! dense groups and the attributes of dense objects, direct and indirect
//! blocks), version 2 B-trees (of names, of creation orders, of chunks:
//! header and internal nodes), and fixed and extensible array chunk indexes
//! to their last block and page ([`arrays`]). They never panic, allocate at
//! most a bounded amount, and a wrong guess costs only bytes: HDF5 still
//! reads everything it needs itself.

mod arrays;
mod cursor;
mod newer;
mod nodes;
mod object_header;

use std::collections::HashMap;
use std::ops::Range;

pub(crate) use self::arrays::ArrayIndex;
use self::cursor::Cursor;
pub(crate) use self::newer::{BTree2, FractalHeap};

/// The most targets one piece of metadata yields (a B-tree node of a group
/// with many members has a few hundred).
pub(crate) const MAX_TARGETS: usize = 4096;

/// The most bytes one target spans, whatever length the file gives it
/// (a local heap's data segment, a continuation block, a fractal heap's
/// block, a B-tree node): a target is a guess fetched ahead of HDF5, and
/// HDF5 reads whatever lies past it itself. The longest pieces of metadata
/// real writers make (the heap of link names of a group of thousands of
/// members, an object header of many attributes) are some hundreds of KB;
/// the guessed bytes are bounded besides by the crawl's budget.
pub(crate) const MAX_TARGET_LEN: u64 = 1 << 20;

/// HDF5's memory types, as the driver's read callback receives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemType {
    Superblock,
    BTree,
    RawData,
    GlobalHeap,
    LocalHeap,
    ObjectHeader,
    Other,
}

impl MemType {
    /// From `H5FD_mem_t`.
    pub fn from_c(value: i32) -> MemType {
        match value {
            1 => MemType::Superblock,
            2 => MemType::BTree,
            3 => MemType::RawData,
            4 => MemType::GlobalHeap,
            5 => MemType::LocalHeap,
            6 => MemType::ObjectHeader,
            _ => MemType::Other,
        }
    }
}

/// The sizes the superblock declares, which every other structure is laid
/// out with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Bytes in a file address ("size of offsets").
    pub offsets: u8,
    /// Bytes in an object size ("size of lengths").
    pub lengths: u8,
    /// Half the most entries of a symbol table node.
    pub group_leaf_k: u16,
    /// Half the most children of a group B-tree node.
    pub group_internal_k: u16,
    /// Half the most children of a chunk B-tree node.
    pub chunk_k: u16,
    /// Where the file's addresses count from (after a user block).
    pub base: u64,
}

impl Default for Geometry {
    /// HDF5's defaults.
    fn default() -> Geometry {
        Geometry {
            offsets: 8,
            lengths: 8,
            group_leaf_k: 4,
            group_internal_k: 16,
            chunk_k: 32,
            base: 0,
        }
    }
}

/// What lies at an address that some metadata points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum What {
    /// The superblock, where a crawl of the file starts.
    #[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
    Superblock,
    ObjectHeader,
    /// A version 1 object header's continuation block: messages only.
    ContinuationV1,
    /// A version 2 object header's continuation block (`OCHK`); `order`
    /// says whether its messages carry a creation order.
    ContinuationV2 {
        order: bool,
    },
    /// A node of a group's version 1 B-tree.
    GroupNode,
    /// A node of a chunk index's version 1 B-tree; `dims` is the layout's
    /// dimensionality (the dataset's rank plus one), which sizes its keys.
    ChunkNode {
        dims: u8,
    },
    /// A symbol table node (`SNOD`).
    SymbolNode,
    LocalHeap,
    /// The data of a local heap (link names): read, not parsed.
    HeapData,
    /// A fractal heap's header (`FRHP`), of links or of attributes.
    FractalHeap {
        links: bool,
    },
    /// A fractal heap's direct block (`FHDB`).
    HeapDirect,
    /// A fractal heap's indirect block (`FHIB`) of `rows` rows.
    HeapIndirect {
        rows: u16,
    },
    /// A fractal heap's free-space manager's header (`FSHD`), which HDF5
    /// reads to tell the heap's size: fetched, not parsed.
    FreeSpace,
    /// A version 2 B-tree's header (`BTHD`).
    BTree2Header,
    /// A version 2 B-tree's node at `level` (0 for a leaf) holding
    /// `records` records, of the tree whose header is at `header`; `chunks`
    /// if the tree is a chunk index.
    BTree2Node {
        header: u64,
        level: u16,
        records: u16,
        chunks: bool,
    },
    /// A fixed or extensible array chunk index's header (`FAHD`, `EAHD`).
    ArrayHeader,
    /// An extensible array's index block (`EAIB`).
    ArrayIndex,
    /// An extensible array's super block (`EASB`).
    ArraySuper,
    /// An array's data block (`FADB`, `EADB`), or the prefix of a paged
    /// one.
    ArrayData,
    /// A page of a paged data block: fetched, not parsed.
    ArrayPage,
    /// A global heap collection (`GCOL`), which variable-length attribute
    /// values point into: fetched, not parsed.
    GlobalHeap,
    /// Bytes around a metadata read that nothing pointed to: fetched, not
    /// parsed.
    #[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
    Unforeseen,
}

#[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
impl What {
    /// Whether the bytes there point anywhere (else they are only fetched).
    pub fn is_parsed(self) -> bool {
        !matches!(
            self,
            What::HeapData
                | What::ArrayPage
                | What::FreeSpace
                | What::GlobalHeap
                | What::Unforeseen
        )
    }

    /// Whether it is a node or block of a chunk index, which a writer
    /// allocates as chunks are written, among them (the index's header
    /// comes with the dataset's).
    pub fn lies_among_raw_data(self) -> bool {
        matches!(
            self,
            What::ChunkNode { .. }
                | What::BTree2Node { chunks: true, .. }
                | What::ArrayIndex
                | What::ArraySuper
                | What::ArrayData
                | What::ArrayPage
        )
    }
}

/// A place some metadata points to: what is there, and about how many bytes
/// HDF5 will read there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub what: What,
    pub bytes: Range<u64>,
}

/// What one piece of metadata says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub targets: Vec<Target>,
    /// The file's sizes, if the piece was the superblock.
    pub geometry: Option<Geometry>,
    /// How to read a fractal heap's blocks, if the piece was its header.
    pub heap: Option<FractalHeap>,
    /// How to read a version 2 B-tree's nodes, if the piece was its header.
    pub btree: Option<BTree2>,
    /// How to read an array chunk index's blocks, if the piece was its
    /// header.
    pub array: Option<ArrayIndex>,
    /// The chunks a chunk index's leaf lists, if the piece was one.
    pub chunks: Option<ChunkLeaf>,
}

/// The chunks one leaf of a chunk index lists: where each is stored (its
/// stored size, compressed if filtered), in the index's order, which is the
/// order HDF5 reads a selection's chunks in.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ChunkLeaf {
    pub chunks: Vec<Range<u64>>,
    /// The leaf that lists the chunks that follow.
    pub next_leaf: Option<u64>,
}

/// What earlier pieces said, which reading this one needs.
#[derive(Debug, Default, Clone)]
pub(crate) struct Context {
    pub geometry: Geometry,
    /// Fractal heaps by the address of their header.
    pub heaps: HashMap<u64, FractalHeap>,
    /// Version 2 B-trees by the address of their header.
    pub btrees: HashMap<u64, BTree2>,
    /// Fixed and extensible arrays by the address of their header.
    pub arrays: HashMap<u64, ArrayIndex>,
}

impl Found {
    fn add(&mut self, what: What, addr: Option<u64>, len: u64) {
        let len = len.min(MAX_TARGET_LEN);
        // An address so large that the bytes would run past the last one is
        // nonsense: nothing is there.
        let Some(end) = addr.and_then(|a| a.checked_add(len)) else {
            return;
        };
        if self.targets.len() < MAX_TARGETS && len > 0 {
            self.targets.push(Target {
                what,
                bytes: end - len..end,
            });
        }
    }
}

/// How many bytes HDF5 reads of an object header at first (its speculative
/// read: the whole of most headers).
pub(crate) const OBJECT_HEADER_READ: u64 = 512;

/// The bytes HDF5 reads at first of a version 2 B-tree's or an array's
/// header: each is shorter than this.
pub(crate) const SMALL_HEADER: u64 = 256;

/// Reads the metadata HDF5 read at `addr` (`bytes`, of memory type `mem`;
/// `expected` if an earlier piece pointed here) and lists what it points to.
pub(crate) fn pointers(
    bytes: &[u8],
    addr: u64,
    mem: MemType,
    expected: Option<What>,
    context: &Context,
) -> Found {
    let mut found = Found::default();
    let mut c = Cursor::new(bytes, context.geometry);
    let _ = match &c.peek_signature().unwrap_or_default() {
        b"\x89HDF" => nodes::superblock(&mut c, &mut found),
        b"TREE" => nodes::btree_v1(&mut c, expected, &mut found),
        b"SNOD" => nodes::symbol_node(&mut c, &mut found),
        b"HEAP" => nodes::local_heap(&mut c, &mut found),
        b"OHDR" => object_header::v2(&mut c, &mut found),
        b"OCHK" => object_header::v2_continuation(&mut c, expected, &mut found),
        b"FRHP" | b"FHDB" | b"FHIB" | b"BTHD" | b"BTIN" => {
            heap_or_btree(&mut c, bytes, addr, expected, context, &mut found)
        }
        b"FAHD" | b"EAHD" | b"FADB" | b"EAIB" | b"EASB" => {
            array_index(&mut c, bytes, addr, context, &mut found)
        }
        _ => match expected {
            Some(What::ContinuationV1) => object_header::v1_messages(&mut c, &mut found),
            Some(What::ObjectHeader) => object_header::v1(&mut c, &mut found),
            None if mem == MemType::ObjectHeader => object_header::v1(&mut c, &mut found),
            _ => None,
        },
    };
    // A structure never points at itself; the caller has those bytes.
    found.targets.retain(|t| t.bytes.start != addr);
    // Nor is a leaf its own sibling: following it would never end.
    if let Some(leaf) = found.chunks.as_mut() {
        leaf.next_leaf = leaf.next_leaf.filter(|&next| next != addr);
    }
    found
}

/// What a fractal heap's or a v2 B-tree's structure at `addr` points to.
fn heap_or_btree(
    c: &mut Cursor<'_>,
    bytes: &[u8],
    addr: u64,
    expected: Option<What>,
    context: &Context,
    found: &mut Found,
) -> Option<()> {
    match &c.peek_signature().unwrap_or_default() {
        b"FRHP" => {
            let links = matches!(expected, Some(What::FractalHeap { links: true }));
            found.heap = newer::header(c, links, found);
            Some(())
        }
        b"FHDB" => heap_of(bytes, context).and_then(|h| newer::direct(c, &h, found)),
        b"FHIB" => match (heap_of(bytes, context), expected) {
            (Some(h), Some(What::HeapIndirect { rows })) => newer::indirect(c, &h, rows, found),
            _ => None,
        },
        b"BTHD" => {
            found.btree = newer::btree_header(c, addr, found);
            Some(())
        }
        b"BTIN" => match expected {
            Some(What::BTree2Node {
                header,
                level,
                records,
                ..
            }) => context
                .btrees
                .get(&header)
                .and_then(|tree| newer::btree_internal(c, tree, (header, level, records), found)),
            _ => None,
        },
        _ => None,
    }
}

/// What a fixed or extensible array index's structure at `addr` points to.
fn array_index(
    c: &mut Cursor<'_>,
    bytes: &[u8],
    addr: u64,
    context: &Context,
    found: &mut Found,
) -> Option<()> {
    match &c.peek_signature().unwrap_or_default() {
        b"FAHD" | b"EAHD" => {
            found.array = arrays::header(c, bytes.starts_with(b"EAHD"), found);
            Some(())
        }
        b"FADB" => match array_of(bytes, context) {
            Some(ArrayIndex::Fixed(a)) => arrays::fixed_data_block(c, &a, addr, found),
            _ => None,
        },
        b"EAIB" => match array_of(bytes, context) {
            Some(ArrayIndex::Extensible(a)) => arrays::index_block(c, &a, found),
            _ => None,
        },
        b"EASB" => match array_of(bytes, context) {
            Some(ArrayIndex::Extensible(a)) => arrays::super_block(c, &a, found),
            _ => None,
        },
        _ => None,
    }
}

/// How many bytes the structure at the start of `bytes` says it has, where
/// the guess made for it may be short: an object header (HDF5 reads 512
/// bytes first, then the rest). At most [`MAX_TARGET_LEN`], whatever the
/// bytes say.
#[cfg_attr(not(any(feature = "hdf5", feature = "vfd")), allow(dead_code))]
pub(crate) fn declared_len(bytes: &[u8], what: What, context: &Context) -> Option<u64> {
    let mut c = Cursor::new(bytes, context.geometry);
    let len = match (what, &c.peek_signature()?) {
        (What::ObjectHeader, b"OHDR") => object_header::v2_len(&mut c),
        (What::ObjectHeader, _) => object_header::v1_len(&mut c),
        _ => None,
    };
    len.map(|n| n.min(MAX_TARGET_LEN))
}

/// The signatures HDF5's structures open with (the superblock's first
/// four bytes among them).
pub(crate) const SIGNATURES: [&[u8; 4]; 21] = [
    b"\x89HDF", b"TREE", b"SNOD", b"HEAP", b"GCOL", b"OHDR", b"OCHK", b"FRHP", b"FHDB", b"FHIB",
    b"FSHD", b"FSSE", b"BTHD", b"BTIN", b"BTLF", b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB",
    b"EADB",
];

/// Whether `bytes` open with the signature of an HDF5 structure.
#[cfg(any(feature = "hdf5", feature = "vfd"))]
pub(crate) fn has_signature(bytes: &[u8]) -> bool {
    bytes
        .get(..4)
        .is_some_and(|head| SIGNATURES.iter().any(|s| head == &s[..]))
}

/// The array a fixed or extensible array's block belongs to, by the
/// header's address the block names.
fn array_of(bytes: &[u8], context: &Context) -> Option<ArrayIndex> {
    let mut c = Cursor::new(bytes, context.geometry);
    context.arrays.get(&arrays::owner(&mut c)?).copied()
}

/// The heap a fractal heap block belongs to: its header's address follows
/// the block's signature and version.
fn heap_of(bytes: &[u8], context: &Context) -> Option<FractalHeap> {
    let mut c = Cursor::new(bytes, context.geometry);
    c.skip(5)?;
    context.heaps.get(&c.addr()??).copied()
}

#[cfg(test)]
mod tests;
