//! `s3://` URLs: requests signed in headers (SigV4) against a server that
//! checks them (`s3s-fs`), each link of the credential chain with test
//! servers for STS, container and instance credentials, keys renewed before
//! they expire, a bucket's region learnt from S3's answers, anonymous and
//! requester-pays requests.
//!
//! The chain reads the process's environment, so every test here holds
//! [`ENV`] and sets the variables it needs.

#![cfg(feature = "s3")]

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use parking_lot::{Mutex, MutexGuard};
use remfile::{ErrorKind, RemoteFile, S3Options};
use remfile_testkit::s3::{ACCESS_KEY, BUCKET, S3Server, SECRET_KEY};
use remfile_testkit::{After, RangeServer, RawServer, Reply, Req, TempDir, builder, test_data};

const MIB: u64 = 1024 * 1024;

static ENV: Mutex<()> = Mutex::new(());

/// Every variable the chain reads.
const AWS_VARS: [&str; 19] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
];

/// Holds the environment for one test: no AWS variable but those given,
/// no shared files, no instance metadata unless the test sets its endpoint.
fn environment(vars: &[(&str, &str)]) -> MutexGuard<'static, ()> {
    let guard = ENV.lock();
    // SAFETY: every test of this binary that reads or writes the
    // environment holds `ENV`.
    unsafe {
        for name in AWS_VARS {
            std::env::remove_var(name);
        }
        std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials");
        std::env::set_var("AWS_CONFIG_FILE", "/nonexistent/config");
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        for (name, value) in vars {
            std::env::set_var(name, value);
        }
    }
    guard
}

fn signed_by_s3s() -> S3Options {
    S3Options::new().credentials(ACCESS_KEY, SECRET_KEY, None)
}

fn url(key: &str) -> String {
    format!("s3://{BUCKET}/{key}")
}

