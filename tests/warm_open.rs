//! Warm opens through the disk cache: how many requests a file whose
//! version and first block are on disk costs to open and read, from what
//! the user said (`Builder::immutable`) and what the server said
//! (`Cache-Control`). Counts from the server's log, never time.

use std::path::Path;
use std::time::{Duration, SystemTime};

use remfile::{DiskCache, RemoteFile};
use remfile_testkit::{RangeServer, TempDir, builder, read_at as read, test_data};

const BLOCK: u64 = 64 * 1024;

/// A file of 1 MiB, opened cold through a disk cache in a new directory and
/// read whole (its blocks, and its version's record, are on disk when this
/// returns); the server sends `cache_control`.
fn cached(name: &str, cache_control: Option<&str>) -> (RangeServer, TempDir, Vec<u8>) {
    let data = test_data(1 << 20, 101);
    let server = RangeServer::new(data.clone());
    server.set_cache_control(cache_control);
    let dir = TempDir::new(&format!("warm-{name}"));
    let cold = open(&server, &dir, false);
    assert_eq!(read(&cold, 0, data.len()), data);
    // Dropping the last handle waits for its blocks to be written.
    drop(cold);
    (server, dir, data)
}

/// The file, opened as a new process would (a memory cache of its own).
fn open(server: &RangeServer, dir: &Path, immutable: bool) -> RemoteFile {
    builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(dir, 64 << 20).unwrap())
        .immutable(immutable)
        .open(server.url("/f?X-Amz-Signature=s"))
        .unwrap()
}

/// The requests and body bytes the server answered while a warm open read
/// the file at a few places, checking every byte.
fn warm_cost(server: &RangeServer, dir: &Path, data: &[u8], immutable: bool) -> (usize, u64) {
    let (requests, bytes) = (server.requests(), server.body_bytes());
    let warm = open(server, dir, immutable);
    for (pos, len) in [(0, 1000), (300_000, 200_000), (data.len() as u64 - 10, 10)] {
        let at = pos as usize;
        assert_eq!(read(&warm, pos, len), &data[at..at + len], "at {pos}");
    }
    (server.requests() - requests, server.body_bytes() - bytes)
}

#[test]
fn an_immutable_file_on_disk_opens_and_reads_with_no_request() {
    let (server, dir, data) = cached("immutable", None);
    assert_eq!(warm_cost(&server, &dir, &data, true), (0, 0));
}

#[test]
fn without_immutable_a_warm_open_asks_once_and_gets_no_body() {
    let (server, dir, data) = cached("asks", None);
    assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0));
    let asked = server.log().last().unwrap().clone();
    assert_eq!(asked.header("if-none-match"), Some("\"v1\""), "{asked:?}");
}

#[test]
fn a_version_the_server_said_stays_good_is_trusted_without_asking() {
    for (n, said) in [
        "public, max-age=31536000, immutable",
        "immutable",
        "max-age=3600",
        "private, Max-Age=\"600\"",
    ]
    .into_iter()
    .enumerate()
    {
        let (server, dir, data) = cached(&format!("trusted-{n}"), Some(said));
        assert_eq!(warm_cost(&server, &dir, &data, false), (0, 0), "{said}");
    }
}

#[test]
fn a_version_the_server_said_to_ask_about_is_asked_about() {
    for (n, said) in [
        "max-age=0",
        "no-cache",
        "no-store",
        "must-revalidate, max-age=0",
        "immutable, no-cache",
        "s-maxage=3600",
        "max-age=soon",
    ]
    .into_iter()
    .enumerate()
    {
        let (server, dir, data) = cached(&format!("asked-{n}"), Some(said));
        assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0), "{said}");
    }
}

/// Every record file of the cache in `dir` dated `at`, as if the version
/// had been confirmed then.
fn date_records(dir: &Path, at: SystemTime) {
    for record in std::fs::read_dir(dir.join("files")).unwrap().flatten() {
        let file = std::fs::File::options()
            .write(true)
            .open(record.path())
            .unwrap();
        file.set_modified(at).unwrap();
    }
}

fn hours_ago(hours: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(hours * 3600)
}

#[test]
fn a_version_older_than_its_max_age_is_asked_about_and_then_trusted_again() {
    let (server, dir, data) = cached("aged", Some("max-age=3600"));
    date_records(&dir, hours_ago(2));
    assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0), "stale");
    // The 304 confirmed it, with a max-age: trusted for another hour.
    assert_eq!(warm_cost(&server, &dir, &data, false), (0, 0), "fresh");
    // A 304 that says nothing of freshness leaves the max-age said before
    // standing (RFC 9111): asked once more, then trusted.
    date_records(&dir, hours_ago(2));
    server.set_hook(|_, reply| match reply.status {
        304 => reply.without("Cache-Control"),
        _ => reply,
    });
    assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0), "stale");
    assert_eq!(warm_cost(&server, &dir, &data, false), (0, 0), "fresh");
    // A server that now says to ask is asked from then on.
    server.set_hook(|_, reply| reply);
    server.set_cache_control(Some("no-cache"));
    date_records(&dir, hours_ago(2));
    assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0), "stale");
    assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0), "no-cache");
}

