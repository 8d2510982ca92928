//! The standard AWS credential chain, synchronous: keys given to the
//! builder, then the environment (`AWS_ACCESS_KEY_ID`…), then the shared
//! files' profile (`AWS_PROFILE`), then a web identity token
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, exchanged at STS), then
//! the container credentials service (`AWS_CONTAINER_CREDENTIALS_*_URI`),
//! then EC2's instance metadata service (IMDSv2, its token first). The first
//! link that applies gives the keys; none applying means unsigned requests.
//!
//! Keys from a service are shared by every file of the process that found
//! the same source, and renewed by [`Keys`] before they expire (see the
//! `keys` module: no load runs under a lock a signing thread waits on, and
//! a forked child loads its own).
//!
//! An instance metadata endpoint that cannot be reached at all is taken as
//! absent for [`absent::NO_INSTANCE_METADATA_FOR`]; one that answers
//! slowly or with an error is asked again at the next open.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use ureq::Agent;
use url::Url;

use super::credentials::{self, Credentials, credentials_error};
use super::keys::{self, Keys};
use super::profile::{self, Profile};
use crate::error::Result;
use crate::http::redact::redact;
use crate::sync::{Mutex, Wedged};

/// Where the chain reads its variables and the home directory: the process's
/// environment, or a fixed one in tests.
pub(crate) trait Env {
    /// The variable's value, if it is set and not empty.
    fn var(&self, name: &str) -> Option<String>;
    fn home(&self) -> Option<PathBuf>;
}

/// The process's own environment.
pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.trim().is_empty())
    }

    fn home(&self) -> Option<PathBuf> {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }
}

/// How keys are got. `Debug` shows its name only (it may hold keys or a
/// token).
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// Keys known already: given to the builder, in the environment or a
    /// profile (named by `from`).
    Given { keys: Credentials, from: String },
    /// STS's `AssumeRoleWithWebIdentity` for the token in a file.
    WebIdentity {
        token_file: PathBuf,
        role_arn: String,
        session_name: String,
        sts: Url,
    },
    /// The container credentials service (ECS, EKS Pod Identity).
    Container {
        url: Url,
        authorization: Option<String>,
        authorization_file: Option<PathBuf>,
    },
    /// EC2's instance metadata service, IMDSv2.
    InstanceMetadata { endpoint: Url },
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Source {
    /// What the source is called in messages.
    pub fn name(&self) -> String {
        match self {
            Source::Given { from, .. } => from.clone(),
            Source::WebIdentity { .. } => {
                "a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE, via STS)".into()
            }
            Source::Container { url, .. } => {
                format!("the container credentials service at {}", redact(url))
            }
            Source::InstanceMetadata { .. } => "EC2 instance metadata (IMDSv2)".into(),
        }
    }

    /// Asks the source for keys: a network call for every source but
    /// [`Source::Given`].
    pub(crate) fn load(&self) -> Result<Credentials> {
        match self {
            Source::Given { keys, .. } => Ok(keys.clone()),
            Source::WebIdentity {
                token_file,
                role_arn,
                session_name,
                sts,
            } => assume_role_with_web_identity(token_file, role_arn, session_name, sts),
            Source::Container {
                url,
                authorization,
                authorization_file,
            } => {
                container_credentials(url, authorization.as_deref(), authorization_file.as_deref())
            }
            Source::InstanceMetadata { endpoint } => match instance_credentials(endpoint)? {
                Instance::Keys(keys) => Ok(keys),
                Instance::Unreachable => {
                    Err(credentials_error("EC2 instance metadata does not answer"))
                }
                Instance::NoRole => Err(credentials_error(
                    "EC2 instance metadata no longer gives credentials (no role attached)",
                )),
            },
        }
    }
}

/// What the chain found.
#[derive(Debug)]
pub(crate) struct Found {
    /// The keys, or `None` for unsigned requests.
    pub keys: Option<Arc<Keys>>,
    /// The profile's `region`, if a profile was read.
    pub profile_region: Option<String>,
}

