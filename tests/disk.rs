//! The disk cache: blocks kept across opens (as across processes), validated,
//! bounded, and never an error for a read when the disk misbehaves.

use std::path::{Path, PathBuf};

use remfile::{DiskCache, RemoteFile};
use remfile_testkit::{RangeServer, TempDir, builder, test_data};

const BLOCK: u64 = 64 * 1024;

fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("disk-{name}"))
}

/// A file opened with the disk cache in `dir` and a memory cache of its own
/// (a new process, as far as the memory cache is concerned), which finds
/// on disk what earlier opens wrote, as a later process does: an open
/// while another's first blocks are still being written waits for them,
/// then trusts the version that open got (and sends no request).
fn open(server: &RangeServer, path: &str, dir: &Path) -> RemoteFile {
    let disk = DiskCache::open(dir, 64 << 20).unwrap();
    assert!(disk.flush(std::time::Duration::from_secs(10)));
    builder()
        .block_size(BLOCK)
        .disk_cache(disk)
        .open(server.url(path))
        .unwrap()
}

fn read(file: &RemoteFile, pos: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    file.read_exact_at(pos, &mut buf).unwrap();
    buf
}

#[test]
fn a_second_open_reads_the_blocks_the_first_fetched_from_disk() {
    let data = test_data(2 << 20, 61);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("second");
    let first = open(&server, "/f?X-Amz-Signature=one", &dir);
    assert_eq!(read(&first, 300_000, 500_000), &data[300_000..800_000]);
    let fetched = server.requests();
    let second = open(&server, "/f?X-Amz-Signature=two", &dir);
    let before = second.stats();
    // Another signature, the same object: its blocks are on disk.
    assert_eq!(read(&second, 300_000, 500_000), &data[300_000..800_000]);
    let cost = second.stats().since(&before);
    assert_eq!(server.requests(), fetched + 1, "the open's request only");
    assert_eq!(cost.requests, 0, "{cost:?}");
    // Blocks 4 to 12 of 64 KiB hold bytes 300,000 to 800,000.
    assert_eq!(cost.disk_hits, 9, "{cost:?}");
    assert_eq!(cost.disk_bytes_read, 9 * BLOCK, "{cost:?}");
}

#[test]
fn a_changed_file_never_gets_its_old_blocks() {
    let server = RangeServer::new(test_data(1 << 20, 62));
    let dir = temp_dir("changed");
    let old = open(&server, "/f", &dir);
    read(&old, 200_000, 100_000);
    let new_data = test_data(1 << 20, 63);
    server.set_data(new_data.clone());
    server.set_etag(Some("\"v2\""));
    let new = open(&server, "/f", &dir);
    assert_eq!(read(&new, 200_000, 100_000), &new_data[200_000..300_000]);
    assert_eq!(new.stats().disk_hits, 0);
}

#[test]
fn a_damaged_block_on_disk_is_fetched_again() {
    let data = test_data(1 << 20, 64);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("damaged");
    read(&open(&server, "/f", &dir), 400_000, 10);
    // Every block file cut short or overwritten with garbage.
    let mut damaged = 0;
    for (n, block) in walk(&dir.join("blocks")).into_iter().enumerate() {
        let bytes = std::fs::read(&block).unwrap();
        let broken = if n % 2 == 0 {
            bytes[..bytes.len() / 2].to_vec()
        } else {
            vec![0x5a; bytes.len()]
        };
        std::fs::write(&block, broken).unwrap();
        damaged += 1;
    }
    assert!(damaged >= 1);
    let file = open(&server, "/f", &dir);
    let before = server.requests();
    assert_eq!(read(&file, 400_000, 10), &data[400_000..400_010]);
    assert_eq!(server.requests(), before + 1, "fetched again");
    assert_eq!(file.stats().disk_hits, 0);
}

#[test]
fn a_file_without_a_validator_stays_off_the_disk() {
    let server = RangeServer::new(test_data(1 << 20, 65));
    server.set_etag(None);
    let dir = temp_dir("novalidator");
    read(&open(&server, "/f", &dir), 0, 500_000);
    assert!(walk(&dir.join("blocks")).is_empty());
    // Last-Modified is a validator too.
    server.set_last_modified(Some("Mon, 30 Nov 2026 12:00:00 GMT"));
    read(&open(&server, "/f", &dir), 0, 500_000);
    assert!(!walk(&dir.join("blocks")).is_empty());
}

#[test]
fn an_unwritable_directory_is_no_error_for_a_read() {
    let data = test_data(1 << 20, 66);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("unwritable");
    let disk = DiskCache::open(&dir, 64 << 20).unwrap();
    // The directory replaced by a file: nothing can be written under it.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    let file = builder()
        .block_size(BLOCK)
        .disk_cache(disk)
        .open(server.url("/f"))
        .unwrap();
    assert_eq!(read(&file, 100_000, 300_000), &data[100_000..400_000]);
    let _ = std::fs::remove_file(&dir);
}

#[test]
fn a_cache_key_names_the_file_whatever_its_url() {
    let data = test_data(1 << 20, 67);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("key");
    let keyed = |path: &str| {
        builder()
            .block_size(BLOCK)
            .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
            .cache_key("asset-42")
            .open(server.url(path))
            .unwrap()
    };
    read(&keyed("/download/a"), 500_000, 1000);
    let other = keyed("/download/b");
    assert_eq!(read(&other, 500_000, 1000), &data[500_000..501_000]);
    assert_eq!(other.stats().disk_hits, 1);
}

