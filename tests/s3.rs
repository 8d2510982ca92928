//! Presigned URLs against an S3-compatible server that checks signatures and
//! expiry (`s3s-fs`): `HEAD` refused, ranges served, expiry renewed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use remfile::ErrorKind;
use remfile_testkit::s3::S3Server;
use remfile_testkit::{builder, test_data};

const MIB: u64 = 1024 * 1024;

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3 -- --ignored"]
fn a_presigned_url_opens_without_head_and_reads_right() {
    let s3 = S3Server::start();
    let data = test_data(5 * MIB as usize + 11, 1);
    s3.put("data.bin", &data);
    let url = s3.presign("data.bin", SystemTime::now(), 3600);

    // The server refuses HEAD on a GET-signed URL, as S3 does.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .build()
        .new_agent();
    let head = agent.head(&url).call().unwrap();
    assert!(
        head.status().is_client_error(),
        "HEAD answered {}",
        head.status()
    );

    let file = builder().read_ahead_max(0).open(&url).unwrap();
    assert_eq!(file.len(), data.len() as u64);
    let mut buf = vec![0u8; 1_500_000];
    for pos in [0, 2 * MIB - 7, 4 * MIB] {
        let n = file.read_at(pos, &mut buf).unwrap();
        assert!(buf[..n] == data[pos as usize..][..n]);
    }
    assert!(!format!("{file:?}").contains("X-Amz-Signature"));
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3 -- --ignored"]
fn a_tampered_signature_is_refused() {
    let s3 = S3Server::start();
    s3.put("t.bin", b"secret");
    let url = s3.presign("t.bin", SystemTime::now(), 3600);
    // Change the signature's last hex digit (to another one).
    let last = if url.ends_with('0') { '1' } else { '0' };
    let tampered = format!("{}{last}", &url[..url.len() - 1]);
    assert_ne!(tampered, url);
    let e = builder().open(&tampered).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::HttpStatus(400 | 403)), "{e}");
    assert!(!e.to_string().contains("X-Amz-Signature="), "{e}");
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3 -- --ignored"]
fn an_expired_url_is_renewed_by_the_url_provider() {
    let s3 = S3Server::start();
    let data = test_data(4 * MIB as usize, 2);
    s3.put("exp.bin", &data);
    // Valid for 3 s from the current second: at least 2 s to open in.
    let short = s3.presign("exp.bin", SystemTime::now(), 3);
    let calls = Arc::new(AtomicUsize::new(0));
    let s3 = Arc::new(s3);
    let (c, signer) = (calls.clone(), s3.clone());
    let file = builder()
        .read_ahead_max(0)
        .url_provider(move || {
            c.fetch_add(1, Ordering::SeqCst);
            Ok(signer.presign("exp.bin", SystemTime::now(), 3600))
        })
        .open(&short)
        .unwrap();
    // Let the signature expire.
    std::thread::sleep(Duration::from_millis(4100));
    let mut buf = vec![0u8; 100_000];
    file.read_exact_at(3 * MIB, &mut buf).unwrap();
    assert!(buf == data[3 * MIB as usize..][..buf.len()]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // Without a provider the same expiry is an error that says what happened.
    let short = s3.presign("exp.bin", SystemTime::now(), 3);
    let file = builder().read_ahead_max(0).open(&short).unwrap();
    std::thread::sleep(Duration::from_millis(4100));
    let e = file.read_exact_at(3 * MIB, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(403), "{e}");
    assert!(e.to_string().contains("expired"), "{e}");
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3 -- --ignored"]
fn the_tail_comes_with_the_open_from_a_presigned_url() {
    let s3 = S3Server::start();
    let data = test_data(5 * MIB as usize + 11, 3);
    s3.put("tail.bin", &data);
    let url = s3.presign("tail.bin", SystemTime::now(), 3600);
    let file = builder().open_tail(2 * MIB).open(&url).unwrap();
    let s = file.stats();
    assert_eq!((s.requests, s.round_trips), (2, 1), "{s:?}");
    // The blocks wholly in the last 2 MiB: 4 and the partial 5.
    let mut buf = vec![0u8; (data.len() as u64 - 4 * MIB) as usize];
    file.read_exact_at(4 * MIB, &mut buf).unwrap();
    assert!(buf == data[4 * MIB as usize..]);
    assert_eq!(file.stats().requests, 2, "served by the tail");
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3 -- --ignored"]
fn a_warm_open_with_a_disk_cache_finds_the_object_under_a_new_signature() {
    let s3 = S3Server::start();
    let data = test_data(3 * MIB as usize, 5);
    s3.put("warm.bin", &data);
    let dir = remfile_testkit::TempDir::new("s3-disk");
    let open = |signed_at: SystemTime| {
        builder()
            .block_size(64 * 1024)
            .disk_cache(remfile::DiskCache::open(&dir, 64 * MIB).unwrap())
            .open(s3.presign("warm.bin", signed_at, 3600))
            .unwrap()
    };
    let mut buf = vec![0u8; MIB as usize];
    open(SystemTime::now())
        .read_exact_at(MIB, &mut buf)
        .unwrap();
    // Signed again a second later: another URL, the same object.
    let warm = open(SystemTime::now() + Duration::from_secs(1));
    let opened = warm.stats();
    // A 304 (one request, no body) where the server honours If-None-Match
    // on a range; a 206 of the first block where it does not. Either way
    // the blocks on disk serve the read.
    assert_eq!(opened.requests, 1, "{opened:?}");
    assert!(opened.bytes_fetched <= 64 * 1024, "{opened:?}");
    warm.read_exact_at(MIB, &mut buf).unwrap();
    assert!(buf == data[MIB as usize..2 * MIB as usize]);
    assert_eq!(warm.stats().requests, 1, "read from disk");
    eprintln!("s3s-fs warm open: {opened:?}");
}