/// What the chain is asked for: explicit keys, a profile name.
pub(crate) struct Ask<'a> {
    pub keys: Option<&'a Credentials>,
    pub profile: Option<&'a str>,
    pub anonymous: bool,
}

/// The profile the chain reads: its name, whether one was named (by option
/// or `AWS_PROFILE`), and its settings if it exists.
struct ProfileAsked {
    name: String,
    named: bool,
    profile: Option<Profile>,
}

/// Walks the chain, in the order of the module's documentation.
pub(crate) fn find(ask: &Ask<'_>, env: &dyn Env) -> Result<Found> {
    let asked = profile_asked(ask, env)?;
    let profile_region = asked
        .profile
        .as_ref()
        .and_then(|p| p.get("region").cloned());
    let keys = if ask.anonymous {
        None
    } else if let Some(keys) = known_keys(ask, env, &asked)? {
        Some(keys)
    } else {
        service_keys(env, profile_region.as_deref())?
    };
    Ok(Found {
        keys,
        profile_region,
    })
}

/// The profile asked for, read. Without a search for keys, the profile
/// only may give a region: a profile that cannot be read gives none.
fn profile_asked(ask: &Ask<'_>, env: &dyn Env) -> Result<ProfileAsked> {
    let named = ask
        .profile
        .map(str::to_owned)
        .or_else(|| env.var("AWS_PROFILE"));
    let name = named.clone().unwrap_or_else(|| "default".into());
    let searching = !ask.anonymous && ask.keys.is_none();
    let profile = match read_profile(env, &name) {
        Ok(profile) => profile,
        Err(_) if !searching => None,
        Err(e) => return Err(e),
    };
    if searching && named.is_some() && profile.is_none() {
        return Err(credentials_error(format!(
            "the AWS profile {name:?} is in neither {} nor {}",
            shown(&credentials_file(env)),
            shown(&config_file(env)),
        )));
    }
    Ok(ProfileAsked {
        name,
        named: named.is_some(),
        profile,
    })
}

/// Keys known without asking a service: the builder's, the environment's
/// (unless a profile is asked for by option), the profile's.
fn known_keys(ask: &Ask<'_>, env: &dyn Env, asked: &ProfileAsked) -> Result<Option<Arc<Keys>>> {
    let given = |keys: Credentials, from: String| -> Result<Option<Arc<Keys>>> {
        let source = Source::Given {
            keys: keys.checked(&from)?,
            from,
        };
        Ok(Some(Arc::new(Keys::new(source, None))))
    };
    if let Some(keys) = ask.keys {
        return given(keys.clone(), "the builder's S3 options".into());
    }
    if ask.profile.is_none() {
        if let (Some(id), Some(secret)) = (
            env.var("AWS_ACCESS_KEY_ID"),
            env.var("AWS_SECRET_ACCESS_KEY"),
        ) {
            let keys = Credentials {
                key_id: id,
                secret,
                token: env.var("AWS_SESSION_TOKEN"),
                expires: None,
            }
            .checked("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")?;
            return given(keys, "AWS_ACCESS_KEY_ID in the environment".into());
        }
    }
    let Some(profile) = &asked.profile else {
        return Ok(None);
    };
    let name = &asked.name;
    if let Some(keys) = profile_keys(profile, name)? {
        return given(keys, format!("the AWS profile {name:?}"));
    }
    if asked.named {
        return Err(credentials_error(format!(
            "the AWS profile {name:?} has no aws_access_key_id and aws_secret_access_key"
        )));
    }
    Ok(None)
}

/// Keys from a service: a web identity exchanged at STS, the container
/// service, EC2's instance metadata.
fn service_keys(env: &dyn Env, profile_region: Option<&str>) -> Result<Option<Arc<Keys>>> {
    if let (Some(token_file), Some(role_arn)) = (
        env.var("AWS_WEB_IDENTITY_TOKEN_FILE"),
        env.var("AWS_ROLE_ARN"),
    ) {
        let source = Source::WebIdentity {
            token_file: PathBuf::from(token_file),
            role_arn,
            session_name: env
                .var("AWS_ROLE_SESSION_NAME")
                .unwrap_or_else(session_name),
            sts: sts_endpoint(env, profile_region)?,
        };
        return load_shared(source).map(Some);
    }
    if let Some(url) = container_url(env)? {
        let source = Source::Container {
            url,
            authorization: env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
            authorization_file: env
                .var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
                .map(PathBuf::from),
        };
        return load_shared(source).map(Some);
    }
    instance_keys(env)
}

