//! An `s3://` URL resolved (endpoint, style, region, keys) and the S3 side
//! of its requests: signing, the bucket's region learnt from refusals,
//! expired keys renewed.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use ureq::http::HeaderMap;
use url::Url;

use super::chain::{self, Env, ProcessEnv};
use super::keys::Keys;
use super::location::{self, Endpoint, Location};
use super::{Resolved, S3Options, region, sign};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{Reaction, Service};
use crate::sync::RwLock;
use crate::wait::Stop;

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
        stop: &Stop,
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
            // Not the read's own deadline: the longest load bounds the wait
            // for another thread's.
            let stop = stop.with_deadline(Instant::now() + chain::LONGEST_LOAD);
            headers = sign::get_headers(url, &extra, &keys.get(&stop)?, region, SystemTime::now())?;
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

    fn renew(&self, stop: &Stop) -> bool {
        let stop = stop.with_deadline(Instant::now() + chain::LONGEST_LOAD);
        self.keys.as_ref().is_some_and(|k| k.renew(&stop))
    }

    fn add_known_values(&self, known: &mut crate::http::secrets::Secrets) {
        if let Some(keys) = self.keys.as_ref().and_then(|k| k.held()) {
            for value in [&keys.key_id, &keys.secret].into_iter().chain(&keys.token) {
                known.add(value);
            }
        }
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
        let signed = r.access.authorize(&r.url, &[], &Stop::here()).unwrap();
        assert!(signed.iter().any(|(n, _)| *n == "authorization"));
        assert!(
            signed
                .iter()
                .any(|(n, v)| *n == "x-amz-request-payer" && v == "requester")
        );
        let elsewhere = Url::parse("https://example.com/k").unwrap();
        assert!(
            r.access
                .authorize(&elsewhere, &[], &Stop::here())
                .unwrap()
                .is_empty()
        );
        let owner = [(
            "X-Amz-Expected-Bucket-Owner".to_owned(),
            "111122223333".to_owned(),
        )];
        let signed = r.access.authorize(&r.url, &owner, &Stop::here()).unwrap();
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
            let _ = crate::s3::profile::merged(Some(&text), Some(&text), "default");
            let _ = crate::s3::answers::from_sts_answer(&text);
            let _ = crate::s3::answers::from_json_answer(&text, "x", &crate::http::secrets::Secrets::new());
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
            let signed = r.access.authorize(&url, &[], &Stop::here()).unwrap();
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
