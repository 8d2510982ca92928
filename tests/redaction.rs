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

fn open_error(body: &'static str) -> remfile::Error {
    let server = RangeServer::new(test_data(1 << 20, 5))
        .with_hook(move |_, _| Reply::new(400).body(body.as_bytes().to_vec()));
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
