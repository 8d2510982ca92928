//! An S3-compatible server that checks presigned signatures (`s3s-fs`),
//! started by the test on 127.0.0.1 in a temporary directory, and its
//! URLs presigned by AWS's own signer.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use crate::nginx::{free_port, require_binary};

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "REMFILETESTKEY";
/// The secret key of [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "remfile-test-secret-key-0123456789";
const REGION: &str = "us-east-1";
/// The server's one bucket.
pub const BUCKET: &str = "bucket";

/// An `s3s-fs` serving [`BUCKET`] from a directory of its own on
/// 127.0.0.1; stopped when dropped.
pub struct S3Server {
    child: Child,
    dir: PathBuf,
    /// The directory's owner: removed with the server.
    _own: tempfile::TempDir,
    port: u16,
}

impl S3Server {
    /// Starts `s3s-fs` with an empty [`BUCKET`]; the test fails, saying how
    /// to install it, if it is missing.
    pub fn start() -> S3Server {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let cargo_bin = home.join(".cargo/bin/s3s-fs");
        let bin = require_binary("s3s-fs", &[cargo_bin.to_str().unwrap_or("")]);
        let port = free_port();
        let own = tempfile::Builder::new()
            .prefix("remfile-s3-")
            .tempdir()
            .unwrap();
        let dir = own.path().to_path_buf();
        std::fs::create_dir_all(dir.join(BUCKET)).unwrap();
        let child = Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs");
        let server = S3Server {
            child,
            dir,
            port,
            _own: own,
        };
        crate::time::eventually("s3s-fs started", Duration::from_secs(20), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        server
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
    /// `expires` seconds from then (by AWS's own signer).
    pub fn presign(&self, key: &str, signed_at: SystemTime, expires: u64) -> String {
        use aws_sigv4::http_request::{
            SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
        };
        let url = format!("http://127.0.0.1:{}/{BUCKET}/{key}", self.port);
        let identity =
            aws_credential_types::Credentials::new(ACCESS_KEY, SECRET_KEY, None, None, "test")
                .into();
        let mut settings = SigningSettings::default();
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(expires));
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(REGION)
            .name("s3")
            .time(signed_at)
            .settings(settings)
            .build()
            .unwrap()
            .into();
        let request = SignableRequest::new(
            "GET",
            &url,
            std::iter::empty(),
            SignableBody::UnsignedPayload,
        )
        .unwrap();
        let (instructions, _) = sign(request, &params).unwrap().into_parts();
        let (_, query) = instructions.into_parts();
        let mut signed = url::Url::parse(&url).unwrap();
        for (name, value) in query {
            signed.query_pairs_mut().append_pair(name, &value);
        }
        signed.into()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
