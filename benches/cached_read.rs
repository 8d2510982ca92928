//! The CPU cost of reads served from the cache (no network once warm).
//!
//! ```text
//! cargo bench --bench cached_read
//! ```

use std::sync::OnceLock;

use remfile::RemoteFile;

fn main() {
    divan::main();
}

/// A file whose first 1 MiB block the open already cached, with its server.
fn file() -> &'static RemoteFile {
    static FILE: OnceLock<(remfile_testkit::RangeServer, RemoteFile)> = OnceLock::new();
    let (_, file) = FILE.get_or_init(|| {
        let server = remfile_testkit::RangeServer::new(remfile_testkit::test_data(4 << 20, 1));
        let file = RemoteFile::builder()
            .proxy_from_env(false)
            .open(server.url("/bench.bin"))
            .expect("open");
        (server, file)
    });
    file
}

#[divan::bench(args = [64, 4096, 65536])]
fn cached_read_at(bencher: divan::Bencher, len: usize) {
    let file = file();
    let mut buf = vec![0u8; len];
    let mut pos = 0u64;
    bencher.bench_local(|| {
        pos = (pos + 4096) % ((1 << 20) - 65536);
        file.read_exact_at(divan::black_box(pos), &mut buf).unwrap();
    });
}

#[divan::bench]
fn cached_read_across_two_blocks(bencher: divan::Bencher) {
    let file = file();
    let mut buf = vec![0u8; 4096];
    // Warm the second block too.
    file.read_exact_at((1 << 20) + 10, &mut buf).unwrap();
    bencher.bench_local(|| {
        file.read_exact_at(divan::black_box((1 << 20) - 2048), &mut buf)
            .unwrap();
    });
}
