//! The HTTP transport: it speaks bytes only. It opens a file (its size,
//! validators and first bytes, in one request), fetches its tail, and fetches
//! a byte range of it into a [`Sink`]; every answer is validated, redirects,
//! retries and timeouts are handled. What the bytes are for (blocks, a cache)
//! is the engine's business.
//!
//! | module | its one job |
//! |---|---|
//! | `request` | one `GET`, following redirects hop by hop |
//! | `response` | what a `206`, `200` or `416` must say to be believed; reading a body |
//! | `retry` | the retry policy and loop: backoff, `Retry-After`, re-resolving, renewal |
//! | `classify` | ureq's failures in the crate's terms |
//! | `header` | header names the crate owns, and reading response headers |
//! | `agent` | the ureq agent: connection pool, proxy, TLS roots |
//! | `content_range`, `redact`, `secrets`, `sink` | pure parsing, URLs and error bodies fit to print, the request's values they must not show, body destinations |
//!
//! Everything that touches `ureq` lives here.

mod agent;
mod classify;
pub(crate) mod content_range;
pub(crate) mod header;
pub(crate) mod redact;
mod request;
mod response;
mod retry;
pub(crate) mod secrets;
mod sink;
mod stoppable;
mod tcp;

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::sync::RwLock;

use url::Url;

use self::redact::redact;
use self::request::{Precondition, Want};
use self::retry::Try;
use self::secrets::Secrets;
use crate::error::{Error, ErrorKind};
use crate::identity::Identity;
use crate::link::LinkMeter;
use crate::process::budget::{self, Permit, Permits};
use crate::process::workers;
use crate::stats::Counters;

pub(crate) use self::agent::{AgentSettings, FileAgent, agent};
pub(crate) use self::response::{Opened, Revalidated, Tail};
pub use self::retry::RetryPolicy;
pub(crate) use self::sink::Sink;

/// The timeouts of the transport; see the builder for their meaning.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub idle: Duration,
    pub per_read: Duration,
}

/// Gives a fresh URL for the same file, such as a newly signed one.
pub(crate) type UrlProvider =
    dyn Fn() -> Result<String, Box<dyn std::error::Error + Send + Sync>> + Send + Sync;

/// A storage service's part in each request (S3's): it authorizes the
/// request, tells from an error answer where the file really is, and renews
/// its keys after a refusal.
pub(crate) trait Service: Send + Sync {
    /// Headers to add to a `GET` of `url` (a signature, say) that also
    /// carries the caller's `headers`.
    fn authorize(
        &self,
        url: &Url,
        headers: &[(String, String)],
    ) -> Result<Vec<(&'static str, String)>, Error>;
    /// What an error answer to a request for `url` (its status, headers and
    /// the start of its body) asks of the transport.
    fn react(
        &self,
        status: u16,
        headers: &ureq::http::HeaderMap,
        body: &[u8],
        url: &Url,
    ) -> Reaction;
    /// After a [`Reaction::Renew`]: whether new keys were got, so that one
    /// more attempt may succeed.
    fn renew(&self) -> bool;
    /// What a refusal's error adds for the user.
    fn refusal_hint(&self) -> &'static str;
    /// Adds the values the service sends that no error text may show (its
    /// keys), as they are now: an error body may echo them.
    fn add_known_values(&self, known: &mut Secrets);
}

/// Whether `url`'s host is this machine: a loopback address or
/// `localhost` (which the URL parser writes in lower case).
pub(crate) fn names_this_machine(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name == "localhost",
        None => false,
    }
}

