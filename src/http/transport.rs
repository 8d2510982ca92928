//! One validated range fetch over HTTP, with redirects, retries and timeouts.
//!
//! Everything that touches `ureq` lives here; the rest of the crate sees
//! [`Transport::open`] and [`Transport::fetch`], and errors of its own type.

use std::io::Read;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use ureq::http::{HeaderMap, Response};
use ureq::{Agent, Body};
use url::Url;

use super::content_range::{self, ContentRange};
use super::permits::Permits;
use super::redact::{redact, same_origin};
use super::sink::Sink;
use crate::error::{BODY_EXCERPT_LEN, Error, ErrorKind};
use crate::link::LinkMeter;
use crate::pool::BufferPool;
use crate::retry::{RetryPolicy, jitter};
use crate::stats::Counters;

/// The timeouts of the transport; see the builder for their meaning.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub idle: Duration,
    pub per_read: Duration,
}

/// What identifies the version of the file that was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

impl Identity {
    fn strong_etag(&self) -> Option<&str> {
        self.etag.as_deref().filter(|e| !e.starts_with("W/"))
    }

    /// Checks a response's validators against the pinned ones. A header the
    /// server leaves out is not a change; a different one is.
    fn check(&self, headers: &HeaderMap) -> Result<(), Error> {
        let differs = |pinned: &Option<String>, name: &str| match (pinned, header(headers, name)) {
            (Some(p), Some(now)) => p != now,
            _ => false,
        };
        if differs(&self.etag, "etag") || differs(&self.last_modified, "last-modified") {
            return Err(Error::new(
                ErrorKind::RemoteChanged,
                "the remote file changed since it was opened (its ETag or Last-Modified differs)",
            ));
        }
        Ok(())
    }

    fn from_headers(size: u64, headers: &HeaderMap) -> Identity {
        Identity {
            size,
            etag: header(headers, "etag").map(str::to_owned),
            last_modified: header(headers, "last-modified").map(str::to_owned),
        }
    }
}

/// How long a response's headers took to arrive, kept with the response.
#[derive(Debug, Clone, Copy)]
struct Waited(Duration);

/// The bytes one request asks for.
#[derive(Debug, Clone)]
enum Want {
    /// These bytes (never empty).
    Bytes(Range<u64>),
    /// The last this many bytes, whatever the size (a suffix range).
    Last(u64),
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Bytes(r) => write!(f, "{}-{}", r.start, r.end - 1),
            Want::Last(n) => write!(f, "-{n}"),
        }
    }
}

/// The end of a file, fetched beside the opening request: whole blocks only.
#[derive(Debug)]
pub(crate) struct Tail {
    pub identity: Identity,
    /// Block index and bytes, in order.
    pub blocks: Vec<(u64, Vec<u8>)>,
}

/// The answer to the opening request: the file's identity and its first bytes.
#[derive(Debug)]
pub(crate) struct Opened {
    pub identity: Identity,
    pub first: Vec<u8>,
}

/// Which attempt this is (1-based), and the count of sequential requests
/// so far, which every request sent adds to.
struct Try<'a> {
    number: u32,
    rounds: &'a mut u32,
}

/// Why one attempt failed, and whether to try again.
struct Failure {
    error: Error,
    retry: Retry,
    retry_after: Option<String>,
}

#[derive(PartialEq)]
enum Retry {
    No,
    Yes,
    /// 401 or 403: re-resolve a remembered redirect, or renew the URL.
    Denied,
}

impl Failure {
    fn fatal(error: Error) -> Failure {
        Failure {
            error,
            retry: Retry::No,
            retry_after: None,
        }
    }

