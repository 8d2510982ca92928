//! Reading through a well-behaved server: request counts, ranges, bytes.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use remfile::{BlockCache, ErrorKind};
use remfile_testkit::{RangeServer, Reply, builder, test_data};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

#[test]
fn open_is_one_ranged_get_and_no_head() {
    let data = test_data(5 * MIB as usize, 1);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f.bin")).unwrap();
    assert_eq!(file.len(), data.len() as u64);
    assert_eq!(file.etag(), Some("\"v1\""));
    let log = server.log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].method, "GET");
    assert_eq!(log[0].header("range"), Some("bytes=0-1048575"));
    assert_eq!(log[0].header("accept-encoding"), Some("identity"));
    let s = file.stats();
    assert_eq!((s.requests, s.round_trips, s.bytes_fetched), (1, 1, MIB));

    // A read inside the first block costs nothing more.
    let mut buf = vec![0; 1000];
    file.read_exact_at(12_345, &mut buf).unwrap();
    assert_eq!(buf, data[12_345..13_345]);
    assert_eq!(server.requests(), 1);
}

#[test]
fn a_cached_re_read_makes_no_request() {
    let data = test_data(8 * MIB as usize, 2);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let mut buf = vec![0; 300_000];
    file.read_exact_at(3 * MIB + 17, &mut buf).unwrap();
    assert_eq!(buf, data[(3 * MIB + 17) as usize..][..300_000]);
    let before = file.stats();
    let n = server.requests();
    let mut again = vec![0; 300_000];
    file.read_exact_at(3 * MIB + 17, &mut again).unwrap();
    assert_eq!(again, buf);
    assert_eq!(server.requests(), n);
    let d = file.stats().since(&before);
    assert_eq!((d.requests, d.cache_misses), (0, 0));
    assert!(d.cache_hits >= 1);
}

#[test]
fn a_large_read_is_one_round_trip_with_little_over_fetch() {
    let data = test_data(64 * MIB as usize, 3);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let before = file.stats();
    let (pos, len) = (20 * MIB + 12_345, 23_000_000usize);
    let mut buf = vec![0; len];
    file.read_exact_at(pos, &mut buf).unwrap();
    assert!(buf == data[pos as usize..][..len], "bytes differ");
    let d = file.stats().since(&before);
    eprintln!("one 23 MB read: {d:?}");
    assert_eq!(d.round_trips, 1, "{d:?}");
    assert!(
        d.requests <= 4,
        "split into at most 4 concurrent parts: {d:?}"
    );
    let ratio = d.bytes_fetched as f64 / len as f64;
    assert!(ratio < 1.3, "over-fetch {ratio}");
    // The parts cover the needed blocks exactly, with no overlap.
    let mut ranges = server.ranges()[1..].to_vec();
    ranges.sort();
    assert_eq!(ranges.first().unwrap().0, 20 * MIB);
    for w in ranges.windows(2) {
        assert_eq!(w[0].1 + 1, w[1].0, "parts are contiguous: {ranges:?}");
    }
    assert!(ranges.last().unwrap().1 + 1 >= pos + len as u64);
}

#[test]
fn copying_16_mb_through_read_takes_few_requests() {
    let data = test_data(16 * MIB as usize, 4);
    let server = RangeServer::new(data.clone());
    let mut file = builder().open(server.url("/f")).unwrap();
    let mut out = Vec::new();
    // io::copy reads in 8 KiB pieces.
    let n = std::io::copy(&mut file, &mut out).unwrap();
    assert_eq!(n, data.len() as u64);
    assert!(out == data);
    let requests = server.requests();
    eprintln!(
        "io::copy of 16 MiB: {requests} requests, {:?}",
        server.ranges()
    );
    assert!(requests <= 12, "{requests} requests: {:?}", server.ranges());
    assert_eq!(file.stats().requests as usize, requests);
    // Read-ahead never fetches a byte twice.
    let fetched: u64 = server.ranges().iter().map(|(a, b)| b - a + 1).sum();
    assert_eq!(fetched, data.len() as u64);
}

#[test]
fn read_ahead_grows_on_sequential_misses() {
    let data = test_data(40 * MIB as usize, 5);
    let server = RangeServer::new(data.clone());
    let mut file = builder()
        .read_ahead_max(8 * MIB)
        .split_size(64 * MIB)
        .open(server.url("/f"))
        .unwrap();
    let mut buf = vec![0; 64 * KIB as usize];
    let mut pos = 0;
    while pos < 30 * MIB {
        file.read_exact(&mut buf).unwrap();
        assert!(buf == data[pos as usize..][..buf.len()]);
        pos += buf.len() as u64;
    }
    let lens: Vec<u64> = server.ranges().iter().map(|(a, b)| b - a + 1).collect();
    // Open, then the needed block plus a window of 1, 2, 4, 8, 8... MiB.
    assert_eq!(&lens[..5], &[MIB, 2 * MIB, 3 * MIB, 5 * MIB, 9 * MIB]);
}

