//! A host runtime's part in network waits (`remfile::wait`): reads that wait
//! run outside the host's lock, a stop request ends the wait within a few
//! polls, and the file stays usable afterwards.
//!
//! A test binary of its own: the host is installed for the whole process.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use remfile::ErrorKind;
use remfile::wait::{self, Host};
use support::{After, RawServer, raw_serve, test_data};

/// A host that counts the waits it ran and stops them when told.
struct TestHost {
    outside: AtomicUsize,
    stop: AtomicBool,
    failures: Mutex<Vec<ErrorKind>>,
}

impl Host for TestHost {
    fn outside(&self, wait: &mut dyn FnMut()) {
        self.outside.fetch_add(1, SeqCst);
        wait()
    }
    fn stop_requested(&self) -> bool {
        self.stop.load(SeqCst)
    }
    fn driver_failed(&self, error: &remfile::Error) {
        self.failures.lock().unwrap().push(error.kind());
    }
}

static HOST: TestHost = TestHost {
    outside: AtomicUsize::new(0),
    stop: AtomicBool::new(false),
    failures: Mutex::new(Vec::new()),
};

/// The host, installed; tests that stop waits run one at a time.
fn host() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    wait::set_host(&HOST);
    HOST.stop.store(false, SeqCst);
    guard
}

/// A server of `data` that, while `stall` is set, answers nothing (the
/// connection stays open) for requests past the first block.
fn stalling_server(data: Arc<Vec<u8>>, stall: Arc<AtomicBool>) -> RawServer {
    RawServer::new(move |req, out| {
        let (first, _) = req.range().expect("a range request");
        if first > 0 && stall.load(SeqCst) {
            let until = Instant::now() + Duration::from_secs(30);
            while stall.load(SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            return After::Close;
        }
        raw_serve(&data, req, out)
    })
}

#[test]
fn a_stop_request_ends_a_stalled_read_and_the_file_reads_right_afterwards() {
    let _host = host();
    let data = Arc::new(test_data(4 << 20, 7));
    let stall = Arc::new(AtomicBool::new(true));
    let server = stalling_server(data.clone(), stall.clone());
    let file = support::builder()
        .block_size(256 * 1024)
        .idle_timeout(Duration::from_secs(20))
        .open(server.url("/f"))
        .unwrap();
    let before = HOST.outside.load(SeqCst);

    let stopper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        HOST.stop.store(true, SeqCst);
        Instant::now()
    });
    let mut buf = vec![0u8; 1 << 20];
    let e = file.read_exact_at(2 << 20, &mut buf).unwrap_err();
    let stopped_at = stopper.join().unwrap();
    let latency = stopped_at.elapsed();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert!(
        latency < Duration::from_secs(2),
        "the wait ended {latency:?} after the stop request"
    );
    assert!(HOST.outside.load(SeqCst) > before, "the wait ran outside");

    // The server answers again: the same bytes read right, and a read of
    // cached bytes needs no wait at all.
    HOST.stop.store(false, SeqCst);
    stall.store(false, SeqCst);
    file.read_exact_at(2 << 20, &mut buf).unwrap();
    assert_eq!(buf[..], data[2 << 20..3 << 20]);
    let waits = HOST.outside.load(SeqCst);
    let mut head = [0u8; 1000];
    file.read_exact_at(10, &mut head).unwrap();
    assert_eq!(head[..], data[10..1010]);
    assert_eq!(
        HOST.outside.load(SeqCst),
        waits,
        "a cached read waits for nothing"
    );
}

#[test]
fn a_stop_request_ends_an_open_and_a_vectored_read() {
    let _host = host();
    let data = Arc::new(test_data(2 << 20, 8));
    let stall = Arc::new(AtomicBool::new(true));
    let server = stalling_server(data.clone(), stall.clone());
    let file = support::builder()
        .block_size(64 * 1024)
        .open(server.url("/f"))
        .unwrap();
    let stopper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(200));
        HOST.stop.store(true, SeqCst);
    });
    let e = file
        .read_ranges(&[100_000..100_100, 1_500_000..1_600_000])
        .unwrap_err();
    stopper.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");

    // An open whose first answer never comes.
    let silent = RawServer::new(|_, _| {
        std::thread::sleep(Duration::from_secs(5));
        After::Close
    });
    let started = Instant::now();
    let e = support::builder().open(silent.url("/g")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));

    HOST.stop.store(false, SeqCst);
    stall.store(false, SeqCst);
    let parts = file
        .read_ranges(&[100_000..100_100, 1_500_000..1_600_000])
        .unwrap();
    assert_eq!(parts[0], data[100_000..100_100]);
    assert_eq!(parts[1], data[1_500_000..1_600_000]);
}

#[test]
fn another_reader_of_the_blocks_a_stopped_read_left_fetches_them_itself() {
    let _host = host();
    let data = Arc::new(test_data(2 << 20, 9));
    let stall = Arc::new(AtomicBool::new(true));
    let server = stalling_server(data.clone(), stall.clone());
    let file = support::builder()
        .block_size(64 * 1024)
        .open(server.url("/f"))
        .unwrap();
    // A stopped read leaves its fetch (and its claim on the blocks) behind.
    let stopper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(200));
        HOST.stop.store(true, SeqCst);
    });
    let mut buf = vec![0u8; 100_000];
    let e = file.read_exact_at(1_000_000, &mut buf).unwrap_err();
    stopper.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted);
    // The server recovers at once; a new read of the same bytes gets them
    // (from the fetch left behind, or its own) rather than its interruption.
    HOST.stop.store(false, SeqCst);
    stall.store(false, SeqCst);
    file.read_exact_at(1_000_000, &mut buf).unwrap();
    assert_eq!(buf[..], data[1_000_000..1_100_000]);
}
