//! [`RangeServer`]: a well-behaved range server on 127.0.0.1 that records
//! every request and lets a test rewrite any answer through a hook; and the
//! answers of a correct range server, as replies and as raw bytes.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::range::{Selection, select};
use crate::raw_server::{After, RawServer};
use crate::reply::Reply;
use crate::request::Req;

type Hook = dyn Fn(&Req, Reply) -> Reply + Send + Sync;

struct State {
    data: Mutex<Arc<Vec<u8>>>,
    etag: Mutex<Option<String>>,
    last_modified: Mutex<Option<String>>,
    cache_control: Mutex<Option<String>>,
    log: Mutex<Vec<Req>>,
    hook: Mutex<Option<Arc<Hook>>>,
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

    /// Sets a hook that may rewrite every answer from now on.
    pub fn set_hook(&self, hook: impl Fn(&Req, Reply) -> Reply + Send + Sync + 'static) {
        *self.state.hook.lock() = Some(Arc::new(hook));
    }

    /// Sends `ETag: {etag}` (`None`: no ETag).
    pub fn set_etag(&self, etag: Option<&str>) {
        *self.state.etag.lock() = etag.map(str::to_owned);
    }

    /// Sends `Last-Modified: {lm}` (`None`: none, as at first).
    pub fn set_last_modified(&self, lm: Option<&str>) {
        *self.state.last_modified.lock() = lm.map(str::to_owned);
    }

    /// Sends `Cache-Control: {value}` with every `200`, `206` and `304`
    /// (`None`: no such header, as at first).
    pub fn set_cache_control(&self, value: Option<&str>) {
        *self.state.cache_control.lock() = value.map(str::to_owned);
    }

    /// Serves `data` from now on.
    pub fn set_data(&self, data: Vec<u8>) {
        *self.state.data.lock() = Arc::new(data);
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        self.raw.url(path)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.raw.addr()
    }

    /// Every request so far.
    pub fn log(&self) -> Vec<Req> {
        self.state.log.lock().clone()
    }

    /// Requests answered so far.
    pub fn requests(&self) -> usize {
        self.state.log.lock().len()
    }

    /// The bytes of every answer's body so far (a `304` has none): what
    /// the server sent of the file, and of error texts.
    pub fn body_bytes(&self) -> u64 {
        self.state.body_bytes.load(Ordering::SeqCst)
    }

    /// The closed ranges (`bytes=first-last`) of all requests so far, in
    /// order of arrival.
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

/// The answer of a correct range server holding `data`: `200` without a
/// range, `206` for one (`bytes=a-b`, `a-` or `-n`), `416` past the end,
/// `400` for anything else in `Range`, `412` for a failed `If-Match`, `304`
/// for a conditional request of the version it has, `403` for anything but
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
    if let Some(refusal) = precondition(etag, last_modified, req) {
        return refusal;
    }
    let selection = select(req.header("range"), data.len() as u64);
    let reply = Reply::for_selection(&selection, data);
    if !matches!(selection, Selection::Whole | Selection::Part(_)) {
        return reply;
    }
    let reply = match etag {
        Some(e) => reply.header("ETag", e),
        None => reply,
    };
    match last_modified {
        Some(lm) => reply.header("Last-Modified", lm),
        None => reply,
    }
}

/// The answer to a conditional request that is not the file's bytes: `412`
/// for a failed `If-Match`, `304` for the version the client has.
fn precondition(etag: Option<&str>, last_modified: Option<&str>, req: &Req) -> Option<Reply> {
    if let (Some(want), Some(have)) = (req.header("if-match"), etag) {
        if want != have {
            return Some(Reply::new(412).body("precondition failed"));
        }
    }
    let unchanged = match (req.header("if-none-match"), req.header("if-modified-since")) {
        (Some(tag), _) => etag == Some(tag),
        (None, Some(since)) => last_modified == Some(since),
        (None, None) => false,
    };
    if !unchanged {
        return None;
    }
    let not_modified = Reply::new(304);
    Some(match etag {
        Some(e) => not_modified.header("ETag", e),
        None => not_modified,
    })
}

/// A well-formed `206` for `first..=last` of `data` (`last` clamped to the
/// end), as raw bytes.
pub fn raw_206(data: &[u8], first: u64, last: u64) -> Vec<u8> {
    let bytes = first..last.saturating_add(1).min(data.len() as u64);
    Reply::for_selection(&Selection::Part(bytes), data).to_bytes()
}

/// Answers a raw request correctly from `data` (as [`range_reply`] does,
/// without validators).
pub fn raw_serve(data: &[u8], req: &Req, out: &mut TcpStream) -> After {
    let selection = select(req.header("range"), data.len() as u64);
    let _ = out.write_all(&Reply::for_selection(&selection, data).to_bytes());
    After::KeepAlive
}

/// The size [`sparse_server`] claims for its file: 1 PiB.
pub const SPARSE_SIZE: u64 = 1 << 50;

/// A server of one file of [`SPARSE_SIZE`] bytes: `head`, then zeros, with a
/// strong ETag. Counts the body bytes sent.
pub fn sparse_server(head: Vec<u8>) -> (RawServer, Arc<AtomicU64>) {
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let server = RawServer::new(move |req, out| {
        let reply = match select(req.header("range"), SPARSE_SIZE) {
            Selection::Part(bytes) => {
                let body: Vec<u8> = bytes
                    .clone()
                    .map(|i| head.get(i as usize).copied().unwrap_or(0))
                    .collect();
                counted.fetch_add(body.len() as u64, Ordering::SeqCst);
                Reply::partial(&bytes, SPARSE_SIZE)
                    .header("ETag", "\"sparse\"")
                    .body(body)
            }
            Selection::Unsatisfiable => Reply::unsatisfiable(SPARSE_SIZE),
            // Not a petabyte in one answer.
            Selection::Whole | Selection::Invalid(_) => Reply::new(400).body("a range, please"),
        };
        match out.write_all(&reply.to_bytes()) {
            Ok(()) => After::KeepAlive,
            Err(_) => After::Close,
        }
    });
    (server, sent)
}
