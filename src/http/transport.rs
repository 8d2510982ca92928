//! The one driver of HTTP requests: [`Transport`] runs the retry loop,
//! sends each request and follows its redirects, and reads each body into
//! its sink, carrying out what `request`, `response` and `retry` decide. It
//! is the only code of the crate that waits on a socket of a file's.

use std::io::Read;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use ureq::http::Response;
use ureq::http::header::{ACCEPT_ENCODING, IF_MATCH, IF_NONE_MATCH, LOCATION, RANGE, USER_AGENT};
use ureq::typestate::WithoutBody;
use ureq::{Body, RequestBuilder};
use url::Url;

use super::agent::FileAgent;
use super::classify::{classify_io, classify_ureq, refused_here};
use super::redact::{printable_excerpt_without, redact, same_origin};
use super::request::{Precondition, Rules, Want, is_redirect};
use super::response::{
    FetchVerdict, OpenVerdict, Opened, Revalidated, Tail, body_cut_short, body_too_long,
    check_whole, judge_fetch, judge_open, judge_tail, retry_after, retry_for, status_error,
};
use super::retry::{
    Attempts, EXPIRED_HINT, Failure, Hint, Next, Retry, RetryPolicy, Situation, jitter,
};
use super::secrets::Secrets;
use super::{Reaction, Service, Timeouts, UrlProvider, header};
use crate::engine::range_source::RangeSource;
use crate::engine::sink::Sink;
use crate::error::{BODY_EXCERPT_LEN, Error, ErrorKind};
use crate::identity::Identity;
use crate::link::LinkMeter;
use crate::process::budget::{self, Permit, Permits};
use crate::stats::Counters;
use crate::sync::RwLock;
use crate::wait::Stop;

/// The targets of the transport's events: Python's `logging` and tracing
/// filters know them by these names (`remfile.http.request`, ...).
const REQUESTS: &str = "remfile::http::request";
const RETRIES: &str = "remfile::http::retry";
const OPENS: &str = "remfile::http";

/// The settings [`Transport::new`] takes.
pub(crate) struct TransportConfig {
    pub agent: FileAgent,
    pub headers: Vec<(String, String)>,
    pub user_agent: String,
    pub timeouts: Timeouts,
    pub retry: RetryPolicy,
    pub https_only: bool,
    pub allow_redirect_to_http: bool,
    pub max_redirects: u32,
    pub max_connections: usize,
    pub url_provider: Option<Arc<UrlProvider>>,
    pub link: Arc<LinkMeter>,
    pub service: Option<Arc<dyn Service>>,
    /// How messages name the file, if not by its URL (`s3://bucket/key`).
    pub shown_as: Option<String>,
}

/// Everything needed to send requests for one file.
pub(crate) struct Transport {
    agent: FileAgent,
    /// The URL given at open, or the last one the URL provider gave.
    original: RwLock<Url>,
    redacted: String,
    /// Where requests go: the original URL, or where it last redirected to.
    target: RwLock<Url>,
    headers: Vec<(String, String)>,
    /// The URL given at open: the caller's headers are for its origin
    /// alone, wherever a redirect or the URL provider leads.
    headers_for: Url,
    /// The values of the URL given at open and of the caller's headers:
    /// what an error must not show, whatever the server echoes.
    given_values: Secrets,
    user_agent: String,
    timeouts: Timeouts,
    retry: RetryPolicy,
    rules: Rules,
    url_provider: Option<Arc<UrlProvider>>,
    /// Whether the file was opened: only a URL that worked may be renewed.
    opened: AtomicBool,
    /// Bounds the file's requests in flight, and so its connections open
    /// (beside the process's bound per origin).
    permits: Arc<Permits>,
    counters: Arc<Counters>,
    link: Arc<LinkMeter>,
    service: Option<Arc<dyn Service>>,
}

