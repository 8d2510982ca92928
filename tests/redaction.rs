//! No query string (where presigned URLs keep their signature) or credential
//! reaches an error, a `Debug` output or a log event.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use remfile::RetryPolicy;
use remfile_testkit::{RangeServer, Reply, builder, test_data};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

const SECRET: &str = "SIGNATURE-abc123";

/// Collects every event of every thread as text.
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next_id: AtomicU64,
}

struct Text<'a>(&'a mut String);

impl Visit for Text<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={:?}", field.name(), value));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = format!("{}", event.metadata().level());
        event.record(&mut Text(&mut line));
        self.lines.lock().unwrap().push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn captured() -> Arc<Mutex<Vec<String>>> {
    static LINES: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    LINES
        .get_or_init(|| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let sub = Capture {
                lines: lines.clone(),
                next_id: AtomicU64::new(0),
            };
            tracing::subscriber::set_global_default(sub).expect("one subscriber");
            lines
        })
        .clone()
}

#[test]
fn signed_urls_never_reach_logs_errors_or_debug_output() {
    let lines = captured();
    let data = test_data(3 << 20, 1);
    let server = RangeServer::new(data).with_hook(|req, r| match req.path.as_str() {
        "/api" => Reply::redirect(
            302,
            &format!("/store?X-Amz-Signature={SECRET}&X-Amz-Credential=KEYID"),
        ),
        _ if req.n == 3 => Reply::new(503),
        // S3's refusal echoes the key id and what was signed; a hostile
        // server adds terminal escapes and a forged log line.
        _ if req.n >= 5 => Reply::new(403).body(format!(
            "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>KEYID</AWSAccessKeyId>\
             <StringToSign>AWS4-HMAC-SHA256\n{SECRET}</StringToSign></Error>\x1b[2J\nWARN forged"
        )),
        _ => r,
    });
    let url = server.url(&format!("/api?token={SECRET}"));
    let b = builder()
        .header("Authorization", format!("Bearer {SECRET}"))
        .retry_policy(RetryPolicy::default().initial_backoff(Duration::from_millis(1)));
    let file = b.open(&url).unwrap();
    let mut buf = [0u8; 10];
    file.read_exact_at(1 << 20, &mut buf).unwrap(); // a 503, then a retry
    let err = file.read_exact_at(2 << 20, &mut buf).unwrap_err(); // 403s
    let io_err: std::io::Error = err.clone().into();

    let mut shown = vec![
        err.to_string(),
        format!("{err:?}"),
        io_err.to_string(),
        format!("{io_err:?}"),
        format!("{file:?}"),
        format!("{b:?}"),
        file.url().to_owned(),
    ];
    let logged = lines.lock().unwrap().clone();
    assert!(
        logged.iter().any(|l| l.starts_with("WARN")),
        "a retry was logged"
    );
    assert!(
        logged.iter().filter(|l| l.starts_with("DEBUG")).count() >= 5,
        "{logged:?}"
    );
    shown.extend(logged);
    for text in &shown {
        assert!(!text.contains(SECRET), "secret shown in: {text}");
        assert!(!text.contains("KEYID"), "credential shown in: {text}");
    }
    assert!(err.to_string().contains("SignatureDoesNotMatch"), "{err}");
    assert!(
        err.body_excerpt().unwrap().ends_with("[2J WARN forged"),
        "{err:?}"
    );
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains('\x1b') && !text.contains("\n"), "{text}");
    }
    // The redacted form still says where the request went.
    assert!(err.to_string().contains("/store"), "{err}");
}

const SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjEOPENSESSIONTOKENxyz";

/// A server that answers every request with `status` and `body`.
fn refusing(status: u16, body: String) -> RangeServer {
    RangeServer::new(test_data(1 << 20, 5))
        .with_hook(move |_, _| Reply::new(status).body(body.as_bytes().to_vec()))
}

fn open_error(body: &'static str) -> remfile::Error {
    let server = refusing(400, body.into());
    builder().open(server.url("/f")).unwrap_err()
}