#[test]
fn two_files_that_differ_by_a_query_parameter_never_share_blocks() {
    // One download endpoint, two files of one size and one Last-Modified:
    // told apart by `id` alone.
    let one = test_data(300_000, 68);
    let two = test_data(300_000, 69);
    let lm = "Tue, 01 Dec 2026 00:00:00 GMT";
    let second = two.clone();
    let server = RangeServer::new(one.clone()).with_hook(move |req, reply| {
        if req.query.as_deref() == Some("id=2") {
            remfile_testkit::range_reply(&second, None, Some(lm), req)
        } else {
            reply
        }
    });
    server.set_etag(None);
    server.set_last_modified(Some(lm));
    let dir = temp_dir("query");
    let open_id = |id: u32| {
        builder()
            .block_size(BLOCK)
            .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
            .revalidate_after(std::time::Duration::from_secs(3600))
            .open(server.url(&format!("/download?id={id}")))
            .unwrap()
    };
    assert!(read(&open_id(1), 0, one.len()) == one, "id=1's bytes");
    assert!(read(&open_id(2), 0, two.len()) == two, "id=2's bytes");
    assert!(read(&open_id(1), 0, one.len()) == one, "id=1's bytes");
    let again = open_id(2);
    assert!(read(&again, 0, two.len()) == two, "id=2's bytes");
    assert!(again.stats().disk_hits > 0, "each from its own blocks");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// The writer of [`a_killed_writer_leaves_no_block_that_reads_wrong`], run as
/// a child process: reads the whole file over and over, writing blocks.
fn writer(spec: &str) {
    let (url, dir) = spec.split_once('|').unwrap();
    let file = builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(dir, 1 << 20).unwrap())
        .cache_capacity(1 << 20)
        .open(url)
        .unwrap();
    let mut buf = vec![0; 3 * BLOCK as usize];
    loop {
        for i in 0..file.len() / (3 * BLOCK) {
            file.read_exact_at(i * 3 * BLOCK, &mut buf).unwrap();
        }
    }
}

