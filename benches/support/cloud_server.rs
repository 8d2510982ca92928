//! A range server that behaves like a cloud object store: a delay per
//! request (the round trip), an extra delay per new connection (the
//! handshake), optional bandwidth caps per connection and in total, and a log
//! of every request. Listens on 127.0.0.1 only. Requests and their ranges
//! are read by the test servers' own parser (`remfile_testkit`); what is
//! here is the link it plays.
#![allow(dead_code)]

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use remfile_testkit::Reply;
use remfile_testkit::range::{Selection, select};
use remfile_testkit::request::{Req, read_head_from};

/// What makes the server slow.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape {
    /// Added before each response's headers.
    pub request_delay: Duration,
    /// Added once per new connection, before its first response.
    pub connect_delay: Duration,
    /// Bytes per second for each connection, if capped.
    pub per_connection_bps: Option<f64>,
    /// Bytes per second for all connections together, if capped: one link
    /// they share, the bytes of each sent in turn (an idle link saves no
    /// time for later).
    pub total_bps: Option<f64>,
}

/// One request as served.
#[derive(Debug, Clone)]
pub struct Logged {
    pub conn: usize,
    /// The path asked for.
    pub path: Arc<str>,
    pub first: u64,
    pub last: u64,
    /// Body bytes actually sent (a client may hang up early).
    pub sent: u64,
    /// When the request arrived and when its body ended, since the server started.
    pub arrived: Duration,
    pub done: Duration,
}

/// What the server serves: one file at every path, or files by path.
#[derive(Clone)]
pub enum Files {
    One(Arc<Vec<u8>>),
    ByPath(Arc<std::collections::BTreeMap<String, Arc<Vec<u8>>>>),
}

impl Files {
    fn at(&self, path: &str) -> Option<&[u8]> {
        match self {
            Files::One(data) => Some(data),
            Files::ByPath(files) => files.get(path).map(|d| d.as_slice()),
        }
    }
}

pub struct CloudServer {
    addr: SocketAddr,
    link: Arc<Link>,
}

/// What every connection of a server shares: the files, the link's shape,
/// the log and the counts.
struct Link {
    files: Files,
    shape: Shape,
    log: Mutex<Vec<Logged>>,
    connections: AtomicUsize,
    /// When the shared link (`Shape::total_bps`) is free for the next bytes.
    link_free: Mutex<Instant>,
    started: Instant,
}

impl CloudServer {
    pub fn start(data: Arc<Vec<u8>>, shape: Shape) -> CloudServer {
        CloudServer::serve(Files::One(data), shape)
    }

    /// Serves each of `files` at its path (`/name`); 404 elsewhere.
    pub fn start_files(
        files: std::collections::BTreeMap<String, Arc<Vec<u8>>>,
        shape: Shape,
    ) -> CloudServer {
        CloudServer::serve(Files::ByPath(Arc::new(files)), shape)
    }

    fn serve(files: Files, shape: Shape) -> CloudServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let link = Arc::new(Link {
            files,
            shape,
            log: Mutex::new(Vec::new()),
            connections: AtomicUsize::new(0),
            link_free: Mutex::new(Instant::now()),
            started: Instant::now(),
        });
        let accepting = link.clone();
        std::thread::spawn(move || {
            for (accepted, stream) in listener.incoming().flatten().enumerate() {
                let link = accepting.clone();
                std::thread::spawn(move || serve(stream, accepted + 1, &link));
            }
        });
        CloudServer { addr, link }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn log(&self) -> Vec<Logged> {
        self.link.log.lock().clone()
    }

    /// Connections that made at least one request for the file.
    pub fn connections(&self) -> usize {
        self.link.connections.load(Ordering::SeqCst)
    }

    pub fn reset(&self) {
        self.link.log.lock().clear();
        self.link.connections.store(0, Ordering::SeqCst);
    }
}

/// Answers the requests of connection `conn` until it closes.
fn serve(stream: TcpStream, conn: usize, link: &Link) {
    let mut out = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let mut first_request = true;
    while let Some(head) = read_head_from(&mut reader, || false) {
        let req = Req::from_head(0, conn, &head);
        let arrived = link.started.elapsed();
        let page = match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/__log") => Some(log_page(link)),
            ("GET", "/__stats") => Some(stats_page(link)),
            _ => None,
        };
        if let Some(page) = page {
            let _ = out.write_all(&Reply::new(200).body(page).to_bytes());
            continue;
        }
        if first_request {
            // Counted here, so that connections asking only for the stats or
            // the log are not.
            link.connections.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(link.shape.connect_delay);
            first_request = false;
        }
        std::thread::sleep(link.shape.request_delay);
        if !answer(&mut out, &req, link, arrived) {
            return;
        }
    }
}

