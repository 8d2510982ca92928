//! Test servers on 127.0.0.1, shared by the integration tests.
//!
//! * [`RangeServer`]: a well-behaved range server that records every
//!   request and lets a test rewrite any answer through a hook.
//! * [`RawServer`]: a `std::net` server whose handler writes raw bytes, for
//!   faults below HTTP (closing mid-body, stalling, lying `Content-Length`).
#![allow(dead_code)]

pub mod python;
pub mod skip;

use std::io::{BufRead, BufReader, Write};

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;

/// A directory for one test: absent when made (the test creates it, or
/// has the code under test create it), removed when dropped, also when the
/// test fails.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// `remfile-{name}-{pid}` in the system's temporary directory.
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("remfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // A test may have left a file where the directory was.
        if std::fs::remove_dir_all(&self.0).is_err() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Deterministic pseudo-random bytes (xorshift), different for each seed.
pub fn test_data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Req {
    /// 1-based number of this request on its server.
    pub n: usize,
    /// 1-based number of the connection it came on.
    pub conn: usize,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: Vec<(String, String)>,
}

impl Req {
    fn parse(n: usize, conn: usize, head: &str) -> Req {
        let mut lines = head.lines();
        let mut first = lines.next().unwrap_or("").split_whitespace();
        let method = first.next().unwrap_or("").to_owned();
        let target = first.next().unwrap_or("").to_owned();
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
            None => (target, None),
        };
        let headers = lines
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                Some((k.trim().to_owned(), v.trim().to_owned()))
            })
            .collect();
        Req {
            n,
            conn,
            method,
            path,
            query,
            headers,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The requested range as (first, last-inclusive), if a single closed range.
    pub fn range(&self) -> Option<(u64, u64)> {
        parse_range(self.header("range")?)
    }
}

fn parse_range(v: &str) -> Option<(u64, u64)> {
    let spec = v.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// An answer, which a hook may rewrite.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Reply {
        self.body = body.into();
        self
    }

    /// Sets a header, replacing one of the same name.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    pub fn without(mut self, name: &str) -> Reply {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    pub fn redirect(status: u16, location: &str) -> Reply {
        Reply::new(status).header("Location", location)
    }

    /// The reply as bytes on the wire, with a `Content-Length` unless the
    /// reply sets its own.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} X\r\n", self.status);
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !self
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

type Hook = dyn Fn(&Req, Reply) -> Reply + Send + Sync;

struct State {
    data: Mutex<Arc<Vec<u8>>>,
    etag: Mutex<Option<String>>,
    last_modified: Mutex<Option<String>>,
    cache_control: Mutex<Option<String>>,
    log: Mutex<Vec<Req>>,
    hook: Mutex<Option<Arc<Hook>>>,
    /// Bytes of the bodies of the answers written (after the hook).
    body_bytes: AtomicU64,
}

/// A range server for one file, served at every path.
pub struct RangeServer {
    raw: RawServer,
    state: Arc<State>,
}

impl RangeServer {
    /// Serves `data` with the strong ETag `"v1"`.
    pub fn new(data: Vec<u8>) -> RangeServer {
        let state = Arc::new(State {
            data: Mutex::new(Arc::new(data)),
            etag: Mutex::new(Some("\"v1\"".to_owned())),
            last_modified: Mutex::new(None),
            cache_control: Mutex::new(None),
            log: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
            body_bytes: AtomicU64::new(0),
        });
        let st = state.clone();
        let raw = RawServer::new(move |req, out| {
            st.log.lock().push(req.clone());
            let mut reply = normal_reply(&st, req);
            let hook = st.hook.lock().clone();
            if let Some(hook) = hook {
                reply = hook(req, reply);
            }
            st.body_bytes
                .fetch_add(reply.body.len() as u64, Ordering::SeqCst);
            match out.write_all(&reply.to_bytes()) {
                Ok(()) => After::KeepAlive,
                Err(_) => After::Close,
            }
        });
        RangeServer { raw, state }
    }