    fn transient(error: Error) -> Failure {
        Failure {
            error,
            retry: Retry::Yes,
            retry_after: None,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let retry = if e.is_retryable() {
            Retry::Yes
        } else {
            Retry::No
        };
        Failure {
            error: e,
            retry,
            retry_after: None,
        }
    }
}

/// Everything needed to send requests for one file.
pub(crate) struct Transport {
    agent: Agent,
    /// The URL given at open, or the last one the URL provider gave.
    original: RwLock<Url>,
    redacted: String,
    /// Where requests go: the original URL, or where it last redirected to.
    target: RwLock<Url>,
    headers: Vec<(String, String)>,
    user_agent: String,
    timeouts: Timeouts,
    retry: RetryPolicy,
    https_only: bool,
    max_redirects: u32,
    url_provider: Option<Arc<UrlProvider>>,
    /// Whether the file was opened: only a URL that worked may be renewed.
    opened: std::sync::atomic::AtomicBool,
    /// Bounds the requests in flight, and so the connections open.
    permits: Permits,
    counters: Arc<Counters>,
    link: Arc<LinkMeter>,
}

/// The settings [`Transport::new`] takes.
pub(crate) struct TransportConfig {
    pub agent: Agent,
    pub headers: Vec<(String, String)>,
    pub user_agent: String,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    pub https_only: bool,
    pub max_redirects: u32,
    pub max_connections: usize,
    pub url_provider: Option<Arc<UrlProvider>>,
    pub link: Arc<LinkMeter>,
}

/// Gives a fresh URL for the same file, such as a newly signed one.
pub(crate) type UrlProvider =
    dyn Fn() -> Result<String, Box<dyn std::error::Error + Send + Sync>> + Send + Sync;

const REDIRECT_STATUSES: [u16; 5] = [301, 302, 303, 307, 308];
const EXPIRED_HINT: &str =
    "the URL may have expired (presigned URLs do); open a freshly signed one";

impl Transport {
    pub fn new(url: Url, config: TransportConfig, counters: Arc<Counters>) -> Transport {
        Transport {
            agent: config.agent,
            redacted: redact(&url),
            target: RwLock::new(url.clone()),
            original: RwLock::new(url),
            headers: config.headers,
            user_agent: config.user_agent,
            timeouts: config.timeouts,
            retry: config.retry,
            https_only: config.https_only,
            max_redirects: config.max_redirects,
            permits: Permits::new(config.max_connections),
            link: config.link,
            url_provider: config.url_provider,
            opened: std::sync::atomic::AtomicBool::new(false),
            counters,
        }
    }

    /// The original URL, redacted.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }

