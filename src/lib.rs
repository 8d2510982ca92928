//! Read a file on an HTTP(S) server as if it were local.
//!
//! [`RemoteFile`] implements [`Read`](std::io::Read), [`Seek`](std::io::Seek)
//! and positioned reads ([`RemoteFile::read_at`], and `positioned_io::ReadAt`
//! with the default `positioned-io` feature) with blocking HTTP range requests,
//! an in-memory block cache and a read-ahead that adapts to the access pattern.
//! It is built for large files in cloud archives, such as HDF5/NWB files of
//! hundreds of gigabytes, where downloading the whole file to read a slice is
//! not an option.
//!
//! # Quick start
//!
//! ```no_run
//! use std::io::{Read, Seek, SeekFrom};
//!
//! let mut file = remfile::RemoteFile::open("https://example.com/big.bin")?;
//! println!("{} bytes", file.len());
//!
//! // Positioned reads take &self and can run on many threads at once.
//! let mut header = [0u8; 512];
//! file.read_exact_at(0, &mut header)?;
//!
//! // Or use it as a cursor.
//! file.seek(SeekFrom::Start(1 << 30))?;
//! let mut chunk = vec![0u8; 8 << 20];
//! file.read_exact(&mut chunk)?;
//!
//! let stats = file.stats();
//! println!("{} requests, {} bytes fetched", stats.requests, stats.bytes_fetched);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How reads are served
//!
//! The file is divided into blocks ([`Builder::block_size`], 1 MiB by
//! default), cached in a [`BlockCache`] bounded in bytes.
//!
//! * **Opening costs one request**: `Range: bytes=0-{block_size-1}`. The
//!   `Content-Range` of the answer gives the size, so no `HEAD` is needed
//!   (presigned URLs refuse it), and the first block is cached at once.
//! * **A read never fetches less than it needs.** All its missing blocks are
//!   fetched in one request per contiguous run; a run longer than twice
//!   [`Builder::split_size`] is split into parts fetched concurrently, since
//!   object stores cap each connection's throughput. A fetch never makes more
//!   parts than [`Builder::max_concurrent_requests`], so it takes one round
//!   trip however large it is.
//! * **Large reads skip the cache**: a read of at least
//!   [`Builder::cache_bypass`] bytes (a quarter of the cache by default) with
//!   none of its blocks cached goes straight into the caller's buffer.
//! * **Read-ahead** is added on top when a read continues a sequential stream:
//!   at least four reads of the stream's own size (so a stream of 2 MiB HDF5
//!   chunks fetches 8 MiB ahead at once), doubling at each further miss up to
//!   [`Builder::read_ahead_max`]. Several
//!   interleaved streams (cursors, threads) each keep their own. Random reads
//!   get none.
//! * **Concurrent readers** of the same missing block cause one fetch: the
//!   others wait for it.
//! * [`RemoteFile::read_vectored_at`] reads many ranges at once, all their
//!   missing blocks in one round; [`RemoteFile::prefetch`] fetches them into
//!   the cache for callers that know their next reads, and
//!   [`RemoteFile::prefetch_in_background`] for callers that only guess: it
//!   returns at once, and a read that needs a block joins its fetch once a
//!   background worker has taken it (before that, the read takes the fetch
//!   and makes it with its own blocks, in one round trip).
//! * **Sizes fit the link** ([`Builder::link`]): the round-trip time and each
//!   connection's throughput are measured from the responses; a sequential
//!   stream then reads ahead at least their product (the bytes one round trip
//!   could have carried), and on a slow link a fetch is split into smaller
//!   parts, so that more connections share it.
//! * [`Builder::open_tail`] fetches the end of the file beside the first block
//!   (formats with an index at the end: HDF5 files whose metadata came last,
//!   ZIP, Parquet).
//!
//! # Tuning
//!
//! The defaults suit files of any size on a cloud object store:
//!
//! | option | default | why |
//! |---|---|---|
//! | [`block_size`](Builder::block_size) | 1 MiB | scattered small reads (HDF5 metadata) cost one round trip per 1 MiB region; on a fast link a 1 MiB fetch costs little more than a 4 KiB one, and blocks of 16 MiB or more waste bandwidth on random access |
//! | [`cache_capacity`](Builder::cache_capacity) | 256 MiB | holds the metadata of even very large files plus read-ahead |
//! | [`read_ahead_min`](Builder::read_ahead_min) … [`read_ahead_max`](Builder::read_ahead_max) | 1 … 64 MiB | a sequential scan reaches large requests after a few misses (1 + 2 + 4 + 8 … MiB), and random access pays none |
//! | [`max_concurrent_requests`](Builder::max_concurrent_requests), [`split_size`](Builder::split_size) | 4, 4 MiB | object stores cap each connection's throughput; four connections fill most links |
//! | [`link`](Builder::link) | [`Link::Measured`] | sizes follow the link; [`Link::Ignored`] keeps request counts independent of timing |
//!
//! Count requests, not seconds, when tuning: [`RemoteFile::stats`] gives
//! requests, round trips, bytes fetched and cache hits, and
//! [`Stats::since`] the cost of one operation:
//!
//! ```no_run
//! # let file = remfile::RemoteFile::open("https://example.com/big.bin")?;
//! let before = file.stats();
//! let mut buf = vec![0u8; 23_000_000];
//! file.read_exact_at(1 << 30, &mut buf)?;
//! let cost = file.stats().since(&before);
//! assert_eq!(cost.round_trips, 1); // all parts fetched at once
//! # Ok::<(), remfile::Error>(())
//! ```
//!
//! Smaller blocks (64–256 KiB) suit slow links and purely random small reads;
//! larger blocks suit fast links with high latency. A program that opens many
//! files can give them one [`BlockCache`] and so one memory budget.
//!
//! # Threads
//!
//! `RemoteFile` is `Send + Sync` and cheap to clone. Positioned reads take
//! `&self`, so one file can serve many threads, which share its cache and
//! connections; each clone has its own cursor for [`Read`](std::io::Read) and
//! [`Seek`](std::io::Seek). Read-ahead tracks up to eight interleaved
//! sequential streams, so threads scanning different regions do not disturb
//! each other.
//!
//! # From async code
//!
//! Every read that misses the cache blocks its thread until the network
//! answers (within the read timeout). In an async runtime, call it where
//! blocking is allowed — tokio's `spawn_blocking`, say — never on a worker
//! thread of the runtime, whose other tasks would stall meanwhile:
//!
//! ```no_run
//! # mod tokio { pub mod task {
//! #     // tokio's, in outline: the example is compiled without tokio.
//! #     pub async fn spawn_blocking<R>(f: impl FnOnce() -> R) -> Result<R, std::io::Error> { Ok(f()) }
//! # } }
//! # async fn example(url: String) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
//! let file = tokio::task::spawn_blocking(move || remfile::RemoteFile::open(url)).await??;
//! let bytes = tokio::task::spawn_blocking(move || {
//!     let mut buf = vec![0; 4096];
//!     file.read_exact_at(1 << 20, &mut buf).map(|()| buf)
//! })
//! .await??;
//! # Ok(bytes)
//! # }
//! ```
//!
//! # Platforms
//!
//! The tests run on Linux (x86-64, glibc). Other Unix systems are expected
//! to work but are not tested. The disk cache's guarantees between
//! processes (private files, advisory locks, never following a planted
//! link) are written for Unix; other systems are not supported. The HDF5
//! feature needs a libhdf5 (1.10 or later) on the system, or the
//! `hdf5-static` feature to build one.
//!
//! # Correctness
//!
//! Every answer is checked: status `206`, a `Content-Range` for exactly the
//! bytes asked, the size seen at open, a body of exactly that length and no
//! `Content-Encoding`. The validator seen at open is pinned: a strong ETag is
//! sent as `If-Match`, and any response with another ETag, `Last-Modified` or
//! size fails with [`ErrorKind::RemoteChanged`], so a read never mixes two
//! versions of a file. A server that ignores `Range` is detected at open
//! ([`ErrorKind::RangeNotSupported`]).
//!
//! # Failures
//!
//! Connection failures, timeouts, `429` and `5xx` statuses and bodies cut
//! short are retried with exponential backoff and jitter ([`RetryPolicy`]); a
//! body cut short resumes from its first missing byte. Every network wait has
//! a timeout and every read an overall deadline. Errors are of one type,
//! [`Error`], with a matchable [`ErrorKind`]; it converts into
//! [`std::io::Error`] with a fitting kind.
//!
//! Redirects are followed by the crate: the final URL is remembered, so later
//! requests skip the hop; headers set with [`Builder::header`] never follow a
//! redirect to another origin. When a remembered target (a presigned URL)
//! starts refusing access, the original URL is resolved once more.
//!
//! URLs in errors and log events never include the query string, where
//! presigned URLs keep their signature. (`ureq`'s own `log` output at trace
//! level does print full URLs; keep it off where that matters.)
//!
//! # Logging
//!
//! The crate emits [`tracing`] events: one at `debug` level per HTTP request
//! (URL redacted, range, status, bytes, elapsed time, attempt) and one at
//! `warn` level per retry.
//!
//! # Environment
//!
//! * **Proxies**: by default the crate's own HTTP agent honours
//!   `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY`;
//!   [`Builder::proxy_from_env(false)`](Builder::proxy_from_env) turns that
//!   off, and [`Builder::agent`] takes an agent configured any other way.
//! * **TLS**: `rustls` with the Mozilla root certificates built in
//!   (`webpki-roots`); certificates are always verified.
//!   [`Builder::add_root_certificates`] trusts an institution's own CA beside
//!   them.
//!
//! # Features
//!
//! * `positioned-io` (default): implements `positioned_io::ReadAt` and
//!   `positioned_io::Size` for [`RemoteFile`].
//! * `hdf5`: the `hdf5` module, which opens remote HDF5/NWB files with the
//!   `hdf5` crate through a read-only virtual file driver. Links the system
//!   libhdf5 (1.10 or later, found by pkg-config).
//! * `hdf5-static`: as `hdf5`, with HDF5 built from bundled sources (needs
//!   CMake 3.26 or later).

