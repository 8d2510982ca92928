//! The HTTP transport: validated range fetches, redirects, retries, where the
//! bodies go, and the pure helpers they rest on (`Content-Range` parsing, URL
//! redaction).

pub(crate) mod content_range;
mod permits;
pub(crate) mod redact;
pub(crate) mod sink;
mod transport;

pub(crate) use transport::{Identity, Timeouts, Transport, TransportConfig, UrlProvider};
