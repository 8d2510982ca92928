//! What a response must be to be believed, decided from its status and
//! headers without I/O: the `Content-Range`, `Content-Length`, encoding and
//! validators of the opening request, the tail and a range fetch, each
//! checked before a byte of the body is used; and what an error answer
//! asks of the retry loop.

use std::ops::Range;

use ureq::http::header::{
    AGE, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_RANGE, ETAG, LAST_MODIFIED, RETRY_AFTER,
};
use ureq::http::{HeaderMap, StatusCode};

use super::content_range::{self, ContentRange};
use super::retry::{Failure, Retry};
use super::{Reaction, header};
use crate::error::{Error, ErrorKind};
use crate::identity::Identity;
use crate::identity::freshness::{self, Freshness};

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

/// What the answer to the opening request says, before its body is read.
#[derive(Debug)]
pub(super) enum OpenVerdict {
    /// `304`: the version known is still the file's.
    Unchanged {
        freshness: Option<Freshness>,
        etag: Option<String>,
    },
    /// `206`: the first `len` bytes of the file `identity` follow.
    Partial {
        len: u64,
        identity: Identity,
        freshness: Freshness,
    },
    /// `200`: a small file sent whole, if its body is no longer than was
    /// asked for ([`check_whole`]); its `Content-Length`, if given.
    Whole { announced: Option<u64> },
    /// An empty file (`416` of size 0): nothing follows.
    Empty(Opened),
    /// Another status: an error answer.
    Status(u16),
}

/// Checks the headers of the answer to the opening request for the first
/// `first_len` bytes (`conditional`: it asked `If-None-Match`).
pub(super) fn judge_open(
    status: u16,
    headers: &HeaderMap,
    first_len: u64,
    conditional: bool,
) -> Result<OpenVerdict, Failure> {
    reject_encoded(headers)?;
    let said = freshness_said(headers);
    let freshness = said.unwrap_or_default();
    match status {
        304 if conditional => Ok(OpenVerdict::Unchanged {
            freshness: said,
            etag: header::get(headers, ETAG).map(str::to_owned),
        }),
        206 => {
            let (first, last, total) = bytes_with_size(headers)?;
            if first != 0 || last != first_len.min(total) - 1 {
                return Err(Failure::fatal(malformed(format!(
                    "asked for bytes 0-{}, got Content-Range bytes {first}-{last}/{total}",
                    first_len - 1
                ))));
            }
            check_content_length(headers, last + 1)?;
            Ok(OpenVerdict::Partial {
                len: last + 1,
                identity: identity_from(total, headers),
                freshness,
            })
        }
        // Either a small file sent whole, or a server ignoring Range.
        200 => {
            let announced = header::content_length(headers).map_err(|()| bad_length())?;
            if announced.is_some_and(|n| n > first_len) {
                return Err(Failure::fatal(not_ranged()));
            }
            Ok(OpenVerdict::Whole { announced })
        }
        416 => match parse_content_range(headers)? {
            ContentRange::Unsatisfied { total: 0 } => Ok(OpenVerdict::Empty(Opened {
                identity: identity_from(0, headers),
                first: Vec::new(),
                freshness,
            })),
            _ => Err(Failure::fatal(malformed(
                "416 Range Not Satisfiable for the first bytes of a file that is not empty",
            ))),
        },
        status => Ok(OpenVerdict::Status(status)),
    }
}

/// Checks the body of a `200` to the opening request, read up to one byte
/// past `first_len`: the whole file, as long as announced.
pub(super) fn check_whole(
    body: Vec<u8>,
    announced: Option<u64>,
    first_len: u64,
    headers: &HeaderMap,
) -> Result<Opened, Failure> {
    if body.len() as u64 > first_len {
        return Err(Failure::fatal(not_ranged()));
    }
    if announced.is_some_and(|n| n != body.len() as u64) {
        return Err(Failure::transient(short_body(body.len() as u64, announced)));
    }
    Ok(Opened {
        identity: identity_from(body.len() as u64, headers),
        first: body,
        freshness: freshness_said(headers).unwrap_or_default(),
    })
}

/// Checks the headers of the answer to a suffix range for the last `len`
/// bytes: where the bytes that follow start, and the file they are of.
pub(super) fn judge_tail(
    status: u16,
    headers: &HeaderMap,
    len: u64,
) -> Result<(u64, Identity), Failure> {
    if status != 206 {
        return Err(Failure::fatal(malformed(format!(
            "HTTP {status} to a suffix range"
        ))));
    }
    reject_encoded(headers)?;
    let (first, last, total) = bytes_with_size(headers)?;
    if last + 1 != total || total - first != len.min(total) {
        return Err(Failure::fatal(malformed(format!(
            "asked for the last {len} bytes, got Content-Range bytes {first}-{last}/{total}"
        ))));
    }
    check_content_length(headers, total - first)?;
    Ok((first, identity_from(total, headers)))
}

