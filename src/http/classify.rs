//! Failures of the HTTP client, in the crate's terms: which kind of error,
//! and whether trying again can help.
//!
//! ureq's own messages are not passed on: some of them carry the full URL,
//! query string (and so a presigned signature) included.

use url::Url;

use super::retry::Failure;
use crate::error::{Error, ErrorKind};

/// The hint of a connection refused on this machine.
const NOTHING_LISTENS: &str =
    "nothing listens on that port of this machine: is the server running, and on that port?";

/// `failure` to connect to `url`, final if this machine's kernel refused it
/// at open (a loopback address, no proxy: `direct`): nothing listens on the
/// port, which retrying for 4.8 s would not change. Refusals once the file
/// is `opened` (a local server restarting) are retried as any other.
pub(super) fn refused_here(url: &Url, direct: bool, opened: bool, failure: Failure) -> Failure {
    let refused = failure.error.io_kind() == std::io::ErrorKind::ConnectionRefused;
    if super::names_this_machine(url) && direct && !opened && refused {
        Failure::fatal(failure.error.with_hint(NOTHING_LISTENS))
    } else {
        failure
    }
}

pub(super) fn classify_io(e: std::io::Error, doing: &str) -> Failure {
    classify_ureq(ureq::Error::from(e), doing)
}

/// Maps a ureq error to ours without passing its text on: some ureq errors
/// carry the full URL, query string included.
pub(super) fn classify_ureq(e: ureq::Error, doing: &str) -> Failure {
    if let ureq::Error::Timeout(t) = &e {
        // Which wait ran out says what was being done.
        let error = Error::new(ErrorKind::Timeout, timed_out(*t));
        return Failure::transient(error);
    }
    let (kind, what, retry) = described(&e);
    let mut error = Error::new(kind, format!("{what} while {doing}"));
    if let Some(cause) = io_cause(&e) {
        error = error.with_cause(cause);
    }
    if let ureq::Error::Io(system) = &e {
        error = error.with_source(system);
    }
    if retry {
        Failure::transient(error)
    } else {
        Failure::fatal(error)
    }
}

/// The system's kind of failure behind a ureq error, where there is one:
/// callers that match on `io::ErrorKind` see a refusal, a DNS failure or a
/// TLS one as the system would name it.
fn io_cause(e: &ureq::Error) -> Option<std::io::ErrorKind> {
    use ureq::Error as U;
    match e {
        U::Io(io) => Some(io.kind()),
        U::HostNotFound => Some(std::io::ErrorKind::HostUnreachable),
        U::Tls(_) | U::Pem(_) | U::Rustls(_) => Some(std::io::ErrorKind::InvalidData),
        _ => None,
    }
}

/// A ureq error (not a timeout of its own) as our kind, words of our own,
/// and whether trying again can help.
fn described(e: &ureq::Error) -> (ErrorKind, String, bool) {
    use ureq::Error as U;
    match e {
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
        other if is_decompression_error(other) => (
            ErrorKind::MalformedResponse,
            format!(
                "the server sent an encoded body though asked for identity ({})",
                other.to_string().chars().take(100).collect::<String>()
            ),
            false,
        ),
        _ => (ErrorKind::Network, "connection error".to_owned(), true),
    }
}

/// What a ureq timeout means, in words.
fn timed_out(t: ureq::Timeout) -> &'static str {
    use ureq::Timeout as T;
    match t {
        T::Resolve => "timed out looking the host up (DNS)",
        T::Connect => "timed out connecting to the server",
        T::SendRequest | T::SendBody | T::PerWrite => "timed out sending the request",
        T::RecvResponse | T::Await100 => "timed out waiting for the server's answer",
        T::RecvBody | T::PerRead => "timed out reading the response body",
        T::Global | T::PerCall => "ran past the request's overall timeout",
        _ => "timed out",
    }
}

