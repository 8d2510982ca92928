//! Where an object is: `s3://bucket/key` read, and the HTTPS URL of the
//! object on AWS or on an S3-compatible endpoint, in path or
//! virtual-hosted style. Pure functions.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use url::Url;

use crate::error::{Error, ErrorKind, Result};

/// An object named by an `s3://bucket/key` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    pub bucket: String,
    /// The key as given (not percent-decoded: S3 keys are plain text).
    pub key: String,
}

/// The longest key S3 stores.
const MAX_KEY_LEN: usize = 1024;

/// Whether `text` names an S3 object rather than an HTTP(S) URL.
pub(crate) fn is_s3(text: &str) -> bool {
    text.get(..5)
        .is_some_and(|s| s.eq_ignore_ascii_case("s3://"))
}

/// Reads `s3://bucket/key`. The key is taken as it is written, every
/// character of it, so that `s3://b/a%20b` is the object `a%20b`, as the AWS
/// command line and s3fs read it.
pub(crate) fn parse(text: &str) -> Result<Location> {
    let invalid = |why: &str| Error::new(ErrorKind::InvalidUrl, format!("invalid S3 URL: {why}"));
    if !is_s3(text) {
        return Err(invalid("it does not begin with s3://"));
    }
    let rest = &text[5..];
    let Some((bucket, key)) = rest.split_once('/') else {
        return Err(invalid("it names a bucket but no object (s3://bucket/key)"));
    };
    if !is_bucket_name(bucket) {
        return Err(invalid(
            "a bucket name is 1 to 255 letters, digits, '.', '-' or '_', begun and ended by a letter or digit",
        ));
    }
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(invalid("an object key is 1 to 1024 bytes"));
    }
    if key.chars().any(char::is_control) {
        return Err(invalid("the object key has a control character"));
    }
    // URLs resolve `.` and `..` segments away, so such a key would address
    // another object.
    if key
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(invalid(
            "an object key with a '.' or '..' segment cannot be addressed over HTTP",
        ));
    }
    Ok(Location {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
    })
}

/// S3's names, with the legacy ones (capitals, `_`, up to 255 long) that
/// old us-east-1 buckets have: begun and ended by a letter or digit, so
/// never `.` or `..`.
fn is_bucket_name(name: &str) -> bool {
    let edge = |b: Option<&u8>| b.is_some_and(u8::is_ascii_alphanumeric);
    (1..=255).contains(&name.len())
        && edge(name.as_bytes().first())
        && edge(name.as_bytes().last())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Whether a bucket can be a host name under TLS: lowercase letters, digits
/// and `-` (a dot would not match the endpoint's wildcard certificate).
pub(crate) fn can_be_host(bucket: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !bucket.starts_with('-')
        && !bucket.ends_with('-')
}

/// Where requests go: AWS's S3, or an S3-compatible service at a URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Endpoint {
    Aws,
    Custom(Url),
}

/// The characters a key keeps in a URL's path: S3's canonical form encodes
/// every byte but the unreserved ones and `/`.
const KEY_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// The URL of the object at `endpoint`: in path style
/// (`host/bucket/key`) or virtual-hosted style (`bucket.host/key`); on AWS
/// the regional host of `region`, or the global one while the region is
/// unknown.
pub(crate) fn object_url(
    at: &Location,
    endpoint: &Endpoint,
    region: Option<&str>,
    path_style: bool,
) -> Result<Url> {
    let key = utf8_percent_encode(&at.key, KEY_ESCAPED).to_string();
    let bucket = utf8_percent_encode(&at.bucket, KEY_ESCAPED).to_string();
    let text = match endpoint {
        Endpoint::Aws => {
            let host = match region {
                Some(region) => format!("s3.{region}.amazonaws.com"),
                None => "s3.amazonaws.com".to_owned(),
            };
            if path_style {
                format!("https://{host}/{bucket}/{key}")
            } else {
                format!("https://{bucket}.{host}/{key}")
            }
        }
        Endpoint::Custom(base) => {
            let mut base = base.clone();
            if !path_style {
                let host = base.host_str().unwrap_or_default();
                let virtual_host = format!("{bucket}.{host}");
                base.set_host(Some(&virtual_host)).map_err(|e| {
                    Error::new(
                        ErrorKind::InvalidUrl,
                        format!("the bucket cannot be a host name of the endpoint: {e}"),
                    )
                })?;
            }
            let prefix = base.path().trim_end_matches('/').to_owned();
            let path = if path_style {
                format!("{prefix}/{bucket}/{key}")
            } else {
                format!("{prefix}/{key}")
            };
            base.set_query(None);
            base.set_fragment(None);
            base.set_path(&path);
            return Ok(base);
        }
    };
    Url::parse(&text).map_err(|e| Error::new(ErrorKind::InvalidUrl, format!("invalid S3 URL: {e}")))
}

