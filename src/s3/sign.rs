//! SigV4 signing of one request's headers, by AWS's own signer
//! (`aws-sigv4`, sans-IO): S3's rules (the path encoded once and never
//! normalised, `x-amz-content-sha256: UNSIGNED-PAYLOAD`, the session token
//! signed).

use std::time::SystemTime;

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use url::Url;

use super::credentials::Credentials;
use crate::error::{Error, ErrorKind, Result};

/// The headers that authorize a `GET` of `url` with `keys` in `region`, at
/// `now`, signing `extra` headers too (names in lowercase: `x-amz-*` ones
/// must be signed). Returns them to add to the request as they are.
pub(crate) fn get_headers(
    url: &Url,
    extra: &[(&str, &str)],
    keys: &Credentials,
    region: &str,
    now: SystemTime,
) -> Result<Vec<(&'static str, String)>> {
    let identity = aws_credential_types::Credentials::new(
        keys.key_id.as_str(),
        keys.secret.as_str(),
        keys.token.clone(),
        None,
        "remfile",
    )
    .into();
    let mut settings = SigningSettings::default();
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(now)
        .settings(settings)
        .build()
        .map_err(|_| failed())?
        .into();
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        extra.iter().copied(),
        SignableBody::UnsignedPayload,
    )
    .map_err(|_| failed())?;
    // The signer traces the request it signs, session token included: no
    // subscriber sees that.
    let signed =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            sign(request, &params)
        })
        .map_err(|_| failed())?;
    let (instructions, _signature) = signed.into_parts();
    let (headers, _params) = instructions.into_parts();
    Ok(headers
        .into_iter()
        .map(|h| (h.name(), h.value().to_owned()))
        .collect())
}

fn failed() -> Error {
    Error::new(
        ErrorKind::InvalidUrl,
        "the request cannot be signed (SigV4)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_get_is_signed_with_s3s_settings() {
        let keys = Credentials {
            key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            token: Some("session".into()),
            expires: None,
        };
        let url = Url::parse("https://examplebucket.s3.amazonaws.com/test%20file.txt").unwrap();
        // 2013-05-24T00:00:00Z, the date of AWS's worked example.
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600);
        let headers = get_headers(
            &url,
            &[("x-amz-request-payer", "requester")],
            &keys,
            "us-east-1",
            now,
        )
        .unwrap();
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("x-amz-date"), Some("20130524T000000Z"));
        assert_eq!(get("x-amz-content-sha256"), Some("UNSIGNED-PAYLOAD"));
        assert_eq!(get("x-amz-security-token"), Some("session"));
        let auth = get("authorization").unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-request-payer;x-amz-security-token, Signature="),
            "{auth}"
        );
        // Signed again a second later: another signature.
        let later =
            get_headers(&url, &[], &keys, "us-east-1", now + Duration::from_secs(1)).unwrap();
        assert_ne!(
            later.iter().find(|(n, _)| *n == "authorization").unwrap().1,
            auth
        );
    }
}
