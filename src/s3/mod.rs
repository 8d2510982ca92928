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
//! | `access` | an `s3://` URL resolved (endpoint, style, region, keys), and the S3 side of its requests: signing, a region learnt from a refusal, expired keys renewed |
//! | `chain` | the credential chain, in the SDKs' order, and the keys it found; a file per link (`given`, `web_identity`, `container`, `instance`) |
//! | `credentials` | one set of keys, shown nowhere |
//! | `answers` | what credential services answer, when to renew |
//! | `keys` | one source's keys, shared by the process's files: loaded by one thread, used while valid during a renewal, made anew in a forked child |
//! | `profile` | AWS's shared configuration files |
//! | `region` | a bucket's region, read from S3's answers and remembered |
//! | `sign` | SigV4 headers for one request |
//!
//! Without feature `s3` only `location`, `credentials` and `region`'s name
//! check are built, for [`S3Options`] and its checks; an `s3://` URL is then
//! an [`ErrorKind::InvalidUrl`] error that names the feature.

#[cfg(feature = "s3")]
mod access;
#[cfg(feature = "s3")]
mod answers;
#[cfg(feature = "s3")]
mod chain;
pub(crate) mod credentials;
#[cfg(all(test, feature = "s3"))]
mod fake;
#[cfg(feature = "s3")]
mod keys;
// Without feature `s3`, only what checks the options and tells an `s3://`
// URL is used.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
mod location;
#[cfg(feature = "s3")]
mod profile;
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
mod region;
#[cfg(feature = "s3")]
mod sign;

use std::fmt;

#[cfg(feature = "s3")]
pub(crate) use self::access::resolve;
use self::credentials::Credentials;
pub(crate) use self::location::is_s3;
use crate::error::{Error, ErrorKind, Result};

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

/// An `s3://` URL made ready to open.
#[cfg_attr(not(feature = "s3"), allow(dead_code))]
pub(crate) struct Resolved {
    /// Where the first request goes.
    pub url: url::Url,
    /// What the file is called in the caches: the object, wherever its
    /// requests go, and nothing of its credentials.
    pub name: url::Url,
    /// How messages name it.
    pub shown: String,
    pub access: std::sync::Arc<dyn crate::http::Service>,
}

/// Without feature `s3` no `s3://` URL opens: the error says how to.
#[cfg(not(feature = "s3"))]
pub(crate) fn resolve(_: &S3Options, _: &str, _: bool) -> Result<Resolved> {
    Err(Error::new(
        ErrorKind::InvalidUrl,
        "s3:// URLs need remfile's feature `s3` (a default feature): this build left it out",
    ))
}

#[cfg(all(test, not(feature = "s3")))]
mod without_the_feature {
    #[test]
    fn an_s3_url_is_an_invalid_url_that_names_the_feature() {
        let e = super::resolve(&super::S3Options::default(), "s3://bucket/key", false)
            .err()
            .unwrap();
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidUrl);
        assert!(e.to_string().contains("feature `s3`"), "{e}");
    }
}
