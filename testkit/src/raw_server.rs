//! [`RawServer`]: a `std::net` server on 127.0.0.1 whose handler writes raw
//! bytes, for faults below HTTP (closing mid-body, stalling, lying
//! `Content-Length`); [`crate::RangeServer`] is one.

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::request::{Req, read_head_from};

/// What the handler wants done with the connection afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Wait for the next request on it.
    KeepAlive,
    /// Shut it down.
    Close,
}

type RawHandler = dyn Fn(&Req, &mut TcpStream) -> After + Send + Sync;

/// The name of a test server's threads (a test that counts the threads of
/// the crate leaves them out).
pub const SERVER_THREAD: &str = "test-server";

/// A server whose handler writes raw bytes to the socket; one thread per
/// connection, keep-alive. Stopped when dropped.
pub struct RawServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

/// What the acceptor and the connections' threads share.
struct Shared {
    stop: AtomicBool,
    requests: AtomicUsize,
    connections: AtomicUsize,
    gauges: Gauges,
    handler: Box<RawHandler>,
}

/// What a server had at once: connections open, requests being answered.
#[derive(Default)]
struct Gauges {
    open: AtomicUsize,
    peak_open: AtomicUsize,
    answering: AtomicUsize,
    peak_answering: AtomicUsize,
}

impl Gauges {
    fn up(now: &AtomicUsize, peak: &AtomicUsize) {
        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
        peak.fetch_max(n, Ordering::SeqCst);
    }

    fn down(now: &AtomicUsize) {
        now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RawServer {
    /// Listens on a free port of 127.0.0.1 and answers every request with
    /// `handler`, which writes what it likes to the connection.
    pub fn new(
        handler: impl Fn(&Req, &mut TcpStream) -> After + Send + Sync + 'static,
    ) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            requests: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            gauges: Gauges::default(),
            handler: Box::new(handler),
        });
        let accepting = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(SERVER_THREAD.into())
            .spawn(move || accept(&listener, &accepting))
            .expect("a thread for the acceptor");
        RawServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Client connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The most connections open at once so far.
    pub fn peak_open_connections(&self) -> usize {
        self.shared.gauges.peak_open.load(Ordering::SeqCst)
    }

    /// The most requests answered at once so far.
    pub fn peak_requests_at_once(&self) -> usize {
        self.shared.gauges.peak_answering.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

/// Accepts connections until the server stops, a thread for each.
fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let Ok((stream, _)) = listener.accept() else {
            // A look for the next connection, or the stop, in a moment.
            crate::time::wait_for(Duration::from_millis(2), || {
                shared.stop.load(Ordering::SeqCst)
            });
            continue;
        };
        let conn = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
        let gauges = &shared.gauges;
        Gauges::up(&gauges.open, &gauges.peak_open);
        let serving = shared.clone();
        let serve = move || {
            handle_connection(stream, conn, &serving);
            Gauges::down(&serving.gauges.open);
        };
        std::thread::Builder::new()
            .name(SERVER_THREAD.into())
            .spawn(serve)
            .expect("a thread for a connection");
    }
}

/// Answers the requests of one connection until it closes, the handler
/// closes it, or the server stops.
fn handle_connection(stream: TcpStream, conn: usize, shared: &Shared) {
    stream.set_nonblocking(false).ok();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok();
    let mut writer = stream.try_clone().expect("clone stream");
    let mut reader = BufReader::new(stream);
    let keep_waiting = || !shared.stop.load(Ordering::SeqCst);
    while let Some(head) = read_head_from(&mut reader, keep_waiting) {
        let n = shared.requests.fetch_add(1, Ordering::SeqCst) + 1;
        let req = Req::from_head(n, conn, &head);
        let gauges = &shared.gauges;
        Gauges::up(&gauges.answering, &gauges.peak_answering);
        let after = (shared.handler)(&req, &mut writer);
        Gauges::down(&gauges.answering);
        if after == After::Close {
            let _ = writer.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

/// Answers nothing on `out` until the client closes the connection (true)
/// or `over` is set (false): a request held for as long as its client waits.
pub fn hold_until_hung_up(out: &mut TcpStream, over: &AtomicBool) -> bool {
    use std::io::Read;
    out.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let mut byte = [0u8; 1];
    loop {
        match out.read(&mut byte) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if over.load(Ordering::SeqCst) {
                    return false;
                }
            }
            Err(_) => return true,
        }
    }
}
