//! Reads sized by the link, and reads held to their deadlines, stops and
//! closes.

use super::*;

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