/// The instance's keys, unless `AWS_EC2_METADATA_DISABLED` is `true` or
/// the service could not be reached lately; `None` where the instance has
/// none or its service fails (requests then go unsigned).
fn instance_keys(env: &dyn Env) -> Result<Option<Arc<Keys>>> {
    let off = env
        .var("AWS_EC2_METADATA_DISABLED")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if off {
        return Ok(None);
    }
    let endpoint = instance_metadata_endpoint(env)?;
    let source = Source::InstanceMetadata {
        endpoint: endpoint.clone(),
    };
    if let Some(keys) = keys::shared_found(&source) {
        return Ok(Some(keys));
    }
    if absent::known(&endpoint, Instant::now()) {
        return Ok(None);
    }
    match instance_credentials(&endpoint) {
        Ok(Instance::Keys(keys)) => return Ok(Some(keys::shared(source, Some(keys)))),
        Ok(Instance::Unreachable) => absent::remember(&endpoint, Instant::now()),
        Ok(Instance::NoRole) => {}
        Err(e) => tracing::debug!(error = %e, "no credentials from EC2 instance metadata"),
    }
    Ok(None)
}

/// The longest a load of keys lasts: STS's agent gives up after
/// [`STS_TIMEOUT`], the other services' sooner. A caller with no valid
/// keys waits for another thread's load this long at most.
pub(crate) const LONGEST_LOAD: Duration = Duration::from_secs(STS_TIMEOUT.as_secs() + 5);

fn load_shared(source: Source) -> Result<Arc<Keys>> {
    let keys = keys::shared(source, None);
    keys.get(Instant::now() + LONGEST_LOAD)?;
    Ok(keys)
}

/// Instance metadata endpoints found unreachable: a host without the
/// service (not on EC2) is not asked before every open, yet is asked again
/// after [`absent::NO_INSTANCE_METADATA_FOR`] (a network comes up, a VPN goes).
mod absent {
    use std::time::{Duration, Instant};

    use url::Url;

    use crate::sync::{Mutex, Wedged};

    /// How long an endpoint found unreachable is taken as absent.
    pub(crate) const NO_INSTANCE_METADATA_FOR: Duration = Duration::from_secs(5 * 60);

    /// The endpoints, and when each was found unreachable. Facts about the
    /// host, so a forked child keeps them; its lock is had only if free
    /// there (see [`Wedged`]), as the other process-wide tables'.
    static UNREACHABLE: Mutex<Vec<(Url, Instant)>> = Mutex::new(Vec::new());
    static WEDGED: Wedged = Wedged::new();

    /// Whether `endpoint` was found unreachable within the bound, at `now`.
    pub(crate) fn known(endpoint: &Url, now: Instant) -> bool {
        let Some(mut all) = UNREACHABLE.lock_unless_wedged(&WEDGED, crate::process::TABLE_WAIT)
        else {
            return false;
        };
        all.retain(|(_, at)| now.saturating_duration_since(*at) < NO_INSTANCE_METADATA_FOR);
        all.iter().any(|(url, _)| url == endpoint)
    }

    /// Remembers that `endpoint` could not be reached at `at`.
    pub(crate) fn remember(endpoint: &Url, at: Instant) {
        if let Some(mut all) = UNREACHABLE.lock_unless_wedged(&WEDGED, crate::process::TABLE_WAIT) {
            all.retain(|(url, _)| url != endpoint);
            all.push((endpoint.clone(), at));
        }
    }
}

/// The role session's name where `AWS_ROLE_SESSION_NAME` gives none: one
/// for the process, so that its files share one session and one exchange.
fn session_name() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("remfile-{}-{secs}", std::process::id())
    })
    .clone()
}

