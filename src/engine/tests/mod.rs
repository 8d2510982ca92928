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
    engine.run_queued(&queued, &crate::wait::Stop::here());
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
    file.engine()
        .run_queued(&queued, &crate::wait::Stop::here());
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
    // Block 5 failed for the taker alone: once the server heals, the
    // next read of it fetches it.
    source.heal();
    assert_eq!(
        read(&file, 5 * BLOCK, 10).unwrap(),
        &bytes[5 * BLOCK as usize..][..10]
    );
}

mod deadlines;
mod queued;
