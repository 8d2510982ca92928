//! What a response must be to be believed: the status, `Content-Range`,
//! `Content-Length`, encoding and validators of the opening request, the
//! tail and a range fetch, each checked before a byte of the body is used;
//! and reading a body into a sink, exactly to its end.

use std::io::Read;
use std::ops::Range;
use std::time::Instant;

use ureq::Body;
use ureq::http::header::{
    AGE, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_RANGE, ETAG, LAST_MODIFIED, RETRY_AFTER,
};
use ureq::http::{HeaderMap, Response, StatusCode};
use url::Url;

use super::classify::classify_io;
use super::content_range::{self, ContentRange};
use super::request::HeadersArrived;
use super::retry::{Failure, Retry};
use super::sink::Sink;
use super::{Reaction, Transport, header};
use crate::error::{BODY_EXCERPT_LEN, Error, ErrorKind};
use crate::identity::Identity;
use crate::identity::freshness::{self, Freshness};
use crate::stats::Counters;

/// Checks a response's validators against the version opened (see
/// [`Identity::differs_from`]).
fn check_version(identity: &Identity, headers: &HeaderMap) -> Result<(), Error> {
    let (etag, last_modified) = (
        header::get(headers, ETAG),
        header::get(headers, LAST_MODIFIED),
    );
    if identity.differs_from(etag, last_modified) {
        return Err(Error::new(
            ErrorKind::RemoteChanged,
            "the remote file changed since it was opened (its ETag or Last-Modified differs)",
        ));
    }
    Ok(())
}

/// The version a response of a file of `size` bytes describes.
fn identity_from(size: u64, headers: &HeaderMap) -> Identity {
    Identity {
        size,
        etag: header::get(headers, ETAG).map(str::to_owned),
        last_modified: header::get(headers, LAST_MODIFIED).map(str::to_owned),
    }
}

/// How long the server says the version an answer describes stays good
/// (its `Cache-Control`, every line of it, and its `Age`); `None` if it
/// sent no `Cache-Control` (a `304` without one leaves what was said
/// before standing, as RFC 9111 has it).
fn freshness_said(headers: &HeaderMap) -> Option<Freshness> {
    let mut lines = headers
        .get_all(CACHE_CONTROL)
        .iter()
        // A line that is not text says nothing (as an unparsable one).
        .map(|v| v.to_str().unwrap_or(""))
        .peekable();
    lines.peek()?;
    Some(freshness::from_headers(lines, header::get(headers, AGE)))
}

/// The answer to the opening request: the file's identity, its first
/// bytes, and how long the server says that version stays good.
#[derive(Debug)]
pub(crate) struct Opened {
    pub identity: Identity,
    pub first: Vec<u8>,
    pub freshness: Freshness,
}

/// The answer to a conditional opening request.
#[derive(Debug)]
pub(crate) enum Revalidated {
    /// The server says the file is still the version known (`304 Not
    /// Modified`): with how long it now says the version stays good, if it
    /// said, and the ETag it gave, which must be the known one's (see
    /// [`Identity::confirmed_by`]).
    Unchanged {
        freshness: Option<Freshness>,
        etag: Option<String>,
    },
    /// It is not: the answer as [`Transport::open`] gives it.
    Changed(Opened),
}

/// The end of a file, fetched beside the opening request.
#[derive(Debug)]
pub(crate) struct Tail {
    pub identity: Identity,
    /// Where `bytes` start in the file; they run to its end.
    pub start: u64,
    pub bytes: Vec<u8>,
}

impl Transport {
    /// Checks the answer to the opening request and reads its body.
    pub(super) fn open_response(
        &self,
        mut resp: Response<Body>,
        url: Url,
        first_len: u64,
        conditional: bool,
    ) -> Result<Revalidated, Failure> {
        let headers = resp.headers().clone();
        reject_encoded(&headers)?;
        let freshness = freshness_said(&headers).unwrap_or_default();
        let opened = match resp.status().as_u16() {
            // The version the caller knows is still the file's.
            304 if conditional => {
                drain(&mut resp);
                self.remember(url);
                return Ok(Revalidated::Unchanged {
                    freshness: freshness_said(&headers),
                    etag: header::get(&headers, ETAG).map(str::to_owned),
                });
            }
            206 => {
                let (first, last, total) = bytes_with_size(&headers)?;
                if first != 0 || last != first_len.min(total) - 1 {
                    return Err(Failure::fatal(malformed(format!(
                        "asked for bytes 0-{}, got Content-Range bytes {first}-{last}/{total}",
                        first_len - 1
                    ))));
                }
                check_content_length(&headers, last + 1)?;
                // Remembered before the body is read: a retry of a body cut
                // short skips the redirect.
                self.remember(url);
                let mut first = vec![0; (last + 1) as usize];
                self.read_body(&mut resp, &mut Sink::over(&mut first))?;
                return Ok(Revalidated::Changed(Opened {
                    identity: identity_from(total, &headers),
                    first,
                    freshness,
                }));
            }
            // Either a small file sent whole, or a server ignoring Range.
            200 => self.open_whole(&mut resp, first_len)?,
            416 => match parse_content_range(&headers)? {
                ContentRange::Unsatisfied { total: 0 } => {
                    drain(&mut resp);
                    Opened {
                        identity: identity_from(0, &headers),
                        first: Vec::new(),
                        freshness,
                    }
                }
                _ => {
                    return Err(Failure::fatal(malformed(
                        "416 Range Not Satisfiable for the first bytes of a file that is not empty",
                    )));
                }
            },
            status => return Err(self.status_failure(status, resp, &url)),
        };
        self.remember(url);
        Ok(Revalidated::Changed(opened))
    }

