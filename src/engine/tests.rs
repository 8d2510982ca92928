//! The engine over an in-memory source: what readers that meet one
//! another's fetches get, and what they ask for, with no socket and no
//! server thread between them (a fetch is held until the test lets it go);
//! and what a link's timing makes it do, on the source's clock.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::cache::BlockCache;
use crate::disk::DiskCache;
use crate::engine::memory_source::MemorySource;
use crate::error::ErrorKind;
use crate::file::RemoteFile;
use crate::open::open_over;
use crate::options::Builder;

pub(crate) const BLOCK: u64 = 64 << 10;

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 251) as u8).collect()
}

pub(crate) fn builder() -> Builder {
    RemoteFile::builder().block_size(BLOCK)
}

/// A file of `blocks` blocks in memory, opened with `builder`: its bytes,
/// its source and the file.
pub(crate) fn file_over(
    blocks: u64,
    builder: &Builder,
) -> (Vec<u8>, Arc<MemorySource>, RemoteFile) {
    let bytes = data((blocks * BLOCK) as usize);
    let source = MemorySource::new(bytes.clone());
    let file = open_over(builder, Arc::clone(&source));
    (bytes, source, file)
}

/// The ranges `source` was asked for, in order of position (the lanes of
/// one fetch may ask in either order).
pub(crate) fn asked_by_position(source: &MemorySource) -> Vec<Range<u64>> {
    let mut asked = source.asked();
    asked.sort_by_key(|r| r.start);
    asked
}

/// A disk cache directory of one test's own, removed when it is dropped.
pub(crate) struct TempDisk(tempfile::TempDir);

impl TempDisk {
    pub(crate) fn new(test: &str) -> TempDisk {
        TempDisk(tempfile::Builder::new().prefix(test).tempdir().unwrap())
    }

    /// A builder with a memory cache of its own (as another process has)
    /// over this directory.
    pub(crate) fn builder(&self) -> Builder {
        builder()
            .read_ahead_max(0)
            .cache(BlockCache::new(64 << 20))
            .disk_cache(self.cache())
    }

    /// The directory's cache (one per directory in a process).
    fn cache(&self) -> DiskCache {
        DiskCache::open(self.0.path(), 64 << 20).unwrap()
    }
}

pub(crate) fn read(file: &RemoteFile, pos: u64, len: usize) -> crate::error::Result<Vec<u8>> {
    let mut buf = vec![0; len];
    file.read_exact_at(pos, &mut buf).map(|()| buf)
}

/// Runs `first` while `source` holds its fetches, then `second` once
/// `first`'s fetch is held, then lets the fetches go once `second` has
/// reached its wait (`reached` says so): what each returned.
fn meet<A: Send, B: Send>(
    source: &MemorySource,
    first: impl FnOnce() -> A + Send,
    second: impl FnOnce() -> B + Send,
    reached: impl Fn() -> bool,
) -> (A, B) {
    source.shut();
    std::thread::scope(|s| {
        let first = s.spawn(first);
        source.wait_until_holding(1);
        let second = s.spawn(second);
        wait_until("the second reader waits", reached);
        source.open();
        (first.join().unwrap(), second.join().unwrap())
    })
}

/// Waits until `done`; panics after 20 s (a test that waits less fails,
/// never hangs).
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        std::thread::yield_now();
    }
}

/// Whether a reader of `file` waits for another's fetch of block `index`.
fn waits_for(file: &RemoteFile, index: u64) -> impl Fn() -> bool + '_ {
    move || file.engine().waiting_for(index) > 0
}

#[test]
fn readers_of_a_block_in_flight_share_its_one_fetch() {
    let (bytes, source, file) = file_over(4, &builder().read_ahead_max(0));
    let (first, second) = meet(
        &source,
        || read(&file, 100, 1000),
        || read(&file, 5000, 10),
        waits_for(&file, 0),
    );
    assert_eq!(first.unwrap(), &bytes[100..1100]);
    assert_eq!(second.unwrap(), &bytes[5000..5010]);
    assert_eq!(source.asked().len(), 1, "one fetch for both");
    assert_eq!(source.asked()[0], 0..BLOCK);
}

