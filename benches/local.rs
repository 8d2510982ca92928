//! Raw `RemoteFile` workloads against a range server on 127.0.0.1.
//!
//! ```text
//! cargo bench --bench local
//! ```
//!
//! For each workload: wall time, CPU time of the whole process (client and
//! server threads), requests, round trips and the over-fetch ratio (bytes
//! fetched / bytes needed). Loopback has no latency, so this measures the
//! crate's own cost; the request counts are what carry over to a real network.
//! (The whole-file download beside curl is in the `cloud` benchmark, whose
//! server runs in a process of its own, so that CPU times are the client's.)

use std::io::Read;
use std::time::Instant;

use remfile::{RemoteFile, Stats};
use remfile_testkit::cpu::cpu_time;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 256 * MIB;

fn main() {
    let data = remfile_testkit::test_data(SIZE as usize, 1);
    let server = remfile_testkit::RangeServer::new(data);
    let url = server.url("/bench.bin");
    let open = || {
        RemoteFile::builder()
            .proxy_from_env(false)
            .open(&url)
            .expect("open")
    };
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>7} {:>7}",
        "workload", "wall ms", "cpu ms", "MB/s", "reqs", "fetch/need"
    );

    let file = open();
    let mut cursor = file.clone();
    measure("sequential scan, 64 KiB reads", &file, SIZE, || {
        let mut buf = vec![0u8; 64 * 1024];
        while cursor.read(&mut buf).expect("read") > 0 {}
    });

    let file = open();
    let mut x = 12345u64;
    measure("2000 random 4 KiB reads", &file, 2000 * 4096, || {
        let mut buf = [0u8; 4096];
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            file.read_exact_at(x % (SIZE - 4096), &mut buf)
                .expect("read");
        }
    });

    let file = open();
    measure("strided: 4 KiB every 1 MiB", &file, 256 * 4096, || {
        let mut buf = [0u8; 4096];
        for i in 0..256 {
            file.read_exact_at(i * MIB + 100, &mut buf).expect("read");
        }
    });

    let file = open();
    measure("one 64 MiB read_exact_at", &file, 64 * MIB, || {
        let mut buf = vec![0u8; 64 * MIB as usize];
        file.read_exact_at(100 * MIB + 7, &mut buf).expect("read");
    });

    cached_read_cost(&url);
}

/// CPU cost of a 4 KiB `read_at` served from the cache.
fn cached_read_cost(url: &str) {
    let file = RemoteFile::builder()
        .proxy_from_env(false)
        .open(url)
        .expect("open");
    let mut buf = [0u8; 4096];
    file.read_exact_at(0, &mut buf).expect("read");
    const N: u64 = 1_000_000;
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    for i in 0..N {
        // Within the first block, which the open cached.
        file.read_exact_at((i * 4096) % ((1 << 20) - 4096), &mut buf)
            .expect("read");
    }
    let wall = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    println!(
        "cached 4 KiB read_at: {:.0} ns wall, {:.0} ns CPU per read",
        wall.as_nanos() as f64 / N as f64,
        cpu.as_nanos() as f64 / N as f64
    );
}

fn measure(name: &str, file: &RemoteFile, needed: u64, work: impl FnOnce()) {
    let before: Stats = file.stats();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    work();
    let wall = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    let s = file.stats().since(&before);
    println!(
        "{:<34} {:>9.1} {:>9.1} {:>9.0} {:>7} {:>7.2}",
        name,
        wall.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e3,
        needed as f64 / wall.as_secs_f64() / 1e6,
        s.requests,
        s.bytes_fetched as f64 / needed as f64
    );
}
