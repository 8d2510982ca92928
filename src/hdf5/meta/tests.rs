use super::*;
use proptest::prelude::*;

/// Little-endian bytes of HDF5 structures, written field by field.
#[derive(Default)]
struct Le(Vec<u8>);

impl Le {
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
    fn u8(self, v: u8) -> Self {
        self.bytes(&[v])
    }
    fn u16(self, v: u16) -> Self {
        self.bytes(&v.to_le_bytes())
    }
    fn u32(self, v: u32) -> Self {
        self.bytes(&v.to_le_bytes())
    }
    fn u64(self, v: u64) -> Self {
        self.bytes(&v.to_le_bytes())
    }
    fn zeros(self, n: usize) -> Self {
        self.bytes(&vec![0; n])
    }
    /// A version 1 object header message.
    fn message_v1(self, kind: u16, data: &[u8]) -> Self {
        let padded = data.len().div_ceil(8) * 8;
        let mut data = data.to_vec();
        data.resize(padded, 0);
        self.u16(kind)
            .u16(padded as u16)
            .u8(0)
            .zeros(3)
            .bytes(&data)
    }
}

fn found(bytes: &[u8], addr: u64, mem: MemType, expected: Option<What>) -> Found {
    pointers(bytes, addr, mem, expected, &Context::default())
}

fn starts(f: &Found) -> Vec<(What, u64)> {
    f.targets.iter().map(|t| (t.what, t.bytes.start)).collect()
}

fn superblock_v0() -> Vec<u8> {
    Le::default()
        .bytes(b"\x89HDF\r\n\x1a\n")
        .u8(0)
        .zeros(4)
        .u8(8)
        .u8(8)
        .u8(0)
        .u16(4)
        .u16(16)
        .u32(0)
        .u64(0) // base
        .u64(u64::MAX) // free space
        .u64(1 << 30) // end of file
        .u64(u64::MAX) // driver
        .u64(0) // root entry: name offset
        .u64(96) // object header
        .u32(1) // cache type: a group
        .u32(0)
        .u64(136) // B-tree
        .u64(680) // local heap
        .0
}

#[test]
fn the_superblock_names_the_root_group_and_the_sizes() {
    let f = found(&superblock_v0(), 0, MemType::Superblock, None);
    assert_eq!(f.geometry, Some(Geometry::default()));
    assert_eq!(
        starts(&f),
        [
            (What::ObjectHeader, 96),
            (What::GroupNode, 136),
            (What::LocalHeap, 680)
        ]
    );
    let v2 = Le::default()
        .bytes(b"\x89HDF\r\n\x1a\n")
        .u8(2)
        .u8(4)
        .u8(8)
        .u8(0)
        .u32(0) // base
        .u32(u32::MAX) // no extension
        .u32(5000) // end of file
        .u32(48) // root object header
        .u32(0);
    let f = found(&v2.0, 0, MemType::Superblock, None);
    assert_eq!(f.geometry.map(|g| (g.offsets, g.lengths)), Some((4, 8)));
    assert_eq!(starts(&f), [(What::ObjectHeader, 48)]);
}

#[test]
fn a_v1_object_header_points_to_its_continuation_group_and_chunk_index() {
    let continuation = Le::default().u64(4000).u64(200).0;
    let symbol_table = Le::default().u64(800).u64(1600).0;
    // Version 3 layout, chunked, 3 dimensions (a 2-D dataset), B-tree at 9000.
    let layout = Le::default().u8(3).u8(2).u8(3).u64(9000).zeros(16).0;
    let header = Le::default()
        .u8(1)
        .u8(0)
        .u16(3)
        .u32(1)
        .u32(24 + 24 + 40)
        .zeros(4)
        .message_v1(0x0010, &continuation)
        .message_v1(0x0011, &symbol_table)
        .message_v1(0x0008, &layout)
        .0;
    let f = found(&header, 96, MemType::ObjectHeader, None);
    assert_eq!(
        starts(&f),
        [
            (What::ContinuationV1, 4000),
            (What::GroupNode, 800),
            (What::LocalHeap, 1600),
            (What::ChunkNode { dims: 3 }, 9000)
        ]
    );
    assert_eq!(
        f.targets[0].bytes,
        4000..4200,
        "a continuation's exact extent"
    );
    // The continuation block holds messages only.
    let block = Le::default().message_v1(0x0011, &symbol_table).0;
    let f = found(
        &block,
        4000,
        MemType::ObjectHeader,
        Some(What::ContinuationV1),
    );
    assert_eq!(starts(&f)[0], (What::GroupNode, 800));
}