#[test]
fn a_record_dated_in_the_future_is_not_trusted_for_its_max_age() {
    // A clock set back since it was written: when it was confirmed is
    // unknown.
    let tomorrow = SystemTime::now() + Duration::from_secs(24 * 3600);
    let (server, dir, data) = cached("future", Some("max-age=3600"));
    date_records(&dir, tomorrow);
    assert_eq!(warm_cost(&server, &dir, &data, false), (1, 0));
    // Immutable, as the server says it, needs no when.
    let (server, dir, data) = cached("future-immutable", Some("immutable"));
    date_records(&dir, tomorrow);
    assert_eq!(warm_cost(&server, &dir, &data, false), (0, 0));
}

#[test]
fn a_changed_file_at_a_url_the_user_called_immutable_is_read_stale_never_mixed() {
    // The trade of `immutable`, as documented: the version on disk is read
    // as it was; a block that is not on disk fails rather than mix in the
    // new version's bytes.
    let data = test_data(1 << 20, 102);
    let server = RangeServer::new(data.clone());
    let dir = TempDir::new("warm-stale");
    let cold = open(&server, &dir, false);
    assert_eq!(read(&cold, 0, 100_000), &data[..100_000]);
    drop(cold);
    server.set_data(test_data(1 << 20, 103));
    server.set_etag(Some("\"v2\""));
    let stale = open(&server, &dir, true);
    assert_eq!(
        read(&stale, 0, 100_000),
        &data[..100_000],
        "the old version"
    );
    let mut buf = vec![0; 1000];
    let e = stale.read_exact_at(900_000, &mut buf).unwrap_err();
    assert_eq!(e.kind(), remfile::ErrorKind::RemoteChanged, "{e}");
    // Without `immutable`, the next open asks and reads the new version.
    let asking = open(&server, &dir, false);
    assert_eq!(read(&asking, 0, 1000), &test_data(1 << 20, 103)[..1000]);
}

/// A presigned S3 URL, every signing parameter rotated from one open to the
/// next, whether given or reached through an API's redirect (whose target
/// rotates too): `immutable` opens and reads with no request, else one that
/// gets a 304; every byte from disk.
#[test]
fn a_rotated_presigned_url_is_trusted_or_asked_about_once() {
    let data = test_data(1 << 20, 105);
    let server = RangeServer::new(data.clone());
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let presigned = {
        let url = server.url("/bucket/f.nwb");
        move |n: usize| {
            format!(
                "{url}?versionId=7&X-Amz-Algorithm=AWS4-HMAC-SHA256\
                 &X-Amz-Credential=AKIA{n}%2F2026%2Fus-east-1%2Fs3%2Faws4_request\
                 &X-Amz-Date=2026010{n}T000000Z&X-Amz-Expires=3600\
                 &X-Amz-SignedHeaders=host&X-Amz-Signature={n:064}"
            )
        }
    };
    {
        let (presigned, counter) = (presigned.clone(), counter.clone());
        server.set_hook(move |req, reply| {
            if req.path == "/api/download" {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return remfile_testkit::Reply::new(302).header("Location", presigned(100 + n));
            }
            reply
        });
    }
    for (kind, given) in [("signed", None), ("redirected", Some("/api/download"))] {
        let dir = remfile_testkit::TempDir::new(&format!("warm-rotated-{kind}"));
        let open = |n: usize, immutable: bool| {
            let url = given.map_or_else(|| presigned(n), |p| server.url(p));
            builder()
                .block_size(BLOCK)
                .disk_cache(DiskCache::open(&*dir, 64 << 20).unwrap())
                .immutable(immutable)
                .open(url)
                .unwrap()
        };
        let cold = open(1, false);
        assert_eq!(read(&cold, 0, data.len()), data);
        drop(cold);
        for (n, immutable, cost) in [(2, true, (0, 0)), (3, false, (1, 0)), (4, true, (0, 0))] {
            let (requests, bytes) = (server.requests(), server.body_bytes());
            let warm = open(n, immutable);
            assert_eq!(read(&warm, 0, data.len()), data, "{kind} {n}");
            let asked = server.requests() - requests;
            // A redirect's hop is a request of its own.
            let hops = usize::from(given.is_some() && asked > 0);
            assert_eq!(
                (asked - hops, server.body_bytes() - bytes),
                cost,
                "{kind} {n}: {:?}",
                &server.log()[requests..]
            );
        }
    }
}

/// Under a cache key the key names the file, whatever the URL carries: a
/// token that rotates from one session to the next (the case the key is
/// for) leaves an `immutable` warm open without a request.
#[test]
fn under_a_cache_key_a_rotated_token_is_trusted_as_immutable() {
    let data = test_data(1 << 20, 106);
    let server = RangeServer::new(data.clone());
    let dir = remfile_testkit::TempDir::new("warm-cache-key-token");
    let open = |token: &str, immutable: bool| {
        builder()
            .block_size(BLOCK)
            .disk_cache(DiskCache::open(&*dir, 64 << 20).unwrap())
            .cache_key("asset-1")
            .immutable(immutable)
            .open(server.url(&format!("/download/1?token={token}")))
            .unwrap()
    };
    let cold = open("T1", false);
    assert_eq!(read(&cold, 0, data.len()), data);
    drop(cold);
    let (requests, bytes) = (server.requests(), server.body_bytes());
    let warm = open("T2", true);
    assert_eq!(read(&warm, 0, data.len()), data);
    assert_eq!(
        (server.requests() - requests, server.body_bytes() - bytes),
        (0, 0)
    );
}
