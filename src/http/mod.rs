//! The HTTP transport: it speaks bytes only. It opens a file (its size,
//! validators and first bytes, in one request), fetches its tail, and fetches
//! a byte range of it into a [`Sink`]; every answer is validated, redirects,
//! retries and timeouts are handled. What the bytes are for (blocks, a cache)
//! is the engine's business.
//!
//! The decisions are pure functions, tested without a socket or a clock; one
//! driver carries them out:
//!
//! | module | its one job |
//! |---|---|
//! | `transport` | the driver: the retry loop, each request and its redirects, each body read into its sink |
//! | `request` | what a `GET` asks, and the rules each redirect hop keeps |
//! | `response` | what a `206`, `200`, `304` or `416` must say to be believed; what an error answer asks of the loop |
//! | `retry` | the retry policy, and what the loop does after a failure: back off, re-resolve, renew, give up |
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
mod stoppable;
mod tcp;
mod transport;

use std::time::Duration;

use url::Url;

use self::secrets::Secrets;
use crate::error::Error;
use crate::wait::Stop;

pub(crate) use self::agent::{AgentSettings, agent};
pub(crate) use self::response::{Opened, Revalidated, Tail};
pub use self::retry::RetryPolicy;
pub(crate) use self::transport::{Transport, TransportConfig};

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
        stop: &Stop,
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
    /// After a [`Reaction::Renew`]: whether new keys were got (within what
    /// `stop` allows), so that one more attempt may succeed.
    fn renew(&self, stop: &Stop) -> bool;
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
