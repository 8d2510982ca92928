//! An S3-compatible server that checks presigned signatures (`s3s-fs`),
//! started by the test on 127.0.0.1 in a temporary directory, and SigV4
//! query signing for its URLs.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ring::{digest, hmac};

use super::nginx::require_binary;

pub const ACCESS_KEY: &str = "REMFILETESTKEY";
pub const SECRET_KEY: &str = "remfile-test-secret-key-0123456789";
const REGION: &str = "us-east-1";
pub const BUCKET: &str = "bucket";

pub struct S3Server {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl S3Server {
    pub fn start() -> Option<S3Server> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let cargo_bin = home.join(".cargo/bin/s3s-fs");
        let bin = require_binary("s3s-fs", &[cargo_bin.to_str().unwrap_or("")])?;
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("remfile-s3-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join(BUCKET)).unwrap();
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        let server = S3Server { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    /// The server's URL, an S3-compatible endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stores an object (a file under the bucket's directory).
    pub fn put(&self, key: &str, data: &[u8]) {
        std::fs::write(self.dir.join(BUCKET).join(key), data).unwrap();
    }

    /// A presigned GET URL for `key`, signed at `signed_at`, valid for
    /// `expires` seconds from then.
    pub fn presign(&self, key: &str, signed_at: SystemTime, expires: u64) -> String {
        let host = format!("127.0.0.1:{}", self.port);
        let path = format!("/{BUCKET}/{key}");
        let (date, time) = utc(signed_at);
        let stamp = format!("{date}T{time}Z");
        let scope = format!("{date}/{REGION}/s3/aws4_request");
        let mut query = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256".to_owned()),
            ("X-Amz-Credential", format!("{ACCESS_KEY}/{scope}")),
            ("X-Amz-Date", stamp.clone()),
            ("X-Amz-Expires", expires.to_string()),
            ("X-Amz-SignedHeaders", "host".to_owned()),
        ];
        query.sort();
        let canonical_query: String = query
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let canonical =
            format!("GET\n{path}\n{canonical_query}\nhost:{host}\n\nhost\nUNSIGNED-PAYLOAD");
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{}",
            hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
        );
        let mut key = format!("AWS4{SECRET_KEY}").into_bytes();
        for part in [date.as_str(), REGION, "s3", "aws4_request"] {
            key = sign(&key, part.as_bytes());
        }
        let signature = hex(&sign(&key, to_sign.as_bytes()));
        format!("http://{host}{path}?{canonical_query}&X-Amz-Signature={signature}")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sign(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `("YYYYMMDD", "HHMMSS")` in UTC.
pub fn utc(t: SystemTime) -> (String, String) {
    let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}{month:02}{day:02}"),
        format!("{:02}{:02}{:02}", rem / 3600, rem / 60 % 60, rem % 60),
    )
}

#[test]
fn utc_dates_are_right() {
    assert_eq!(utc(UNIX_EPOCH), ("19700101".into(), "000000".into()));
    let t = UNIX_EPOCH + Duration::from_secs(1_709_251_199); // 2024-02-29 23:59:59
    assert_eq!(utc(t), ("20240229".into(), "235959".into()));
}