#[test]
fn a_killed_writer_leaves_no_block_that_reads_wrong() {
    if let Ok(spec) = std::env::var("REMFILE_DISK_WRITER") {
        return writer(&spec);
    }
    let data = test_data(4 << 20, 68);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("killed");
    std::fs::create_dir_all(&dir).unwrap();
    // A cache smaller than the file: the writer evicts as it writes, too.
    for round in 0..20u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "a_killed_writer_leaves_no_block_that_reads_wrong",
                "--exact",
                "--nocapture",
            ])
            .env(
                "REMFILE_DISK_WRITER",
                format!("{}|{}", server.url("/f"), dir.display()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Killed (SIGKILL) once it is writing, at a point of its work that
        // differs each round: after one more block written, or two, ...
        // Blocks written whole (not the fetch locks beside them).
        let written = || {
            let mut files: Vec<_> = walk(&dir.join("blocks"))
                .into_iter()
                .filter(|p| p.extension().is_none_or(|e| e != "lock"))
                .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
                .collect();
            files.sort();
            files
        };
        // Once it wrote a block this round, and one past the first (which
        // its open brings): a loaded machine could kill every writer before
        // that, and leave the reader nothing to find.
        let before = written();
        let wanted = 1 + (round % 4) as usize;
        remfile_testkit::time::wait_for(std::time::Duration::from_secs(20), || {
            let now = written();
            let new = now.iter().filter(|f| !before.contains(f)).count();
            let ended = child.try_wait().is_ok_and(|status| status.is_some());
            ended || (new >= wanted && now.len() >= 2)
        });
        eprintln!(
            "round {round}: killed with {} block files",
            walk(&dir.join("blocks")).len()
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    // Whatever the writers left, a reader gets the right bytes: whole blocks,
    // or none (a damaged one is fetched again).
    let disk = DiskCache::open(&dir, 1 << 20).unwrap();
    assert!(
        disk.size_on_disk() <= (1 << 20) + 20 * (BLOCK + 200),
        "bounded"
    );
    let file = builder()
        .block_size(BLOCK)
        .disk_cache(disk)
        .open(server.url("/f"))
        .unwrap();
    assert_eq!(read(&file, 0, data.len()), data);
    assert!(file.stats().disk_hits > 0, "{:?}", file.stats());
}

#[test]
fn a_warm_open_costs_one_request_and_no_body() {
    let data = test_data(2 << 20, 69);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("warm");
    read(&open(&server, "/f?sig=1", &dir), 700_000, 300_000);
    let before = server.requests();
    let warm = open(&server, "/f?sig=2", &dir);
    assert_eq!(server.requests(), before + 1);
    let asked = server.log().last().unwrap().clone();
    assert_eq!(asked.header("if-none-match"), Some("\"v1\""), "{asked:?}");
    let opened = warm.stats();
    assert_eq!(
        (opened.requests, opened.bytes_fetched),
        (1, 0),
        "{opened:?}"
    );
    assert_eq!(warm.len(), data.len() as u64);
    // Its blocks on disk: no request.
    assert_eq!(read(&warm, 700_000, 300_000), &data[700_000..1_000_000]);
    assert_eq!(warm.stats().requests, 1);
    assert_eq!(read(&warm, 0, 1000), &data[..1000], "block 0, from disk");
}

#[test]
fn a_warm_open_of_a_changed_file_reads_the_new_version_and_drops_the_old() {
    let server = RangeServer::new(test_data(1 << 20, 70));
    let dir = temp_dir("warmchanged");
    read(&open(&server, "/f", &dir), 0, 1 << 20);
    let old_blocks = walk(&dir.join("blocks"));
    assert!(!old_blocks.is_empty());
    let new_data = test_data(1 << 20, 71);
    server.set_data(new_data.clone());
    server.set_etag(Some("\"v2\""));
    let file = open(&server, "/f", &dir);
    assert_eq!(read(&file, 0, 1 << 20), new_data);
    assert_eq!(file.stats().disk_hits, 0);
    assert!(
        old_blocks.iter().all(|p| !p.exists()),
        "the old version's blocks are gone"
    );
}

/// A file cached at one size, then changed to another (Last-Modified only,
/// as many servers validate): the warm open reads the new version whole,
/// whatever the sizes are next to the block size.
#[test]
fn a_warm_open_of_a_file_that_grew_or_shrank_reads_the_new_bytes() {
    let block = BLOCK as usize;
    let sizes = [
        (1_000, 200_000),
        (200_000, 1_000),
        (block, block + 1),
        (block + 1, block),
        (block - 1, 3 * block),
        (3 * block, block - 1),
    ];
    for (n, (old_len, new_len)) in sizes.into_iter().enumerate() {
        let seed = 80 + 2 * n as u64;
        let server = RangeServer::new(test_data(old_len, seed));
        server.set_etag(None);
        server.set_last_modified(Some("Mon, 30 Nov 2026 12:00:00 GMT"));
        let dir = temp_dir(&format!("resized-{n}"));
        let old = open(&server, "/f", &dir);
        assert_eq!(read(&old, 0, old_len), test_data(old_len, seed));
        drop(old);
        let new_data = test_data(new_len, seed + 1);
        server.set_data(new_data.clone());
        server.set_last_modified(Some("Tue, 01 Dec 2026 12:00:00 GMT"));
        let new = open(&server, "/f", &dir);
        assert_eq!(new.len(), new_len as u64, "{old_len} -> {new_len}");
        assert_eq!(read(&new, 0, new_len), new_data, "{old_len} -> {new_len}");
        // A read across the first two blocks, where a short first block
        // would have put the second's bytes at the wrong offsets.
        if new_len > block + 10 {
            let across = read(&new, BLOCK - 10, 20);
            assert_eq!(across, new_data[block - 10..block + 10]);
        }
        assert_eq!(new.stats().disk_hits, 0, "{old_len} -> {new_len}");
    }
}

#[test]
fn within_revalidate_after_a_warm_open_asks_nothing() {
    let data = test_data(1 << 20, 72);
    let server = RangeServer::new(data.clone());
    // Last-Modified only: the revalidation fetches the first block.
    server.set_etag(None);
    server.set_last_modified(Some("Mon, 30 Nov 2026 12:00:00 GMT"));
    let dir = temp_dir("revalidate");
    read(&open(&server, "/f", &dir), 0, data.len());
    let before = server.requests();
    let trusting = builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
        .revalidate_after(std::time::Duration::from_secs(3600))
        .open(server.url("/f"))
        .unwrap();
    assert_eq!(read(&trusting, 0, 100), &data[..100]);
    assert_eq!(server.requests(), before, "no request at all");
    // Without it, the same open asks for the first block, whose date says
    // the version is the same: the rest comes from disk.
    let asking = open(&server, "/f", &dir);
    assert_eq!(server.requests(), before + 1);
    let asked = server.log().last().unwrap().clone();
    assert_eq!(
        asked.header("if-modified-since"),
        None,
        "a 304 proves no date"
    );
    assert_eq!(asked.header("range"), Some("bytes=0-65535"));
    assert_eq!(read(&asking, 0, data.len()), data);
    assert_eq!(server.requests(), before + 1, "the rest from disk");
    assert!(asking.stats().disk_hits > 0);
}

/// Runs this test binary's test `test` in a child process with `key` set
/// to `spec` in its environment (the child's part of the test reads it),
/// and waits for it to pass.
fn in_child(test: &str, key: &str, spec: &str) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture"])
        .env(key, spec)
        .status()
        .unwrap();
    assert!(status.success(), "the child process failed");
}

/// One download endpoint serving two files of one size, told apart by the
/// query: `id=2` is `two`, anything else `one`, both with one strong ETag
/// (as nginx's mtime-size ETag of two files extracted from one archive).
fn two_files_one_etag(one: Vec<u8>, two: Vec<u8>) -> RangeServer {
    const ETAG: &str = "\"1700000000-2dc6c0\"";
    let server = RangeServer::new(one).with_hook(move |req, reply| {
        if req.query.as_deref() == Some("id=2") {
            remfile_testkit::range_reply(&two, Some(ETAG), None, req)
        } else {
            reply
        }
    });
    server.set_etag(Some(ETAG));
    server
}

/// The child's part of
/// [`two_files_behind_one_strong_etag_never_share_blocks_across_processes`]:
/// reads the whole file at the URL in `spec` through the disk cache, and
/// checks its bytes.
fn read_whole_in_child(spec: &str) {
    let mut parts = spec.split('|');
    let (url, dir, seed) = (parts.next().unwrap(), parts.next().unwrap(), parts.next());
    let file = builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(dir, 64 << 20).unwrap())
        .open(url)
        .unwrap();
    let expected = test_data(file.len() as usize, seed.unwrap().parse().unwrap());
    assert!(
        read(&file, 0, expected.len()) == expected,
        "{url}: another file's bytes"
    );
}

#[test]
fn two_files_behind_one_strong_etag_never_share_blocks_across_processes() {
    const TEST: &str = "two_files_behind_one_strong_etag_never_share_blocks_across_processes";
    if let Ok(spec) = std::env::var("REMFILE_DISK_WHOLE") {
        return read_whole_in_child(&spec);
    }
    let (one, two) = (test_data(1 << 20, 91), test_data(1 << 20, 92));
    let server = two_files_one_etag(one.clone(), two.clone());
    let dir = temp_dir("one-etag");
    let spec = |id: u32, seed: u32| {
        let url = server.url(&format!("/download?id={id}"));
        format!("{url}|{}|{seed}", dir.display())
    };
    // Each read whole by a process of its own, then each again.
    in_child(TEST, "REMFILE_DISK_WHOLE", &spec(1, 91));
    in_child(TEST, "REMFILE_DISK_WHOLE", &spec(2, 92));
    let fetched = server.body_bytes();
    assert!(fetched >= 2 << 20, "each file's bytes fetched: {fetched}");
    in_child(TEST, "REMFILE_DISK_WHOLE", &spec(1, 91));
    in_child(TEST, "REMFILE_DISK_WHOLE", &spec(2, 92));
    assert!(
        server.body_bytes() < fetched + (1 << 20),
        "each from its own blocks"
    );
}

