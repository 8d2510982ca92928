//! A range server that behaves like a cloud object store: a delay per
//! request (the round trip), an extra delay per new connection (the
//! handshake), optional bandwidth caps per connection and in total, and a log
//! of every request. Listens on 127.0.0.1 only.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// What makes the server slow.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape {
    /// Added before each response's headers.
    pub request_delay: Duration,
    /// Added once per new connection, before its first response.
    pub connect_delay: Duration,
    /// Bytes per second for each connection, if capped.
    pub per_connection_bps: Option<f64>,
    /// Bytes per second for all connections together, if capped.
    pub total_bps: Option<f64>,
}

/// One request as served.
#[derive(Debug, Clone, Copy)]
pub struct Logged {
    pub conn: usize,
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
    log: Arc<Mutex<Vec<Logged>>>,
    connections: Arc<AtomicUsize>,
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

    fn serve(data: Files, shape: Shape) -> CloudServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let total_sent = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let (l, c) = (log.clone(), connections.clone());
        std::thread::spawn(move || {
            for (accepted, stream) in listener.incoming().flatten().enumerate() {
                let conn = accepted + 1;
                let (data, log, total_sent, c) =
                    (data.clone(), l.clone(), total_sent.clone(), c.clone());
                std::thread::spawn(move || {
                    serve(stream, conn, &c, &data, shape, &log, &total_sent, started)
                });
            }
        });
        CloudServer {
            addr,
            log,
            connections,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn log(&self) -> Vec<Logged> {
        self.log.lock().clone()
    }

    /// Connections that made at least one request for the file.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    pub fn reset(&self) {
        self.log.lock().clear();
        self.connections.store(0, Ordering::SeqCst);
    }
}

#[allow(clippy::too_many_arguments)]
fn serve(
    stream: TcpStream,
    conn: usize,
    connections: &AtomicUsize,
    files: &Files,
    shape: Shape,
    log: &Mutex<Vec<Logged>>,
    total_sent: &AtomicU64,
    started: Instant,
) {
    let mut out = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let mut first_request = true;
    loop {
        let mut range_spec: Option<String> = None;
        let mut path = String::new();
        let mut stats_request = false;
        let mut log_request = false;
        let mut head_request = false;
        let mut unchanged = false;
        let mut line = String::new();
        let mut head_lines = 0;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            head_lines += 1;
            if head_lines == 1 {
                let target = line.split_whitespace().nth(1).unwrap_or("");
                // The query names no other file (files opened under several
                // names in one survey say `?copy=N`).
                path = target.split('?').next().unwrap_or("").to_owned();
            }
            if head_lines == 1 && line.starts_with("GET /__stats ") {
                stats_request = true;
            }
            if head_lines == 1 && line.starts_with("GET /__log ") {
                log_request = true;
            }
            if head_lines == 1 && line.starts_with("HEAD ") {
                head_request = true;
            }
            if line
                .to_ascii_lowercase()
                .starts_with("if-none-match: \"bench\"")
            {
                unchanged = true;
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(spec) = lower.strip_prefix("range: bytes=") {
                range_spec = Some(spec.trim().to_owned());
            }
        }
        if head_lines == 0 {
            return;
        }
        let data = files.at(&path).unwrap_or(&[]);
        let range = range_spec.map(|spec| {
            let size = data.len() as u64;
            let (a, b) = spec.split_once('-').unwrap_or(("0", ""));
            if a.is_empty() {
                // A suffix range: the last b bytes.
                let n: u64 = b.parse().unwrap_or(0);
                (size.saturating_sub(n), size.saturating_sub(1))
            } else {
                (a.parse().unwrap_or(0), b.parse().unwrap_or(u64::MAX))
            }
        });
        let arrived = started.elapsed();
        if log_request {
            // Every request so far, one per line.
            let body: String = log
                .lock()
                .iter()
                .map(|l| {
                    format!(
                        "conn {:>2}  {:>10}-{:<10} {:>9} B  {:>7.1}..{:>7.1} ms\n",
                        l.conn,
                        l.first,
                        l.last,
                        l.sent,
                        l.arrived.as_secs_f64() * 1e3,
                        l.done.as_secs_f64() * 1e3
                    )
                })
                .collect();
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            continue;
        }
        if stats_request {
            // Counts for peers in other processes: requests, bytes, connections.
            let (requests, bytes) = {
                let log = log.lock();
                (log.len(), log.iter().map(|l| l.sent).sum::<u64>())
            };
            let body = format!(
                "{{\"requests\": {requests}, \"bytes\": {bytes}, \"connections\": {}}}",
                connections.load(Ordering::SeqCst)
            );
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            continue;
        }
        if first_request {
            // Counted here, so that connections asking only for the stats or
            // the log are not.
            connections.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(shape.connect_delay);
            first_request = false;
        }
        std::thread::sleep(shape.request_delay);
        if files.at(&path).is_none() {
            let _ = write!(out, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
            continue;
        }
        let size = data.len() as u64;
        // Answers without a body: to HEAD, and to a client that has this
        // version already (as a warm disk cache does).
        let bodiless = if head_request {
            Some(format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nAccept-Ranges: bytes\r\nETag: \"bench\"\r\n\r\n"
            ))
        } else if unchanged {
            Some(
                "HTTP/1.1 304 Not Modified\r\nETag: \"bench\"\r\nContent-Length: 0\r\n\r\n"
                    .to_owned(),
            )
        } else {
            None
        };
        if let Some(head) = bodiless {
            log.lock().push(Logged {
                conn,
                first: 0,
                last: 0,
                sent: 0,
                arrived,
                done: started.elapsed(),
            });
            let _ = out.write_all(head.as_bytes());
            continue;
        }
        let (first, last) = range.unwrap_or((0, size.saturating_sub(1)));
        if first >= size {
            let _ = write!(
                out,
                "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\nContent-Length: 0\r\n\r\n"
            );
            continue;
        }
        let last = last.min(size - 1);
        let status = if range.is_some() {
            "206 Partial Content"
        } else {
            "200 OK"
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Range: bytes {first}-{last}/{size}\r\nContent-Length: {}\r\nETag: \"bench\"\r\n\r\n",
            last - first + 1
        );
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        let body = &data[first as usize..=last as usize];
        let conn_start = Instant::now();
        let mut sent = 0u64;
        let at = {
            let mut log = log.lock();
            log.push(Logged {
                conn,
                first,
                last,
                sent: 0,
                arrived,
                done: arrived,
            });
            log.len() - 1
        };
        for piece in body.chunks(64 * 1024) {
            if out.write_all(piece).is_err() {
                return;
            }
            {
                let mut log = log.lock();
                log[at].sent += piece.len() as u64;
                log[at].done = started.elapsed();
            }
            sent += piece.len() as u64;
            let all =
                total_sent.fetch_add(piece.len() as u64, Ordering::Relaxed) + piece.len() as u64;
            let mut wait = Duration::ZERO;
            if let Some(bps) = shape.per_connection_bps {
                let due = Duration::from_secs_f64(sent as f64 / bps);
                wait = wait.max(due.saturating_sub(conn_start.elapsed()));
            }
            if let Some(bps) = shape.total_bps {
                let due = Duration::from_secs_f64(all as f64 / bps);
                wait = wait.max(due.saturating_sub(started.elapsed()));
            }
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }
}
