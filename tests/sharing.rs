//! Files that share caches: memory caches shared by files of the same and of
//! different URLs opened with different block sizes, and disk caches shared
//! by them too, read from several threads at once. Every byte is compared
//! with the file's own.

use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use remfile::{BlockCache, DiskCache, RemoteFile};
use remfile_testkit::{RangeServer, TempDir, builder, test_data};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Two files on one server: the second is the first's bytes in another
/// order, so a block served from the wrong file is caught too.
struct Files {
    server: RangeServer,
    data: Vec<(String, Arc<Vec<u8>>)>,
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let a = test_data(5 * MIB as usize + 12_345, 7);
        let b: Vec<u8> = a.iter().rev().copied().collect();
        let server = RangeServer::new(a.clone());
        let second = RangeServer::new(b.clone());
        // One server per file; both outlive every test.
        let data = vec![
            (server.url("/a.bin"), Arc::new(a)),
            (second.url("/b.bin"), Arc::new(b)),
        ];
        std::mem::forget(second);
        Files { server, data }
    })
}

/// A tiny deterministic generator, so that each thread's reads differ.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Reads `reads` random ranges of `file` and compares each with `data`.
fn read_and_compare(file: &RemoteFile, data: &[u8], seed: u64, reads: usize) {
    let size = data.len() as u64;
    let mut x = seed | 1;
    let mut buf = vec![0u8; 3 * MIB as usize];
    for i in 0..reads {
        let len = match next(&mut x) % 8 {
            0 => next(&mut x) % (3 * MIB),
            1 | 2 => next(&mut x) % (200 * KIB),
            _ => next(&mut x) % 5000 + 1,
        } as usize;
        let pos = next(&mut x) % (size + 10);
        let n = file.read_at(pos, &mut buf[..len]).unwrap();
        let start = pos.min(size) as usize;
        let want = &data[start..(start + len).min(data.len())];
        assert_eq!(n, want.len(), "read {i} at {pos}+{len}");
        assert!(
            buf[..n] == *want,
            "wrong bytes: read {i} at {pos}+{len} (block size {})",
            file.block_size()
        );
    }
}

#[test]
fn one_memory_cache_shared_by_four_block_sizes_of_one_file() {
    let files = files();
    let (url, data) = &files.data[0];
    let cache = BlockCache::new(64 * MIB);
    let opened: Vec<RemoteFile> = [MIB, 128 * KIB, 64 * KIB, 3 * MIB]
        .into_iter()
        .map(|bs| {
            builder()
                .block_size(bs)
                .cache(cache.clone())
                .open(url)
                .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for (n, file) in opened.iter().enumerate() {
            s.spawn(move || read_and_compare(file, data, n as u64 + 1, 100));
        }
    });
    // Each file reads its own blocks, in turn too.
    for (n, file) in opened.iter().enumerate() {
        read_and_compare(file, data, 100 + n as u64, 50);
    }
    assert!(files.server.requests() > 0);
}

#[test]
fn one_disk_cache_shared_by_two_block_sizes_of_one_file() {
    let files = files();
    let (url, data) = &files.data[0];
    let dir = TempDir::new("sharing-disk");
    let disk = DiskCache::open(&dir, 256 * MIB).unwrap();
    for (round, bs) in [(0, 256 * KIB), (1, 64 * KIB), (2, MIB), (3, 256 * KIB)] {
        let file = builder()
            .block_size(bs)
            .disk_cache(disk.clone())
            .open(url)
            .unwrap();
        read_and_compare(&file, data, 1000 + round, 40);
        drop(file);
        assert!(disk.flush(std::time::Duration::from_secs(10)));
    }
}

/// How a file is opened in the property test.
#[derive(Debug, Clone)]
struct Opening {
    file: usize,
    block_size: u64,
    /// Which shared memory cache, if any (else a private one).
    memory: Option<usize>,
    /// Whether the one shared disk cache is used.
    disk: bool,
    tail: u64,
}

fn opening() -> impl Strategy<Value = Opening> {
    (
        0..2usize,
        prop::sample::select(vec![4 * KIB, 64 * KIB, 100_000, 128 * KIB, MIB, 3 * MIB]),
        prop::option::of(0..2usize),
        any::<bool>(),
        prop::sample::select(vec![0, 100 * KIB, 2 * MIB]),
    )
        .prop_map(|(file, block_size, memory, disk, tail)| Opening {
            file,
            block_size,
            memory,
            disk,
            tail,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random builders over shared memory caches (small ones too, so that
    /// blocks are evicted) and one shared disk cache, several files of the
    /// same and different URLs, random reads from a thread per file.
    #[test]
    fn shared_caches_never_give_wrong_bytes(
        openings in prop::collection::vec(opening(), 2..6),
        capacities in (prop::sample::select(vec![2 * MIB, 64 * MIB]), prop::sample::select(vec![6 * MIB, 64 * MIB])),
        seed in any::<u64>(),
    ) {
        let files = files();
        let memory = [BlockCache::new(capacities.0), BlockCache::new(capacities.1)];
        let dir = TempDir::new("sharing-prop");
        let disk = DiskCache::open(&dir, 64 * MIB).unwrap();
        let opened: Vec<(RemoteFile, &[u8])> = openings
            .iter()
            .map(|o| {
                let mut b = builder().block_size(o.block_size).open_tail(o.tail);
                if let Some(m) = o.memory {
                    b = b.cache(memory[m].clone());
                }
                if o.disk {
                    b = b.disk_cache(disk.clone());
                }
                let (url, data) = &files.data[o.file];
                (b.open(url).unwrap(), &data[..])
            })
            .collect();
        std::thread::scope(|s| {
            for (n, (file, data)) in opened.iter().enumerate() {
                s.spawn(move || read_and_compare(file, data, seed ^ (n as u64 + 1) << 32, 25));
            }
        });
    }
}