    /// Learns the size and validators and fetches the first `first_len` bytes,
    /// in one request: `Range: bytes=0-{first_len-1}`.
    pub fn open(&self, first_len: u64) -> Result<Opened, Error> {
        let deadline = Instant::now() + self.timeouts.per_read;
        let mut rounds = 0;
        let result = self.with_retries(0..first_len, deadline, &mut rounds, |t, at| {
            t.try_open(first_len, deadline, at)
        });
        Counters::add(&self.counters.round_trips, rounds.into());
        if result.is_ok() {
            self.opened
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        result.map_err(|e| e.with_url(&self.redacted))
    }

    /// Fetches the last `len` bytes of the file with a suffix range, once (it
    /// is an optimisation: the caller drops it on any failure), and keeps the
    /// whole blocks of `block_size` in it. Counts a request but no round trip:
    /// it runs beside [`open`](Self::open).
    pub fn tail(&self, len: u64, block_size: u64) -> Result<Tail, Error> {
        let deadline = Instant::now() + self.timeouts.per_read;
        let permit = self.permits.acquire(deadline)?;
        let mut rounds = 0;
        let at = Try {
            number: 1,
            rounds: &mut rounds,
        };
        let result = self.try_tail(len, block_size, deadline, at);
        drop(permit);
        result.map_err(|f| f.error.with_url(&self.redacted))
    }

    fn try_tail(
        &self,
        len: u64,
        block_size: u64,
        deadline: Instant,
        at: Try<'_>,
    ) -> Result<Tail, Failure> {
        let (mut resp, _) = self.send(Want::Last(len), None, deadline, at)?;
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
        let mut sink = Sink::new(total - first, total - first, None);
        self.read_body(&mut resp, &mut sink)?;
        let bytes = sink.into_blocks().pop().unwrap_or_default();
        let blocks = (first.div_ceil(block_size)..total.div_ceil(block_size))
            .map(|i| {
                let start = (i * block_size - first) as usize;
                let end = ((i + 1) * block_size).min(total) - first;
                (i, bytes[start..end as usize].to_vec())
            })
            .collect();
        Ok(Tail {
            identity: Identity::from_headers(total, &headers),
            blocks,
        })
    }

    /// Fetches exactly `range` of the file identified by `identity` into
    /// buffers of `block_size` bytes, retrying as the policy allows. Returns
    /// the buffers and the number of sequential requests it took.
    pub fn fetch(
        &self,
        range: Range<u64>,
        block_size: u64,
        identity: &Identity,
        deadline: Instant,
        buffers: &BufferPool,
    ) -> Result<(Vec<Vec<u8>>, u32), Error> {
        let mut sink = Sink::new(range.end - range.start, block_size, Some(buffers));
        let rounds = self.fill(range, &mut sink, identity, deadline)?;
        Ok((sink.into_blocks(), rounds))
    }

    /// Fetches `range` straight into `buf` (of the same length), as
    /// [`fetch`](Self::fetch) does into blocks; returns the requests made in
    /// sequence.
    pub fn fetch_into(
        &self,
        range: Range<u64>,
        buf: &mut [u8],
        identity: &Identity,
        deadline: Instant,
    ) -> Result<u32, Error> {
        debug_assert_eq!(buf.len() as u64, range.end - range.start);
        self.fill(range, &mut Sink::over(buf), identity, deadline)
    }

    /// Fills `sink` with `range`, retrying as the policy allows and resuming
    /// from the first byte missing; returns the requests made in sequence.
    fn fill(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        identity: &Identity,
        deadline: Instant,
    ) -> Result<u32, Error> {
        let mut rounds = 0;
        let result = self.with_retries(range.clone(), deadline, &mut rounds, |t, at| {
            let from = range.start + sink.filled;
            t.try_fetch(from..range.end, identity, deadline, sink, at)
        });
        result
            .map(|()| rounds)
            .map_err(|e| e.with_url(&self.redacted).with_range(range))
    }

    fn with_retries<T>(
        &self,
        range: Range<u64>,
        deadline: Instant,
        rounds: &mut u32,
        mut attempt: impl FnMut(&Self, Try<'_>) -> Result<T, Failure>,
    ) -> Result<T, Error> {
        let mut attempts = 0u32;
        let mut reresolved = false;
        let mut renewed = false;
        let mut retries = 0u32;
        loop {
            attempts += 1;
            let permit = self.permits.acquire(deadline)?;
            let outcome = attempt(
                self,
                Try {
                    number: attempts,
                    rounds,
                },
            );
            drop(permit);
            let failure = match outcome {
                Ok(v) => return Ok(v),
                Err(f) => f,
            };
            let give_up = |f: Failure| Err(f.error.with_attempts(attempts));
            match failure.retry {
                Retry::No => return give_up(failure),
                Retry::Denied => {
                    let original = self.original.read().clone();
                    if *self.target.read() != original && !reresolved {
                        reresolved = true;
                        tracing::warn!(
                            url = %self.redacted, status = ?failure.error.status(),
                            "redirect target refused access; resolving the original URL again"
                        );
                        *self.target.write() = original;
                        Counters::add(&self.counters.retries, 1);
                        continue;
                    }
                    let worked_before = self.opened.load(std::sync::atomic::Ordering::Relaxed);
                    if let (Some(provider), false, true) =
                        (&self.url_provider, renewed, worked_before)
                    {
                        renewed = true;
                        self.renew(provider.as_ref())
                            .map_err(|e| e.with_attempts(attempts))?;
                        Counters::add(&self.counters.retries, 1);
                        continue;
                    }
                    let hinted = if reresolved || original.query().is_some() {
                        failure.error.with_hint(EXPIRED_HINT)
                    } else {
                        failure.error
                    };
                    return give_up(Failure::fatal(hinted));
                }
                Retry::Yes if retries >= self.retry.retries() => return give_up(failure),
                Retry::Yes => {}
            }
            retries += 1;
            let delay = self
                .retry
                .delay(retries, jitter(), failure.retry_after.as_deref());
            if Instant::now() + delay >= deadline {
                return give_up(failure);
            }
            tracing::warn!(
                url = %self.redacted,
                range = %format_args!("{}-{}", range.start, range.end.saturating_sub(1)),
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                error = %failure.error,
                "retrying request"
            );
            std::thread::sleep(delay);
            if Instant::now() >= deadline {
                // The last real failure says more than "deadline passed".
                return give_up(failure);
            }
            Counters::add(&self.counters.retries, 1);
        }
    }

    fn try_open(&self, first_len: u64, deadline: Instant, at: Try<'_>) -> Result<Opened, Failure> {
        let (mut resp, url) = self.send(Want::Bytes(0..first_len), None, deadline, at)?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        reject_encoded(&headers)?;
        match status {
            206 => {
                let (first, last, total) = bytes_with_size(&headers)?;
                let want_last = first_len.min(total) - 1;
                if first != 0 || last != want_last {
                    return Err(Failure::fatal(malformed(format!(
                        "asked for bytes 0-{}, got Content-Range bytes {first}-{last}/{total}",
                        first_len - 1
                    ))));
                }
                check_content_length(&headers, last + 1)?;
                self.remember(url);
                let mut sink = Sink::new(last + 1, first_len, None);
                self.read_body(&mut resp, &mut sink)?;
                Ok(Opened {
                    identity: Identity::from_headers(total, &headers),
                    first: sink.into_blocks().pop().unwrap_or_default(),
                })
            }
            200 => {
                // Either a small file sent whole, or a server ignoring Range.
                let announced = content_length(&headers)?;
                if announced.is_some_and(|n| n > first_len) {
                    return Err(Failure::fatal(not_ranged()));
                }
                let limit = first_len + 1;
                let mut body = Vec::new();
                let mut reader = resp.body_mut().as_reader().take(limit);
                reader
                    .read_to_end(&mut body)
                    .map_err(|e| classify_io(e, "reading the response"))?;
                Counters::add(&self.counters.bytes_fetched, body.len() as u64);
                if body.len() as u64 > first_len {
                    return Err(Failure::fatal(not_ranged()));
                }
                if announced.is_some_and(|n| n != body.len() as u64) {
                    return Err(Failure::transient(short_body(body.len() as u64, announced)));
                }
                self.remember(url);
                Ok(Opened {
                    identity: Identity::from_headers(body.len() as u64, &headers),
                    first: body,
                })
            }
            416 => match parse_content_range(&headers)? {
                ContentRange::Unsatisfied { total: 0 } => {
                    drain(&mut resp);
                    self.remember(url);
                    Ok(Opened {
                        identity: Identity::from_headers(0, &headers),
                        first: Vec::new(),
                    })
                }
                _ => Err(Failure::fatal(malformed(
                    "416 Range Not Satisfiable for the first bytes of a file that is not empty",
                ))),
            },
            _ => Err(self.status_failure(status, resp, &url)),
        }
    }

    fn try_fetch(
        &self,
        range: Range<u64>,
        identity: &Identity,
        deadline: Instant,
        sink: &mut Sink<'_>,
        at: Try<'_>,
    ) -> Result<(), Failure> {
        let (mut resp, url) = self.send(
            Want::Bytes(range.clone()),
            identity.strong_etag(),
            deadline,
            at,
        )?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        match status {
            206 => {
                reject_encoded(&headers)?;
                identity.check(&headers)?;
                let (first, last, total) = match parse_content_range(&headers)? {
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
                check_content_length(&headers, range.end - range.start)?;
                self.remember(url);
                self.read_body(&mut resp, sink)
            }
            200 if range.start == 0 && range.end == identity.size => {
                // A small file is answered whole; accept exactly that.
                reject_encoded(&headers)?;
                identity.check(&headers)?;
                if content_length(&headers)?.is_some_and(|n| n != identity.size) {
                    return Err(Failure::fatal(changed_size(identity.size, 0)));
                }
                self.remember(url);
                self.read_body(&mut resp, sink)
            }
            200 => Err(Failure::fatal(not_ranged())),
            412 => Err(Failure::fatal(Error::new(
                ErrorKind::RemoteChanged,
                "the remote file changed since it was opened (412 Precondition Failed on If-Match)",
            ))),
            416 => match parse_content_range(&headers)? {
                ContentRange::Unsatisfied { total } if total != identity.size => {
                    Err(Failure::fatal(changed_size(identity.size, total)))
                }
                _ => Err(Failure::fatal(malformed(
                    "416 Range Not Satisfiable for a range inside the file",
                ))),
            },
            _ => Err(self.status_failure(status, resp, &url)),
        }
    }

    /// Replaces the URL with a fresh one from the provider. The next request
    /// checks, as every response is checked, that it serves the same file.
    fn renew(&self, provider: &UrlProvider) -> Result<(), Error> {
        let fresh = provider().map_err(|e| {
            Error::new(
                ErrorKind::HttpStatus(403),
                format!("access was refused, and the URL provider failed: {e}"),
            )
            .with_url(&self.redacted)
        })?;
        let url = Url::parse(&fresh).map_err(|e| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("the URL provider gave an invalid URL: {e}"),
            )
        })?;
        if !matches!(url.scheme(), "http" | "https") || (self.https_only && url.scheme() != "https")
        {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!("the URL provider gave an unusable URL {}", redact(&url)),
            ));
        }
        tracing::warn!(url = %redact(&url), "access refused; continuing with a fresh URL from the provider");
        *self.original.write() = url.clone();
        *self.target.write() = url;
        Ok(())
    }