#[test]
fn a_failed_fetch_reaches_every_reader_waiting_for_it_and_the_next_read_fetches_again() {
    let (bytes, source, file) = file_over(2, &builder().read_ahead_max(0));
    source.fail_next(ErrorKind::HttpStatus(503));
    let (first, second) = meet(
        &source,
        || read(&file, 0, 10),
        || read(&file, 20, 10),
        waits_for(&file, 0),
    );
    for read in [first, second] {
        assert_eq!(read.unwrap_err().kind(), ErrorKind::HttpStatus(503));
    }
    assert_eq!(read(&file, 0, 10).unwrap(), &bytes[..10]);
    assert_eq!(source.asked(), [0..BLOCK, 0..BLOCK]);
}

#[test]
fn a_read_of_blocks_a_background_fetch_brings_waits_for_it_and_costs_one_round() {
    let (bytes, source, file) = file_over(8, &builder().read_ahead_max(0));
    let (queued, read) = meet(
        &source,
        || file.prefetch_in_background(std::iter::once(0..4 * BLOCK), u64::MAX),
        || read(&file, 3 * BLOCK + 5, 100),
        waits_for(&file, 3),
    );
    assert_eq!(queued, 4 * BLOCK);
    assert_eq!(read.unwrap(), &bytes[3 * BLOCK as usize + 5..][..100]);
    assert!(file.wait_for_background_fetches(Duration::from_secs(10)));
    assert_eq!(source.asked().len(), 1, "the background fetch only");
    assert_eq!(source.asked()[0], 0..4 * BLOCK);
    let stats = file.stats();
    assert_eq!((stats.requests, stats.round_trips), (1, 1));
}

#[test]
fn a_read_of_a_block_a_queued_background_fetch_brings_makes_that_fetch_in_one_round() {
    let (bytes, source, file) = file_over(8, &builder().read_ahead_max(0));
    let engine = file.engine();
    // No worker has taken it yet (the process's workers may all be busy).
    let queued = engine.queue_for_no_worker(Some(2 * BLOCK..6 * BLOCK));
    let got = read(&file, 3 * BLOCK + 5, 100).unwrap();
    assert_eq!(got, &bytes[3 * BLOCK as usize + 5..][..100]);
    let asked = asked_by_position(&source);
    let brought = asked.first().unwrap().start..asked.last().unwrap().end;
    assert_eq!(brought, 2 * BLOCK..6 * BLOCK, "the whole fetch: {asked:?}");
    assert_eq!(file.stats().round_trips, 1);
    // The rest of it is here: the next block read, and the worker when it
    // comes, ask for nothing.
    let requests = asked.len();
    assert_eq!(
        read(&file, 5 * BLOCK, 10).unwrap(),
        &bytes[5 * BLOCK as usize..][..10]
    );
    engine.run_queued(&queued);
    assert_eq!(source.asked().len(), requests);
    assert_eq!(file.stats().round_trips, 1);
}

#[test]
fn a_read_that_takes_a_queued_fetch_fetches_its_own_blocks_with_it_in_one_round() {
    // One request at a time for a read: its own blocks and the fetch's
    // runs would merge, gaps and all, were they not another's fetch.
    let one_at_a_time = builder().read_ahead_max(0).max_concurrent_requests(1);
    let (bytes, source, file) = file_over(8, &one_at_a_time);
    let queued = file
        .engine()
        .queue_for_no_worker([2 * BLOCK..4 * BLOCK, 6 * BLOCK..7 * BLOCK]);
    // Blocks 1 and 2: the first its own, the second the queued fetch's.
    let got = read(&file, BLOCK + 7, BLOCK as usize).unwrap();
    assert_eq!(got, &bytes[BLOCK as usize + 7..][..BLOCK as usize]);
    let asked = asked_by_position(&source);
    // Not block 5, between the fetch's two runs: nobody wants it.
    assert_eq!(asked, [BLOCK..4 * BLOCK, 6 * BLOCK..7 * BLOCK]);
    assert_eq!(file.stats().round_trips, 1);
    file.engine().run_queued(&queued);
    assert_eq!(source.asked().len(), 2, "the worker found it taken");
}