#[test]
fn a_file_replaced_by_an_older_dated_one_of_its_size_is_read_new() {
    let (old, new) = (test_data(1 << 20, 93), test_data(1 << 20, 94));
    let server = RangeServer::new(old.clone());
    server.set_etag(None);
    server.set_last_modified(Some("Tue, 01 Dec 2026 12:00:00 GMT"));
    let dir = temp_dir("older-date");
    assert!(read(&open(&server, "/f", &dir), 0, old.len()) == old);
    // Restored from a backup (`cp -p`, `rsync -a`): an older date. As real
    // servers do, it answers any `If-Modified-Since` later than its date
    // with a 304.
    server.set_data(new.clone());
    server.set_last_modified(Some("Mon, 30 Nov 2026 12:00:00 GMT"));
    server.set_hook(|req, reply| match req.header("if-modified-since") {
        Some(_) => remfile_testkit::Reply::new(304),
        None => reply,
    });
    let reopened = open(&server, "/f", &dir);
    assert_eq!(
        reopened.last_modified(),
        Some("Mon, 30 Nov 2026 12:00:00 GMT")
    );
    assert!(read(&reopened, 0, new.len()) == new, "the new bytes");
    assert_eq!(reopened.stats().disk_hits, 0);
    // And the new version is what the disk keeps from now on.
    let again = open(&server, "/f", &dir);
    assert!(read(&again, 0, new.len()) == new);
    assert!(again.stats().disk_hits > 0);
}

#[test]
fn a_304_naming_another_etag_confirms_nothing() {
    let (old, new) = (test_data(1 << 20, 95), test_data(1 << 20, 96));
    let server = RangeServer::new(old.clone());
    server.set_etag(Some("\"v1\""));
    let dir = temp_dir("304-other-etag");
    assert!(read(&open(&server, "/f", &dir), 0, old.len()) == old);
    server.set_data(new.clone());
    server.set_etag(Some("\"v2\""));
    // A server (or a cache on the way) that answers 304 to any
    // If-None-Match, with the ETag it has now.
    server.set_hook(|req, reply| match req.header("if-none-match") {
        Some(_) => remfile_testkit::Reply::new(304).header("ETag", "\"v2\""),
        None => reply,
    });
    let reopened = open(&server, "/f", &dir);
    assert_eq!(reopened.etag(), Some("\"v2\""));
    assert!(read(&reopened, 0, new.len()) == new, "the new bytes");
    assert_eq!(reopened.stats().disk_hits, 0);
}

#[test]
fn a_412_under_a_long_max_age_makes_the_next_open_read_the_new_version() {
    for (n, said) in ["max-age=31536000", "public, max-age=31536000, immutable"]
        .into_iter()
        .enumerate()
    {
        let (old, new) = (test_data(2 << 20, 97), test_data(2 << 20, 98));
        let server = RangeServer::new(old.clone());
        server.set_etag(Some("\"v1\""));
        server.set_cache_control(Some(said));
        let dir = temp_dir(&format!("412-{n}"));
        assert!(read(&open(&server, "/f", &dir), 0, 1 << 20) == old[..1 << 20]);
        server.set_data(new.clone());
        server.set_etag(Some("\"v2\""));
        // Trusted without a request: the blocks on disk are served, the
        // first one it lacks meets the new version.
        let trusting = open(&server, "/f", &dir);
        assert_eq!(trusting.etag(), Some("\"v1\""), "{said}");
        let mut buf = vec![0; 1000];
        let e = trusting.read_exact_at(3 << 19, &mut buf).unwrap_err();
        assert_eq!(e.kind(), remfile::ErrorKind::RemoteChanged, "{said}: {e}");
        drop(trusting);
        // The server proved the version gone: the next open asks, and
        // reads the new version, every byte of it.
        let reopened = open(&server, "/f", &dir);
        assert_eq!(reopened.etag(), Some("\"v2\""), "{said}");
        assert!(read(&reopened, 0, new.len()) == new, "{said}");
        assert_eq!(reopened.stats().disk_hits, 0, "{said}");
        drop(reopened);
        let again = open(&server, "/f", &dir);
        assert!(read(&again, 0, new.len()) == new, "{said}");
        assert_eq!(again.stats().requests, 0, "{said}: trusted, from disk");
    }
}

/// The options eight processes sharing a file open it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharers {
    /// This file's 64 KiB blocks.
    SmallBlocks,
    /// The crate's defaults (1 MiB blocks, no tail at open).
    Defaults,
    /// The defaults remote HDF5 files open with (`remfile::hdf5::builder()`:
    /// 128 KiB blocks, the last MiB fetched beside the first block, 64
    /// connections).
    Hdf5Defaults,
    /// The crate's defaults, each process reading the file in 256 KiB
    /// pieces in an order of its own.
    Shuffled,
    /// The HDF5 driver's options, each process reading the file in 256 KiB
    /// pieces in an order of its own.
    Hdf5Shuffled,
}