fn read_all(file: &RemoteFile) -> Vec<u8> {
    let mut buf = vec![0u8; file.len() as usize];
    file.read_exact_at(0, &mut buf).unwrap();
    buf
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn signed_requests_read_the_object_and_open_in_one_request() {
    let _env = environment(&[]);
    let s3 = S3Server::start();
    let data = test_data(5 * MIB as usize + 13, 11);
    s3.put("data.bin", &data);
    let opts = signed_by_s3s().endpoint(s3.endpoint());
    let file = builder()
        .s3(opts.clone())
        .read_ahead_max(0)
        .open(url("data.bin"))
        .unwrap();
    assert_eq!(file.stats().requests, 1, "one request to open");
    assert_eq!(file.len(), data.len() as u64);
    let mut buf = vec![0u8; 1_500_000];
    for pos in [0, 2 * MIB - 7, 4 * MIB] {
        let n = file.read_at(pos, &mut buf).unwrap();
        assert!(buf[..n] == data[pos as usize..][..n], "at {pos}");
    }
    assert!(read_all(&file) == data);
    for shown in [format!("{file:?}"), format!("{:?}", builder().s3(opts))] {
        assert!(
            !shown.contains(SECRET_KEY) && !shown.contains(ACCESS_KEY),
            "{shown}"
        );
    }
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn a_wrong_secret_is_permission_denied_after_one_attempt_naming_no_key() {
    let _env = environment(&[]);
    let s3 = S3Server::start();
    s3.put("t.bin", b"secret bytes");
    let wrong = "not-the-secret-key-at-all-0000000000";
    let opts = S3Options::new().credentials(ACCESS_KEY, wrong, Some("a-session-token".into()));
    let e = builder()
        .s3(opts.endpoint(s3.endpoint()))
        .open(url("t.bin"))
        .unwrap_err();
    assert_eq!(e.io_kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    assert_eq!(e.attempts(), 1, "no retry of a refusal: {e}");
    for shown in [e.to_string(), format!("{e:?}")] {
        for secret in [
            wrong,
            ACCESS_KEY,
            SECRET_KEY,
            "a-session-token",
            "Signature=",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
    assert!(e.to_string().contains("s3://bucket/t.bin"), "{e}");
    assert!(
        e.to_string().contains("refused these AWS credentials"),
        "{e}"
    );
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn keys_and_endpoint_from_the_environment_sign_ranges_and_revalidations() {
    let s3 = S3Server::start();
    let endpoint = s3.endpoint();
    let _env = environment(&[
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
        ("AWS_ENDPOINT_URL_S3", &endpoint),
    ]);
    let data = test_data(3 * MIB as usize, 12);
    s3.put("env.bin", &data);
    let dir = TempDir::new("s3-signed-disk");
    let open = || {
        builder()
            .block_size(256 * 1024)
            .disk_cache(remfile::DiskCache::open(&*dir, 64 * MIB).unwrap())
            .open(url("env.bin"))
            .unwrap()
    };
    let first = open();
    assert!(read_all(&first) == data);
    drop(first);
    // Opened again: a conditional request (If-None-Match), signed too.
    let warm = open();
    assert_eq!(warm.stats().requests, 1, "{:?}", warm.stats());
    assert!(read_all(&warm) == data);
    assert_eq!(
        warm.stats().requests,
        1,
        "served from disk: {:?}",
        warm.stats()
    );
    // What the disk keeps names the object by digests only: neither its
    // keys nor its name in clear.
    let entries = walk(&dir);
    assert!(!entries.is_empty());
    for entry in entries {
        let bytes = std::fs::read(&entry).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(ACCESS_KEY) && !text.contains(SECRET_KEY),
            "{entry:?}"
        );
        assert!(!text.contains("env.bin"), "the object's name in {entry:?}");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn a_profile_gives_keys_and_region() {
    let s3 = S3Server::start();
    let dir = TempDir::new("s3-profile");
    std::fs::create_dir_all(&*dir).unwrap();
    let credentials = dir.join("credentials");
    let config = dir.join("config");
    std::fs::write(&credentials, format!("[default]\naws_access_key_id = WRONG\naws_secret_access_key = wrong\n\n[lab]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")).unwrap();
    std::fs::write(&config, "[profile lab]\nregion = eu-west-3\n[profile admin]\nrole_arn = arn:aws:iam::123456789012:role/admin\nsource_profile = lab\n").unwrap();
    let endpoint = s3.endpoint();
    let (c, k) = (
        credentials.display().to_string(),
        config.display().to_string(),
    );
    let _env = environment(&[
        ("AWS_SHARED_CREDENTIALS_FILE", &c),
        ("AWS_CONFIG_FILE", &k),
        ("AWS_PROFILE", "lab"),
        ("AWS_ENDPOINT_URL", &endpoint),
    ]);
    let data = test_data(MIB as usize + 5, 13);
    s3.put("profile.bin", &data);
    let file = builder().open(url("profile.bin")).unwrap();
    assert!(read_all(&file) == data);
    // The profile chosen by option; a profile that assumes a role is refused
    // with words that say so.
    let e = builder()
        .s3(S3Options::new().profile("admin"))
        .open(url("profile.bin"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Credentials, "{e}");
    assert!(
        e.to_string().contains("role_arn") && e.to_string().contains("does not support"),
        "{e}"
    );
    let e = builder()
        .s3(S3Options::new().profile("default"))
        .open(url("profile.bin"))
        .unwrap_err();
    assert_eq!(e.io_kind(), std::io::ErrorKind::PermissionDenied, "{e}");
}

/// A credential service answering with the s3s-fs keys and a numbered
/// session token; counts its requests and keeps their heads.
struct CredentialServer {
    server: RawServer,
    log: Arc<Mutex<Vec<Req>>>,
}

impl CredentialServer {
    fn new(answer: impl Fn(&Req, usize) -> Reply + Send + Sync + 'static) -> CredentialServer {
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let count = AtomicUsize::new(0);
        let server = RawServer::new(move |req, out| {
            seen.lock().push(req.clone());
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let _ = out.write_all(&answer(req, n).to_bytes());
            // A POST's body is not read: the connection cannot go on.
            After::Close
        });
        CredentialServer { server, log }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    fn requests(&self) -> Vec<Req> {
        self.log.lock().clone()
    }
}

fn rfc3339(t: SystemTime) -> String {
    let whole = t - std::time::Duration::from_nanos(u64::from(
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos(),
    ));
    aws_smithy_types::DateTime::from(whole)
        .fmt(aws_smithy_types::date_time::Format::DateTime)
        .unwrap()
}

fn sts_answer(token: &str, expires: SystemTime) -> Reply {
    Reply::new(200)
        .header("content-type", "text/xml")
        .body(format!(
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
         <AccessKeyId>{ACCESS_KEY}</AccessKeyId><SecretAccessKey>{SECRET_KEY}</SecretAccessKey>\
         <SessionToken>{token}</SessionToken><Expiration>{}</Expiration></Credentials>\
         </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
            rfc3339(expires)
        ))
}

fn json_answer(token: &str, expires: SystemTime) -> Reply {
    Reply::new(200).header("content-type", "application/json").body(format!(
        r#"{{"Code":"Success","AccessKeyId":"{ACCESS_KEY}","SecretAccessKey":"{SECRET_KEY}","Token":"{token}","Expiration":"{}"}}"#,
        rfc3339(expires)
    ))
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn a_web_identity_token_is_exchanged_at_sts() {
    let s3 = S3Server::start();
    let sts = CredentialServer::new(|_, n| {
        sts_answer(
            &format!("sts-token-{n}"),
            SystemTime::now() + Duration::from_secs(3600),
        )
    });
    let dir = TempDir::new("s3-web-identity");
    std::fs::create_dir_all(&*dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "eyJ.web-identity.token\n").unwrap();
    let (endpoint, sts_url, token_path) = (
        s3.endpoint(),
        sts.url("/"),
        token_file.display().to_string(),
    );
    let _env = environment(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", &token_path),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader"),
        ("AWS_ENDPOINT_URL_STS", &sts_url),
        ("AWS_ENDPOINT_URL", &endpoint),
    ]);
    let data = test_data(2 * MIB as usize, 14);
    s3.put("wi.bin", &data);
    let file = builder().open(url("wi.bin")).unwrap();
    assert!(read_all(&file) == data);
    let again = builder().open(url("wi.bin")).unwrap();
    assert!(read_all(&again) == data);
    let asked = sts.requests();
    assert_eq!(asked.len(), 1, "one exchange for the process: {asked:?}");
    assert_eq!(asked[0].method, "POST");
    assert!(
        asked[0].query.is_none(),
        "the token travels in the body, not the URL"
    );
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn container_credentials_are_asked_with_their_token() {
    let s3 = S3Server::start();
    let service = CredentialServer::new(|_, n| {
        json_answer(
            &format!("container-token-{n}"),
            SystemTime::now() + Duration::from_secs(3600),
        )
    });
    let (endpoint, full) = (s3.endpoint(), service.url("/v2/credentials/abc"));
    let _env = environment(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-identity-token"),
        ("AWS_ENDPOINT_URL", &endpoint),
    ]);
    let data = test_data(MIB as usize, 15);
    s3.put("c.bin", &data);
    let file = builder().open(url("c.bin")).unwrap();
    assert!(read_all(&file) == data);
    let asked = service.requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].path, "/v2/credentials/abc");
    assert_eq!(asked[0].header("authorization"), Some("pod-identity-token"));
}

#[test]
#[ignore = "needs s3s-fs: bash .ci/run installs it; then cargo test --test s3_signed -- --ignored"]
fn instance_metadata_is_asked_for_a_session_token_first() {
    let s3 = S3Server::start();
    let imds = CredentialServer::new(|req, n| match (req.method.as_str(), req.path.as_str()) {
        ("PUT", "/latest/api/token") => Reply::new(200).body("imds-session"),
        (_, _) if req.header("x-aws-ec2-metadata-token") != Some("imds-session") => Reply::new(401),
        ("GET", "/latest/meta-data/iam/security-credentials/") => {
            Reply::new(200).body("reader-role\n")
        }
        ("GET", "/latest/meta-data/iam/security-credentials/reader-role") => json_answer(
            &format!("imds-token-{n}"),
            SystemTime::now() + Duration::from_secs(3600),
        ),
        _ => Reply::new(404),
    });
    let (endpoint, imds_url) = (s3.endpoint(), imds.url(""));
    let _env = environment(&[
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds_url),
        ("AWS_ENDPOINT_URL", &endpoint),
    ]);
    // SAFETY: the environment is held.
    unsafe { std::env::remove_var("AWS_EC2_METADATA_DISABLED") };
    let data = test_data(MIB as usize, 16);
    s3.put("i.bin", &data);
    let file = builder().open(url("i.bin")).unwrap();
    assert!(read_all(&file) == data);
    let asked: Vec<_> = imds
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        asked,
        [
            "PUT /latest/api/token",
            "GET /latest/meta-data/iam/security-credentials/",
            "GET /latest/meta-data/iam/security-credentials/reader-role"
        ]
    );
}

/// A server that answers like S3 (and MinIO) for a bucket in `eu-west-3`:
/// every answer names the bucket's region, requests signed for another
/// region are refused, and session tokens must be ones `valid` accepts.
fn fake_s3(
    data: Vec<u8>,
    valid: impl Fn(Option<&str>) -> bool + Send + Sync + 'static,
) -> RangeServer {
    RangeServer::new(data).with_hook(move |req, reply| {
        let auth = req.header("authorization").unwrap_or_default();
        if !auth.is_empty() && !auth.contains("/eu-west-3/s3/aws4_request") {
            return Reply::new(400)
                .header("x-amz-bucket-region", "eu-west-3")
                .body("<Error><Code>AuthorizationHeaderMalformed</Code><Region>eu-west-3</Region></Error>");
        }
        let reply = if valid(req.header("x-amz-security-token")) {
            reply
        } else {
            Reply::new(400).body("<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>")
        };
        reply.header("x-amz-bucket-region", "eu-west-3")
    })
}

#[test]
fn a_bucket_in_another_region_is_found_without_a_region_given() {
    let _env = environment(&[]);
    let data = test_data(MIB as usize + 100, 17);
    let server = fake_s3(data.clone(), |_| true);
    let opts = S3Options::new()
        .credentials("AKIAREGION", "secret", None)
        .endpoint(server.url(""));
    let file = builder().s3(opts.clone()).open(url("far.bin")).unwrap();
    assert!(read_all(&file) == data);
    let log = server.log();
    assert!(
        log[0]
            .header("authorization")
            .unwrap()
            .contains("/us-east-1/"),
        "{:?}",
        log[0]
    );
    assert!(
        log[1]
            .header("authorization")
            .unwrap()
            .contains("/eu-west-3/"),
        "{:?}",
        log[1]
    );
    assert_eq!(file.stats().retries, 0, "a move is no retry");
    // Remembered for the process: the next file of the bucket goes there first.
    let before = server.requests();
    let next = builder().s3(opts).open(url("other.bin")).unwrap();
    assert_eq!(server.requests() - before, 1);
    assert!(read_all(&next) == data);
    // A 301 naming the region, as S3's PermanentRedirect does, moves too.
    let moved = RangeServer::new(data.clone()).with_hook(|req, reply| {
        if req
            .header("authorization")
            .is_some_and(|a| !a.contains("/ap-south-1/"))
        {
            return Reply::new(301)
                .header("x-amz-bucket-region", "ap-south-1")
                .body("<Error><Code>PermanentRedirect</Code></Error>");
        }
        reply
    });
    let opts = S3Options::new()
        .credentials("AKIAREGION", "secret", None)
        .endpoint(moved.url(""));
    let file = builder().s3(opts).open(url("far.bin")).unwrap();
    assert!(read_all(&file) == data);
    assert_eq!(
        moved.log()[0]
            .header("authorization")
            .map(|a| a.contains("/us-east-1/")),
        Some(true)
    );
}

#[test]
fn a_bucket_in_another_region_opens_with_its_tail_fetched_beside() {
    // The first block and the tail go at once, both to the wrong region:
    // both are sent again where the bucket is.
    let _env = environment(&[("AWS_DEFAULT_REGION", "us-east-1")]);
    let data = test_data(3 * MIB as usize, 22);
    let server = fake_s3(data.clone(), |_| true);
    let opts = S3Options::new()
        .credentials("AKIATAIL", "secret", None)
        .endpoint(server.url(""));
    for _ in 0..5 {
        let file = builder()
            .s3(opts.clone())
            .open_tail(MIB)
            .open(url("tail.bin"))
            .unwrap();
        assert!(read_all(&file) == data);
    }
    // Learnt once: the later opens go to the bucket's region at once, though
    // AWS_DEFAULT_REGION names another.
    let refused = server
        .log()
        .iter()
        .filter(|r| !r.header("authorization").unwrap().contains("/eu-west-3/"))
        .count();
    assert!(refused <= 2, "{refused} requests to the wrong region");
}

#[test]
fn anonymous_access_needs_no_readable_profile() {
    let _env = environment(&[("AWS_PROFILE", "missing")]);
    let data = test_data(100_000, 23);
    let public = RangeServer::new(data.clone());
    let opts = S3Options::new().anonymous(true).endpoint(public.url(""));
    let file = builder().s3(opts).open(url("public.bin")).unwrap();
    assert!(read_all(&file) == data);
    let e = builder()
        .s3(S3Options::new().endpoint(public.url("")))
        .open(url("public.bin"))
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Credentials,
        "the profile asked for is missing: {e}"
    );
}

#[test]
fn a_failed_renewal_keeps_keys_that_still_work() {
    // The service answers once, then fails: keys that live 6 to 7 s (the
    // expiry is in whole seconds) are due for renewal after 3, and are used
    // until they expire.
    let service = CredentialServer::new(|_, n| {
        if n == 1 {
            json_answer("only-token", SystemTime::now() + Duration::from_secs(7))
        } else {
            Reply::new(500)
        }
    });
    let data = test_data(MIB as usize, 24);
    let store = fake_s3(data.clone(), |t| t == Some("only-token"));
    let (full, endpoint) = (service.url("/creds"), store.url(""));
    let _env = environment(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full),
        ("AWS_ENDPOINT_URL", &endpoint),
        ("AWS_REGION", "eu-west-3"),
    ]);
    let file = builder()
        .block_size(64 * 1024)
        .read_ahead_max(0)
        .open(url("keep.bin"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(3600));
    let mut buf = vec![0u8; 200_000];
    file.read_exact_at(500_000, &mut buf).unwrap();
    assert!(buf == data[500_000..700_000]);
    assert_eq!(
        service.requests().len(),
        2,
        "renewal tried once, then rested"
    );
}

#[test]
fn temporary_keys_that_expire_mid_file_are_renewed_and_the_read_goes_on() {
    // STS gives keys that live 4 s; the store refuses a token past its expiry.
    let issued: Arc<Mutex<Vec<(String, SystemTime)>>> = Arc::default();
    let book = issued.clone();
    let sts = CredentialServer::new(move |_, n| {
        let expires = SystemTime::now() + Duration::from_secs(4);
        let token = format!("short-token-{n}");
        book.lock().push((token.clone(), expires));
        sts_answer(&token, expires)
    });
    let valid_book = issued.clone();
    let data = test_data(4 * MIB as usize, 18);
    let refusals = Arc::new(AtomicUsize::new(0));
    let refused = refusals.clone();
    let store = fake_s3(data.clone(), move |token| {
        let book = valid_book.lock();
        let ok = token.is_some_and(|t| {
            book.iter()
                .any(|(issued, expires)| issued == t && SystemTime::now() < *expires)
        });
        if !ok {
            refused.fetch_add(1, Ordering::SeqCst);
        }
        ok
    });
    let dir = TempDir::new("s3-renew");
    std::fs::create_dir_all(&*dir).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, "web-identity").unwrap();
    let (sts_url, token_path, endpoint) = (
        sts.url("/"),
        token_file.display().to_string(),
        store.url(""),
    );
    let _env = environment(&[
        ("AWS_WEB_IDENTITY_TOKEN_FILE", &token_path),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/short"),
        ("AWS_ROLE_SESSION_NAME", "renewal-test"),
        ("AWS_ENDPOINT_URL_STS", &sts_url),
        ("AWS_ENDPOINT_URL", &endpoint),
        ("AWS_REGION", "eu-west-3"),
    ]);
    let file = builder()
        .block_size(256 * 1024)
        .read_ahead_max(0)
        .open(url("renew.bin"))
        .unwrap();
    let mut buf = vec![0u8; MIB as usize];
    for (i, pos) in [0, MIB, 2 * MIB, 3 * MIB].into_iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(1500));
        }
        file.read_exact_at(pos, &mut buf).unwrap();
        assert!(buf == data[pos as usize..][..buf.len()], "at {pos}");
    }
    assert_eq!(
        refusals.load(Ordering::SeqCst),
        0,
        "no request went out with expired keys"
    );
    assert!(
        store
            .log()
            .iter()
            .all(|r| r.header("x-amz-security-token").is_some())
    );
    assert!(
        sts.requests().len() >= 2,
        "renewed: {} exchanges",
        sts.requests().len()
    );
    assert_eq!(
        file.stats().retries,
        0,
        "renewed ahead of expiry, not after a refusal"
    );
}

