//! Objects in S3 and S3-compatible stores, read by `s3://bucket/key` URLs.
//!
//! Opening an `s3://` URL turns it into the object's HTTPS URL and gives the
//! transport an [`Access`]: it signs every request (SigV4, in headers) with
//! keys from the credential chain, adds `x-amz-request-payer` where asked,
//! and reads S3's refusals: a bucket in another region is followed there,
//! expired temporary keys are renewed. Everything else a file does (one
//! request to open, ETag pinning, retries, the caches) is the same as for
//! any URL.
//!
//! | module | its one job |
//! |---|---|
//! | `location` | `s3://bucket/key` read; the object's URL at an endpoint, in either style |
//! | `chain` | the credential chain, in the SDKs' order, and the keys it found; a file per link (`given`, `web_identity`, `container`, `instance`) |
//! | `credentials` | keys, what credential services answer, when to renew |
//! | `keys` | one source's keys, shared by the process's files: loaded by one thread, used while valid during a renewal, made anew in a forked child |
//! | `profile` | AWS's shared configuration files |
//! | `region` | a bucket's region, read from S3's answers and remembered |
//! | `sign` | SigV4 headers for one request |

mod chain;
mod credentials;
#[cfg(test)]
mod fake;
mod keys;
mod location;
mod profile;
mod region;
mod sign;

use std::fmt;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::sync::RwLock;
use ureq::http::HeaderMap;
use url::Url;

use self::chain::{Env, ProcessEnv};
use self::credentials::Credentials;
use self::keys::Keys;
pub(crate) use self::location::is_s3;
use self::location::{Endpoint, Location};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{Reaction, Service};

/// How `s3://bucket/key` URLs are read: the region, an S3-compatible
/// endpoint, credentials or none. Every option is optional; what is not
/// given comes from the environment as the AWS SDKs read it, or is learnt.
///
/// - **Credentials**, in this order: [`credentials`](S3Options::credentials);
///   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`;
///   the profile ([`profile`](S3Options::profile), else `AWS_PROFILE`, else
///   `default`) in `~/.aws/credentials` and `~/.aws/config`
///   (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`); a web identity
///   (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`, exchanged at STS,
///   `AWS_ENDPOINT_URL_STS`); the container credentials service
///   (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or `_FULL_URI`, with
///   `AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)`); EC2 instance metadata
///   (IMDSv2; `AWS_EC2_METADATA_DISABLED=true` skips it). Temporary keys
///   are renewed before they expire. Where none is found, or with
///   [`anonymous`](S3Options::anonymous), requests go unsigned, as public
///   buckets take them.
/// - **Region**: [`region`](S3Options::region), else the region the process
///   learnt for the bucket, else `AWS_REGION`, else `AWS_DEFAULT_REGION`,
///   else the profile's `region`; whichever it is, a bucket elsewhere is
///   followed to the region S3 names in its answer (`x-amz-bucket-region`),
///   and that region remembered for the process: no region needs to be
///   known.
/// - **Endpoint**: [`endpoint`](S3Options::endpoint), else
///   `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else AWS.
///
/// `Debug` shows no key.
///
/// # Example
///
/// ```no_run
/// use remfile::{RemoteFile, S3Options};
///
/// // A public bucket: no credentials, no region to know.
/// let public = RemoteFile::builder()
///     .s3(S3Options::new().anonymous(true))
///     .open("s3://dandiarchive/blobs/000/000/000e107c-ef63-4d34-8a12-aa00f4f0cf85")?;
///
/// // A MinIO server on the lab's network, with its own keys.
/// let lab = RemoteFile::builder()
///     .s3(S3Options::new()
///         .endpoint("https://minio.lab.example:9000")
///         .credentials("LABKEY", "lab-secret", None))
///     .open("s3://sessions/2026-11-30/run1.nwb")?;
/// # Ok::<(), remfile::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct S3Options {
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) profile: Option<String>,
    pub(crate) path_style: Option<bool>,
    pub(crate) anonymous: bool,
    pub(crate) requester_pays: bool,
    pub(crate) keys: Option<Credentials>,
}

impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Options")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("profile", &self.profile)
            .field("path_style", &self.path_style)
            .field("anonymous", &self.anonymous)
            .field("requester_pays", &self.requester_pays)
            .field("credentials", &self.keys.as_ref().map(|_| "given (hidden)"))
            .finish()
    }
}

impl S3Options {
    /// Nothing set: everything from the environment, or learnt.
    pub fn new() -> S3Options {
        S3Options::default()
    }

    /// The bucket's region (`us-east-2`). Not needed: a bucket's region is
    /// learnt from its first answer.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// An S3-compatible service (MinIO, Ceph, R2, Garage…) at this URL, in
    /// place of AWS. Requests to it are path-style unless
    /// [`path_style(false)`](S3Options::path_style).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The profile of the shared configuration files to take keys and
    /// region from, in place of `AWS_PROFILE`; it must exist. Keys in the
    /// environment are then not used.
    pub fn profile(mut self, name: impl Into<String>) -> Self {
        self.profile = Some(name.into());
        self
    }

    /// Path-style requests (`host/bucket/key`) rather than virtual-hosted
    /// ones (`bucket.host/key`). By default, path style for a custom
    /// endpoint and for bucket names that cannot be host names (with dots,
    /// say); virtual-hosted on AWS otherwise.
    pub fn path_style(mut self, yes: bool) -> Self {
        self.path_style = Some(yes);
        self
    }

    /// Unsigned requests, without looking for credentials: for public
    /// buckets.
    pub fn anonymous(mut self, yes: bool) -> Self {
        self.anonymous = yes;
        self
    }

    /// Agrees to pay for the requests to a requester-pays bucket
    /// (`x-amz-request-payer: requester`).
    pub fn requester_pays(mut self, yes: bool) -> Self {
        self.requester_pays = yes;
        self
    }

    /// These keys, in place of the credential chain; with a session token
    /// for temporary ones.
    pub fn credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.keys = Some(Credentials {
            key_id: access_key_id.into(),
            secret: secret_access_key.into(),
            token: session_token,
            expires: None,
        });
        self
    }

    /// Sets one part of the keys (the driver's configuration gives them one
    /// by one); [`validate`](S3Options::validate) checks that they go together.
    #[cfg(feature = "extension")]
    pub(crate) fn key_part(mut self, part: KeyPart, value: String) -> Self {
        let keys = self.keys.get_or_insert_with(|| Credentials {
            key_id: String::new(),
            secret: String::new(),
            token: None,
            expires: None,
        });
        match part {
            KeyPart::Id => keys.key_id = value,
            KeyPart::Secret => keys.secret = value,
            KeyPart::Token => keys.token = Some(value),
        }
        self
    }

    /// Checks what can be checked without the environment.
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(region) = &self.region {
            if !region::is_region_name(region) {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    "an S3 region is 1 to 32 lowercase letters, digits and '-'",
                ));
            }
        }
        if let Some(endpoint) = &self.endpoint {
            location::parse_endpoint(endpoint)?;
        }
        if let Some(keys) = &self.keys {
            if keys.key_id.is_empty() || keys.secret.is_empty() {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    "S3 keys need both an access key id and its secret access key",
                ));
            }
            keys.clone().checked("the S3 options").map_err(|_| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    "S3 keys must be printable text without spaces",
                )
            })?;
        }
        Ok(())
    }
}

/// One part of a set of keys.
#[cfg(feature = "extension")]
#[derive(Debug, Clone, Copy)]
pub(crate) enum KeyPart {
    Id,
    Secret,
    Token,
}

/// An `s3://` URL made ready to open.
pub(crate) struct Resolved {
    /// Where the first request goes.
    pub url: Url,
    /// What the file is called in the caches: the object, wherever its
    /// requests go, and nothing of its credentials.
    pub name: Url,
    /// How messages name it.
    pub shown: String,
    pub access: Arc<Access>,
}

/// Reads `text` (`s3://bucket/key`) with `options` and the process's
/// environment: the endpoint, style, region and keys its requests use.
pub(crate) fn resolve(options: &S3Options, text: &str, https_only: bool) -> Result<Resolved> {
    resolve_in(options, text, https_only, &ProcessEnv)
}