#[test]
fn a_reader_waiting_for_a_block_another_read_took_from_the_queue_fetches_it_if_that_fails() {
    let (bytes, source, file) = file_over(8, &builder().read_ahead_max(0));
    file.engine()
        .queue_for_no_worker([2 * BLOCK..3 * BLOCK, 5 * BLOCK..7 * BLOCK]);
    // The taking read's part for blocks 5 and 6 fails; the other reader,
    // waiting for block 6, fetches it itself rather than fail.
    source.fail_at(5 * BLOCK, ErrorKind::HttpStatus(503));
    let (taker, waiter) = meet(
        &source,
        || read(&file, 2 * BLOCK, 10),
        || read(&file, 6 * BLOCK + 10, 10),
        waits_for(&file, 6),
    );
    assert_eq!(taker.unwrap(), &bytes[2 * BLOCK as usize..][..10]);
    assert_eq!(waiter.unwrap(), &bytes[6 * BLOCK as usize + 10..][..10]);
    let asked = asked_by_position(&source);
    assert_eq!(
        asked,
        [
            2 * BLOCK..3 * BLOCK,
            5 * BLOCK..7 * BLOCK,
            6 * BLOCK..7 * BLOCK
        ]
    );
}

#[test]
fn a_background_fetch_leaves_out_the_blocks_of_the_read_that_queued_it() {
    let (bytes, source, file) = file_over(8, &builder().read_ahead_max(0));
    // What a chunk read does: queue the chunks after it (the first shares
    // the read's last block), then read. The read fetches its own blocks
    // alone and leaves the rest to the worker.
    let queued = file.engine().prefetch_in_background(
        Some(2 * BLOCK - 10..5 * BLOCK),
        u64::MAX,
        None,
        BLOCK..2 * BLOCK - 10,
    );
    assert_eq!(queued, 3 * BLOCK, "blocks 2 to 4");
    assert_eq!(
        read(&file, BLOCK, 100).unwrap(),
        &bytes[BLOCK as usize..][..100]
    );
    assert!(file.wait_for_background_fetches(Duration::from_secs(10)));
    let asked = asked_by_position(&source);
    assert_eq!(asked[0], BLOCK..2 * BLOCK, "{asked:?}");
    assert_eq!(asked.last().unwrap().end, 5 * BLOCK);
    assert!(asked[1..].iter().all(|r| r.start >= 2 * BLOCK), "{asked:?}");
}

#[test]
fn a_queued_background_fetch_a_reader_did_not_need_is_made_by_its_worker() {
    let (bytes, source, file) = file_over(8, &builder().read_ahead_max(0));
    let engine = file.engine();
    let queued = engine.queue_for_no_worker(Some(4 * BLOCK..6 * BLOCK));
    assert_eq!(read(&file, 10, 10).unwrap(), &bytes[10..20]);
    assert_eq!(source.asked().len(), 1, "not the queued fetch's blocks");
    assert_eq!(source.asked()[0], 0..BLOCK);
    engine.run_queued(&queued);
    let asked = asked_by_position(&source);
    assert_eq!(asked.first().unwrap().start, 0);
    assert_eq!(asked[1].start, 4 * BLOCK);
    assert_eq!(asked.last().unwrap().end, 6 * BLOCK);
    let requests = asked.len();
    assert_eq!(
        read(&file, 4 * BLOCK, 2 * BLOCK as usize).unwrap(),
        &bytes[4 * BLOCK as usize..6 * BLOCK as usize]
    );
    assert_eq!(source.asked().len(), requests, "the worker brought them");
}

#[test]
fn a_file_sharing_a_disk_cache_waits_for_the_other_s_fetch_and_asks_nothing() {
    // Each its own memory cache, as two processes have; one directory.
    let disk = TempDisk::new("disk");
    let (bytes, a, fetching) = file_over(16, &disk.builder());
    let (_, b, waiting) = file_over(16, &disk.builder());
    let range = BLOCK as usize..bytes.len();
    let (fetched, waited) = meet(
        &a,
        || read(&fetching, BLOCK, range.len()),
        || read(&waiting, BLOCK, range.len()),
        || disk.cache().waiting_on_disk() > 0,
    );
    assert!(fetched.unwrap() == bytes[range.clone()]);
    assert!(waited.unwrap() == bytes[range]);
    assert_eq!(a.asked().len(), 1);
    assert_eq!(b.asked(), [], "every block from the other's fetch, on disk");
    assert_eq!(waiting.stats().disk_hits, 15);
}

