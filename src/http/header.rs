//! Headers: the ones the crate sets itself, reading and checking the ones a
//! response carries, and checking the ones a caller adds. Pure functions.

use std::time::Duration;

use ureq::http::header::{ACCEPT_ENCODING, CONTENT_LENGTH, HOST, IF_MATCH, RANGE};
use ureq::http::{HeaderMap, HeaderName, HeaderValue};

/// Headers whose value the crate decides (or the HTTP client derives), so a
/// caller may not set them: the range asked for, the raw bytes
/// (`Accept-Encoding: identity`), the pinned ETag, and the framing.
pub(crate) const RESERVED: [HeaderName; 5] =
    [RANGE, ACCEPT_ENCODING, IF_MATCH, HOST, CONTENT_LENGTH];

/// A header's value as text, if present and printable.
pub(crate) fn get(headers: &HeaderMap, name: HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `Content-Length`, if present: `Err` if it is not a plain number.
pub(crate) fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ()> {
    match headers.get(CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or(()),
    }
}

/// `Retry-After` as a delay in seconds. An HTTP-date is not honoured (the
/// computed backoff applies instead): clocks of client and server often
/// disagree.
pub(crate) fn retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if v.is_empty() || v.len() > 19 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().map(Duration::from_secs)
}

/// Why a header a caller wants to send cannot be sent, if it cannot.
pub(crate) fn refuse_user_header(name: &str, value: &str) -> Option<String> {
    // Not quoted: a value pasted where the name goes would be shown.
    let Ok(parsed) = HeaderName::try_from(name) else {
        return Some(
            "invalid header name (a name is letters, digits and '-', without spaces)".into(),
        );
    };
    if HeaderValue::try_from(value).is_err() {
        return Some(format!("invalid value for header {name:?}"));
    }
    if RESERVED.contains(&parsed) {
        return Some(format!("header {name:?} is set by remfile itself"));
    }
    None
}

/// Headers of a signed S3 request that its signature sets: a caller may
/// not add them to one.
const SIGNATURES_OWN: [&str; 4] = [
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
];

/// Why a header a caller wants to send cannot go with signed (`s3://`)
/// requests, if it cannot.
pub(crate) fn refuse_for_signed(name: &str) -> Option<String> {
    SIGNATURES_OWN
        .iter()
        .any(|own| name.eq_ignore_ascii_case(own))
        .then(|| {
            format!(
                "header {name:?} is set by remfile itself for s3:// URLs (it signs their requests)"
            )
        })
}

/// Whether `value` can be sent as a header value.
pub(crate) fn is_valid_value(value: &str) -> bool {
    HeaderValue::try_from(value).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_only() {
        let secs = |s| retry_after(s).map(|d| d.as_secs());
        assert_eq!(secs("2"), Some(2));
        assert_eq!(secs(" 0 "), Some(0));
        assert_eq!(secs("99999999999999999999999"), None, "overflows");
        assert_eq!(secs("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(secs("-1"), None);
        assert_eq!(secs(""), None);
    }

    #[test]
    fn reserved_headers_are_refused_in_any_case() {
        for name in ["Range", "RANGE", "if-match", "Accept-Encoding", "Host"] {
            let why = refuse_user_header(name, "x").expect(name);
            assert!(why.contains("set by remfile"), "{why}");
        }
        assert!(refuse_user_header("Authorization", "Bearer x").is_none());
        assert!(
            refuse_user_header("bad name", "x")
                .unwrap()
                .contains("name")
        );
        assert!(
            refuse_user_header("X-Ok", "bad\nvalue")
                .unwrap()
                .contains("value")
        );
    }

    #[test]
    fn content_length_must_be_a_number() {
        let mut h = HeaderMap::new();
        assert_eq!(content_length(&h), Ok(None));
        h.insert(CONTENT_LENGTH, "12".parse().unwrap());
        assert_eq!(content_length(&h), Ok(Some(12)));
        h.insert(CONTENT_LENGTH, "+12".parse().unwrap());
        assert_eq!(content_length(&h), Err(()));
    }
}