impl Transport {
    pub fn new(url: Url, config: TransportConfig, counters: Arc<Counters>) -> Transport {
        // The caller's headers first: within the bounds, a URL of many
        // parameters does not crowd them out.
        let mut given_values = Secrets::new();
        for (_, value) in &config.headers {
            given_values.add_header_value(value);
        }
        given_values.add_url(&url);
        Transport {
            given_values,
            agent: config.agent,
            redacted: config.shown_as.unwrap_or_else(|| redact(&url)),
            target: RwLock::new(url.clone()),
            headers_for: url.clone(),
            original: RwLock::new(url),
            headers: config.headers,
            user_agent: config.user_agent,
            timeouts: config.timeouts,
            retry: config.retry,
            rules: Rules {
                https_only: config.https_only,
                allow_redirect_to_http: config.allow_redirect_to_http,
                max_redirects: config.max_redirects,
            },
            // Background work may take them all: reads still go first.
            permits: Arc::new(Permits::new(config.max_connections, config.max_connections)),
            link: config.link,
            url_provider: config.url_provider,
            opened: AtomicBool::new(false),
            service: config.service,
            counters,
        }
    }

    /// Where requests go now: the original URL, or where it redirected.
    pub(crate) fn target(&self) -> Url {
        self.target.read().clone()
    }

    /// The original URL, redacted.
    pub fn redacted_url(&self) -> &str {
        &self.redacted
    }

    /// How an error names the file a request for `url` was for: by the
    /// service's name for it (`s3://bucket/key`, wherever its requests
    /// go), else by the URL, redacted.
    fn shown(&self, url: &Url) -> String {
        match self.service {
            Some(_) => self.redacted.clone(),
            None => redact(url),
        }
    }

    /// What errors about a request to `url` must not show: the values of
    /// the URL given and the caller's headers, the service's keys as they
    /// are now, and the values of the URLs requests go to now (renewed by
    /// the provider, moved by a redirect) and of `url`.
    fn known_values(&self, url: Option<&Url>) -> Secrets {
        let mut known = Secrets::new();
        if let Some(service) = &self.service {
            service.add_known_values(&mut known);
        }
        known.extend(&self.given_values);
        known.add_url(&self.original.read());
        known.add_url(&self.target.read());
        if let Some(url) = url {
            known.add_url(url);
        }
        known
    }

    /// `error` without the values of [`known_values`](Self::known_values)
    /// in its message or body excerpt.
    fn scrubbed(&self, error: Error) -> Error {
        error.without_values(&self.known_values(None))
    }

    /// Learns the size and validators and fetches the first `first_len` bytes,
    /// in one request: `Range: bytes=0-{first_len-1}`; within what `stop`
    /// allows (and the read timeout).
    pub fn open(&self, first_len: u64, stop: &Stop) -> Result<Opened, Error> {
        self.open_with(first_len, None, stop)
            .map(|answer| match answer {
                Revalidated::Changed(opened) => opened,
                Revalidated::Unchanged { .. } => unreachable!("no 304 without a precondition"),
            })
    }

    /// As [`open`](Self::open), unless the file is still the version
    /// `known` describes: then the server says so (`304 Not Modified`) with
    /// no body, if the version has a strong ETag to ask with
    /// (`If-None-Match`), and the `304` carries that ETag (else the file is
    /// opened again, unconditionally).
    ///
    /// A version known by its `Last-Modified` alone is not asked about: a
    /// server answers `If-Modified-Since` with `304` whenever the file's
    /// date is not later, so a file replaced by an older-dated one (a
    /// restore, `cp -p`) would pass. Its first block is fetched instead,
    /// and the caller compares the date and the size it comes with.
    pub fn open_unless(
        &self,
        first_len: u64,
        known: &Identity,
        stop: &Stop,
    ) -> Result<Revalidated, Error> {
        let Some(etag) = known.strong_etag() else {
            return self.open_with(first_len, None, stop);
        };
        match self.open_with(first_len, Some(Precondition::NoneMatch(etag)), stop)? {
            Revalidated::Unchanged { etag, .. } if !known.confirmed_by(etag.as_deref()) => {
                tracing::debug!(
                    target: OPENS,
                    "a 304 Not Modified without the ETag asked about; the file is opened again"
                );
                self.open_with(first_len, None, stop)
            }
            answer => Ok(answer),
        }
    }