fn shown(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map_or("(no home directory)".into(), |p| p.display().to_string())
}

fn credentials_file(env: &dyn Env) -> Option<PathBuf> {
    env.var("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".aws/credentials")))
}

fn config_file(env: &dyn Env) -> Option<PathBuf> {
    env.var("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| env.home().map(|h| h.join(".aws/config")))
}

/// The longest shared configuration file read.
const MAX_FILE_LEN: u64 = 1 << 20;

/// A small text file's content; `None` if it does not exist.
fn read_small(path: &Path, what: &str) -> Result<Option<String>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(credentials_error(format!(
                "cannot read {what} {}: {e}",
                path.display()
            )));
        }
    };
    let mut text = String::new();
    file.take(MAX_FILE_LEN)
        .read_to_string(&mut text)
        .map_err(|e| credentials_error(format!("cannot read {what} {}: {e}", path.display())))?;
    Ok(Some(text))
}

fn read_profile(env: &dyn Env, name: &str) -> Result<Option<Profile>> {
    let read = |path: Option<PathBuf>, what| match path {
        Some(p) => read_small(&p, what),
        None => Ok(None),
    };
    let credentials = read(credentials_file(env), "the AWS credentials file")?;
    let config = read(config_file(env), "the AWS config file")?;
    Ok(profile::merged(
        credentials.as_deref(),
        config.as_deref(),
        name,
    ))
}

/// The static keys of a profile; an error if it asks for a way of getting
/// keys this crate does not have.
fn profile_keys(profile: &Profile, name: &str) -> Result<Option<Credentials>> {
    let id = profile.get("aws_access_key_id");
    let secret = profile.get("aws_secret_access_key");
    if let (Some(id), Some(secret)) = (id, secret) {
        return Ok(Some(Credentials {
            key_id: id.clone(),
            secret: secret.clone(),
            token: profile.get("aws_session_token").cloned(),
            expires: None,
        }));
    }
    if let Some((key, what)) = profile::UNSUPPORTED
        .iter()
        .find(|(key, _)| profile.contains_key(*key))
    {
        return Err(credentials_error(format!(
            "the AWS profile {name:?} sets {key}: remfile does not support {what}; \
             give keys instead (aws_access_key_id and aws_secret_access_key, or the \
             AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN variables, \
             which `aws configure export-credentials --format env` prints)"
        )));
    }
    Ok(None)
}

fn parse_url_setting(name: &str, text: &str) -> Result<Url> {
    Url::parse(text.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| credentials_error(format!("{name} is not an http(s) URL")))
}

fn sts_endpoint(env: &dyn Env, profile_region: Option<&str>) -> Result<Url> {
    if let Some(url) = env.var("AWS_ENDPOINT_URL_STS") {
        return parse_url_setting("AWS_ENDPOINT_URL_STS", &url);
    }
    let region = env
        .var("AWS_REGION")
        .or_else(|| env.var("AWS_DEFAULT_REGION"))
        .or(profile_region.map(str::to_owned));
    let host = match region {
        Some(r) if super::region::is_region_name(&r) => format!("https://sts.{r}.amazonaws.com/"),
        _ => "https://sts.amazonaws.com/".into(),
    };
    parse_url_setting("the STS endpoint", &host)
}

/// Hosts a container credentials URL may name over plain http: the ECS
/// and EKS agents' link-local addresses, and loopback.
fn may_use_http(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => {
            ip.is_loopback()
                || ip.octets() == [169, 254, 170, 2]
                || ip.octets() == [169, 254, 170, 23]
        }
        Some(url::Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23]
        }
        Some(url::Host::Domain(d)) => d == "localhost",
        None => false,
    }
}

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

fn instance_metadata_endpoint(env: &dyn Env) -> Result<Url> {
    let text = env
        .var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .unwrap_or_else(|| "http://169.254.169.254".into());
    parse_url_setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", &text)
}

/// How long the container and instance services get to take a connection,
/// and to answer.
const SERVICE_CONNECT: Duration = Duration::from_secs(2);
const SERVICE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long STS gets: a public service, over the internet.
const STS_CONNECT: Duration = Duration::from_secs(10);
const STS_TIMEOUT: Duration = Duration::from_secs(30);