#[test]
fn a_v2_object_header_points_to_linked_objects_and_dense_storage() {
    let link = Le::default()
        .u8(1)
        .u8(0x00) // name length in one byte, hard link
        .u8(3)
        .bytes(b"abc")
        .u64(7000)
        .0;
    let link_info = Le::default().u8(0).u8(0).u64(12_000).u64(u64::MAX).0;
    // Version 4 layout, chunked with an extensible array index.
    let layout = Le::default()
        .u8(4)
        .u8(2)
        .u8(0)
        .u8(2)
        .u8(4)
        .u32(100)
        .u32(4)
        .u8(4)
        .zeros(5)
        .u64(20_000)
        .0;
    let mut messages = Vec::new();
    for (kind, data) in [(6u8, &link), (2, &link_info), (8, &layout)] {
        messages.push(kind);
        messages.extend_from_slice(&(data.len() as u16).to_le_bytes());
        messages.push(0);
        messages.extend_from_slice(data);
    }
    let header = Le::default()
        .bytes(b"OHDR")
        .u8(2)
        .u8(0x01) // chunk size in two bytes
        .u16(messages.len() as u16)
        .bytes(&messages)
        .u32(0); // checksum
    let f = found(&header.0, 96, MemType::ObjectHeader, None);
    assert_eq!(
        starts(&f),
        [
            (What::ObjectHeader, 7000),
            (What::FractalHeap { links: true }, 12_000),
            (What::ArrayHeader, 20_000)
        ]
    );
}

#[test]
fn btree_nodes_point_to_their_children() {
    let group_leaf = Le::default()
        .bytes(b"TREE")
        .u8(0)
        .u8(0)
        .u16(2)
        .u64(u64::MAX)
        .u64(u64::MAX)
        .u64(0)
        .u64(1000)
        .u64(8)
        .u64(2000)
        .u64(16);
    let f = found(&group_leaf.0, 136, MemType::BTree, Some(What::GroupNode));
    assert_eq!(
        starts(&f),
        [(What::SymbolNode, 1000), (What::SymbolNode, 2000)]
    );
    let chunk_key = Le::default().u32(4096).u32(0).u64(0).u64(0).u64(0).0;
    let chunk_internal = Le::default()
        .bytes(b"TREE")
        .u8(1)
        .u8(1)
        .u16(2)
        .u64(u64::MAX)
        .u64(u64::MAX)
        .bytes(&chunk_key)
        .u64(50_000)
        .bytes(&chunk_key)
        .u64(900_000)
        .bytes(&chunk_key);
    let dims = What::ChunkNode { dims: 3 };
    let f = found(&chunk_internal.0, 9000, MemType::BTree, Some(dims));
    assert_eq!(starts(&f), [(dims, 50_000), (dims, 900_000)]);
    // Without the layout's dimensionality the keys cannot be stepped over.
    assert!(
        found(&chunk_internal.0, 9000, MemType::BTree, None)
            .targets
            .is_empty()
    );
    // A leaf's children are chunks: raw data, never prefetched as metadata.
    // It lists where they are stored, in the index's order.
    let mut leaf = chunk_internal.0.clone();
    leaf[5] = 0;
    leaf[16..24].copy_from_slice(&77_000u64.to_le_bytes()); // right sibling
    let f = found(&leaf, 9000, MemType::BTree, Some(dims));
    assert!(f.targets.is_empty());
    let leaf = f.chunks.expect("a leaf's chunks");
    assert_eq!(leaf.chunks, [50_000..54_096, 900_000..904_096]);
    assert_eq!(leaf.next_leaf, Some(77_000));
}

#[test]
fn symbol_nodes_and_heaps_point_to_members_and_names() {
    let node = Le::default()
        .bytes(b"SNOD")
        .u8(1)
        .u8(0)
        .u16(2)
        .u64(8) // a dataset
        .u64(3000)
        .u32(0)
        .u32(0)
        .zeros(16)
        .u64(16) // a group, with its B-tree and heap cached
        .u64(4000)
        .u32(1)
        .u32(0)
        .u64(5000)
        .u64(6000);
    let f = found(&node.0, 1000, MemType::BTree, Some(What::SymbolNode));
    assert_eq!(
        starts(&f),
        [
            (What::ObjectHeader, 3000),
            (What::ObjectHeader, 4000),
            (What::GroupNode, 5000),
            (What::LocalHeap, 6000)
        ]
    );
    let heap = Le::default()
        .bytes(b"HEAP")
        .u8(0)
        .zeros(3)
        .u64(88)
        .u64(u64::MAX)
        .u64(712);
    let f = found(&heap.0, 680, MemType::LocalHeap, Some(What::LocalHeap));
    assert_eq!(
        f.targets,
        [Target {
            what: What::HeapData,
            bytes: 712..800
        }]
    );
}