    fn open_with(
        &self,
        first_len: u64,
        condition: Option<Precondition<'_>>,
        stop: &Stop,
    ) -> Result<Revalidated, Error> {
        let stop = &stop.until(crate::wait::deadline::after(self.timeouts.per_read));
        let mut in_sequence = 0;
        let result = self.with_retries(0..first_len, stop, &mut in_sequence, |t, mut at| {
            let (resp, url) = t.send(Want::Bytes(0..first_len), condition, &mut at)?;
            t.open_response(resp, url, first_len, condition.is_some(), stop)
        });
        Counters::add(&self.counters.round_trips, in_sequence.into());
        if result.is_ok() {
            self.opened.store(true, Relaxed);
        }
        result.map_err(|e| self.scrubbed(e).with_url(&self.redacted))
    }

    /// Fetches the last `len` bytes of the file with a suffix range, once (it
    /// is an optimisation: the caller drops it on any failure). Counts a
    /// request but no round trip: it runs beside [`open`](Self::open).
    pub fn tail(&self, len: u64, stop: &Stop) -> Result<Tail, Error> {
        let stop = &stop.until(crate::wait::deadline::after(self.timeouts.per_read));
        let permit = self.connection(stop)?;
        let mut in_sequence = 0;
        let mut at = Try {
            number: 1,
            in_sequence: &mut in_sequence,
            stop,
        };
        let result = stop.in_scope(|| {
            self.send(Want::Last(len), None, &mut at)
                .and_then(|(resp, _)| self.tail_response(resp, len, stop))
        });
        drop(permit);
        result.map_err(|f| {
            self.scrubbed(f.error)
                .with_url(&self.redacted)
                .with_attempts(1)
        })
    }

    /// Waits, within what `stop` allows, for a connection the file's and the
    /// process's bounds allow (for the origin requests go to now), in the
    /// stop's lane; held while the request is in flight.
    fn connection(&self, stop: &Stop) -> Result<[Permit; 2], Error> {
        let deadline = stop.deadline();
        let busy = |of: &str| {
            Error::new(
                ErrorKind::Timeout,
                format!("timed out waiting for a free connection ({of} are all busy)"),
            )
        };
        // The process's first: a read waiting there counts as one before
        // any file's background work, and a permit of the file is then
        // held only by a request that has its connection.
        let origin = budget::of_origin(&self.target.read().origin().ascii_serialization());
        let process = origin
            .acquire_for(stop, deadline)?
            .ok_or_else(|| busy("the process's connections to the server"))?;
        let file = self
            .permits
            .acquire_for(stop, deadline)?
            .ok_or_else(|| busy("the file's max_connections"))?;
        Ok([process, file])
    }

    /// Sends later requests straight to `url`, where the original redirected.
    fn remember(&self, url: Url) {
        if *self.target.read() != url {
            *self.target.write() = url;
        }
    }

    // The retry loop.