    /// Sets a hook that may rewrite every answer.
    pub fn with_hook(self, hook: impl Fn(&Req, Reply) -> Reply + Send + Sync + 'static) -> Self {
        self.set_hook(hook);
        self
    }

    pub fn set_hook(&self, hook: impl Fn(&Req, Reply) -> Reply + Send + Sync + 'static) {
        *self.state.hook.lock() = Some(Arc::new(hook));
    }

    pub fn set_etag(&self, etag: Option<&str>) {
        *self.state.etag.lock() = etag.map(str::to_owned);
    }

    pub fn set_last_modified(&self, lm: Option<&str>) {
        *self.state.last_modified.lock() = lm.map(str::to_owned);
    }

    /// Sends `Cache-Control: {value}` with every `200`, `206` and `304`
    /// (`None`: no such header, as at first).
    pub fn set_cache_control(&self, value: Option<&str>) {
        *self.state.cache_control.lock() = value.map(str::to_owned);
    }

    pub fn set_data(&self, data: Vec<u8>) {
        *self.state.data.lock() = Arc::new(data);
    }

    pub fn url(&self, path: &str) -> String {
        self.raw.url(path)
    }

    pub fn addr(&self) -> SocketAddr {
        self.raw.addr
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Req> {
        self.state.log.lock().clone()
    }

    pub fn requests(&self) -> usize {
        self.state.log.lock().len()
    }

    /// The bytes of every answer's body so far (a `304` has none): what
    /// the server sent of the file, and of error texts.
    pub fn body_bytes(&self) -> u64 {
        self.state.body_bytes.load(Ordering::SeqCst)
    }

    /// The ranges of all requests so far, in order of arrival.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.log().iter().filter_map(Req::range).collect()
    }

    /// Client connections accepted.
    pub fn connections(&self) -> usize {
        self.raw.connections()
    }

    /// See [`RawServer::peak_open_connections`].
    pub fn peak_open_connections(&self) -> usize {
        self.raw.peak_open_connections()
    }

    /// See [`RawServer::peak_requests_at_once`].
    pub fn peak_requests_at_once(&self) -> usize {
        self.raw.peak_requests_at_once()
    }
}

/// The answer a correct range server gives.
fn normal_reply(state: &State, req: &Req) -> Reply {
    let data = state.data.lock().clone();
    let etag = state.etag.lock().clone();
    let last_modified = state.last_modified.lock().clone();
    let reply = range_reply(&data, etag.as_deref(), last_modified.as_deref(), req);
    match state.cache_control.lock().as_deref() {
        Some(value) if matches!(reply.status, 200 | 206 | 304) => {
            reply.header("Cache-Control", value)
        }
        _ => reply,
    }
}

