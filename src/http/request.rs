//! Sending one ranged `GET`, following redirects hop by hop (so that every
//! hop is counted, and a caller's headers stay with the original origin).

use std::ops::Range;
use std::time::{Duration, Instant};

use ureq::http::Response;
use ureq::http::header::{ACCEPT_ENCODING, IF_MATCH, IF_NONE_MATCH, LOCATION, RANGE, USER_AGENT};
use ureq::typestate::WithoutBody;
use ureq::{Body, RequestBuilder};
use url::Url;

use super::classify::{classify_ureq, refused_here};
use super::redact::{redact, same_origin};
use super::response::drain;
use super::retry::{Failure, Retry, Try};
use super::{Reaction, Transport, header};
use crate::error::{Error, ErrorKind};
use crate::stats::Counters;

/// The bytes one request asks for.
#[derive(Debug, Clone)]
pub(super) enum Want {
    /// These bytes (never empty).
    Bytes(Range<u64>),
    /// The last this many bytes, whatever the size (a suffix range).
    Last(u64),
}

impl From<&Want> for crate::trace::Requested {
    fn from(want: &Want) -> Self {
        match want {
            Want::Bytes(r) => crate::trace::Requested::Bytes(r.clone()),
            Want::Last(n) => crate::trace::Requested::Last(*n),
        }
    }
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Bytes(r) => write!(f, "{}-{}", r.start, r.end - 1),
            Want::Last(n) => write!(f, "-{n}"),
        }
    }
}

/// What a request asks the server to check first (the `If-` headers).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Precondition<'a> {
    /// Only this version (a strong ETag): a changed file fails the request.
    Match(&'a str),
    /// Nothing if the file still has this ETag: `304 Not Modified`.
    NoneMatch(&'a str),
}

/// How long a response's headers took, and when they arrived (its body is
/// timed from then), kept with the response.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeadersArrived {
    pub waited: Duration,
    pub at: Instant,
}

const REDIRECT_STATUSES: [u16; 5] = [301, 302, 303, 307, 308];

impl Transport {
    /// Sends one GET for `want`, following redirects. Returns the final
    /// response and the URL that gave it.
    pub(super) fn send(
        &self,
        want: Want,
        condition: Option<Precondition<'_>>,
        deadline: Instant,
        mut at: Try<'_>,
    ) -> Result<(Response<Body>, Url), Failure> {
        let mut url = self.target.read().clone();
        let mut hops = 0;
        loop {
            // No hop after a stop (draining the last one may have hidden it).
            crate::wait::check_stopped().map_err(Failure::fatal)?;
            let mut resp = self.send_once(&url, &want, condition, deadline, &mut at)?;
            let status = resp.status().as_u16();
            if !REDIRECT_STATUSES.contains(&status) {
                return Ok((resp, url));
            }
            // S3 names a bucket's region with its redirects: the requests
            // go there, signed for it, rather than where the redirect says.
            if let Some(service) = &self.service {
                if let Reaction::Moved(to) = service.react(status, resp.headers(), &[], &url) {
                    drain(&mut resp);
                    self.move_to(to);
                    let error = Error::new(
                        ErrorKind::HttpStatus(status),
                        format!("HTTP {status}: the bucket is in another region"),
                    );
                    return Err(Failure::new(error, Retry::Moved, None));
                }
            }
            hops += 1;
            if hops > self.max_redirects {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::Redirect,
                    format!("more than {} redirects", self.max_redirects),
                )));
            }
            let next = next_hop(resp, &url)?;
            // (Under https_only the next request refuses it, as any http.)
            if !self.https_only && self.refuses_downgrade(&url, &next) {
                return Err(Failure::fatal(Error::new(
                    ErrorKind::Redirect,
                    format!(
                        "refusing a redirect from https to plain http ({}); \
                         Builder::allow_redirect_to_http allows it",
                        redact(&next)
                    ),
                )));
            }
            url = next;
        }
    }

    /// One request to `url`, without following a redirect.
    fn send_once(
        &self,
        url: &Url,
        want: &Want,
        condition: Option<Precondition<'_>>,
        deadline: Instant,
        at: &mut Try<'_>,
    ) -> Result<Response<Body>, Failure> {
        if self.https_only && url.scheme() != "https" {
            return Err(Failure::fatal(Error::new(
                ErrorKind::InvalidUrl,
                format!("refusing plain HTTP to {} (https_only is set)", redact(url)),
            )));
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(Failure::give_up(Error::new(
                ErrorKind::Timeout,
                "the read's overall deadline passed",
            )));
        }
        let req = self
            .request(url, want, condition, remaining)
            .map_err(|e| Failure::from(e.with_url(&self.shown(url))))?;
        Counters::add(&self.counters.requests, 1);
        *at.in_sequence += 1;
        let attempt = at.number;
        let started = Instant::now();
        let result = req.call();
        let waited = started.elapsed();
        let elapsed_ms = waited.as_millis() as u64;
        let mut resp = result.map_err(|e| {
            let opened = self.opened.load(std::sync::atomic::Ordering::Relaxed);
            let failure = classify_ureq(e, "making the request");
            let mut f = refused_here(url, self.agent.dials_directly(), opened, failure);
            f.error = f.error.with_url(&self.shown(url));
            self.counters.trace.record(want.into(), None, None, started);
            tracing::debug!(
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
        remaining: Duration,
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
            for (name, value) in service.authorize(url, caller_headers)? {
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
}

/// Where a redirect response points (its body drained, so that its
/// connection is reused).
fn next_hop(mut resp: Response<Body>, from: &Url) -> Result<Url, Failure> {
    let next = header::get(resp.headers(), LOCATION)
        .and_then(|loc| from.join(loc).ok())
        .filter(|u| matches!(u.scheme(), "http" | "https"));
    let Some(next) = next else {
        return Err(Failure::fatal(Error::new(
            ErrorKind::Redirect,
            format!(
                "HTTP {} redirect without a usable Location",
                resp.status().as_u16()
            ),
        )));
    };
    drain(&mut resp);
    Ok(next)
}
