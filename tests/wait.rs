//! A host runtime's part in network waits (`remfile::wait`): reads that wait
//! run inside the host's `outside`, on the calling thread, which asks the
//! host for a stop between the slices of each wait; a stop ends the read,
//! and the file stays usable afterwards.
//!
//! A test binary of its own: the host is installed for the whole process.
//! Threads are ordered by the server's word that it holds a request, never
//! by sleeps; a watchdog aborts the binary if a read never ends.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use remfile::ErrorKind;
use remfile::wait::{self, Host};
use remfile_testkit::{After, RawServer, hold_until_hung_up, raw_serve, test_data, watchdog};

/// A host that counts the waits it ran and the reads on other threads
/// than the one it ran them on, and stops them when told.
struct TestHost {
    outside: AtomicUsize,
    stop: AtomicBool,
    asked_elsewhere: AtomicUsize,
    failures: Mutex<Vec<ErrorKind>>,
}

thread_local! {
    static INSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Host for TestHost {
    fn outside(&self, wait: &mut dyn FnMut()) {
        self.outside.fetch_add(1, SeqCst);
        INSIDE.with(|i| i.set(true));
        wait();
        INSIDE.with(|i| i.set(false));
    }
    fn stop_requested(&self) -> bool {
        if !INSIDE.with(|i| i.get()) {
            self.asked_elsewhere.fetch_add(1, SeqCst);
        }
        self.stop.load(SeqCst)
    }
    fn failed_under_a_library(&self, error: &remfile::Error) {
        self.failures.lock().unwrap().push(error.kind());
    }
}

static HOST: TestHost = TestHost {
    outside: AtomicUsize::new(0),
    stop: AtomicBool::new(false),
    asked_elsewhere: AtomicUsize::new(0),
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

/// A server of `data` that, while `hold` is set, holds every request for
/// bytes past `from` without an answer until the client hangs up (telling
/// `arrived` first), and answers the others.
fn holding_server(
    data: Arc<Vec<u8>>,
    from: u64,
    hold: Arc<AtomicBool>,
) -> (RawServer, mpsc::Receiver<()>) {
    let (tx, arrived) = mpsc::channel();
    let tx = Mutex::new(tx);
    let server = RawServer::new(move |req, out| {
        let (first, _) = req.range().expect("a range request");
        if first < from || !hold.load(SeqCst) {
            return raw_serve(&data, req, out);
        }
        let _ = tx.lock().unwrap().send(());
        // Until the client hangs up: lifting `hold` serves new requests only.
        static NEVER: AtomicBool = AtomicBool::new(false);
        hold_until_hung_up(out, &NEVER);
        After::Close
    });
    (server, arrived)
}

/// Sets the host's stop once the server holds a request.
fn stop_when_held(arrived: mpsc::Receiver<()>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        arrived.recv().unwrap();
        HOST.stop.store(true, SeqCst);
    })
}

fn patient() -> remfile::Builder {
    remfile_testkit::builder()
        .idle_timeout(Duration::from_secs(600))
        .read_timeout(Duration::from_secs(600))
}

#[test]
fn a_stop_request_ends_a_held_read_on_its_own_thread_and_the_file_reads_right_afterwards() {
    let _host = host();
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(4 << 20, 7));
    let hold = Arc::new(AtomicBool::new(true));
    let (server, arrived) = holding_server(data.clone(), 256 * 1024, hold.clone());
    let file = patient()
        .block_size(256 * 1024)
        .open(server.url("/f"))
        .unwrap();
    let (before, elsewhere) = (HOST.outside.load(SeqCst), HOST.asked_elsewhere.load(SeqCst));

    let stopper = stop_when_held(arrived);
    let mut buf = vec![0u8; 1 << 20];
    let e = file.read_exact_at(2 << 20, &mut buf).unwrap_err();
    stopper.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert!(
        HOST.outside.load(SeqCst) > before,
        "the wait ran inside the host's outside"
    );
    assert_eq!(
        HOST.asked_elsewhere.load(SeqCst),
        elsewhere,
        "the host is asked only on the thread it ran the read on"
    );

    // The server answers again: the same bytes read right, and a read of
    // cached bytes needs no wait at all.
    HOST.stop.store(false, SeqCst);
    hold.store(false, SeqCst);
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
fn a_stop_request_ends_a_vectored_read_and_an_open() {
    let _host = host();
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(2 << 20, 8));
    let hold = Arc::new(AtomicBool::new(true));
    let (server, arrived) = holding_server(data.clone(), 64 * 1024, hold.clone());
    let file = patient()
        .block_size(64 * 1024)
        .open(server.url("/f"))
        .unwrap();
    let stopper = stop_when_held(arrived);
    let e = file
        .read_ranges(&[100_000..100_100, 1_500_000..1_600_000])
        .unwrap_err();
    stopper.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");

    // An open whose first answer never comes.
    HOST.stop.store(false, SeqCst);
    let (silent, arrived) = holding_server(data.clone(), 0, Arc::new(AtomicBool::new(true)));
    let stopper = stop_when_held(arrived);
    let e = patient().open(silent.url("/g")).unwrap_err();
    stopper.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");

    HOST.stop.store(false, SeqCst);
    hold.store(false, SeqCst);
    let parts = file
        .read_ranges(&[100_000..100_100, 1_500_000..1_600_000])
        .unwrap();
    assert_eq!(parts[0], data[100_000..100_100]);
    assert_eq!(parts[1], data[1_500_000..1_600_000]);
}

#[test]
fn a_reader_of_the_blocks_a_stopped_read_held_fetches_them_while_that_request_is_still_held() {
    let _host = host();
    let _dog = watchdog(Duration::from_secs(120));
    let data = Arc::new(test_data(2 << 20, 9));
    let hold = Arc::new(AtomicBool::new(true));
    let (server, arrived) = holding_server(data.clone(), 64 * 1024, hold.clone());
    let file = patient()
        .block_size(64 * 1024)
        .open(server.url("/f"))
        .unwrap();
    let stopper = stop_when_held(arrived);
    let mut buf = vec![0u8; 100_000];
    let e = file.read_exact_at(1_000_000, &mut buf).unwrap_err();
    stopper.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted);
    // New requests are answered; a held one would still be held. The same
    // read gets its bytes by a request of its own.
    HOST.stop.store(false, SeqCst);
    hold.store(false, SeqCst);
    let asked = server.requests();
    file.read_exact_at(1_000_000, &mut buf).unwrap();
    assert_eq!(buf[..], data[1_000_000..1_100_000]);
    assert!(server.requests() > asked);
}