    /// A `200` to the opening request: the whole file if it is no longer than
    /// was asked for, else a server that ignores ranges.
    fn open_whole(&self, resp: &mut Response<Body>, first_len: u64) -> Result<Opened, Failure> {
        let announced = header::content_length(resp.headers()).map_err(|()| bad_length())?;
        if announced.is_some_and(|n| n > first_len) {
            return Err(Failure::fatal(not_ranged()));
        }
        let mut body = Vec::new();
        resp.body_mut()
            .as_reader()
            .take(first_len + 1)
            .read_to_end(&mut body)
            .map_err(|e| classify_io(e, "reading the response"))?;
        Counters::add(&self.counters.bytes_fetched, body.len() as u64);
        if body.len() as u64 > first_len {
            return Err(Failure::fatal(not_ranged()));
        }
        if announced.is_some_and(|n| n != body.len() as u64) {
            return Err(Failure::transient(short_body(body.len() as u64, announced)));
        }
        Ok(Opened {
            identity: identity_from(body.len() as u64, resp.headers()),
            first: body,
            freshness: freshness_said(resp.headers()).unwrap_or_default(),
        })
    }

    /// Checks the answer to a suffix range for the last `len` bytes and
    /// reads its body.
    pub(super) fn tail_response(
        &self,
        mut resp: Response<Body>,
        len: u64,
    ) -> Result<Tail, Failure> {
        let status = resp.status().as_u16();
        if status != 206 {
            // Dropped unread: a whole body sent by a server that ignores the
            // range is not worth reading (the open reports such servers).
            return Err(Failure::fatal(malformed(format!(
                "HTTP {status} to a suffix range"
            ))));
        }
        let headers = resp.headers().clone();
        reject_encoded(&headers)?;
        let (first, last, total) = bytes_with_size(&headers)?;
        if last + 1 != total || total - first != len.min(total) {
            return Err(Failure::fatal(malformed(format!(
                "asked for the last {len} bytes, got Content-Range bytes {first}-{last}/{total}"
            ))));
        }
        check_content_length(&headers, total - first)?;
        let mut bytes = vec![0; (total - first) as usize];
        self.read_body(&mut resp, &mut Sink::over(&mut bytes))?;
        Ok(Tail {
            identity: identity_from(total, &headers),
            start: first,
            bytes,
        })
    }

