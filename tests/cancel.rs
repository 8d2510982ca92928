//! Cancelling reads (`remfile::wait::Cancel`, `RemoteFile::with_cancel`):
//! every wait ends at a cancel — on a socket, for a connection permit,
//! between retries — the stopped read closes its connection and lets go of
//! its blocks, and the next read of the same bytes fetches them itself.
//!
//! Only a cancel can end these reads (their timeouts are ten minutes); a
//! watchdog aborts the test binary if one hangs.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use remfile::wait::Cancel;
use remfile::{ErrorKind, RemoteFile};
use remfile_testkit::{
    After, RawServer, Reply, hold_until_hung_up, raw_serve, test_data, tls, watchdog,
};

const PATIENT: Duration = Duration::from_secs(600);

/// A builder whose reads only a cancel can end.
fn patient() -> remfile::Builder {
    remfile_testkit::builder()
        .block_size(256 << 10)
        .read_ahead_max(0)
        .idle_timeout(PATIENT)
        .read_timeout(PATIENT)
}

/// What the stalling server tells the test.
struct Signals {
    /// The range of the request it holds.
    arrived: mpsc::Receiver<(u64, u64)>,
    /// The held request's connection was closed by the client.
    closed: mpsc::Receiver<()>,
}

/// A server of `data` that holds its first request for a range past the
/// first block without an answer until the client hangs up (or `over` is
/// set), and answers every other request.
fn stall_first(data: Arc<Vec<u8>>, over: Arc<AtomicBool>) -> (RawServer, Signals) {
    let (arrived_tx, arrived) = mpsc::channel();
    let (closed_tx, closed) = mpsc::channel();
    let (arrived_tx, closed_tx) = (Mutex::new(arrived_tx), Mutex::new(closed_tx));
    let used = AtomicBool::new(false);
    let server = RawServer::new(move |req, out| {
        let (first, last) = req.range().expect("a range request");
        if first == 0 || used.swap(true, SeqCst) {
            return raw_serve(&data, req, out);
        }
        let _ = arrived_tx.lock().unwrap().send((first, last));
        if hold_until_hung_up(out, &over) {
            let _ = closed_tx.lock().unwrap().send(());
        }
        After::Close
    });
    (server, Signals { arrived, closed })
}

fn read(file: &RemoteFile, pos: u64, len: usize) -> remfile::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(pos, &mut buf).map(|()| buf)
}

#[test]
fn a_cancelled_read_closes_its_connection_and_the_same_read_then_fetches_at_once() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(4 << 20, 3));
    let over = Arc::new(AtomicBool::new(false));
    let (server, signals) = stall_first(data.clone(), over.clone());
    let file = patient().open(server.url("/f")).unwrap();
    let cancel = Cancel::new();
    let stoppable = file.with_cancel(cancel.clone());

    let reader = std::thread::spawn(move || read(&stoppable, 2 << 20, 1 << 20));
    let (first, _) = signals.arrived.recv().unwrap();
    assert_eq!(first, 2 << 20);
    cancel.cancel();
    let e = reader.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    signals
        .closed
        .recv()
        .expect("the stopped read closed its connection");

    // The held request is gone; the same read through the same file makes
    // its own request (the server answers it) and gets the right bytes.
    let before = server.requests();
    assert_eq!(
        read(&file, 2 << 20, 1 << 20).unwrap(),
        data[2 << 20..3 << 20]
    );
    assert!(server.requests() > before, "it fetched the bytes itself");
    over.store(true, SeqCst);
}

#[test]
fn a_read_waiting_for_another_reads_fetch_stops_at_its_cancel_and_asks_nothing() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(2 << 20, 4));
    let over = Arc::new(AtomicBool::new(false));
    let (server, signals) = stall_first(data.clone(), over.clone());
    let file = patient().open(server.url("/f")).unwrap();
    let (cancel_first, cancel_second) = (Cancel::new(), Cancel::new());

    let first = file.with_cancel(cancel_first.clone());
    let first = std::thread::spawn(move || read(&first, 1 << 20, 1000));
    signals.arrived.recv().unwrap();
    let asked = server.requests();
    // The second reader finds the block claimed by the first, and waits.
    let e = cancel_second
        .run(|| {
            cancel_second.cancel();
            read(&file, 1 << 20, 1000)
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert_eq!(server.requests(), asked, "the stopped waiter asked nothing");
    cancel_first.cancel();
    assert_eq!(
        first.join().unwrap().unwrap_err().kind(),
        ErrorKind::Interrupted
    );
    over.store(true, SeqCst);
}

#[test]
fn a_read_waiting_for_a_connection_stops_at_its_cancel() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(2 << 20, 5));
    let over = Arc::new(AtomicBool::new(false));
    let (server, signals) = stall_first(data.clone(), over.clone());
    let file = patient().max_connections(1).open(server.url("/f")).unwrap();
    let holder = Cancel::new();
    let first = file.with_cancel(holder.clone());
    let first = std::thread::spawn(move || read(&first, 1 << 20, 1000));
    signals.arrived.recv().unwrap();
    let asked = server.requests();
    // Another block: the only connection is the held one's.
    let waiting = Cancel::new();
    let second = file.with_cancel(waiting.clone());
    let second = std::thread::spawn(move || read(&second, 1_600_000, 1000));
    waiting.cancel();
    let e = second.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert_eq!(server.requests(), asked, "no request without a connection");
    holder.cancel();
    first.join().unwrap().unwrap_err();
    // The permit came back: a read goes through.
    assert_eq!(
        read(&file, 1_600_000, 1000).unwrap(),
        data[1_600_000..1_601_000]
    );
    over.store(true, SeqCst);
}

