//! A bucket's region: read from S3's answers (`x-amz-bucket-region`, which
//! S3 sends with any answer about a bucket, even a refusal, or the
//! `<Region>` of a malformed-authorization error) and remembered for the
//! process, so that only a bucket's first request may go to the wrong one.

use std::collections::HashMap;
use std::time::Duration;

use ureq::http::HeaderMap;

use crate::sync::{Mutex, MutexGuard, Wedged};

use super::location::Endpoint;

/// The region requests are signed for while a bucket's own is unknown; AWS's
/// global endpoint answers for it and tells the bucket's.
pub(crate) const FIRST_GUESS: &str = "us-east-1";

/// Whether `name` looks like a region (`us-east-1`, `eu-central-2`, a
/// compatible store's `garage`): what may go into a host name and a
/// signature's scope.
pub(crate) fn is_region_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The region an answer names for its bucket, if it names a valid one.
pub(crate) fn named_by(headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let from_header = headers
        .get("x-amz-bucket-region")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned());
    let from_body = || {
        let text = std::str::from_utf8(body).ok()?;
        let start = text.find("<Region>")? + "<Region>".len();
        let len = text[start..].find("</Region>")?;
        Some(text[start..start + len].trim().to_owned())
    };
    from_header.or_else(from_body).filter(|r| is_region_name(r))
}

/// Whether an S3 error body's `<Code>` is `code`.
pub(crate) fn error_code_is(body: &[u8], code: &str) -> bool {
    std::str::from_utf8(body).is_ok_and(|t| t.contains(&format!("<Code>{code}</Code>")))
}

/// Buckets' regions, a fact about the buckets a forked child keeps; behind
/// a lock a child may find held for good (by a parent thread it does not
/// have), which it then stops waiting for.
static LEARNT: Mutex<Option<Regions>> = Mutex::new(None);
static WEDGED: Wedged = Wedged::new();

/// The region of each bucket, by its endpoint and name.
type Regions = HashMap<(Endpoint, String), String>;

/// The table, unless its lock is held for good in this process.
fn learnt() -> Option<MutexGuard<'static, Option<Regions>>> {
    LEARNT.lock_unless_wedged(&WEDGED, Duration::from_millis(500))
}

/// The most buckets remembered; past it the memory starts again.
const MAX_REMEMBERED: usize = 10_000;

/// The region learnt for `bucket` at `endpoint`, if any.
pub(crate) fn remembered(endpoint: &Endpoint, bucket: &str) -> Option<String> {
    learnt()?
        .as_ref()?
        .get(&(endpoint.clone(), bucket.to_owned()))
        .cloned()
}

/// Notes `region` as `bucket`'s.
pub(crate) fn remember(endpoint: &Endpoint, bucket: &str, region: &str) {
    let Some(mut learnt) = learnt() else {
        return;
    };
    let map = learnt.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_REMEMBERED {
        map.clear();
    }
    map.insert((endpoint.clone(), bucket.to_owned()), region.to_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_is_read_from_the_header_or_the_error_body() {
        let mut h = HeaderMap::new();
        assert_eq!(named_by(&h, b""), None);
        let body =
            b"<Error><Code>AuthorizationHeaderMalformed</Code><Region>eu-west-3</Region></Error>";
        assert_eq!(named_by(&h, body).as_deref(), Some("eu-west-3"));
        assert!(error_code_is(body, "AuthorizationHeaderMalformed"));
        h.insert("x-amz-bucket-region", "ap-south-1".parse().unwrap());
        assert_eq!(named_by(&h, body).as_deref(), Some("ap-south-1"));
        h.insert("x-amz-bucket-region", "evil.com/x".parse().unwrap());
        assert_eq!(named_by(&h, b""), None, "not a region name");
    }

    #[test]
    fn regions_are_remembered_per_endpoint_and_bucket() {
        let aws = Endpoint::Aws;
        let other = Endpoint::Custom(url::Url::parse("http://127.0.0.1:1").unwrap());
        remember(&aws, "remembered-bucket", "eu-north-1");
        assert_eq!(
            remembered(&aws, "remembered-bucket").as_deref(),
            Some("eu-north-1")
        );
        assert_eq!(remembered(&other, "remembered-bucket"), None);
        assert_eq!(remembered(&aws, "another-bucket"), None);
    }
}
