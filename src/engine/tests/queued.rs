//! Background fetches queued, taken over by readers, and shared through a
//! disk cache.

use super::*;

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
    engine.run_queued(&queued, &crate::wait::Stop::here());
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
    let got = engine
        .fetch_missing(
            &[3],
            &crate::wait::Stop::here().until(engine.read_deadline()),
        )
        .unwrap();
    let indices: Vec<u64> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, [3], "the callers place blocks by what they asked");
    assert!(got[0].1[..] == bytes[3 * BLOCK as usize..4 * BLOCK as usize]);
    // The rest of the taken fetch went to the cache.
    let mut rest = vec![0u8; 4 * BLOCK as usize];
    assert!(engine.read_if_cached(2 * BLOCK, &mut rest, false));
    assert!(rest[..] == bytes[2 * BLOCK as usize..6 * BLOCK as usize]);
}
