//! The crate's error type.
//!
//! One [`Error`] type covers opening and reading. It is cheap to clone, because a
//! failed fetch is reported to every reader that was waiting for it, and it carries
//! no `ureq` types, so the transport can change without breaking callers.

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use crate::http::secrets::{Secrets, redact_values};

/// A specialized `Result` for this crate's operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in a form a caller can `match` on.
///
/// # Example
///
/// ```no_run
/// use remfile::{ErrorKind, RemoteFile};
///
/// match RemoteFile::open("https://example.com/missing.h5") {
///     Ok(file) => println!("{} bytes", file.len()),
///     Err(e) if e.kind() == ErrorKind::HttpStatus(404) => eprintln!("no such file"),
///     Err(e) if e.is_retryable() => eprintln!("try again later: {e}"),
///     Err(e) => eprintln!("cannot open: {e}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The URL could not be parsed, uses a scheme other than `http` or `https`,
    /// or (with `https_only`) is plain HTTP.
    InvalidUrl,
    /// An option given to the builder is out of range, or a header is invalid.
    InvalidConfig,
    /// The server answered with this HTTP status; [`Error::body_excerpt`] holds
    /// the start of its explanation, if it sent one.
    HttpStatus(u16),
    /// The server does not serve byte ranges (it answered a ranged request
    /// with the whole file).
    RangeNotSupported,
    /// The file on the server changed since it was opened: another ETag,
    /// `Last-Modified` date or size, or a `412 Precondition Failed`.
    RemoteChanged,
    /// The server's answer is inconsistent with the request: a `Content-Range`
    /// for other bytes, a body of the wrong length, an encoded body.
    MalformedResponse,
    /// A network wait ran past its timeout, or a read past its overall deadline.
    Timeout,
    /// The connection could not be made or broke (refused, reset, DNS, TLS).
    Network,
    /// Redirects went on for longer than the configured limit, or a redirect
    /// had no usable `Location`.
    Redirect,
    /// `read_exact_at` asked for bytes past the end of the file.
    UnexpectedEof,
    /// The wait for the network was stopped by the program's
    /// [`wait::Host`](crate::wait::Host) (the user pressed Ctrl-C, say). The
    /// file stays usable.
    Interrupted,
    /// AWS credentials for an `s3://` URL could not be got: a profile that
    /// does not exist or asks for what the crate does not support, a
    /// credential service (STS, the container's or the instance's) that
    /// refused or failed. The message says which.
    Credentials,
    /// The file was closed ([`RemoteFile::close`](crate::file::RemoteFile::close)):
    /// before the read, or while it waited.
    Closed,
}

/// The error returned by every fallible operation of this crate.
///
/// It says what failed ([`kind`](Error::kind)), for which URL (query string
/// removed, so presigned signatures never reach a log) and byte range, after how
/// many attempts, and, for an HTTP status, the first bytes of the server's
/// explanation. Cloning is cheap: the contents are shared.
///
/// Converting into [`std::io::Error`] picks a fitting [`io::ErrorKind`] and
/// keeps this error reachable through [`io::Error::downcast`]:
///
/// ```
/// use remfile::{Error, ErrorKind};
///
/// fn why(e: std::io::Error) -> Option<ErrorKind> {
///     e.downcast::<Error>().ok().map(|e| e.kind())
/// }
/// ```
#[derive(Clone)]
pub struct Error {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    kind: ErrorKind,
    message: String,
    url: Option<String>,
    range: Option<Range<u64>>,
    body: Option<String>,
    hint: Option<&'static str>,
    attempts: u32,
    /// Whether trying again can help, as decided where the failure was
    /// classified (the retry loop follows the same verdict); `None` for
    /// errors no request caused, judged by their kind.
    retryable: Option<bool>,
    /// For a network failure, the system's kind of it (a refused or reset
    /// connection), where the system said.
    cause: Option<io::ErrorKind>,
    /// The system's error behind a network failure, rebuilt from its code
    /// or its text (which the message already shows): never one of the
    /// HTTP client's, some of which carry the whole URL.
    source: Option<Arc<io::Error>>,
}