#[test]
fn random_reads_fetch_only_their_blocks() {
    let data = test_data(32 * MIB as usize, 6);
    let server = RangeServer::new(data.clone());
    let file = builder()
        .block_size(64 * KIB)
        .open(server.url("/f"))
        .unwrap();
    for pos in [20 * MIB, 3 * MIB + 5, 27 * MIB, 9 * MIB + 100] {
        let mut buf = vec![0; 100];
        file.read_exact_at(pos, &mut buf).unwrap();
        assert_eq!(buf, data[pos as usize..][..100]);
    }
    let lens: Vec<u64> = server.ranges()[1..]
        .iter()
        .map(|(a, b)| b - a + 1)
        .collect();
    assert_eq!(lens, [64 * KIB; 4]);
}

#[test]
fn eof_reads_return_nothing_without_a_request() {
    let data = test_data(3 * MIB as usize + 7, 7);
    let server = RangeServer::new(data.clone());
    let mut file = builder().open(server.url("/f")).unwrap();
    let size = file.len();
    let mut buf = [0u8; 100];
    assert_eq!(file.read_at(size, &mut buf).unwrap(), 0);
    assert_eq!(file.read_at(size + 1000, &mut buf).unwrap(), 0);
    assert_eq!(file.read_at(u64::MAX, &mut buf).unwrap(), 0);
    let e = file.read_exact_at(size - 10, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    let e = file.read_exact_at(u64::MAX - 5, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert_eq!(server.requests(), 1);
    // A read crossing the end is clamped, and so is its request.
    assert_eq!(file.read_at(size - 10, &mut buf).unwrap(), 10);
    assert_eq!(buf[..10], data[data.len() - 10..]);
    assert_eq!(server.ranges().last().unwrap(), &(2 * MIB, size - 1));
    file.seek(SeekFrom::End(0)).unwrap();
    assert_eq!(file.read(&mut buf).unwrap(), 0);
    let io_err = file
        .seek(SeekFrom::Current(-(size as i64) - 1))
        .unwrap_err();
    assert_eq!(io_err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn a_small_file_answered_whole_with_200_is_accepted() {
    let data = test_data(1000, 8);
    let server = RangeServer::new(data.clone()).with_hook(|_, mut r| {
        if r.status == 206 {
            r = r.without("Content-Range");
            r.status = 200;
        }
        r
    });
    let file = builder()
        .block_size(4096)
        .open(server.url("/small"))
        .unwrap();
    assert_eq!(file.len(), 1000);
    let mut buf = vec![0; 1000];
    file.read_exact_at(0, &mut buf).unwrap();
    assert_eq!(buf, data);
    // Even with the cache emptied, the whole-file 200 is accepted again.
    file.cache().clear();
    let mut part = [0u8; 10];
    file.read_exact_at(990, &mut part).unwrap();
    assert_eq!(part, data[990..]);
    assert_eq!(server.requests(), 2);
}

#[test]
fn an_empty_file_opens_and_reads_nothing() {
    let server = RangeServer::new(Vec::new());
    let mut file = builder().open(server.url("/empty")).unwrap();
    assert!(file.is_empty());
    let mut out = Vec::new();
    assert_eq!(file.read_to_end(&mut out).unwrap(), 0);
    assert_eq!(server.requests(), 1);
}

#[test]
fn a_file_smaller_than_a_block_is_one_request() {
    let data = test_data(10_000, 9);
    let server = RangeServer::new(data.clone());
    let mut file = builder().open(server.url("/f")).unwrap();
    let mut out = Vec::new();
    file.read_to_end(&mut out).unwrap();
    assert_eq!(out, data);
    assert_eq!(server.log()[0].header("range"), Some("bytes=0-1048575"));
    assert_eq!(server.requests(), 1);
}

#[test]
fn odd_block_sizes_read_correctly() {
    let data = test_data(100_003, 10);
    let server = RangeServer::new(data.clone());
    for bs in [4096, 4099, 9_973, 65_536, 100_003, 200_000] {
        let mut file = builder()
            .block_size(bs)
            .cache_capacity(50_000)
            .open(server.url("/f"))
            .unwrap();
        file.seek(SeekFrom::Start(33)).unwrap();
        let mut out = vec![0; 5000];
        file.read_exact(&mut out).unwrap();
        assert_eq!(out, data[33..5033], "block size {bs}");
        let mut tail = vec![0; 7];
        file.read_exact_at(100_003 - 7, &mut tail).unwrap();
        assert_eq!(tail, data[100_003 - 7..], "block size {bs}");
    }
}

#[test]
fn clones_share_cache_and_stats_but_not_the_cursor() {
    let data = test_data(4 * MIB as usize, 11);
    let server = RangeServer::new(data.clone());
    let mut a = builder().open(server.url("/f")).unwrap();
    a.seek(SeekFrom::Start(100)).unwrap();
    let mut b = a.clone();
    let mut x = [0u8; 10];
    a.read_exact(&mut x).unwrap();
    assert_eq!(a.stream_position().unwrap(), 110);
    assert_eq!(b.stream_position().unwrap(), 100);
    let mut y = [0u8; 10];
    b.read_exact(&mut y).unwrap();
    assert_eq!(x, y);
    assert_eq!(x, data[100..110]);
    assert_eq!(a.stats(), b.stats());
}

#[test]
fn a_cache_s_size_counts_what_was_just_read() {
    let data = test_data(4 * MIB as usize, 14);
    let server = RangeServer::new(data);
    let cache = remfile::BlockCache::new(64 * MIB);
    let file = builder()
        .block_size(MIB)
        .read_ahead_max(0)
        .cache(cache.clone())
        .open(server.url("/f"))
        .unwrap();
    let mut buf = vec![0; 3 * MIB as usize];
    file.read_exact_at(MIB, &mut buf).unwrap();
    // Without waiting for the cache's own upkeep.
    assert!(
        cache.weighted_size() >= 3 * MIB,
        "{}",
        cache.weighted_size()
    );
    assert!(cache.block_count() >= 3, "{}", cache.block_count());
}

#[test]
fn a_shared_reference_reads_and_seeks_on_the_file_s_cursor() {
    let data = test_data(MIB as usize, 13);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let mut by_ref = &file;
    by_ref.seek(SeekFrom::End(-20)).unwrap();
    let mut tail = Vec::new();
    by_ref.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, data[data.len() - 20..]);
    // The same cursor as the file's own.
    let mut file = file;
    assert_eq!(file.stream_position().unwrap(), data.len() as u64);
    file.seek(SeekFrom::Start(7)).unwrap();
    let mut x = [0u8; 5];
    (&file).read_exact(&mut x).unwrap();
    assert_eq!(x, data[7..12]);
    assert!((&file).seek(SeekFrom::Current(-100)).is_err());
    // std::io::copy takes `&RemoteFile` as a reader.
    (&file).seek(SeekFrom::Start(0)).unwrap();
    let mut all = Vec::new();
    std::io::copy(&mut &file, &mut all).unwrap();
    assert_eq!(all, data);
}

#[test]
fn eight_threads_fetch_each_block_once() {
    let data = Arc::new(test_data(24 * MIB as usize, 12));
    let server = RangeServer::new(data.to_vec());
    let file = builder().read_ahead_max(0).open(server.url("/f")).unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (file, data) = (file.clone(), data.clone());
            s.spawn(move || {
                // Overlapping ranges, different per thread.
                for k in 0..6u64 {
                    let pos = ((t * 3 + k * 5) % 20) * MIB + t * 1000;
                    let mut buf = vec![0; 3 * MIB as usize];
                    file.read_exact_at(pos, &mut buf).unwrap();
                    assert!(
                        buf == data[pos as usize..][..buf.len()],
                        "thread {t} read {k}"
                    );
                }
            });
        }
    });
    let mut blocks = std::collections::HashMap::new();
    for (a, b) in server.ranges() {
        for blk in a / MIB..=b / MIB {
            *blocks.entry(blk).or_insert(0) += 1;
        }
    }
    assert!(blocks.values().all(|&n| n == 1), "refetched: {blocks:?}");
    assert_eq!(
        file.stats().requests as usize,
        server.requests(),
        "{:?} {:?}",
        file.stats(),
        server.ranges()
    );
}