    /// Checks the answer to a request for `range` of the file `identity`
    /// and reads its body into `sink`.
    pub(super) fn fetch_response(
        &self,
        mut resp: Response<Body>,
        url: Url,
        range: &Range<u64>,
        identity: &Identity,
        sink: &mut Sink<'_>,
    ) -> Result<(), Failure> {
        let headers = resp.headers();
        match resp.status().as_u16() {
            206 => check_partial(headers, range, identity)?,
            200 if range.start == 0 && range.end == identity.size => {
                // A small file is answered whole; accept exactly that.
                reject_encoded(headers)?;
                check_version(identity, headers)?;
                let length = header::content_length(headers).map_err(|()| bad_length())?;
                if let Some(now) = length.filter(|&n| n != identity.size) {
                    return Err(Failure::fatal(changed_size(identity.size, now)));
                }
            }
            200 => return Err(Failure::fatal(not_ranged())),
            412 => {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::RemoteChanged,
                    "the remote file changed since it was opened (412 Precondition Failed on If-Match)",
                )));
            }
            416 => {
                return Err(Failure::fatal(match parse_content_range(headers)? {
                    ContentRange::Unsatisfied { total } if total != identity.size => {
                        changed_size(identity.size, total)
                    }
                    _ => malformed("416 Range Not Satisfiable for a range inside the file"),
                }));
            }
            status => return Err(self.status_failure(status, resp, &url)),
        }
        self.remember(url);
        self.read_body(&mut resp, sink)
    }

    /// Reads a body of exactly the sink's remaining length, then confirms the
    /// body ends there (which also returns the connection to the pool).
    fn read_body(&self, resp: &mut Response<Body>, sink: &mut Sink<'_>) -> Result<(), Failure> {
        let from = sink.filled();
        // Timed from the headers' arrival: a reader slow to start reading
        // does not make the link look faster.
        let headers = resp.extensions().get::<HeadersArrived>().copied();
        let started = headers.map_or_else(Instant::now, |h| h.at);
        let mut reader = resp.body_mut().as_reader();
        while !sink.is_full() {
            crate::wait::check_stopped().map_err(Failure::fatal)?;
            match reader.read(sink.spare()) {
                Ok(0) => {
                    return Err(Failure::transient(short_body(
                        sink.filled(),
                        Some(sink.len()),
                    )));
                }
                Ok(n) => {
                    sink.advance(n);
                    Counters::add(&self.counters.bytes_fetched, n as u64);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(classify_io(e, "reading the response body")),
            }
        }
        self.link.record_body(
            sink.filled() - from,
            started.elapsed(),
            headers.map(|h| h.waited),
        );
        let mut probe = [0u8; 1];
        match reader.read(&mut probe) {
            Ok(0) | Err(_) => Ok(()),
            Ok(_) => Err(Failure::fatal(malformed(
                "the body is longer than the requested range",
            ))),
        }
    }

    /// Turns an unexpected status into a failure, with the start of its body
    /// and the wait the server asked for.
    fn status_failure(&self, status: u16, mut resp: Response<Body>, url: &Url) -> Failure {
        let retry_after = header::get(resp.headers(), RETRY_AFTER).and_then(header::retry_after);
        let reason = StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut error = Error::new(
            ErrorKind::HttpStatus(status),
            format!("HTTP {status} {reason}").trim_end().to_owned(),
        )
        .with_url(&self.shown(url));
        let body = drain_raw(&mut resp);
        let known = self.known_values(Some(url));
        let excerpt = super::redact::printable_excerpt_without(&body, &known, BODY_EXCERPT_LEN);
        if !excerpt.is_empty() {
            error = error.with_body(excerpt);
        }
        let reaction = match &self.service {
            Some(service) => service.react(status, resp.headers(), &body, url),
            None => Reaction::Nothing,
        };
        let retry = match (reaction, status) {
            (Reaction::Moved(to), _) => {
                self.move_to(to);
                Retry::Moved
            }
            (Reaction::Renew, _) => Retry::Renew,
            (Reaction::Nothing, 401 | 403) => Retry::Denied,
            (Reaction::Nothing, 429 | 500..=599) => Retry::Yes,
            (Reaction::Nothing, _) => Retry::No,
        };
        Failure::new(error, retry, retry_after)
    }
}

/// Checks a `206` to a request for `range` of the file `identity`.
fn check_partial(
    headers: &HeaderMap,
    range: &Range<u64>,
    identity: &Identity,
) -> Result<(), Failure> {
    reject_encoded(headers)?;
    check_version(identity, headers)?;
    let (first, last, total) = match parse_content_range(headers)? {
        ContentRange::Bytes { first, last, total } => (first, last, total),
        ContentRange::Unsatisfied { .. } => {
            return Err(Failure::fatal(malformed(
                "206 with an unsatisfied Content-Range",
            )));
        }
    };
    if let Some(total) = total.filter(|&t| t != identity.size) {
        return Err(Failure::fatal(changed_size(identity.size, total)));
    }
    if first != range.start || last + 1 != range.end {
        return Err(Failure::fatal(malformed(format!(
            "asked for bytes {}-{}, got Content-Range bytes {first}-{last}",
            range.start,
            range.end - 1
        ))));
    }
    check_content_length(headers, range.end - range.start)
}

fn malformed(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::MalformedResponse, message)
}

fn bad_length() -> Failure {
    Failure::fatal(malformed("unparsable Content-Length"))
}

fn not_ranged() -> Error {
    Error::new(
        ErrorKind::RangeNotSupported,
        "the server ignores range requests (it answered 200 with the whole file)",
    )
}

fn changed_size(pinned: u64, now: u64) -> Error {
    Error::new(
        ErrorKind::RemoteChanged,
        format!("the remote file changed size since it was opened ({pinned} bytes, now {now})"),
    )
}

fn short_body(got: u64, announced: Option<u64>) -> Error {
    malformed(format!(
        "the body ended after {got} of {} bytes",
        announced.unwrap_or(got)
    ))
}

