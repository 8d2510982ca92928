//! A web identity token (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`)
//! exchanged at STS for a role's keys: how EKS (IRSA) and other OIDC
//! providers hand a pod its role.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use ureq::Agent;
use url::Url;

use super::super::answers;
use super::super::credentials::{Credentials, credentials_error};
use super::service::{ProcessAgent, answer, credential_agent, parse_url_setting};
use super::{Env, Source, read_small};
use crate::error::Result;
use crate::http::secrets::Secrets;

/// How long STS gets: a public service, over the internet.
const STS_CONNECT: Duration = Duration::from_secs(10);
pub(super) const STS_TIMEOUT: Duration = Duration::from_secs(30);

/// The web identity source, if the environment names both a token file
/// and a role.
pub(super) fn source(env: &dyn Env, profile_region: Option<&str>) -> Result<Option<Source>> {
    let (Some(token_file), Some(role_arn)) = (
        env.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
        env.var("AWS_ROLE_ARN"),
    ) else {
        return Ok(None);
    };
    Ok(Some(Source::WebIdentity {
        token_file: PathBuf::from(token_file),
        role_arn,
        session_name: env
            .var("AWS_ROLE_SESSION_NAME")
            .unwrap_or_else(session_name),
        sts: sts_endpoint(env, profile_region)?,
    }))
}

/// The role session's name where `AWS_ROLE_SESSION_NAME` gives none: one
/// for the process, so that its files share one session and one exchange.
fn session_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("remfile-{}-{secs}", crate::sync::this_process())
    })
    .clone()
}

/// Where STS is asked: `AWS_ENDPOINT_URL_STS`, else the region's endpoint
/// (as the SDKs now default to), else the global one.
fn sts_endpoint(env: &dyn Env, profile_region: Option<&str>) -> Result<Url> {
    if let Some(url) = env.var("AWS_ENDPOINT_URL_STS") {
        return parse_url_setting("AWS_ENDPOINT_URL_STS", &url);
    }
    let region = env
        .var("AWS_REGION")
        .or_else(|| env.var("AWS_DEFAULT_REGION"))
        .or(profile_region.map(str::to_owned));
    let host = match region {
        Some(r) if super::super::region::is_region_name(&r) => {
            format!("https://sts.{r}.amazonaws.com/")
        }
        _ => "https://sts.amazonaws.com/".into(),
    };
    parse_url_setting("the STS endpoint", &host)
}

/// The agent STS is asked through: a public service, so through the
/// proxy the environment names, if any.
fn sts_agent() -> Agent {
    static AGENT: ProcessAgent = ProcessAgent::new(|| {
        credential_agent(ureq::Proxy::try_from_env(), STS_CONNECT, STS_TIMEOUT)
    });
    AGENT.get()
}

/// STS's `AssumeRoleWithWebIdentity` for the token in `token_file`, read
/// anew at each call: the file is rotated under us.
pub(super) fn assume_role(
    token_file: &Path,
    role_arn: &str,
    session_name: &str,
    sts: &Url,
) -> Result<Credentials> {
    let token = read_small(token_file, "the web identity token file")?.ok_or_else(|| {
        credentials_error(format!(
            "the web identity token file {} does not exist",
            token_file.display()
        ))
    })?;
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("Action", "AssumeRoleWithWebIdentity")
        .append_pair("Version", "2011-06-15")
        .append_pair("RoleArn", role_arn)
        .append_pair("RoleSessionName", session_name)
        .append_pair("WebIdentityToken", token.trim())
        .finish();
    let (status, body) = answer(
        sts_agent()
            .post(sts.as_str())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/xml")
            .send(form.as_bytes()),
        "STS",
    )?;
    if status != 200 {
        let mut sent = Secrets::new();
        sent.add(token.trim());
        return Err(credentials_error(format!(
            "STS refused AssumeRoleWithWebIdentity for {role_arn} (HTTP {status}): {}",
            answers::sts_refusal(&body, &sent)
        )));
    }
    answers::from_sts_answer(&body)
}