#[test]
fn cut_short_structures_yield_what_their_bytes_hold() {
    let whole = found(&superblock_v0(), 0, MemType::Superblock, None);
    for n in 0..superblock_v0().len() {
        let part = found(&superblock_v0()[..n], 0, MemType::Superblock, None);
        assert!(
            part.targets.iter().all(|t| whole.targets.contains(t)),
            "{n}"
        );
    }
}

#[test]
fn nothing_points_back_at_itself() {
    let f = found(&superblock_v0(), 96, MemType::Superblock, None);
    assert!(f.targets.iter().all(|t| t.bytes.start != 96));
}

proptest! {
    #[test]
    fn any_bytes_are_safe(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        signature in 0usize..8,
        mem in 0i32..8,
        expected in 0usize..5,
    ) {
        let mut bytes = bytes;
        let signatures: [&[u8]; 8] =
            [b"", b"\x89HDF\r\n\x1a\n", b"TREE", b"SNOD", b"HEAP", b"OHDR", b"OCHK", b"\x01\x00"];
        let sig = signatures[signature];
        if bytes.len() >= sig.len() {
            bytes[..sig.len()].copy_from_slice(sig);
        }
        let expected = [
            None,
            Some(What::ObjectHeader),
            Some(What::ChunkNode { dims: 3 }),
            Some(What::ContinuationV1),
            Some(What::ContinuationV2 { order: true }),
        ][expected];
        let f = pointers(&bytes, 0, MemType::from_c(mem), expected, &Context::default());
        prop_assert!(f.targets.len() <= MAX_TARGETS);
        prop_assert!(f.targets.iter().all(|t| t.bytes.start < t.bytes.end));
    }
}

/// A fractal heap header: 512-byte starting blocks, 64 KiB direct blocks at
/// most, width 4, heap offsets of 4 bytes, root at 9000 with `rows` rows.
fn fractal_heap(rows: u16) -> Vec<u8> {
    let mut le = Le::default()
        .bytes(b"FRHP")
        .u8(0)
        .u16(7) // heap ID length
        .u16(0) // no filters
        .u8(0x02) // direct blocks checksummed
        .u32(4096)
        .u64(0)
        .u64(u64::MAX)
        .u64(0)
        .u64(u64::MAX);
    for _ in 0..8 {
        le = le.u64(0);
    }
    le.u16(4)
        .u64(512)
        .u64(65536)
        .u16(32)
        .u16(0)
        .u64(9000)
        .u16(rows)
        .u32(0)
        .0
}

#[test]
fn a_fractal_heap_header_gives_its_root_block_and_layout() {
    let links = Some(What::FractalHeap { links: true });
    let header = found(&fractal_heap(0), 8000, MemType::Other, links);
    let root = Target {
        what: What::HeapDirect,
        bytes: 9000..9512,
    };
    assert_eq!(header.targets, [root]);
    let heap = header.heap.expect("how to read its blocks");
    assert_eq!(
        (heap.direct_rows, heap.offset_bytes, heap.links),
        (9, 4, true)
    );
    // A heap with objects too large for its blocks and free space: HDF5
    // reads their B-tree and the free-space manager's header (82 bytes)
    // to tell the heap's size.
    let mut bytes = fractal_heap(0);
    bytes[22..30].copy_from_slice(&5000u64.to_le_bytes());
    bytes[38..46].copy_from_slice(&6000u64.to_le_bytes());
    let header = found(&bytes, 8000, MemType::Other, links);
    assert_eq!(
        starts(&header),
        [
            (What::BTree2Header, 5000),
            (What::FreeSpace, 6000),
            (What::HeapDirect, 9000)
        ]
    );
    assert_eq!(header.targets[1].bytes, 6000..6082);
}