/// `s3://bucket/key`, the key percent-encoded as in the object's URL.
pub(crate) fn name_url(at: &Location) -> Result<Url> {
    let key = utf8_percent_encode(&at.key, KEY_ESCAPED);
    Url::parse(&format!("s3://{}/{key}", at.bucket))
        .map_err(|e| Error::new(ErrorKind::InvalidUrl, format!("invalid S3 URL: {e}")))
}

/// Reads an endpoint URL (`https://minio.example:9000`): http or https, a
/// host, no query, no credentials in it.
pub(crate) fn parse_endpoint(text: &str) -> Result<Url> {
    let invalid = |why: String| {
        Error::new(
            ErrorKind::InvalidConfig,
            format!("invalid S3 endpoint: {why}"),
        )
    };
    let url = Url::parse(text.trim()).map_err(|e| invalid(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("it must be an http or https URL".into()));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("it has no host".into()));
    }
    if url.query().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "it may not carry a query string or credentials".into(),
        ));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(bucket: &str, key: &str) -> Location {
        Location {
            bucket: bucket.into(),
            key: key.into(),
        }
    }

    #[test]
    fn s3_urls_are_read_as_written() {
        assert_eq!(parse("s3://b1/dir/f.nwb").unwrap(), at("b1", "dir/f.nwb"));
        assert_eq!(parse("S3://b1/a%20b c").unwrap(), at("b1", "a%20b c"));
        assert_eq!(
            parse("s3://my.bucket/k?v=1").unwrap(),
            at("my.bucket", "k?v=1")
        );
        for bad in [
            "s3://bucket",
            "s3://bucket/",
            "s3:///key",
            "s3://bu cket/key",
            "s3://../key",
            "s3://./key",
            "s3://-b/key",
            "s3://b/a/../etc",
            "s3://b/./k",
            "s3://b/k\n",
            "https://b/k",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{bad}");
        }
        assert!(parse(&format!("s3://b/{}", "k".repeat(1025))).is_err());
    }

    #[test]
    fn aws_urls_are_virtual_hosted_and_regional() {
        let o = at("dandiarchive", "blobs/ab c+d.nwb");
        let url = |region, path| {
            object_url(&o, &Endpoint::Aws, region, path)
                .unwrap()
                .to_string()
        };
        assert_eq!(
            url(Some("us-east-2"), false),
            "https://dandiarchive.s3.us-east-2.amazonaws.com/blobs/ab%20c%2Bd.nwb"
        );
        assert_eq!(
            url(None, false),
            "https://dandiarchive.s3.amazonaws.com/blobs/ab%20c%2Bd.nwb"
        );
        assert_eq!(
            url(Some("eu-west-1"), true),
            "https://s3.eu-west-1.amazonaws.com/dandiarchive/blobs/ab%20c%2Bd.nwb"
        );
    }

    #[test]
    fn custom_endpoints_keep_their_port_and_prefix() {
        let o = at("data", "x/y.h5");
        let base = parse_endpoint("http://127.0.0.1:9000/s3/").unwrap();
        let end = Endpoint::Custom(base);
        assert_eq!(
            object_url(&o, &end, None, true).unwrap().as_str(),
            "http://127.0.0.1:9000/s3/data/x/y.h5"
        );
        let base = parse_endpoint("https://minio.example:9000").unwrap();
        assert_eq!(
            object_url(&o, &Endpoint::Custom(base), Some("r"), false)
                .unwrap()
                .as_str(),
            "https://data.minio.example:9000/x/y.h5"
        );
        for bad in ["ftp://h", "https://u:p@h", "https://h/?x=1", "nothing"] {
            assert_eq!(
                parse_endpoint(bad).unwrap_err().kind(),
                ErrorKind::InvalidConfig,
                "{bad}"
            );
        }
    }

    #[test]
    fn only_plain_lowercase_buckets_are_host_names() {
        assert!(can_be_host("dandiarchive"));
        assert!(!can_be_host("my.bucket"));
        assert!(!can_be_host("My_Bucket"));
        assert!(!can_be_host("ab"));
    }
}