#[test]
fn the_cache_never_holds_more_than_its_capacity() {
    let data = test_data(20 * MIB as usize, 13);
    let server = RangeServer::new(data.clone());
    let mut file = builder()
        .block_size(64 * KIB)
        .cache_capacity(MIB)
        .open(server.url("/f"))
        .unwrap();
    let mut out = Vec::new();
    file.read_to_end(&mut out).unwrap();
    assert!(out == data);
    // A single read larger than the whole cache still returns the right bytes.
    let mut big = vec![0; 5 * MIB as usize];
    file.read_exact_at(7 * MIB, &mut big).unwrap();
    assert!(big == data[7 * MIB as usize..][..big.len()]);
    file.cache().run_pending_tasks();
    assert!(
        file.cache().weighted_size() <= MIB,
        "{}",
        file.cache().weighted_size()
    );
    assert!(file.cache().weighted_size() > 0);
}

#[test]
fn a_shared_cache_serves_a_second_open_of_the_same_file() {
    let data = test_data(6 * MIB as usize, 14);
    let server = RangeServer::new(data.clone());
    let cache = BlockCache::new(64 * MIB);
    let b = builder().cache(cache.clone());
    let one = b.open(server.url("/f")).unwrap();
    let mut buf = vec![0; 2 * MIB as usize];
    one.read_exact_at(3 * MIB, &mut buf).unwrap();
    let n = server.requests();
    let two = b.open(server.url("/f")).unwrap();
    let mut again = vec![0; 2 * MIB as usize];
    two.read_exact_at(3 * MIB, &mut again).unwrap();
    assert_eq!(buf, again);
    assert_eq!(
        server.requests(),
        n + 1,
        "only the second open's own request"
    );
    // Another file under the same cache does not see these blocks.
    let other = b.open(server.url("/g")).unwrap();
    other.read_exact_at(3 * MIB, &mut again).unwrap();
    assert_eq!(server.requests(), n + 3);
}