/// The answer of a correct range server holding `data`: `206` for a range,
/// `416` past the end, `412` for a failed `If-Match`, `403` for anything but
/// `GET` (as a presigned URL answers `HEAD`).
pub fn range_reply(
    data: &[u8],
    etag: Option<&str>,
    last_modified: Option<&str>,
    req: &Req,
) -> Reply {
    if req.method != "GET" {
        return Reply::new(403).body("only GET is allowed here (like a presigned URL)");
    }
    let size = data.len() as u64;
    let mut base = Reply::new(200);
    if let Some(e) = etag {
        base = base.header("ETag", e);
    }
    if let Some(lm) = last_modified {
        base = base.header("Last-Modified", lm);
    }
    if let (Some(want), Some(have)) = (req.header("if-match"), etag) {
        if want != have {
            return Reply::new(412).body("precondition failed");
        }
    }
    // A conditional GET for the version the client has: nothing to send.
    let unchanged = match (req.header("if-none-match"), req.header("if-modified-since")) {
        (Some(tag), _) => etag == Some(tag),
        (None, Some(since)) => last_modified == Some(since),
        (None, None) => false,
    };
    if unchanged {
        let mut not_modified = Reply::new(304);
        if let Some(e) = etag {
            not_modified = not_modified.header("ETag", e);
        }
        return not_modified;
    }
    // A suffix range, `bytes=-N`: the last N bytes.
    let suffix = req
        .header("range")
        .and_then(|r| r.strip_prefix("bytes=-"))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|&n| n > 0 && size > 0)
        .map(|n| (size - n.min(size), size - 1));
    match req.header("range") {
        None => base.body(data.to_vec()),
        Some(r) => match suffix.or_else(|| parse_range(r)) {
            Some((first, _)) if first >= size => Reply::new(416)
                .header("Content-Range", format!("bytes */{size}"))
                .body(Vec::new()),
            Some((first, last)) if first <= last => {
                let last = last.min(size - 1);
                let mut reply = base
                    .body(data[first as usize..=last as usize].to_vec())
                    .header("Content-Range", format!("bytes {first}-{last}/{size}"));
                reply.status = 206;
                reply
            }
            _ => Reply::new(400).body("bad range"),
        },
    }
}

/// Reads one request head (up to the blank line) from a stream; `None` at
/// the end of the stream.
pub fn read_head(stream: &mut impl std::io::Read) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
        if head.len() > 64 * 1024 {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

impl Req {
    /// Parses a request head read with [`read_head`].
    pub fn from_head(n: usize, conn: usize, head: &str) -> Req {
        Req::parse(n, conn, head)
    }
}

/// What the handler wants done with the connection afterwards.
pub enum After {
    KeepAlive,
    Close,
}

type RawHandler = dyn Fn(&Req, &mut TcpStream) -> After + Send + Sync;

/// A server whose handler writes raw bytes to the socket; one thread per
/// connection, keep-alive.
pub struct RawServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
    gauges: Arc<Gauges>,
    acceptor: Option<JoinHandle<()>>,
}

/// What a server had at once: connections open, requests being answered.
#[derive(Default)]
pub struct Gauges {
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

/// The name of a test server's threads (a test that counts the threads of
/// the crate leaves them out).
pub const SERVER_THREAD: &str = "test-server";

impl RawServer {
    pub fn new(
        handler: impl Fn(&Req, &mut TcpStream) -> After + Send + Sync + 'static,
    ) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let gauges = Arc::new(Gauges::default());
        let handler: Arc<RawHandler> = Arc::new(handler);
        let acceptor = {
            let (stop, requests, connections, gauges) = (
                stop.clone(),
                requests.clone(),
                connections.clone(),
                gauges.clone(),
            );
            let accept = move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let conn = connections.fetch_add(1, Ordering::SeqCst) + 1;
                            let (handler, requests, stop, gauges) = (
                                handler.clone(),
                                requests.clone(),
                                stop.clone(),
                                gauges.clone(),
                            );
                            Gauges::up(&gauges.open, &gauges.peak_open);
                            let serve = move || {
                                handle_connection(
                                    stream, conn, &*handler, &requests, &stop, &gauges,
                                );
                                Gauges::down(&gauges.open);
                            };
                            std::thread::Builder::new()
                                .name(SERVER_THREAD.into())
                                .spawn(serve)
                                .expect("a thread for a connection");
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(2)),
                    }
                }
            };
            std::thread::Builder::new()
                .name(SERVER_THREAD.into())
                .spawn(accept)
                .expect("a thread for the acceptor")
        };
        RawServer {
            addr,
            stop,
            requests,
            connections,
            gauges,
            acceptor: Some(acceptor),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The most connections open at once so far.
    pub fn peak_open_connections(&self) -> usize {
        self.gauges.peak_open.load(Ordering::SeqCst)
    }

    /// The most requests answered at once so far.
    pub fn peak_requests_at_once(&self) -> usize {
        self.gauges.peak_answering.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
    }
}