/// A context that knows the heap of [`fractal_heap`] at 8000.
fn heap_context(links: bool) -> Context {
    let what = Some(What::FractalHeap { links });
    let heap = found(&fractal_heap(0), 8000, MemType::Other, what).heap;
    let mut context = Context::default();
    context.heaps.insert(8000, heap.unwrap());
    context
}

/// A direct block of the heap at 8000: hard links to 20,000 and 30,000 with
/// a soft link between them, then free space.
fn link_block() -> Vec<u8> {
    let link = |name: &[u8], to: u64| {
        let le = Le::default().u8(1).u8(0).u8(name.len() as u8);
        le.bytes(name).u64(to).0
    };
    let soft = Le::default().u8(1).u8(0x08).u8(1).u8(1).bytes(b"s");
    let soft = soft.u16(3).bytes(b"/ab").0;
    let block = Le::default().bytes(b"FHDB").u8(0).u64(8000);
    let block = block.u32(0).u32(0); // block offset, checksum
    let block = block.bytes(&link(b"a", 20_000)).bytes(&soft);
    block.bytes(&link(b"bb", 30_000)).zeros(40).0
}

#[test]
fn a_fractal_heap_of_links_leads_to_the_linked_headers() {
    let direct = Some(What::HeapDirect);
    let f = pointers(
        &link_block(),
        9000,
        MemType::Other,
        direct,
        &heap_context(true),
    );
    assert_eq!(
        starts(&f),
        [(What::ObjectHeader, 20_000), (What::ObjectHeader, 30_000)]
    );
    // A heap of attributes is not searched for links.
    let f = pointers(
        &link_block(),
        9000,
        MemType::Other,
        direct,
        &heap_context(false),
    );
    assert!(f.targets.is_empty());
}

#[test]
fn an_indirect_block_lists_its_direct_blocks_by_row() {
    let header = found(
        &fractal_heap(2),
        8000,
        MemType::Other,
        Some(What::FractalHeap { links: true }),
    );
    assert_eq!(header.targets[0].what, What::HeapIndirect { rows: 2 });
    let mut context = Context::default();
    context.heaps.insert(8000, header.heap.unwrap());
    let mut block = Le::default().bytes(b"FHIB").u8(0).u64(8000).u32(0);
    for child in [
        100,
        200,
        u64::MAX,
        u64::MAX,
        300,
        u64::MAX,
        u64::MAX,
        u64::MAX,
    ] {
        block = block.u64(child);
    }
    let f = pointers(
        &block.0,
        9000,
        MemType::Other,
        Some(What::HeapIndirect { rows: 2 }),
        &context,
    );
    let got: Vec<_> = f
        .targets
        .iter()
        .map(|t| (t.bytes.start, t.bytes.end - t.bytes.start))
        .collect();
    assert_eq!(
        got,
        [(100, 512), (200, 512), (300, 512)],
        "rows 0 and 1 hold 512-byte blocks"
    );
    // Without its header, a block cannot be read.
    let f = pointers(
        &block.0,
        9000,
        MemType::Other,
        Some(What::HeapIndirect { rows: 2 }),
        &Context::default(),
    );
    assert!(f.targets.is_empty());
}

/// A version 2 B-tree header of nodes of `node_size` bytes, records of 11
/// bytes, one level deep, its root at 70,000 holding 3 records.
fn btree2_header(node_size: u32) -> Vec<u8> {
    Le::default()
        .bytes(b"BTHD")
        .u8(0)
        .u8(5)
        .u32(node_size)
        .u16(11)
        .u16(1)
        .u8(100)
        .u8(40)
        .u64(70_000)
        .u16(3)
        .u64(3)
        .u32(0)
        .0
}