/// How many bytes of an error body are kept for [`Error::body_excerpt`].
pub(crate) const BODY_EXCERPT_LEN: usize = 512;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            inner: Arc::new(Inner {
                kind,
                message: message.into(),
                url: None,
                range: None,
                body: None,
                hint: None,
                attempts: 0,
                retryable: None,
                cause: None,
                source: None,
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Error {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => f(inner),
            None => {
                let mut inner = Inner::clone(&self.inner);
                f(&mut inner);
                self.inner = Arc::new(inner);
            }
        }
        self
    }

    /// Sets the redacted URL, unless one is set already.
    pub(crate) fn with_url(self, redacted: &str) -> Error {
        if self.inner.url.is_some() {
            return self;
        }
        let redacted = redacted.to_owned();
        self.edit(|i| i.url = Some(redacted))
    }

    pub(crate) fn with_range(self, range: Range<u64>) -> Error {
        if self.inner.range.is_some() {
            return self;
        }
        self.edit(|i| i.range = Some(range))
    }

    /// Records whether trying again can help (see [`Error::is_retryable`]).
    pub(crate) fn with_verdict(self, retryable: bool) -> Error {
        self.edit(|i| i.retryable = Some(retryable))
    }

    pub(crate) fn with_body(self, body: String) -> Error {
        self.edit(|i| i.body = Some(body))
    }

    /// The error without the values `known` holds in its message or body
    /// excerpt: a message may quote a server's header or a URL provider's
    /// words, which may echo what the request carried.
    pub(crate) fn without_values(self, known: &Secrets) -> Error {
        let message = redact_values(&self.inner.message, known);
        let body = self.inner.body.as_deref().map(|b| redact_values(b, known));
        let changed = matches!(message, Cow::Owned(_)) || matches!(body, Some(Cow::Owned(_)));
        if !changed {
            return self;
        }
        let (message, body) = (message.into_owned(), body.map(Cow::into_owned));
        self.edit(|i| {
            i.message = message;
            i.body = body;
        })
    }

    pub(crate) fn with_hint(self, hint: &'static str) -> Error {
        self.edit(|i| i.hint = Some(hint))
    }

    /// Records the system's kind of a network failure.
    pub(crate) fn with_cause(self, cause: io::ErrorKind) -> Error {
        self.edit(|i| i.cause = Some(cause))
    }

    /// Records the system's error behind a failure (see [`Error::source`]
    /// of [`std::error::Error`]): its code where it has one, else its kind
    /// and text.
    pub(crate) fn with_source(self, system: &io::Error) -> Error {
        let copy = match system.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(system.kind(), system.to_string()),
        };
        self.edit(|i| i.source = Some(Arc::new(copy)))
    }

    pub(crate) fn with_attempts(self, attempts: u32) -> Error {
        self.edit(|i| i.attempts = attempts)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The HTTP status code, for [`ErrorKind::HttpStatus`].
    pub fn status(&self) -> Option<u16> {
        match self.inner.kind {
            ErrorKind::HttpStatus(code) => Some(code),
            _ => None,
        }
    }

    /// The first bytes (at most 512) of the body the server sent with an error
    /// status, decoded lossily as UTF-8, on one printable line. S3, for one,
    /// explains its refusals there. What the request carried (its URL's query
    /// values and password, the values of headers given to the builder, S3's
    /// keys: each of 8 bytes or more, as it is, percent-encoded or in base64)
    /// and credentials the server names are shown as `…`.
    pub fn body_excerpt(&self) -> Option<&str> {
        self.inner.body.as_deref()
    }

    /// The URL the failed request went to, without its query string, fragment or
    /// credentials.
    pub fn url(&self) -> Option<&str> {
        self.inner.url.as_deref()
    }

    /// The byte range (end exclusive) whose fetch failed, if the error came from
    /// a read.
    pub fn range(&self) -> Option<Range<u64>> {
        self.inner.range.clone()
    }

    /// How many HTTP attempts were made before giving up (0 if the error arose
    /// before any request, such as an invalid URL).
    pub fn attempts(&self) -> u32 {
        self.inner.attempts
    }

    /// Whether the same operation could succeed if tried again later: timeouts,
    /// network failures, bodies cut short, `429` and `5xx` statuses; not a
    /// failed TLS handshake (an untrusted certificate, say), a refusal or
    /// another malformed response.
    /// The verdict is the one the crate's own retries followed.
    ///
    /// The crate has already retried such errors as its retry policy allows.
    pub fn is_retryable(&self) -> bool {
        if let Some(verdict) = self.inner.retryable {
            return verdict;
        }
        match self.inner.kind {
            ErrorKind::Timeout | ErrorKind::Network => true,
            ErrorKind::HttpStatus(code) => code == 429 || (500..600).contains(&code),
            _ => false,
        }
    }

    /// The [`io::ErrorKind`] this error converts into: a missing file
    /// `NotFound`, a refusal `PermissionDenied`, a timeout `TimedOut`, a
    /// refused connection `ConnectionRefused`, and so on.
    ///
    /// ```no_run
    /// use std::io::ErrorKind;
    /// match remfile::RemoteFile::open("https://example.com/data.h5") {
    ///     Err(e) if e.io_kind() == ErrorKind::NotFound => eprintln!("no such file"),
    ///     Err(e) if e.io_kind() == ErrorKind::ConnectionRefused => eprintln!("no server"),
    ///     Err(e) => eprintln!("{e}"),
    ///     Ok(file) => println!("{} bytes", file.len()),
    /// }
    /// ```
    pub fn io_kind(&self) -> io::ErrorKind {
        match self.inner.kind {
            ErrorKind::InvalidUrl | ErrorKind::InvalidConfig => io::ErrorKind::InvalidInput,
            ErrorKind::HttpStatus(404) | ErrorKind::HttpStatus(410) => io::ErrorKind::NotFound,
            ErrorKind::HttpStatus(401) | ErrorKind::HttpStatus(403) => {
                io::ErrorKind::PermissionDenied
            }
            ErrorKind::HttpStatus(_) => io::ErrorKind::Other,
            ErrorKind::RangeNotSupported => io::ErrorKind::Unsupported,
            ErrorKind::RemoteChanged => io::ErrorKind::StaleNetworkFileHandle,
            ErrorKind::MalformedResponse => io::ErrorKind::InvalidData,
            ErrorKind::Timeout => io::ErrorKind::TimedOut,
            // The system's kind where it said one: a refused or reset
            // connection, a host not found (`HostUnreachable`), a failed TLS
            // handshake or certificate (`InvalidData`).
            ErrorKind::Network => match self.inner.cause {
                Some(
                    cause @ (io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::NotConnected
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
                    | io::ErrorKind::AddrNotAvailable
                    | io::ErrorKind::InvalidData),
                ) => cause,
                _ => io::ErrorKind::ConnectionAborted,
            },
            ErrorKind::Redirect => io::ErrorKind::Other,
            ErrorKind::UnexpectedEof => io::ErrorKind::UnexpectedEof,
            // Not `io::ErrorKind::Interrupted`, which `Read::read_exact` and
            // others take as "try again".
            ErrorKind::Interrupted => io::ErrorKind::Other,
            ErrorKind::Credentials => io::ErrorKind::PermissionDenied,
            ErrorKind::Closed => io::ErrorKind::Other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, true)
    }
}