    /// Runs `attempt` (one request for `range`, holding a connection permit)
    /// until it succeeds, the policy gives up, or `stop` ends it (its
    /// deadline passes, it is cancelled).
    fn with_retries<T>(
        &self,
        range: Range<u64>,
        stop: &Stop,
        in_sequence: &mut u32,
        mut attempt: impl FnMut(&Self, Try<'_>) -> Result<T, Failure>,
    ) -> Result<T, Error> {
        let mut so_far = Attempts::default();
        loop {
            so_far.made += 1;
            // Background work of a closed file waits for no connection.
            stop.check_file_open()
                .map_err(|e| e.with_attempts(so_far.made - 1))?;
            let permit = self
                .connection(stop)
                .map_err(|e| e.with_attempts(so_far.made - 1))?;
            // A read that was stopped makes no further request, nor a
            // file closed meanwhile.
            stop.check()
                .and_then(|()| stop.check_file_open())
                .map_err(|e| e.with_attempts(so_far.made - 1))?;
            // The stop declared around the attempt: its socket waits (in
            // ureq's code, which carries no value of ours) end at it.
            let outcome = stop.in_scope(|| {
                attempt(
                    self,
                    Try {
                        number: so_far.made,
                        in_sequence: &mut *in_sequence,
                        stop,
                    },
                )
            });
            drop(permit);
            let mut failure = match outcome {
                Ok(v) => return Ok(v),
                Err(f) => f,
            };
            // Before it is logged (a retry's warning shows it).
            failure.error = self.scrubbed(failure.error);
            // A request ended by a stop failed for no fault of the server's:
            // the stop's error, and no retry.
            stop.check().map_err(|e| e.with_attempts(so_far.made))?;
            let time_left = stop.deadline().saturating_duration_since(stop.now());
            let next = so_far.after(&failure, self.situation(), &self.retry, jitter(), time_left);
            if let Err(e) = self.carry_out(next, failure, &range, stop, so_far.made) {
                // A stop met while renewing keys or re-resolving says so.
                stop.check().map_err(|e| e.with_attempts(so_far.made))?;
                return Err(e.with_attempts(so_far.made));
            }
            // Sending a request where the file is is no retry.
            if next != Next::Now {
                Counters::add(&self.counters.retries, 1);
            }
        }
    }

    /// What the retry decision reads of the transport now.
    fn situation(&self) -> Situation {
        let original = self.original.read();
        Situation {
            redirected: *self.target.read() != *original,
            service: self.service.is_some(),
            renewable_url: self.url_provider.is_some() && self.opened.load(Relaxed),
            query: original.query().is_some(),
        }
    }

    /// Does what the retry loop decided after `failure`: `Ok` means try
    /// again.
    fn carry_out(
        &self,
        next: Next,
        failure: Failure,
        range: &Range<u64>,
        stop: &Stop,
        attempt: u32,
    ) -> Result<(), Error> {
        let refusal = failure.error;
        match next {
            Next::GiveUp(Hint::None) => Err(refusal),
            Next::GiveUp(Hint::Expired) => Err(refusal.with_hint(EXPIRED_HINT)),
            Next::GiveUp(Hint::Service) => Err(self.with_service_hint(refusal)),
            Next::Now => Ok(()),
            Next::Reresolve => {
                tracing::warn!(
                    target: RETRIES,
                    url = %self.redacted, status = ?refusal.status(),
                    "redirect target refused access; resolving the original URL again"
                );
                *self.target.write() = self.original.read().clone();
                Ok(())
            }
            Next::RenewUrl => match &self.url_provider {
                Some(provider) => self.renew(provider.as_ref(), &refusal),
                None => Err(refusal),
            },
            Next::RenewKeys => match &self.service {
                Some(service) if service.renew(stop) => {
                    tracing::warn!(
                        target: RETRIES,
                        url = %self.redacted,
                        "expired credentials refused; trying again with renewed ones"
                    );
                    Ok(())
                }
                _ => Err(self.with_service_hint(refusal)),
            },
            Next::BackOff(delay) => {
                tracing::warn!(
                    target: RETRIES,
                    url = %self.redacted,
                    range = %format_args!("{}-{}", range.start, range.end.saturating_sub(1)),
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    error = %refusal,
                    "retrying request"
                );
                // A stop ends the pause, with the stop's error.
                stop.sleep_until(stop.now() + delay)?;
                if stop.now() >= stop.deadline() {
                    // The last real failure says more than "deadline passed".
                    return Err(refusal);
                }
                Ok(())
            }
        }
    }

    fn with_service_hint(&self, refusal: Error) -> Error {
        match &self.service {
            Some(service) => refusal.with_hint(service.refusal_hint()),
            None => refusal,
        }
    }

    /// Sends this and later requests to `url`, where a service says the file
    /// is.
    fn move_to(&self, url: Url) {
        tracing::debug!(target: RETRIES, url = %redact(&url), "the service moved the file's requests");
        *self.original.write() = url.clone();
        *self.target.write() = url;
    }

    /// Replaces the URL with a fresh one from the provider. The next request
    /// checks, as every response is checked, that it serves the same file.
    /// A provider that fails leaves the `refusal` standing, with its reason.
    fn renew(&self, provider: &UrlProvider, refusal: &Error) -> Result<(), Error> {
        let fresh = provider().map_err(|e| {
            let status = refusal
                .status()
                .map_or(String::new(), |s| format!(" (HTTP {s})"));
            Error::new(
                refusal.kind(),
                format!("access was refused{status}, and the URL provider failed: {e}"),
            )
            .with_url(&self.redacted)
        })?;
        let url = Url::parse(&fresh).map_err(|e| {
            Error::new(
                ErrorKind::InvalidUrl,
                format!("the URL provider gave an invalid URL: {e}"),
            )
        })?;
        if !self.rules.accepts_renewed(&self.original.read(), &url) {
            return Err(Error::new(
                ErrorKind::InvalidUrl,
                format!("the URL provider gave an unusable URL {}", redact(&url)),
            ));
        }
        tracing::warn!(
            target: RETRIES,
            url = %redact(&url),
            "access refused; continuing with a fresh URL from the provider"
        );
        *self.original.write() = url.clone();
        *self.target.write() = url;
        Ok(())
    }

    // One request, its redirects followed.

    /// Sends one GET for `want`, following redirects. Returns the final
    /// response and the URL that gave it.
    fn send(
        &self,
        want: Want,
        condition: Option<Precondition<'_>>,
        at: &mut Try<'_>,
    ) -> Result<(Response<Body>, Url), Failure> {
        let mut url = self.target.read().clone();
        let mut hops = 0;
        loop {
            // No hop after a stop (draining the last one may have hidden it).
            at.stop.check().map_err(Failure::fatal)?;
            let mut resp = self.send_once(&url, &want, condition, at)?;
            let status = resp.status().as_u16();
            if !is_redirect(status) {
                return Ok((resp, url));
            }
            // S3 names a bucket's region with its redirects: the requests
            // go there, signed for it, rather than where the redirect says.
            if let Some(service) = &self.service {
                if let Reaction::Moved(to) = service.react(status, resp.headers(), &[], &url) {
                    read_short_body(&mut resp);
                    self.move_to(to);
                    let error = Error::new(
                        ErrorKind::HttpStatus(status),
                        format!("HTTP {status}: the bucket is in another region"),
                    );
                    return Err(Failure::new(error, Retry::Moved, None));
                }
            }
            hops += 1;
            let location = header::get(resp.headers(), LOCATION).map(str::to_owned);
            // Drained, so that its connection is reused, whether or not the
            // hop is taken.
            read_short_body(&mut resp);
            url = self
                .rules
                .next_hop(hops, status, location.as_deref(), &url)?;
        }
    }

    /// One request to `url`, without following a redirect.
    fn send_once(
        &self,
        url: &Url,
        want: &Want,
        condition: Option<Precondition<'_>>,
        at: &mut Try<'_>,
    ) -> Result<Response<Body>, Failure> {
        self.rules.check_target(url)?;
        let remaining = at.stop.deadline().saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Failure::give_up(Error::new(
                ErrorKind::Timeout,
                "the read's overall deadline passed",
            )));
        }
        let req = self
            .request(url, want, condition, (remaining, at.stop))
            .map_err(|e| Failure::from(e.with_url(&self.shown(url))))?;
        Counters::add(&self.counters.requests, 1);
        *at.in_sequence += 1;
        let attempt = at.number;
        let started = Instant::now();
        let result = req.call();
        let waited = started.elapsed();
        let elapsed_ms = waited.as_millis() as u64;
        let mut resp = result.map_err(|e| {
            let opened = self.opened.load(Relaxed);
            let failure = classify_ureq(e, "making the request");
            let mut f = refused_here(url, self.agent.dials_directly(), opened, failure);
            f.error = f.error.with_url(&self.shown(url));
            self.counters.trace.record(want.into(), None, None, started);
            tracing::debug!(
                target: REQUESTS,
                url = %redact(url), range = %want,
                elapsed_ms, attempt, error = %f.error, "http request failed"
            );
            f
        })?;
        self.link.record_wait(waited);
        resp.extensions_mut().insert(HeadersArrived {
            waited,
            at: Instant::now(),
        });
        let body_len = header::content_length(resp.headers()).ok().flatten();
        self.counters
            .trace
            .record(want.into(), Some(resp.status().as_u16()), body_len, started);
        tracing::debug!(
            target: REQUESTS,
            url = %redact(url),
            range = %want,
            status = resp.status().as_u16(),
            bytes = body_len,
            elapsed_ms,
            attempt,
            "http request"
        );
        Ok(resp)
    }

    /// The GET for `want` at `url`: the crate's headers, the caller's (to
    /// their own origin only), and timeouts within the `remaining` time.
    fn request(
        &self,
        url: &Url,
        want: &Want,
        condition: Option<Precondition<'_>>,
        (remaining, stop): (Duration, &Stop),
    ) -> Result<RequestBuilder<WithoutBody>, Error> {
        let mut req = self
            .agent
            .get()
            .get(url.as_str())
            .header(RANGE, format!("bytes={want}"))
            .header(ACCEPT_ENCODING, "identity")
            .header(USER_AGENT, &self.user_agent);
        req = match condition {
            Some(Precondition::Match(tag)) => req.header(IF_MATCH, tag),
            Some(Precondition::NoneMatch(tag)) => req.header(IF_NONE_MATCH, tag),
            None => req,
        };
        // The caller's headers are for the file's own origin: the one given,
        // or where its service moved its requests (a bucket's region).
        let own_origin = match &self.service {
            Some(_) => same_origin(url, &self.original.read()),
            None => same_origin(url, &self.headers_for),
        };
        let caller_headers: &[(String, String)] = if own_origin { &self.headers } else { &[] };
        for (name, value) in caller_headers {
            req = req.header(name, value);
        }
        if let Some(service) = &self.service {
            for (name, value) in service.authorize(url, caller_headers, stop)? {
                req = req.header(name, value);
            }
        }
        Ok(req
            .config()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(remaining))
            .timeout_resolve(Some(self.timeouts.connect))
            .timeout_connect(Some(self.timeouts.connect))
            .timeout_recv_response(Some(self.timeouts.idle))
            .timeout_per_read(Some(self.timeouts.idle))
            .build())
    }

    // Answers: judged by `response`, their bodies read here.

    /// Checks the answer to the opening request and reads its body.
    fn open_response(
        &self,
        mut resp: Response<Body>,
        url: Url,
        first_len: u64,
        conditional: bool,
        stop: &Stop,
    ) -> Result<Revalidated, Failure> {
        let status = resp.status().as_u16();
        let verdict = judge_open(status, resp.headers(), first_len, conditional)?;
        let answer = match verdict {
            OpenVerdict::Unchanged { freshness, etag } => {
                read_short_body(&mut resp);
                Revalidated::Unchanged { freshness, etag }
            }
            OpenVerdict::Partial {
                len,
                identity,
                freshness,
            } => {
                // Remembered before the body is read: a retry of a body cut
                // short skips the redirect.
                self.remember(url);
                let mut first = vec![0; len as usize];
                self.read_body(&mut resp, &mut Sink::over(&mut first), stop)?;
                return Ok(Revalidated::Changed(Opened {
                    identity,
                    first,
                    freshness,
                }));
            }
            OpenVerdict::Whole { announced } => {
                let mut body = Vec::new();
                resp.body_mut()
                    .as_reader()
                    .take(first_len + 1)
                    .read_to_end(&mut body)
                    .map_err(|e| classify_io(e, "reading the response"))?;
                Counters::add(&self.counters.bytes_fetched, body.len() as u64);
                Revalidated::Changed(check_whole(body, announced, first_len, resp.headers())?)
            }
            OpenVerdict::Empty(opened) => {
                read_short_body(&mut resp);
                Revalidated::Changed(opened)
            }
            OpenVerdict::Status(status) => return Err(self.status_failure(status, resp, &url)),
        };
        self.remember(url);
        Ok(answer)
    }

    /// Checks the answer to a suffix range for the last `len` bytes and
    /// reads its body.
    fn tail_response(
        &self,
        mut resp: Response<Body>,
        len: u64,
        stop: &Stop,
    ) -> Result<Tail, Failure> {
        // A body refused is dropped unread: a whole body sent by a server
        // that ignores the range is not worth reading (the open reports
        // such servers).
        let (start, identity) = judge_tail(resp.status().as_u16(), resp.headers(), len)?;
        let mut bytes = vec![0; (identity.size - start) as usize];
        self.read_body(&mut resp, &mut Sink::over(&mut bytes), stop)?;
        Ok(Tail {
            identity,
            start,
            bytes,
        })
    }

    /// Checks the answer to a request for `range` of the file `identity`
    /// and reads its body into `sink`.
    fn fetch_response(
        &self,
        mut resp: Response<Body>,
        url: Url,
        range: &Range<u64>,
        identity: &Identity,
        sink: &mut Sink<'_>,
        stop: &Stop,
    ) -> Result<(), Failure> {
        match judge_fetch(resp.status().as_u16(), resp.headers(), range, identity)? {
            FetchVerdict::Body => {}
            FetchVerdict::Status(status) => return Err(self.status_failure(status, resp, &url)),
        }
        self.remember(url);
        self.read_body(&mut resp, sink, stop)
    }

    /// Reads a body of exactly the sink's remaining length, then confirms the
    /// body ends there (which also returns the connection to the pool).
    fn read_body(
        &self,
        resp: &mut Response<Body>,
        sink: &mut Sink<'_>,
        stop: &Stop,
    ) -> Result<(), Failure> {
        let from = sink.filled();
        // Timed from the headers' arrival: a reader slow to start reading
        // does not make the link look faster.
        let headers = resp.extensions().get::<HeadersArrived>().copied();
        let started = headers.map_or_else(Instant::now, |h| h.at);
        let mut reader = resp.body_mut().as_reader();
        while !sink.is_full() {
            stop.check().map_err(Failure::fatal)?;
            match reader.read(sink.spare()) {
                Ok(0) => return Err(body_cut_short(sink.filled(), sink.len())),
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
            Ok(_) => Err(body_too_long()),
        }
    }

    /// Turns an unexpected status into a failure, with the start of its body
    /// and the wait the server asked for.
    fn status_failure(&self, status: u16, mut resp: Response<Body>, url: &Url) -> Failure {
        let retry_after = retry_after(resp.headers());
        let mut error = status_error(status).with_url(&self.shown(url));
        let body = read_short_body(&mut resp);
        let known = self.known_values(Some(url));
        let excerpt = printable_excerpt_without(&body, &known, BODY_EXCERPT_LEN);
        if !excerpt.is_empty() {
            error = error.with_body(excerpt);
        }
        let reaction = match &self.service {
            Some(service) => service.react(status, resp.headers(), &body, url),
            None => Reaction::Nothing,
        };
        let retry = retry_for(status, &reaction);
        if let Reaction::Moved(to) = reaction {
            self.move_to(to);
        }
        Failure::new(error, retry, retry_after)
    }
}