#[test]
fn user_headers_and_agent_are_sent() {
    let server = RangeServer::new(test_data(1000, 15));
    let _file = builder()
        .header("Authorization", "Bearer t0ken")
        .user_agent("my-tool/2")
        .open(server.url("/f"))
        .unwrap();
    let log = server.log();
    assert_eq!(log[0].header("authorization"), Some("Bearer t0ken"));
    assert_eq!(log[0].header("user-agent"), Some("my-tool/2"));
}

#[test]
fn a_caller_supplied_agent_is_used() {
    let server = RangeServer::new(test_data(2 * MIB as usize, 16));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .proxy(None)
        .build()
        .new_agent();
    let file = builder().agent(agent).open(server.url("/f")).unwrap();
    let mut buf = [0u8; 10];
    file.read_exact_at(MIB + 5, &mut buf).unwrap();
    assert_eq!(server.requests(), 2);
}

#[test]
fn connections_are_reused() {
    let data = test_data(8 * MIB as usize, 17);
    let server = RangeServer::new(data);
    let file = builder()
        .block_size(64 * KIB)
        .read_ahead_max(0)
        .open(server.url("/f"))
        .unwrap();
    let mut buf = [0u8; 10];
    for i in 1..50u64 {
        file.read_exact_at(i * 128 * KIB, &mut buf).unwrap();
    }
    assert_eq!(server.requests(), 50);
    assert_eq!(
        server.connections(),
        1,
        "sequential requests share one connection"
    );
}