/// The agent the container and instance credential services are asked
/// through: no proxy (they are link-local), short waits.
fn agent() -> Agent {
    static AGENT: ProcessAgent =
        ProcessAgent::new(|| credential_agent(None, SERVICE_CONNECT, SERVICE_TIMEOUT));
    AGENT.get()
}

/// The agent STS is asked through: a public service, so through the
/// proxy the environment names, if any.
fn sts_agent() -> Agent {
    static AGENT: ProcessAgent = ProcessAgent::new(|| {
        credential_agent(ureq::Proxy::try_from_env(), STS_CONNECT, STS_TIMEOUT)
    });
    AGENT.get()
}

/// An agent made once per process: a child forked from the process makes
/// its own rather than use one whose state (its pool's lock, its TLS
/// set-up) a thread of the parent may have held at the fork.
struct ProcessAgent {
    made: Mutex<Option<(u32, Agent)>>,
    wedged: Wedged,
    make: fn() -> Agent,
}

impl ProcessAgent {
    const fn new(make: fn() -> Agent) -> ProcessAgent {
        ProcessAgent {
            made: Mutex::new(None),
            wedged: Wedged::new(),
            make,
        }
    }

    fn get(&self) -> Agent {
        let me = std::process::id();
        let Some(mut made) = self
            .made
            .lock_unless_wedged(&self.wedged, crate::process::TABLE_WAIT)
        else {
            return (self.make)();
        };
        match &*made {
            Some((process, agent)) if *process == me => agent.clone(),
            _ => {
                let agent = (self.make)();
                *made = Some((me, agent.clone()));
                agent
            }
        }
    }
}

fn credential_agent(proxy: Option<ureq::Proxy>, connect: Duration, total: Duration) -> Agent {
    Agent::config_builder()
        .proxy(proxy)
        .http_status_as_error(false)
        .max_redirects(0)
        // No connection is kept: a forked child must not share one with
        // its parent, and keys are asked for once an hour.
        .max_idle_connections(0)
        .timeout_connect(Some(connect))
        .timeout_global(Some(total))
        .build()
        .new_agent()
}

/// The longest answer a credential service may give.
const MAX_ANSWER_LEN: u64 = 256 * 1024;

/// Status and body of an answer, the body read to at most [`MAX_ANSWER_LEN`].
fn answer(
    result: std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    what: &str,
) -> Result<(u16, String)> {
    let mut resp = result
        .map_err(|e| credentials_error(format!("{what} could not be reached: {}", describe(&e))))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_LEN)
        .read_to_string()
        .map_err(|e| {
            credentials_error(format!(
                "{what}'s answer could not be read: {}",
                describe(&e)
            ))
        })?;
    Ok((status, body))
}

/// A ureq error in words that name no URL (a query could carry a secret).
fn describe(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => "timed out".into(),
        ureq::Error::Io(io) => io.kind().to_string(),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::BodyExceedsLimit(_) => "the answer is too long".into(),
        _ => "the request failed".into(),
    }
}

fn assume_role_with_web_identity(
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
        return Err(credentials_error(format!(
            "STS refused AssumeRoleWithWebIdentity for {role_arn} (HTTP {status}): {}",
            credentials::sts_refusal(&body)
        )));
    }
    credentials::from_sts_answer(&body)
}

fn container_credentials(
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
    if let Some(token) = from_file.as_deref().or(authorization).map(str::trim) {
        req = req.header("authorization", token);
    }
    let what = "the container credentials service";
    let (status, body) = answer(req.call(), what)?;
    if status != 200 {
        return Err(credentials_error(format!("{what} answered HTTP {status}")));
    }
    credentials::from_json_answer(&body, what)
}

/// What the instance metadata service gave.
enum Instance {
    Keys(Credentials),
    /// Nothing at its address (see [`unreachable()`]): not on EC2.
    Unreachable,
    /// The instance has no role.
    NoRole,
}