fn handle_connection(
    stream: TcpStream,
    conn: usize,
    handler: &RawHandler,
    requests: &AtomicUsize,
    stop: &AtomicBool,
    gauges: &Gauges,
) {
    stream.set_nonblocking(false).ok();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok();
    let mut writer = stream.try_clone().expect("clone stream");
    let mut reader = BufReader::new(stream);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => return,
                Ok(_) => {
                    let end = line == "\r\n" || line == "\n";
                    head.push_str(&line);
                    if end {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
        let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
        let req = Req::parse(n, conn, &head);
        Gauges::up(&gauges.answering, &gauges.peak_answering);
        let after = handler(&req, &mut writer);
        Gauges::down(&gauges.answering);
        match after {
            After::KeepAlive => {}
            After::Close => {
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

/// A well-formed `206` for `first..=last` of `data`, as raw bytes.
pub fn raw_206(data: &[u8], first: u64, last: u64) -> Vec<u8> {
    let last = last.min(data.len() as u64 - 1);
    Reply::new(206)
        .header(
            "Content-Range",
            format!("bytes {first}-{last}/{}", data.len()),
        )
        .body(&data[first as usize..=last as usize])
        .to_bytes()
}

/// Answers a raw request correctly from `data`.
pub fn raw_serve(data: &[u8], req: &Req, out: &mut TcpStream) -> After {
    let (first, last) = req.range().expect("a range request");
    let _ = out.write_all(&raw_206(data, first, last));
    After::KeepAlive
}

/// A builder for tests: no proxy from the environment, short timeouts and
/// backoffs, so failures show up in milliseconds.
pub fn builder() -> remfile::Builder {
    remfile::RemoteFile::builder()
        .proxy_from_env(false)
        // Request counts that do not depend on timing; the link's own tests
        // set it.
        .link(remfile::Link::Ignored)
        .connect_timeout(Duration::from_secs(2))
        .idle_timeout(Duration::from_secs(2))
        .read_timeout(Duration::from_secs(20))
        .retry_policy(
            remfile::RetryPolicy::default()
                .initial_backoff(Duration::from_millis(5))
                .max_backoff(Duration::from_millis(20)),
        )
}

/// `len` bytes of `file` from `pos`, which must read.
pub fn read_at(file: &remfile::RemoteFile, pos: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    file.read_exact_at(pos, &mut buf).unwrap();
    buf
}

/// The size [`sparse_server`] claims for its file: 1 PiB.
pub const SPARSE_SIZE: u64 = 1 << 50;

/// A server of one file of [`SPARSE_SIZE`] bytes: `head`, then zeros, with a
/// strong ETag. Counts the body bytes sent.
pub fn sparse_server(head: Vec<u8>) -> (RawServer, Arc<std::sync::atomic::AtomicU64>) {
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = sent.clone();
    let server = RawServer::new(move |req, out| {
        let (first, last) = req.range().expect("a range request");
        let last = last.min(SPARSE_SIZE - 1);
        let body: Vec<u8> = (first..=last)
            .map(|i| head.get(i as usize).copied().unwrap_or(0))
            .collect();
        counted.fetch_add(body.len() as u64, Ordering::SeqCst);
        let reply = Reply::new(206)
            .header("ETag", "\"sparse\"")
            .header(
                "Content-Range",
                format!("bytes {first}-{last}/{SPARSE_SIZE}"),
            )
            .body(body);
        match out.write_all(&reply.to_bytes()) {
            Ok(()) => After::KeepAlive,
            Err(_) => After::Close,
        }
    });
    (server, sent)
}

/// Aborts the test binary if not dropped within `limit`: a test that hangs
/// fails rather than freezing the run. Dropping it drops the sender, which
/// ends the watch.
pub struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

pub fn watchdog(limit: Duration) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            eprintln!("watchdog: a test hung for {limit:?}");
            std::process::abort();
        }
    });
    Watchdog(tx)
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
