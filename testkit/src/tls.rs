//! An HTTPS range server with a certificate authority made by the test.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::{Reply, Req, range_reply, read_head};

/// A CA and a server certificate for 127.0.0.1 and localhost signed by it.
pub struct TestPki {
    /// The CA's certificate (PEM), for the client to trust.
    pub ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

impl TestPki {
    /// A new CA, and a server certificate signed by it.
    // Each call makes new keys: no value is a default one.
    #[allow(clippy::new_without_default)]
    pub fn new() -> TestPki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "remfile test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        TestPki {
            ca_pem: ca.pem(),
            server: Arc::new(server),
        }
    }
}

type Hook = dyn Fn(&Req) -> Option<Reply> + Send + Sync;

/// Serves `data` over HTTPS; a hook may answer a request instead.
pub struct TlsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

impl TlsServer {
    /// Starts serving `data` on 127.0.0.1 with `pki`'s server certificate;
    /// `hook` answers a request in place of the range server if it returns
    /// a reply.
    pub fn new(
        pki: &TestPki,
        data: Vec<u8>,
        hook: impl Fn(&Req) -> Option<Reply> + Send + Sync + 'static,
    ) -> TlsServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let data = Arc::new(data);
        let hook: Arc<Hook> = Arc::new(hook);
        let config = pki.server.clone();
        let (st, rq, cn) = (stop.clone(), requests.clone(), connections.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        let conn = cn.fetch_add(1, Ordering::SeqCst) + 1;
                        let (config, data, hook, rq) =
                            (config.clone(), data.clone(), hook.clone(), rq.clone());
                        std::thread::spawn(move || serve(tcp, config, conn, &data, &*hook, &rq));
                    }
                    Err(_) => {
                        crate::time::wait_for(Duration::from_millis(2), || {
                            st.load(Ordering::SeqCst)
                        });
                    }
                }
            }
        });
        TlsServer {
            addr,
            stop,
            requests,
            connections,
        }
    }

    /// The URL of `path` on the server.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    /// Requests served so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(
    tcp: TcpStream,
    config: Arc<rustls::ServerConfig>,
    conn: usize,
    data: &[u8],
    hook: &Hook,
    requests: &AtomicUsize,
) {
    tcp.set_nonblocking(false).ok();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let Ok(session) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(session, tcp);
    while let Some(head) = read_head(&mut tls) {
        let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
        let req = Req::from_head(n, conn, &head);
        let reply = hook(&req).unwrap_or_else(|| range_reply(data, Some("\"tls-v1\""), None, &req));
        if tls
            .write_all(&reply.to_bytes())
            .and_then(|()| tls.flush())
            .is_err()
        {
            return;
        }
    }
}
