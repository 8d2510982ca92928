//! An HTTP/1.1 server in memory, for the driver's fuzz harness: a ureq
//! connector whose connections answer range GETs from a byte string, with
//! no socket and no thread, through the test servers' one request parser
//! and reply builder. The file it serves may claim more bytes than it
//! has (a small file served as a 2^50-byte one): those beyond read as zeros.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ureq::Agent;
use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
};

use crate::range::{Selection, select};
use crate::reply::Reply;
use crate::request::{MAX_HEAD, Req, read_head_from};

/// The file the in-memory server serves: `bytes`, then zeros up to `len`.
#[derive(Clone)]
pub struct Served {
    bytes: Arc<[u8]>,
    len: u64,
    requests: Arc<AtomicU64>,
}

impl fmt::Debug for Served {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("bytes", &self.bytes.len())
            .field("len", &self.len)
            .finish()
    }
}

impl Served {
    /// A file of `len` bytes whose first ones are `bytes` (the rest zeros);
    /// `len` is at least `bytes.len()`.
    pub fn new(bytes: &[u8], len: u64) -> Served {
        Served {
            bytes: bytes.into(),
            len: len.max(bytes.len() as u64),
            requests: Arc::default(),
        }
    }

    /// The size the server claims.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// How many of its bytes were given (the rest are zeros).
    pub fn given_len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether the file has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Copies the file's bytes from `pos` into `buf` (zeros past the bytes
    /// given, and past the end).
    pub fn copy_at(&self, pos: u64, buf: &mut [u8]) {
        buf.fill(0);
        let Ok(start) = usize::try_from(pos) else {
            return;
        };
        if let Some(have) = self.bytes.get(start..) {
            let n = have.len().min(buf.len());
            buf[..n].copy_from_slice(&have[..n]);
        }
    }

    /// An agent whose every connection reaches this file, whatever the URL.
    pub fn agent(&self) -> Agent {
        let config = Config::builder()
            .proxy(None)
            .max_idle_connections_per_host(64)
            .build();
        Agent::with_parts(config, MemoryServer(self.clone()), AnyHost)
    }
}

/// What the server answers to one request: the status line and headers,
/// then the file's bytes in `body`.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    head: Vec<u8>,
    body: Range<u64>,
}

/// The answer to the request whose head is `head`, for a file of `len`
/// bytes: a single range (`a-b`, `a-` or `-n`, clamped to the file) gets a
/// 206, a range past the end a 416, anything but a `GET` a 405, and
/// anything else a 400 (no range: the file may claim a petabyte).
fn answer(head: &str, len: u64) -> Answer {
    let req = Req::from_head(0, 0, head);
    let refuse = |status| Answer {
        head: Reply::new(status).to_bytes(),
        body: 0..0,
    };
    if req.method != "GET" {
        return refuse(405);
    }
    match select(req.header("range"), len) {
        Selection::Part(bytes) => Answer {
            head: Reply::partial(&bytes, len)
                .header("Content-Length", (bytes.end - bytes.start).to_string())
                .header("Accept-Ranges", "bytes")
                .header("ETag", "\"fuzz\"")
                .to_bytes(),
            body: bytes,
        },
        Selection::Unsatisfiable => Answer {
            head: Reply::unsatisfiable(len).to_bytes(),
            body: 0..0,
        },
        Selection::Whole | Selection::Invalid(_) => refuse(400),
    }
}

/// Resolves every host to one placeholder address, never used.
#[derive(Debug)]
struct AnyHost;

impl Resolver for AnyHost {
    fn resolve(
        &self,
        _uri: &Uri,
        _config: &Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(SocketAddr::from((Ipv4Addr::LOCALHOST, 80)));
        Ok(addrs)
    }
}

/// Makes a connection to the served file for every connection ureq opens.
#[derive(Debug)]
struct MemoryServer(Served);

impl Connector for MemoryServer {
    type Out = Connection;

    fn connect(
        &self,
        details: &ConnectionDetails,
        _chained: Option<()>,
    ) -> Result<Option<Connection>, ureq::Error> {
        let config = details.config;
        Ok(Some(Connection {
            served: self.0.clone(),
            buffers: LazyBuffers::new(config.input_buffer_size(), config.output_buffer_size()),
            request: Vec::new(),
            head: VecDeque::new(),
            body: 0..0,
        }))
    }
}

/// One connection: the request being received, and what is left to send
/// of the answer.
struct Connection {
    served: Served,
    buffers: LazyBuffers,
    request: Vec<u8>,
    head: VecDeque<u8>,
    body: Range<u64>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("body", &self.body)
            .finish()
    }
}