/// What the answer to a request for a range says, before its body is read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum FetchVerdict {
    /// The bytes asked for follow.
    Body,
    /// Another status: an error answer.
    Status(u16),
}

/// Checks the headers of the answer to a request for `range` of the file
/// `identity`.
pub(super) fn judge_fetch(
    status: u16,
    headers: &HeaderMap,
    range: &Range<u64>,
    identity: &Identity,
) -> Result<FetchVerdict, Failure> {
    match status {
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
        status => return Ok(FetchVerdict::Status(status)),
    }
    Ok(FetchVerdict::Body)
}

/// The error of an answer with an unexpected `status` (its body excerpt
/// added by the caller).
pub(super) fn status_error(status: u16) -> Error {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    Error::new(
        ErrorKind::HttpStatus(status),
        format!("HTTP {status} {reason}").trim_end().to_owned(),
    )
}

/// Whether an error answer is worth trying again, and how, given what the
/// storage service made of it.
pub(super) fn retry_for(status: u16, reaction: &Reaction) -> Retry {
    match (reaction, status) {
        (Reaction::Moved(_), _) => Retry::Moved,
        (Reaction::Renew, _) => Retry::Renew,
        (Reaction::Nothing, 401 | 403) => Retry::Denied,
        (Reaction::Nothing, 429 | 500..=599) => Retry::Yes,
        (Reaction::Nothing, _) => Retry::No,
    }
}

/// The wait an error answer asks for before trying again (`Retry-After`).
pub(super) fn retry_after(headers: &HeaderMap) -> Option<std::time::Duration> {
    header::get(headers, RETRY_AFTER).and_then(header::retry_after)
}

/// A body that ended after `got` of the `expected` bytes.
pub(super) fn body_cut_short(got: u64, expected: u64) -> Failure {
    Failure::transient(short_body(got, Some(expected)))
}