#[test]
fn newer_index_headers_point_to_their_root() {
    let f = found(
        &btree2_header(4096),
        60_000,
        MemType::Other,
        Some(What::BTree2Header),
    );
    let root = What::BTree2Node {
        header: 60_000,
        level: 1,
        records: 3,
        chunks: false,
    };
    assert_eq!(
        f.targets,
        [Target {
            what: root,
            bytes: 70_000..74_096
        }]
    );
    let tree = f.btree.expect("how to read its nodes");
    // Its root, an internal node of 3 records of 11 bytes: 4 children, each
    // an address and a count of 2 bytes (a leaf holds up to 371 records).
    let mut node = Le::default().bytes(b"BTIN").u8(0).u8(5).zeros(33);
    for (child, count) in [(1000u64, 10u16), (2000, 20), (3000, 30), (4000, 40)] {
        node = node.u64(child).u16(count);
    }
    let mut context = Context::default();
    context.btrees.insert(60_000, tree);
    let f = pointers(&node.0, 70_000, MemType::Other, Some(root), &context);
    let leaf = |records| What::BTree2Node {
        header: 60_000,
        level: 0,
        records,
        chunks: false,
    };
    assert_eq!(
        starts(&f),
        [
            (leaf(10), 1000),
            (leaf(20), 2000),
            (leaf(30), 3000),
            (leaf(40), 4000)
        ]
    );

    let fahd = Le::default()
        .bytes(b"FAHD")
        .u8(0)
        .u8(0)
        .u8(8) // entry size
        .u8(10) // page bits
        .u64(123)
        .u64(80_000)
        .u32(0);
    let f = found(&fahd.0, 60_000, MemType::Other, Some(What::ArrayHeader));
    assert_eq!(starts(&f), [(What::ArrayData, 80_000)]);
    // Its prefix (signature, version, client, header address, checksum)
    // and 123 elements.
    assert_eq!(f.targets[0].bytes.end, 80_000 + 18 + 123 * 8);
}

#[test]
fn a_version_2_btree_of_chunks_lies_among_them() {
    // Type 10: chunks without filters, whose nodes the writer allocates
    // among the chunks; the children of its internal nodes are of the
    // same tree.
    let mut header = btree2_header(2048);
    header[5] = 10;
    let f = found(&header, 60_000, MemType::Other, Some(What::BTree2Header));
    let root = What::BTree2Node {
        header: 60_000,
        level: 1,
        records: 3,
        chunks: true,
    };
    assert_eq!(starts(&f), [(root, 70_000)]);
    assert!(root.lies_among_raw_data());
    let mut context = Context::default();
    context.btrees.insert(60_000, f.btree.unwrap());
    let mut node = Le::default().bytes(b"BTIN").u8(0).u8(10).zeros(33);
    for (child, count) in [(1000u64, 10u16), (2000, 20), (3000, 30), (4000, 40)] {
        node = node.u64(child).u16(count);
    }
    let f = pointers(&node.0, 70_000, MemType::Other, Some(root), &context);
    assert_eq!(f.targets.len(), 4);
    assert!(f.targets.iter().all(|t| t.what.lies_among_raw_data()));
    // A group's index of names is not.
    let f = found(&btree2_header(2048), 60_000, MemType::Other, None);
    assert!(!f.targets[0].what.lies_among_raw_data());
}

#[test]
fn a_layout_of_version_5_names_its_chunk_index() {
    // HDF5 2.x's latest layout: as version 4, an extensible array index
    // (type 4) of five creation parameters.
    for version in [4u8, 5] {
        let layout = Le::default()
            .u8(version)
            .u8(2) // chunked
            .u8(0) // flags
            .u8(3) // dimensions
            .u8(2) // bytes per dimension
            .u16(64)
            .u16(64)
            .u16(2)
            .u8(4)
            .bytes(&[32, 4, 16, 4, 10])
            .u64(7000)
            .0;
        let header = bounds::header_with_message(&layout);
        let f = found(
            &header,
            100,
            MemType::ObjectHeader,
            Some(What::ObjectHeader),
        );
        assert_eq!(starts(&f), [(What::ArrayHeader, 7000)], "version {version}");
    }
}

/// The parsers alone, on files the tests write: crawling from the
/// superblock, each piece read as HDF5 reads it, reaches the object header
/// of every group and dataset.
#[cfg(feature = "hdf5")]
mod real_files {
    use super::*;
    use std::collections::{HashSet, VecDeque};

    use remfile_testkit::h5files;

    /// The object headers a crawl of `file` from its superblock reaches.
    fn crawl(file: &[u8]) -> HashSet<u64> {
        let mut context = Context::default();
        let mut queue = VecDeque::from([(0u64, None, 4096u64)]);
        let mut seen = HashSet::from([0u64]);
        let mut headers = HashSet::new();
        while let Some((addr, expected, len)) = queue.pop_front() {
            let Some(bytes) = usize::try_from(addr).ok().and_then(|a| file.get(a..)) else {
                continue;
            };
            let bytes = &bytes[..bytes.len().min(len as usize)];
            let found = pointers(bytes, addr, MemType::Other, expected, &context);
            if let Some(g) = found.geometry {
                context.geometry = g;
            }
            if let Some(heap) = found.heap {
                context.heaps.insert(addr, heap);
            }
            let is_header = bytes.first() == Some(&1) || bytes.starts_with(b"OHDR");
            if expected == Some(What::ObjectHeader) && is_header {
                headers.insert(addr);
            }
            for t in found.targets {
                if seen.insert(t.bytes.start) {
                    // HDF5 reads a header's first chunk whole once it knows
                    // its length; so does the crawl.
                    let len = if t.what == What::ObjectHeader {
                        1 << 16
                    } else {
                        t.bytes.end - t.bytes.start
                    };
                    queue.push_back((t.bytes.start, Some(t.what), len));
                }
            }
        }
        headers
    }