fn resolve_in(
    options: &S3Options,
    text: &str,
    https_only: bool,
    env: &dyn Env,
) -> Result<Resolved> {
    // The options were checked with the builder's.
    let location = location::parse(text)?;
    let endpoint = endpoint_in(options, env)?;
    let path_style = options.path_style.unwrap_or(match endpoint {
        Endpoint::Custom(_) => true,
        Endpoint::Aws => !location::can_be_host(&location.bucket),
    });
    let found = chain::find(
        &chain::Ask {
            keys: options.keys.as_ref(),
            profile: options.profile.as_deref(),
            anonymous: options.anonymous,
        },
        env,
    )?;
    let region = region_in(options, env, &endpoint, &location, found.profile_region);
    let url = location::object_url(&location, &endpoint, region.as_deref(), path_style)?;
    if https_only && url.scheme() != "https" {
        return Err(Error::new(
            ErrorKind::InvalidUrl,
            "refusing a plain http S3 endpoint (https_only is set)",
        ));
    }
    let name = cache_name(&location, &endpoint)?;
    let shown = format!("s3://{}/{}", location.bucket, location.key);
    let access = Access {
        location,
        endpoint,
        path_style,
        state: RwLock::new(Where {
            url: url.clone(),
            region,
        }),
        keys: found.keys,
        requester_pays: options.requester_pays,
        anonymous_by_choice: options.anonymous,
    };
    Ok(Resolved {
        url,
        name,
        shown: crate::http::redact::printable_excerpt(shown.as_bytes(), 300),
        access: Arc::new(access),
    })
}