/// Every request so far, one per line.
fn log_page(link: &Link) -> String {
    link.log
        .lock()
        .iter()
        .map(|l| {
            format!(
                "conn {:>2}  {:>10}-{:<10} {:>9} B  {:>7.1}..{:>7.1} ms  {}\n",
                l.conn,
                l.first,
                l.last,
                l.sent,
                l.arrived.as_secs_f64() * 1e3,
                l.done.as_secs_f64() * 1e3,
                l.path
            )
        })
        .collect()
}

/// Counts for peers in other processes: requests, bytes, connections.
fn stats_page(link: &Link) -> String {
    let (requests, bytes) = {
        let log = link.log.lock();
        (log.len(), log.iter().map(|l| l.sent).sum::<u64>())
    };
    format!(
        "{{\"requests\": {requests}, \"bytes\": {bytes}, \"connections\": {}}}",
        link.connections.load(Ordering::SeqCst)
    )
}

/// Answers a request for a file; false if the client went away.
fn answer(out: &mut TcpStream, req: &Req, link: &Link, arrived: Duration) -> bool {
    let Some(data) = link.files.at(&req.path) else {
        return out.write_all(&Reply::new(404).to_bytes()).is_ok();
    };
    let size = data.len() as u64;
    // Answers without a body: to HEAD, and to a client that has this
    // version already (as a warm disk cache does).
    let bodiless = if req.method == "HEAD" {
        Some(
            Reply::new(200)
                .header("Content-Length", size.to_string())
                .header("Accept-Ranges", "bytes"),
        )
    } else if req.header("if-none-match") == Some(ETAG) {
        Some(Reply::new(304))
    } else {
        None
    };
    if let Some(reply) = bodiless {
        link.log.lock().push(Logged {
            conn: req.conn,
            path: req.path.as_str().into(),
            first: 0,
            last: 0,
            sent: 0,
            arrived,
            done: link.started.elapsed(),
        });
        return out
            .write_all(&reply.header("ETag", ETAG).to_bytes())
            .is_ok();
    }
    let (reply, bytes) = match select(req.header("range"), size) {
        Selection::Whole => (Reply::new(200), 0..size),
        Selection::Part(bytes) => (Reply::partial(&bytes, size), bytes),
        Selection::Unsatisfiable => {
            return out
                .write_all(&Reply::unsatisfiable(size).to_bytes())
                .is_ok();
        }
        Selection::Invalid(_) => return out.write_all(&Reply::new(400).to_bytes()).is_ok(),
    };
    let head = reply
        .header("Content-Length", (bytes.end - bytes.start).to_string())
        .header("ETag", ETAG);
    if out.write_all(&head.to_bytes()).is_err() {
        return false;
    }
    send_body(
        out,
        &data[bytes.start as usize..bytes.end as usize],
        &bytes,
        req,
        link,
        arrived,
    )
}

/// The ETag of every file served.
const ETAG: &str = "\"bench\"";

/// Sends `body` (the file's `bytes`) at the link's pace, logging it as it
/// goes; false if the client went away.
fn send_body(
    out: &mut TcpStream,
    body: &[u8],
    bytes: &Range<u64>,
    req: &Req,
    link: &Link,
    arrived: Duration,
) -> bool {
    let conn_start = Instant::now();
    let mut sent = 0u64;
    let at = {
        let mut log = link.log.lock();
        log.push(Logged {
            conn: req.conn,
            path: req.path.as_str().into(),
            first: bytes.start,
            last: bytes.end.saturating_sub(1),
            sent: 0,
            arrived,
            done: arrived,
        });
        log.len() - 1
    };
    for piece in body.chunks(64 * 1024) {
        if out.write_all(piece).is_err() {
            return false;
        }
        {
            let mut log = link.log.lock();
            log[at].sent += piece.len() as u64;
            log[at].done = link.started.elapsed();
        }
        sent += piece.len() as u64;
        let wait = pace(link, piece.len() as u64, sent, conn_start);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
    true
}

/// How long to wait after sending `piece` bytes, so that `sent` bytes on
/// this connection (since `conn_start`) keep under the per-connection cap,
/// and the shared link, which sends the pieces of all connections one after
/// the other, has carried this piece.
fn pace(link: &Link, piece: u64, sent: u64, conn_start: Instant) -> Duration {
    let mut wait = Duration::ZERO;
    if let Some(bps) = link.shape.per_connection_bps {
        let due = Duration::from_secs_f64(sent as f64 / bps);
        wait = wait.max(due.saturating_sub(conn_start.elapsed()));
    }
    if let Some(bps) = link.shape.total_bps {
        let now = Instant::now();
        let done = {
            let mut free = link.link_free.lock();
            *free = (*free).max(now) + Duration::from_secs_f64(piece as f64 / bps);
            *free
        };
        wait = wait.max(done.saturating_duration_since(now));
    }
    wait
}