/// The engine's seam: the bytes of a range of one version of the file.
impl RangeSource for Transport {
    /// Fills `sink` with exactly `range` of the file identified by
    /// `identity`, retrying as the policy allows and resuming from the first
    /// byte missing. Returns the requests made in sequence.
    fn fetch(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        identity: &Identity,
        stop: &Stop,
    ) -> Result<u32, Error> {
        debug_assert_eq!(sink.len(), range.end - range.start);
        let mut in_sequence = 0;
        let result = self.with_retries(range.clone(), stop, &mut in_sequence, |t, mut at| {
            let rest = range.start + sink.filled()..range.end;
            let if_match = identity.strong_etag().map(Precondition::Match);
            let (resp, url) = t.send(Want::Bytes(rest.clone()), if_match, &mut at)?;
            t.fetch_response(resp, url, &rest, identity, sink, stop)
        });
        result
            .map(|()| in_sequence)
            .map_err(|e| self.scrubbed(e).with_url(&self.redacted).with_range(range))
    }

    fn redacted_url(&self) -> &str {
        Transport::redacted_url(self)
    }
}

/// Which attempt this is (1-based), the count of sequential requests so
/// far, which every request sent adds to, and what the attempt may wait
/// for.
struct Try<'a> {
    number: u32,
    in_sequence: &'a mut u32,
    stop: &'a Stop,
}

