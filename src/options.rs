//! The options for opening files, as data: their defaults, their setters and
//! their checks. No I/O: [`Builder::open`] hands them to the open sequence.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ureq::Agent;

use crate::cache::BlockCache;
use crate::disk::DiskCache;
use crate::error::{Error, ErrorKind, Result};
use crate::http::{RetryPolicy, UrlProvider, header};
use crate::link::Link;
use crate::s3::S3Options;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The smallest block size accepted: one page. Below it a block costs more
/// in bookkeeping (a cache entry, a part of a request, a file on disk) than
/// it holds; 1-byte blocks made a 1 MB read take a minute.
pub const MIN_BLOCK_SIZE: u64 = 4 * KIB;

/// The largest [`byte_weight`](Builder::byte_weight) accepted.
const MAX_BYTE_WEIGHT: u32 = 1_000_000;

/// The largest block size accepted.
pub const MAX_BLOCK_SIZE: u64 = 256 * MIB;

/// Options for opening a [`RemoteFile`](crate::file::RemoteFile): reusable (it can open many files) and
/// cheap to clone.
///
/// | option | default |
/// |---|---|
/// | [`block_size`](Builder::block_size) | 1 MiB |
/// | [`cache_capacity`](Builder::cache_capacity) | 256 MiB, private to the file |
/// | [`disk_cache`](Builder::disk_cache) / [`cache_key`](Builder::cache_key) | none / the URL without its signature and credential parameters (only digests of it are written) |
/// | [`revalidate_after`](Builder::revalidate_after) | 0 (every open asks the server, unless its `Cache-Control` said otherwise) |
/// | [`immutable`](Builder::immutable) | `false` |
/// | [`read_ahead_min`](Builder::read_ahead_min) / [`read_ahead_max`](Builder::read_ahead_max) | 1 MiB / 64 MiB (at most a quarter of the cache) |
/// | [`max_concurrent_requests`](Builder::max_concurrent_requests) | 4 |
/// | [`max_connections`](Builder::max_connections) | 16 |
/// | [`split_size`](Builder::split_size) | 4 MiB |
/// | [`coalesce_gap`](Builder::coalesce_gap) | the link's bandwidth-delay product, or 2 MiB |
/// | [`link`](Builder::link) | [`Link::Measured`] |
/// | [`byte_weight`](Builder::byte_weight) | 1 (time alone) |
/// | [`open_tail`](Builder::open_tail) | 0 (off) |
/// | [`cache_bypass`](Builder::cache_bypass) | a quarter of the cache's capacity |
/// | [`retry_policy`](Builder::retry_policy) | [`RetryPolicy::default`] |
/// | [`connect_timeout`](Builder::connect_timeout) | 10 s |
/// | [`idle_timeout`](Builder::idle_timeout) | 30 s |
/// | [`read_timeout`](Builder::read_timeout) | 5 min |
/// | [`max_redirects`](Builder::max_redirects) | 10 |
/// | [`user_agent`](Builder::user_agent) | `remfile/<version>` |
/// | [`proxy_from_env`](Builder::proxy_from_env) | `true` |
/// | [`https_only`](Builder::https_only) | `false` |
/// | [`allow_redirect_to_http`](Builder::allow_redirect_to_http) | `false` |
///
/// `Debug` shows header names but never their values.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use remfile::RemoteFile;
///
/// let builder = RemoteFile::builder()
///     .block_size(512 * 1024)
///     .cache_capacity(1 << 30)
///     .connect_timeout(Duration::from_secs(5))
///     .header("Authorization", "Bearer secret");
/// let a = builder.open("https://example.com/a.nwb")?;
/// let b = builder.open("https://example.com/b.nwb")?;
/// # Ok::<(), remfile::Error>(())
/// ```
#[derive(Clone)]
pub struct Builder {
    pub(crate) block_size: u64,
    pub(crate) cache_capacity: u64,
    pub(crate) cache: Option<BlockCache>,
    pub(crate) disk_cache: Option<DiskCache>,
    pub(crate) cache_key: Option<String>,
    pub(crate) revalidate_after: Duration,
    pub(crate) immutable: bool,
    pub(crate) read_ahead_min: u64,
    pub(crate) read_ahead_max: u64,
    pub(crate) max_concurrent_requests: u64,
    pub(crate) max_connections: u64,
    pub(crate) split_size: u64,
    pub(crate) coalesce_gap: Option<u64>,
    pub(crate) link: Link,
    pub(crate) byte_weight: u32,
    pub(crate) open_tail: u64,
    pub(crate) cache_bypass: Option<u64>,
    pub(crate) retry: RetryPolicy,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) max_redirects: u32,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) user_agent: String,
    pub(crate) agent: Option<Agent>,
    pub(crate) proxy_from_env: bool,
    pub(crate) https_only: bool,
    pub(crate) allow_redirect_to_http: bool,
    pub(crate) url_provider: Option<Arc<UrlProvider>>,
    pub(crate) trace_requests: bool,
    pub(crate) extra_roots: Vec<Vec<u8>>,
    pub(crate) s3: S3Options,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            block_size: MIB,
            cache_capacity: 256 * MIB,
            cache: None,
            disk_cache: None,
            cache_key: None,
            revalidate_after: Duration::ZERO,
            immutable: false,
            read_ahead_min: MIB,
            read_ahead_max: 64 * MIB,
            max_concurrent_requests: 4,
            max_connections: 16,
            split_size: 4 * MIB,
            coalesce_gap: None,
            link: Link::Measured,
            byte_weight: 1,
            open_tail: 0,
            cache_bypass: None,
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(300),
            max_redirects: 10,
            headers: Vec::new(),
            user_agent: concat!("remfile/", env!("CARGO_PKG_VERSION")).to_owned(),
            agent: None,
            proxy_from_env: true,
            https_only: false,
            allow_redirect_to_http: false,
            url_provider: None,
            trace_requests: false,
            extra_roots: Vec::new(),
            s3: S3Options::default(),
        }
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Builder")
            .field("block_size", &self.block_size)
            .field("cache_capacity", &self.cache_capacity)
            .field("cache", &self.cache)
            .field("disk_cache", &self.disk_cache)
            .field("cache_key", &self.cache_key)
            .field("revalidate_after", &self.revalidate_after)
            .field("immutable", &self.immutable)
            .field("read_ahead_min", &self.read_ahead_min)
            .field("read_ahead_max", &self.read_ahead_max)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("max_connections", &self.max_connections)
            .field("split_size", &self.split_size)
            .field("coalesce_gap", &self.coalesce_gap)
            .field("link", &self.link)
            .field("byte_weight", &self.byte_weight)
            .field("open_tail", &self.open_tail)
            .field("cache_bypass", &self.cache_bypass)
            .field("retry", &self.retry)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("read_timeout", &self.read_timeout)
            .field("max_redirects", &self.max_redirects)
            .field("headers (values hidden)", &header_names)
            .field("user_agent", &self.user_agent)
            .field("agent", &self.agent.as_ref().map(|_| "caller-supplied"))
            .field("proxy_from_env", &self.proxy_from_env)
            .field("https_only", &self.https_only)
            .field("allow_redirect_to_http", &self.allow_redirect_to_http)
            .field("url_provider", &self.url_provider.as_ref().map(|_| "set"))
            .field("trace_requests", &self.trace_requests)
            .field("extra_roots", &self.extra_roots.len())
            .field("s3", &self.s3)
            .finish()
    }
}

