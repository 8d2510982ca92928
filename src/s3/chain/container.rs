//! The container credentials service (`AWS_CONTAINER_CREDENTIALS_*_URI`):
//! the agent ECS and EKS Pod Identity run beside a task or pod.

use std::path::{Path, PathBuf};

use url::Url;

use super::super::answers;
use super::super::credentials::{Credentials, credentials_error};
use super::service::{agent, answer, parse_url_setting};
use super::{Env, Source, read_small};
use crate::error::Result;
use crate::http::secrets::Secrets;

/// The container source, if the environment names the service.
pub(super) fn source(env: &dyn Env) -> Result<Option<Source>> {
    let Some(url) = container_url(env)? else {
        return Ok(None);
    };
    Ok(Some(Source::Container {
        url,
        authorization: env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        authorization_file: env
            .var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
            .map(PathBuf::from),
    }))
}

/// Hosts a container credentials URL may name over plain http: the ECS
/// and EKS agents' link-local addresses, and loopback.
fn may_use_http(url: &Url) -> bool {
    crate::http::names_this_machine(url)
        || match url.host() {
            Some(url::Host::Ipv4(ip)) => {
                ip.octets() == [169, 254, 170, 2] || ip.octets() == [169, 254, 170, 23]
            }
            Some(url::Host::Ipv6(ip)) => ip.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23],
            _ => false,
        }
}

/// The service's URL: ECS's relative one on its agent's address, or a full
/// one that may not send the token in the clear off the host.
fn container_url(env: &dyn Env) -> Result<Option<Url>> {
    if let Some(relative) = env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        if !relative.starts_with('/') {
            return Err(credentials_error(
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI must begin with /",
            ));
        }
        return parse_url_setting(
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            &format!("http://169.254.170.2{relative}"),
        )
        .map(Some);
    }
    let Some(full) = env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") else {
        return Ok(None);
    };
    let url = parse_url_setting("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full)?;
    if url.scheme() == "http" && !may_use_http(&url) {
        return Err(credentials_error(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI over plain http must name a loopback or the container agent's address",
        ));
    }
    Ok(Some(url))
}

/// The service's keys; the authorization token file, when set, is read at
/// each call and wins over the variable (EKS rotates it).
pub(super) fn credentials(
    url: &Url,
    authorization: Option<&str>,
    authorization_file: Option<&Path>,
) -> Result<Credentials> {
    let from_file = match authorization_file {
        Some(path) => Some(
            read_small(path, "the container authorization token file")?.ok_or_else(|| {
                credentials_error(format!(
                    "the container authorization token file {} does not exist",
                    path.display()
                ))
            })?,
        ),
        None => None,
    };
    let mut req = agent()
        .get(url.as_str())
        .header("accept", "application/json");
    let mut sent = Secrets::new();
    if let Some(token) = from_file.as_deref().or(authorization).map(str::trim) {
        req = req.header("authorization", token);
        sent.add_header_value(token);
    }
    let what = "the container credentials service";
    let (status, body) = answer(req.call(), what)?;
    if status != 200 {
        return Err(credentials_error(format!("{what} answered HTTP {status}")));
    }
    answers::from_json_answer(&body, what, &sent)
}

#[cfg(test)]
mod tests {
    use super::super::test_env::env;
    use super::*;

    #[test]
    fn container_urls_over_http_must_be_local() {
        let e = container_url(&env(&[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://example.com/creds",
        )]))
        .unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        let ok = container_url(&env(&[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://127.0.0.1:80/c",
        )]))
        .unwrap();
        assert!(ok.is_some());
        let rel = container_url(&env(&[(
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "/v2/creds",
        )]))
        .unwrap()
        .unwrap();
        assert_eq!(rel.as_str(), "http://169.254.170.2/v2/creds");
    }
}
