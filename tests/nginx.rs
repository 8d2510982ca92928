//! The whole public API against a real static file server: nginx.

use std::io::{Read, Seek, SeekFrom};

use remfile::{ErrorKind, RemoteFile};
use remfile_testkit::nginx::Nginx;
use remfile_testkit::{builder, test_data};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn files_of_every_size_read_back_exactly() {
    let nginx = Nginx::start();
    let bs = 64 * KIB;
    let sizes = [0, 1, 1000, bs - 1, bs, bs + 1, 5 * MIB + 3];
    for (i, &size) in sizes.iter().enumerate() {
        let data = test_data(size as usize, i as u64);
        let name = format!("f{i}.bin");
        nginx.put(&name, &data);
        let mut file = builder().block_size(bs).open(nginx.url(&name)).unwrap();
        assert_eq!(file.len(), size, "size {size}");
        assert!(file.etag().is_some(), "nginx sends an ETag");
        let mut all = Vec::new();
        file.read_to_end(&mut all).unwrap();
        assert!(all == data, "size {size}");
        // Past the end: nothing, and no request.
        let before = file.stats();
        let mut buf = [0u8; 10];
        assert_eq!(file.read_at(size, &mut buf).unwrap(), 0);
        assert_eq!(file.stats().since(&before).requests, 0);
    }
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn ranges_across_block_boundaries_match() {
    let nginx = Nginx::start();
    let data = test_data(3 * MIB as usize + 777, 40);
    nginx.put("r.bin", &data);
    let bs = 100_000u64;
    let file = builder().block_size(bs).open(nginx.url("r.bin")).unwrap();
    let mut x = 99u64;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % (3 * bs)) as usize + 1;
        // Start near a boundary, before or after it.
        let boundary = (x >> 16) % (data.len() as u64 / bs) * bs;
        let pos = (boundary + (x >> 40) % 7).saturating_sub(3);
        let mut buf = vec![0u8; len];
        let n = file.read_at(pos, &mut buf).unwrap();
        let want = &data[pos as usize..(pos as usize + len).min(data.len())];
        assert_eq!(&buf[..n], want);
    }
    let mut cursor = file.clone();
    cursor.seek(SeekFrom::End(-10)).unwrap();
    let mut tail = Vec::new();
    cursor.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, data[data.len() - 10..]);
    let e = file
        .read_exact_at(data.len() as u64 - 5, &mut [0u8; 10])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn concurrent_readers_get_their_bytes_and_share_fetches() {
    let nginx = Nginx::start();
    let data = test_data(16 * MIB as usize, 41);
    nginx.put("c.bin", &data);
    let file = builder().open(nginx.url("c.bin")).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (file, data) = (file.clone(), &data);
            s.spawn(move || {
                for k in 0..10u64 {
                    let pos = (t * 1_900_000 + k * 1_300_000) % (15 * MIB);
                    let mut buf = vec![0u8; 700_000];
                    file.read_exact_at(pos, &mut buf).unwrap();
                    assert!(buf == data[pos as usize..][..buf.len()]);
                }
            });
        }
    });
    let log = nginx.access_log();
    assert_eq!(file.stats().requests as usize, log.len());
    let fetched: u64 = log
        .iter()
        .map(|l| l.split_whitespace().last().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(
        fetched <= data.len() as u64,
        "no block fetched twice: {fetched}"
    );
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn sequential_requests_reuse_one_connection() {
    let nginx = Nginx::start();
    nginx.put("k.bin", &test_data(8 * MIB as usize, 42));
    let file = builder()
        .block_size(64 * KIB)
        .read_ahead_max(0)
        .open(nginx.url("k.bin"))
        .unwrap();
    let mut buf = [0u8; 100];
    for i in 1..40u64 {
        file.read_exact_at(i * 200 * KIB, &mut buf).unwrap();
    }
    assert_eq!(nginx.access_log().len(), 40);
    assert_eq!(nginx.connections(), 1, "{:?}", nginx.access_log());
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn a_file_replaced_on_the_server_is_detected() {
    let nginx = Nginx::start();
    nginx.put("v.bin", &test_data(3 * MIB as usize, 43));
    let file = builder().open(nginx.url("v.bin")).unwrap();
    let etag = file.etag().unwrap().to_owned();
    assert!(!etag.starts_with("W/"), "nginx's ETag is strong: {etag}");
    // Same size, new content and modification time (a minute on, as
    // nginx's ETag counts whole seconds): a new ETag.
    let modified = std::fs::metadata(nginx.path("v.bin"))
        .unwrap()
        .modified()
        .unwrap();
    nginx.put("v.bin", &test_data(3 * MIB as usize, 44));
    std::fs::File::options()
        .write(true)
        .open(nginx.path("v.bin"))
        .unwrap()
        .set_modified(modified + std::time::Duration::from_secs(60))
        .unwrap();
    let mut buf = [0u8; 10];
    let e = file.read_exact_at(2 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RemoteChanged, "{e}");
    assert!(
        nginx.access_log().last().unwrap().contains(" 412 "),
        "If-Match refused"
    );
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn a_missing_file_is_not_found_after_one_request() {
    let nginx = Nginx::start();
    let e = RemoteFile::builder()
        .proxy_from_env(false)
        .open(nginx.url("nope.bin"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(404), "{e}");
    assert!(e.body_excerpt().is_some_and(|b| b.contains("404")));
    assert_eq!(nginx.access_log().len(), 1);
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn the_tail_comes_with_the_open() {
    let nginx = Nginx::start();
    let data = test_data(3 * MIB as usize + 5, 43);
    nginx.put("tail.bin", &data);
    let file = builder()
        .open_tail(MIB + 5)
        .open(nginx.url("tail.bin"))
        .unwrap();
    let mut buf = vec![0u8; MIB as usize + 5];
    file.read_exact_at(2 * MIB, &mut buf).unwrap();
    assert!(buf == data[2 * MIB as usize..]);
    let s = file.stats();
    assert_eq!((s.requests, s.round_trips), (2, 1), "{s:?}");
    assert_eq!(nginx.access_log().len(), 2);
}

#[test]
#[ignore = "needs nginx: bash .ci/run installs it; then cargo test --test nginx -- --ignored"]
fn a_warm_open_with_a_disk_cache_costs_one_request_and_no_body() {
    let nginx = Nginx::start();
    let data = test_data(3 * MIB as usize, 41);
    nginx.put("warm.bin", &data);
    let dir = remfile_testkit::TempDir::new("nginx-disk");
    let open = || {
        builder()
            .block_size(64 * KIB)
            .disk_cache(remfile::DiskCache::open(&dir, 64 * MIB).unwrap())
            .open(nginx.url("warm.bin"))
            .unwrap()
    };
    let mut buf = vec![0u8; MIB as usize];
    open().read_exact_at(MIB, &mut buf).unwrap();
    let warm = open();
    let opened = warm.stats();
    // nginx answers If-None-Match with 304 Not Modified, ranges or not.
    assert_eq!(
        (opened.requests, opened.bytes_fetched),
        (1, 0),
        "{opened:?}"
    );
    warm.read_exact_at(MIB, &mut buf).unwrap();
    assert!(buf == data[MIB as usize..2 * MIB as usize]);
    assert_eq!(warm.stats().requests, 1, "read from disk");
    let log = nginx.access_log();
    assert!(log.last().is_some_and(|l| l.contains(" 304 ")), "{log:?}");
}