#![deny(missing_docs)]
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cache;
mod clock;
mod disk;
mod engine;
mod error;
mod extension;
mod file;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
// The HDF5 wing, the one module with unsafe code (HDF5's C interface; and,
// in `disk`, the one call that registers its flush at exit). Its parsers
// are built for the fuzz targets and the unit tests too, where the wing
// has nothing public.
#[cfg(any(feature = "hdf5", feature = "vfd"))]
#[cfg_attr(docsrs, doc(cfg(feature = "hdf5")))]
#[allow(unsafe_code)]
pub mod hdf5;
#[cfg(all(
    not(any(feature = "hdf5", feature = "vfd")),
    any(feature = "fuzzing", test)
))]
mod hdf5;
mod http;
mod identity;
mod link;
mod open;
mod options;
pub mod process;
mod s3;
mod stats;
mod sync;
pub mod trace;
pub mod wait;

pub use cache::BlockCache;
pub use disk::DiskCache;
pub use error::{Error, ErrorKind, Result};
pub use file::RemoteFile;
pub use http::RetryPolicy;
pub use link::{Link, LinkEstimate};
pub use options::{Builder, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
pub use s3::S3Options;
pub use stats::Stats;
pub use trace::{Requested, TracedRequest};

/// The README's examples, compiled as doc tests (they use every feature).
#[cfg(all(doctest, feature = "hdf5"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The Rust guide's examples (`docs/guide.md`), compiled as doc tests.
#[cfg(all(doctest, feature = "hdf5"))]
#[doc = include_str!("../docs/guide.md")]
struct GuideDoctests;

/// The S3 page's examples (`docs/s3.md`), compiled as doc tests.
#[cfg(all(doctest, feature = "hdf5"))]
#[doc = include_str!("../docs/s3.md")]
struct S3Doctests;

/// The HDF5 page's examples (`docs/hdf5.md`), compiled as doc tests.
#[cfg(all(doctest, feature = "hdf5"))]
#[doc = include_str!("../docs/hdf5.md")]
struct Hdf5Doctests;