impl Sharers {
    fn name(self) -> &'static str {
        match self {
            Sharers::SmallBlocks => "small-blocks",
            Sharers::Defaults => "defaults",
            Sharers::Hdf5Defaults => "hdf5-defaults",
            Sharers::Shuffled => "shuffled",
            Sharers::Hdf5Shuffled => "hdf5-shuffled",
        }
    }

    /// Whether each process reads the file in pieces of an order of its
    /// own (else from its start to its end, in one read).
    fn shuffled(self) -> bool {
        matches!(self, Sharers::Shuffled | Sharers::Hdf5Shuffled)
    }

    fn from_name(name: &str) -> Sharers {
        [
            Sharers::SmallBlocks,
            Sharers::Defaults,
            Sharers::Hdf5Defaults,
            Sharers::Shuffled,
            Sharers::Hdf5Shuffled,
        ]
        .into_iter()
        .find(|s| s.name() == name)
        .expect("a known profile")
    }

    fn builder(self) -> remfile::Builder {
        // The defaults as a program gets them (the link measured, too), but
        // for the proxy and the deadline: with the test builder's 20 s a
        // process waits 15 s at most for another's 64 MiB fetch, which
        // eight processes of a debug build on two busy cores took longer
        // than.
        let defaults = RemoteFile::builder()
            .proxy_from_env(false)
            .read_timeout(std::time::Duration::from_secs(120));
        match self {
            Sharers::SmallBlocks => builder()
                .block_size(BLOCK)
                .read_timeout(std::time::Duration::from_secs(120)),
            Sharers::Defaults | Sharers::Shuffled => defaults,
            Sharers::Hdf5Defaults | Sharers::Hdf5Shuffled => defaults
                .block_size(128 << 10)
                .open_tail(1 << 20)
                .max_connections(64),
        }
    }
}

/// A reader of [`processes_sharing_a_directory_fetch_each_block_about_once`],
/// run as a child process: reads the whole file, checks it, exits.
fn sharing_reader(spec: &str) {
    // The gate: the parent closes every child's input once all are
    // started, so that they open the file at the same moment.
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
    let mut parts = spec.split('|');
    let mut next = || parts.next().unwrap();
    let (url, dir, seed, sharers) = (next(), next(), next(), Sharers::from_name(next()));
    let file = sharers
        .builder()
        .disk_cache(DiskCache::open(dir, 256 << 20).unwrap())
        .open(url)
        .unwrap();
    let data = test_data(file.len() as usize, seed.parse().unwrap());
    if !sharers.shuffled() {
        assert!(read(&file, 0, data.len()) == data, "wrong bytes");
        return;
    }
    const PIECE: usize = 256 << 10;
    let mut order: Vec<usize> = (0..data.len().div_ceil(PIECE)).collect();
    // An order of this process's own (Fisher-Yates, an LCG seeded by its id).
    let mut x = u64::from(std::process::id()) | 1;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    for piece in order {
        let at = piece * PIECE;
        let len = PIECE.min(data.len() - at);
        assert!(
            read(&file, at as u64, len) == data[at..at + len],
            "wrong bytes"
        );
    }
}

#[test]
fn processes_sharing_a_directory_fetch_each_block_about_once() {
    if let Ok(spec) = std::env::var("REMFILE_DISK_SHARER") {
        return sharing_reader(&spec);
    }
    share_one_file_among_processes("sharing", &[], true, Sharers::SmallBlocks);
}

#[test]
fn processes_reading_a_file_in_pieces_of_their_own_order_fetch_each_block_once() {
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    share_one_file_among_processes("shuffled", &[], true, Sharers::Shuffled);
}

/// Eight processes open a file the directory does not know at the same
/// moment, with `sharers`' options, and read it whole: one fetches the
/// first block (and the tail, if the options fetch one at open), the
/// others wait until it is on disk and open warm without a request of
/// their own (the server confirmed the version while they waited); every
/// byte of the file is fetched once.
fn open_an_uncached_file_at_once(name: &str, sharers: Sharers) {
    let server = share_one_file_among_processes(name, &[], false, sharers);
    let bodies_of_block_0 = server
        .log()
        .iter()
        .filter(|r| r.range().is_some_and(|(first, _)| first == 0))
        .filter(|r| r.header("if-none-match").is_none())
        .count();
    assert_eq!(bodies_of_block_0, 1);
}

#[test]
fn processes_opening_an_uncached_file_at_once_fetch_its_first_block_once() {
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    open_an_uncached_file_at_once("cold-opens", Sharers::Defaults);
}

#[test]
fn processes_opening_an_uncached_hdf5_file_at_once_fetch_its_first_blocks_and_tail_once() {
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    open_an_uncached_file_at_once("cold-opens-hdf5", Sharers::Hdf5Defaults);
}

#[test]
fn processes_opening_an_uncached_file_at_once_and_reading_it_in_pieces_fetch_each_block_once() {
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    open_an_uncached_file_at_once("cold-shuffled", Sharers::Shuffled);
}

#[test]
fn processes_opening_an_uncached_hdf5_file_at_once_and_reading_it_in_pieces_fetch_each_block_once()
{
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    open_an_uncached_file_at_once("cold-shuffled-hdf5", Sharers::Hdf5Shuffled);
}

#[test]
fn processes_reading_an_hdf5_file_in_pieces_of_their_own_order_fetch_each_block_once() {
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    share_one_file_among_processes("shuffled-hdf5", &[], true, Sharers::Hdf5Shuffled);
}