impl Transport for Connection {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, _timeout: NextTimeout) -> Result<(), ureq::Error> {
        let sent = &self.buffers.output()[..amount];
        self.request.extend_from_slice(sent);
        if self.request.len() > MAX_HEAD {
            return Err(ureq::Error::Io(io::Error::other("request head too long")));
        }
        let mut unread = &self.request[..];
        if let Some(head) = read_head_from(&mut unread, || false) {
            let used = self.request.len() - unread.len();
            self.request.drain(..used);
            let reply = answer(&head, self.served.len);
            self.served.requests.fetch_add(1, Ordering::Relaxed);
            self.head.extend(reply.head);
            self.body = reply.body;
        }
        Ok(())
    }

    fn await_input(&mut self, _timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let buf = self.buffers.input_append_buf();
        let mut n = 0;
        while n < buf.len() {
            let Some(b) = self.head.pop_front() else {
                break;
            };
            buf[n] = b;
            n += 1;
        }
        let body = (self.body.end - self.body.start).min((buf.len() - n) as u64) as usize;
        if body > 0 {
            self.served.copy_at(self.body.start, &mut buf[n..n + body]);
            self.body.start += body as u64;
            n += body;
        }
        if n == 0 {
            return Err(ureq::Error::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "nothing more to answer",
            )));
        }
        self.buffers.input_appended(n);
        Ok(true)
    }

    fn is_open(&mut self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(range: &str) -> String {
        format!("GET /f HTTP/1.1\r\nHost: x\r\nRange: bytes={range}\r\n\r\n")
    }

    fn head_of(a: &Answer) -> String {
        String::from_utf8_lossy(&a.head).into_owned()
    }

    #[test]
    fn ranges_are_clamped_to_the_claimed_size() {
        assert_eq!(answer(&get("0-9"), 100).body, 0..10);
        assert_eq!(answer(&get("90-199"), 100).body, 90..100);
        assert_eq!(answer(&get("-30"), 100).body, 70..100);
        assert_eq!(answer(&get("-300"), 100).body, 0..100);
        assert_eq!(answer(&get("95-"), 100).body, 95..100);
        let a = head_of(&answer(&get("0-9"), 100));
        assert!(a.starts_with("HTTP/1.1 206 "), "{a}");
        assert!(a.contains("Content-Range: bytes 0-9/100\r\n"), "{a}");
        assert_eq!(a.matches("Content-Length").count(), 1, "{a}");
        assert!(a.contains("Content-Length: 10\r\n"), "{a}");
    }

    #[test]
    fn past_the_end_is_416_and_nonsense_400() {
        for unsatisfiable in ["100-200", "-0", "100-"] {
            let a = head_of(&answer(&get(unsatisfiable), 100));
            assert!(a.starts_with("HTTP/1.1 416"), "{unsatisfiable}: {a}");
            assert!(a.contains("bytes */100"), "{unsatisfiable}: {a}");
        }
        for bad in ["5-1", "x-9", "", "0-1,5-9", "0-99999999999999999999"] {
            let a = answer(&get(bad), 100);
            assert!(head_of(&a).starts_with("HTTP/1.1 400"), "{bad}: {a:?}");
            assert_eq!(a.body, 0..0);
        }
        let no_range = answer("GET /f HTTP/1.1\r\nHost: x\r\n\r\n", 100);
        assert!(head_of(&no_range).starts_with("HTTP/1.1 400"));
        let head = answer("HEAD /f HTTP/1.1\r\n\r\n", 100);
        assert!(head_of(&head).starts_with("HTTP/1.1 405"));
    }

    #[test]
    fn bytes_past_those_given_are_zeros() {
        let served = Served::new(b"abc", 1 << 50);
        let mut buf = [9u8; 5];
        served.copy_at(1, &mut buf);
        assert_eq!(&buf, b"bc\0\0\0");
        served.copy_at(1 << 49, &mut buf);
        assert_eq!(buf, [0; 5]);
    }

    #[test]
    fn a_remote_file_reads_the_served_bytes_through_it() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let served = Served::new(&bytes, 1 << 50);
        let file = remfile::RemoteFile::builder()
            .agent(served.agent())
            .block_size(4096)
            .open("http://memory.invalid/file")
            .expect("open");
        assert_eq!(file.len(), 1 << 50);
        let mut buf = vec![0u8; 10_000];
        file.read_exact_at(95_000, &mut buf).expect("read");
        let mut expected = vec![0u8; 10_000];
        served.copy_at(95_000, &mut expected);
        assert_eq!(buf, expected);
        assert!(served.requests() >= 2);
    }
}