#[test]
fn a_fetch_of_missing_blocks_that_takes_a_queued_fetch_returns_only_its_own() {
    let (bytes, _, file) = file_over(8, &builder().read_ahead_max(0));
    let engine = file.engine();
    engine.queue_for_no_worker(Some(2 * BLOCK..6 * BLOCK));
    let got = engine.fetch_missing(&[3], engine.read_deadline()).unwrap();
    let indices: Vec<u64> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, [3], "the callers place blocks by what they asked");
    assert!(got[0].1[..] == bytes[3 * BLOCK as usize..4 * BLOCK as usize]);
    // The rest of the taken fetch went to the cache.
    let mut rest = vec![0u8; 4 * BLOCK as usize];
    assert!(engine.read_if_cached(2 * BLOCK, &mut rest, false));
    assert!(rest[..] == bytes[2 * BLOCK as usize..6 * BLOCK as usize]);
}

/// 30 ms away, 25 MB/s on each connection: a product of 750 kB, 12 blocks.
const ROUND_TRIP: Duration = Duration::from_millis(30);
const RATE: u64 = 25_000_000;

#[test]
fn a_link_measured_from_the_responses_splits_a_long_read_into_parts_of_its_product() {
    let eight_lanes = builder()
        .read_ahead_max(0)
        .split_size(2 << 20)
        .max_concurrent_requests(8);
    let (bytes, source, file) = file_over(128, &eight_lanes);
    source.play_link(ROUND_TRIP, RATE);
    // Unknown yet: 1 MiB in one part (split_size is 2 MiB).
    assert!(read(&file, 0, 1 << 20).unwrap() == bytes[..1 << 20]);
    assert_eq!(source.asked(), vec![0..1 << 20]);
    let link = file.link_estimate().expect("measured from that response");
    assert_eq!(link.round_trip, ROUND_TRIP);
    assert!(link.bytes_per_second.abs_diff(RATE) <= 1, "{link:?}");
    // Known: 3 MiB, 48 blocks, in parts of 12 blocks on four lanes (not one
    // part, as an unknown link's split_size of 2 MiB gives).
    let (start, len) = (4u64 << 20, 3usize << 20);
    let got = read(&file, start, len).unwrap();
    assert!(got == bytes[start as usize..][..len]);
    let parts: Vec<Range<u64>> = (0..4)
        .map(|i| start + i * 12 * BLOCK..start + (i + 1) * 12 * BLOCK)
        .collect();
    assert_eq!(asked_by_position(&source)[1..], parts);
    assert_eq!(file.stats().requests, 5);
}

#[test]
fn a_sequential_miss_on_a_measured_link_reads_ahead_at_least_its_product() {
    // No read-ahead of its own below a product: the link's floor is all.
    let small = builder().read_ahead_min(BLOCK).read_ahead_max(64 << 20);
    let (bytes, source, file) = file_over(128, &small);
    source.play_link(ROUND_TRIP, RATE);
    assert!(read(&file, 0, 1 << 20).unwrap() == bytes[..1 << 20]);
    let measured = source.asked().len();
    // The next read follows on and misses: it and a product past it.
    let got = read(&file, 1 << 20, 10).unwrap();
    assert!(got == bytes[1 << 20..][..10]);
    let asked = asked_by_position(&source);
    let brought = asked[measured].start..asked.last().unwrap().end;
    let product = (ROUND_TRIP.as_secs_f64() * RATE as f64) as u64;
    assert_eq!(brought.start, 1 << 20, "{asked:?}");
    assert!(brought.end - brought.start >= product, "{asked:?}");
}