/// What a [`Service`] makes of an error answer.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub(crate) enum Reaction {
    /// An error as any other.
    Nothing,
    /// The file is at this URL (its bucket's region): send the request there.
    Moved(Url),
    /// The keys expired: renew them and try again.
    Renew,
}

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
    https_only: bool,
    allow_redirect_to_http: bool,
    max_redirects: u32,
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
    /// Whether moving from `from` to `to` (a redirect, a provider's fresh
    /// URL) is a downgrade from `https` to plain `http` the builder did not
    /// allow: its bytes would travel in the clear, and be cached under the
    /// `https` name as if they had come over TLS.
    fn refuses_downgrade(&self, from: &Url, to: &Url) -> bool {
        from.scheme() == "https" && to.scheme() == "http" && !self.allow_redirect_to_http
    }

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
            https_only: config.https_only,
            allow_redirect_to_http: config.allow_redirect_to_http,
            max_redirects: config.max_redirects,
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
    /// in one request: `Range: bytes=0-{first_len-1}`.
    pub fn open(&self, first_len: u64) -> Result<Opened, Error> {
        self.open_with(first_len, None).map(|answer| match answer {
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
    pub fn open_unless(&self, first_len: u64, known: &Identity) -> Result<Revalidated, Error> {
        let Some(etag) = known.strong_etag() else {
            return self.open_with(first_len, None);
        };
        match self.open_with(first_len, Some(Precondition::NoneMatch(etag)))? {
            Revalidated::Unchanged { etag, .. } if !known.confirmed_by(etag.as_deref()) => {
                tracing::debug!(
                    "a 304 Not Modified without the ETag asked about; the file is opened again"
                );
                self.open_with(first_len, None)
            }
            answer => Ok(answer),
        }
    }

    fn open_with(
        &self,
        first_len: u64,
        condition: Option<Precondition<'_>>,
    ) -> Result<Revalidated, Error> {
        let deadline = crate::wait::deadline::after(self.timeouts.per_read);
        let mut in_sequence = 0;
        let result = self.with_retries(0..first_len, deadline, &mut in_sequence, |t, at| {
            let (resp, url) = t.send(Want::Bytes(0..first_len), condition, deadline, at)?;
            t.open_response(resp, url, first_len, condition.is_some())
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
    pub fn tail(&self, len: u64) -> Result<Tail, Error> {
        let deadline = crate::wait::deadline::after(self.timeouts.per_read);
        let permit = self.connection(deadline)?;
        let mut in_sequence = 0;
        let at = Try {
            number: 1,
            in_sequence: &mut in_sequence,
        };
        let result = self
            .send(Want::Last(len), None, deadline, at)
            .and_then(|(resp, _)| self.tail_response(resp, len));
        drop(permit);
        result.map_err(|f| {
            self.scrubbed(f.error)
                .with_url(&self.redacted)
                .with_attempts(1)
        })
    }

    /// Fills `sink` with exactly `range` of the file identified by
    /// `identity`, retrying as the policy allows and resuming from the first
    /// byte missing. Returns the requests made in sequence.
    pub fn fetch(
        &self,
        range: Range<u64>,
        sink: &mut Sink<'_>,
        identity: &Identity,
        deadline: Instant,
    ) -> Result<u32, Error> {
        debug_assert_eq!(sink.len(), range.end - range.start);
        let mut in_sequence = 0;
        let result = self.with_retries(range.clone(), deadline, &mut in_sequence, |t, at| {
            let rest = range.start + sink.filled()..range.end;
            let if_match = identity.strong_etag().map(Precondition::Match);
            let (resp, url) = t.send(Want::Bytes(rest.clone()), if_match, deadline, at)?;
            t.fetch_response(resp, url, &rest, identity, sink)
        });
        result
            .map(|()| in_sequence)
            .map_err(|e| self.scrubbed(e).with_url(&self.redacted).with_range(range))
    }

    /// Waits until `deadline` for a connection the file's and the process's
    /// bounds allow (for the origin requests go to now), in this thread's
    /// lane; held while the request is in flight.
    fn connection(&self, deadline: Instant) -> Result<[Permit; 2], Error> {
        let lane = workers::lane();
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
        let wanted = workers::wanted();
        let process = origin
            .acquire_for(lane, wanted.as_deref(), deadline)?
            .ok_or_else(|| busy("the process's connections to the server"))?;
        let file = self
            .permits
            .acquire_for(lane, wanted.as_deref(), deadline)?
            .ok_or_else(|| busy("the file's max_connections"))?;
        Ok([process, file])
    }

    /// Sends later requests straight to `url`, where the original redirected.
    fn remember(&self, url: Url) {
        if *self.target.read() != url {
            *self.target.write() = url;
        }
    }
}