/// A body that runs past the bytes asked for.
pub(super) fn body_too_long() -> Failure {
    Failure::fatal(malformed("the body is longer than the requested range"))
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

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for &(name, value) in pairs {
            h.append(name, value.parse().unwrap());
        }
        h
    }

    fn kind<T>(r: Result<T, Failure>) -> Option<ErrorKind> {
        r.err().map(|f| f.error.kind())
    }

    #[test]
    fn the_opening_answer_says_the_size_and_the_first_bytes() {
        let h = headers(&[
            ("content-range", "bytes 0-99/1000"),
            ("etag", "\"v1\""),
            ("cache-control", "max-age=60"),
        ]);
        match judge_open(206, &h, 100, false).unwrap() {
            OpenVerdict::Partial { len, identity, .. } => {
                assert_eq!((len, identity.size), (100, 1000));
                assert_eq!(identity.etag.as_deref(), Some("\"v1\""));
            }
            other => panic!("{other:?}"),
        }
        // A file shorter than the first bytes asked for.
        let short = headers(&[("content-range", "bytes 0-9/10")]);
        assert!(matches!(
            judge_open(206, &short, 100, false),
            Ok(OpenVerdict::Partial { len: 10, .. })
        ));
        let malformed = Some(ErrorKind::MalformedResponse);
        let elsewhere = headers(&[("content-range", "bytes 5-99/1000")]);
        assert_eq!(kind(judge_open(206, &elsewhere, 100, false)), malformed);
        let no_size = headers(&[("content-range", "bytes 0-99/*")]);
        assert_eq!(kind(judge_open(206, &no_size, 100, false)), malformed);
        let gzip = headers(&[
            ("content-range", "bytes 0-99/1000"),
            ("content-encoding", "gzip"),
        ]);
        assert_eq!(kind(judge_open(206, &gzip, 100, false)), malformed);
    }

    #[test]
    fn a_whole_answer_to_the_opening_request_is_a_small_file_or_no_ranges() {
        let announced = headers(&[("content-length", "50")]);
        assert!(matches!(
            judge_open(200, &announced, 100, false),
            Ok(OpenVerdict::Whole {
                announced: Some(50)
            })
        ));
        let big = headers(&[("content-length", "5000")]);
        assert_eq!(
            kind(judge_open(200, &big, 100, false)),
            Some(ErrorKind::RangeNotSupported)
        );
        let none = HeaderMap::new();
        assert_eq!(
            check_whole(vec![7; 50], Some(50), 100, &none)
                .unwrap()
                .identity
                .size,
            50
        );
        assert_eq!(
            kind(check_whole(vec![7; 101], None, 100, &none)),
            Some(ErrorKind::RangeNotSupported)
        );
        let cut = check_whole(vec![7; 40], Some(50), 100, &none)
            .err()
            .unwrap();
        assert_eq!(cut.retry, Retry::Yes, "a body cut short is tried again");
    }

    #[test]
    fn a_304_is_believed_only_when_asked_for() {
        let h = headers(&[("etag", "\"v1\"")]);
        match judge_open(304, &h, 100, true).unwrap() {
            OpenVerdict::Unchanged { etag, freshness } => {
                assert_eq!(etag.as_deref(), Some("\"v1\""));
                assert!(
                    freshness.is_none(),
                    "no Cache-Control: what was said stands"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge_open(304, &h, 100, false),
            Ok(OpenVerdict::Status(304))
        ));
        let empty = headers(&[("content-range", "bytes */0")]);
        assert!(matches!(
            judge_open(416, &empty, 100, false),
            Ok(OpenVerdict::Empty(_))
        ));
        let not_empty = headers(&[("content-range", "bytes */10")]);
        assert_eq!(
            kind(judge_open(416, &not_empty, 100, false)),
            Some(ErrorKind::MalformedResponse)
        );
    }

    #[test]
    fn a_tail_must_end_at_the_end() {
        let h = headers(&[
            ("content-range", "bytes 900-999/1000"),
            ("content-length", "100"),
        ]);
        let (start, identity) = judge_tail(206, &h, 100).unwrap();
        assert_eq!((start, identity.size), (900, 1000));
        let whole = headers(&[("content-range", "bytes 0-49/50")]);
        assert_eq!(
            judge_tail(206, &whole, 100).unwrap().0,
            0,
            "a file shorter than the tail"
        );
        let before_end = headers(&[("content-range", "bytes 800-899/1000")]);
        assert_eq!(
            kind(judge_tail(206, &before_end, 100)),
            Some(ErrorKind::MalformedResponse)
        );
        assert_eq!(
            kind(judge_tail(200, &h, 100)),
            Some(ErrorKind::MalformedResponse)
        );
    }

    #[test]
    fn a_fetch_answer_is_the_range_of_the_version_opened_or_an_error_answer() {
        let id = Identity {
            size: 100,
            etag: Some("\"v1\"".into()),
            last_modified: None,
        };
        let ok = headers(&[("content-range", "bytes 10-19/100"), ("etag", "\"v1\"")]);
        assert_eq!(
            judge_fetch(206, &ok, &(10..20), &id).unwrap(),
            FetchVerdict::Body
        );
        let whole = headers(&[("content-length", "100")]);
        assert_eq!(
            judge_fetch(200, &whole, &(0..100), &id).unwrap(),
            FetchVerdict::Body
        );
        assert_eq!(
            kind(judge_fetch(200, &whole, &(10..20), &id)),
            Some(ErrorKind::RangeNotSupported)
        );
        let changed = Some(ErrorKind::RemoteChanged);
        assert_eq!(
            kind(judge_fetch(412, &HeaderMap::new(), &(10..20), &id)),
            changed
        );
        let shrunk = headers(&[("content-range", "bytes */50")]);
        assert_eq!(kind(judge_fetch(416, &shrunk, &(10..20), &id)), changed);
        let other = headers(&[("content-range", "bytes 10-19/100"), ("etag", "\"v2\"")]);
        assert_eq!(kind(judge_fetch(206, &other, &(10..20), &id)), changed);
        assert_eq!(
            judge_fetch(503, &HeaderMap::new(), &(10..20), &id).unwrap(),
            FetchVerdict::Status(503)
        );
    }

    #[test]
    fn an_error_answer_says_whether_to_try_again() {
        assert_eq!(retry_for(503, &Reaction::Nothing), Retry::Yes);
        assert_eq!(retry_for(429, &Reaction::Nothing), Retry::Yes);
        assert_eq!(retry_for(403, &Reaction::Nothing), Retry::Denied);
        assert_eq!(retry_for(404, &Reaction::Nothing), Retry::No);
        assert_eq!(retry_for(400, &Reaction::Renew), Retry::Renew);
        let there = url::Url::parse("https://b.example/").unwrap();
        assert_eq!(retry_for(301, &Reaction::Moved(there)), Retry::Moved);
        let h = headers(&[("retry-after", "7")]);
        assert_eq!(retry_after(&h), Some(std::time::Duration::from_secs(7)));
        assert_eq!(
            status_error(503).to_string(),
            "HTTP 503 Service Unavailable"
        );
    }
}