/// Whether ureq failed to decode a compressed body. Its `Decompress` variant
/// exists only with ureq's `gzip` or `brotli` feature, which this crate does
/// not enable but Cargo's feature unification can (another crate in the
/// build asks for it): the variant cannot be named here, so its fixed
/// message is recognised instead. CI runs the test suite with
/// `--features ureq/gzip` to keep this honest.
fn is_decompression_error(e: &ureq::Error) -> bool {
    e.to_string().contains("decompression failed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn a_refusal_on_this_machine_at_open_is_final_and_says_why() {
        let refused = || {
            let io = io::Error::from(io::ErrorKind::ConnectionRefused);
            classify_ureq(ureq::Error::Io(io), "making the request")
        };
        let url = |text| Url::parse(text).unwrap();
        assert!(refused().error.is_retryable(), "as the system said it");
        for local in [
            "http://127.0.0.1:9/f",
            "http://[::1]:9/f",
            "http://LOCALHOST:9/f",
        ] {
            let f = refused_here(&url(local), true, false, refused());
            assert!(!f.error.is_retryable(), "{local}");
            assert!(f.error.to_string().contains("nothing listens"), "{local}");
        }
        let local = url("http://127.0.0.1:9/f");
        // Once open (a server restarting), or through a proxy: retried.
        assert!(
            refused_here(&local, true, true, refused())
                .error
                .is_retryable()
        );
        assert!(
            refused_here(&local, false, false, refused())
                .error
                .is_retryable()
        );
        for remote in ["https://example.com/f", "http://10.0.0.1/f"] {
            let f = refused_here(&url(remote), true, false, refused());
            assert!(f.error.is_retryable(), "{remote}");
        }
        // Other failures on this machine are retried as before.
        let reset = classify_ureq(
            ureq::Error::Io(io::Error::from(io::ErrorKind::ConnectionReset)),
            "making the request",
        );
        assert!(
            refused_here(&local, true, false, reset)
                .error
                .is_retryable()
        );
    }

    #[test]
    fn failures_keep_the_system_s_kind_and_say_which_wait_ran_out() {
        let answer = classify_ureq(ureq::Error::Timeout(ureq::Timeout::RecvResponse), "x").error;
        assert_eq!(answer.kind(), ErrorKind::Timeout);
        assert_eq!(
            answer.to_string(),
            "timed out waiting for the server's answer"
        );
        assert_eq!(answer.io_kind(), io::ErrorKind::TimedOut);
        let dns = classify_ureq(ureq::Error::HostNotFound, "making the request").error;
        assert_eq!(dns.io_kind(), io::ErrorKind::HostUnreachable);
        assert!(dns.to_string().contains("DNS"), "{dns}");
        let tls = classify_ureq(ureq::Error::Tls("bad certificate"), "making the request").error;
        assert_eq!(tls.io_kind(), io::ErrorKind::InvalidData);
        let refused = classify_io(
            io::ErrorKind::ConnectionRefused.into(),
            "making the request",
        );
        assert_eq!(refused.error.io_kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn the_system_s_error_is_the_source_with_its_code() {
        use std::error::Error as _;
        let source = |e: &Error| {
            let s = e.source().expect("a source");
            let io = s.downcast_ref::<io::Error>().expect("an io::Error");
            (io.kind(), io.raw_os_error(), io.to_string())
        };
        let reset = io::Error::from_raw_os_error(104);
        let failure = classify_io(reset, "reading the response body").error;
        assert_eq!(source(&failure).1, Some(104));
        let tls = io::Error::new(io::ErrorKind::InvalidData, "invalid peer certificate");
        let failure = classify_io(tls, "making the request").error;
        assert_eq!(
            source(&failure),
            (
                io::ErrorKind::InvalidData,
                None,
                "invalid peer certificate".to_owned()
            )
        );
        // None where the system said nothing more than the message does.
        assert!(
            classify_ureq(ureq::Error::HostNotFound, "x")
                .error
                .source()
                .is_none()
        );
    }
}
