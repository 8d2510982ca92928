//! Many threads, many random reads and guesses fetched in the background, a
//! small cache: the bytes are always right, the cache stays within its
//! capacity, and the connections opened stay within the configured maximum.

use std::sync::Arc;

use remfile_testkit::{RangeServer, builder, test_data};

const MIB: u64 = 1024 * 1024;

#[test]
fn sixteen_threads_of_random_reads_over_a_small_cache() {
    let size = 64 * MIB as usize;
    let data = Arc::new(test_data(size, 77));
    let server = RangeServer::new(data.to_vec());
    let file = builder()
        .block_size(64 * 1024)
        .cache_capacity(4 * MIB)
        .max_connections(6)
        .open(server.url("/stress.bin"))
        .unwrap();
    const THREADS: u64 = 16;
    const READS: u64 = 2000;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (file, data) = (file.clone(), data.clone());
            s.spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                let mut buf = vec![0u8; 300_000];
                let mut guesses = Vec::new();
                for i in 0..READS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly small reads, some large; some sequential runs.
                    let len = match x % 10 {
                        0 => (x >> 8) as usize % 300_000,
                        1..=3 => (x >> 8) as usize % 20_000,
                        _ => (x >> 8) as usize % 4096 + 1,
                    };
                    let pos = if i % 7 == 0 {
                        (t * 4 * MIB) + i * 4096
                    } else {
                        (x >> 20) % size as u64
                    };
                    let n = file.read_at(pos, &mut buf[..len]).unwrap();
                    let want = &data[(pos as usize).min(size)..(pos as usize + len).min(size)];
                    assert_eq!(n, want.len());
                    assert!(buf[..n] == *want, "thread {t}, read {i} at {pos}+{len}");
                    if i % 25 == 0 {
                        let guess = (x >> 11) % size as u64;
                        let len = (x >> 3) % 200_000 + 1;
                        file.prefetch_in_background(std::iter::once(guess..guess + len), MIB);
                        guesses.push((guess, len as usize));
                    }
                }
                // Reading the guesses joins any fetch of theirs under way
                // (or fetches the blocks of those not started yet).
                for (pos, len) in guesses {
                    let n = file.read_at(pos, &mut buf[..len]).unwrap();
                    let want = &data[pos as usize..(pos as usize + len).min(size)];
                    assert!(buf[..n] == *want, "thread {t}, guess at {pos}+{len}");
                }
            });
        }
    });
    // Guesses still queued then end: the counts below are final.
    assert!(file.wait_for_background_fetches(std::time::Duration::from_secs(60)));
    file.cache().run_pending_tasks();
    assert!(file.cache().weighted_size() <= 4 * MIB);
    let s = file.stats();
    assert!(
        server.connections() <= 6,
        "{} connections",
        server.connections()
    );
    assert_eq!(s.requests as usize, server.requests());
    eprintln!(
        "{} reads by {THREADS} threads: {} requests over {} connections, {} cache hits, {} misses",
        THREADS * READS,
        s.requests,
        server.connections(),
        s.cache_hits,
        s.cache_misses
    );
}
