//! HTTPS against a local TLS server whose certificate a CA made by the test
//! signed: trusted through `add_root_certificates`, refused without it, and
//! `https_only` enforced for URLs and redirects.

use remfile::ErrorKind;
use remfile_testkit::tls::{TestPki, TlsServer};
use remfile_testkit::{RangeServer, Reply, builder, test_data};

const MIB: u64 = 1024 * 1024;

#[test]
fn https_with_an_extra_root_reads_the_right_bytes_over_one_connection() {
    let pki = TestPki::new();
    let data = test_data(5 * MIB as usize + 9, 1);
    let server = TlsServer::new(&pki, data.clone(), |_| None);
    let file = builder()
        .add_root_certificates(pki.ca_pem.clone())
        .https_only(true)
        .read_ahead_max(0)
        .open(server.url("/secure.bin"))
        .unwrap();
    assert_eq!(file.len(), data.len() as u64);
    assert_eq!(file.etag(), Some("\"tls-v1\""));
    let mut buf = vec![0u8; 100_000];
    for k in 1..5u64 {
        file.read_exact_at(k * MIB - 50, &mut buf).unwrap();
        assert!(buf == data[(k * MIB - 50) as usize..][..buf.len()]);
    }
    assert_eq!(server.requests() as u64, file.stats().requests);
    assert_eq!(server.connections(), 1, "the TLS connection is reused");
}

#[test]
fn an_unknown_certificate_authority_is_refused_at_once() {
    let pki = TestPki::new();
    let server = TlsServer::new(&pki, test_data(1000, 2), |_| None);
    let e = builder().open(server.url("/secure.bin")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network, "{e}");
    assert!(e.to_string().contains("TLS"), "{e}");
    assert_eq!(e.attempts(), 1, "a certificate error is not retried");
    assert!(!e.is_retryable(), "and a caller is told not to retry it");
    assert_eq!(server.requests(), 0);
    // Another CA's certificate does not help.
    let other = TestPki::new();
    let e = builder()
        .add_root_certificates(other.ca_pem.clone())
        .open(server.url("/secure.bin"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network, "{e}");
}

#[test]
fn bad_root_certificates_are_a_configuration_error() {
    for pem in [b"not a certificate".to_vec(), Vec::new()] {
        let e = builder()
            .add_root_certificates(pem)
            .open("https://127.0.0.1:9/x")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    }
    let agent = ureq::Agent::new_with_defaults();
    let e = builder()
        .agent(agent)
        .add_root_certificates(TestPki::new().ca_pem)
        .open("https://127.0.0.1:9/x")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
}

#[test]
fn https_only_refuses_plain_http_and_redirects_to_it() {
    let plain = RangeServer::new(test_data(1000, 3));
    let e = builder()
        .https_only(true)
        .open(plain.url("/f"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl);
    assert_eq!(plain.requests(), 0);

    let pki = TestPki::new();
    let target = plain.url("/f");
    let server = TlsServer::new(&pki, Vec::new(), move |_| {
        Some(Reply::redirect(302, &target))
    });
    let e = builder()
        .add_root_certificates(pki.ca_pem.clone())
        .https_only(true)
        .open(server.url("/start"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUrl, "{e}");
    assert_eq!(
        plain.requests(),
        0,
        "the plain HTTP target was never contacted"
    );
    // Without https_only the downgrade is still refused, unless allowed.
    let e = builder()
        .add_root_certificates(pki.ca_pem.clone())
        .open(server.url("/start"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Redirect, "{e}");
    assert!(e.to_string().contains("allow_redirect_to_http"), "{e}");
    assert_eq!(plain.requests(), 0);
    let file = builder()
        .add_root_certificates(pki.ca_pem)
        .allow_redirect_to_http(true)
        .open(server.url("/start"))
        .unwrap();
    assert_eq!(file.len(), 1000);
    let mut buf = [0; 10];
    file.read_exact_at(990, &mut buf).unwrap();
    assert_eq!(buf, test_data(1000, 3)[990..]);
}

#[test]
fn files_trusting_the_same_roots_share_connections_and_others_do_not() {
    let pki = TestPki::new();
    let other = TestPki::new();
    let server = TlsServer::new(&pki, test_data(MIB as usize, 2), |_| None);
    let open = |roots: &[&str], path: &str| {
        let mut b = builder();
        for pem in roots {
            b = b.add_root_certificates(pem.as_bytes().to_vec());
        }
        b.open(server.url(path)).unwrap()
    };
    let _a = open(&[&pki.ca_pem], "/a.bin");
    let _b = open(&[&pki.ca_pem], "/b.bin");
    assert_eq!(server.connections(), 1, "one pool for files of one kind");
    let _c = open(&[&pki.ca_pem, &other.ca_pem], "/c.bin");
    assert_eq!(server.connections(), 2, "other roots, another pool");
}