#[test]
fn keys_refused_as_expired_are_renewed_once() {
    let counter = Arc::new(AtomicUsize::new(0));
    let c = counter.clone();
    let service = CredentialServer::new(move |_, n| {
        c.store(n, Ordering::SeqCst);
        json_answer(
            &format!("token-{n}"),
            SystemTime::now() + Duration::from_secs(3600),
        )
    });
    let data = test_data(MIB as usize, 19);
    // The first token is revoked early: only the second is good.
    let store = fake_s3(data.clone(), |t| t == Some("token-2"));
    let (full, endpoint) = (service.url("/creds"), store.url(""));
    let _env = environment(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full),
        ("AWS_ENDPOINT_URL", &endpoint),
        ("AWS_REGION", "eu-west-3"),
    ]);
    let file = builder().open(url("revoked.bin")).unwrap();
    assert!(read_all(&file) == data);
    assert_eq!(counter.load(Ordering::SeqCst), 2);
}

#[test]
fn refusals_that_name_the_region_in_use_are_answers() {
    let _env = environment(&[]);
    // Every answer names the region, as MinIO's do: a refused signature is
    // still one attempt, with the hint.
    let denied = RangeServer::new(b"x".to_vec()).with_hook(|_, _| {
        Reply::new(403)
            .header("x-amz-bucket-region", "eu-west-3")
            .body("<Error><Code>SignatureDoesNotMatch</Code></Error>")
    });
    let opts = S3Options::new()
        .credentials("AKIADENIED", "wrong", None)
        .region("eu-west-3")
        .endpoint(denied.url(""));
    let e = builder().s3(opts).open(url("d.bin")).unwrap_err();
    assert_eq!(e.attempts(), 1, "{e}");
    assert_eq!(denied.requests(), 1);
    assert!(
        e.to_string().contains("refused these AWS credentials"),
        "{e}"
    );
}