impl Error {
    /// What `Display` writes, without the URL: for a caller that shows the
    /// URL apart (Python's `OSError` keeps it in `filename`).
    ///
    /// ```
    /// let e = remfile::RemoteFile::open("http://127.0.0.1:9/data.h5").unwrap_err();
    /// assert!(e.to_string().contains("127.0.0.1:9/data.h5"));
    /// assert!(!e.message_without_url().contains("127.0.0.1:9/data.h5"));
    /// ```
    pub fn message_without_url(&self) -> String {
        struct Shown<'a>(&'a Error);
        impl fmt::Display for Shown<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.write(f, false)
            }
        }
        Shown(self).to_string()
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, with_url: bool) -> fmt::Result {
        let i = &*self.inner;
        f.write_str(&i.message)?;
        // A request is named only if one was made.
        let get = if i.attempts > 0 { "GET " } else { "" };
        let url = i.url.as_ref().filter(|_| with_url);
        match (url, &i.range) {
            (Some(url), Some(r)) if r.end > r.start => {
                write!(f, " ({get}{url}, bytes {}-{})", r.start, r.end - 1)?
            }
            (Some(url), _) => write!(f, " ({get}{url})")?,
            (None, Some(r)) if r.end > r.start => write!(f, " (bytes {}-{})", r.start, r.end - 1)?,
            _ => {}
        }
        if i.attempts > 1 {
            write!(f, " after {} attempts", i.attempts)?;
        }
        if let Some(body) = i.body.as_deref().map(str::trim).filter(|b| !b.is_empty()) {
            write!(f, ": server said: {body}")?;
        }
        if let Some(hint) = i.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ErrorKind {
    /// What went wrong, in a few words: `HTTP status 404`, `timed out`…
    /// (an [`Error`]'s own `Display` says it in full).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::InvalidUrl => f.write_str("invalid URL"),
            ErrorKind::InvalidConfig => f.write_str("invalid option"),
            ErrorKind::HttpStatus(code) => write!(f, "HTTP status {code}"),
            ErrorKind::RangeNotSupported => f.write_str("server does not serve byte ranges"),
            ErrorKind::RemoteChanged => f.write_str("file changed on the server"),
            ErrorKind::MalformedResponse => f.write_str("malformed response"),
            ErrorKind::Timeout => f.write_str("timed out"),
            ErrorKind::Network => f.write_str("network failure"),
            ErrorKind::Redirect => f.write_str("bad redirect"),
            ErrorKind::UnexpectedEof => f.write_str("read past the end of the file"),
            ErrorKind::Interrupted => f.write_str("interrupted"),
            ErrorKind::Credentials => f.write_str("no usable credentials"),
            ErrorKind::Closed => f.write_str("file closed"),
        }
    }
}