#[cfg(feature = "positioned-io")]
#[test]
fn positioned_io_traits_work() {
    use positioned_io::{ReadAt, Size};
    let data = test_data(3 * MIB as usize, 18);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    assert_eq!(file.size().unwrap(), Some(data.len() as u64));
    let mut buf = [0u8; 64];
    ReadAt::read_exact_at(&file, 2 * MIB + 1, &mut buf).unwrap();
    assert_eq!(buf, data[(2 * MIB + 1) as usize..][..64]);
    let e = ReadAt::read_exact_at(&file, 3 * MIB - 1, &mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[test]
fn prefetch_fetches_scattered_ranges_in_one_round() {
    let data = test_data(32 * MIB as usize, 19);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let before = file.stats();
    let wanted = [
        5 * MIB + 10..5 * MIB + 5000,
        20 * MIB..22 * MIB,
        31 * MIB..40 * MIB,
    ];
    file.prefetch(wanted.clone()).unwrap();
    let d = file.stats().since(&before);
    assert_eq!((d.requests, d.round_trips), (3, 1), "{:?}", server.ranges());
    assert_eq!(server.ranges()[1..].len(), 3);
    let n = server.requests();
    for r in &wanted[..2] {
        let mut buf = vec![0; (r.end - r.start) as usize];
        file.read_exact_at(r.start, &mut buf).unwrap();
        assert!(buf == data[r.start as usize..r.end as usize]);
    }
    assert_eq!(server.requests(), n, "the reads hit the cache");
    // Already cached: nothing to do.
    file.prefetch(wanted.clone()).unwrap();
    assert_eq!(server.requests(), n);
    // A failure of a prefetch is reported.
    server.set_hook(|_, _| remfile_testkit::Reply::new(404));
    let e = file
        .prefetch([9 * MIB..9 * MIB + 1, 30 * MIB..30 * MIB + 1])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(404));
}

#[test]
fn a_prefetch_shares_its_requests_among_runs_for_one_round() {
    let data = test_data(40 * MIB as usize, 23);
    let server = RangeServer::new(data);
    let file = builder().open(server.url("/f")).unwrap();
    file.read_exact_at(8 * MIB, &mut [0; 1]).unwrap();
    let before = file.stats();
    // Runs of 7 and 16 blocks beside the cached blocks 0 (from the open) and
    // 8: with 4 requests at once, 1 + 3 parts in one round, not 2 + 4 in two.
    file.prefetch(std::iter::once(0..25 * MIB)).unwrap();
    let d = file.stats().since(&before);
    assert_eq!((d.requests, d.round_trips), (4, 1));
    let mut ranges = server.ranges()[2..].to_vec();
    ranges.sort_unstable();
    let parts = [1..8, 9..15, 15..20, 20..25].map(|r| (r.start * MIB, r.end * MIB - 1));
    assert_eq!(ranges, parts);
    assert_eq!(
        d.bytes_fetched,
        23 * MIB,
        "cached blocks are not fetched again"
    );
}

#[test]
fn a_prefetch_of_many_runs_merges_the_closest_ones() {
    let data = test_data(64 * MIB as usize, 29);
    let server = RangeServer::new(data.clone());
    let file = builder()
        .coalesce_gap(2 * MIB)
        .open(server.url("/f"))
        .unwrap();
    // Eight one-block runs, 4 requests at once: the gaps of 1 block merge
    // (refetching nothing: those blocks are not cached), those of 10 do not.
    let starts = [2, 4, 6, 8, 20, 30, 40, 42];
    file.prefetch(starts.map(|b| b * MIB..b * MIB + 100))
        .unwrap();
    let mut ranges = server.ranges()[1..].to_vec();
    ranges.sort_unstable();
    let expected = [2..9, 20..21, 30..31, 40..43].map(|r| (r.start * MIB, r.end * MIB - 1));
    assert_eq!(ranges, expected);
    let d = file.stats();
    assert_eq!((d.requests - 1, d.round_trips - 1), (4, 1));
    let n = server.requests();
    for b in starts {
        let mut buf = vec![0; 100];
        file.read_exact_at(b * MIB, &mut buf).unwrap();
        assert!(buf == data[(b * MIB) as usize..(b * MIB + 100) as usize]);
    }
    assert_eq!(server.requests(), n, "every range was cached");
}

#[test]
fn open_tail_fetches_the_end_beside_the_first_block() {
    let size = 10 * MIB + MIB / 2;
    let data = test_data(size as usize, 31);
    let server = RangeServer::new(data.clone());
    let file = builder().open_tail(2 * MIB).open(server.url("/f")).unwrap();
    let mut asked: Vec<String> = server
        .log()
        .iter()
        .map(|r| r.header("range").unwrap().to_owned())
        .collect();
    asked.sort();
    assert_eq!(asked, ["bytes=-2097152", "bytes=0-1048575"]);
    let s = file.stats();
    assert_eq!((s.requests, s.round_trips), (2, 1), "sent at the same time");
    // The whole blocks in the last 2 MiB (9 and the partial 10) are cached;
    // block 8, partly in the tail, is not.
    let mut buf = vec![0; (size - 9 * MIB) as usize];
    file.read_exact_at(9 * MIB, &mut buf).unwrap();
    assert!(buf == data[9 * MIB as usize..]);
    assert_eq!(server.requests(), 2);
    file.read_exact_at(9 * MIB - 1, &mut [0; 1]).unwrap();
    assert_eq!(server.requests(), 3);
}

#[test]
fn a_tail_that_does_not_match_the_head_is_dropped() {
    let data = test_data(4 * MIB as usize, 37);
    let server = RangeServer::new(data.clone());
    // The suffix request sees another version of the file.
    server.set_hook(|req, reply| {
        if req
            .header("range")
            .is_some_and(|r| r.starts_with("bytes=-"))
        {
            reply.header("ETag", "\"v2\"")
        } else {
            reply
        }
    });
    let file = builder().open_tail(MIB).open(server.url("/f")).unwrap();
    assert_eq!(file.etag(), Some("\"v1\""));
    let mut buf = vec![0; MIB as usize];
    server.set_hook(|_, reply| reply);
    file.read_exact_at(3 * MIB, &mut buf).unwrap();
    assert!(buf == data[3 * MIB as usize..]);
    assert_eq!(server.requests(), 3, "the tail was fetched again");
}

#[test]
fn a_failed_tail_does_not_fail_the_open() {
    for status in [416, 500, 200] {
        let data = test_data(3 * MIB as usize, 41);
        let server = RangeServer::new(data.clone());
        server.set_hook(move |req, reply| {
            if req
                .header("range")
                .is_some_and(|r| r.starts_with("bytes=-"))
            {
                remfile_testkit::Reply::new(status).body(vec![0; 3 * MIB as usize])
            } else {
                reply
            }
        });
        let file = builder().open_tail(MIB).open(server.url("/f")).unwrap();
        let mut buf = vec![0; MIB as usize];
        file.read_exact_at(2 * MIB, &mut buf).unwrap();
        assert!(buf == data[2 * MIB as usize..], "status {status}");
        assert_eq!(file.stats().requests, 3, "status {status}");
    }
}

#[test]
fn recycled_block_buffers_never_show_old_bytes() {
    // Two files streamed in turn through one small cache: evicted blocks'
    // buffers are reused for new blocks, of the other file too.
    let (a, b) = (
        test_data(12 * MIB as usize, 43),
        test_data(12 * MIB as usize, 47),
    );
    let (sa, sb) = (RangeServer::new(a.clone()), RangeServer::new(b.clone()));
    let cache = BlockCache::new(8 * MIB);
    let open = |s: &RangeServer| {
        builder()
            .cache(cache.clone())
            .read_ahead_max(2 * MIB)
            .open(s.url("/f"))
            .unwrap()
    };
    let (fa, fb) = (open(&sa), open(&sb));
    let mut buf = vec![0u8; 300_000];
    for round in 0..3u64 {
        for (file, data) in [(&fa, &a), (&fb, &b)] {
            let mut pos = round * 1000;
            while pos < data.len() as u64 {
                let n = file.read_at(pos, &mut buf).unwrap();
                assert!(buf[..n] == data[pos as usize..][..n], "at {pos}");
                pos += n as u64;
            }
        }
    }
    assert!(cache.weighted_size() <= 8 * MIB);
}

#[test]
fn read_vectored_at_fetches_scattered_ranges_in_one_round() {
    let data = test_data(64 * MIB as usize, 53);
    let server = RangeServer::new(data.clone());
    // A cache far smaller than the ranges: the bytes come from the fetched
    // blocks, not from a later lookup that would miss.
    let file = builder()
        .cache(BlockCache::new(2 * MIB))
        .open(server.url("/f"))
        .unwrap();
    let before = file.stats();
    let wanted = [
        40 * MIB + 5..42 * MIB + 9,
        3 * MIB..3 * MIB + 10,
        20 * MIB - 100..20 * MIB + 100,
        3 * MIB + 5..3 * MIB + 6,
        60 * MIB..60 * MIB,
    ];
    let got = file.read_ranges(&wanted).unwrap();
    for (r, bytes) in wanted.iter().zip(&got) {
        assert!(bytes[..] == data[r.start as usize..r.end as usize], "{r:?}");
    }
    let d = file.stats().since(&before);
    // Blocks 40-42, 3, 19-20: three runs, no read-ahead, one round.
    assert_eq!((d.requests, d.round_trips), (3, 1), "{d:?}");
    assert_eq!(d.bytes_fetched, 6 * MIB);
    assert_eq!(d.bytes_read, 2 * MIB + 4 + 10 + 200 + 1);

    // Past the end: an error before any request. A range that ends before it
    // starts is empty, as in Rust.
    let n = server.requests();
    let (start, end) = (5, 3);
    let reversed = file
        .read_ranges(std::slice::from_ref(&(start..end)))
        .unwrap();
    assert_eq!(reversed, [Vec::<u8>::new()]);
    let e = file
        .read_ranges(&[0..10, 64 * MIB - 1..64 * MIB + 1])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    let mut buf = [0u8; 2];
    let e = file
        .read_vectored_at(&mut [(u64::MAX, &mut buf[..])])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert_eq!(server.requests(), n);
}

#[test]
fn a_large_uncached_read_goes_straight_to_the_callers_buffer() {
    let data = test_data(40 * MIB as usize, 59);
    let server = RangeServer::new(data.clone());
    let file = builder()
        .cache_bypass(8 * MIB)
        .open(server.url("/f"))
        .unwrap();
    let mut buf = vec![0u8; 20 * MIB as usize];
    let pos = 10 * MIB + 3;
    file.read_exact_at(pos, &mut buf).unwrap();
    assert!(buf == data[pos as usize..][..buf.len()]);
    let d = file.stats();
    // Exactly the bytes asked, in four parts at once, nothing cached.
    assert_eq!((d.requests - 1, d.round_trips - 1), (4, 1));
    assert_eq!(d.bytes_fetched - MIB, 20 * MIB);
    let mut ranges = server.ranges()[1..].to_vec();
    ranges.sort_unstable();
    let part = 5 * MIB;
    let expected: Vec<(u64, u64)> = (0..4)
        .map(|i| (pos + i * part, pos + (i + 1) * part - 1))
        .collect();
    assert_eq!(ranges, expected);
    let n = server.requests();
    file.read_exact_at(pos, &mut buf[..10]).unwrap();
    assert_eq!(server.requests(), n + 1, "the bytes were not cached");

    // A read whose blocks are partly cached takes those from the cache and
    // fetches only the rest, still straight into the caller's buffer (its
    // bytes are never held twice).
    let n = server.requests();
    let fetched = file.stats().bytes_fetched;
    file.read_exact_at(pos, &mut buf).unwrap();
    assert!(buf == data[pos as usize..][..buf.len()]);
    let cached_end = 11 * MIB;
    let asked: Vec<(u64, u64)> = server.ranges()[n..].to_vec();
    assert!(
        asked.iter().all(|&(first, _)| first >= cached_end),
        "{asked:?}"
    );
    assert_eq!(
        file.stats().bytes_fetched - fetched,
        pos + 20 * MIB - cached_end,
        "only the bytes of the blocks not cached"
    );
}

#[test]
fn a_tail_longer_than_the_file_is_harmless() {
    let data = test_data(300_000, 61);
    let server = RangeServer::new(data.clone());
    let file = builder()
        .block_size(64 * KIB)
        .open_tail(10 * MIB)
        .open(server.url("/f"))
        .unwrap();
    let mut buf = vec![0u8; data.len()];
    file.read_exact_at(0, &mut buf).unwrap();
    assert!(buf == data);
    assert_eq!(server.requests(), 2, "the tail held the whole file");
}

#[test]
fn a_background_prefetch_is_joined_by_the_read_that_needs_it() {
    let data = test_data(8 * MIB as usize, 41);
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let started =
        file.prefetch_in_background(std::iter::once(5 * MIB + 10..5 * MIB + 20), u64::MAX);
    assert_eq!(started, MIB, "the one block covering the range");
    // The read waits for that fetch (or finds its block cached), or fetches
    // the block itself if it comes before a worker took the guess, which
    // then finds it cached: the block is never fetched twice.
    let mut buf = vec![0; 100];
    file.read_exact_at(5 * MIB + 10, &mut buf).unwrap();
    assert!(buf == data[5 * MIB as usize + 10..5 * MIB as usize + 110]);
    assert_eq!(server.requests(), 2, "{:?}", server.ranges());
    assert!(file.wait_for_background_fetches(std::time::Duration::from_secs(20)));
    assert_eq!(file.stats().requests, 2, "the guess counted once it ended");
    assert_eq!(
        file.prefetch_in_background(std::iter::once(5 * MIB..6 * MIB), u64::MAX),
        0,
        "cached"
    );
}

#[test]
fn a_failed_guess_never_fails_a_read() {
    let data = test_data(8 * MIB as usize, 42);
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = refused.clone();
    let server = RangeServer::new(data.clone());
    let file = builder().open(server.url("/f")).unwrap();
    let counted = file.clone();
    let misses = file.stats().cache_misses;
    server.set_hook(move |req, r| {
        let guessed = req.range() == Some((3 * MIB, 4 * MIB - 1));
        if guessed && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
            // Failed once the read below missed the cache, and so joined
            // the guess under way (a watchdog, not an order, past 20 s).
            let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while counted.stats().cache_misses == misses && std::time::Instant::now() < until {
                std::thread::yield_now();
            }
            Reply::new(404)
        } else {
            r
        }
    });
    assert_eq!(
        file.prefetch_in_background(std::iter::once(3 * MIB..3 * MIB + 1), u64::MAX),
        MIB
    );
    // The guess is under way once its request reached the server (a read
    // before a worker took it would fetch the block itself).
    remfile_testkit::time::eventually(
        "the guess started",
        std::time::Duration::from_secs(20),
        || server.requests() >= 2,
    );
    let mut buf = vec![0; 1000];
    file.read_exact_at(3 * MIB, &mut buf).unwrap();
    assert!(buf == data[3 * MIB as usize..3 * MIB as usize + 1000]);
    assert!(refused.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        server.requests(),
        3,
        "open, the failed guess, the read's own"
    );
}