#[test]
fn processes_in_separate_pid_namespaces_share_one_directory() {
    if std::env::var("REMFILE_DISK_SHARER").is_ok() {
        return;
    }
    // As containers do: each process has its own process ids, so that a
    // lock's process id means nothing to the others.
    let permitted = |wrap: &[&str]| {
        std::process::Command::new(wrap[0])
            .args(&wrap[1..])
            .arg("true")
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let plain: &[&str] = &["unshare", "--pid", "--fork"];
    let as_user: &[&str] = &["unshare", "--user", "--map-root-user", "--pid", "--fork"];
    let Some(wrap) = [plain, as_user].into_iter().find(|w| permitted(w)) else {
        eprintln!("SKIPPED: `unshare --pid --fork` is not permitted here");
        return;
    };
    share_one_file_among_processes("namespaces", wrap, true, Sharers::SmallBlocks);
}

/// Eight processes (each started through `wrap`, a command that runs the
/// rest, if any) read one 64 MiB file through one directory at once (the
/// file's version known there first if `warm`): every byte right, and the
/// file's bytes sent about once (counted as the server sent them: a `304`
/// sends none). The server, for its log.
fn share_one_file_among_processes(
    name: &str,
    wrap: &[&str],
    warm: bool,
    sharers: Sharers,
) -> RangeServer {
    const PROCESSES: usize = 8;
    // One group of eight at a time: what is measured is how eight processes
    // share a file, not how 24 debug builds starve one another's lock
    // renewals on two cores (CI saw 2.5x then).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let data = test_data(64 << 20, 73);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir(name);
    if warm {
        let disk = DiskCache::open(&dir, 256 << 20).unwrap();
        let file = sharers.builder().disk_cache(disk).open(server.url("/f"));
        read(&file.unwrap(), 0, 1);
    }
    let before = server.body_bytes();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let mut command = match wrap.split_first() {
                Some((program, args)) => {
                    let mut c = std::process::Command::new(program);
                    c.args(args).arg(&exe);
                    c
                }
                None => std::process::Command::new(&exe),
            };
            command
                .args([
                    "processes_sharing_a_directory_fetch_each_block_about_once",
                    "--exact",
                    "--nocapture",
                ])
                .env(
                    "REMFILE_DISK_SHARER",
                    format!(
                        "{}|{}|73|{}",
                        server.url("/f"),
                        dir.display(),
                        sharers.name()
                    ),
                )
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    // All started: the gate opens for all at once.
    for child in &mut children {
        drop(child.stdin.take());
    }
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a reader failed");
    }
    let fetched = server.body_bytes() - before;
    eprintln!(
        "{PROCESSES} processes ({name}, {}) fetched {fetched} bytes of an {} byte file ({:.3}x)",
        sharers.name(),
        data.len(),
        fetched as f64 / data.len() as f64
    );
    // Each block once: eight times without the locks, 1.11x when each
    // open but the first fetched the first block (1 MiB) itself.
    assert!(
        fetched as f64 <= 1.01 * data.len() as f64,
        "{fetched} bytes for {}; fetched more than once:\n{}",
        data.len(),
        fetched_twice(&server, data.len() as u64)
    );
    server
}

/// The ranges of the file `server` sent more than once (a request that
/// asked whether the version changed sent none), each with the requests
/// (number and connection) that sent it: a line each, the first 40.
fn fetched_twice(server: &RangeServer, len: u64) -> String {
    use remfile_testkit::range::ByteRange;
    let mut sent: Vec<(u64, u64, usize, usize)> = server
        .log()
        .iter()
        .filter(|r| r.header("if-none-match").is_none())
        .filter_map(|r| {
            let (first, end) = match r.byte_range()?.ok()? {
                ByteRange::Closed { first, last } => (first, last.min(len - 1) + 1),
                ByteRange::From(first) => (first, len),
                ByteRange::Suffix(n) => (len.saturating_sub(n), len),
            };
            Some((first, end, r.n, r.conn))
        })
        .collect();
    sent.sort_unstable();
    let mut lines = Vec::new();
    for (k, &(_, end, n, conn)) in sent.iter().enumerate() {
        for &(other_first, other_end, m, other_conn) in &sent[k + 1..] {
            if other_first >= end {
                break;
            }
            lines.push(format!(
                "{}..{} by request {n} (connection {conn}) and request {m} (connection {other_conn})",
                other_first,
                end.min(other_end)
            ));
        }
    }
    let more = lines.len().saturating_sub(40);
    lines.truncate(40);
    if more > 0 {
        lines.push(format!("and {more} more"));
    }
    lines.join("\n")
}

#[test]
fn a_lock_left_by_a_dead_process_is_taken_over() {
    let data = test_data(1 << 20, 74);
    let server = RangeServer::new(data.clone());
    let dir = temp_dir("deadlock");
    read(&open(&server, "/f", &dir), 0, 1);
    // A process that died while fetching block 5 left its lock behind.
    let file_dir = walk(&dir.join("blocks"))[0].parent().unwrap().to_path_buf();
    let dead = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let lock = file_dir.join(format!("{BLOCK}-5.lock"));
    std::fs::write(&lock, format!("{dead}\n")).unwrap();
    let file = open(&server, "/f", &dir);
    assert_eq!(
        read(&file, 5 * BLOCK, 10),
        &data[5 * BLOCK as usize..][..10]
    );
    assert_eq!(
        file.stats().requests,
        2,
        "the open's, and block 5 fetched here"
    );
    // Taken over (and released once its block is written, at the latest
    // when the file is dropped), not waited out: a lock waited out until
    // the read's deadline would still be there.
    drop(file);
    assert!(!lock.exists());
}

/// The holder of [`a_block_whose_fetcher_died_is_fetched_once_by_those_that_waited`],
/// run as a child process: reads block 5 (whose answer never comes), so
/// that it holds the block's fetch lock until it is killed.
fn dying_holder(spec: &str) {
    let (url, dir) = spec.split_once('|').unwrap();
    let file = builder()
        .block_size(BLOCK)
        .disk_cache(DiskCache::open(dir, 64 << 20).unwrap())
        .open(url)
        .unwrap();
    let _ = file.read_exact_at(5 * BLOCK, &mut [0; 10]);
}