/// The endpoint requests go to: the option's, else the variables' the SDKs
/// read (S3's own first), else AWS.
fn endpoint_in(options: &S3Options, env: &dyn Env) -> Result<Endpoint> {
    let custom = options
        .endpoint
        .clone()
        .or_else(|| env.var("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env.var("AWS_ENDPOINT_URL"));
    Ok(match custom {
        Some(text) => Endpoint::Custom(location::parse_endpoint(&text)?),
        None => Endpoint::Aws,
    })
}

/// The region requests are signed for first. A bucket's own region, once
/// learnt, wins over the process's default (AWS_REGION is often where the
/// user works, not where the data is).
fn region_in(
    options: &S3Options,
    env: &dyn Env,
    endpoint: &Endpoint,
    location: &Location,
    profile_region: Option<String>,
) -> Option<String> {
    options
        .region
        .clone()
        .or_else(|| region::remembered(endpoint, &location.bucket))
        .or_else(|| env.var("AWS_REGION"))
        .or_else(|| env.var("AWS_DEFAULT_REGION"))
        .or(profile_region)
        .filter(|r| region::is_region_name(r))
}

/// The object's name in the caches: on AWS the `s3://` URL, so that any
/// region or style reaches the same blocks; elsewhere the endpoint's
/// path-style URL, as two stores may hold the same bucket.
fn cache_name(location: &Location, endpoint: &Endpoint) -> Result<Url> {
    match endpoint {
        Endpoint::Aws => location::name_url(location),
        Endpoint::Custom(_) => location::object_url(location, endpoint, None, true),
    }
}

/// Where requests for the object go now, and the region they are signed for.
struct Where {
    url: Url,
    /// `None` while unknown: requests are signed for [`region::FIRST_GUESS`].
    region: Option<String>,
}

/// One object's S3 side of its requests.
pub(crate) struct Access {
    location: Location,
    endpoint: Endpoint,
    path_style: bool,
    state: RwLock<Where>,
    keys: Option<Arc<Keys>>,
    requester_pays: bool,
    anonymous_by_choice: bool,
}

impl Access {
    /// Whether `url` is an https URL of this bucket on an AWS S3 host
    /// (`bucket.s3-us-west-2.amazonaws.com/key`, `s3.eu-west-1.amazonaws.com/bucket/key`).
    fn is_buckets_aws_host(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let bucket = &self.location.bucket;
        let on_s3 = host.ends_with(".amazonaws.com")
            && (host.starts_with("s3.")
                || host.starts_with("s3-")
                || host.contains(".s3.")
                || host.contains(".s3-"));
        let names_bucket = host
            .strip_suffix(".amazonaws.com")
            .is_some_and(|h| h.starts_with(&format!("{bucket}.")))
            || url.path().starts_with(&format!("/{bucket}/"));
        matches!(self.endpoint, Endpoint::Aws)
            && url.scheme() == "https"
            && url.port().is_none()
            && on_s3
            && names_bucket
    }
}

impl Service for Access {
    fn authorize(
        &self,
        url: &Url,
        caller: &[(String, String)],
    ) -> Result<Vec<(&'static str, String)>> {
        let (current, region) = {
            let state = self.state.read();
            (state.url.clone(), state.region.clone())
        };
        let mut headers = Vec::new();
        // Keys sign requests for the object's own host only, wherever a
        // redirect leads, but for S3's own redirects to another of the
        // bucket's hosts (a `307` to a regional one).
        if !crate::http::redact::same_origin(url, &current) && !self.is_buckets_aws_host(url) {
            return Ok(headers);
        }
        // S3 refuses `x-amz-*` headers it was not given signed (the
        // caller's `x-amz-expected-bucket-owner`, SSE-C keys...).
        let mut signed: Vec<(String, &str)> = caller
            .iter()
            .map(|(name, value)| (name.to_ascii_lowercase(), value.as_str()))
            .filter(|(name, _)| name.starts_with("x-amz-"))
            .collect();
        if self.requester_pays {
            signed.push(("x-amz-request-payer".into(), "requester"));
        }
        if let Some(keys) = &self.keys {
            let region = region.as_deref().unwrap_or(region::FIRST_GUESS);
            let extra: Vec<(&str, &str)> = signed.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            // The read's own deadline is not passed to `authorize`: the
            // longest load bounds the wait for another thread's.
            let deadline = Instant::now() + chain::LONGEST_LOAD;
            headers =
                sign::get_headers(url, &extra, &keys.get(deadline)?, region, SystemTime::now())?;
        }
        if self.requester_pays {
            headers.push(("x-amz-request-payer", "requester".to_owned()));
        }
        Ok(headers)
    }

    fn react(&self, status: u16, headers: &HeaderMap, body: &[u8], url: &Url) -> Reaction {
        if !matches!(status, 301 | 302 | 307 | 400 | 403) {
            return Reaction::Nothing;
        }
        let expired = ["ExpiredToken", "TokenRefreshRequired", "InvalidToken"];
        if matches!(status, 400 | 403)
            && self.keys.as_ref().is_some_and(|k| k.renewable())
            && expired.iter().any(|code| region::error_code_is(body, code))
        {
            return Reaction::Renew;
        }
        let Some(named) = region::named_by(headers, body) else {
            return Reaction::Nothing;
        };
        let mut state = self.state.write();
        if state.region.as_deref() != Some(named.as_str()) {
            let Ok(to) = location::object_url(
                &self.location,
                &self.endpoint,
                Some(&named),
                self.path_style,
            ) else {
                return Reaction::Nothing;
            };
            tracing::debug!(bucket = %self.location.bucket, region = %named, "S3 named the bucket's region");
            region::remember(&self.endpoint, &self.location.bucket, &named);
            state.url = to;
            state.region = Some(named);
            return Reaction::Moved(state.url.clone());
        }
        // The region named is the one requests are signed for now. A request
        // sent before another learnt it (one of a file's parallel reads)
        // goes again where the bucket is: on AWS its URL shows it,
        // at a custom endpoint only S3's word that it was signed for the
        // wrong region does. Any other answer (a 403 that names the region,
        // as MinIO's all do) is an answer.
        let wrong_region = status == 301
            || region::error_code_is(body, "AuthorizationHeaderMalformed")
            || region::error_code_is(body, "PermanentRedirect");
        let sent_before = match self.endpoint {
            Endpoint::Aws => *url != state.url,
            Endpoint::Custom(_) => wrong_region,
        };
        if sent_before {
            return Reaction::Moved(state.url.clone());
        }
        Reaction::Nothing
    }

    fn renew(&self) -> bool {
        self.keys
            .as_ref()
            .is_some_and(|k| k.renew(Instant::now() + chain::LONGEST_LOAD))
    }

    fn refusal_hint(&self) -> &'static str {
        match (&self.keys, self.anonymous_by_choice) {
            (None, true) => {
                "the request was unsigned (anonymous is set): the bucket may need credentials"
            }
            (None, false) => chain::SEARCHED,
            (Some(_), _) => {
                "the bucket refused these AWS credentials: check that they are current and allowed to read the object (anonymous access reads a public bucket)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoEnv;

    impl Env for NoEnv {
        fn var(&self, name: &str) -> Option<String> {
            (name == "AWS_EC2_METADATA_DISABLED").then(|| "true".into())
        }
        fn home(&self) -> Option<std::path::PathBuf> {
            None
        }
    }

    #[test]
    fn an_object_on_aws_is_named_by_bucket_and_key() {
        let r = resolve_in(
            &S3Options::new(),
            "s3://some-bucket/a b/c.nwb",
            false,
            &NoEnv,
        )
        .unwrap();
        assert_eq!(
            r.url.as_str(),
            "https://some-bucket.s3.amazonaws.com/a%20b/c.nwb"
        );
        assert_eq!(r.name.as_str(), "s3://some-bucket/a%20b/c.nwb");
        assert_eq!(r.shown, "s3://some-bucket/a b/c.nwb");
        let dotted = resolve_in(
            &S3Options::new().region("eu-west-1"),
            "s3://my.bucket/k",
            false,
            &NoEnv,
        )
        .unwrap();
        assert_eq!(
            dotted.url.as_str(),
            "https://s3.eu-west-1.amazonaws.com/my.bucket/k"
        );
        assert_eq!(dotted.name.as_str(), "s3://my.bucket/k");
    }

    #[test]
    fn a_region_named_by_a_refusal_moves_the_requests_there() {
        let r = resolve_in(
            &S3Options::new().anonymous(true),
            "s3://moving-bucket/k",
            false,
            &NoEnv,
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-amz-bucket-region", "ap-southeast-2".parse().unwrap());
        match r.access.react(301, &headers, b"", &r.url) {
            Reaction::Moved(url) => assert_eq!(
                url.as_str(),
                "https://moving-bucket.s3.ap-southeast-2.amazonaws.com/k"
            ),
            _ => panic!("not moved"),
        }
        // Told again by a request sent before the move: it goes there too.
        match r.access.react(403, &headers, b"", &r.url) {
            Reaction::Moved(url) => assert_eq!(
                url.host_str(),
                Some("moving-bucket.s3.ap-southeast-2.amazonaws.com")
            ),
            _ => panic!("not moved"),
        }
        // Told by a request sent there: nothing more to do.
        let there = Url::parse("https://moving-bucket.s3.ap-southeast-2.amazonaws.com/k").unwrap();
        assert!(matches!(
            r.access.react(403, &headers, b"", &there),
            Reaction::Nothing
        ));
        assert_eq!(
            region::remembered(&Endpoint::Aws, "moving-bucket").as_deref(),
            Some("ap-southeast-2")
        );
        let again = resolve_in(
            &S3Options::new().anonymous(true),
            "s3://moving-bucket/k2",
            false,
            &NoEnv,
        )
        .unwrap();
        assert_eq!(
            again.url.host_str(),
            Some("moving-bucket.s3.ap-southeast-2.amazonaws.com")
        );
    }

    #[test]
    fn requests_to_another_host_are_not_signed() {
        let opts = S3Options::new()
            .credentials("AKIAX", "secret", None)
            .requester_pays(true);
        let r = resolve_in(&opts, "s3://b1b/k", false, &NoEnv).unwrap();
        let signed = r.access.authorize(&r.url, &[]).unwrap();
        assert!(signed.iter().any(|(n, _)| *n == "authorization"));
        assert!(
            signed
                .iter()
                .any(|(n, v)| *n == "x-amz-request-payer" && v == "requester")
        );
        let elsewhere = Url::parse("https://example.com/k").unwrap();
        assert!(r.access.authorize(&elsewhere, &[]).unwrap().is_empty());
        let owner = [(
            "X-Amz-Expected-Bucket-Owner".to_owned(),
            "111122223333".to_owned(),
        )];
        let signed = r.access.authorize(&r.url, &owner).unwrap();
        let auth = &signed
            .iter()
            .find(|(n, _)| *n == "authorization")
            .unwrap()
            .1;
        assert!(auth.contains("x-amz-expected-bucket-owner"), "{auth}");
        assert!(!format!("{opts:?}").contains("secret"));
    }

    proptest::proptest! {
        /// Whatever a hostile server or file says, the readers give an answer
        /// or nothing, never a panic; a valid S3 URL becomes an object URL that
        /// keeps its key.
        #[test]
        fn hostile_text_never_panics(text in "\\PC{0,80}", bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = profile::merged(Some(&text), Some(&text), "default");
            let _ = credentials::from_sts_answer(&text);
            let _ = credentials::from_json_answer(&text, "x");
            let _ = region::named_by(&HeaderMap::new(), &bytes);
            if let Ok(at) = location::parse(&format!("s3://bucket/{text}")) {
                let url = location::object_url(&at, &Endpoint::Aws, Some("eu-west-1"), false).unwrap();
                proptest::prop_assert_eq!(url.host_str(), Some("bucket.s3.eu-west-1.amazonaws.com"));
                let decoded = percent_encoding::percent_decode_str(url.path()).decode_utf8().unwrap();
                proptest::prop_assert_eq!(&decoded[1..], at.key.as_str());
            }
        }
    }

    #[test]
    fn keys_sign_for_the_buckets_own_aws_hosts_only() {
        let opts = S3Options::new().credentials("AKIAX", "secret", None);
        let r = resolve_in(&opts, "s3://lab-data/k", false, &NoEnv).unwrap();
        for (url, signs) in [
            ("https://lab-data.s3-us-west-2.amazonaws.com/k", true),
            ("https://lab-data.s3.eu-west-1.amazonaws.com/k", true),
            ("https://s3.eu-west-1.amazonaws.com/lab-data/k", true),
            ("https://other.s3.amazonaws.com/k", false),
            ("https://s3.amazonaws.com/other/lab-data/k", false),
            ("https://lab-data.s3.amazonaws.com.example.com/k", false),
            ("http://lab-data.s3.amazonaws.com/k", false),
            ("https://lab-data.s3.amazonaws.com:8443/k", false),
            ("https://example.com/lab-data/k", false),
        ] {
            let url = Url::parse(url).unwrap();
            let signed = r.access.authorize(&url, &[]).unwrap();
            assert_eq!(
                signed.iter().any(|(n, _)| *n == "authorization"),
                signs,
                "{url}"
            );
        }
    }

    #[test]
    fn endpoints_come_from_the_options_or_the_environment() {
        struct EndpointEnv;
        impl Env for EndpointEnv {
            fn var(&self, name: &str) -> Option<String> {
                match name {
                    "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:9000".into()),
                    "AWS_EC2_METADATA_DISABLED" => Some("true".into()),
                    _ => None,
                }
            }
            fn home(&self) -> Option<std::path::PathBuf> {
                None
            }
        }
        let r = resolve_in(
            &S3Options::new().anonymous(true),
            "s3://data/x.h5",
            false,
            &EndpointEnv,
        )
        .unwrap();
        assert_eq!(r.url.as_str(), "http://127.0.0.1:9000/data/x.h5");
        let e = resolve_in(
            &S3Options::new().anonymous(true),
            "s3://data/x.h5",
            true,
            &EndpointEnv,
        )
        .err()
        .unwrap();
        assert_eq!(e.kind(), ErrorKind::InvalidUrl);
        let opt = S3Options::new()
            .anonymous(true)
            .endpoint("https://s3.lab.example");
        let r = resolve_in(&opt, "s3://data/x.h5", false, &EndpointEnv).unwrap();
        assert_eq!(r.url.as_str(), "https://s3.lab.example/data/x.h5");
        assert_eq!(r.name.as_str(), "https://s3.lab.example/data/x.h5");
    }
}