#[test]
fn a_pause_between_retries_ends_at_a_cancel_with_one_request_made() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(1 << 20, 6));
    let (tx, failed) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = RawServer::new(move |req, out| {
        let (first, _) = req.range().unwrap();
        if first == 0 {
            return raw_serve(&data, req, out);
        }
        use std::io::Write;
        let _ = out.write_all(&Reply::new(503).body("busy").to_bytes());
        let _ = tx.lock().unwrap().send(());
        After::KeepAlive
    });
    let file = patient()
        .retry_policy(
            remfile::RetryPolicy::default()
                .initial_backoff(PATIENT)
                .max_backoff(PATIENT),
        )
        .open(server.url("/f"))
        .unwrap();
    let asked = server.requests();
    let cancel = Cancel::new();
    let stoppable = file.with_cancel(cancel.clone());
    let reader = std::thread::spawn(move || read(&stoppable, 600_000, 10));
    failed.recv().unwrap();
    cancel.cancel();
    let e = reader.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert_eq!(server.requests(), asked + 1);
}

#[test]
fn a_cancels_deadline_ends_a_held_read_as_a_timeout() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(2 << 20, 7));
    let over = Arc::new(AtomicBool::new(false));
    let (server, signals) = stall_first(data, over.clone());
    let file = patient().open(server.url("/f")).unwrap();
    let hurried = file.with_cancel(Cancel::after(Duration::from_millis(300)));
    let e = read(&hurried, 1 << 20, 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    signals.arrived.recv().unwrap();
    signals.closed.recv().expect("its connection was closed");
    over.store(true, SeqCst);
}

#[test]
fn a_cancelled_read_over_https_ends_and_the_same_read_then_fetches() {
    // A stop under TLS must not look like a signal's EINTR to rustls, whose
    // read loop would retry it for ever.
    let _dog = watchdog(Duration::from_secs(120));
    let pki = tls::TestPki::new();
    let data = test_data(2 << 20, 8);
    let (arrived_tx, arrived) = mpsc::channel();
    let (release_tx, release) = mpsc::channel::<()>();
    let (arrived_tx, release) = (Mutex::new(arrived_tx), Mutex::new(release));
    let used = AtomicBool::new(false);
    let server = tls::TlsServer::new(&pki, data.clone(), move |req| {
        let (first, _) = req.range()?;
        if first > 0 && !used.swap(true, SeqCst) {
            let _ = arrived_tx.lock().unwrap().send(());
            // Held until the test ends.
            let _ = release
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(60));
        }
        None
    });
    let file = patient()
        .add_root_certificates(pki.ca_pem.clone())
        .open(server.url("/secure.bin"))
        .unwrap();
    let cancel = Cancel::new();
    let stoppable = file.with_cancel(cancel.clone());
    let reader = std::thread::spawn(move || read(&stoppable, 1 << 20, 1000));
    arrived.recv().unwrap();
    cancel.cancel();
    let e = reader.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert_eq!(
        read(&file, 1 << 20, 1000).unwrap(),
        data[1 << 20..(1 << 20) + 1000]
    );
    drop(release_tx);
}

#[test]
fn closing_a_file_ends_its_stalled_read_and_every_later_one_and_spares_other_files() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(4 << 20, 5));
    let over = Arc::new(AtomicBool::new(false));
    let (server, signals) = stall_first(data.clone(), over.clone());
    let cache = remfile::BlockCache::new(64 << 20);
    let file = patient()
        .cache(cache.clone())
        .open(server.url("/f"))
        .unwrap();
    let other = patient().cache(cache).open(server.url("/f")).unwrap();
    assert!(!file.is_closed());

    let reader = file.clone();
    let reader = std::thread::spawn(move || read(&reader, 2 << 20, 1 << 20));
    let (first, _) = signals.arrived.recv().unwrap();
    assert_eq!(first, 2 << 20);
    // A second reader of the same block waits for the first one's fetch.
    let waiter = file.clone();
    let waiter = std::thread::spawn(move || read(&waiter, 2 << 20, 10));
    file.close();
    for outcome in [reader.join().unwrap(), waiter.join().unwrap()] {
        assert_eq!(outcome.unwrap_err().kind(), ErrorKind::Closed);
    }
    signals
        .closed
        .recv()
        .expect("the stopped read closed its connection");
    assert!(file.is_closed());

    // Later reads, cached or not, fail without a request.
    let asked = server.requests();
    for pos in [0, 3 << 20] {
        let e = read(&file, pos, 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Closed, "{e}");
    }
    assert_eq!(server.requests(), asked);
    // The other file, sharing the cache, reads the stalled block (its
    // claim was let go) and the rest.
    assert_eq!(
        read(&other, 2 << 20, 1 << 20).unwrap(),
        data[2 << 20..3 << 20]
    );
    assert_eq!(read(&other, 0, 100).unwrap(), data[..100]);
    over.store(true, SeqCst);
}