/// The bytes a `206` carries and the file's size, from its `Content-Range`,
/// which must give the size (the opening requests learn it from there).
fn bytes_with_size(headers: &HeaderMap) -> Result<(u64, u64, u64), Failure> {
    match parse_content_range(headers)? {
        ContentRange::Bytes {
            first,
            last,
            total: Some(total),
        } => Ok((first, last, total)),
        _ => Err(Failure::fatal(malformed(
            "the server did not say the file's size in Content-Range",
        ))),
    }
}

fn parse_content_range(headers: &HeaderMap) -> Result<ContentRange, Failure> {
    let raw = headers
        .get(CONTENT_RANGE)
        .ok_or_else(|| Failure::fatal(malformed("the response has no Content-Range header")))?;
    raw.to_str()
        .ok()
        .and_then(content_range::parse)
        .ok_or_else(|| {
            let shown: String = String::from_utf8_lossy(raw.as_bytes())
                .chars()
                .take(80)
                .collect();
            Failure::fatal(malformed(format!("unparsable Content-Range {shown:?}")))
        })
}

fn check_content_length(headers: &HeaderMap, expected: u64) -> Result<(), Failure> {
    match header::content_length(headers).map_err(|()| bad_length())? {
        Some(n) if n != expected => Err(Failure::fatal(malformed(format!(
            "Content-Length {n} does not match the {expected} bytes of Content-Range"
        )))),
        _ => Ok(()),
    }
}

fn reject_encoded(headers: &HeaderMap) -> Result<(), Failure> {
    match header::get(headers, CONTENT_ENCODING).map(str::trim) {
        None | Some("") | Some("identity") => Ok(()),
        Some(enc) => Err(Failure::fatal(malformed(format!(
            "the server sent an encoded body (Content-Encoding: {}); byte ranges need the raw file",
            enc.chars().take(40).collect::<String>()
        )))),
    }
}

/// Reads (and so frees the connection of) a short body; returns its first bytes.
pub(super) fn drain(resp: &mut Response<Body>) -> String {
    super::redact::printable_excerpt(&drain_raw(resp), BODY_EXCERPT_LEN)
}

/// Reads a short body (at most 64 KiB of it), as it is.
fn drain_raw(resp: &mut Response<Body>) -> Vec<u8> {
    const DRAIN_LIMIT: u64 = 64 * 1024;
    let mut buf = Vec::new();
    let _ = resp
        .body_mut()
        .as_reader()
        .take(DRAIN_LIMIT)
        .read_to_end(&mut buf);
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_checked_only_on_validators_present_on_both_sides() {
        let id = Identity {
            size: 5,
            etag: Some("\"a\"".into()),
            last_modified: None,
        };
        let mut h = HeaderMap::new();
        assert!(check_version(&id, &h).is_ok());
        h.insert(ETAG, "\"a\"".parse().unwrap());
        h.insert(
            LAST_MODIFIED,
            "Mon, 01 Jan 2024 00:00:00 GMT".parse().unwrap(),
        );
        assert!(check_version(&id, &h).is_ok());
        h.insert(ETAG, "\"b\"".parse().unwrap());
        assert_eq!(
            check_version(&id, &h).unwrap_err().kind(),
            ErrorKind::RemoteChanged
        );
        assert_eq!(id.strong_etag(), Some("\"a\""));
        let weak = Identity {
            etag: Some("W/\"a\"".into()),
            ..id
        };
        assert_eq!(weak.strong_etag(), None);
    }

    fn partial(content_range: &str, length: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_RANGE, content_range.parse().unwrap());
        if let Some(n) = length {
            h.insert(ureq::http::header::CONTENT_LENGTH, n.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_partial_answer_must_be_for_the_bytes_asked() {
        let id = Identity {
            size: 100,
            etag: None,
            last_modified: None,
        };
        let kind = |h: &HeaderMap| {
            check_partial(h, &(10..20), &id)
                .err()
                .map(|f| f.error.kind())
        };
        assert_eq!(kind(&partial("bytes 10-19/100", Some("10"))), None);
        assert_eq!(kind(&partial("bytes 10-19/*", None)), None);
        let malformed = Some(ErrorKind::MalformedResponse);
        assert_eq!(kind(&partial("bytes 10-18/100", None)), malformed);
        assert_eq!(kind(&partial("bytes 10-19/100", Some("9"))), malformed);
        assert_eq!(kind(&partial("bytes */100", None)), malformed);
        assert_eq!(
            kind(&partial("bytes 10-19/101", None)),
            Some(ErrorKind::RemoteChanged)
        );
        let mut encoded = partial("bytes 10-19/100", None);
        encoded.insert(CONTENT_ENCODING, "gzip".parse().unwrap());
        assert_eq!(kind(&encoded), malformed);
    }
}