impl Builder {
    /// The unit of fetching and caching, in bytes ([`MIN_BLOCK_SIZE`], 4 KiB,
    /// to [`MAX_BLOCK_SIZE`], 256 MiB).
    ///
    /// Small blocks waste fewer bytes on scattered small reads (HDF5 metadata);
    /// large blocks cost fewer round trips. Large reads are not affected much
    /// either way: a read fetches all its missing blocks in one request.
    pub fn block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes;
        self
    }

    /// The capacity in bytes of the file's private cache. Ignored when
    /// [`cache`](Builder::cache) supplies a shared one.
    pub fn cache_capacity(mut self, bytes: u64) -> Self {
        self.cache_capacity = bytes;
        self
    }

    /// A cache shared with other files, instead of a private one.
    pub fn cache(mut self, cache: BlockCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Keeps the file's blocks on disk too, behind the memory cache, where
    /// later opens of the same version of the file — by this process or
    /// another — find them (see [`DiskCache`]).
    ///
    /// ```no_run
    /// let disk = remfile::DiskCache::open("/var/cache/remfile", 20 << 30)?;
    /// let file = remfile::RemoteFile::builder()
    ///     .disk_cache(disk)
    ///     .open("https://example.com/data.nwb")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn disk_cache(mut self, disk: DiskCache) -> Self {
        self.disk_cache = Some(disk);
        self
    }

    /// Names the file in the disk cache with `key` instead of its URL
    /// (without its signature and credential parameters, see
    /// [`DiskCache`]): for a file whose URL itself changes between
    /// sessions, such as an archive's asset behind redirect targets that
    /// rotate. The validator and size still tell versions apart. Like a
    /// URL, the key is never written to the directory, only digests of it.
    ///
    /// ```no_run
    /// # let disk = remfile::DiskCache::open("/tmp/cache", 1 << 30)?;
    /// let file = remfile::RemoteFile::builder()
    ///     .disk_cache(disk)
    ///     .cache_key("dandi:000123/sub-01_ecephys.nwb")
    ///     .open("https://example.com/download/0123abcd")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cache_key(mut self, key: impl Into<String>) -> Self {
        self.cache_key = Some(key.into());
        self
    }

    /// How long a version of a file the disk cache has seen is trusted
    /// without asking the server (default 0: always ask). Opening a file
    /// whose version and first block are on disk costs one request with no
    /// body (`If-None-Match`, answered `304 Not Modified`); within this time
    /// of the last confirmation, none at all — for data known not to change.
    ///
    /// The server may say so itself: a version whose confirming answer
    /// carried `Cache-Control: max-age=N` is trusted for `N` seconds (less
    /// its `Age`), one with `Cache-Control: immutable` for good, whatever
    /// this option says; `no-cache` or `no-store` mean ask. The longer of
    /// this and what the server said holds. See also
    /// [`immutable`](Builder::immutable).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # let disk = remfile::DiskCache::open("/tmp/cache", 1 << 30)?;
    /// // Archived recordings never change: ask once a day.
    /// let builder = remfile::RemoteFile::builder()
    ///     .disk_cache(disk)
    ///     .revalidate_after(Duration::from_secs(24 * 3600));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn revalidate_after(mut self, age: Duration) -> Self {
        self.revalidate_after = age;
        self
    }

    /// Whether the object at this URL never changes (default `false`): a
    /// version the disk cache has seen is then trusted for good, and a warm
    /// open — a file whose version and first block are on disk — sends no
    /// request at all, so that opening and walking a file the disk holds
    /// costs nothing on the network. Without a disk cache it changes
    /// nothing (a first open must learn the file's size).
    ///
    /// The trade: if the object at the URL (or [`cache_key`](Builder::cache_key))
    /// did change, this reads the version on disk, stale, for as long as
    /// its blocks are there, and a block not on disk then fails with
    /// [`ErrorKind::RemoteChanged`] (reads are pinned to the version
    /// opened), never with the new bytes mixed in. So set it only for
    /// content-addressed archives (DANDI's blobs, a key named by its
    /// checksum) and versioned URLs (an S3 `versionId`, a release tag),
    /// whose bytes never change; a server that knows its objects never
    /// change may say so itself (`Cache-Control: immutable`), which needs
    /// no option.
    ///
    /// ```no_run
    /// # let disk = remfile::DiskCache::open("/tmp/cache", 1 << 30)?;
    /// // A DANDI asset: the blob behind it never changes.
    /// let file = remfile::RemoteFile::builder()
    ///     .disk_cache(disk)
    ///     .immutable(true)
    ///     .open("https://dandiarchive.s3.amazonaws.com/blobs/2a3/4b5/2a34b5c6")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn immutable(mut self, never_changes: bool) -> Self {
        self.immutable = never_changes;
        self
    }

    /// The read-ahead a sequential stream starts with at its first further
    /// miss; it doubles at each miss after that.
    pub fn read_ahead_min(mut self, bytes: u64) -> Self {
        self.read_ahead_min = bytes;
        self
    }

    /// The largest read-ahead window; also capped at a quarter of the cache, so
    /// read-ahead cannot evict itself. `0` turns read-ahead off.
    pub fn read_ahead_max(mut self, bytes: u64) -> Self {
        self.read_ahead_max = bytes;
        self
    }

    /// How many requests one read may have in flight at once (1 to 64).
    /// Object stores cap each connection's throughput, so large reads go
    /// faster over several.
    pub fn max_concurrent_requests(mut self, n: u64) -> Self {
        self.max_concurrent_requests = n;
        self
    }

    /// The most requests one file (with all its clones and threads) has in
    /// flight at once, and so the most connections it opens (1 to 256).
    /// Requests beyond it wait for a free connection, within the read's
    /// deadline.
    pub fn max_connections(mut self, n: u64) -> Self {
        self.max_connections = n;
        self
    }

    /// A contiguous fetch of at least twice this many bytes is split into parts
    /// of at least this size, fetched concurrently; once the link is measured
    /// (see [`link`](Builder::link)), parts are no shorter than its
    /// bandwidth-delay product where that is less. A fetch uses at most
    /// [`max_concurrent_requests`](Builder::max_concurrent_requests) parts, so
    /// that it takes one round trip however large it is.
    pub fn split_size(mut self, bytes: u64) -> Self {
        self.split_size = bytes;
        self
    }

    /// When one fetch (a [`prefetch`](crate::file::RemoteFile::prefetch) of scattered
    /// ranges, say) has more separate runs of blocks than
    /// [`max_concurrent_requests`](Builder::max_concurrent_requests), the
    /// closest runs are fetched as one request together with the cached blocks
    /// between them, if those are at most this many bytes: refetching a short
    /// gap costs less than a second round trip. By default the gap is the
    /// link's bandwidth-delay product (see [`link`](Builder::link)), or 2 MiB
    /// before it is known. `0` never fetches a byte twice.
    ///
    /// ```
    /// // A fast link to a distant server: waiting costs more than bytes.
    /// let builder = remfile::RemoteFile::builder().coalesce_gap(8 << 20);
    /// ```
    pub fn coalesce_gap(mut self, bytes: u64) -> Self {
        self.coalesce_gap = Some(bytes);
        self
    }

    /// What to assume about the link to the server when sizing fetches.
    ///
    /// By default ([`Link::Measured`]) the round-trip time and each
    /// connection's throughput are measured from the responses. Their product
    /// — the bytes that could arrive in one round trip — is what one more
    /// round trip costs, so a sequential stream reads ahead at least that far,
    /// a split fetch's parts are no shorter than that (or than
    /// [`split_size`](Builder::split_size), if that is less), and runs closer than that merge
    /// when requests are scarce (see [`coalesce_gap`](Builder::coalesce_gap)).
    /// Reads that start no stream — random access — are never enlarged.
    ///
    /// Request counts then depend on timing; [`Link::Ignored`] keeps them fixed,
    /// and [`Link::known`] fixes the link's figures.
    ///
    /// ```
    /// use remfile::{Link, RemoteFile};
    ///
    /// let builder = RemoteFile::builder().link(Link::Ignored);
    /// ```
    pub fn link(mut self, link: Link) -> Self {
        self.link = link;
        self
    }

    /// How much a byte weighs against a round trip: each byte fetched counts
    /// as `weight` bytes' worth of transfer time wherever remfile decides
    /// whether bytes beyond a read are worth the round trips they save — the
    /// gaps filled between pieces it fetches together, the metadata an HDF5
    /// file's crawl guesses ahead of the reader, the tail fetched at open,
    /// the read-ahead's least step. 1 (the default) weighs time alone; a
    /// user who pays for every byte (egress billed by the byte, a metered
    /// line) sets more, and gets fewer bytes for a few more round trips. It
    /// never makes a read fetch less than it needs. At most 1,000,000.
    ///
    /// ```
    /// // Bytes ten times as dear as the time they take.
    /// let builder = remfile::RemoteFile::builder().byte_weight(10);
    /// ```
    pub fn byte_weight(mut self, weight: u32) -> Self {
        self.byte_weight = weight;
        self
    }

    /// Opening also fetches the file's last `bytes` (the whole blocks in
    /// them), with a suffix range request sent at the same time as the first
    /// block's: formats that keep an index at the end of the file (HDF5 files
    /// whose metadata was written last, ZIP, Parquet) then cost no second
    /// round trip, and a second connection is ready for later parallel
    /// fetches. It is an optimisation only: if that request fails, or its
    /// answer does not match the first one (size, ETag, `Last-Modified`), it
    /// is dropped and the open goes on. `0` (the default) sends no such
    /// request. `remfile::hdf5::open_url` (feature `hdf5`) uses 1 MiB.
    ///
    /// Where the server's line is already known to carry little (less than
    /// 50 MB/s, all connections together, as measured by the process's
    /// earlier files there or given with [`Link::shared_line`]), the tail
    /// is at most what the file's share of the line carries in one round
    /// trip (files opening at once share it), and at least 64 KiB.
    ///
    /// ```no_run
    /// let file = remfile::RemoteFile::builder()
    ///     .open_tail(1 << 20)
    ///     .open("https://example.com/archive.zip")?;
    /// let stats = file.stats();
    /// assert_eq!((stats.requests, stats.round_trips), (2, 1));
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn open_tail(mut self, bytes: u64) -> Self {
        self.open_tail = bytes;
        self
    }

    /// A read of at least `bytes` that misses the cache is fetched straight
    /// into the caller's buffer (still in concurrent parts, in one round;
    /// blocks already cached are copied from the cache, only the others are
    /// fetched) and not cached: a large transfer then holds its bytes once,
    /// costs neither block buffers nor a copy out of them, and does not
    /// evict what the cache holds. Reading those bytes again fetches them
    /// again. A file with a [disk cache](Builder::disk_cache) reads through
    /// its blocks whatever the length: they are kept on disk, and other
    /// processes wait for them there. The default is a
    /// quarter of the cache's capacity; `u64::MAX` caches every read.
    ///
    /// ```
    /// // A download in 32 MiB pieces that should not pass through the cache.
    /// let builder = remfile::RemoteFile::builder().cache_bypass(32 << 20);
    /// ```
    pub fn cache_bypass(mut self, bytes: u64) -> Self {
        self.cache_bypass = Some(bytes);
        self
    }

    /// How failed requests are retried.
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The longest wait to establish a connection (TCP and TLS).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// The longest time the server may stay silent: before the response
    /// headers, or between two reads of the body.
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }

    /// The overall deadline of one read (or of opening), retries and waits
    /// included.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.read_timeout = d;
        self
    }

    /// The most redirects followed for one request.
    pub fn max_redirects(mut self, n: u32) -> Self {
        self.max_redirects = n;
        self
    }

    /// Adds a header to every request to the URL's own origin (scheme, host
    /// and port), such as `Authorization`. It is not sent elsewhere: not to a
    /// redirect target on another origin, nor to a URL from the
    /// [`url_provider`](Builder::url_provider) on another origin. `Range`, `Accept-Encoding`, `If-Match`, `Host` and
    /// `Content-Length` are the crate's own and are refused at open.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// How `s3://bucket/key` URLs are read: region, endpoint, credentials
    /// (by default, all from the environment as the AWS SDKs read it, or
    /// learnt). Other URLs ignore it.
    ///
    /// ```no_run
    /// use remfile::{RemoteFile, S3Options};
    ///
    /// let file = RemoteFile::builder()
    ///     .s3(S3Options::new().profile("lab").requester_pays(true))
    ///     .open("s3://a-requester-pays-bucket/data.h5")?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn s3(mut self, options: S3Options) -> Self {
        self.s3 = options;
        self
    }

    /// Keeps each request the file sends (see
    /// [`RemoteFile::traced_requests`](crate::file::RemoteFile::traced_requests)):
    /// off by default.
    pub fn trace_requests(mut self, on: bool) -> Self {
        self.trace_requests = on;
        self
    }

    /// The `User-Agent` header.
    pub fn user_agent(mut self, ua: impl Into<String>) -> Self {
        self.user_agent = ua.into();
        self
    }

    /// Sends requests through this agent (sharing its connection pool, TLS and
    /// proxy settings). Redirects, status handling and timeouts are still set
    /// per request by this crate.
    ///
    /// This is the one place ureq's types appear in this crate's API (errors
    /// never expose them): a release of remfile that moves to another major
    /// version of ureq changes this signature, and says so as a breaking
    /// change.
    pub fn agent(mut self, agent: Agent) -> Self {
        self.agent = Some(agent);
        self
    }

    /// Whether the crate's own agent uses a proxy from `HTTPS_PROXY`,
    /// `HTTP_PROXY` or `ALL_PROXY` (honouring `NO_PROXY`).
    pub fn proxy_from_env(mut self, yes: bool) -> Self {
        self.proxy_from_env = yes;
        self
    }

    /// Trusts the CA certificates in `pem` (one or more, PEM-encoded) beside
    /// the built-in Mozilla roots: for servers whose certificates an
    /// institution's own CA issued. Verification stays on; there is no option
    /// to turn it off. Not combinable with [`agent`](Builder::agent): give
    /// such an agent its roots yourself.
    ///
    /// ```no_run
    /// let ca = std::fs::read("/etc/ssl/my-institution-ca.pem")?;
    /// let file = remfile::RemoteFile::builder()
    ///     .add_root_certificates(ca)
    ///     .open("https://data.my-institution.example/file.h5")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.extra_roots.push(pem.into());
        self
    }

    /// Refuses plain `http` URLs, and redirects to them.
    pub fn https_only(mut self, yes: bool) -> Self {
        self.https_only = yes;
        self
    }

    /// Follows a redirect from an `https` URL to a plain `http` one (off by
    /// default: such a redirect is an [`ErrorKind::Redirect`] error, since
    /// the bytes would travel in the clear, and be cached under the `https`
    /// name). [`https_only`](Builder::https_only) refuses it whatever this
    /// says.
    ///
    /// ```
    /// // A mirror that redirects to plain HTTP, trusted on purpose.
    /// let builder = remfile::RemoteFile::builder().allow_redirect_to_http(true);
    /// ```
    pub fn allow_redirect_to_http(mut self, yes: bool) -> Self {
        self.allow_redirect_to_http = yes;
        self
    }

    /// A source of fresh URLs for the same file, for presigned URLs that
    /// expire (S3, DANDI). When a URL that worked is refused (`401` or `403`),
    /// the provider is asked for a new one, once per failing request; the new
    /// URL is used only if it serves the same file (same size and validator,
    /// checked as every response is), otherwise the read fails with
    /// [`ErrorKind::RemoteChanged`]. An error from the provider is reported
    /// with the refusal.
    ///
    /// Without a provider, a refused redirect target is resolved again from
    /// the original URL once, and a refusal after that is an error whose
    /// message says the URL has probably expired.
    ///
    /// ```no_run
    /// fn sign_again() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    ///     // Ask your storage service for a newly signed URL here.
    ///     Ok("https://bucket.example.com/data.nwb?X-Amz-Signature=…".to_owned())
    /// }
    /// let file = remfile::RemoteFile::builder()
    ///     .url_provider(sign_again)
    ///     .open(sign_again().unwrap())?;
    /// # Ok::<(), remfile::Error>(())
    /// ```
    pub fn url_provider(
        mut self,
        provider: impl Fn() -> std::result::Result<String, Box<dyn std::error::Error + Send + Sync>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.url_provider = Some(Arc::new(provider));
        self
    }

    /// Checks every option; the first one out of range is the error.
    pub(crate) fn validate(&self) -> Result<()> {
        // Past this a deadline is no deadline, and far past it the clock
        // cannot hold it.
        const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 86_400);
        let bad = |what: String| Err(Error::new(ErrorKind::InvalidConfig, what));
        if !(1..=MAX_BYTE_WEIGHT).contains(&self.byte_weight) {
            return bad(format!(
                "byte_weight must be 1 to {MAX_BYTE_WEIGHT}, not {}",
                self.byte_weight
            ));
        }
        if !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&self.block_size) {
            return bad(format!(
                "block_size must be {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE} bytes, not {}",
                self.block_size
            ));
        }
        if !(1..=64).contains(&self.max_concurrent_requests) {
            return bad(format!(
                "max_concurrent_requests must be 1 to 64, not {}",
                self.max_concurrent_requests
            ));
        }
        if !(1..=256).contains(&self.max_connections) {
            return bad(format!(
                "max_connections must be 1 to 256, not {}",
                self.max_connections
            ));
        }
        if self.split_size == 0 {
            return bad("split_size must be positive".into());
        }
        for (name, d) in [
            ("connect_timeout", self.connect_timeout),
            ("idle_timeout", self.idle_timeout),
            ("read_timeout", self.read_timeout),
        ] {
            if d.is_zero() || d > MAX_TIMEOUT {
                return bad(format!(
                    "{name} must be positive and at most {} days, not {d:?}",
                    MAX_TIMEOUT.as_secs() / 86_400
                ));
            }
        }
        for (name, value) in &self.headers {
            if let Some(why) = header::refuse_user_header(name, value) {
                return bad(why);
            }
        }
        if !header::is_valid_value(&self.user_agent) {
            return bad("invalid user agent".into());
        }
        self.s3.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_refused_before_any_request() {
        let unreachable = "http://127.0.0.1:9/x";
        let cases = [
            Builder::default().block_size(0),
            Builder::default().block_size(MIN_BLOCK_SIZE - 1),
            Builder::default().block_size(MAX_BLOCK_SIZE + 1),
            Builder::default().max_concurrent_requests(0),
            Builder::default().idle_timeout(Duration::ZERO),
            Builder::default().read_timeout(Duration::from_secs(i64::MAX as u64)),
            Builder::default().connect_timeout(Duration::MAX),
            Builder::default().header("Range", "bytes=0-1"),
            Builder::default().header("bad name", "x"),
            Builder::default().header("X-Ok", "bad\nvalue"),
        ];
        for b in cases {
            let e = b.open(unreachable).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        }
    }

    #[test]
    fn debug_hides_header_values() {
        let b = Builder::default().header("Authorization", "Bearer s3cr3t");
        let shown = format!("{b:?}");
        assert!(shown.contains("Authorization"));
        assert!(!shown.contains("s3cr3t"));
    }
}
