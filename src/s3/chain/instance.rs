//! EC2's instance metadata service (IMDSv2, its session token first), the
//! chain's last link.
//!
//! An endpoint that cannot be reached at all is taken as absent for
//! [`absent::NO_INSTANCE_METADATA_FOR`]; one that answers slowly or with an
//! error is asked again at the next open.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ureq::RequestBuilder;
use url::Url;

use super::super::answers;
use super::super::credentials::{Credentials, credentials_error};
use super::super::keys::{self, Keys};
use super::service::{agent, answer, parse_url_setting};
use super::{Env, Source};
use crate::error::Result;
use crate::http::secrets::Secrets;

/// How long the instance metadata service gets to take a connection (it is
/// on the instance's own link), and to answer each request.
const IMDS_CONNECT: Duration = Duration::from_secs(1);
const IMDS_TIMEOUT: Duration = Duration::from_secs(3);

/// What names the service in messages.
const WHAT: &str = "EC2 instance metadata";

/// The instance's keys, unless `AWS_EC2_METADATA_DISABLED` is `true` or
/// the service could not be reached lately; `None` where the instance has
/// none or its service fails (requests then go unsigned).
pub(super) fn keys(env: &dyn Env) -> Result<Option<Arc<Keys>>> {
    let off = env
        .var("AWS_EC2_METADATA_DISABLED")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if off {
        return Ok(None);
    }
    let endpoint = endpoint(env)?;
    let source = Source::InstanceMetadata {
        endpoint: endpoint.clone(),
    };
    if let Some(keys) = keys::shared_found(&source) {
        return Ok(Some(keys));
    }
    if absent::known(&endpoint, Instant::now()) {
        return Ok(None);
    }
    match query(&endpoint) {
        Ok(Instance::Keys(keys)) => return Ok(Some(keys::shared(source, Some(keys), super::load))),
        Ok(Instance::Unreachable) => absent::remember(&endpoint, Instant::now()),
        Ok(Instance::NoRole) => {}
        Err(e) => tracing::debug!(error = %e, "no credentials from EC2 instance metadata"),
    }
    Ok(None)
}

/// The keys again, for a renewal: the service once gave keys, so no keys
/// now is an error rather than unsigned requests.
pub(super) fn credentials(endpoint: &Url) -> Result<Credentials> {
    match query(endpoint)? {
        Instance::Keys(keys) => Ok(keys),
        Instance::Unreachable => Err(credentials_error("EC2 instance metadata does not answer")),
        Instance::NoRole => Err(credentials_error(
            "EC2 instance metadata no longer gives credentials (no role attached)",
        )),
    }
}

fn endpoint(env: &dyn Env) -> Result<Url> {
    let text = env
        .var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .unwrap_or_else(|| "http://169.254.169.254".into());
    parse_url_setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", &text)
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
        let Some(mut all) = UNREACHABLE.lock_unless_wedged(&WEDGED, crate::sync::TABLE_WAIT) else {
            return false;
        };
        all.retain(|(_, at)| now.saturating_duration_since(*at) < NO_INSTANCE_METADATA_FOR);
        all.iter().any(|(url, _)| url == endpoint)
    }

    /// Remembers that `endpoint` could not be reached at `at`.
    pub(crate) fn remember(endpoint: &Url, at: Instant) {
        if let Some(mut all) = UNREACHABLE.lock_unless_wedged(&WEDGED, crate::sync::TABLE_WAIT) {
            all.retain(|(url, _)| url != endpoint);
            all.push((endpoint.clone(), at));
        }
    }
}

/// What the instance metadata service gave.
enum Instance {
    Keys(Credentials),
    /// Nothing at its address (see [`unreachable()`]): not on EC2.
    Unreachable,
    /// The instance has no role.
    NoRole,
}

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

/// A request with the service's own short waits: it is on the instance's
/// link, and a host off EC2 must not wait the other services' longer ones.
fn quick<B>(req: RequestBuilder<B>) -> RequestBuilder<B> {
    req.config()
        .timeout_connect(Some(IMDS_CONNECT))
        .timeout_global(Some(IMDS_TIMEOUT))
        .build()
}

/// IMDSv2's session token.
fn session_token(endpoint: &Url) -> Result<Token> {
    let sent = quick(
        agent()
            .put(imds_url(endpoint, "/latest/api/token")?.as_str())
            .header("x-aws-ec2-metadata-token-ttl-seconds", "21600"),
    )
    .send_empty();
    if sent.as_ref().is_err_and(unreachable) {
        return Ok(Token::Unreachable);
    }
    match answer(sent, WHAT)? {
        (200, token) => Ok(Token::Session(token.trim().to_owned())),
        (404 | 405, _) => Ok(Token::None),
        (status, _) => Err(credentials_error(format!(
            "{WHAT} refused a session token (HTTP {status})"
        ))),
    }
}

/// The instance's role credentials: a session token, the role's name, then
/// the role's keys.
fn query(endpoint: &Url) -> Result<Instance> {
    let token = match session_token(endpoint)? {
        Token::Session(token) => Some(token),
        Token::None => None,
        Token::Unreachable => return Ok(Instance::Unreachable),
    };
    let session = Session { endpoint, token };
    let Some(role) = session.role()? else {
        return Ok(Instance::NoRole);
    };
    session.role_keys(&role).map(Instance::Keys)
}

/// The service's metadata within one session: every request carries its
/// token, where the service gave one (IMDSv1 gives none).
struct Session<'a> {
    endpoint: &'a Url,
    token: Option<String>,
}

impl Session<'_> {
    fn get(&self, path: &str) -> Result<(u16, String)> {
        let mut req = agent().get(imds_url(self.endpoint, path)?.as_str());
        if let Some(t) = &self.token {
            req = req.header("x-aws-ec2-metadata-token", t);
        }
        answer(quick(req).call(), WHAT)
    }

    /// The instance's role, `None` if it has none. Its name goes into the
    /// next request's path, so it must be a role name and nothing more.
    fn role(&self) -> Result<Option<String>> {
        let (status, roles) = self.get("/latest/meta-data/iam/security-credentials/")?;
        if status == 404 {
            return Ok(None);
        }
        if status != 200 {
            return Err(credentials_error(format!(
                "{WHAT} answered HTTP {status} for the instance's role"
            )));
        }
        let Some(role) = roles.lines().map(str::trim).find(|r| !r.is_empty()) else {
            return Ok(None);
        };
        if !role
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b))
        {
            return Err(credentials_error(format!(
                "{WHAT} named a role that is not a role name"
            )));
        }
        Ok(Some(role.to_owned()))
    }

    fn role_keys(&self, role: &str) -> Result<Credentials> {
        let (status, body) = self.get(&format!(
            "/latest/meta-data/iam/security-credentials/{role}"
        ))?;
        if status != 200 {
            return Err(credentials_error(format!(
                "{WHAT} answered HTTP {status} for the role's credentials"
            )));
        }
        let mut sent = Secrets::new();
        if let Some(token) = &self.token {
            sent.add(token);
        }
        answers::from_json_answer(&body, WHAT, &sent)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::fake::{Gate, Service, in_an_hour, json_keys};
    use super::super::find;
    use super::super::test_env::{FakeEnv, ask, env_without_files, token_of};
    use super::*;

    fn instance_vars(endpoint: &str) -> FakeEnv {
        env_without_files(&[
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint),
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