#[test]
fn a_store_refusing_every_token_costs_one_renewal() {
    let service = CredentialServer::new(|_, n| {
        json_answer(
            &format!("never-good-{n}"),
            SystemTime::now() + Duration::from_secs(3600),
        )
    });
    let store = fake_s3(b"data".to_vec(), |_| false);
    let (full, endpoint) = (service.url("/creds"), store.url(""));
    let _env = environment(&[
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &full),
        ("AWS_ENDPOINT_URL", &endpoint),
        ("AWS_REGION", "eu-west-3"),
    ]);
    let e = builder().open(url("never.bin")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::HttpStatus(400), "{e}");
    assert_eq!(e.attempts(), 2, "one renewal: {e}");
    assert_eq!(service.requests().len(), 2);
    assert!(!e.to_string().contains("never-good"), "{e}");
}

#[test]
fn anonymous_and_requester_pays_requests() {
    let _env = environment(&[]);
    let data = test_data(300_000, 20);
    let public = RangeServer::new(data.clone());
    let opts = S3Options::new().anonymous(true).endpoint(public.url(""));
    let file = builder().s3(opts).open(url("public.bin")).unwrap();
    assert!(read_all(&file) == data);
    assert!(
        public
            .log()
            .iter()
            .all(|r| r.header("authorization").is_none())
    );
    assert!(
        public
            .log()
            .iter()
            .all(|r| r.header("x-amz-request-payer").is_none())
    );

    // Nothing in the chain: unsigned too; a refusal says how to give keys.
    let private = RangeServer::new(data.clone()).with_hook(|req, reply| {
        if req.header("authorization").is_none() {
            Reply::new(403).body("<Error><Code>AccessDenied</Code></Error>")
        } else {
            reply
        }
    });
    let e = builder()
        .s3(S3Options::new().endpoint(private.url("")))
        .open(url("p.bin"))
        .unwrap_err();
    assert_eq!(e.io_kind(), std::io::ErrorKind::PermissionDenied);
    assert!(
        e.to_string().contains("no AWS credentials were found"),
        "{e}"
    );
    assert!(e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");

    let pays = S3Options::new()
        .requester_pays(true)
        .credentials("AKIAPAYER", "secret", None)
        .region("eu-west-3")
        .endpoint(private.url(""));
    let file = builder().s3(pays).open(url("p.bin")).unwrap();
    assert!(read_all(&file) == data);
    let last = private.log().pop().unwrap();
    assert_eq!(last.header("x-amz-request-payer"), Some("requester"));
    assert!(
        last.header("authorization")
            .unwrap()
            .contains("x-amz-request-payer"),
        "signed"
    );
}

#[test]
fn retried_requests_are_signed_again() {
    let _env = environment(&[]);
    let data = test_data(200_000, 21);
    let flaky = RangeServer::new(data.clone())
        .with_hook(|req, reply| if req.n == 1 { Reply::new(503) } else { reply });
    let opts = S3Options::new()
        .credentials("AKIARETRY", "secret", None)
        .region("eu-west-3")
        .endpoint(flaky.url(""));
    let file = builder().s3(opts).open(url("flaky.bin")).unwrap();
    assert!(read_all(&file) == data);
    let log = flaky.log();
    assert!(
        log.len() >= 2
            && log
                .iter()
                .all(|r| r.header("authorization").is_some() && r.header("x-amz-date").is_some())
    );
}

#[test]
fn bad_s3_urls_and_options_are_refused_before_any_request() {
    let _env = environment(&[]);
    for bad in ["s3://bucket", "s3://b/../k", "s3:///key"] {
        assert_eq!(
            builder().open(bad).unwrap_err().kind(),
            ErrorKind::InvalidUrl,
            "{bad}"
        );
    }
    let e = builder()
        .s3(S3Options::new().region("Not A Region"))
        .open(url("k"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    let e = builder()
        .s3(S3Options::new().endpoint("ftp://x"))
        .open(url("k"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    let e = builder()
        .header("Authorization", "Bearer x")
        .open(url("k"))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
}

#[test]
fn a_refusal_echoing_the_keys_shows_none_of_them() {
    let _env = environment(&[]);
    const KEY_ID: &str = "EXAMPLEKEYID0001";
    const SECRET: &str = "echoed/secret+key=value0001";
    const TOKEN: &str = "echoed-session-token-0001";
    // A store that quotes the keys in its own words, under no name a rule
    // knows, as they are and percent-encoded.
    let store = RangeServer::new(b"x".to_vec()).with_hook(|_, _| {
        Reply::new(403).body(format!(
            "<Error><Code>AccessDenied</Code><Message>key {KEY_ID} with \
             echoed%2Fsecret%2Bkey%3Dvalue0001 and {TOKEN} refused</Message></Error>"
        ))
    });
    let opts = S3Options::new()
        .credentials(KEY_ID, SECRET, Some(TOKEN.into()))
        .region("eu-west-3")
        .endpoint(store.url(""));
    let e = builder().s3(opts).open(url("k.bin")).unwrap_err();
    assert_eq!(e.status(), Some(403), "{e}");
    let io: std::io::Error = e.clone().into();
    let excerpt = e.body_excerpt().unwrap_or_default().to_owned();
    for shown in [e.to_string(), format!("{e:?}"), excerpt, io.to_string()] {
        for secret in [KEY_ID, SECRET, "echoed%2Fsecret", TOKEN] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
    }
    assert!(e.to_string().contains("AccessDenied"), "{e}");
}

/// An agent whose every connection, whatever the host, goes to `to` over
/// plain TCP and counts as TLS: AWS's own hosts (`bucket.s3.amazonaws.com`,
/// `bucket.s3.eu-west-3.amazonaws.com`) served by a local test server.
fn agent_to(to: std::net::SocketAddr) -> ureq::Agent {
    use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
    use ureq::unversioned::transport::{
        Buffers, ConnectionDetails, Connector, NextTimeout, TcpConnector, Transport,
    };

    #[derive(Debug)]
    struct To(std::net::SocketAddr);
    impl Resolver for To {
        fn resolve(
            &self,
            _: &ureq::http::Uri,
            _: &ureq::config::Config,
            _: NextTimeout,
        ) -> Result<ResolvedSocketAddrs, ureq::Error> {
            let mut addrs = self.empty();
            addrs.push(self.0);
            Ok(addrs)
        }
    }
    #[derive(Debug)]
    struct AsTls;
    #[derive(Debug)]
    struct Marked(Box<dyn Transport>);
    impl Transport for Marked {
        fn buffers(&mut self) -> &mut dyn Buffers {
            self.0.buffers()
        }
        fn transmit_output(&mut self, n: usize, t: NextTimeout) -> Result<(), ureq::Error> {
            self.0.transmit_output(n, t)
        }
        fn await_input(&mut self, t: NextTimeout) -> Result<bool, ureq::Error> {
            self.0.await_input(t)
        }
        fn is_open(&mut self) -> bool {
            self.0.is_open()
        }
        fn is_tls(&self) -> bool {
            true
        }
    }
    impl<In: Transport> Connector<In> for AsTls {
        type Out = Marked;
        fn connect(
            &self,
            _: &ConnectionDetails,
            chained: Option<In>,
        ) -> Result<Option<Marked>, ureq::Error> {
            Ok(chained.map(|t| Marked(Box::new(t))))
        }
    }
    let config = ureq::config::Config::builder().proxy(None).build();
    ureq::Agent::with_parts(config, TcpConnector::default().chain(AsTls), To(to))
}

/// A bucket on AWS in another region than the first guess: the first open
/// is moved there (`bucket.s3.amazonaws.com` to
/// `bucket.s3.eu-west-3.amazonaws.com`), the next goes there at once (the
/// region learnt). Both reach one object, named on disk by its `s3://` URL
/// "so that any region or style reaches the same blocks": the second open
/// is one request that gets no body (a 304), and its reads come from disk.
#[test]
fn an_object_reached_by_a_region_move_is_the_same_object_on_disk() {
    let _env = environment(&[]);
    let data = test_data(MIB as usize + 100, 31);
    let server = fake_s3(data.clone(), |_| true);
    let dir = TempDir::new("s3-region-disk");
    let open = || {
        builder()
            .agent(agent_to(server.addr()))
            .block_size(64 * 1024)
            .disk_cache(remfile::DiskCache::open(&*dir, 64 << 20).unwrap())
            .s3(S3Options::new().credentials("AKIAMOVED", "secret", None))
            .open("s3://region-moved-bucket/f.bin")
            .unwrap()
    };
    let cold = open();
    assert!(read_all(&cold) == data);
    assert!(
        server.log()[0]
            .header("host")
            .unwrap()
            .starts_with("region-moved-bucket.s3.amazonaws.com"),
        "{:?}",
        server.log()[0]
    );
    drop(cold);
    let (requests, bytes) = (server.requests(), server.body_bytes());
    let warm = open();
    assert!(read_all(&warm) == data);
    let log = server.log();
    assert!(
        log[requests..]
            .iter()
            .all(|r| r.header("host").unwrap().contains(".eu-west-3.")),
        "the region learnt: {:?}",
        &log[requests..]
    );
    assert_eq!(
        (server.requests() - requests, server.body_bytes() - bytes),
        (1, 0),
        "one 304, every block from disk"
    );
}