/// How long a response's headers took, and when they arrived (its body is
/// timed from then), kept with the response.
#[derive(Debug, Clone, Copy)]
struct HeadersArrived {
    waited: Duration,
    at: Instant,
}

/// Reads a short body (at most 64 KiB of it), as it is: so that its
/// connection is reused, and an error answer's start can be shown.
fn read_short_body(resp: &mut Response<Body>) -> Vec<u8> {
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
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::time::Duration;

    use remfile_testkit::{RangeServer, Reply};

    use crate::clock::tests::Manual;
    use crate::http::RetryPolicy;
    use crate::options::Builder;
    use crate::wait::Stop;

    /// Two `503`s before the bytes, on a policy that backs off 10 s, then
    /// 20 s: the read's clock moves by the pauses, and no thread sleeps
    /// through them.
    #[test]
    fn retry_pauses_pass_on_the_reads_clock() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let refused = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&refused);
        let server = RangeServer::new(data.clone()).with_hook(move |req, reply| {
            let opening = req.range().is_some_and(|(first, _)| first == 0);
            if !opening && count.fetch_add(1, SeqCst) < 2 {
                return Reply::new(503);
            }
            reply
        });
        let file = Builder::default()
            .block_size(64 << 10)
            .read_ahead_max(0)
            .open_tail(0)
            .read_timeout(Duration::from_secs(600))
            .retry_policy(
                RetryPolicy::default()
                    .initial_backoff(Duration::from_secs(10))
                    .max_backoff(Duration::from_secs(60)),
            )
            .open(server.url("/f"))
            .unwrap();
        let clock = Manual::new();
        let stop = Stop::here().with_clock(clock.clone());
        let mut buf = vec![0; 1000];
        stop.in_scope(|| file.read_exact_at(200_000, &mut buf))
            .unwrap();
        assert!(buf == data[200_000..201_000]);
        assert_eq!(refused.load(SeqCst), 3, "two refused, the third served");
        assert_eq!(file.stats().retries, 2);
        // Each pause is its backoff, shortened by jitter of at most half.
        let slept = clock.slept();
        let (least, most) = (Duration::from_secs(15), Duration::from_secs(30));
        assert!(least <= slept && slept <= most, "{slept:?}");
    }
}