impl fmt::Debug for Error {
    /// Every field, as `Error { kind: …, message: …, url: … }`: what
    /// `fn main() -> Result<(), remfile::Error>` prints. Every field is
    /// already redacted, so it is safe to show.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &*self.inner;
        let mut d = f.debug_struct("Error");
        d.field("kind", &i.kind).field("message", &i.message);
        if let Some(url) = &i.url {
            d.field("url", url);
        }
        if let Some(range) = &i.range {
            d.field("range", range);
        }
        if i.attempts > 0 {
            d.field("attempts", &i.attempts);
        }
        if let Some(body) = &i.body {
            d.field("body", body);
        }
        if let Some(hint) = i.hint {
            d.field("hint", &hint);
        }
        if let Some(cause) = i.cause {
            d.field("cause", &cause);
        }
        if let Some(source) = &i.source {
            d.field("source", source);
        }
        d.finish()
    }
}

/// The source of an error is the system's error behind it, where there is
/// one (a refused connection, a failed TLS handshake): an [`io::Error`]
/// with the system's code (`raw_os_error`) where it had one. Its text is
/// already part of this error's message, so a report that prints the chain
/// shows it twice; a program that asks for the code finds it there.
///
/// ```no_run
/// use std::error::Error as _;
///
/// let e = remfile::RemoteFile::open("http://127.0.0.1:9/f").unwrap_err();
/// let system = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
/// println!("{:?}", system.and_then(|s| s.raw_os_error()));
/// ```
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.io_kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_error_kinds_fit_and_keep_the_original() {
        let cases = [
            (ErrorKind::HttpStatus(404), io::ErrorKind::NotFound),
            (ErrorKind::HttpStatus(401), io::ErrorKind::PermissionDenied),
            (ErrorKind::HttpStatus(403), io::ErrorKind::PermissionDenied),
            (ErrorKind::Timeout, io::ErrorKind::TimedOut),
            (
                ErrorKind::RemoteChanged,
                io::ErrorKind::StaleNetworkFileHandle,
            ),
            (ErrorKind::RangeNotSupported, io::ErrorKind::Unsupported),
            (ErrorKind::MalformedResponse, io::ErrorKind::InvalidData),
            (ErrorKind::UnexpectedEof, io::ErrorKind::UnexpectedEof),
        ];
        for (kind, io_kind) in cases {
            let io: io::Error = Error::new(kind, "x").into();
            assert_eq!(io.kind(), io_kind, "{kind:?}");
            let back = io.downcast::<Error>().expect("original kept");
            assert_eq!(back.kind(), kind);
        }
    }

    #[test]
    fn display_names_url_range_attempts_body_and_hint() {
        let e = Error::new(ErrorKind::HttpStatus(403), "HTTP 403 Forbidden")
            .with_url("https://h/p")
            .with_range(10..20)
            .with_attempts(2)
            .with_body("<Error>Expired</Error>".into())
            .with_hint("the URL may have expired");
        assert_eq!(
            e.to_string(),
            "HTTP 403 Forbidden (GET https://h/p, bytes 10-19) after 2 attempts: \
             server said: <Error>Expired</Error>; the URL may have expired"
        );
        assert_eq!(e.status(), Some(403));
        assert!(!e.is_retryable());
        // No request was made: none is named.
        let past_end = Error::new(ErrorKind::UnexpectedEof, "cannot read 4 bytes at 9")
            .with_url("https://h/p")
            .with_range(9..13);
        assert_eq!(
            past_end.to_string(),
            "cannot read 4 bytes at 9 (https://h/p, bytes 9-12)"
        );
    }

    #[test]
    fn debug_and_kind_display_read_as_this_crate_s() {
        let e = Error::new(ErrorKind::HttpStatus(404), "HTTP 404 Not Found")
            .with_url("https://h/p")
            .with_attempts(1);
        assert_eq!(
            format!("{e:?}"),
            "Error { kind: HttpStatus(404), message: \"HTTP 404 Not Found\", \
             url: \"https://h/p\", attempts: 1 }"
        );
        assert_eq!(e.kind().to_string(), "HTTP status 404");
        assert_eq!(ErrorKind::Timeout.to_string(), "timed out");
    }

    #[test]
    fn the_request_s_values_leave_the_message_and_the_body() {
        let mut known = Secrets::new();
        known.add("PROVIDER-SECRET-1");
        let e = Error::new(
            ErrorKind::HttpStatus(403),
            "the URL provider failed: fetching /sign?k=PROVIDER-SECRET-1",
        )
        .with_body("echo PROVIDER-SECRET-1".into())
        .without_values(&known);
        assert_eq!(
            e.message_without_url(),
            "the URL provider failed: fetching /sign?k=…: server said: echo …"
        );
        assert_eq!(e.body_excerpt(), Some("echo …"));
        // Nothing to hide: the same error, shared.
        let clean = Error::new(ErrorKind::Network, "reset");
        let same = clean.clone().without_values(&known);
        assert!(Arc::ptr_eq(&clean.inner, &same.inner));
    }

    #[test]
    fn editing_a_shared_error_leaves_the_other_copy_alone() {
        let a = Error::new(ErrorKind::Network, "reset");
        let b = a.clone().with_url("http://h/");
        assert_eq!(a.url(), None);
        assert_eq!(b.url(), Some("http://h/"));
    }
}