#[test]
fn a_background_prefetch_fetches_no_gap_between_its_guesses() {
    let data = test_data(16 * MIB as usize, 44);
    let server = RangeServer::new(data);
    let file = builder().open(server.url("/f")).unwrap();
    // Six blocks one apart: a read would fetch the gaps too (two requests
    // are cheaper than six), but the bytes between guesses are wanted by
    // nobody.
    let guesses: Vec<_> = (0..6)
        .map(|i| (2 + 2 * i) * MIB..(2 + 2 * i) * MIB + 1)
        .collect();
    assert_eq!(file.prefetch_in_background(guesses, u64::MAX), 6 * MIB);
    assert!(file.wait_for_background_fetches(std::time::Duration::from_secs(20)));
    let stats = file.stats();
    assert_eq!(
        (stats.requests, stats.bytes_fetched),
        (1 + 6, MIB + 6 * MIB),
        "{stats:?}"
    );
}

#[test]
fn a_background_prefetch_stays_within_its_bytes() {
    let data = test_data(16 * MIB as usize, 43);
    let server = RangeServer::new(data);
    let file = builder().open(server.url("/f")).unwrap();
    let started = file.prefetch_in_background([2 * MIB..12 * MIB, 20 * MIB..30 * MIB], 3 * MIB + 5);
    assert_eq!(started, 3 * MIB);
    assert_eq!(
        file.prefetch_in_background(std::iter::once(2 * MIB..3 * MIB), MIB - 1),
        0
    );
}

