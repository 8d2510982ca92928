//! The one builder of the test servers' answers.

use std::ops::Range;

use crate::range::Selection;

/// An answer, which a hook may rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The header lines, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// An answer of `status`, with no header and no body.
    pub fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// `206` for `bytes` of a file of `size` bytes, with its
    /// `Content-Range`; the caller sets the body (or, to send it another
    /// way, a `Content-Length`).
    pub fn partial(bytes: &Range<u64>, size: u64) -> Reply {
        let last = bytes.end.saturating_sub(1);
        Reply::new(206).header(
            "Content-Range",
            format!("bytes {}-{last}/{size}", bytes.start),
        )
    }

    /// `416` for a file of `size` bytes, with `Content-Range: bytes */size`.
    pub fn unsatisfiable(size: u64) -> Reply {
        Reply::new(416).header("Content-Range", format!("bytes */{size}"))
    }

    /// The answer of a range server holding `data` to a request whose
    /// `Range` selects `selection` of it ([`crate::range::select`]): `200`
    /// with all of it, `206` with the part, `416`, or `400` for a header
    /// that is not one range of bytes.
    pub fn for_selection(selection: &Selection, data: &[u8]) -> Reply {
        let size = data.len() as u64;
        match selection {
            Selection::Whole => Reply::new(200).body(data),
            Selection::Part(bytes) => {
                Reply::partial(bytes, size).body(&data[bytes.start as usize..bytes.end as usize])
            }
            Selection::Unsatisfiable => Reply::unsatisfiable(size),
            Selection::Invalid(_) => Reply::new(400).body("bad range"),
        }
    }

    /// A redirect of `status` to `location`.
    pub fn redirect(status: u16, location: &str) -> Reply {
        Reply::new(status).header("Location", location)
    }

    /// Sets the body.
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

    /// Removes the header of that name.
    pub fn without(mut self, name: &str) -> Reply {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    /// The value of the header named `name` (in any case).
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The reply as bytes on the wire, with a `Content-Length` unless the
    /// reply sets its own.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if self.header_value("content-length").is_none() {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// The reason phrase of a status line (clients ignore it).
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "X",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::{RangeError, select};

    fn wire(reply: &Reply) -> String {
        String::from_utf8(reply.to_bytes()).unwrap()
    }

    #[test]
    fn a_part_is_a_206_with_its_content_range() {
        let reply = Reply::for_selection(&select(Some("bytes=2-4"), 10), b"0123456789");
        assert_eq!(
            wire(&reply),
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 2-4/10\r\n\
             Content-Length: 3\r\n\r\n234"
        );
    }

    #[test]
    fn no_range_is_a_200_and_past_the_end_a_416() {
        let data = b"abc";
        assert_eq!(
            wire(&Reply::for_selection(&select(None, 3), data)),
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
        );
        assert_eq!(
            wire(&Reply::for_selection(&select(Some("bytes=3-"), 3), data)),
            "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */3\r\n\
             Content-Length: 0\r\n\r\n"
        );
        let bad = Reply::for_selection(&Selection::Invalid(RangeError::Overflow), data);
        assert_eq!(bad.status, 400);
    }

    #[test]
    fn a_content_length_of_the_reply_s_own_is_kept() {
        let head =
            Reply::partial(&(0..(1 << 40)), 1 << 50).header("Content-Length", "1099511627776");
        assert_eq!(
            wire(&head),
            "HTTP/1.1 206 Partial Content\r\n\
             Content-Range: bytes 0-1099511627775/1125899906842624\r\n\
             Content-Length: 1099511627776\r\n\r\n"
        );
    }

    #[test]
    fn headers_replace_and_go() {
        let reply = Reply::new(599)
            .header("ETag", "\"a\"")
            .header("etag", "\"b\"")
            .header("X", "y")
            .without("x");
        assert_eq!(reply.headers, [("etag".to_owned(), "\"b\"".to_owned())]);
        assert_eq!(reply.header_value("ETAG"), Some("\"b\""));
        assert!(wire(&reply).starts_with("HTTP/1.1 599 X\r\n"));
    }
}
