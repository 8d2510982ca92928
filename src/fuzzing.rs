//! Entry points for fuzzing the crate's pure parts (feature `fuzzing`), which
//! are private: the `Content-Range` parser, the read planner and the HDF5
//! metadata parsers. Not a stable API: each function decodes arbitrary bytes
//! into inputs and panics if one of its invariants breaks. (The whole HDF5
//! driver is fuzzed through the public API, by `remfile-testkit`'s harness.)

use crate::engine::plan;
use crate::engine::read_ahead::ReadAhead;
use crate::hdf5::meta::{self, Context, FractalHeap, Geometry, MemType, What};
use crate::http::content_range::{self, ContentRange};

/// The signatures HDF5's structures open with, as the metadata parsers know
/// them: the driver's fuzz mutator (in `remfile-testkit`) keeps a copy,
/// which `tests/fuzz_corpus.rs` checks against this.
pub const HDF5_SIGNATURES: [&[u8; 4]; 21] = crate::hdf5::meta::SIGNATURES;

/// Parses `data` as a `Content-Range` value: it never panics, and what it
/// accepts is consistent and survives formatting and parsing again.
pub fn content_range(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match content_range::parse(text) {
        None => {}
        Some(ContentRange::Bytes { first, last, total }) => {
            assert!(first <= last, "{text:?}");
            if let Some(total) = total {
                assert!(last < total, "{text:?}");
            }
            let shown = match total {
                Some(t) => format!("bytes {first}-{last}/{t}"),
                None => format!("bytes {first}-{last}/*"),
            };
            assert_eq!(content_range::parse(&shown), content_range::parse(text));
        }
        Some(ContentRange::Unsatisfied { total }) => {
            let shown = format!("bytes */{total}");
            assert_eq!(content_range::parse(&shown), content_range::parse(text));
        }
    }
}

/// Decodes `data` into a file size, a block size, read-ahead bounds and a
/// sequence of reads, and checks the planner on each: the blocks cover the
/// read exactly, read-ahead stays within its bounds, runs and parts cover the
/// blocks exactly, and byte ranges stay inside the file.
pub fn planner(data: &[u8]) {
    let mut input = Bytes(data);
    let size = input.u64() % (1 << 40) + 1;
    let block_size = input.u64() % (1 << 24) + 1;
    let max = input.u64() % (1 << 30);
    let min = input.u64() % (max + 1);
    let max_parts = input.u64() % 16 + 1;
    let min_part = input.u64() % 64 + 1;
    let mut ahead = ReadAhead::new(min, max);
    while !input.0.is_empty() {
        let pos = input.u64() % size;
        let len = (input.u64() % (1 << 26)).min(size - pos).max(1);
        let missed = input.u64() % 2 == 0;
        let blocks = plan::blocks_covering(pos, len, block_size);
        assert!(blocks.start * block_size <= pos);
        assert!(blocks.end * block_size >= pos + len);
        assert!(blocks.end > blocks.start);
        let floor = input.u64() % (1 << 31);
        let extra = ahead.on_read(pos, len, missed, floor);
        assert!(extra <= max);
        if !missed {
            assert_eq!(extra, 0);
        }
        // A sparse selection of the blocks, as a cache would leave missing.
        let mask = input.u64();
        let wanted: Vec<u64> = blocks
            .clone()
            .take(64)
            .enumerate()
            .filter(|(i, _)| mask >> i & 1 == 1)
            .map(|(_, b)| b)
            .collect();
        let runs = plan::runs(&wanted);
        let covered: Vec<u64> = runs.iter().flat_map(|r| r.clone()).collect();
        assert_eq!(covered, wanted);
        let gap = floor % 64;
        let planned = plan::parts(&wanted, max_parts, min_part, gap);
        for w in planned.windows(2) {
            assert!(w[0].end <= w[1].start, "ordered, not overlapping");
        }
        for b in &wanted {
            assert!(planned.iter().any(|p| p.contains(b)));
        }
        assert!(planned.len() as u64 <= max_parts.max(runs.len() as u64));
        for run in runs {
            let parts = plan::split(run.clone(), max_parts, min_part);
            assert!(parts.len() as u64 <= max_parts);
            assert_eq!(parts.first().map(|p| p.start), Some(run.start));
            assert_eq!(parts.last().map(|p| p.end), Some(run.end));
            for w in parts.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            for p in &parts {
                let bytes = plan::byte_range(p, block_size, size);
                assert!(bytes.start <= bytes.end && bytes.end <= size);
            }
        }
    }
}

