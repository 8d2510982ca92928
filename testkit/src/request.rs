//! The one reader and parser of an HTTP/1.1 request's head that every test
//! server uses: the socket servers, the in-memory connector and the
//! benchmarks' server.

use std::io::{BufRead, BufReader, ErrorKind, Read};

use crate::range::{self, ByteRange, RangeError};

/// The most bytes of a request's head read: the crate's requests have a
/// few hundred.
pub const MAX_HEAD: usize = 64 << 10;

/// A request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    /// 1-based number of this request on its server (0 where nothing
    /// counts them).
    pub n: usize,
    /// 1-based number of the connection it came on (0 where nothing counts
    /// them).
    pub conn: usize,
    /// The method (`GET`, `HEAD`…), as sent.
    pub method: String,
    /// The target's path, before any `?`.
    pub path: String,
    /// The target's query, after the first `?`.
    pub query: Option<String>,
    /// Every header line that has a `:`, name and value trimmed, in order.
    pub headers: Vec<(String, String)>,
}

impl Req {
    /// Parses a request head (its request line, then header lines, as
    /// [`read_head`] returns it): request `n` on connection `conn`. A line
    /// without a `:` is left out; nothing fails (a nonsense request line
    /// gives empty fields).
    pub fn from_head(n: usize, conn: usize, head: &str) -> Req {
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

    /// The value of the first header named `name` (in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Range` header, parsed ([`range::parse`]), if there is one.
    pub fn byte_range(&self) -> Option<Result<ByteRange, RangeError>> {
        self.header("range").map(range::parse)
    }

    /// The requested range as (first, last-inclusive), if a single closed
    /// range (`bytes=first-last`).
    pub fn range(&self) -> Option<(u64, u64)> {
        match self.byte_range()? {
            Ok(ByteRange::Closed { first, last }) => Some((first, last)),
            _ => None,
        }
    }
}

/// Reads one request head, up to and with its blank line, from `reader`, a
/// line at a time; never reads past it. `None` at the end of the stream, on
/// an error, past [`MAX_HEAD`] bytes, or when a read times out and
/// `keep_waiting` says to stop (it is asked at every timeout).
pub fn read_head_from(
    reader: &mut impl BufRead,
    mut keep_waiting: impl FnMut() -> bool,
) -> Option<String> {
    let mut head = Vec::new();
    loop {
        // Where the line being read started: a read that timed out may
        // have left part of it.
        let line_start = head.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        match reader.read_until(b'\n', &mut head) {
            Ok(0) => return None,
            Ok(_) => {
                let line = &head[line_start..];
                if line == b"\r\n" || line == b"\n" {
                    return Some(String::from_utf8_lossy(&head).into_owned());
                }
                if head.len() > MAX_HEAD {
                    return None;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                if !keep_waiting() {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

/// Reads one request head from an unbuffered stream, a byte at a time (so
/// that nothing after it is taken from the stream); `None` at the end of
/// the stream, or on any error (a timeout too).
pub fn read_head(stream: &mut impl Read) -> Option<String> {
    read_head_from(&mut BufReader::with_capacity(1, stream), || false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_gives_method_target_and_headers() {
        let req = Req::from_head(
            3,
            2,
            "GET /a/b.h5?x=1?y HTTP/1.1\r\nHost: h\r\nRANGE:  bytes=0-9 \r\nno colon\r\n\r\n",
        );
        assert_eq!((req.n, req.conn), (3, 2));
        assert_eq!(req.method, "GET");
        assert_eq!(req.path, "/a/b.h5");
        assert_eq!(req.query.as_deref(), Some("x=1?y"));
        assert_eq!(req.headers.len(), 2);
        assert_eq!(req.header("range"), Some("bytes=0-9"));
        assert_eq!(req.header("Host"), Some("h"));
        assert_eq!(req.header("accept"), None);
        assert_eq!(req.range(), Some((0, 9)));
    }

    #[test]
    fn the_first_of_repeated_headers_counts() {
        let req = Req::from_head(
            1,
            1,
            "GET / HTTP/1.1\nRange: bytes=1-2\nRange: bytes=3-4\n\n",
        );
        assert_eq!(req.range(), Some((1, 2)));
    }

    #[test]
    fn only_a_closed_range_is_a_range_pair() {
        let with = |v: &str| Req::from_head(1, 1, &format!("GET / HTTP/1.1\r\nRange: {v}\r\n\r\n"));
        assert_eq!(with("bytes=-5").range(), None);
        assert_eq!(with("bytes=5-").range(), None);
        assert_eq!(with("bytes=9-5").range(), None);
        assert_eq!(
            with("bytes=-5").byte_range(),
            Some(Ok(ByteRange::Suffix(5)))
        );
        assert_eq!(
            with("bytes=0-1,2-3").byte_range(),
            Some(Err(RangeError::Multiple))
        );
        assert_eq!(
            Req::from_head(1, 1, "GET / HTTP/1.1\r\n\r\n").byte_range(),
            None
        );
    }

    #[test]
    fn a_nonsense_head_gives_empty_fields() {
        for head in ["", "\r\n", "GET", ":::\r\n"] {
            let req = Req::from_head(0, 0, head);
            assert_eq!(req.path, "", "{head:?}");
            assert_eq!(req.range(), None, "{head:?}");
        }
    }

    #[test]
    fn heads_are_read_one_at_a_time_and_nothing_past_them() {
        let wire = b"GET /1 HTTP/1.1\r\nA: b\r\n\r\nBODYGET /2 HTTP/1.1\r\n\r\n";
        let mut stream = &wire[..];
        let head = read_head(&mut stream).unwrap();
        assert_eq!(head, "GET /1 HTTP/1.1\r\nA: b\r\n\r\n");
        assert_eq!(stream, b"BODYGET /2 HTTP/1.1\r\n\r\n");
        let mut buffered = &b"GET /2 HTTP/1.1\n\nGET /3"[..];
        assert_eq!(
            read_head_from(&mut buffered, || false).as_deref(),
            Some("GET /2 HTTP/1.1\n\n")
        );
        // The end of the stream inside a head: none.
        assert_eq!(read_head_from(&mut buffered, || false), None);
    }

    #[test]
    fn a_head_too_long_is_refused() {
        let mut long = b"GET / HTTP/1.1\r\n".to_vec();
        while long.len() <= MAX_HEAD {
            long.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        long.extend_from_slice(b"\r\n");
        assert_eq!(read_head(&mut &long[..]), None);
    }

    /// A reader that times out once in the middle of a line.
    struct Stalls<'a>(&'a [u8], bool);

    impl Read for Stalls<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if !self.1 && self.0.starts_with(b"\r\n") {
                self.1 = true;
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = 1.min(self.0.len()).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn a_timeout_inside_a_line_does_not_end_the_head() {
        let wire = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut asked = 0;
        let head = read_head_from(&mut BufReader::new(Stalls(&wire[..], false)), || {
            asked += 1;
            true
        });
        assert_eq!(asked, 1);
        assert_eq!(head.as_deref(), Some("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        let stopped = read_head_from(&mut BufReader::new(Stalls(&wire[..], false)), || false);
        assert_eq!(stopped, None);
    }
}
