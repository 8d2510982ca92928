//! A real nginx, started by the test in a temporary directory on 127.0.0.1.
//!
//! If the `nginx` binary is missing, `Nginx::start` fails the test, saying
//! how to install it ([`crate::skip::needed`]).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An nginx serving a document root of its own on 127.0.0.1; stopped when
/// dropped.
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    /// The directory's owner: removed with the server.
    _own: tempfile::TempDir,
    port: u16,
}

/// Finds a server binary; the test fails, saying how to install it, if
/// there is none.
pub fn require_binary(name: &str, candidates: &[&str]) -> PathBuf {
    let found = candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .or_else(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.exists())
            })
        });
    found.unwrap_or_else(|| crate::skip::needed(&format!("{name} is not installed")))
}

/// A port free now for a server this process starts, never one it handed
/// out before: two tests starting servers at once would otherwise be given
/// the same port (the listener that found it is closed before the server
/// binds it), and one test's requests would reach the other's server, or
/// nothing once that one stopped.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    // Held until a new port is found, so that the system offers others.
    let mut refused = Vec::new();
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("its address").port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
        refused.push(listener);
    }
}

impl Nginx {
    /// Starts nginx serving an empty document root; put files there with
    /// [`Nginx::put`].
    pub fn start() -> Nginx {
        let bin = require_binary("nginx", &["/usr/sbin/nginx"]);
        let own = tempfile::Builder::new()
            .prefix("remfile-nginx-")
            .tempdir()
            .unwrap();
        let dir = own.path().to_path_buf();
        std::fs::create_dir_all(dir.join("www")).unwrap();
        let port = free_port();
        let d = dir.display();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 512; }}\n\
             http {{\n\
               log_format conn '$connection $request_method $uri \"$http_range\" $status $body_bytes_sent';\n\
               access_log {d}/access.log conn;\n\
               client_body_temp_path {d}/tmp-body; proxy_temp_path {d}/tmp-proxy;\n\
               fastcgi_temp_path {d}/tmp-fcgi; uwsgi_temp_path {d}/tmp-uwsgi; scgi_temp_path {d}/tmp-scgi;\n\
               keepalive_requests 100000; keepalive_timeout 60s;\n\
               server {{ listen 127.0.0.1:{port}; root {d}/www; }}\n\
             }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new(bin)
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let server = Nginx {
            child,
            dir,
            port,
            _own: own,
        };
        let started = crate::time::wait_for(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(started, "nginx did not start: {}", server.error_log());
        server
    }

    /// Writes a file into the document root.
    pub fn put(&self, name: &str, data: &[u8]) {
        std::fs::write(self.dir.join("www").join(name), data).unwrap();
    }

    /// Where the file `name` of the document root is.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join("www").join(name)
    }

    /// The URL of the file `name` of the document root.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// The access log: one line per request, `$connection` first.
    pub fn access_log(&self) -> Vec<String> {
        // nginx writes a line after its response has gone out: wait until the
        // log has stopped growing for a while (at most a few seconds).
        let read = || std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        let mut text = read();
        let mut stable_since = Instant::now();
        crate::time::wait_for(Duration::from_secs(3), || {
            let now = read();
            if now != text {
                text = now;
                stable_since = Instant::now();
            }
            stable_since.elapsed() >= Duration::from_millis(150)
        });
        text.lines().map(str::to_owned).collect()
    }

    /// Distinct connections in the access log.
    pub fn connections(&self) -> usize {
        let mut ids: Vec<String> = self
            .access_log()
            .iter()
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect();
        ids.sort();
        ids.dedup();
        ids.len()
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    /// The server's directory (its configuration, logs and `www`, the
    /// document root).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