/// Reads `data` as HDF5 metadata: its first bytes choose the memory type, what
/// an earlier piece said is there, and the sizes of offsets and lengths; the
/// rest are the bytes. It never panics, and what it finds is bounded and
/// well-formed.
pub fn hdf5_metadata(data: &[u8]) {
    let [mem, expected, sizes, rest @ ..] = data else {
        return;
    };
    let expected = expected_what(*expected);
    let size = |bits: u8| [2, 4, 8, 8][usize::from(bits & 3)];
    let mut context = Context {
        geometry: Geometry {
            offsets: size(*sizes),
            lengths: size(sizes >> 2),
            ..Geometry::default()
        },
        ..Context::default()
    };
    // A heap at address 0, which a block's header field may name.
    context.heaps.insert(
        0,
        FractalHeap {
            links: sizes & 0x10 != 0,
            width: 1 << (sizes >> 5),
            start_block: 512,
            direct_rows: u16::from(sizes >> 4),
            offset_bytes: sizes >> 5,
            checksummed: sizes & 0x40 != 0,
            filtered: sizes & 0x80 != 0,
        },
    );
    if let Some(tree) = meta::BTree2::for_fuzzing(*sizes) {
        context.btrees.insert(0, tree);
    }
    // Arrays at address 0 and 1, which a block's header field may name.
    let (fixed, extensible) = meta::ArrayIndex::for_fuzzing(*sizes);
    context.arrays.insert(0, fixed);
    if let Some(extensible) = extensible {
        context.arrays.insert(1, extensible);
    }
    let mem = MemType::from_c(i32::from(*mem));
    let found = meta::pointers(rest, 4096, mem, expected, &context);
    assert!(found.targets.len() <= meta::MAX_TARGETS);
    for t in &found.targets {
        assert!(t.bytes.start < t.bytes.end, "{t:?}");
        assert_ne!(t.bytes.start, 4096, "points at itself");
    }
    if let Some(g) = found.geometry {
        assert!([2, 4, 8].contains(&g.offsets) && [2, 4, 8].contains(&g.lengths));
    }
    // What a structure says of its own length is read without a panic too.
    let _ = meta::declared_len(rest, expected.unwrap_or(What::ObjectHeader), &context);
}

/// What an earlier piece said is at the bytes, from an input's byte: its
/// low four bits choose the structure, the high four its parameter.
fn expected_what(byte: u8) -> Option<What> {
    let high = byte >> 4;
    match byte % 16 {
        0 => None,
        1 => Some(What::ObjectHeader),
        2 => Some(What::ContinuationV1),
        3 => Some(What::ContinuationV2 {
            order: high & 1 != 0,
        }),
        4 => Some(What::GroupNode),
        5 => Some(What::ChunkNode { dims: high }),
        6 => Some(What::SymbolNode),
        7 => Some(What::LocalHeap),
        8 => Some(What::FractalHeap {
            links: high & 1 != 0,
        }),
        9 => Some(What::HeapIndirect { rows: high.into() }),
        10 => Some(What::BTree2Node {
            header: 0,
            level: high.into(),
            records: u16::from(high) * 3,
            chunks: high & 1 != 0,
        }),
        11 => Some(What::GlobalHeap),
        12 => Some(What::ArrayIndex),
        13 => Some(What::ArraySuper),
        14 => Some(What::ArrayData),
        _ => Some(What::HeapDirect),
    }
}

/// Little-endian integers from a byte string, zero once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u64(&mut self) -> u64 {
        let n = self.0.len().min(8);
        let mut buf = [0u8; 8];
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        u64::from_le_bytes(buf)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Replays the committed fuzz corpus as an ordinary test.
    fn replay(target: &str, run: fn(&[u8])) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        if !Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz").exists() {
            eprintln!("no fuzz/ directory (a packaged crate): nothing to replay");
            return;
        }
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).expect("the committed corpus") {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            run(&data);
            count += 1;
        }
        assert!(count >= 20, "the {target} corpus has only {count} inputs");
    }

    #[test]
    fn the_content_range_corpus_passes() {
        replay("content_range", super::content_range);
    }

    #[test]
    fn the_planner_corpus_passes() {
        replay("planner", super::planner);
    }

    #[test]
    fn the_hdf5_metadata_corpus_passes() {
        replay("hdf5_metadata", super::hdf5_metadata);
    }

    #[test]
    fn hand_picked_inputs_pass() {
        for s in [
            "bytes 0-0/1",
            "bytes */0",
            "bytes 5-9/*",
            "bytes 18446744073709551614-18446744073709551614/18446744073709551615",
        ] {
            super::content_range(s.as_bytes());
        }
        super::planner(&[0xff; 200]);
        super::planner(&[]);
    }
}