#[test]
fn a_block_whose_fetcher_died_is_fetched_once_by_those_that_waited() {
    use std::sync::{Arc, Condvar, Mutex};
    const TEST: &str = "a_block_whose_fetcher_died_is_fetched_once_by_those_that_waited";
    if let Ok(spec) = std::env::var("REMFILE_DISK_DYING_HOLDER") {
        return dying_holder(&spec);
    }
    let _watchdog = remfile_testkit::watchdog(std::time::Duration::from_secs(60));
    let data = test_data(1 << 20, 75);
    // The requests for block 5 so far, and how many of them may be
    // answered: the first (the holder's) never is; the second once the
    // test has seen what the other waiter did meanwhile.
    let gate = Arc::new((Mutex::new((0usize, 0usize)), Condvar::new()));
    let server = {
        let gate = gate.clone();
        RangeServer::new(data.clone()).with_hook(move |req, reply| {
            if req.range().is_some_and(|(first, _)| first == 5 * BLOCK) {
                let (lock, changed) = &*gate;
                let mut state = lock.lock().unwrap();
                state.0 += 1;
                let n = state.0;
                changed.notify_all();
                while state.1 < n {
                    state = changed.wait(state).unwrap();
                }
            }
            reply
        })
    };
    let dir = temp_dir("dying-holder");
    read(&open(&server, "/f", &dir), 0, 1);
    let asked = |n: usize| {
        let (lock, changed) = &*gate;
        let mut state = lock.lock().unwrap();
        while state.0 < n {
            state = changed.wait(state).unwrap();
        }
    };
    let mut holder = std::process::Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture"])
        .env(
            "REMFILE_DISK_DYING_HOLDER",
            format!("{}|{}", server.url("/f"), dir.display()),
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // It holds block 5's lock: its request came.
    asked(1);
    // Two readers of their own (as two more processes), each waiting for
    // the holder's block on disk.
    let waiters = [open(&server, "/f", &dir), open(&server, "/f", &dir)];
    let waits = || waiters.iter().map(|f| f.stats().disk_waits).sum::<u64>();
    std::thread::scope(|s| {
        let reads: Vec<_> = waiters
            .iter()
            .map(|f| s.spawn(move || read(f, 5 * BLOCK, 10)))
            .collect();
        while waits() < 2 {
            std::thread::yield_now();
        }
        // Killed: its lock is let go of, its block never written.
        holder.kill().unwrap();
        holder.wait().unwrap();
        // One waiter fetches the block (its answer held back); the other
        // fetches it too, or the first took the block's lock, which the
        // other then waits for.
        asked(2);
        let lock = walk(&dir.join("blocks"))[0]
            .parent()
            .unwrap()
            .join(format!("{BLOCK}-5.lock"));
        let mine = format!("pid {}\n", std::process::id());
        loop {
            let duplicate = gate.0.lock().unwrap().0 >= 3;
            let locked = std::fs::read_to_string(&lock).is_ok_and(|t| t.contains(&mine));
            if duplicate || locked {
                break;
            }
            std::thread::yield_now();
        }
        let (lock, changed) = &*gate;
        lock.lock().unwrap().1 = usize::MAX;
        changed.notify_all();
        for r in reads {
            assert_eq!(r.join().unwrap(), &data[5 * BLOCK as usize..][..10]);
        }
    });
    let fetched = gate.0.lock().unwrap().0;
    assert_eq!(fetched, 2, "the holder's request, then one more");
}

/// A prefetch larger than the memory cache, with a disk cache big enough for
/// all of it, fetches every block (to disk, in rounds of what memory holds):
/// reading the range afterwards costs no request.
#[test]
fn a_prefetch_past_the_memory_cache_still_fills_the_disk_cache() {
    let len = 8 << 20;
    let data = test_data(len, 91);
    let server = RangeServer::new(data.clone());
    let dir = TempDir::new("disk-prefetch-past-memory");
    let file = builder()
        .block_size(BLOCK)
        .cache_capacity(1 << 20)
        .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
        .open_tail(0)
        .open(server.url("/f"))
        .unwrap();
    file.prefetch(std::iter::once(0..len as u64)).unwrap();
    let after_prefetch = file.stats();
    let mut buf = vec![0u8; BLOCK as usize];
    for pos in (0..len as u64).step_by(BLOCK as usize) {
        file.read_exact_at(pos, &mut buf).unwrap();
        assert_eq!(buf, data[pos as usize..][..BLOCK as usize]);
    }
    let cost = file.stats().since(&after_prefetch);
    assert_eq!(
        cost.requests, 0,
        "reading what was prefetched cost requests: {cost:?}"
    );
}

/// A prefetch of a range the disk cache holds already, larger than the
/// memory cache: the first memory cache's worth comes to memory (from disk),
/// the rest stays on disk, unread; nothing is fetched.
#[test]
fn a_prefetch_of_what_the_disk_holds_reads_only_what_memory_keeps() {
    let len = 8 << 20;
    let data = test_data(len, 92);
    let server = RangeServer::new(data.clone());
    let dir = TempDir::new("disk-prefetch-on-disk");
    let disk = DiskCache::open(&dir, 64 << 20).unwrap();
    let open = || {
        builder()
            .block_size(BLOCK)
            .cache_capacity(1 << 20)
            .disk_cache(disk.clone())
            .open_tail(0)
            .open(server.url("/f"))
            .unwrap()
    };
    let first = open();
    first.prefetch(std::iter::once(0..len as u64)).unwrap();
    drop(first);
    assert!(disk.flush(std::time::Duration::from_secs(10)));
    let requests = server.requests();
    let second = open();
    let before = second.stats();
    second.prefetch(std::iter::once(0..len as u64)).unwrap();
    let cost = second.stats().since(&before);
    assert_eq!(cost.requests, 0, "{cost:?}");
    assert!(
        cost.disk_bytes_read <= 1 << 20,
        "read {} bytes from disk for a 1 MiB memory cache",
        cost.disk_bytes_read
    );
    let mut buf = vec![0u8; BLOCK as usize];
    second.read_exact_at(5 << 20, &mut buf).unwrap();
    assert_eq!(buf, data[5 << 20..][..BLOCK as usize]);
    assert_eq!(
        server.requests(),
        requests + 1,
        "the warm open's one request"
    );
}

/// A read waits for another reader's fetch while that fetch lives, past
/// half its own deadline (where it gave up before) and whatever order the
/// parts land in: a long transfer is never done twice.
#[test]
fn a_fetch_that_keeps_bringing_blocks_is_waited_for_past_the_wait_bound() {
    use remfile_testkit::{After, RawServer, Reply};
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    const BLOCKS: u64 = 33;
    const STEP: Duration = Duration::from_millis(1500);
    let data = Arc::new(test_data((BLOCKS * BLOCK) as usize, 79));
    // While set, the n-th request of the next four is answered after n
    // steps: a fetch in four parts whose blocks come at 1.5, 3, 4.5, 6 s.
    let slow = Arc::new(AtomicU64::new(0));
    let served = Arc::new(Mutex::new(Vec::new()));
    let server = {
        let (data, slow, served) = (data.clone(), slow.clone(), served.clone());
        RawServer::new(move |req, out| {
            let (first, last) = req.range().expect("a range request");
            let last = last.min(data.len() as u64 - 1);
            served.lock().unwrap().push((first, last));
            let turn = slow
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .map_or(0, |n| 5 - n);
            remfile_testkit::time::late(STEP * turn as u32);
            let reply = Reply::new(206)
                .header(
                    "Content-Range",
                    format!("bytes {first}-{last}/{}", data.len()),
                )
                .header("ETag", "\"v1\"")
                .body(&data[first as usize..=last as usize]);
            let _ = out.write_all(&reply.to_bytes());
            After::KeepAlive
        })
    };
    let dir = temp_dir("progress");
    // Both opened first, each with a memory cache of its own (as another
    // process has). The waiter's reads time out after 10 s: it waits 7.5 s
    // at most; half of that was the bound before.
    let open = |timeout: u64| {
        builder()
            .block_size(BLOCK)
            .cache(remfile::BlockCache::new(64 << 20))
            .max_concurrent_requests(4)
            .split_size(8 * BLOCK)
            .read_timeout(Duration::from_secs(timeout))
            .idle_timeout(Duration::from_secs(20))
            .disk_cache(DiskCache::open(&dir, 64 << 20).unwrap())
            .open(server.url("/f"))
            .unwrap()
    };
    let (fetching, waiting) = (open(60), open(10));
    let opened = served.lock().unwrap().len();
    slow.store(4, Ordering::SeqCst);
    let rest = (BLOCK as usize)..data.len();
    std::thread::scope(|s| {
        let fetched = s.spawn(|| read(&fetching, BLOCK, rest.len()));
        // The waiter comes once the fetch is under way.
        remfile_testkit::time::wait_for(Duration::from_secs(10), || {
            slow.load(Ordering::SeqCst) == 0
        });
        // Its four requests were sent, so its claims were made.
        assert_eq!(slow.load(Ordering::SeqCst), 0, "a fetch in four parts");
        assert!(read(&waiting, BLOCK, rest.len()) == data[rest.clone()]);
        assert!(fetched.join().unwrap() == data[rest.clone()]);
    });
    let asked: Vec<_> = served.lock().unwrap()[opened..].to_vec();
    let bytes: u64 = asked.iter().map(|(first, last)| last - first + 1).sum();
    assert_eq!(bytes, rest.len() as u64, "fetched once: {asked:?}");
}

#[test]
fn files_told_apart_by_a_token_parameter_never_share_a_trusted_version() {
    let (one, two) = (test_data(1 << 20, 111), test_data(1 << 20, 112));
    let served = two.clone();
    // One download endpoint whose token picks the file (a share link), each
    // file with an ETag of its own and a long max-age.
    let server = RangeServer::new(one.clone()).with_hook(move |req, reply| {
        if req.query.as_deref() == Some("token=B") {
            remfile_testkit::range_reply(&served, Some("\"b\""), None, req)
                .header("Cache-Control", "max-age=3600")
        } else {
            reply
        }
    });
    server.set_etag(Some("\"a\""));
    server.set_cache_control(Some("max-age=3600"));
    let dir = temp_dir("token-picks-the-file");
    assert!(read(&open(&server, "/download?token=A", &dir), 0, one.len()) == one);
    let b = open(&server, "/download?token=B", &dir);
    assert!(read(&b, 0, two.len()) == two, "another file's bytes");
}

#[test]
fn a_redirect_to_another_file_of_one_etag_is_not_the_version_on_disk() {
    const ETAG: &str = "\"1700000000-100000\"";
    let (one, two) = (test_data(1 << 20, 113), test_data(1 << 20, 114));
    let target = std::sync::Arc::new(parking_lot::Mutex::new("/a"));
    let (to, served) = (target.clone(), two.clone());
    // `/latest` redirects to the newest build; `/a` and `/b` are two files
    // of one size written in the same second (one ETag, as nginx makes it).
    let server =
        RangeServer::new(one.clone()).with_hook(move |req, reply| match req.path.as_str() {
            "/latest" => remfile_testkit::Reply::redirect(302, &to.lock()),
            "/b" => remfile_testkit::range_reply(&served, Some(ETAG), None, req),
            _ => reply,
        });
    server.set_etag(Some(ETAG));
    let dir = temp_dir("redirect-one-etag");
    assert!(read(&open(&server, "/latest", &dir), 0, one.len()) == one);
    *target.lock() = "/b";
    let newest = open(&server, "/latest", &dir);
    assert!(read(&newest, 0, two.len()) == two, "the old target's bytes");
}