/// How long the instance metadata service gets to take a connection (it is
/// on the instance's own link), and to answer each request.
const IMDS_CONNECT: Duration = Duration::from_secs(1);
const IMDS_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether a request failed for want of anything at its address: refused,
/// no route, no connection within its time. A slow answer, a dropped
/// connection or an error status are a service that is there.
fn unreachable(e: &ureq::Error) -> bool {
    use std::io::ErrorKind::*;
    match e {
        ureq::Error::Timeout(ureq::Timeout::Connect) | ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => matches!(
            io.kind(),
            ConnectionRefused
                | HostUnreachable
                | NetworkUnreachable
                | NetworkDown
                | AddrNotAvailable
        ),
        _ => false,
    }
}

/// What IMDSv2's request for a session token got.
enum Token {
    Session(String),
    /// The service has IMDSv1 only: requests go without a token.
    None,
    /// Nothing at the address.
    Unreachable,
}

fn imds_url(endpoint: &Url, path: &str) -> Result<Url> {
    endpoint
        .join(path)
        .map_err(|_| credentials_error("bad instance metadata endpoint"))
}

/// IMDSv2's session token.
fn instance_token(endpoint: &Url) -> Result<Token> {
    let what = "EC2 instance metadata";
    let sent = agent()
        .put(imds_url(endpoint, "/latest/api/token")?.as_str())
        .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
        .config()
        .timeout_connect(Some(IMDS_CONNECT))
        .timeout_global(Some(IMDS_TIMEOUT))
        .build()
        .send_empty();
    if sent.as_ref().is_err_and(unreachable) {
        return Ok(Token::Unreachable);
    }
    match answer(sent, what)? {
        (200, token) => Ok(Token::Session(token.trim().to_owned())),
        (404 | 405, _) => Ok(Token::None),
        (status, _) => Err(credentials_error(format!(
            "{what} refused a session token (HTTP {status})"
        ))),
    }
}

/// The instance's role credentials.
fn instance_credentials(endpoint: &Url) -> Result<Instance> {
    let what = "EC2 instance metadata";
    let quick = |req: ureq::RequestBuilder<ureq::typestate::WithoutBody>| {
        req.config()
            .timeout_connect(Some(IMDS_CONNECT))
            .timeout_global(Some(IMDS_TIMEOUT))
            .build()
    };
    let token = match instance_token(endpoint)? {
        Token::Session(token) => Some(token),
        Token::None => None,
        Token::Unreachable => return Ok(Instance::Unreachable),
    };
    let get = |path: &str| -> Result<(u16, String)> {
        let mut req = agent().get(imds_url(endpoint, path)?.as_str());
        if let Some(t) = &token {
            req = req.header("x-aws-ec2-metadata-token", t);
        }
        answer(quick(req).call(), what)
    };
    let (status, roles) = get("/latest/meta-data/iam/security-credentials/")?;
    if status == 404 {
        return Ok(Instance::NoRole);
    }
    if status != 200 {
        return Err(credentials_error(format!(
            "{what} answered HTTP {status} for the instance's role"
        )));
    }
    let Some(role) = roles.lines().map(str::trim).find(|r| !r.is_empty()) else {
        return Ok(Instance::NoRole);
    };
    if !role
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b))
    {
        return Err(credentials_error(format!(
            "{what} named a role that is not a role name"
        )));
    }
    let (status, body) = get(&format!(
        "/latest/meta-data/iam/security-credentials/{role}"
    ))?;
    if status != 200 {
        return Err(credentials_error(format!(
            "{what} answered HTTP {status} for the role's credentials"
        )));
    }
    credentials::from_json_answer(&body, what).map(Instance::Keys)
}

/// For messages: what was looked for when no keys were found.
pub(crate) const SEARCHED: &str = "no AWS credentials were found (none given, no AWS_ACCESS_KEY_ID, \
    no keys in the profile, no web identity, container or instance credentials), so the request \
    was sent unsigned; give credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, \
    or S3Options::credentials)";

#[cfg(test)]
mod tests {
    use super::super::fake::{Gate, Service, in_an_hour, json_keys};
    use super::*;
    use std::collections::HashMap;