#[test]
fn an_exact_read_past_the_end_is_refused_without_a_request() {
    let data = test_data(100_000, 91);
    let server = RangeServer::new(data);
    let file = builder().open(server.url("/f?sig=secret")).unwrap();
    let before = server.requests();
    let mut buf = vec![0; 10];
    let e = file.read_exact_at(99_995, &mut buf).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert_eq!(e.io_kind(), std::io::ErrorKind::UnexpectedEof);
    assert_eq!(server.requests(), before, "no request");
    // Says so: it names the file, no request, and no signature.
    let shown = e.to_string();
    assert!(shown.contains("100000 bytes"), "{shown}");
    assert!(
        !shown.contains("GET") && !shown.contains("secret"),
        "{shown}"
    );
}

/// What plain `cargo test` leaves out, listed as ignored tests whose reason
/// says how to run it.
#[cfg(not(feature = "hdf5"))]
mod feature_gates {
    #[test]
    #[ignore = "the HDF5 driver tests (tests/hdf5.rs, tests/hdf5_release.rs) need the `hdf5` \
                feature and libhdf5-dev: `cargo test --features hdf5`, or `bash .ci/run` for everything"]
    fn hdf5_driver_tests() {
        panic!("this build has no `hdf5` feature: run `cargo test --features hdf5`");
    }
}

