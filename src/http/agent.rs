//! The HTTP agent a file's requests go through: its connection pool, proxy
//! and TLS roots.

use ureq::Agent;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

use crate::error::{Error, ErrorKind};
use crate::process;
use crate::process::agents::{AgentKind, SharedAgent};

/// How to make the agent, or which one to use.
pub(crate) struct AgentSettings<'a> {
    /// The caller's own agent, used as it is.
    pub given: Option<&'a Agent>,
    /// PEM data of CA certificates to trust beside the built-in roots.
    pub extra_roots: &'a [Vec<u8>],
    pub proxy_from_env: bool,
}

/// The agent a file's requests go through: the caller's, or the process's
/// agent of the file's kind (shared with every file of that kind, and so
/// its pooled connections).
#[derive(Debug)]
pub(crate) enum FileAgent {
    Given(Agent),
    Shared(SharedAgent),
}

impl FileAgent {
    /// Whether its requests go straight to the server, through no proxy (a
    /// caller's agent may have one: not known).
    pub(crate) fn dials_directly(&self) -> bool {
        match self {
            FileAgent::Given(_) => false,
            FileAgent::Shared(shared) => !shared.may_use_a_proxy(),
        }
    }

    /// The agent for the next request.
    pub(crate) fn get(&self) -> Agent {
        match self {
            FileAgent::Given(agent) => agent.clone(),
            FileAgent::Shared(shared) => shared.get(),
        }
    }
}

/// The caller's agent, or the process's agent for `settings`.
pub(crate) fn agent(settings: &AgentSettings<'_>) -> Result<FileAgent, Error> {
    if let Some(agent) = settings.given {
        if !settings.extra_roots.is_empty() {
            return Err(invalid(
                "add_root_certificates cannot change a caller-supplied agent: configure its roots instead",
            ));
        }
        return Ok(FileAgent::Given(agent.clone()));
    }
    // Refused before any agent is made or shared.
    root_certs(settings.extra_roots)?;
    let kind = AgentKind {
        proxy_env: settings.proxy_from_env.then(proxy_env),
        extra_roots: settings.extra_roots.to_vec(),
    };
    SharedAgent::new(kind, make).map(FileAgent::Shared)
}

/// The environment variables ureq takes its proxy from.
fn proxy_env() -> Vec<(String, String)> {
    [
        "ALL_PROXY",
        "all_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ]
    .into_iter()
    .filter_map(|name| Some((name.to_owned(), std::env::var(name).ok()?)))
    .collect()
}

/// A new agent of `kind`. Its pool keeps as many idle connections to a host
/// as the process may have in flight to it.
fn make(kind: &AgentKind) -> Result<Agent, Error> {
    let proxy = match kind.proxy_env {
        Some(_) => ureq::Proxy::try_from_env(),
        None => None,
    };
    refuse_socks(proxy.as_ref())?;
    let mut config = Agent::config_builder()
        .proxy(proxy)
        .max_idle_connections_per_host(process::CONNECTIONS_PER_ORIGIN)
        .max_idle_connections(process::IDLE_CONNECTIONS);
    if let Some(roots) = root_certs(&kind.extra_roots)? {
        config = config.tls_config(TlsConfig::builder().root_certs(roots).build());
    }
    Ok(Agent::with_parts(
        config.build(),
        connector(),
        super::tcp::StoppableResolver,
    ))
}

/// ureq's connector chain (an HTTP CONNECT proxy if one is set, TCP, TLS),
/// with the connect and the plain connection's waits made stoppable
/// beneath TLS. A SOCKS proxy never reaches it ([`refuse_socks`]).
fn connector() -> impl ureq::unversioned::transport::Connector {
    use ureq::unversioned::transport::{ConnectProxyConnector, Connector, RustlsConnector};
    ().chain(ConnectProxyConnector::default())
        .chain(super::tcp::StoppableTcpConnector)
        .chain(super::stoppable::StoppableConnector)
        .chain(RustlsConnector::default())
}

/// A SOCKS proxy is an error: without a SOCKS connector ureq would send
/// the requests straight to the server, past a proxy the user may rely on.
fn refuse_socks(proxy: Option<&ureq::Proxy>) -> Result<(), Error> {
    use ureq::ProxyProtocol as P;
    match proxy {
        Some(p)
            if matches!(
                p.protocol(),
                P::Socks4 | P::Socks4A | P::Socks5 | P::Socks5h
            ) =>
        {
            Err(invalid(&format!(
                "the proxy in the environment (ALL_PROXY, HTTPS_PROXY or HTTP_PROXY) is a \
                 {:?} proxy at {}, which remfile does not speak: use an HTTP(S) proxy, or \
                 turn proxy_from_env off",
                p.protocol(),
                p.host()
            )))
        }
        _ => Ok(()),
    }
}

/// The Mozilla roots plus the certificates in `extra` (PEM), if any: ureq
/// can only replace its root store, not add to it.
fn root_certs(extra: &[Vec<u8>]) -> Result<Option<RootCerts>, Error> {
    if extra.is_empty() {
        return Ok(None);
    }
    let mut roots: Vec<Certificate<'static>> = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|der| Certificate::from_der(der.as_ref()).to_owned())
        .collect();
    for pem in extra {
        let before = roots.len();
        for item in ureq::tls::parse_pem(pem) {
            match item {
                Ok(PemItem::Certificate(cert)) => roots.push(cert),
                Ok(_) => {}
                Err(_) => {
                    return Err(invalid(
                        "add_root_certificates: the PEM data could not be parsed",
                    ));
                }
            }
        }
        if roots.len() == before {
            return Err(invalid(
                "add_root_certificates: no certificate in the PEM data",
            ));
        }
    }
    Ok(Some(RootCerts::new_with_certs(&roots)))
}

fn invalid(message: &str) -> Error {
    Error::new(ErrorKind::InvalidConfig, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(extra_roots: &[Vec<u8>]) -> AgentSettings<'_> {
        AgentSettings {
            given: None,
            extra_roots,
            proxy_from_env: false,
        }
    }

    #[test]
    fn a_socks_proxy_is_refused_not_bypassed() {
        for url in [
            "socks5://127.0.0.1:1080",
            "socks4://proxy:1080",
            "socks5h://p:9",
        ] {
            let proxy = ureq::Proxy::new(url).unwrap();
            let e = refuse_socks(Some(&proxy)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
            assert!(e.to_string().contains("HTTP(S) proxy"), "{e}");
        }
        let http = ureq::Proxy::new("http://user:secret@proxy:3128").unwrap();
        assert!(refuse_socks(Some(&http)).is_ok());
        assert!(refuse_socks(None).is_ok());
    }

    #[test]
    fn pem_data_without_a_certificate_is_refused() {
        for pem in [b"not pem at all".to_vec(), Vec::new()] {
            let e = agent(&settings(&[pem])).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        }
    }

    #[test]
    fn roots_cannot_be_added_to_a_callers_agent() {
        let mine: Agent = Agent::config_builder().build().new_agent();
        let pem = [b"x".to_vec()];
        let s = AgentSettings {
            given: Some(&mine),
            ..settings(&pem)
        };
        assert_eq!(agent(&s).unwrap_err().kind(), ErrorKind::InvalidConfig);
        assert!(agent(&settings(&[])).is_ok());
    }
}