#[test]
fn a_connect_that_never_completes_ends_at_a_cancel() {
    let _dog = watchdog(Duration::from_secs(120));
    let Some((listener, _held)) = remfile_testkit::full_listener() else {
        eprintln!("the backlog never filled here: a hanging connect cannot be provoked; skipping");
        return;
    };
    let url = format!("http://{}/f", listener.local_addr().unwrap());
    // Only the cancel's deadline can end it: the connect timeout is ten
    // minutes.
    let e = Cancel::after(Duration::from_millis(300))
        .run(|| patient().connect_timeout(PATIENT).open(&url))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains("deadline the read was given"), "{e}");
    // And a plain cancel, from another thread, once the open waits.
    let cancel = Cancel::new();
    let opening = {
        let cancel = cancel.clone();
        std::thread::spawn(move || cancel.run(|| patient().connect_timeout(PATIENT).open(&url)))
    };
    cancel.cancel();
    let e = opening.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
}

#[test]
fn a_wait_for_another_openers_first_open_of_a_file_ends_at_a_cancel() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(1 << 20, 6));
    let over = Arc::new(AtomicBool::new(false));
    let (arrived_tx, arrived) = mpsc::channel();
    let arrived_tx = Mutex::new(arrived_tx);
    let (d, o) = (data.clone(), over.clone());
    let used = AtomicBool::new(false);
    // The first opening request is held: its opener keeps the file's
    // first-open claim on the disk cache until the test lets it go.
    let server = RawServer::new(move |req, out| {
        if used.swap(true, SeqCst) {
            return raw_serve(&d, req, out);
        }
        let _ = arrived_tx.lock().unwrap().send(());
        hold_until_hung_up(out, &o);
        After::Close
    });
    let dir = remfile_testkit::TempDir::new("cancel-first-open");
    let disk = remfile::DiskCache::open(&dir, 64 << 20).unwrap();
    let url = server.url("/f");
    let first = {
        let (disk, url) = (disk.clone(), url.clone());
        std::thread::spawn(move || patient().disk_cache(disk).open(&url))
    };
    arrived.recv().unwrap();
    // Another opener (a process of its own, as far as the disk cache is
    // concerned) waits for that claim; only its cancel can end the wait.
    // It may wait 20 s for a claim: far less is the proof that the cancel
    // ended it (the stop's bound is `wait::POLL`).
    let second = remfile::DiskCache::open(&dir, 64 << 20).unwrap();
    let dog = watchdog(Duration::from_secs(10));
    let e = Cancel::after(Duration::from_millis(300))
        .run(|| patient().disk_cache(second).open(&url))
        .unwrap_err();
    drop(dog);
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains("deadline the read was given"), "{e}");
    assert_eq!(server.requests(), 1, "the stopped open asked nothing");
    over.store(true, SeqCst);
    let _ = first.join().unwrap();
}

#[test]
fn a_closed_file_fails_every_read_even_at_its_end_and_queues_nothing() {
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(1 << 20, 7));
    let d = data.clone();
    let server = RawServer::new(move |req, out| raw_serve(&d, req, out));
    let file = patient().open(server.url("/f")).unwrap();
    file.close();
    let size = data.len() as u64;
    let kind = |r: remfile::Result<usize>| r.map_err(|e| e.kind());
    // At the end, or of no bytes: a closed file says so rather than `0`,
    // as a closed descriptor does.
    assert_eq!(
        kind(file.read_at(size, &mut [0; 8])),
        Err(ErrorKind::Closed)
    );
    assert_eq!(kind(file.read_at(0, &mut [])), Err(ErrorKind::Closed));
    assert_eq!(
        file.read_exact_at(size, &mut []).map_err(|e| e.kind()),
        Err(ErrorKind::Closed)
    );
    let mut at_end = &file;
    std::io::Seek::seek(&mut at_end, std::io::SeekFrom::End(0)).unwrap();
    assert!(std::io::Read::read(&mut at_end, &mut [0; 8]).is_err());
    // Nothing is queued for it, and nothing claimed.
    let asked = server.requests();
    assert_eq!(
        file.prefetch_in_background(std::iter::once(0..size), size),
        0
    );
    assert!(file.wait_for_background_fetches(Duration::from_secs(30)));
    assert_eq!(server.requests(), asked);
}