    fn remember(&self, url: Url) {
        if *self.target.read() != url {
            *self.target.write() = url;
        }
    }

    /// Turns an unexpected status into a failure, with the start of its body.
    fn status_failure(&self, status: u16, mut resp: Response<Body>, url: &Url) -> Failure {
        let retry_after = header(resp.headers(), "retry-after").map(str::to_owned);
        let reason = ureq::http::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("");
        let mut error = Error::new(
            ErrorKind::HttpStatus(status),
            format!("HTTP {status} {reason}").trim_end().to_owned(),
        );
        error = error.with_url(&redact(url));
        let excerpt = drain(&mut resp);
        if !excerpt.is_empty() {
            error = error.with_body(excerpt);
        }
        let retry = match status {
            401 | 403 => Retry::Denied,
            429 | 500..=599 => Retry::Yes,
            _ => Retry::No,
        };
        Failure {
            error,
            retry,
            retry_after,
        }
    }

    /// Sends one GET for `range`, following redirects itself (so each hop is
    /// counted and user headers stay with the original origin). Returns the
    /// final response and the URL that gave it.
    fn send(
        &self,
        want: Want,
        if_match: Option<&str>,
        deadline: Instant,
        at: Try<'_>,
    ) -> Result<(Response<Body>, Url), Failure> {
        let mut url = self.target.read().clone();
        let mut hops = 0;
        loop {
            if self.https_only && url.scheme() != "https" {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::InvalidUrl,
                    format!(
                        "refusing plain HTTP to {} (https_only is set)",
                        redact(&url)
                    ),
                )));
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::Timeout,
                    "the read's overall deadline passed",
                )));
            }
            let mut req = self
                .agent
                .get(url.as_str())
                .header("Range", format!("bytes={want}"))
                .header("Accept-Encoding", "identity")
                .header("User-Agent", &self.user_agent);
            if let Some(tag) = if_match {
                req = req.header("If-Match", tag);
            }
            if same_origin(&url, &self.original.read()) {
                for (name, value) in &self.headers {
                    req = req.header(name, value);
                }
            }
            let req = req
                .config()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_global(Some(remaining))
                .timeout_resolve(Some(self.timeouts.connect))
                .timeout_connect(Some(self.timeouts.connect))
                .timeout_recv_response(Some(self.timeouts.idle))
                .timeout_per_read(Some(self.timeouts.idle))
                .build();
            Counters::add(&self.counters.requests, 1);
            *at.rounds += 1;
            let started = Instant::now();
            let result = req.call();
            let waited = started.elapsed();
            let elapsed_ms = waited.as_millis() as u64;
            let mut resp = match result {
                Ok(r) => r,
                Err(e) => {
                    let mut f = classify_ureq(e, "sending the request");
                    f.error = f.error.with_url(&redact(&url));
                    tracing::debug!(
                        url = %redact(&url), range = %want,
                        elapsed_ms, attempt = at.number, error = %f.error, "http request failed"
                    );
                    return Err(f);
                }
            };
            self.link.record_wait(waited);
            resp.extensions_mut().insert(Waited(waited));
            let status = resp.status().as_u16();
            tracing::debug!(
                url = %redact(&url),
                range = %want,
                status,
                bytes = content_length(resp.headers()).ok().flatten(),
                elapsed_ms,
                attempt = at.number,
                "http request"
            );
            if !REDIRECT_STATUSES.contains(&status) {
                return Ok((resp, url));
            }
            hops += 1;
            if hops > self.max_redirects {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::Redirect,
                    format!("more than {} redirects", self.max_redirects),
                )));
            }
            let next = header(resp.headers(), "location")
                .and_then(|loc| url.join(loc).ok())
                .filter(|u| matches!(u.scheme(), "http" | "https"));
            let Some(next) = next else {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::Redirect,
                    format!("HTTP {status} redirect without a usable Location"),
                )));
            };
            drain(&mut resp);
            url = next;
        }
    }

    /// Reads a body of exactly the sink's remaining length, then confirms the
    /// body ends there (which also returns the connection to the pool).
    fn read_body(&self, resp: &mut Response<Body>, sink: &mut Sink<'_>) -> Result<(), Failure> {
        let (started, from) = (Instant::now(), sink.filled);
        let waited = resp.extensions().get::<Waited>().map(|w| w.0);
        let mut reader = resp.body_mut().as_reader();
        while !sink.is_full() {
            match reader.read(sink.spare()) {
                Ok(0) => {
                    return Err(Failure::transient(short_body(sink.filled, Some(sink.len))));
                }
                Ok(n) => {
                    sink.filled += n as u64;
                    Counters::add(&self.counters.bytes_fetched, n as u64);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(classify_io(e, "reading the response body")),
            }
        }
        self.link
            .record_body(sink.filled - from, started.elapsed(), waited);
        let mut probe = [0u8; 1];
        match reader.read(&mut probe) {
            Ok(0) | Err(_) => Ok(()),
            Ok(_) => Err(Failure::fatal(malformed(
                "the body is longer than the requested range",
            ))),
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn malformed(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::MalformedResponse, message)
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
        .get("content-range")
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

fn content_length(headers: &HeaderMap) -> Result<Option<u64>, Failure> {
    match headers.get("content-length") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| Failure::fatal(malformed("unparsable Content-Length"))),
    }
}

fn check_content_length(headers: &HeaderMap, expected: u64) -> Result<(), Failure> {
    match content_length(headers)? {
        Some(n) if n != expected => Err(Failure::fatal(malformed(format!(
            "Content-Length {n} does not match the {expected} bytes of Content-Range"
        )))),
        _ => Ok(()),
    }
}

fn reject_encoded(headers: &HeaderMap) -> Result<(), Failure> {
    match header(headers, "content-encoding").map(str::trim) {
        None | Some("") | Some("identity") => Ok(()),
        Some(enc) => Err(Failure::fatal(malformed(format!(
            "the server sent an encoded body (Content-Encoding: {}); byte ranges need the raw file",
            enc.chars().take(40).collect::<String>()
        )))),
    }
}

/// Reads (and so frees the connection of) a short body; returns its first bytes.
fn drain(resp: &mut Response<Body>) -> String {
    const DRAIN_LIMIT: u64 = 64 * 1024;
    let mut buf = Vec::new();
    let _ = resp
        .body_mut()
        .as_reader()
        .take(DRAIN_LIMIT)
        .read_to_end(&mut buf);
    buf.truncate(BODY_EXCERPT_LEN);
    String::from_utf8_lossy(&buf).into_owned()
}

fn classify_io(e: std::io::Error, doing: &str) -> Failure {
    classify_ureq(ureq::Error::from(e), doing)
}

/// Maps a ureq error to ours without passing its text on: some ureq errors
/// carry the full URL, query string included.
fn classify_ureq(e: ureq::Error, doing: &str) -> Failure {
    use ureq::Error as U;
    let (kind, what, retry) = match &e {
        U::Timeout(t) => (ErrorKind::Timeout, format!("timed out ({t:?})"), true),
        U::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
            (ErrorKind::Timeout, "timed out".to_owned(), true)
        }
        // rustls reports a failed handshake (an untrusted certificate, say)
        // as invalid data on the socket: retrying cannot help.
        U::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            (ErrorKind::Network, format!("TLS error: {io}"), false)
        }
        U::Io(io) => (ErrorKind::Network, format!("I/O error: {io}"), true),
        U::HostNotFound => (ErrorKind::Network, "host not found (DNS)".to_owned(), true),
        U::ConnectionFailed => (ErrorKind::Network, "connection failed".to_owned(), true),
        U::Protocol(p) => (
            ErrorKind::Network,
            format!("HTTP protocol error: {p}"),
            true,
        ),
        U::BodyStalled => (ErrorKind::Timeout, "the body stalled".to_owned(), true),
        U::BadUri(_) => (
            ErrorKind::InvalidUrl,
            "the URL is not valid".to_owned(),
            false,
        ),
        U::Http(_) => (
            ErrorKind::InvalidConfig,
            "a request header is not valid".to_owned(),
            false,
        ),
        U::RequireHttpsOnly(_) => (
            ErrorKind::InvalidUrl,
            "refusing plain HTTP (https_only is set)".to_owned(),
            false,
        ),
        U::LargeResponseHeader(n, limit) => (
            ErrorKind::MalformedResponse,
            format!("response headers too large ({n} bytes, limit {limit})"),
            false,
        ),
        U::Tls(msg) => (ErrorKind::Network, format!("TLS error: {msg}"), false),
        U::Pem(_) | U::Rustls(_) => (ErrorKind::Network, "TLS error".to_owned(), false),
        // Only with ureq's `gzip` or `brotli` feature, which Cargo's feature
        // unification can switch on: the variant cannot be named without it.
        other if other.to_string().contains("decompression failed") => (
            ErrorKind::MalformedResponse,
            format!(
                "the server sent an encoded body though asked for identity ({})",
                other.to_string().chars().take(100).collect::<String>()
            ),
            false,
        ),
        _ => (ErrorKind::Network, "connection error".to_owned(), true),
    };
    let error = Error::new(kind, format!("{what} while {doing}"));
    if retry {
        Failure::transient(error)
    } else {
        Failure::fatal(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_checks_only_validators_present_on_both_sides() {
        let id = Identity {
            size: 5,
            etag: Some("\"a\"".into()),
            last_modified: None,
        };
        let mut h = HeaderMap::new();
        assert!(id.check(&h).is_ok());
        h.insert("etag", "\"a\"".parse().unwrap());
        h.insert(
            "last-modified",
            "Mon, 01 Jan 2024 00:00:00 GMT".parse().unwrap(),
        );
        assert!(id.check(&h).is_ok());
        h.insert("etag", "\"b\"".parse().unwrap());
        assert_eq!(id.check(&h).unwrap_err().kind(), ErrorKind::RemoteChanged);
        assert_eq!(id.strong_etag(), Some("\"a\""));
        let weak = Identity {
            etag: Some("W/\"a\"".into()),
            ..id
        };
        assert_eq!(weak.strong_etag(), None);
    }
}