#[test]
fn a_fetch_that_would_end_past_the_read_timeout_fails_both_its_readers_at_once() {
    let patient = builder()
        .read_ahead_max(0)
        .read_timeout(Duration::from_secs(30));
    let (bytes, source, file) = file_over(2, &patient);
    source.play_link(ROUND_TRIP, RATE);
    source.stall_next(Duration::from_secs(60));
    let (first, second) = meet(
        &source,
        || read(&file, 0, 10),
        || read(&file, 20, 10),
        waits_for(&file, 0),
    );
    // The waiter has the fetch's own error, not one of its own wait (which
    // would come only at its deadline).
    for read in [first, second] {
        let e = read.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.to_string().contains("the server's answer"), "{e}");
    }
    assert!(
        source.clock() > Duration::from_secs(29),
        "the fetch ran to its deadline on the source's clock: {:?}",
        source.clock()
    );
    // Nothing of it was kept: the next read asks again, and gets the bytes.
    assert_eq!(read(&file, 0, 10).unwrap(), &bytes[..10]);
    assert_eq!(source.asked(), [0..BLOCK, 0..BLOCK]);
}

#[test]
fn a_cancelled_read_lets_go_of_its_claim_and_a_reader_waiting_for_it_fetches_at_once() {
    let (bytes, source, file) = file_over(16, &builder().read_ahead_max(0));
    let at = 4 * BLOCK + 10;
    let cancel = crate::wait::Cancel::new();
    let patient = file.with_cancel(cancel.clone());
    source.shut();
    std::thread::scope(|s| {
        let first = s.spawn(|| read(&patient, at, 100));
        source.wait_until_holding(1);
        let second = s.spawn(|| read(&file, at, 100));
        wait_until("a reader waits", waits_for(&file, 4));
        cancel.cancel();
        let e = first.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
        // The waiter fetches the block itself: its own fetch is the one
        // held now, beside none of the stopped read's.
        source.wait_until_holding(1);
        let asked = source.asked().len();
        source.open();
        assert_eq!(asked, 2, "the stopped read's fetch, then the waiter's own");
        assert_eq!(second.join().unwrap().unwrap(), bytes[at as usize..][..100]);
    });
    // A cancel stops only the handle that watches it.
    assert!(
        patient.read_exact_at(at, &mut [0; 100]).is_ok(),
        "cached: no wait"
    );
    let e = read(&patient, 9 * BLOCK, 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted);
    assert_eq!(
        read(&file, 9 * BLOCK, 10).unwrap(),
        bytes[9 * BLOCK as usize..][..10]
    );
}

#[test]
fn a_readers_own_deadline_fails_that_reader_alone_and_its_waiter_fetches() {
    let (bytes, source, file) = file_over(16, &builder().read_ahead_max(0));
    let at = 6 * BLOCK;
    let hurried = file.with_cancel(crate::wait::Cancel::after(Duration::from_secs(5)));
    source.shut();
    std::thread::scope(|s| {
        let first = s.spawn(|| read(&hurried, at, 100));
        source.wait_until_holding(1);
        let second = s.spawn(|| read(&file, at, 100));
        wait_until("a reader waits", waits_for(&file, 6));
        // The first reader's deadline passes while its fetch is held.
        let e = first.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        source.wait_until_holding(1);
        source.open();
        let got = second.join().unwrap();
        assert_eq!(
            got.unwrap(),
            bytes[at as usize..][..100],
            "not the other's deadline"
        );
    });
}

/// The HDF5 driver's guesses made on its own threads (`prefetch_here`,
/// `fetch_exact`) stop at a close of the file as every other fetch of it
/// does: the source holds them, so only the close can end them.
#[cfg(feature = "extension")]
#[test]
fn a_close_ends_the_driver_s_fetches_on_its_own_threads() {
    for exact in [false, true] {
        let (_, source, file) = file_over(16, &builder().read_ahead_max(0));
        source.shut();
        let engine = Arc::clone(file.engine());
        let (done, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            match exact {
                true => engine.fetch_exact(std::iter::once(0..4 * BLOCK).collect(), |_, _| ()),
                false => drop(engine.prefetch_here(std::iter::once(0..4 * BLOCK), u64::MAX)),
            }
            let _ = done.send(());
        });
        source.wait_until_holding(1);
        file.close();
        let stopped = ended.recv_timeout(Duration::from_secs(20)).is_ok();
        // Let a fetch the close did not stop end, then fail.
        source.open();
        assert!(stopped, "exact: {exact}: the fetch went on past the close");
    }
}