    struct FakeEnv(HashMap<&'static str, String>, Option<PathBuf>);

    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
        fn home(&self) -> Option<PathBuf> {
            self.1.clone()
        }
    }

    fn env(vars: &[(&'static str, &str)]) -> FakeEnv {
        let mut all: HashMap<_, _> = vars.iter().map(|(k, v)| (*k, v.to_string())).collect();
        all.entry("AWS_EC2_METADATA_DISABLED")
            .or_insert_with(|| "true".into());
        FakeEnv(all, None)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn ask() -> Ask<'static> {
        Ask {
            keys: None,
            profile: None,
            anonymous: false,
        }
    }

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "remfile-chain-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn the_environment_comes_first_then_the_profile() {
        let dir = dir_with(&[
            (
                "c",
                "[default]\naws_access_key_id=AKIAFILE\naws_secret_access_key=s\n[other]\naws_access_key_id=AKIAOTHER\naws_secret_access_key=s\n",
            ),
            ("cfg", "[default]\nregion=eu-west-2\n"),
        ]);
        let c = dir.join("c").display().to_string();
        let cfg = dir.join("cfg").display().to_string();
        let files = [
            ("AWS_SHARED_CREDENTIALS_FILE", c.as_str()),
            ("AWS_CONFIG_FILE", cfg.as_str()),
        ];
        let mut vars = files.to_vec();
        vars.extend([
            ("AWS_ACCESS_KEY_ID", "AKIAENV"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_SESSION_TOKEN", "t"),
        ]);
        let found = find(&ask(), &env(&vars)).unwrap();
        let keys = found.keys.unwrap().get(soon()).unwrap();
        assert_eq!(
            (keys.key_id.as_str(), keys.token.as_deref()),
            ("AKIAENV", Some("t"))
        );
        assert_eq!(found.profile_region.as_deref(), Some("eu-west-2"));

        let key_id = |ask: &Ask<'_>, vars: &[(&'static str, &str)]| {
            find(ask, &env(vars))
                .unwrap()
                .keys
                .unwrap()
                .get(soon())
                .unwrap()
                .key_id
        };
        assert_eq!(key_id(&ask(), &files), "AKIAFILE");
        let mut named = files.to_vec();
        named.push(("AWS_PROFILE", "other"));
        assert_eq!(key_id(&ask(), &named), "AKIAOTHER");
        // A profile asked for by option wins over the environment's keys.
        let by_option = Ask {
            profile: Some("other"),
            ..ask()
        };
        assert_eq!(key_id(&by_option, &vars), "AKIAOTHER");
        let missing = Ask {
            profile: Some("nope"),
            ..ask()
        };
        let e = find(&missing, &env(&files)).unwrap_err();
        assert!(e.to_string().contains("\"nope\" is in neither"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_profile_that_assumes_a_role_says_it_is_not_supported() {
        let dir = dir_with(&[(
            "cfg",
            "[profile admin]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = default\n",
        )]);
        let cfg = dir.join("cfg").display().to_string();
        let vars = [
            ("AWS_CONFIG_FILE", cfg.as_str()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_PROFILE", "admin"),
        ];
        let e = find(&ask(), &env(&vars)).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Credentials);
        let text = e.to_string();
        assert!(
            text.contains("role_arn") && text.contains("does not support"),
            "{text}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn nothing_found_is_unsigned_and_anonymous_skips_the_chain() {
        let vars = [
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_CONFIG_FILE", "/nonexistent"),
        ];
        assert!(find(&ask(), &env(&vars)).unwrap().keys.is_none());
        let mut with_keys = vars.to_vec();
        with_keys.extend([("AWS_ACCESS_KEY_ID", "A"), ("AWS_SECRET_ACCESS_KEY", "s")]);
        assert!(
            find(
                &Ask {
                    anonymous: true,
                    ..ask()
                },
                &env(&with_keys)
            )
            .unwrap()
            .keys
            .is_none()
        );
    }

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

    /// Runs `f` in a child forked from this process; whether it returned
    /// true and the child ended within a minute (it is killed otherwise).
    #[allow(unsafe_code)]
    fn in_a_child(f: impl FnOnce() -> bool) -> bool {
        // SAFETY: the child runs `f` and ends with `_exit`, never going back
        // into the test harness; glibc's malloc is fork-safe, and the locks
        // `f` takes are what the test is about.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(false);
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let (done, ended) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut status = 0;
            // SAFETY: waits for the child this test made.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            let _ = done
                .send(waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        });
        match ended.recv_timeout(Duration::from_secs(60)) {
            Ok(ok) => ok,
            Err(_) => {
                // SAFETY: the child is this test's, and hung.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                false
            }
        }
    }

    fn container_vars(url: &str) -> FakeEnv {
        env(&[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", url),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_CONFIG_FILE", "/nonexistent"),
        ])
    }

    fn token_of(found: Result<Found>) -> Option<String> {
        found.ok()?.keys?.get(soon()).ok()?.token
    }

    #[test]
    fn a_child_forked_while_keys_load_gets_keys_of_its_own() {
        let gate = Gate::new();
        let held = gate.clone();
        let service = Service::new(move |asked| {
            if asked.n == 1 {
                held.hold();
            }
            json_keys(&format!("fork{}", asked.n), in_an_hour())
        });
        let url = service.url("/fork-creds");
        let loader = {
            let url = url.clone();
            std::thread::spawn(move || token_of(find(&ask(), &container_vars(&url))))
        };
        gate.arrived();
        let child = in_a_child(|| token_of(find(&ask(), &container_vars(&url))).is_some());
        gate.open();
        assert!(child, "the child hung or got no keys");
        assert_eq!(loader.join().unwrap().as_deref(), Some("fork1"));
        // The parent's keys are shared by its files as before.
        assert_eq!(
            token_of(find(&ask(), &container_vars(&url))).as_deref(),
            Some("fork1")
        );
        assert_eq!(
            service.asked().len(),
            2,
            "the parent's load and the child's"
        );
    }

    fn instance_vars(endpoint: &str) -> FakeEnv {
        env(&[
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent"),
            ("AWS_CONFIG_FILE", "/nonexistent"),
        ])
    }

    #[test]
    fn a_slow_or_failing_instance_metadata_service_is_asked_again() {
        let gate = Gate::new();
        let held = gate.clone();
        let tokens = std::sync::atomic::AtomicUsize::new(0);
        let service =
            Service::new(
                move |asked| match (asked.method.as_str(), asked.path.as_str()) {
                    ("PUT", "/latest/api/token") => {
                        match tokens.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                            // Closed without an answer.
                            0 => None,
                            // No answer within the client's time.
                            1 => {
                                held.hold();
                                None
                            }
                            _ => Some((200, "imds-session".into())),
                        }
                    }
                    ("GET", "/latest/meta-data/iam/security-credentials/") => {
                        Some((200, "role\n".into()))
                    }
                    ("GET", "/latest/meta-data/iam/security-credentials/role") => {
                        json_keys("imds", in_an_hour())
                    }
                    _ => Some((404, String::new())),
                },
            );
        let vars = instance_vars(&service.url(""));
        assert!(find(&ask(), &vars).unwrap().keys.is_none(), "failed");
        assert!(find(&ask(), &vars).unwrap().keys.is_none(), "slow");
        gate.open();
        assert_eq!(token_of(find(&ask(), &vars)).as_deref(), Some("imds"));
        let puts = service.asked().iter().filter(|a| a.method == "PUT").count();
        assert_eq!(puts, 3);
    }

    #[test]
    fn an_unreachable_instance_metadata_service_is_taken_as_absent_for_a_while() {
        // Nothing listens at the port once the listener is gone.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        assert!(find(&ask(), &instance_vars(&url)).unwrap().keys.is_none());
        let endpoint = Url::parse(&url).unwrap();
        let now = Instant::now();
        assert!(absent::known(&endpoint, now), "refused: absent");
        assert!(
            !absent::known(&endpoint, now + absent::NO_INSTANCE_METADATA_FOR),
            "asked again after a while"
        );
    }
}