#[test]
fn an_expired_session_token_is_not_echoed() {
    // S3's answer to a presigned URL whose X-Amz-Security-Token expired.
    let err = open_error(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ExpiredToken</Code>\
         <Message>The provided token has expired.</Message>\
         <Token-0>IQoJb3JpZ2luX2VjEOPENSESSIONTOKENxyz</Token-0>\
         <RequestId>R</RequestId><HostId>H</HostId></Error>",
    );
    assert!(err.to_string().contains("ExpiredToken"), "{err}");
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(
            !text.contains(SESSION_TOKEN),
            "session token shown in: {text}"
        );
    }
}

#[test]
fn no_bidirectional_control_reaches_the_excerpt() {
    // U+061C ARABIC LETTER MARK is one of Unicode's Bidi_Control characters.
    let err = open_error("denied \u{061C}gpj.exe");
    let excerpt = err.body_excerpt().unwrap();
    assert!(!excerpt.contains('\u{061C}'), "{excerpt:?}");
}

/// Checks that no text a caller may show of `err` (its message, `Debug`,
/// body excerpt, and the `std::io::Error` made of it) holds any of
/// `secrets`.
fn assert_none_shown(err: &remfile::Error, secrets: &[&str]) {
    let io_err: std::io::Error = err.clone().into();
    let texts = [
        err.to_string(),
        format!("{err:?}"),
        err.body_excerpt().unwrap_or_default().to_owned(),
        io_err.to_string(),
        format!("{io_err:?}"),
    ];
    for text in texts {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }
}

#[test]
fn a_refusal_echoing_the_request_shows_none_of_its_values() {
    const HMAC: &str = "DEADBEEF1234";
    const TOKEN: &str = "ghp_SECRETVALUE12345";
    // The server quotes the request in its own words, under names no rule
    // knows.
    let server = refusing(
        403,
        format!("denied: GET /e1?hmac={HMAC} HTTP/1.1\nToken {TOKEN} is not valid; id=1 kept"),
    );
    let err = builder()
        .header("Authorization", format!("token {TOKEN}"))
        .open(server.url(&format!("/e1?hmac={HMAC}&id=1")))
        .unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert_none_shown(&err, &[HMAC, TOKEN, "SECRETVALUE"]);
    let excerpt = err.body_excerpt().unwrap();
    assert!(excerpt.contains("denied: GET /e1?hmac=…"), "{excerpt}");
    assert!(excerpt.contains("Token … is not valid"), "{excerpt}");
    assert!(
        excerpt.contains("id=1 kept"),
        "short values stay: {excerpt}"
    );
}

#[test]
fn a_password_in_the_url_is_not_shown_as_it_is_or_in_base64() {
    const PASSWORD: &str = "hunter2secret";
    // base64 of `user:hunter2secret`, as Basic authentication sends it.
    const BASIC: &str = "dXNlcjpodW50ZXIyc2VjcmV0";
    let server = refusing(
        401,
        format!("credentials {BASIC}= were refused; the password {PASSWORD} is wrong"),
    );
    let with_password = format!("http://user:{PASSWORD}@");
    let url = server
        .url("/private.bin")
        .replacen("http://", &with_password, 1);
    let err = builder().open(url).unwrap_err();
    assert_eq!(err.status(), Some(401), "{err}");
    assert_none_shown(&err, &[PASSWORD, BASIC]);
    let excerpt = err.body_excerpt().unwrap();
    assert_eq!(
        excerpt, "credentials … were refused; the password … is wrong",
        "{err:?}"
    );
}

#[test]
fn a_redirect_target_s_values_are_not_shown_either() {
    const TICKET: &str = "TICKET-9f8e7d6c5b";
    let server =
        RangeServer::new(test_data(1 << 20, 8)).with_hook(|req, r| match req.path.as_str() {
            "/api" => Reply::redirect(302, &format!("/store?ticket={TICKET}")),
            _ if req.path.starts_with("/store") => {
                Reply::new(403).body(format!("ticket {TICKET} was already used"))
            }
            _ => r,
        });
    let err = builder().open(server.url("/api")).unwrap_err();
    assert_eq!(err.status(), Some(403), "{err}");
    assert_none_shown(&err, &[TICKET]);
    assert!(
        err.to_string().contains("ticket … was already used"),
        "{err}"
    );
}