    fn check(format: h5files::Format) {
        let path = h5files::temp_path!(&format!("crawl-{format:?}.nwb"));
        let shape = h5files::NwbShape {
            rows: 20_000,
            chunk_rows: 128,
            deflate: None,
            extra_groups: 30,
            format,
        };
        h5files::write_nwb(&path, shape).unwrap();
        let objects = h5files::walk_metadata(&crate::hdf5::File::open(&path).unwrap()).unwrap();
        let headers = crawl(&std::fs::read(&path).unwrap());
        let _ = std::fs::remove_file(&path);
        // Every object has a header; the superblock extension of the latest
        // format has one more.
        assert!(
            headers.len() >= objects,
            "{format:?}: {} headers for {objects} objects",
            headers.len()
        );
        assert!(
            headers.len() <= objects + 1,
            "{format:?}: {} headers for {objects} objects",
            headers.len()
        );
    }

    #[test]
    fn a_crawl_reaches_every_object_of_an_earliest_format_file() {
        check(h5files::Format::Earliest);
    }

    #[test]
    fn a_crawl_reaches_every_object_of_a_latest_format_file() {
        check(h5files::Format::Latest);
    }
}

/// An attribute message (version 1: name, datatype and dataspace each
/// padded to 8 bytes) whose values are variable-length strings, each a
/// length, a global heap collection's address and an index.
fn vlen_attribute(collections: &[u64]) -> Vec<u8> {
    // Class 9 (variable length), version 1; a string of 16-byte references.
    let datatype = Le::default().u8(0x19).u8(1).zeros(2).u32(16).zeros(8).0;
    let dataspace = Le::default()
        .u8(1)
        .u8(1)
        .zeros(6)
        .u64(collections.len() as u64)
        .0;
    let mut m = Le::default()
        .u8(1)
        .u8(0)
        .u16(5)
        .u16(datatype.len() as u16)
        .u16(dataspace.len() as u16)
        .bytes(b"note\0\0\0\0")
        .bytes(&datatype)
        .bytes(&dataspace);
    for (i, &c) in collections.iter().enumerate() {
        m = m.u32(3).u64(c).u32(i as u32 + 1);
    }
    m.0
}

/// A version 1 object header holding one attribute message.
fn header_with_attribute(attribute: &[u8]) -> Vec<u8> {
    Le::default()
        .u8(1)
        .u8(0)
        .u16(1)
        .u32(1)
        .u32(attribute.len().div_ceil(8) as u32 * 8 + 8)
        .zeros(4)
        .message_v1(0x000C, attribute)
        .0
}

#[test]
fn variable_length_attributes_point_to_their_global_heap_collections() {
    let attribute = vlen_attribute(&[7000, 7000, 9000]);
    let f = found(
        &header_with_attribute(&attribute),
        96,
        MemType::ObjectHeader,
        None,
    );
    // Values in one collection ask for it once.
    assert_eq!(
        starts(&f),
        [(What::GlobalHeap, 7000), (What::GlobalHeap, 9000)]
    );
    assert!(
        f.targets
            .iter()
            .all(|t| t.bytes.end - t.bytes.start == 4096)
    );
    // A fixed-size attribute (class 0, integers) points nowhere.
    let mut fixed = attribute.clone();
    fixed[16] = 0x10;
    let header = header_with_attribute(&fixed);
    assert!(
        found(&header, 96, MemType::ObjectHeader, None)
            .targets
            .is_empty()
    );
}