#[test]
fn a_traced_file_lists_the_requests_the_server_saw_and_their_rounds() {
    let data = test_data(8 * MIB as usize, 9);
    let server = RangeServer::new(data.clone());
    let untraced = builder().open(server.url("/f")).unwrap();
    untraced.read_exact_at(5 * MIB, &mut [0; 10]).unwrap();
    assert!(untraced.traced_requests().is_empty(), "off unless asked");
    let before = server.requests();
    let file = builder()
        .block_size(64 * KIB)
        .trace_requests(true)
        .open(server.url("/f"))
        .unwrap();
    // One read, then two far apart at once: one round each.
    file.read_exact_at(3 * MIB, &mut [0; 100]).unwrap();
    file.read_ranges(&[MIB..MIB + 10, 6 * MIB..6 * MIB + 10])
        .unwrap();
    let traced = file.traced_requests();
    let log = server.log();
    let mut seen: Vec<String> = log[before..]
        .iter()
        .filter_map(|r| {
            r.header("range")
                .map(|h| h.trim_start_matches("bytes=").to_owned())
        })
        .collect();
    let mut listed: Vec<String> = traced.iter().map(|r| r.requested.to_string()).collect();
    seen.sort();
    listed.sort();
    assert_eq!(listed, seen, "each request the server saw, as it saw it");
    assert!(
        traced
            .iter()
            .all(|r| r.status == Some(206) && r.answered >= r.sent)
    );
    let rounds = remfile::trace::rounds(&traced);
    let opening = traced
        .iter()
        .position(|r| r.requested.within(data.len() as u64).start == 0)
        .unwrap();
    assert_eq!(rounds[opening], 0);
    // The trace's rounds are as answers came: never fewer than the reads
    // waited for one after the other, at most one per request.
    let count = rounds.iter().max().unwrap() + 1;
    assert!((3..=traced.len()).contains(&count), "{traced:?}");
}
