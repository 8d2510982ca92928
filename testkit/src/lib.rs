//! What remfile's integration tests, benchmarks and fuzz targets share: test
//! servers built on one request parser, and the HDF5 driver's fuzz harness.
//!
//! * [`range`]: the one parser of a `Range` header, and what a range
//!   selects of a file; [`request`]: the one reader and parser of a
//!   request's head; [`reply`]: the one builder of answers.
//! * [`RangeServer`]: a well-behaved range server on 127.0.0.1 that records
//!   every request and lets a test rewrite any answer through a hook.
//! * [`RawServer`]: a `std::net` server whose handler writes raw bytes, for
//!   faults below HTTP (closing mid-body, stalling, lying `Content-Length`).
//! * [`memory::Served`]: a file served from memory through a ureq connector,
//!   with no socket and no thread (the fuzz harness's server).
//! * [`fuzz`]: the mutator of the `hdf5_driver` fuzz target, and with
//!   feature `hdf5` the harness itself (the whole driver over the in-memory
//!   server, compared with HDF5's own).
//! * `h5files` (feature `hdf5`): HDF5 files the tests write themselves,
//!   walkers that describe or visit a whole file, and `temp_path!`, a
//!   path of the process's own for a generated file.
//! * [`nginx`]: a real nginx; `s3` (feature `s3`): an S3-compatible server
//!   (`s3s-fs`) and URLs presigned for it; `tls` (feature `tls`): an HTTPS
//!   range server with a certificate authority of its own.
//! * [`plugin_build`]: the HDF5 plugin, built and put in a directory of its
//!   own; [`python`]: the Python the tests run writers and readers with, and
//!   the corpus it writes; [`skip`]: how a test that lacks a tool fails.
//! * [`cpu`]: the CPU time of the process and of its children, for the
//!   benchmarks; [`time`]: a server that answers late, and waits for what
//!   another thread does (the one place a test's thread sleeps).
//!
//! Not published: a workspace member that depends on remfile, a
//! dev-dependency of remfile's own tests, benchmarks and examples.
#![warn(missing_docs)]

pub mod cpu;
pub mod fuzz;
#[cfg(feature = "hdf5")]
pub mod h5files;
pub mod memory;
pub mod nginx;
pub mod plugin_build;
pub mod python;
pub mod range;
mod range_server;
mod raw_server;
pub mod reply;
pub mod request;
#[cfg(feature = "s3")]
pub mod s3;
pub mod skip;
pub mod time;
#[cfg(feature = "tls")]
pub mod tls;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use range_server::{RangeServer, SPARSE_SIZE, range_reply, raw_206, raw_serve, sparse_server};
pub use raw_server::{After, RawServer, SERVER_THREAD, hold_until_hung_up};
pub use reply::Reply;
pub use request::{Req, read_head};

/// A directory for one test: absent when made (the test creates it, or
/// has the code under test create it), inside a directory of the test's
/// own that is removed when this is dropped, also when the test fails.
pub struct TempDir {
    path: std::path::PathBuf,
    _own: tempfile::TempDir,
}

impl TempDir {
    /// `{name}` in a new directory of the system's temporary directory.
    pub fn new(name: &str) -> TempDir {
        let own = tempfile::Builder::new()
            .prefix(&format!("remfile-{name}-"))
            .tempdir()
            .expect("a temporary directory");
        TempDir {
            path: own.path().join(name),
            _own: own,
        }
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.path
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.path
    }
}

/// `{dir}/{prefix}{id}`, `id` this process's: a path no other process
/// running names the same way, and that tells which process made it.
pub fn per_process(dir: &Path, prefix: &str) -> PathBuf {
    dir.join(format!("{prefix}{}", std::process::id()))
}

/// The directory of remfile's own package (the workspace's root), the
/// kit's parent.
fn package_root() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent().unwrap_or(kit).to_path_buf()
}

/// A listener on 127.0.0.1 that never accepts, its accept queue filled by
/// the connections held beside it: a further connect to it waits (the
/// system drops its SYNs) until its own timeout. `None` where the queue
/// never filled (a system that answers otherwise): the test then cannot
/// provoke such a connect.
pub fn full_listener() -> Option<(std::net::TcpListener, Vec<std::net::TcpStream>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = listener.local_addr().expect("its address");
    let mut held = Vec::new();
    for _ in 0..4096 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)) {
            Ok(s) => held.push(s),
            Err(_) => return Some((listener, held)),
        }
    }
    None
}

/// Deterministic pseudo-random bytes (xorshift), different for each seed.
pub fn test_data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A builder for tests: no proxy from the environment, short timeouts and
/// backoffs, so failures show up in milliseconds.
pub fn builder() -> remfile::Builder {
    remfile::RemoteFile::builder()
        .proxy_from_env(false)
        // Request counts that do not depend on timing; the link's own tests
        // set it.
        .link(remfile::Link::Ignored)
        .connect_timeout(Duration::from_secs(2))
        .idle_timeout(Duration::from_secs(2))
        .read_timeout(Duration::from_secs(20))
        .retry_policy(
            remfile::RetryPolicy::default()
                .initial_backoff(Duration::from_millis(5))
                .max_backoff(Duration::from_millis(20)),
        )
}

/// `len` bytes of `file` from `pos`, which must read.
pub fn read_at(file: &remfile::RemoteFile, pos: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    file.read_exact_at(pos, &mut buf).unwrap();
    buf
}

/// Aborts the test binary if not dropped within `limit`: a test that hangs
/// fails rather than freezing the run. Dropping it drops the sender, which
/// ends the watch.
pub struct Watchdog(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

/// Starts a [`Watchdog`] of `limit`.
pub fn watchdog(limit: Duration) -> Watchdog {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
            eprintln!("watchdog: a test hung for {limit:?}");
            std::process::abort();
        }
    });
    Watchdog(tx)
}