#[test]
fn object_headers_say_how_long_they_are() {
    let ctx = Context::default();
    let v1 = Le::default().u8(1).u8(0).u16(3).u32(1).u32(2000).zeros(4).0;
    assert_eq!(declared_len(&v1, What::ObjectHeader, &ctx), Some(2016));
    // Version 2, flags: 2-byte chunk size, no times: prefix 8, chunk, checksum.
    let v2 = Le::default().bytes(b"OHDR").u8(2).u8(0x01).u16(700).0;
    assert_eq!(
        declared_len(&v2, What::ObjectHeader, &ctx),
        Some(8 + 700 + 4)
    );
    // Other structures bound themselves.
    let gcol = Le::default().bytes(b"GCOL").u8(1).zeros(3).u64(65_536).0;
    assert_eq!(declared_len(&gcol, What::GlobalHeap, &ctx), None);
    assert_eq!(declared_len(&gcol, What::SymbolNode, &ctx), None);
    assert_eq!(declared_len(&[1, 0], What::ObjectHeader, &ctx), None);
}

/// Lengths a file gives, which a hostile or damaged one makes huge: each
/// becomes a target of at most [`MAX_TARGET_LEN`] bytes, wherever it is
/// read from, so that no caller builds a range, a vector or a loop of the
/// size a file claims.
mod bounds {
    use super::*;

    fn assert_bounded(f: &Found, what: &str) {
        assert!(!f.targets.is_empty(), "{what}: a target");
        for t in &f.targets {
            assert!(
                t.bytes.end - t.bytes.start <= MAX_TARGET_LEN,
                "{what}: {t:?}"
            );
        }
    }

    #[test]
    fn a_local_heap_whose_data_segment_says_2_50_bytes() {
        let heap = Le::default()
            .bytes(b"HEAP")
            .u8(0)
            .zeros(3)
            .u64((1 << 50) - 4096)
            .u64(u64::MAX)
            .u64(712);
        let f = found(&heap.0, 680, MemType::LocalHeap, Some(What::LocalHeap));
        assert_bounded(&f, "heap data");
        assert_eq!(f.targets[0].bytes.start, 712);
    }

    #[test]
    fn a_continuation_of_2_63_bytes() {
        let continuation = Le::default().u64(4000).u64(1 << 63).0;
        let header = Le::default()
            .u8(1)
            .u8(0)
            .u16(1)
            .u32(1)
            .u32(24)
            .zeros(4)
            .message_v1(0x0010, &continuation)
            .0;
        let f = found(&header, 96, MemType::ObjectHeader, None);
        assert_bounded(&f, "continuation");
    }

    #[test]
    fn fractal_heap_blocks_of_every_size() {
        // An indirect root of 65,535 rows of 4 blocks: 2 MiB of entries.
        let f = found(
            &fractal_heap(u16::MAX),
            8000,
            MemType::Other,
            Some(What::FractalHeap { links: true }),
        );
        assert_bounded(&f, "indirect root");
        // A direct root whose starting block is 2^62 bytes.
        let f = found(
            &fractal_heap_of_blocks(1 << 62, 1 << 62),
            8000,
            MemType::Other,
            Some(What::FractalHeap { links: true }),
        );
        assert_bounded(&f, "direct root");
        // An indirect block's rows, of blocks from 1 TiB on.
        let what = Some(What::FractalHeap { links: true });
        let heap = found(
            &fractal_heap_of_blocks(1 << 40, 1 << 50),
            8000,
            MemType::Other,
            what,
        );
        let mut context = Context::default();
        context.heaps.insert(8000, heap.heap.expect("a heap"));
        let mut block = Le::default().bytes(b"FHIB").u8(0).u64(8000).zeros(4);
        for child in 0..4 * 64 {
            block = block.u64(100_000 + child);
        }
        let f = pointers(
            &block.0,
            9000,
            MemType::Other,
            Some(What::HeapIndirect { rows: 64 }),
            &context,
        );
        assert_bounded(&f, "rows of an indirect block");
    }

    #[test]
    fn a_version_2_btree_of_4_gib_nodes() {
        let header = btree2_header(u32::MAX);
        let f = found(&header, 60_000, MemType::Other, Some(What::BTree2Header));
        assert_bounded(&f, "node");
    }

    /// A version 1 object header with one message: a version 3 chunked
    /// layout of `dims` dimensions whose index is at 9000.
    fn header_with_layout(dims: u8) -> Vec<u8> {
        let layout = Le::default()
            .u8(3)
            .u8(2)
            .u8(dims)
            .u64(9000)
            .zeros(4 * usize::from(dims))
            .0;
        header_with_message(&layout)
    }

