//! What the credential services share: the agents they are asked through,
//! an answer read within bounds, a URL setting checked.

use std::time::Duration;

use ureq::Agent;
use url::Url;

use super::super::credentials::credentials_error;
use crate::error::Result;
use crate::sync::{ProcessLocal, start_afresh};

/// How long the container and instance services get to take a connection,
/// and to answer.
const SERVICE_CONNECT: Duration = Duration::from_secs(2);
const SERVICE_TIMEOUT: Duration = Duration::from_secs(20);

/// The longest answer a credential service may give.
const MAX_ANSWER_LEN: u64 = 256 * 1024;

/// The URL the setting `name` gives: http(s), with a host.
pub(super) fn parse_url_setting(name: &str, text: &str) -> Result<Url> {
    Url::parse(text.trim())
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| credentials_error(format!("{name} is not an http(s) URL")))
}

/// The agent the container and instance credential services are asked
/// through: no proxy (they are link-local), short waits.
pub(super) fn agent() -> Agent {
    static AGENT: ProcessAgent =
        ProcessAgent::new(|| credential_agent(None, SERVICE_CONNECT, SERVICE_TIMEOUT));
    AGENT.get()
}

/// An agent made once per process: a child forked from the process makes
/// its own rather than use one whose state (its pool's lock, its TLS
/// set-up) a thread of the parent may have held at the fork.
pub(super) struct ProcessAgent {
    made: ProcessLocal<Option<Agent>>,
    make: fn() -> Agent,
}

impl ProcessAgent {
    pub(super) const fn new(make: fn() -> Agent) -> ProcessAgent {
        ProcessAgent {
            made: ProcessLocal::new(None, start_afresh),
            make,
        }
    }

    pub(super) fn get(&self) -> Agent {
        let Some(mut made) = self.made.lock() else {
            return (self.make)();
        };
        made.get_or_insert_with(self.make).clone()
    }
}

/// An agent for credential requests: a refusal's status and body are an
/// answer to read, and no redirect is expected of a credential service.
pub(super) fn credential_agent(
    proxy: Option<ureq::Proxy>,
    connect: Duration,
    total: Duration,
) -> Agent {
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

/// Status and body of an answer, the body read to at most [`MAX_ANSWER_LEN`].
pub(super) fn answer(
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