    /// A version 1 object header holding one layout message.
    pub(super) fn header_with_message(layout: &[u8]) -> Vec<u8> {
        Le::default()
            .u8(1)
            .u8(0)
            .u16(1)
            .u32(1)
            .u32(8 + layout.len().div_ceil(8) as u32 * 8)
            .zeros(4)
            .message_v1(0x0008, layout)
            .0
    }

    #[test]
    fn chunk_index_nodes_of_the_most_keys_and_dimensions() {
        // Chunk B-tree nodes of 2 * 65,535 children, a 32-dimensional layout
        // (HDF5's most, plus one for the element).
        let context = Context {
            geometry: Geometry {
                chunk_k: u16::MAX,
                ..Geometry::default()
            },
            ..Context::default()
        };
        let header = header_with_layout(33);
        let f = pointers(&header, 96, MemType::ObjectHeader, None, &context);
        assert_bounded(&f, "chunk node");
    }

    #[test]
    fn a_layout_of_more_dimensions_than_hdf5_allows_points_nowhere() {
        let f = found(&header_with_layout(200), 96, MemType::ObjectHeader, None);
        assert!(f.targets.is_empty(), "{:?}", f.targets);
    }

    #[test]
    fn an_object_header_of_2_64_bytes_says_at_most_the_bound() {
        let ctx = Context::default();
        // Version 2, flags: an 8-byte chunk size.
        let v2 = Le::default().bytes(b"OHDR").u8(2).u8(0x03).u64(1 << 62).0;
        let len = declared_len(&v2, What::ObjectHeader, &ctx);
        assert!(len.is_some_and(|n| n <= MAX_TARGET_LEN), "{len:?}");
        let v1 = Le::default()
            .u8(1)
            .u8(0)
            .u16(3)
            .u32(1)
            .u32(u32::MAX)
            .zeros(4)
            .0;
        let len = declared_len(&v1, What::ObjectHeader, &ctx);
        assert!(len.is_some_and(|n| n <= MAX_TARGET_LEN), "{len:?}");
    }

    /// [`fractal_heap`] with a direct root, blocks of `start` bytes in its
    /// first row and of at most `max`.
    fn fractal_heap_of_blocks(start: u64, max: u64) -> Vec<u8> {
        let mut heap = fractal_heap(0);
        let at = 4 + 1 + 2 + 2 + 1 + 4 + 8 * 4 + 8 * 8 + 2;
        heap[at..at + 8].copy_from_slice(&start.to_le_bytes());
        heap[at + 8..at + 16].copy_from_slice(&max.to_le_bytes());
        heap
    }

    /// A chunk index leaf with `chunks` (stored size, address) and a right
    /// sibling.
    fn chunk_leaf(chunks: &[(u32, u64)], right: u64) -> Vec<u8> {
        let mut leaf = Le::default()
            .bytes(b"TREE")
            .u8(1)
            .u8(0)
            .u16(chunks.len() as u16)
            .u64(u64::MAX)
            .u64(right);
        for &(size, addr) in chunks {
            leaf = leaf.u32(size).u32(0).u64(0).u64(0).u64(0).u64(addr);
        }
        leaf.u32(0).u32(0).u64(0).u64(0).u64(0).0
    }

    #[test]
    fn chunks_of_no_bytes_and_a_leaf_naming_itself_are_dropped() {
        let dims = Some(What::ChunkNode { dims: 3 });
        let leaf = chunk_leaf(&[(0, 50_000), (4096, 60_000), (0, 70_000)], 9000);
        let f = found(&leaf, 9000, MemType::BTree, dims);
        let leaf = f.chunks.expect("a leaf");
        assert_eq!(leaf.chunks, vec![60_000..64_096]);
        assert_eq!(leaf.next_leaf, None, "its own sibling");
        let other = chunk_leaf(&[(4096, 60_000)], 12_000);
        let f = found(&other, 9000, MemType::BTree, dims);
        assert_eq!(f.chunks.expect("a leaf").next_leaf, Some(12_000));
    }

    #[test]
    fn a_symbol_node_of_65535_entries_reads_only_those_its_bytes_hold() {
        let node = Le::default()
            .bytes(b"SNOD")
            .u8(1)
            .u8(0)
            .u16(u16::MAX)
            .u64(8)
            .u64(3000)
            .u32(0)
            .u32(0)
            .zeros(16);
        let f = found(&node.0, 1000, MemType::BTree, Some(What::SymbolNode));
        assert_eq!(starts(&f), [(What::ObjectHeader, 3000)]);
    }
}
